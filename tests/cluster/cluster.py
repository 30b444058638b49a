#!/usr/bin/env python3
"""A local cluster simulation: plays the parts of a Kubernetes cluster other than the API server.

    cluster.py --kubeconfig PATH [--roles kubelet,scheduler,jobs,deployments,gc] [--cluster-domain cluster.local]
               [--state-dir DIR] [--log-file FILE] [--job-pod-backoff SECONDS] [--nodes N]
               [--node-resource NAME=QUANTITY]

Roles (each in its own thread, against any API server reachable through the kubeconfig):
  kubelet    runs pods as processes on this machine (kubelet.py), for --nodes N nodes: "sim-node",
             then "sim-node-1", "sim-node-2", ... (default 1), each a network namespace of its own
             with its own address, where host-network pods run; registers each Node and keeps it
             Ready (Lease in kube-node-lease, status heartbeats) where nodes are served. With a
             real kube-controller-manager and kube-scheduler (launch.py --control-plane),
             `--roles kubelet` alone makes a whole cluster
  scheduler  binds pods that have no node to one of the --nodes nodes (and creates those Nodes):
             nodeSelector and host ports as kube-scheduler's filters have them, then the node with
             the fewest pods; a pod no node fits stays Pending, PodScheduled False, reason
             Unschedulable (Scheduler)
  jobs       the batch/v1 Job controller (jobcontroller.py)
  deployments
             the apps/v1 Deployment and ReplicaSet controllers (deployments.py)
  gc         the garbage collector (gc.py)

SIGTERM or SIGINT stops every role, lets the kubelet remove what it created, and exits 0. The
process also gets SIGTERM when its parent dies (unless --survive-parent), so a crashed test leaves
nothing behind. Should this process itself die without cleaning up (SIGKILL, a crash), a reaper
child it starts removes what the kubelet left (kubelet.reap). DIR/cluster.pid holds the process
id while it runs.
"""

import argparse
import logging
import itertools
import os
import re
import signal
import sys
import tempfile
import threading
import time
import importlib.util

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from apitime import now_rfc3339  # noqa: E402
from kube import Informer, Kube, KubeError  # noqa: E402
from node import MAX_NODES, NODE_NAME, node_labels, node_names  # noqa: E402

ROLES = ("kubelet", "scheduler", "jobs", "deployments", "gc")

log = logging.getLogger("cluster")


def action(text):
    """One line per action a role takes."""
    logging.getLogger("action").info("%s", text)


# kube-scheduler 1.32's words for a node its filters turned down, and for why preemption does not
# help there (all pods are taken to have one priority: no lower-priority pod to preempt).
NODE_SELECTOR = "node(s) didn't match Pod's node affinity/selector"
NODE_PORTS = "node(s) didn't have free ports for the requested pod ports"
PREEMPTION = {NODE_SELECTOR: "Preemption is not helpful for scheduling",
              NODE_PORTS: "No preemption victims found for incoming pod"}


def host_ports(pod):
    """The (hostIP, protocol, hostPort) its containers ask of their node, as kube-scheduler's
    NodePorts plugin reads them: hostPort set, hostIP defaulting to 0.0.0.0, protocol to TCP."""
    found = set()
    for c in (pod.get("spec") or {}).get("containers") or []:
        for p in c.get("ports") or []:
            if p.get("hostPort"):
                found.add((p.get("hostIP") or "0.0.0.0", p.get("protocol") or "TCP", int(p["hostPort"])))
    return found


def ports_conflict(wanted, used):
    """Whether one of wanted takes a host port one of used holds: same protocol and port, on the
    same address or on 0.0.0.0 (every address)."""
    return any(ip == uip or "0.0.0.0" in (ip, uip) for ip, proto, port in wanted for uip, uproto, uport in used
               if (proto, port) == (uproto, uport))


# From this minor version on, kube-scheduler runs the DynamicResources plugin by default (DRA is GA
# in 1.34): its PostFilter answers a pod without resource claims before preemption does, and its
# words come first in the message (seen on 1.36.3; 1.32.13 has none).
DRA_POSTFILTER_MINOR = 34


