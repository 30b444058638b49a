"""The garbage collector of the cluster simulation.

It watches the kinds an MPIJob's tree is made of (pods, services, configmaps, secrets, batch jobs,
PodGroups of both groups and MPIJobs when served) and, once a second and on every deletion:
- deletes (background) an object whose controller owner is gone, or, without a controller
  reference, whose owners are all gone; an owner is gone when no object of its kind, name and uid
  exists (any kind: owners it does not watch are looked up through discovery);
- for an object being deleted with the foregroundDeletion finalizer, deletes its dependents and
  drops the finalizer once none is left; with the orphan finalizer, removes the owner reference
  from its dependents, then drops the finalizer. (The API-server double ignores propagationPolicy;
  a real kube-apiserver without kube-controller-manager relies on this.)
"""

import logging
import threading
import time

from kube import Informer, KubeError

log = logging.getLogger("gc")

SCAN_SECONDS = 1.0
DISCOVERY_SECONDS = 10.0

# (api path prefix, plural, apiVersion) of every kind watched as a possible dependent or owner.
WATCHED = [
    ("/api/v1", "pods", "v1"),
    ("/api/v1", "services", "v1"),
    ("/api/v1", "configmaps", "v1"),
    ("/api/v1", "secrets", "v1"),
    ("/apis/batch/v1", "jobs", "batch/v1"),
    ("/apis/apps/v1", "deployments", "apps/v1"),
    ("/apis/apps/v1", "replicasets", "apps/v1"),
    ("/apis/scheduling.volcano.sh/v1beta1", "podgroups", "scheduling.volcano.sh/v1beta1"),
    ("/apis/scheduling.x-k8s.io/v1alpha1", "podgroups", "scheduling.x-k8s.io/v1alpha1"),
    ("/apis/kubeflow.org/v2beta1", "mpijobs", "kubeflow.org/v2beta1"),
]


def api_prefix(api_version):
    return "/api/v1" if api_version == "v1" else "/apis/" + api_version


