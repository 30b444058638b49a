#!/usr/bin/env python3
"""Starts the API server the integration tests run against.

    python3 tests/apiserver/launch.py --state-dir DIR [--token T] [--background]

Without KUBEBUILDER_ASSETS it becomes the API-server double (apiserver.py, exec'd in place, so the
process id is the server's). When KUBEBUILDER_ASSETS names a directory holding `etcd` and
`kube-apiserver` (the controller-runtime envtest convention) it starts a real etcd and
kube-apiserver on loopback, installs the CRDs the operator needs, and supervises both until it is
sent SIGTERM or SIGINT.

Either way DIR ends up with: ca.crt, kubeconfig, port, pid (one process id per line; killing
the process group of the first one is enough), info.json ({"kind": "double"|"real",
"kubernetesService": {"ip": "10.96.0.1", "port": 443, "target": "127.0.0.1:PORT"}}: the ClusterIP
and port of the `kubernetes` Service and the address behind it, which a node's proxy forwards
to) and, written last, ready. The serving certificate holds the names of a real API server's:
127.0.0.1, 10.96.0.1, kubernetes, kubernetes.default, kubernetes.default.svc and
kubernetes.default.svc.cluster.local.

--control-plane, with real binaries, also starts kube-controller-manager and kube-scheduler from
KUBEBUILDER_ASSETS against the admin kubeconfig (leader election off, secure ports on 127.0.0.1,
the ServiceAccount admission plugin on); info.json then says {"kind": "real", "controlPlane": true}
and pid lists them too. They are stopped first on SIGTERM. With the double it turns on what
kube-controller-manager does for pods' in-cluster configuration (each namespace's `default`
ServiceAccount and kube-root-ca.crt) and the ServiceAccount admission plugin; the double runs no
scheduler nor workload controllers (tests/cluster/cluster.py plays those), so its info.json does not
say controlPlane. Without it, either server admits pods without the ServiceAccount plugin.

--workload-api serves kube-scheduler's Workload API (scheduling.k8s.io/v1alpha2 workloads and
podgroups, Kubernetes 1.36): a real release of 1.36 or later gets the API's runtime-config and its
feature gates (WORKLOAD_API_GATES) on kube-apiserver, kube-controller-manager and kube-scheduler; an
older one starts as usual, without it; the double answers as 1.36 and serves both kinds.

--user NAME (real servers only, repeatable) adds a cluster-admin user NAME with token NAME-token
and DIR/NAME.kubeconfig; the server's audit log, DIR/audit.log, records each of its requests once,
as it arrives (stage RequestReceived, level Metadata). tests/bench/bench_peer.py counts two
operators' requests with it.

--background returns once DIR/ready exists (or fails after 60 s), leaving the server running in
its own session; stop it with: kill -TERM -$(head -1 DIR/pid) (stop_background() from Python).
"""

import argparse
import ctypes
import json
import os
import random
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "tests", "support"))
from atomic import append_whole, write_atomic  # noqa: E402
from pyresults import record_server  # noqa: E402
from deadline import scaled  # noqa: E402

# Seconds for the server (and again for the controllers) to be ready, scaled by
# $MPIJOB_TEST_TIME_SCALE: a real etcd and kube-apiserver starting on a busy 2-core machine.
READY_TIMEOUT = scaled(90.0)
STOP_GRACE = 5.0      # seconds for the children to stop before SIGKILL (tests/support allows 8 in all)
PORT_TRIES = 4        # starts of a server whose port was taken before it bound it


def log(msg):
    sys.stderr.write("launch: %s\n" % msg)


def stop_background(state_dir, seconds):
    """Stops what --background left running for state_dir: SIGTERM to the process group of the
    first process in its pid file, then up to `seconds` for that group to be gone. Quiet when
    nothing runs there."""
    try:
        with open(os.path.join(state_dir, "pid")) as f:
            pid = int(f.readline())
        os.killpg(pid, signal.SIGTERM)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            os.killpg(pid, 0)           # ProcessLookupError once the group is gone
            time.sleep(0.05)
    except (OSError, ValueError):
        pass
    sys.stderr.flush()


def die_with_parent():
    """preexec_fn: the child gets SIGTERM when its parent (this launcher) dies."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM, 0, 0, 0)   # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def ephemeral_ports():
    """The kernel's range of source ports for outgoing connections (ip_local_port_range)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low, high = (int(x) for x in f.read().split())
        return low, high
    except (OSError, ValueError):
        return 32768, 60999