def unschedulable_message(reasons, preemption_never=False, minor=32):
    """kube-scheduler's message for a pod no node fits, reasons being {node: why not}: the count
    of nodes per reason, then what the PostFilter plugins said (DynamicResources from 1.34, then
    preemption), for the scheduler of Kubernetes 1.<minor>."""
    def histogram(words):
        counts = {}
        for w in words:
            counts[w] = counts.get(w, 0) + 1
        return ", ".join(sorted("%d %s" % (n, w) for w, n in counts.items()))
    n = len(reasons)
    if preemption_never:
        after = "not eligible due to preemptionPolicy=Never."
    else:
        after = "0/%d nodes are available: %s." % (n, histogram(PREEMPTION[r] for r in reasons.values()))
    dra = "no new claims to deallocate, " if minor >= DRA_POSTFILTER_MINOR else ""
    return "0/%d nodes are available: %s. %spreemption: %s" % (n, histogram(reasons.values()), dra, after)


def server_minor(kube):
    """The minor version the API server's /version gives (the simulation's roles speak as that
    release does), 32 (the double's) when it cannot be read."""
    v = kube.get("/version") or {}
    digits = "".join(itertools.takewhile(str.isdigit, str(v.get("minor", ""))))
    return int(digits) if digits else 32


class Scheduler:
    """Binds unscheduled pods (of the default scheduler, without scheduling gates) to one of the
    nodes through the pods/binding subresource, which sets spec.nodeName and PodScheduled. As
    kube-scheduler's filters do, a node fits a pod when it has every label of the pod's
    nodeSelector (kubernetes.io/hostname and the os and arch labels a kubelet gives its Node) and
    none of the host ports its containers ask for is held by a pod on that node that has not
    finished; among the nodes that fit, the one with the fewest such pods (the first on a tie),
    so that the pods of one job spread. A pod no node fits stays Pending with PodScheduled False,
    reason Unschedulable and kube-scheduler's message, and is tried again as pods come and go.
    Not modelled: resources, taints, affinity, priorities and preemption."""

    def __init__(self, kube, nodes=(NODE_NAME,), scheduler_names=("default-scheduler",)):
        self.kube = kube
        self.nodes = list(nodes)
        self.labels = {n: node_labels(n) for n in self.nodes}
        self.names = set(scheduler_names)
        self.pods = Informer(kube, "/api/v1/pods", self._event)
        self.pending = set()
        self.assumed = {}         # (ns, name) -> (uid, node) bound here, not yet bound in the cache
        self.rescan = False
        self.cond = threading.Condition()
        self.binding_served = True
        self.minor = None         # the server's minor version, read at the first unschedulable pod

    def _event(self, etype, pod):
        if etype != "DELETED" and self._wants(pod):
            with self.cond:
                self.pending.add((pod["metadata"]["namespace"], pod["metadata"]["name"]))
                self.cond.notify()
        elif etype == "DELETED" or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            with self.cond:        # what it held on its node may let a waiting pod in
                self.rescan = True
                self.cond.notify()

    def _wants(self, pod):
        meta, spec, st = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
        if spec.get("nodeName") or meta.get("deletionTimestamp") or st.get("phase") in ("Succeeded", "Failed"):
            return False
        if (spec.get("schedulerName") or "default-scheduler") not in self.names:
            return False
        if spec.get("schedulingGates"):
            return False
        for c in st.get("conditions") or []:
            if c.get("type") == "PodScheduled" and c.get("status") == "True":
                return False
        return True

    def ensure_node(self):
        for name in self.nodes:
            node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": self.labels[name]}}
            code, body = self.kube.request("GET", "/api/v1/nodes/" + name)
            if code == 200:
                continue
            code, body = self.kube.request("POST", "/api/v1/nodes", node)
            if code in (201, 409):
                action("scheduler: created node %s" % name)
            elif code in (404, 405):
                log.info("scheduler: this API server serves no nodes; running without Node objects")
                return
            else:
                raise KubeError(code, body)

    def _placed(self):
        """{node: [pod]}: the pods on each node that have not finished, those bound here that
        the cache does not show bound yet included."""
        placed = {n: [] for n in self.nodes}
        cached = set()
        for pod in self.pods.items():
            meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
            key = (meta.get("namespace"), meta.get("name"))
            cached.add(key)
            node = spec.get("nodeName")
            assumed = self.assumed.get(key)
            if node or (assumed and assumed[0] != meta.get("uid")):
                self.assumed.pop(key, None)
            elif assumed:
                node = assumed[1]
            if node in placed and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
                placed[node].append(pod)
        for key in set(self.assumed) - cached:
            del self.assumed[key]
        return placed

    def _why_not(self, pod, node, placed):
        """None when pod fits node, else the reason kube-scheduler's filters give."""
        labels = self.labels[node]
        if any(labels.get(k) != v for k, v in ((pod.get("spec") or {}).get("nodeSelector") or {}).items()):
            return NODE_SELECTOR
        wanted = host_ports(pod)
        if wanted and ports_conflict(wanted, set().union(*(host_ports(p) for p in placed[node]))):
            return NODE_PORTS
        return None

    def pick(self, pod, placed):
        """(node, None) for the node pod goes to, or (None, {node: why not}) when none fits."""
        reasons = {n: self._why_not(pod, n, placed) for n in self.nodes}
        fit = [n for n in self.nodes if reasons[n] is None]
        if not fit:
            return None, reasons
        return min(fit, key=lambda n: len(placed[n])), None

    def unschedulable(self, pod, reasons):
        """PodScheduled False, reason Unschedulable, with kube-scheduler's message; written only
        when it says something new."""
        meta = pod["metadata"]
        if self.minor is None:
            self.minor = server_minor(self.kube)
        message = unschedulable_message(reasons, (pod.get("spec") or {}).get("preemptionPolicy") == "Never",
                                        self.minor)
        conds = (pod.get("status") or {}).get("conditions") or []
        old = next((c for c in conds if c.get("type") == "PodScheduled"), {})
        if (old.get("status"), old.get("reason"), old.get("message")) == ("False", "Unschedulable", message):
            return
        cond = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message,
                "lastProbeTime": None,
                "lastTransitionTime": old.get("lastTransitionTime") if old.get("status") == "False" else now_rfc3339()}
        path = "/api/v1/namespaces/%s/pods/%s" % (meta["namespace"], meta["name"])
        if self.kube.patch_status(path, {"status": {"conditions": [c for c in conds if c is not old] + [cond]}}):
            action("scheduler: pod %s/%s unschedulable: %s" % (meta["namespace"], meta["name"], message))

    def bind(self, ns, name, placed):
        pod = self.pods.get(ns, name)
        if pod is None or not self._wants(pod) or (ns, name) in self.assumed or not self.binding_served:
            return
        node, reasons = self.pick(pod, placed)
        if node is None:
            self.unschedulable(pod, reasons)
            return
        code, body = self.kube.request("POST", "/api/v1/namespaces/%s/pods/%s/binding" % (ns, name), {
            "apiVersion": "v1", "kind": "Binding", "metadata": {"name": name, "namespace": ns},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node}})
        if code in (200, 201):
            self.assumed[(ns, name)] = (pod["metadata"].get("uid"), node)
            placed[node].append(pod)
            action("scheduler: bound pod %s/%s to %s" % (ns, name, node))
            return
        details = (body.get("details") or {}) if isinstance(body, dict) else {}
        if code == 404 and not details.get("name"):
            # A bare 404: the server has no pods/binding subresource; pods stay unbound.
            if self.binding_served:
                log.warning("scheduler: this API server serves no pods/binding; pods stay unbound")
                self.binding_served = False
            return
        if code in (404, 409):
            return          # the pod is gone, or another binder was first
        raise KubeError(code, body)

    def run(self, stop_event):
        while not stop_event.is_set():
            try:
                self.ensure_node()
                break
            except (KubeError, OSError) as e:
                log.warning("scheduler: nodes %s: %s", ", ".join(self.nodes), e)
                stop_event.wait(1.0)
        self.pods.start(stop_event)
        last_scan = 0.0
        while not stop_event.is_set():
            with self.cond:
                if not self.pending and not self.rescan:
                    self.cond.wait(0.5)
                batch, self.pending = sorted(self.pending), set()
                rescan, self.rescan = self.rescan, False
            if rescan or time.monotonic() - last_scan > 2.0:
                last_scan = time.monotonic()
                batch += [(p["metadata"]["namespace"], p["metadata"]["name"]) for p in self.pods.items() if self._wants(p)]
            placed = self._placed() if batch else None
            for ns, name in dict.fromkeys(batch):
                try:
                    self.bind(ns, name, placed)
                except (KubeError, OSError) as e:
                    log.warning("scheduler: pod %s/%s: %s", ns, name, e)


