#!/usr/bin/env python3
"""Faults of the cluster's own daemons under a running MPIJob, on real nodes (kubelet,
containerd, runc, CNI: tests/cluster/realnode): the kubelet restarted, containerd restarted (on the
node of a worker, as `systemctl restart` does), and the whole control plane restarted (etcd,
kube-apiserver, kube-controller-manager, kube-scheduler; etcd's data kept), each mid-training.
Each requires the job to Succeed with no pod made twice, none of its objects made again and no
restart counted against backoffLimit (no worker replaced, no launcher run failed). Each prints
what it measured: how long the restart took, what the node said meanwhile, and the job's time
to Succeeded.

Only the real-node tier has such daemons; elsewhere the suite skips, saying why. Run from the
repository root: python3 tests/e2e/test_faults.py
"""
import json
import os
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import ROOT, LocalCluster, missing, tier  # noqa: E402
from test_e2e import TIMEOUT, JobWaits, job, mpirun  # noqa: E402

sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
from deadline import wait_for  # noqa: E402


def why_not():
    if tier() != "real nodes":
        return ("needs real nodes (KUBEBUILDER_ASSETS with kubelet, kube-proxy and coredns): a node's kubelet and "
                "containerd, and the control plane, restarted under pods that run; the tier here is %s" % tier())
    return missing()


class NodeWatch:
    """Samples a node's Ready condition every half second from a thread: what the control
    plane was told while a daemon of the node restarted."""

    def __init__(self, cluster, node):
        self.c, self.node = cluster, node
        self.seen = []          # (seconds since start, status, reason), each change once
        self.stop = threading.Event()
        self.t0 = time.monotonic()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.stop.wait(0.5):
            r = self.c.kubectl("get", "node", self.node, "-o", "json")
            if r.returncode != 0:
                continue
            conds = (json.loads(r.stdout).get("status") or {}).get("conditions") or []
            ready = next((c for c in conds if c.get("type") == "Ready"), {})
            state = (ready.get("status"), ready.get("reason"))
            if not self.seen or self.seen[-1][1:] != state:
                self.seen.append((round(time.monotonic() - self.t0, 1),) + state)

    def done(self):
        self.stop.set()
        self.thread.join(10)
        return self.seen


class Faults(JobWaits):
    """What every fault test does: a training started, and the checks that it survived."""

    @classmethod
    def tearDownClass(cls):
        cls.c.stop()

    def start_training(self, name, steps, backoff_limit=3, *train_args):
        """A 2-worker training, returned once its ranks have started: (namespace, {pod name: pod})."""
        ns = self.namespace()
        self.apply(ns, job(name, mpirun("train", "--steps", str(steps), "--log-every", "1000", *train_args),
                           run_policy={"backoffLimit": backoff_limit}))
        self.wait_state(ns, name, ("Running",))
        wait_for("%s's training started" % name, lambda: '"event":"start"' in self.launcher_log(ns, name),
                 TIMEOUT, interval=0.2, describe=lambda: self.describe_job(ns, name))
        return ns, {p["metadata"]["name"]: p for p in self.pods(ns)}

    def object_uids(self, ns):
        """{kind/name: uid} of the namespace's Services, ConfigMaps, Secrets and Jobs."""
        out = json.loads(self.kubectl("get", "services,configmaps,secrets,jobs", "-n", ns, "-o", "json").stdout)
        return {"%s/%s" % (o["kind"], o["metadata"]["name"]): o["metadata"]["uid"] for o in out["items"]}

    def assert_survived(self, ns, name, j):
        """Succeeded, with nothing made twice and nothing counted against backoffLimit."""
        self.assertEqual(j["status"]["state"], "Succeeded", self.describe_job(ns, name))
        self.assertTrue(self.summary(ns, name)["weights_identical"])
        self.assertEqual(self.c.pod_names_created_twice(ns), {}, "no pod was made twice")
        self.assertEqual(int(j["status"].get("workerRestarts") or 0), 0, json.dumps(j["status"]))
        launcher_job = json.loads(self.kubectl("get", "job", name + "-launcher", "-n", ns, "-o", "json").stdout)
        self.assertEqual(int((launcher_job.get("status") or {}).get("failed") or 0), 0,
                         "no launcher run failed: %s" % json.dumps(launcher_job.get("status")))


