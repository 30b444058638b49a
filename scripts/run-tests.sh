#!/usr/bin/env bash
# Runs the Criterion test binary under AddressSanitizer, LeakSanitizer and UBSan.
#
# Criterion counts a failed assertion or a crash inside a test, but a leak report comes when the
# test's process exits, after the test has passed. So the output is also scanned: any sanitizer
# report in project code fails the run, listed after Criterion's own summary
# (scripts/sanitizer-reports.py).
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

if ! python3 "$(dirname "$0")/sanitizer-reports.py" "$log" > "$log.reports"; then
    echo
    cat "$log.reports"
    rm -f "$log.reports"
    exit 1
fi
rm -f "$log.reports"
exit "$status"
