#!/bin/sh
# Installs Debian's Prometheus server and promtool (package prometheus, bookworm) into
# build/tools/prometheus/VERSION/, with build/tools/bin/promtool and build/tools/bin/prometheus
# linking to them, for the monitoring tests (promtool check rules, promtool test rules). The
# package is fetched with `apt-get download`, which checks it against the archive's signed
# indexes, and unpacked with dpkg-deb: nothing is installed system-wide and no service starts.
# A copy already in place is kept. Needs apt's package lists (scripts/install-deps.sh updates
# them when they are missing, as root).
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
tools="$root/build/tools"
fail() {
    echo "install-prometheus: $*" >&2
    exit 1
}
if [ -x "$tools/bin/promtool" ] && [ -x "$tools/bin/prometheus" ]; then
    exit 0
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/install-prometheus.XXXXXX")
trap 'rm -rf "$work"' EXIT
if ! (cd "$work" && apt-get download prometheus >/dev/null 2>&1); then
    if [ "$(id -u)" -eq 0 ]; then
        apt-get update -qq
        (cd "$work" && apt-get download prometheus >/dev/null 2>&1) || fail "apt-get download prometheus failed"
    else
        fail "apt-get download prometheus failed (run apt-get update as root)"
    fi
fi
deb=$(ls "$work"/prometheus_*.deb)
version=$(dpkg-deb -f "$deb" Version | sed 's/+.*//')
dpkg-deb -x "$deb" "$work/x"
dest="$tools/prometheus/$version"
mkdir -p "$dest" "$tools/bin"
cp "$work/x/usr/bin/promtool" "$work/x/usr/bin/prometheus" "$dest/"
ln -sf "../prometheus/$version/promtool" "$tools/bin/promtool"
ln -sf "../prometheus/$version/prometheus" "$tools/bin/prometheus"
echo "install-prometheus: $("$tools/bin/promtool" --version 2>&1 | head -1) at build/tools/bin/promtool"
