"""The simulated kubelet's pod volumes: what a pod's containers read from the API (ConfigMaps,
Secrets, the downward API, ServiceAccount tokens), written as files on this machine and bound
at the containers' mount paths.

    vols = PodVolumes(runner)        # runner: the PodRunner of the pod
    failed = vols.prepare()          # every volume, before the pod's network and containers:
                                     # [MountFailed, ...] for those it could not complete
    vols.refresh()                   # ConfigMap, Secret, downwardAPI and projected ones, again
    vols.mounts(container_spec)      # [{"source", "target", "readOnly"}] for one container

configMap, secret (items, defaultMode, mode, optional; fsGroup adds group read), downwardAPI
(fieldRef), projected (those sources and serviceAccountToken), emptyDir and hostPath volumes,
under <state_dir>/pods/<uid>/volumes/<name>. A ConfigMap, Secret or key the pod needs and the
API does not have, or that cannot be read now (the API server slow or refusing), is Missing:
the kubelet waits and tries again, never reads it as absent. prepare() returns a MountFailed for
each volume it could not complete ('MountVolume.SetUp failed for volume "x" : configmap "y" not
found', a kubelet's words); the kubelet starts nothing until every volume is complete. Each
file is written whole (a temporary file renamed over it); a refresh that cannot read a source
changes nothing in that volume, and removes only files that a complete reading no longer has
(an optional source gone).
"""

import base64
import logging
import os
import stat
import time

from kube import KubeError

log = logging.getLogger("kubelet")

# Volumes whose files the kubelet writes (and refreshes); the others are folders.
PROJECTED_KINDS = ("configMap", "secret", "downwardAPI", "projected")


class Missing(Exception):
    """Something the pod needs does not exist (yet), or cannot be read now: the kubelet waits."""


class MountFailed(Missing):
    """A volume could not be set up: says which, and why, as a kubelet's FailedMount event does."""

    def __init__(self, volume, reason):
        super().__init__('MountVolume.SetUp failed for volume "%s" : %s' % (volume, reason))
        self.volume = volume
        self.reason = reason