def free_port():
    """A port free on 127.0.0.1 now, for a server about to start, drawn at random from below the
    kernel's ephemeral range. A port the kernel handed out as free (bind to port 0) comes from
    that range, and between its release here and the server's bind any outgoing connection (a
    kubelet's, another test's) may take it as its source port: on a busy machine that happened,
    and kube-apiserver exited with "address already in use". Below the range only another server
    can take it; Real.serve_on_free_ports starts the server again on other ports if one did."""
    low, _ = ephemeral_ports()
    floor = 20000 if low > 21024 else 1024
    for _ in range(200):
        port = random.randrange(floor, low)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port on 127.0.0.1 in %d-%d" % (floor, low - 1))


class PortTaken(RuntimeError):
    """A child server exited because the port it was given was taken before it bound it."""


def assets(*names):
    """The paths of the named binaries in KUBEBUILDER_ASSETS, or None unless all are there."""
    folder = os.environ.get("KUBEBUILDER_ASSETS")
    if not folder:
        return None
    paths = tuple(os.path.join(folder, n) for n in names)
    return paths if all(os.access(p, os.X_OK) for p in paths) else None


def real_assets():
    found = assets("etcd", "kube-apiserver")
    if found is None and os.environ.get("KUBEBUILDER_ASSETS"):
        log("KUBEBUILDER_ASSETS=%s lacks etcd or kube-apiserver; using the double" % os.environ["KUBEBUILDER_ASSETS"])
    return found


# --------------------------------------------------------------------------------------------
# The double
# --------------------------------------------------------------------------------------------

RBAC_TOKEN = "operator-token"   # the token of <state-dir>/operator.kubeconfig (--rbac)


def run_double(args):
    write_atomic(os.path.join(args.state_dir, "pid"), "%d\n" % os.getpid())
    argv = [sys.executable, os.path.join(HERE, "apiserver.py"), "--state-dir", args.state_dir,
            "--token", args.token]
    if args.bookmark_interval is not None:
        argv += ["--bookmark-interval", str(args.bookmark_interval)]
    for crd in args.extra_crd:
        argv += ["--extra-crd", crd]
    if args.without_crds:
        argv += ["--without-crds"]
    if args.control_plane:
        argv += ["--control-plane"]
    if args.workload_api:
        argv += ["--workload-api"]
    for f in args.rbac:
        argv += ["--rbac", f]
    if os.environ.get("MPIJOB_DOUBLE_KUBERNETES"):   # the release the double answers as (release.py)
        argv += ["--kubernetes", os.environ["MPIJOB_DOUBLE_KUBERNETES"]]
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, argv)


# --------------------------------------------------------------------------------------------
# A real etcd + kube-apiserver
# --------------------------------------------------------------------------------------------

def crd(group, versions, plural, kind, singular, short=()):
    schema = {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "%s.%s" % (plural, group)},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": plural, "singular": singular, "kind": kind, "listKind": kind + "List",
                      "shortNames": list(short)},
            "versions": [{"name": v, "served": True, "storage": i == 0, "schema": schema,
                          "subresources": {"status": {}}} for i, v in enumerate(versions)],
        },
    }


CRDS = [
    crd("kubeflow.org", ["v2beta1", "v1alpha2"], "mpijobs", "MPIJob", "mpijob", ["mpij"]),
    crd("scheduling.volcano.sh", ["v1beta1"], "podgroups", "PodGroup", "podgroup", ["pg", "podgroup-v1beta1"]),
    crd("scheduling.x-k8s.io", ["v1alpha1"], "podgroups", "PodGroup", "podgroup", ["pgs"]),
]


def project_crd():
    """The MPIJob CRD users install (manifests/crd), with its schema, printer columns and
    versions, so that the real server admits MPIJobs as a cluster does."""
    import yaml
    with open(os.path.join(os.path.dirname(os.path.dirname(HERE)), "manifests", "crd",
                           "kubeflow.org_mpijobs.yaml")) as f:
        return yaml.safe_load(f)


class Stopped(Exception):
    """SIGTERM or SIGINT arrived while the server was starting."""


