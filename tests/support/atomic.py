"""write_atomic(path, text): the file holds the old text or the new one, never a part of it (a
reader polling for a state file, such as launch.py's ready or nodes.py's, sees it whole).
append_whole(path, text): text added at the end of a file that several processes append to (the
RBAC usage log every API server of a run shares), in one write(2) on an O_APPEND descriptor, so no
other writer's line lands inside it."""

import os


def write_atomic(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def append_whole(path, text):
    data = text.encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        while data:                     # a regular file takes it in one write; a short one goes on
            data = data[os.write(fd, data):]
    finally:
        os.close(fd)
