#!/usr/bin/env python3
"""make soak: chaos, bounded. JOBS MPIJobs at once (2 workers each, real sshd and mpirun) while the
operator is restarted RESTARTS times (alternately SIGKILL and SIGTERM) and every watch stream is
cut DROPS times. Then:
  - every job must Succeed;
  - the API request log must show no pod created twice under one name;
  - once the MPIJobs are deleted, nothing they owned may be left (the garbage collector follows
    the operator's ownerReferences).
Prints the figures for docs/PERFORMANCE.md; exits 1 on any failed check.

With KUBEBUILDER_ASSETS (harness.py: a real kube-apiserver, and with kube-controller-manager and
kube-scheduler the real control plane) the watch drops are left out, as a real server cannot be
told to cut its streams, and "no pod created twice under one name" is read from a watch of the
pods (distinct uids under one name) instead of the double's request log.

    python3 tests/e2e/soak.py [--jobs 20] [--restarts 5] [--drops 10] [--timeout 600]
"""
import argparse
import collections
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import LocalCluster, missing  # noqa: E402

NS = "soak"


def mpijob(i, steps):
    return {
        "apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "metadata": {"name": "soak-%02d" % i},
        "spec": {
            "slotsPerWorker": 1,
            "runPolicy": {"cleanPodPolicy": "Running", "backoffLimit": 6},
            "networking": {"transport": "TCP"},
            "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "template": {"spec": {"containers": [{
                    "name": "launcher", "image": "mpijob-worker:latest", "imagePullPolicy": "IfNotPresent",
                    "command": ["mpirun", "--allow-run-as-root", "-np", "2", "--bind-to", "none",
                                "mpijob-worker", "train", "--steps", str(steps), "--log-every", "0"]}]}}},
                "Worker": {"replicas": 2, "template": {"spec": {"containers": [
                    {"name": "worker", "image": "mpijob-worker:latest", "imagePullPolicy": "IfNotPresent"}]}}},
            },
        },
    }


def states(c):
    r = c.kubectl("get", "mpijobs", "-n", NS, "-o", "json")
    if r.returncode != 0:
        return {}
    return {j["metadata"]["name"]: (j.get("status") or {}).get("state") for j in json.loads(r.stdout)["items"]}


def leftovers(c):
    r = c.kubectl("get", "pods,services,configmaps,secrets,jobs", "-n", NS, "-o", "json")
    if r.returncode != 0:
        return ["kubectl: " + r.stderr.strip()]
    # The CA bundles the control plane publishes in every namespace are nobody's leftovers.
    published = ("kube-root-ca.crt", "openshift-service-ca.crt")
    return ["%s/%s" % (o["kind"], o["metadata"]["name"]) for o in json.loads(r.stdout)["items"]
            if not (o["kind"] == "ConfigMap" and o["metadata"]["name"] in published)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jobs", type=int, default=20)
    ap.add_argument("--restarts", type=int, default=5)
    ap.add_argument("--drops", type=int, default=10)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--timeout", type=float, default=600)
    args = ap.parse_args()
    why = missing()
    if why:
        print("soak: " + why, file=sys.stderr)
        return 1
    c = LocalCluster(prefix="mpijob-soak-")
    ok = True
    try:
        c.kubectl("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "Namespace",
                                                         "metadata": {"name": NS}}))
        t0 = time.monotonic()
        for i in range(args.jobs):
            r = c.kubectl("apply", "-n", NS, "-f", "-", stdin=json.dumps(mpijob(i, args.steps)))
            if r.returncode != 0:
                print("soak: kubectl apply: " + r.stderr, file=sys.stderr)
                return 1
        if c.real_apiserver and args.drops:
            print("soak: no watch drops: a real kube-apiserver cannot be told to cut its watch streams")
            args.drops = 0
        # The chaos: spread over the first part of the run, one event every 2 s.
        events = ["restart"] * args.restarts + ["drop"] * args.drops
        order = []
        while events:   # interleave: restart, drop, drop, restart, ...
            for kind in ("restart", "drop", "drop"):
                if kind in events:
                    events.remove(kind)
                    order.append(kind)
        restarts = drops = 0
        end = t0 + args.timeout
        last = {}
        next_event = time.monotonic() + 2
        while time.monotonic() < end:
            if order and time.monotonic() >= next_event:
                kind = order.pop(0)
                if kind == "restart":
                    c.restart_operator(kill=restarts % 2 == 0)
                    restarts += 1
                else:
                    c.drop_watches()
                    drops += 1
                print("%6.1f s  %s (%d restarts, %d drops so far)" % (time.monotonic() - t0, kind, restarts, drops))
                next_event = time.monotonic() + 2
            last = states(c)
            done = [n for n, s in last.items() if s in ("Succeeded", "Failed")]
            if not order and len(done) == args.jobs:
                break
            time.sleep(1)
        elapsed = time.monotonic() - t0
        counts = collections.Counter(last.values())
        print("%d jobs after %.1f s: %s" % (args.jobs, elapsed, dict(counts)), flush=True)
        if counts.get("Succeeded", 0) != args.jobs:
            ok = False
            for n, s in sorted(last.items()):
                if s != "Succeeded":
                    print("  %s: %s\n%s" % (n, s, c.launcher_log(NS, n)[-1500:]))

        if c.real_apiserver:
            # No request log on a real server: the pods seen by a watch over the whole run, by uid.
            twice = c.pod_names_created_twice(NS)
            print("pods seen: %d; created twice under one name: %d%s" % (
                sum(1 for (ns, _n) in list(c.pod_uids) if ns == NS), len(twice),
                (" " + json.dumps(twice)) if twice else ""))
        else:
            log = c.request_log()["entries"]
            # Pods the operator names (workers); the Job controller's launcher pods get generated names.
            created = collections.Counter(((e.get("body") or {}).get("metadata") or {}).get("name") for e in log
                                          if e.get("verb") == "create" and e.get("resource") == "pods" and
                                          not e.get("subresource") and e.get("code") == 201)
            created.pop(None, None)
            twice = {n: k for n, k in created.items() if k > 1}
            print("API requests: %d; pods created: %d; created twice under one name: %d%s" % (
                len(log), sum(created.values()), len(twice), (" " + json.dumps(twice)) if twice else ""))
        ok = ok and not twice

        r = c.kubectl("delete", "mpijobs", "--all", "-n", NS, "--wait=false")
        if r.returncode != 0:
            print("soak: kubectl delete: " + r.stderr, file=sys.stderr)
            ok = False
        gone_by = time.monotonic() + 120
        left = leftovers(c)
        while left and time.monotonic() < gone_by:
            time.sleep(1)
            left = leftovers(c)
        print("after deleting the MPIJobs: %d objects left%s" % (len(left), (": " + ", ".join(left[:10])) if left else ""))
        ok = ok and not left
        print("soak: %s (%d jobs, %d operator restarts, %d watch drops, %.1f s)" % (
            "PASS" if ok else "FAIL", args.jobs, restarts, drops, elapsed))
    finally:
        c.stop()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
