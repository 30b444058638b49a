"""Deadlines for tests: every wait in a Python test is a deadline on a condition, scaled by one
factor the runner can raise.

    from deadline import scaled, wait_for
    wait_for("pod x Running", lambda: phase("x") == "Running" and phase("x"), timeout=60,
             describe=lambda: kube.get(pod_path))

A test never asserts how long something took (that is a benchmark's job): it waits, with a
generous deadline, for the state it needs, and when the deadline passes it fails with the last
state it saw. The deadlines are written for a busy 2-core machine; on a slower one the runner
raises them all at once with

    MPIJOB_TEST_TIME_SCALE=3 make test

(the same variable scales the Criterion tests' deadlines, tests/support/deadline.h).
"""

import os
import time

ENV = "MPIJOB_TEST_TIME_SCALE"


def scale():
    """The factor from $MPIJOB_TEST_TIME_SCALE (default 1); a value that is not a number >= 1
    is an error, not silently ignored."""
    raw = os.environ.get(ENV, "").strip()
    if not raw:
        return 1.0
    try:
        value = float(raw)
    except ValueError:
        raise ValueError("%s=%r is not a number" % (ENV, raw)) from None
    if not value >= 1.0 or value > 1000.0:
        raise ValueError("%s=%r: want a factor from 1 to 1000" % (ENV, raw))
    return value


def scaled(seconds):
    """seconds times the factor."""
    return seconds * scale()


class Deadline:
    """A point in time `seconds` (scaled) from now, on the monotonic clock."""

    def __init__(self, seconds):
        self.seconds = scaled(seconds)
        self.end = time.monotonic() + self.seconds

    def left(self):
        return max(0.0, self.end - time.monotonic())

    def passed(self):
        return time.monotonic() >= self.end


def wait_for(what, fn, timeout, interval=0.1, describe=None):
    """fn's first truthy answer, polled every `interval` seconds for up to `timeout` seconds
    (scaled). After the deadline, fails with AssertionError naming `what`, the last answer, and
    describe()'s text when given (the state the test would want to see on failure)."""
    deadline = Deadline(timeout)
    last = None
    while True:
        last = fn()
        if last:
            return last
        if deadline.passed():
            break
        time.sleep(min(interval, max(deadline.left(), 0.001)))
    extra = ""
    if describe is not None:
        try:
            extra = "\n" + str(describe())
        except Exception as e:  # the description must not hide the timeout
            extra = "\n(describing the state failed: %r)" % e
    raise AssertionError("timed out after %.0f s waiting for %s (last: %r)%s" %
                         (deadline.seconds, what, last, extra))