@unittest.skipIf(why_not(), why_not())
class NodeDaemonsRestarted(Faults, unittest.TestCase):
    ns_prefix = "fault-"

    @classmethod
    def setUpClass(cls):
        cls.c = LocalCluster(prefix="mpijob-e2e-faults-")

    def restart_under_training(self, daemon):
        """A 2-worker training; once it runs, `daemon` restarted on the node of worker 1. The job
        must Succeed with nothing made twice and nothing counted against backoffLimit."""
        name = daemon
        ns, pods = self.start_training(name, 6000)
        node = pods[name + "-worker-1"]["spec"]["nodeName"]
        watch = NodeWatch(self.c, node)
        t0 = time.monotonic()
        pid = self.c.restart_daemon(node, daemon)
        restarted = time.monotonic() - t0
        j = self.wait_end(ns, name)
        to_end = time.monotonic() - t0
        seen = watch.done()
        self.assert_survived(ns, name, j)
        print("%s restarted on %s (worker %s-worker-1's node, new pid %d) in %.1f s; the node's Ready "
              "condition meanwhile (s, status, reason): %s; the job Succeeded %.1f s after the restart began, "
              "no pod made twice, no restart counted"
              % (daemon, node, name, pid, restarted, seen, to_end), file=sys.stderr, flush=True)

    def test_kubelet_restarted_mid_job_the_job_succeeds(self):
        self.restart_under_training("kubelet")

    def test_containerd_restarted_mid_job_the_job_succeeds(self):
        self.restart_under_training("containerd")


@unittest.skipIf(why_not(), why_not())
class ControlPlaneRestarted(Faults, unittest.TestCase):
    """The operator as users run it (the chart's two replicas, pods on the real nodes) while the
    whole control plane restarts."""
    ns_prefix = "fault-cp-"

    @classmethod
    def setUpClass(cls):
        cls.c = LocalCluster(prefix="mpijob-e2e-faults-cp-", operator="chart")

    def test_control_plane_restarted_mid_job_the_job_succeeds(self):
        """etcd, kube-apiserver, kube-controller-manager and kube-scheduler stopped and started
        again (etcd's data kept) while the ranks train on real nodes: the operator leads again
        (a leader whose renewals failed past its renew deadline exits, and its Deployment starts
        it again), the job Succeeds, and none of its objects is made again."""
        self.c.wait_operator_pods()
        name = "controlplane"
        ns, _ = self.start_training(name, 15000)
        before = self.object_uids(ns)
        t0 = time.monotonic()
        answer = self.c.restart_control_plane()
        back = time.monotonic() - t0
        training_at_return = '"event":"summary"' not in self.launcher_log(ns, name)
        j = self.wait_end(ns, name)
        to_end = time.monotonic() - t0
        self.assert_survived(ns, name, j)
        pods = self.c.wait_operator_pods()
        restarts = sum(cs.get("restartCount", 0) for p in pods for cs in p["status"].get("containerStatuses") or [])
        after = self.object_uids(ns)
        self.assertEqual({k: v for k, v in after.items() if k in before}, before,
                         "the job's Service, ConfigMaps, Secret and launcher Job are the ones from before")
        print("control plane restarted under %s (stopped in %.1f s, all four serving again %.1f s after the stop "
              "began; the test saw it back after %.1f s); the ranks %s when it returned; the job Succeeded %.1f s "
              "after the restart began, no pod or object made again, no restart counted; the operator's containers "
              "restarted %d times, the Lease now held by %s"
              % (name, answer["stoppedSeconds"], answer["downSeconds"], back,
                 "were still training" if training_at_return else "had already finished", to_end, restarts,
                 self.c.lease_holder()),
              file=sys.stderr, flush=True)



