"""Network plumbing of the simulated kubelet: one bridge; per node a network namespace joined to
it by a veth pair, the node's host; per pod a namespace of its own joined the same way, or, for a
host-network pod, a second name of its node's namespace (standard library only; needs root,
iproute2 and util-linux).

Every name starts with a short prefix (letters and digits, at most 7 characters) so that
interface names stay within the kernel's 15 characters and so that sweep(prefix) can find what
a crashed run left behind:

    bridge      <prefix>br          holds the gateway address, <cidr>.1
    node        <prefix>-node<i>    eth0 at the i-th address from the top of the CIDR (node 0:
                                    <cidr>.254 of a /24), default route via the bridge, and lo
    node veth   <prefix>n<i>        enslaved to the bridge
    namespace   <prefix>-<n>        a pod's: eth0 (<cidr>.<n+1>/len, default route via the bridge)
                                    and lo; pod addresses stop below the nodes'
    host veth   <prefix>h<n>        enslaved to the bridge
    host pod    <prefix>-hn<n>      a host-network pod's name for its node's namespace (a bind
                                    mount of it under /var/run/netns): the node's interfaces,
                                    addresses and ports, the pod's own /etc/netns folder
    hosts file  /etc/netns/<ns>/hosts   (ip netns exec binds it over /etc/hosts)

    net = Network("ks1a2b", "10.244.0.0/16", nodes=2)
    net.up()
    node = net.add_node(0)          # PodNet(ns, ip, host_if) of node 0, the first
    pod = net.add_pod()             # PodNet(ns, ip, host_if)
    hpod = net.add_host_pod(node)   # PodNet(ns, node.ip, None): shares the node's namespace
    net.write_file(pod, "hosts", text)
    net.remove_pod(pod)
    net.down()
    sweep("ks1a2b")                 # removes all of the above, killing what runs in the namespaces
"""

import fcntl
import ipaddress
import json
import os
import re
import shutil
import signal
import subprocess
import threading

NETNS_ETC = "/etc/netns"
NETNS_RUN = "/var/run/netns"
_PREFIX_RE = re.compile(r"^[a-z][a-z0-9]{0,6}$")
MAX_IFNAME = 15


class NetError(Exception):
    pass


