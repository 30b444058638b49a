"""Container logs through the API server, as `kubectl logs` and the operator read them: the
kubelet's container-log endpoint (kubeletapi.py: the last run, tailLines, then limitBytes, found
from the end of the file), and pods/NAME/log through the API server (the double's podlogs.py, or
a real kube-apiserver where KUBEBUILDER_ASSETS has one), which fetches them from the kubelet of
the pod's node: a log-only kubelet on 127.0.0.1 (ApiServerLogsTest, as
tests/support/kubelet_logs.h sets it up; no root needed) or the simulated kubelet of the node's
network namespace (PodLogsThroughTheApiServerTest, root). The same assertions run against both
servers, with the real server's words, so the double's checks and messages are the real one's.
tests/cluster/test_controlplane.py reads a log through a real control plane too.

    python3 -m unittest discover -s tests/cluster -p 'test_podlogs.py' -v
    KUBEBUILDER_ASSETS=/path/to/bin python3 -m unittest discover -s tests/cluster -p 'test_podlogs.py' -v
"""

import http.client
import json
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
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

import kubeletapi  # noqa: E402
from clustertest import KubeletTestCase, start_apiserver, stop_apiserver, stop_process, wait_for  # noqa: E402

SUMMARY = b'{"event":"summary","samples_per_sec":1.5}\n'


def big_log():
    """10 MB of 1000-byte lines, then the summary line."""
    lines = [b"%0999d\n" % i for i in range(10000)]
    return lines, b"".join(lines) + SUMMARY


