"""Tests of the Deployment and ReplicaSet controllers of cluster.py (deployments.py).

The class starts the API server (the double, or a real kube-apiserver with KUBEBUILDER_ASSETS) and
`cluster.py --roles deployments,gc` once; the test plays the kubelet by patching pod status. Where
the server serves no apps/v1 (the double), Deployments and ReplicaSets are served through the
double's `POST /_double/crd`, without the real server's defaults and validation.

    python3 -m unittest discover -s tests/cluster -p 'test_deployments.py'
"""

import os
import shutil
import subprocess
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from apitime import now_rfc3339  # noqa: E402
from deployments import SAFE_ALPHABET, template_hash  # noqa: E402
from clustertest import ClusterTestCase, condition, scaled  # noqa: E402
from test_jobcontroller import PODS  # noqa: E402

APPS = "/apis/apps/v1"
DEPLOYS = APPS + "/namespaces/default/deployments"
RSS = APPS + "/namespaces/default/replicasets"
HASH = "[%s]{10}" % SAFE_ALPHABET
SUFFIX = "[a-z0-9]{5}"


def deployment(name, replicas=2, **spec):
    body = {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name, "tier": "web"}, "annotations": {"note": "x"}},
                         "spec": {"containers": [{"name": "main", "image": "busybox", "command": ["sleep", "3600"]}]}}}
    body.update(spec)
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": "default"},
            "spec": body}


class DeploymentTestCase(ClusterTestCase):
    roles = "deployments,gc"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        code, _ = cls.k.request("GET", APPS)
        if code == 404 and not cls.h.real:
            for kind, plural, short in (("Deployment", "deployments", "deploy"), ("ReplicaSet", "replicasets", "rs")):
                code, body = cls.k.request("POST", "/_double/crd", {
                    "group": "apps", "versions": ["v1"], "plural": plural, "kind": kind, "singular": kind.lower(),
                    "namespaced": True, "status": True, "shortNames": [short]})
                if code != 200:
                    raise RuntimeError("registering %s with the double: %s %s" % (plural, code, body))

    # helpers
    def deploy(self, name):
        return self.k.get(DEPLOYS + "/" + name)

    def replicasets(self, name):
        """The Deployment's ReplicaSets, oldest first."""
        d = self.deploy(name)
        items = self.k.list(RSS)[0]
        owned = [rs for rs in items if any(r.get("uid") == d["metadata"]["uid"] and r.get("controller")
                                           for r in rs["metadata"].get("ownerReferences") or [])]
        return sorted(owned, key=lambda rs: int(rs["metadata"]["annotations"]["deployment.kubernetes.io/revision"]))

    def pods(self, app):
        return self.k.list(PODS, "app=" + app)[0]

    def live(self, app):
        return [p for p in self.pods(app) if not p["metadata"].get("deletionTimestamp")
                and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]

    def wait_live(self, app, n):
        return self.wait("%d live pods of %s" % (n, app),
                        lambda: (lambda ps: ps if len(ps) == n else None)(self.live(app)))

    def make_ready(self, pod):
        self.k.patch_status(PODS + "/" + pod["metadata"]["name"], {"status": {"phase": "Running", "conditions": [
            {"type": "Ready", "status": "True", "lastTransitionTime": now_rfc3339()},
            {"type": "PodScheduled", "status": "True"}]}})

    def ready_all(self, app):
        """Plays the kubelet: every live pod of app not yet Ready becomes Ready."""
        for p in self.live(app):
            c = condition(p, "Ready")
            if not c or c.get("status") != "True":
                try:
                    self.make_ready(p)
                except Exception:
                    pass        # deleted meanwhile
        return True

    def settled(self, name, replicas=None, keep_ready=True):
        """Waits until the rollout of name is complete (all pods Ready); returns the Deployment."""
        def check():
            if keep_ready:
                self.ready_all(name)
            d = self.deploy(name)
            st, want = d.get("status") or {}, d["spec"].get("replicas", 1) if replicas is None else replicas
            c = condition(d, "Progressing")
            if (st.get("observedGeneration") == d["metadata"]["generation"] and st.get("replicas", 0) == want
                    and st.get("updatedReplicas", 0) == want and st.get("availableReplicas", 0) == want
                    and c and c["reason"] == "NewReplicaSetAvailable"):
                return d
            return None
        return self.wait("deployment %s to roll out" % name, check, timeout=120)


