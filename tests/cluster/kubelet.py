"""The simulated kubelet: runs the containers of pods bound to its nodes as processes on this
machine (standard library + PyYAML through kube.py; needs root, iproute2 and util-linux).

    k = Kubelet(kube, "cluster.local", state_dir)   # node "sim-node", pods in 10.244.0.0/16
    k = Kubelet(kube, "cluster.local", state_dir, nodes=3)   # sim-node, sim-node-1, sim-node-2
    k.run(stop_event)                                # blocks until stop_event is set
    k.cleanup()                                      # idempotent; run() also calls it

The nodes: one Kubelet serves them all (one pod watch, one bridge and pod CIDR, one control
folder, one hosts-file view of every pod), and each node is a host of its own on the bridge: a
network namespace with an address from the top of the CIDR (netns.py), which is its InternalIP
and the hostIP of its pods, and a NodeReporter (node.py) registering it. With one node the node's
address is still its namespace's, not the bridge's gateway.

Per pod (spec.nodeName one of the nodes, no deletionTimestamp, not yet finished):
  - a network namespace with its own address on a bridge the kubelet creates (netns.py), or for
    a host-network pod (spec.hostNetwork) its node's namespace, shared with the node's other
    host-network pods (their ports collide there as on a real host: a second bind of a port
    fails), podIP the node's address and host name (UTS, $HOSTNAME) the node's name; and
    /etc/netns/<ns>/hosts (each host-network pod has a name of its own for its node's namespace,
    and so its own hosts file) naming every running pod of the nodes as
    <hostname>.<subdomain>.<namespace>.svc.<domain> (and without the domain; <hostname>.<subdomain>
    and <hostname> for pods of the same namespace) at its podIP, rewritten as pods come and go;
  - ConfigMap, Secret (items, defaultMode, mode, optional; fsGroup adds group read), emptyDir,
    hostPath and downwardAPI volumes, written under <state_dir>/pods/<uid>/volumes and bound at
    their mount paths (subPath, readOnly) in the container's private mount namespace; ConfigMaps
    and Secrets are refreshed while the pod runs. A volume that cannot be completed (a ConfigMap,
    Secret, key or token missing, or the API server not answering) keeps the pod Pending, its
    containers waiting in ContainerCreating, with a Warning FailedMount event on the pod per try
    (one Event, its count raised: events.py), until it can; nothing starts before;
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

Each node (a NodeReporter of its own), where the server serves nodes: the Node object with
capacity and allocatable (this machine's cpu, memory and disk, 110 pods, node_resources such as
{"nvidia.com/gpu": "4"}, the same for every node), conditions, addresses (InternalIP: the node's
namespace's address) and nodeInfo (the first node's machine and boot ids are this machine's, the
others' their own); a Lease in kube-node-lease renewed every 10 s and node status posted every
10 s, so a real kube-controller-manager keeps the nodes Ready and untainted and a real
kube-scheduler binds pods to them, spreading them as it does. Projected serviceAccountToken
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
namespace (a host-network pod's: its node's). Exec probes run with `runc exec`; kill, evict and
deletion signal through `runc kill`. The kubernetes Service in default is proxied to the API
server as kube-proxy does (proxy.py; for pods and host-network pods alike, as every namespace
reaches it through the bridge) and every container gets its KUBERNETES_SERVICE_* variables, so
in-cluster configuration works.

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
Where it lives: this file holds the Kubelet (the pod watch, the runners, the bridge and the
nodes' namespaces, the test hooks, cleanup); podrunner.py a pod from its sandbox to its end, containerstate.py a container's
state and status, podvolumes.py the volumes, podenv.py a container's environment and process,
probes.py the probes, node.py the Nodes and their Leases, hostsfiles.py the hosts and resolv.conf
files, control.py the control folder, leftovers.py what a kubelet leaves and its removal;
runtime.py, netns.py, proxy.py and podinit.py the container runtime, the network, the service
proxy and the init process of containers without images.
"""

import contextlib
import hashlib
import json
import logging
import os
import queue
import shutil
import subprocess
import sys
import threading
import time

