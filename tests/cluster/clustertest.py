"""What the cluster simulation's tests share (tests/cluster/test_*.py, tests/images/test_images.py):
the API server started by tests/apiserver/launch.py (the double, or real binaries with
KUBEBUILDER_ASSETS), cluster.py as a subprocess (ClusterHarness, ClusterTestCase), a Kubelet in
the test's own process (KubeletTestCase), and waits.

Every wait is a deadline on a condition (tests/support/deadline.py: scaled by
$MPIJOB_TEST_TIME_SCALE, and failing with the last state it saw and what describe() adds, such as
the pod's status and log or cluster.py's log). The deadlines are written for a busy 2-core
machine: they bound how long a broken test hangs, they are not what a test checks.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import unittest
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))

import kubelet as kubelet_mod  # noqa: E402
import netns  # noqa: E402
from deadline import scaled, wait_for  # noqa: E402
from kube import Kube  # noqa: E402
from pods import find_condition  # noqa: E402

API_START = 150.0        # launch.py, up to a ready API server (and controller-manager, scheduler)
STOP = 30.0              # a process asked to stop
LOG_TAIL = 6000          # characters of a log a failure shows


def read_text(path, tail=None):
    """A file's text ("" when it cannot be read), its last `tail` characters when given."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return ""
    return text[-tail:] if tail else text


def start_apiserver(state_dir, *flags):
    """Runs launch.py --background with flags; returns (Kube for its kubeconfig, its pids: the
    launcher first, then what it started, and whether it is a real kube-apiserver). RuntimeError
    with launch.py's output when it does not come up."""
    os.makedirs(state_dir, exist_ok=True)
    log_path = state_dir.rstrip("/") + ".log"
    # The server inherits stderr: a file, so that nothing waits for it to close.
    with open(log_path, "w") as err:
        out = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "apiserver", "launch.py"), "--state-dir",
                              state_dir, "--background"] + list(flags),
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, timeout=scaled(API_START))
    if out.returncode != 0:
        raise RuntimeError("the API server did not start (launch.py exit %d): %s" % (out.returncode, read_text(log_path)))
    with open(os.path.join(state_dir, "pid")) as f:
        pids = [int(x) for x in f.read().split()]
    with open(os.path.join(state_dir, "info.json")) as f:
        real = json.load(f).get("kind") == "real"
    return Kube.from_kubeconfig(os.path.join(state_dir, "kubeconfig")), pids, real


def stop_apiserver(pids):
    """SIGTERM to the launcher, which stops what it started."""
    try:
        os.kill(pids[0], signal.SIGTERM)
    except (OSError, IndexError):
        pass


def stop_process(proc):
    """SIGTERM, then SIGKILL when it has not exited STOP seconds later; returns its exit status."""
    if proc is None or proc.poll() is not None:
        return None if proc is None else proc.returncode
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(scaled(STOP))
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()


def alive(pid):
    """pid runs (and is not a zombie)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def condition(obj, ctype):
    """The condition of that type in obj's status, or None."""
    return find_condition(obj.get("status") or {}, ctype)


# ---- cluster.py as a subprocess ----------------------------------------------------------------

class DeletionFinisher:
    """The kubelet's part in deleting a pod, for tests that run no kubelet. An API server only
    marks a deleted pod that is bound to a node and not finished (deletionTimestamp, the grace
    period): the pod stays until the node's kubelet has stopped its containers and deletes it
    again with gracePeriodSeconds=0. This does that second delete at once."""

    def __init__(self, kube):
        self.kube = kube
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=kube.watch, args=("/api/v1/pods", None, self._event, self.stop_event),
                                       name="deletion-finisher", daemon=True)
        self.thread.start()

    def _event(self, etype, pod):
        meta, spec, st = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
        if etype == "DELETED" or not meta.get("deletionTimestamp") or not spec.get("nodeName"):
            return
        if st.get("phase") in ("Succeeded", "Failed") or meta.get("deletionGracePeriodSeconds") == 0:
            return
        self.kube.finish_pod_deletion(meta["namespace"], meta["name"], meta.get("uid"))

    def stop(self):
        self.stop_event.set()
        self.thread.join(scaled(10))


