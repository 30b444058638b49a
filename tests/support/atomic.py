"""write_atomic(path, text): the file holds the old text or the new one, never a part of it (a
reader polling for a state file, such as launch.py's ready or nodes.py's, sees it whole)."""

import os


def write_atomic(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)
