#!/bin/bash
# stop_rank.sh WORKER NP RANK STOP_FOR [train flags...]
#
# Runs `mpirun -np NP WORKER train [flags]`, waits for its first step line, then stops rank RANK
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
while ! grep -q '"event":"step"' "$dir/out" 2>/dev/null; do
    if ! kill -0 "$run" 2>/dev/null || [ "$(date +%s)" -ge "$deadline" ]; then
        wait "$run"
        echo "status=$? stopped_ms=-1 out=$dir/out err=$dir/err"
        echo "stop_rank.sh: the run ended or timed out before its first step line" >&2
        exit 0
    fi
    sleep 0.1
done

pid=""
for p in /proc/[0-9]*; do
    env=$(tr '\0' '\n' 2>/dev/null <"$p/environ") || continue
    if grep -qx "MPIJOB_TEST_TAG=$tag" <<<"$env" &&
        grep -qxE "(OMPI_COMM_WORLD_RANK|PMI_RANK)=$victim" <<<"$env" &&
        grep -q mpijob-worker "$p/cmdline" 2>/dev/null; then
        pid=${p#/proc/}
    fi
done
if [ -z "$pid" ]; then
    echo "stop_rank.sh: no process of rank $victim found" >&2
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