class ControlPlaneCase(unittest.TestCase):
    """A real control plane (launch.py --control-plane) with cluster.py playing its kubelet,
    started once for the class. cluster_args: cluster.py's arguments beyond the kubeconfig, the
    state folder and the log file. Sets dir, api (launch.py's state folder), k, pids, sim and
    log_path."""

    tmp_prefix = "controlplane-test."
    cluster_args = ("--roles", "kubelet")

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix=cls.tmp_prefix)
        cls.api = os.path.join(cls.dir, "api")
        cls.sim = None
        cls.k, cls.pids, _ = start_apiserver(cls.api, "--control-plane")
        cls.log_path = os.path.join(cls.dir, "cluster.log")
        cls.sim = subprocess.Popen([sys.executable, os.path.join(HERE, "cluster.py"), "--kubeconfig",
                                    os.path.join(cls.api, "kubeconfig"),
                                    "--state-dir", os.path.join(cls.dir, "sim"), "--log-file", cls.log_path]
                                   + list(cls.cluster_args), stdin=subprocess.DEVNULL)

    @classmethod
    def tearDownClass(cls):
        stop_process(cls.sim)
        stop_apiserver(cls.pids)
        shutil.rmtree(cls.dir, ignore_errors=True)


class ClusterHarness:
    """The API server plus cluster.py as a subprocess (and, without the kubelet role, a
    DeletionFinisher), with `nodes` nodes (cluster.py --nodes); stop() removes them."""

    def __init__(self, roles="jobs,gc,scheduler", nodes=1):
        self.dir = tempfile.mkdtemp(prefix="cluster-test.")
        self.api_dir = os.path.join(self.dir, "api")
        self.sim = None
        self.kube, self.api_pids, self.real = start_apiserver(self.api_dir, "--bookmark-interval", "1")
        self.finisher = None if "kubelet" in roles.split(",") else DeletionFinisher(self.kube)
        self.log_path = os.path.join(self.dir, "cluster.log")
        self.sim = subprocess.Popen([sys.executable, os.path.join(HERE, "cluster.py"), "--kubeconfig",
                                     os.path.join(self.api_dir, "kubeconfig"), "--roles", roles,
                                     "--state-dir", os.path.join(self.dir, "sim"), "--log-file", self.log_path,
                                     "--job-pod-backoff", "0.2", "--nodes", str(nodes)],
                                    stdin=subprocess.DEVNULL)

    def stop(self):
        """Stops cluster.py (returns its exit status), the finisher and the API server."""
        if self.finisher is not None:
            self.finisher.stop()
            self.finisher = None
        rc = stop_process(self.sim)
        stop_apiserver(self.api_pids)
        return rc

    def log(self, tail=None):
        return read_text(self.log_path, tail)

    def cleanup(self):
        shutil.rmtree(self.dir, ignore_errors=True)


class ClusterTestCase(unittest.TestCase):
    """A ClusterHarness for the class; its tests play the kubelet (or run its role)."""

    roles = "jobs,gc,scheduler"
    nodes = 1
    WAIT = 60.0

    @classmethod
    def setUpClass(cls):
        cls.h = ClusterHarness(cls.roles, cls.nodes)
        cls.k = cls.h.kube

    @classmethod
    def tearDownClass(cls):
        rc = cls.h.stop()
        log = cls.h.log()
        cls.h.cleanup()
        if rc != 0:
            raise AssertionError("cluster.py exited with %r\n%s" % (rc, log))
        if "Traceback" in log:
            raise AssertionError("cluster.py logged an exception:\n%s" % log)
        if "HTTP 422" in log:
            raise AssertionError("the API server refused a write of cluster.py as invalid:\n%s" % log)

    def wait(self, what, fn, timeout=None, state=None):
        """fn's first truthy answer; past the deadline, a failure with the last answer, state()'s
        text when given (what the object looked like) and the end of cluster.py's log."""
        def describe():
            text = ""
            if state is not None:
                try:
                    text = "--- last state ---\n%s\n" % state()
                except Exception as e:  # the state must not hide the timeout
                    text = "(reading the last state failed: %r)\n" % e
            return text + "--- cluster log (end) ---\n" + self.h.log(LOG_TAIL)
        return wait_for(what, fn, timeout or self.WAIT, interval=0.05, describe=describe)


