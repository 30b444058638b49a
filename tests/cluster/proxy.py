"""The node's service proxy, for the one Service in-cluster clients need: `kubernetes` in the
default namespace, the API server's ClusterIP (standard library; needs root and iptables).

    p = ServiceProxy(prefix, bridge)
    p.sync(kube)          # (re)points ClusterIP:port at the Service's endpoint; idempotent
    p.env()               # KUBERNETES_SERVICE_HOST, KUBERNETES_SERVICE_PORT, ... for containers
    p.remove()            # or sweep(prefix) after a crash

As kube-proxy does in iptables mode: a DNAT rule in the nat table's PREROUTING chain sends what
pods and host-network pods (arriving on the bridge from their own or their node's network
namespace) address to the Service's ClusterIP and port to its endpoint,
the API server's address (from the Service's Endpoints; where the API server advertises
127.0.0.1, which Endpoints cannot hold, the address the kubelet reaches it at). The API server listens on 127.0.0.1 only, so, as kube-proxy does for
node ports on localhost, the bridge gets net.ipv4.conf.<bridge>.route_localnet=1 so that such
packets may be routed to loopback. Every rule carries the comment `<prefix>-svc-kubernetes`, by
which sweep(prefix) finds it.

Only this Service is proxied: the operator and the pods of MPIJobs reach each other by pod
addresses and the hosts file (headless Services), which need no proxy.
"""

import logging
import subprocess

log = logging.getLogger("proxy")


def _iptables(*args, check=True):
    proc = subprocess.run(["iptables", "-w", "5", "-t", "nat"] + list(args), capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise OSError("iptables %s: %s" % (" ".join(args), proc.stderr.strip()))
    return proc.stdout


def _rules(comment):
    """The PREROUTING rules (as -S prints them) carrying comment."""
    try:
        out = _iptables("-S", "PREROUTING", check=False)
    except FileNotFoundError:
        return []
    return [line for line in out.splitlines() if '--comment %s' % comment in line
            or '--comment "%s"' % comment in line]


def sweep(prefix):
    """Removes every rule a proxy with this prefix made; returns how many."""
    n = 0
    for rule in _rules(prefix + "-svc-kubernetes"):
        args = rule.split()
        if args[:2] == ["-A", "PREROUTING"]:
            _iptables("-D", "PREROUTING", *[a.strip('"') for a in args[2:]], check=False)
            n += 1
    return n


class ServiceProxy:
    def __init__(self, prefix, bridge):
        self.prefix = prefix
        self.bridge = bridge
        self.comment = prefix + "-svc-kubernetes"
        self.service = None       # (cluster ip, port, endpoint ip, endpoint port)

    def _lookup(self, kube):
        svc = kube.get("/api/v1/namespaces/default/services/kubernetes")
        if not svc:
            return None
        spec = svc.get("spec") or {}
        ip = spec.get("clusterIP")
        port = next((p for p in spec.get("ports") or [] if p.get("name") == "https"),
                    (spec.get("ports") or [None])[0])
        if not ip or ip == "None" or not port:
            return None
        ep = kube.get("/api/v1/namespaces/default/endpoints/kubernetes") or {}
        for subset in ep.get("subsets") or []:
            addrs = subset.get("addresses") or []
            ports = subset.get("ports") or []
            target = next((p for p in ports if p.get("name") == port.get("name")), ports[0] if ports else None)
            if addrs and target:
                return ip, int(port["port"]), addrs[0]["ip"], int(target["port"])
        # An API server advertising 127.0.0.1 cannot list itself (Endpoints refuse loopback
        # addresses): its endpoint is where the kubelet itself reaches it.
        if kube.host in ("127.0.0.1", "localhost"):
            return ip, int(port["port"]), "127.0.0.1", int(kube.port)
        return None

    def sync(self, kube):
        """Points the kubernetes Service's ClusterIP at its endpoint; False when the server
        has no such Service (then containers get no KUBERNETES_SERVICE_* variables)."""
        found = self._lookup(kube)
        if found == self.service:
            return found is not None
        self.remove()
        if found is None:
            return False
        cluster_ip, port, ep_ip, ep_port = found
        with open("/proc/sys/net/ipv4/conf/%s/route_localnet" % self.bridge, "w") as f:
            f.write("1\n")
        _iptables("-A", "PREROUTING", "-i", self.bridge, "-d", cluster_ip + "/32", "-p", "tcp",
                  "--dport", str(port), "-m", "comment", "--comment", self.comment,
                  "-j", "DNAT", "--to-destination", "%s:%d" % (ep_ip, ep_port))
        self.service = found
        log.info("service default/kubernetes: %s:%d -> %s:%d", cluster_ip, port, ep_ip, ep_port)
        return True

    def env(self):
        """The variables a kubelet gives every container for the kubernetes Service."""
        if self.service is None:
            return {}
        ip, port = self.service[0], self.service[1]
        url = "tcp://%s:%d" % (ip, port)
        key = "KUBERNETES_PORT_%d_TCP" % port
        return {"KUBERNETES_SERVICE_HOST": ip, "KUBERNETES_SERVICE_PORT": str(port),
                "KUBERNETES_SERVICE_PORT_HTTPS": str(port), "KUBERNETES_PORT": url,
                key: url, key + "_PROTO": "tcp", key + "_PORT": str(port), key + "_ADDR": ip}

    def remove(self):
        sweep(self.prefix)
        self.service = None
