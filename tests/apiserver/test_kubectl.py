#!/usr/bin/env python3
"""kubectl against the API-server double: apply, get (server-side Tables with the CRD's printer
columns), describe, delete, and malformed manifests, plus the pieces kubectl relies on (aggregated
discovery, OpenAPI v3, Table watches) checked at the HTTP level.

    python3 tests/apiserver/test_kubectl.py [-v]

Needs kubectl on PATH (skipped otherwise) and PyYAML. Everything it writes lies in a temporary
directory: the double's state, kubectl's cache and HOME.
"""

import base64
import json
import os
import shutil
import ssl
import subprocess
import sys
import tempfile
import unittest
import urllib.request

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
EXAMPLE = os.path.join(ROOT, "manifests", "examples", "mpijob-tcp.yaml")
KUBECTL = shutil.which("kubectl")

sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
import discovery  # noqa: E402  (Accept negotiation)
import launch  # noqa: E402
import protobuf  # noqa: E402
import tables  # noqa: E402  (durations, JSONPath, the pod status column)
from deadline import scaled  # noqa: E402  (tests/support/deadline.py)

POD_AND_JOB = """
apiVersion: v1
kind: Pod
metadata: {name: kc-pod, labels: {app: kc}}
spec:
  containers: [{name: main, image: busybox, command: [sleep, "1000"]}]
---
apiVersion: batch/v1
kind: Job
metadata: {name: kc-job}
spec:
  completions: 2
  template:
    spec:
      restartPolicy: Never
      containers: [{name: main, image: busybox}]
"""

EVENT = """
apiVersion: v1
kind: Event
metadata: {name: train-tcp.kc}
involvedObject: {apiVersion: kubeflow.org/v2beta1, kind: MPIJob, name: train-tcp, namespace: default, uid: %s}
reason: LauncherCreated
message: Created the launcher job of train-tcp
type: Normal
source: {component: mpijob-operator}
firstTimestamp: "2026-01-01T00:00:00Z"
lastTimestamp: "2026-01-01T00:00:00Z"
count: 1
"""


def header_and_rows(text):
    """The columns of kubectl's table output: (header cells, [row cells])."""
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[0].split(), [line.split() for line in lines[1:]]


