"""The simulated kubelet: runs the containers of pods bound to one node as processes on this
machine (standard library + PyYAML through kube.py; needs root, iproute2 and util-linux).

    k = Kubelet(kube, "cluster.local", state_dir)   # node "sim-node", pods in 10.244.0.0/16
    k.run(stop_event)                                # blocks until stop_event is set
    k.cleanup()                                      # idempotent; run() also calls it

Per pod (spec.nodeName == node name, no deletionTimestamp, not yet finished):
  - a network namespace with its own address on a bridge the kubelet creates (netns.py), and
    /etc/netns/<ns>/hosts naming every running pod of the node as
    <hostname>.<subdomain>.<namespace>.svc.<domain> (and without the domain; <hostname>.<subdomain>
    and <hostname> for pods of the same namespace), rewritten as pods come and go;
  - ConfigMap, Secret (items, defaultMode, mode, optional; fsGroup adds group read), emptyDir,
    hostPath and downwardAPI volumes, written under <state_dir>/pods/<uid>/volumes and bound at
    their mount paths (subPath, readOnly) in the container's private mount namespace; ConfigMaps
    and Secrets are refreshed while the pod runs;
  - each container: podinit.py as PID 1 of its own PID, mount and UTS namespaces inside the pod's
    network namespace (private /run with /run/sshd, /tmp and /dev/shm; host name set), running
    command + args (the image is ignored) with env and envFrom (value with $(VAR) expansion,
    fieldRef, configMapKeyRef, secretKeyRef), workingDir, runAsUser/runAsGroup; output appended to
    <state_dir>/logs/<namespace>_<pod>_<container>.log; init containers first, in order;
  - status through /status: Pending (ContainerCreating) -> Running (podIP, hostIP, startTime,
    running container states, readiness from readinessProbe tcpSocket/exec/httpGet or at once
    without one; conditions PodReadyToStartContainers, Initialized, ContainersReady, Ready,
    PodScheduled) -> Succeeded / Failed once no container will run again (terminated exitCode,
    reason Completed or Error; 128+N for signal N), restartPolicy Always/OnFailure restarting with
    a short back-off (0.5 s doubling up to 5 s; probes run every min(periodSeconds, 1) s);
  - deletion (deletionTimestamp, or the pod gone): SIGTERM to each container's main process,
    SIGKILL after the grace period (capped at 5 s), the terminal phase written (Succeeded if every
    container ended with 0, else Failed), namespace removed, then the pod is deleted with
    gracePeriodSeconds=0 if it still exists.

The node (NodeReporter), where the server serves nodes: the Node object with capacity and
allocatable (this machine's cpu, memory and disk, 110 pods, node_resources such as
{"nvidia.com/gpu": "4"}), conditions, addresses and nodeInfo; a Lease in kube-node-lease renewed
every 10 s and node status posted every 10 s, so a real kube-controller-manager keeps the node
Ready and untainted and a real kube-scheduler binds pods to it. Projected serviceAccountToken
sources (what the ServiceAccount admission plugin adds to every pod) are filled through the
TokenRequest API, bound to the pod.

Test hooks (also for other processes): kill_pod(ns, name) SIGKILLs every container of the pod,
which then ends as a SIGKILL ends a real container (exitCode 137, reason Error; phase Failed under
restartPolicy Never, otherwise restarted); evict_pod(ns, name, message) kills it and marks it
Failed with reason Evicted and a DisruptionTarget condition, without restarts. From another
process, use request(state_dir, "kill"|"evict", ns, name[, message]): it drops a JSON file into
<state_dir>/control/ and waits for the kubelet's answer file (<id>.done).

Containers from images (images=build/images/index.json, cluster.py --images): the kubelet pulls
each container's image from the OCI archives `make images` wrote (runtime.ImageStore: the
reference normalized as containerd does, unpacked once per digest with skopeo and umoci; a
reference no archive holds leaves the container waiting in ErrImagePull, then ImagePullBackOff,
with the runtime's message, and the pod Pending) and runs it with runc (runtime.Runtime): an
overlay of the image's root per container (a restart gets a fresh one), Kubernetes'
command/args rules over the image's ENTRYPOINT/CMD, the image's Env under the pod's, workingDir
or the image's WorkingDir, runAsUser/runAsGroup or the image's USER (runAsNonRoot with a root
image: CreateContainerConfigError), containerd's default capabilities with securityContext's
add/drop, the volumes, and the pod's hosts, resolv.conf and hostname, in the pod's network
namespace. Exec probes run with `runc exec`; kill, evict and deletion signal through `runc kill`.
The kubernetes Service in default is proxied to the API server as kube-proxy does (proxy.py) and
every container gets its KUBERNETES_SERVICE_* variables, so in-cluster configuration works.

Without images (the older mode, for the kubelet's own tests): a container runs this machine's
programs, as it finds them on its PATH. image_files
({path in the image: file here}) stands for what the image adds or replaces: the worker image's
/usr/local/bin/mpijob-worker, its /etc/ssh/sshd_config and ssh client settings. They are copied
under <state_dir>/image/root, and every container sees each top folder of them overlaid
(read-only overlayfs) on the host's, so mpirun, orted, sshd and ranks started over ssh find them
where the real image has them. image_bin=[file] is short for /usr/local/bin/<name>. The host's
folders are not changed.

Everything is named after a prefix derived from the state directory (or given): a later Kubelet
on the same state directory, or sweep(prefix), removes what a crashed run left behind.
"""

import base64
import hashlib
import ipaddress
import json
import logging
import os
import pwd
import queue
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid

import netns
import proxy
import runtime
from kube import KubeError

log = logging.getLogger("kubelet")

NODE_NAME = "sim-node"
DEFAULT_POD_CIDR = "10.244.0.0/16"
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
GRACE_CAP = 5.0
BACKOFF_START = 0.5
BACKOFF_CAP = 5.0
PROBE_PERIOD_CAP = 1.0
VOLUME_REFRESH = 1.0
PROXY_SYNC = 5.0
TICK = 0.1
PODINIT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "podinit.py")
# Mount points under these exist only inside the container (podinit makes them).
PRIVATE_ROOTS = ("/tmp", "/run", "/var/run", "/dev/shm", "/proc", "/sys", "/dev")


def now_rfc3339():
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def prefix_for(state_dir):
    """The name prefix a Kubelet on state_dir uses: 'k' and 5 hex digits of its path's hash."""
    return "k" + hashlib.sha1(os.path.abspath(state_dir).encode()).hexdigest()[:5]


def request(state_dir, action, namespace, name, message=None, timeout=15.0):
    """Asks the Kubelet running on state_dir (in any process) to kill or evict a pod; returns its
    answer {"ok": bool, "error": str}. Raises TimeoutError when no answer comes."""
    if action not in ("kill", "evict"):
        raise ValueError("action %r: want kill or evict" % action)
    d = os.path.join(state_dir, "control")
    os.makedirs(d, exist_ok=True)
    rid = uuid.uuid4().hex
    tmp = os.path.join(d, rid + ".tmp")
    with open(tmp, "w") as f:
        json.dump({"action": action, "namespace": namespace, "name": name, "message": message}, f)
    os.rename(tmp, os.path.join(d, rid + ".json"))
    done = os.path.join(d, rid + ".done")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if os.path.exists(done):
            with open(done) as f:
                ans = json.load(f)
            os.unlink(done)
            return ans
        time.sleep(0.05)
    raise TimeoutError("no kubelet answered %s %s/%s in %s" % (action, namespace, name, state_dir))


def _expand(text, env):
    """Kubernetes' $(VAR) expansion: defined names are replaced, $$ is a $, the rest stays."""
    if not isinstance(text, str) or "$" not in text:
        return text
    out, i, n = [], 0, len(text)
    while i < n:
        ch = text[i]
        if ch == "$" and i + 1 < n:
            nxt = text[i + 1]
            if nxt == "$":
                out.append("$")
                i += 2
                continue
            if nxt == "(":
                end = text.find(")", i + 2)
                if end > 0:
                    name = text[i + 2:end]
                    if name in env:
                        out.append(env[name])
                    else:
                        out.append(text[i:end + 1])
                    i = end + 1
                    continue
        out.append(ch)
        i += 1
    return "".join(out)


