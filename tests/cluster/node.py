"""The node side of the simulated kubelet, one NodeReporter per node: the Node object it
registers (capacity and allocatable, conditions, addresses, nodeInfo, labels), its status posted
every STATUS_HEARTBEAT seconds and its Lease in kube-node-lease renewed every LEASE_RENEW
seconds, so that a real kube-controller-manager keeps the node Ready and untainted and a real
kube-scheduler binds pods to it. Every node has its own address (InternalIP: its network
namespace's, netns.py) and its own machine and boot ids; the first node's are this machine's.
"""

import hashlib
import logging
import os
import time

from apitime import now_micro, now_rfc3339
from kube import KubeError

KUBELET_PORT = 10250  # where each node serves container logs (kubeletapi.py)

log = logging.getLogger("kubelet")

NODE_NAME = "sim-node"
MAX_NODES = 64


def node_names(count, first=NODE_NAME):
    """The names of a simulation's nodes: first ("sim-node"), then first-1, first-2, ..."""
    if not 1 <= count <= MAX_NODES:
        raise ValueError("%d nodes: want 1 to %d" % (count, MAX_NODES))
    return [first] + ["%s-%d" % (first, i) for i in range(1, count)]


def arch():
    """This machine's architecture as Kubernetes names it (amd64, arm64, ...)."""
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(os.uname().machine, os.uname().machine)


def node_labels(node):
    """The labels a kubelet gives its Node (what nodeSelectors commonly match)."""
    return {"kubernetes.io/hostname": node, "kubernetes.io/os": "linux", "kubernetes.io/arch": arch(),
            "beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": arch()}


def _read_id(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""


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
    controller keeps it Ready and untainted. Where the server serves no nodes, it says
    so once and stops; where kube-node-lease does not exist, it goes on without a Lease."""

    LEASE_NS = "kube-node-lease"
    LEASE_DURATION = 40
    LEASE_RENEW = 10.0
    STATUS_HEARTBEAT = 10.0

    def __init__(self, kubelet, node=None, extra_resources=None):
        self.k = kubelet
        self.kube = kubelet.kube
        self.node = node or kubelet.node
        self.extra = dict(extra_resources or {})
        self.uid = None
        self.since = now_rfc3339()
        self.lease_ok = True
        self.machine_id = _read_id("/etc/machine-id") or hashlib.sha1(self.node.encode()).hexdigest()[:32]
        self.boot_id = _read_id("/proc/sys/kernel/random/boot_id")
        if self.node != kubelet.node:
            # The other nodes are other machines: ids of their own, stable for a name.
            self.machine_id = hashlib.sha1((self.machine_id + "/" + self.node).encode()).hexdigest()[:32]
            h = hashlib.sha1((self.boot_id + "/" + self.node).encode()).hexdigest()
            self.boot_id = "%s-%s-%s-%s-%s" % (h[:8], h[8:12], h[12:16], h[16:20], h[20:32])

    def resources(self):
        stat = os.statvfs(self.k.state_dir)
        res = {"cpu": str(os.cpu_count() or 1), "memory": "%dKi" % _memory_kib(), "pods": "110",
               "ephemeral-storage": "%dKi" % (stat.f_blocks * stat.f_frsize // 1024),
               "hugepages-2Mi": "0", "hugepages-1Gi": "0"}
        res.update(self.extra)
        return res

    def status(self):
        now = now_rfc3339()

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
            "addresses": [{"type": "InternalIP", "address": self.k.node_ip(self.node)},
                          {"type": "Hostname", "address": self.node}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": KUBELET_PORT}},
            "nodeInfo": {"machineID": self.machine_id, "systemUUID": self.machine_id, "bootID": self.boot_id,
                         "kernelVersion": os.uname().release, "osImage": "cluster simulation",
                         "containerRuntimeVersion": "sim://1", "kubeletVersion": "v1.32.0-sim",
                         "kubeProxyVersion": "", "operatingSystem": "linux", "architecture": arch()},
        }

    def labels(self):
        return node_labels(self.node)

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
            # The status goes through /status too: a server may keep none of a new object's
            # status, and the addresses are what the API server dials for logs.
            self.kube.patch_status(path, {"status": self.status()})
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
        spec = {"holderIdentity": self.node, "leaseDurationSeconds": self.LEASE_DURATION, "renewTime": now_micro()}
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
