#!/usr/bin/env bash
# Overlap of gradient allreduce with the backward pass, over a slow link.
#
# Two network namespaces joined by a veth pair, both ends shaped with tbf, one rank in each
# (mpirun --host of the two namespaces; the launch agent is `ip netns exec`, so no sshd). The same
# training runs twice, with and without --no-overlap, and the script prints both runs' exposed
# communication per step and their ratio:
#     overlap_exposed_ms=X no_overlap_exposed_ms=Y ratio=X/Y
# Exit 0 when both runs succeeded (the ratio is judged by the caller), 77 when this machine
# cannot run it (not root, no ip/tc/mpirun, no namespaces), 1 on failure.
#
# Usage: netns_overlap.sh [path/to/mpijob-worker]   (default: build/bin/mpijob-worker beside
# this tree). RATE, the link rate for tc (default 200mbit), may be set in the environment.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
worker=${1:-$here/../../build/bin/mpijob-worker}
rate=${RATE:-200mbit}

skip() { echo "SKIP: $*"; exit 77; }

[ "$(id -u)" -eq 0 ] || skip "needs root to create network namespaces"
for tool in ip tc mpirun unshare hostname; do
    command -v "$tool" >/dev/null || skip "needs '$tool'"
done
[ -x "$worker" ] || { echo "FAIL: $worker not built (make build/bin/mpijob-worker)"; exit 1; }
worker=$(cd "$(dirname "$worker")" && pwd)/$(basename "$worker")

# Names unique to this run; interface names stay under 15 characters.
id=$$
ns_a=mjw-ovl-$id-a
ns_b=mjw-ovl-$id-b
veth_a=mjo${id}a
veth_b=mjo${id}b
subnet_mid=$(( (id / 250) % 250 ))
subnet_low=$(( id % 250 ))
net=10.$(( 100 + subnet_mid % 100 )).$subnet_low
work=$(mktemp -d /tmp/mpijob-overlap.XXXXXX)

cleanup() {
    ip netns del "$ns_a" 2>/dev/null || true
    ip netns del "$ns_b" 2>/dev/null || true
    ip link del "$veth_a" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

ip netns add "$ns_a" 2>"$work/err" || skip "cannot create a network namespace: $(cat "$work/err")"
ip netns add "$ns_b"
ip link add "$veth_a" type veth peer name "$veth_b"
ip link set "$veth_a" netns "$ns_a"
ip link set "$veth_b" netns "$ns_b"
for side in "$ns_a $veth_a 1" "$ns_b $veth_b 2"; do
    set -- $side
    ip -n "$1" link set lo up
    ip -n "$1" addr add "$net.$3/24" dev "$2"
    ip -n "$1" link set "$2" up
    # Shape both directions: the allreduce sends both ways at once.
    ip netns exec "$1" tc qdisc add dev "$2" root tbf rate "$rate" burst 32kbit latency 50ms
done

# mpirun's launch agent: called as `agent HOST COMMAND...` like ssh, it runs the command through
# a shell in HOST's namespace, with HOST as the host name (a UTS namespace of its own), so Open
# MPI sees two distinct nodes.
cat >"$work/agent" <<'EOF'
#!/bin/sh
host=$1
shift
exec ip netns exec "$host" unshare --uts sh -c 'hostname "$0" && exec sh -c "$1"' "$host" "$*"
EOF
chmod +x "$work/agent"

# The model: layer 0 is small and every hidden layer is a bucket of its own, so all but the
# first layer's gradients (1.8 MB in all) can travel while the backward pass goes on. With 8192
# samples per rank that pass (15 GFLOP, about 165 ms at the 90 GFLOP/s OpenBLAS reaches on one
# core) takes about twice as long as the allreduce over the link (about 75 ms) even on an idle
# machine (longer under load), so the gap between the two runs is wide. With 2048 samples per
# rank, enough for the former hand-written GEMM, the pass became shorter than the allreduce.
flags=(--backend mpi --input 32 --hidden 384 --layers 4 --output 8 --batch 16384 --samples 16384
       --steps 6 --lr 0.02 --bucket-mb 0.25 --log-every 0 --check-every 0)

run() {
    # mpirun itself runs in the first namespace, so both daemons reach it over the veth.
    ip netns exec "$ns_a" mpirun --allow-run-as-root --oversubscribe -np 2 --map-by node \
        --host "$ns_a,$ns_b" \
        --mca plm_rsh_agent "$work/agent" --mca plm_rsh_no_tree_spawn 1 \
        --mca btl tcp,self --mca btl_tcp_if_include "$net.0/24" \
        --mca oob_tcp_if_include "$net.0/24" --mca mpi_yield_when_idle 1 \
        "$worker" train "${flags[@]}" "$@"
}

summary_field() { # FILE FIELD: a number from the summary line
    sed -n 's/.*"event":"summary".*"'"$2"'":\([-0-9.eE+]*\).*/\1/p' "$1" | head -n 1
}

for mode in overlap no_overlap; do
    extra=()
    [ "$mode" = no_overlap ] && extra=(--no-overlap)
    if ! run "${extra[@]}" >"$work/$mode.out" 2>"$work/$mode.err"; then
        echo "FAIL: the $mode run failed"
        cat "$work/$mode.out" "$work/$mode.err"
        exit 1
    fi
    grep '"event":"summary"' "$work/$mode.out"
    if [ -z "$(summary_field "$work/$mode.out" exposed_comm_ms)" ]; then
        echo "FAIL: no summary from the $mode run"
        cat "$work/$mode.out" "$work/$mode.err"
        exit 1
    fi
done

with=$(summary_field "$work/overlap.out" exposed_comm_ms)
without=$(summary_field "$work/no_overlap.out" exposed_comm_ms)
awk -v a="$with" -v b="$without" -v rate="$rate" 'BEGIN {
    printf "link=%s overlap_exposed_ms=%.3f no_overlap_exposed_ms=%.3f ratio=%.4f\n",
           rate, a, b, (b > 0 ? a / b : 1e9) }'
