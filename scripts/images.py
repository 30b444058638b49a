#!/usr/bin/env python3
"""make images: builds the operator image and the worker images for real, as OCI archives.

    scripts/images.py [--only NAME[,NAME]] [--cuda] [--no-cache] [--check]

What it does, each step cached by content under build/images/:
  1. bases: for each Debian release an image below is built on, a root file system made by
     `mmdebstrap --variant=minbase SUITE` from Debian's archive (cache/debian-SUITE-KEY.tar, KEY a
     hash of the mmdebstrap command, its mirrors and dates), imported as the local image
     localhost/mpijob-base:SUITE-KEY. SUITE is bookworm (Debian 12) or trixie (Debian 13); only
     the bases the chosen images need are made. No registry is needed: every FROM of the builds
     below names one of these images.
  2. the images, with `podman build --runtime runc --timestamp SOURCE_DATE_EPOCH`:
       operator       deploy/Dockerfile, bookworm      ghcr.io/mpijob-operator/mpijob-operator:VERSION
       worker         worker-image/Dockerfile, bookworm  mpijob-worker:latest (Open MPI 4, CPU)
       worker-mpich   worker-image/Dockerfile, bookworm, MPI=mpich  mpijob-worker:mpich
       worker-ompi5   worker-image/Dockerfile, trixie  mpijob-worker:ompi5 (Open MPI 5, CPU)
       worker-cuda    worker-image/Dockerfile (nvidia/cuda bases)  mpijob-worker:cuda, with --cuda
     VERSION is the chart's appVersion. An image whose inputs (its Dockerfile, the files its
     COPY lines read, its build arguments and its base) hash as they did at its last build is not
     built again.
  3. each saved as an OCI archive, NAME.tar, and listed in index.json: the image reference as a
     kubelet resolves it (docker.io/library/mpijob-worker:latest for mpijob-worker:latest), the
     manifest digest, the archive's size. The local cluster (tests/cluster) pulls from there.

SOURCE_DATE_EPOCH defaults to 0, the same for every build, so that the same sources give the
same digests and the layer cache stays valid from one commit to the next; set it to date the
images otherwise. The revision label is `git rev-parse HEAD` (with "-dirty" for a changed tree).

--check prints why images cannot be built here (not root; podman, mmdebstrap or skopeo missing)
and exits 77, or exits 0 when they can. Building needs root and the network path to Debian's
archive; scripts/install-deps.sh installs the packages.
"""

import argparse
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "build", "images")
CACHE = os.path.join(OUT, "cache")
# The Debian releases the bases are made of: each one's archive sections and the date its files
# carry, that of its first point release (Debian 12.0: 2023-06-10; Debian 13.0: 2025-08-09). A
# base's contents are the archive's of the day it was made (rm build/images/cache to refresh it).
SUITES = {
    "bookworm": {
        "mirrors": [
            "deb http://deb.debian.org/debian bookworm main",
            "deb http://deb.debian.org/debian bookworm-updates main",
            "deb http://deb.debian.org/debian-security bookworm-security main",
        ],
        "epoch": 1686355200,
    },
    "trixie": {
        "mirrors": [
            "deb http://deb.debian.org/debian trixie main",
            "deb http://deb.debian.org/debian trixie-updates main",
            "deb http://deb.debian.org/debian-security trixie-security main",
        ],
        "epoch": 1754697600,
    },
}
TOOLS = ("podman", "mmdebstrap", "skopeo", "runc")
# Changed whenever the way images are built changes, so that archives built before are rebuilt.
BUILD_FORMAT = 3


class ImageError(Exception):
    pass


def log(msg):
    print("images: " + msg, flush=True)


def why_not():
    """None when images can be built here, else the reason."""
    if os.geteuid() != 0:
        return "building images needs root (podman with runc, mmdebstrap --mode=root)"
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        return ("%s not installed (Debian: apt-get install podman runc mmdebstrap skopeo umoci; "
                "scripts/install-deps.sh does it)" % ", ".join(missing))
    return None


def run(cmd, quiet=False, **kw):
    """Runs cmd; on failure raises ImageError with its output's tail."""
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)
    if proc.returncode != 0:
        tail = "\n".join(proc.stdout.splitlines()[-40:])
        raise ImageError("%s failed (exit %d):\n%s" % (" ".join(cmd[:3]), proc.returncode, tail))
    if not quiet and os.environ.get("IMAGES_VERBOSE"):
        sys.stdout.write(proc.stdout)
    return proc.stdout


