"""Tests of the garbage collector of cluster.py, and of the client's watch loop (kube.py).

    python3 -m unittest discover -s tests/cluster -p 'test_*.py'
"""

import contextlib
import json
import os
import sys
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from clustertest import STOP, ClusterTestCase, scaled  # noqa: E402
import kube as kube_mod  # noqa: E402
from kube import Informer, Kube, KubeError  # noqa: E402
from test_jobcontroller import JOBS, PODS, JobTestCase, job_manifest  # noqa: E402

CMS = "/api/v1/namespaces/default/configmaps"
MPIJOBS = "/apis/kubeflow.org/v2beta1/namespaces/default/mpijobs"
LEASES = "/apis/coordination.k8s.io/v1/namespaces/default/leases"


def owned(name, owner, controller=True):
    ref = {"apiVersion": owner.get("apiVersion"), "kind": owner.get("kind"), "name": owner["metadata"]["name"],
           "uid": owner["metadata"]["uid"]}
    if controller:
        ref.update(controller=True, blockOwnerDeletion=True)
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "ownerReferences": [ref]},
            "data": {"k": "v"}}


def mpijob(name):
    tmpl = {"spec": {"containers": [{"name": "main", "image": "mpijob-worker:latest"}]}}
    return {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "metadata": {"name": name},
            "spec": {"slotsPerWorker": 1, "mpiReplicaSpecs": {"Launcher": {"replicas": 1, "template": tmpl},
                                                               "Worker": {"replicas": 1, "template": tmpl}}}}


class GarbageCollectorTest(JobTestCase):
    def gone(self, path):
        """Waits until path answers 404; on failure shows the object's metadata and phase (its
        finalizers, deletionTimestamp and grace period say who still holds it)."""
        def state():
            obj = self.k.get(path)
            if obj is None:
                return "gone"
            return json.dumps({"metadata": obj.get("metadata"), "nodeName": (obj.get("spec") or {}).get("nodeName"),
                               "phase": (obj.get("status") or {}).get("phase")}, indent=1, sort_keys=True)
        return self.wait("%s deleted" % path, lambda: self.k.get(path) is None, state=state)

    def test_deleting_job_deletes_its_pods(self):
        self.k.create(JOBS, job_manifest("doomed", parallelism=2, completions=2))
        pods = self.wait_pods("doomed", 2)
        self.assertTrue(self.k.delete(JOBS + "/doomed"))
        for p in pods:
            self.gone(PODS + "/" + p["metadata"]["name"])
        self.assertIn("gc: deleted pod default/%s" % pods[0]["metadata"]["name"], self.h.log())

    def test_deleting_mpijob_deletes_configmap(self):
        owner = self.k.create(MPIJOBS, mpijob("mj"))
        self.k.create(CMS, owned("mj-config", owner))
        keep = self.k.create(MPIJOBS, mpijob("mj-keep"))
        self.k.create(CMS, owned("mj-keep-config", keep))
        time.sleep(1.5)
        self.assertIsNotNone(self.k.get(CMS + "/mj-config"), "an owner that exists keeps its dependents")
        self.k.delete(MPIJOBS + "/mj")
        self.gone(CMS + "/mj-config")
        self.assertIsNotNone(self.k.get(CMS + "/mj-keep-config"))

    def test_owner_of_an_unwatched_kind(self):
        lease = self.k.create(LEASES, {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                                       "metadata": {"name": "holder"}, "spec": {"holderIdentity": "x"}})
        self.k.create(CMS, owned("leased", lease))
        time.sleep(1.5)
        self.assertIsNotNone(self.k.get(CMS + "/leased"))
        self.k.delete(LEASES + "/holder")
        self.gone(CMS + "/leased")

    def test_recreated_owner_with_another_uid_is_not_the_owner(self):
        first = self.k.create(MPIJOBS, mpijob("again"))
        self.k.delete(MPIJOBS + "/again")
        self.k.create(MPIJOBS, mpijob("again"))
        self.k.create(CMS, owned("again-config", first))
        self.gone(CMS + "/again-config")

    def test_non_controller_owners_all_must_be_gone(self):
        a = self.k.create(MPIJOBS, mpijob("own-a"))
        b = self.k.create(MPIJOBS, mpijob("own-b"))
        cm = owned("shared", a, controller=False)
        cm["metadata"]["ownerReferences"] += owned("x", b, controller=False)["metadata"]["ownerReferences"]
        self.k.create(CMS, cm)
        self.k.delete(MPIJOBS + "/own-a")
        time.sleep(2.0)
        self.assertIsNotNone(self.k.get(CMS + "/shared"), "one owner is left")
        self.k.delete(MPIJOBS + "/own-b")
        self.gone(CMS + "/shared")

    def test_unknown_owner_kind_is_left_alone(self):
        cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "alien", "ownerReferences": [
            {"apiVersion": "example.com/v1", "kind": "Thing", "name": "t", "uid": "00000000-0000-0000-0000-000000000001",
             "controller": True}]}}
        self.k.create(CMS, cm)
        time.sleep(2.0)
        self.assertIsNotNone(self.k.get(CMS + "/alien"))


