"""A whole local cluster for end-to-end runs: the API-server double (holding the operator's token
to deploy/mpijob-operator.yaml's RBAC), the cluster simulation (tests/cluster) with the worker
image's files in place, and mpijob-operator. Used by test_e2e.py and soak.py.

    c = LocalCluster()          # starts everything; needs root and make all
    c.kubectl("apply", "-f", path)
    c.restart_operator(kill=True)
    c.drop_watches()
    c.stop()                    # removes everything (E2E_KEEP=1 keeps the state folder)
"""
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import urllib.request

import yaml

ROOT = os.environ.get("MPIJOB_SRC_DIR") or os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
OPERATOR = os.path.join(ROOT, "build", "bin", "mpijob-operator")
WORKER = os.path.join(ROOT, "build", "bin", "mpijob-worker")


def missing():
    """Why a local cluster cannot run here, or None."""
    if os.geteuid() != 0:
        return "needs root: the cluster simulation makes network namespaces"
    if not shutil.which("kubectl"):
        return "needs kubectl"
    for b in (OPERATOR, WORKER):
        if not os.access(b, os.X_OK):
            return "%s is not built (make all)" % b
    return None


class LocalCluster:
    def __init__(self, prefix="mpijob-e2e-", job_pod_backoff="0.5"):
        self.work = tempfile.mkdtemp(prefix=prefix)
        self.operator = None
        self.cluster = None
        self.api_pids = []
        try:
            api = os.path.join(self.work, "api")
            subprocess.run([sys.executable, os.path.join(ROOT, "tests", "apiserver", "launch.py"), "--state-dir", api,
                            "--background", "--rbac", os.path.join(ROOT, "deploy", "mpijob-operator.yaml")],
                           check=True, stdout=subprocess.DEVNULL)
            with open(os.path.join(api, "pid")) as f:
                self.api_pids = [int(x) for x in f.read().split()]
            with open(os.path.join(api, "info.json")) as f:
                # a real kube-apiserver (KUBEBUILDER_ASSETS) has no request log or fault injection
                self.real_apiserver = json.load(f).get("kind") == "real"
            self.kubeconfig = os.path.join(api, "kubeconfig")
            self.operator_kubeconfig = os.path.join(api, "operator.kubeconfig")
            self.cluster_state = os.path.join(self.work, "cluster")
            self.cluster = subprocess.Popen(
                [sys.executable, os.path.join(ROOT, "tests", "cluster", "cluster.py"), "--kubeconfig", self.kubeconfig,
                 "--state-dir", self.cluster_state, "--image-bin", WORKER,
                 "--image-file", os.path.join(ROOT, "worker-image", "sshd_config") + "=/etc/ssh/sshd_config",
                 "--image-file", os.path.join(ROOT, "worker-image", "ssh_config") + "=/etc/ssh/ssh_config.d/mpijob.conf",
                 "--job-pod-backoff", job_pod_backoff, "--log-file", os.path.join(self.work, "cluster.log")])
            self.start_operator()
        except BaseException:
            self.stop()
            raise

    # ---------------------------------------------------------------- processes
    def start_operator(self):
        with open(os.path.join(self.work, "operator.log"), "ab") as log:
            self.operator = subprocess.Popen(
                [OPERATOR, "--kubeconfig", self.operator_kubeconfig, "--lease-namespace", "mpijob-system",
                 "--metrics-addr", "0", "--health-addr", "0"], stdout=log, stderr=subprocess.STDOUT)

    def restart_operator(self, kill=False):
        """Stops the operator (SIGKILL when kill, else SIGTERM) and starts a fresh one."""
        self.operator.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
        self.operator.wait(timeout=30)
        self.start_operator()

    def stop(self):
        for p in (self.operator, self.cluster):
            if p is not None and p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in (self.operator, self.cluster):
            if p is not None:
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    p.kill()
        for pid in self.api_pids:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        self.api_pids = []
        if os.environ.get("E2E_KEEP"):
            print("kept: %s" % self.work)
        else:
            shutil.rmtree(self.work, ignore_errors=True)

    # ---------------------------------------------------------------- the API
    def kubectl(self, *args, stdin=None):
        """subprocess.CompletedProcess of kubectl against this cluster (text)."""
        return subprocess.run(["kubectl", "--kubeconfig", self.kubeconfig] + list(args), input=stdin,
                              capture_output=True, text=True, timeout=60)

    def _control(self, method, path, body=None):
        with open(self.kubeconfig) as f:
            kc = yaml.safe_load(f)
        server = kc["clusters"][0]["cluster"]["server"]
        token = kc["users"][0]["user"]["token"]
        ctx = ssl.create_default_context(cafile=os.path.join(os.path.dirname(self.kubeconfig), "ca.crt"))
        req = urllib.request.Request(server + path, method=method,
                                     data=json.dumps(body).encode() if body is not None else None)
        req.add_header("Authorization", "Bearer " + token)
        req.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(req, context=ctx, timeout=30) as resp:
            return json.loads(resp.read() or b"null")

    def drop_watches(self):
        """Every open watch stream is cut (the double's fault injection)."""
        self._control("POST", "/_double/fault", {"dropWatches": True})

    def request_log(self, since=0):
        """The double's request log: a list of {seq, method, path, verb, resource, name, code, ...}."""
        return self._control("GET", "/_double/log?since=%d" % since)

    def launcher_log(self, ns, name):
        logs = os.path.join(self.cluster_state, "logs")
        out = ""
        for f in sorted(os.listdir(logs)) if os.path.isdir(logs) else []:
            if f.startswith("%s_%s-launcher-" % (ns, name)):
                with open(os.path.join(logs, f), errors="replace") as fh:
                    out += fh.read()
        return out

    def tail(self, name, n=3000):
        try:
            with open(os.path.join(self.work, name), errors="replace") as f:
                return f.read()[-n:]
        except OSError:
            return ""
