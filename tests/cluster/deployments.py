"""The apps/v1 Deployment and ReplicaSet controllers of the cluster simulation, modelled on
kube-controller-manager 1.32.

ReplicaSets (any, not only a Deployment's):
- pods named <rs>-<5 random chars> (the base cut to 58 characters, as generateName does) from
  spec.template: its labels, annotations and finalizers, and a controller ownerReference to the
  ReplicaSet (blockOwnerDeletion);
- pods being deleted (deletionTimestamp) and finished ones (Succeeded, Failed) do not count: a
  missing pod is created, a surplus one deleted, not-ready and early ones first (unscheduled <
  scheduled, Pending < Unknown < Running, not ready < ready, lower
  controller.kubernetes.io/pod-deletion-cost, ready for less time, more restarts, newer). As in the
  real controller a Failed pod is left where it is (the pod garbage collector's threshold is far
  away) and replaced;
- status.replicas, fullyLabeledReplicas, readyReplicas (Ready condition True), availableReplicas
  (ready for spec.minReadySeconds) and observedGeneration.

Deployments:
- one ReplicaSet per pod template, named <deployment>-<hash>: the hash is 10 characters of the
  SHA-256 of the template (as canonical JSON, with status.collisionCount when set) in the
  alphabet of the real one's hash; the real one takes an FNV-32a of the template, so the names
  differ from a real cluster's, but are as stable. The ReplicaSet's selector, template labels and
  labels get pod-template-hash; it has a controller ownerReference to the Deployment and the
  annotations deployment.kubernetes.io/revision (1, 2, ...; a rollback to an old template moves
  that ReplicaSet to the next revision and records revision-history), desired-replicas and
  max-replicas, and a copy of the Deployment's other annotations; the Deployment gets the
  revision annotation too. A name taken by a ReplicaSet that is not the Deployment's (a hash
  collision) raises status.collisionCount, as the real controller does;
- RollingUpdate (maxSurge and maxUnavailable, 25% each by default) and Recreate, as the real
  controller does them; a change of spec.replicas during a rollout is spread proportionally
  over the active ReplicaSets; old ReplicaSets are kept at 0 replicas, beyond
  spec.revisionHistoryLimit (default 10) the oldest are deleted;
- spec.paused: no new ReplicaSet and no rollout step, while a change of spec.replicas is still
  applied (the real controller scales paused Deployments too); Progressing becomes Unknown
  (DeploymentPaused), then DeploymentResumed;
- status replicas, updatedReplicas, readyReplicas, availableReplicas, unavailableReplicas,
  observedGeneration, collisionCount and the conditions Available (MinimumReplicasAvailable /
  MinimumReplicasUnavailable) and Progressing (NewReplicaSetCreated, FoundNewReplicaSet,
  ReplicaSetUpdated, NewReplicaSetAvailable, ProgressDeadlineExceeded after
  spec.progressDeadlineSeconds, default 600), with the real controller's messages;
- a Deployment being deleted only gets its status updated; its ReplicaSets and their pods go
  through the garbage collector (the gc role), by their ownerReferences.

Every status is written through /status with a merge patch, only when it changed; every write
carries the resourceVersion it was computed from, so a write that crossed another one is refused
(409): the object is read again and the next pass (within a second) retries. A Deployment or
ReplicaSet the controller cannot make sense of (a field of the wrong type, as only a server
without validation lets through) is skipped, and said once (again when the problem changes).

Not modelled: adoption and release of ReplicaSets and pods by selector (only objects with a
controller ownerReference count), the ReplicaFailure conditions, spec.rollbackTo (gone from
apps/v1), the terminatingReplicas fields of later releases, and the ready-time buckets of the
real pod ranking (it compares the log2 of how long each pod has been ready; here the time
itself).

Where the server serves no apps/v1 deployments and replicasets the role says so once and looks
again, at most every 10 s.

Level-triggered: every Deployment, ReplicaSet or Pod event queues the objects concerned; a worker
recomputes each from the caches. A full pass runs every second as well (minReadySeconds,
progress deadlines, retries after errors).
"""

import copy
import hashlib
import json
import logging
import math
import random
import time

from apitime import now_rfc3339, parse_time
from kube import Informer, KubeError
from pods import controller_ref, find_condition, pod_active, pod_ready, pod_terminal
from workqueue import WorkQueue

log = logging.getLogger("deployments")

APPS = "/apis/apps/v1"
DEPLOYMENTS = APPS + "/deployments"
REPLICASETS = APPS + "/replicasets"
PODS = "/api/v1/pods"

HASH_LABEL = "pod-template-hash"
REVISION = "deployment.kubernetes.io/revision"
REVISION_HISTORY = "deployment.kubernetes.io/revision-history"
DESIRED_REPLICAS = "deployment.kubernetes.io/desired-replicas"
MAX_REPLICAS = "deployment.kubernetes.io/max-replicas"
DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"
# Deployment annotations a ReplicaSet does not copy.
NOT_COPIED = {"kubectl.kubernetes.io/last-applied-configuration", REVISION, REVISION_HISTORY, DESIRED_REPLICAS,
              MAX_REPLICAS, "deprecated.deployment.rollback.to"}
MAX_REVISION_HISTORY_CHARS = 2000

DEFAULT_REVISION_HISTORY_LIMIT = 10
DEFAULT_PROGRESS_DEADLINE = 600
MAX_INT32 = 2147483647
BURST_REPLICAS = 500

DISCOVERY_MAX_WAIT = 10.0

# The alphabet of rand.SafeEncodeString: no vowels, no 0/1/3, so no words and no look-alikes.
SAFE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"

