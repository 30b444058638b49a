"""The container runtime of the simulated kubelet: images from local OCI archives, containers
run with runc (standard library only; needs root, skopeo, umoci and runc).

    store = ImageStore("build/images/index.json", cache_dir)
    image = store.pull("mpijob-worker:latest")      # PullError when no archive holds it
    ctr = Runtime(runc_root).create(cid, image, spec, work_dir)
    proc = ctr.start(log_file)                      # the shim's process (runcshim.py), once the
                                                    # container's runs; its exit status is the container's
                                                    # (128+N for signal N)
    ctr.signal(signal.SIGTERM); ctr.kill(); ctr.exec(argv, timeout); ctr.remove()

Pulling is a lookup of the reference, normalized as containerd does (docker.io/library/NAME:latest
for NAME), in the index `make images` writes (scripts/images.py); the archive is copied into an
OCI layout with skopeo and unpacked with umoci once per manifest digest, shared read-only by
every container of that image. Each container gets an overlay file system on it (its writes go
to its own upper folder) and a runc bundle whose config.json is made from the image's config and
the container's spec (ContainerSpec below):

  - process: Kubernetes' command/args semantics over the image's ENTRYPOINT/CMD (command
    replaces ENTRYPOINT and drops CMD; args alone replace CMD); the image's Env, then the pod's;
    workingDir, else the image's WorkingDir; runAsUser/runAsGroup, else the image's USER (names
    resolved in the image's /etc/passwd and /etc/group); HOME from the image's /etc/passwd;
    supplementary groups (fsGroup, supplementalGroups); the container runtime's default
    capabilities (containerd's list) with securityContext.capabilities add/drop ("ALL" allowed),
    all of them when privileged; noNewPrivileges when allowPrivilegeEscalation is false;
  - root: read-only with readOnlyRootFilesystem;
  - namespaces: new pid, ipc, uts and mount namespaces; the pod's network namespace by path;
    the pod's host name;
  - mounts: /proc, /dev, /dev/pts, /dev/shm, /dev/mqueue, /sys (read-only), the pod's /etc/hosts,
    /etc/resolv.conf and /etc/hostname, then each volume (bind, read-only where asked); a mount
    point the image lacks is made in the container's upper layer, its path resolved inside the
    container's root as runc resolves it (in_root);
  - cgroups: runc's own, <the caller's cgroup>/<container id> in each hierarchy (config.json
    gives no cgroupsPath).

A container runs under runcshim.py, which does what containerd's shim does (`runc create`, `runc
start`, then waits as the container's subreaper): a foreground `runc run` would pass the signals
the Go runtime sends itself (SIGURG) on to the container's first process, and mpirun takes them
for a user's. start() returns once the container's command runs (the shim's pid file): before runc
has saved the container's state, `runc kill` answers "container does not exist" and the signal is
lost. kill() checks its work: a container still running after `runc kill --all` is killed by its
process id (its freezer cgroup thawed first: a frozen process does not die of SIGKILL), then
every process of its cgroups; one still running after all that is a KillError naming it and
everything tried. runc's own errors are kept, never thrown away.

Container ids are the caller's; runc keeps its state under runc_root, so sweep(runc_root,
containers_dir) finds and removes what a crashed kubelet left.
"""

import fcntl
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import threading
import time

# The index's keys are made by scripts/images.py with the same rule a kubelet resolves by.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                                "scripts"))
from images import normalize  # noqa: E402

# containerd's default capabilities (oci.DefaultCapabilities / pkg/cap), which CRI containers
# get unless their securityContext adds or drops some.
DEFAULT_CAPS = ["CHOWN", "DAC_OVERRIDE", "FSETID", "FOWNER", "MKNOD", "NET_RAW", "SETGID", "SETUID",
                "SETFCAP", "SETPCAP", "NET_BIND_SERVICE", "SYS_CHROOT", "KILL", "AUDIT_WRITE"]
ALL_CAPS = DEFAULT_CAPS + [
    "DAC_READ_SEARCH", "LINUX_IMMUTABLE", "NET_BROADCAST", "NET_ADMIN", "IPC_LOCK", "IPC_OWNER",
    "SYS_MODULE", "SYS_RAWIO", "SYS_PTRACE", "SYS_PACCT", "SYS_ADMIN", "SYS_BOOT", "SYS_NICE",
    "SYS_RESOURCE", "SYS_TIME", "SYS_TTY_CONFIG", "LEASE", "AUDIT_CONTROL", "MAC_OVERRIDE",
    "MAC_ADMIN", "SYSLOG", "WAKE_ALARM", "BLOCK_SUSPEND", "AUDIT_READ", "PERFMON", "BPF",
    "CHECKPOINT_RESTORE"]