def chart_version():
    with open(os.path.join(ROOT, "charts", "mpijob-operator", "Chart.yaml")) as f:
        m = re.search(r'^appVersion:\s*"?([^"\s]+)"?', f.read(), re.M)
    if not m:
        raise ImageError("charts/mpijob-operator/Chart.yaml has no appVersion")
    return m.group(1)


def revision():
    try:
        rev = subprocess.run(["git", "-C", ROOT, "rev-parse", "HEAD"], capture_output=True,
                             text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True).stdout.strip()
        return rev + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def normalize(ref):
    """An image reference as a kubelet (containerd, CRI-O) resolves it: a registry domain
    (docker.io when none), library/ for a one-part docker.io name, and a tag (latest when none)."""
    name, _, digest = ref.partition("@")
    first, slash, rest = name.partition("/")
    if not slash or ("." not in first and ":" not in first and first != "localhost"):
        domain, path = "docker.io", name
    else:
        domain, path = first, rest
    if domain == "docker.io" and "/" not in path:
        path = "library/" + path
    last = path.rsplit("/", 1)[-1]
    if ":" not in last and not digest:
        path += ":latest"
    return domain + "/" + path + ("@" + digest if digest else "")


# ---- inputs ------------------------------------------------------------------------------------

def dockerfile_sources(dockerfile):
    """The build-context paths the Dockerfile's COPY/ADD lines read (not --from ones)."""
    srcs = []
    with open(os.path.join(ROOT, dockerfile)) as f:
        text = f.read().replace("\\\n", " ")
    for line in text.splitlines():
        words = line.split()
        if not words or words[0].upper() not in ("COPY", "ADD"):
            continue
        args = words[1:]
        if any(a.startswith("--from=") for a in args):
            continue
        args = [a for a in args if not a.startswith("--")]
        srcs.extend(args[:-1])
    return srcs


def hash_paths(h, paths):
    for rel in sorted(set(paths)):
        full = os.path.join(ROOT, rel.rstrip("/"))
        if os.path.isdir(full):
            for d, dirs, files in os.walk(full):
                dirs.sort()
                dirs[:] = [x for x in dirs if x != "__pycache__"]
                for fn in sorted(files):
                    p = os.path.join(d, fn)
                    h.update(os.path.relpath(p, ROOT).encode() + b"\0")
                    h.update(b"%o\0" % (os.stat(p).st_mode & 0o7777))
                    with open(p, "rb") as f:
                        h.update(hashlib.sha256(f.read()).digest())
        elif os.path.exists(full):
            h.update(rel.encode() + b"\0")
            h.update(b"%o\0" % (os.stat(full).st_mode & 0o7777))
            with open(full, "rb") as f:
                h.update(hashlib.sha256(f.read()).digest())
        else:
            raise ImageError("%s: no such file in the build context" % rel)


# ---- base --------------------------------------------------------------------------------------

_mmdebstrap_version = None


def mmdebstrap_version():
    global _mmdebstrap_version
    if _mmdebstrap_version is None:
        _mmdebstrap_version = run(["mmdebstrap", "--version"], quiet=True).strip()
    return _mmdebstrap_version


def base_command(suite):
    return ["mmdebstrap", "--quiet", "--variant=minbase", "--mode=root", "--format=tar", suite]


def base_key(suite):
    """The hash that names suite's base: its mmdebstrap command, mirrors, date and mmdebstrap."""
    s = SUITES[suite]
    key = hashlib.sha256(json.dumps([base_command(suite), s["mirrors"], s["epoch"],
                                     mmdebstrap_version()]).encode())
    return key.hexdigest()[:12]


def base_tag(suite, key):
    return "localhost/mpijob-base:%s-%s" % (suite, key)