# Longer than the launcher's ssh keepalive window (ServerAliveInterval 10 s x ServerAliveCountMax
# 3, src/mpijob/builders.c): a worker cut off is then answered by its ssh session ending, which
# mpirun counts as its daemon lost. The watchdog answering first would leave mpirun waiting for
# that daemon's TCP connection to time out (docs/internals/real-nodes.md, "Faults").
COLLECTIVE_TIMEOUT = 60


@unittest.skipIf(why_not(), why_not())
class NetworkPartition(Faults, unittest.TestCase):
    """A worker cut off mid-training (every packet into and out of its pod dropped, in its own
    network namespace): the run ends instead of every rank waiting for ever (the launcher's ssh
    session to that worker stops hearing from it, and mpirun counts its daemon lost; the collective
    watchdog, train --collective-timeout, is the bound behind it); the launcher Job's retries,
    bounded by backoffLimit, follow; once the cut is healed a retry Succeeds."""
    ns_prefix = "fault-net-"

    @classmethod
    def setUpClass(cls):
        cls.c = LocalCluster(prefix="mpijob-e2e-faults-net-")

    def launcher_runs_failed(self, ns, name):
        """The launcher's failed runs: its containers restarted in place (restartPolicy
        OnFailure) and its pods Failed."""
        runs = 0
        for p in self.pods(ns):
            if p["metadata"]["name"].startswith(name + "-launcher-"):
                runs += sum(cs.get("restartCount", 0) for cs in p["status"].get("containerStatuses") or [])
                runs += p["status"].get("phase") == "Failed"
        return runs

    def test_a_cut_with_no_retry_left_fails_the_job(self):
        name = "cut"
        ns, _ = self.start_training(name, 200000, 0, "--collective-timeout", str(COLLECTIVE_TIMEOUT))
        t0 = time.monotonic()
        self.c.cut_pod_network(ns, name + "-worker-1")
        try:
            j = self.wait_state(ns, name, ("Failed", "Succeeded"), timeout=COLLECTIVE_TIMEOUT + 300)
            answered = time.monotonic() - t0
        finally:
            self.c.cut_pod_network(ns, name + "-worker-1", heal=True)
        self.assertEqual(j["status"]["state"], "Failed", self.describe_job(ns, name))
        failed = next(c for c in j["status"]["conditions"] if c["type"] == "Failed")
        # Open MPI's words for a daemon it lost, from the run that failed (not from the run the
        # kubelet started again and the Job controller's deletion stopped)
        self.assertTrue(any(w in failed["message"] for w in ("unable to reliably start one or more daemons",
                                                             "lost communication with a remote daemon")),
                        failed["message"])
        print("network cut under %s (worker 1, collective timeout %d s, backoffLimit 0): the MPIJob Failed %.1f s "
              "after the cut, reason %s: %s" % (name, COLLECTIVE_TIMEOUT, answered, failed["reason"],
                                               failed["message"][-600:]), file=sys.stderr, flush=True)

    def test_b_cut_then_healed_a_retry_succeeds(self):
        name = "heal"
        ns, _ = self.start_training(name, 6000, 3,
                                    "--collective-timeout", str(COLLECTIVE_TIMEOUT))
        t0 = time.monotonic()
        self.c.cut_pod_network(ns, name + "-worker-1")
        try:
            wait_for("the launcher's run to end after the cut", lambda: self.launcher_runs_failed(ns, name) >= 1,
                     COLLECTIVE_TIMEOUT + 300, interval=0.5, describe=lambda: self.describe_job(ns, name))
            ended = time.monotonic() - t0
        finally:
            self.c.cut_pod_network(ns, name + "-worker-1", heal=True)
        healed = time.monotonic() - t0
        j = self.wait_end(ns, name)
        to_end = time.monotonic() - t0
        self.assertEqual(j["status"]["state"], "Succeeded", self.describe_job(ns, name))
        failures = self.launcher_runs_failed(ns, name)
        self.assertTrue(1 <= failures <= 3, failures)
        self.assertEqual(self.c.pod_names_created_twice(ns, lambda n: "-worker-" in n), {}, "no worker made twice")
        print("network cut under %s (worker 1, collective timeout %d s, backoffLimit 3): the launcher's run ended "
              "%.1f s after the cut; healed at %.1f s; the job Succeeded %.1f s after the cut, after %d failed "
              "launcher run(s)" % (name, COLLECTIVE_TIMEOUT, ended, healed, to_end, failures),
              file=sys.stderr, flush=True)