SHIM = os.path.join(os.path.dirname(os.path.abspath(__file__)), "runcshim.py")
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class PullError(Exception):
    """The image cannot be pulled: the kubelet reports ErrImagePull, then ImagePullBackOff (or,
    with never, ErrImageNeverPull)."""

    def __init__(self, message, never=False):
        super().__init__(message)
        self.never = never


def default_pull_policy(ref):
    """The API server's default imagePullPolicy: Always for a :latest or untagged reference
    without a digest, else IfNotPresent."""
    if "@" in ref:
        return "IfNotPresent"
    name = ref.rsplit("/", 1)[-1]
    tag = name.rpartition(":")[2] if ":" in name else ""
    return "Always" if tag in ("", "latest") else "IfNotPresent"


class CreateError(Exception):
    """The container cannot be made from its image and spec (CreateContainerError)."""


class ConfigError(CreateError):
    """The spec cannot hold for this image (CreateContainerConfigError), such as runAsNonRoot
    with an image that runs as root."""


def _run(cmd, timeout=900):
    """Runs a tool (skopeo, umoci); its output, OSError with its end when it fails. The limit is
    for a tool that hangs: unpacking a large image on a loaded machine takes minutes."""
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=timeout)
    if proc.returncode != 0:
        raise OSError("%s: exit %d: %s" % (" ".join(cmd[:2]), proc.returncode,
                                           proc.stdout.strip()[-400:]))
    return proc.stdout


class Image:
    """An unpacked image: its reference, digest, read-only root file system and config."""

    def __init__(self, ref, normalized, digest, rootfs, config):
        self.ref = ref
        self.normalized = normalized
        self.digest = digest
        self.rootfs = rootfs
        self.config = config          # the OCI image config's "config" part

    @property
    def image_id(self):
        """What a kubelet reports as a container's imageID: repository@digest."""
        return self.normalized.rsplit(":", 1)[0] + "@" + self.digest


def shared_cache_dir(index_path):
    """Where every cluster that runs the images of one index unpacks them: beside the index
    (build/images/unpacked), so that an image is unpacked once per digest, not once per
    cluster. Each container writes to an overlay of its own, never to the unpacked tree."""
    return os.path.join(os.path.dirname(os.path.abspath(index_path)), "unpacked")


# An unpacked image no longer in the index is removed once it is this old (seconds): a cluster
# started before the images were rebuilt may still be running containers on it.
STALE_UNPACK = 3600


