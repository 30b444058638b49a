#!/usr/bin/env python3
"""Real Kubernetes nodes on this machine, under a real control plane (launch.py --control-plane):
per node containerd with runc, the CNI bridge and host-local plugins, kubelet and kube-proxy, each
node in its own network namespace; CoreDNS as a Deployment in kube-system. The counterpart of
cluster.py's simulated kubelet, for the real-node tier.

    nodes.py --kubeconfig PATH --assets DIR --images build/images/index.json --state-dir DIR
             [--nodes 2] [--node-resource NAME=QUANTITY] [--log-file FILE] [--survive-parent]

DIR (--assets) holds kubelet, kube-proxy and coredns (KUBEBUILDER_ASSETS). It runs until SIGTERM or
SIGINT, then stops every daemon and removes what it made: containers, mounts, network namespaces,
links, routes, iptables rules, cgroups. STATE/ready appears once every node is Ready, kube-proxy
runs on each and CoreDNS answers; STATE/nodes.json then lists the nodes ({name, ip, podCIDR,
namespace, containerd}). Nothing leaves the machine: see network.py. Needs root.

--node-resource adds an extended resource (a name with a '/', such as nvidia.com/gpu=4) to every
node's capacity, as a device plugin or `kubectl patch node --subresource=status` would; a real
kubelet reports cpu and memory itself, so those are refused.

A test restarts one daemon of a node (kubelet, containerd, kube-proxy) as `systemctl restart`
would by writing STATE/control/NODE.DAEMON.restart; STATE/control/NODE.DAEMON.done then holds the
new process id (nodes.json is rewritten with it).

A run that died without cleaning up (SIGKILL) is swept by the next one: /run/mpijob-realnodes
holds each run's prefix and process id.
"""

import argparse
import contextlib
import ctypes
import fcntl
import json
import logging
import os
import random
import re
import shutil
import signal
import string
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "support"))

import config  # noqa: E402
import coredns  # noqa: E402
import images  # noqa: E402
import network  # noqa: E402
from atomic import write_atomic  # noqa: E402
from deadline import scaled  # noqa: E402
from kube import Kube, KubeError, _load_kubeconfig as load_kubeconfig  # noqa: E402

log = logging.getLogger("realnodes")
RUNS_DIR = "/run/mpijob-realnodes"
RELAY_PORT = 6443
BINARIES = ("kubelet", "kube-proxy", "coredns")
TOOLS = ("containerd", "ctr", "containerd-shim-runc-v2", "runc", "socat", "nsenter", "iptables", "podman", "gcc")
CNI_PLUGINS = ("bridge", "host-local", "portmap", "loopback")
READY_TIMEOUT = scaled(240.0)
# Whatever --root-dir says, a kubelet binds its device-plugin socket at this fixed path, removing
# what is there first; two kubelets starting at once, of one run or of two runs side by side
# (the test binary runs two tests at a time), can both find it taken and exit ("address already
# in use"). Kubelets therefore start one at a time on this machine: KUBELET_START_LOCK is held
# from a kubelet's start until it owns that socket.
DEVICE_PLUGIN_SOCKET = "/var/lib/kubelet/device-plugins/kubelet.sock"
LOW_DISK = 2 << 30      # free bytes under which the log warns at the start
KUBELET_START_LOCK = os.path.join(RUNS_DIR, "kubelet-start.lock")


class NodeError(Exception):
    pass


def missing(assets_dir):
    """Why real nodes cannot run here, or None."""
    if not assets_dir or not all(os.access(os.path.join(assets_dir, b), os.X_OK) for b in BINARIES):
        return "KUBEBUILDER_ASSETS lacks %s" % ", ".join(BINARIES)
    if os.geteuid() != 0:
        return "real nodes need root"
    for t in TOOLS:
        if not shutil.which(t) and not os.access("/usr/sbin/" + t, os.X_OK):
            return "%s is not installed (Debian: containerd runc containernetworking-plugins socat iptables podman)" % t
    for p in CNI_PLUGINS:
        if not os.access("/usr/lib/cni/" + p, os.X_OK):
            return "/usr/lib/cni/%s is missing (Debian: containernetworking-plugins)" % p
    return None


