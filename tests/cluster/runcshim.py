"""Runs one runc container as containerd's shim does (standard library only).

    python3 runcshim.py PID_FILE BUNDLE ID RUNC [GLOBAL OPTIONS]

runs container ID of BUNDLE (a folder) as a shim does: `runc create` and `runc start`, as the
container's subreaper, then waits for the container's process and exits with its status
(128 + N when signal N ended it), as a foreground `runc run` would.

Why not `runc run` itself: a foreground runc forwards every signal it receives to the container,
and the Go runtime in it signals its own threads with SIGURG to preempt them (runc 1.1, Debian
12's, forwards those too; runc 1.2 leaves SIGURG out). On a busy machine mpirun, a launcher's
first process, got a few of them before its daemons had called back, took them for a user's
signal to pass on, failed to ("ORTE does not know how to route a message to the specified
daemon") and exited 0: a job that never trained read as Succeeded. No kubelet's container sees
such signals; here too a container is signalled only through `runc kill`.

PID_FILE is written (atomically) once `runc start` returned: the container's command runs. Output:
the container's stdout and stderr are this process's, and runc's own complaints go to stderr.
Exit status when the container never ran: runc create's or runc start's (non-zero).
"""

import ctypes
import ctypes.util
import os
import subprocess
import sys

PR_SET_CHILD_SUBREAPER = 36


def status_code(status):
    return 128 + os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def main(argv):
    if len(argv) < 4:
        sys.stderr.write("usage: runcshim.py PID_FILE BUNDLE ID RUNC [GLOBAL OPTIONS]\n")
        return 2
    pid_file, bundle, cid, runc = argv[0], argv[1], argv[2], argv[3:]
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        sys.stderr.write("runcshim: cannot become a subreaper: %s\n" % os.strerror(ctypes.get_errno()))
        return 125
    created = pid_file + ".created"
    rc = subprocess.run(runc + ["create", "--pid-file", created, "--bundle", bundle, cid],
                        stdin=subprocess.DEVNULL).returncode
    if rc != 0:
        return rc
    with open(created) as f:
        pid = int(f.read().strip())
    rc = subprocess.run(runc + ["start", cid], stdin=subprocess.DEVNULL).returncode
    if rc != 0:
        subprocess.run(runc + ["kill", cid, "KILL"], stdin=subprocess.DEVNULL)
    else:
        os.rename(created, pid_file)
    # The container's process was runc's child; runc create has exited, so it is ours now.
    while True:
        try:
            child, status = os.wait()
        except ChildProcessError:
            return rc or 255       # never seen: it was reaped by someone else
        if child == pid:
            return rc or status_code(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
