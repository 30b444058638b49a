#!/usr/bin/env bash
# Runs libFuzzer harnesses one after another, each for a fixed time.
#
#   scripts/run-fuzz.sh SECONDS BINARY...
#
# A harness build/fuzz/fuzz_NAME starts from the seeds in tests/fuzz/seeds/NAME/ (when present)
# and keeps what it learns in build/fuzz/corpus-fuzz_NAME/, so later runs go deeper. Crash,
# leak and timeout inputs land in build/fuzz/artifacts-fuzz_NAME/ and the full log in
# build/fuzz/fuzz_NAME.log. One line per harness says how it went; the exit status is non-zero
# when any harness found a problem.
set -u

usage() {
    echo "usage: $0 SECONDS BINARY..." >&2
    exit 2
}

[ $# -ge 2 ] || usage
seconds=$1
shift
case "$seconds" in
    '' | *[!0-9]*) usage ;;
esac

# Undefined behaviour counts as a crash even in a build where UBSan could recover.
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}"

out_dir=build/fuzz
mkdir -p "$out_dir"
failed=0

for bin in "$@"; do
    name=$(basename "$bin")
    short=${name#fuzz_}
    if [ ! -x "$bin" ]; then
        echo "$name: FAILED (no executable at $bin)"
        failed=1
        continue
    fi
    corpus="$out_dir/corpus-$name"
    artifacts="$out_dir/artifacts-$name"
    log="$out_dir/$name.log"
    mkdir -p "$corpus" "$artifacts"
    dirs=("$corpus")
    seeds="tests/fuzz/seeds/$short"
    [ -d "$seeds" ] && dirs+=("$seeds")

    # New inputs are written to the first directory only; the seeds stay untouched.
    "$bin" -max_total_time="$seconds" -timeout=30 -print_final_stats=1 \
        -artifact_prefix="$artifacts/" "${dirs[@]}" >"$log" 2>&1
    status=$?

    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    files=$(find "$corpus" -type f | wc -l)
    if [ "$status" -eq 0 ]; then
        echo "$name: ok, ${runs:-?} runs in ${seconds}s, corpus $files inputs"
    else
        found=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -n 1)
        summary=$(grep -m 1 -E 'SUMMARY: |ERROR: libFuzzer|==ERROR' "$log")
        echo "$name: FAILED (exit $status) ${summary:-see $log}${found:+; input: $found}"
        failed=1
    fi
done

exit "$failed"