def load_by_path(name, path):
    """The module in path, loaded under name without touching sys.path: gc.py (a plain `import
    gc` always finds Python's own gc module), launch.py (the API server's launcher, beside
    tests/apiserver's other modules)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_gc():
    return load_by_path("cluster_gc", os.path.join(HERE, "gc.py"))


def die_with_parent():
    """SIGTERM to this process when its parent dies (PR_SET_DEATHSIG), as launch.py does for
    the processes it starts."""
    launch = load_by_path("apiserver_launch", os.path.join(os.path.dirname(HERE), "apiserver", "launch.py"))
    launch.die_with_parent()


def start_reaper(state_dir):
    """Forks a child that waits on a pipe from this process. One byte means this process cleaned
    up; end of file without it means it died first, and the child removes what the kubelet left
    (pods' processes, namespaces, links, hostPath folders). The child leaves this process's
    session and ignores SIGTERM and SIGINT, so a kill of the whole group does not take it along.
    Returns the pipe's write end, to be written once cleanup is done."""
    r, w = os.pipe()
    pid = os.fork()
    if pid:
        os.close(r)
        return w
    code = 0
    try:
        os.close(w)
        os.setsid()
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        while True:
            try:
                said = os.read(r, 1)
                break
            except InterruptedError:
                continue
        if not said:
            from kubelet import reap
            removed = reap(state_dir)
            log.warning("the simulation died without cleaning up; removed %d leftovers", len(removed))
    except BaseException:
        code = 1
    finally:
        os._exit(code)


def parse_args(argv):
    ap = argparse.ArgumentParser(prog="cluster.py", description="local cluster simulation (kubelet, "
                                 "scheduler, batch Job controller, Deployment and ReplicaSet "
                                 "controllers, garbage collector)")
    ap.add_argument("--kubeconfig", required=True, help="kubeconfig of the API server to work against")
    ap.add_argument("--roles", default=",".join(ROLES),
                    help="comma-separated subset of %s (default: all)" % ",".join(ROLES))
    ap.add_argument("--cluster-domain", default="cluster.local", help="DNS domain of services (default cluster.local)")
    ap.add_argument("--state-dir", help="where the roles keep their state (default: a new temporary directory)")
    ap.add_argument("--log-file", help="append the log here instead of standard error")
    ap.add_argument("--image-bin", action="append", default=[], metavar="FILE",
                    help="a program the pods' image holds in /usr/local/bin (repeatable), e.g. "
                         "build/bin/mpijob-worker: the kubelet overlays it there in every container")
    ap.add_argument("--image-file", action="append", default=[], metavar="FILE=PATH",
                    help="a file the pods' image holds at PATH (repeatable), e.g. "
                         "worker-image/sshd_config=/etc/ssh/sshd_config")
    ap.add_argument("--images", metavar="INDEX",
                    help="run containers from images, with runc: INDEX is the index.json of the OCI "
                         "archives `make images` writes (build/images/index.json); not with "
                         "--image-bin or --image-file")
    ap.add_argument("--node-resource", action="append", default=[], metavar="NAME=QUANTITY",
                    help="what the kubelet's Node offers (repeatable), over this machine's own figures: "
                         "cpu=64, memory=256Gi, pods=250, or an extended resource such as nvidia.com/gpu=4, "
                         "as a device plugin would advertise it")
    ap.add_argument("--nodes", type=int, default=1, metavar="N",
                    help="how many nodes the kubelet serves and the scheduler binds to: sim-node, then "
                         "sim-node-1, sim-node-2, ... (default 1, at most %d)" % MAX_NODES)
    ap.add_argument("--job-pod-backoff", type=float, default=10.0, metavar="SECONDS",
                    help="first delay before a Job's failed pod is replaced, doubled per failure up to 6 min "
                         "(default 10, as kube-controller-manager; 0 disables)")
    ap.add_argument("--survive-parent", action="store_true",
                    help="keep running when the process that started this one exits")
    ap.add_argument("-v", "--verbose", action="store_true", help="log debug details too")
    args = ap.parse_args(argv)
    roles = [r.strip() for r in args.roles.split(",") if r.strip()]
    bad = [r for r in roles if r not in ROLES]
    if bad or not roles:
        ap.print_usage(sys.stderr)
        sys.stderr.write("cluster.py: error: --roles: unknown role %s (known: %s)\n"
                         % (", ".join(repr(r) for r in bad) or "(none given)", ", ".join(ROLES)))
        sys.exit(2)
    if len(set(roles)) != len(roles):
        ap.print_usage(sys.stderr)
        sys.stderr.write("cluster.py: error: --roles: a role is named twice\n")
        sys.exit(2)
    if not (1 <= args.nodes <= MAX_NODES):
        ap.print_usage(sys.stderr)
        sys.stderr.write("cluster.py: error: --nodes must be between 1 and %d\n" % MAX_NODES)
        sys.exit(2)
    if not (0 <= args.job_pod_backoff <= 3600):
        ap.print_usage(sys.stderr)
        sys.stderr.write("cluster.py: error: --job-pod-backoff must be between 0 and 3600 seconds\n")
        sys.exit(2)
    if not args.cluster_domain or any(not part for part in args.cluster_domain.split(".")):
        ap.print_usage(sys.stderr)
        sys.stderr.write("cluster.py: error: --cluster-domain: %r is not a DNS domain\n" % args.cluster_domain)
        sys.exit(2)
    if args.images and (args.image_bin or args.image_file):
        ap.error("--images runs containers from images: --image-bin and --image-file do not apply")
    if args.images and not os.path.isfile(args.images):
        ap.error("--images %s: no such file (make images writes build/images/index.json)" % args.images)
    args.image_files = []
    for spec in args.image_file:
        src, sep, dest = spec.partition("=")
        if not sep or not src or not dest.startswith("/"):
            ap.error("--image-file %s: expected FILE=/absolute/path/in/the/image" % spec)
        args.image_files.append((dest, src))
    args.node_resources = {}
    for spec in args.node_resource:
        name, sep, qty = spec.partition("=")
        if not sep or not (name in ("cpu", "memory", "pods", "ephemeral-storage") or "/" in name) or \
                not re.fullmatch(r"[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?", qty):
            ap.print_usage(sys.stderr)
            sys.stderr.write("cluster.py: error: --node-resource %s: expected NAME=QUANTITY (cpu, memory, pods, "
                             "ephemeral-storage or DOMAIN/NAME)\n" % spec)
            sys.exit(2)
        args.node_resources[name] = qty
    args.roles = roles
    return args


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    handler = logging.FileHandler(args.log_file) if args.log_file else logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s.%(msecs)03d %(name)s: %(message)s", "%H:%M:%S"))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.DEBUG if args.verbose else logging.INFO)

    if not args.survive_parent:
        die_with_parent()
        if os.getppid() == 1:
            log.error("the parent exited before the simulation started")
            return 1

    try:
        kube = Kube.from_kubeconfig(args.kubeconfig)
    except (OSError, ValueError, KeyError) as e:
        log.error("kubeconfig %s: %s", args.kubeconfig, e)
        return 1
    state_dir = args.state_dir or tempfile.mkdtemp(prefix="mpijob-cluster.")
    os.makedirs(state_dir, exist_ok=True)
    pid_file = os.path.join(state_dir, "cluster.pid")

    stop = threading.Event()
    failed = []

    # The handler only sets a flag: taking the lock of a threading.Event (or a logging handler)
    # in a signal handler deadlocks when a second signal lands while the first holds it.
    signals = []

    def on_signal(signum, frame):
        signals.append(signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    with open(pid_file, "w") as f:
        f.write("%d\n" % os.getpid())

    reaper = start_reaper(state_dir) if "kubelet" in args.roles else None

    image_files = dict(args.image_files)
    kubelet = None
    runners = []
    try:
        if "kubelet" in args.roles:
            from kubelet import Kubelet
            kubelet = Kubelet(kube, args.cluster_domain, state_dir, image_bin=args.image_bin,
                              image_files=image_files, node_resources=args.node_resources,
                              images=args.images, nodes=args.nodes)
            runners.append(("kubelet", kubelet.run))
        if "scheduler" in args.roles:
            runners.append(("scheduler", Scheduler(kube, node_names(args.nodes)).run))
        if "jobs" in args.roles:
            from jobcontroller import JobController
            runners.append(("jobs", JobController(kube, backoff=args.job_pod_backoff, action_log=action).run))
        if "deployments" in args.roles:
            from deployments import DeploymentController
            runners.append(("deployments", DeploymentController(kube, action_log=action).run))
        if "gc" in args.roles:
            runners.append(("gc", load_gc().GarbageCollector(kube, action_log=action).run))

        def guarded(name, fn):
            try:
                fn(stop)
            except Exception:
                log.exception("role %s failed; stopping", name)
                failed.append(name)
                stop.set()

        threads = [threading.Thread(target=guarded, args=(n, fn), name=n, daemon=True) for n, fn in runners]
        for t in threads:
            t.start()
        log.info("running roles %s against %s:%s (state in %s)", ",".join(args.roles), kube.host, kube.port, state_dir)
        while not stop.is_set() and not signals:
            time.sleep(0.2)
        if signals:
            log.info("signal %d: stopping", signals[0])
        stop.set()
        for t in threads:
            t.join(10.0)
            if t.is_alive():
                log.warning("role %s did not stop within 10 s", t.name)
    finally:
        stop.set()
        if kubelet is not None:
            try:
                kubelet.cleanup()
                if reaper is not None:
                    os.write(reaper, b"1")
            except Exception:
                log.exception("kubelet cleanup failed")
        try:
            os.unlink(pid_file)
        except OSError:
            pass
    log.info("stopped")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
