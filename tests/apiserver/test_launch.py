#!/usr/bin/env python3
"""launch.py stops on SIGTERM, leaves no process behind and never keeps its caller's output open:
with the double, and with real etcd and kube-apiserver when KUBEBUILDER_ASSETS names them. The
ports it gives real servers lie below the kernel's ephemeral range, and a server whose port was
taken before it bound it is started again on another.

    python3 tests/apiserver/test_launch.py
"""

import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
LAUNCH = os.path.join(HERE, "launch.py")
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "support"))
from deadline import Deadline  # noqa: E402  (tests/support/deadline.py)

# Deadlines (seconds, scaled) that catch a hang, not measures: launch.py gives its children 5 s.
READY_WITHIN = 180.0   # for launch.py to be ready
STOP_WITHIN = 60.0     # from SIGTERM to every process gone and the output closed


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is gone as far as its work goes; its parent reaps it
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


class LaunchStops(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="launch-test-")
        self.addCleanup(shutil.rmtree, self.dir, True)

    def start(self):
        """launch.py in the foreground, its stdout and stderr a pipe of ours; returns once ready."""
        p = subprocess.Popen([sys.executable, LAUNCH, "--state-dir", self.dir], stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
        self.addCleanup(self.kill_all, p)
        deadline = Deadline(READY_WITHIN)
        while not os.path.exists(os.path.join(self.dir, "ready")):
            if p.poll() is not None:
                self.fail("launch.py exited before it was ready: %s" % p.stdout.read()[-2000:])
            self.assertFalse(deadline.passed(), "not ready after %.0f s (pid %d still runs)" % (
                deadline.seconds, p.pid))
            time.sleep(0.05)
        with open(os.path.join(self.dir, "pid")) as f:
            pids = [int(x) for x in f.read().split()]
        return p, pids

    def kill_all(self, p):
        try:
            with open(os.path.join(self.dir, "pid")) as f:
                pids = [int(x) for x in f.read().split()]
        except OSError:
            pids = []
        for pid in [p.pid] + pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        p.wait()
        p.stdout.close()

    def wait_stopped(self, p, pids, t0):
        """Reads the pipe to its end and waits for every process; fails past STOP_WITHIN, naming
        what still runs."""
        deadline = Deadline(STOP_WITHIN)
        fd = p.stdout.fileno()
        while True:
            self.assertFalse(deadline.passed(), "the output pipe is still open %.0f s after SIGTERM (alive: %s)" % (
                deadline.seconds, [x for x in [p.pid] + pids if alive(x)]))
            ready, _, _ = select.select([fd], [], [], deadline.left())
            if ready and not os.read(fd, 65536):
                break
        while p.poll() is None:
            self.assertFalse(deadline.passed(), "launch.py still runs %.0f s after SIGTERM" % deadline.seconds)
            time.sleep(0.05)
        for pid in pids:
            while alive(pid):
                self.assertFalse(deadline.passed(), "process %d outlived launch.py by %.0f s" % (
                    pid, deadline.seconds))
                time.sleep(0.05)
        return time.monotonic() - t0

    def test_sigterm_stops_everything_and_closes_the_output(self):
        p, pids = self.start()
        t0 = time.monotonic()
        p.send_signal(signal.SIGTERM)
        took = self.wait_stopped(p, pids, t0)
        self.assertIn(p.returncode, (0, -signal.SIGTERM), "exit status %s" % p.returncode)
        print("stopped %d process(es) in %.2f s" % (len(pids), took))

    def test_a_burst_of_sigterms_still_stops_everything(self):
        p, pids = self.start()
        t0 = time.monotonic()
        for _ in range(5):
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                break
            time.sleep(0.01)
        self.wait_stopped(p, pids, t0)


# A server as etcd and kube-apiserver behave: it binds 127.0.0.1:PORT and serves (saying so: the
# test's port is served by the test itself too), or says what Go says and exits 1.
FAKE_SERVER = """
import socket, sys, time
s = socket.socket()
try:
    s.bind(("127.0.0.1", int(sys.argv[1])))
except OSError:
    print("listen tcp 127.0.0.1:%s: bind: address already in use" % sys.argv[1], flush=True)
    sys.exit(1)
s.listen(8)
print("serving on %s" % sys.argv[1], flush=True)
while True:
    c, _ = s.accept()
    c.close()
"""


class Ports(unittest.TestCase):
    def setUp(self):
        sys.path.insert(0, HERE)
        import launch
        self.launch = launch
        self.dir = tempfile.mkdtemp(prefix="launch-ports-")
        self.addCleanup(shutil.rmtree, self.dir, True)

    def test_free_ports_lie_below_the_ephemeral_range_and_are_free(self):
        low, _ = self.launch.ephemeral_ports()
        for _ in range(50):
            port = self.launch.free_port()
            self.assertLess(port, low)
            with socket.socket() as s:
                s.bind(("127.0.0.1", port))

    def test_a_server_whose_port_was_taken_starts_again_on_another(self):
        taken = socket.socket()
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        self.addCleanup(taken.close)
        ports = [taken.getsockname()[1]]
        real_free_port = self.launch.free_port
        self.launch.free_port = lambda: ports.pop(0) if ports else real_free_port()
        self.addCleanup(setattr, self.launch, "free_port", real_free_port)

        class Args:
            state_dir = self.dir
        real = self.launch.Real(Args, "etcd", "kube-apiserver")
        self.addCleanup(real.stop)

        def start(port):
            p = real.spawn([sys.executable, "-c", FAKE_SERVER, str(port)], "fake.log")
            return lambda: "serving on %d" % port in real.said(p)

        port, = real.serve_on_free_ports(1, start, "the fake server", time.monotonic() + READY_WITHIN)
        self.assertNotEqual(port, taken.getsockname()[1])
        self.assertEqual(len(real.procs), 1, "the server that exited is no longer supervised")
        self.assertIsNone(real.procs[0].poll())
        with open(os.path.join(self.dir, "fake.log")) as f:
            self.assertIn("address already in use", f.read())

    def test_a_server_that_fails_otherwise_is_not_started_again(self):
        class Args:
            state_dir = self.dir
        real = self.launch.Real(Args, "etcd", "kube-apiserver")
        self.addCleanup(real.stop)
        starts = []

        def start(port):
            starts.append(port)
            real.spawn([sys.executable, "-c", "import sys; print('bad flag'); sys.exit(2)"], "bad.log")
            return lambda: False
        with self.assertRaises(RuntimeError) as e:
            real.serve_on_free_ports(1, start, "the bad server", time.monotonic() + READY_WITHIN)
        self.assertNotIsInstance(e.exception, self.launch.PortTaken)
        self.assertIn("exited with status 2", str(e.exception))
        self.assertEqual(len(starts), 1)

    def test_rbac_usage_is_read_as_the_audit_log_grows_each_record_once(self):
        """The operator's requests reach the usage log while the server runs, each once, a record
        cut in half by the read counted when its end arrives; other users' and refused requests
        not at all."""
        import json

        class Args:
            state_dir = self.dir
            user = []
        real = self.launch.Real(Args, "etcd", "kube-apiserver")
        usage = os.path.join(self.dir, "usage.log")
        os.environ["MPIJOB_TEST_RBAC_USAGE"] = usage
        self.addCleanup(os.environ.pop, "MPIJOB_TEST_RBAC_USAGE", None)
        real.audit_flags("system:serviceaccount:mpi-operator:mpi-operator")

        def record(verb, resource, user="system:serviceaccount:mpi-operator:mpi-operator", decision="allow",
                   group=""):
            return json.dumps({"user": {"username": user}, "verb": verb,
                               "annotations": {"authorization.k8s.io/decision": decision},
                               "objectRef": {"resource": resource, "apiGroup": group, "namespace": "ns"}}) + "\n"

        audit = os.path.join(self.dir, "audit.log")
        real.write_usage()                          # no audit log yet: nothing, no error
        self.assertFalse(os.path.exists(usage))
        with open(audit, "w") as f:
            f.write(record("create", "pods") + record("get", "pods", user="admin")
                    + record("delete", "pods", decision="forbid"))
            half = record("delete", "jobs", group="batch")
            f.write(half[:20])
        real.write_usage()
        with open(audit, "a") as f:
            f.write(half[20:] + record("list", "services"))
        real.write_usage()
        real.write_usage()
        with open(usage) as f:
            self.assertEqual(f.read().splitlines(),
                             ['create "" pods ns', "delete batch jobs ns", 'list "" services ns'])


if __name__ == "__main__":
    import pyresults
    pyresults.main()
