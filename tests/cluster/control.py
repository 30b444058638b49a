"""The simulated kubelet's control folder: how a test in another process asks it to kill or
evict a pod. The asker drops <id>.json ({"action", "namespace", "name", "message"}) into
<state_dir>/control/; the kubelet answers in <id>.done ({"ok": bool, "error": str}).

    control.request(state_dir, "kill", "default", "x-worker-0")             # any process
    control.request(state_dir, "evict", "default", "x-worker-1", "low on memory")
"""

import json
import os
import time
import uuid

ACTIONS = ("kill", "evict")


def request(state_dir, action, namespace, name, message=None, timeout=60.0):
    """Asks the Kubelet running on state_dir (in any process) to kill or evict a pod; returns its
    answer {"ok": bool, "error": str}. Raises TimeoutError when no answer comes."""
    if action not in ACTIONS:
        raise ValueError("action %r: want kill or evict" % action)
    d = os.path.join(state_dir, "control")
    os.makedirs(d, exist_ok=True)
    rid = uuid.uuid4().hex
    tmp = os.path.join(d, rid + ".tmp")
    with open(tmp, "w") as f:
        json.dump({"action": action, "namespace": namespace, "name": name, "message": message}, f)
    os.rename(tmp, os.path.join(d, rid + ".json"))
    done = os.path.join(d, rid + ".done")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if os.path.exists(done):
            with open(done) as f:
                ans = json.load(f)
            os.unlink(done)
            return ans
        time.sleep(0.05)
    raise TimeoutError("no kubelet answered %s %s/%s in %s within %.0f s"
                       % (action, namespace, name, state_dir, timeout))


def serve(control_dir, kubelet):
    """Answers every request waiting in control_dir through kubelet.kill_pod and evict_pod."""
    try:
        names = os.listdir(control_dir)
    except OSError:
        return
    for n in names:
        if not n.endswith(".json"):
            continue
        p = os.path.join(control_dir, n)
        try:
            with open(p) as f:
                req = json.load(f)
            os.unlink(p)
        except (OSError, ValueError):
            continue
        action, ns, name = req.get("action"), req.get("namespace"), req.get("name")
        if action == "kill":
            ok = kubelet.kill_pod(ns, name)
        elif action == "evict":
            ok = kubelet.evict_pod(ns, name, req.get("message"))
        else:
            ok = False
        ans = {"ok": ok, "error": "" if ok else "no running pod %s/%s on %s (or unknown action %r)"
               % (ns, name, ", ".join(kubelet.nodes), action)}
        tmp = p[:-5] + ".done.tmp"
        with open(tmp, "w") as f:
            json.dump(ans, f)
        os.rename(tmp, p[:-5] + ".done")