# ---- a Kubelet in the test's process -----------------------------------------------------------

class KubeletTestCase(unittest.TestCase):
    """The API server double and a Kubelet, in this process, for the class; a namespace per
    test (ns()), and waits on pods that show the pod's status and log when they fail."""

    WAIT = 60.0
    ns_prefix = "t"

    @classmethod
    def kubelet_options(cls):
        """Keyword arguments of the Kubelet (images=..., image_bin=...)."""
        return {}

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="kubelet-test-")
        cls.kube, cls.api_pids, _ = start_apiserver(os.path.join(cls.tmp, "api"))
        cls.state = os.path.join(cls.tmp, "kubelet")
        cls.prefix = cls.ns_prefix + uuid.uuid4().hex[:5]
        cls.kubelet = kubelet_mod.Kubelet(cls.kube, "cluster.local", cls.state, prefix=cls.prefix,
                                          pod_cidr=netns.free_cidr(), **cls.kubelet_options())
        cls.stop = threading.Event()
        cls.kubelet.start()
        cls.thread = threading.Thread(target=cls.kubelet.run, args=(cls.stop,), daemon=True)
        cls.thread.start()

    @classmethod
    def tearDownClass(cls):
        cls.stop.set()
        cls.thread.join(timeout=scaled(STOP))
        cls.kubelet.cleanup()
        stop_apiserver(cls.api_pids)
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def ns(self):
        """The test's own namespace, created (an API server refuses objects in a namespace that
        does not exist)."""
        name = ("%s-%s" % (self.ns_prefix, self._testMethodName.replace("_", "-")[5:][:40])).strip("-")
        self.kube.ensure_namespace(name)
        return name

    def create(self, ns, obj, resource="pods"):
        return self.kube.create("/api/v1/namespaces/%s/%s" % (ns, resource), obj)

    def pod(self, ns, name):
        return self.kube.get("/api/v1/namespaces/%s/pods/%s" % (ns, name))

    def logs(self, ns, name, container="main"):
        return read_text(self.kubelet.log_path(ns, name, container))

    def describe_pod(self, ns, name):
        p = self.pod(ns, name)
        return "pod %s/%s status: %s\nlog: %s" % (ns, name, json.dumps((p or {}).get("status"))[:3000],
                                                  self.logs(ns, name)[-LOG_TAIL:])

    def wait(self, what, fn, timeout=None, describe=None):
        return wait_for(what, fn, timeout or self.WAIT, describe=describe)

    def wait_pod(self, ns, name, pred, what, timeout=None):
        """The pod once pred(pod) holds."""
        return self.wait("pod %s/%s %s" % (ns, name, what),
                         lambda: (lambda p: p if p is not None and pred(p) else None)(self.pod(ns, name)),
                         timeout, describe=lambda: self.describe_pod(ns, name))

    def wait_phase(self, ns, name, phase, timeout=None):
        return self.wait_pod(ns, name, lambda p: (p.get("status") or {}).get("phase") == phase,
                             "to reach " + phase, timeout)

    def wait_gone(self, ns, name, timeout=None):
        self.wait("pod %s/%s deleted" % (ns, name), lambda: self.pod(ns, name) is None, timeout,
                  describe=lambda: self.describe_pod(ns, name))

    @staticmethod
    def cond(p, ctype):
        c = condition(p, ctype)
        return c["status"] if c else None

    @staticmethod
    def terminated(p, i=0):
        return p["status"]["containerStatuses"][i]["state"].get("terminated")

    @staticmethod
    def waiting(p, i=0):
        return (((p.get("status") or {}).get("containerStatuses") or [{}])[i].get("state") or {}).get("waiting") or {}
