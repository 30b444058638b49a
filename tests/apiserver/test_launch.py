#!/usr/bin/env python3
"""launch.py stops on SIGTERM, leaves no process behind and never keeps its caller's output open:
with the double, and with real etcd and kube-apiserver when KUBEBUILDER_ASSETS names them.

    python3 tests/apiserver/test_launch.py
"""

import os
import select
import shutil
import signal
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


if __name__ == "__main__":
    import pyresults
    pyresults.main()
