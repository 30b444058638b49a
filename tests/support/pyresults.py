#!/usr/bin/env python3
"""Runs Python unittest suites so that `make test` can count their tests one by one.

    python3 tests/support/pyresults.py discover -s tests/cluster -p 'test_*.py'
    # or, at the end of a test file:  pyresults.main()   (instead of unittest.main())

Behaves like unittest.main (same arguments, same output, exit status 0 only when every test
passed or was skipped). When $MPIJOB_TEST_RESULTS names a file, one JSON line per test is
appended to it: {"suite", "test", "status": passed|failed|skipped, "reason"}. The summary at the
end of `make test` (scripts/test-summary.py) counts those with the Criterion tests, and lists
every skip with its reason: a skipped test never counts as passed.
"""

import fcntl
import json
import os
import sys
import unittest


def _suite_name():
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None) or sys.argv[0]
    root = os.environ.get("MPIJOB_SRC_DIR") or os.getcwd()
    if os.path.basename(path) == "pyresults.py":
        if "-s" in sys.argv:
            return sys.argv[sys.argv.index("-s") + 1].rstrip("/")
        where = os.path.relpath(os.getcwd(), root)
        return "%s: %s" % (where, " ".join(a for a in sys.argv[1:] if not a.startswith("-")))
    return os.path.relpath(os.path.abspath(path), root)


def _record(suite, test, status, reason=""):
    path = os.environ.get("MPIJOB_TEST_RESULTS")
    if not path:
        return
    line = json.dumps({"suite": suite, "test": test, "status": status, "reason": reason}) + "\n"
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)    # suites run in parallel
        f.write(line)


def record_server(kind, version):
    """An API server a test started (launch.py): its kind ("double" or "real") and the
    gitVersion its /version gave, one JSON line in servers.jsonl beside $MPIJOB_TEST_RESULTS, so
    that the summary names the Kubernetes the tests really ran against."""
    path = os.environ.get("MPIJOB_TEST_RESULTS")
    if not path:
        return
    line = json.dumps({"kind": kind, "version": version or "(no version)"}) + "\n"
    with open(os.path.join(os.path.dirname(path), "servers.jsonl"), "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.write(line)


class RecordingResult(unittest.TextTestResult):
    suite = None

    def addSuccess(self, test):
        super().addSuccess(test)
        _record(self.suite, test.id(), "passed")

    def addFailure(self, test, err):
        super().addFailure(test, err)
        _record(self.suite, test.id(), "failed", str(err[1])[:600])

    def addError(self, test, err):
        super().addError(test, err)
        # an error in setUpClass arrives as a _ErrorHolder with its own id
        _record(self.suite, test.id(), "failed", "%s: %s" % (err[0].__name__, str(err[1])[:600]))

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        _record(self.suite, test.id(), "skipped", reason)

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        _record(self.suite, test.id(), "passed")

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        _record(self.suite, test.id(), "failed", "unexpected success")


def main(module="__main__", verbosity=2, exit=True, argv=None):
    """unittest.main with the recording result; returns the result when exit is False."""
    RecordingResult.suite = _suite_name()
    runner = unittest.TextTestRunner(resultclass=RecordingResult, verbosity=verbosity)
    prog = unittest.main(module=module, argv=argv, testRunner=runner, exit=False)
    if exit:
        sys.exit(0 if prog.result.wasSuccessful() else 1)
    return prog.result


if __name__ == "__main__":
    sys.path.insert(0, os.getcwd())     # module names are found from where it runs
    main(module=None)