class Real:
    """A real etcd and kube-apiserver, supervised from the main thread.

    Signal handlers only set `stop_requested`: the work of stopping (terminating and reaping the
    children) happens in the main loop. A handler that itself waited for a child could deadlock
    on subprocess's internal lock, held by the poll() it interrupted, and then the launcher
    neither exited nor reaped its children."""

    def __init__(self, args, etcd_bin, apiserver_bin):
        self.args = args
        self.dir = args.state_dir
        self.etcd_bin = etcd_bin
        self.apiserver_bin = apiserver_bin
        self.procs = []
        self.usage_log = None   # MPIJOB_TEST_RBAC_USAGE, once start() knows the operator's user
        self.rbac_user = None
        self.audit_offset = 0   # how much of audit.log write_usage has read
        self.spawned = []       # (argv, log name, ready check or None), in start order: for restart()
        self.stopping = False
        self.stop_requested = False

    def spawn(self, argv, logname, ready=None):
        """Starts a child; `ready` (a function, true once it serves) is what restart() waits for
        before starting the next."""
        self.spawned.append((argv, logname, ready))
        path = os.path.join(self.dir, logname)
        out = open(path, "ab")
        start = out.tell()
        # Each child in its own session: a SIGTERM to the launcher's process group reaches the
        # launcher alone, which then stops kube-apiserver before etcd (about 1 s instead of 4).
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                             preexec_fn=die_with_parent, close_fds=True, start_new_session=True)
        out.close()
        p.log_path, p.log_start = path, start
        self.procs.append(p)
        return p

    @staticmethod
    def said(p):
        """What child p wrote to its log since it was started."""
        try:
            with open(p.log_path, "rb") as f:
                f.seek(p.log_start)
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def serve_on_free_ports(self, count, spawn, what, deadline):
        """spawn(*ports), given count free ports, starts servers and returns the check that they
        serve; waited for until the deadline. When one exits because its port was taken by
        another server first (free_port), those it started are stopped and spawn is called again
        with other ports, up to PORT_TRIES times. Returns the ports."""
        for attempt in range(1, PORT_TRIES + 1):
            ports = [free_port() for _ in range(count)]
            n = len(self.procs)
            ready = spawn(*ports)
            try:
                self.wait_for(what, ready, deadline)
                return ports
            except PortTaken as e:
                if attempt == PORT_TRIES:
                    raise
                log("%s; starting it again on other ports" % e)
                for p in self.procs[n:]:
                    if p.poll() is None:
                        p.kill()
                    p.wait()
                del self.procs[n:]
                del self.spawned[n:]
        raise AssertionError("unreachable")

    def stop(self):
        """Stops the children newest first, each before the next (kube-apiserver shuts down faster
        while its etcd still answers): SIGTERM, then SIGKILL once STOP_GRACE seconds in all
        have passed."""
        self.stopping = True
        deadline = time.monotonic() + STOP_GRACE
        for p in reversed(self.procs):
            if p.poll() is None:
                try:
                    p.terminate()
                except OSError:
                    pass
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def https(self, method, path, body=None, timeout=5.0):
        req = urllib.request.Request(self.url + path, method=method,
                                     data=json.dumps(body).encode() if body is not None else None)
        req.add_header("Authorization", "Bearer " + self.args.token)
        req.add_header("Accept", "application/json")
        if body is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, context=self.ctx, timeout=timeout) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def wait_for(self, what, check, deadline):
        last = None
        while time.monotonic() < deadline:
            if self.stop_requested:
                raise Stopped()
            for p in self.procs:
                if p.poll() is not None:
                    said = self.said(p)
                    taken = "address already in use" in said
                    last = " | ".join(said.strip().splitlines()[-3:])[-600:]
                    raise (PortTaken if taken else RuntimeError)(
                        "%s exited with status %s while waiting for %s%s (logs in %s; its last words: %s)" % (
                            p.args[0], p.returncode, what, ": a port it was given was taken" if taken else "",
                            self.dir, last))
            try:
                if check():
                    return
            except (OSError, ValueError, urllib.error.URLError, ssl.SSLError) as e:
                last = e
            time.sleep(0.2)
        raise RuntimeError("timed out waiting for %s (%s; logs in %s)" % (what, last, self.dir))

    def apply_rbac(self, paths):
        """Creates the namespaces the RBAC objects live in, then the objects (as admin)."""
        import yaml
        docs = []
        for p in paths:
            with open(p) as f:
                docs += [x for x in yaml.safe_load_all(f) if isinstance(x, dict)]
        namespaces = sorted({(x.get("metadata") or {}).get("namespace") for x in docs} - {None, ""})
        for ns in namespaces:
            self.https("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                       "metadata": {"name": ns}})
        plural = {"ServiceAccount": "serviceaccounts", "ClusterRole": "clusterroles", "Role": "roles",
                  "ClusterRoleBinding": "clusterrolebindings", "RoleBinding": "rolebindings"}
        for x in docs:
            kind = x.get("kind")
            if kind not in plural:
                continue
            ns = (x.get("metadata") or {}).get("namespace")
            base = "/api/v1" if kind == "ServiceAccount" else "/apis/rbac.authorization.k8s.io/v1"
            path = "%s%s/%s" % (base, "/namespaces/" + ns if ns else "", plural[kind])
            code, body = self.https("POST", path, x)
            if code not in (201, 409):
                raise RuntimeError("creating %s: HTTP %d: %s" % (kind, code, body[:300].decode(errors="replace")))

    def start(self):
        sys.path.insert(0, HERE)
        from apiserver import kubeconfig_text, kubernetes_service_info, make_certs   # shared with the double
        d = self.dir
        deadline = time.monotonic() + READY_TIMEOUT
        ca_crt, crt, key = make_certs(d)
        self.ctx = ssl.create_default_context(cafile=ca_crt)
        sa_key, sa_pub = os.path.join(d, "sa.key"), os.path.join(d, "sa.pub")
        subprocess.run(["openssl", "genrsa", "-out", sa_key, "2048"], check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        subprocess.run(["openssl", "rsa", "-in", sa_key, "-pubout", "-out", sa_pub], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        tokens = os.path.join(d, "tokens.csv")
        rbac_user = None
        if self.args.rbac:
            import rbac
            rbac_user = rbac.service_account_user(self.args.rbac)
            if not rbac_user:
                raise RuntimeError("--rbac: the files define no single ServiceAccount")
        with open(tokens, "w") as f:
            f.write('%s,admin,admin-uid,"system:masters"\n' % self.args.token)
            if rbac_user:
                sa_ns = rbac_user.split(":")[2]
                f.write('%s,%s,operator-uid,"system:serviceaccounts,system:serviceaccounts:%s"\n'
                        % (RBAC_TOKEN, rbac_user, sa_ns))
            for user in self.args.user:
                f.write('%s-token,%s,%s-uid,"system:masters"\n' % (user, user, user))

        etcd_data = os.path.join(d, "etcd")

        def etcd_url_of(client_port):
            return "http://127.0.0.1:%d" % client_port

        def start_etcd(client_port, peer_port):
            etcd_url, peer_url = etcd_url_of(client_port), "http://127.0.0.1:%d" % peer_port
            shutil.rmtree(etcd_data, ignore_errors=True)    # a try before on taken ports

            def etcd_healthy():
                with urllib.request.urlopen(etcd_url + "/health", timeout=2) as resp:
                    return json.loads(resp.read()).get("health") == "true"
            self.spawn([self.etcd_bin, "--name=default", "--data-dir=" + etcd_data,
                        "--listen-client-urls=" + etcd_url, "--advertise-client-urls=" + etcd_url,
                        "--listen-peer-urls=" + peer_url, "--initial-advertise-peer-urls=" + peer_url,
                        "--initial-cluster=default=" + peer_url, "--unsafe-no-fsync=true",
                        # as kubeadm runs etcd: without progress notifications the watch cache
                        # of a quiet resource never moves, and watches get no bookmarks
                        "--experimental-watch-progress-notify-interval=5s"], "etcd.log", etcd_healthy)
            return etcd_healthy

        client_port, _ = self.serve_on_free_ports(2, start_etcd, "etcd", deadline)
        etcd_url = etcd_url_of(client_port)

        def readyz():
            code, _ = self.https("GET", "/readyz")
            return code == 200

        def start_apiserver(port):
            self.url = "https://127.0.0.1:%d" % port
            self.spawn([
                self.apiserver_bin,
                "--etcd-servers=" + etcd_url,
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                "--secure-port=%d" % port,
                "--cert-dir=" + os.path.join(d, "certs"),
                "--tls-cert-file=" + crt,
                "--tls-private-key-file=" + key,
                "--token-auth-file=" + tokens,
                "--authorization-mode=RBAC",
                "--service-account-issuer=" + self.url,
                "--service-account-key-file=" + sa_pub,
                "--service-account-signing-key-file=" + sa_key,
                # as kubeadm's default: the `kubernetes` Service gets 10.96.0.1, which the serving
                # certificate names (apiserver.make_certs)
                "--service-cluster-ip-range=10.96.0.0/12",
                "--allow-privileged=true",
                *serviceaccount_admission(self.args),
                "--enable-admission-plugins=OwnerReferencesPermissionEnforcement",
            ] + real_node_flags(self.args) + workload_api_flags(self.args, self.apiserver_bin, "kube-apiserver")
                + self.audit_flags(rbac_user), "kube-apiserver.log", readyz)
            return readyz

        port, = self.serve_on_free_ports(1, start_apiserver, "kube-apiserver /readyz", deadline)

        crds = [] if self.args.without_crds else [project_crd()] + CRDS[1:]
        for c in crds:
            code, body = self.https("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", c)
            if code not in (201, 409):
                raise RuntimeError("creating CRD %s: HTTP %d: %s" % (c["metadata"]["name"], code,
                                                                      body[:500].decode(errors="replace")))
        for c in crds:
            name = c["metadata"]["name"]
            group = c["spec"]["group"]
            plural = c["spec"]["names"]["plural"]

            def established(name=name, group=group, plural=plural, versions=c["spec"]["versions"]):
                code, body = self.https("GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/" + name)
                if code != 200:
                    return False
                conds = json.loads(body).get("status", {}).get("conditions") or []
                if not any(x.get("type") == "Established" and x.get("status") == "True" for x in conds):
                    return False
                for v in versions:
                    code, body = self.https("GET", "/apis/%s/%s" % (group, v["name"]))
                    if code != 200 or plural not in [r["name"] for r in json.loads(body).get("resources", [])]:
                        return False
                return True

            self.wait_for("CRD %s" % name, established, deadline)

        if rbac_user:
            self.apply_rbac(self.args.rbac)
        with open(ca_crt, "rb") as f:
            ca_pem = f.read()
        write_atomic(os.path.join(d, "kubeconfig"), kubeconfig_text(self.url, ca_pem, self.args.token))
        if rbac_user:
            write_atomic(os.path.join(d, "operator.kubeconfig"), kubeconfig_text(self.url, ca_pem, RBAC_TOKEN))
        for user in self.args.user:
            write_atomic(os.path.join(d, user + ".kubeconfig"), kubeconfig_text(self.url, ca_pem, user + "-token"))
        write_atomic(os.path.join(d, "port"), "%d\n" % port)
        write_atomic(os.path.join(d, "etcd-url"), etcd_url + "\n")
        code, body = self.https("GET", "/version")
        version = json.loads(body).get("gitVersion") if code == 200 else None
        info = {"kind": "real", "version": version, "kubernetesService": kubernetes_service_info(port)}
        if getattr(self.args, "control_plane", False):
            ControlPlane(self, ca_pem).start(time.monotonic() + READY_TIMEOUT)
            info["controlPlane"] = True
        write_atomic(os.path.join(d, "pid"), "".join("%d\n" % x for x in [os.getpid()] + [p.pid for p in self.procs]))
        write_atomic(os.path.join(d, "info.json"), json.dumps(info) + "\n")
        write_atomic(os.path.join(d, "ready"), "%d\n" % os.getpid())
        record_server("real", version)

    def audit_flags(self, rbac_user):
        """The audit log (DIR/audit.log) records, with $MPIJOB_TEST_RBAC_USAGE set, the requests of
        the operator's ServiceAccount, so that the RBAC coverage check works as on the double; and
        every request of each --user, once, as it arrives (stage RequestReceived, level Metadata),
        so that a benchmark can count one client's requests by verb and resource."""
        self.usage_log = os.environ.get("MPIJOB_TEST_RBAC_USAGE")
        self.rbac_user = rbac_user
        rules = []
        if self.usage_log and rbac_user:
            rules.append("- level: Request\n  users: [%s]\n  omitStages: [RequestReceived]\n" % json.dumps(rbac_user))
        if self.args.user:
            rules.append("- level: Metadata\n  users: [%s]\n  omitStages: [ResponseStarted, ResponseComplete]\n"
                         % ", ".join(json.dumps(u) for u in self.args.user))
        if not rules:
            return []
        policy = os.path.join(self.dir, "audit-policy.yaml")
        with open(policy, "w") as f:
            f.write("apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n" + "".join(rules) + "- level: None\n")
        return ["--audit-policy-file=" + policy, "--audit-log-path=" + os.path.join(self.dir, "audit.log"),
                "--audit-log-mode=blocking"]

    def write_usage(self):
        """Appends one line per request the server allowed the operator's ServiceAccount
        ("verb group resource[/sub] namespace", as the double writes them) to the usage log, for
        the audit records written since the last call. The launcher calls it about once a second
        while it runs and once more after its children have stopped: the test that stops it
        SIGKILLs it after a grace, and on a busy machine reading a whole run's audit log only at
        the end could overrun that grace and lose the run's usage (a verb only that test uses
        would then fail the RBAC coverage check)."""
        if not self.usage_log or not self.rbac_user:
            return
        lines = []
        try:
            with open(os.path.join(self.dir, "audit.log"), "rb") as f:
                f.seek(self.audit_offset)
                data = f.read()
        except OSError:
            return
        end = data.rfind(b"\n") + 1           # only whole records; a partial one waits for the next call
        self.audit_offset += end
        for line in data[:end].decode("utf-8", "replace").splitlines():
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            if (ev.get("user") or {}).get("username") != self.rbac_user:
                continue
            if (ev.get("annotations") or {}).get("authorization.k8s.io/decision") != "allow":
                continue
            ref = ev.get("objectRef") or {}
            if not ref.get("resource"):
                continue
            res = ref["resource"] + ("/" + ref["subresource"] if ref.get("subresource") else "")
            ns = ref.get("namespace") or "-"
            lines.append("%s %s %s %s\n" % (ev.get("verb"), ref.get("apiGroup") or '""', res, ns))
            # OwnerReferencesPermissionEnforcement asks the authorizer, unaudited, whether
            # the writer may update the owner's finalizers for each blockOwnerDeletion
            obj = ev.get("requestObject") if ev.get("verb") in ("create", "update") else None
            meta = obj.get("metadata") if isinstance(obj, dict) else None
            for o in (meta or {}).get("ownerReferences") or []:
                if isinstance(o, dict) and o.get("blockOwnerDeletion") and o.get("kind"):
                    group = (o.get("apiVersion") or "").rpartition("/")[0] or '""'
                    lines.append("update %s %ss/finalizers %s\n" % (group, o["kind"].lower(), ns))
        if lines:
            # one write on O_APPEND, as the double's: every server of a run shares the file
            append_whole(self.usage_log, "".join(lines))

    def restart(self):
        """The whole control plane restarted, its data kept, as an upgrade or a machine's reboot
        restarts it: every child stopped (SIGTERM; kube-apiserver before etcd), then started again
        with the same arguments, ports and etcd data, each once the one before it serves. Asked
        for by a test writing STATE/control/restart; STATE/control/restarted then holds
        {"stoppedSeconds", "downSeconds", "pids"} (tests/e2e/harness.py restart_control_plane)."""
        t0 = time.monotonic()
        self.stop()
        self.stopping = False
        stopped = time.monotonic() - t0
        spawned, self.spawned, self.procs = self.spawned, [], []
        deadline = time.monotonic() + READY_TIMEOUT
        for argv, logname, ready in spawned:
            self.spawn(argv, logname, ready)
            if ready:
                self.wait_for(os.path.basename(argv[0]) + " after its restart", ready, deadline)
        down = time.monotonic() - t0
        log("control plane restarted: stopped in %.1f s, serving again after %.1f s" % (stopped, down))
        write_atomic(os.path.join(self.dir, "pid"), "".join("%d\n" % x for x in [os.getpid()] + [p.pid for p in self.procs]))
        return {"stoppedSeconds": round(stopped, 2), "downSeconds": round(down, 2), "pids": [p.pid for p in self.procs]}

    def serve_requests(self):
        request = os.path.join(self.dir, "control", "restart")
        if not os.path.exists(request):
            return
        os.unlink(request)
        try:
            answer = self.restart()
        except Stopped:
            return
        except (RuntimeError, OSError) as e:
            answer = {"error": str(e)}
        write_atomic(os.path.join(self.dir, "control", "restarted"), json.dumps(answer) + "\n")

    def supervise(self):
        next_usage = time.monotonic() + 1
        while not self.stop_requested:
            self.serve_requests()
            if time.monotonic() >= next_usage:
                self.write_usage()
                next_usage = time.monotonic() + 1
            for p in self.procs:
                if p.poll() is not None:
                    log("%s exited with status %s; stopping (logs in %s)" % (p.args[0], p.returncode, self.dir))
                    self.stop()
                    self.write_usage()
                    return 1
            time.sleep(0.1)
        self.stop()
        self.write_usage()
        return 0

# --------------------------------------------------------------------------------------------
# The control plane (--control-plane): kube-controller-manager and kube-scheduler
# --------------------------------------------------------------------------------------------

def control_plane_assets():
    """(kube-controller-manager, kube-scheduler) from KUBEBUILDER_ASSETS, or None."""
    return assets("kube-controller-manager", "kube-scheduler")


def real_nodes_assets():
    """True when KUBEBUILDER_ASSETS also holds what real nodes run (tests/cluster/realnode)."""
    return assets("kubelet", "kube-proxy", "coredns") is not None


def real_node_flags(args):
    """The API server reaches kubelets at their InternalIP: the node names (a Node's Hostname
    address) resolve nowhere here, on real nodes, simulated ones and a test's log-serving kubelet
    (tests/support/kubelet_logs.h) alike. For real nodes (tests/cluster/realnode/nodes.py) it
    also leaves the `kubernetes` Service's endpoint to the nodes' relay (its own would be
    127.0.0.1, which no EndpointSlice may name)."""
    flags = ["--kubelet-preferred-address-types=InternalIP,Hostname,InternalDNS,ExternalIP,ExternalDNS"]
    if not getattr(args, "control_plane", False) or not real_nodes_assets():
        return flags
    # A node that is lost has its pods evicted 10 s after it turns NotReady or unreachable
    # (the default, 300 s, is for clusters whose nodes come back; a test would wait minutes).
    return flags + ["--endpoint-reconciler-type=none",
                    "--default-not-ready-toleration-seconds=10", "--default-unreachable-toleration-seconds=10"]


# kube-scheduler's Workload API (--workload-api): alpha in 1.36, off unless every component has
# these gates and the API server serves the group version (docs/internals/gang-scheduling.md).
# WorkloadWithJob is on so that the tests see the Job controller leave the launcher Job alone.
WORKLOAD_API_GATES = "GenericWorkload=true,GangScheduling=true,TopologyAwareWorkloadScheduling=true,WorkloadWithJob=true"
WORKLOAD_API_MINOR = 36


def binary_minor(path):
    """The minor version a Kubernetes binary says it is (`kube-apiserver --version`:
    "Kubernetes v1.36.3"), or 0."""
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30).stdout
        return int(out.split("v1.", 1)[1].split(".", 1)[0])
    except (OSError, IndexError, ValueError, subprocess.SubprocessError):
        return 0


def workload_api_flags(args, apiserver_bin, component):
    """The flags that turn the Workload API on for `component` ("kube-apiserver", or another
    control-plane binary), when --workload-api asks for it and the release has it (1.36 and
    later); an older release starts as usual and the test asks discovery whether it is served."""
    if not getattr(args, "workload_api", False) or binary_minor(apiserver_bin) < WORKLOAD_API_MINOR:
        return []
    flags = ["--feature-gates=" + WORKLOAD_API_GATES]
    if component == "kube-apiserver":
        flags.append("--runtime-config=scheduling.k8s.io/v1alpha2=true")
    return flags


def serviceaccount_admission(args):
    """kube-apiserver's ServiceAccount admission plugin is off unless the control plane runs: it
    refuses pods in a namespace without a `default` ServiceAccount, which only the
    controller-manager's serviceaccount controller creates."""
    return [] if getattr(args, "control_plane", False) else ["--disable-admission-plugins=ServiceAccount"]


class ControlPlane:
    """kube-controller-manager and kube-scheduler against the admin kubeconfig, leader election
    off, their secure ports on 127.0.0.1. Started by Real.start (its children, so stopped first by
    Real.stop); ready once both answer /healthz and the serviceaccount and root-ca-cert-publisher
    controllers have served the namespace `default`."""

    def __init__(self, real, ca_pem):
        self.real = real
        self.ca_pem = ca_pem

    @staticmethod
    def healthz(port):
        ctx = ssl._create_unverified_context()      # the components' own self-signed serving certs
        with urllib.request.urlopen("https://127.0.0.1:%d/healthz" % port, context=ctx, timeout=2) as resp:
            return resp.status == 200

    def start(self, deadline):
        from apiserver import kubeconfig_text
        real = self.real
        d = real.dir
        bins = control_plane_assets()
        if bins is None:
            raise RuntimeError("--control-plane: KUBEBUILDER_ASSETS=%s lacks kube-controller-manager or "
                               "kube-scheduler" % os.environ.get("KUBEBUILDER_ASSETS"))
        kcm_bin, scheduler_bin = bins
        kubeconfig = os.path.join(d, "control-plane.kubeconfig")
        write_atomic(kubeconfig, kubeconfig_text(real.url, self.ca_pem, real.args.token))

        def start_both(kcm_port, scheduler_port):
            def kcm_ready():
                return self.healthz(kcm_port)

            def scheduler_ready():
                return self.healthz(scheduler_port)
            real.spawn([
                kcm_bin,
                "--kubeconfig=" + kubeconfig,
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                "--secure-port=%d" % kcm_port,
                "--cert-dir=" + os.path.join(d, "kcm-certs"),
                "--service-account-private-key-file=" + os.path.join(d, "sa.key"),
                "--root-ca-file=" + os.path.join(d, "ca.crt"),
            ] + workload_api_flags(real.args, real.apiserver_bin, "kube-controller-manager"),
                "kube-controller-manager.log", kcm_ready)
            real.spawn([
                scheduler_bin,
                "--kubeconfig=" + kubeconfig,
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                "--secure-port=%d" % scheduler_port,
                "--cert-dir=" + os.path.join(d, "scheduler-certs"),
            ] + workload_api_flags(real.args, real.apiserver_bin, "kube-scheduler"), "kube-scheduler.log",
                scheduler_ready)
            return lambda: kcm_ready() and scheduler_ready()

        kcm_port, scheduler_port = real.serve_on_free_ports(
            2, start_both, "kube-controller-manager and kube-scheduler /healthz", deadline)

        def namespace_served():
            code, _ = real.https("GET", "/api/v1/namespaces/default/serviceaccounts/default")
            if code != 200:
                return False
            code, _ = real.https("GET", "/api/v1/namespaces/default/configmaps/kube-root-ca.crt")
            return code == 200

        real.wait_for("the default ServiceAccount and kube-root-ca.crt", namespace_served, deadline)
        write_atomic(os.path.join(d, "control-plane.json"),
                     json.dumps({"controllerManagerPort": kcm_port, "schedulerPort": scheduler_port}) + "\n")


def run_real(args, etcd_bin, apiserver_bin):
    write_atomic(os.path.join(args.state_dir, "pid"), "%d\n" % os.getpid())
    real = Real(args, etcd_bin, apiserver_bin)

    def on_signal(signum, frame):
        real.stop_requested = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        real.start()
    except Stopped:
        real.stop()
        return 0
    except (RuntimeError, OSError, subprocess.CalledProcessError) as e:
        log(str(e))
        real.stop()
        return 1
    return real.supervise()


# --------------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description="start the API server for integration tests")
    ap.add_argument("--state-dir", required=True)
    ap.add_argument("--token", default="test-token")
    ap.add_argument("--background", action="store_true",
                    help="return once the server is ready, leaving it running in its own session")
    ap.add_argument("--bookmark-interval", type=float, default=None, help="(the double only)")
    ap.add_argument("--extra-crd", action="append", default=[], help="(the double only) see apiserver.py")
    ap.add_argument("--without-crds", action="store_true",
                    help="install no CRD (the double: serve no custom resources)")
    ap.add_argument("--rbac", action="append", default=[],
                    help="RBAC objects (YAML) enforced for the token in <state-dir>/operator.kubeconfig")
    ap.add_argument("--control-plane", action="store_true",
                    help="also start kube-controller-manager and kube-scheduler from KUBEBUILDER_ASSETS, with "
                         "the ServiceAccount admission plugin on (the double: its ServiceAccounts, "
                         "kube-root-ca.crt and ServiceAccount admission)")
    ap.add_argument("--workload-api", action="store_true",
                    help="serve kube-scheduler's Workload API (scheduling.k8s.io/v1alpha2) where the release has "
                         "it: a real 1.36 or later gets its runtime-config and feature gates on every component; "
                         "the double answers as 1.36 and serves workloads and podgroups")
    ap.add_argument("--user", action="append", default=[],
                    help="(real servers only) one more cluster-admin user, NAME, with token NAME-token and "
                         "<state-dir>/NAME.kubeconfig; its requests are audited to <state-dir>/audit.log")
    args = ap.parse_args()
    args.rbac = [os.path.abspath(f) for f in args.rbac]
    args.state_dir = os.path.abspath(args.state_dir)
    os.makedirs(args.state_dir, exist_ok=True)
    for f in ("ready", "info.json", "pid"):
        try:
            os.unlink(os.path.join(args.state_dir, f))
        except FileNotFoundError:
            pass

    if args.background:
        child = os.fork()
        if child:
            ready = os.path.join(args.state_dir, "ready")
            deadline = time.monotonic() + READY_TIMEOUT * (2 if args.control_plane else 1)
            while time.monotonic() < deadline:
                if os.path.exists(ready):
                    print(args.state_dir)
                    return 0
                pid, status = os.waitpid(child, os.WNOHANG)
                if pid:
                    log("the server exited before it was ready (status %d)" % status)
                    return 1
                time.sleep(0.02)
            log("the server was not ready after %d s" % READY_TIMEOUT)
            try:
                os.killpg(child, signal.SIGTERM)
            except OSError:
                pass
            return 1
        os.setsid()
        fd = os.open(os.devnull, os.O_RDWR)
        os.dup2(fd, 0)
        os.dup2(fd, 1)
        os.close(fd)

    assets = real_assets()
    if assets is None:
        run_double(args)
        return 1  # not reached
    return run_real(args, *assets)


if __name__ == "__main__":
    sys.exit(main())