class WatchTest(ClusterTestCase):
    """kube.Kube.watch against the double's faults (dropped streams, compaction, a restart), or
    against a real kube-apiserver, which has no fault injection, a watch from an expired version."""

    roles = "gc"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        for ns in ("watched", "paged", "expired"):
            cls.k.ensure_namespace(ns)

    @classmethod
    def tearDownClass(cls):
        # The faults make the gc role's own watches fail for a moment: its log is not checked.
        cls.h.stop()
        cls.h.cleanup()

    @contextlib.contextmanager
    def watching(self, path, rv=None):
        """Kube.watch(path, rv) in a thread for the with block; yields the list of (type, name)
        it reports. The watch must return once stopped."""
        events = []
        stop = threading.Event()
        t = threading.Thread(target=self.k.watch, args=(path, rv, lambda etype, obj: events.append(
            (etype, obj["metadata"]["name"])), stop))
        t.start()
        try:
            yield events
        finally:
            stop.set()
            t.join(scaled(STOP))
        self.assertFalse(t.is_alive(), "watch returns once stop is set")

    def test_resume_relist_and_restart(self):
        if self.h.real:
            self.skipTest("a real kube-apiserver cannot be told to drop watch streams, expire every "
                          "resourceVersion or restart (the double's /_double/fault); "
                          "test_expired_version_relists covers the relist there")
        path = "/api/v1/namespaces/watched/configmaps"
        self.k.create(path, {"metadata": {"name": "a"}})
        with self.watching(path) as events:
            self.wait("initial ADDED", lambda: ("ADDED", "a") in events)
            self.k.request("POST", "/_double/fault", {"dropWatches": True})
            self.k.create(path, {"metadata": {"name": "b"}})
            self.wait("b after a dropped watch", lambda: ("ADDED", "b") in events)
            # Expire every version and drop the stream: the loop must list again and report the
            # deletion it missed.
            self.k.request("POST", "/_double/fault", {"blockWatches": True})
            self.k.request("POST", "/_double/fault", {"dropWatches": True})
            self.k.delete(path + "/a")
            self.k.request("POST", "/_double/fault", {"compact": True})
            self.k.request("POST", "/_double/fault", {"blockWatches": False})
            self.wait("a reported deleted", lambda: ("DELETED", "a") in events)
            self.k.request("POST", "/_double/fault", {"restart": {"downMs": 600}})
            time.sleep(0.3)
            self.wait("server back", lambda: self._try_create(path, "c"))
            self.wait("c after a restart", lambda: ("ADDED", "c") in events)

    def test_expired_version_relists(self):
        """A watch from a resourceVersion the server no longer holds gets 410 Gone: the loop lists
        again, reports what is there, and then follows changes."""
        path = "/api/v1/namespaces/expired/configmaps"
        self.k.create(path, {"metadata": {"name": "a"}})
        if not self.h.real:
            self.k.request("POST", "/_double/fault", {"compact": True})
        with self.watching(path, "1") as events:
            self.wait("a listed after 410 Gone", lambda: ("ADDED", "a") in events)
            self.k.create(path, {"metadata": {"name": "b"}})
            self.wait("b", lambda: ("ADDED", "b") in events)
            self.k.delete(path + "/a")
            self.wait("a deleted", lambda: ("DELETED", "a") in events)

    def _try_create(self, path, name):
        try:
            self.k.create(path, {"metadata": {"name": name}})
            return True
        except (OSError, KubeError):
            return False

    def test_errors(self):
        self.assertIsNone(self.k.get("/api/v1/namespaces/default/configmaps/missing"))
        self.assertFalse(self.k.delete("/api/v1/namespaces/default/configmaps/missing"))
        self.k.create(CMS, {"metadata": {"name": "dup"}})
        with self.assertRaises(KubeError) as cm:
            self.k.create(CMS, {"metadata": {"name": "dup"}})
        self.assertEqual(cm.exception.code, 409)
        self.assertEqual(cm.exception.reason, "AlreadyExists")
        items, rv = self.k.list(CMS, "missing-label=1")
        self.assertEqual(items, [])
        self.assertTrue(rv)

    def test_list_pages(self):
        path = "/api/v1/namespaces/paged/configmaps"
        for i in range(7):
            self.k.create(path, {"metadata": {"name": "p%d" % i, "labels": {"set": "p"}}})
        import kube
        old = kube.LIST_PAGE
        kube.LIST_PAGE = 3
        try:
            items, _ = self.k.list(path, "set=p")
        finally:
            kube.LIST_PAGE = old
        self.assertEqual(sorted(i["metadata"]["name"] for i in items), ["p%d" % i for i in range(7)])

    def test_kubeconfig_errors(self):
        bad = os.path.join(self.h.dir, "bad-kubeconfig")
        with open(bad, "w") as f:
            f.write("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\n")
        with self.assertRaises(ValueError):
            Kube.from_kubeconfig(bad)