def make_base(suite):
    """suite's local base image's name, made (or found) from the cached root file system."""
    s = SUITES[suite]
    key = base_key(suite)
    tar = os.path.join(CACHE, "debian-%s-%s.tar" % (suite, key))
    tag = base_tag(suite, key)
    if not os.path.exists(tar):
        os.makedirs(CACHE, exist_ok=True)
        log("base: mmdebstrap --variant=minbase %s (Debian's archive) ..." % suite)
        t0 = time.monotonic()
        tmp = tar + ".part"
        env = dict(os.environ, SOURCE_DATE_EPOCH=str(s["epoch"]))
        run(base_command(suite) + [tmp] + s["mirrors"], env=env)
        os.rename(tmp, tar)
        log("base: %s made in %.0f s" % (os.path.relpath(tar, ROOT), time.monotonic() - t0))
    if subprocess.run(["podman", "image", "exists", tag]).returncode != 0:
        ctx = os.path.join(CACHE, "base-context")
        shutil.rmtree(ctx, ignore_errors=True)
        os.makedirs(ctx)
        os.link(tar, os.path.join(ctx, "rootfs.tar"))
        with open(os.path.join(ctx, "Containerfile"), "w") as f:
            f.write('FROM scratch\nADD rootfs.tar /\nCMD ["/bin/bash"]\n')
        run(["podman", "build", "--runtime", "runc", "--timestamp", str(s["epoch"]),
             "-t", tag, ctx])
        shutil.rmtree(ctx, ignore_errors=True)
        log("base: imported as %s" % tag)
    return tag


# ---- images ------------------------------------------------------------------------------------

def specs(version, tags, cuda):
    """(name, Dockerfile, reference, build arguments, suite) of each image; tags: each suite's
    base image. The suite is that of the local base the image is built on: its base's key is
    part of the image's inputs, and the base is made before the image is built. worker-cuda's
    bases are nvidia/cuda's; it carries bookworm's key in its inputs as it always has, and needs
    no local base made."""
    def local(suite, **kw):
        return dict({"BASE": tags[suite], "BUILD_BASE": tags[suite]}, **kw)
    out = [
        ("operator", "deploy/Dockerfile", "ghcr.io/mpijob-operator/mpijob-operator:" + version,
         local("bookworm"), "bookworm"),
        ("worker", "worker-image/Dockerfile", "mpijob-worker:latest",
         local("bookworm", MPI="openmpi"), "bookworm"),
        ("worker-mpich", "worker-image/Dockerfile", "mpijob-worker:mpich",
         local("bookworm", MPI="mpich"), "bookworm"),
        ("worker-ompi5", "worker-image/Dockerfile", "mpijob-worker:ompi5",
         local("trixie", MPI="openmpi"), "trixie"),
    ]
    if cuda:
        out.append(("worker-cuda", "worker-image/Dockerfile", "mpijob-worker:cuda",
                    {"MPI": "openmpi"}, None))
    return out