import control
import hostsfiles
import leftovers
import netns
import proxy
import runtime
from control import request  # noqa: F401  (kubelet.request: the entry other processes use)
from events import EventRecorder
from kube import KubeError
from leftovers import reap, sweep  # noqa: F401  (kubelet.reap, kubelet.sweep)
from node import KUBELET_PORT, NODE_NAME, NodeReporter, node_names
from podrunner import GRACE_CAP, TICK, PodRunner

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "support"))
from deadline import scaled  # noqa: E402  (tests/support)

log = logging.getLogger("kubelet")

DEFAULT_POD_CIDR = "10.244.0.0/16"
PROXY_SYNC = 5.0
RUNNERS_STOP = 30.0      # cleanup() waits this long in all for the pods' runners to stop
LOG_SERVER_START = 60.0  # each node's container-log server (kubeletapi.py), up to listening (scaled)
# Mount points under these exist only inside the container (podinit makes them).
PRIVATE_ROOTS = ("/tmp", "/run", "/var/run", "/dev/shm", "/proc", "/sys", "/dev")


def prefix_for(state_dir):
    """The name prefix a Kubelet on state_dir uses: 'k' and 5 hex digits of its path's hash."""
    return "k" + hashlib.sha1(os.path.abspath(state_dir).encode()).hexdigest()[:5]


