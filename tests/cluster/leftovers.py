"""What a simulated kubelet leaves on this machine, and its removal: by a later Kubelet on the
same state directory (at start), by its own cleanup(), or by cluster.py's reaper when the
kubelet died without cleaning up (SIGKILL, a crash).

A kubelet names everything after its prefix (kubelet.prefix_for): network namespaces (the
nodes', the pods', and host-network pods' names of their node's), veths, the bridge, /etc/netns
folders and the service proxy's iptables rules; its runc containers live
under <state_dir>/runc and their roots under <state_dir>/containers; the host folders and files
it made for hostPath volumes are listed in <state_dir>/created-paths.json. Each node's
container-log server (kubeletapi.py) runs inside the node's network namespace, so the sweep of
the namespaces kills one that outlived its kubelet (it also ends with its parent, through
PR_SET_PDEATHSIG); the logs and their .runs files stay in <state_dir>/logs.
"""

import json
import logging
import os

import netns
import proxy
import runtime

log = logging.getLogger("kubelet")


def sweep(prefix):
    """Removes what a Kubelet with this prefix left behind (see netns.sweep)."""
    return netns.sweep(prefix)


def sweep_containers(runc_root, containers_dir):
    """runtime.sweep, a container it could not remove an error in the log. Returns the ids
    removed."""
    try:
        return runtime.sweep(runc_root, containers_dir)
    except runtime.KillError as e:
        log.error("removing the containers: %s", e)
        return []


def remove_created_paths(paths_file, paths=()):
    """Removes the host files and folders a kubelet made for hostPath volumes (listed in
    paths_file, plus paths), each only while still empty, then paths_file itself."""
    paths = list(paths)
    try:
        with open(paths_file) as f:
            paths += json.load(f)
    except (OSError, ValueError):
        pass
    removed = []
    for top in sorted(set(paths), key=len, reverse=True):
        try:
            if os.path.isdir(top) and not os.path.islink(top):
                for root, dirs, files in os.walk(top, topdown=False):
                    if files:
                        raise OSError("not empty")
                    for d in dirs:
                        os.rmdir(os.path.join(root, d))
                os.rmdir(top)
                removed.append(top)
            elif os.path.isfile(top) and os.path.getsize(top) == 0:
                os.unlink(top)
                removed.append(top)
        except OSError:
            pass
    try:
        os.unlink(paths_file)
    except OSError:
        pass
    return removed


def reap(state_dir):
    """What a kubelet on state_dir left when it died without cleanup() (SIGKILL, a crash): its
    pods' processes, network namespaces, veths, bridge, /etc/netns folders and the hostPath
    folders it made. Reads <state_dir>/kubelet.json, written when the kubelet started. Returns
    what it removed."""
    try:
        with open(os.path.join(state_dir, "kubelet.json")) as f:
            prefix = json.load(f)["prefix"]
    except (OSError, ValueError, KeyError):
        return []
    removed = sweep_containers(os.path.join(state_dir, "runc"), os.path.join(state_dir, "containers"))
    if proxy.sweep(prefix):
        removed.append("iptables rules %s-svc-kubernetes" % prefix)
    removed += netns.sweep(prefix)
    removed += remove_created_paths(os.path.join(state_dir, "created-paths.json"))
    return removed
