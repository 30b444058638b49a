"""The container runtime of the simulated kubelet (runtime.py) on its own: containers run with
runc from a small root file system made of this machine's sleep and sh, no image needed. Root and
runc only.

    python3 -m unittest discover -s tests/cluster -p 'test_runtime.py' -v

What a kill must do whatever runc does: a container that still runs after `runc kill --all` is
killed by its process id, then through its cgroups; one that cannot be killed is a KillError that
names it, never a container silently left running.
"""

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import unittest
import uuid
from unittest import mock

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import runtime  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(HERE), "support"))
from deadline import wait_for  # noqa: E402


def _standin(verb, exit_code, error=None):
    """A runc stand-in that passes every call to runc but `verb`, which ends with exit_code,
    saying error on stderr as runc does."""
    said = "echo 'time=\"2024-01-01T00:00:00Z\" level=error msg=\"%s\"' >&2; " % error if error else ""
    return '#!/bin/sh\nfor a; do [ "$a" = %s ] && { %sexit %d; }; done\nexec runc "$@"\n' % (verb, said, exit_code)


STANDINS = {
    "ignores-kill": _standin("kill", 0),                                   # does nothing, says it worked
    "fails-kill": _standin("kill", 1, "container does not exist"),        # as for an unknown container
    "fails-create": _standin("create", 1, "runc create failed: unable to start container process"),
}


def _rootfs(dest, programs=("sleep", "sh", "cat")):
    """A root file system holding programs and the libraries they load."""
    for name in programs:
        prog = shutil.which(name)
        out = subprocess.run(["ldd", prog], capture_output=True, text=True).stdout
        files = [prog] + [w for w in out.split() if w.startswith("/")]
        for f in files:
            target = os.path.join(dest, f.lstrip("/"))
            os.makedirs(os.path.dirname(target), exist_ok=True)
            shutil.copy2(os.path.realpath(f), target)
    for d in ("proc", "dev", "sys", "tmp", "etc", "run", "var"):
        os.makedirs(os.path.join(dest, d), exist_ok=True)
    os.symlink("/run", os.path.join(dest, "var", "run"))      # as Debian's images have it


def _state(proc):
    """A process's state letter, or None when it is gone."""
    try:
        with open("/proc/%d/stat" % proc) as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


