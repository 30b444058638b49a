"""Images for the real nodes' containerd: the project's images from build/images, the pod sandbox
image (pause.c beside this file) and CoreDNS (the binary in KUBEBUILDER_ASSETS), imported without
a registry, as `kind load` does.

    archives = node_images(index_json, coredns_bin, cache_dir)   # [(archive, [names])]
    import_images(ctr_address, archives)

pause and CoreDNS are built once per content (the hash of pause.c, of the coredns binary) with
`podman build` from scratch, saved as OCI archives in cache_dir.
"""

import hashlib
import json
import os
import shutil
import subprocess
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"
COREDNS_IMAGE = "registry.k8s.io/coredns/coredns:v1.10.1"


class ImageError(Exception):
    pass


def _run(argv, **kw):
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)
    if p.returncode != 0:
        raise ImageError("%s: exit %d\n%s" % (" ".join(argv), p.returncode, p.stdout[-3000:]))
    return p.stdout


def _digest(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _build_scratch(ref, files, entrypoint, archive):
    """An image FROM scratch holding files ({path in image: file here}) saved as an OCI archive."""
    work = tempfile.mkdtemp(prefix="realnode-image-")
    try:
        lines = ["FROM scratch"]
        for i, (dest, src) in enumerate(sorted(files.items())):
            shutil.copy2(src, os.path.join(work, "f%d" % i))
            lines.append("COPY f%d %s" % (i, dest))
        lines.append("ENTRYPOINT %s" % json.dumps(entrypoint))
        with open(os.path.join(work, "Containerfile"), "w") as f:
            f.write("\n".join(lines) + "\n")
        _run(["podman", "build", "--runtime", "runc", "--timestamp", "0", "--pull=never", "-t", ref, work])
        tmp = archive + ".tmp"
        _run(["podman", "save", "--format", "oci-archive", "-o", tmp, ref])
        os.replace(tmp, archive)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def pause_archive(cache_dir):
    src = os.path.join(HERE, "pause.c")
    archive = os.path.join(cache_dir, "pause-%s.tar" % _digest(src)[:16])
    if not os.path.exists(archive):
        binary = os.path.join(cache_dir, "pause")
        _run(["gcc", "-Os", "-static", "-Wall", "-Wextra", "-Werror", "-o", binary, src])
        _build_scratch(PAUSE_IMAGE, {"/pause": binary}, ["/pause"], archive)
    return archive


def coredns_archive(coredns_bin, cache_dir):
    archive = os.path.join(cache_dir, "coredns-%s.tar" % _digest(coredns_bin)[:16])
    if not os.path.exists(archive):
        _build_scratch(COREDNS_IMAGE, {"/coredns": coredns_bin}, ["/coredns"], archive)
    return archive


def node_images(index_json, coredns_bin, cache_dir):
    """[(archive, [image names])] for every image a node holds: the project's (build/images'
    index.json, its normalized names) and the sandbox and CoreDNS images."""
    os.makedirs(cache_dir, exist_ok=True)
    out = [(pause_archive(cache_dir), [PAUSE_IMAGE]), (coredns_archive(coredns_bin, cache_dir), [COREDNS_IMAGE])]
    with open(index_json) as f:
        index = json.load(f)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(index_json))))
    by_archive = {}
    for name, entry in sorted(index.items()):
        path = entry["archive"]
        if not os.path.isabs(path):
            path = os.path.join(root, path)
        by_archive.setdefault(path, []).append(name)
    out += sorted(by_archive.items())
    return out


def _archive_ref(archive):
    """(reference, manifest digest) of an OCI archive's image (the reference is what `ctr images
    import` names it)."""
    out = _run(["tar", "-xOf", archive, "index.json"])
    for m in json.loads(out).get("manifests") or []:
        ref = (m.get("annotations") or {}).get("org.opencontainers.image.ref.name")
        if ref:
            return ref, m["digest"]
    raise ImageError("%s: no image reference in its index.json" % archive)


def _repository(name):
    """docker.io/library/x:tag -> docker.io/library/x."""
    slash = name.rfind("/")
    colon = name.rfind(":")
    return name[:colon] if colon > slash else name


def import_images(ctr_address, archives):
    """Imports each archive into containerd's k8s.io namespace (the CRI's) and names it as a pull
    would have: each of its names, and <repository>@<manifest digest> (what the kubelet then
    reports as the container's imageID)."""
    ctr = ["ctr", "--address", ctr_address, "-n", "k8s.io"]
    for archive, names in archives:
        _run(ctr + ["images", "import", archive])
        imported, digest = _archive_ref(archive)
        wanted = []
        for name in names:
            wanted += [name, "%s@%s" % (_repository(name), digest)]
        for name in wanted:
            if name != imported:
                subprocess.run(ctr + ["images", "rm", name], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                _run(ctr + ["images", "tag", imported, name])
        if imported not in wanted:
            _run(ctr + ["images", "rm", imported])
