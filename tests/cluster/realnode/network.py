"""The network of the real nodes: every node is a network namespace of this machine, joined to one
host bridge, so that two nodes are two hosts and nothing they send leaves the machine.

    net = NodeNetwork("rn1a2b", nodes=2)      # picks a free 10.x.0.0/16
    net.up()
    net.nodes[0].ns, .ip, .pod_cidr           # "rn1a2b-n0", "10.x.255.10", "10.x.0.0/24"
    net.gateway                               # "10.x.255.1": this machine on the node network
    net.down()
    sweep("rn1a2b")

Layout, for the /16 10.x.0.0 chosen (and reserved until down()) by netns.free_cidr():

    this machine   bridge <prefix>br, 10.x.255.1/24; a route to each node's pod range via its node
    node i         namespace <prefix>-n<i>; eth0 10.x.255.(10+i)/24 (its InternalIP); routes to
                   10.x.0.0/16 and to the Service range via 10.x.255.1; no default route
    node i's pods  10.x.i.0/24 on the node's CNI bridge (containerd's bridge and host-local plugins)

A FORWARD rule on this machine drops what comes from the bridge for any address outside the /16
(the pods' only way out would be this machine's default route). The API server listens on
127.0.0.1 only; nodes and pods reach it through a relay on 10.x.255.1 (nodes.py).
"""

import ipaddress
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import netns  # noqa: E402 (tests/cluster)

SERVICE_CIDR = "10.96.0.0/12"     # the control plane's --service-cluster-ip-range (launch.py)
NODE_NET = 255                    # the /24 of the /16 that holds the nodes' addresses


def _ip(*args, check=True):
    return netns._ip(*args, check=check)


def _iptables(*args, check=True):
    p = subprocess.run(["iptables", "-w", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if check and p.returncode != 0:
        raise netns.NetError("iptables %s: %s" % (" ".join(args), p.stderr.strip()))
    return p


class Node:
    def __init__(self, prefix, index, ip, pod_cidr, pod_gateway):
        self.index = index
        self.name = "%s-n%d" % (prefix, index)
        self.ns = self.name
        self.ip = ip
        self.pod_cidr = pod_cidr
        self.pod_gateway = pod_gateway
        self.host_if = "%sh%d" % (prefix, index)

    def nsenter(self):
        """The argv prefix that runs a program in this node's network namespace (and nothing
        else of it: the mount namespace stays this machine's, as a node's daemons share one)."""
        return ["nsenter", "--net=/run/netns/" + self.ns, "--"]


class NodeNetwork:
    def __init__(self, prefix, nodes=2, cidr=None):
        self.prefix = netns.check_prefix(prefix)
        if not 1 <= nodes <= 20:
            raise ValueError("nodes: want 1 to 20")
        self.cidr = ipaddress.ip_network(cidr or netns.free_cidr())
        if self.cidr.prefixlen != 16:
            raise ValueError("want a /16, not %s" % self.cidr)
        base = int(self.cidr.network_address)
        at = lambda third, fourth: str(ipaddress.ip_address(base + (third << 8) + fourth))  # noqa: E731
        self.gateway = at(NODE_NET, 1)
        self.bridge = prefix + "br"
        self.chain = (prefix + "-FWD").upper()
        self.nodes = [Node(prefix, i, at(NODE_NET, 10 + i), "%s/24" % at(i, 0), at(i, 1)) for i in range(nodes)]
        self._up = False

    def up(self):
        clash = netns._routes_overlapping(self.cidr)
        if clash:
            raise netns.NetError("%s overlaps host routes: %s" % (self.cidr, ", ".join(clash)))
        self._up = True
        _ip("link", "add", "name", self.bridge, "type", "bridge")
        _ip("addr", "add", "%s/24" % self.gateway, "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        _iptables("-N", self.chain)
        _iptables("-A", self.chain, "-d", str(self.cidr), "-j", "ACCEPT")
        _iptables("-A", self.chain, "-j", "DROP")
        _iptables("-I", "FORWARD", "1", "-i", self.bridge, "-j", self.chain)
        for node in self.nodes:
            ns = node.ns
            _ip("netns", "add", ns)
            _ip("link", "add", node.host_if, "type", "veth", "peer", "name", "eth0", "netns", ns)
            _ip("link", "set", node.host_if, "master", self.bridge, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
            _ip("-n", ns, "addr", "add", "%s/24" % node.ip, "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            _ip("-n", ns, "route", "add", str(self.cidr), "via", self.gateway)
            _ip("-n", ns, "route", "add", SERVICE_CIDR, "via", self.gateway)
            _ip("route", "add", node.pod_cidr, "via", node.ip, "dev", self.bridge)
            for key, value in (("net.ipv4.ip_forward", "1"), ("net.ipv4.conf.all.route_localnet", "0")):
                subprocess.run(["ip", "netns", "exec", ns, "sysctl", "-qw", "%s=%s" % (key, value)], check=True)

    def down(self):
        if not self._up:
            netns.release_cidr(self.cidr)
            return
        for node in self.nodes:
            netns.kill_netns_processes(node.ns)
            _ip("route", "del", node.pod_cidr, check=False)
            _ip("netns", "del", node.ns, check=False)
            _ip("link", "del", node.host_if, check=False)
        _ip("link", "del", self.bridge, check=False)
        _iptables("-D", "FORWARD", "-i", self.bridge, "-j", self.chain, check=False)
        _iptables("-F", self.chain, check=False)
        _iptables("-X", self.chain, check=False)
        self._up = False
        netns.release_cidr(self.cidr)


def sweep(prefix):
    """Removes what a NodeNetwork of this prefix left: its namespaces (and their processes), host
    links, routes and FORWARD chain. Returns what it removed."""
    removed = netns.sweep(prefix)         # namespaces <prefix>-*, links <prefix>br and <prefix>h<n>
    try:
        routes = json.loads(_ip("-j", "route", "show", check=False) or "[]")
    except ValueError:
        routes = []
    for r in routes:
        if r.get("dev") == prefix + "br":
            _ip("route", "del", r.get("dst", ""), check=False)
    chain = (prefix + "-FWD").upper()
    if _iptables("-S", chain, check=False).returncode == 0:
        while _iptables("-D", "FORWARD", "-i", prefix + "br", "-j", chain, check=False).returncode == 0:
            pass
        _iptables("-F", chain, check=False)
        _iptables("-X", chain, check=False)
        removed.append("iptables chain " + chain)
    return removed