def _field(pod, path):
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


class _Missing(Exception):
    """A ConfigMap or Secret the pod needs does not exist (yet)."""


class Container:
    def __init__(self, spec, init=False):
        self.spec = spec
        self.name = spec.get("name", "")
        self.init = init
        self.proc = None
        self.logf = None
        self.state = "waiting"
        self.waiting_reason = "ContainerCreating"
        self.started_at = None
        self.finished_at = None
        self.exit_code = None
        self.message = None    # the termination message of the last exit
        self.reason = None
        self.restart_count = 0
        self.last_terminated = None
        self.ready = False
        self.next_start = 0.0
        self.backoff = BACKOFF_START
        self.probe_next = 0.0
        self.probe_ok = 0
        self.probe_fail = 0
        self.done = False      # will not run again
        self.waiting_message = None
        self.live_next = 0.0   # livenessProbe: when it runs next (0: not yet started)
        self.live_fail = 0
        self.kill_at = 0.0     # SIGKILL then, after a liveness failure's SIGTERM
        self.image = None      # runtime.Image, once pulled (images mode)
        self.ctr = None        # runtime.Container while it exists (images mode)
        self.pull_failures = 0
        self.serial = 0        # containers made for this spec, for unique runc ids
        self.runc_id = None

    def terminated_state(self):
        st = {"exitCode": self.exit_code, "reason": self.reason, "startedAt": self.started_at,
              "finishedAt": self.finished_at, "containerID": self.container_id()}
        if self.message:
            st["message"] = self.message
        return st

    def container_id(self):
        if self.runc_id is not None:
            return "runc://%s" % self.runc_id
        return "sim://%s-%d" % (self.name, self.restart_count)

    def status(self):
        st = {"name": self.name,
              "image": self.image.normalized if self.image is not None else self.spec.get("image", ""),
              "imageID": self.image.image_id if self.image is not None else "",
              "containerID": self.container_id(), "ready": self.ready,
              "restartCount": self.restart_count, "started": self.state == "running",
              "lastState": {"terminated": self.last_terminated} if self.last_terminated else {}}
        if self.state == "running":
            st["state"] = {"running": {"startedAt": self.started_at}}
        elif self.state == "terminated":
            st["state"] = {"terminated": self.terminated_state()}
        else:
            st["state"] = {"waiting": {"reason": self.waiting_reason}}
            if self.waiting_message:
                st["state"]["waiting"]["message"] = self.waiting_message
            if self.restart_count == 0 and self.waiting_reason != "CrashLoopBackOff":
                st["containerID"] = ""
        return st


