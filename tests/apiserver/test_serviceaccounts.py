#!/usr/bin/env python3
"""What a pod needs to use in-cluster configuration, on the double and, when KUBEBUILDER_ASSETS
names real binaries, on a real kube-apiserver: the ServiceAccount admission of pods, each
namespace's `default` ServiceAccount and kube-root-ca.crt ConfigMap, the TokenRequest API and the
authentication of its tokens, RBAC over the objects stored in the server, the `kubernetes`
Service and the serving certificate's names, and what `helm install` of charts/mpijob-operator
needs.

    python3 tests/apiserver/test_serviceaccounts.py [-v]
    KUBEBUILDER_ASSETS=/usr/local/kubebuilder/bin python3 tests/apiserver/test_serviceaccounts.py [-v]

On a real server the ServiceAccounts and kube-root-ca.crt come from kube-controller-manager, so
those tests run where KUBEBUILDER_ASSETS also holds kube-controller-manager and kube-scheduler and
are skipped otherwise; the double plays those parts with the same launch.py --control-plane. What
is the double's alone (its control API) is skipped on a real server. The helm tests need
build/tools/bin/helm (scripts/install-helm.sh).
"""

import base64
import calendar
import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.request

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
import deadline  # noqa: E402  (tests/support/deadline.py)
import launch  # noqa: E402
HELM = os.path.join(ROOT, "build", "tools", "bin", "helm")
CHART = os.path.join(ROOT, "charts", "mpijob-operator")
DEPLOY = os.path.join(ROOT, "deploy", "mpijob-operator.yaml")

ASSETS = os.environ.get("KUBEBUILDER_ASSETS") or ""


def have(*names):
    return bool(ASSETS) and all(os.access(os.path.join(ASSETS, n), os.X_OK) for n in names)


REAL = have("etcd", "kube-apiserver")
CONTROL_PLANE = REAL and have("kube-controller-manager", "kube-scheduler")
NEEDS_KCM = ("a real kube-apiserver without kube-controller-manager has no ServiceAccounts, kube-root-ca.crt "
             "nor ServiceAccount admission (KUBEBUILDER_ASSETS lacks kube-controller-manager or kube-scheduler)")
DOUBLE_ONLY = "the double's alone"
WAIT = 60.0            # seconds (scaled) for a server, or a real control plane's controllers and caches

