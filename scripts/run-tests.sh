#!/usr/bin/env bash
# Runs the Criterion test binary under AddressSanitizer, LeakSanitizer and UBSan.
#
# Criterion counts a failed assertion or a crash inside a test, but a leak report comes when the
# test's process exits, after the test has passed. So the output is also scanned: any sanitizer
# report in project code fails the run, listed after Criterion's own summary
# (scripts/sanitizer-reports.py).
#
# With MPIJOB_TEST_WHY=FILE, a failing run also writes there, in a few lines, why it failed: the
# sanitizer reports, or the test binary's exit status with the lines of its output that may say
# why. `make test`'s closing summary prints them (scripts/test-summary.py --step), so that the
# cause shows in the last lines of a long log, where a CI system's excerpt looks.
set -u
bin=${1:?usage: run-tests.sh TEST_BINARY [criterion args]}
shift
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:halt_on_error=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
export MPIJOB_SRC_DIR="${MPIJOB_SRC_DIR:-$(pwd)}"
jobs="${TEST_JOBS:-$(nproc)}"
log=$(mktemp /tmp/mpijob-tests.XXXXXX)
trap 'rm -f "$log"' EXIT

"$bin" --jobs "$jobs" "$@" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}

why=${MPIJOB_TEST_WHY:-}
[ -n "$why" ] && rm -f "$why"
if ! python3 "$(dirname "$0")/sanitizer-reports.py" "$log" > "$log.reports"; then
    echo
    cat "$log.reports"
    [ -n "$why" ] && grep -v '^  not counted:' "$log.reports" > "$why"
    rm -f "$log.reports"
    exit 1
fi
ignored=$(cat "$log.reports")
rm -f "$log.reports"
[ -n "$ignored" ] && printf '\nleaks inside the test runner, not counted:\n%s\n' "$ignored"
# LeakSanitizer's exit status (23) with every test passed and every leak the runner's own (listed
# above as not counted): the runner process itself leaked its bookkeeping at exit. That is not a
# failure of ours, as the scanner says; any leak of ours made it fail already.
if [ "$status" -eq 23 ] && [ -n "$ignored" ] &&
    grep -qE 'Synthesis: .*Failing: 0 \| Crashing: 0' "$log"; then
    echo "(the test runner's own leaks, listed above, made it exit with status 23: not a failure)"
    status=0
fi
if [ "$status" -ne 0 ] && [ -n "$why" ]; then
    {
        echo "$(basename "$bin") exited with status $status"
        # Criterion's own verdict, its warnings, and anything that reads like a crash or a kill
        grep -E 'Synthesis:|Warning!|\[FAIL\]|\[----\].*(crash|timed out|signal)|Sanitizer|Segmentation|Aborted|Killed|Terminated|core dumped|Assertion .* failed' "$log" \
            | tail -n 12 | cut -c1-300
    } > "$why"
fi
exit "$status"