class PodRunner:
    """Runs one pod in its own thread; only that thread touches the pod's processes."""

    def __init__(self, kubelet, pod):
        self.k = kubelet
        self.pod = pod
        meta = pod["metadata"]
        self.ns = meta["namespace"]
        self.name = meta["name"]
        self.uid = meta["uid"]
        self.path = "/api/v1/namespaces/%s/pods/%s" % (self.ns, self.name)
        spec = pod.get("spec") or {}
        self.spec = spec
        self.policy = spec.get("restartPolicy") or "Always"
        self.hostname = spec.get("hostname") or self.name[:63]
        self.subdomain = spec.get("subdomain") or ""
        self.dir = os.path.join(kubelet.state_dir, "pods", self.uid)
        self.init_containers = [Container(c, init=True) for c in spec.get("initContainers") or []]
        self.containers = [Container(c) for c in spec.get("containers") or []]
        self.net = None
        self.start_time = None
        self.phase = "Pending"
        self.reason = None
        self.message = None
        self.conditions = {}
        self.last_status = None
        self.delete_req = None        # (grace seconds, api_gone)
        self.kill_req = False
        self.evict_req = None
        self.finished = threading.Event()
        self.volume_sources = {}      # volume name -> host path
        self.tokens = {}              # (serviceaccount, audience, seconds) -> (token, renew at)
        self.next_refresh = 0.0
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._run, name="pod-%s/%s" % (self.ns, self.name), daemon=True)

    # ---------------------------------------------------------------- requests (any thread)
    def request_delete(self, grace, api_gone):
        with self.lock:
            if self.delete_req is None or api_gone:
                g = grace if self.delete_req is None else min(grace, self.delete_req[0])
                self.delete_req = (g, api_gone or (self.delete_req or (0, False))[1])

    def request_kill(self):
        self.kill_req = True

    def request_evict(self, message):
        self.evict_req = message or "The node was low on resource: memory. (simulated eviction)"

    def update(self, pod):
        self.pod = pod

    # ---------------------------------------------------------------- status
    def _cond(self, ctype, ok, reason=None):
        status = "True" if ok else "False"
        old = self.conditions.get(ctype)
        if old and old["status"] == status and old.get("reason") == reason:
            return
        c = {"type": ctype, "status": status, "lastProbeTime": None,
             "lastTransitionTime": now_rfc3339()}
        if reason:
            c["reason"] = reason
        self.conditions[ctype] = c

    def _status(self):
        initialized = all(c.done and c.exit_code == 0 for c in self.init_containers)
        ready = initialized and bool(self.containers) and all(c.ready for c in self.containers) \
            and self.phase == "Running"
        self._cond("PodReadyToStartContainers", self.net is not None and self.phase in ("Pending", "Running"))
        self._cond("Initialized", initialized, None if initialized else "ContainersNotInitialized")
        self._cond("Ready", ready, None if ready else ("PodCompleted" if self.phase in ("Succeeded", "Failed")
                                                       else "ContainersNotReady"))
        self._cond("ContainersReady", ready, None if ready else ("PodCompleted" if self.phase in ("Succeeded", "Failed")
                                                                 else "ContainersNotReady"))
        self._cond("PodScheduled", True)
        order = ["DisruptionTarget", "PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady",
                 "PodScheduled"]
        st = {"phase": self.phase,
              "conditions": [self.conditions[t] for t in order if t in self.conditions],
              "hostIP": self.k.host_ip, "hostIPs": [{"ip": self.k.host_ip}],
              "containerStatuses": [c.status() for c in self.containers],
              "qosClass": self._qos()}
        if self.init_containers:
            st["initContainerStatuses"] = [c.status() for c in self.init_containers]
        if self.net is not None or self.pod_ip:
            st["podIP"] = self.pod_ip
            st["podIPs"] = [{"ip": self.pod_ip}]
        if self.start_time:
            st["startTime"] = self.start_time
        if self.reason:
            st["reason"] = self.reason
        if self.message:
            st["message"] = self.message
        return st

    pod_ip = None

    def _qos(self):
        """The pod's QoS class: the one the API server set at creation (a real kube-apiserver
        does, and refuses any other later: the field is immutable), else computed as it does,
        from the cpu and memory requests and limits alone (extended resources such as
        nvidia.com/gpu do not count)."""
        given = (self.pod.get("status") or {}).get("qosClass")
        if given:
            return given
        res = [c.get("resources") or {} for c in
               (self.spec.get("initContainers") or []) + (self.spec.get("containers") or [])]

        def pick(r, kind):
            return {k: v for k, v in (r.get(kind) or {}).items() if k in ("cpu", "memory") and str(v) not in ("0", "")}
        if not any(pick(r, "limits") or pick(r, "requests") for r in res):
            return "BestEffort"
        for r in res:
            limits = pick(r, "limits")
            requests = dict(limits, **pick(r, "requests"))   # requests default to the limits
            if set(limits) != {"cpu", "memory"} or requests != limits:
                return "Burstable"
        return "Guaranteed"

    def _publish(self):
        st = self._status()
        if st == self.last_status:
            return
        try:
            self.k.kube.patch_status(self.path, {"status": st})
            self.last_status = st
        except KubeError as e:
            if e.code == 404:
                self.last_status = st
                return
            log.warning("%s/%s: status: %s", self.ns, self.name, e)
        except OSError as e:
            log.warning("%s/%s: status: %s", self.ns, self.name, e)

    # ---------------------------------------------------------------- volumes
    def _fetch(self, kind, name, optional):
        obj = self.k.kube.get("/api/v1/namespaces/%s/%s/%s" % (self.ns, kind, name))
        if obj is None and not optional:
            raise _Missing("%s %s/%s not found" % (kind[:-1], self.ns, name))
        return obj

    @staticmethod
    def _data(obj, secret):
        out = {}
        if obj is None:
            return out
        for k, v in (obj.get("data") or {}).items():
            out[k] = base64.b64decode(v) if secret else str(v).encode()
        if not secret:
            for k, v in (obj.get("binaryData") or {}).items():
                out[k] = base64.b64decode(v)
        return out

    def _projection(self, vol):
        """[(relative path, bytes, mode)] for a configMap, secret or downwardAPI volume."""
        files = []
        fs_group = (self.spec.get("securityContext") or {}).get("fsGroup")

        def add_source(data, items, default_mode, what):
            if items:
                for it in items:
                    if it.get("key") not in data:
                        if what[1]:
                            continue
                        raise _Missing("%s has no key %s" % (what[0], it.get("key")))
                    files.append((it.get("path") or it["key"], data[it["key"]], it.get("mode", default_mode)))
            else:
                for key, val in data.items():
                    files.append((key, val, default_mode))

        def add_downward(items, default_mode):
            for it in items or []:
                if "fieldRef" in it:
                    val = _field(self.pod, it["fieldRef"]["fieldPath"])
                else:
                    raise ValueError("downwardAPI item %s: only fieldRef is supported" % it.get("path"))
                files.append((it["path"], str(val).encode(), it.get("mode", default_mode)))

        if "configMap" in vol or "secret" in vol:
            secret = "secret" in vol
            src = vol["secret" if secret else "configMap"]
            name = src.get("secretName" if secret else "name")
            optional = bool(src.get("optional"))
            obj = self._fetch("secrets" if secret else "configmaps", name, optional)
            add_source(self._data(obj, secret), src.get("items"), src.get("defaultMode", 0o644),
                       ("%s %s" % ("secret" if secret else "configmap", name), optional))
        elif "downwardAPI" in vol:
            add_downward(vol["downwardAPI"].get("items"), vol["downwardAPI"].get("defaultMode", 0o644))
        elif "projected" in vol:
            dm = vol["projected"].get("defaultMode", 0o644)
            for s in vol["projected"].get("sources") or []:
                if "configMap" in s or "secret" in s:
                    secret = "secret" in s
                    src = s["secret" if secret else "configMap"]
                    optional = bool(src.get("optional"))
                    obj = self._fetch("secrets" if secret else "configmaps", src.get("name"), optional)
                    add_source(self._data(obj, secret), src.get("items"), dm,
                               ("%s %s" % ("secret" if secret else "configmap", src.get("name")), optional))
                elif "downwardAPI" in s:
                    add_downward(s["downwardAPI"].get("items"), dm)
                elif "serviceAccountToken" in s:
                    src = s["serviceAccountToken"]
                    files.append((src.get("path") or "token", self._token(src).encode(), dm))
                else:
                    log.warning("%s/%s: projected source %s is not simulated", self.ns, self.name, list(s))
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
                         "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": self.name, "uid": self.uid}}}
        code, obj = self.k.kube.request("POST", "/api/v1/namespaces/%s/serviceaccounts/%s/token" % (self.ns, sa), body)
        if code not in (200, 201) or not isinstance(obj, dict) or not (obj.get("status") or {}).get("token"):
            raise _Missing("token of serviceaccount %s/%s: HTTP %d %s" % (self.ns, sa, code, str(obj)[:200]))
        token = obj["status"]["token"]
        self.tokens[key] = (token, time.monotonic() + 0.8 * seconds)
        return token

    def _write_projection(self, vol, files, fs_group):
        d = os.path.join(self.dir, "volumes", vol["name"])
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

    def _prepare_volumes(self, refresh=False):
        fs_group = (self.spec.get("securityContext") or {}).get("fsGroup")
        for vol in self.spec.get("volumes") or []:
            name = vol.get("name")
            if any(k in vol for k in ("configMap", "secret", "downwardAPI", "projected")):
                files, fsg = self._projection(vol)
                self.volume_sources[name] = self._write_projection(vol, files, fsg)
            elif refresh:
                continue
            elif "emptyDir" in vol:
                d = os.path.join(self.dir, "volumes", name)
                os.makedirs(d, exist_ok=True)
                os.chmod(d, 0o777 if fs_group is None else 0o2775)
                if fs_group is not None:
                    os.chown(d, -1, fs_group)
                self.volume_sources[name] = d
            elif "hostPath" in vol:
                hp = vol["hostPath"]
                p, t = hp.get("path"), hp.get("type") or ""
                # What is created on the host for the pod is recorded, so cleanup() removes it.
                if t in ("", "DirectoryOrCreate") and not os.path.exists(p):
                    self.k.create_recorded(p, True)
                elif t == "FileOrCreate" and not os.path.exists(p):
                    self.k.create_recorded(p, False)
                elif not os.path.exists(p):
                    raise _Missing("hostPath %s (type %s) does not exist" % (p, t))
                self.volume_sources[name] = p
            else:
                raise ValueError("volume %s: only configMap, secret, emptyDir, hostPath, downwardAPI and "
                                 "projected volumes are simulated" % name)

    def _mounts(self, c):
        out = []
        for m in c.spec.get("volumeMounts") or []:
            src = self.volume_sources.get(m.get("name"))
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
            ro = bool(m.get("readOnly")) or any(k in vol for k in ("configMap", "secret", "downwardAPI", "projected"))
            out.append({"source": src, "target": target, "readOnly": ro})
        return out

    # ---------------------------------------------------------------- environment
    def _env(self, c):
        sc = dict(self.spec.get("securityContext") or {})
        sc.update({k: v for k, v in (c.spec.get("securityContext") or {}).items() if v is not None})
        uid = sc.get("runAsUser")
        home = "/root"
        if uid is not None and uid != 0:
            try:
                home = pwd.getpwuid(uid).pw_dir
            except KeyError:
                home = "/"
        # From an image, PATH and HOME are the image's (runtime.oci_config); the pod's variables
        # come on top.
        env = {} if self.k.runtime else {"PATH": DEFAULT_PATH, "HOSTNAME": self.hostname, "HOME": home}
        # As a kubelet does: the kubernetes Service's variables first (in-cluster configuration
        # reads them), the container's own over them.
        if self.k.proxy is not None:
            env.update(self.k.proxy.env())
        for src in c.spec.get("envFrom") or []:
            prefix = src.get("prefix", "")
            if "configMapRef" in src:
                ref = src["configMapRef"]
                data = self._data(self._fetch("configmaps", ref.get("name"), bool(ref.get("optional"))), False)
            elif "secretRef" in src:
                ref = src["secretRef"]
                data = self._data(self._fetch("secrets", ref.get("name"), bool(ref.get("optional"))), True)
            else:
                continue
            for k, v in data.items():
                env[prefix + k] = v.decode(errors="replace")
        for e in c.spec.get("env") or []:
            name = e.get("name")
            if "valueFrom" not in e:
                env[name] = _expand(e.get("value", ""), env)
                continue
            vf = e["valueFrom"]
            if "fieldRef" in vf:
                env[name] = str(_field(self.pod, vf["fieldRef"].get("fieldPath", "")))
            elif "configMapKeyRef" in vf or "secretKeyRef" in vf:
                secret = "secretKeyRef" in vf
                ref = vf["secretKeyRef" if secret else "configMapKeyRef"]
                data = self._data(self._fetch("secrets" if secret else "configmaps", ref.get("name"),
                                              bool(ref.get("optional"))), secret)
                if ref.get("key") in data:
                    env[name] = data[ref["key"]].decode(errors="replace")
                elif not ref.get("optional"):
                    raise _Missing("key %s of %s not found" % (ref.get("key"), ref.get("name")))
            elif "resourceFieldRef" in vf:
                r = vf["resourceFieldRef"].get("resource", "")
                kind, _, res = r.partition(".")
                val = ((c.spec.get("resources") or {}).get(kind) or {}).get(res)
                env[name] = str(val if val is not None else (os.cpu_count() if res == "cpu" else 0))
        command = [_expand(a, env) for a in (c.spec.get("command") or [])]
        args = [_expand(a, env) for a in (c.spec.get("args") or [])]
        argv = command + args
        groups = list(sc.get("supplementalGroups") or [])
        if sc.get("fsGroup") is not None:
            groups.append(sc["fsGroup"])
        gid = sc.get("runAsGroup")
        if gid is None and uid is not None:
            try:
                gid = pwd.getpwuid(uid).pw_gid
            except KeyError:
                gid = uid
        return {"hostname": self.hostname, "argv": argv, "command": command, "args": args, "env": env,
                "workingDir": c.spec.get("workingDir"), "uid": uid,
                "gid": gid, "groups": groups if gid is not None else None}

    # ---------------------------------------------------------------- processes
    def _start_from_image(self, c):
        """Images mode: the container from its image with runc, in the pod's network namespace."""
        spec = self._env(c)
        sc = dict(self.spec.get("securityContext") or {})
        sc.update({k: v for k, v in (c.spec.get("securityContext") or {}).items() if v is not None})
        os.makedirs(self.dir, exist_ok=True)
        hostname_file = os.path.join(self.dir, "hostname")
        with open(hostname_file, "w") as f:
            f.write(self.hostname + "\n")
        etc = os.path.join(netns.NETNS_ETC, self.net.ns)
        cs = runtime.ContainerSpec(
            command=spec["command"], args=spec["args"], env=spec["env"],
            working_dir=spec["workingDir"], run_as_user=sc.get("runAsUser"),
            run_as_group=sc.get("runAsGroup"), groups=spec["groups"] or [],
            security_context=sc, mounts=self._mounts(c), hostname=self.hostname,
            netns_path=os.path.join("/var/run/netns", self.net.ns),
            etc_files={"/etc/hosts": os.path.join(etc, "hosts"),
                       "/etc/resolv.conf": os.path.join(etc, "resolv.conf"),
                       "/etc/hostname": hostname_file})
        c.serial += 1
        c.runc_id = "%s-%s-%s-%s-%d" % (self.k.prefix, self.name[:40], self.uid[:8], c.name, c.serial)
        c.ctr = self.k.runtime.create(c.runc_id, c.image, cs,
                                      os.path.join(self.k.containers_dir, c.runc_id))
        c.proc = c.ctr.start(self.k.log_path(self.ns, self.name, c.name))

    def _start(self, c):
        if self.k.runtime:
            self._start_from_image(c)
            self._started(c)
            return
        spec = self._env(c)
        spec["mounts"] = self._mounts(c)
        if self.k.image_overlays:
            spec["overlays"] = self.k.image_overlays
        os.makedirs(self.dir, exist_ok=True)
        spec_path = os.path.join(self.dir, "%s%s.json" % ("init-" if c.init else "", c.name))
        with open(spec_path, "w") as f:
            json.dump(spec, f)
        logp = self.k.log_path(self.ns, self.name, c.name)
        logf = open(logp, "ab")
        cmd = ["ip", "netns", "exec", self.net.ns,
               "unshare", "--fork", "--pid", "--mount-proc", "--mount", "--uts", "--propagation", "private",
               "--kill-child=SIGKILL", "--", sys.executable, PODINIT, spec_path]
        try:
            c.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=logf, stderr=logf,
                                      start_new_session=True, env={"PATH": DEFAULT_PATH, "LANG": "C.UTF-8"})
        finally:
            logf.close()
        self._started(c)

    def _started(self, c):
        c.state = "running"
        c.waiting_message = None
        c.live_next, c.live_fail, c.kill_at = 0.0, 0, 0.0
        c.started_at = now_rfc3339()
        c.ready = False
        c.probe_ok = c.probe_fail = 0
        probe = c.spec.get("readinessProbe")
        c.probe_next = time.monotonic() + (probe.get("initialDelaySeconds", 0) if probe else 0)
        if not probe and not c.init:
            c.ready = True

    def _main_pid(self, c):
        """The host pid of the container's PID 1 (podinit), or None."""
        if c.proc is None:
            return None
        if c.ctr is not None:
            return c.ctr.pid()
        try:
            with open("/proc/%d/task/%d/children" % (c.proc.pid, c.proc.pid)) as f:
                kids = f.read().split()
            return int(kids[0]) if kids else None
        except OSError:
            return None

    def _signal(self, c, sig):
        """Signals a running container; with SIGKILL, returns once it ended. False (and an error
        in the log naming the container) when that could not be done: the container still
        runs."""
        if c.proc is None or c.proc.poll() is not None:
            return True
        if c.ctr is not None:
            try:
                problems = c.ctr.signal(sig)
            except runtime.KillError as e:
                log.error("%s/%s: container %s: %s", self.ns, self.name, c.name, e)
                return False
            if problems:
                log.warning("%s/%s: container %s killed, the hard way: %s", self.ns, self.name, c.name,
                            "; ".join(problems))
            return True
        pid = c.proc.pid if sig == signal.SIGKILL else self._main_pid(c)
        try:
            os.kill(pid if pid else c.proc.pid, signal.SIGKILL if pid is None else sig)
        except ProcessLookupError:
            pass
        if sig == signal.SIGKILL:
            try:
                c.proc.wait(timeout=runtime.KILL_WAIT)
            except subprocess.TimeoutExpired:
                log.error("%s/%s: container %s: its process %d still runs %.0f s after SIGKILL",
                          self.ns, self.name, c.name, c.proc.pid, runtime.KILL_WAIT)
                return False
        return True

    def _reap(self, c):
        """Records the exit of a running container; True if it ended."""
        if c.state != "running" or c.proc is None:
            return False
        rc = c.proc.poll()
        if rc is None:
            return False
        code = rc if rc >= 0 else 128 - rc
        if c.ctr is not None:
            try:
                c.ctr.remove()
            except runtime.KillError as e:
                log.error("%s/%s: container %s: %s", self.ns, self.name, c.name, e)
            c.ctr = None
        c.exit_code = code
        c.reason = "Completed" if code == 0 else "Error"
        c.message = self._termination_message(c)
        c.finished_at = now_rfc3339()
        c.state = "terminated"
        c.ready = False
        c.proc = None
        return True

    def _termination_message(self, c):
        """terminationMessagePolicy FallbackToLogsOnError: after a failure, the end of the
        container's log, as the kubelet takes it (the last 80 lines, at most 2048 bytes). The
        terminationMessagePath file is not read: containers share this machine's /dev."""
        if c.exit_code == 0 or c.spec.get("terminationMessagePolicy") != "FallbackToLogsOnError":
            return None
        try:
            with open(self.k.log_path(self.ns, self.name, c.name), "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - 2048))
                tail = f.read()
        except OSError:
            return None
        text = tail.decode("utf-8", errors="replace")
        lines = text.split("\n")
        if len(tail) == 2048 and len(lines) > 1:
            lines = lines[1:]          # the first line was cut
        return "\n".join(lines[-81:]).strip("\n") or None

    def _after_exit(self, c, can_restart):
        restart = can_restart and (self.policy == "Always" and not c.init
                                   or self.policy in ("Always", "OnFailure") and c.exit_code != 0)
        if not restart:
            c.done = True
            return
        c.last_terminated = c.terminated_state()
        c.restart_count += 1
        c.state = "waiting"
        c.waiting_reason = "CrashLoopBackOff"
        c.next_start = time.monotonic() + c.backoff
        c.backoff = min(c.backoff * 2, BACKOFF_CAP)

    # ---------------------------------------------------------------- probes
    def _port(self, port):
        if isinstance(port, int) or (isinstance(port, str) and port.isdigit()):
            return int(port)
        for c in self.spec.get("containers") or []:
            for p in c.get("ports") or []:
                if p.get("name") == port:
                    return int(p["containerPort"])
        raise ValueError("named port %s not found" % port)

    def _probe_once(self, c, probe):
        timeout = float(probe.get("timeoutSeconds", 1))
        try:
            if "tcpSocket" in probe:
                with socket.create_connection((self.pod_ip, self._port(probe["tcpSocket"]["port"])), timeout=timeout):
                    return True
            if "exec" in probe and c.ctr is not None:
                return c.ctr.exec(probe["exec"].get("command") or [], max(timeout, 1.0)) == 0
            if "exec" in probe:
                pid = self._main_pid(c)
                if pid is None:
                    return False
                env = self._env(c)["env"]
                p = subprocess.run(["nsenter", "-t", str(pid), "-m", "-u", "-n", "-p", "--"]
                                   + list(probe["exec"].get("command") or []),
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                                   timeout=max(timeout, 1.0))
                return p.returncode == 0
            if "httpGet" in probe:
                hg = probe["httpGet"]
                url = "http://%s:%d%s" % (self.pod_ip, self._port(hg.get("port")), hg.get("path", "/"))
                try:
                    with urllib.request.urlopen(url, timeout=timeout) as r:
                        return 200 <= r.status < 400
                except urllib.error.HTTPError as e:
                    return 200 <= e.code < 400
            if "grpc" in probe:
                return False
        except (OSError, subprocess.TimeoutExpired, ValueError, _Missing):
            return False
        return True

    def _probe(self, c):
        probe = c.spec.get("readinessProbe")
        if not probe or c.state != "running" or time.monotonic() < c.probe_next:
            return
        c.probe_next = time.monotonic() + min(float(probe.get("periodSeconds", 10)), PROBE_PERIOD_CAP)
        if self._probe_once(c, probe):
            c.probe_ok += 1
            c.probe_fail = 0
            if c.probe_ok >= int(probe.get("successThreshold", 1)):
                c.ready = True
        else:
            c.probe_fail += 1
            c.probe_ok = 0
            if c.probe_fail >= int(probe.get("failureThreshold", 3)):
                c.ready = False

    def _liveness(self, c):
        """livenessProbe: after failureThreshold failures in a row the container is stopped as a
        kubelet stops it (SIGTERM, SIGKILL after the grace period, capped) and restarts as its
        restartPolicy says."""
        probe = c.spec.get("livenessProbe")
        if not probe or c.state != "running" or c.proc is None:
            return
        now = time.monotonic()
        if c.kill_at and now >= c.kill_at:
            c.kill_at = 0.0
            self._signal(c, signal.SIGKILL)
            return
        if c.live_next == 0.0:
            c.live_next = now + float(probe.get("initialDelaySeconds", 0))
        if now < c.live_next:
            return
        c.live_next = now + min(float(probe.get("periodSeconds", 10)), PROBE_PERIOD_CAP)
        if self._probe_once(c, probe):
            c.live_fail = 0
            return
        c.live_fail += 1
        if c.live_fail >= int(probe.get("failureThreshold", 3)):
            log.info("%s/%s: container %s failed its liveness probe %d times: restarting it",
                     self.ns, self.name, c.name, c.live_fail)
            c.live_fail = 0
            self._signal(c, signal.SIGTERM)
            grace = self.spec.get("terminationGracePeriodSeconds", 30)
            c.kill_at = now + min(float(grace if grace is not None else 30), GRACE_CAP)

    # ---------------------------------------------------------------- lifecycle
    def _run(self):
        try:
            self._lifecycle()
        except Exception:
            log.exception("%s/%s: pod runner failed", self.ns, self.name)
            for c in self.init_containers + self.containers:
                self._signal(c, signal.SIGKILL)
        finally:
            self._teardown()
            self.finished.set()
            self.k.pod_finished(self)

    def _wait_or_delete(self, seconds):
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if self.delete_req or self.k.stopping.is_set():
                return False
            time.sleep(TICK)
        return True

    def _lifecycle(self):
        self.start_time = now_rfc3339()
        # The sandbox: volumes (waiting for missing ConfigMaps/Secrets) and the network.
        while True:
            if self.delete_req or self.k.stopping.is_set():
                return self._terminate()
            try:
                self._prepare_volumes()
                break
            except _Missing as e:
                self.message = str(e)
                self._publish()
                if not self._wait_or_delete(1.0):
                    return self._terminate()
            except ValueError as e:
                self.phase, self.reason, self.message = "Failed", "UnsupportedPod", str(e)
                self._publish()
                return
        self.message = None
        net = self.k.net.add_pod()
        with self.k._lock:
            self.pod_ip = net.ip
            self.net = net
        self.k.pod_network_changed(self)
        self._publish()

        # Init containers, one after the other.
        for c in self.init_containers:
            while not c.done:
                if self.delete_req or self.k.stopping.is_set():
                    return self._terminate()
                if self.kill_req or self.evict_req:
                    self.kill_req = False
                    self._signal(c, signal.SIGKILL)
                if c.state == "waiting" and time.monotonic() >= c.next_start:
                    if self._try_start(c) is False:
                        return
                    self._publish()
                if self._reap(c):
                    self._after_exit(c, not self.evict_req)
                    if c.done and c.exit_code != 0:
                        self.phase = "Failed"
                        for m in self.containers:
                            m.waiting_reason = "PodInitializing"
                        self._publish()
                        return
                    self._publish()
                if self.evict_req and c.done:
                    break
                time.sleep(TICK)
            if self.evict_req:
                return self._evicted()

        for c in self.containers:
            c.waiting_reason = "ContainerCreating"
        while True:
            if self.delete_req or self.k.stopping.is_set():
                return self._terminate()
            if self.evict_req:
                return self._evicted()
            if self.kill_req:
                self.kill_req = False
                for c in self.containers:
                    # The kill is seen as the container's own end; one that could not be killed
                    # runs on, and the log says so.
                    self._signal(c, signal.SIGKILL)
            for c in self.containers:
                if c.state == "waiting" and not c.done and time.monotonic() >= c.next_start:
                    if self._try_start(c) is False:
                        return
            for c in self.containers:
                if self._reap(c):
                    self._after_exit(c, True)
                self._probe(c)
                self._liveness(c)
            if all(c.done for c in self.containers):
                failed = any(c.exit_code != 0 for c in self.containers)
                self.phase = "Failed" if failed else "Succeeded"
                self._publish()
                return
            # Pending until a container has started (one waiting on its image keeps it so).
            if any(c.state != "waiting" or c.restart_count > 0 for c in self.containers):
                self.phase = "Running"
            if time.monotonic() >= self.next_refresh:
                self.next_refresh = time.monotonic() + VOLUME_REFRESH
                try:
                    self._prepare_volumes(refresh=True)
                except (_Missing, ValueError, OSError, KubeError) as e:
                    log.debug("%s/%s: volume refresh: %s", self.ns, self.name, e)
            self._publish()
            time.sleep(TICK)

    def _pull(self, c):
        """Images mode: the container's image, or False after recording the pull failure as a
        kubelet does (ErrImagePull, then ImagePullBackOff while it waits to try again)."""
        if c.image is not None:
            return True
        try:
            c.image = self.k.store.pull(c.spec.get("image") or "")
            c.pull_failures = 0
            c.waiting_reason, c.waiting_message = "ContainerCreating", None
            return True
        except runtime.PullError as e:
            c.pull_failures += 1
            c.waiting_reason = "ErrImagePull"
            c.waiting_message = str(e)
            self._publish()
            # The back-off a kubelet uses for pulls: 10 s doubling; shortened here as restarts are.
            wait = min(BACKOFF_START * 2 ** c.pull_failures, BACKOFF_CAP * 2)
            if self._wait_or_delete(min(wait, 1.0)):
                c.waiting_reason = "ImagePullBackOff"
                c.waiting_message = 'Back-off pulling image "%s"' % c.spec.get("image", "")
                self._publish()
            c.next_start = time.monotonic() + max(0.0, wait - 1.0)
            return False

    def _try_start(self, c):
        if self.k.runtime and not self._pull(c):
            return None
        try:
            self._start(c)
            return True
        except runtime.ConfigError as e:
            c.waiting_reason = "CreateContainerConfigError"
            c.waiting_message = "%s (pod: \"%s_%s(%s)\", container: %s)" % (e, self.name, self.ns, self.uid, c.name)
            c.next_start = time.monotonic() + 1.0
            self._publish()
            return None
        except _Missing as e:
            c.waiting_reason = "CreateContainerConfigError"
            self.message = str(e)
            c.next_start = time.monotonic() + 1.0
            self._publish()
            return None
        except (ValueError, OSError, runtime.CreateError) as e:
            c.state = "terminated"
            c.exit_code, c.reason, c.finished_at = 128, "StartError", now_rfc3339()
            c.started_at = c.started_at or c.finished_at
            self.message = "container %s: %s" % (c.name, e)
            self._after_exit(c, True)
            self._publish()
            return None

    def _kill_all(self, grace):
        conts = self.init_containers + self.containers
        for c in conts:
            self._signal(c, signal.SIGTERM)
        end = time.monotonic() + grace
        while time.monotonic() < end and any(c.proc is not None and c.proc.poll() is None for c in conts):
            time.sleep(0.05)
        for c in conts:
            self._signal(c, signal.SIGKILL)
            self._reap(c)

    def _evicted(self):
        self._kill_all(0)
        for c in self.containers + self.init_containers:
            c.done = True
            if c.state == "waiting":
                c.state, c.exit_code, c.reason = "terminated", 137, "ContainerStatusUnknown"
                c.started_at = c.finished_at = now_rfc3339()
        self.phase, self.reason, self.message = "Failed", "Evicted", self.evict_req
        self._cond("DisruptionTarget", True, "TerminationByKubelet")
        self.conditions["DisruptionTarget"]["message"] = self.evict_req
        self._publish()

    def _terminate(self):
        grace, api_gone = self.delete_req or (0, True)
        if self.k.stopping.is_set():
            grace = 0
        self._kill_all(grace)
        if api_gone or self.k.stopping.is_set():
            return
        # As a kubelet does (1.27 on): a deleted pod's last status is a terminal phase, Succeeded
        # when every container ended with 0, else Failed; then it is deleted for good.
        for c in self.init_containers + self.containers:
            c.done = True
        ok = bool(self.containers) and all(c.state == "terminated" and c.exit_code == 0 for c in self.containers)
        self.phase = "Succeeded" if ok else "Failed"
        self._publish()

    def _teardown(self):
        with self.k._lock:   # hosts files are written from other runners' threads under this lock
            net, self.net = self.net, None
        if net is not None:
            self.k.pod_network_changed(self)
            self.k.net.remove_pod(net)


def _microtime():
    t = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + ".%06dZ" % int((t % 1) * 1e6)


def _memory_kib():
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 4 * 1024 * 1024


class NodeReporter:
    """The node side of a kubelet: registers the Node (capacity and allocatable, conditions,
    addresses, nodeInfo), renews its Lease in kube-node-lease every LEASE_RENEW seconds and posts
    node status every STATUS_HEARTBEAT seconds, so that kube-controller-manager's node lifecycle
    controller keeps it Ready and untainted. Where the server serves no nodes (the double), it says
    so once and stops; where kube-node-lease does not exist, it goes on without a Lease."""

    LEASE_NS = "kube-node-lease"
    LEASE_DURATION = 40
    LEASE_RENEW = 10.0
    STATUS_HEARTBEAT = 10.0

    def __init__(self, kubelet, extra_resources=None):
        self.k = kubelet
        self.kube = kubelet.kube
        self.node = kubelet.node
        self.extra = dict(extra_resources or {})
        self.uid = None
        self.since = now_rfc3339()
        self.lease_ok = True
        boot = ""
        try:
            with open("/proc/sys/kernel/random/boot_id") as f:
                boot = f.read().strip()
        except OSError:
            pass
        self.boot_id = boot
        try:
            with open("/etc/machine-id") as f:
                self.machine_id = f.read().strip()
        except OSError:
            self.machine_id = hashlib.sha1(self.node.encode()).hexdigest()[:32]

    def resources(self):
        stat = os.statvfs(self.k.state_dir)
        res = {"cpu": str(os.cpu_count() or 1), "memory": "%dKi" % _memory_kib(), "pods": "110",
               "ephemeral-storage": "%dKi" % (stat.f_blocks * stat.f_frsize // 1024),
               "hugepages-2Mi": "0", "hugepages-1Gi": "0"}
        res.update(self.extra)
        return res

    def status(self):
        now = now_rfc3339()
        arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(os.uname().machine, os.uname().machine)

        def cond(ctype, status, reason, message):
            return {"type": ctype, "status": status, "reason": reason, "message": message,
                    "lastHeartbeatTime": now, "lastTransitionTime": self.since}
        res = self.resources()
        return {
            "capacity": res, "allocatable": res,
            "conditions": [
                cond("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
                cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                cond("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
                cond("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
            ],
            "addresses": [{"type": "InternalIP", "address": self.k.host_ip}, {"type": "Hostname", "address": self.node}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {"machineID": self.machine_id, "systemUUID": self.machine_id, "bootID": self.boot_id,
                         "kernelVersion": os.uname().release, "osImage": "cluster simulation",
                         "containerRuntimeVersion": "sim://1", "kubeletVersion": "v1.32.0-sim",
                         "kubeProxyVersion": "", "operatingSystem": "linux", "architecture": arch},
        }

    def labels(self):
        arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(os.uname().machine, os.uname().machine)
        return {"kubernetes.io/hostname": self.node, "kubernetes.io/os": "linux", "kubernetes.io/arch": arch,
                "beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": arch}

    def register(self):
        """Creates the Node, or brings an existing one up to date. False where nodes are not served."""
        path = "/api/v1/nodes/" + self.node
        code, obj = self.kube.request("GET", path)
        if code == 200:
            out = self.kube.patch(path, {"metadata": {"labels": self.labels()}})
            out = self.kube.patch_status(path, {"status": self.status()}) or out
            self.uid = (out.get("metadata") or {}).get("uid")
            log.info("node %s: registered again", self.node)
            return True
        node = {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": self.node, "labels": self.labels(),
                             "annotations": {"node.alpha.kubernetes.io/ttl": "0"}},
                "spec": {"podCIDR": str(self.k.net.net), "podCIDRs": [str(self.k.net.net)]},
                "status": self.status()}
        code, obj = self.kube.request("POST", "/api/v1/nodes", node)
        if code in (200, 201):
            self.uid = obj["metadata"]["uid"]
            log.info("node %s: registered", self.node)
            return True
        if code == 409:
            return self.register()
        details = (obj.get("details") or {}) if isinstance(obj, dict) else {}
        if code in (404, 405) and not details.get("name"):
            log.info("node %s: this API server serves no nodes; running without a Node object", self.node)
            return False
        raise KubeError(code, obj)

    def renew_lease(self):
        path = "/apis/coordination.k8s.io/v1/namespaces/%s/leases/%s" % (self.LEASE_NS, self.node)
        spec = {"holderIdentity": self.node, "leaseDurationSeconds": self.LEASE_DURATION, "renewTime": _microtime()}
        code, obj = self.kube.request("PATCH", path, {"spec": spec}, "application/merge-patch+json")
        if code == 200:
            return
        if code != 404:
            raise KubeError(code, obj)
        lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                 "metadata": {"name": self.node, "namespace": self.LEASE_NS},
                 "spec": spec}
        if self.uid:
            lease["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "Node", "name": self.node,
                                                     "uid": self.uid}]
        code, obj = self.kube.request("POST", "/apis/coordination.k8s.io/v1/namespaces/%s/leases" % self.LEASE_NS, lease)
        if code in (200, 201, 409):
            return
        if code == 404 and self.lease_ok:
            self.lease_ok = False
            log.info("node %s: no namespace %s; going on without a node Lease", self.node, self.LEASE_NS)
            return
        if code != 404:
            raise KubeError(code, obj)

    def run(self, stop_event):
        registered = False
        next_lease = next_status = 0.0
        while not stop_event.is_set():
            try:
                if not registered:
                    if not self.register():
                        return
                    registered = True
                    next_status = time.monotonic() + self.STATUS_HEARTBEAT
                now = time.monotonic()
                if now >= next_lease:
                    next_lease = now + self.LEASE_RENEW
                    self.renew_lease()
                if now >= next_status:
                    next_status = now + self.STATUS_HEARTBEAT
                    out = self.kube.patch_status("/api/v1/nodes/" + self.node, {"status": self.status()})
                    if out is None:
                        registered = False
            except KubeError as e:
                if e.code == 404:
                    registered = False      # the Node was deleted: register it again, as a kubelet does
                log.warning("node %s: %s", self.node, e)
            except OSError as e:
                log.warning("node %s: %s", self.node, e)
            stop_event.wait(1.0)


class Kubelet:
    def __init__(self, kube, cluster_domain, state_dir, node_name=NODE_NAME, pod_cidr=None, prefix=None,
                 image_bin=None, image_files=None, node_resources=None, images=None):
        self.kube = kube
        if images and (image_bin or image_files):
            raise ValueError("containers run either from images or as host programs with image files")
        self.node_resources = dict(node_resources or {})
        self.image_files = {os.path.normpath(dest): os.path.abspath(src)
                            for dest, src in (image_files or {}).items()}
        for src in image_bin or []:
            self.image_files["/usr/local/bin/" + os.path.basename(src)] = os.path.abspath(src)
        self.image_overlays = []   # [{"source": <state_dir>/image/root/<dir>, "target": <dir>}]
        self.domain = (cluster_domain or "").strip(".")
        self.state_dir = os.path.abspath(state_dir)
        # Images mode: containers from the OCI archives listed in `images` (an index.json of
        # scripts/images.py), run with runc.
        self.store = self.runtime = None
        self.containers_dir = os.path.join(self.state_dir, "containers")
        self.runc_root = os.path.join(self.state_dir, "runc")
        if images:
            why = runtime.available()
            if why:
                raise ValueError("containers from images: " + why)
            self.store = runtime.ImageStore(images, runtime.shared_cache_dir(images))
            self.runtime = runtime.Runtime(self.runc_root)
        self.proxy = None         # proxy.ServiceProxy once the bridge is up (needs iptables)
        self.node = node_name
        self.prefix = netns.check_prefix(prefix or prefix_for(self.state_dir))
        # Without a CIDR given (argument or MPIJOB_SIM_POD_CIDR), 10.244.0.0/16, or the first free
        # /16 from 10.200.0.0 on when a route already uses it (another simulation running).
        self.pod_cidr = pod_cidr or os.environ.get("MPIJOB_SIM_POD_CIDR")
        self.net = None
        self.host_ip = None
        self.logs_dir = os.path.join(self.state_dir, "logs")
        self.control_dir = os.path.join(self.state_dir, "control")
        self.stopping = threading.Event()
        self._lock = threading.RLock()
        self._runners = {}        # uid -> PodRunner
        self._done_uids = set()   # pods finished here; never run again
        self._events = queue.Queue()
        self._created_paths_file = os.path.join(self.state_dir, "created-paths.json")
        self._created = []
        self._cleaned = False
        self._started = False

    # ---------------------------------------------------------------- helpers for runners
    def log_path(self, ns, pod, container):
        return os.path.join(self.logs_dir, "%s_%s_%s.log" % (ns, pod, container))

    def make_mount_point(self, target, is_dir):
        """Creates a missing mount point on the host (the bind exists only in the container) and
        records it, so cleanup() removes it again if it is still empty."""
        if any(target == r or target.startswith(r + "/") for r in PRIVATE_ROOTS):
            return
        self.create_recorded(target, is_dir)

    def create_recorded(self, target, is_dir):
        """Creates a missing file or folder on the host (and its missing parents), recorded so
        that cleanup() removes what it made if it is still empty."""
        with self._lock:
            if os.path.lexists(target):
                return
            top = target
            while not os.path.lexists(os.path.dirname(top)):
                top = os.path.dirname(top)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            if is_dir:
                os.mkdir(target, 0o755)
            else:
                open(target, "a").close()
            self._created.append(top)
            with open(self._created_paths_file, "w") as f:
                json.dump(self._created, f)

    def pod_network_changed(self, _runner):
        self._write_hosts()

    def pod_finished(self, runner):
        with self._lock:
            self._done_uids.add(runner.uid)
            req = runner.delete_req
        if req and not req[1] and not self.stopping.is_set():
            self._delete_from_api(runner.ns, runner.name, runner.uid)

    def _delete_from_api(self, ns, name, uid):
        body = {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0,
                "preconditions": {"uid": uid}}
        try:
            code, obj = self.kube.request("DELETE", "/api/v1/namespaces/%s/pods/%s?gracePeriodSeconds=0"
                                          % (ns, name), body)
            if code not in (200, 202, 404, 409):
                log.warning("delete %s/%s: HTTP %d %s", ns, name, code, obj)
        except OSError as e:
            log.warning("delete %s/%s: %s", ns, name, e)

    def _hosts_text(self, me, live):
        lines = ["# Kubernetes-managed hosts file (simulated by the cluster's kubelet).",
                 "127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback",
                 "fe00::0\tip6-localnet", "fe00::0\tip6-mcastprefix", "fe00::1\tip6-allnodes",
                 "fe00::2\tip6-allrouters"]
        for r in live:
            names = []
            if r.subdomain:
                base = "%s.%s.%s.svc" % (r.hostname, r.subdomain, r.ns)
                if self.domain:
                    names.append(base + "." + self.domain)
                names.append(base)
                if r.ns == me.ns:
                    names.append("%s.%s" % (r.hostname, r.subdomain))
            if r is me or (r.ns == me.ns and r.subdomain and r.subdomain == me.subdomain):
                names.append(r.hostname)
            if names:
                lines.append("%s\t%s" % (r.pod_ip, " ".join(dict.fromkeys(names))))
        return "\n".join(lines) + "\n"

    def _resolv_text(self, me):
        search = []
        if self.domain:
            search += ["%s.svc.%s" % (me.ns, self.domain), "svc." + self.domain, self.domain]
        search += [s for s in ((me.spec.get("dnsConfig") or {}).get("searches") or []) if s not in search]
        # No DNS server runs: names outside the hosts file fail at once instead of timing out.
        text = "nameserver 127.0.0.1\n"
        if search:
            text += "search %s\n" % " ".join(search[:32])
        return text

    def _write_hosts(self):
        with self._lock:
            # (runner, its network) taken once: a runner tearing down drops its network meanwhile
            nets = [(r, r.net) for r in self._runners.values() if r.net is not None]
            live = [r for r, _ in nets]
            for r, net in nets:
                try:
                    self.net.write_file(net, "hosts", self._hosts_text(r, live))
                    self.net.write_file(net, "resolv.conf", self._resolv_text(r))
                except OSError as e:
                    log.warning("hosts file of %s: %s", net.ns, e)

    # ---------------------------------------------------------------- test hooks
    def _find(self, ns, name):
        with self._lock:
            found = [r for r in self._runners.values() if r.ns == ns and r.name == name]
        return found[-1] if found else None

    def kill_pod(self, ns, name):
        """SIGKILLs every container of the pod (see the module's docstring). False if unknown."""
        r = self._find(ns, name)
        if r is None or r.finished.is_set():
            return False
        r.request_kill()
        return True

    def evict_pod(self, ns, name, message=None):
        r = self._find(ns, name)
        if r is None or r.finished.is_set():
            return False
        r.request_evict(message)
        return True

    def _serve_control(self):
        try:
            names = os.listdir(self.control_dir)
        except OSError:
            return
        for n in names:
            if not n.endswith(".json"):
                continue
            p = os.path.join(self.control_dir, n)
            try:
                with open(p) as f:
                    req = json.load(f)
                os.unlink(p)
            except (OSError, ValueError):
                continue
            action, ns, name = req.get("action"), req.get("namespace"), req.get("name")
            if action == "kill":
                ok = self.kill_pod(ns, name)
            elif action == "evict":
                ok = self.evict_pod(ns, name, req.get("message"))
            else:
                ok = False
            ans = {"ok": ok, "error": "" if ok else "no running pod %s/%s on %s (or unknown action %r)"
                   % (ns, name, self.node, action)}
            tmp = p[:-5] + ".done.tmp"
            with open(tmp, "w") as f:
                json.dump(ans, f)
            os.rename(tmp, p[:-5] + ".done")

    # ---------------------------------------------------------------- events
    def _on_event(self, etype, obj):
        self._events.put((etype, obj))

    def _handle(self, etype, pod):
        meta = pod.get("metadata") or {}
        spec = pod.get("spec") or {}
        uid = meta.get("uid")
        if spec.get("nodeName") != self.node or not uid:
            return
        with self._lock:
            r = self._runners.get(uid)
        grace = meta.get("deletionGracePeriodSeconds")
        if grace is None:
            grace = spec.get("terminationGracePeriodSeconds", 30)
        grace = min(float(grace or 0), GRACE_CAP)
        if etype == "DELETED":
            with self._lock:
                self._done_uids.discard(uid)
            if r is not None:
                r.request_delete(grace, True)
                with self._lock:
                    self._runners.pop(uid, None)
                if r.finished.is_set():
                    self._write_hosts()
            return
        if meta.get("deletionTimestamp"):
            if r is not None and not r.finished.is_set():
                r.request_delete(grace, False)
            else:
                self._delete_from_api(meta.get("namespace"), meta.get("name"), uid)
            return
        if r is not None:
            r.update(pod)
            return
        phase = (pod.get("status") or {}).get("phase")
        with self._lock:
            if uid in self._done_uids or phase in ("Succeeded", "Failed") or self.stopping.is_set():
                return
            r = PodRunner(self, pod)
            self._runners[uid] = r
        r.thread.start()

    # ---------------------------------------------------------------- main loop
    def start(self):
        """Removes leftovers of an earlier run with this prefix and creates the bridge."""
        if self._started:
            return
        os.makedirs(self.logs_dir, exist_ok=True)
        os.makedirs(self.control_dir, exist_ok=True)
        self._remove_created_paths()
        self._sweep_containers()
        proxy.sweep(self.prefix)
        netns.sweep(self.prefix)
        cidr = self.pod_cidr
        if not cidr:
            cidr = DEFAULT_POD_CIDR if netns.cidr_is_free(DEFAULT_POD_CIDR) else netns.free_cidr()
        self.net = netns.Network(self.prefix, cidr)
        self.host_ip = self.net.gateway
        if self.image_files:
            self._make_image()
        self.net.up()
        if shutil.which("iptables"):
            self.proxy = proxy.ServiceProxy(self.prefix, self.net.bridge)
            self._sync_proxy()
        self._started = True
        with open(os.path.join(self.state_dir, "kubelet.json"), "w") as f:
            json.dump({"prefix": self.prefix, "podCIDR": str(self.net.net), "bridge": self.net.bridge,
                       "hostIP": self.host_ip, "node": self.node, "pid": os.getpid()}, f)

    def _sweep_containers(self):
        try:
            runtime.sweep(self.runc_root, self.containers_dir)
        except runtime.KillError as e:
            log.error("removing the containers: %s", e)

    def _sync_proxy(self):
        if self.proxy is None:
            return
        try:
            self.proxy.sync(self.kube)
        except (OSError, KubeError) as e:
            log.warning("service proxy: %s", e)

    def _make_image(self):
        """<state_dir>/image/root: copies of image_files; the overlays every container gets."""
        root = os.path.join(self.state_dir, "image", "root")
        shutil.rmtree(root, ignore_errors=True)
        tops = set()
        for dest, src in self.image_files.items():
            if not os.path.isabs(dest) or dest == "/":
                raise ValueError("image path %s is not an absolute file path" % dest)
            if not os.path.isfile(src):
                raise ValueError("image file %s does not exist" % src)
            copy = os.path.join(root, dest.lstrip("/"))
            os.makedirs(os.path.dirname(copy), exist_ok=True)
            shutil.copy2(src, copy)
            tops.add(os.path.dirname(dest))
        # Overlay a folder once: one of its ancestors' overlays already merges it.
        tops = sorted(t for t in tops if not any(t != o and t.startswith(o.rstrip("/") + "/") for o in tops))
        for t in tops:
            if not os.path.isdir(t):
                raise ValueError("image folder %s does not exist on this machine" % t)
        self.image_overlays = [{"source": os.path.join(root, t.lstrip("/")), "target": t} for t in tops]

    def run(self, stop_event):
        self.start()
        watch_stop = threading.Event()
        watcher = threading.Thread(target=self.kube.watch, name="kubelet-watch",
                                   args=("/api/v1/pods", None, self._on_event, watch_stop), daemon=True)
        watcher.start()
        node_thread = threading.Thread(target=NodeReporter(self, self.node_resources).run, name="kubelet-node",
                                 args=(watch_stop,), daemon=True)
        node_thread.start()
        next_proxy = time.monotonic() + PROXY_SYNC
        try:
            while not stop_event.is_set():
                if time.monotonic() >= next_proxy:
                    next_proxy = time.monotonic() + PROXY_SYNC
                    self._sync_proxy()
                try:
                    etype, obj = self._events.get(timeout=TICK)
                    self._handle(etype, obj)
                except queue.Empty:
                    pass
                except Exception:
                    log.exception("kubelet event")
                self._serve_control()
        finally:
            watch_stop.set()
            self.cleanup()
            watcher.join(timeout=5)
            node_thread.join(timeout=5)

    # ---------------------------------------------------------------- cleanup
    def _remove_created_paths(self):
        remove_created_paths(self._created_paths_file, self._created)
        self._created = []

    def cleanup(self):
        """Kills every pod process and removes namespaces, veths, the bridge, /etc/netns folders
        and the mount points it made. Safe to call more than once."""
        self.stopping.set()
        with self._lock:
            runners = list(self._runners.values())
        for r in runners:
            r.finished.wait(timeout=10)
        if self._cleaned:
            return
        self._cleaned = True
        self._sweep_containers()
        proxy.sweep(self.prefix)
        if self.net is not None:
            self.net.down()
        netns.sweep(self.prefix)
        self._remove_created_paths()


def sweep(prefix):
    """Removes what a Kubelet with this prefix left behind (see netns.sweep)."""
    return netns.sweep(prefix)


def remove_created_paths(paths_file, paths=()):
    """Removes the host files and folders a kubelet made for hostPath volumes (listed in
    paths_file, plus paths), each only while still empty, then paths_file itself."""
    paths = list(paths)
    try:
        with open(paths_file) as f:
            paths += json.load(f)
    except (OSError, ValueError):
        pass
    removed = []
    for top in sorted(set(paths), key=len, reverse=True):
        try:
            if os.path.isdir(top) and not os.path.islink(top):
                for root, dirs, files in os.walk(top, topdown=False):
                    if files:
                        raise OSError("not empty")
                    for d in dirs:
                        os.rmdir(os.path.join(root, d))
                os.rmdir(top)
                removed.append(top)
            elif os.path.isfile(top) and os.path.getsize(top) == 0:
                os.unlink(top)
                removed.append(top)
        except OSError:
            pass
    try:
        os.unlink(paths_file)
    except OSError:
        pass
    return removed


def reap(state_dir):
    """What a kubelet on state_dir left when it died without cleanup() (SIGKILL, a crash): its
    pods' processes, network namespaces, veths, bridge, /etc/netns folders and the hostPath
    folders it made. Reads <state_dir>/kubelet.json, written when the kubelet started. Returns
    what it removed."""
    try:
        with open(os.path.join(state_dir, "kubelet.json")) as f:
            prefix = json.load(f)["prefix"]
    except (OSError, ValueError, KeyError):
        return []
    try:
        removed = runtime.sweep(os.path.join(state_dir, "runc"), os.path.join(state_dir, "containers"))
    except runtime.KillError as e:
        log.error("removing the containers: %s", e)
        removed = []
    if proxy.sweep(prefix):
        removed.append("iptables rules %s-svc-kubernetes" % prefix)
    removed += netns.sweep(prefix)
    removed += remove_created_paths(os.path.join(state_dir, "created-paths.json"))
    return removed