class ReadLogTest(unittest.TestCase):
    """kubeletapi's reader: what the kubelet answers for tailLines, limitBytes, the runs of a
    container, timestamps and since."""

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
        self.assertEqual(self.read(b"one\ntwo", 2, 5), b"one\nt")
        self.assertEqual(self.read(b"\n\n", 1), b"\n")
        self.assertEqual(self.read(b"", 3), b"")
        self.assertEqual(self.read(b"no newline at all", 1), b"no newline at all")

    def test_a_10_mb_log_gives_its_end(self):
        lines, big = big_log()
        self.assertEqual(len(big) // 1000000, 10)
        got = self.read(big, 200, 65536)
        self.assertEqual(len(got), 65536, "200 lines of 1000 bytes, cut at the limit")
        self.assertEqual(got, (b"".join(lines[-199:]) + SUMMARY)[:65536])
        self.assertEqual(self.read(big, 3), b"".join(lines[-2:]) + SUMMARY)
        self.assertEqual(self.read(big, None, 10), lines[0][:10])
        # only the end is read: blocks from the end, not the whole file
        class Counting:
            def __init__(self, f):
                self.f, self.read_bytes = f, 0

            def seek(self, pos):
                return self.f.seek(pos)

            def read(self, n):
                data = self.f.read(n)
                self.read_bytes += len(data)
                return data
        with open(self.path, "rb") as f:
            c = Counting(f)
            start = kubeletapi.tail_offset(c, len(big), 200)
        self.assertEqual(start, len(big) - len(SUMMARY) - 199 * 1000)
        self.assertLess(c.read_bytes, 200 * 1000 + 2 * kubeletapi.TAIL_BLOCK)

    def test_runs_current_and_previous(self):
        with open(self.path, "wb") as f:
            f.write(b"first run\nno newline")
        with open(self.path + ".runs", "w") as f:   # the first run began at 0
            f.write("0\n")
        kubeletapi.add_run(self.path)                  # the second run starts at the end
        with open(self.path, "ab") as f:
            f.write(b"second run\n")
        self.assertEqual(kubeletapi.runs(self.path), [0, 20])
        path, start, end = kubeletapi.log_range(self.dir, "ns", "pod", "c", False)
        self.assertEqual(b"".join(kubeletapi.log_blocks(path, start, end)), b"second run\n")
        path, start, end = kubeletapi.log_range(self.dir, "ns", "pod", "c", True)
        self.assertEqual(b"".join(kubeletapi.log_blocks(path, start, end)), b"first run\nno newline")
        self.assertEqual(b"".join(kubeletapi.log_blocks(path, start, end, tail_lines=1)), b"no newline")
        kubeletapi.keep_last_run(self.path)            # the pod ended: the earlier runs are gone
        self.assertEqual(kubeletapi.runs(self.path), [20])
        path, start, end = kubeletapi.log_range(self.dir, "ns", "pod", "c", False)
        self.assertEqual(b"".join(kubeletapi.log_blocks(path, start, end)), b"second run\n")
        os.unlink(self.path + ".runs")
        with self.assertRaises(kubeletapi.KubeletError) as e:
            kubeletapi.log_range(self.dir, "ns", "pod", "c", True)
        self.assertEqual((e.exception.code, e.exception.text),
                         (400, 'previous terminated container "c" in pod "pod" not found'))
        with self.assertRaises(kubeletapi.KubeletError) as e:
            kubeletapi.log_range(self.dir, "ns", "pod", "other", False)
        self.assertEqual((e.exception.code, e.exception.text),
                         (400, 'container "other" in pod "pod" is not available'))

    def test_timestamps_and_since(self):
        with open(self.path, "wb") as f:
            f.write(b"a\nbb\nc")
        os.utime(self.path, (1700000000.25, 1700000000.25))
        got = b"".join(kubeletapi.log_blocks(self.path, timestamps=True))
        ts = b"2023-11-14T22:13:20.250000000Z "
        self.assertEqual(got, ts + b"a\n" + ts + b"bb\n" + ts + b"c")
        self.assertEqual(b"".join(kubeletapi.log_blocks(self.path, timestamps=True, tail_lines=1, limit_bytes=33)),
                         ts + b"c")
        self.assertEqual(b"".join(kubeletapi.log_blocks(self.path, since=1700000001)), b"")
        self.assertEqual(b"".join(kubeletapi.log_blocks(self.path, since=1700000000)), b"a\nbb\nc")

    def test_query(self):
        o = kubeletapi.parse_query("tailLines=3&limitBytes=10&previous=true&timestamps=1&follow=false")
        self.assertEqual((o.tail_lines, o.limit_bytes, o.previous, o.timestamps, o.follow), (3, 10, True, True, False))
        self.assertIsNone(kubeletapi.parse_query("tail=all&tailLines=4").tail_lines)
        for bad, code in (("tailLines=x", 400), ("tailLines=1_0", 400), ("sinceTime=yesterday", 400),
                          ("tailLines=-1", 422), ("limitBytes=0", 422), ("sinceSeconds=0", 422),
                          ("sinceSeconds=5&sinceTime=2024-01-01T00:00:00Z", 422)):
            with self.assertRaises(kubeletapi.KubeletError) as e:
                kubeletapi.parse_query(bad)
            self.assertEqual(e.exception.code, code, bad)


class ServerTest(unittest.TestCase):
    """kubeletapi.py as a process: HTTPS, the path, the options, a log that does not exist."""

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="kubeletapi-test.")
        ready = os.path.join(cls.dir, "port")
        cls.proc = subprocess.Popen([sys.executable, os.path.join(HERE, "kubeletapi.py"), "--logs-dir", cls.dir,
                                     "--address", "127.0.0.1", "--port", "0", "--ready-file", ready],
                                    stdin=subprocess.DEVNULL)
        wait_for("kubeletapi.py serving", lambda: os.path.exists(ready) or cls.proc.poll() is not None, 30,
                 interval=0.05)
        with open(ready) as f:
            cls.port = int(f.read())
        with open(os.path.join(cls.dir, "default_p_main.log"), "wb") as f:
            f.write(b"a\nb\nc\n")

    @classmethod
    def tearDownClass(cls):
        stop_process(cls.proc)
        shutil.rmtree(cls.dir, ignore_errors=True)

    def get(self, path):
        ctx = ssl._create_unverified_context()
        try:
            with urllib.request.urlopen("https://127.0.0.1:%d%s" % (self.port, path), context=ctx, timeout=30) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def test_logs_and_options(self):
        self.assertEqual(self.get("/containerLogs/default/p/main"), (200, b"a\nb\nc\n"))
        self.assertEqual(self.get("/containerLogs/default/p/main?tailLines=2&limitBytes=3"), (200, b"b\nc"))
        self.assertEqual(self.get("/containerLogs/default/p/main?tail=1&follow=true"), (200, b"c\n"))
        self.assertEqual(self.get("/healthz"), (200, b"ok"))

    def test_what_is_not_there(self):
        self.assertEqual(self.get("/containerLogs/default/p/other"),
                         (400, b'container "other" in pod "p" is not available'))
        self.assertEqual(self.get("/containerLogs/default/p/main?previous=true"),
                         (400, b'previous terminated container "main" in pod "p" not found'))
        self.assertEqual(self.get("/containerLogs/default/p/main?tailLines=-1"), (422, b'{"message": "Invalid request."}'))
        self.assertEqual(self.get("/containerLogs/default/p/main?tailLines=x"),
                         (400, b'{"message": "Unable to decode query."}'))
        self.assertEqual(self.get("/containerLogs/default/p/../main")[0], 404)
        self.assertEqual(self.get("/nothing")[0], 404)

    def test_a_silent_client_holds_up_no_one(self):
        with socket.create_connection(("127.0.0.1", self.port), timeout=30):
            self.assertEqual(self.get("/healthz"), (200, b"ok"))