class ImageStore:
    """Images from the OCI archives listed in index.json ({normalized ref: {archive, digest}}),
    unpacked under cache_dir once per digest."""

    def __init__(self, index_path, cache_dir):
        self.index_path = os.path.abspath(index_path)
        self.base = os.path.dirname(os.path.dirname(os.path.dirname(self.index_path)))
        self.cache_dir = os.path.abspath(cache_dir)
        self._lock = threading.Lock()
        self._images = {}             # digest -> Image

    def _index(self):
        try:
            with open(self.index_path) as f:
                return json.load(f)
        except FileNotFoundError:
            return {}
        except ValueError as e:
            raise PullError("the image index %s is not JSON: %s" % (self.index_path, e))

    def pull_all(self):
        """Unpacks every image of the index, as a node's image pre-pull does; returns the
        references."""
        refs = sorted(self._index())
        for ref in refs:
            self.pull(ref)
        return refs

    def _prune(self, keep):
        """Removes unpacked images the index no longer names, once they are STALE_UNPACK old.
        Called with the cache's lock held."""
        wanted = {e.get("digest", "").replace(":", "_") for e in self._index().values()} | {keep}
        now = time.time()
        for name in os.listdir(self.cache_dir):
            path = os.path.join(self.cache_dir, name)
            if name.startswith(".") or name in wanted or not os.path.isdir(path):
                continue
            try:
                if now - os.stat(path).st_mtime > STALE_UNPACK:
                    shutil.rmtree(path, ignore_errors=True)
            except OSError:
                pass

    def pull(self, ref, policy="IfNotPresent"):
        """The Image for ref, unpacked on first use. PullError says why not, in the words a
        kubelet's runtime uses.

        The archives of build/images are what the node holds, loaded as `kind load` loads
        them; no registry is reachable from this machine. So, as on a real node, imagePullPolicy
        Always (the default for a :latest or untagged reference) fails to pull, and Never
        fails for an image the node lacks."""
        if not ref:
            raise PullError("the container names no image")
        normalized = normalize(ref)
        if policy == "Always":
            raise PullError('failed to pull and unpack image "%s": failed to resolve reference "%s": no '
                            'registry is reachable from this node (its images are loaded, not pulled: '
                            'imagePullPolicy IfNotPresent)' % (normalized, normalized))
        entry = self._index().get(normalized)
        if entry is None and policy == "Never":
            raise PullError('Container image "%s" is not present with pull policy of Never' % ref, never=True)
        if entry is None:
            raise PullError('failed to pull and unpack image "%s": failed to resolve reference '
                            '"%s": %s: not found' % (normalized, normalized, normalized))
        archive = entry["archive"]
        if not os.path.isabs(archive):
            archive = os.path.join(self.base, archive)
        digest = entry["digest"]
        with self._lock:
            image = self._images.get(digest)
            if image is None:
                image = self._unpack(ref, normalized, digest, archive)
                self._images[digest] = image
        return image

    def _unpack(self, ref, normalized, digest, archive):
        d = os.path.join(self.cache_dir, digest.replace(":", "_"))
        done = os.path.join(d, "image.json")
        os.makedirs(self.cache_dir, exist_ok=True)
        # Several kubelets may share a cache: one unpacks, the others wait for it.
        with open(os.path.join(self.cache_dir, ".lock"), "w") as lockf:
            fcntl.flock(lockf, fcntl.LOCK_EX)
            if not os.path.exists(done):
                shutil.rmtree(d, ignore_errors=True)
                os.makedirs(d)
                try:
                    _run(["skopeo", "copy", "-q", "oci-archive:" + archive, "oci:%s/layout:image" % d])
                    _run(["umoci", "unpack", "--image", "%s/layout:image" % d, "%s/bundle" % d])
                    config = json.loads(_run(["skopeo", "inspect", "--config",
                                              "oci:%s/layout:image" % d]))
                except (OSError, subprocess.TimeoutExpired, ValueError) as e:
                    shutil.rmtree(d, ignore_errors=True)
                    raise PullError('failed to pull and unpack image "%s": %s' % (normalized, e))
                shutil.rmtree(os.path.join(d, "layout"), ignore_errors=True)
                with open(done + ".part", "w") as f:
                    json.dump({"digest": digest, "config": config.get("config") or {}}, f)
                os.rename(done + ".part", done)
                self._prune(os.path.basename(d))
        with open(done) as f:
            config = json.load(f)["config"]
        return Image(ref, normalized, digest, os.path.join(d, "bundle", "rootfs"), config)


# ---- the container's process, from the image and the pod ----------------------------------------

def argv_for(image_config, command, args):
    """Kubernetes' rules: command replaces ENTRYPOINT (and CMD goes); args replace CMD."""
    entrypoint = list(image_config.get("Entrypoint") or [])
    cmd = list(image_config.get("Cmd") or [])
    if command:
        return list(command) + list(args or [])
    if args:
        return entrypoint + list(args)
    return entrypoint + cmd


def _passwd(rootfs, name_or_id):
    """(uid, gid, home) from the image's /etc/passwd for a user name or uid, or None."""
    try:
        with open(os.path.join(rootfs, "etc", "passwd")) as f:
            for line in f:
                parts = line.rstrip("\n").split(":")
                if len(parts) >= 7 and (parts[0] == str(name_or_id) or parts[2] == str(name_or_id)):
                    return int(parts[2]), int(parts[3]), parts[5]
    except OSError:
        pass
    return None


def _group(rootfs, name):
    try:
        with open(os.path.join(rootfs, "etc", "group")) as f:
            for line in f:
                parts = line.split(":")
                if len(parts) >= 3 and parts[0] == name:
                    return int(parts[2])
    except OSError:
        pass
    return None


def resolve_user(image, run_as_user, run_as_group):
    """(uid, gid, home): the pod's runAsUser/runAsGroup over the image's USER."""
    uid, gid, home = 0, None, None
    user = (image.config.get("User") or "").strip()
    if user:
        name, _, group = user.partition(":")
        if name.isdigit():
            uid = int(name)
        else:
            found = _passwd(image.rootfs, name)
            if found is None:
                raise CreateError('unable to find user %s: no matching entries in passwd file' % name)
            uid, gid = found[0], found[1]
        if group:
            gid = int(group) if group.isdigit() else _group(image.rootfs, group)
            if gid is None:
                raise CreateError("unable to find group %s: no matching entries in group file" % group)
    if run_as_user is not None:
        uid, gid = int(run_as_user), None
    if run_as_group is not None:
        gid = int(run_as_group)
    found = _passwd(image.rootfs, uid)
    if gid is None:
        gid = found[1] if found else 0
    home = found[2] if found else "/"
    return uid, gid, home


