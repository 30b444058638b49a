"""The kubelet role alone against a real control plane: etcd, kube-apiserver,
kube-controller-manager and kube-scheduler from KUBEBUILDER_ASSETS (launch.py --control-plane).
Skipped unless all four binaries are there, and unless root (the kubelet makes network namespaces).

    KUBEBUILDER_ASSETS=/path/to/bin python3 -m unittest discover -s tests/cluster -p 'test_controlplane.py' -v
"""

import json
import os
import signal
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from clustertest import (LOG_TAIL, STOP, ControlPlaneCase, alive, read_text, scaled,  # noqa: E402
                         stop_apiserver, wait_for)

ASSETS = os.environ.get("KUBEBUILDER_ASSETS") or ""
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
HAVE_ALL = bool(ASSETS) and all(os.access(os.path.join(ASSETS, b), os.X_OK) for b in BINARIES)
WAIT = 120.0


@unittest.skipUnless(HAVE_ALL, "needs KUBEBUILDER_ASSETS with %s" % ", ".join(BINARIES))
@unittest.skipUnless(os.geteuid() == 0, "needs root: the kubelet makes network namespaces")
class ControlPlaneTest(ControlPlaneCase):
    cluster_args = ("--roles", "kubelet", "--node-resource", "cpu=16", "--node-resource", "example.com/dongle=2")

    def log(self, tail=None):
        return read_text(self.log_path, tail)

    def wait(self, what, fn, timeout=WAIT):
        return wait_for(what, fn, timeout, interval=0.05,
                        describe=lambda: "--- cluster log (end) ---\n" + self.log(LOG_TAIL))

    def test_a_info_and_node(self):
        with open(os.path.join(self.api, "info.json")) as f:
            info = json.load(f)
        self.assertEqual((info.get("kind"), info.get("controlPlane")), ("real", True), info)
        self.assertEqual(len(self.pids), 5, "launcher, etcd, kube-apiserver, kube-controller-manager, kube-scheduler")

        def ready_untainted():
            n = self.k.get("/api/v1/nodes/sim-node")
            if not n:
                return None
            ready = any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"].get("conditions") or [])
            return n if ready and not (n.get("spec") or {}).get("taints") else None
        node = self.wait("sim-node Ready without taints", ready_untainted)
        st = node["status"]
        self.assertEqual(st["allocatable"]["cpu"], "16")
        self.assertEqual(st["allocatable"]["example.com/dongle"], "2")
        self.assertIn("pods", st["capacity"])
        self.assertEqual({a["type"] for a in st["addresses"]}, {"InternalIP", "Hostname"})
        self.assertEqual(st["nodeInfo"]["operatingSystem"], "linux")
        # The API server makes kube-node-lease shortly after it starts; a kubelet that came first
        # goes on without its Lease and creates it at a later renewal, as a real one does.
        lease = self.wait("the node's Lease", lambda: self.k.get(
            "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/sim-node"))
        self.assertEqual(lease["spec"]["holderIdentity"], "sim-node")
        self.assertEqual(lease["metadata"]["ownerReferences"][0]["uid"], node["metadata"]["uid"])

    def test_b_job_with_service_account_token(self):
        ns = "cp-job"
        self.k.ensure_namespace(ns)
        sa_dir = "/var/run/secrets/kubernetes.io/serviceaccount"
        job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "hello", "namespace": ns},
               "spec": {"backoffLimit": 0, "template": {"spec": {
                   "restartPolicy": "Never",
                   "containers": [{"name": "main", "image": "ignored", "resources": {"limits": {"example.com/dongle": "1"}},
                                   "command": ["sh", "-c", "cat %s/namespace; echo; test -s %s/token && "
                                               "grep -q 'BEGIN CERTIFICATE' %s/ca.crt && echo token-ok" % ((sa_dir,) * 3)]}]}}}}
        # The ServiceAccount admission plugin refuses pods until the controller-manager made the
        # namespace's `default` ServiceAccount; the real Job controller retries.
        self.k.create("/apis/batch/v1/namespaces/%s/jobs" % ns, job)

        def complete():
            j = self.k.get("/apis/batch/v1/namespaces/%s/jobs/hello" % ns)
            conds = {c["type"]: c["status"] for c in (j.get("status") or {}).get("conditions") or []}
            return j if conds.get("Complete") == "True" or conds.get("Failed") == "True" else None
        j = self.wait("the Job to finish", complete)
        pods = self.k.list("/api/v1/namespaces/%s/pods" % ns, "job-name=hello")[0]
        self.assertEqual(len(pods), 1)
        pod = pods[0]
        logs = os.path.join(self.dir, "sim", "logs", "%s_%s_main.log" % (ns, pod["metadata"]["name"]))
        with open(logs) as f:
            out = f.read()
        self.assertEqual({c["type"]: c["status"] for c in j["status"]["conditions"]}.get("Complete"), "True",
                         out + self.log())
        self.assertEqual(out.split(), [ns, "token-ok"])
        self.assertEqual(pod["spec"]["nodeName"], "sim-node", "bound by the real scheduler")
        self.assertEqual(pod["status"]["phase"], "Succeeded")
        # kubectl logs: the real API server fetches the log from the node's kubelet endpoint, at
        # its InternalIP in the node's network namespace
        r = subprocess.run(["kubectl", "--kubeconfig", os.path.join(self.api, "kubeconfig"), "logs", "-n", ns,
                            pod["metadata"]["name"], "--tail=1"], capture_output=True, text=True, timeout=60)
        self.assertEqual((r.returncode, r.stdout), (0, "token-ok\n"), r.stderr)

    def test_c_deleting_a_running_pod(self):
        ns = "cp-delete"
        self.k.ensure_namespace(ns)
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "sleeper"},
               "spec": {"terminationGracePeriodSeconds": 2,
                        "containers": [{"name": "main", "image": "ignored", "command": ["sleep", "300"]}]}}
        path = "/api/v1/namespaces/%s/pods" % ns

        def create():
            try:
                return self.k.create(path, pod)
            except Exception:   # until the namespace's default ServiceAccount exists
                return None
        self.wait("the pod created", create)
        self.wait("the pod running", lambda: ((self.k.get(path + "/sleeper") or {}).get("status") or {}).get("phase")
                  == "Running")
        self.k.delete(path + "/sleeper")
        marked = self.k.get(path + "/sleeper")
        self.assertTrue(marked is None or marked["metadata"].get("deletionTimestamp"))
        self.wait("the kubelet to finish the deletion", lambda: self.k.get(path + "/sleeper") is None)

    def test_d_sigterm_stops_everything(self):
        self.sim.send_signal(signal.SIGTERM)
        self.assertEqual(self.sim.wait(scaled(STOP)), 0)
        self.__class__.sim = None
        stop_apiserver(self.pids)
        self.wait("every control-plane process to exit", lambda: not any(alive(p) for p in self.pids),
                  timeout=STOP)


if __name__ == "__main__":
    unittest.main()
