"""The real-node tier's own machinery that needs no Kubernetes binaries (tests/cluster/realnode/nodes.py):
kubelets start one at a time on this machine, across runs as within one; two runs choosing a
network at once get two (tests/cluster/netns.py's reservations); and a daemon that exits is
reported with its reason on the first line.

    python3 -m unittest discover -s tests/cluster -p 'test_realnode.py' -v
"""

import os
import socket
import subprocess
import sys
import tempfile
import threading
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "realnode"))

import netns  # noqa: E402
import nodes  # noqa: E402
from deadline import scaled  # noqa: E402


class DeviceSocketOwnerTest(unittest.TestCase):
    def test_a_socket_this_process_bound_is_found_and_gone_once_closed(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "kubelet.sock")
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.bind(path)
            s.listen(1)
            self.assertTrue(nodes.owns_unix_socket(os.getpid(), path))
            self.assertFalse(nodes.owns_unix_socket(os.getpid(), path + ".other"))
            s.close()
            self.assertFalse(nodes.owns_unix_socket(os.getpid(), path))

    def test_another_process_binding_the_path_is_not_us(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "kubelet.sock")
            child = subprocess.Popen(
                [sys.executable, "-c", "import socket,sys; s=socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); "
                 "s.listen(1); print('bound', flush=True); sys.stdin.read()", path],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            try:
                self.assertEqual(child.stdout.readline().strip(), "bound")
                self.assertTrue(nodes.owns_unix_socket(child.pid, path))
                self.assertFalse(nodes.owns_unix_socket(os.getpid(), path))
            finally:
                child.stdin.close()
                child.wait()
                child.stdout.close()

    def test_a_process_that_is_gone_owns_nothing(self):
        p = subprocess.Popen(["true"])
        p.wait()
        self.assertFalse(nodes.owns_unix_socket(p.pid, nodes.DEVICE_PLUGIN_SOCKET))


class KubeletStartLockTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()
        self.saved = nodes.RUNS_DIR, nodes.KUBELET_START_LOCK
        nodes.RUNS_DIR = self.dir
        nodes.KUBELET_START_LOCK = os.path.join(self.dir, "kubelet-start.lock")

    def tearDown(self):
        nodes.RUNS_DIR, nodes.KUBELET_START_LOCK = self.saved
        subprocess.run(["rm", "-rf", self.dir])

    def other_run_can_take_it(self):
        """What a second run on this machine finds: flock(1) without waiting, in another process."""
        return subprocess.run(["flock", "--nonblock", nodes.KUBELET_START_LOCK, "true"]).returncode == 0

    def test_held_while_a_kubelet_starts_and_free_after(self):
        with nodes.kubelet_start_lock():
            self.assertFalse(self.other_run_can_take_it())
        self.assertTrue(self.other_run_can_take_it())

    def test_freed_when_the_start_fails(self):
        with self.assertRaises(nodes.NodeError):
            with nodes.kubelet_start_lock():
                raise nodes.NodeError("kubelet exited")
        self.assertTrue(self.other_run_can_take_it())

    def test_waits_for_another_run_holding_it(self):
        # another run holds the lock until told to let go; ours is taken only after that
        holder = subprocess.Popen(["flock", nodes.KUBELET_START_LOCK, "sh", "-c", "echo held; read line"],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        taken = threading.Event()

        def take():
            with nodes.kubelet_start_lock():
                taken.set()
        t = threading.Thread(target=take, daemon=True)
        try:
            self.assertEqual(holder.stdout.readline().strip(), "held")
            t.start()
            self.assertFalse(taken.is_set(), "taken while another run held it")
            holder.stdin.write("go\n")
            holder.stdin.flush()
            self.assertEqual(holder.wait(), 0)
            self.assertTrue(taken.wait(scaled(60)), "not taken after the other run let go")
            t.join()
        finally:
            if holder.poll() is None:
                holder.kill()
                holder.wait()
            holder.stdin.close()
            holder.stdout.close()


class CidrReservationTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()
        self.saved = netns.RESERVATIONS
        netns.RESERVATIONS = self.dir
        # candidates no route of this machine uses (the tests' own networks are 10.200 to 10.250)
        self.candidates = ["10.%d.0.0/16" % i for i in range(180, 184)
                           if not netns._routes_overlapping(netns.ipaddress.ip_network("10.%d.0.0/16" % i))]
        if len(self.candidates) < 2:
            self.skipTest("10.180.0.0/14 is routed on this machine")

    def tearDown(self):
        for c in self.candidates:
            netns.release_cidr(c)
        netns.RESERVATIONS = self.saved
        subprocess.run(["rm", "-rf", self.dir])

    def other_process_reserves(self, cidr):
        """What another run finds: reserve_cidr in a process of its own."""
        code = ("import sys; sys.path.insert(0, %r); import netns; netns.RESERVATIONS = %r; "
                "print(netns.reserve_cidr(%r))" % (HERE, self.dir, cidr))
        return subprocess.run([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                              check=True).stdout.strip() == "True"

    def test_a_choice_is_held_until_released(self):
        first = netns.free_cidr(self.candidates)
        self.assertEqual(first, self.candidates[0])
        self.assertFalse(self.other_process_reserves(first))
        self.assertFalse(netns.reserve_cidr(first), "a second network of this process took it too")
        self.assertEqual(netns.free_cidr(self.candidates), self.candidates[1])
        netns.release_cidr(first)
        self.assertTrue(self.other_process_reserves(first))
        self.assertTrue(netns.reserve_cidr(first))

    def test_two_processes_choosing_at_once_get_two(self):
        code = ("import sys; sys.path.insert(0, %r); import netns; netns.RESERVATIONS = %r; "
                "print(netns.free_cidr(%r), flush=True); sys.stdin.read()" % (HERE, self.dir, self.candidates))
        procs = [subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  text=True) for _ in range(2)]
        try:
            got = [p.stdout.readline().strip() for p in procs]
            self.assertEqual(sorted(got), sorted(self.candidates[:2]), got)
        finally:
            for p in procs:
                p.stdin.close()
                p.wait()
                p.stdout.close()

    def test_a_routed_network_is_never_chosen(self):
        routed = [r for r in ("10.%d.0.0/16" % i for i in range(0, 256))
                  if netns._routes_overlapping(netns.ipaddress.ip_network(r))]
        if not routed:
            self.skipTest("no 10.x/16 is routed on this machine")
        self.assertFalse(netns.reserve_cidr(routed[0]))


class DaemonReasonTest(unittest.TestCase):
    def daemon(self, text):
        f = tempfile.NamedTemporaryFile("w", suffix=".log", delete=False)
        f.write(text)
        f.close()
        self.addCleanup(os.unlink, f.name)
        return nodes.Daemon("kubelet", ["kubelet"], f.name)

    def test_the_last_error_line_is_the_reason(self):
        d = self.daemon(
            'I1207 04:32:30.100000  100 server.go:1]  "Starting"\n'
            'E1207 04:32:30.200000  100 manager.go:2] "Failed to register" err="transient"\n'
            'E1207 04:32:31.500000  100 server.go:3] "Failed to listen and serve" '
            'err="listen unix /var/lib/kubelet/device-plugins/kubelet.sock: bind: address already in use"\n'
            'I1207 04:32:31.510000  100 server.go:4] "Shutting down"\n')
        self.assertIn("address already in use", d.reason())
        self.assertTrue(d.reason().startswith("E1207 04:32:31.5"), d.reason())

    def test_a_fatal_or_panic_line_counts(self):
        self.assertTrue(self.daemon("I1207 one\nF1207 04:00:00.0 1 x.go:1] boom\nI1207 two\n").reason().startswith("F1207"))
        self.assertEqual(self.daemon("starting\npanic: runtime error\n\ngoroutine 1\n").reason(), "panic: runtime error")
        self.assertIn("level=error", self.daemon('time="t" level=error msg="no config"\nok\n').reason())

    def test_without_an_error_the_last_line_and_an_empty_log_says_so(self):
        self.assertEqual(self.daemon("I1207 first\nI1207 last\n").reason(), "I1207 last")
        self.assertEqual(self.daemon("").reason(), "(its log is empty)")

    def test_the_reason_is_one_bounded_line(self):
        r = self.daemon("E1207 " + "x" * 5000 + "\n").reason()
        self.assertLessEqual(len(r), 400)
        self.assertNotIn("\n", r)


if __name__ == "__main__":
    unittest.main()
