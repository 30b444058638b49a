"""What the simulated kubelet makes of a container's spec before it runs it: the environment
(the kubernetes Service's variables, envFrom, env with $(VAR) expansion, fieldRef,
configMapKeyRef, secretKeyRef, resourceFieldRef), the expanded command and args, the user,
groups and working folder.

    spec = process_spec(runner, container)   # {"argv", "command", "args", "env", "uid", ...}
"""

import os
import pwd

from podvolumes import Missing, data_of, fetch, field_value

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def expand(text, env):
    """Kubernetes' $(VAR) expansion: defined names are replaced, $$ is a $, the rest stays."""
    if not isinstance(text, str) or "$" not in text:
        return text
    out, i, n = [], 0, len(text)
    while i < n:
        ch = text[i]
        if ch == "$" and i + 1 < n:
            nxt = text[i + 1]
            if nxt == "$":
                out.append("$")
                i += 2
                continue
            if nxt == "(":
                end = text.find(")", i + 2)
                if end > 0:
                    name = text[i + 2:end]
                    if name in env:
                        out.append(env[name])
                    else:
                        out.append(text[i:end + 1])
                    i = end + 1
                    continue
        out.append(ch)
        i += 1
    return "".join(out)


def security_context(pod_spec, container_spec):
    """The pod's securityContext with the container's set fields over it."""
    sc = dict(pod_spec.get("securityContext") or {})
    sc.update({k: v for k, v in (container_spec.get("securityContext") or {}).items() if v is not None})
    return sc


def process_spec(runner, c):
    """The process of container c (a kubelet Container) of runner's pod: {"hostname" (the
    containers' host name: the node's for a host-network pod), "argv",
    "command", "args", "env", "workingDir", "uid", "gid", "groups"}. Missing when a ConfigMap,
    Secret or key it reads is not there."""
    k = runner.k
    sc = security_context(runner.spec, c.spec)
    uid = sc.get("runAsUser")
    home = "/root"
    if uid is not None and uid != 0:
        try:
            home = pwd.getpwuid(uid).pw_dir
        except KeyError:
            home = "/"
    # From an image, PATH and HOME are the image's (runtime.oci_config); the pod's variables
    # come on top.
    env = {} if k.runtime else {"PATH": DEFAULT_PATH, "HOSTNAME": runner.uts_hostname, "HOME": home}
    # As a kubelet does: the kubernetes Service's variables first (in-cluster configuration
    # reads them), the container's own over them.
    if k.proxy is not None:
        env.update(k.proxy.env())
    for src in c.spec.get("envFrom") or []:
        prefix = src.get("prefix", "")
        if "configMapRef" in src:
            ref = src["configMapRef"]
            data = data_of(fetch(k.kube, runner.ns, "configmaps", ref.get("name"), bool(ref.get("optional"))),
                           False)
        elif "secretRef" in src:
            ref = src["secretRef"]
            data = data_of(fetch(k.kube, runner.ns, "secrets", ref.get("name"), bool(ref.get("optional"))), True)
        else:
            continue
        for key, v in data.items():
            env[prefix + key] = v.decode(errors="replace")
    for e in c.spec.get("env") or []:
        name = e.get("name")
        if "valueFrom" not in e:
            env[name] = expand(e.get("value", ""), env)
            continue
        vf = e["valueFrom"]
        if "fieldRef" in vf:
            env[name] = str(field_value(runner.pod, vf["fieldRef"].get("fieldPath", "")))
        elif "configMapKeyRef" in vf or "secretKeyRef" in vf:
            secret = "secretKeyRef" in vf
            ref = vf["secretKeyRef" if secret else "configMapKeyRef"]
            data = data_of(fetch(k.kube, runner.ns, "secrets" if secret else "configmaps", ref.get("name"),
                                 bool(ref.get("optional"))), secret)
            if ref.get("key") in data:
                env[name] = data[ref["key"]].decode(errors="replace")
            elif not ref.get("optional"):
                raise Missing("couldn't find key %s in %s %s/%s" % (ref.get("key"), "Secret" if secret else "ConfigMap",
                                                                   runner.ns, ref.get("name")))
        elif "resourceFieldRef" in vf:
            r = vf["resourceFieldRef"].get("resource", "")
            kind, _, res = r.partition(".")
            val = ((c.spec.get("resources") or {}).get(kind) or {}).get(res)
            env[name] = str(val if val is not None else (os.cpu_count() if res == "cpu" else 0))
    command = [expand(a, env) for a in (c.spec.get("command") or [])]
    args = [expand(a, env) for a in (c.spec.get("args") or [])]
    groups = list(sc.get("supplementalGroups") or [])
    if sc.get("fsGroup") is not None:
        groups.append(sc["fsGroup"])
    gid = sc.get("runAsGroup")
    if gid is None and uid is not None:
        try:
            gid = pwd.getpwuid(uid).pw_gid
        except KeyError:
            gid = uid
    return {"hostname": runner.uts_hostname, "argv": command + args, "command": command, "args": args, "env": env,
            "workingDir": c.spec.get("workingDir"), "uid": uid,
            "gid": gid, "groups": groups if gid is not None else None}
