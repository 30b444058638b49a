#!/usr/bin/env python3
"""Run on a node by harness.oom_kill_pod: joins a container's memory cgroup and takes memory
until the kernel's OOM killer of that cgroup has ended the process VICTIM.

    oom_allocator.py CGROUP_DIR VICTIM_PID PAUSE_SECONDS

First a child holding 64 MiB with oom_score_adj 1000 (any process may raise its own), the
killer's first choice; then memory taken 8 MiB at a time until the child is gone, a pause of
PAUSE_SECONDS, and more until VICTIM is gone (or 4 GiB, or 300 s). Prints "first SECONDS" and
"victim SECONDS", each from the start of the allocation."""
import os
import sys
import time

CHUNK_MIB = 8
FIRST_MIB = 64
MOST_CHUNKS = 512       # 4 GiB
MOST_SECONDS = 300


def alive(pid):
    """Whether process pid runs (a zombie does not)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


def touched(mib):
    chunk = bytearray(mib << 20)
    chunk[::4096] = b"\1" * (len(chunk) // 4096)
    return chunk


def main():
    cgroup, victim, pause = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    with open(os.path.join(cgroup, "cgroup.procs"), "w") as f:
        f.write(str(os.getpid()))
    r, w = os.pipe()
    first = os.fork()
    if first == 0:
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write("1000")
        held = touched(FIRST_MIB)  # noqa: F841 (held until the OOM killer ends this child)
        os.write(w, b"x")
        time.sleep(600)
        os._exit(0)
    os.read(r, 1)
    t0 = time.monotonic()
    held, end = [], t0 + MOST_SECONDS

    def take_until(gone):
        while not gone() and len(held) < MOST_CHUNKS and time.monotonic() < end:
            held.append(touched(CHUNK_MIB))

    take_until(lambda: os.waitpid(first, os.WNOHANG)[0] != 0)
    print("first %.2f" % (time.monotonic() - t0), flush=True)
    time.sleep(pause)
    take_until(lambda: not alive(victim))
    print("victim %.2f" % (time.monotonic() - t0), flush=True)


if __name__ == "__main__":
    main()