def available(assets_dir=None):
    return missing(assets_dir if assets_dir is not None else os.environ.get("KUBEBUILDER_ASSETS")) is None


def die_with_parent():
    try:
        ctypes.CDLL(None).prctl(1, signal.SIGTERM, 0, 0, 0)   # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


CGROUP_V1 = "/sys/fs/cgroup"


def cgroup_hierarchies(unified=False):
    """The cgroup v1 hierarchies (and, with unified, the v2 one a hybrid machine mounts beside
    them, where a kubelet also makes its folders)."""
    out = []
    for name in sorted(os.listdir(CGROUP_V1)) if os.path.isdir(CGROUP_V1) else []:
        path = os.path.join(CGROUP_V1, name)
        if os.path.isdir(path) and not os.path.islink(path) and (unified or name != "unified"):
            out.append(path)
    return out


def make_cgroup_root(name):
    """/<name> in every cgroup v1 hierarchy, cpuset initialised from its parent (a kubelet's
    cgroupRoot must exist)."""
    for h in cgroup_hierarchies():
        path = os.path.join(h, name)
        os.makedirs(path, exist_ok=True)
        if os.path.basename(h) == "cpuset" or os.path.exists(os.path.join(path, "cpuset.cpus")):
            for f in ("cpuset.cpus", "cpuset.mems"):
                src, dst = os.path.join(h, f), os.path.join(path, f)
                if os.path.exists(src):
                    with open(src) as a:
                        value = a.read()
                    with open(dst, "w") as b:
                        b.write(value)


def remove_cgroup_root(name):
    """Removes /<name> and everything below it, deepest first, in every hierarchy."""
    for h in cgroup_hierarchies(unified=True):
        top = os.path.join(h, name)
        if not os.path.isdir(top):
            continue
        for dirpath, _, _ in sorted(os.walk(top), key=lambda w: -w[0].count("/")):
            procs = os.path.join(dirpath, "cgroup.procs")
            try:
                with open(procs) as f:
                    for pid in f.read().split():
                        try:
                            os.kill(int(pid), signal.SIGKILL)
                        except ProcessLookupError:
                            pass
            except OSError:
                pass
            for _ in range(50):
                try:
                    os.rmdir(dirpath)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.1)


def unmount_under(paths):
    """Unmounts every mount point below any of paths, deepest first."""
    with open("/proc/self/mounts") as f:
        points = [line.split()[1].replace("\\040", " ") for line in f]
    mine = [p for p in points if any(p == x or p.startswith(x.rstrip("/") + "/") for x in paths)]
    for p in sorted(set(mine), key=len, reverse=True):
        subprocess.run(["umount", "-l", p], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@contextlib.contextmanager
def kubelet_start_lock():
    """Held while one kubelet starts (KUBELET_START_LOCK); other runs on this machine wait."""
    os.makedirs(RUNS_DIR, exist_ok=True)
    with open(KUBELET_START_LOCK, "a") as f:
        t0 = time.monotonic()
        fcntl.flock(f, fcntl.LOCK_EX)
        waited = time.monotonic() - t0
        if waited > 1:
            log.info("waited %.1f s for another kubelet to start", waited)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def owns_unix_socket(pid, path):
    """Whether process pid holds a socket bound at path (read in its own network namespace's
    /proc/PID/net/unix, matched by inode against its open descriptors)."""
    try:
        with open("/proc/%d/net/unix" % pid) as f:
            inodes = {fields[6] for fields in (line.split() for line in f.readlines()[1:])
                      if len(fields) >= 8 and fields[7] == path}
        if not inodes:
            return False
        fd_dir = "/proc/%d/fd" % pid
        for fd in os.listdir(fd_dir):
            try:
                link = os.readlink(os.path.join(fd_dir, fd))
            except OSError:
                continue
            if link.startswith("socket:[") and link[8:-1] in inodes:
                return True
    except OSError:
        pass
    return False


class Daemon:
    """One process of a node, in the node's network namespace, its output in a log file."""

    def __init__(self, name, argv, log_path):
        self.name = name
        self.argv = argv
        self.log_path = log_path
        self.proc = None

    def start(self):
        out = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                     start_new_session=True, preexec_fn=die_with_parent)
        out.close()
        return self

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self, grace=10.0, sig=signal.SIGTERM):
        if not self.alive():
            return
        try:
            self.proc.send_signal(sig)
            self.proc.wait(grace)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def tail(self, n=2000):
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()[-n:]
        except OSError:
            return ""

    def reason(self):
        """The last error or fatal line of the log (klog's E and F lines, or a Go panic), cut to
        one line: a report that keeps only the first lines of a failure still says why."""
        lines = self.tail(64 * 1024).splitlines()
        for line in reversed(lines):
            if re.match(r"[EF]\d{4} ", line) or line.startswith(("panic:", "fatal error:")) \
                    or "level=error" in line or "level=fatal" in line:
                return line.strip()[:400]
        return lines[-1].strip()[:400] if lines else "(its log is empty)"