# ---- through an API server, from a kubelet that serves logs only ----------------------------------

NODE = "logs-node"
NS = "logs-test"


def raw_get(k, path, token=None):
    """(status, Content-Type, body) of a GET through the API server of k, as text."""
    conn = http.client.HTTPSConnection(k.host, k.port, context=k.ctx, timeout=60)
    try:
        conn.request("GET", k.prefix + path, headers={"Authorization": "Bearer " + (token or k.token),
                                                      "Accept": "application/json, */*"})
        resp = conn.getresponse()
        return resp.status, resp.getheader("Content-Type"), resp.read()
    finally:
        conn.close()


def status_of(body):
    """(message, reason) of a Status body."""
    st = json.loads(body)
    return st.get("message"), st.get("reason")


def make_node(k, name, status):
    k.create("/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
    if status:
        k.patch_status("/api/v1/nodes/" + name, {"status": status})


def make_pod(k, name, containers=("main",), node=NODE, init=()):
    spec = {"containers": [{"name": c, "image": "ignored"} for c in containers]}
    if init:
        spec["initContainers"] = [{"name": c, "image": "ignored"} for c in init]
    if node:
        spec["nodeName"] = node
    k.create("/api/v1/namespaces/%s/pods" % NS, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                                                 "spec": spec})