class GarbageCollector:
    def __init__(self, kube, action_log=None):
        self.kube = kube
        self.say = action_log or (lambda text: log.info("%s", text))
        self.informers = {}            # (prefix, plural) -> Informer
        self.resources = {}            # apiVersion -> {kind: (plural, namespaced)}
        self.wake = threading.Event()

    # ------------------------------------------------------------------ discovery
    def _discover(self, api_version):
        """{kind: (plural, namespaced)} for one group/version, {} when it is not served."""
        if api_version in self.resources:
            return self.resources[api_version]
        code, body = self.kube.request("GET", api_prefix(api_version))
        kinds = {}
        if code == 200 and isinstance(body, dict):
            for r in body.get("resources") or []:
                if "/" not in r.get("name", ""):
                    kinds[r.get("kind")] = (r["name"], bool(r.get("namespaced")))
        elif code != 404:
            raise KubeError(code, body)
        self.resources[api_version] = kinds
        return kinds

    def _refresh_watches(self, stop_event):
        self.resources = {}
        for prefix, plural, api_version in WATCHED:
            if (prefix, plural) in self.informers:
                continue
            try:
                served = any(p == plural for p, _ in self._discover(api_version).values())
            except (KubeError, OSError) as e:
                log.warning("discovery of %s: %s", api_version, e)
                continue
            if served:
                inf = Informer(self.kube, "%s/%s" % (prefix, plural), self._event)
                self.informers[(prefix, plural)] = inf
                inf.start(stop_event)

    def _event(self, etype, obj):
        if etype == "DELETED" or (obj.get("metadata") or {}).get("deletionTimestamp"):
            self.wake.set()

    # ------------------------------------------------------------------ loop
    def run(self, stop_event):
        next_discovery = 0.0
        while not stop_event.is_set():
            if time.monotonic() >= next_discovery:
                self._refresh_watches(stop_event)
                next_discovery = time.monotonic() + DISCOVERY_SECONDS
            if all(i.synced.is_set() for i in self.informers.values()):
                try:
                    self.scan()
                except (KubeError, OSError) as e:
                    log.warning("scan: %s", e)
                except Exception:
                    log.exception("scan failed")
            self.wake.wait(SCAN_SECONDS)
            self.wake.clear()

    def _objects(self):
        """[(path prefix, plural, object)] over every watched kind."""
        out = []
        for (prefix, plural), inf in list(self.informers.items()):
            for obj in inf.items():
                out.append((prefix, plural, obj))
        return out

    @staticmethod
    def _path(prefix, plural, obj):
        meta = obj["metadata"]
        ns = meta.get("namespace")
        return "%s%s/%s/%s" % (prefix, "/namespaces/" + ns if ns else "", plural, meta["name"])

    def _owner(self, ref, namespace, known, lookups):
        """The owner object, or None when it is gone."""
        uid = ref.get("uid")
        if uid in known:
            return known[uid]
        if uid in lookups:
            return lookups[uid]
        kinds = self._discover(ref.get("apiVersion", ""))
        found = None
        if ref.get("kind") in kinds:
            plural, namespaced = kinds[ref["kind"]]
            path = "%s%s/%s/%s" % (api_prefix(ref["apiVersion"]), "/namespaces/" + namespace if namespaced else "",
                                   plural, ref.get("name"))
            obj = self.kube.get(path)
            if obj is not None and (obj.get("metadata") or {}).get("uid") == uid:
                found = obj
        else:
            # Like the real collector: an owner whose kind cannot be resolved is left alone.
            log.debug("owner kind %s %s not served; keeping its dependents", ref.get("apiVersion"), ref.get("kind"))
            found = ref
        lookups[uid] = found
        return found

    def scan(self):
        objects = self._objects()
        known = {o["metadata"].get("uid"): o for _, _, o in objects}
        lookups = {}
        dependents = {}
        for prefix, plural, obj in objects:
            for ref in obj["metadata"].get("ownerReferences") or []:
                dependents.setdefault(ref.get("uid"), []).append((prefix, plural, obj))

        # Owners being deleted in the foreground or with orphaning.
        for prefix, plural, owner in objects:
            meta = owner["metadata"]
            fins = meta.get("finalizers") or []
            if not meta.get("deletionTimestamp"):
                continue
            deps = dependents.get(meta.get("uid"), [])
            if "foregroundDeletion" in fins:
                alive = [d for d in deps if not d[2]["metadata"].get("deletionTimestamp")]
                for dprefix, dplural, dep in alive:
                    self._delete(dprefix, dplural, dep, "owner %s %s is being deleted" % (owner.get("kind") or plural,
                                                                                            meta["name"]))
                if not deps:
                    self._drop_finalizer(prefix, plural, owner, "foregroundDeletion")
            elif "orphan" in fins:
                for dprefix, dplural, dep in deps:
                    refs = [r for r in dep["metadata"].get("ownerReferences") or [] if r.get("uid") != meta.get("uid")]
                    try:
                        self.kube.patch(self._path(dprefix, dplural, dep), {"metadata": {"ownerReferences": refs or None}})
                    except KubeError as e:
                        if e.code != 404:
                            raise
                self._drop_finalizer(prefix, plural, owner, "orphan")

        # Dependents whose owners are gone.
        for prefix, plural, obj in objects:
            meta = obj["metadata"]
            refs = meta.get("ownerReferences") or []
            if not refs or meta.get("deletionTimestamp"):
                continue
            controller = [r for r in refs if r.get("controller")]
            check = controller or refs
            gone = [r for r in check if self._owner(r, meta.get("namespace"), known, lookups) is None]
            if len(gone) == len(check):
                r = gone[0]
                self._delete(prefix, plural, obj, "owner %s %s gone" % (r.get("kind"), r.get("name")))

    def _delete(self, prefix, plural, obj, why):
        meta = obj["metadata"]
        if self.kube.delete(self._path(prefix, plural, obj)):
            self.say("gc: deleted %s %s/%s (%s)" % (plural[:-1], meta.get("namespace", ""), meta["name"], why))

    def _drop_finalizer(self, prefix, plural, obj, finalizer):
        meta = obj["metadata"]
        rest = [f for f in meta.get("finalizers") or [] if f != finalizer]
        try:
            self.kube.patch(self._path(prefix, plural, obj), {"metadata": {"finalizers": rest or None}})
        except KubeError as e:
            if e.code != 404:
                raise
        self.say("gc: %s %s/%s: removed finalizer %s" % (plural[:-1], meta.get("namespace", ""), meta["name"], finalizer))
