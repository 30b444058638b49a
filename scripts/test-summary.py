#!/usr/bin/env python3
"""The closing summary of `make test`: every test counted once, skips listed with their reasons.

    python3 scripts/test-summary.py --criterion build/test-results/main.json [--criterion ...]
                                    --python build/test-results/python.jsonl
                                    [--step "NAME=STATUS:WHYFILE" ...]

Criterion's JSON reports give the C tests; the JSON lines written by tests/support/pyresults.py
give the Python tests that some Criterion tests run. A Criterion test that only runs a Python
suite is counted through that suite's own tests, not as one more test. Prints which API server
the tests ran against, the skips with their reasons, the failures, and last one line
"N passed, N failed, N skipped". A skipped test never counts as passed. Exit status 0.

Each --step is one part of `make test` with its exit status and a file saying why it failed
(scripts/run-tests.sh's MPIJOB_TEST_WHY, the RBAC check's output). A step that failed is named,
with its reason, just above the last line, and the last line says that `make test` fails: a
sanitizer report or an unused RBAC verb fails the run although every test passed, and a log's
last lines are where a CI system's excerpt looks.
"""

import argparse
import json
import os
import re
import sys

# Criterion tests that do nothing but run a Python suite; that suite's tests are counted instead.
WRAPPERS = {
    "cluster::simulation_suites", "e2e::scenarios", "kubectl::against_the_double",
    "deploy::chart_deploy_file_and_dockerfile", "manifests::crd_schema_and_examples",
    "apiserver::rbac_authorizer", "apiserver::launcher_stops_on_sigterm",
}


KEY_LINE = re.compile(r'^\s*"[A-Za-z_]+"\s*:')
STRING_LINE = re.compile(r'^(\s*)"(.*)"(,?)\s*$')


def load_criterion_json(text):
    """Criterion 2.4 writes assertion messages into its JSON report without escaping their
    quotes; such a line (a bare string in a "messages" array) is taken literally."""
    try:
        return json.loads(text)
    except ValueError:
        pass
    fixed = []
    for line in text.splitlines():
        m = STRING_LINE.match(line)
        if m and not KEY_LINE.match(line):
            line = m.group(1) + json.dumps(m.group(2)) + m.group(3)
        fixed.append(line)
    return json.loads("\n".join(fixed))


def criterion_tests(path):
    try:
        with open(path, errors="replace") as f:
            report = load_criterion_json(f.read())
    except (OSError, ValueError) as e:
        return None, "cannot read %s: %s" % (path, e)
    out = []
    for suite in report.get("test_suites") or []:
        for t in suite.get("tests") or []:
            name = "%s::%s" % (suite.get("name"), t.get("name"))
            status = {"PASSED": "passed", "SKIPPED": "skipped"}.get(t.get("status"), "failed")
            msgs = [m for m in t.get("messages") or [] if m]
            out.append({"suite": os.path.basename(path), "test": name, "status": status,
                        "reason": "; ".join(msgs)[:600]})
    return out, None


def python_tests(path):
    out = []
    try:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line:
                    try:
                        out.append(json.loads(line))
                    except ValueError:
                        pass
    except OSError:
        pass
    return out


CONTROL_PLANE = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
NODE = ("kubelet", "kube-proxy", "coredns")


def tier():
    """(tier name, what ran): double, real API server, real control plane or real nodes."""
    assets = os.environ.get("KUBEBUILDER_ASSETS")
    if not assets:
        return "double", "the API-server double (tests/apiserver) and the cluster simulation"
    have = [b for b in CONTROL_PLANE + NODE if os.access(os.path.join(assets, b), os.X_OK)]
    if "etcd" not in have or "kube-apiserver" not in have:
        return "double", "the API-server double (KUBEBUILDER_ASSETS=%s lacks etcd or kube-apiserver)" % assets
    if not all(b in have for b in CONTROL_PLANE):
        return "real API server", ("a real etcd and kube-apiserver from KUBEBUILDER_ASSETS=%s, the cluster "
                                   "simulation for the rest" % assets)
    why_not = real_nodes_missing(assets) if all(b in have for b in NODE) else "no kubelet, kube-proxy and coredns there"
    if not why_not:
        return "real nodes", ("a real control plane and two real nodes (containerd, runc, CNI, kubelet, "
                              "kube-proxy, CoreDNS) from KUBEBUILDER_ASSETS=%s" % assets)
    return "real control plane", ("a real control plane from KUBEBUILDER_ASSETS=%s, the simulation's kubelet "
                                  "as its node (real nodes: %s)" % (assets, why_not))