class DeploymentControllerTest(DeploymentTestCase):
    def test_creates_replicaset_and_pods(self):
        d = self.k.create(DEPLOYS, deployment("web"))
        rs = self.wait("a replicaset", lambda: self.replicasets("web"))[0]
        d = self.deploy("web")
        h = template_hash(d["spec"]["template"])
        meta = rs["metadata"]
        self.assertRegex(meta["name"], "^web-%s$" % HASH)
        self.assertEqual(meta["name"], "web-" + h)
        self.assertEqual(meta["labels"], {"app": "web", "tier": "web", "pod-template-hash": h})
        self.assertEqual(rs["spec"]["selector"]["matchLabels"], {"app": "web", "pod-template-hash": h})
        self.assertEqual(rs["spec"]["template"]["metadata"]["labels"], meta["labels"])
        self.assertEqual(rs["spec"]["replicas"], 2)
        self.assertEqual(meta["ownerReferences"], [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web",
                                                    "uid": d["metadata"]["uid"], "controller": True,
                                                    "blockOwnerDeletion": True}])
        ann = meta["annotations"]
        self.assertEqual(ann["deployment.kubernetes.io/revision"], "1")
        self.assertEqual(ann["deployment.kubernetes.io/desired-replicas"], "2")
        self.assertEqual(ann["deployment.kubernetes.io/max-replicas"], "3")     # maxSurge 25% of 2, rounded up
        pods = self.wait_live("web", 2)
        for p in pods:
            pm = p["metadata"]
            self.assertRegex(pm["name"], "^web-%s-%s$" % (h, SUFFIX))
            self.assertEqual(pm["labels"], meta["labels"])
            self.assertEqual(pm.get("annotations", {}).get("note"), "x")
            self.assertEqual(pm["ownerReferences"], [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                                      "name": meta["name"], "uid": meta["uid"], "controller": True,
                                                      "blockOwnerDeletion": True}])
            self.assertEqual(p["spec"]["containers"][0]["command"], ["sleep", "3600"])
        self.wait("revision annotation", lambda: (self.deploy("web")["metadata"].get("annotations") or {})
                 .get("deployment.kubernetes.io/revision") == "1")
        # Not ready yet: not available.
        d = self.wait("status replicas=2", lambda: (lambda d: d if (d.get("status") or {}).get("replicas") == 2
                                                   else None)(self.deploy("web")))
        st = d["status"]
        self.assertEqual(st.get("updatedReplicas"), 2)
        self.assertFalse(st.get("readyReplicas"))
        self.assertFalse(st.get("availableReplicas"))
        self.assertEqual(st.get("unavailableReplicas"), 2)
        av = condition(d, "Available")
        self.assertEqual((av["status"], av["reason"], av["message"]),
                         ("False", "MinimumReplicasUnavailable", "Deployment does not have minimum availability."))
        pr = condition(d, "Progressing")
        self.assertEqual(pr["status"], "True")
        self.assertIn(pr["reason"], ("NewReplicaSetCreated", "ReplicaSetUpdated"))
        # Still exactly two pods: no duplicate from a stale cache.
        time.sleep(1.5)
        self.assertEqual(len(self.pods("web")), 2)
        self.assertIn("deployment default/web: created replicaset %s" % meta["name"], self.h.log())
        self.assertIn("replicaset default/%s: created pod %s" % (meta["name"], pods[0]["metadata"]["name"]),
                      self.h.log())

    def test_status_when_pods_become_ready(self):
        self.k.create(DEPLOYS, deployment("ready"))
        pods = self.wait_live("ready", 2)
        self.make_ready(pods[0])
        d = self.wait("readyReplicas=1", lambda: (lambda d: d if (d.get("status") or {}).get("readyReplicas") == 1
                                                 else None)(self.deploy("ready")))
        self.assertEqual(condition(d, "Available")["status"], "False")     # maxUnavailable 25% of 2 is 0
        self.make_ready(pods[1])
        d = self.settled("ready", keep_ready=False)
        st = d["status"]
        for k in ("replicas", "updatedReplicas", "readyReplicas", "availableReplicas"):
            self.assertEqual(st.get(k), 2, k)
        self.assertFalse(st.get("unavailableReplicas"))
        self.assertEqual(st["observedGeneration"], d["metadata"]["generation"])
        rs = self.replicasets("ready")[0]
        self.assertEqual([c["type"] for c in st["conditions"]], ["Available", "Progressing"])
        av, pr = st["conditions"]
        self.assertEqual((av["status"], av["reason"], av["message"]),
                         ("True", "MinimumReplicasAvailable", "Deployment has minimum availability."))
        self.assertEqual((pr["status"], pr["reason"], pr["message"]),
                         ("True", "NewReplicaSetAvailable",
                          'ReplicaSet "%s" has successfully progressed.' % rs["metadata"]["name"]))
        for c in (av, pr):
            self.assertTrue(c["lastUpdateTime"] and c["lastTransitionTime"])
        rst = self.wait("replicaset status", lambda: (lambda st: st if st.get("availableReplicas") == 2 else None)(
            self.replicasets("ready")[0].get("status") or {}))
        self.assertEqual({k: rst.get(k) for k in ("replicas", "fullyLabeledReplicas", "readyReplicas",
                                                   "availableReplicas")},
                         {"replicas": 2, "fullyLabeledReplicas": 2, "readyReplicas": 2, "availableReplicas": 2})
        self.assertEqual(rst["observedGeneration"], rs["metadata"]["generation"])

    def test_min_ready_seconds(self):
        self.k.create(DEPLOYS, deployment("slow", replicas=1, minReadySeconds=3))
        pod = self.wait_live("slow", 1)[0]
        self.make_ready(pod)
        d = self.wait("readyReplicas=1", lambda: (lambda d: d if (d.get("status") or {}).get("readyReplicas") == 1
                                                 else None)(self.deploy("slow")))
        self.assertFalse(d["status"].get("availableReplicas"))
        self.assertEqual(self.replicasets("slow")[0]["spec"].get("minReadySeconds"), 3)
        d = self.settled("slow", keep_ready=False)
        self.assertEqual(condition(d, "Available")["status"], "True")

    def test_scale_up_and_down(self):
        self.k.create(DEPLOYS, deployment("scale", replicas=1))
        first = self.wait_live("scale", 1)[0]
        self.make_ready(first)
        self.settled("scale", keep_ready=False)
        self.k.patch(DEPLOYS + "/scale", {"spec": {"replicas": 3}})
        self.wait_live("scale", 3)
        rss = self.replicasets("scale")
        self.assertEqual(len(rss), 1)
        ann = rss[0]["metadata"]["annotations"]
        self.assertEqual((rss[0]["spec"]["replicas"], ann["deployment.kubernetes.io/desired-replicas"],
                          ann["deployment.kubernetes.io/max-replicas"]), (3, "3", "4"))
        # Down to one: the two pods that are not ready go, the ready one stays.
        self.k.patch(DEPLOYS + "/scale", {"spec": {"replicas": 1}})
        left = self.wait_live("scale", 1)
        self.assertEqual(left[0]["metadata"]["name"], first["metadata"]["name"])
        d = self.settled("scale", replicas=1, keep_ready=False)
        self.assertEqual(d["status"]["replicas"], 1)
        self.assertIn("deployment default/scale: scaled down replicaset %s from 3 to 1"
                      % rss[0]["metadata"]["name"], self.h.log())

    def test_template_change_rolls_out(self):
        self.k.create(DEPLOYS, deployment("roll"))
        self.settled("roll")
        first = self.replicasets("roll")[0]
        self.k.patch(DEPLOYS + "/roll", {"spec": {"template": {"metadata": {"annotations": {"note": "y"}}}}})
        self.wait("a second replicaset", lambda: (lambda rss: rss if len(rss) == 2 else None)(
            self.replicasets("roll")))
        d = self.settled("roll")
        old, new = self.replicasets("roll")
        self.assertEqual(old["metadata"]["uid"], first["metadata"]["uid"])
        self.assertEqual(old["spec"]["replicas"], 0)
        self.assertEqual(new["spec"]["replicas"], 2)
        self.assertEqual(new["metadata"]["annotations"]["deployment.kubernetes.io/revision"], "2")
        self.assertEqual(new["metadata"]["name"], "roll-" + template_hash(d["spec"]["template"]))
        self.assertEqual(d["metadata"]["annotations"]["deployment.kubernetes.io/revision"], "2")
        self.assertEqual(condition(d, "Progressing")["message"],
                         'ReplicaSet "%s" has successfully progressed.' % new["metadata"]["name"])
        pods = self.wait("old pods gone", lambda: (lambda ps: ps if len(ps) == 2 and all(
            p["metadata"]["ownerReferences"][0]["uid"] == new["metadata"]["uid"] for p in ps) else None)(
            self.live("roll")))
        self.assertTrue(all(p["metadata"]["annotations"]["note"] == "y" for p in pods))
        # A rollback to the first template moves the first ReplicaSet to revision 3.
        self.k.patch(DEPLOYS + "/roll", {"spec": {"template": {"metadata": {"annotations": {"note": "x"}}}}})
        self.settled("roll")
        rss = self.replicasets("roll")
        self.assertEqual([rs["metadata"]["uid"] for rs in rss], [new["metadata"]["uid"], first["metadata"]["uid"]])
        self.assertEqual(rss[1]["metadata"]["annotations"].get("deployment.kubernetes.io/revision-history"), "1")
        self.assertEqual(rss[1]["spec"]["replicas"], 2)
        self.assertEqual(rss[0]["spec"]["replicas"], 0)

    def test_recreate(self):
        self.k.create(DEPLOYS, deployment("rec", strategy={"type": "Recreate"}))
        self.settled("rec")
        self.k.patch(DEPLOYS + "/rec", {"spec": {"template": {"metadata": {"annotations": {"note": "y"}}}}})
        self.settled("rec")
        old, new = self.replicasets("rec")
        self.assertEqual((old["spec"]["replicas"], new["spec"]["replicas"]), (0, 2))
        self.assertEqual(new["metadata"]["annotations"]["deployment.kubernetes.io/max-replicas"], "2")
        log = self.h.log()
        # The old pods were gone before the new ReplicaSet was made.
        self.assertLess(log.index("scaled down replicaset %s from 2 to 0" % old["metadata"]["name"]),
                        log.index("created replicaset %s" % new["metadata"]["name"]))

    def test_revision_history_limit(self):
        self.k.create(DEPLOYS, deployment("hist", replicas=1, revisionHistoryLimit=1))
        self.settled("hist")
        first = self.replicasets("hist")[0]
        for note in ("2", "3"):
            self.k.patch(DEPLOYS + "/hist", {"spec": {"template": {"metadata": {"annotations": {"note": note}}}}})
            self.settled("hist")
        rss = self.wait("one old replicaset kept", lambda: (lambda rss: rss if len(rss) == 2 else None)(
            self.replicasets("hist")))
        self.assertNotIn(first["metadata"]["uid"], [rs["metadata"]["uid"] for rs in rss])
        self.assertEqual([rs["metadata"]["annotations"]["deployment.kubernetes.io/revision"] for rs in rss], ["2", "3"])

    def test_deleted_or_failed_pod_is_replaced(self):
        self.k.create(DEPLOYS, deployment("repl"))
        pods = self.wait_live("repl", 2)
        gone = pods[0]["metadata"]["name"]
        self.k.delete(PODS + "/" + gone)
        after = self.wait("a replacement", lambda: (lambda ps: ps if len(ps) == 2 and gone not in
                                                   [p["metadata"]["name"] for p in ps] else None)(self.live("repl")))
        # A Failed pod (an evicted one) is replaced; like the real controller, it is left in place.
        failed = after[0]["metadata"]["name"]
        self.k.patch_status(PODS + "/" + failed, {"status": {"phase": "Failed", "reason": "Evicted"}})
        self.wait("a replacement of the failed pod", lambda: (lambda ps: ps if len(ps) == 2 and failed not in
                                                             [p["metadata"]["name"] for p in ps] else None)(
            self.live("repl")))
        self.assertIsNotNone(self.k.get(PODS + "/" + failed))
        self.settled("repl")
        self.assertEqual(self.replicasets("repl")[0]["status"]["replicas"], 2)

    def test_paused(self):
        self.k.create(DEPLOYS, deployment("held"))
        self.settled("held")
        self.k.patch(DEPLOYS + "/held", {"spec": {"paused": True}})
        d = self.wait("Progressing DeploymentPaused", lambda: (lambda d: d if (condition(d, "Progressing") or {})
                                                              .get("reason") == "DeploymentPaused" else None)(
            self.deploy("held")))
        c = condition(d, "Progressing")
        self.assertEqual((c["status"], c["message"]), ("Unknown", "Deployment is paused"))
        self.k.patch(DEPLOYS + "/held", {"spec": {"template": {"metadata": {"annotations": {"note": "y"}}}}})
        time.sleep(2.0)
        self.assertEqual(len(self.replicasets("held")), 1, "no new ReplicaSet while paused")
        self.assertTrue(all(p["metadata"]["annotations"]["note"] == "x" for p in self.live("held")))
        # A change of size still applies, as with kube-controller-manager.
        self.k.patch(DEPLOYS + "/held", {"spec": {"replicas": 3}})
        self.wait_live("held", 3)
        self.assertEqual(len(self.replicasets("held")), 1)
        self.k.patch(DEPLOYS + "/held", {"spec": {"paused": False}})
        d = self.settled("held", replicas=3)
        self.assertEqual(len(self.replicasets("held")), 2)
        self.assertIn("deployment default/held: resumed", self.h.log())

    def test_hash_collision(self):
        """The name of the new ReplicaSet is taken by someone else's: status.collisionCount goes up and
        the next name is used, as kube-controller-manager does."""
        self.k.create(DEPLOYS, deployment("clash", replicas=1, paused=True))
        d = self.deploy("clash")
        squatter = "clash-" + template_hash(d["spec"]["template"])
        self.k.create(RSS, {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": squatter},
                            "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "other"}},
                                     "template": {"metadata": {"labels": {"app": "other"}},
                                                  "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}})
        self.k.patch(DEPLOYS + "/clash", {"spec": {"paused": False}})
        d = self.settled("clash")
        self.assertEqual(d["status"].get("collisionCount"), 1)
        rss = self.replicasets("clash")
        self.assertEqual([rs["metadata"]["name"] for rs in rss], ["clash-" + template_hash(d["spec"]["template"], 1)])
        other = self.k.get(RSS + "/" + squatter)
        self.assertFalse(other["metadata"].get("ownerReferences"))
        self.assertEqual(self.pods("other"), [])

    def test_conflicting_writes_are_retried(self):
        if self.h.real:
            self.skipTest("needs the double's fault injection (a real server's conflicts are covered by "
                          "test_hash_collision)")
        self.k.create(DEPLOYS, deployment("conf", replicas=1))
        self.settled("conf")
        code, body = self.k.request("POST", "/_double/fault", {"failNext": {"count": 3, "code": 409, "verb": "patch",
                                                                             "resource": "replicasets"}})
        self.assertEqual(code, 200, body)
        code, body = self.k.request("POST", "/_double/fault", {"failNext": {"count": 2, "code": 409, "verb": "patch",
                                                                             "resource": "deployments"}})
        self.assertEqual(code, 200, body)
        # Through an update (PUT), so that the faults hit the controller's patches only.
        d = self.deploy("conf")
        d["spec"]["replicas"] = 3
        code, body = self.k.request("PUT", DEPLOYS + "/conf", d)
        self.assertEqual(code, 200, body)
        self.settled("conf", replicas=3)
        self.assertIn("retrying on the next pass", self.h.log())
        self.k.request("POST", "/_double/fault", {"failNext": {"count": 0}})

    def test_bad_object_is_left_alone(self):
        if self.h.real:
            self.skipTest("a real server refuses the object")
        self.k.create(DEPLOYS, deployment("bad", replicas="three"))
        warning = "deployment default/bad: spec.replicas: 'three' is not an integer"
        self.wait("the warning", lambda: warning in self.h.log())
        self.k.create(DEPLOYS, deployment("good", replicas=1))
        self.settled("good")
        time.sleep(1.5)
        self.assertEqual(self.h.log().count(warning), 1, "said once")
        self.k.delete(DEPLOYS + "/bad")

    def test_deleting_replicaset_deletes_its_pods(self):
        rs = self.k.create(RSS, {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "bare"},
                                 "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "bare"}},
                                          "template": {"metadata": {"labels": {"app": "bare"}}, "spec": {
                                              "containers": [{"name": "c", "image": "busybox"}]}}}})
        pods = self.wait_live("bare", 2)
        for p in pods:
            self.assertRegex(p["metadata"]["name"], "^bare-%s$" % SUFFIX)
            self.assertEqual(p["metadata"]["ownerReferences"][0]["uid"], rs["metadata"]["uid"])
        self.wait("replicaset status", lambda: (self.k.get(RSS + "/bare").get("status") or {}).get("replicas") == 2)
        self.k.delete(RSS + "/bare")
        self.wait("its pods deleted", lambda: not self.pods("bare"))
        self.assertIn("gc: deleted pod default/%s" % pods[0]["metadata"]["name"], self.h.log())

    def test_deleting_deployment_deletes_replicasets_and_pods(self):
        self.k.create(DEPLOYS, deployment("doomed"))
        self.wait_live("doomed", 2)
        rs = self.replicasets("doomed")[0]
        self.k.delete(DEPLOYS + "/doomed")
        self.wait("the replicaset deleted", lambda: self.k.get(RSS + "/" + rs["metadata"]["name"]) is None)
        self.wait("its pods deleted", lambda: not self.pods("doomed"))

    @unittest.skipUnless(shutil.which("kubectl"), "no kubectl")
    def test_kubectl_rollout_status(self):
        self.k.create(DEPLOYS, deployment("kc"))
        self.settled("kc")
        kubeconfig = os.path.join(self.h.api_dir, "kubeconfig")
        out = subprocess.run(["kubectl", "--kubeconfig", kubeconfig, "rollout", "status", "deployment/kc",
                              "--timeout=%ds" % scaled(60)], capture_output=True, text=True, timeout=scaled(120))
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn('deployment "kc" successfully rolled out', out.stdout)
        out = subprocess.run(["kubectl", "--kubeconfig", kubeconfig, "get", "deploy", "kc", "--no-headers", "-o",
                              "custom-columns=R:.status.readyReplicas,U:.status.updatedReplicas,"
                              "A:.status.availableReplicas"], capture_output=True, text=True, timeout=scaled(60))
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(out.stdout.split(), ["2", "2", "2"])
        out = subprocess.run(["kubectl", "--kubeconfig", kubeconfig, "get", "deploy", "kc"],
                             capture_output=True, text=True, timeout=scaled(60))
        self.assertEqual(out.returncode, 0, out.stderr)
        header, row = out.stdout.splitlines()[:2]
        if "READY" not in header.split():
            self.skipTest("the server's table of deployments has no READY column")
        self.assertEqual(header.split()[:4], ["NAME", "READY", "UP-TO-DATE", "AVAILABLE"])
        self.assertEqual(row.split()[:4], ["kc", "2/2", "2", "2"])


if __name__ == "__main__":
    unittest.main()
