"""Tests of the batch Job controller (and the scheduler role) of cluster.py.

Each class starts the API server (the double, or a real kube-apiserver with KUBEBUILDER_ASSETS)
and `cluster.py --roles jobs,gc,scheduler` once; the test plays the kubelet by patching pod status,
and a DeletionFinisher in the test process finishes the deletion of bound pods as a kubelet does.

    python3 -m unittest discover -s tests/cluster -p 'test_*.py'
"""

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import netns  # noqa: E402
import pods  # noqa: E402
from clustertest import (ClusterHarness, ClusterTestCase, alive, condition, scaled, start_apiserver,  # noqa: E402
                     wait_for)


def job_manifest(name, **spec):
    tmpl = {"metadata": {"labels": {"app": name}, "annotations": {"note": "x"}},
            "spec": {"restartPolicy": spec.pop("restartPolicy", "Never"),
                     "containers": [{"name": "main", "image": "busybox", "command": ["true"]}]}}
    body = {"template": tmpl}
    body.update(spec)
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": "default"}, "spec": body}


JOBS = "/apis/batch/v1/namespaces/default/jobs"
PODS = "/api/v1/namespaces/default/pods"


class JobTestCase(ClusterTestCase):
    """A cluster with the Job controller; the test plays the kubelet."""

    def pods_of(self, job):
        return self.k.list(PODS, "job-name=" + job)[0]

    def live_pods(self, job):
        return [p for p in self.pods_of(job) if not p["metadata"].get("deletionTimestamp")
                and p["status"].get("phase") not in ("Succeeded", "Failed")]

    def wait_pods(self, job, n):
        return self.wait("%d live pods of %s" % (n, job),
                        lambda: (lambda ps: ps if len(ps) == n else None)(self.live_pods(job)))

    def job(self, name):
        return self.k.get(JOBS + "/" + name)

    def set_phase(self, pod, phase, code=None):
        st = {"phase": phase}
        if code is not None:
            st["containerStatuses"] = [{"name": "main", "ready": False, "restartCount": 0, "image": "busybox",
                                        "imageID": "", "started": False,
                                        "state": {"terminated": {"exitCode": code, "reason": "Error" if code else "Completed"}}}]
        self.k.patch_status(PODS + "/" + pod["metadata"]["name"], {"status": st})

    def wait_condition(self, name, ctype, status="True"):
        def check():
            j = self.job(name)
            c = condition(j, ctype)
            return j if c and c["status"] == status else None
        return self.wait("condition %s=%s on job %s" % (ctype, status, name), check)