class Kubelet:
    """The kubelet of `nodes` nodes (node_name, then node_name-1, ...): watches the pods bound to
    any of them and runs each with a PodRunner."""

    def __init__(self, kube, cluster_domain, state_dir, node_name=NODE_NAME, pod_cidr=None, prefix=None,
                 image_bin=None, image_files=None, node_resources=None, images=None, nodes=1):
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
        self.log_servers = []     # kubeletapi.py per node: its logs for the API server (pods/log)
        self.nodes = node_names(nodes, node_name)
        self.node = self.nodes[0]
        self.node_nets = {}       # node name -> netns.PodNet of its namespace, once started
        self.prefix = netns.check_prefix(prefix or prefix_for(self.state_dir))
        # Without a CIDR given (argument or MPIJOB_SIM_POD_CIDR), 10.244.0.0/16, or the first free
        # /16 from 10.200.0.0 on when a route already uses it (another simulation running).
        self.pod_cidr = pod_cidr or os.environ.get("MPIJOB_SIM_POD_CIDR")
        self.net = None
        self.host_ip = None       # the first node's address, once started
        self.logs_dir = os.path.join(self.state_dir, "logs")
        self.control_dir = os.path.join(self.state_dir, "control")
        self.events = {n: EventRecorder(kube, "kubelet", n) for n in self.nodes}   # by node
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

    def node_ip(self, node):
        """The address of node (its namespace's), the hostIP of its pods."""
        return self.node_nets[node].ip

    def pod_network_changed(self, _runner):
        self._write_hosts()

    def pod_finished(self, runner, req):
        """The runner has stopped (req: its delete request then, taken under its lock with the
        finished flag, so a request that arrives later is answered by _handle instead)."""
        with self._lock:
            self._done_uids.add(runner.uid)
        if req and not req[1] and not self.stopping.is_set():
            self._delete_from_api(runner.ns, runner.name, runner.uid)

    def _delete_from_api(self, ns, name, uid):
        # in a thread of its own: its retries (an API server restarting) must not hold up the
        # events of other pods
        threading.Thread(target=self.kube.finish_pod_deletion, args=(ns, name, uid),
                         name="delete-%s/%s" % (ns, name), daemon=True).start()

    def _write_hosts(self):
        with self._lock:
            # (runner, its network) taken once: a runner tearing down drops its network meanwhile
            nets = [(r, r.net) for r in self._runners.values() if r.net is not None]
            live = [r for r, _ in nets]
            for r, net in nets:
                try:
                    self.net.write_file(net, "hosts", hostsfiles.hosts_text(r, live, self.domain))
                    self.net.write_file(net, "resolv.conf", hostsfiles.resolv_text(r, self.domain))
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

    # ---------------------------------------------------------------- events
    def _on_event(self, etype, obj):
        self._events.put((etype, obj))

    def _handle(self, etype, pod):
        meta = pod.get("metadata") or {}
        spec = pod.get("spec") or {}
        uid = meta.get("uid")
        if spec.get("nodeName") not in self.nodes or not uid:
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
            # request_delete refuses once the runner has finished (checked under its lock):
            # then no runner will make the last delete, so it is made here
            if r is None or not r.request_delete(grace, False):
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
        leftovers.sweep_containers(self.runc_root, self.containers_dir)
        proxy.sweep(self.prefix)
        netns.sweep(self.prefix)
        cidr = self.pod_cidr
        if not cidr:
            cidr = DEFAULT_POD_CIDR if netns.reserve_cidr(DEFAULT_POD_CIDR) else netns.free_cidr()
        self.net = netns.Network(self.prefix, cidr, nodes=len(self.nodes))
        if self.image_files:
            self._make_image()
        self.net.up()
        for i, name in enumerate(self.nodes):
            self.node_nets[name] = self.net.add_node(i)
        self.host_ip = self.node_ip(self.node)
        self._serve_logs()
        if shutil.which("iptables"):
            self.proxy = proxy.ServiceProxy(self.prefix, self.net.bridge)
            self._sync_proxy()
        self._started = True
        with open(os.path.join(self.state_dir, "kubelet.json"), "w") as f:
            json.dump({"prefix": self.prefix, "podCIDR": str(self.net.net), "bridge": self.net.bridge,
                       "hostIP": self.host_ip, "node": self.node, "pid": os.getpid(),
                       "nodes": {n: {"ip": net.ip, "netns": net.ns} for n, net in self.node_nets.items()}}, f)

    def _serve_logs(self):
        """Each node's kubelet API for container logs (kubeletapi.py), on its address and the port
        its Node's daemonEndpoints name, inside its namespace: the API server's pods/log (the
        double's or a real one's) fetches logs from there, as from a real kubelet."""
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kubeletapi.py")
        for name, net in self.node_nets.items():
            ready = os.path.join(self.state_dir, "kubeletapi-%s.port" % name)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(ready)
            p = subprocess.Popen(["ip", "netns", "exec", net.ns, sys.executable, script, "--logs-dir", self.logs_dir,
                                  "--address", net.ip, "--port", str(KUBELET_PORT), "--ready-file", ready],
                                 stdin=subprocess.DEVNULL)
            self.log_servers.append(p)
        # (a Python start and a key: a second on an idle machine, ten on a loaded 2-core one)
        limit = scaled(LOG_SERVER_START)
        end = time.monotonic() + limit
        for name in self.node_nets:
            ready = os.path.join(self.state_dir, "kubeletapi-%s.port" % name)
            while not os.path.exists(ready):
                if time.monotonic() > end or any(p.poll() is not None for p in self.log_servers):
                    raise RuntimeError("the container log server of node %s did not start within %.0f s (exit "
                                       "statuses: %s)" % (name, limit, [p.poll() for p in self.log_servers]))
                time.sleep(0.05)

    def _stop_log_servers(self):
        for p in self.log_servers:
            if p.poll() is None:
                p.terminate()
        for p in self.log_servers:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.log_servers = []

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
        node_threads = [threading.Thread(target=NodeReporter(self, n, self.node_resources).run,
                                         name="kubelet-node-" + n, args=(watch_stop,), daemon=True)
                        for n in self.nodes]
        for t in node_threads:
            t.start()
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
                control.serve(self.control_dir, self)
        finally:
            watch_stop.set()
            self.cleanup()
            watcher.join(timeout=5)
            for t in node_threads:
                t.join(timeout=5)

    # ---------------------------------------------------------------- cleanup
    def _remove_created_paths(self):
        leftovers.remove_created_paths(self._created_paths_file, self._created)
        self._created = []

    def cleanup(self):
        """Kills every pod process and removes namespaces, veths, the bridge, /etc/netns folders
        and the mount points it made. Safe to call more than once."""
        self.stopping.set()
        with self._lock:
            runners = list(self._runners.values())
        # Each runner kills its containers (SIGKILL, checked: seconds on a loaded machine);
        # what one has not done by then, the sweep below does.
        end = time.monotonic() + RUNNERS_STOP
        for r in runners:
            r.finished.wait(timeout=max(0.0, end - time.monotonic()))
        if self._cleaned:
            return
        self._cleaned = True
        self._stop_log_servers()
        leftovers.sweep_containers(self.runc_root, self.containers_dir)
        proxy.sweep(self.prefix)
        if self.net is not None:
            self.net.down()
        netns.sweep(self.prefix)
        self._remove_created_paths()