class RealNode:
    def __init__(self, cluster, net_node):
        self.c = cluster
        self.net = net_node
        self.name = net_node.name
        self.dir = os.path.join(cluster.state_dir, net_node.name)
        # containerd's state (and its socket) under /run: a socket path is at most 107 bytes
        self.run_dir = os.path.join(RUNS_DIR, net_node.name)
        self.socket = os.path.join(self.run_dir, "containerd.sock")
        self.cgroup_root = "/" + net_node.name
        self.daemons = {}

    def path(self, *parts):
        return os.path.join(self.dir, *parts)

    def write(self, name, text):
        with open(self.path(name), "w") as f:
            f.write(text)
        return self.path(name)

    def spawn(self, name, argv):
        # Each daemon in a UTS namespace of its own named after the node, as on a machine of
        # that name: a host-network pod shares containerd's, so its host name is the node's,
        # not this machine's (unshare and sh exec, so the daemon keeps the pid it starts with).
        uts = ["unshare", "--uts", "--", "sh", "-c", 'hostname "$0" && exec "$@"', self.name]
        d = Daemon(name, self.net.nsenter() + uts + argv, self.path(name + ".log")).start()
        self.daemons[name] = d
        return d

    def ctr(self, *args, check=True):
        """ctr's output; with check=False, "" when it fails (containerd gone, say)."""
        try:
            p = subprocess.run(["ctr", "--address", self.socket, "--connect-timeout", "5s", "-n", "k8s.io", *args],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
        except subprocess.TimeoutExpired:
            if check:
                raise NodeError("ctr %s: no answer in 60 s" % " ".join(args))
            return ""
        if p.returncode != 0:
            if check:
                raise NodeError("ctr %s: %s" % (" ".join(args), (p.stderr or p.stdout).strip()))
            return ""
        return p.stdout

    def start_runtime(self):
        """containerd (spawned from the main thread: a child's parent-death signal follows the
        thread that started it)."""
        os.makedirs(self.path("cni", "net.d"), exist_ok=True)
        os.makedirs(self.run_dir, exist_ok=True)
        self.write(os.path.join("cni", "net.d", "10-realnode.conflist"),
                   config.cni_conflist(self.net.pod_cidr, self.net.pod_gateway, self.path("cni", "ipam")))
        toml = self.write("containerd.toml", config.containerd_toml(
            self.path("containerd"), self.run_dir, self.path("cni", "net.d"), images.PAUSE_IMAGE))
        self.spawn("containerd", ["containerd", "--config", toml, "--log-level", "warn"])

    def load_images(self, archives):
        """Once containerd answers, the images imported into it."""
        d = self.daemons["containerd"]
        end = time.monotonic() + scaled(60)
        while True:
            if not d.alive():
                raise NodeError("%s: containerd exited: %s\n%s" % (self.name, d.reason(), d.tail()))
            if os.path.exists(self.socket) and subprocess.run(
                    ["ctr", "--address", self.socket, "version"], stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL).returncode == 0:
                break
            if time.monotonic() > end:
                raise NodeError("%s: containerd did not answer on %s:\n%s" % (self.name, self.socket, d.tail()))
            time.sleep(0.2)
        images.import_images(self.socket, archives)

    def start_kubelet(self):
        make_cgroup_root(self.cgroup_root.lstrip("/"))
        cfg = self.write("kubelet.yaml", config.kubelet_yaml(
            self.net.ip, self.net.pod_cidr, self.cgroup_root, self.socket, self.path("pod-logs")))
        self.spawn("kubelet", [self.c.bin("kubelet"), "--config=" + cfg, "--kubeconfig=" + self.c.node_kubeconfig,
                               "--hostname-override=" + self.name, "--node-ip=" + self.net.ip,
                               "--root-dir=" + self.path("kubelet"), "--v=1"])

    def start_proxy(self):
        cfg = self.write("kube-proxy.yaml", config.kube_proxy_yaml(self.name, str(self.c.net.cidr),
                                                                     self.c.node_kubeconfig))
        self.spawn("kube-proxy", [self.c.bin("kube-proxy"), "--config=" + cfg, "--v=1"])

    def check_alive(self):
        for d in self.daemons.values():
            if not d.alive():
                raise NodeError("%s: %s exited (status %s): %s\n%s" % (self.name, d.name, d.proc.returncode,
                                                                         d.reason(), d.tail()))

    def stop(self):
        """kube-proxy and kubelet first, then every container of the node, then containerd."""
        for name in ("kube-proxy", "kubelet"):
            if name in self.daemons:
                self.daemons[name].stop()
        if "kube-proxy" in self.daemons:
            subprocess.run(self.net.nsenter() + [self.c.bin("kube-proxy"), "--cleanup"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if self.daemons.get("containerd") and self.daemons["containerd"].alive():
            for tid in self.ctr("tasks", "ls", "-q", check=False).split():
                self.ctr("tasks", "kill", "-s", "KILL", tid, check=False)
            end = time.monotonic() + 10
            while self.ctr("tasks", "ls", "-q", check=False).split() and time.monotonic() < end:
                for tid in self.ctr("tasks", "ls", "-q", check=False).split():
                    self.ctr("tasks", "delete", "-f", tid, check=False)
                time.sleep(0.2)
            for cid in self.ctr("containers", "ls", "-q", check=False).split():
                self.ctr("containers", "delete", cid, check=False)
            self.daemons["containerd"].stop()
        cleanup_node(self.name, self.dir, self.run_dir)


class LogKeeper:
    """Copies the pods' logs out of the kubelets' folders as they are written, as a cluster's log
    shipper does: a kubelet removes a pod's logs with the pod, and a launcher's last words are
    what a failed job is judged by. Each container's output goes, as plain text, to
    <state>/logs/<namespace>_<pod>_<container>.log (the simulation's layout), restarts appended."""

    def __init__(self, sources, dest):
        self.sources = sources           # the nodes' podLogsDir
        self.dest = dest
        self.offsets = {}                # CRI log file -> (bytes read, unfinished line)
        os.makedirs(dest, exist_ok=True)

    def scan(self):
        for src in self.sources:
            for pod_dir in os.listdir(src) if os.path.isdir(src) else []:
                ns, _, rest = pod_dir.partition("_")
                pod = rest.rpartition("_")[0]
                for container in os.listdir(os.path.join(src, pod_dir)) if os.path.isdir(os.path.join(src, pod_dir)) else []:
                    cdir = os.path.join(src, pod_dir, container)
                    files = sorted((f for f in os.listdir(cdir) if f.endswith(".log") and f[:-4].isdigit()),
                                   key=lambda f: int(f[:-4])) if os.path.isdir(cdir) else []
                    for f in files:
                        self.copy(os.path.join(cdir, f), os.path.join(self.dest, "%s_%s_%s.log" % (ns, pod, container)))

    def copy(self, path, out):
        done, partial = self.offsets.get(path, (0, b""))
        try:
            if os.stat(path).st_size <= done:
                return                   # nothing new: no open, every 0.2 s, for every log
            with open(path, "rb") as f:
                f.seek(done)
                data = f.read(4 << 20)
        except OSError:
            return
        if not data:
            return
        lines = data.split(b"\n")
        tail = lines.pop()               # b"" when data ended with a newline
        text = []
        for line in lines:
            fields = line.split(b" ", 3)
            if len(fields) < 3:
                continue
            partial += fields[3] if len(fields) == 4 else b""
            if fields[2] != b"P":
                text.append(partial + b"\n")
                partial = b""
        self.offsets[path] = (done + len(data) - len(tail), partial)
        if text:
            with open(out, "ab") as f:
                f.write(b"".join(text))

    def run(self, stop, interval=0.2):
        while not stop.wait(interval):
            try:
                self.scan()
            except OSError as e:         # a folder removed under the scan: the next one sees it
                log.debug("log scan: %s", e)
        self.scan()


def cleanup_node(name, node_dir, run_dir):
    """What a node leaves on this machine after its daemons stopped (or died): shims and
    containers (their cgroups), mounts, the runtime's state. node_dir may be None (unknown)."""
    subprocess.run(["pkill", "-KILL", "-f", "containerd-shim-runc-v2 .*-address %s/" % run_dir],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    remove_cgroup_root(name)
    unmount_under([d for d in (node_dir, run_dir) if d])
    shutil.rmtree(run_dir, ignore_errors=True)


class RealNodes:
    def __init__(self, args, stop):
        self.args = args
        self.stop = stop
        self.assets = os.path.abspath(args.assets)
        self.state_dir = os.path.abspath(args.state_dir)
        self.prefix = "rn" + "".join(random.choice(string.ascii_lowercase + string.digits) for _ in range(4))
        self.net = None
        self.nodes = []
        self.relay = None
        self.log_thread = None
        self.kube = Kube.from_kubeconfig(args.kubeconfig)
        self.extended = parse_resources(args.node_resource)

    def bin(self, name):
        return os.path.join(self.assets, name)

    def register_run(self):
        os.makedirs(RUNS_DIR, exist_ok=True)
        for entry in os.listdir(RUNS_DIR):
            path = os.path.join(RUNS_DIR, entry)
            if not entry.endswith(".run"):
                continue
            try:
                with open(path) as f:
                    info = json.load(f)
                os.kill(info["pid"], 0)
                continue                       # that run is still going
            except (OSError, ValueError, KeyError):
                pass
            sweep_run(info if isinstance(info, dict) else {}, entry[:-4])
            os.unlink(path)
        with open(os.path.join(RUNS_DIR, self.prefix + ".run"), "w") as f:
            json.dump({"pid": os.getpid(), "stateDir": self.state_dir, "nodes": self.args.nodes}, f)

    def up(self):
        t0 = time.monotonic()
        os.makedirs(self.state_dir, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(self.state_dir, "error"))
        self.register_run()
        self.log_free_disk()
        self.net = network.NodeNetwork(self.prefix, nodes=self.args.nodes)
        self.net.up()
        log.info("node network %s on bridge %s, this machine %s", self.net.cidr, self.net.bridge, self.net.gateway)

        # the API server, on 127.0.0.1 only, reached by nodes and pods through a relay
        api_port = self.kube.port
        self.relay = Daemon("relay", ["socat", "TCP-LISTEN:%d,bind=%s,reuseaddr,fork" % (RELAY_PORT, self.net.gateway),
                                      "TCP:127.0.0.1:%d" % api_port], os.path.join(self.state_dir, "relay.log")).start()
        kc = load_kubeconfig(self.args.kubeconfig)
        ca_pem, token = kc["ca_pem"], kc["token"]
        if not ca_pem or not token:
            raise NodeError("%s: want a certificate authority and a token" % self.args.kubeconfig)
        if isinstance(ca_pem, str):
            ca_pem = ca_pem.encode()
        self.node_kubeconfig = os.path.join(self.state_dir, "node.kubeconfig")
        with open(self.node_kubeconfig, "w") as f:
            f.write(config.kubeconfig("https://%s:%d" % (self.net.gateway, RELAY_PORT), ca_pem, token))
        os.chmod(self.node_kubeconfig, 0o600)
        self.publish_apiserver_endpoint()

        archives = images.node_images(self.args.images, self.bin("coredns"),
                                      os.path.join(os.path.dirname(os.path.abspath(self.args.images)), "realnode"))
        self.nodes = [RealNode(self, n) for n in self.net.nodes]
        for n in self.nodes:
            os.makedirs(n.dir, exist_ok=True)
        keeper = LogKeeper([n.path("pod-logs") for n in self.nodes], os.path.join(self.state_dir, "logs"))
        self.log_thread = threading.Thread(target=keeper.run, args=(self.stop,), name="logs", daemon=True)
        self.log_thread.start()
        errors = []

        for n in self.nodes:
            n.start_runtime()

        def load(node):
            try:
                node.load_images(archives)
            except Exception as e:   # reported below, with the node's name
                errors.append("%s: %s" % (node.name, e))

        threads = [threading.Thread(target=load, args=(n,)) for n in self.nodes]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise NodeError("; ".join(errors))
        # One kubelet at a time on this machine (KUBELET_START_LOCK), each until its Node is
        # registered and it owns the device-plugin socket.
        for n in self.nodes:
            with kubelet_start_lock():
                n.start_kubelet()
                self.wait("node %s registered" % n.name,
                          lambda n=n: self.kube.get("/api/v1/nodes/" + n.name) is not None or "absent")
                self.wait_device_plugin_socket(n)
        log.info("containerd up and images imported on %d nodes (%.1f s)", len(self.nodes), time.monotonic() - t0)

        self.wait("every node Ready", self.nodes_ready)
        for n in self.nodes:
            if self.extended:
                self.kube.patch_status("/api/v1/nodes/" + n.name, {"status": {"capacity": self.extended}})
            n.start_proxy()
        for path, obj in coredns.objects(images.COREDNS_IMAGE):
            try:
                self.kube.create(path, obj)
            except KubeError as e:
                if e.code != 409:
                    raise
        self.wait("CoreDNS available", self.coredns_ready)
        self.write_nodes_json()
        write_atomic(os.path.join(self.state_dir, "ready"), "%d\n" % os.getpid())
        log.info("%d real nodes up in %.1f s: %s", len(self.nodes), time.monotonic() - t0,
                 ", ".join("%s (%s)" % (n.name, n.net.ip) for n in self.nodes))

    def publish_apiserver_endpoint(self):
        """The `kubernetes` Service's endpoint: the relay (an EndpointSlice may not name a loopback
        address; launch.py runs the API server without its own endpoint reconciler for this)."""
        body = {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": {"name": "kubernetes-realnodes", "namespace": "default",
                             "labels": {"kubernetes.io/service-name": "kubernetes",
                                        "endpointslice.kubernetes.io/managed-by": "realnodes.mpijob-operator"}},
                "addressType": "IPv4",
                "endpoints": [{"addresses": [self.net.gateway], "conditions": {"ready": True}}],
                "ports": [{"name": "https", "port": RELAY_PORT, "protocol": "TCP"}]}
        path = "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices"
        self.kube.delete(path + "/kubernetes-realnodes")
        self.kube.create(path, body)

    def log_free_disk(self):
        """The free space where the nodes keep images, containers and logs: disk never counts for
        eviction here (config.kubelet_yaml), so a full disk shows as failed writes, and this line
        in the log says so first."""
        st = os.statvfs(self.state_dir)
        free = st.f_bavail * st.f_frsize
        log.log(logging.WARNING if free < LOW_DISK else logging.INFO, "%.1f GiB free on the disk of %s%s",
                free / 2**30, self.state_dir, " (low: images and containers may not fit)" if free < LOW_DISK else "")

    def wait_device_plugin_socket(self, node):
        kubelet = node.daemons["kubelet"]
        self.wait("the kubelet of %s bound %s" % (node.name, DEVICE_PLUGIN_SOCKET),
                  lambda: owns_unix_socket(kubelet.proc.pid, DEVICE_PLUGIN_SOCKET) or "not yet")

    def wait(self, what, check):
        end = time.monotonic() + READY_TIMEOUT
        last = None
        while time.monotonic() < end:
            if self.stop.is_set():
                raise NodeError("stopped while waiting for %s" % what)
            for n in self.nodes:
                n.check_alive()
            if self.relay is not None and not self.relay.alive():
                raise NodeError("the API server relay exited:\n" + self.relay.tail())
            try:
                last = check()
                if last is True:
                    return
            except (KubeError, OSError) as e:
                last = e
            time.sleep(0.5)
        raise NodeError("timed out waiting for %s; last seen: %s" % (what, last))

    def nodes_ready(self):
        states = {}
        for n in self.nodes:
            node = self.kube.get("/api/v1/nodes/" + n.name)
            conds = ((node or {}).get("status") or {}).get("conditions") or []
            states[n.name] = next((c.get("status") for c in conds if c.get("type") == "Ready"), "absent")
        return True if all(v == "True" for v in states.values()) else states

    def coredns_ready(self):
        d = self.kube.get("/apis/apps/v1/namespaces/kube-system/deployments/coredns")
        if (d.get("status") or {}).get("availableReplicas"):
            return True
        pods, _ = self.kube.list("/api/v1/namespaces/kube-system/pods", label_selector="k8s-app=kube-dns")
        return [(p["metadata"]["name"], p.get("status", {}).get("phase"),
                 [c.get("state") for c in p.get("status", {}).get("containerStatuses") or []]) for p in pods]

    def restart(self, node_name, daemon):
        """Restarts one daemon of a node as `systemctl restart` does: SIGTERM, then the same
        command again. A containerd stopped so leaves its containers running under their shims,
        and the new one takes them up again; a kubelet restarted finds its pods as they are."""
        node = next(n for n in self.nodes if n.name == node_name)
        old = node.daemons[daemon]
        t0 = time.monotonic()
        old.stop()
        if daemon == "kubelet":
            with kubelet_start_lock():
                node.daemons[daemon] = Daemon(old.name, old.argv, old.log_path).start()
                self.wait_device_plugin_socket(node)
        else:
            node.daemons[daemon] = Daemon(old.name, old.argv, old.log_path).start()
        log.info("%s: %s restarted (pid %d, was %d; stopped in %.1f s)", node_name, daemon,
                 node.daemons[daemon].proc.pid, old.proc.pid, time.monotonic() - t0)
        self.write_nodes_json()
        return node.daemons[daemon].proc.pid

    def serve_requests(self):
        """STATE/control/NODE.DAEMON.restart, written by a test (tests/e2e/harness.py
        restart_daemon), asks for restart(NODE, DAEMON); STATE/control/NODE.DAEMON.done answers
        with the new process id, or "error: ..."."""
        control = os.path.join(self.state_dir, "control")
        try:
            names = sorted(os.listdir(control))
        except OSError:
            return
        for name in names:
            if not name.endswith(".restart"):
                continue
            node_name, _, daemon = name[:-len(".restart")].rpartition(".")
            try:
                answer = "%d\n" % self.restart(node_name, daemon)
            except (StopIteration, KeyError, OSError, subprocess.SubprocessError) as e:
                answer = "error: %s %s: %r\n" % (node_name, daemon, e)
            os.unlink(os.path.join(control, name))
            write_atomic(os.path.join(control, name[:-len(".restart")] + ".done"), answer)

    def write_nodes_json(self):
        info = [{"name": n.name, "ip": n.net.ip, "podCIDR": n.net.pod_cidr, "namespace": n.net.ns,
                 "hostInterface": n.net.host_if, "containerd": n.socket, "podLogsDir": n.path("pod-logs"),
                 "pids": {d.name: d.proc.pid for d in n.daemons.values()}} for n in self.nodes]
        write_atomic(os.path.join(self.state_dir, "nodes.json"), json.dumps(info, indent=1) + "\n")

    def watch_daemons(self, stop):
        """Until stop is set: a daemon that exits is logged (a node whose kubelet is stopped on
        purpose goes NotReady, as on a cluster); restarts asked for in STATE/control are done."""
        reported = set()
        while not stop.wait(0.2):
            self.serve_requests()
            for n in self.nodes:
                for d in n.daemons.values():
                    key = (n.name, d.name, d.proc.pid)
                    if not d.alive() and key not in reported and d.proc.returncode is not None:
                        reported.add(key)
                        log.warning("%s: %s exited with status %s", n.name, d.name, d.proc.returncode)

    def down(self):
        # CoreDNS and the pods go with their nodes; the control plane is the caller's to stop
        if self.log_thread is not None:
            self.log_thread.join(10)
        for n in reversed(self.nodes):
            try:
                n.stop()
            except Exception as e:   # go on removing the rest
                log.error("stopping %s: %s", n.name, e)
        if self.relay is not None:
            self.relay.stop()
        if self.net is not None:
            self.net.down()
        try:
            os.unlink(os.path.join(RUNS_DIR, self.prefix + ".run"))
        except OSError:
            pass


def sweep_run(info, prefix):
    """Removes what a dead run of this prefix left."""
    nodes = int(info.get("nodes") or 0)
    state_dir = info.get("stateDir") or ""
    for i in range(max(nodes, 1)):
        name = "%s-n%d" % (prefix, i)
        cleanup_node(name, os.path.join(state_dir, name) if state_dir else None, os.path.join(RUNS_DIR, name))
    network.sweep(prefix)


def parse_resources(items):
    out = {}
    for item in items or []:
        name, sep, qty = item.partition("=")
        if not sep or not name or not qty:
            raise SystemExit("--node-resource %r: want NAME=QUANTITY" % item)
        if "/" not in name:
            raise SystemExit("--node-resource %s: a real kubelet reports %s itself; only extended resources "
                             "(a name with '/') can be added" % (item, name))
        out[name] = qty
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description="real Kubernetes nodes on this machine")
    ap.add_argument("--kubeconfig", required=True)
    ap.add_argument("--assets", default=os.environ.get("KUBEBUILDER_ASSETS"))
    ap.add_argument("--images", required=True, help="build/images/index.json")
    ap.add_argument("--state-dir", required=True)
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument("--node-resource", action="append", default=[])
    ap.add_argument("--log-file")
    ap.add_argument("--survive-parent", action="store_true")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, filename=args.log_file,
                        format="%(asctime)s.%(msecs)03d %(name)s: %(message)s", datefmt="%H:%M:%S")
    why = missing(args.assets)
    if why:
        sys.stderr.write("nodes.py: %s\n" % why)
        return 2
    if not args.survive_parent:
        die_with_parent()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda s, f: stop.set())
    signal.signal(signal.SIGINT, lambda s, f: stop.set())
    rn = RealNodes(args, stop)
    status = 0
    try:
        rn.up()
        rn.watch_daemons(stop)
    except Exception as e:
        log.error("%s", e)
        sys.stderr.write("nodes.py: %s\n" % e)
        # STATE/error: what went wrong, for a caller to report first (tests/e2e/harness.py)
        try:
            write_atomic(os.path.join(args.state_dir, "error"), "%s\n" % e)
        except OSError:
            pass
        status = 1
    finally:
        rn.down()
        log.info("real nodes removed")
    return status


if __name__ == "__main__":
    sys.exit(main())
