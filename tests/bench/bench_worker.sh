#!/usr/bin/env bash
# The worker's CPU benchmarks, run by `make bench` after it has built what they need:
#   1. `mpijob-worker train --backend mpi` at 1, 2 and 4 ranks, same global batch and steps:
#      samples/s, step time, exposed communication, and the speed-up over the first rank count
#      of the list (one rank by default);
#   2. build/bench/bench_kernels: where one rank's training step spends its time, per backend
#      operation (OpenBLAS GEMMs, the element-wise ops), on train's default model;
#   3. build/bench/bench_buckets at 2 and 4 ranks: the backend's bucketed allreduce against one
#      plain MPI_Allreduce of the same gradient;
#   4. as root with `ip`: tests/worker/netns_overlap.sh, exposed communication per step with and
#      without overlap over a shaped link between two network namespaces (target ratio <= 0.7).
# Figures only: nothing here judges a timing. Exit 1 when a run fails (bad weights, loss not
# falling, wrong sums), 0 otherwise.
#
# Usage: tests/bench/bench_worker.sh
# Environment: RANKS (default "1 2 4"), BUCKET_RANKS (default "2 4"), MPIRUN_ARGS (added to
# every mpirun line).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
worker=$root/build/bin/mpijob-worker
buckets=$root/build/bench/bench_buckets
kernels=$root/build/bench/bench_kernels
ranks_list=${RANKS:-1 2 4}
bucket_ranks=${BUCKET_RANKS:-2 4}
read -r -a mpirun_extra <<<"${MPIRUN_ARGS:-}"

# The same work at every rank count: the global batch splits over the ranks (it must divide by
# each count). About 10 s on one core of a 2-vCPU VM; the first step is left out of the timings.
train_flags=(--backend mpi --batch 2048 --steps 120 --samples 8192 --log-every 0
             --check-every 0)

for f in "$worker" "$buckets" "$kernels"; do
    [ -x "$f" ] || { echo "FAIL: $f is not built (make bench builds it)"; exit 1; }
done
command -v mpirun >/dev/null || { echo "FAIL: mpirun not found (Open MPI)"; exit 1; }
command -v python3 >/dev/null || { echo "FAIL: python3 not found"; exit 1; }

work=$(mktemp -d /tmp/mpijob-bench-worker.XXXXXX)
trap 'rm -rf "$work"' EXIT

mpi() { # NP PROGRAM ARGS...
    local np=$1
    shift
    mpirun --allow-run-as-root --oversubscribe -np "$np" "${mpirun_extra[@]}" "$@"
}

cpu_model=$(sed -n 's/^model name[[:space:]]*:[[:space:]]*//p' /proc/cpuinfo | head -n 1)
echo "machine: $(nproc) CPUs, ${cpu_model:-unknown CPU}, $(uname -sr)"
echo "mpi:     $(mpirun --version 2>/dev/null | head -n 1)"
echo "date:    $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
# The load average before each part: other work on the machine skews every figure.
load() { cut -d' ' -f1-3 /proc/loadavg; }
echo "load:    $(load) (1, 5, 15 min)"

# ---- 1. training throughput at 1, 2 and 4 ranks ------------------------------------------
echo
echo "== train (load $(load)): mpijob-worker train ${train_flags[*]}"
for n in $ranks_list; do
    start=$(date +%s.%N)
    if ! mpi "$n" "$worker" train "${train_flags[@]}" >"$work/train-$n.out" 2>"$work/train-$n.err"
    then
        echo "FAIL: train at $n ranks"
        cat "$work/train-$n.out" "$work/train-$n.err"
        exit 1
    fi
    end=$(date +%s.%N)
    echo "$start $end" >"$work/train-$n.wall"
done
python3 - "$work" $ranks_list <<'EOF'
import json, sys
work, ranks = sys.argv[1], sys.argv[2:]
rows = []
for n in ranks:
    summary = None
    with open(f"{work}/train-{n}.out") as f:
        for line in f:
            if line.startswith("{"):
                o = json.loads(line)
                if o.get("event") == "summary":
                    summary = o
    if summary is None:
        sys.exit(f"FAIL: no summary line from the run at {n} ranks")
    start, end = map(float, open(f"{work}/train-{n}.wall").read().split())
    rows.append((n, summary, end - start))
base = rows[0][1]["samples_per_sec"]
print(f"{'ranks':>5} {'samples/s':>10} {'step_ms':>9} {'exposed_ms':>10} {'compute_ms':>10}"
      f" {'speed-up':>8} {'wall_s':>7}")
for n, s, wall in rows:
    print(f"{n:>5} {s['samples_per_sec']:>10.0f} {s['step_ms']:>9.2f} {s['exposed_comm_ms']:>10.2f}"
          f" {s['compute_ms']:>10.2f} {s['samples_per_sec'] / base:>8.2f} {wall:>7.1f}")
print(json.dumps({"event": "summary", "bench": "train", "global_batch": rows[0][1]["global_batch"],
                  "steps": rows[0][1]["steps"], "parameters": rows[0][1]["parameters"],
                  "runs": [{"ranks": int(n), "samples_per_sec": s["samples_per_sec"],
                            "step_ms": s["step_ms"], "exposed_comm_ms": s["exposed_comm_ms"],
                            "wall_s": round(wall, 2)} for n, s, wall in rows]}))
EOF

# ---- 2. a step's time per backend operation, one rank --------------------------------------
echo
echo "== bench_kernels (load $(load)): one rank's step, per operation"
if ! "$kernels"; then
    echo "FAIL: bench_kernels"
    exit 1
fi

# ---- 3. bucketed allreduce against one plain MPI_Allreduce ----------------------------------
for n in $bucket_ranks; do
    echo
    echo "== bench_buckets at $n ranks (load $(load))"
    if ! mpi "$n" "$buckets"; then
        echo "FAIL: bench_buckets at $n ranks"
        exit 1
    fi
done

# ---- 4. overlap over a shaped link between two network namespaces ---------------------------
echo
echo "== overlap (load $(load)): tests/worker/netns_overlap.sh, exposed communication per step"
if [ "$(id -u)" -ne 0 ] || ! command -v ip >/dev/null; then
    echo "skipped: needs root and 'ip' to create network namespaces"
    exit 0
fi
set +e
"$root/tests/worker/netns_overlap.sh" "$worker" >"$work/overlap.out" 2>&1
rc=$?
set -e
cat "$work/overlap.out"
case $rc in
0)
    sed -n 's/.* ratio=\([0-9.]*\).*/\1/p' "$work/overlap.out" | awk '{
        printf "overlap/no-overlap exposed communication: %s (target <= 0.7: %s)\n",
               $1, ($1 <= 0.7 ? "met" : "not met") }'
    ;;
77) echo "skipped by the script (see above)" ;;
*) echo "FAIL: netns_overlap.sh exited $rc"; exit 1 ;;
esac