class InformerCacheTest(unittest.TestCase):
    """kube.Informer's cache against the order in which a controller's own writes and the watch's
    events can reach it (no server: events and notes are fed by hand)."""

    @staticmethod
    def job(uid, rv, name="j"):
        return {"metadata": {"namespace": "default", "name": name, "uid": uid, "resourceVersion": str(rv)}}

    def test_a_write_noted_after_the_deletion_is_not_cached(self):
        # The Job controller's status write is answered (rv 5), the Job is deleted (rv 6) and the
        # watch delivers that before the controller notes its answer: the Job must stay gone.
        inf = Informer(None, "/apis/batch/v1/jobs")
        inf._event("ADDED", self.job("u1", 4))
        inf._event("DELETED", self.job("u1", 6))
        inf.note(self.job("u1", 5))
        self.assertIsNone(inf.get("default", "j"))
        inf._event("MODIFIED", self.job("u1", 5))
        self.assertIsNone(inf.get("default", "j"), "a late event of a deleted object")
        inf._event("ADDED", self.job("u2", 7))
        self.assertEqual(inf.get("default", "j")["metadata"]["uid"], "u2", "a new object of that name")

    def test_a_deletion_removes_a_newer_noted_version(self):
        # A relist that no longer finds the object reports it deleted as last watched (rv 8),
        # older than the controller's own write before the deletion (rv 9).
        inf = Informer(None, "/apis/batch/v1/jobs")
        inf.note(self.job("u1", 9))
        inf._event("DELETED", self.job("u1", 8))
        self.assertIsNone(inf.get("default", "j"))

    def test_a_deletion_of_an_older_object_keeps_the_newer_one(self):
        inf = Informer(None, "/apis/batch/v1/jobs")
        inf.note(self.job("u2", 9))
        inf._event("DELETED", self.job("u1", 8))
        self.assertEqual(inf.get("default", "j")["metadata"]["uid"], "u2")

    def test_older_events_are_dropped_and_tombstones_are_bounded(self):
        inf = Informer(None, "/apis/batch/v1/jobs")
        inf.note(self.job("u1", 9))
        inf._event("MODIFIED", self.job("u1", 8))
        self.assertEqual(inf.get("default", "j")["metadata"]["resourceVersion"], "9")
        old = kube_mod.TOMBSTONES
        kube_mod.TOMBSTONES = 2
        try:
            for i in range(3):
                inf._event("DELETED", self.job("d%d" % i, 10 + i, name="d%d" % i))
        finally:
            kube_mod.TOMBSTONES = old
        self.assertEqual(list(inf.deleted), ["d1", "d2"])


if __name__ == "__main__":
    unittest.main()