def field_value(pod, path):
    """The value of a downward API fieldRef (metadata.name, status.podIP, metadata.labels['x'], ...)."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    simple = {
        "metadata.name": meta.get("name"),
        "metadata.namespace": meta.get("namespace"),
        "metadata.uid": meta.get("uid"),
        "spec.nodeName": spec.get("nodeName"),
        "spec.serviceAccountName": spec.get("serviceAccountName") or "default",
        "status.podIP": status.get("podIP"),
        "status.hostIP": status.get("hostIP"),
        "status.podIPs": ",".join(p.get("ip", "") for p in status.get("podIPs") or []),
        "status.hostIPs": ",".join(p.get("ip", "") for p in status.get("hostIPs") or []),
    }
    if path in simple:
        return simple[path] or ""
    for key, src in (("metadata.labels", meta.get("labels")), ("metadata.annotations", meta.get("annotations"))):
        if path.startswith(key + "['") and path.endswith("']"):
            return (src or {}).get(path[len(key) + 2:-2], "")
    raise ValueError("fieldRef %s is not supported" % path)


def fetch(kube, ns, kind, name, optional):
    """The ConfigMap or Secret (kind: configmaps or secrets), None when it does not exist and is
    optional; Missing when it does not exist and is not, and whenever the API server does not
    answer with the object or a 404 (an error, a timeout): that is no answer, not an absence."""
    try:
        obj = kube.get("/api/v1/namespaces/%s/%s/%s" % (ns, kind, name))
    except (KubeError, OSError) as e:
        raise Missing('failed to get %s "%s": %s' % (kind[:-1], name, e)) from None
    if obj is None and not optional:
        raise Missing('%s "%s" not found' % (kind[:-1], name))
    return obj


def data_of(obj, secret):
    """{key: bytes} of a ConfigMap (data and binaryData) or Secret (data, decoded)."""
    out = {}
    if obj is None:
        return out
    for k, v in (obj.get("data") or {}).items():
        out[k] = base64.b64decode(v) if secret else str(v).encode()
    if not secret:
        for k, v in (obj.get("binaryData") or {}).items():
            out[k] = base64.b64decode(v)
    return out


# hostPath types a path must have: (what a kubelet calls it, the test).
HOST_PATH_TYPES = {
    "Directory": ("directory", os.path.isdir),
    "File": ("file", os.path.isfile),
    "Socket": ("socket file", lambda p: stat.S_ISSOCK(os.stat(p).st_mode)),
    "CharDevice": ("character device", lambda p: stat.S_ISCHR(os.stat(p).st_mode)),
    "BlockDevice": ("block device", lambda p: stat.S_ISBLK(os.stat(p).st_mode)),
    "DirectoryOrCreate": ("directory", os.path.isdir),
    "FileOrCreate": ("file", os.path.isfile),
    "": ("path", os.path.exists),
}


def _host_path_is(path, htype):
    what = HOST_PATH_TYPES.get(htype)
    if what is None:
        raise ValueError("hostPath %s: type %r is not a hostPath type" % (path, htype))
    try:
        return what[1](path)
    except OSError:
        return False


class PodVolumes:
    """The volumes of one pod; used by its runner's thread only."""

    def __init__(self, runner):
        self.runner = runner
        self.k = runner.k
        self.ns = runner.ns
        self.dir = os.path.join(runner.dir, "volumes")
        self.sources = {}         # volume name -> host path
        self.tokens = {}          # (serviceaccount, audience, seconds) -> (token, renew at)

    @property
    def spec(self):
        return self.runner.spec

    def _projection(self, vol):
        """[(relative path, bytes, mode)] for a configMap, secret or downwardAPI volume."""
        files = []
        fs_group = (self.spec.get("securityContext") or {}).get("fsGroup")

        def add_source(data, items, default_mode, secret, optional):
            if items:
                for it in items:
                    if it.get("key") not in data:
                        if optional:
                            continue
                        raise Missing("secret references non-existent secret key: %s" % it.get("key") if secret
                                      else "configmap references non-existent config key: %s" % it.get("key"))
                    files.append((it.get("path") or it["key"], data[it["key"]], it.get("mode", default_mode)))
            else:
                for key, val in data.items():
                    files.append((key, val, default_mode))

        def add_downward(items, default_mode):
            for it in items or []:
                if "fieldRef" in it:
                    val = field_value(self.runner.pod, it["fieldRef"]["fieldPath"])
                else:
                    raise ValueError("downwardAPI item %s: only fieldRef is supported" % it.get("path"))
                files.append((it["path"], str(val).encode(), it.get("mode", default_mode)))

        if "configMap" in vol or "secret" in vol:
            secret = "secret" in vol
            src = vol["secret" if secret else "configMap"]
            name = src.get("secretName" if secret else "name")
            optional = bool(src.get("optional"))
            obj = fetch(self.k.kube, self.ns, "secrets" if secret else "configmaps", name, optional)
            add_source(data_of(obj, secret), src.get("items"), src.get("defaultMode", 0o644), secret, optional)
        elif "downwardAPI" in vol:
            add_downward(vol["downwardAPI"].get("items"), vol["downwardAPI"].get("defaultMode", 0o644))
        elif "projected" in vol:
            dm = vol["projected"].get("defaultMode", 0o644)
            for s in vol["projected"].get("sources") or []:
                if "configMap" in s or "secret" in s:
                    secret = "secret" in s
                    src = s["secret" if secret else "configMap"]
                    optional = bool(src.get("optional"))
                    obj = fetch(self.k.kube, self.ns, "secrets" if secret else "configmaps", src.get("name"),
                                optional)
                    add_source(data_of(obj, secret), src.get("items"), dm, secret, optional)
                elif "downwardAPI" in s:
                    add_downward(s["downwardAPI"].get("items"), dm)
                elif "serviceAccountToken" in s:
                    src = s["serviceAccountToken"]
                    files.append((src.get("path") or "token", self._token(src).encode(), dm))
                else:
                    log.warning("%s/%s: projected source %s is not simulated", self.ns, self.runner.name, list(s))
        if fs_group is not None:
            files = [(p, d, m | 0o440) for p, d, m in files]
        return files, fs_group

    def _token(self, src):
        """A token of the pod's ServiceAccount for a projected serviceAccountToken source, through
        the TokenRequest API (bound to the pod), as a kubelet gets it; asked again once 80% of its
        lifetime has passed."""
        sa = self.spec.get("serviceAccountName") or self.spec.get("serviceAccount") or "default"
        audience = src.get("audience") or ""
        seconds = int(src.get("expirationSeconds") or 3600)
        key = (sa, audience, seconds)
        cached = self.tokens.get(key)
        if cached and time.monotonic() < cached[1]:
            return cached[0]
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                "spec": {"audiences": [audience] if audience else None, "expirationSeconds": seconds,
                         "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": self.runner.name,
                                            "uid": self.runner.uid}}}
        try:
            code, obj = self.k.kube.request("POST", "/api/v1/namespaces/%s/serviceaccounts/%s/token" % (self.ns, sa),
                                            body)
        except OSError as e:
            raise Missing("failed to fetch token: %s" % e) from None
        if code not in (200, 201) or not isinstance(obj, dict) or not (obj.get("status") or {}).get("token"):
            said = obj.get("message") if isinstance(obj, dict) and obj.get("message") else str(obj)[:200]
            raise Missing("failed to fetch token: HTTP %d: %s" % (code, said))
        token = obj["status"]["token"]
        self.tokens[key] = (token, time.monotonic() + 0.8 * seconds)
        return token

    def _write_projection(self, vol, files, fs_group):
        d = os.path.join(self.dir, vol["name"])
        os.makedirs(d, exist_ok=True)
        os.chmod(d, 0o755)
        wanted = set()
        for rel, data, mode in files:
            rel = os.path.normpath(rel)
            if rel.startswith("..") or os.path.isabs(rel):
                raise ValueError("volume %s: item path %s leaves the volume" % (vol["name"], rel))
            wanted.add(rel)
            path = os.path.join(d, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            try:
                with open(path, "rb") as f:
                    same = f.read() == data
                st = os.stat(path)
                if same and (st.st_mode & 0o7777) == mode and (fs_group is None or st.st_gid == fs_group):
                    continue
            except OSError:
                pass
            tmp = path + ".sim-tmp"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.chmod(tmp, mode)
            if fs_group is not None:
                os.chown(tmp, -1, fs_group)
            os.rename(tmp, path)
        for root, _dirs, names in os.walk(d):
            for n in names:
                rel = os.path.relpath(os.path.join(root, n), d)
                if rel not in wanted:
                    os.unlink(os.path.join(root, n))
        return d

    def prepare(self, refresh=False):
        """Writes every volume (refresh: the configMap, secret, downwardAPI and projected ones
        again). Returns a MountFailed for each volume that cannot be set up now (its files stay as
        they were), [] when all are complete; ValueError for what the simulation does not do."""
        failed = []
        for vol in self.spec.get("volumes") or []:
            try:
                self._prepare_one(vol, refresh)
            except (Missing, OSError) as e:
                failed.append(MountFailed(vol.get("name"), str(e)))
        return failed

    def _prepare_one(self, vol, refresh):
        fs_group = (self.spec.get("securityContext") or {}).get("fsGroup")
        name = vol.get("name")
        if any(k in vol for k in PROJECTED_KINDS):
            files, fsg = self._projection(vol)
            self.sources[name] = self._write_projection(vol, files, fsg)
        elif refresh:
            return
        elif "emptyDir" in vol:
            d = os.path.join(self.dir, name)
            os.makedirs(d, exist_ok=True)
            os.chmod(d, 0o777 if fs_group is None else 0o2775)
            if fs_group is not None:
                os.chown(d, -1, fs_group)
            self.sources[name] = d
        elif "hostPath" in vol:
            hp = vol["hostPath"]
            p, t = hp.get("path"), hp.get("type") or ""
            # What is created on the host for the pod is recorded, so cleanup() removes it.
            if t in ("", "DirectoryOrCreate") and not os.path.exists(p):
                self.k.create_recorded(p, True)
            elif t == "FileOrCreate" and not os.path.exists(p):
                self.k.create_recorded(p, False)
            elif not _host_path_is(p, t):
                raise Missing("hostPath type check failed: %s is not a %s" % (p, HOST_PATH_TYPES[t][0]))
            self.sources[name] = p
        else:
            raise ValueError("volume %s: only configMap, secret, emptyDir, hostPath, downwardAPI and "
                             "projected volumes are simulated" % name)

    def refresh(self):
        """prepare(refresh=True), its failures in the log only: a volume that cannot be read
        keeps the files it has."""
        try:
            failed = self.prepare(refresh=True)
        except ValueError as e:
            failed = [e]
        for e in failed:
            log.debug("%s/%s: volume refresh: %s", self.ns, self.runner.name, e)
        return failed

    def mounts(self, c):
        """The binds of container c (a kubelet Container): [{"source", "target", "readOnly"}]."""
        out = []
        for m in c.spec.get("volumeMounts") or []:
            src = self.sources.get(m.get("name"))
            if src is None:
                raise ValueError("container %s mounts unknown volume %s" % (c.name, m.get("name")))
            if m.get("subPath"):
                src = os.path.join(src, m["subPath"])
                if not os.path.exists(src):
                    os.makedirs(src, exist_ok=True)
            target = os.path.normpath(m["mountPath"])
            is_dir = os.path.isdir(src)
            if not self.k.runtime:
                self.k.make_mount_point(target, is_dir)
            vol = next((v for v in self.spec.get("volumes") or [] if v.get("name") == m.get("name")), {})
            ro = bool(m.get("readOnly")) or any(k in vol for k in PROJECTED_KINDS)
            out.append({"source": src, "target": target, "readOnly": ro})
        return out
