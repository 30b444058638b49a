#!/usr/bin/env python3
"""Finds sanitizer reports in a test log; prints them and exits 1 if any concern project code.

A LeakSanitizer report is split into its leaks ("Direct leak of ..." / "Indirect leak of ...");
a leak allocated inside libcriterion with no frame of ours is the runner's own bookkeeping and is
listed but not counted. Every other leak counts, also one whose stack stops early inside a
library built without frame pointers (libcjson, libcurl): such a stack shows no frame of ours
even when our code leaked it. Every other report counts:
AddressSanitizer errors, UBSan "runtime error:" lines, and Criterion's warning that a test's
process crashed in setup or teardown (that is where an abort at exit shows up).
"""
import re
import sys

PROJECT_FRAME = re.compile(r"\b(cmd|src|tests)/[\w./-]+\.c:\d+")


def leak_top(leak):
    """The deepest frame that names a function or library, for leaks without a frame of ours."""
    frames = [line.strip() for line in leak.splitlines() if line.strip().startswith("#")]
    return frames[-1] if frames else "unknown"


def main(path):
    text = open(path, errors="replace").read()
    counted, ignored = [], []
    for line in text.splitlines():
        if "runtime error:" in line or "crashed during its setup or teardown" in line:
            counted.append(line.strip())
        m = re.search(r"ERROR: AddressSanitizer: .*", line)
        if m:
            counted.append(m.group(0))
    for report in re.split(r"==\d+==ERROR: LeakSanitizer: detected memory leaks", text)[1:]:
        report = report.split("SUMMARY:")[0]
        for leak in re.split(r"\n(?=(?:Direct|Indirect) leak of)", report):
            if not leak.strip().startswith(("Direct leak", "Indirect leak")):
                continue
            head = leak.strip().splitlines()[0]
            frame = PROJECT_FRAME.search(leak)
            if not frame and "libcriterion" in leak:
                ignored.append(f"{head} (inside the test runner)")
            else:
                counted.append(f"{head} at {frame.group(0)}" if frame else f"{head} (stack: {leak_top(leak)})")
    for line in ignored:
        print(f"  not counted: {line}")
    if counted:
        print("sanitizer reports (these fail the run even where Criterion counted the test as passing):")
        for line in sorted(set(counted)):
            print(f"  {line}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
