"""A whole local cluster for end-to-end runs: an API server holding the operator's token to
deploy/mpijob-operator.yaml's RBAC, the cluster simulation (tests/cluster) running the pods'
containers from the images `make images` builds (runc, images pulled from build/images), and
mpijob-operator. Used by test_e2e.py and soak.py. The images are built first when their sources
changed (scripts/images.py).

Which API server, control plane and nodes:
  - KUBEBUILDER_ASSETS naming etcd, kube-apiserver, kube-controller-manager, kube-scheduler and
    also kubelet, kube-proxy and coredns: the real control plane and two real nodes
    (tests/cluster/realnode/nodes.py: containerd, runc, CNI, kubelet, kube-proxy, CoreDNS);
    real_nodes is True;
  - KUBEBUILDER_ASSETS naming etcd, kube-apiserver, kube-controller-manager and kube-scheduler:
    all four real (launch.py --control-plane); the simulation plays only the kubelet
    (`cluster.py --roles kubelet`), the real Job controller, garbage collector and scheduler do
    the rest (control_plane is True);
  - KUBEBUILDER_ASSETS with etcd and kube-apiserver only: those, and the simulation plays
    kubelet, scheduler, Job controller and garbage collector (real_apiserver is True);
  - otherwise the API-server double and the whole simulation.
The double's control API (request log, dropped watches) exists only on the double: drop_watches()
and request_log() raise Unsupported elsewhere; pod_names_created_twice() works on both (a watch).

    c = LocalCluster()          # starts everything; needs root and make all
    c = LocalCluster(nodes=3)   # the simulation's kubelet serves three nodes (cluster.py --nodes)
    c = LocalCluster(workload_api=True, operator_args=["--gang-scheduling", "workload"])
    c.kubectl("apply", "-f", path)
    c.restart_operator(kill=True)
    c.drop_watches()
    c.stop()                    # removes everything (E2E_KEEP=1 keeps the state folder)
"""
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request

import yaml

ROOT = os.environ.get("MPIJOB_SRC_DIR") or os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
from deadline import Deadline, scaled, wait_for  # noqa: E402
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import oom_allocator  # noqa: E402
OPERATOR = os.path.join(ROOT, "build", "bin", "mpijob-operator")
WORKER = os.path.join(ROOT, "build", "bin", "mpijob-worker")


class Unsupported(Exception):
    """What only the API-server double can do, asked of a real kube-apiserver."""


