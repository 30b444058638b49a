"""The /etc/hosts and /etc/resolv.conf the simulated kubelet gives each pod (under
/etc/netns/<the pod's name of its network namespace>/, bound into its containers), standing in
for cluster DNS:

  - hosts names every running pod of the kubelet's nodes as
    <hostname>.<subdomain>.<namespace>.svc.<domain> (and without the domain) at its podIP (a
    host-network pod's is its node's address), the pod itself by its host name (a host-network
    pod's is its node's name), and any shorter name that the pod's resolver would complete to
    one of those through its search list, as it does against cluster DNS
    (<hostname>.<subdomain> through <namespace>.svc.<domain>; <hostname> only through a search
    entry <subdomain>.<namespace>.svc.<domain>), rewritten as pods come and go;
  - resolv.conf searches <namespace>.svc.<domain>, svc.<domain>, <domain> and the pod's
    dnsConfig searches, with a name server that answers nothing (127.0.0.1), so a name outside
    the hosts file fails at once instead of timing out.

Each runner passed in has ns, hostname (the pod's name in DNS), uts_hostname (its containers'
host name), subdomain, pod_ip and spec.
"""


def search_list(me, domain):
    """The search domains of runner me's resolv.conf: the kubelet's, then its dnsConfig's."""
    search = []
    if domain:
        search += ["%s.svc.%s" % (me.ns, domain), "svc." + domain, domain]
    search += [s for s in ((me.spec.get("dnsConfig") or {}).get("searches") or []) if s not in search]
    return search[:32]


def hosts_text(me, live, domain):
    """The hosts file of runner me, given the runners of the running pods. A hosts file
    is not searched: the short names the search list would complete are listed themselves."""
    search = [s.strip(".") for s in search_list(me, domain)]
    lines = ["# Kubernetes-managed hosts file (simulated by the cluster's kubelet).",
             "127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback",
             "fe00::0\tip6-localnet", "fe00::0\tip6-mcastprefix", "fe00::1\tip6-allnodes",
             "fe00::2\tip6-allrouters"]
    for r in live:
        names = []
        if r.subdomain:
            base = "%s.%s.%s.svc" % (r.hostname, r.subdomain, r.ns)
            full = base + "." + domain if domain else base
            names += [full, base]
            names += [full[:-len(s) - 1] for s in search if full.endswith("." + s)]
        if r is me:
            names.append(r.uts_hostname)
        if names:
            lines.append("%s\t%s" % (r.pod_ip, " ".join(dict.fromkeys(names))))
    return "\n".join(lines) + "\n"


def resolv_text(me, domain):
    """The resolv.conf of runner me."""
    search = search_list(me, domain)
    # No DNS server runs: names outside the hosts file fail at once instead of timing out.
    text = "nameserver 127.0.0.1\n"
    if search:
        text += "search %s\n" % " ".join(search)
    return text