@unittest.skipIf(KUBECTL is None, "kubectl is not installed")
class KubectlTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="kubectl-test.")
        cls.state = os.path.join(cls.tmp, "double")
        env = dict(os.environ)
        env.pop("KUBEBUILDER_ASSETS", None)          # always the double
        subprocess.run([sys.executable, os.path.join(HERE, "launch.py"), "--state-dir", cls.state,
                        "--background"], check=True, env=env, stdout=subprocess.DEVNULL, timeout=scaled(180))
        cls.kubeconfig = os.path.join(cls.state, "kubeconfig")
        with open(cls.kubeconfig) as f:
            kc = yaml.safe_load(f)
        cls.server = kc["clusters"][0]["cluster"]["server"]
        cls.token = kc["users"][0]["user"]["token"]
        cls.ssl = ssl.create_default_context(cafile=os.path.join(cls.state, "ca.crt"))
        cls.env = dict(os.environ, HOME=cls.tmp, KUBECONFIG=cls.kubeconfig)

    @classmethod
    def tearDownClass(cls):
        launch.stop_background(cls.state, scaled(30))
        shutil.rmtree(cls.tmp, ignore_errors=True)

    # ---- helpers ----
    def kubectl(self, *args, ok=True, stdin=None):
        p = subprocess.run([KUBECTL, "--cache-dir", os.path.join(self.tmp, "cache"), *args], env=self.env,
                           input=stdin, capture_output=True, text=True, timeout=scaled(120))
        if ok:
            self.assertEqual(p.returncode, 0, "kubectl %s failed:\n%s%s" % (" ".join(args), p.stdout, p.stderr))
        return p

    def write(self, name, text):
        path = os.path.join(self.tmp, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def http(self, path, accept="application/json"):
        """(status, content type, decoded body) of a GET with the admin token."""
        req = urllib.request.Request(self.server + path, headers={"Authorization": "Bearer " + self.token,
                                                                  "Accept": accept})
        try:
            with urllib.request.urlopen(req, context=self.ssl, timeout=scaled(60)) as r:
                return r.status, r.headers.get("Content-Type"), r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.headers.get("Content-Type"), e.read().decode()

    def alive(self):
        code, _, body = self.http("/version")
        self.assertEqual(code, 200, body)

    # ---- kubectl ----
    def test_01_apply_get_describe_delete(self):
        p = self.kubectl("apply", "-f", EXAMPLE)
        self.assertIn("mpijob.kubeflow.org/train-tcp created", p.stdout)

        head, rows = header_and_rows(self.kubectl("get", "mpijobs").stdout)
        self.assertEqual(head, ["NAME", "STATE", "TRANSPORT", "USED", "WORKERS", "AGE"])
        self.assertEqual(len(rows), 1, rows)
        self.assertEqual(rows[0][:2], ["train-tcp", "TCP"])   # no state nor workers yet: empty cells

        p = self.kubectl("apply", "-f", EXAMPLE)
        self.assertIn("mpijob.kubeflow.org/train-tcp unchanged", p.stdout)

        self.kubectl("patch", "mpijob", "train-tcp", "--subresource=status", "--type=merge", "-p",
                     '{"status":{"state":"Running","workers":"2/2"}}')
        head, rows = header_and_rows(self.kubectl("get", "mj").stdout)   # the CRD's short name
        self.assertEqual(rows[0][:4], ["train-tcp", "Running", "TCP", "2/2"])

        # -o json round-trips: the manifest's spec is there, and the object replaces itself
        obj = json.loads(self.kubectl("get", "mpijob", "train-tcp", "-o", "json").stdout)
        with open(EXAMPLE) as f:
            manifest = yaml.safe_load(f)
        self.assertEqual(obj["kind"], "MPIJob")
        self.assertEqual(obj["spec"]["networking"], manifest["spec"]["networking"])
        self.assertEqual(obj["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"], 2)
        self.assertIn("kubectl.kubernetes.io/last-applied-configuration", obj["metadata"]["annotations"])
        p = self.kubectl("replace", "-f", "-", stdin=json.dumps(obj))
        self.assertIn("replaced", p.stdout)
        listed = yaml.safe_load(self.kubectl("get", "mpijobs", "-o", "yaml").stdout)
        self.assertEqual([i["metadata"]["name"] for i in listed["items"]], ["train-tcp"])

        # a changed manifest is patched (merge patch for a custom resource)
        with open(EXAMPLE) as f:
            text = f.read()
        changed = self.write("labelled.yaml", text.replace(
            "  name: train-tcp\n", "  name: train-tcp\n  labels: {team: kc}\n"))
        self.assertIn("configured", self.kubectl("apply", "-f", changed).stdout)
        self.assertIn("team=kc", self.kubectl("get", "mpijobs", "--show-labels").stdout)

        # describe: the spec and the events about the job (found through field selectors)
        self.kubectl("create", "-f", self.write("event.yaml", EVENT % obj["metadata"]["uid"]))
        out = self.kubectl("describe", "mpijob", "train-tcp").stdout
        for text in ("Name:         train-tcp", "Kind:         MPIJob", "Mpi Replica Specs:", "Transport:",
                     "Slots Per Worker:", "LauncherCreated", "Created the launcher job of train-tcp"):
            self.assertIn(text, out)

        p = self.kubectl("delete", "-f", changed)
        self.assertIn('mpijob.kubeflow.org "train-tcp" deleted', p.stdout)
        p = self.kubectl("get", "mpijobs")
        self.assertIn("No resources found", p.stdout + p.stderr)

    def test_02_pods_and_jobs(self):
        path = self.write("pod-job.yaml", POD_AND_JOB)
        self.kubectl("apply", "-f", path)
        out = self.kubectl("get", "pods,jobs").stdout
        blocks = [b for b in out.split("\n\n") if b.strip()]
        self.assertEqual(len(blocks), 2, out)
        head, rows = header_and_rows(blocks[0])
        self.assertEqual(head, ["NAME", "READY", "STATUS", "RESTARTS", "AGE"])
        self.assertEqual(rows[0][:4], ["pod/kc-pod", "0/1", "Pending", "0"])
        head, rows = header_and_rows(blocks[1])
        self.assertEqual(head, ["NAME", "STATUS", "COMPLETIONS", "DURATION", "AGE"])
        self.assertEqual(rows[0][:3], ["job.batch/kc-job", "Running", "0/2"])
        head, rows = header_and_rows(self.kubectl("get", "pods", "-o", "wide").stdout)
        self.assertEqual(head[5:], ["IP", "NODE", "NOMINATED", "NODE", "READINESS", "GATES"])
        self.assertIn("unchanged", self.kubectl("apply", "-f", path).stdout)
        # a strategic merge patch on re-apply of a built-in kind
        self.assertIn("configured", self.kubectl("apply", "-f", self.write(
            "pod-job2.yaml", POD_AND_JOB.replace("app: kc", "app: kc2"))).stdout)
        self.assertIn("app=kc2", self.kubectl("get", "pod", "kc-pod", "--show-labels").stdout)
        self.kubectl("delete", "-f", path, "--wait=false")

    def test_03_malformed_manifests(self):
        cases = [
            ("syntax.yaml", "apiVersion: kubeflow.org/v2beta1\nkind: MPIJob\nmetadata:\n  name: bad\nspec: [1\n",
             "error converting YAML to JSON"),
            ("unknown.yaml", "apiVersion: kubeflow.org/v2beta1\nkind: MPIJob\nmetadata:\n  name: bad\nspec:\n"
             "  bogus: 1\n", 'strict decoding error: unknown field "spec.bogus"'),
            ("type.yaml", "apiVersion: kubeflow.org/v2beta1\nkind: MPIJob\nmetadata:\n  name: bad\nspec:\n"
             "  slotsPerWorker: many\n", "spec.slotsPerWorker in body must be of type integer"),
            ("name.yaml", "apiVersion: kubeflow.org/v2beta1\nkind: MPIJob\nmetadata:\n  name: Bad_Name\nspec: {}\n",
             "a lowercase RFC 1123 subdomain"),
            ("kind.yaml", "apiVersion: kubeflow.org/v2beta1\nkind: NoSuchKind\nmetadata:\n  name: bad\n",
             'no matches for kind "NoSuchKind"'),
        ]
        for name, text, want in cases:
            p = self.kubectl("apply", "-f", self.write(name, text), ok=False)
            self.assertNotEqual(p.returncode, 0, name)
            self.assertIn(want, p.stderr, name)
            self.alive()
        p = self.kubectl("get", "mpijob", "bad", ok=False)
        self.assertIn('"bad" not found', p.stderr)

    # ---- what kubectl relies on, at the HTTP level ----
    def test_04_aggregated_discovery(self):
        code, ctype, body = self.http("/apis", "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,"
                                      "application/json")
        self.assertEqual(code, 200)
        self.assertEqual(ctype, "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList")
        doc = json.loads(body)
        self.assertEqual(doc["kind"], "APIGroupDiscoveryList")
        groups = {g["metadata"]["name"]: g for g in doc["items"]}
        mpijobs = [r for r in groups["kubeflow.org"]["versions"][0]["resources"] if r["resource"] == "mpijobs"][0]
        self.assertEqual(mpijobs["responseKind"], {"group": "kubeflow.org", "version": "v2beta1", "kind": "MPIJob"})
        self.assertEqual(mpijobs["scope"], "Namespaced")
        self.assertEqual(mpijobs["subresources"][0]["subresource"], "status")
        self.assertIn("mj", mpijobs["shortNames"])
        code, ctype, body = self.http("/api", "application/json;g=apidiscovery.k8s.io;v=v2beta1;"
                                      "as=APIGroupDiscoveryList")
        self.assertEqual(json.loads(body)["apiVersion"], "apidiscovery.k8s.io/v2beta1")
        self.assertIn("pods", [r["resource"] for r in json.loads(body)["items"][0]["versions"][0]["resources"]])
        # plain JSON first, or only: the legacy documents, as before
        code, ctype, body = self.http("/apis", "application/json, application/json;g=apidiscovery.k8s.io;v=v2;"
                                      "as=APIGroupDiscoveryList")
        self.assertEqual((ctype, json.loads(body)["kind"]), ("application/json", "APIGroupList"))

    def test_05_openapi_v3(self):
        code, _, body = self.http("/openapi/v3")
        self.assertEqual(code, 200)
        paths = json.loads(body)["paths"]
        url = paths["apis/kubeflow.org/v2beta1"]["serverRelativeURL"]
        self.assertTrue(url.startswith("/openapi/v3/apis/kubeflow.org/v2beta1?hash="), url)
        self.assertIn("api/v1", paths)
        doc = json.loads(self.http(url)[2])
        patch = doc["paths"]["/apis/kubeflow.org/v2beta1/namespaces/{namespace}/mpijobs/{name}"]["patch"]
        self.assertEqual(patch["x-kubernetes-group-version-kind"],
                         {"group": "kubeflow.org", "version": "v2beta1", "kind": "MPIJob"})
        self.assertIn("fieldValidation", [p["name"] for p in patch["parameters"]])
        self.assertNotIn("application/strategic-merge-patch+json", patch["requestBody"]["content"])
        self.assertIn("networking", doc["components"]["schemas"]["org.kubeflow.v2beta1.MPIJob"]["properties"]["spec"]
                      ["properties"])
        self.assertEqual(self.http("/openapi/v3/apis/nosuch.io/v1")[0], 404)

    def test_06_table_responses(self):
        self.kubectl("apply", "-f", EXAMPLE)
        table = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
        code, ctype, body = self.http("/apis/kubeflow.org/v2beta1/namespaces/default/mpijobs", table)
        self.assertEqual((code, ctype), (200, "application/json;as=Table;v=v1;g=meta.k8s.io"))
        t = json.loads(body)
        self.assertEqual(t["kind"], "Table")
        self.assertEqual([c["name"] for c in t["columnDefinitions"]],
                         ["Name", "State", "Transport", "Used", "Workers", "Age", "Samples/s", "Comm-ms"])
        self.assertEqual([c.get("priority", 0) for c in t["columnDefinitions"]], [0, 0, 0, 0, 0, 0, 1, 1])
        self.assertEqual(t["rows"][0]["cells"][:5], ["train-tcp", None, "TCP", None, None])
        self.assertEqual(t["rows"][0]["object"]["kind"], "PartialObjectMetadata")
        self.assertEqual(t["rows"][0]["object"]["metadata"]["name"], "train-tcp")
        t = json.loads(self.http("/apis/kubeflow.org/v2beta1/namespaces/default/mpijobs/train-tcp?includeObject=Object",
                                 table)[2])
        self.assertEqual(t["rows"][0]["object"]["spec"]["networking"], {"transport": "TCP"})
        code, _, body = self.http("/api/v1/namespaces/default/pods?includeObject=Everything", table)
        self.assertEqual(code, 400, body)
        t = json.loads(self.http("/api/v1/namespaces/default/configmaps", table)[2])
        self.assertEqual([c["name"] for c in t["columnDefinitions"]], ["Name", "Data", "Age"])
        t = json.loads(self.http("/apis/coordination.k8s.io/v1/namespaces/default/leases", table)[2])
        self.assertEqual(t["rows"], [])
        # without the Table media type first: the plain list
        self.assertEqual(json.loads(self.http("/apis/kubeflow.org/v2beta1/namespaces/default/mpijobs")[2])["kind"],
                         "MPIJobList")

        # a watch in Table form: one row per event, the column definitions with the first only
        rv = json.loads(self.http("/apis/kubeflow.org/v2beta1/namespaces/default/mpijobs")[2])["metadata"][
            "resourceVersion"]
        self.kubectl("patch", "mpijob", "train-tcp", "--subresource=status", "--type=merge", "-p",
                     '{"status":{"state":"Running"}}')
        self.kubectl("delete", "mpijob", "train-tcp")
        code, ctype, body = self.http("/apis/kubeflow.org/v2beta1/namespaces/default/mpijobs?watch=1&"
                                      "resourceVersion=%s&timeoutSeconds=1" % rv, table)
        self.assertEqual(ctype, "application/json;as=Table;v=v1;g=meta.k8s.io")
        events = [json.loads(line) for line in body.splitlines() if line.strip()]
        self.assertEqual([e["type"] for e in events], ["MODIFIED", "DELETED"])
        self.assertEqual(events[0]["object"]["kind"], "Table")
        self.assertEqual(len(events[0]["object"]["columnDefinitions"]), 8)
        self.assertEqual(events[1]["object"]["columnDefinitions"], [])
        self.assertEqual(events[0]["object"]["rows"][0]["cells"][1], "Running")


    def test_07_kubectl_create_speaks_protobuf(self):
        """kubectl create sends Namespaces, ConfigMaps and Secrets as protobuf; other kinds get a
        415 that says what to do instead."""
        self.kubectl("create", "namespace", "made-by-create")
        self.kubectl("label", "namespace", "made-by-create", "team=a")
        ns = json.loads(self.kubectl("get", "namespace", "made-by-create", "-o", "json").stdout)
        self.assertEqual(ns["metadata"]["labels"]["team"], "a")
        self.kubectl("create", "configmap", "cm", "-n", "made-by-create", "--from-literal=a=b", "--from-literal=c=")
        cm = json.loads(self.kubectl("get", "configmap", "cm", "-n", "made-by-create", "-o", "json").stdout)
        self.assertEqual(cm["data"], {"a": "b", "c": ""})
        self.kubectl("create", "secret", "generic", "s", "-n", "made-by-create", "--from-literal=k=v\u00e9")
        sec = json.loads(self.kubectl("get", "secret", "s", "-n", "made-by-create", "-o", "json").stdout)
        self.assertEqual(base64.b64decode(sec["data"]["k"]).decode(), "v\u00e9")
        self.assertEqual(sec["type"], "Opaque")
        p = self.kubectl("create", "job", "j", "-n", "made-by-create", "--image=busybox", ok=False)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("send batch/v1 Job as JSON", p.stderr)
        self.kubectl("delete", "namespace", "made-by-create")

    def test_08_create_token_and_whoami(self):
        """kubectl create token (a TokenRequest, in protobuf) and auth whoami (a SelfSubjectReview);
        kubectl get of what the token's RBAC names, with their server-side Tables."""
        self.kubectl("create", "serviceaccount", "robot")
        self.kubectl("create", "clusterrole", "robot-reader", "--verb=get,list", "--resource=pods")
        self.kubectl("create", "clusterrolebinding", "robot-reader", "--clusterrole=robot-reader",
                     "--serviceaccount=default:robot")
        token = self.kubectl("create", "token", "robot", "--duration=20m").stdout.strip()
        who = self.kubectl("auth", "whoami", "--token", token, "-o", "json")
        info = json.loads(who.stdout)["status"]["userInfo"]
        self.assertEqual(info["username"], "system:serviceaccount:default:robot")
        self.assertEqual(info["groups"], ["system:serviceaccounts", "system:serviceaccounts:default",
                                          "system:authenticated"])
        self.kubectl("get", "pods", "-A", "--token", token)
        p = self.kubectl("get", "secrets", "--token", token, ok=False)
        self.assertIn('User "system:serviceaccount:default:robot" cannot list resource "secrets"', p.stderr)
        header, rows = header_and_rows(self.kubectl("get", "clusterrolebinding", "robot-reader", "-o", "wide").stdout)
        self.assertEqual(header, ["NAME", "ROLE", "AGE", "USERS", "GROUPS", "SERVICEACCOUNTS"])
        self.assertEqual((rows[0][1], rows[0][-1]), ("ClusterRole/robot-reader", "default/robot"))
        header, _ = header_and_rows(self.kubectl("get", "clusterrole", "robot-reader").stdout)
        self.assertEqual(header, ["NAME", "CREATED", "AT"])
        header, rows = header_and_rows(self.kubectl("get", "serviceaccount", "robot").stdout)
        self.assertEqual((header, rows[0][:2]), (["NAME", "SECRETS", "AGE"], ["robot", "0"]))
        p = self.kubectl("create", "token", "nobody", ok=False)
        self.assertIn('serviceaccounts "nobody" not found', p.stderr)


class ProtobufTest(unittest.TestCase):
    """tests/apiserver/protobuf.py on bodies built by hand."""

    def test_round_trip(self):
        obj = {"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": "s", "namespace": "n", "labels": {"a": "1"}, "finalizers": ["x", "y"]},
               "data": {"k": base64.b64encode(b"\x00\xff").decode()}, "type": "Opaque", "immutable": True}
        self.assertEqual(protobuf.decode(protobuf.encode(obj)), obj)
        obj = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "metadata": {"name": "sa"},
               "spec": {"audiences": ["a", "b"], "expirationSeconds": 1200,
                        "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "p", "uid": "u"}}}
        self.assertEqual(protobuf.decode(protobuf.encode(obj)), obj)
        obj = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "rb"},
               "subjects": [{"kind": "ServiceAccount", "name": "sa", "namespace": "n"},
                            {"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": "g"}],
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "r"}}
        self.assertEqual(protobuf.decode(protobuf.encode(obj)), obj)

    def test_zero_fields_are_unset_and_set_ones_are_refused(self):
        base = protobuf.encode({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "n"}})
        meta = protobuf.encode_message({"name": "n"}, protobuf.OBJECT_META)
        # selfLink "" and generation 0, as Go writes every non-pointer field: accepted
        zero = meta + protobuf._enc_bytes(4, b"") + protobuf._key(7, 0) + protobuf._enc_varint(0)
        body = protobuf.MAGIC + protobuf._enc_bytes(1, protobuf._enc_bytes(1, b"v1") + protobuf._enc_bytes(2, b"Namespace")) \
            + protobuf._enc_bytes(2, protobuf._enc_bytes(1, zero))
        self.assertEqual(protobuf.decode(body)["metadata"], {"name": "n"})
        # generation 3 is set and not described: refused, never dropped
        set_ = meta + protobuf._key(7, 0) + protobuf._enc_varint(3)
        body = protobuf.MAGIC + protobuf._enc_bytes(1, protobuf._enc_bytes(1, b"v1") + protobuf._enc_bytes(2, b"Namespace")) \
            + protobuf._enc_bytes(2, protobuf._enc_bytes(1, set_))
        with self.assertRaisesRegex(protobuf.ProtobufError, "Namespace.metadata: field 7 is set"):
            protobuf.decode(body)
        self.assertTrue(base.startswith(protobuf.MAGIC))

    def test_malformed_bodies(self):
        good = protobuf.encode({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"},
                                "data": {"a": "b"}})
        for bad, why in ((b"{}", "prefix"), (good[:-3], "runs past the end|truncated"),
                         (protobuf.MAGIC + b"\x0b", "wire type 3"), (protobuf.MAGIC + b"\x08\xff", "truncated varint")):
            with self.assertRaisesRegex(protobuf.ProtobufError, why):
                protobuf.decode(bad)
        body = protobuf.MAGIC + protobuf._enc_bytes(1, protobuf._enc_bytes(1, b"apps/v1") + protobuf._enc_bytes(2, b"Deployment"))
        with self.assertRaisesRegex(protobuf.ProtobufError, r"only for authentication.k8s.io/v1 SelfSubjectReview, "
                                    r".*, v1 ConfigMap, v1 Namespace, v1 Secret, v1 ServiceAccount; "
                                    r"send apps/v1 Deployment as JSON"):
            protobuf.decode(body)