class JobControllerTest(JobTestCase):
    def test_creates_pod_from_template(self):
        job = self.k.create(JOBS, job_manifest("create"))
        pod = self.wait_pods("create", 1)[0]
        meta = pod["metadata"]
        self.assertRegex(meta["name"], r"^create-[a-z0-9]{5}$")
        uid = job["metadata"]["uid"]
        for k, v in {"batch.kubernetes.io/job-name": "create", "job-name": "create",
                     "batch.kubernetes.io/controller-uid": uid, "controller-uid": uid, "app": "create"}.items():
            self.assertEqual(meta["labels"].get(k), v, k)
        self.assertEqual(meta.get("annotations", {}).get("note"), "x")
        self.assertEqual(meta["ownerReferences"], [{"apiVersion": "batch/v1", "kind": "Job", "name": "create",
                                                    "uid": uid, "controller": True, "blockOwnerDeletion": True}])
        self.assertIn("batch.kubernetes.io/job-tracking", meta.get("finalizers", []))
        self.assertEqual(pod["spec"]["containers"][0]["command"], ["true"])
        j = self.wait("active=1", lambda: (lambda j: j if (j.get("status") or {}).get("active") == 1 else None)(self.job("create")))
        self.assertTrue(j["status"].get("startTime"))
        self.assertEqual(j["status"].get("ready"), 0)
        # The scheduler role binds the pod, or says once that the server cannot bind.
        self.wait("binding", lambda: self.k.get(PODS + "/" + meta["name"])["spec"].get("nodeName") == "sim-node"
                 or "serves no pods/binding" in self.h.log())
        # Ready pods are counted.
        self.k.patch_status(PODS + "/" + meta["name"], {"status": {"phase": "Running", "conditions": [
            {"type": "Ready", "status": "True"}, {"type": "PodScheduled", "status": "True"}]}})
        self.wait("ready=1", lambda: (self.job("create").get("status") or {}).get("ready") == 1)
        # Still exactly one pod: no duplicate from a stale cache.
        time.sleep(1.5)
        self.assertEqual(len(self.pods_of("create")), 1)

    def test_success_completes(self):
        self.k.create(JOBS, job_manifest("ok"))
        pod = self.wait_pods("ok", 1)[0]
        self.set_phase(pod, "Succeeded", 0)
        j = self.wait_condition("ok", "Complete")
        st = j["status"]
        self.assertEqual(st.get("succeeded"), 1)
        self.assertNotIn("active", st)
        self.assertTrue(st.get("completionTime"))
        types = [c["type"] for c in st["conditions"]]
        self.assertEqual(types, ["SuccessCriteriaMet", "Complete"])
        for c in st["conditions"]:
            self.assertEqual(c["reason"], "CompletionsReached")
            self.assertEqual(c["message"], "Reached expected number of succeeded pods")
            self.assertTrue(c["lastTransitionTime"])
        # The pod is no longer tracked, and stays.
        p = self.k.get(PODS + "/" + pod["metadata"]["name"])
        self.assertNotIn("batch.kubernetes.io/job-tracking", p["metadata"].get("finalizers") or [])

    def test_parallel_completions(self):
        self.k.create(JOBS, job_manifest("par", parallelism=2, completions=3))
        pods = self.wait_pods("par", 2)
        self.set_phase(pods[0], "Succeeded", 0)
        self.set_phase(pods[1], "Succeeded", 0)
        last = self.wait_pods("par", 1)
        self.wait("succeeded=2", lambda: (self.job("par").get("status") or {}).get("succeeded") == 2)
        self.set_phase(last[0], "Succeeded", 0)
        j = self.wait_condition("par", "Complete")
        self.assertEqual(j["status"]["succeeded"], 3)
        self.assertEqual(len(self.pods_of("par")), 3)

    def test_backoff_limit(self):
        self.k.create(JOBS, job_manifest("flaky", backoffLimit=1))
        first = self.wait_pods("flaky", 1)[0]
        self.set_phase(first, "Failed", 1)
        second = self.wait("a replacement pod", lambda: [p for p in self.live_pods("flaky")
                                                        if p["metadata"]["name"] != first["metadata"]["name"]])[0]
        j = self.job("flaky")
        self.assertEqual(j["status"].get("failed"), 1)
        self.assertIsNone(condition(j, "Failed"))
        self.set_phase(second, "Failed", 1)
        j = self.wait_condition("flaky", "Failed")
        st = j["status"]
        self.assertEqual(st.get("failed"), 2)
        self.assertEqual([c["type"] for c in st["conditions"]], ["FailureTarget", "Failed"])
        for c in st["conditions"]:
            self.assertEqual(c["reason"], "BackoffLimitExceeded")
            self.assertEqual(c["message"], "Job has reached the specified backoff limit")
        self.assertNotIn("completionTime", st)
        time.sleep(1.5)
        self.assertEqual(len(self.pods_of("flaky")), 2)

    def test_suspend_and_resume(self):
        self.k.create(JOBS, job_manifest("susp", parallelism=2, completions=2))
        before = {p["metadata"]["name"] for p in self.wait_pods("susp", 2)}
        self.k.patch(JOBS + "/susp", {"spec": {"suspend": True}})
        j = self.wait_condition("susp", "Suspended")
        c = condition(j, "Suspended")
        self.assertEqual((c["reason"], c["message"]), ("JobSuspended", "Job suspended"))
        self.wait("pods deleted", lambda: not self.pods_of("susp"))
        j = self.wait("active=0", lambda: (lambda j: j if not (j.get("status") or {}).get("active") else None)(self.job("susp")))
        self.assertFalse(j["status"].get("failed"), "pods removed by suspension are not failures")
        start1 = j["status"].get("startTime")
        time.sleep(1.1)
        self.k.patch(JOBS + "/susp", {"spec": {"suspend": False}})
        j = self.wait_condition("susp", "Suspended", "False")
        c = condition(j, "Suspended")
        self.assertEqual((c["reason"], c["message"]), ("JobResumed", "Job resumed"))
        self.assertNotEqual(j["status"].get("startTime"), start1)
        after = {p["metadata"]["name"] for p in self.wait_pods("susp", 2)}
        self.assertFalse(before & after)

    def test_suspended_from_start(self):
        self.k.create(JOBS, job_manifest("held", suspend=True))
        j = self.wait_condition("held", "Suspended")
        self.assertNotIn("startTime", j["status"])
        self.assertEqual(self.pods_of("held"), [])

    def test_active_deadline(self):
        self.k.create(JOBS, job_manifest("slow", activeDeadlineSeconds=2))
        pod = self.wait_pods("slow", 1)[0]
        j = self.wait_condition("slow", "Failed")
        st = j["status"]
        self.assertEqual([c["type"] for c in st["conditions"]], ["FailureTarget", "Failed"])
        self.assertEqual(st["conditions"][1]["reason"], "DeadlineExceeded")
        self.assertEqual(st["conditions"][1]["message"], "Job was active longer than specified deadline")
        self.assertEqual(st.get("failed"), 1)
        self.assertIsNone(self.k.get(PODS + "/" + pod["metadata"]["name"]))

    def test_replacement_policy_failed(self):
        self.k.create(JOBS, job_manifest("repl", podReplacementPolicy="Failed", backoffLimit=3))
        pod = self.wait_pods("repl", 1)[0]
        # A second finalizer keeps the deleted pod terminating, as a kubelet would.
        name = pod["metadata"]["name"]
        self.k.patch(PODS + "/" + name, {"metadata": {"finalizers": ["batch.kubernetes.io/job-tracking", "test/hold"]}})
        self.k.delete(PODS + "/" + name)
        self.wait("terminating=1", lambda: (self.job("repl").get("status") or {}).get("terminating") == 1)
        time.sleep(1.0)
        self.assertEqual(len(self.pods_of("repl")), 1, "no replacement while the pod is terminating")
        self.set_phase(pod, "Failed", 137)
        self.wait("a replacement", lambda: [p for p in self.live_pods("repl") if p["metadata"]["name"] != name])
        self.wait("failed=1", lambda: (self.job("repl").get("status") or {}).get("failed") == 1)
        self.k.patch(PODS + "/" + name, {"metadata": {"finalizers": None}})

    def test_on_failure_restarts_count(self):
        self.k.create(JOBS, job_manifest("restarts", restartPolicy="OnFailure", backoffLimit=2))
        pod = self.wait_pods("restarts", 1)[0]
        self.k.patch_status(PODS + "/" + pod["metadata"]["name"], {"status": {"phase": "Running", "containerStatuses": [
            {"name": "main", "ready": False, "restartCount": 2, "image": "busybox", "imageID": "",
             "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}})
        j = self.wait_condition("restarts", "Failed")
        self.assertEqual(condition(j, "Failed")["reason"], "BackoffLimitExceeded")

    def test_action_log(self):
        self.k.create(JOBS, job_manifest("logged"))
        pod = self.wait_pods("logged", 1)[0]
        self.wait("log line", lambda: "job default/logged: created pod %s" % pod["metadata"]["name"] in self.h.log())


class CommandLineTest(unittest.TestCase):
    def run_cli(self, *args):
        return subprocess.run([sys.executable, os.path.join(HERE, "cluster.py")] + list(args),
                              capture_output=True, text=True, timeout=scaled(60))

    def test_bad_flags_exit_2(self):
        for args in (["--kubeconfig", "x", "--roles", "kubelet,nope"], ["--roles", "jobs"],
                     ["--kubeconfig", "x", "--bogus"], ["--kubeconfig", "x", "--job-pod-backoff", "-1"],
                     ["--kubeconfig", "x", "--roles", "jobs,jobs"], ["--kubeconfig", "x", "--cluster-domain", "a..b"],
                     ["--kubeconfig", "x", "--image-file", "no-destination"]):
            out = self.run_cli(*args)
            self.assertEqual(out.returncode, 2, args)
            self.assertIn("usage:", out.stderr)

    def test_missing_kubeconfig(self):
        out = self.run_cli("--kubeconfig", "/nonexistent/kubeconfig", "--roles", "jobs")
        self.assertEqual(out.returncode, 1)
        self.assertIn("/nonexistent/kubeconfig", out.stderr)

    def test_sigterm_exits_zero_and_removes_pid_file(self):
        h = ClusterHarness("jobs,gc")
        try:
            pid_file = os.path.join(h.dir, "sim", "cluster.pid")
            wait_for("the pid file", lambda: os.path.exists(pid_file), 60, describe=h.log)
            with open(pid_file) as f:
                self.assertEqual(int(f.read()), h.sim.pid)
            self.assertEqual(h.stop(), 0)
            self.assertFalse(os.path.exists(pid_file))
        finally:
            h.stop()
            h.cleanup()

    @staticmethod
    def _burst(pid, n=300):
        """n SIGTERMs, 0 to 200 microseconds apart: some land while the handler of an earlier
        one runs."""
        for _ in range(n):
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                return
            until = time.perf_counter() + random.random() * 0.0002
            while time.perf_counter() < until:
                pass

    def test_a_burst_of_sigterms_still_stops_both(self):
        """A second signal landing while the first one's handler held the lock of the Event it
        was setting left the double deadlocked (about one run in twenty, with this burst): the
        handlers of the double and of cluster.py now only set a flag."""
        for _ in range(10):
            d = tempfile.mkdtemp(prefix="burst-test.")
            try:
                _, pids, _ = start_apiserver(os.path.join(d, "api"))
                api = pids[0]
                self._burst(api)
                try:
                    wait_for("the API server to exit", lambda: not alive(api), 60)
                finally:
                    if alive(api):
                        os.kill(api, signal.SIGKILL)
            finally:
                shutil.rmtree(d, ignore_errors=True)
        for _ in range(3):
            h = ClusterHarness("jobs,gc")
            try:
                pid_file = os.path.join(h.dir, "sim", "cluster.pid")
                wait_for("the pid file", lambda: os.path.exists(pid_file), 60, describe=h.log)
                self._burst(h.sim.pid, 100)
                self.assertEqual(h.sim.wait(scaled(60)), 0)
                self.assertNotIn("Traceback", h.log())
                h.sim = None
            finally:
                h.stop()
                h.cleanup()

    @unittest.skipUnless(os.geteuid() == 0, "needs root: network namespaces")
    def test_sigkill_leaves_nothing_behind(self):
        """cluster.py killed with SIGKILL, a pod running: its reaper removes the pod's processes,
        network namespace, links and the hostPath folder the kubelet made."""
        h = ClusterHarness("kubelet,scheduler")
        token = str(random.randrange(100000, 999999))
        made = os.path.join(tempfile.gettempdir(), "reaper-test-" + token)
        try:
            pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "doomed"},
                   "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
                            "volumes": [{"name": "v", "hostPath": {"path": made + "/inner",
                                                                   "type": "DirectoryOrCreate"}}],
                            "containers": [{"name": "main", "image": "x", "command": ["sleep", token],
                                            "volumeMounts": [{"name": "v", "mountPath": "/mnt/v"}]}]}}
            h.kube.create("/api/v1/namespaces/default/pods", pod)

            def phase():
                p = h.kube.get("/api/v1/namespaces/default/pods/doomed") or {}
                return (p.get("status") or {}).get("phase")
            wait_for("the pod to run", lambda: phase() == "Running", 120, describe=h.log)

            def sleepers():
                return pods.processes("sleep", token)
            wait_for("the pod's process", sleepers, 60, describe=h.log)
            self.assertTrue(os.path.isdir(made + "/inner"))
            with open(os.path.join(h.dir, "sim", "kubelet.json")) as f:
                prefix = json.load(f)["prefix"]
            self.assertTrue(netns.leftovers(prefix))

            h.sim.kill()
            h.sim.wait()
            h.sim = None
            wait_for("the reaper to clean up",
                     lambda: not sleepers() and not netns.leftovers(prefix) and not os.path.exists(made), 60,
                     describe=lambda: (sleepers(), netns.leftovers(prefix), os.path.exists(made)))
        finally:
            h.stop()
            h.cleanup()
            shutil.rmtree(made, ignore_errors=True)


if __name__ == "__main__":
    unittest.main()
