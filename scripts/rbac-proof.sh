#!/usr/bin/env bash
# Proves that the operator's RBAC role holds nothing it does not need: for each rule of each
# operator Role and ClusterRole in the file, writes a copy without that rule, runs the controller
# integration suites with the API-server double enforcing the copy (MPIJOB_TEST_RBAC), and
# requires some test to fail. A rule whose removal fails no test is reported and fails the proof.
#
#   scripts/rbac-proof.sh [RBAC.yaml]      (make rbac-proof)
set -u
role=${1:-deploy/mpijob-operator.yaml}
suites="test_controller test_summary test_operator test_restart test_examples"
make --no-print-directory $(for s in $suites; do printf 'build/asan/it/%s ' "$s"; done) build/bin/mpijob-operator >/dev/null || exit 1
work=$(mktemp -d /tmp/rbac-proof.XXXXXX)
trap 'rm -rf "$work"' EXIT
# Copies of the test binaries, so that a rebuild while the proof runs cannot disturb it.
for s in $suites; do cp "build/asan/it/$s" "$work/$s" || exit 1; done

count=$(python3 - "$role" "$work" <<'PY'
import sys, yaml
role, work = sys.argv[1], sys.argv[2]
docs = [d for d in yaml.safe_load_all(open(role)) if d is not None]
n = 0
for i, d in enumerate(docs):
    if not isinstance(d, dict) or d.get("kind") not in ("Role", "ClusterRole"):
        continue
    labels = (d.get("metadata") or {}).get("labels") or {}
    if any(k.startswith("rbac.authorization.k8s.io/aggregate-to-") for k in labels):
        continue
    for j, rule in enumerate(d.get("rules") or []):
        copy = [dict(x) if isinstance(x, dict) else x for x in docs]
        copy[i] = dict(d, rules=[r for k, r in enumerate(d["rules"]) if k != j])
        with open("%s/%d.yaml" % (work, n), "w") as f:
            yaml.safe_dump_all(copy, f)
        with open("%s/%d.txt" % (work, n), "w") as f:
            f.write("%s %s: %s %s %s" % (d["kind"], d["metadata"]["name"], rule.get("verbs"),
                                         rule.get("resources"), rule.get("apiGroups")))
        n += 1
print(n)
PY
) || exit 1

failed=0
for ((n = 0; n < count; n++)); do
    what=$(cat "$work/$n.txt")
    caught=""
    for s in $suites; do
        if ! MPIJOB_TEST_RBAC="$work/$n.yaml" MPIJOB_SRC_DIR=$PWD TEST_JOBS=2 \
            scripts/run-tests.sh "$work/$s" --fail-fast >"$work/$n.$s.log" 2>&1; then
            caught=$s
            break
        fi
    done
    if [ -n "$caught" ]; then
        echo "rule $((n + 1))/$count removed -> $caught fails: $what"
    else
        echo "rule $((n + 1))/$count removed -> NO TEST FAILS: $what"
        failed=1
    fi
done
[ "$failed" -eq 0 ] && echo "every rule of $role is needed by some test"
exit "$failed"