class HelpersTest(unittest.TestCase):
    def test_human_duration(self):
        for seconds, text in ((-5, "<invalid>"), (-1, "0s"), (0, "0s"), (119, "119s"), (120, "2m"), (150, "2m30s"),
                              (600, "10m"), (3 * 3600, "3h"), (3 * 3600 + 60, "3h1m"), (10 * 3600, "10h"),
                              (50 * 3600, "2d2h"), (9 * 86400, "9d"), (800 * 86400, "2y70d"),
                              (3000 * 86400, "8y")):
            self.assertEqual(tables.human_duration(seconds), text, seconds)

    def test_simple_jsonpath(self):
        obj = {"a": {"b": [{"c": 1}, {"c": 2}], "d.e": "x"}, "n": None}
        self.assertEqual(tables.simple_jsonpath(obj, ".a.b[0].c"), [1])
        self.assertEqual(tables.simple_jsonpath(obj, "{.a.b[-1].c}"), [2])
        self.assertEqual(tables.simple_jsonpath(obj, ".a.b[*].c"), [1, 2])
        self.assertEqual(tables.simple_jsonpath(obj, ".a['d.e']"), ["x"])
        self.assertEqual(tables.simple_jsonpath(obj, ".a.missing"), [])
        self.assertEqual(tables.simple_jsonpath(obj, ".n"), [])
        self.assertEqual(tables.simple_jsonpath(obj, ".a.b[5].c"), [])

    def test_negotiate(self):
        n = discovery.negotiate
        self.assertEqual(n("application/json;as=Table;v=v1;g=meta.k8s.io,application/json", "meta.k8s.io", "Table",
                           tables.TABLE_GVS), "v1")
        self.assertEqual(n("application/json;as=Table;v=v2;g=meta.k8s.io,application/json;as=Table;v=v1beta1;"
                           "g=meta.k8s.io", "meta.k8s.io", "Table", tables.TABLE_GVS), "v1beta1")
        self.assertIsNone(n("application/json", "meta.k8s.io", "Table", tables.TABLE_GVS))
        self.assertIsNone(n("", "meta.k8s.io", "Table", tables.TABLE_GVS))
        self.assertIsNone(n("*/*, application/json;as=Table;v=v1;g=meta.k8s.io", "meta.k8s.io", "Table",
                            tables.TABLE_GVS))

    def test_pod_status_column(self):
        now = 1000.0
        pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "a"}, {"name": "b"}]},
               "status": {"phase": "Running", "containerStatuses": [
                   {"name": "a", "ready": True, "restartCount": 1, "state": {"running": {}}},
                   {"name": "b", "ready": False, "restartCount": 2,
                    "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}}
        cells = tables._pod_row(pod, now)
        self.assertEqual(cells[:3], ["1/2", "CrashLoopBackOff", "3"])
        pod["status"]["containerStatuses"][1]["state"] = {"terminated": {"exitCode": 3}}
        self.assertEqual(tables._pod_row(pod, now)[1], "ExitCode:3")
        pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        self.assertEqual(tables._pod_row(pod, now)[1], "Terminating")


if __name__ == "__main__":
    unittest.main()