@unittest.skipIf(why_not(), why_not())
class LeaderNodeLost(Faults, unittest.TestCase):
    """The chart's two replicas on two nodes (its default podAntiAffinity); the leader's node dies
    as a machine does (kubelet, containers, containerd and link gone: harness.lose_node) while a
    job trains on the other node."""
    ns_prefix = "fault-leader-"

    @classmethod
    def setUpClass(cls):
        cls.c = LocalCluster(prefix="mpijob-e2e-faults-leader-", operator="chart")

    def test_the_leaders_node_lost_the_standby_leads_and_the_job_succeeds(self):
        pods = self.c.wait_operator_pods()
        holder = self.c.lease_holder()
        leader = next(p for p in pods if holder.startswith(p["metadata"]["name"]))
        standby = next(p for p in pods if p is not leader)
        lost, kept = leader["spec"]["nodeName"], standby["spec"]["nodeName"]
        self.assertNotEqual(lost, kept, "the chart's replicas run on two nodes")
        name = "orphan"
        ns = self.namespace()
        j = job(name, mpirun("train", "--steps", "20000", "--log-every", "1000"), run_policy={"backoffLimit": 3})
        for spec in j["spec"]["mpiReplicaSpecs"].values():
            spec["template"]["spec"]["nodeSelector"] = {"kubernetes.io/hostname": kept}
        self.apply(ns, j)
        self.wait_state(ns, name, ("Running",))
        wait_for("%s's training started" % name, lambda: '"event":"start"' in self.launcher_log(ns, name),
                 TIMEOUT, interval=0.2, describe=lambda: self.describe_job(ns, name))
        before = self.object_uids(ns)
        t0 = time.monotonic()
        self.c.lose_node(lost)
        wait_for("the standby %s to take the Lease" % standby["metadata"]["name"],
                 lambda: self.c.lease_holder().startswith(standby["metadata"]["name"]), 180, interval=0.2,
                 describe=lambda: "holder %s; the standby's log:\n%s" % (
                     self.c.lease_holder(), self.kubectl("logs", "-n", "mpijob-system", standby["metadata"]["name"],
                                                         check=False).stdout[-2000:]))
        took_over = time.monotonic() - t0
        training_then = '"event":"summary"' not in self.launcher_log(ns, name)
        j = self.wait_end(ns, name)
        to_end = time.monotonic() - t0
        self.assert_survived(ns, name, j)
        after = self.object_uids(ns)
        self.assertEqual({k: v for k, v in after.items() if k in before}, before,
                         "the job's Service, ConfigMaps, Secret and launcher Job are the ones from before")
        print("the leader %s's node %s lost under %s: the standby %s held the Lease %.1f s later (lease duration "
              "15 s), the ranks %s then; the job Succeeded %.1f s after the loss, nothing made again"
              % (leader["metadata"]["name"], lost, name, standby["metadata"]["name"], took_over,
                 "still training" if training_then else "already finished", to_end), file=sys.stderr, flush=True)


if __name__ == "__main__":
    unittest.main()