def build(name, dockerfile, ref, args, epoch, version, rev, base_key, no_cache=False):
    """Builds one image unless its inputs are those of its archive; returns its index entry."""
    args = dict(args, VERSION=version, REVISION=rev, SOURCE_DATE_EPOCH=str(epoch))
    h = hashlib.sha256()
    h.update(json.dumps([name, dockerfile, ref, sorted(args.items()), epoch, base_key,
                         BUILD_FORMAT]).encode())
    hash_paths(h, [dockerfile, ".dockerignore"] + dockerfile_sources(dockerfile))
    inputs = h.hexdigest()
    archive = os.path.join(OUT, name + ".tar")
    stamp = os.path.join(OUT, name + ".json")
    if os.path.exists(archive) and os.path.exists(stamp) and not no_cache:
        with open(stamp) as f:
            entry = json.load(f)
        if entry.get("inputs") == inputs:
            entry["built"] = False
            return entry
    log("%s: podman build -f %s -t %s ..." % (name, dockerfile, ref))
    t0 = time.monotonic()
    cmd = ["podman", "build", "--runtime", "runc", "--timestamp", str(epoch), "--pull=never",
           # podman's layer cache hands back images made with other flags and names its
           # intermediate images in the history: every layer is built (an image whose inputs
           # did not change is not built at all, above), and no history is written.
           "--layers=false", "--omit-history",
           "-f", os.path.join(ROOT, dockerfile), "-t", ref] + (["--no-cache"] if no_cache else [])
    for k, v in sorted(args.items()):
        cmd += ["--build-arg", "%s=%s" % (k, v)]
    run(cmd + [ROOT])
    seconds = time.monotonic() - t0
    tmp = archive + ".part"
    if os.path.exists(tmp):
        os.unlink(tmp)
    run(["podman", "save", "--format", "oci-archive", "-o", tmp, ref])
    # The image this one replaced, if any, is untagged now: remove it and its kind.
    subprocess.run(["podman", "image", "prune", "-f"], stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    os.rename(tmp, archive)
    digest = run(["skopeo", "inspect", "--format", "{{.Digest}}", "oci-archive:" + archive],
                 quiet=True).strip()
    entry = {"name": name, "ref": ref, "normalized": normalize(ref), "digest": digest,
             "archive": os.path.relpath(archive, ROOT), "size": os.path.getsize(archive),
             "inputs": inputs, "build_seconds": round(seconds, 1)}
    with open(stamp + ".part", "w") as f:
        json.dump(entry, f, indent=1)
    os.rename(stamp + ".part", stamp)
    entry["built"] = True
    return entry


def write_index(entries):
    """index.json: every archive under build/images, by normalized reference."""
    index = {}
    for fn in sorted(os.listdir(OUT)):
        if fn.endswith(".json") and fn != "index.json":
            with open(os.path.join(OUT, fn)) as f:
                e = json.load(f)
            if os.path.exists(os.path.join(ROOT, e["archive"])):
                index[e["normalized"]] = {k: e[k] for k in ("name", "ref", "digest", "archive",
                                                              "size")}
    with open(os.path.join(OUT, "index.json.part"), "w") as f:
        json.dump(index, f, indent=1, sort_keys=True)
    os.rename(os.path.join(OUT, "index.json.part"), os.path.join(OUT, "index.json"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", help="comma-separated names (operator, worker, worker-mpich, "
                    "worker-ompi5, worker-cuda)")
    ap.add_argument("--cuda", action="store_true",
                    help="also the CUDA flavour (its nvidia/cuda bases must be pullable)")
    ap.add_argument("--no-cache", action="store_true", help="build every layer again (podman "
                    "build --no-cache): the digests must come out the same")
    ap.add_argument("--check", action="store_true", help="exit 77 with the reason when images "
                    "cannot be built here, 0 when they can")
    args = ap.parse_args()
    reason = why_not()
    if args.check:
        if reason:
            print("images: cannot build here: " + reason)
            return 77
        return 0
    if reason:
        print("images: " + reason, file=sys.stderr)
        return 1
    epoch = int(os.environ.get("SOURCE_DATE_EPOCH", "0"))
    os.makedirs(OUT, exist_ok=True)
    # One build at a time: a second caller waits, then finds the images made.
    lockf = open(os.path.join(OUT, ".lock"), "w")
    fcntl.flock(lockf, fcntl.LOCK_EX)
    try:
        version = chart_version()
        rev = revision()
        keys = {suite: base_key(suite) for suite in SUITES}
        tags = {suite: base_tag(suite, key) for suite, key in keys.items()}
        wanted = specs(version, tags, args.cuda or (args.only and "worker-cuda" in args.only))
        if args.only:
            names = set(args.only.split(","))
            unknown = names - {s[0] for s in wanted}
            if unknown:
                raise ImageError("--only: no image named %s" % ", ".join(sorted(unknown)))
            wanted = [s for s in wanted if s[0] in names]
        for suite in SUITES:
            if any(s[4] == suite for s in wanted):
                make_base(suite)
        entries = [build(*s[:4], epoch=epoch, version=version, rev=rev,
                         base_key=keys[s[4] or "bookworm"], no_cache=args.no_cache)
                   for s in wanted]
        write_index(entries)
    except ImageError as e:
        print("images: " + str(e), file=sys.stderr)
        return 1
    print()
    print("%-13s %-50s %-73s %9s" % ("IMAGE", "REFERENCE", "DIGEST", "SIZE"))
    for e in entries:
        print("%-13s %-50s %-73s %7.1f MB%s" % (e["name"], e["ref"], e["digest"],
                                                 e["size"] / 1e6,
                                                 "" if e["built"] else "  (unchanged)"))
    print("archives in %s (index.json)" % os.path.relpath(OUT, ROOT))
    if not args.cuda and not args.only:
        print("worker-cuda: not built (scripts/images.py --cuda, where nvidia/cuda images can be "
              "pulled)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
