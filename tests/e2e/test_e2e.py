#!/usr/bin/env python3
"""End to end on one machine: MPIJobs applied with kubectl, reconciled by mpijob-operator, their
pods' containers run from the worker image by the cluster simulation (tests/cluster: runc, the
image's sshd, Open MPI and mpijob-worker across network namespaces), ending as the job's spec
says.

Needs root (network namespaces), the release binaries (make all) and what `make images` needs
(the images are built first when their sources changed). Run from the repository
root: python3 tests/e2e/test_e2e.py

With KUBEBUILDER_ASSETS naming etcd, kube-apiserver, kube-controller-manager and kube-scheduler,
the same scenarios run on that real control plane, the simulation playing only the kubelet; with
etcd and kube-apiserver alone, on a real API server with the whole simulation (harness.py).
"""
import json
import os
import resource
import stat
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import ROOT, LocalCluster, control_plane_assets, missing, real_nodes_assets  # noqa: E402

sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
from deadline import Deadline, wait_for  # noqa: E402

# Seconds (scaled by $MPIJOB_TEST_TIME_SCALE) for a job to reach a state: a training run, with a
# restart or two, on a 2-core machine that is busy with other work.
TIMEOUT = 300


def mpi_processes():
    """The processes of MPI jobs still alive on this machine (every container's are host
    processes here): what a job that does not end is waiting on."""
    r = subprocess.run(["ps", "-eo", "pid,ppid,stat,etimes,wchan:24,args"], capture_output=True,
                       text=True)
    keep = ("mpirun", "mpiexec", "hydra", "orted", "prted", "mpijob-worker", "ssh ")
    return "\n".join(line[:300] for line in r.stdout.splitlines()
                     if any(k in line for k in keep)) or "(none)"


def job(name, launcher_cmd, workers=2, run_policy=None, transport="TCP", launcher_waits=True,
        image="mpijob-worker:latest"):
    """An MPIJob on the worker image. launcher_waits: launcherCreationPolicy WaitForWorkersReady
    (else AtStartup). With AtStartup a launcher that starts before the workers have addresses
    fails on their names ("Could not resolve hostname", as on any cluster) and is retried; on a
    real cluster the retries within 30 s fail too, since CoreDNS caches the "no such name" that
    long, and a backoffLimit can run out on that."""
    return {
        "apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "metadata": {"name": name},
        "spec": {
            "launcherCreationPolicy": "WaitForWorkersReady" if launcher_waits else "AtStartup",
            "slotsPerWorker": 1,
            "runPolicy": dict({"cleanPodPolicy": "Running"}, **(run_policy or {})),
            "networking": {"transport": transport},
            "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "template": {"spec": {"containers": [
                    {"name": "launcher", "image": image, "imagePullPolicy": "IfNotPresent",
                     "command": launcher_cmd}]}}},
                "Worker": {"replicas": workers, "template": {"spec": {"containers": [
                    {"name": "worker", "image": image, "imagePullPolicy": "IfNotPresent"}]}}},
            },
        },
    }


def mpirun(*worker_args, np=2):
    return ["mpirun", "--allow-run-as-root", "-np", str(np), "--bind-to", "none", "mpijob-worker"] + list(worker_args)


class JobWaits:
    """kubectl, and waits on MPIJobs and pods, for a test class whose cluster is self.c."""

    ns_prefix = "e2e-"

    def namespace(self):
        """A namespace of the test's own, named after it (without "test_")."""
        ns = (self.ns_prefix + self._testMethodName[5:].replace("_", "-")[:40]).rstrip("-")
        self.kubectl("create", "namespace", ns)
        return ns

    def kubectl(self, *args, stdin=None, check=True):
        r = self.c.kubectl(*args, stdin=stdin)
        if check and r.returncode != 0:
            self.fail("kubectl %s: %s%s" % (" ".join(args), r.stdout, r.stderr))
        return r

    def apply(self, ns, obj):
        self.kubectl("apply", "-n", ns, "-f", "-", stdin=json.dumps(obj))

    def summary(self, ns, name):
        lines = [x for x in self.launcher_log(ns, name).splitlines() if '"event":"summary"' in x]
        self.assertTrue(lines, "no training summary in the launcher's log:\n" + self.launcher_log(ns, name)[-3000:])
        return json.loads(lines[-1])

    def columns(self, ns, name, wide=False):
        """The row of `kubectl get mpijob NAME` as a dict of the header's columns (values without
        spaces; "<none>" for an empty one)."""
        r = self.kubectl("get", "mpijob", name, "-n", ns, *(["-o", "wide"] if wide else []))
        lines = r.stdout.splitlines()
        return dict(zip(lines[0].split(), lines[1].split())) if len(lines) >= 2 else {}

    def start_line(self, ns, name):
        """mpijob-worker's start line in the launcher's log: where the ranks ran ("placement").
        A retried launcher's log holds each run's; ranks' stderr may share a line with it, so
        the JSON is read from where it begins, and a line cut short is passed over."""
        log = self.launcher_log(ns, name)
        found = None
        for line in log.splitlines():
            at = line.find('{"event":"start"')
            if at < 0:
                continue
            try:
                found = json.JSONDecoder().raw_decode(line[at:])[0]
            except ValueError:
                continue
        self.assertIsNotNone(found, "no start line in the launcher's log:\n" + log[-3000:])
        return found

    def mpijob(self, ns, name):
        r = self.kubectl("get", "mpijob", name, "-n", ns, "-o", "json", check=False)
        return json.loads(r.stdout) if r.returncode == 0 else None

    def pods(self, ns):
        return json.loads(self.kubectl("get", "pods", "-n", ns, "-o", "json").stdout)["items"]

    def wait_state(self, ns, name, states, timeout=TIMEOUT):
        """The MPIJob once status.state is one of states; fails with describe_job's text."""
        def reached():
            j = self.mpijob(ns, name)
            return j if ((j or {}).get("status") or {}).get("state") in states else None
        return wait_for("mpijob %s/%s to reach %s" % (ns, name, "/".join(states)), reached, timeout,
                        interval=0.5, describe=lambda: self.describe_job(ns, name))

    def wait_end(self, ns, name, stall=300, cap=3600):
        """The MPIJob once it Succeeded or Failed, however long a training of fixed work takes on a
        busy machine: the wait fails only when neither the status nor the launcher's log has
        changed for `stall` seconds (scaled), or after `cap` seconds in all."""
        seen = [None]
        stalled = [Deadline(stall)]

        def ended():
            j = self.mpijob(ns, name)
            state = ((j or {}).get("status") or {}).get("state")
            if state in ("Succeeded", "Failed"):
                return j
            now = (json.dumps((j or {}).get("status"), sort_keys=True), self.launcher_log(ns, name)[-500:])
            if now != seen[0]:
                seen[0], stalled[0] = now, Deadline(stall)
            elif stalled[0].passed():
                raise AssertionError("mpijob %s/%s: neither its status nor its launcher's log changed in %.0f s\n%s"
                                     % (ns, name, stalled[0].seconds, self.describe_job(ns, name)))
            return None
        return wait_for("mpijob %s/%s to reach Succeeded/Failed" % (ns, name), ended, cap, interval=1,
                        describe=lambda: self.describe_job(ns, name))

    def describe_job(self, ns, name):
        """What a failed wait on a job prints: its status, the launcher's log, the pods, the MPI
        processes still alive and the operator's log."""
        j = self.mpijob(ns, name) or {}
        return ("status: %s\nlauncher log:\n%s\npods:\n%s\nMPI processes on this machine:\n%s\n"
                "operator log tail:\n%s" % (
                    json.dumps(j.get("status"))[:2000], self.launcher_log(ns, name)[-3000:],
                    self.pod_states(ns), mpi_processes(), self.c.operator_log_tail()))

    def pod_states(self, ns):
        """A line per pod of the namespace: phase and each container's state."""
        r = self.kubectl("get", "pods", "-n", ns, "-o", "json", check=False)
        lines = []
        for p in (json.loads(r.stdout).get("items", []) if r.returncode == 0 else []):
            cs = ["%s %s" % (c.get("name"), json.dumps(c.get("state"))) for c in
                  (p.get("status") or {}).get("containerStatuses") or []]
            lines.append("%s: %s; %s" % (p["metadata"]["name"], (p.get("status") or {}).get("phase"),
                                         "; ".join(cs)))
        return "\n".join(lines) or "(none)"

    def launcher_log(self, ns, name):
        return self.c.launcher_log(ns, name)

    def worker_killed(self, ns, name, old):
        """Whether the pod old (as it was read before a kill) shows the kill: its first container
        terminated or restarted, or the pod gone or replaced by another of the same name."""
        r = self.kubectl("get", "pod", name, "-n", ns, "-o", "json", check=False)
        if r.returncode != 0 or not r.stdout.strip():
            return True
        pod = json.loads(r.stdout)
        if pod["metadata"]["uid"] != old["metadata"]["uid"] or pod["metadata"].get("deletionTimestamp"):
            return True
        if (pod.get("status") or {}).get("phase") in ("Failed", "Succeeded"):
            return True
        cs = ((pod.get("status") or {}).get("containerStatuses") or [{}])[0]
        before = ((old.get("status") or {}).get("containerStatuses") or [{}])[0]
        return "terminated" in (cs.get("state") or {}) or cs.get("restartCount", 0) > before.get("restartCount", 0)

    def events(self, ns):
        """The namespace's Events, a line each, oldest first."""
        r = self.kubectl("get", "events", "-n", ns, "--sort-by=.lastTimestamp", "-o",
                         "custom-columns=TIME:.lastTimestamp,KIND:.involvedObject.kind,NAME:.involvedObject.name,"
                         "REASON:.reason,MESSAGE:.message", check=False)
        return (r.stdout or r.stderr)[-4000:]

    @staticmethod
    def condition(j, ctype):
        for c in (j.get("status") or {}).get("conditions") or []:
            if c.get("type") == ctype:
                return c
        return None