@unittest.skipUnless(os.geteuid() == 0, "needs root: runc, mounts")
@unittest.skipUnless(shutil.which("runc") and shutil.which("ldd"), "needs runc and ldd")
class RuncContainers(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="runtime-test-")
        rootfs = os.path.join(cls.tmp, "image")
        _rootfs(rootfs)
        cls.image = runtime.Image("sleeper", "localhost/sleeper:latest", "sha256:" + "0" * 64, rootfs,
                                  {"Cmd": ["sleep", "600"]})
        cls.wrappers = {}
        for name, text in STANDINS.items():
            path = os.path.join(cls.tmp, name)
            with open(path, "w") as f:
                f.write(text)
            os.chmod(path, 0o755)
            cls.wrappers[name] = path

    @classmethod
    def tearDownClass(cls):
        try:
            runtime.sweep(os.path.join(cls.tmp, "runc"), os.path.join(cls.tmp, "containers"))
        finally:
            shutil.rmtree(cls.tmp, ignore_errors=True)

    def run_container(self, runc="runc", **spec):
        """A started container of the sleeper image, run through `runc` (a stand-in's path)."""
        rt = runtime.Runtime(os.path.join(self.tmp, "runc"), runc=runc)
        cid = "rt-%s" % uuid.uuid4().hex[:8]
        ctr = rt.create(cid, self.image, runtime.ContainerSpec(hostname=cid, **spec),
                        os.path.join(self.tmp, "containers", cid))
        ctr.start(os.path.join(self.tmp, cid + ".log"))
        self.addCleanup(self.remove, ctr)
        return ctr

    def remove(self, ctr):
        ctr.runtime.runc = "runc"
        try:
            ctr.kill()
        finally:
            ctr.remove()

    def assert_killed(self, ctr):
        self.assertEqual(ctr.proc.wait(timeout=60), 128 + signal.SIGKILL, "the shim says SIGKILL ended it")
        self.assertIn(_state(ctr.init_pid), (None, "Z"))

    def test_start_returns_once_runc_knows_the_running_container(self):
        ctr = self.run_container()
        # No window in which `runc kill` answers "container does not exist".
        state = ctr.runtime.state(ctr.id)
        self.assertEqual(state.get("status"), "running", state)
        self.assertEqual(state.get("pid"), ctr.init_pid)
        self.assertEqual(ctr.pid(), ctr.init_pid)
        self.assertEqual(ctr.kill(), [], "runc kill --all did it alone")
        self.assert_killed(ctr)
        self.assertTrue(ctr.ended())

    def test_kill_when_runc_kill_does_nothing(self):
        ctr = self.run_container(self.wrappers["ignores-kill"])
        problems = ctr.kill(wait=1)
        self.assert_killed(ctr)
        text = "; ".join(problems)
        self.assertIn("runc kill --all %s KILL (exit 0, the container still ran" % ctr.id, text)
        self.assertIn("SIGKILL to its process %d worked" % ctr.init_pid, text)

    def test_kill_thaws_a_frozen_container_runc_cannot_kill(self):
        ctr = self.run_container(self.wrappers["fails-kill"])
        cgroups = runtime.container_cgroups(ctr.init_pid, ctr.id)
        self.assertTrue(cgroups, "the container has cgroups of its own")
        frozen = False
        for d in cgroups:
            for name, value in (("freezer.state", "FROZEN"), ("cgroup.freeze", "1")):
                if os.path.exists(os.path.join(d, name)):
                    with open(os.path.join(d, name), "w") as f:
                        f.write(value)
                    frozen = True
        if not frozen:
            self.skipTest("no freezer here")
        problems = ctr.kill(wait=1)
        self.assert_killed(ctr)
        self.assertIn("runc kill --all %s KILL (exit 1: container does not exist)" % ctr.id, problems)

    def test_a_kill_that_cannot_be_done_names_the_container(self):
        ctr = self.run_container(self.wrappers["ignores-kill"])
        with mock.patch.object(runtime.os, "kill"), mock.patch.object(runtime, "_kill_cgroups", return_value=0), \
                mock.patch.object(ctr.proc, "kill"):
            with self.assertRaises(runtime.KillError) as caught:
                ctr.kill(wait=0.2)
        text = str(caught.exception)
        self.assertIn("container %s still runs after runc kill --all" % ctr.id, text)
        self.assertIn("SIGKILL to its process %d" % ctr.init_pid, text)
        self.assertIn("of its cgroups", text)
        self.assertFalse(ctr.ended())

    def test_a_signal_runc_cannot_send_names_the_container(self):
        ctr = self.run_container(self.wrappers["fails-kill"])
        with self.assertRaises(runtime.KillError) as caught:
            ctr.signal(signal.SIGTERM)
        self.assertEqual(str(caught.exception), "container %s: runc kill TERM: exit 1: container does not exist"
                         % ctr.id)

    def test_the_container_gets_no_signal_meant_for_its_runtime(self):
        """The Go runtime inside runc signals its own threads with SIGURG, and a foreground
        `runc run` forwards every signal it receives to the container: mpirun, the launcher's
        first process, took them for a user's and aborted its job before the daemons were up (then
        exited 0). As with containerd's shim, a signal reaches the container only through `runc
        kill`: SIGURG sent to what start() returned is never passed on, SIGUSR1 sent with signal()
        is."""
        ctr = self.run_container(command=["sh", "-c", "trap 'echo got-URG' URG; trap 'echo got-USR1' USR1; "
                                          "echo ready; while :; do sleep 0.05; done"])
        log = os.path.join(self.tmp, ctr.id + ".log")

        def said(word):
            with open(log) as f:
                return word in f.read()
        wait_for("the container's shell to start", lambda: said("ready"), 60)
        for _ in range(5):
            os.kill(ctr.proc.pid, signal.SIGURG)
        ctr.signal(signal.SIGUSR1)
        wait_for("the container's shell to take SIGUSR1", lambda: said("got-USR1"), 60)
        self.assertFalse(said("got-URG"), "SIGURG reached the container")
        self.assertIsNone(ctr.proc.poll(), "the container still runs")

    def test_a_container_runc_cannot_create_ends_with_runc_saying_why(self):
        ctr = self.run_container(self.wrappers["fails-create"])
        self.assertEqual(ctr.proc.wait(timeout=60), 1)
        self.assertIsNone(ctr.init_pid)
        self.assertTrue(ctr.ended())
        with open(os.path.join(self.tmp, ctr.id + ".log")) as f:
            self.assertIn("runc create failed: unable to start container process", f.read())

    def test_mount_points_are_made_inside_the_root(self):
        """A volume bound under /var/run, a link to /run in the image: its mount point is made in
        the container's /run, never in this machine's."""
        name = "sim-test-%s" % uuid.uuid4().hex[:8]
        vol = os.path.join(self.tmp, name)
        os.makedirs(vol)
        with open(os.path.join(vol, "ca.crt"), "w") as f:
            f.write("CA\n")
        ctr = self.run_container(command=["cat", "/var/run/%s/sa/ca.crt" % name],
                                 mounts=[{"source": vol, "target": "/var/run/%s/sa" % name, "readOnly": True}])
        self.assertEqual(ctr.proc.wait(timeout=60), 0)
        self.assertFalse(os.path.lexists("/run/" + name), "made on this machine")
        with open(os.path.join(self.tmp, ctr.id + ".log")) as f:
            self.assertEqual(f.read(), "CA\n")
        self.assertEqual(runtime.in_root("/r", "/var/run/x"), "/r/var/run/x")   # no such link there
        self.assertEqual(runtime.in_root(self.image.rootfs, "/var/run/../etc/./x"),
                         os.path.join(self.image.rootfs, "etc", "x"))
        self.assertEqual(runtime.in_root(self.image.rootfs, "/../../var/run/y"),
                         os.path.join(self.image.rootfs, "run", "y"))

    def test_sweep_kills_and_deletes_what_runc_has(self):
        ctr = self.run_container()
        removed = runtime.sweep(ctr.runtime.root, os.path.join(self.tmp, "containers"))
        self.assertIn(ctr.id, removed)
        # the shim goes first (it could be making a container runc cannot list yet)
        self.assertIn(ctr.proc.wait(timeout=60), (-signal.SIGKILL, 128 + signal.SIGKILL))
        self.assertIn(_state(ctr.init_pid), (None, "Z"))
        self.assertNotIn(ctr.id, ctr.runtime.list())
        os.makedirs(os.path.join(self.tmp, "containers"), exist_ok=True)


if __name__ == "__main__":
    unittest.main()