MOUNT_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
TOKEN_SOURCES = [
    {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
    {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
    {"downwardAPI": {"items": [{"path": "namespace",
                                "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
]
SSR = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
RBAC = "/apis/rbac.authorization.k8s.io/v1"


def wait_for(what, fn, describe=None):
    """deadline.wait_for with this file's deadline: fn's first truthy answer, polled; a timeout
    fails with the last answer and describe()'s text."""
    return deadline.wait_for(what, fn, WAIT, 0.2, describe)


def answering(code, call):
    """(condition, description) for wait_for: call() -> (status, body) answers `code`; the
    description is the last answer seen."""
    seen = []

    def check():
        seen[:] = [call()]
        return seen[0][0] == code
    return check, lambda: "last answer: %r" % (seen[0] if seen else None,)


def claims_of(token):
    part = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))


def pod(name, **spec):
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
    body["spec"].update(spec)
    return body


class Server:
    """launch.py --background in a temporary directory: the double, or the real binaries."""

    def __init__(self, *extra, control_plane=True):
        self.tmp = tempfile.mkdtemp(prefix="sa-test.")
        self.dir = os.path.join(self.tmp, "api")
        argv = [sys.executable, os.path.join(HERE, "launch.py"), "--state-dir", self.dir, "--background", *extra]
        if control_plane and (CONTROL_PLANE or not REAL):
            argv.append("--control-plane")
        with open(os.path.join(self.tmp, "launch.log"), "w") as err:
            r = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                               timeout=deadline.scaled(180))
        if r.returncode != 0:
            with open(os.path.join(self.tmp, "launch.log")) as f:
                log = f.read()
            self.stop()
            raise RuntimeError("launch.py failed: %s" % log[-3000:])
        with open(os.path.join(self.dir, "info.json")) as f:
            self.info = json.load(f)
        self.real = self.info.get("kind") == "real"
        self.port = int(open(os.path.join(self.dir, "port")).read())
        self.url = "https://127.0.0.1:%d" % self.port
        self.kubeconfig = os.path.join(self.dir, "kubeconfig")
        with open(self.kubeconfig) as f:
            self.token = yaml.safe_load(f)["users"][0]["user"]["token"]
        self.ca_file = os.path.join(self.dir, "ca.crt")
        with open(self.ca_file) as f:
            self.ca_pem = f.read()
        self.ctx = ssl.create_default_context(cafile=self.ca_file)

    def stop(self):
        launch.stop_background(self.dir, deadline.scaled(30))
        shutil.rmtree(self.tmp, ignore_errors=True)

    def request(self, method, path, body=None, token=None, content_type="application/json"):
        """(status, parsed JSON body or text). token: None for the administrator's, "" for none."""
        token = self.token if token is None else token
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Accept", "application/json")
        if token:
            req.add_header("Authorization", "Bearer " + token)
        if data is not None:
            req.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(req, context=self.ctx, timeout=deadline.scaled(60)) as resp:
                code, text = resp.status, resp.read()
        except urllib.error.HTTPError as e:
            code, text = e.code, e.read()
        try:
            return code, json.loads(text)
        except ValueError:
            return code, text.decode(errors="replace")

    def ok(self, method, path, body=None, want=(200, 201), **kw):
        code, out = self.request(method, path, body, **kw)
        if code not in ((want,) if isinstance(want, int) else want):
            raise AssertionError("%s %s: HTTP %d %s" % (method, path, code, json.dumps(out)[:500]))
        return out

    def get(self, path, **kw):
        code, out = self.request("GET", path, **kw)
        return out if code == 200 else None

    def namespace(self, name):
        """A new namespace, once its `default` ServiceAccount and kube-root-ca.crt are there."""
        self.ok("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        wait_for("the default ServiceAccount of " + name,
                 lambda: self.get("/api/v1/namespaces/%s/serviceaccounts/default" % name))
        wait_for("kube-root-ca.crt in " + name,
                 lambda: self.get("/api/v1/namespaces/%s/configmaps/kube-root-ca.crt" % name))
        return name

    def token_for(self, ns, sa, spec=None):
        out = self.ok("POST", "/api/v1/namespaces/%s/serviceaccounts/%s/token" % (ns, sa),
                      {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec or {}})
        return out["status"]["token"]

    def whoami(self, token):
        return self.request("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", SSR, token=token)


class ServerTest(unittest.TestCase):
    server_args = ()
    control_plane = True

    @classmethod
    def setUpClass(cls):
        cls.s = Server(*cls.server_args, control_plane=cls.control_plane)

    @classmethod
    def tearDownClass(cls):
        cls.s.stop()

    def assertTokenVolume(self, p, containers):
        """p has one kube-api-access-* volume as the admission plugin makes it, mounted read-only
        at the token path in exactly the named containers (init containers included)."""
        vols = [v for v in p["spec"].get("volumes") or [] if v["name"].startswith("kube-api-access-")]
        self.assertEqual(len(vols), 1, p["spec"].get("volumes"))
        name = vols[0]["name"]
        self.assertRegex(name, r"^kube-api-access-[bcdfghjklmnpqrstvwxz2456789]{5}$")
        sources = vols[0]["projected"]["sources"]
        self.assertEqual(sources[:3], TOKEN_SOURCES)
        # The kube-apiserver in this project's KUBEBUILDER_ASSETS is an OpenShift build, whose
        # admission adds a fourth source, openshift-service-ca.crt; upstream 1.32 adds three.
        for extra in sources[3:]:
            self.assertTrue(self.s.real, "the double adds upstream's three sources only: %s" % sources)
            self.assertEqual(extra["configMap"]["name"], "openshift-service-ca.crt")
        self.assertEqual(vols[0]["projected"]["defaultMode"], 420)
        mounted = []
        for c in (p["spec"].get("initContainers") or []) + p["spec"]["containers"]:
            ours = [m for m in c.get("volumeMounts") or [] if m["name"] == name]
            if ours:
                self.assertEqual(ours, [{"name": name, "readOnly": True, "mountPath": MOUNT_PATH}])
                self.assertEqual(c["volumeMounts"][-1]["name"], name, "appended after the container's own")
                mounted.append(c["name"])
        self.assertEqual(sorted(mounted), sorted(containers))


@unittest.skipIf(REAL and not CONTROL_PLANE, NEEDS_KCM)
class ServiceAccountAdmissionTest(ServerTest):
    """Pods get their ServiceAccount and its token volume on create."""

    def test_default_service_account_and_token_volume(self):
        ns = self.s.namespace("adm-default")
        body = pod("p", initContainers=[{"name": "init", "image": "busybox"}],
                   containers=[{"name": "c", "image": "busybox", "volumeMounts": [{"name": "x", "mountPath": "/x"}]},
                               {"name": "own", "image": "busybox",
                                "volumeMounts": [{"name": "x", "mountPath": MOUNT_PATH}]}],
                   volumes=[{"name": "x", "emptyDir": {}}])
        p = self.s.ok("POST", "/api/v1/namespaces/%s/pods" % ns, body)
        self.assertEqual(p["spec"]["serviceAccountName"], "default")
        self.assertEqual(p["spec"]["serviceAccount"], "default")
        self.assertEqual(p["spec"]["volumes"][0], {"name": "x", "emptyDir": {}})
        self.assertTokenVolume(p, ["init", "c"])
        self.assertEqual(self.s.get("/api/v1/namespaces/%s/pods/p" % ns)["spec"], p["spec"])

    def test_automount_false_on_the_pod_or_its_service_account(self):
        ns = self.s.namespace("adm-automount")
        path = "/api/v1/namespaces/%s/pods" % ns
        p = self.s.ok("POST", path, pod("off", automountServiceAccountToken=False))
        self.assertNotIn("volumes", p["spec"])
        self.assertNotIn("volumeMounts", p["spec"]["containers"][0])
        self.assertEqual(p["spec"]["serviceAccountName"], "default")
        self.s.ok("POST", "/api/v1/namespaces/%s/serviceaccounts" % ns, {
            "apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "quiet"},
            "automountServiceAccountToken": False, "imagePullSecrets": [{"name": "registry"}]})
        p = self.s.ok("POST", path, pod("sa-off", serviceAccountName="quiet"))
        self.assertNotIn("volumes", p["spec"])
        self.assertEqual(p["spec"]["imagePullSecrets"], [{"name": "registry"}])
        p = self.s.ok("POST", path, pod("pod-on", serviceAccountName="quiet", automountServiceAccountToken=True))
        self.assertTokenVolume(p, ["c"])
        # the deprecated serviceAccount names the account when serviceAccountName is not set,
        # and always mirrors serviceAccountName on the way out
        p = self.s.ok("POST", path, pod("deprecated", serviceAccount="quiet"))
        self.assertEqual((p["spec"]["serviceAccountName"], p["spec"]["serviceAccount"]), ("quiet", "quiet"))
        p = self.s.ok("POST", path, pod("both", serviceAccountName="default", serviceAccount="quiet"))
        self.assertEqual((p["spec"]["serviceAccountName"], p["spec"]["serviceAccount"]), ("default", "default"))

    def test_a_missing_service_account_is_forbidden(self):
        ns = self.s.namespace("adm-missing")
        path = "/api/v1/namespaces/%s/pods" % ns
        for body, shown in ((pod("p", serviceAccountName="ghost"), "p"),
                            (dict(pod("", serviceAccountName="ghost"), metadata={"generateName": "g-"}), "g-")):
            for query in ("", "?dryRun=All"):
                code, out = self.s.request("POST", path + query, body)
                self.assertEqual(code, 403, out)
                self.assertEqual(out, {
                    "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                    "message": 'pods "%s" is forbidden: error looking up service account %s/ghost: '
                               'serviceaccount "ghost" not found' % (shown, ns),
                    "reason": "Forbidden", "details": {"name": shown, "kind": "pods"}, "code": 403})
        # admission comes before validation: an invalid pod is refused for its account first
        code, out = self.s.request("POST", path, pod("bad", serviceAccountName="ghost", containers=[{"name": "c"}]))
        self.assertEqual(code, 403, out)


@unittest.skipIf(REAL and not CONTROL_PLANE, NEEDS_KCM)
class NamespaceContentTest(ServerTest):
    """The `default` ServiceAccount and kube-root-ca.crt of every namespace."""

    def test_every_namespace_has_them(self):
        for ns in ("default", "kube-system", "kube-public", "kube-node-lease", self.s.namespace("content-new")):
            sa = wait_for("default ServiceAccount in " + ns,
                          lambda ns=ns: self.s.get("/api/v1/namespaces/%s/serviceaccounts/default" % ns))
            self.assertEqual(set(sa), {"kind", "apiVersion", "metadata"})
            cm = wait_for("kube-root-ca.crt in " + ns,
                          lambda ns=ns: self.s.get("/api/v1/namespaces/%s/configmaps/kube-root-ca.crt" % ns))
            self.assertEqual(cm["data"], {"ca.crt": self.s.ca_pem})
            self.assertIn("kube-apiserver", cm["metadata"]["annotations"]["kubernetes.io/description"])

    def test_they_come_back(self):
        ns = self.s.namespace("content-back")
        sa_path = "/api/v1/namespaces/%s/serviceaccounts/default" % ns
        cm_path = "/api/v1/namespaces/%s/configmaps/kube-root-ca.crt" % ns
        old_uid = self.s.get(sa_path)["metadata"]["uid"]
        self.s.ok("DELETE", sa_path)
        wait_for("a new default ServiceAccount",
                 lambda: (self.s.get(sa_path) or {}).get("metadata", {}).get("uid") not in (None, old_uid),
                 lambda: self.s.get(sa_path))
        cm = self.s.get(cm_path)
        cm["data"] = {"ca.crt": "not a certificate", "extra": "x"}
        self.s.ok("PUT", cm_path, cm)
        wait_for("kube-root-ca.crt put right", lambda: (self.s.get(cm_path) or {}).get("data") == {
            "ca.crt": self.s.ca_pem}, lambda: self.s.get(cm_path))
        self.s.ok("DELETE", cm_path)
        wait_for("kube-root-ca.crt back", lambda: (self.s.get(cm_path) or {}).get("data") == {
            "ca.crt": self.s.ca_pem}, lambda: self.s.get(cm_path))


@unittest.skipIf(REAL and not CONTROL_PLANE, NEEDS_KCM)
class TokenRequestTest(ServerTest):
    """serviceaccounts/NAME/token, and what its tokens may do."""

    def test_a_pod_bound_token_is_the_pods_service_account(self):
        ns = self.s.namespace("token-bound")
        p = self.s.ok("POST", "/api/v1/namespaces/%s/pods" % ns, pod("p"))
        uid = p["metadata"]["uid"]
        ref = {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": uid}
        t0 = time.time()
        out = self.s.ok("POST", "/api/v1/namespaces/%s/serviceaccounts/default/token" % ns, {
            "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "spec": {"audiences": None, "expirationSeconds": 3607, "boundObjectRef": ref}}, want=201)
        t1 = time.time()
        self.assertEqual((out["kind"], out["apiVersion"]), ("TokenRequest", "authentication.k8s.io/v1"))
        self.assertEqual((out["metadata"]["name"], out["metadata"]["namespace"]), ("default", ns))
        self.assertEqual(out["spec"]["audiences"], [self.s.url])     # the issuer, as launch.py runs a real one
        self.assertEqual(out["spec"]["expirationSeconds"], 3607)
        self.assertEqual(out["spec"]["boundObjectRef"], {"kind": "Pod", "apiVersion": "v1", "name": "p", "uid": uid})
        # 3607 s from when it was issued, between t0 and t1 (whole seconds)
        expires = calendar.timegm(time.strptime(out["status"]["expirationTimestamp"], "%Y-%m-%dT%H:%M:%SZ"))
        self.assertTrue(int(t0) + 3607 <= expires <= t1 + 3607, (t0, t1, out["status"]["expirationTimestamp"]))
        token = out["status"]["token"]
        claims = claims_of(token)
        sa = self.s.get("/api/v1/namespaces/%s/serviceaccounts/default" % ns)
        self.assertEqual(claims["sub"], "system:serviceaccount:%s:default" % ns)
        self.assertEqual(claims["iss"], self.s.url)
        self.assertEqual(claims["kubernetes.io"]["namespace"], ns)
        self.assertEqual(claims["kubernetes.io"]["pod"], {"name": "p", "uid": uid})
        self.assertEqual(claims["kubernetes.io"]["serviceaccount"], {"name": "default", "uid": sa["metadata"]["uid"]})
        # the kubelet's 3607 s: a year, warning after 3607 s (--service-account-extend-token-expiration)
        self.assertEqual(claims["kubernetes.io"]["warnafter"] - claims["iat"], 3607)
        self.assertEqual(claims["exp"] - claims["iat"], 365 * 24 * 3600)
        code, who = self.s.whoami(token)
        self.assertEqual(code, 201, who)
        info = who["status"]["userInfo"]
        self.assertEqual(info["username"], "system:serviceaccount:%s:default" % ns)
        self.assertEqual(info["uid"], sa["metadata"]["uid"])
        self.assertEqual(info["groups"], ["system:serviceaccounts", "system:serviceaccounts:" + ns,
                                          "system:authenticated"])
        self.assertEqual(info["extra"]["authentication.kubernetes.io/pod-name"], ["p"])
        self.assertEqual(info["extra"]["authentication.kubernetes.io/pod-uid"], [uid])
        self.assertEqual(info["extra"]["authentication.kubernetes.io/credential-id"], ["JTI=" + claims["jti"]])
        # the pod goes, its tokens stop working (a real server may accept it for up to 10 s more)
        self.s.ok("DELETE", "/api/v1/namespaces/%s/pods/p" % ns)
        wait_for("the token refused", *answering(401, lambda: self.s.whoami(token)))

    def test_an_unbound_token(self):
        ns = self.s.namespace("token-plain")
        out = self.s.ok("POST", "/api/v1/namespaces/%s/serviceaccounts/default/token" % ns, {}, want=201)
        self.assertEqual(out["spec"], {"audiences": [self.s.url], "expirationSeconds": 3600, "boundObjectRef": None})
        claims = claims_of(out["status"]["token"])
        self.assertEqual(claims["exp"] - claims["iat"], 3600)
        self.assertEqual(set(claims["kubernetes.io"]), {"namespace", "serviceaccount"})
        self.assertEqual(self.s.whoami(out["status"]["token"])[0], 201)
        # one for another audience is no credential for the API server
        other = self.s.token_for(ns, "default", {"audiences": ["vault"]})
        self.assertEqual(claims_of(other)["aud"], ["vault"])
        code, body = self.s.whoami(other)
        self.assertEqual(code, 401)
        self.assertEqual(body["message"], "Unauthorized")
        # nor is one whose ServiceAccount was deleted (and recreated with another uid)
        token = out["status"]["token"]
        self.s.ok("DELETE", "/api/v1/namespaces/%s/serviceaccounts/default" % ns)
        wait_for("the token refused", *answering(401, lambda: self.s.whoami(token)))

    def test_refusals(self):
        ns = self.s.namespace("token-refused")
        self.s.ok("POST", "/api/v1/namespaces/%s/pods" % ns, pod("p"))
        self.s.ok("POST", "/api/v1/namespaces/%s/serviceaccounts" % ns,
                  {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "other"}})
        base = "/api/v1/namespaces/%s/serviceaccounts/%%s/token" % ns

        def refused(sa, spec, code, message, body=None, path=None):
            got, out = self.s.request("POST", path or base % sa, body if body is not None else {"spec": spec})
            self.assertEqual(got, code, out)
            self.assertEqual(out["message"], message)
            return out

        refused("ghost", {}, 404, 'serviceaccounts "ghost" not found')
        refused("default", {}, 404, 'namespaces "nowhere" not found',
                path="/api/v1/namespaces/nowhere/serviceaccounts/default/token")
        out = refused("default", {"expirationSeconds": 10}, 422,
                      'TokenRequest.authentication.k8s.io "" is invalid: spec.expirationSeconds: Invalid value: 10: '
                      'may not specify a duration less than 10 minutes')
        self.assertEqual(out["details"]["causes"], [{"reason": "FieldValueInvalid", "field": "spec.expirationSeconds",
                                                     "message": "Invalid value: 10: may not specify a duration "
                                                                "less than 10 minutes"}])
        refused("default", None, 422, 'TokenRequest.authentication.k8s.io "default" is invalid: metadata.name: '
                'Invalid value: "x": must match the service account name if specified',
                body={"metadata": {"name": "x"}, "spec": {}})
        refused("default", None, 400, 'Pod in version "v1" cannot be handled as a TokenRequest: converting (v1.Pod) '
                'to (authentication.TokenRequest): unknown conversion', body={"apiVersion": "v1", "kind": "Pod"})
        refused("default", {"boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": "nopod"}}, 404,
                'pods "nopod" not found')
        refused("default", {"boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "x"}}, 409,
                'Operation cannot be fulfilled on Pod "p": the UID in the bound object reference (x) does not match '
                'the UID in record. The object might have been deleted and then recreated')
        refused("other", {"boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": "p"}}, 400,
                'cannot bind token for serviceaccount "other" to pod running with different serviceaccount name.')
        refused("default", {"boundObjectRef": {"apiVersion": "v1", "kind": "ConfigMap", "name": "kube-root-ca.crt"}},
                400, "cannot bind token to object of type /v1, Kind=ConfigMap")
        code, out = self.s.request("GET", base % "default")
        self.assertEqual(code, 405, out)

    def test_tokens_are_authorized_by_the_stored_rbac_objects(self):
        ns = self.s.namespace("token-rbac")
        token = self.s.token_for(ns, "default")
        user = "system:serviceaccount:%s:default" % ns
        pods = "/api/v1/namespaces/%s/pods" % ns
        code, out = self.s.request("GET", pods, token=token)
        self.assertEqual(code, 403)
        self.assertEqual(out["message"], 'pods is forbidden: User "%s" cannot list resource "pods" in API group "" '
                                         'in the namespace "%s"' % (user, ns))
        code, out = self.s.request("GET", RBAC + "/clusterroles", token=token)
        self.assertEqual(code, 403)
        self.assertEqual(out["message"], 'clusterroles.rbac.authorization.k8s.io is forbidden: User "%s" cannot list '
                                         'resource "clusterroles" in API group "rbac.authorization.k8s.io" at the '
                                         'cluster scope' % user)
        self.assertEqual(out["details"], {"group": "rbac.authorization.k8s.io", "kind": "clusterroles"})
        self.assertEqual(self.s.request("GET", "/api", token=token)[0], 200)   # discovery is everyone's
        # a Role and RoleBinding made through the API grant it in the namespace, not beyond
        self.s.ok("POST", RBAC + "/namespaces/%s/roles" % ns, {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "reader"},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "get"]}]})
        self.s.ok("POST", RBAC + "/namespaces/%s/rolebindings" % ns, {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "reader"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reader"},
            "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": ns}]})
        wait_for("list allowed", *answering(200, lambda: self.s.request("GET", pods, token=token)))
        self.assertEqual(self.s.request("GET", "/api/v1/pods", token=token)[0], 403)
        # a ClusterRoleBinding to a group grants it everywhere; its removal takes it back
        self.s.ok("POST", RBAC + "/clusterroles", {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": "token-rbac-nodes"},
            "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["list"]}]})
        self.s.ok("POST", RBAC + "/clusterrolebindings", {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": "token-rbac-nodes"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "token-rbac-nodes"},
            "subjects": [{"kind": "Group", "name": "system:serviceaccounts:" + ns}]})
        wait_for("nodes allowed", *answering(200, lambda: self.s.request("GET", "/api/v1/nodes", token=token)))
        self.s.ok("DELETE", RBAC + "/clusterrolebindings/token-rbac-nodes")
        wait_for("nodes forbidden again",
                 *answering(403, lambda: self.s.request("GET", "/api/v1/nodes", token=token)))
        self.s.ok("DELETE", RBAC + "/clusterroles/token-rbac-nodes")


class KubernetesServiceTest(ServerTest):
    """The `kubernetes` Service and the names the serving certificate holds."""

    def test_the_service_and_info_json(self):
        svc = wait_for("the kubernetes Service", lambda: self.s.get("/api/v1/namespaces/default/services/kubernetes"))
        self.assertEqual(svc["metadata"]["labels"], {"component": "apiserver", "provider": "kubernetes"})
        self.assertEqual(svc["spec"]["clusterIP"], "10.96.0.1")
        self.assertEqual(svc["spec"]["type"], "ClusterIP")
        self.assertEqual(svc["spec"]["ports"], [{"name": "https", "protocol": "TCP", "port": 443,
                                                 "targetPort": self.s.port}])
        self.assertEqual(self.s.info["kubernetesService"], {"ip": "10.96.0.1", "port": 443,
                                                            "target": "127.0.0.1:%d" % self.s.port})
        # Endpoints and EndpointSlices are served; the apiserver's own address, 127.0.0.1, is in the
        # loopback range an Endpoints address may not be in, so neither server writes it there
        for path in ("/api/v1/namespaces/default/endpoints", "/apis/discovery.k8s.io/v1/endpointslices"):
            self.assertEqual(self.s.request("GET", path)[0], 200, path)

    def test_the_certificate_names_the_service(self):
        for name in ("127.0.0.1", "10.96.0.1", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
                     "kubernetes.default.svc.cluster.local"):
            with socket.create_connection(("127.0.0.1", self.s.port), timeout=deadline.scaled(60)) as raw:
                with self.s.ctx.wrap_socket(raw, server_hostname=name) as tls:   # verifies the name
                    self.assertTrue(tls.version())

    def test_the_service_comes_back(self):
        path = "/api/v1/namespaces/default/services/kubernetes"
        wait_for("the kubernetes Service", lambda: self.s.get(path))
        self.s.ok("DELETE", path)
        # kube-apiserver's own controller puts it back within about 10 s
        svc = wait_for("the kubernetes Service back", lambda: self.s.get(path))
        self.assertEqual(svc["spec"]["clusterIP"], "10.96.0.1")


class ApiObjectsTest(ServerTest):
    """Kinds `helm install` writes, as kube-apiserver defaults and validates them."""

    def test_rbac_objects(self):
        def invalid(path, body, message):
            code, out = self.s.request("POST", RBAC + path, body)
            self.assertEqual((code, out.get("message")), (422, message))

        role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "bad"}}
        invalid("/clusterroles", dict(role, rules=[{"apiGroups": [""], "resources": ["pods"]}]),
                'ClusterRole.rbac.authorization.k8s.io "bad" is invalid: rules[0].verbs: Required value: verbs must '
                'contain at least one value')
        invalid("/clusterroles", dict(role, rules=[{"verbs": ["get"]}]),
                'ClusterRole.rbac.authorization.k8s.io "bad" is invalid: [rules[0].apiGroups: Required value: '
                'resource rules must supply at least one api group, rules[0].resources: Required value: resource '
                'rules must supply at least one resource]')
        invalid("/namespaces/default/roles", dict(role, kind="Role", rules=[{"verbs": ["get"],
                                                                           "nonResourceURLs": ["/x"]}]),
                'Role.rbac.authorization.k8s.io "bad" is invalid: rules[0].nonResourceURLs: Invalid value: '
                '[]string{"/x"}: namespaced rules cannot apply to non-resource URLs')
        binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                   "metadata": {"name": "objects-b"}}
        invalid("/clusterrolebindings", dict(binding, roleRef={"kind": "Role", "name": "x"},
                                             subjects=[{"kind": "ServiceAccount", "name": "default"}]),
                'ClusterRoleBinding.rbac.authorization.k8s.io "objects-b" is invalid: [roleRef.kind: Unsupported '
                'value: "Role": supported values: "ClusterRole", subjects[0].namespace: Required value]')
        made = self.s.ok("POST", RBAC + "/clusterrolebindings", dict(
            binding, roleRef={"kind": "ClusterRole", "name": "objects-b"},
            subjects=[{"kind": "User", "name": "u"}, {"kind": "ServiceAccount", "name": "a", "namespace": "b"}]))
        self.assertEqual(made["roleRef"], {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                           "name": "objects-b"})
        self.assertEqual(made["subjects"], [{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "u"},
                                            {"kind": "ServiceAccount", "name": "a", "namespace": "b"}])
        made["roleRef"]["name"] = "other"
        code, out = self.s.request("PUT", RBAC + "/clusterrolebindings/objects-b", made)
        self.assertEqual((code, out["message"]), (
            422, 'ClusterRoleBinding.rbac.authorization.k8s.io "objects-b" is invalid: roleRef: Invalid value: '
                 'rbac.RoleRef{APIGroup:"rbac.authorization.k8s.io", Kind:"ClusterRole", Name:"other"}: '
                 'cannot change roleRef'))
        empty = self.s.ok("POST", RBAC + "/namespaces/default/roles",
                          {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "empty"}})
        self.assertIsNone(empty["rules"])

    def test_deployments(self):
        base = "/apis/apps/v1/namespaces/default/deployments"
        tmpl = {"metadata": {"labels": {"app": "a"}}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
        d = self.s.ok("POST", base, {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
                                     "spec": {"selector": {"matchLabels": {"app": "a"}}, "template": tmpl}})
        self.assertEqual(d["metadata"]["generation"], 1)
        spec = d["spec"]
        self.assertEqual((spec["replicas"], spec["revisionHistoryLimit"], spec["progressDeadlineSeconds"]),
                         (1, 10, 600))
        self.assertEqual(spec["strategy"], {"type": "RollingUpdate",
                                            "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}})
        self.assertEqual(spec["template"]["metadata"], {"creationTimestamp": None, "labels": {"app": "a"}})
        self.assertEqual(spec["template"]["spec"], {
            "containers": [{"name": "c", "image": "busybox", "resources": {}, "terminationMessagePath":
                            "/dev/termination-log", "terminationMessagePolicy": "File", "imagePullPolicy": "Always"}],
            "restartPolicy": "Always", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
            "securityContext": {}, "schedulerName": "default-scheduler"})
        code, out = self.s.request("POST", base, {"apiVersion": "apps/v1", "kind": "Deployment",
                                                  "metadata": {"name": "e"}, "spec": {"template": tmpl}})
        self.assertEqual((code, out["message"]), (422, 'Deployment.apps "e" is invalid: [spec.selector: Required '
                                                       'value, spec.template.metadata.labels: Invalid value: '
                                                       'map[string]string{"app":"a"}: `selector` does not match '
                                                       'template `labels`]'))
        code, out = self.s.request("PATCH", base + "/d", {"spec": {"selector": {"matchLabels": {"x": "y"}}}},
                                   content_type="application/merge-patch+json")
        self.assertEqual(code, 422)
        self.assertIn("spec.selector: Invalid value: v1.LabelSelector{MatchLabels:map[string]string{\"app\":\"a\", "
                      "\"x\":\"y\"}, MatchExpressions:[]v1.LabelSelectorRequirement(nil)}: field is immutable",
                      out["message"])
        self.s.ok("DELETE", base + "/d")

    def test_custom_resource_definitions(self):
        crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
        # the project's CRD is installed (launch.py installs it on a real server)
        mpijobs = self.s.get(crds + "/mpijobs.kubeflow.org")
        self.assertEqual(mpijobs["spec"]["names"]["kind"], "MPIJob")
        self.assertTrue(any(c["type"] == "Established" and c["status"] == "True"
                            for c in mpijobs["status"]["conditions"]))
        code, out = self.s.request("POST", crds, {k: mpijobs[k] for k in ("apiVersion", "kind", "spec")} |
                                   {"metadata": {"name": "mpijobs.kubeflow.org"}})
        self.assertEqual(code, 409, out)
        body = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                "metadata": {"name": "gadgets.example.com"},
                "spec": {"group": "example.com", "scope": "Namespaced",
                         "names": {"plural": "gadgets", "kind": "Gadget"},
                         "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                             "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]}}
        made = self.s.ok("POST", crds, body, want=201)
        self.assertEqual(made["spec"]["names"], {"plural": "gadgets", "singular": "gadget", "kind": "Gadget",
                                                 "listKind": "GadgetList"})
        self.assertEqual(made["spec"]["conversion"], {"strategy": "None"})
        self.assertEqual(made["status"]["storedVersions"], ["v1"])
        wait_for("gadgets established", lambda: any(
            c["type"] == "Established" and c["status"] == "True"
            for c in ((self.s.get(crds + "/gadgets.example.com") or {}).get("status") or {}).get("conditions") or []),
            lambda: self.s.get(crds + "/gadgets.example.com"))
        path = "/apis/example.com/v1/namespaces/default/gadgets"
        gadget = {"apiVersion": "example.com/v1", "kind": "Gadget", "metadata": {"name": "g"}, "spec": {"a": 1}}
        wait_for("gadgets served", *answering(201, lambda: self.s.request("POST", path, gadget)))
        self.assertEqual(self.s.get(path + "/g")["spec"], {"a": 1})
        code, out = self.s.request("POST", crds, dict(body, metadata={"name": "gadgets.example.org"}))
        self.assertEqual((code, out["message"]), (
            422, 'CustomResourceDefinition.apiextensions.k8s.io "gadgets.example.org" is invalid: metadata.name: '
                 'Invalid value: "gadgets.example.org": must be spec.names.plural+"."+spec.group'))
        self.s.ok("DELETE", crds + "/gadgets.example.com")
        wait_for("gadgets gone", *answering(404, lambda: self.s.request("GET", path)))


class RbacFilesTest(ServerTest):
    """launch.py --rbac: the files' ServiceAccount and RBAC objects are stored objects, which the
    operator's token is authorized by."""
    server_args = ("--rbac", DEPLOY)

    def test_stored_and_enforced(self):
        user = "system:serviceaccount:mpijob-system:mpijob-operator"
        self.assertIsNotNone(self.s.get("/api/v1/namespaces/mpijob-system/serviceaccounts/mpijob-operator"))
        crb = self.s.get(RBAC + "/clusterrolebindings/mpijob-operator")
        self.assertEqual(crb["subjects"], [{"kind": "ServiceAccount", "name": "mpijob-operator",
                                            "namespace": "mpijob-system"}])
        with open(os.path.join(self.s.dir, "operator.kubeconfig")) as f:
            op = yaml.safe_load(f)["users"][0]["user"]["token"]
        code, who = self.s.whoami(op)
        self.assertEqual(code, 201, who)
        self.assertEqual(who["status"]["userInfo"]["username"], user)
        self.assertEqual(who["status"]["userInfo"]["groups"], ["system:serviceaccounts",
                                                               "system:serviceaccounts:mpijob-system",
                                                               "system:authenticated"])
        self.assertEqual(self.s.request("GET", "/apis/kubeflow.org/v2beta1/mpijobs", token=op)[0], 200)
        self.assertEqual(self.s.request("GET", "/api/v1/nodes", token=op)[0], 403)
        # so is a token of that ServiceAccount from the TokenRequest API
        sa_token = self.s.token_for("mpijob-system", "mpijob-operator")
        self.assertEqual(self.s.request("GET", "/apis/kubeflow.org/v2beta1/mpijobs", token=sa_token)[0], 200)
        # and the stored objects, not the files, are what counts
        self.s.ok("DELETE", RBAC + "/clusterrolebindings/mpijob-operator")
        for t in (op, sa_token):
            wait_for("mpijobs forbidden", *answering(403, lambda t=t: self.s.request(
                "GET", "/apis/kubeflow.org/v2beta1/mpijobs", token=t)))


class WithoutControlPlaneTest(ServerTest):
    """launch.py without --control-plane: kube-apiserver alone, as launch.py runs it (the
    ServiceAccount admission plugin off, no controller-manager), and the double alike."""
    control_plane = False

    def test_no_service_accounts_but_tokens_for_those_there_are(self):
        ns = "alone"
        self.s.ok("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        time.sleep(1)
        self.assertIsNone(self.s.get("/api/v1/namespaces/%s/serviceaccounts/default" % ns))
        self.assertIsNone(self.s.get("/api/v1/namespaces/%s/configmaps/kube-root-ca.crt" % ns))
        p = self.s.ok("POST", "/api/v1/namespaces/%s/pods" % ns, pod("p", serviceAccountName="ghost"))
        self.assertEqual(p["spec"]["serviceAccountName"], "ghost")
        self.assertNotIn("volumes", p["spec"])
        p = self.s.ok("POST", "/api/v1/namespaces/%s/pods" % ns, pod("q"))
        self.assertNotIn("serviceAccountName", p["spec"])
        self.assertEqual(self.s.request("POST", "/api/v1/namespaces/%s/serviceaccounts/default/token" % ns, {})[0], 404)
        self.s.ok("POST", "/api/v1/namespaces/%s/serviceaccounts" % ns,
                  {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "made"}})
        token = self.s.token_for(ns, "made")
        code, who = self.s.whoami(token)
        self.assertEqual((code, who["status"]["userInfo"]["username"]), (201, "system:serviceaccount:%s:made" % ns))
        self.assertIsNotNone(self.s.get("/api/v1/namespaces/default/services/kubernetes"))


@unittest.skipIf(REAL, DOUBLE_ONLY)
class DoubleControlTest(unittest.TestCase):
    """The double's control API: /_double/reset puts back what the server starts with."""

    def test_reset_restores_what_the_server_starts_with(self):
        s = Server("--rbac", DEPLOY)
        try:
            s.namespace("reset-me")
            s.ok("DELETE", "/api/v1/namespaces/default/serviceaccounts/default")
            s.ok("POST", "/_double/reset", {})
            self.assertIsNone(s.get("/api/v1/namespaces/reset-me"))
            for ns in ("default", "kube-system", "mpijob-system"):
                self.assertIsNotNone(s.get("/api/v1/namespaces/%s/serviceaccounts/default" % ns), ns)
                self.assertIsNotNone(s.get("/api/v1/namespaces/%s/configmaps/kube-root-ca.crt" % ns), ns)
            self.assertIsNotNone(s.get("/api/v1/namespaces/default/services/kubernetes"))
            self.assertIsNotNone(s.get(RBAC + "/clusterrolebindings/mpijob-operator"))
            self.assertIsNotNone(s.get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/mpijobs.kubeflow.org"))
        finally:
            s.stop()


@unittest.skipUnless(os.access(HELM, os.X_OK), "helm is not installed (scripts/install-helm.sh)")
@unittest.skipIf(REAL and not CONTROL_PLANE, NEEDS_KCM)
class HelmTest(ServerTest):
    """helm install and uninstall of charts/mpijob-operator into mpijob-system, and what the
    operator's pods then hold: a token of its ServiceAccount that its RBAC objects authorize."""
    ns = "mpijob-system"

    def helm(self, *args):
        env = dict(os.environ, HOME=self.s.tmp, KUBECONFIG=self.s.kubeconfig,
                   XDG_CACHE_HOME=os.path.join(self.s.tmp, "cache"), XDG_CONFIG_HOME=os.path.join(self.s.tmp, "config"),
                   XDG_DATA_HOME=os.path.join(self.s.tmp, "data"))
        r = subprocess.run([HELM, *args], env=env, capture_output=True, text=True,
                           timeout=deadline.scaled(300))
        self.assertEqual(r.returncode, 0, "helm %s:\n%s%s" % (" ".join(args), r.stdout, r.stderr))
        return r.stdout

    def operator_pod(self):
        """A pod of the operator's Deployment: the one kube-controller-manager's ReplicaSet made, or,
        on the double (which runs no Deployment controller), one made here from the template."""
        if self.s.real:
            items = wait_for("the operator's pods", lambda: (self.s.get(
                "/api/v1/namespaces/%s/pods?labelSelector=app.kubernetes.io/instance%%3Dmpijob-operator" % self.ns)
                or {}).get("items"))
            return items[0]
        d = self.s.get("/apis/apps/v1/namespaces/%s/deployments/mpijob-operator" % self.ns)
        body = {"apiVersion": "v1", "kind": "Pod", "metadata": dict(d["spec"]["template"]["metadata"],
                                                                    generateName="mpijob-operator-"),
                "spec": d["spec"]["template"]["spec"]}
        return self.s.ok("POST", "/api/v1/namespaces/%s/pods" % self.ns, body, want=201)

    def test_install_run_uninstall(self):
        out = self.helm("install", "mpijob-operator", CHART, "-n", self.ns, "--create-namespace")
        self.assertIn("STATUS: deployed", out)
        get = self.s.get
        sa = get("/api/v1/namespaces/%s/serviceaccounts/mpijob-operator" % self.ns)
        self.assertEqual(sa["metadata"]["labels"]["app.kubernetes.io/managed-by"], "Helm")
        with open(os.path.join(CHART, "files", "rbac", "operator-rules.yaml")) as f:
            rules = yaml.safe_load(f)
        cr = get(RBAC + "/clusterroles/mpijob-operator")
        self.assertEqual(cr["rules"], [{k: r[k] for k in ("verbs", "apiGroups", "resources", "resourceNames",
                                                          "nonResourceURLs") if k in r} for r in rules])
        for name in ("mpijob-admin", "mpijob-edit", "mpijob-view"):
            self.assertIsNotNone(get(RBAC + "/clusterroles/" + name), name)
        self.assertIsNotNone(get(RBAC + "/clusterrolebindings/mpijob-operator"))
        self.assertIsNotNone(get(RBAC + "/namespaces/%s/roles/mpijob-operator-leader-election" % self.ns))
        self.assertIsNotNone(get(RBAC + "/namespaces/%s/rolebindings/mpijob-operator-leader-election" % self.ns))
        self.assertIsNotNone(get("/api/v1/namespaces/%s/services/mpijob-operator-metrics" % self.ns))
        d = get("/apis/apps/v1/namespaces/%s/deployments/mpijob-operator" % self.ns)
        self.assertEqual(d["spec"]["template"]["spec"]["serviceAccountName"], "mpijob-operator")
        self.assertEqual(d["spec"]["template"]["spec"]["serviceAccount"], "mpijob-operator")
        releases = get("/api/v1/namespaces/%s/secrets?labelSelector=owner%%3Dhelm" % self.ns)["items"]
        self.assertEqual([r["metadata"]["name"] for r in releases], ["sh.helm.release.v1.mpijob-operator.v1"])

        # The operator's pod, and the token its kubelet would project into it
        p = self.operator_pod()
        self.assertEqual(p["spec"]["serviceAccountName"], "mpijob-operator")
        self.assertTokenVolume(p, ["operator"])
        token = self.s.token_for(self.ns, "mpijob-operator", {
            "expirationSeconds": 3607, "boundObjectRef": {"apiVersion": "v1", "kind": "Pod",
                                                          "name": p["metadata"]["name"], "uid": p["metadata"]["uid"]}})
        user = "system:serviceaccount:%s:mpijob-operator" % self.ns
        self.assertEqual(self.s.whoami(token)[1]["status"]["userInfo"]["username"], user)
        wait_for("mpijobs listed", *answering(200, lambda: self.s.request(
            "GET", "/apis/kubeflow.org/v2beta1/mpijobs", token=token)))
        lease = "/apis/coordination.k8s.io/v1/namespaces/%s/leases/mpijob-operator" % self.ns
        self.assertEqual(self.s.request("GET", lease, token=token)[0], 404)    # allowed, not there yet
        code, out = self.s.request("GET", "/apis/coordination.k8s.io/v1/namespaces/default/leases/x", token=token)
        self.assertEqual(code, 403)
        self.assertEqual(out["message"], 'leases.coordination.k8s.io "x" is forbidden: User "%s" cannot get resource '
                                         '"leases" in API group "coordination.k8s.io" in the namespace "default"'
                                         % user)

        out = self.helm("uninstall", "mpijob-operator", "-n", self.ns)
        self.assertIn("uninstalled", out)
        for path in ("/api/v1/namespaces/%s/serviceaccounts/mpijob-operator" % self.ns,
                     RBAC + "/clusterroles/mpijob-operator", RBAC + "/clusterroles/mpijob-view",
                     RBAC + "/clusterrolebindings/mpijob-operator",
                     RBAC + "/namespaces/%s/roles/mpijob-operator-leader-election" % self.ns,
                     RBAC + "/namespaces/%s/rolebindings/mpijob-operator-leader-election" % self.ns,
                     "/api/v1/namespaces/%s/services/mpijob-operator-metrics" % self.ns,
                     "/apis/apps/v1/namespaces/%s/deployments/mpijob-operator" % self.ns,
                     "/api/v1/namespaces/%s/secrets/sh.helm.release.v1.mpijob-operator.v1" % self.ns):
            self.assertEqual(self.s.request("GET", path)[0], 404, path)
        # the namespace stays, with what the control plane keeps in it
        self.assertIsNotNone(get("/api/v1/namespaces/" + self.ns))
        self.assertIsNotNone(get("/api/v1/namespaces/%s/serviceaccounts/default" % self.ns))
        self.assertNotIn("mpijob-operator", self.helm("list", "-n", self.ns))
        # the operator's token went with its ServiceAccount
        wait_for("the token refused", *answering(401, lambda: self.s.whoami(token)))
        # the CRD stays, as helm never deletes what crds/ installed
        self.assertIsNotNone(get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/mpijobs.kubeflow.org"))


class HelmWithoutCrdsTest(HelmTest):
    """The same on a server without the MPIJob CRD: helm installs it from the chart's crds/."""
    server_args = ("--without-crds",)

    def test_install_run_uninstall(self):
        crd = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/mpijobs.kubeflow.org"
        self.assertEqual(self.s.request("GET", crd)[0], 404)
        self.assertEqual(self.s.request("GET", "/apis/kubeflow.org/v2beta1/mpijobs")[0], 404)
        super().test_install_run_uninstall()
        self.assertEqual(self.s.request("GET", "/apis/kubeflow.org/v2beta1/mpijobs")[0], 200)


if __name__ == "__main__":
    import pyresults
    pyresults.main()