# Reasons and messages as kube-controller-manager writes them.
MIN_AVAILABLE = ("MinimumReplicasAvailable", "Deployment has minimum availability.")
MIN_UNAVAILABLE = ("MinimumReplicasUnavailable", "Deployment does not have minimum availability.")
RS_CREATED = ("NewReplicaSetCreated", "Created new replica set %s")
RS_FOUND = ("FoundNewReplicaSet", "Found new replica set %s")
RS_UPDATED = ("ReplicaSetUpdated", "ReplicaSet %s is progressing.")
RS_AVAILABLE = ("NewReplicaSetAvailable", "ReplicaSet %s has successfully progressed.")
TIMED_OUT = ("ProgressDeadlineExceeded", "ReplicaSet %s has timed out progressing.")
PAUSED = ("DeploymentPaused", "Deployment is paused")
RESUMED = ("DeploymentResumed", "Deployment is resumed")

PHASE_ORDER = {"Pending": 0, "Unknown": 1, "Running": 2}


class BadObject(Exception):
    """An object the controllers cannot work with: skipped, and said once per problem."""


class Conflict(Exception):
    """A write refused with 409: the object has been read again; the next pass retries."""


# ---------------------------------------------------------------------- helpers


def quote(name):
    """Go's %q of a plain name."""
    return json.dumps(name)


def owner_ref(obj, kind):
    """A controller reference to obj (list items carry no kind, so it is given)."""
    meta = obj["metadata"]
    return {"apiVersion": "apps/v1", "kind": kind, "name": meta["name"], "uid": meta["uid"],
            "controller": True, "blockOwnerDeletion": True}


def as_int(value, field, default=None):
    if value is None:
        if default is None:
            raise BadObject("%s is not set" % field)
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise BadObject("%s: %r is not an integer" % (field, value))
    return value


def as_map(value, field):
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise BadObject("%s: not an object" % field)
    return value


def spec_of(obj):
    return as_map(obj.get("spec"), "spec")


def status_of(obj):
    st = obj.get("status")
    return st if isinstance(st, dict) else {}


def replicas_of(obj):
    """spec.replicas, 1 when unset (the API default)."""
    return as_int(spec_of(obj).get("replicas"), "spec.replicas", 1)


def status_int(obj, field):
    v = status_of(obj).get(field)
    return v if isinstance(v, int) and not isinstance(v, bool) else 0


def template_of(obj):
    return as_map(spec_of(obj).get("template"), "spec.template")


def template_labels(obj):
    return as_map(as_map(template_of(obj).get("metadata"), "spec.template.metadata").get("labels"),
                  "spec.template.metadata.labels")


def annotations_of(obj):
    return (obj.get("metadata") or {}).get("annotations") or {}


def created(obj):
    meta = obj.get("metadata") or {}
    return (parse_time(meta.get("creationTimestamp")) or 0.0, meta.get("name") or "")


def revision_of(rs):
    try:
        return int(annotations_of(rs).get(REVISION) or 0)
    except (TypeError, ValueError):
        return 0


