#!/bin/bash
# stop_rank.sh WORKER NP RANK STOP_FOR [train flags...]
#
# Runs `mpirun -np NP WORKER train [flags]`, waits for its second step line, then stops rank RANK
# with SIGSTOP: for ever when STOP_FOR is "forever", else for STOP_FOR seconds (then SIGCONT).
# Prints on stdout, after the run's own output has gone to files:
#   status=<mpirun's exit status> stopped_ms=<milliseconds from the stop to mpirun's end>
#   out=<file of mpirun's stdout> err=<file of its stderr>
# The run is killed at $RUNCMD_LIMIT_S (tests/worker/runcmd.h), so a hang ends as status 124.
set -u
worker=$1 np=$2 victim=$3 stop_for=$4
shift 4
limit=${RUNCMD_LIMIT_S:-100}
dir=$(mktemp -d /tmp/wk-stop-rank-XXXXXX)
# A tag of this run's own, forwarded to the ranks, picks its processes among any others.
tag="stop-rank-$$-$RANDOM"
MPIJOB_TEST_TAG=$tag timeout -k 5 "$limit" mpirun --allow-run-as-root --oversubscribe \
    -x MPIJOB_TEST_TAG -np "$np" "$worker" train "$@" >"$dir/out" 2>"$dir/err" </dev/null &
run=$!

deadline=$(($(date +%s) + limit))
# The second step line, not the first: rank 0 can print its first one while that step's bucket
# is still on its way (overlap), before every other rank has left the start's weights check; by
# its second, every rank has sent it the steps between.
steps_seen() { # how many step lines the run has printed (0 before its output file exists)
    local n
    n=$(grep -c '"event":"step"' "$dir/out" 2>/dev/null) || true
    echo "${n:-0}"
}
while [ "$(steps_seen)" -lt 2 ]; do
    if ! kill -0 "$run" 2>/dev/null || [ "$(date +%s)" -ge "$deadline" ]; then
        wait "$run"
        echo "status=$? stopped_ms=-1 out=$dir/out err=$dir/err"
        echo "stop_rank.sh: the run ended or timed out before its second step line" >&2
        exit 0
    fi
    sleep 0.1
done

# The pid of rank $victim of this run, or nothing; with "list", the run's processes, for the
# message of a run that ended before the stop (a watchdog that fired first, say).
find_rank() {
    local p env
    for p in /proc/[0-9]*; do
        env=$(tr '\0' '\n' 2>/dev/null <"$p/environ") || continue
        grep -qx "MPIJOB_TEST_TAG=$tag" <<<"$env" || continue
        if [ "${1:-}" = list ]; then
            echo "  ${p#/proc/}: $(tr '\0' ' ' <"$p/cmdline" 2>/dev/null | cut -c1-120)" \
                "$(grep -E '^(OMPI_COMM_WORLD_RANK|PMI_RANK)=' <<<"$env" | tr '\n' ' ')"
        elif grep -qxE "(OMPI_COMM_WORLD_RANK|PMI_RANK)=$victim" <<<"$env" &&
            grep -q mpijob-worker "$p/cmdline" 2>/dev/null; then
            echo "${p#/proc/}"
            return
        fi
    done
}
pid=$(find_rank)
if [ -z "$pid" ]; then
    echo "stop_rank.sh: no process of rank $victim found; this run's processes:" >&2
    find_rank list >&2
    kill "$run" 2>/dev/null
    wait "$run"
    echo "status=$? stopped_ms=-1 out=$dir/out err=$dir/err"
    exit 0
fi

t0=$(date +%s%N)
kill -STOP "$pid"
if [ "$stop_for" != forever ]; then
    sleep "$stop_for"
    kill -CONT "$pid"
fi
wait "$run"
status=$?
t1=$(date +%s%N)
kill -CONT "$pid" 2>/dev/null # a stopped rank that outlived its job would never go
echo "status=$status stopped_ms=$(((t1 - t0) / 1000000)) out=$dir/out err=$dir/err"