def real_nodes_missing(assets):
    """Why real nodes could not run here (the end-to-end tests' own check), or None."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "cluster",
                                    "realnode"))
    try:
        import nodes  # noqa: E402 (tests/cluster/realnode)
    except ImportError as e:
        return "tests/cluster/realnode/nodes.py: %s" % e
    return nodes.missing(assets)


def servers(results_dir):
    """The API servers the tests started, from servers.jsonl (tests/support/pyresults.py
    record_server): "Kubernetes v1.36.3 (real kube-apiserver, started 57 times); ..."."""
    counts = {}
    for line in read_lines(os.path.join(results_dir, "servers.jsonl")):
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        key = (rec.get("kind", "?"), rec.get("version", "?"))
        counts[key] = counts.get(key, 0) + 1
    words = {"real": "real kube-apiserver", "double": "the API-server double"}
    return "; ".join("Kubernetes %s (%s, started %d time%s)" % (v, words.get(k, k), n, "" if n == 1 else "s")
                     for (k, v), n in sorted(counts.items(), key=lambda kv: (kv[0][0] != "real", kv[0][1])))


def read_lines(path):
    try:
        with open(path) as f:
            return [line for line in f if line.strip()]
    except OSError:
        return []


def failed_steps(specs):
    """[(name, status, why lines)] for each --step "NAME=STATUS:WHYFILE" whose status is not 0."""
    out = []
    for spec in specs:
        name, _, rest = spec.rpartition("=")
        status, _, why_file = rest.partition(":")
        try:
            code = int(status)
        except ValueError:
            code = -1
        if code == 0:
            continue
        why = [line.rstrip() for line in read_lines(why_file)] if why_file else []
        if len(why) > 15:
            why = why[:14] + ["... (%d lines more in %s)" % (len(why) - 14, why_file)]
        out.append((name or spec, status, why))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--criterion", action="append", default=[])
    ap.add_argument("--python", default=None)
    ap.add_argument("--step", action="append", default=[])
    args = ap.parse_args()

    tests, problems = [], []
    for path in args.criterion:
        got, err = criterion_tests(path)
        if err:
            problems.append(err)
            continue
        for t in got:
            # a wrapper that passed is counted through its suite's tests; one that failed or was
            # skipped is counted itself too, so that the failure or the skip shows
            if t["test"] in WRAPPERS and t["status"] == "passed":
                continue
            tests.append(t)
    py = python_tests(args.python) if args.python else []
    tests += py

    passed = [t for t in tests if t["status"] == "passed"]
    failed = [t for t in tests if t["status"] == "failed"]
    skipped = [t for t in tests if t["status"] == "skipped"]

    print()
    print("== Summary")
    name, what = tier()
    print("Tier: %s: %s" % (name, what))
    if args.python:
        seen = servers(os.path.dirname(os.path.abspath(args.python)))
        print("Servers: %s" % (seen or "none recorded (no test started an API server)"))
    print("C tests (Criterion): %d; Python tests: %d" % (len(tests) - len(py), len(py)))
    if skipped:
        print("Skipped (%d), with reasons:" % len(skipped))
        for t in sorted(skipped, key=lambda t: (t["reason"], t["test"])):
            print("  skip %s: %s" % (t["test"], t["reason"] or "(no reason given)"))
    if failed:
        print("Failed (%d):" % len(failed))
        for t in failed:
            print("  FAIL %s: %s" % (t["test"], t["reason"][:600]))
    for p in problems:
        print("  problem: %s" % p)
    ran = len(passed) + len(failed)
    if tests:
        print("Ran %d of %d tests (%.1f%%); the rest were skipped." % (ran, len(tests), 100.0 * ran / len(tests)))
    steps = failed_steps(args.step)
    for name, status, why in steps:
        print("%s exited with status %s:" % (name[:1].upper() + name[1:], status))
        for line in why or ["(it said nothing more)"]:
            print("  " + line[:300])
    line = "%d passed, %d failed, %d skipped" % (len(passed), len(failed) + len(problems), len(skipped))
    if steps:
        line += "; make test fails: %s" % ", ".join("%s exited %s" % (n, st) for n, st, _ in steps)
    print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