# Capability numbers (linux/capability.h), to read a bounding set.
CAP_NUMBERS = {
    "CHOWN": 0, "DAC_OVERRIDE": 1, "DAC_READ_SEARCH": 2, "FOWNER": 3, "FSETID": 4, "KILL": 5,
    "SETGID": 6, "SETUID": 7, "SETPCAP": 8, "LINUX_IMMUTABLE": 9, "NET_BIND_SERVICE": 10,
    "NET_BROADCAST": 11, "NET_ADMIN": 12, "NET_RAW": 13, "IPC_LOCK": 14, "IPC_OWNER": 15,
    "SYS_MODULE": 16, "SYS_RAWIO": 17, "SYS_CHROOT": 18, "SYS_PTRACE": 19, "SYS_PACCT": 20,
    "SYS_ADMIN": 21, "SYS_BOOT": 22, "SYS_NICE": 23, "SYS_RESOURCE": 24, "SYS_TIME": 25,
    "SYS_TTY_CONFIG": 26, "MKNOD": 27, "LEASE": 28, "AUDIT_WRITE": 29, "AUDIT_CONTROL": 30,
    "SETFCAP": 31, "MAC_OVERRIDE": 32, "MAC_ADMIN": 33, "SYSLOG": 34, "WAKE_ALARM": 35,
    "BLOCK_SUSPEND": 36, "AUDIT_READ": 37, "PERFMON": 38, "BPF": 39, "CHECKPOINT_RESTORE": 40}


def host_capabilities():
    """The capabilities this process may hand on (its bounding set), as containerd gives a
    privileged container the host's: a capability the kernel or the caller lacks cannot be set."""
    try:
        with open("/proc/self/status") as f:
            bits = int(next(line.split()[1] for line in f if line.startswith("CapBnd:")), 16)
    except (OSError, StopIteration, ValueError):
        return list(ALL_CAPS)
    return [c for c in ALL_CAPS if bits >> CAP_NUMBERS[c] & 1]


def capabilities(security_context, privileged=False):
    host = host_capabilities()
    if privileged:
        return ["CAP_" + c for c in host]
    caps = list(DEFAULT_CAPS)
    spec = (security_context or {}).get("capabilities") or {}
    drop = [c.upper().removeprefix("CAP_") for c in spec.get("drop") or []]
    add = [c.upper().removeprefix("CAP_") for c in spec.get("add") or []]
    if "ALL" in drop:
        caps = []
    caps = [c for c in caps if c not in drop]
    for c in (ALL_CAPS if "ALL" in add else add):
        if c not in caps:
            caps.append(c)
    return ["CAP_" + c for c in caps if c in host]


class ContainerSpec:
    """What the kubelet decided for one container: command, args and env already expanded."""

    def __init__(self, command=None, args=None, env=None, working_dir=None, run_as_user=None,
                 run_as_group=None, groups=None, security_context=None, mounts=None,
                 hostname="", netns_path=None, etc_files=None):
        self.command = command or []
        self.args = args or []
        self.env = env or {}                       # ordered: the pod's variables
        self.working_dir = working_dir
        self.run_as_user = run_as_user
        self.run_as_group = run_as_group
        self.groups = groups or []
        self.security_context = security_context or {}
        self.mounts = mounts or []                 # [{"source", "target", "readOnly"}]
        self.hostname = hostname
        self.netns_path = netns_path
        self.etc_files = etc_files or {}           # {"/etc/hosts": host path, ...}


