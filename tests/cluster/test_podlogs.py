"""Container logs through the API server, as `kubectl logs` and the operator read them: the
kubelet's container-log endpoint (kubeletapi.py: tailLines, then limitBytes, found from the end
of the file), and pods/NAME/log through the API server (the double's podlogs.py, or a real
kube-apiserver where KUBEBUILDER_ASSETS has one), which fetches them from the simulated
kubelet of the pod's node. The same tests run against both servers, so the double's checks and
messages are the real one's. The kubelet's tests need root.

    python3 -m unittest discover -s tests/cluster -p 'test_podlogs.py' -v
"""

import os
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import unittest
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import kubeletapi  # noqa: E402
from clustertest import KubeletTestCase, wait_for  # noqa: E402


class ReadLogTest(unittest.TestCase):
    """kubeletapi.read_log: what the kubelet answers for tailLines and limitBytes."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="kubeletapi-test.")
        self.path = os.path.join(self.dir, "ns_pod_c.log")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def read(self, data, tail=None, limit=None):
        with open(self.path, "wb") as f:
            f.write(data)
        return kubeletapi.read_log(self.path, tail, limit)

    def test_tail_lines_then_limit_bytes(self):
        log = b"one\ntwo\nthree\n"
        cases = [(None, None, log), (1, None, b"three\n"), (2, None, b"two\nthree\n"), (9, None, log),
                 (0, None, b""), (2, 5, b"two\nt"), (None, 3, b"one"), (1, 100, b"three\n")]
        for tail, limit, want in cases:
            self.assertEqual(self.read(log, tail, limit), want, (tail, limit))

    def test_a_last_line_without_its_newline_is_a_line(self):
        self.assertEqual(self.read(b"one\ntwo", 1), b"two")
        self.assertEqual(self.read(b"one\ntwo", 2), b"one\ntwo")
        self.assertEqual(self.read(b"\n\n", 1), b"\n")
        self.assertEqual(self.read(b"", 3), b"")

    def test_a_10_mb_log_gives_its_end(self):
        lines = [b"%0999d\n" % i for i in range(10000)]
        big = b"".join(lines) + b'{"event":"summary"}\n'
        self.assertEqual(len(big) // 1000000, 10)
        got = self.read(big, 200, 65536)
        self.assertEqual(len(got), 65536, "200 lines of 1000 bytes, cut at the limit")
        self.assertEqual(got, (b"".join(lines[-199:]) + b'{"event":"summary"}\n')[:65536])
        self.assertEqual(self.read(big, 3), b"".join(lines[-2:]) + b'{"event":"summary"}\n')


class ServerTest(unittest.TestCase):
    """kubeletapi.py as a process: HTTPS, the path, the options, a log that does not exist."""

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="kubeletapi-test.")
        ready = os.path.join(cls.dir, "port")
        cls.proc = subprocess.Popen([sys.executable, os.path.join(HERE, "kubeletapi.py"), "--logs-dir", cls.dir,
                                     "--address", "127.0.0.1", "--port", "0", "--ready-file", ready],
                                    stdin=subprocess.DEVNULL)
        wait_for("kubeletapi.py serving", lambda: os.path.exists(ready) or cls.proc.poll() is not None, 30)
        with open(ready) as f:
            cls.port = int(f.read())
        with open(os.path.join(cls.dir, "default_p_main.log"), "wb") as f:
            f.write(b"a\nb\nc\n")

    @classmethod
    def tearDownClass(cls):
        cls.proc.terminate()
        cls.proc.wait(timeout=10)
        shutil.rmtree(cls.dir, ignore_errors=True)

    def get(self, path):
        ctx = ssl._create_unverified_context()
        try:
            with urllib.request.urlopen("https://127.0.0.1:%d%s" % (self.port, path), context=ctx, timeout=10) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def test_logs_and_options(self):
        self.assertEqual(self.get("/containerLogs/default/p/main"), (200, b"a\nb\nc\n"))
        self.assertEqual(self.get("/containerLogs/default/p/main?tailLines=2&limitBytes=3"), (200, b"b\nc"))
        self.assertEqual(self.get("/healthz"), (200, b"ok"))

    def test_what_is_not_there(self):
        code, body = self.get("/containerLogs/default/p/other")
        self.assertEqual(code, 404)
        self.assertIn(b'container "other" in pod "p" is not available', body)
        self.assertEqual(self.get("/containerLogs/default/p/main?tailLines=-1")[0], 400)
        self.assertEqual(self.get("/containerLogs/default/p/../main")[0], 404)
        self.assertEqual(self.get("/nothing")[0], 404)


@unittest.skipUnless(os.geteuid() == 0, "needs root: the kubelet makes network namespaces")
class PodLogsThroughTheApiServerTest(KubeletTestCase):
    """kubectl logs, through the API server (double, or real with KUBEBUILDER_ASSETS) and the
    node's kubelet API, which the simulated kubelet serves on its node's address."""

    ns_prefix = "pl"

    def kubectl(self, *args):
        return subprocess.run(["kubectl", "--kubeconfig", os.path.join(self.tmp, "api", "kubeconfig")] + list(args),
                              capture_output=True, text=True, timeout=60)

    def run_pod(self, ns, name, containers, node=True):
        spec = {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
                "containers": [{"name": c, "image": "ignored", "command": ["sh", "-c", cmd]}
                               for c, cmd in containers]}
        if node:
            spec["nodeName"] = self.kubelet.node
        self.create(ns, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec})

    def test_kubectl_logs_with_tail_and_limit(self):
        ns = self.ns()
        self.run_pod(ns, "five", [("main", "for i in 1 2 3 4 5; do echo line $i; done")])
        self.wait_phase(ns, "five", "Succeeded")
        r = self.kubectl("logs", "-n", ns, "five")
        self.assertEqual((r.returncode, r.stdout), (0, "".join("line %d\n" % i for i in range(1, 6))), r.stderr)
        r = self.kubectl("logs", "-n", ns, "five", "--tail=2")
        self.assertEqual(r.stdout, "line 4\nline 5\n", r.stderr)
        r = self.kubectl("logs", "-n", ns, "five", "--tail=2", "--limit-bytes=8")
        self.assertEqual(r.stdout, "line 4\nl", r.stderr)

    def test_what_the_api_server_refuses(self):
        ns = self.ns()
        self.run_pod(ns, "two", [("a", "echo a"), ("b", "echo b")])
        self.run_pod(ns, "nowhere", [("main", "true")], node=False)
        self.wait_phase(ns, "two", "Succeeded")
        # (kubectl itself picks the first container; the API server asks for one)
        r = self.kubectl("get", "--raw", "/api/v1/namespaces/%s/pods/two/log" % ns)
        self.assertIn("a container name must be specified for pod two, choose one of: [a b]", r.stderr)
        r = self.kubectl("logs", "-n", ns, "two", "-c", "nope")
        self.assertIn("container nope is not valid for pod two", r.stderr)
        r = self.kubectl("logs", "-n", ns, "two", "-c", "b")
        self.assertEqual(r.stdout, "b\n", r.stderr)
        r = self.kubectl("get", "--raw", "/api/v1/namespaces/%s/pods/nowhere/log" % ns)
        self.assertEqual((r.returncode, r.stdout), (0, ""), "a pod on no node has an empty log: " + r.stderr)
        r = self.kubectl("logs", "-n", ns, "missing")
        self.assertIn('pods "missing" not found', r.stderr)

    def test_a_node_whose_kubelet_is_gone(self):
        ns = self.ns()
        with socket.socket() as s:  # a port nothing listens on
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gone-node"}}
        self.kube.create("/api/v1/nodes", node)
        try:
            self.kube.patch_status("/api/v1/nodes/gone-node", {"status": {
                "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}, {"type": "Hostname", "address": "gone-node"}],
                "daemonEndpoints": {"kubeletEndpoint": {"Port": port}}}})
            spec = {"nodeName": "gone-node", "containers": [{"name": "main", "image": "ignored"}]}
            # the kubelet of this test serves sim-node only: the pod stays as written
            self.create(ns, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "stranded"}, "spec": spec})
            r = self.kubectl("get", "--raw", "/api/v1/namespaces/%s/pods/stranded/log?tailLines=2" % ns)
            self.assertNotEqual(r.returncode, 0)
            self.assertIn('Get "https://127.0.0.1:%d/containerLogs/%s/stranded/main?tailLines=2": dial tcp '
                          '127.0.0.1:%d: connect: connection refused' % (port, ns, port), r.stderr)
        finally:
            self.kube.request("DELETE", "/api/v1/nodes/gone-node")


if __name__ == "__main__":
    unittest.main()