@unittest.skipIf(missing(), missing())
class EndToEnd(JobWaits, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.c = LocalCluster()
        cls.kubeconfig = cls.c.kubeconfig
        cls.work = cls.c.work

    @classmethod
    def tearDownClass(cls):
        cls.c.stop()

    # ---------------------------------------------------------------- helpers

    def start_training(self, ns, name, steps, run_policy, launcher_waits=True, worker_limits=None):
        """Applies a long training job and waits until it really runs (the launcher has logged
        mpijob-worker's start line)."""
        j = job(name, mpirun("train", "--steps", str(steps), "--log-every", "500"),
                run_policy=run_policy, launcher_waits=launcher_waits)
        if worker_limits:
            j["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["resources"] = {
                "limits": worker_limits}
        self.apply(ns, j)
        self.wait_state(ns, name, ("Running",))
        wait_for("mpijob-worker's start line in %s's launcher log" % name,
                 lambda: '"event":"start"' in self.launcher_log(ns, name), TIMEOUT, interval=0.2,
                 describe=lambda: self.describe_job(ns, name))

    # ---------------------------------------------------------------- scenarios
    def test_tcp_example_succeeds(self):
        """manifests/examples/mpijob-tcp.yaml as a user applies it: Succeeded, with real ssh and mpirun
        between pods in their own network namespaces, and the operator's TCP settings reaching the ranks."""
        ns = self.namespace()
        self.kubectl("apply", "-n", ns, "-f", os.path.join(ROOT, "manifests", "examples", "mpijob-tcp.yaml"))
        j = self.wait_state(ns, "train-tcp", ("Succeeded", "Failed"))
        self.assertEqual(j["status"]["state"], "Succeeded", self.launcher_log(ns, "train-tcp")[-3000:])
        self.assertIsNotNone(j["status"].get("completionTime"))
        s = self.summary(ns, "train-tcp")
        self.assertEqual(s["ranks"], 2)
        self.assertTrue(s["weights_identical"])
        self.assertLess(s["loss_last"], s["loss_first"])
        # The transport really used, read by the operator from the launcher's log through the API
        # server and the node's kubelet, as `kubectl get mpijobs` shows it: the CPU backend's MPI.
        wait_for("USED mpi in kubectl get mpijob train-tcp",
                 lambda: self.columns(ns, "train-tcp").get("USED") == "mpi", TIMEOUT, interval=0.5,
                 describe=lambda: self.kubectl("get", "mpijob", "train-tcp", "-n", ns, "-o", "wide").stdout)
        row = self.columns(ns, "train-tcp", wide=True)
        self.assertEqual((row["STATE"], row["TRANSPORT"], row["USED"]), ("Succeeded", "TCP", "mpi"), row)
        self.assertGreater(float(row["SAMPLES/S"]), 0, row)
        j = self.kubectl("get", "mpijob", "train-tcp", "-n", ns, "-o", "json")
        summary = json.loads(j.stdout)["status"]["launcherSummary"]
        self.assertEqual((summary["ranks"], summary["backend"], summary["weightsIdentical"]), (2, "mpi", True))
        self.assertTrue(summary["pod"].startswith("train-tcp-launcher-"), summary)
        self.assertIsNone(self.condition(json.loads(j.stdout), "TransportMismatch"))
        # cleanPodPolicy Running: the workers are gone once the job ended
        wait_for("the workers deleted after the job ended",
                 lambda: not [p for p in self.pods(ns) if "-worker-" in p["metadata"]["name"]], 120,
                 interval=0.5, describe=lambda: self.pod_states(ns))

    def test_malformed_launcher_command_fails_with_the_reason(self):
        ns = self.namespace()
        self.apply(ns, job("bad", ["mpirun", "--no-such-mpirun-flag", "mpijob-worker", "train"],
                           run_policy={"backoffLimit": 1}))
        j = self.wait_state(ns, "bad", ("Failed", "Succeeded"))
        self.assertEqual(j["status"]["state"], "Failed")
        failed = self.condition(j, "Failed")
        self.assertIsNotNone(failed)
        self.assertEqual(failed.get("status"), "True")
        self.assertIn("backoff limit", (failed.get("message") or "").lower(), json.dumps(failed))
        # and mpirun's own complaint, which the launcher pod (since deleted) ended with
        self.assertIn("no-such-mpirun-flag", failed.get("message") or "", json.dumps(failed))

    def test_operator_killed_mid_job_still_succeeds(self):
        ns = self.namespace()
        self.apply(ns, job("survivor", mpirun("train", "--steps", "3000", "--log-every", "500")))
        self.wait_state(ns, "survivor", ("Running",))
        self.c.restart_operator(kill=True)
        j = self.wait_state(ns, "survivor", ("Succeeded", "Failed"))
        self.assertEqual(j["status"]["state"], "Succeeded", self.launcher_log(ns, "survivor")[-3000:])
        self.assertTrue(self.summary(ns, "survivor")["weights_identical"])


    def test_suspend_then_resume_succeeds(self):
        ns = self.namespace()
        self.apply(ns, job("paused", mpirun("train", "--steps", "200"), run_policy={"suspend": True}))
        j = self.wait_state(ns, "paused", ("Suspended",))
        # The operator wrote Suspended after deciding to create nothing; a pod it had made anyway
        # would be in the API already.
        self.assertEqual(self.pods(ns), [], "a suspended job runs no pod")
        self.assertEqual((self.condition(j, "Suspended") or {}).get("status"), "True", json.dumps(j.get("status")))
        self.kubectl("patch", "mpijob", "paused", "-n", ns, "--type", "merge", "-p",
                     '{"spec":{"runPolicy":{"suspend":false}}}')
        j = self.wait_state(ns, "paused", ("Succeeded", "Failed"))
        self.assertEqual(j["status"]["state"], "Succeeded", self.launcher_log(ns, "paused")[-3000:])

    def test_worker_killed_mid_training_is_replaced_and_the_retry_succeeds(self):
        ns = self.namespace()
        # 12,000 steps: about 30 s on an idle 2-core machine, so that the kill lands mid-training
        # on a busy one too (4,000 once ended before it, in a run beside a real-node tier)
        self.start_training(ns, "phoenix", 12000, {"backoffLimit": 3})
        old = json.loads(self.kubectl("get", "pod", "phoenix-worker-0", "-n", ns, "-o", "json").stdout)
        self.c.kill_pod(ns, "phoenix-worker-0")
        # The kill is asked of the node and done on its next round: wait until it shows (the
        # worker's container ended, or the pod already gone or replaced), then check that the
        # training had not ended by then.
        wait_for("phoenix-worker-0 killed", lambda: self.worker_killed(ns, "phoenix-worker-0", old), TIMEOUT,
                 interval=0.2, describe=lambda: self.describe_job(ns, "phoenix"))
        self.assertNotIn('"event":"summary"', self.launcher_log(ns, "phoenix"),
                         "the training ended before the worker was killed: nothing of this test was tested")
        j = self.wait_state(ns, "phoenix", ("Succeeded", "Failed"))
        self.assertEqual(j["status"]["state"], "Succeeded", self.describe_job(ns, "phoenix"))
        # The Restarting condition stays in the list once set (False again after the retry ran).
        self.assertIsNotNone(self.condition(j, "Restarting"), "the job went through Restarting: %s\nevents:\n%s\n%s" %
                             (json.dumps(j["status"].get("conditions")), self.events(ns),
                              self.describe_job(ns, "phoenix")))
        new = json.loads(self.kubectl("get", "pod", "phoenix-worker-0", "-n", ns, "-o", "json",
                                      check=False).stdout or "{}")
        if new:
            self.assertNotEqual(new["metadata"]["uid"], old["metadata"]["uid"], "the worker was recreated")
        self.assertGreaterEqual(int((j.get("status") or {}).get("workerRestarts") or 0), 1)


    def test_worker_oom_killed_is_named_and_the_retry_succeeds(self):
        """A worker's container OOM-killed by the kernel at its real memory limit mid-training
        (harness oom_kill_pod; a Guaranteed worker, cpu and memory limits): the MPIJob's
        Restarting condition and an event name the worker and OOMKilled, the worker is replaced,
        and the retry Succeeds."""
        if not self.c.real_nodes:
            self.skipTest("needs real nodes: a container's memory cgroup, its OOM killer and the kubelet's report "
                          "of it (the simulation's OOMKilled report is test_controller's "
                          "failed_worker_is_replaced_and_the_job_restarts)")
        ns = self.namespace()
        self.start_training(ns, "oomer", 4000, {"backoffLimit": 3}, worker_limits={"memory": "512Mi", "cpu": "1"})
        t0 = time.monotonic()
        version, allocated = self.c.oom_kill_pod(ns, "oomer-worker-1")

        seen = []       # every Restarting message, for the report of a failed wait

        def named():
            c = self.condition(self.mpijob(ns, "oomer") or {}, "Restarting") or {}
            if c.get("message") and c["message"] not in seen:
                seen.append(c["message"])
            return c if c.get("status") == "True" and "OOMKilled" in c.get("message", "") else None
        restarting = wait_for("oomer's Restarting condition naming OOMKilled", named, TIMEOUT, interval=0.2,
                              describe=lambda: "Restarting said: %s\n%s" % (seen, self.describe_job(ns, "oomer")))
        detected = time.monotonic() - t0
        self.assertIn("worker oomer-worker-1 failed (OOMKilled)", restarting["message"])

        def said():
            events = json.loads(self.kubectl("get", "events", "-n", ns, "--field-selector",
                                             "involvedObject.kind=MPIJob,involvedObject.name=oomer", "-o", "json").stdout)
            return [(e.get("type"), e.get("reason"), e.get("message", "")) for e in events["items"]]
        wait_for("a Warning event naming oomer-worker-1 and OOMKilled",
                 lambda: [e for e in said() if e[:2] == ("Warning", "MPIJobRestarting") and "oomer-worker-1" in e[2]
                          and "OOMKilled" in e[2]], TIMEOUT, interval=0.5, describe=said)
        j = self.wait_state(ns, "oomer", ("Succeeded", "Failed"))
        self.assertEqual(j["status"]["state"], "Succeeded", self.describe_job(ns, "oomer"))
        self.assertGreaterEqual(int(j["status"].get("workerRestarts") or 0), 1)
        print("worker OOM-killed (cgroup v%d) %.1f s into the allocation: the MPIJob said so %.1f s after it began "
              "(%s); Succeeded %.1f s after it began" % (version, allocated, detected, restarting["message"],
                                                        time.monotonic() - t0), file=sys.stderr, flush=True)

    def test_worker_evicted_past_the_backoff_limit_fails_as_evicted(self):
        """A worker evicted mid-training with backoffLimit 0: no replacement, the job ends Failed
        naming the worker and why (the simulation's kubelet: MPIJobEvicted with its message; a
        real kubelet: see evict_pod), and cleanPodPolicy Running removes the other worker."""
        ns = self.namespace()
        self.start_training(ns, "evictee", 100000, {"backoffLimit": 0},
                            worker_limits={"ephemeral-storage": "16Mi"})
        outcomes = self.c.evict_pod(ns, "evictee-worker-1")
        j = self.wait_state(ns, "evictee", ("Failed", "Succeeded"))
        failed = self.condition(j, "Failed") or {}
        self.assertIn("evictee-worker-1", failed.get("message", ""))
        self.assertTrue(any(failed.get("reason") == reason and said in failed.get("message", "")
                            for reason, said in outcomes),
                        "%s is none of %s" % (json.dumps(failed), outcomes))
        wait_for("no Running or Pending worker left after the job failed",
                 lambda: not [p for p in self.pods(ns) if "-worker-" in p["metadata"]["name"] and
                              (p.get("status") or {}).get("phase") in ("Running", "Pending")],
                 120, interval=0.5, describe=lambda: self.pod_states(ns))

    def test_wait_for_workers_ready_creates_the_launcher_after_every_worker_is_ready(self):
        """launcherCreationPolicy WaitForWorkersReady with a readiness probe on the workers' sshd
        that holds them un-Ready for a few seconds: no launcher Job until both are Ready, then
        Succeeded. The order is read off the double's request log; a real kube-apiserver keeps none,
        and there the repeated reads of Jobs and pods alone check it."""
        ns = self.namespace()
        j = job("patient", mpirun("train", "--steps", "200"))
        j["spec"]["launcherCreationPolicy"] = "WaitForWorkersReady"
        worker = j["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
        worker["readinessProbe"] = {"tcpSocket": {"port": 2222}, "initialDelaySeconds": 4, "periodSeconds": 1}
        since = None if self.c.real_apiserver else self.c.request_log(1 << 62)["next"]
        self.apply(ns, j)
        # While the workers run but are not Ready, there is no launcher. (Jobs are read before
        # pods: a launcher seen first must find both workers Ready in the later read.)
        seen = {"unready_running": False}

        def launcher_after_ready():
            jobs = json.loads(self.kubectl("get", "jobs", "-n", ns, "-o", "json").stdout)["items"]
            workers = [p for p in self.pods(ns) if "-worker-" in p["metadata"]["name"]]
            ready = [p for p in workers if any(c.get("type") == "Ready" and c.get("status") == "True"
                                               for c in (p.get("status") or {}).get("conditions") or [])]
            if jobs:
                self.assertEqual(len(ready), 2, "a launcher Job exists while %d of 2 workers are Ready" % len(ready))
                return True
            seen["unready_running"] = seen["unready_running"] or any(
                (p.get("status") or {}).get("phase") == "Running" and p not in ready for p in workers)
            return False
        wait_for("the launcher Job of patient", launcher_after_ready, TIMEOUT, interval=0.3,
                 describe=lambda: self.pod_states(ns))
        saw_unready_running = seen["unready_running"]
        self.assertTrue(saw_unready_running, "the probe held a Running worker un-Ready for a while")
        j = self.wait_state(ns, "patient", ("Succeeded", "Failed"))
        self.assertEqual(j["status"]["state"], "Succeeded", self.launcher_log(ns, "patient")[-3000:])
        if self.c.real_apiserver:
            return  # no request log there; the reads above checked the order

        log = self.c.request_log(since)["entries"]
        ready_at = {}
        for e in log:
            body = e.get("body") or {}
            name = (body.get("metadata") or {}).get("name") or e.get("name")
            if e.get("resource") != "pods" or e.get("subresource") != "status" or e.get("code") != 200 or \
                    not (name or "").startswith("patient-worker-") or name in ready_at:
                continue
            if any(c.get("type") == "Ready" and c.get("status") == "True"
                   for c in (body.get("status") or {}).get("conditions") or []):
                ready_at[name] = e["seq"]
        created = [e["seq"] for e in log if e.get("verb") == "create" and e.get("resource") == "jobs" and
                   e.get("code") == 201 and ((e.get("body") or {}).get("metadata") or {}).get("name") ==
                   "patient-launcher"]
        self.assertEqual(sorted(ready_at), ["patient-worker-0", "patient-worker-1"], ready_at)
        self.assertEqual(len(created), 1, "the launcher Job is created once")
        self.assertGreater(created[0], max(ready_at.values()),
                           "the launcher Job was created after both workers turned Ready")

    def test_rdma_without_a_device_fails_saying_no_device_was_usable(self):
        """transport RDMA on this machine, which has no RDMA device: the pods start (the device
        directory is not type-checked), the ranks' probe finds nothing and refuses, and the MPIJob
        ends Failed with that reason, although under the default restartPolicy OnFailure the Job
        controller has deleted the launcher pod that said it. The launcher waits for the workers
        (see job())."""
        ns = self.namespace()
        self.apply(ns, job("nordma", mpirun("train"), run_policy={"backoffLimit": 1}, transport="RDMA"))
        j = self.wait_state(ns, "nordma", ("Failed", "Succeeded"))
        self.assertEqual(j["status"]["state"], "Failed", self.launcher_log(ns, "nordma")[-3000:])
        failed = self.condition(j, "Failed")
        msg = failed.get("message") or ""
        if "RDMA requested but no usable device" not in msg:
            # what the launcher's runs said first: a summary of failures shows only the start
            kept = j["status"].get("lastLauncherFailure") or {}
            self.fail("the launcher's kept failure does not name the missing device: %s; condition: %s; "
                      "launcher log: %s" % (json.dumps(kept), json.dumps(failed),
                                            self.launcher_log(ns, "nordma")[-2000:]))
        self.assertTrue(failed.get("reason", "").startswith("BackoffLimitExceeded"), json.dumps(failed))
        self.assertNotIn("-----", msg, "mpirun's frames are left out")
        self.assertIn("no usable device", (j["status"].get("lastLauncherFailure") or {}).get("message", ""))

    def test_rdma_with_a_stand_in_device_shows_what_probe_reports(self):
        """transport RDMA with a stand-in for /dev/infiniband (a folder holding a uverbs0
        character device, which no driver answers) that the launcher's template mounts there
        itself; the operator keeps that mount and adds IPC_LOCK; `mpijob-worker probe --json` in the launcher sees the device node
        and the capability, reports the locked-memory limit the node's runtime gives containers
        (containerd passes on its own, inherited from this process; so does the simulation), and
        finds no usable port."""
        ns = self.namespace()
        dev = tempfile.mkdtemp(prefix="standin-ib-", dir=self.c.work)
        os.mknod(os.path.join(dev, "uverbs0"), 0o666 | stat.S_IFCHR, os.makedev(231, 192))
        j = job("standin", ["mpijob-worker", "probe", "--json"], run_policy={"backoffLimit": 0}, transport="RDMA")
        # the launcher's own mount at /dev/infiniband wins over the operator's (devicePath)
        launcher = j["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]
        launcher["volumes"] = [{"name": "standin", "hostPath": {"path": dev}}]
        launcher["containers"][0]["volumeMounts"] = [{"name": "standin", "mountPath": "/dev/infiniband"}]
        self.apply(ns, j)
        self.wait_state(ns, "standin", ("Failed", "Succeeded"))
        lines = [x for x in self.launcher_log(ns, "standin").splitlines() if x.startswith('{"devices"')]
        self.assertTrue(lines, "no probe report in the launcher's log:\n" + self.launcher_log(ns, "standin")[-3000:])
        report = json.loads(lines[-1])
        print("\n  probe on %s: memlock %s; /dev/infiniband %s" % (
            self.c.tier, json.dumps(report["memlock"]), json.dumps(report["dev_infiniband"])), file=sys.stderr)
        self.assertEqual(report["dev_infiniband"]["uverbs"], 1, json.dumps(report["dev_infiniband"]))
        self.assertEqual(report["active_ports"], 0)
        self.assertTrue(report["memlock"]["ipc_lock"], "the operator adds IPC_LOCK: %s" % json.dumps(report["memlock"]))
        soft = resource.getrlimit(resource.RLIMIT_MEMLOCK)[0]
        self.assertEqual(report["memlock"]["soft"], "unlimited" if soft == resource.RLIM_INFINITY else soft,
                         json.dumps(report["memlock"]))

    def test_legacy_v1alpha2_manifest_succeeds(self):
        """manifests/examples/mpijob-v1alpha2-legacy.yaml as people have it (v1alpha2, -x NCCL_IB_DISABLE=0
        in the launcher's mpirun, workers privileged with /dev/infiniband from the host and a GPU
        limit), with the bundled runtime and its image in place of horovod's train.py and image
        (no registry is reachable from the local cluster)."""
        self.legacy_v1alpha2_manifest_succeeds("mpijob-worker:latest")

    def test_legacy_v1alpha2_manifest_succeeds_on_open_mpi_5(self):
        """The same legacy manifest on the Open MPI 5 image: its -x, the hostfile and slots reach
        PRRTE; the ranks run on the workers."""
        self.legacy_v1alpha2_manifest_succeeds("mpijob-worker:ompi5", name="legacy-ompi5")

    def legacy_v1alpha2_manifest_succeeds(self, image, name=None):
        import yaml
        with open(os.path.join(ROOT, "manifests", "examples", "mpijob-v1alpha2-legacy.yaml")) as f:
            legacy = yaml.safe_load(f)
        self.assertEqual(legacy["apiVersion"], "kubeflow.org/v1alpha2")
        launcher = legacy["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
        cmd = launcher["command"]
        i = cmd.index("python")
        launcher["command"] = cmd[:i] + ["mpijob-worker", "train"]
        for role in ("Launcher", "Worker"):
            for c in legacy["spec"]["mpiReplicaSpecs"][role]["template"]["spec"]["containers"]:
                c["image"] = image
                c["imagePullPolicy"] = "IfNotPresent"   # loaded onto the nodes, in no registry
        if name:
            legacy["metadata"]["name"] = name
        ns = self.namespace()
        self.apply(ns, legacy)
        name = legacy["metadata"]["name"]
        j = self.wait_state(ns, name, ("Succeeded", "Failed"))
        self.assertEqual(j["status"]["state"], "Succeeded", self.launcher_log(ns, name)[-3000:])
        self.assertTrue(self.summary(ns, name)["weights_identical"])
        hosts = self.start_line(ns, name)["placement"]["hosts"]
        self.assertTrue(all("-worker-" in h for h in hosts), "ranks on the workers only: %s" % json.dumps(hosts))

    def test_open_mpi_5_and_4_run_two_ranks_on_each_worker_and_none_on_the_launcher(self):
        """One manifest, nothing Open MPI 5 specific in it: 2 workers x 2 slots, `mpirun -np 4`.
        On the Open MPI 5 image (PRRTE, which ignores the orte_* settings) and on the Open MPI 4
        one, the ranks report two of them on each worker and none on the launcher, and the TCP
        transport's NCCL variables reached all four: through the environment list with a plain
        mpirun, through the -x the operator inserts where mpirun already uses -x."""
        ns = self.namespace()
        runs = [("o5", "mpijob-worker:ompi5", []), ("o5x", "mpijob-worker:ompi5", ["-x", "MPIJOB_E2E=1"]),
                ("o4", "mpijob-worker:latest", [])]
        for name, image, extra in runs:
            j = job(name, ["mpirun", "--allow-run-as-root", "-np", "4", "--bind-to", "none"] + extra +
                    ["mpijob-worker", "train", "--steps", "40"], image=image)
            j["spec"]["slotsPerWorker"] = 2
            self.apply(ns, j)
        for name, image, extra in runs:
            j = self.wait_state(ns, name, ("Succeeded", "Failed"))
            self.assertEqual(j["status"]["state"], "Succeeded", self.describe_job(ns, name))
            placement = self.start_line(ns, name)["placement"]
            print("\n  %s (%s%s): ranks by host %s; NCCL_NET %s" % (
                name, image, " -x" if extra else "", json.dumps(placement["hosts"]),
                json.dumps(placement["env"].get("NCCL_NET"))), file=sys.stderr)
            self.assertEqual(sorted(placement["hosts"]), ["%s-worker-0" % name, "%s-worker-1" % name],
                             "%s: the ranks ran on the workers only: %s" % (name, json.dumps(placement)))
            self.assertEqual(sorted(len(r) for r in placement["hosts"].values()), [2, 2], json.dumps(placement))
            self.assertEqual(placement["env"].get("NCCL_NET"), {"Socket": 4}, json.dumps(placement))
            self.assertEqual(placement["env"].get("NCCL_IB_DISABLE"), {"1": 4}, json.dumps(placement))
            self.assertTrue(self.summary(ns, name)["weights_identical"])

    def test_mpich_job_succeeds(self):
        """mpiImplementation MPICH on the MPICH flavour of the worker image: Hydra's mpirun reaches
        the workers' sshd through the hostfile and the ssh settings the operator gives it."""
        ns = self.namespace()
        j = job("mpich", ["mpirun", "-np", "2", "mpijob-worker", "train"])
        j["spec"]["mpiImplementation"] = "MPICH"
        for role in ("Launcher", "Worker"):
            j["spec"]["mpiReplicaSpecs"][role]["template"]["spec"]["containers"][0]["image"] = "mpijob-worker:mpich"
        self.apply(ns, j)
        j = self.wait_state(ns, "mpich", ("Succeeded", "Failed"))
        self.assertEqual(j["status"]["state"], "Succeeded", self.launcher_log(ns, "mpich")[-3000:])
        s = self.summary(ns, "mpich")
        self.assertEqual(s["ranks"], 2)
        self.assertTrue(s["weights_identical"])

    def test_missing_image_shows_the_pull_failure(self):
        """Workers whose image no registry has: the MPIJob says so (Running False, reason
        ImagePullBackOff, the pod, the container and the image named) instead of sitting in
        Created with no word."""
        ns = self.namespace()
        j = job("noimage", mpirun("train"))
        j["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["image"] = "mpijob-worker:no-such-tag"
        self.apply(ns, j)
        def pull_failure_shown():
            cond = self.condition(self.mpijob(ns, "noimage") or {}, "Running")
            return cond if cond and cond.get("reason") == "ImagePullBackOff" else None
        cond = wait_for("the pull failure on noimage's Running condition", pull_failure_shown, 120,
                        interval=0.5, describe=lambda: self.describe_job(ns, "noimage"))
        self.assertIsNotNone(cond, "no Running condition")
        self.assertEqual((cond["status"], cond["reason"]), ("False", "ImagePullBackOff"), json.dumps(cond))
        self.assertIn("mpijob-worker:no-such-tag", cond["message"])
        self.assertRegex(cond["message"], r"pod noimage-worker-\d container worker:")
        r = self.kubectl("describe", "mpijob", "noimage", "-n", ns)
        self.assertIn("ImagePullBackOff", r.stdout)
        self.kubectl("delete", "mpijob", "noimage", "-n", ns)


def node_lost_missing():
    """Why a node cannot be lost here: no node lifecycle controller watches the simulation's
    nodes."""
    if not real_nodes_assets():
        return ("needs real nodes (KUBEBUILDER_ASSETS with the control plane and kubelet, kube-proxy "
                "and coredns): no node lifecycle controller watches the simulation's nodes, which share "
                "one kubelet")
    return missing()


@unittest.skipIf(node_lost_missing(), node_lost_missing())
class NodeLost(JobWaits, unittest.TestCase):
    """A node that dies under a running job, on a cluster of its own (it ends with one node)."""

    @classmethod
    def setUpClass(cls):
        cls.c = LocalCluster(prefix="mpijob-e2e-nodelost-")

    @classmethod
    def tearDownClass(cls):
        cls.c.stop()

    def test_node_lost_mid_training_the_job_succeeds_on_the_remaining_node(self):
        """Real nodes: the node of one worker dies mid-training (kubelet, containers, containerd
        and network gone). The node lifecycle controller marks it NotReady and evicts its pods
        (after the 10 s tolerations launch.py sets); the machine being gone for good, its Node is
        deleted as a cloud's node controller deletes a vanished instance's, and the pod garbage
        collector removes the pods left on it. The operator replaces the worker, the launcher is
        retried within the backoff limit, and the job Succeeds on the remaining node."""
        ns = "e2e-node-lost"
        self.kubectl("create", "namespace", ns)
        first, lost = self.c.nodes[0]["name"], self.c.nodes[1]["name"]
        j = job("castaway", mpirun("train", "--steps", "30000", "--log-every", "2000"),
                run_policy={"backoffLimit": 6})
        specs = j["spec"]["mpiReplicaSpecs"]
        specs["Launcher"]["template"]["spec"]["nodeSelector"] = {"kubernetes.io/hostname": first}
        specs["Worker"]["template"]["spec"]["topologySpreadConstraints"] = [{
            "maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule",
            "nodeTaintsPolicy": "Honor",
            "labelSelector": {"matchLabels": {"training.kubeflow.org/job-name": "castaway",
                                              "training.kubeflow.org/job-role": "worker"}}}]
        self.apply(ns, j)
        self.wait_state(ns, "castaway", ("Running",))
        wait_for("castaway's training started", lambda: '"event":"start"' in self.launcher_log(ns, "castaway"),
                 TIMEOUT, interval=0.2, describe=lambda: self.describe_job(ns, "castaway"))
        on_lost = [p["metadata"]["name"] for p in self.pods(ns) if p["spec"].get("nodeName") == lost]
        self.assertEqual(len(on_lost), 1, "one worker on %s: %s" % (lost, self.pod_states(ns)))
        self.c.lose_node(lost)

        def node_ready():
            r = self.kubectl("get", "node", lost, "-o",
                             "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}", check=False)
            return r.stdout.strip() or "absent"
        wait_for("node %s no longer Ready" % lost, lambda: node_ready() != "True", 180, interval=1,
                 describe=node_ready)
        self.kubectl("delete", "node", lost)
        j = self.wait_end(ns, "castaway")
        self.assertEqual(j["status"]["state"], "Succeeded", self.describe_job(ns, "castaway"))
        self.assertTrue(self.summary(ns, "castaway")["weights_identical"])
        self.assertGreaterEqual(len(self.c.pod_names_created_twice(ns, lambda n: n in on_lost)), 1,
                                "the lost worker was created again")


@unittest.skipIf(missing(), missing())
class HostNetwork(JobWaits, unittest.TestCase):
    """spec.networking.hostNetwork on a cluster of three nodes of its own (the simulation's nodes
    are network namespaces of this machine, real nodes are too): the pods run in their node's
    network namespace, sshd on the job's port, and no two pods of a job share a node."""

    @classmethod
    def setUpClass(cls):
        cls.c = LocalCluster(prefix="mpijob-e2e-hostnet-", nodes=3)

    @classmethod
    def tearDownClass(cls):
        cls.c.stop()

    ns_prefix = "hn-"

    @staticmethod
    def host_network_job(name, steps=60, run_policy=None):
        j = job(name, mpirun("train", "--steps", str(steps), "--log-every", "500"), run_policy=run_policy)
        j["spec"]["networking"]["hostNetwork"] = True
        return j

    def job_pods(self, ns, name):
        return [p for p in self.pods(ns) if p["metadata"]["name"].startswith(name + "-")]

    def check_placement(self, ns, name):
        """The pods of a finished host-network job: on the host network, each on its own node,
        its address the node's; the ranks ran on the workers' nodes, which they name as hosts.
        Returns the job's port and {pod: node}."""
        j = self.mpijob(ns, name)
        self.assertEqual(j["status"]["state"], "Succeeded", self.describe_job(ns, name))
        port = None
        nodes = {}
        for p in self.job_pods(ns, name):
            if p["status"].get("phase") == "Failed":
                continue   # a worker replaced, or a launcher pod retried, is not placed any more
            self.assertTrue(p["spec"].get("hostNetwork"), p["metadata"]["name"])
            self.assertEqual(p["spec"].get("dnsPolicy"), "ClusterFirstWithHostNet")
            self.assertEqual(p["status"].get("podIP"), p["status"].get("hostIP"), p["metadata"]["name"])
            port = port or int(p["metadata"]["annotations"]["training.kubeflow.org/ssh-port"])
            nodes[p["metadata"]["name"]] = p["spec"]["nodeName"]
        self.assertEqual(len(set(nodes.values())), len(nodes), "one pod of %s per node: %s" % (name, nodes))
        hosts = self.start_line(ns, name)["placement"]["hosts"]
        workers = {n for pod, n in nodes.items() if "-worker-" in pod}
        print("\n  %s: port %d, pods on %s; the ranks named their hosts %s" % (
            name, port, json.dumps(nodes, sort_keys=True), json.dumps(hosts)), file=sys.stderr)
        if len(workers) == 2:   # cleanPodPolicy Running may have removed the workers by now
            self.assertEqual(set(hosts), workers, "the ranks ran on the workers' nodes")
        return port, nodes

    def test_a_job_runs_its_workers_on_two_nodes_and_succeeds(self):
        ns = self.namespace()
        j = self.host_network_job("hostnet")
        j["spec"]["runPolicy"]["cleanPodPolicy"] = "None"
        self.apply(ns, j)
        self.wait_state(ns, "hostnet", ("Succeeded", "Failed"))
        port, nodes = self.check_placement(ns, "hostnet")
        self.assertEqual(len(nodes), 3, "two workers and the launcher: %s" % nodes)
        s = self.summary(ns, "hostnet")
        self.assertEqual(s["ranks"], 2)
        self.assertTrue(s["weights_identical"])

    def test_b_two_jobs_share_nodes_and_both_succeed(self):
        """Two host-network jobs at once on three nodes: each needs all three (one pod per node),
        so their workers share nodes; their ports differ, and both Succeed."""
        ns = self.namespace()
        for name in ("left", "right"):
            j = self.host_network_job(name, steps=400)
            j["spec"]["runPolicy"]["cleanPodPolicy"] = "None"
            self.apply(ns, j)
            # the first job's ConfigMap reaches the operator's cache before the second is planned
            wait_for("%s's port" % name, lambda n=name: (json.loads(self.kubectl(
                "get", "configmap", n + "-config", "-n", ns, "-o", "json", check=False).stdout or "{}")
                .get("metadata", {}).get("annotations") or {}).get("training.kubeflow.org/ssh-port"),
                TIMEOUT, interval=0.3, describe=lambda: self.pod_states(ns))
        for name in ("left", "right"):
            self.wait_state(ns, name, ("Succeeded", "Failed"))
        left_port, left = self.check_placement(ns, "left")
        right_port, right = self.check_placement(ns, "right")
        self.assertNotEqual(left_port, right_port)
        shared = {n for p, n in left.items() if "-worker-" in p} & {n for p, n in right.items() if "-worker-" in p}
        self.assertTrue(shared, "workers of the two jobs shared a node: %s %s" % (left, right))

    def test_c_a_worker_killed_mid_run_is_replaced_and_the_retry_succeeds(self):
        ns = self.namespace()
        j = self.host_network_job("hardy", steps=4000, run_policy={"backoffLimit": 3})
        j["spec"]["runPolicy"]["cleanPodPolicy"] = "None"
        self.apply(ns, j)
        self.wait_state(ns, "hardy", ("Running",))
        wait_for("hardy's training started", lambda: '"event":"start"' in self.launcher_log(ns, "hardy"),
                 TIMEOUT, interval=0.2, describe=lambda: self.describe_job(ns, "hardy"))
        old = json.loads(self.kubectl("get", "pod", "hardy-worker-0", "-n", ns, "-o", "json").stdout)
        self.c.kill_pod(ns, "hardy-worker-0")
        j = self.wait_state(ns, "hardy", ("Succeeded", "Failed"))
        self.assertEqual(j["status"]["state"], "Succeeded", self.describe_job(ns, "hardy"))
        self.assertGreaterEqual(int(j["status"].get("workerRestarts") or 0), 1)
        new = json.loads(self.kubectl("get", "pod", "hardy-worker-0", "-n", ns, "-o", "json").stdout)
        self.assertNotEqual(new["metadata"]["uid"], old["metadata"]["uid"], "the worker was recreated")
        self.check_placement(ns, "hardy")


def chart_missing():
    """Why the chart cannot be installed here: on a real API server without the controller-manager
    no ServiceAccount token is issued to its pods."""
    if os.environ.get("KUBEBUILDER_ASSETS") and not control_plane_assets():
        return ("KUBEBUILDER_ASSETS has no kube-controller-manager and kube-scheduler: the operator's pods "
                "would get no ServiceAccount token")
    return missing()


@unittest.skipIf(chart_missing(), chart_missing())
class InstalledByItsChart(JobWaits, unittest.TestCase):
    """The operator as users run it: `helm install` of charts/mpijob-operator, two replicas from
    the operator image, in-cluster configuration through their ServiceAccount token, one leading."""

    @classmethod
    def setUpClass(cls):
        cls.c = LocalCluster(prefix="mpijob-e2e-chart-", operator="chart")

    @classmethod
    def tearDownClass(cls):
        cls.c.stop()

    def test_a_pods_from_the_image_with_their_token_and_a_leader(self):
        pods = self.c.wait_operator_pods()
        with open(os.path.join(ROOT, "build", "images", "index.json")) as f:
            index = json.load(f)
        with open(os.path.join(ROOT, "charts", "mpijob-operator", "Chart.yaml")) as f:
            version = [x.split('"')[1] for x in f if x.startswith("appVersion:")][0]
        ref = "ghcr.io/mpijob-operator/mpijob-operator:" + version
        for p in pods:
            cs = p["status"]["containerStatuses"][0]
            self.assertEqual(cs["image"], ref)
            self.assertEqual(cs["imageID"], "ghcr.io/mpijob-operator/mpijob-operator@" + index[ref]["digest"])
            self.assertTrue(any(v["name"].startswith("kube-api-access-") and "projected" in v
                                for v in p["spec"]["volumes"]), "the ServiceAccount token is projected")
            self.assertEqual(p["spec"]["serviceAccountName"], "mpijob-operator")
        holder = self.c.lease_holder()
        self.assertEqual(sum(holder.startswith(p["metadata"]["name"]) for p in pods), 1, holder)
        self.assertIn("started leading", self.c.operator_logs())

    # The series the README promises from a replica's first scrape.
    PROMISED = ("mpijob_operator_build_info", "mpijob_leader", "mpijob_reconcile_total",
                "mpijob_reconcile_duration_seconds_bucket", "mpijob_api_requests_total", "mpijob_workqueue_depth",
                "mpijob_workqueue_retries_total", "mpijob_watch_restarts_total")

    def test_a2_a_real_prometheus_scrapes_both_replicas(self):
        """Debian's Prometheus (scripts/install-prometheus.sh) scrapes the replicas at the
        addresses of the metrics Service's EndpointSlices, as a ServiceMonitor has it do; its HTTP
        API then shows both replicas up, one leading, and every series the README promises."""
        if not self.c.real_nodes:
            self.skipTest("needs real nodes: the pods' addresses must be reachable from this machine, where "
                          "Prometheus runs; the tier here is %s" % self.c.tier)
        prometheus = os.path.join(ROOT, "build", "tools", "bin", "prometheus")
        if not os.access(prometheus, os.X_OK):
            subprocess.run([os.path.join(ROOT, "scripts", "install-prometheus.sh")])
        self.assertTrue(os.access(prometheus, os.X_OK), "no Prometheus at %s" % prometheus)
        pods = self.c.wait_operator_pods()
        slices = json.loads(self.kubectl("get", "endpointslices", "-n", "mpijob-system", "-l",
                                         "kubernetes.io/service-name=mpijob-operator-metrics", "-o", "json").stdout)
        targets = sorted("%s:%d" % (a, p["port"]) for sl in slices["items"] for e in sl.get("endpoints") or []
                         for a in e["addresses"] for p in sl.get("ports") or [] if p.get("name") == "metrics")
        self.assertEqual(len(targets), 2, "both replicas behind the metrics Service: %s" % slices)
        import socket
        import urllib.parse
        import urllib.request
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        work = tempfile.mkdtemp(prefix="mpijob-prometheus-")
        with open(os.path.join(work, "prometheus.yml"), "w") as f:
            f.write("global:\n  scrape_interval: 1s\nscrape_configs:\n- job_name: mpijob-operator\n"
                    "  static_configs:\n  - targets: %s\n" % json.dumps(targets))
        with open(os.path.join(work, "prometheus.log"), "w") as log:
            proc = subprocess.Popen([prometheus, "--config.file=" + os.path.join(work, "prometheus.yml"),
                                     "--storage.tsdb.path=" + os.path.join(work, "data"),
                                     "--web.listen-address=127.0.0.1:%d" % port], stdout=log, stderr=log)
        try:
            def query(q):
                url = "http://127.0.0.1:%d/api/v1/query?query=%s" % (port, urllib.parse.quote(q))
                try:
                    with urllib.request.urlopen(url, timeout=5) as r:
                        return json.loads(r.read())["data"]["result"]
                except OSError:
                    return None

            def log_tail():
                with open(os.path.join(work, "prometheus.log")) as f:
                    return f.read()[-2000:]
            wait_for("Prometheus to scrape both replicas", lambda: len(query("up == 1") or []) == 2, 120,
                     interval=1, describe=lambda: "%s\n%s" % (query("up"), log_tail()))
            leaders = query("sum(mpijob_leader)")
            self.assertEqual(float(leaders[0]["value"][1]), 1.0, leaders)
            self.assertEqual(len(query("mpijob_operator_build_info")), 2)
            names = {r["metric"]["__name__"] for r in query('count by (__name__) ({__name__=~"mpijob_.*"})')}
            self.assertEqual(sorted(set(self.PROMISED) - names), [], "promised by the README, scraped: %s" % names)
            print("Prometheus %s scraped both replicas (%s): sum(mpijob_leader) 1, %d mpijob_ series"
                  % (subprocess.run([prometheus, "--version"], capture_output=True, text=True).stdout.split()[2],
                     ", ".join(p["metadata"]["name"] for p in pods), len(names)), file=sys.stderr, flush=True)
        finally:
            proc.terminate()
            proc.wait(30)

    def test_b_example_succeeds_and_survives_its_operator_pod_deleted(self):
        """The example runs to Succeeded while the leading operator pod is deleted mid-job: the
        Deployment replaces it, the standby takes the Lease, nothing is created twice."""
        ns = "e2e-chart-example"
        self.kubectl("create", "namespace", ns)
        self.kubectl("apply", "-n", ns, "-f", os.path.join(ROOT, "manifests", "examples", "mpijob-tcp.yaml"))
        self.wait_state(ns, "train-tcp", ("Running", "Succeeded"))
        holder = self.c.lease_holder()
        leader = [p["metadata"]["name"] for p in self.c.operator_pods() if holder.startswith(p["metadata"]["name"])]
        self.assertEqual(len(leader), 1, holder)
        self.kubectl("delete", "pod", leader[0], "-n", "mpijob-system", "--grace-period=0", "--force")
        j = self.wait_state(ns, "train-tcp", ("Succeeded", "Failed"))
        self.assertEqual(j["status"]["state"], "Succeeded")
        pods = self.c.wait_operator_pods()
        self.assertNotIn(leader[0], [p["metadata"]["name"] for p in pods], "the Deployment made a new pod")
        self.assertEqual(self.c.pod_names_created_twice(ns, lambda n: "-worker-" in n), {})

    def test_c_helm_uninstall_leaves_nothing_behind(self):
        self.c.helm_uninstall()

        def left():
            r = self.kubectl("get", "deployments,replicasets,pods,serviceaccounts,roles,rolebindings,services",
                             "-n", "mpijob-system", "-l", "app.kubernetes.io/instance=mpijob-operator",
                             "-o", "name", check=False)
            crb = self.kubectl("get", "clusterroles,clusterrolebindings", "-l",
                               "app.kubernetes.io/instance=mpijob-operator", "-o", "name", check=False)
            return (r.stdout + crb.stdout).split()
        wait_for("nothing of the release left after helm uninstall", lambda: not left(), 120, interval=0.5,
                 describe=lambda: "left: %s" % left())


if __name__ == "__main__":
    unittest.main(verbosity=2)