def control_plane_assets():
    """True when KUBEBUILDER_ASSETS holds all four real binaries the control plane needs."""
    assets = os.environ.get("KUBEBUILDER_ASSETS")
    return bool(assets) and all(os.access(os.path.join(assets, b), os.X_OK) for b in
                                ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"))


def real_nodes_assets():
    """True when KUBEBUILDER_ASSETS also holds kubelet, kube-proxy and coredns, and real nodes can
    run here (tests/cluster/realnode/nodes.py)."""
    if not control_plane_assets():
        return False
    sys.path.insert(0, os.path.join(ROOT, "tests", "cluster", "realnode"))
    import nodes  # noqa: E402 (tests/cluster/realnode)
    return nodes.available(os.environ.get("KUBEBUILDER_ASSETS"))


def tier():
    """The tier the end-to-end tests run on here: "double", "real control plane" or "real nodes"."""
    if real_nodes_assets():
        return "real nodes"
    return "real control plane" if control_plane_assets() else "double"


def _running(pid):
    """The process exists and is not a zombie."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return False


IMAGES_INDEX = os.path.join(ROOT, "build", "images", "index.json")
_images = {}


def build_images():
    """Runs scripts/images.py once per process (it builds only what changed); None when the
    images are there, else why not."""
    if "why" not in _images:
        script = os.path.join(ROOT, "scripts", "images.py")
        check = subprocess.run([sys.executable, script, "--check"], capture_output=True, text=True)
        if check.returncode != 0:
            _images["why"] = check.stdout.strip() or check.stderr.strip()
        else:
            proc = subprocess.run([sys.executable, script], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True)
            _images["why"] = None if proc.returncode == 0 else "scripts/images.py failed:\n" + proc.stdout
            if _images["why"] is None:
                _images["why"] = prepull()
    return _images["why"]


def prepull():
    """Unpacks every image where the clusters' kubelets look for it (runtime.shared_cache_dir),
    as a node's image pre-pull does: the first pod of an image then starts in seconds instead of
    waiting minutes, on a loaded machine, for skopeo and umoci inside a test's time limit.
    None, or why not."""
    sys.path.insert(0, os.path.join(ROOT, "tests", "cluster"))
    import runtime  # noqa: E402 (tests/cluster)
    try:
        runtime.ImageStore(IMAGES_INDEX, runtime.shared_cache_dir(IMAGES_INDEX)).pull_all()
    except runtime.PullError as e:
        return "pre-pulling the images: %s" % e
    return None


def missing():
    """Why a local cluster cannot run here, or None (the images are built when they can be)."""
    if os.geteuid() != 0:
        return "needs root: the cluster simulation makes network namespaces"
    if not shutil.which("kubectl"):
        return "needs kubectl"
    for b in (OPERATOR, WORKER):
        if not os.access(b, os.X_OK):
            return "%s is not built (make all)" % b
    return build_images()


HELM = os.path.join(ROOT, "build", "tools", "bin", "helm")
CHART = os.path.join(ROOT, "charts", "mpijob-operator")
RELEASE, RELEASE_NS = "mpijob-operator", "mpijob-system"
OPERATOR_SELECTOR = "app.kubernetes.io/name=mpijob-operator,app.kubernetes.io/instance=" + RELEASE


class LocalCluster:
    """operator="process": build/bin/mpijob-operator on this machine, its token held to
    deploy/mpijob-operator.yaml's RBAC. operator="chart": installed with `helm install` of
    charts/mpijob-operator, its two replicas pods from the operator image, with their
    ServiceAccount token and in-cluster configuration; RBAC is what the chart made.
    nodes: how many nodes the simulation serves (cluster.py --nodes: sim-node, sim-node-1, ...),
    on the double and the real control plane; real nodes on the real-node tier (at least two)."""

    def __init__(self, prefix="mpijob-e2e-", job_pod_backoff="0.5", operator="process", nodes=1,
                 workload_api=False, operator_args=()):
        if operator not in ("process", "chart"):
            raise ValueError("operator: process or chart")
        self.mode = operator
        self.node_count = nodes
        self.operator_args = list(operator_args)
        self.tier = tier()
        self.nodes = []
        self.real_nodes = False
        self.work = tempfile.mkdtemp(prefix=prefix)
        self.operator = None
        self.cluster = None
        self.api_pids = []
        self.pod_watch = None
        try:
            api = os.path.join(self.work, "api")
            argv = [sys.executable, os.path.join(ROOT, "tests", "apiserver", "launch.py"), "--state-dir", api,
                    "--background"]
            if self.mode == "process":
                argv += ["--rbac", os.path.join(ROOT, "deploy", "mpijob-operator.yaml")]
            # In chart mode the double also plays kube-controller-manager's part in pods'
            # in-cluster configuration (default ServiceAccounts, kube-root-ca.crt).
            if control_plane_assets() or self.mode == "chart":
                argv.append("--control-plane")
            if workload_api:    # kube-scheduler's Workload API where the release has it (launch.py)
                argv.append("--workload-api")
            with open(os.path.join(self.work, "launch.log"), "w") as err:
                r = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=err)
            if r.returncode != 0:
                raise RuntimeError("the API server did not start:\n" + self.tail("launch.log"))
            with open(os.path.join(api, "pid")) as f:
                self.api_pids = [int(x) for x in f.read().split()]
            with open(os.path.join(api, "info.json")) as f:
                info = json.load(f)
            # a real kube-apiserver (KUBEBUILDER_ASSETS) has no request log or fault injection
            self.real_apiserver = info.get("kind") == "real"
            # ... and with kube-controller-manager and kube-scheduler, the simulation is the kubelet
            self.control_plane = bool(info.get("controlPlane"))
            self.kubeconfig = os.path.join(api, "kubeconfig")
            self.operator_kubeconfig = os.path.join(api, "operator.kubeconfig")
            self.cluster_state = os.path.join(self.work, "cluster")
            self.real_nodes = self.control_plane and real_nodes_assets()
            if self.real_nodes:
                self.start_real_nodes()
            else:
                self.start_simulation(job_pod_backoff)
            self._watch_pods()
            if self.mode == "chart":
                self.helm_install()
            else:
                self.start_operator()
        except BaseException:
            self.stop()
            raise

    def start_simulation(self, job_pod_backoff):
        roles = "kubelet" if self.control_plane else "kubelet,scheduler,jobs,deployments,gc"
        self.cluster = subprocess.Popen(
            [sys.executable, os.path.join(ROOT, "tests", "cluster", "cluster.py"), "--kubeconfig", self.kubeconfig,
             "--roles", roles, "--nodes", str(self.node_count),
             # a node the examples fit on (a real scheduler counts their cpu and memory; the
             # legacy manifest asks for a GPU)
             "--node-resource", "cpu=64", "--node-resource", "memory=256Gi", "--node-resource", "pods=250",
             "--node-resource", "nvidia.com/gpu=4",
             "--state-dir", self.cluster_state, "--images", IMAGES_INDEX,
             "--job-pod-backoff", job_pod_backoff, "--log-file", os.path.join(self.work, "cluster.log")])

    def start_real_nodes(self):
        """tests/cluster/realnode/nodes.py: two real nodes, or as many as asked; returns once they are Ready and CoreDNS
        answers (or fails with the end of its log)."""
        self.cluster = subprocess.Popen(
            [sys.executable, os.path.join(ROOT, "tests", "cluster", "realnode", "nodes.py"),
             "--kubeconfig", self.kubeconfig, "--assets", os.environ["KUBEBUILDER_ASSETS"],
             "--images", IMAGES_INDEX, "--state-dir", self.cluster_state, "--node-resource", "nvidia.com/gpu=4",
             "--nodes", str(max(2, self.node_count)),
             "--log-file", os.path.join(self.work, "cluster.log")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        ready = os.path.join(self.cluster_state, "ready")

        def up():
            if self.cluster.poll() is not None:
                # why first (a failure's report may keep only its first line), then the log's end
                try:
                    with open(os.path.join(self.cluster_state, "error"), errors="replace") as f:
                        why = f.readline().strip()
                except OSError:
                    why = "nodes.py exited with status %s" % self.cluster.returncode
                raise RuntimeError("the real nodes did not start: %s\n%s" % (why, self.tail("cluster.log")))
            return os.path.exists(ready)
        wait_for("the real nodes Ready", up, 300, interval=0.2, describe=lambda: self.tail("cluster.log"))
        with open(os.path.join(self.cluster_state, "nodes.json")) as f:
            self.nodes = json.load(f)

    # ---------------------------------------------------------------- processes
    def start_operator(self):
        with open(os.path.join(self.work, "operator.log"), "ab") as log:
            self.operator = subprocess.Popen(
                # outside the cluster the operator cannot read the cluster's DNS domain from its
                # pod's resolv.conf: it is told, as a user running it so would tell it
                [OPERATOR, "--kubeconfig", self.operator_kubeconfig, "--lease-namespace", "mpijob-system",
                 "--cluster-domain", "cluster.local", "--metrics-addr", "0", "--health-addr", "0"]
                + self.operator_args,
                stdout=log, stderr=subprocess.STDOUT)

    def restart_operator(self, kill=False):
        """Stops the operator (SIGKILL when kill, else SIGTERM) and starts a fresh one."""
        self.operator.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
        self.operator.wait(timeout=scaled(60))
        self.start_operator()

    # ---------------------------------------------------------------- the chart
    def helm(self, *args):
        env = dict(os.environ, KUBECONFIG=self.kubeconfig,
                   HELM_CACHE_HOME=os.path.join(self.work, "helm", "cache"),
                   HELM_CONFIG_HOME=os.path.join(self.work, "helm", "config"),
                   HELM_DATA_HOME=os.path.join(self.work, "helm", "data"))
        return subprocess.run([HELM] + list(args), capture_output=True, text=True, timeout=scaled(300), env=env)

    def helm_install(self, timeout=300):
        """helm install of the chart, then waits until both replicas are Running and Ready and
        one holds the Lease; returns the pods."""
        version = self.helm("version", "--short").stdout.strip()
        print("helm install of the chart with Helm %s (%s)" % (version, HELM), file=sys.stderr, flush=True)
        r = self.helm("install", RELEASE, CHART, "-n", RELEASE_NS, "--create-namespace")
        with open(os.path.join(self.work, "helm.log"), "a") as f:
            f.write("Helm %s\n" % version + r.stdout + r.stderr)
        if r.returncode != 0:
            raise RuntimeError("helm install failed:\n" + r.stdout + r.stderr)
        return self.wait_operator_pods(timeout)

    def operator_pods(self):
        r = self.kubectl("get", "pods", "-n", RELEASE_NS, "-l", OPERATOR_SELECTOR, "-o", "json")
        return json.loads(r.stdout)["items"] if r.returncode == 0 else []

    def lease_holder(self):
        r = self.kubectl("get", "lease", "mpijob-operator", "-n", RELEASE_NS, "-o",
                         "jsonpath={.spec.holderIdentity}")
        return r.stdout.strip() if r.returncode == 0 else ""

    def wait_operator_pods(self, timeout=300, replicas=2):
        """The operator's pods once `replicas` of them are Running and Ready and one of them holds
        the Lease; fails with their states, the Lease and their logs."""
        def ready():
            pods = [p for p in self.operator_pods() if not p["metadata"].get("deletionTimestamp")]
            ready = [p for p in pods if any(c["type"] == "Ready" and c["status"] == "True"
                                            for c in (p.get("status") or {}).get("conditions") or [])]
            holder = self.lease_holder()
            if len(ready) == replicas and any(holder.startswith(p["metadata"]["name"]) for p in ready):
                return ready
            return None

        def describe():
            return "pods: %s\nlease: %s\n%s" % (
                json.dumps([(p["metadata"]["name"], (p.get("status") or {}).get("phase"),
                             (p.get("status") or {}).get("containerStatuses")) for p in self.operator_pods()])[:3000],
                self.lease_holder(), self.operator_logs()[-3000:])
        return wait_for("the operator's pods Ready with a leader among them", ready, timeout, interval=0.5,
                        describe=describe)

    def pod_logs(self, namespace, pod_prefix):
        """[(file name, text)] of the logs of every container of the pods whose names start with
        pod_prefix, also of pods already deleted: the simulation's log files, or on real nodes
        their copies (nodes.py's LogKeeper), both in <cluster state>/logs."""
        found = []
        logs = os.path.join(self.cluster_state, "logs")
        for f in sorted(os.listdir(logs)) if os.path.isdir(logs) else []:
            if f.startswith("%s_%s" % (namespace, pod_prefix)):
                with open(os.path.join(logs, f), errors="replace") as fh:
                    found.append((f, fh.read()))
        return found

    def operator_logs(self):
        return "".join("== %s\n%s" % (name, text) for name, text in self.pod_logs(RELEASE_NS, ""))

    def operator_log_tail(self, n=4000):
        """The end of the operator's log: its process's, or its pods' in chart mode."""
        return self.operator_logs()[-n:] if self.mode == "chart" else self.tail("operator.log", n)

    def helm_uninstall(self):
        r = self.helm("uninstall", RELEASE, "-n", RELEASE_NS)
        if r.returncode != 0:
            raise RuntimeError("helm uninstall failed:\n" + r.stdout + r.stderr)
        return r

    def stop(self):
        if self.pod_watch is not None:
            self.pod_watch[0].set()
            self.pod_watch[1].join(10)
            self.pod_watch = None
        for p in (self.operator, self.cluster):
            if p is not None and p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in (self.operator, self.cluster):
            if p is not None:
                try:
                    p.wait(timeout=scaled(60))
                except subprocess.TimeoutExpired:
                    p.kill()
        # The launcher (first pid) stops what it started, in order, and then reads the audit log
        # in its state folder: wait for it before the folder goes; whatever is left after 30 s
        # is killed.
        if self.api_pids:
            launcher, rest = self.api_pids[0], self.api_pids[1:]
            try:
                os.kill(launcher, signal.SIGTERM)
            except ProcessLookupError:
                pass
            deadline = Deadline(30)
            while not deadline.passed() and any(_running(p) for p in self.api_pids):
                time.sleep(0.05)
            for pid in [launcher] + rest:
                if _running(pid):
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
        self.api_pids = []
        if os.environ.get("E2E_KEEP"):
            print("kept: %s" % self.work)
        else:
            shutil.rmtree(self.work, ignore_errors=True)

    # ---------------------------------------------------------------- the API
    def kubectl(self, *args, stdin=None):
        """subprocess.CompletedProcess of kubectl against this cluster (text)."""
        return subprocess.run(["kubectl", "--kubeconfig", self.kubeconfig] + list(args), input=stdin,
                              capture_output=True, text=True, timeout=scaled(120))

    def _control(self, method, path, body=None):
        with open(self.kubeconfig) as f:
            kc = yaml.safe_load(f)
        server = kc["clusters"][0]["cluster"]["server"]
        token = kc["users"][0]["user"]["token"]
        ctx = ssl.create_default_context(cafile=os.path.join(os.path.dirname(self.kubeconfig), "ca.crt"))
        req = urllib.request.Request(server + path, method=method,
                                     data=json.dumps(body).encode() if body is not None else None)
        req.add_header("Authorization", "Bearer " + token)
        req.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(req, context=ctx, timeout=scaled(60)) as resp:
            return json.loads(resp.read() or b"null")

    def drop_watches(self):
        """Every open watch stream is cut (the double's fault injection)."""
        if self.real_apiserver:
            raise Unsupported("a real kube-apiserver cannot be told to cut its watch streams")
        self._control("POST", "/_double/fault", {"dropWatches": True})

    def request_log(self, since=0):
        """The double's request log: a list of {seq, method, path, verb, resource, name, code, ...}."""
        if self.real_apiserver:
            raise Unsupported("a real kube-apiserver keeps no request log to read back")
        return self._control("GET", "/_double/log?since=%d" % since)

    def _watch_pods(self):
        """Records every pod (namespace, name) -> set of uids seen, from a watch over the whole run,
        on any API server."""
        import threading
        sys.path.insert(0, os.path.join(ROOT, "tests", "cluster"))
        from kube import Kube
        self.pod_uids = {}
        lock = threading.Lock()
        self._pod_uids_lock = lock

        def on_event(etype, pod):
            meta = pod.get("metadata") or {}
            with lock:
                self.pod_uids.setdefault((meta.get("namespace"), meta.get("name")), set()).add(meta.get("uid"))

        stop = threading.Event()
        t = threading.Thread(target=Kube.from_kubeconfig(self.kubeconfig).watch,
                             args=("/api/v1/pods", None, on_event, stop), daemon=True, name="e2e-pod-watch")
        t.start()
        self.pod_watch = (stop, t)

    def pod_names_created_twice(self, namespace, name_filter=lambda name: True):
        """{pod name: number of distinct pods seen under it} for names seen more than once."""
        with self._pod_uids_lock:
            return {n: len(u) for (ns, n), u in self.pod_uids.items()
                    if ns == namespace and name_filter(n) and len(u) > 1}

    def launcher_log(self, ns, name):
        return "".join(text for _, text in self.pod_logs(ns, name + "-launcher-"))

    # ---------------------------------------------------------------- faults
    def lose_node(self, name):
        """Real nodes: the node goes as a machine that dies does: its kubelet and kube-proxy stop,
        every container on it is killed, containerd stops and its network link goes down. The
        control plane learns it only from the kubelet's silence."""
        node = next(n for n in self.nodes if n["name"] == name)
        for daemon in ("kubelet", "kube-proxy"):
            try:
                os.kill(node["pids"][daemon], signal.SIGKILL)
            except (KeyError, ProcessLookupError):
                pass
        ctr = ["ctr", "--address", node["containerd"], "--connect-timeout", "5s", "-n", "k8s.io"]
        tasks = subprocess.run(ctr + ["tasks", "ls", "-q"], capture_output=True, text=True, timeout=60)
        for task in tasks.stdout.split() if tasks.returncode == 0 else []:
            subprocess.run(ctr + ["tasks", "kill", "-a", "-s", "KILL", task], capture_output=True, timeout=60)
        try:
            os.kill(node["pids"]["containerd"], signal.SIGKILL)
        except (KeyError, ProcessLookupError):
            pass
        subprocess.run(["ip", "link", "set", node["hostInterface"], "down"], check=True)

    def _ask_and_wait(self, control, request, done, what, timeout, log):
        """Asks the process watching the folder `control` for something by creating the file
        `request` there, and waits until it writes the file `done`; returns what that file says."""
        os.makedirs(control, exist_ok=True)
        done = os.path.join(control, done)
        try:
            os.unlink(done)
        except FileNotFoundError:
            pass
        with open(os.path.join(control, request), "w"):
            pass
        wait_for(what, lambda: os.path.exists(done), timeout, interval=0.1, describe=lambda: self.tail(log))
        with open(done) as f:
            return f.read().strip()

    def restart_daemon(self, node_name, daemon, timeout=60):
        """Real nodes: restarts the node's kubelet, containerd or kube-proxy as `systemctl
        restart` does (SIGTERM, then started again: tests/cluster/realnode/nodes.py); returns
        once the new process runs, with its process id."""
        if not self.real_nodes:
            raise Unsupported("restarting a node's %s needs real nodes" % daemon)
        answer = self._ask_and_wait(os.path.join(self.cluster_state, "control"), "%s.%s.restart" % (node_name, daemon),
                                    "%s.%s.done" % (node_name, daemon), "%s's %s restarted" % (node_name, daemon),
                                    timeout, "cluster.log")
        if not answer.isdigit():
            raise RuntimeError(answer)
        return int(answer)

    def restart_control_plane(self, timeout=180):
        """A real control plane: etcd, kube-apiserver, kube-controller-manager and kube-scheduler
        stopped and started again with their data and ports (launch.py's restart); returns
        {"stoppedSeconds", "downSeconds", "pids"} once all four serve again."""
        if not self.real_apiserver:
            raise Unsupported("restarting etcd and kube-apiserver needs a real control plane")
        api = os.path.join(self.work, "api")
        answer = json.loads(self._ask_and_wait(os.path.join(api, "control"), "restart", "restarted",
                                               "the control plane restarted", timeout, "launch.log"))
        if "error" in answer:
            raise RuntimeError("the control plane did not restart: %s" % answer["error"])
        with open(os.path.join(api, "pid")) as f:
            self.api_pids = [int(x) for x in f.read().split()]
        return answer

    def evict_pod(self, ns, name):
        """Has the pod's node evict it, as a kubelet does under resource pressure; returns the
        outcomes to accept once that fails the job: (the MPIJob's Failed reason, words of its
        message) pairs. The simulation's kubelet is told to (memory pressure) and reports the pod
        Failed, reason Evicted. A real one is made to: the pod's container (which needs an
        ephemeral-storage limit of at most 32Mi) writes past its limit, and the kubelet's eviction
        manager stops the pod on its next round. Kubelet 1.32 then reports the pod one of two ways,
        depending on which of its loops writes the status first: Failed, reason Evicted, with the
        eviction manager's message (the job fails as evicted), or as its containers ended, where
        sshd exits 0 on SIGTERM, so the worker is Succeeded, with no reason and no
        DisruptionTarget condition; the operator treats a worker that ends while the job runs as
        failed (docs/internals/real-nodes.md)."""
        if not self.real_nodes:
            sys.path.insert(0, os.path.join(ROOT, "tests", "cluster"))
            import control  # noqa: E402 (tests/cluster)
            ans = control.request(self.cluster_state, "evict", ns, name,
                                  message="The node was low on resource: memory.")
            if not ans.get("ok"):
                raise RuntimeError("evict %s/%s: %s" % (ns, name, ans))
            return [("MPIJobEvicted", "low on resource: memory")]
        r = self.kubectl("exec", "-n", ns, name, "--", "sh", "-c", "head -c 64M /dev/zero > /var/tmp/fill")
        if r.returncode != 0:
            raise RuntimeError("filling %s/%s's storage: %s" % (ns, name, r.stderr))
        return [("WorkerFailed", "exited 0 while the job ran"),
                ("MPIJobEvicted", "ephemeral local storage usage exceeds the total limit")]

    def kill_pod(self, ns, name):
        """SIGKILL to the pod's containers, from its node: the simulation's kubelet does it, or on
        a real node containerd (`ctr tasks kill`), as the kernel's OOM killer would."""
        if not self.real_nodes:
            sys.path.insert(0, os.path.join(ROOT, "tests", "cluster"))
            import control  # noqa: E402 (tests/cluster)
            ans = control.request(self.cluster_state, "kill", ns, name)
            if not ans.get("ok"):
                raise RuntimeError("kill %s/%s: %s" % (ns, name, ans))
            return
        pod = json.loads(self.kubectl("get", "pod", name, "-n", ns, "-o", "json").stdout)
        node = next(n for n in self.nodes if n["name"] == pod["spec"]["nodeName"])
        for cs in pod["status"].get("containerStatuses") or []:
            cid = (cs.get("containerID") or "").partition("://")[2]
            if cid:
                r = subprocess.run(["ctr", "--address", node["containerd"], "-n", "k8s.io", "tasks", "kill",
                                    "-s", "KILL", cid], capture_output=True, text=True)
                if r.returncode != 0:
                    raise RuntimeError("ctr tasks kill %s: %s" % (cid, r.stderr))

    CUT_RULES = (["INPUT", "!", "-i", "lo", "-j", "DROP"], ["OUTPUT", "!", "-o", "lo", "-j", "DROP"])

    def _container_pid(self, pod):
        """Real nodes: the host's process id of the pod's first container's main process, as its
        node's containerd lists its task (None when it has none), the node, and that list."""
        node = next(n for n in self.nodes if n["name"] == pod["spec"]["nodeName"])
        cid = (pod["status"]["containerStatuses"][0].get("containerID") or "").partition("://")[2]
        tasks = subprocess.run(["ctr", "--address", node["containerd"], "-n", "k8s.io", "tasks", "ls"],
                               capture_output=True, text=True, timeout=60, check=True).stdout
        # a task that has ended keeps its line (STOPPED) and its last pid until the kubelet removes it
        pid = next((int(f[1]) for f in (line.split() for line in tasks.splitlines()[1:])
                    if len(f) >= 3 and f[0] == cid and f[2] == "RUNNING"), None)
        return pid, node, tasks

    # Seconds between the allocator's first OOM kill and the rest of its allocation.
    FIRST_PAUSE_S = 2.0

    @staticmethod
    def _memory_cgroup(pid):
        """The folder of process pid's memory cgroup under /sys/fs/cgroup (v1 or v2)."""
        with open("/proc/%d/cgroup" % pid) as f:
            for line in f.read().splitlines():
                _, controllers, path = line.split(":", 2)
                if "memory" in controllers.split(","):
                    return "/sys/fs/cgroup/memory" + path
                if controllers == "" and os.path.exists("/sys/fs/cgroup/cgroup.controllers"):
                    return "/sys/fs/cgroup" + path
        raise RuntimeError("process %d has no memory cgroup" % pid)

    def oom_kill_pod(self, ns, name):
        """Real nodes: the pod's first container goes over its memory limit and the kernel's OOM
        killer of the container's memory cgroup ends it; the kubelet reports it OOMKilled, as
        containerd saw the cgroup's OOM event. The container must have a memory limit.

        The memory is taken by a process of the node's that joins the container's memory cgroup
        (oom_allocator.py). On cgroup v2 the kubelet sets memory.oom.group, and the kernel kills every
        process of the container. On cgroup v1 it kills one, the one scoring highest, and the
        container lives on without it unless that one is its main process, the first of its PID
        namespace. So that the container ends as on v2, its main process is given oom_score_adj
        1000 from the node. That wins only over processes whose own adjustment keeps them below
        it: the kubelet's -997 of a Guaranteed pod (a Burstable pod's 2 to 999 would leave a
        rank scoring higher by its size), and the allocator's 0, whose size stays under the
        limit. (Lowering a process's adjustment needs CAP_SYS_RESOURCE, which the node's root
        may lack.)

        containerd says OOMKilled of a container that exits once it has handled an OOM event of
        its cgroup; when the exit reaches it first it says Error (exit code 137), and the kubelet
        keeps that (seen on 1.32.13). So the allocator's first victim is a child of
        its own, larger than the main process at the same adjustment: its OOM kill is the
        container's first OOM event; FIRST_PAUSE_S later the allocation goes on and the main
        process goes. Both are the kernel's kills at the container's own limit.

        Returns the host's cgroup version and the seconds from the start of the allocation until
        the container's main process was gone."""
        if not self.real_nodes:
            raise Unsupported("an OOM kill by a container's memory cgroup needs real nodes")
        pod = json.loads(self.kubectl("get", "pod", name, "-n", ns, "-o", "json").stdout)
        limit = (((pod["spec"]["containers"][0].get("resources") or {}).get("limits")) or {}).get("memory")
        if not limit:
            raise RuntimeError("%s/%s's container has no memory limit to exceed" % (ns, name))
        version = 2 if os.path.exists("/sys/fs/cgroup/cgroup.controllers") else 1
        qos = (pod.get("status") or {}).get("qosClass")
        if version == 1 and qos != "Guaranteed":
            raise RuntimeError("%s/%s is %s: on cgroup v1 only a Guaranteed pod's container can be made to end "
                               "by its OOM killer (see oom_kill_pod)" % (ns, name, qos))
        pid, node, tasks = self._container_pid(pod)
        if pid is None:
            raise RuntimeError("no task of %s/%s's container on %s:\n%s" % (ns, name, node["name"], tasks))
        cgroup = self._memory_cgroup(pid)
        if version == 1:
            with open("/proc/%d/oom_score_adj" % pid, "w") as f:
                f.write("1000")
        t0 = time.monotonic()
        r = subprocess.run([sys.executable, os.path.join(HERE, "oom_allocator.py"), cgroup, str(pid),
                            str(self.FIRST_PAUSE_S)],
                           capture_output=True, text=True, timeout=360)
        said = dict(line.split() for line in r.stdout.splitlines() if len(line.split()) == 2)
        took = float(said.get("victim", time.monotonic() - t0))
        if oom_allocator.alive(pid):
            with open(os.path.join(cgroup, "cgroup.procs")) as f:
                procs = f.read().split()
            raise RuntimeError("%s/%s's main process %d outlived the allocation in %s (status %s; processes "
                               "there: %s): %s" % (ns, name, pid, cgroup, r.returncode, procs, r.stderr[-2000:]))
        return version, took

    def cut_pod_network(self, ns, name, heal=False):
        """Real nodes: every packet into and out of the pod dropped, in its own network namespace
        (iptables), as a failed link or switch port would leave it: nothing is refused, nothing
        arrives; its loopback still works. heal=True removes the rules where they still are: a
        pod of the same name made since (a replaced worker), or a container that has ended, has
        none to remove."""
        if not self.real_nodes:
            raise Unsupported("cutting a pod's network needs real nodes")
        r = self.kubectl("get", "pod", name, "-n", ns, "-o", "json")
        if heal and r.returncode != 0:
            return      # the pod is gone, and its network namespace with it
        pid, node, tasks = self._container_pid(json.loads(r.stdout))
        if pid is None and heal:
            return      # the container is gone
        if pid is None:
            raise RuntimeError("no task of %s/%s's container on %s:\n%s" % (ns, name, node["name"], tasks))
        for rule in self.CUT_RULES:
            in_pod = ["nsenter", "-t", str(pid), "-n", "iptables"]
            if heal and subprocess.run(in_pod + ["-C", rule[0]] + rule[1:], capture_output=True,
                                       timeout=60).returncode != 0:
                continue    # not there: a pod of the same name made since the cut, or one ending
            argv = in_pod + (["-D", rule[0]] + rule[1:] if heal else ["-I", rule[0], "1"] + rule[1:])
            r = subprocess.run(argv, capture_output=True, text=True, timeout=60)
            if r.returncode != 0 and heal and not os.path.exists("/proc/%d/ns/net" % pid):
                return      # the container ended meanwhile, and its pod's namespace goes with the pod
            if r.returncode != 0:
                raise RuntimeError("%s exited with %d: %s" % (" ".join(argv), r.returncode, r.stderr.strip()))

    def tail(self, name, n=3000):
        try:
            with open(os.path.join(self.work, name), errors="replace") as f:
                return f.read()[-n:]
        except OSError:
            return ""
