"""The /etc/hosts and /etc/resolv.conf the simulated kubelet gives each pod (under
/etc/netns/<pod's network namespace>/, bound into its containers), standing in for cluster DNS:

  - hosts names every running pod of the node as <hostname>.<subdomain>.<namespace>.svc.<domain>
    (and without the domain; <hostname>.<subdomain> and <hostname> for pods of the same
    namespace, the pod itself by its hostname), rewritten as pods come and go;
  - resolv.conf searches <namespace>.svc.<domain>, svc.<domain>, <domain> and the pod's
    dnsConfig searches, with a name server that answers nothing (127.0.0.1), so a name outside
    the hosts file fails at once instead of timing out.

Each runner passed in has ns, hostname, subdomain, pod_ip and spec.
"""


def hosts_text(me, live, domain):
    """The hosts file of runner me, given the runners of the node's running pods."""
    lines = ["# Kubernetes-managed hosts file (simulated by the cluster's kubelet).",
             "127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback",
             "fe00::0\tip6-localnet", "fe00::0\tip6-mcastprefix", "fe00::1\tip6-allnodes",
             "fe00::2\tip6-allrouters"]
    for r in live:
        names = []
        if r.subdomain:
            base = "%s.%s.%s.svc" % (r.hostname, r.subdomain, r.ns)
            if domain:
                names.append(base + "." + domain)
            names.append(base)
            if r.ns == me.ns:
                names.append("%s.%s" % (r.hostname, r.subdomain))
        if r is me or (r.ns == me.ns and r.subdomain and r.subdomain == me.subdomain):
            names.append(r.hostname)
        if names:
            lines.append("%s\t%s" % (r.pod_ip, " ".join(dict.fromkeys(names))))
    return "\n".join(lines) + "\n"


def resolv_text(me, domain):
    """The resolv.conf of runner me."""
    search = []
    if domain:
        search += ["%s.svc.%s" % (me.ns, domain), "svc." + domain, domain]
    search += [s for s in ((me.spec.get("dnsConfig") or {}).get("searches") or []) if s not in search]
    # No DNS server runs: names outside the hosts file fail at once instead of timing out.
    text = "nameserver 127.0.0.1\n"
    if search:
        text += "search %s\n" % " ".join(search[:32])
    return text
