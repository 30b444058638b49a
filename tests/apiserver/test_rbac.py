#!/usr/bin/env python3
"""Unit tests of the double's RBAC authorizer (rbac.py) against Kubernetes' rules."""
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rbac  # noqa: E402

SA = "system:serviceaccount:ops:op"

ROLES = """
apiVersion: v1
kind: ServiceAccount
metadata: {name: op, namespace: ops}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: cluster}
rules:
  - apiGroups: [""]
    resources: ["pods"]
    verbs: ["list", "watch"]
  - apiGroups: ["kubeflow.org"]
    resources: ["mpijobs/status"]
    verbs: ["update"]
  - apiGroups: ["apps"]
    resources: ["*"]
    verbs: ["get"]
  - apiGroups: [""]
    resources: ["configmaps"]
    resourceNames: ["only-this"]
    verbs: ["get", "update", "list"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: cluster}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster}
subjects: [{kind: ServiceAccount, name: op, namespace: ops}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: creator}
rules:
  - apiGroups: [""]
    resources: ["pods"]
    verbs: ["create"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: creator, namespace: team-a}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: creator}
subjects: [{kind: ServiceAccount, name: op, namespace: ops}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: leases, namespace: ops}
rules:
  - apiGroups: ["coordination.k8s.io"]
    resources: ["leases"]
    verbs: ["get", "update"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: leases, namespace: ops}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: leases}
subjects: [{kind: Group, name: "system:serviceaccounts:ops"}]
"""


class RbacTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        fd, cls.path = tempfile.mkstemp(suffix=".yaml")
        with os.fdopen(fd, "w") as f:
            f.write(ROLES)
        cls.authz = rbac.Authorizer([cls.path])

    @classmethod
    def tearDownClass(cls):
        os.unlink(cls.path)

    def allowed(self, method, path, query=None, user=SA):
        return self.authz.allowed(user, rbac.request_info(method, path, query or {}))

    def test_request_info_verbs(self):
        cases = [
            ("GET", "/api/v1/pods", {}, "list", "", "pods", "", "", ""),
            ("GET", "/api/v1/pods", {"watch": ["true"]}, "watch", "", "pods", "", "", ""),
            ("GET", "/api/v1/watch/namespaces/a/pods", {}, "watch", "", "pods", "", "a", ""),
            ("GET", "/api/v1/namespaces/a/pods/p", {}, "get", "", "pods", "", "a", "p"),
            ("POST", "/api/v1/namespaces/a/pods", {}, "create", "", "pods", "", "a", ""),
            ("PUT", "/apis/kubeflow.org/v2beta1/namespaces/a/mpijobs/j/status", {}, "update", "kubeflow.org",
             "mpijobs", "status", "a", "j"),
            ("PATCH", "/apis/batch/v1/namespaces/a/jobs/j", {}, "patch", "batch", "jobs", "", "a", "j"),
            ("DELETE", "/api/v1/namespaces/a/pods/p", {}, "delete", "", "pods", "", "a", "p"),
            ("DELETE", "/api/v1/namespaces/a/pods", {}, "deletecollection", "", "pods", "", "a", ""),
            ("GET", "/api/v1/namespaces/a", {}, "get", "", "namespaces", "", "a", "a"),
        ]
        for method, path, q, verb, group, res, sub, ns, name in cases:
            i = rbac.request_info(method, path, q)
            self.assertTrue(i.resource_request, path)
            self.assertEqual((i.verb, i.group, i.resource, i.subresource, i.namespace, i.name),
                             (verb, group, res, sub, ns, name), "%s %s" % (method, path))
        for path in ("/version", "/apis", "/apis/kubeflow.org/v2beta1", "/api/v1", "/healthz"):
            self.assertFalse(rbac.request_info("GET", path, {}).resource_request, path)

    def test_cluster_binding_grants_everywhere(self):
        self.assertTrue(self.allowed("GET", "/api/v1/pods"))
        self.assertTrue(self.allowed("GET", "/api/v1/namespaces/x/pods", {"watch": ["1"]}))
        self.assertFalse(self.allowed("GET", "/api/v1/namespaces/x/pods/p"), "get was not granted")
        self.assertFalse(self.allowed("DELETE", "/api/v1/namespaces/x/pods/p"))

    def test_subresources_are_separate(self):
        self.assertTrue(self.allowed("PUT", "/apis/kubeflow.org/v2beta1/namespaces/a/mpijobs/j/status"))
        self.assertFalse(self.allowed("PUT", "/apis/kubeflow.org/v2beta1/namespaces/a/mpijobs/j"))
        self.assertFalse(self.allowed("PUT", "/apis/kubeflow.org/v2beta1/namespaces/a/mpijobs/j/scale"))

    def test_wildcard_resources(self):
        self.assertTrue(self.allowed("GET", "/apis/apps/v1/namespaces/a/deployments/d"))
        self.assertFalse(self.allowed("GET", "/apis/batch/v1/namespaces/a/jobs/d"), "other group")

    def test_resource_names(self):
        self.assertTrue(self.allowed("GET", "/api/v1/namespaces/a/configmaps/only-this"))
        self.assertFalse(self.allowed("GET", "/api/v1/namespaces/a/configmaps/other"))
        self.assertFalse(self.allowed("GET", "/api/v1/namespaces/a/configmaps"), "a list names nothing")

    def test_role_binding_scope(self):
        self.assertTrue(self.allowed("POST", "/api/v1/namespaces/team-a/pods"))
        self.assertFalse(self.allowed("POST", "/api/v1/namespaces/team-b/pods"))
        self.assertFalse(self.allowed("POST", "/api/v1/pods"), "not at the cluster scope")

    def test_group_subjects_and_roles(self):
        self.assertTrue(self.allowed("GET", "/apis/coordination.k8s.io/v1/namespaces/ops/leases/l"))
        self.assertFalse(self.allowed("POST", "/apis/coordination.k8s.io/v1/namespaces/ops/leases"))
        self.assertFalse(self.allowed("GET", "/apis/coordination.k8s.io/v1/namespaces/other/leases/l"))
        self.assertFalse(self.allowed("GET", "/apis/coordination.k8s.io/v1/namespaces/ops/leases/l",
                                      user="system:serviceaccount:other:op"))

    def test_other_users_get_nothing(self):
        self.assertFalse(self.allowed("GET", "/api/v1/pods", user="system:serviceaccount:ops:someone"))

    def test_discovery_is_open(self):
        for path in ("/api", "/api/v1", "/apis", "/apis/kubeflow.org/v2beta1", "/version"):
            self.assertTrue(self.allowed("GET", path, user="system:serviceaccount:x:y"), path)
        self.assertFalse(self.allowed("POST", "/apis", user="system:serviceaccount:x:y"))

    def test_owner_finalizers(self):
        self.assertFalse(self.authz.owner_finalizer_allowed(SA, "a", "kubeflow.org", "mpijobs", "j"))

    def test_forbidden_message_matches_kube_apiserver(self):
        i = rbac.request_info("GET", "/api/v1/namespaces/a/pods/p", {})
        self.assertEqual(self.authz.forbidden_message(SA, i),
                         'pods "p" is forbidden: User "system:serviceaccount:ops:op" cannot get resource "pods" '
                         'in API group "" in the namespace "a"')
        i = rbac.request_info("GET", "/apis/batch/v1/jobs", {})
        self.assertEqual(self.authz.forbidden_message(SA, i),
                         'jobs.batch is forbidden: User "system:serviceaccount:ops:op" cannot list resource "jobs" '
                         'in API group "batch" at the cluster scope')

    def test_service_account_user(self):
        self.assertEqual(rbac.service_account_user([self.path]), SA)

    def test_objects_instead_of_files(self):
        """The double authorizes over the RBAC objects it stores: the same decisions from them."""
        authz = rbac.Authorizer(docs=rbac.manifest_objects([self.path]))
        self.assertEqual([d["kind"] for d in rbac.manifest_objects([self.path])],
                         ["ServiceAccount", "ClusterRole", "ClusterRoleBinding", "ClusterRole", "RoleBinding", "Role",
                          "RoleBinding"])
        for method, path, want in (("GET", "/api/v1/pods", True), ("POST", "/api/v1/namespaces/team-a/pods", True),
                                   ("POST", "/api/v1/namespaces/team-b/pods", False),
                                   ("PUT", "/apis/coordination.k8s.io/v1/namespaces/ops/leases/l", True)):
            info = rbac.request_info(method, path, {})
            self.assertEqual(authz.allowed(SA, info), want, path)
            self.assertEqual(self.authz.allowed(SA, info), want, path)

    def test_everyone_may_ask_who_they_are(self):
        info = rbac.request_info("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", {})
        self.assertTrue(rbac.Authorizer().allowed("system:serviceaccount:x:y", info))
        info = rbac.request_info("GET", "/apis/authentication.k8s.io/v1/selfsubjectreviews", {})
        self.assertFalse(rbac.Authorizer().allowed("system:serviceaccount:x:y", info))


if __name__ == "__main__":
    unittest.main()