class ApiServerLogsTest(unittest.TestCase):
    """pods/NAME/log through the double, or a real kube-apiserver with KUBEBUILDER_ASSETS, from a
    kubeletapi.py on 127.0.0.1 that a Node names (InternalIP 127.0.0.1, its port), as the C
    tests' log-only kubelet runs: every check, refusal and error has the real server's words."""

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="podlogs-test.")
        cls.api = os.path.join(cls.dir, "api")
        cls.usage = os.path.join(cls.dir, "rbac-usage.log")
        cls.proc = None
        saved = os.environ.get("MPIJOB_TEST_RBAC_USAGE")
        os.environ["MPIJOB_TEST_RBAC_USAGE"] = cls.usage    # for the server only
        try:
            cls.k, cls.pids, cls.real = start_apiserver(cls.api, "--rbac",
                                                        os.path.join(ROOT, "deploy", "mpijob-operator.yaml"))
        finally:
            if saved is None:
                del os.environ["MPIJOB_TEST_RBAC_USAGE"]
            else:
                os.environ["MPIJOB_TEST_RBAC_USAGE"] = saved
        try:
            cls.logs = os.path.join(cls.dir, "logs")
            os.makedirs(cls.logs)
            ready = os.path.join(cls.dir, "port")
            with open(os.path.join(cls.api, "port")) as f:
                server = "https://127.0.0.1:%s" % f.read().strip()
            cls.proc = subprocess.Popen([sys.executable, os.path.join(HERE, "kubeletapi.py"), "--logs-dir", cls.logs,
                                         "--address", "127.0.0.1", "--port", "0", "--ready-file", ready,
                                         "--node", NODE, "--server", server, "--token", cls.k.token,
                                         "--ca", os.path.join(cls.api, "ca.crt")], stdin=subprocess.DEVNULL)
            wait_for("kubeletapi.py serving", lambda: os.path.exists(ready) or cls.proc.poll() is not None, 30,
                     interval=0.05)
            with open(ready) as f:
                cls.port = int(f.read())
            make_node(cls.k, NODE, {"addresses": [{"type": "InternalIP", "address": "127.0.0.1"},
                                                  {"type": "Hostname", "address": NODE}],
                                    "daemonEndpoints": {"kubeletEndpoint": {"Port": cls.port}}})
            cls.k.ensure_namespace(NS)
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def tearDownClass(cls):
        stop_process(cls.proc)
        stop_apiserver(cls.pids)
        shutil.rmtree(cls.dir, ignore_errors=True)

    def write_log(self, pod, data, container="main"):
        with open(os.path.join(self.logs, "%s_%s_%s.log" % (NS, pod, container)), "wb") as f:
            f.write(data)

    def log(self, pod, query="", token=None):
        return raw_get(self.k, "/api/v1/namespaces/%s/pods/%s/log%s" % (NS, pod, query), token)

    def assertText(self, answer, body):
        code, ctype, got = answer
        self.assertEqual((code, got), (200, body))
        self.assertEqual(ctype, "text/plain")

    def assertStatus(self, answer, code, message, reason):
        got_code, ctype, body = answer
        self.assertEqual(got_code, code, body)
        self.assertEqual(ctype, "application/json")
        self.assertEqual(status_of(body), (message, reason))

    def test_tail_then_limit(self):
        make_pod(self.k, "one")
        self.write_log("one", b"one\ntwo\nthree")
        self.assertText(self.log("one"), b"one\ntwo\nthree")
        self.assertText(self.log("one", "?tailLines=2"), b"two\nthree")
        self.assertText(self.log("one", "?container=main&tailLines=2&limitBytes=5"), b"two\nt")
        self.assertText(self.log("one", "?tailLines=0"), b"")
        self.assertText(self.log("one", "?follow=true&tailLines=1"), b"three")

    def test_a_10_mb_log(self):
        make_pod(self.k, "big")
        lines, big = big_log()
        self.write_log("big", big)
        self.assertText(self.log("big", "?tailLines=200&limitBytes=65536"), (b"".join(lines[-199:]) + SUMMARY)[:65536])
        self.assertText(self.log("big", "?tailLines=1"), SUMMARY)

    def test_the_container(self):
        make_pod(self.k, "multi", ("a", "b"), init=("i",))
        self.write_log("multi", b"init\n", "i")
        self.assertStatus(self.log("multi"), 400, "a container name must be specified for pod multi, choose one of: "
                          "[i a b]", "BadRequest")
        self.assertStatus(self.log("multi", "?container=zz"), 400, "container zz is not valid for pod multi",
                          "BadRequest")
        self.assertText(self.log("multi", "?container=i"), b"init\n")
        # no log yet: the kubelet's 400, passed on
        self.assertStatus(self.log("multi", "?container=a"), 400, 'container "a" in pod "multi" is not available',
                          "BadRequest")
        self.assertStatus(self.log("multi", "?container=i&previous=true"), 400,
                          'previous terminated container "i" in pod "multi" not found', "BadRequest")

    def test_a_pod_on_no_node_has_no_content(self):
        make_pod(self.k, "nowhere", node=None)
        code, ctype, body = self.log("nowhere", "?tailLines=3")
        self.assertEqual((code, ctype, body), (204, None, b""))

    def test_options_refused(self):
        make_pod(self.k, "opts")
        invalid = 'PodLogOptions "%s" is invalid: %s'
        for query, code, message, reason in [
                ("?tailLines=-1", 422, invalid % ("opts", "tailLines: Invalid value: -1: must be greater than or "
                                                          "equal to 0"), "Invalid"),
                ("?tailLines=-1&limitBytes=-2", 422, invalid % (
                    "opts", "[tailLines: Invalid value: -1: must be greater than or equal to 0, limitBytes: Invalid "
                            "value: -2: must be greater than 0]"), "Invalid"),
                ("?limitBytes=0", 422, invalid % ("opts", "limitBytes: Invalid value: 0: must be greater than 0"),
                 "Invalid"),
                ("?sinceSeconds=1&sinceTime=2020-01-01T00:00:00Z", 422, invalid % (
                    "opts", "[]: Forbidden: at most one of `sinceTime` or `sinceSeconds` may be specified"), "Invalid"),
                ("?stream=All", 422, invalid % ("opts", "stream: Forbidden: may not be specified"), "Invalid"),
                ("?tailLines=abc", 400, 'strconv.ParseInt: parsing "abc": invalid syntax', "BadRequest"),
                ("?tailLines=", 400, 'strconv.ParseInt: parsing "": invalid syntax', "BadRequest"),
                ("?limitBytes=99999999999999999999", 400,
                 'strconv.ParseInt: parsing "99999999999999999999": value out of range', "BadRequest"),
                ("?sinceTime=yesterday", 400, 'parsing time "yesterday" as "2006-01-02T15:04:05Z07:00": cannot parse '
                                              '"yesterday" as "2006"', "BadRequest")]:
            self.assertStatus(self.log("opts", query), code, message, reason)
        # the options are checked before the pod is looked up
        self.assertStatus(self.log("absent", "?tailLines=-1"), 422,
                          invalid % ("absent", "tailLines: Invalid value: -1: must be greater than or equal to 0"),
                          "Invalid")
        self.assertStatus(self.log("absent"), 404, 'pods "absent" not found', "NotFound")

    def test_nodes_that_cannot_be_reached(self):
        with socket.socket() as s:     # a port nothing listens on
            s.bind(("127.0.0.1", 0))
            closed = s.getsockname()[1]
        make_node(self.k, "noaddr-node", None)
        make_node(self.k, "gone-node", {"addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
                                        "daemonEndpoints": {"kubeletEndpoint": {"Port": closed}}})
        make_pod(self.k, "ghost", node="ghost-node")
        make_pod(self.k, "noaddr", node="noaddr-node")
        make_pod(self.k, "gone", node="gone-node")
        self.assertStatus(self.log("ghost"), 404, 'pods "ghost-node" not found', "NotFound")
        self.assertStatus(self.log("noaddr"), 500, "no preferred addresses found; known addresses: []", None)
        q = "?tailLines=5&limitBytes=100&previous=true&timestamps=true"
        self.assertStatus(self.log("gone", q), 500,
                          'Get "https://127.0.0.1:%d/containerLogs/%s/gone/main?limitBytes=100&previous=true&'
                          'tailLines=5&timestamps=true": dial tcp 127.0.0.1:%d: connect: connection refused'
                          % (closed, NS, closed), None)

    def test_rbac(self):
        make_pod(self.k, "guarded")
        self.write_log("guarded", b"secret\n")
        with open(os.path.join(self.api, "operator.kubeconfig")) as f:
            operator = [line.split("token:", 1)[1].strip() for line in f if "token:" in line][0]
        self.assertText(self.log("guarded", "?tailLines=1", operator), b"secret\n")
        self.k.create("/api/v1/namespaces/%s/serviceaccounts" % NS, {"apiVersion": "v1", "kind": "ServiceAccount",
                                                                     "metadata": {"name": "reader"}})
        tr = self.k.create("/api/v1/namespaces/%s/serviceaccounts/reader/token" % NS,
                           {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}})
        reader = tr["status"]["token"]
        self.assertStatus(self.log("guarded", "", reader), 403,
                          'pods "guarded" is forbidden: User "system:serviceaccount:%s:reader" cannot get resource '
                          '"pods/log" in API group "" in the namespace "%s"' % (NS, NS), "Forbidden")
        rbac = "/apis/rbac.authorization.k8s.io/v1/namespaces/%s/" % NS
        self.k.create(rbac + "roles", {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                                       "metadata": {"name": "log-reader"},
                                       "rules": [{"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]}]})
        self.k.create(rbac + "rolebindings", {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "log-reader"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "log-reader"},
            "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": NS}]})
        # a real server's authorizer sees the new binding a moment later
        got = wait_for("the reader allowed", lambda: (lambda a: a if a[0] != 403 else None)(
            self.log("guarded", "", reader)), 30, interval=0.1)
        self.assertText(got, b"secret\n")
        if self.real:
            return      # the request log and the usage lines as the double writes them at once
        code, ctype, body = raw_get(self.k, "/_double/log?since=0")
        entries = [e for e in json.loads(body)["entries"] if e["path"] == "/api/v1/namespaces/%s/pods/guarded/log" % NS]
        # (a request RBAC refuses is logged before it is classified: no verb nor resource)
        self.assertEqual([(e["verb"], e["resource"], e["subresource"], e["namespace"], e["name"], e["code"])
                          for e in entries if e["code"] != 403],
                         [("get", "pods", "log", NS, "guarded", 200)] * 2)
        self.assertEqual(sum(e["code"] == 403 for e in entries), 1)
        with open(self.usage) as f:
            self.assertIn('get "" pods/log %s\n' % NS, f.read())

    def test_discovery(self):
        code, _, body = raw_get(self.k, "/api/v1")
        found = [r for r in json.loads(body)["resources"] if r["name"] == "pods/log"]
        self.assertEqual(found, [{"name": "pods/log", "singularName": "", "namespaced": True, "kind": "Pod",
                                  "verbs": ["get"]}])


# ---- through an API server, from the simulated kubelet ----------------------------------------------

@unittest.skipUnless(os.geteuid() == 0, "needs root: the kubelet makes network namespaces")
class PodLogsThroughTheApiServerTest(KubeletTestCase):
    """kubectl logs, through the API server (double, or real with KUBEBUILDER_ASSETS) and the
    node's kubelet API, which the simulated kubelet serves on its node's address."""

    ns_prefix = "pl"

    def kubectl(self, *args):
        """kubectl, asked again (up to 5 times) when a real API server's own client gave up on the
        kubelet's TLS handshake: Go's 10 s handshake timeout, which a busy machine can outlast
        (seen once on 1.32.13, the simulated kubelet starved in a loaded test run). A user would
        run the command again; the answer, not the machine's speed, is what is tested."""
        argv = ["kubectl", "--kubeconfig", os.path.join(self.tmp, "api", "kubeconfig")] + list(args)
        for _ in range(5):
            r = subprocess.run(argv, capture_output=True, text=True, timeout=60)
            if r.returncode == 0 or "TLS handshake timeout" not in r.stderr:
                break
            print("  (kubectl %s: %s; asking again)" % (" ".join(args), r.stderr.strip()), file=sys.stderr)
        return r

    def run_pod(self, ns, name, containers, node=True, **spec):
        spec.update({"containers": [{"name": c, "image": "ignored", "command": ["sh", "-c", cmd]}
                                    for c, cmd in containers]})
        spec.setdefault("restartPolicy", "Never")
        spec.setdefault("terminationGracePeriodSeconds", 1)
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

    def test_a_restarted_container_current_and_previous(self):
        """Each run of a container is a log of its own, as with a real kubelet and containerd
        (checked on the real-node tier): while the pod runs, the current run and --previous the
        one before; once the pod has ended by itself the earlier runs are gone and --previous is
        refused (the simulated kubelet records where each run began, in one file)."""
        ns = self.ns()

        def pod(name, then):
            cmd = "if [ -e /data/ran ]; then echo second run; %s; else touch /data/ran; echo first run; exit 3; fi" % then
            self.create(ns, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {
                "restartPolicy": "OnFailure", "terminationGracePeriodSeconds": 1, "nodeName": self.kubelet.node,
                "volumes": [{"name": "data", "emptyDir": {}}],
                "containers": [{"name": "main", "image": "ignored", "command": ["sh", "-c", cmd],
                                "volumeMounts": [{"name": "data", "mountPath": "/data"}]}]}})
        pod("again", "exec sleep 300")
        pod("done", "true")
        self.wait_pod(ns, "again", lambda p: (p["status"].get("containerStatuses") or [{}])[0].get("restartCount") == 1
                      and p["status"]["phase"] == "Running", "running again")
        self.wait("the second run's output", lambda: "second run" in self.logs(ns, "again"))
        r = self.kubectl("logs", "-n", ns, "again")
        self.assertEqual(r.stdout, "second run\n", r.stderr)
        r = self.kubectl("logs", "-n", ns, "again", "--previous")
        self.assertEqual(r.stdout, "first run\n", r.stderr)
        p = self.wait_phase(ns, "done", "Succeeded")
        self.assertEqual(p["status"]["containerStatuses"][0]["restartCount"], 1)
        self.assertEqual(self.logs(ns, "done"), "first run\nsecond run\n", "the file keeps every run")
        r = self.kubectl("logs", "-n", ns, "done")
        self.assertEqual(r.stdout, "second run\n", r.stderr)
        r = self.kubectl("logs", "-n", ns, "done", "--previous")
        self.assertEqual((r.returncode, r.stdout), (1, ""))
        self.assertIn('previous terminated container "main" in pod "done" not found', r.stderr)

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
