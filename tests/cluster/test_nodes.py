"""Several nodes in one simulation: the kubelet serving two nodes, each a network namespace of its
own, with host-network pods in their node's namespace; the scheduler role spreading pods over
the nodes by nodeSelector and host ports; and, where KUBEBUILDER_ASSETS holds the four
control-plane binaries, the real kube-scheduler doing so over the simulation's nodes. The
kubelet's tests need root.

    python3 -m unittest discover -s tests/cluster -p 'test_nodes.py' -v
"""

import ipaddress
import json
import os
import shutil
import subprocess
import sys
import unittest
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import cluster  # noqa: E402
import netns  # noqa: E402
from clustertest import (LOG_TAIL, STOP, ClusterTestCase, ControlPlaneCase, KubeletTestCase, alive, condition,  # noqa: E402
                         read_text, scaled, wait_for)

DOMAIN = "cluster.local"
NODES = ("sim-node", "sim-node-1")
ASSETS = os.environ.get("KUBEBUILDER_ASSETS") or ""
CONTROL_PLANE = bool(ASSETS) and all(os.access(os.path.join(ASSETS, b), os.X_OK) for b in
                                     ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"))
PORTS_FULL = ("0/2 nodes are available: 2 node(s) didn't have free ports for the requested pod ports. "
              "preemption: 0/2 nodes are available: 2 No preemption victims found for incoming pod.")
# kube-scheduler from 1.34 on: its DynamicResources plugin's PostFilter speaks first (1.36.3).
PORTS_FULL_DRA = ("0/2 nodes are available: 2 node(s) didn't have free ports for the requested pod ports. "
                  "no new claims to deallocate, preemption: 0/2 nodes are available: 2 No preemption victims "
                  "found for incoming pod.")


def _pod(name, command, node=NODES[0], host_network=False, **spec):
    """A pod bound to node (None: left to a scheduler); container_extra goes into its container."""
    container = {"name": "main", "image": "ignored", "command": command}
    container.update(spec.pop("container_extra", {}))
    body = {"restartPolicy": "Never", "containers": [container], "terminationGracePeriodSeconds": 2}
    if node:
        body["nodeName"] = node
    if host_network:
        body.update(hostNetwork=True, dnsPolicy="ClusterFirstWithHostNet")
    body.update(spec)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": body}


def _host_port(port):
    return {"ports": [{"name": "ssh", "containerPort": port, "hostPort": port, "protocol": "TCP"}]}


def _ready_on(port):
    return {"readinessProbe": {"tcpSocket": {"port": port}, "periodSeconds": 1}}


class NodeAddressesTest(unittest.TestCase):
    """netns.Network's addresses, without making anything."""

    def test_nodes_take_the_top_of_the_cidr_and_pods_never_get_theirs(self):
        net = netns.Network("x" + uuid.uuid4().hex[:5], "10.9.0.0/24", nodes=2)
        pods = set()
        with self.assertRaises(netns.NetError):
            while True:
                pods.add(str(net.net[net._allocate() + 2]))
        self.assertEqual(len(pods), 256 - 3 - 2, "every address but the network's, gateway, broadcast and nodes'")
        self.assertNotIn("10.9.0.254", pods)
        self.assertNotIn("10.9.0.253", pods)
        self.assertNotIn(net.gateway, pods)

    def test_node_names(self):
        self.assertEqual(cluster.node_names(1), ["sim-node"])
        self.assertEqual(cluster.node_names(3), ["sim-node", "sim-node-1", "sim-node-2"])


class UnschedulableMessageTest(unittest.TestCase):
    """kube-scheduler's words, 1.32's and, from 1.34, with the DynamicResources PostFilter's (framework.FitError, the NodePorts and NodeAffinity plugins,
    default preemption), checked against the real scheduler in ControlPlaneNodesTest."""

    def test_messages(self):
        self.assertEqual(cluster.unschedulable_message({"a": cluster.NODE_PORTS, "b": cluster.NODE_PORTS}),
                         PORTS_FULL)
        for minor, words in ((32, PORTS_FULL), (33, PORTS_FULL), (34, PORTS_FULL_DRA), (36, PORTS_FULL_DRA)):
            self.assertEqual(cluster.unschedulable_message({"a": cluster.NODE_PORTS, "b": cluster.NODE_PORTS},
                                                           minor=minor), words, "1.%d" % minor)
        self.assertEqual(cluster.unschedulable_message({"a": cluster.NODE_SELECTOR}, preemption_never=True, minor=36),
                         "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector. "
                         "no new claims to deallocate, preemption: not eligible due to preemptionPolicy=Never.")
        self.assertEqual(
            cluster.unschedulable_message({"a": cluster.NODE_SELECTOR, "b": cluster.NODE_PORTS}),
            "0/2 nodes are available: 1 node(s) didn't have free ports for the requested pod ports, 1 node(s) "
            "didn't match Pod's node affinity/selector. preemption: 0/2 nodes are available: 1 No preemption "
            "victims found for incoming pod, 1 Preemption is not helpful for scheduling.")
        self.assertEqual(
            cluster.unschedulable_message({"a": cluster.NODE_SELECTOR}, preemption_never=True),
            "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector. "
            "preemption: not eligible due to preemptionPolicy=Never.")

    def test_host_port_conflicts(self):
        self.assertTrue(cluster.ports_conflict({("0.0.0.0", "TCP", 22)}, {("10.1.1.1", "TCP", 22)}))
        self.assertTrue(cluster.ports_conflict({("10.1.1.1", "TCP", 22)}, {("0.0.0.0", "TCP", 22)}))
        self.assertFalse(cluster.ports_conflict({("0.0.0.0", "UDP", 22)}, {("0.0.0.0", "TCP", 22)}))
        self.assertFalse(cluster.ports_conflict({("10.1.1.1", "TCP", 22)}, {("10.1.1.2", "TCP", 22)}))
        self.assertFalse(cluster.ports_conflict({("0.0.0.0", "TCP", 22)}, {("0.0.0.0", "TCP", 23)}))
        pod = _pod("p", ["true"], container_extra={"ports": [{"containerPort": 80}, {"containerPort": 22,
                                                                                      "hostPort": 2222}]})
        self.assertEqual(cluster.host_ports(pod), {("0.0.0.0", "TCP", 2222)})


@unittest.skipUnless(os.geteuid() == 0, "needs root: network namespaces and mounts")
class NodeNetworkTest(unittest.TestCase):
    def test_host_pod_shares_its_node_and_sweep_removes_everything(self):
        prefix = "s" + uuid.uuid4().hex[:5]
        net = netns.Network(prefix, netns.free_cidr(), nodes=2)
        self.addCleanup(netns.sweep, prefix)
        net.up()
        net.add_node(0)
        node = net.add_node(1)
        self.assertEqual(node.ip, str(net.net[-3]))
        first = net.add_host_pod(node)
        second = net.add_host_pod(node)
        self.assertEqual((first.ip, second.ip), (node.ip, node.ip))
        net.write_file(first, "hosts", "127.0.0.1 localhost\n")
        proc = subprocess.Popen(["ip", "netns", "exec", first.ns, "sleep", "100"], start_new_session=True)
        self.addCleanup(proc.kill)
        wait_for("the process in the node's namespace", lambda: proc.pid in netns.netns_pids(node.ns), 30)
        addrs = subprocess.run(["ip", "netns", "exec", second.ns, "ip", "-4", "-o", "addr", "show", "eth0"],
                               capture_output=True, text=True).stdout
        self.assertIn(node.ip + "/", addrs, "one namespace by both names")
        net.remove_pod(second)
        self.assertIsNone(proc.poll(), "removing a host-network pod leaves the node's processes")
        self.assertFalse(os.path.exists(os.path.join(netns.NETNS_RUN, second.ns)))
        removed = netns.sweep(prefix)
        self.assertIn(first.ns, removed)
        self.assertIn(node.ns, removed)
        # The node's veth goes either by sweep's hand or with its namespace, which the kernel
        # tears down a moment later: what counts is that nothing is left.
        self.assertEqual(proc.wait(timeout=scaled(30)), -9)
        wait_for("nothing of %s left" % prefix, lambda: netns.leftovers(prefix) == [], 30,
                 describe=lambda: "left: %s" % netns.leftovers(prefix))


@unittest.skipUnless(os.geteuid() == 0, "needs root: network namespaces, bridges and mounts")
@unittest.skipUnless(shutil.which("ip") and shutil.which("unshare") and shutil.which("nsenter"),
                     "needs iproute2 and util-linux (ip, unshare, nsenter)")
class HostNetworkTest(KubeletTestCase):
    """One kubelet, two nodes: each node registered with its own address, and host-network pods
    on their node's network."""

    ns_prefix = "n"

    @classmethod
    def kubelet_options(cls):
        return {"nodes": 2}

    def node(self, name):
        return self.kube.get("/api/v1/nodes/" + name)

    def test_a_two_nodes_registered_and_ready(self):
        def ready(name):
            n = self.node(name)
            return n if n and (condition(n, "Ready") or {}).get("status") == "True" else None
        nodes = [self.wait("node %s Ready" % name, lambda name=name: ready(name)) for name in NODES]
        ips = [self.kubelet.node_ip(name) for name in NODES]
        self.assertNotEqual(ips[0], ips[1])
        for n, ip in zip(nodes, ips):
            name = n["metadata"]["name"]
            self.assertEqual(n["status"]["addresses"], [{"type": "InternalIP", "address": ip},
                                                        {"type": "Hostname", "address": name}])
            self.assertEqual(n["metadata"]["labels"]["kubernetes.io/hostname"], name)
            self.assertIn(ipaddress.ip_address(ip), self.kubelet.net.net)
        self.assertEqual(self.kubelet.host_ip, ips[0])
        self.assertNotEqual(nodes[0]["status"]["nodeInfo"]["machineID"], nodes[1]["status"]["nodeInfo"]["machineID"])
        for name in NODES:
            lease = self.wait("node %s's Lease" % name, lambda name=name: self.kube.get(
                "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/" + name))
            self.assertEqual(lease["spec"]["holderIdentity"], name)
        with open(os.path.join(self.state, "kubelet.json")) as f:
            self.assertEqual({n: v["ip"] for n, v in json.load(f)["nodes"].items()}, dict(zip(NODES, ips)))

    def test_host_network_pod_is_its_node_on_the_network(self):
        """A host-network pod on the second node: its address and host name are the node's; a pod
        on the first node reaches it there by its name, and a host-network pod of the first node
        by name too, as well as the API server through the kubernetes Service."""
        ns = self.ns()
        node_ip = self.kubelet.node_ip(NODES[1])
        self.create(ns, _pod("srv", ["sh", "-c", "hostname; echo HOSTNAME=$HOSTNAME; "
                                                 "exec python3 -m http.server 8181 --bind 0.0.0.0"],
                             node=NODES[1], host_network=True, hostname="srv", subdomain="grp",
                             container_extra=_ready_on(8181)))
        p = self.wait_pod(ns, "srv", lambda p: self.cond(p, "Ready") == "True", "ready")
        self.assertEqual((p["status"]["podIP"], p["status"]["hostIP"]), (node_ip, node_ip))
        self.assertEqual(p["status"]["podIPs"], [{"ip": node_ip}])
        self.assertEqual(self.logs(ns, "srv").split("\n")[:2], [NODES[1], "HOSTNAME=" + NODES[1]])

        fqdn = "srv.grp.%s.svc.%s" % (ns, DOMAIN)
        fetch = ("import os, socket, urllib.request; print(socket.gethostname()); print(socket.gethostbyname('%s'));"
                 "print(urllib.request.urlopen('http://%s:8181/', timeout=60).status)") % (fqdn, fqdn)
        self.create(ns, _pod("cli", ["python3", "-c", fetch]))
        p = self.wait_phase(ns, "cli", "Succeeded")
        self.assertEqual(p["status"]["hostIP"], self.kubelet.node_ip(NODES[0]))
        self.assertEqual(self.logs(ns, "cli").split(), ["cli", node_ip, "200"])

        api = ("; s = socket.create_connection((os.environ['KUBERNETES_SERVICE_HOST'], "
               "int(os.environ['KUBERNETES_SERVICE_PORT'])), timeout=60); print('api-ok')")
        self.create(ns, _pod("hcli", ["python3", "-c", fetch + api], host_network=True))
        p = self.wait_phase(ns, "hcli", "Succeeded")
        self.assertEqual(p["status"]["podIP"], self.kubelet.node_ip(NODES[0]))
        self.assertEqual(self.logs(ns, "hcli").split(), [NODES[0], node_ip, "200", "api-ok"])

    def test_same_port_twice_on_one_node_fails_to_bind(self):
        """Two host-network pods of one node listening on one port collide as on a real host; on
        the other node, or in a pod's own network, the port is free. The second pod's end leaves
        the first running."""
        ns = self.ns()
        self.create(ns, _pod("first", ["python3", "-m", "http.server", "8282", "--bind", "0.0.0.0"],
                             node=NODES[1], host_network=True, container_extra=_ready_on(8282)))
        self.wait_pod(ns, "first", lambda p: self.cond(p, "Ready") == "True", "ready")
        bind = "import socket; socket.socket().bind(('0.0.0.0', 8282)); print('bound')"
        self.create(ns, _pod("second", ["python3", "-c", bind], node=NODES[1], host_network=True))
        p = self.wait_phase(ns, "second", "Failed")
        self.assertEqual(self.terminated(p)["exitCode"], 1)
        self.assertIn("Address already in use", self.logs(ns, "second"))
        for name, node, host in (("elsewhere", NODES[0], True), ("own-net", NODES[1], False)):
            self.create(ns, _pod(name, ["python3", "-c", bind], node=node, host_network=host))
            self.wait_phase(ns, name, "Succeeded")
            self.assertEqual(self.logs(ns, name), "bound\n")
        fetch = "import urllib.request; print(urllib.request.urlopen('http://%s:8282/', timeout=60).status)"
        self.create(ns, _pod("check", ["python3", "-c", fetch % self.kubelet.node_ip(NODES[1])]))
        self.wait_phase(ns, "check", "Succeeded")
        self.assertEqual(self.logs(ns, "check"), "200\n")
        self.assertEqual(self.pod(ns, "first")["status"]["phase"], "Running")

    def test_z_cleanup_leaves_nothing(self):
        self.kube.ensure_namespace("n-z")
        self.create("n-z", _pod("left", ["sleep", "100"], node=NODES[1], host_network=True))
        runner = self.wait("the pod's runner", lambda: self.kubelet._find("n-z", "left"))
        self.wait_phase("n-z", "left", "Running")
        pids = netns.netns_pids(runner.net.ns)
        self.assertTrue(pids)
        self.__class__.stop.set()
        self.__class__.thread.join(timeout=scaled(STOP))
        self.kubelet.cleanup()
        self.assertEqual(netns.leftovers(self.prefix), [])
        self.assertEqual([p for p in pids if alive(p)], [])
        self.assertEqual([n for n in os.listdir(netns.NETNS_RUN) if n.startswith(self.prefix + "-")], [])


class SchedulerTest(ClusterTestCase):
    """cluster.py's scheduler role over two nodes (the test plays the kubelet)."""

    roles = "scheduler"
    nodes = 2

    def ns(self):
        name = "s-" + self._testMethodName.replace("_", "-")[5:][:40].strip("-")
        self.k.ensure_namespace(name)
        self.addCleanup(self.delete_pods, name)
        return name

    def delete_pods(self, ns):
        pods = self.k.list("/api/v1/namespaces/%s/pods" % ns)[0]
        for p in pods:
            self.k.delete("/api/v1/namespaces/%s/pods/%s" % (ns, p["metadata"]["name"]))
        self.wait("the pods of %s gone" % ns, lambda: not self.k.list("/api/v1/namespaces/%s/pods" % ns)[0])

    def create(self, ns, pod):
        return self.k.create("/api/v1/namespaces/%s/pods" % ns, pod)

    def get(self, ns, name):
        return self.k.get("/api/v1/namespaces/%s/pods/%s" % (ns, name))

    def bound(self, ns, name):
        return self.wait("pod %s bound" % name, lambda: (self.get(ns, name) or {}).get("spec", {}).get("nodeName"))

    def unschedulable(self, ns, name):
        def seen():
            c = condition(self.get(ns, name) or {}, "PodScheduled")
            return c if c and c.get("reason") == "Unschedulable" else None
        c = self.wait("pod %s Unschedulable" % name, seen)
        self.assertEqual(c["status"], "False")
        self.assertFalse(self.get(ns, name)["spec"].get("nodeName"))
        return c["message"]

    def test_a_pods_spread_over_the_nodes(self):
        """The node with the fewest pods, the first on a tie (this test runs first, on empty nodes)."""
        ns = self.ns()
        for i in range(4):
            self.create(ns, _pod("p%d" % i, ["true"], node=None))
        self.assertEqual([self.bound(ns, "p%d" % i) for i in range(4)], list(NODES + NODES))

    def test_host_ports_keep_pods_apart_until_one_ends(self):
        ns = self.ns()
        for name in ("a", "b"):
            self.create(ns, _pod(name, ["true"], node=None, host_network=True, container_extra=_host_port(2222)))
        placed = {name: self.bound(ns, name) for name in ("a", "b")}
        self.assertEqual(sorted(placed.values()), list(NODES), "one pod asking the port per node")
        # Another port still fits either node.
        self.create(ns, _pod("other", ["true"], node=None, container_extra=_host_port(2223)))
        self.bound(ns, "other")
        self.create(ns, _pod("c", ["true"], node=None, host_network=True, container_extra=_host_port(2222)))
        full = PORTS_FULL_DRA if cluster.server_minor(self.k) >= cluster.DRA_POSTFILTER_MINOR else PORTS_FULL
        self.assertEqual(self.unschedulable(ns, "c"), full)
        self.assertEqual(self.get(ns, "c")["status"].get("phase", "Pending"), "Pending")
        # a ends, as its kubelet reports it: its port is free again.
        self.k.patch_status("/api/v1/namespaces/%s/pods/a" % ns, {"status": {"phase": "Succeeded"}})
        self.assertEqual(self.bound(ns, "c"), placed["a"])
        self.assertEqual((condition(self.get(ns, "c"), "PodScheduled") or {}).get("status"), "True")

    def test_node_selector(self):
        ns = self.ns()
        for name in ("x", "y"):
            self.create(ns, _pod(name, ["true"], node=None, nodeSelector={"kubernetes.io/hostname": NODES[1]}))
            self.assertEqual(self.bound(ns, name), NODES[1])
        self.create(ns, _pod("nowhere", ["true"], node=None, nodeSelector={"kubernetes.io/hostname": "sim-node-7"}))
        # the scheduler role speaks as the API server's release (the double's, or a real one's)
        dra = "no new claims to deallocate, " if cluster.server_minor(self.k) >= cluster.DRA_POSTFILTER_MINOR else ""
        self.assertEqual(self.unschedulable(ns, "nowhere"),
                         "0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector. "
                         "%spreemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling." % dra)


@unittest.skipUnless(CONTROL_PLANE, "needs KUBEBUILDER_ASSETS with etcd, kube-apiserver, kube-controller-manager, "
                                    "kube-scheduler")
@unittest.skipUnless(os.geteuid() == 0, "needs root: the kubelet makes network namespaces")
class ControlPlaneNodesTest(ControlPlaneCase):
    """`cluster.py --roles kubelet --nodes 2` under a real control plane: the real kube-scheduler
    places host-port pods on the two simulated nodes, and says what the scheduler role says when
    none fits."""

    WAIT = 120.0
    tmp_prefix = "controlplane-nodes-test."
    cluster_args = ("--roles", "kubelet", "--nodes", "2")

    def wait(self, what, fn):
        return wait_for(what, fn, self.WAIT, interval=0.1,
                        describe=lambda: "--- cluster log (end) ---\n" + read_text(self.log_path, LOG_TAIL))

    def test_a_nodes_ready_and_untainted(self):
        def ready(name):
            n = self.k.get("/api/v1/nodes/" + name)
            ok = n and (condition(n, "Ready") or {}).get("status") == "True" and not n["spec"].get("taints")
            return n if ok else None
        nodes = [self.wait("%s Ready without taints" % name, lambda name=name: ready(name)) for name in NODES]
        with open(os.path.join(self.dir, "sim", "kubelet.json")) as f:
            ips = {n: v["ip"] for n, v in json.load(f)["nodes"].items()}
        for n in nodes:
            internal = [a["address"] for a in n["status"]["addresses"] if a["type"] == "InternalIP"]
            self.assertEqual(internal, [ips[n["metadata"]["name"]]])

    def test_b_host_ports_by_the_real_scheduler(self):
        ns = "cp-ports"
        self.k.ensure_namespace(ns)
        path = "/api/v1/namespaces/%s/pods" % ns

        def create(name, pod=None):
            pod = pod or _pod(name, ["sleep", "300"], node=None, host_network=True, container_extra=_host_port(2322))

            def made():
                try:
                    return self.k.create(path, pod)
                except Exception:   # until the namespace's default ServiceAccount exists
                    return None
            self.wait("pod %s created" % name, made)

        def get(name):
            return self.k.get(path + "/" + name) or {}

        for name in ("a", "b"):
            create(name)
        for name in ("a", "b"):
            self.wait("%s running" % name, lambda name=name: get(name).get("status", {}).get("phase") == "Running")
        placed = {name: get(name)["spec"]["nodeName"] for name in ("a", "b")}
        self.assertEqual(sorted(placed.values()), list(NODES))
        for name in ("a", "b"):
            st = get(name)["status"]
            self.assertEqual(st["podIP"], st["hostIP"])
        create("c")
        minor = cluster.server_minor(self.k)
        self.assertEqual(self.unschedulable(get, "c"),
                         cluster.unschedulable_message({n: cluster.NODE_PORTS for n in NODES}, minor=minor),
                         "the scheduler role's words are kube-scheduler's (1.%d)" % minor)
        # The same port on one node and a nodeSelector that the other node does not match.
        create("d", _pod("d", ["sleep", "300"], node=None, nodeSelector={"kubernetes.io/hostname": placed["b"]},
                         container_extra=_host_port(2322)))
        self.assertEqual(self.unschedulable(get, "d"), cluster.unschedulable_message(
            {placed["a"]: cluster.NODE_SELECTOR, placed["b"]: cluster.NODE_PORTS}, minor=minor))
        self.k.delete(path + "/a")
        self.wait("c running", lambda: get("c").get("status", {}).get("phase") == "Running")
        self.assertEqual(get("c")["spec"]["nodeName"], placed["a"])

    def unschedulable(self, get, name):
        """The message of pod name's PodScheduled condition once it says Unschedulable."""
        def seen():
            c = condition(get(name), "PodScheduled")
            return c if c and c.get("reason") == "Unschedulable" else None
        return self.wait("%s Unschedulable" % name, seen)["message"]


if __name__ == "__main__":
    unittest.main()