def _ip(*args, check=True):
    p = subprocess.run(["ip", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if check and p.returncode != 0:
        raise NetError("ip %s: %s" % (" ".join(args), p.stderr.strip() or "exit %d" % p.returncode))
    return p.stdout


def _run(argv):
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        raise NetError("%s: %s" % (" ".join(argv), p.stderr.strip() or "exit %d" % p.returncode))


def check_prefix(prefix):
    if not _PREFIX_RE.match(prefix or ""):
        raise ValueError("prefix %r: want 1 to 7 lowercase letters or digits, starting with a letter"
                         % (prefix,))
    return prefix


class PodNet:
    """One network namespace by the name a pod or node uses: ns (the name), ip (dotted string),
    host_if (host end of the veth; None for a host-network pod, whose name is its node's
    namespace's second name), index (of the address; None for a host-network pod)."""

    def __init__(self, ns, ip, host_if, index):
        self.ns = ns
        self.ip = ip
        self.host_if = host_if
        self.index = index

    @property
    def shared(self):
        """A host-network pod's name of its node's namespace: other pods' processes live there."""
        return self.host_if is None

    def __repr__(self):
        return "PodNet(%s, %s)" % (self.ns, self.ip)


def _routes_overlapping(net):
    """Host routes and addresses that overlap net (a bridge of ours would hijack them)."""
    found = []
    try:
        routes = json.loads(_ip("-j", "route", "show", "table", "all") or "[]")
    except (ValueError, NetError):
        routes = []
    for r in routes:
        dst = r.get("dst")
        if not dst or dst == "default" or r.get("type") in ("local", "broadcast", "multicast"):
            continue
        try:
            other = ipaddress.ip_network(dst if "/" in dst else dst + "/32", strict=False)
        except ValueError:
            continue
        if other.version == 4 and other.overlaps(net):
            found.append("%s dev %s" % (dst, r.get("dev", "?")))
    return found


# A network chosen because no route uses it yet is only taken once its bridge has an address, so
# two runs on this machine choosing at once (the test binary runs two tests at a time) could take
# the same one. A choice is therefore also a reservation: an exclusive flock on
# RESERVATIONS/<cidr>.lock, held by this process until release_cidr (Network.down does it) or
# until it exits, whichever comes first; others skip what is reserved.
RESERVATIONS = "/run/mpijob-netns"
_reserved = {}
_reserved_lock = threading.Lock()


def reserve_cidr(cidr):
    """Whether cidr is now this process's: no host route overlaps it and no other network holds
    it, in this process or another."""
    cidr = str(ipaddress.ip_network(cidr))
    os.makedirs(RESERVATIONS, exist_ok=True)
    with _reserved_lock:
        if cidr in _reserved:
            return False
        f = open(os.path.join(RESERVATIONS, cidr.replace("/", "_") + ".lock"), "a")
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            f.close()
            return False
        if _routes_overlapping(ipaddress.ip_network(cidr)):
            f.close()
            return False
        _reserved[cidr] = f
        return True


def release_cidr(cidr):
    """Gives back a reservation of reserve_cidr or free_cidr (nothing when there is none)."""
    with _reserved_lock:
        f = _reserved.pop(str(ipaddress.ip_network(cidr)), None)
    if f is not None:
        f.close()


def free_cidr(candidates=None):
    """The first /16 among candidates (default 10.200.0.0/16 .. 10.250.0.0/16) that no host route
    uses and no other network holds, reserved for this process (reserve_cidr)."""
    for c in candidates or ("10.%d.0.0/16" % i for i in range(200, 251)):
        if reserve_cidr(c):
            return c
    raise NetError("no free /16 for pods among the candidates")


class Network:
    """The bridge, the nodes' namespaces (addresses from the top of the CIDR down, `nodes` of them
    kept off the pods' range) and the pods' namespaces."""

    def __init__(self, prefix, cidr="10.244.0.0/16", nodes=1):
        self.prefix = check_prefix(prefix)
        self.net = ipaddress.ip_network(cidr)
        if self.net.version != 4 or self.net.prefixlen > 24:
            raise ValueError("pod CIDR %s: want an IPv4 network of /24 or larger" % cidr)
        if not 1 <= nodes <= self.net.num_addresses // 4:
            raise ValueError("%d nodes: want 1 to %d in %s" % (nodes, self.net.num_addresses // 4, cidr))
        self.nodes = nodes
        self.bridge = prefix + "br"
        self.gateway = str(self.net[1])
        self._lock = threading.Lock()
        self._next = 0
        self._used = set()
        self._host_pods = 0
        self._pods = {}
        self._nodes = {}
        self._up = False

    def up(self):
        clash = _routes_overlapping(self.net)
        if clash:
            raise NetError("pod CIDR %s overlaps host routes: %s" % (self.net, ", ".join(clash)))
        _ip("link", "add", "name", self.bridge, "type", "bridge")
        self._up = True
        _ip("addr", "add", "%s/%d" % (self.gateway, self.net.prefixlen), "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")

    def _allocate(self):
        # Addresses are not handed out again while others are free, so a finished pod's podIP
        # keeps pointing at nothing rather than at a newer pod. The network's address, the
        # gateway, the broadcast address and the nodes' addresses are never a pod's.
        size = self.net.num_addresses - 3 - self.nodes
        for _ in range(size):
            idx = self._next
            self._next = (self._next + 1) % size
            if idx not in self._used:
                self._used.add(idx)
                return idx
        raise NetError("pod CIDR %s is full" % self.net)

    def _plumb(self, ns, host_if, ip):
        """Namespace ns with eth0 at ip, the other end host_if on the bridge, and a default
        route via the gateway."""
        if len(host_if) > MAX_IFNAME:
            raise NetError("interface name %s is longer than %d characters" % (host_if, MAX_IFNAME))
        _ip("netns", "add", ns)
        os.makedirs(os.path.join(NETNS_ETC, ns), exist_ok=True)
        _ip("link", "add", host_if, "type", "veth", "peer", "name", "eth0", "netns", ns)
        _ip("link", "set", host_if, "master", self.bridge, "up")
        _ip("-n", ns, "link", "set", "lo", "up")
        _ip("-n", ns, "addr", "add", "%s/%d" % (ip, self.net.prefixlen), "dev", "eth0")
        _ip("-n", ns, "link", "set", "eth0", "up")
        _ip("-n", ns, "route", "add", "default", "via", self.gateway)

    def add_node(self, i):
        """Node i's namespace, <prefix>-node<i>: the host its host-network pods run in, at the
        i-th address from the top of the CIDR (below the broadcast address)."""
        if not 0 <= i < self.nodes:
            raise ValueError("node %d: this network has room for %d nodes" % (i, self.nodes))
        node = PodNet("%s-node%d" % (self.prefix, i), str(self.net[-2 - i]), "%sn%d" % (self.prefix, i), None)
        try:
            self._plumb(node.ns, node.host_if, node.ip)
        except Exception:
            self._remove(node)
            raise
        with self._lock:
            self._nodes[node.ns] = node
        return node

    def add_pod(self):
        with self._lock:
            idx = self._allocate()
        pod = PodNet("%s-%d" % (self.prefix, idx), str(self.net[idx + 2]), "%sh%d" % (self.prefix, idx), idx)
        try:
            self._plumb(pod.ns, pod.host_if, pod.ip)
        except Exception:
            self._remove(pod)
            with self._lock:
                self._used.discard(idx)
            raise
        with self._lock:
            self._pods[pod.ns] = pod
        return pod

    def add_host_pod(self, node):
        """A host-network pod on node (its PodNet from add_node): a second name of the node's
        namespace, <prefix>-hn<n>, whose /etc/netns folder holds the pod's own hosts and
        resolv.conf. Containers entered by that name share the node's interfaces, address and
        ports with the node's other host-network pods, as on a real host."""
        with self._lock:
            n = self._host_pods
            self._host_pods += 1
        pod = PodNet("%s-hn%d" % (self.prefix, n), node.ip, None, None)
        path = os.path.join(NETNS_RUN, pod.ns)
        try:
            os.close(os.open(path, os.O_RDONLY | os.O_CREAT | os.O_EXCL, 0o444))
            _run(["mount", "--bind", os.path.join(NETNS_RUN, node.ns), path])
            os.makedirs(os.path.join(NETNS_ETC, pod.ns), exist_ok=True)
        except Exception:
            self._remove(pod)
            raise
        with self._lock:
            self._pods[pod.ns] = pod
        return pod

    def write_file(self, pod, name, text):
        """Writes /etc/netns/<ns>/<name> in place: ip netns exec binds the file (its inode) over
        /etc/<name>, so running processes see the new text only if the inode stays."""
        path = os.path.join(NETNS_ETC, pod.ns, name)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            data = text.encode()
            os.ftruncate(fd, 0)
            os.write(fd, data)
        finally:
            os.close(fd)

    def _remove(self, pod):
        # A host-network pod's name goes alone: the node's namespace, and the processes of its
        # other pods there, stay.
        if not pod.shared:
            kill_netns_processes(pod.ns)
        _ip("netns", "del", pod.ns, check=False)
        if not pod.shared:
            _ip("link", "del", pod.host_if, check=False)
        shutil.rmtree(os.path.join(NETNS_ETC, pod.ns), ignore_errors=True)

    def remove_pod(self, pod):
        with self._lock:
            self._pods.pop(pod.ns, None)
            self._used.discard(pod.index)
        self._remove(pod)

    def down(self):
        """Removes the pods' namespaces, then the nodes', then the bridge."""
        with self._lock:
            pods = list(self._pods.values()) + list(self._nodes.values())
            self._pods.clear()
            self._nodes.clear()
        for pod in pods:
            self._remove(pod)
        if self._up:
            _ip("link", "del", self.bridge, check=False)
            self._up = False
        release_cidr(self.net)


def netns_pids(ns):
    out = _ip("netns", "pids", ns, check=False)
    return [int(x) for x in out.split() if x.isdigit()]


def kill_netns_processes(ns):
    for pid in netns_pids(ns):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def sweep(prefix):
    """Removes every namespace, interface and /etc/netns folder named after prefix, killing the
    processes inside those namespaces. Returns what it removed (names)."""
    check_prefix(prefix)
    removed = []
    for line in _ip("netns", "list", check=False).splitlines():
        name = line.split()[0] if line.split() else ""
        if name.startswith(prefix + "-"):
            kill_netns_processes(name)
            _ip("netns", "del", name, check=False)
            removed.append(name)
    try:
        links = json.loads(_ip("-j", "link", "show", check=False) or "[]")
    except ValueError:
        links = []
    for link in links:
        name = link.get("ifname", "")
        if name.startswith(prefix) and (name == prefix + "br" or re.match(re.escape(prefix) + r"[hn]\d+$", name)):
            _ip("link", "del", name, check=False)
            removed.append(name)
    if os.path.isdir(NETNS_ETC):
        for name in os.listdir(NETNS_ETC):
            if name.startswith(prefix + "-"):
                shutil.rmtree(os.path.join(NETNS_ETC, name), ignore_errors=True)
                removed.append(os.path.join(NETNS_ETC, name))
    return removed


def leftovers(prefix):
    """What sweep(prefix) would remove, without removing it (for tests)."""
    found = []
    for line in _ip("netns", "list", check=False).splitlines():
        if line.split() and line.split()[0].startswith(prefix + "-"):
            found.append(line.split()[0])
    try:
        links = json.loads(_ip("-j", "link", "show", check=False) or "[]")
    except ValueError:
        links = []
    found += [l["ifname"] for l in links if l.get("ifname", "").startswith(prefix)]
    if os.path.isdir(NETNS_ETC):
        found += [n for n in os.listdir(NETNS_ETC) if n.startswith(prefix + "-")]
    return found
