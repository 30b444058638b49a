#!/usr/bin/env python3
"""End to end under kube-scheduler's own gang scheduling (--gang-scheduling workload, the Workload
API of Kubernetes 1.36): on real nodes (kubelet, containerd, runc, CNI), a job whose pods kube-scheduler
placed as one gang runs to Succeeded, and its deletion leaves nothing behind.

Runs only on the real-node tier of a release with the API (1.36 or later): launch.py
--workload-api turns on its runtime-config and feature gates. Elsewhere it skips, saying why: the
double and the simulation run no kube-scheduler, and 1.32 has no such API. The verdicts on
placement itself (all or nothing, no deadlock between gangs, topology) are the integration suite
gang_placement's (tests/integration/test_gang_workload.c). Run from the repository root:
python3 tests/e2e/test_gang.py
"""
import json
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import ROOT, LocalCluster, missing, tier  # noqa: E402
from test_e2e import JobWaits, job, mpirun  # noqa: E402

sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
from deadline import wait_for  # noqa: E402

sys.path.insert(0, os.path.join(ROOT, "tests", "apiserver"))
from launch import WORKLOAD_API_MINOR, binary_minor  # noqa: E402


def why_not():
    """Why this suite cannot run here, or None."""
    minor = binary_minor(os.path.join(os.environ.get("KUBEBUILDER_ASSETS", ""), "kube-apiserver"))
    if tier() != "real nodes":
        return ("needs real nodes and kube-scheduler of Kubernetes 1.36 (KUBEBUILDER_ASSETS with kubelet, "
                "kube-proxy and coredns); the tier here is %s" % tier())
    if minor < WORKLOAD_API_MINOR:
        return "needs Kubernetes 1.36 or later for the Workload API; KUBEBUILDER_ASSETS holds 1.%d" % minor
    return missing()


@unittest.skipIf(why_not(), why_not())
class GangOnRealNodes(JobWaits, unittest.TestCase):
    ns_prefix = "gang-"

    @classmethod
    def setUpClass(cls):
        cls.c = LocalCluster(prefix="mpijob-e2e-gang-", workload_api=True,
                             operator_args=["--gang-scheduling", "workload"])

    @classmethod
    def tearDownClass(cls):
        cls.c.stop()

    def get_json(self, ns, what):
        r = self.kubectl("get", what, "-n", ns, "-o", "json", check=False)
        return json.loads(r.stdout) if r.returncode == 0 else None

    def test_a_gang_job_runs_to_succeeded_and_leaves_nothing_behind(self):
        ns = self.namespace()
        self.apply(ns, job("gang", mpirun("train", "--steps", "30")))
        # The gang: a Workload and a PodGroup owned by the MPIJob; under WaitForWorkersReady its
        # minCount is the workers (the launcher is made once they are Ready).
        wait_for("the PodGroup of gang", lambda: self.get_json(ns, "podgroups.scheduling.k8s.io/gang"), 120,
                 interval=0.5, describe=lambda: self.describe_job(ns, "gang"))
        pg = self.get_json(ns, "podgroups.scheduling.k8s.io/gang")
        self.assertEqual(pg["spec"]["schedulingPolicy"]["gang"]["minCount"], 2, pg["spec"])
        self.assertEqual(pg["metadata"]["ownerReferences"][0]["kind"], "MPIJob")
        self.assertIsNotNone(self.get_json(ns, "workloads.scheduling.k8s.io/gang"))

        j = self.wait_state(ns, "gang", ("Succeeded", "Failed"))
        self.assertEqual(j["status"]["state"], "Succeeded", self.launcher_log(ns, "gang")[-3000:])
        s = self.summary(ns, "gang")
        self.assertEqual(s["ranks"], 2)
        self.assertTrue(s["weights_identical"])
        placed = self.start_line(ns, "gang").get("placement")
        print("gang: Succeeded on real nodes; ranks placed %s; PodGroup status %s"
              % (json.dumps(placed), json.dumps((self.get_json(ns, "podgroups.scheduling.k8s.io/gang") or {})
                                                .get("status"))), file=sys.stderr, flush=True)
        workers = [p for p in self.pods(ns) if "-worker-" in p["metadata"]["name"]]
        for p in workers:   # those not yet deleted by cleanPodPolicy Running
            self.assertEqual(p["spec"].get("schedulingGroup"), {"podGroupName": "gang"}, p["metadata"]["name"])

        self.kubectl("delete", "mpijob", "gang", "-n", ns)

        def nothing_left():
            left = self.kubectl("get", "pods,jobs,workloads.scheduling.k8s.io,podgroups.scheduling.k8s.io",
                                "-n", ns, "-o", "name", check=False).stdout.split()
            return not left
        wait_for("the garbage collector to take the job's objects", nothing_left, 180, interval=0.5,
                 describe=lambda: self.kubectl("get", "pods,jobs,workloads.scheduling.k8s.io,"
                                               "podgroups.scheduling.k8s.io", "-n", ns, check=False).stdout)


if __name__ == "__main__":
    unittest.main()