def oci_config(image, spec, rootfs):
    """The runc config.json for a container of image with spec, its root at rootfs."""
    sc = spec.security_context
    argv = argv_for(image.config, spec.command, spec.args)
    if not argv:
        raise CreateError("no command specified: the image has no ENTRYPOINT or CMD and the "
                          "container no command")
    uid, gid, home = resolve_user(image, spec.run_as_user, spec.run_as_group)
    if sc.get("runAsNonRoot") and uid == 0:
        raise ConfigError("container has runAsNonRoot and image will run as root")
    env = {}
    for item in image.config.get("Env") or []:
        k, _, v = item.partition("=")
        env[k] = v
    env.setdefault("PATH", DEFAULT_PATH)
    env["HOSTNAME"] = spec.hostname
    env.update(spec.env)
    env.setdefault("HOME", home)
    caps = capabilities(sc, bool(sc.get("privileged")))
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)
    mounts = [
        {"destination": "/proc", "type": "proc", "source": "proc"},
        {"destination": "/dev", "type": "tmpfs", "source": "tmpfs",
         "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
        {"destination": "/dev/pts", "type": "devpts", "source": "devpts",
         "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"]},
        {"destination": "/dev/shm", "type": "tmpfs", "source": "shm",
         "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"]},
        {"destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue",
         "options": ["nosuid", "noexec", "nodev"]},
        {"destination": "/sys", "type": "sysfs", "source": "sysfs",
         "options": ["nosuid", "noexec", "nodev", "ro"]},
    ]
    for target, source in sorted(spec.etc_files.items()):
        mounts.append({"destination": target, "type": "bind", "source": source,
                       "options": ["rbind", "rprivate", "ro" if target != "/etc/hosts" else "rw"]})
    for m in spec.mounts:
        opts = ["rbind", "rprivate"] + (["ro"] if m.get("readOnly") else [])
        mounts.append({"destination": m["target"], "type": "bind", "source": m["source"],
                       "options": opts})
    namespaces = [{"type": "pid"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"}]
    if spec.netns_path:
        namespaces.append({"type": "network", "path": spec.netns_path})
    else:
        namespaces.append({"type": "network"})
    return {
        "ociVersion": "1.0.2",
        "process": {
            "terminal": False,
            "user": {"uid": uid, "gid": gid, "additionalGids": sorted(set(spec.groups))},
            "args": argv,
            "env": ["%s=%s" % kv for kv in env.items()],
            "cwd": spec.working_dir or image.config.get("WorkingDir") or "/",
            "capabilities": {"bounding": caps, "effective": caps, "permitted": caps,
                             "inheritable": []},
            "rlimits": [{"type": "RLIMIT_NOFILE", "hard": nofile[1], "soft": nofile[1]}],
            "noNewPrivileges": sc.get("allowPrivilegeEscalation") is False,
        },
        "root": {"path": rootfs, "readonly": bool(sc.get("readOnlyRootFilesystem"))},
        "hostname": spec.hostname,
        "mounts": mounts,
        "linux": {
            "namespaces": namespaces,
            "maskedPaths": ["/proc/acpi", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
                            "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug",
                            "/proc/scsi", "/sys/firmware"],
            "readonlyPaths": ["/proc/asound", "/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys",
                              "/proc/sysrq-trigger"],
        },
    }


# ---- runc --------------------------------------------------------------------------------------

# Generous limits: on a loaded 2-core machine one runc call can take seconds.
RUNC_TIMEOUT = 120.0    # one runc call (state, kill, delete, list)
START_TIMEOUT = 120.0   # from starting the shim to the container's process running
KILL_WAIT = 10.0        # for the container to end after each way of killing it


class KillError(Exception):
    """The container could not be signalled, or still runs after every way of killing it was
    tried; the message names the container and says what was tried."""


def _runc_call(argv, timeout=RUNC_TIMEOUT):
    """(exit status, what runc said) of one runc call; the status is None when runc could not
    run or gave no answer in time. runc's error lines (time=... level=error msg="...") come back
    as their messages."""
    try:
        p = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, "no answer in %.0f s" % timeout
    except OSError as e:
        return None, str(e)
    text = (p.stderr or "").strip()
    msgs = re.findall(r'msg="((?:[^"\\]|\\.)*)"', text)
    return p.returncode, "; ".join(msgs) if msgs else text[-400:]


def _describe(rc, said):
    return "%s%s" % ("exit %d" % rc if rc is not None else "failed", ": " + said if said else "")


def _start_time(pid):
    """The start time of process pid (clock ticks after boot), None when it is gone or a
    zombie: with the pid it names one process, whatever pid the kernel hands out later."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] in ("Z", "X") else fields[19]


# cgroup v1 mount options that name no controller.
CGROUP_V1_OPTIONS = {"rw", "ro", "noprefix", "xattr", "clone_children", "cpuset_v2_mode", "none"}


def _cgroup_mounts():
    """{controller or "name=..." or "" (cgroup2): mount point} from /proc/self/mountinfo."""
    mounts = {}
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                left, _, right = line.partition(" - ")
                fields, more = left.split(), right.split()
                if len(fields) < 5 or len(more) < 3 or fields[3] != "/":
                    continue
                if more[0] == "cgroup2":
                    mounts.setdefault("", fields[4])
                elif more[0] == "cgroup":
                    for opt in more[2].split(","):
                        if opt.startswith("name=") or opt not in CGROUP_V1_OPTIONS and "=" not in opt:
                            mounts.setdefault(opt, fields[4])
    except OSError:
        pass
    return mounts


def container_cgroups(pid, cid):
    """The folders of the cgroups runc made for container cid whose process pid is in them: in
    each hierarchy, the one named after the container (runc makes <its caller's cgroup>/<cid>
    when config.json gives no cgroupsPath). A cgroup with another name (runc could not make the
    container's own and left it in its caller's) is not the container's alone: never listed."""
    mounts = _cgroup_mounts()
    dirs = []
    try:
        with open("/proc/%d/cgroup" % pid) as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if os.path.basename(path) != cid:
            continue
        key = controllers.split(",")[0] if controllers else ""
        mount = mounts.get(key)
        if mount:
            d = os.path.join(mount, path.lstrip("/"))
            if os.path.isdir(d) and d not in dirs:
                dirs.append(d)
    return dirs


def _write(path, text):
    try:
        with open(path, "w") as f:
            f.write(text)
        return True
    except OSError:
        return False


def _thaw(cgroup_dirs):
    """Thaws the container's cgroups: a frozen process (a `runc kill --all` cut off while it had
    the freezer on, `runc pause`) does not die of SIGKILL until it is thawed."""
    for d in cgroup_dirs:
        if os.path.exists(os.path.join(d, "freezer.state")):
            _write(os.path.join(d, "freezer.state"), "THAWED")
        if os.path.exists(os.path.join(d, "cgroup.freeze")):
            _write(os.path.join(d, "cgroup.freeze"), "0")


def _kill_cgroups(cgroup_dirs):
    """SIGKILL to every process of the container's cgroups (cgroup.kill where cgroup2 has it);
    returns how many processes were signalled."""
    me = os.getpid()
    n = 0
    for d in cgroup_dirs:
        if os.path.exists(os.path.join(d, "cgroup.kill")):
            _write(os.path.join(d, "cgroup.kill"), "1")
        try:
            with open(os.path.join(d, "cgroup.procs")) as f:
                pids = [int(x) for x in f.read().split()]
        except (OSError, ValueError):
            continue
        for pid in pids:
            if pid == me:
                continue
            try:
                os.kill(pid, signal.SIGKILL)
                n += 1
            except ProcessLookupError:
                pass
    return n


class Container:
    """One container: its overlay root, bundle and runc state."""

    def __init__(self, runtime, cid, work_dir):
        self.runtime = runtime
        self.id = cid
        self.dir = work_dir
        self.rootfs = os.path.join(work_dir, "rootfs") if work_dir else None
        self.proc = None
        self.init_pid = None          # the container's process on this machine, once it runs
        self.init_started = None      # and its start time (_start_time), against pid reuse

    def _runc(self, *args):
        return self.runtime._runc_argv(*args)

    def start(self, log_file, timeout=START_TIMEOUT):
        """Starts the container, with its output appended to log_file, through runcshim.py
        (`runc create` and `runc start` as a shim does, never a foreground `runc run`, which
        passes the Go runtime's SIGURG on to the container), and returns that Popen (its exit
        status is the container's) once the container's process runs, as a runtime's
        StartContainer returns, or once the shim ended (it could not start the container: the
        log says why). Until runc has written the container's state, `runc kill` knows no such
        container: a kill sent earlier would be lost."""
        pid_file = os.path.join(self.dir, "init.pid")
        # runc writes its pid file through ".<name>", made with O_EXCL: a stale one fails it.
        for stale in (pid_file, pid_file + ".created", os.path.join(self.dir, ".init.pid.created")):
            if os.path.exists(stale):
                os.unlink(stale)
        with open(log_file, "ab") as logf:
            self.proc = subprocess.Popen([sys.executable, SHIM, pid_file, self.dir, self.id] + self._runc(),
                                         stdin=subprocess.DEVNULL, stdout=logf, stderr=logf,
                                         start_new_session=True)
        end = time.monotonic() + timeout
        while True:
            try:
                with open(pid_file) as f:
                    self.init_pid = int(f.read().strip())
                self.init_started = _start_time(self.init_pid)
                return self.proc
            except (OSError, ValueError):
                pass
            if self.proc.poll() is not None:
                return self.proc
            if time.monotonic() >= end:
                break
            time.sleep(0.02)
        try:
            self.kill()
        except KillError as e:
            raise CreateError("runc did not start container %s in %.0f s, and %s"
                              % (self.id, timeout, e)) from None
        raise CreateError("runc did not start container %s in %.0f s" % (self.id, timeout))

    def pid(self):
        """The host pid of the container's process while it runs, or None."""
        if self.init_pid is not None:
            return self._live_init()
        state = self.runtime.state(self.id)
        return state.get("pid") if state.get("status") == "running" else None

    def _live_init(self):
        """init_pid while that process lives (not a zombie, not a later process with its pid)."""
        if self.init_pid is None or self.init_started is None:
            return None
        return self.init_pid if _start_time(self.init_pid) == self.init_started else None

    def ended(self):
        """True once the container's process is gone and its shim has exited."""
        if self.proc is not None and self.proc.poll() is None:
            return False
        return self._live_init() is None

    def _wait_ended(self, seconds):
        end = time.monotonic() + seconds
        while not self.ended():
            if time.monotonic() >= end:
                return False
            time.sleep(0.02)
        return True

    def signal(self, sig):
        """Sends sig to the container's process (`runc kill`); SIGKILL goes through kill().
        KillError when runc could not signal a container that still runs."""
        if sig == signal.SIGKILL:
            return self.kill()
        if self.ended():
            return
        name = signal.Signals(sig).name.removeprefix("SIG")
        rc, said = _runc_call(self._runc("kill", self.id, name))
        if rc != 0 and not self.ended():
            raise KillError("container %s: runc kill %s: %s" % (self.id, name, _describe(rc, said)))

    def kill(self, wait=KILL_WAIT):
        """SIGKILL to every process of the container, and a check that it ended: `runc kill
        --all`, then, while it still runs after `wait` seconds, SIGKILL to its process by pid
        (its freezer thawed first), then to every process of its cgroups. Returns what did not
        work on the way (empty when runc's kill did); raises KillError, naming the container and
        all that was tried, when it still runs after all of them."""
        if self.ended():
            return []
        tried = []
        rc, said = _runc_call(self._runc("kill", "--all", self.id, "KILL"))
        if self._wait_ended(wait):
            return [] if rc == 0 else ["runc kill --all %s KILL: %s" % (self.id, _describe(rc, said))]
        tried.append("runc kill --all %s KILL (%s)" % (self.id, _describe(rc, said) if rc != 0 else
                                                       "exit 0, the container still ran %.0f s later" % wait))
        pid = self._live_init()
        if pid is not None:
            cgroups = container_cgroups(pid, self.id)
            _thaw(cgroups)
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            if self._wait_ended(wait):
                return tried + ["SIGKILL to its process %d worked" % pid]
            tried.append("SIGKILL to its process %d" % pid)
            _thaw(cgroups)
            n = _kill_cgroups(cgroups)
            if self._wait_ended(wait):
                return tried + ["SIGKILL to the %d processes of its cgroups worked" % n]
            tried.append("SIGKILL to the %d processes of its cgroups %s" % (n, ", ".join(cgroups) or "(none found)"))
        elif self.init_pid is None:
            tried.append("its process is unknown (runc never said it started)")
        if self.proc is not None and self.proc.poll() is None and (pid is None or self._live_init() is None):
            # The container's process is gone (or never came), its shim is what is left.
            self.proc.kill()
            if self._wait_ended(wait):
                return tried + ["SIGKILL to its shim (pid %d) worked" % self.proc.pid]
            tried.append("SIGKILL to its shim (pid %d)" % self.proc.pid)
        raise KillError("container %s still runs after %s" % (self.id, "; ".join(tried)))

    def exec(self, argv, timeout):
        """Runs argv in the running container (an exec probe); returns its exit status, or
        None when it ran out of time."""
        try:
            return subprocess.run(self._runc("exec", self.id) + list(argv), stdin=subprocess.DEVNULL,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                  timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            return None

    def remove(self):
        """Deletes the runc container, unmounts its root and removes its folder. KillError when
        runc still has the container afterwards."""
        rc, said = _runc_call(self._runc("delete", "--force", self.id))
        if self.rootfs:
            _unmount(self.rootfs)
        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)
        if rc != 0 and os.path.exists(os.path.join(self.runtime.root, self.id)):
            raise KillError("container %s: runc delete --force: %s" % (self.id, _describe(rc, said)))


def in_root(root, path):
    """root/path with every symbolic link on the way resolved inside root (an absolute link
    target starts again at root; .. stops at root), as runc resolves a mount's destination
    (securejoin). The last component may be a link: it is resolved too."""
    rest = [p for p in path.split("/") if p not in ("", ".")]
    cur, links = root, 0
    while rest:
        part = rest.pop(0)
        if part == "..":
            cur = os.path.dirname(cur) if cur != root else root
            continue
        nxt = os.path.join(cur, part)
        if not os.path.islink(nxt):
            cur = nxt
            continue
        links += 1
        if links > 40:
            raise CreateError("%s: too many levels of symbolic links in the image" % path)
        target = os.readlink(nxt)
        if target.startswith("/"):
            cur = root
        rest = [p for p in target.split("/") if p not in ("", ".")] + rest
    return cur


def _unmount(path):
    if os.path.ismount(path):
        subprocess.run(["umount", "-l", path], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


class Runtime:
    def __init__(self, root, runc="runc"):
        self.root = os.path.abspath(root)
        self.runc = runc
        os.makedirs(self.root, exist_ok=True)

    def create(self, cid, image, spec, work_dir):
        """A container ready to start: overlay root on the image, bundle with config.json."""
        c = Container(self, cid, os.path.abspath(work_dir))
        c.remove()
        for sub in ("upper", "work", "rootfs"):
            os.makedirs(os.path.join(c.dir, sub))
        try:
            subprocess.run(["mount", "-t", "overlay", "overlay", "-o",
                            "lowerdir=%s,upperdir=%s/upper,workdir=%s/work" % (image.rootfs, c.dir, c.dir),
                            c.rootfs], check=True, capture_output=True, text=True)
        except subprocess.CalledProcessError as e:
            shutil.rmtree(c.dir, ignore_errors=True)
            raise CreateError("overlay mount of the image's root failed: %s" % e.stderr.strip())
        try:
            config = oci_config(image, spec, c.rootfs)
            # Mount points the image lacks are made in the container's own upper layer, their
            # paths resolved inside its root as runc resolves them (the image's /var/run is a
            # link to /run: followed from here, it would lead out into this machine's /run).
            for m in config["mounts"]:
                if m["type"] != "bind":
                    continue
                target = in_root(c.rootfs, m["destination"])
                if os.path.lexists(target):
                    continue
                if os.path.isdir(m["source"]):
                    os.makedirs(target, exist_ok=True)
                else:
                    os.makedirs(os.path.dirname(target), exist_ok=True)
                    open(target, "a").close()
            with open(os.path.join(c.dir, "config.json"), "w") as f:
                json.dump(config, f, indent=1)
        except (CreateError, OSError):
            c.remove()
            raise
        return c

    def _runc_argv(self, *args):
        return [self.runc, "--root", self.root] + list(args)

    def state(self, cid):
        """`runc state` of a container ({} when runc has none or does not answer)."""
        try:
            out = subprocess.run(self._runc_argv("state", cid), capture_output=True, text=True,
                                 timeout=RUNC_TIMEOUT)
            return json.loads(out.stdout) if out.returncode == 0 else {}
        except (OSError, ValueError, subprocess.TimeoutExpired):
            return {}

    def found(self, cid):
        """A Container for one runc has under this root (what sweep() finds), with its process
        from `runc state`, so that kill() can check its work."""
        c = Container(self, cid, None)
        state = self.state(cid)
        if state.get("status") in ("created", "running", "paused") and state.get("pid"):
            c.init_pid = int(state["pid"])
            c.init_started = _start_time(c.init_pid)
        return c

    def list(self):
        """The ids of the containers runc knows under this root."""
        try:
            out = subprocess.run(self._runc_argv("list", "-q"), capture_output=True,
                                 text=True, timeout=RUNC_TIMEOUT).stdout
        except (OSError, subprocess.TimeoutExpired):
            return []
        return out.split()

    def run_processes(self):
        """The pids of the shims and of the `runc run`, `runc create` and `runc start`
        processes working under this root: a container they are still making has no state yet,
        so runc lists no such container."""
        found = []
        root = self.root.encode()
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open("/proc/%s/cmdline" % pid, "rb") as f:
                    argv = f.read().split(b"\0")
            except OSError:
                continue
            if ({SHIM.encode(), b"run", b"create", b"start"} & set(argv) and b"--root" in argv
                    and argv[argv.index(b"--root") + 1:][:1] == [root]):
                found.append(int(pid))
        return found


def sweep(runc_root, containers_dir):
    """Removes every container runc has under runc_root, and the overlay roots and folders
    under containers_dir: what a kubelet that died without cleaning up left. The shims and runc
    processes of that root go first, so that none makes a container meanwhile; each container is
    killed as Container.kill() does (checked, with its fallbacks), then deleted. Returns the ids;
    KillError (after everything else was done) names what could not be removed."""
    removed, failed = [], []
    if os.path.isdir(runc_root) and shutil.which("runc"):
        rt = Runtime(runc_root)
        for pid in rt.run_processes():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for cid in rt.list():
            c = rt.found(cid)
            try:
                c.kill()
                c.remove()
                removed.append(cid)
            except KillError as e:
                failed.append(str(e))
    if os.path.isdir(containers_dir):
        for name in os.listdir(containers_dir):
            _unmount(os.path.join(containers_dir, name, "rootfs"))
        shutil.rmtree(containers_dir, ignore_errors=True)
    if failed:
        raise KillError("; ".join(failed))
    return removed


def available():
    """None when containers can run here, else why not."""
    if os.geteuid() != 0:
        return "running containers needs root"
    missing = [t for t in ("runc", "skopeo", "umoci") if shutil.which(t) is None]
    if missing:
        return "%s not installed" % ", ".join(missing)
    return None