def normalized(value):
    """A copy without nulls, empty objects and empty lists, which Kubernetes' semantic equality
    does not tell from absent ones."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            v = normalized(v)
            if v is None or v == {} or v == []:
                continue
            out[k] = v
        return out
    if isinstance(value, list):
        return [normalized(v) for v in value]
    return value


def without_hash(template):
    t = copy.deepcopy(template or {})
    labels = (t.get("metadata") or {}).get("labels")
    if isinstance(labels, dict):
        labels.pop(HASH_LABEL, None)
    return normalized(t)


def equal_ignore_hash(a, b):
    return without_hash(a) == without_hash(b)


def template_hash(template, collision_count=None):
    """10 characters naming the pod template (and the collision count, when set)."""
    text = json.dumps(normalized(template or {}), sort_keys=True, separators=(",", ":"))
    if collision_count is not None:
        text += "/%d" % collision_count
    digest = hashlib.sha256(text.encode()).digest()
    return "".join(SAFE_ALPHABET[b % len(SAFE_ALPHABET)] for b in digest[:10])


def random_suffix():
    return "".join(random.choice(SAFE_ALPHABET) for _ in range(5))


def set_condition(conditions, ctype, status, reason, message):
    """SetDeploymentCondition: nothing when status and reason are unchanged; otherwise the
    condition is replaced and moved last, keeping lastTransitionTime while the status holds.
    Returns True on change."""
    cur = next((c for c in conditions if c.get("type") == ctype), None)
    if cur is not None and cur.get("status") == status and cur.get("reason") == reason:
        return False
    t = now_rfc3339()
    cond = {"type": ctype, "status": status, "lastUpdateTime": t, "lastTransitionTime": t, "reason": reason,
            "message": message}
    if cur is not None and cur.get("status") == status:
        cond["lastTransitionTime"] = cur.get("lastTransitionTime") or t
    conditions[:] = [c for c in conditions if c.get("type") != ctype] + [cond]
    return True


def remove_condition(conditions, ctype):
    conditions[:] = [c for c in conditions if c.get("type") != ctype]


def ready_condition(pod):
    return find_condition(pod.get("status") or {}, "Ready")


def pod_available(pod, min_ready_seconds, now):
    if not pod_ready(pod):
        return False
    if min_ready_seconds <= 0:
        return True
    since = parse_time(ready_condition(pod).get("lastTransitionTime"))
    return since is not None and since + min_ready_seconds < now


def labels_match(selector_labels, labels):
    return all(labels.get(k) == v for k, v in selector_labels.items())


def scaled_value(value, total, round_up, field):
    """An intOrString (3 or "25%") against a total, as GetScaledValueFromIntOrPercent."""
    if isinstance(value, str) and value.endswith("%"):
        try:
            pct = int(value[:-1])
        except ValueError:
            raise BadObject("%s: %r is not a percentage" % (field, value))
        exact = pct * total / 100.0
        return int(math.ceil(exact) if round_up else math.floor(exact))
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return as_int(value, field)


def is_rolling(d):
    strategy = as_map(spec_of(d).get("strategy"), "spec.strategy")
    return (strategy.get("type") or "RollingUpdate") == "RollingUpdate"


def fenceposts(d):
    """(maxSurge, maxUnavailable) resolved against spec.replicas, as ResolveFenceposts."""
    replicas = replicas_of(d)
    ru = as_map(as_map(spec_of(d).get("strategy"), "spec.strategy").get("rollingUpdate"),
                "spec.strategy.rollingUpdate")
    surge = ru.get("maxSurge")
    unavailable = ru.get("maxUnavailable")
    surge = scaled_value("25%" if surge is None else surge, replicas, True, "maxSurge")
    unavailable = scaled_value("25%" if unavailable is None else unavailable, replicas, False, "maxUnavailable")
    if surge == 0 and unavailable == 0:
        unavailable = 1
    return surge, unavailable


def max_surge(d):
    return fenceposts(d)[0] if is_rolling(d) else 0


def max_unavailable(d):
    replicas = replicas_of(d)
    if not is_rolling(d) or replicas == 0:
        return 0
    return min(fenceposts(d)[1], replicas)


def progress_deadline(d):
    """spec.progressDeadlineSeconds (default 600), or None when there is none (MaxInt32)."""
    v = as_int(spec_of(d).get("progressDeadlineSeconds"), "spec.progressDeadlineSeconds",
               DEFAULT_PROGRESS_DEADLINE)
    return None if v == MAX_INT32 else v


def revision_history_limit(d):
    v = as_int(spec_of(d).get("revisionHistoryLimit"), "spec.revisionHistoryLimit", DEFAULT_REVISION_HISTORY_LIMIT)
    return None if v == MAX_INT32 else v


def active(rss):
    return [rs for rs in rss if rs is not None and replicas_of(rs) > 0]


def total_replicas(rss):
    return sum(replicas_of(rs) for rs in rss if rs is not None)


def total_status(rss, field):
    return sum(status_int(rs, field) for rs in rss if rs is not None)


def deployment_complete(d, st):
    replicas = replicas_of(d)
    return (st.get("updatedReplicas", 0) == replicas and st.get("replicas", 0) == replicas and
            st.get("availableReplicas", 0) == replicas and
            st.get("observedGeneration", 0) >= (d["metadata"].get("generation") or 0))


def deployment_progressing(d, st):
    old = {k: status_int(d, k) for k in ("replicas", "updatedReplicas", "readyReplicas", "availableReplicas")}
    return (st.get("updatedReplicas", 0) > old["updatedReplicas"] or
            st.get("replicas", 0) - st.get("updatedReplicas", 0) < old["replicas"] - old["updatedReplicas"] or
            st.get("readyReplicas", 0) > old["readyReplicas"] or
            st.get("availableReplicas", 0) > old["availableReplicas"])


def deployment_timed_out(d, st):
    deadline = progress_deadline(d)
    if deadline is None:
        return False
    c = find_condition(st, "Progressing")
    if c is None or c.get("reason") == RS_AVAILABLE[0]:
        return False
    if c.get("reason") == TIMED_OUT[0]:
        return True
    since = parse_time(c.get("lastUpdateTime"))
    return since is not None and since + deadline < time.time()


def pod_deletion_order(pod):
    """Sort key: the pods to delete first come first (ActivePodsWithRanks)."""
    spec, st = pod.get("spec") or {}, pod.get("status") or {}
    ready = pod_ready(pod)
    try:
        cost = int(annotations_of(pod).get(DELETION_COST) or 0)
    except (TypeError, ValueError):
        cost = 0
    ready_since = parse_time(ready_condition(pod).get("lastTransitionTime")) if ready else None
    restarts = sum(int(c.get("restartCount") or 0) for c in st.get("containerStatuses") or [] if isinstance(c, dict))
    return (bool(spec.get("nodeName")), PHASE_ORDER.get(st.get("phase"), 0), ready, cost,
            -(ready_since if ready_since is not None else float("inf")), -restarts, -created(pod)[0])


# ---------------------------------------------------------------------- controller

class DeploymentController:
    def __init__(self, kube, action_log=None):
        self.kube = kube
        self.say = action_log or (lambda text: log.info("%s", text))
        self.deployments = Informer(kube, DEPLOYMENTS, self._deployment_event)
        self.replicasets = Informer(kube, REPLICASETS, self._replicaset_event)
        self.pods = Informer(kube, PODS, self._pod_event)
        self.work = WorkQueue()
        self.enqueue = self.work.add
        self.warned = {}        # key -> the last problem said about it, so it is said once

    # ------------------------------------------------------------------ events
    def _deployment_event(self, etype, d):
        meta = d.get("metadata") or {}
        self.enqueue(("Deployment", meta.get("namespace"), meta.get("name")))

    def _replicaset_event(self, etype, rs):
        meta = rs.get("metadata") or {}
        self.enqueue(("ReplicaSet", meta.get("namespace"), meta.get("name")))
        ref = controller_ref(rs)
        if ref and ref.get("kind") == "Deployment" and str(ref.get("apiVersion", "")).startswith("apps/"):
            self.enqueue(("Deployment", meta.get("namespace"), ref.get("name")))

    def _pod_event(self, etype, pod):
        ref = controller_ref(pod)
        if ref and ref.get("kind") == "ReplicaSet" and str(ref.get("apiVersion", "")).startswith("apps/"):
            self.enqueue(("ReplicaSet", (pod.get("metadata") or {}).get("namespace"), ref.get("name")))

    # ------------------------------------------------------------------ loop
    def _wait_for_apps(self, stop_event):
        """True once the server serves apps/v1 deployments and replicasets; False when stopped."""
        delay, said = 0.5, False
        while not stop_event.is_set():
            try:
                code, body = self.kube.request("GET", APPS)
                if code == 200 and isinstance(body, dict):
                    names = {r.get("name") for r in body.get("resources") or [] if isinstance(r, dict)}
                    if {"deployments", "replicasets"} <= names:
                        if said:
                            log.info("apps/v1 deployments and replicasets are served now")
                        return True
                elif code != 404:
                    raise KubeError(code, body)
                if not said:
                    log.info("this API server serves no apps/v1 deployments and replicasets; looking again "
                             "until it does")
                    said = True
            except (KubeError, OSError) as e:
                log.warning("discovery of apps/v1: %s", e)
            stop_event.wait(delay)
            delay = min(delay * 2, DISCOVERY_MAX_WAIT)
        return False

    def run(self, stop_event):
        if not self._wait_for_apps(stop_event):
            return
        self.work.run(stop_event, (self.deployments, self.replicasets, self.pods), self._sync_safely,
                      self._resync)

    def _resync(self):
        for rs in self.replicasets.items():
            self.enqueue(("ReplicaSet", rs["metadata"].get("namespace"), rs["metadata"].get("name")))
        for d in self.deployments.items():
            self.enqueue(("Deployment", d["metadata"].get("namespace"), d["metadata"].get("name")))

    def _sync_safely(self, key):
        kind, ns, name = key
        what = "%s %s/%s" % (kind.lower(), ns, name)
        try:
            if kind == "ReplicaSet":
                self.sync_replicaset(ns, name)
            else:
                self.sync_deployment(ns, name)
            self.warned.pop(key, None)
        except BadObject as e:
            if self.warned.get(key) != str(e):
                self.warned[key] = str(e)
                log.warning("%s: %s; skipped", what, e)
        except Conflict as e:
            log.info("%s: %s; retrying on the next pass", what, e)
        except (KubeError, OSError) as e:
            # The next pass retries: the state is recomputed from the caches.
            log.warning("%s: %s", what, e)
        except Exception:
            log.exception("%s: sync failed", what)

    # ------------------------------------------------------------------ API helpers
    @staticmethod
    def path(plural, ns, name=None):
        base = "/api/v1" if plural == "pods" else APPS
        return "%s/namespaces/%s/%s%s" % (base, ns, plural, "/" + name if name else "")

    def _patch(self, informer, plural, obj, body, status=False):
        """A merge patch with obj's resourceVersion as precondition; on 409 the object is read
        again and Conflict raised."""
        meta = obj["metadata"]
        path = self.path(plural, meta["namespace"], meta["name"])
        body = dict(body)
        body["metadata"] = dict(body.get("metadata") or {}, resourceVersion=meta.get("resourceVersion"))
        try:
            out = self.kube.patch_status(path, body) if status else self.kube.patch(path, body)
        except KubeError as e:
            if e.code != 409:
                raise
            fresh = self.kube.get(path)
            if fresh is None:
                informer.forget(obj)
            else:
                informer.note(fresh)
            raise Conflict("%s %s: %s (read again)" % (plural[:-1], meta["name"], e)) from e
        informer.note(out)
        return out

    def _fresh(self, informer, obj):
        """The cached copy of obj (the same uid), which holds this process's own writes."""
        if obj is None:
            return None
        meta = obj["metadata"]
        cur = informer.get(meta.get("namespace"), meta.get("name"))
        if cur is not None and cur["metadata"].get("uid") == meta.get("uid"):
            return cur
        return obj

    # ------------------------------------------------------------------ ReplicaSets
    def _pods_of(self, ns, uid):
        return [p for p in self.pods.items()
                if p["metadata"].get("namespace") == ns and (controller_ref(p) or {}).get("uid") == uid]

    def sync_replicaset(self, ns, name):
        rs = self.replicasets.get(ns, name)
        if rs is None:
            return
        meta = rs["metadata"]
        spec = spec_of(rs)
        want = replicas_of(rs)
        min_ready = as_int(spec.get("minReadySeconds"), "spec.minReadySeconds", 0)
        tlabels = template_labels(rs)
        pods = [p for p in self._pods_of(ns, meta["uid"]) if pod_active(p)]
        if not meta.get("deletionTimestamp"):
            diff = len(pods) - want
            if diff < 0:
                for _ in range(min(-diff, BURST_REPLICAS)):
                    pods.append(self._create_pod(rs))
            elif diff > 0:
                victims = sorted(pods, key=pod_deletion_order)[:min(diff, BURST_REPLICAS)]
                for p in victims:
                    self._delete_pod(rs, p)
                gone = {p["metadata"]["uid"] for p in victims}
                pods = [p for p in pods if p["metadata"]["uid"] not in gone]
        now = time.time()
        new = {
            "replicas": len(pods),
            "fullyLabeledReplicas": sum(1 for p in pods if labels_match(tlabels, p["metadata"].get("labels") or {})),
            "readyReplicas": sum(1 for p in pods if pod_ready(p)),
            "availableReplicas": sum(1 for p in pods if pod_available(p, min_ready, now)),
            "observedGeneration": meta.get("generation") or 0,
        }
        patch = {k: v for k, v in new.items() if status_int(rs, k) != v or (k == "replicas" and k not in status_of(rs))}
        if patch:
            # Zeros are left out, as the real server stores them (omitempty); replicas is always set.
            self._patch(self.replicasets, "replicasets", rs,
                        {"status": {k: (v if v or k == "replicas" else None) for k, v in patch.items()}},
                        status=True)

    def _create_pod(self, rs):
        meta = rs["metadata"]
        tmpl = template_of(rs)
        tmeta = as_map(tmpl.get("metadata"), "spec.template.metadata")
        prefix = ("%s-" % meta["name"])[:58]
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": prefix + random_suffix(), "namespace": meta["namespace"],
                            "labels": dict(tmeta.get("labels") or {}),
                            "ownerReferences": [owner_ref(rs, "ReplicaSet")]},
               "spec": copy.deepcopy(tmpl.get("spec") or {})}
        if tmeta.get("annotations"):
            pod["metadata"]["annotations"] = dict(tmeta["annotations"])
        if tmeta.get("finalizers"):
            pod["metadata"]["finalizers"] = list(tmeta["finalizers"])
        for attempt in range(3):
            try:
                out = self.kube.create(self.path("pods", meta["namespace"]), pod)
            except KubeError as e:
                if e.code == 409 and attempt < 2:
                    pod["metadata"]["name"] = prefix + random_suffix()
                    continue
                raise
            self.pods.note(out)
            self.say("replicaset %s/%s: created pod %s" % (meta["namespace"], meta["name"], out["metadata"]["name"]))
            return out

    def _delete_pod(self, rs, pod):
        meta = pod["metadata"]
        if not self.kube.delete(self.path("pods", meta["namespace"], meta["name"])):
            self.pods.forget(pod)
            return
        self.say("replicaset %s/%s: deleted pod %s" % (meta["namespace"], rs["metadata"]["name"], meta["name"]))
        # Until the watch tells, the pod counts as being deleted (a bound pod stays a while).
        marked = dict(pod)
        marked["metadata"] = dict(meta, deletionTimestamp=now_rfc3339())
        with self.pods.lock:
            key = (meta["namespace"], meta["name"])
            cur = self.pods.cache.get(key)
            if cur is not None and cur["metadata"].get("uid") == meta.get("uid"):
                self.pods.cache[key] = marked

    # ------------------------------------------------------------------ Deployments
    def _replicasets_of(self, d):
        meta = d["metadata"]
        return [rs for rs in self.replicasets.items()
                if rs["metadata"].get("namespace") == meta["namespace"]
                and (controller_ref(rs) or {}).get("uid") == meta["uid"]]

    def sync_deployment(self, ns, name):
        d = self.deployments.get(ns, name)
        if d is None:
            return
        # An unusable object is said (BadObject) before anything is written for it.
        template_of(d)
        replicas_of(d)
        fenceposts(d)
        rs_list = self._replicasets_of(d)
        if d["metadata"].get("deletionTimestamp"):
            d, new_rs, old = self._new_and_old(d, rs_list, create=False)
            self._sync_status(d, new_rs, old)
            return
        d = self._check_paused(d)
        if spec_of(d).get("paused"):
            self._sync(d, rs_list)
            return
        scaling, d = self._scaling_event(d, rs_list)
        if scaling:
            self._sync(d, rs_list)
            return
        if is_rolling(d):
            self._rollout_rolling(d, rs_list)
        else:
            self._rollout_recreate(d, rs_list)

    def _write_deployment_status(self, d, new):
        """Writes what differs between d's status and new (missing counts as 0)."""
        old = status_of(d)
        patch = {}
        for k, v in new.items():
            if k == "conditions":
                if (old.get("conditions") or []) != v:
                    patch[k] = v or None
            elif k == "collisionCount":
                if v is not None and old.get(k) != v:
                    patch[k] = v
            elif status_int(d, k) != v:
                patch[k] = v or None
        if not patch:
            return d
        return self._patch(self.deployments, "deployments", d, {"status": patch}, status=True)

    def _set_revision(self, d, revision):
        """The Deployment's revision annotation, written through /status as the real controller
        does (kube-apiserver keeps a status write's annotations on Deployments, and a change of
        annotations through the object itself would raise metadata.generation); where /status
        keeps none of the metadata (the double), through the object."""
        if annotations_of(d).get(REVISION) == revision:
            return d
        body = {"metadata": {"annotations": {REVISION: revision}}}
        out = self._patch(self.deployments, "deployments", d, body, status=True)
        if annotations_of(out).get(REVISION) != revision:
            out = self._patch(self.deployments, "deployments", out, body)
        return out

    def _copy_annotations(self, d, annotations):
        changed = False
        for k, v in annotations_of(d).items():
            if k in NOT_COPIED or annotations.get(k) == v:
                continue
            annotations[k] = v
            changed = True
        return changed

    @staticmethod
    def _set_rs_revision(annotations, revision):
        """SetNewReplicaSetAnnotations' revision part; True on change."""
        old_text = annotations.get(REVISION)
        try:
            old = int(old_text) if old_text else 0
        except ValueError:
            return False
        if old >= revision:
            return False
        annotations[REVISION] = str(revision)
        if old_text:
            history = annotations.get(REVISION_HISTORY) or ""
            revisions = [r for r in history.split(",") if r]
            while revisions and len(",".join(revisions + [old_text])) > MAX_REVISION_HISTORY_CHARS:
                revisions.pop(0)
            annotations[REVISION_HISTORY] = ",".join(revisions + [old_text])
        return True

    def _new_and_old(self, d, rs_list, create):
        """getAllReplicaSetsAndSyncRevision: (d, the new ReplicaSet or None, the old ones), the new one
        created when create is set, its revision and the Deployment's brought up to date."""
        d = self._fresh(self.deployments, d)
        rs_list = [self._fresh(self.replicasets, rs) for rs in rs_list]
        template = template_of(d)
        new_rs = next((rs for rs in sorted(rs_list, key=created)
                       if equal_ignore_hash(as_map(spec_of(rs).get("template"), "spec.template"), template)), None)
        old = [rs for rs in rs_list if rs is not new_rs]
        revision = max([revision_of(rs) for rs in old] or [0]) + 1
        ns, name = d["metadata"]["namespace"], d["metadata"]["name"]
        min_ready = as_int(spec_of(d).get("minReadySeconds"), "spec.minReadySeconds", 0)
        deadline = progress_deadline(d)

        if new_rs is not None:
            annotations = dict(annotations_of(new_rs))
            changed = self._copy_annotations(d, annotations)
            changed = self._set_rs_revision(annotations, revision) or changed
            if changed or as_int(spec_of(new_rs).get("minReadySeconds"), "spec.minReadySeconds", 0) != min_ready:
                body = {"metadata": {"annotations": annotations}, "spec": {"minReadySeconds": min_ready or None}}
                new_rs = self._patch(self.replicasets, "replicasets", new_rs, body)
                return d, new_rs, old
            d = self._set_revision(d, annotations_of(new_rs).get(REVISION) or "")
            st = status_of(d)
            if deadline is not None and find_condition(st, "Progressing") is None:
                conditions = [dict(c) for c in st.get("conditions") or []]
                set_condition(conditions, "Progressing", "True", RS_FOUND[0],
                              RS_FOUND[1] % quote(new_rs["metadata"]["name"]))
                d = self._write_deployment_status(d, {"conditions": conditions})
            return d, new_rs, old
        if not create:
            return d, None, old

        collision = status_of(d).get("collisionCount")
        h = template_hash(template, collision)
        rs_template = copy.deepcopy(template)
        rs_template["metadata"] = dict(rs_template.get("metadata") or {})
        rs_template["metadata"]["labels"] = dict(template_labels(d), **{HASH_LABEL: h})
        selector = copy.deepcopy(as_map(spec_of(d).get("selector"), "spec.selector")) or \
            {"matchLabels": dict(template_labels(d))}
        selector["matchLabels"] = dict(selector.get("matchLabels") or {}, **{HASH_LABEL: h})
        annotations = {}
        self._copy_annotations(d, annotations)
        self._set_rs_revision(annotations, revision)
        replicas = replicas_of(d)
        annotations[DESIRED_REPLICAS] = str(replicas)
        annotations[MAX_REPLICAS] = str(replicas + max_surge(d))
        rs = {"apiVersion": "apps/v1", "kind": "ReplicaSet",
              "metadata": {"name": "%s-%s" % (name, h), "namespace": ns,
                           "labels": dict(rs_template["metadata"]["labels"]), "annotations": annotations,
                           "ownerReferences": [owner_ref(d, "Deployment")]},
              "spec": {"replicas": 0, "selector": selector, "template": rs_template}}
        if min_ready:
            rs["spec"]["minReadySeconds"] = min_ready
        rs["spec"]["replicas"] = self._new_rs_replicas(d, rs_list + [rs], rs)
        existed = False
        try:
            out = self.kube.create(self.path("replicasets", ns), rs)
            self.replicasets.note(out)
            self.say("deployment %s/%s: created replicaset %s (revision %d, replicas %d)"
                     % (ns, name, out["metadata"]["name"], revision, rs["spec"]["replicas"]))
        except KubeError as e:
            if e.code != 409:
                raise
            out = self.kube.get(self.path("replicasets", ns, rs["metadata"]["name"]))
            if out is not None and (controller_ref(out) or {}).get("uid") == d["metadata"]["uid"] and \
                    equal_ignore_hash(spec_of(out).get("template"), template):
                self.replicasets.note(out)
                existed = True
            else:
                # A hash collision: another template's, or someone else's, ReplicaSet has the name.
                count = (collision or 0) + 1
                self._write_deployment_status(d, {"collisionCount": count})
                self.say("deployment %s/%s: replicaset %s exists and is not this template's; collisionCount %d"
                         % (ns, name, rs["metadata"]["name"], count))
                raise Conflict("replicaset %s: the name is taken (collisionCount %d)"
                               % (rs["metadata"]["name"], count)) from e
        d = self._set_revision(d, str(revision))
        if not existed and deadline is not None:
            conditions = [dict(c) for c in status_of(d).get("conditions") or []]
            set_condition(conditions, "Progressing", "True", RS_CREATED[0],
                          RS_CREATED[1] % quote(out["metadata"]["name"]))
            d = self._write_deployment_status(d, {"conditions": conditions})
        return d, out, old

    def _new_rs_replicas(self, d, all_rss, new_rs):
        """NewRSNewReplicas: how far the new ReplicaSet may grow now."""
        replicas = replicas_of(d)
        if not is_rolling(d):
            return replicas
        current = total_replicas(all_rss)
        most = replicas + max_surge(d)
        if current >= most:
            return replicas_of(new_rs)
        up = min(most - current, replicas - replicas_of(new_rs))
        return replicas_of(new_rs) + up

    def _scale(self, d, rs, count):
        """scaleReplicaSetAndRecordEvent: a no-op when the size is right; else the size and the
        replicas annotations. Returns (scaled, the ReplicaSet)."""
        have = replicas_of(rs)
        if have == count:
            return False, rs
        replicas = replicas_of(d)
        body = {"metadata": {"annotations": {DESIRED_REPLICAS: str(replicas),
                                             MAX_REPLICAS: str(replicas + max_surge(d))}},
                "spec": {"replicas": count}}
        out = self._patch(self.replicasets, "replicasets", rs, body)
        self.say("deployment %s/%s: scaled %s replicaset %s from %d to %d" % (
            d["metadata"]["namespace"], d["metadata"]["name"], "up" if count > have else "down",
            rs["metadata"]["name"], have, count))
        return True, out

    def _scaling_event(self, d, rs_list):
        """Whether an active ReplicaSet was sized for another spec.replicas; (answer, d)."""
        d, new_rs, old = self._new_and_old(d, rs_list, create=False)
        replicas = replicas_of(d)
        for rs in active(old + [new_rs]):
            desired = annotations_of(rs).get(DESIRED_REPLICAS)
            try:
                if desired is not None and int(desired) != replicas:
                    return True, d
            except ValueError:
                continue
        return False, d

    def _check_paused(self, d):
        if progress_deadline(d) is None:
            return d
        st = status_of(d)
        cond = find_condition(st, "Progressing")
        if cond is not None and cond.get("reason") == TIMED_OUT[0]:
            return d
        paused_cond = cond is not None and cond.get("reason") == PAUSED[0]
        paused = bool(spec_of(d).get("paused"))
        conditions = [dict(c) for c in st.get("conditions") or []]
        if paused and not paused_cond:
            set_condition(conditions, "Progressing", "Unknown", *PAUSED)
            self.say("deployment %s/%s: paused" % (d["metadata"]["namespace"], d["metadata"]["name"]))
        elif not paused and paused_cond:
            set_condition(conditions, "Progressing", "Unknown", *RESUMED)
            self.say("deployment %s/%s: resumed" % (d["metadata"]["namespace"], d["metadata"]["name"]))
        else:
            return d
        return self._write_deployment_status(d, {"conditions": conditions})

    def _sync(self, d, rs_list):
        """A scaling event, or a paused Deployment: scale, trim the history, write the status."""
        d, new_rs, old = self._new_and_old(d, rs_list, create=False)
        self._scale_all(d, new_rs, old)
        old = [self._fresh(self.replicasets, rs) for rs in old]
        new_rs = self._fresh(self.replicasets, new_rs)
        if spec_of(d).get("paused"):
            self._cleanup(d, old)
        self._sync_status(d, new_rs, old)

    def _scale_all(self, d, new_rs, old):
        """DeploymentController.scale: one active (or else the newest) ReplicaSet takes
        spec.replicas; a saturated new one sends the old ones to 0; otherwise a rolling
        Deployment's change of size is spread over the active ReplicaSets in proportion."""
        if new_rs is None and not old:
            return
        replicas = replicas_of(d)
        by_age = sorted(old, key=created, reverse=True)
        live = active(([new_rs] if new_rs is not None else []) + by_age)
        if len(live) <= 1:
            self._scale(d, live[0] if live else (new_rs if new_rs is not None else by_age[0]), replicas)
            return
        if new_rs is not None and replicas_of(new_rs) == replicas and \
                annotations_of(new_rs).get(DESIRED_REPLICAS) == str(replicas) and \
                status_int(new_rs, "availableReplicas") == replicas:
            for rs in active(old):
                self._scale(d, rs, 0)
            return
        if not is_rolling(d):
            return
        allowed = replicas + max_surge(d) if replicas > 0 else 0
        to_add = allowed - total_replicas(live)
        if to_add > 0:
            live.sort(key=lambda rs: (-replicas_of(rs), -created(rs)[0]))
        elif to_add < 0:
            live.sort(key=lambda rs: (-replicas_of(rs), created(rs)[0]))
        added = 0
        sizes = []
        for rs in live:
            share = self._proportion(d, rs, to_add, added) if to_add else 0
            sizes.append(replicas_of(rs) + share)
            added += share
        for i, rs in enumerate(live):
            size = max(0, sizes[i] + to_add - added) if i == 0 and to_add else sizes[i]
            self._scale(d, rs, size)

    @staticmethod
    def _proportion(d, rs, to_add, added):
        """GetReplicaSetProportion."""
        size = replicas_of(rs)
        if size == 0 or to_add == 0 or to_add == added:
            return 0
        replicas = replicas_of(d)
        if replicas == 0:
            fraction = -size
        else:
            before = 0
            try:
                before = int(annotations_of(rs).get(MAX_REPLICAS) or 0)
            except ValueError:
                pass
            if before == 0:
                before = status_int(d, "replicas")
            if before == 0:
                fraction = 0
            else:
                fraction = int(math.floor(size * (replicas + max_surge(d)) / before + 0.5)) - size
        allowed = to_add - added
        return min(fraction, allowed) if to_add > 0 else max(fraction, allowed)

    def _cleanup(self, d, old):
        """cleanupDeployment: deletes the oldest unused ReplicaSets beyond revisionHistoryLimit."""
        limit = revision_history_limit(d)
        if limit is None:
            return
        alive = [rs for rs in old if not rs["metadata"].get("deletionTimestamp")]
        diff = len(alive) - limit
        if diff <= 0:
            return
        alive.sort(key=lambda rs: (revision_of(rs), created(rs)))
        for rs in alive[:diff]:
            meta = rs["metadata"]
            if status_int(rs, "replicas") != 0 or replicas_of(rs) != 0 or \
                    (meta.get("generation") or 0) > status_int(rs, "observedGeneration"):
                continue
            if self.kube.delete(self.path("replicasets", meta["namespace"], meta["name"])):
                self.say("deployment %s/%s: deleted old replicaset %s (revisionHistoryLimit %d)"
                         % (d["metadata"]["namespace"], d["metadata"]["name"], meta["name"], limit))
            self.replicasets.forget(rs)

    def _calculate_status(self, d, new_rs, old):
        all_rss = [rs for rs in old + [new_rs] if rs is not None]
        available = total_status(all_rss, "availableReplicas")
        st = {
            "observedGeneration": d["metadata"].get("generation") or 0,
            "replicas": total_status(all_rss, "replicas"),
            "updatedReplicas": status_int(new_rs, "replicas") if new_rs is not None else 0,
            "readyReplicas": total_status(all_rss, "readyReplicas"),
            "availableReplicas": available,
            "unavailableReplicas": max(0, total_replicas(all_rss) - available),
            "collisionCount": status_of(d).get("collisionCount"),
            "conditions": [dict(c) for c in status_of(d).get("conditions") or [] if isinstance(c, dict)],
        }
        if available >= replicas_of(d) - max_unavailable(d):
            set_condition(st["conditions"], "Available", "True", *MIN_AVAILABLE)
        else:
            set_condition(st["conditions"], "Available", "False", *MIN_UNAVAILABLE)
        return st

    def _sync_status(self, d, new_rs, old):
        return self._write_deployment_status(d, self._calculate_status(d, new_rs, old))

    def _sync_rollout_status(self, d, new_rs, old):
        """syncRolloutStatus: the status, and Progressing as the rollout stands."""
        new_rs = self._fresh(self.replicasets, new_rs)
        old = [self._fresh(self.replicasets, rs) for rs in old]
        st = self._calculate_status(d, new_rs, old)
        deadline = progress_deadline(d)
        if deadline is None:
            remove_condition(st["conditions"], "Progressing")
        cur = find_condition(status_of(d), "Progressing")
        complete_before = (st["replicas"] == st["updatedReplicas"] and cur is not None
                           and cur.get("reason") == RS_AVAILABLE[0])
        rs_name = quote(new_rs["metadata"]["name"]) if new_rs is not None else None
        dname = quote(d["metadata"]["name"])
        if deadline is not None and not complete_before:
            if deployment_complete(d, st):
                msg = RS_AVAILABLE[1] % rs_name if rs_name else "Deployment %s has successfully progressed." % dname
                set_condition(st["conditions"], "Progressing", "True", RS_AVAILABLE[0], msg)
            elif deployment_progressing(d, st):
                msg = RS_UPDATED[1] % rs_name if rs_name else "Deployment %s is progressing." % dname
                t = now_rfc3339()
                cond = {"type": "Progressing", "status": "True", "lastUpdateTime": t, "lastTransitionTime": t,
                        "reason": RS_UPDATED[0], "message": msg}
                if cur is not None and cur.get("status") == "True":
                    cond["lastTransitionTime"] = cur.get("lastTransitionTime") or t
                remove_condition(st["conditions"], "Progressing")
                st["conditions"].append(cond)
            elif deployment_timed_out(d, st):
                msg = TIMED_OUT[1] % rs_name if rs_name else "Deployment %s has timed out progressing." % dname
                if set_condition(st["conditions"], "Progressing", "False", TIMED_OUT[0], msg):
                    self.say("deployment %s/%s: progress deadline exceeded" % (d["metadata"]["namespace"],
                                                                               d["metadata"]["name"]))
        remove_condition(st["conditions"], "ReplicaFailure")
        return self._write_deployment_status(d, st)

    def _rollout_rolling(self, d, rs_list):
        d, new_rs, old = self._new_and_old(d, rs_list, create=True)
        all_rss = old + [new_rs]
        # reconcileNewReplicaSet
        replicas = replicas_of(d)
        have = replicas_of(new_rs)
        if have != replicas:
            count = replicas if have > replicas else self._new_rs_replicas(d, all_rss, new_rs)
            scaled, new_rs = self._scale(d, new_rs, count)
            if scaled:
                self._sync_rollout_status(d, new_rs, old)
                return
        # reconcileOldReplicaSets
        if self._reconcile_old(d, new_rs, old):
            self._sync_rollout_status(d, new_rs, old)
            return
        if deployment_complete(d, status_of(d)):
            self._cleanup(d, [self._fresh(self.replicasets, rs) for rs in old])
        self._sync_rollout_status(d, new_rs, old)

    def _reconcile_old(self, d, new_rs, old):
        if total_replicas(old) == 0:
            return False
        all_count = total_replicas(old + [new_rs])
        min_available = replicas_of(d) - max_unavailable(d)
        new_unavailable = replicas_of(new_rs) - status_int(new_rs, "availableReplicas")
        most = all_count - min_available - new_unavailable
        if most <= 0:
            return False
        # Unhealthy replicas first, so that they cannot hold the rollout up.
        old = sorted(old, key=created)
        done = 0
        for i, rs in enumerate(old):
            if done >= most:
                break
            size, avail = replicas_of(rs), status_int(rs, "availableReplicas")
            if size == 0 or size == avail:
                continue
            down = min(most - done, size - avail)
            _, old[i] = self._scale(d, rs, size - down)
            done += down
        # Then healthy ones, as far as maxUnavailable allows.
        available = total_status(old + [new_rs], "availableReplicas")
        scaled = 0
        if available > min_available:
            budget = available - min_available
            for rs in old:
                if scaled >= budget:
                    break
                size = replicas_of(rs)
                if size == 0:
                    continue
                down = min(size, budget - scaled)
                self._scale(d, rs, size - down)
                scaled += down
        return done + scaled > 0

    def _rollout_recreate(self, d, rs_list):
        d, new_rs, old = self._new_and_old(d, rs_list, create=False)
        scaled = False
        for rs in active(old):
            scaled = self._scale(d, rs, 0)[0] or scaled
        if scaled:
            self._sync_rollout_status(d, new_rs, old)
            return
        if self._old_pods_running(new_rs, old):
            self._sync_rollout_status(d, new_rs, old)
            return
        if new_rs is None:
            d, new_rs, old = self._new_and_old(d, self._replicasets_of(d), create=True)
        _, new_rs = self._scale(d, new_rs, replicas_of(d))
        if deployment_complete(d, status_of(d)):
            self._cleanup(d, [self._fresh(self.replicasets, rs) for rs in old])
        self._sync_rollout_status(d, new_rs, old)

    def _old_pods_running(self, new_rs, old):
        if total_status(old, "replicas") > 0:
            return True
        for rs in old:
            for p in self._pods_of(rs["metadata"]["namespace"], rs["metadata"]["uid"]):
                if not pod_terminal(p):
                    return True
        return False
