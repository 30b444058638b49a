"""What the simulated controllers read off objects, pods and conditions, one copy for all of them
(jobcontroller.py, deployments.py); and, for tests, the processes a pod's container runs."""

import os


def controller_ref(obj):
    """The ownerReference of obj that says controller: true, or None."""
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if isinstance(ref, dict) and ref.get("controller"):
            return ref
    return None


def find_condition(status, ctype):
    """The condition of that type in an object's status, or None."""
    for c in status.get("conditions") or []:
        if isinstance(c, dict) and c.get("type") == ctype:
            return c
    return None


def condition_true(status, ctype):
    c = find_condition(status, ctype)
    return c is not None and c.get("status") == "True"


def pod_terminal(pod):
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def pod_deleting(pod):
    return bool((pod.get("metadata") or {}).get("deletionTimestamp"))


def pod_active(pod):
    """Neither finished nor being deleted, as the workload controllers count active pods."""
    return not pod_terminal(pod) and not pod_deleting(pod)


def pod_ready(pod):
    return condition_true(pod.get("status") or {}, "Ready")


def processes(*argv_prefix):
    """The pids (as strings) of this machine's processes whose command line starts with
    argv_prefix (strings): how a test finds the process a container runs."""
    want = [a.encode() for a in argv_prefix]
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                if f.read().split(b"\0")[:len(want)] == want:
                    found.append(pid)
        except OSError:
            pass
    return found
