"""The first process of a simulated container (standard library only).

The kubelet starts it as

    ip netns exec <ns> unshare --fork --pid --mount-proc --mount --uts --propagation private \\
        --kill-child=SIGKILL -- python3 podinit.py <spec.json>

so it runs as PID 1 of a fresh PID namespace, in private mount and UTS namespaces, inside the
pod's network namespace. It then

  1. opens every volume source (O_PATH) while the host's /tmp and /run are still visible,
  2. sets the host name,
  3. mounts a tmpfs on /run (with /run/sshd, which a root sshd needs), /tmp and /dev/shm,
  4. binds each volume at its mount path (read-only where asked), creating the mount point,
  5. forks the command with the given environment, working directory and user, forwards
     SIGTERM/SIGINT/SIGHUP/SIGQUIT/SIGUSR1/SIGUSR2 to it, reaps orphans, and exits with the
     command's code (128 + N when signal N ended it). Exiting ends the PID namespace, so every
     process of the container goes with it.

spec.json: {"hostname", "argv": [...], "env": {...}, "workingDir", "uid", "gid",
            "groups": [...], "mounts": [{"source", "target", "readOnly"}]}
Failures before the command starts exit 127 (cannot exec) or 126 (set-up), with a message on
stderr, which is the container's log.
"""

import ctypes
import ctypes.util
import json
import os
import signal
import socket
import sys

MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384

_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)


def _mount(source, target, fstype, flags, data=None):
    enc = lambda s: s.encode() if isinstance(s, str) else s
    if _libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, "mount %s on %s: %s" % (source, target, os.strerror(err)))


def _fail(code, msg):
    sys.stderr.write("podinit: %s\n" % msg)
    sys.stderr.flush()
    os._exit(code)


def _make_target(target, is_dir):
    if os.path.lexists(target):
        return
    os.makedirs(os.path.dirname(target) or "/", exist_ok=True)
    if is_dir:
        os.mkdir(target, 0o755)
    else:
        os.close(os.open(target, os.O_WRONLY | os.O_CREAT, 0o644))


def setup(spec):
    # What the image adds to a directory (/usr/local/bin): a read-only overlay of the image's
    # files over the host's, made while the host's /tmp (where state directories may live) is
    # still visible.
    for o in spec.get("overlays", []):
        _mount("overlay", o["target"], "overlay", MS_RDONLY, "lowerdir=%s:%s" % (o["source"], o["target"]))
    sources = []
    for m in spec.get("mounts", []):
        fd = os.open(m["source"], os.O_PATH | os.O_CLOEXEC)
        sources.append((fd, os.path.isdir(m["source"]), m))
    if spec.get("hostname"):
        socket.sethostname(spec["hostname"])
    _mount("tmpfs", "/run", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755")
    os.mkdir("/run/sshd", 0o755)
    os.chmod("/run/sshd", 0o755)
    _mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777")
    if os.path.isdir("/dev/shm"):
        _mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777")
    for fd, is_dir, m in sources:
        target = m["target"]
        _make_target(target, is_dir)
        _mount("/proc/self/fd/%d" % fd, target, None, MS_BIND | MS_REC)
        if m.get("readOnly"):
            _mount("none", target, None, MS_BIND | MS_REMOUNT | MS_RDONLY)
        os.close(fd)


def main():
    if len(sys.argv) != 2:
        _fail(126, "usage: podinit.py SPEC.json")
    try:
        with open(sys.argv[1]) as f:
            spec = json.load(f)
        setup(spec)
    except (OSError, ValueError, KeyError) as e:
        _fail(126, "container set-up failed: %s" % e)
    argv = spec.get("argv") or []
    if not argv:
        _fail(127, "no command: the simulation ignores images, so a container needs command or args")
    env = spec.get("env") or {}
    sys.stdout.flush()
    child = os.fork()
    if child == 0:
        try:
            for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT,
                      signal.SIGUSR1, signal.SIGUSR2, signal.SIGPIPE):
                signal.signal(s, signal.SIG_DFL)
            if spec.get("gid") is not None:
                os.setgroups([int(g) for g in spec.get("groups") or []])
                os.setgid(int(spec["gid"]))
            if spec.get("uid") is not None:
                os.setuid(int(spec["uid"]))
            # The image's working directory is "/" unless the container names one; never the
            # kubelet's own (which may not even exist behind the container's private /tmp).
            os.chdir(spec.get("workingDir") or "/")
            os.execvpe(argv[0], argv, env)
        except OSError as e:
            _fail(127 if e.errno in (2, 13) else 126, "cannot run %s: %s" % (argv[0], e))
    forwarded = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT,
                 signal.SIGUSR1, signal.SIGUSR2)

    def forward(signum, _frame):
        try:
            os.kill(child, signum)
        except ProcessLookupError:
            pass

    for s in forwarded:
        signal.signal(s, forward)
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            os._exit(0)
        except InterruptedError:
            continue
        if pid == child:
            if os.WIFSIGNALED(status):
                os._exit(128 + os.WTERMSIG(status))
            os._exit(os.waitstatus_to_exitcode(status))


if __name__ == "__main__":
    main()
