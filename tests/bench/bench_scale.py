#!/usr/bin/env python3
"""bench_scale: how the operator's cost grows with the work, on a real control plane.

    KUBEBUILDER_ASSETS=DIR tests/bench/bench_scale.py        (make bench runs it)

Every point runs on a fresh control plane (etcd, kube-apiserver, kube-controller-manager,
kube-scheduler of KUBEBUILDER_ASSETS, started by tests/apiserver/launch.py), with the release
binary build/bin/mpijob-operator with its default flags, as a user of its own (a token in
system:masters, launch.py --user) whose every request the API server's audit log records.

Part "suspended", for N in BENCH_SCALE_SUSPENDED (default "1000 3000 10000"): N suspended
MPIJobs of 8 workers are created while no operator runs; the operator then starts (the sync of
bench_peer.py): the time until every job shows Suspended=True with its Service, ConfigMap,
Secret and suspended launcher Job; its resident memory then and after a quiet minute
(BENCH_QUIET_S, default 60) once kube-controller-manager has settled; its CPU seconds; its
requests in total and per job; the writes it made in the quiet minute (Lease renewals apart).
Beside them what the machine holds: etcd's database file against its quota (2 GiB, etcd's
default) and kube-apiserver's resident memory; and while the operator synced, the CPU seconds of
kube-apiserver, etcd and kube-controller-manager and how busy the machine's cores were (/proc/stat),
which tell whether the operator or the machine set the pace. Then the baseline, on a control
plane of its own: the plain client (tests/bench/plain_client.c --existing) syncs the same N
suspended MPIJobs, making the operator's writes for each (its four objects, the status, the two
Events) after one list, with no informer and no planner, to the same end; how its time per job
grows from one N to the next is what the machine adds (BENCH_SCALE_PLAIN_SYNC=0 skips it).

Part "active", for N in BENCH_SCALE_ACTIVE (default "100 300 1000"): N MPIJobs of 8 workers
created at once (8 client threads), on 4 fake Ready nodes (Node objects whose Leases the
benchmark renews; no kubelet, so no container runs) where kube-scheduler binds every pod. The
time from the first creation until every object of every job exists (Service, ConfigMap, Secret,
8 worker Pods, launcher Job, as a watch sees them), and until every pod, the Job controller's
launcher pods too, is bound to a node; against a plain client (tests/bench/plain_client.c) that
creates the same MPIJobs and the same objects, built by the operator's own builders, with as many
threads as the operator has reconcile threads (2), in the same run, on a fresh control plane of
its own (the operator's starts empty too). The two clients run as users made alike (system:masters,
each request written to the audit log as it arrives; BENCH_SCALE_PLAIN_AS=admin gives the plain
client the unaudited admin instead). Then each one's requests per job, and the CPU seconds of
each part of the control plane, the client and this benchmark until every object existed.
BENCH_SCALE_ROUNDS=R runs each size R times, every other round with the operator first; the
target line takes the median round. The machine's two cores are shared by everything: one round
says little alone.

Writes build/bench/scale.json (the figures), build/bench/scale-*.dat and, with gnuplot,
build/bench/scale.svg: each measure against jobs, log-log, so that a straight line of slope 1
is cost in proportion to the work. Prints the tables and the targets beside them; judges
nothing. Without a real control plane in KUBEBUILDER_ASSETS it says why and exits 0.

Environment: BENCH_SCALE_SUSPENDED, BENCH_SCALE_ACTIVE, BENCH_SCALE_PARTS ("suspended active"),
BENCH_SCALE_ROUNDS (1), BENCH_SCALE_PLAIN_AS (user; or admin), BENCH_SCALE_PLAIN_SYNC (1),
BENCH_QUIET_S, BENCH_SCALE_OUT (build/bench), BENCH_SCALE_KEEP=1 keeps each control plane's state
directory (logs, audit log).
"""

import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "apiserver"))
import bench_peer as peer  # noqa: E402
import launch  # noqa: E402
from bench_peer import OURS, USERS, WRITE_VERBS, by_verb, expected_objects, mpijob, mpijobs_path, say  # noqa: E402

ETCD_QUOTA = 2 * 1024 ** 3       # etcd's default --quota-backend-bytes
FAKE_NODES = 4
CONTROL_PLANE = ("kube-apiserver", "etcd", "kube-controller-manager")
WORKERS = 8
PLAIN_THREADS = 2                # the operator's default --threads
PLAIN_USER = "plain-client"      # a user like the operator's: system:masters, audited


def now_rfc3339():
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def now_micro():
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class ControlPlane:
    """A fresh control plane of KUBEBUILDER_ASSETS, with the operator's user, for one point."""

    def __init__(self, label, user=USERS[OURS]):
        self.state = tempfile.mkdtemp(prefix="bench-scale-%s-" % label)
        argv = [sys.executable, os.path.join(ROOT, "tests", "apiserver", "launch.py"), "--state-dir", self.state,
                "--control-plane", "--background", "--user", user]
        if subprocess.run(argv, stdout=subprocess.DEVNULL).returncode != 0:
            raise RuntimeError("the control plane did not start (logs in %s)" % self.state)
        self.bench = peer.Bench(self.state, "", (OURS,))
        self.bench.drop = lambda ns, name=None: None    # the whole control plane goes after the point
        self.bench.machine_cpu = self.machine_cpu
        self.bench.start_watches()
        self.stop_nodes = threading.Event()

    def pid_of(self, comm):
        with open(os.path.join(self.state, "pid")) as f:
            pids = [int(x) for x in f.read().split()]
        for pid in pids:
            try:
                with open("/proc/%d/comm" % pid) as f:
                    if f.read().strip() == comm[:15]:    # the kernel keeps 15 characters of a name
                        return pid
            except OSError:
                pass
        return None

    def rss_mib(self, comm):
        return peer.proc_rss_mib(self.pid_of(comm))

    def cpu_s(self, comm):
        """CPU seconds (user and system) that process comm of this control plane has used."""
        return peer.proc_cpu_s(self.pid_of(comm))

    def machine_cpu(self, parts=CONTROL_PLANE):
        """CPU seconds by component, and "busy" and "all" for the whole machine (/proc/stat)."""
        out = {c: self.cpu_s(c) for c in parts}
        out["benchmark"] = time.process_time()     # this benchmark's own watches and waits
        with open("/proc/stat") as f:
            ticks = [int(x) for x in f.readline().split()[1:]]
        hz = os.sysconf("SC_CLK_TCK")
        idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)
        out["all"], out["busy"] = sum(ticks[:8]) / hz, (sum(ticks[:8]) - idle) / hz
        return out

    def etcd_db_bytes(self):
        for dirpath, _, files in os.walk(self.state):
            if "db" in files and dirpath.endswith(os.path.join("member", "snap")):
                return os.path.getsize(os.path.join(dirpath, "db"))
        return 0

    # fake Ready nodes, kept Ready by renewing their Leases ------------------------------------
    def add_nodes(self, n, pods):
        api = self.bench.api
        cap = {"cpu": "1000", "memory": "4Ti", "pods": str(pods), "ephemeral-storage": "10Ti"}
        for i in range(n):
            name = "fake-%d" % i
            node = {"apiVersion": "v1", "kind": "Node",
                    "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
                    "status": {"capacity": cap, "allocatable": cap,
                               "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                               "message": "a fake node of bench_scale",
                                               "lastHeartbeatTime": now_rfc3339(),
                                               "lastTransitionTime": now_rfc3339()}]}}
            api.must("POST", "/api/v1/nodes", node)
            # a Node's status is kept on create; write it again in case this server drops it
            api.must("PATCH", "/api/v1/nodes/%s/status" % name, {"status": node["status"]},
                     ctype="application/merge-patch+json")
            api.must("POST", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases",
                     {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                      "metadata": {"name": name, "namespace": "kube-node-lease"},
                      "spec": {"holderIdentity": name, "leaseDurationSeconds": 40, "renewTime": now_micro()}},
                     ok=(201, 409))

        def renew():
            while not self.stop_nodes.wait(10):
                for i in range(n):
                    api.request("PATCH", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/fake-%d" % i,
                                {"spec": {"renewTime": now_micro()}}, ctype="application/merge-patch+json")
        threading.Thread(target=renew, daemon=True).start()
        end = time.monotonic() + 120
        while True:
            code, out = api.request("GET", "/api/v1/nodes")
            ready = [x for x in (out or {}).get("items", []) if not (x.get("spec") or {}).get("taints")]
            if len(ready) >= n:
                return
            if time.monotonic() > end:
                raise RuntimeError("the fake nodes kept taints for 120 s: %s" % json.dumps(
                    [(x["metadata"]["name"], (x.get("spec") or {}).get("taints")) for x in (out or {}).get("items", [])]))
            time.sleep(1)

    def unbound_pods(self, ns):
        """How many of the namespace's pods have no node (a one-item page: cheap at any size)."""
        code, out = self.bench.api.request("GET", "/api/v1/namespaces/%s/pods?fieldSelector=spec.nodeName%%3D&limit=1"
                                           % ns)
        if code != 200:
            return None
        items = len((out or {}).get("items") or [])
        return items + int(((out or {}).get("metadata") or {}).get("remainingItemCount") or 0)

    def stop(self, keep):
        self.stop_nodes.set()
        self.bench.ops[OURS].stop()
        launch.stop_background(self.state, 10)
        if keep:
            say("    state kept in %s" % self.state)
        else:
            shutil.rmtree(self.state, ignore_errors=True)


def suspended_point(n, quiet_s, keep):
    cp = ControlPlane("s%d" % n)
    try:
        results = {"sync": {}}
        cp.bench.part_sync(n, quiet_s, results, (OURS,))
        r = results["sync"][OURS]
        requests = sum(r["requests"].values())
        point = {"jobs": n, "sync_s": r["sync_s"], "per_job_ms": 1000.0 * r["sync_s"] / n,
                 "rss_synced_mib": r["rss_synced"], "rss_quiet_mib": r["rss_quiet"],
                 "cpu_synced_s": r["cpu_synced"], "cpu_settle_s": r["cpu_settle"], "cpu_quiet_s": r["cpu_quiet"],
                 "requests": requests, "requests_per_job": requests / n, "requests_by_verb": dict(r["requests"]),
                 "quiet_writes": r["writes"], "quiet_lease_writes": r["lease_writes"],
                 "settle_s": r["settle_s"], "etcd_db_mib": cp.etcd_db_bytes() / 2 ** 20,
                 "etcd_quota_used": cp.etcd_db_bytes() / ETCD_QUOTA,
                 "apiserver_rss_mib": cp.rss_mib("kube-apiserver"), "etcd_rss_mib": cp.rss_mib("etcd")}
        m = r.get("machine_cpu_sync")
        if m and m.get("all"):
            # the machine's cores while the operator synced: what each took, and how busy all were
            point["machine_cpu_sync_s"] = {k: m[k] for k in CONTROL_PLANE + ("benchmark",) if k in m}
            point["machine_busy"] = m["busy"] / m["all"]
        say("  suspended %5d: synced in %.1f s (%.2f ms a job), RSS %.1f MiB synced, %.1f MiB after the quiet "
            "minute, CPU %.2f s, %d requests (%.2f a job), %d writes in the quiet minute; etcd db %.0f MiB "
            "(%.1f %% of its quota), kube-apiserver %.0f MiB" % (
                n, point["sync_s"], point["per_job_ms"], point["rss_synced_mib"], point["rss_quiet_mib"],
                point["cpu_synced_s"], requests, point["requests_per_job"], point["quiet_writes"],
                point["etcd_db_mib"], 100 * point["etcd_quota_used"], point["apiserver_rss_mib"]))
        return point
    finally:
        cp.stop(keep)


def suspended_plain_point(n, keep):
    """The baseline of a suspended point: the plain client's sync (plain_client --existing: one
    list, then for each job the operator's writes, with no informer and no planner) of the same n
    suspended MPIJobs, on a fresh control plane of its own, to the same end (every job's Service,
    ConfigMap, Secret and launcher Job seen, and the job Suspended=True); no quiet minute. What
    grows in its time per job grows in the machine, not in the operator."""
    as_admin = os.environ.get("BENCH_SCALE_PLAIN_AS", "user") == "admin"
    cp = ControlPlane("s%d-plain" % n, USERS[OURS] if as_admin else PLAIN_USER)
    try:
        bench, book = cp.bench, cp.bench.book
        ns = bench.namespace("plain-sync")
        t = time.monotonic()
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda i: bench.api.must("POST", mpijobs_path(ns), mpijob(ns, "s%04d" % i, WORKERS,
                                                                                    suspend=True)), range(n)))
        say("  suspended %5d, plain client: MPIJobs created in %.1f s; starting it" % (n, time.monotonic() - t))
        m0 = cp.machine_cpu()
        c0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        wall0, t0 = time.time(), time.monotonic()
        proc = subprocess.Popen([os.path.join(ROOT, "build", "bench", "plain_client"), "--existing",
                                 os.path.join(cp.state, "kubeconfig" if as_admin else PLAIN_USER + ".kubeconfig"),
                                 ns, str(PLAIN_THREADS)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        progress = peer.SyncProgress(book, ns)
        try:
            while not book.poll(lambda: progress.count() >= n, 30, 0.1):
                say("    plain client: %d of %d synced after %.0f s" % (progress.count(), n, time.monotonic() - t0))
                if proc.poll() not in (None, 0) or time.monotonic() - t0 > 1800:
                    raise RuntimeError("plain_client --existing: %d of %d synced (exit %s)" % (
                        progress.count(), n, proc.poll()))
            sync_s = time.monotonic() - t0
            m1 = cp.machine_cpu()
            out, err = proc.communicate(timeout=600)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        if proc.returncode != 0:
            raise RuntimeError("plain_client --existing: %s%s" % (out, err[-2000:]))
        c1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        reqs = cp.bench.audit.select(PLAIN_USER, wall0 - 1, time.time()) if not as_admin else []
        point = {"jobs": n, "sync_s": sync_s, "per_job_ms": 1000.0 * sync_s / n,
                 "cpu_s": c1.ru_utime + c1.ru_stime - c0.ru_utime - c0.ru_stime,
                 "requests_per_job": len(reqs) / n, "as": "admin" if as_admin else PLAIN_USER,
                 "machine_cpu_sync_s": {k: m1[k] - m0[k] for k in CONTROL_PLANE + ("benchmark",)},
                 "machine_busy": (m1["busy"] - m0["busy"]) / max(m1["all"] - m0["all"], 1e-9),
                 "apiserver_rss_mib": cp.rss_mib("kube-apiserver")}
        say("  suspended %5d, plain client: synced in %.1f s (%.2f ms a job), CPU %.2f s, %.2f requests a job" % (
            n, sync_s, point["per_job_ms"], point["cpu_s"], point["requests_per_job"]))
        return point
    finally:
        cp.stop(keep)


def wait_all(cp, ns, names, what, timeout):
    """Seconds until every expected object of the jobs `names` showed on the watch (monotonic
    time of the last one); raises with how many are missing after timeout. Looks twice a second
    (Book.poll), at the objects still missing only: a look on every watch event, over every
    object, took a core of this machine (55 CPU seconds at 1,000 jobs) from the run it measures.
    The times are the watch's own, taken as each event came."""
    book = cp.bench.book
    objs = [o for name in names for o in expected_objects(ns, name, WORKERS)]
    missing = [objs]

    def done():
        missing[0] = [k for k in missing[0] if not book.first.get(k)]
        return not missing[0]

    end = time.monotonic() + timeout
    while not book.poll(done, 30):
        say("    %s: %d of %d objects" % (what, len(objs) - len(missing[0]), len(objs)))
        if time.monotonic() > end:
            raise RuntimeError("%s: %d of %d objects after %d s" % (what, len(objs) - len(missing[0]), len(objs),
                                                                    timeout))
    with book.cv:
        return max(book.seen(*k) for k in objs)


def wait_bound(cp, ns, what, timeout):
    end = time.monotonic() + timeout
    while True:
        left = cp.unbound_pods(ns)
        if left == 0:
            return time.monotonic()
        if time.monotonic() > end:
            raise RuntimeError("%s: %s pods still unbound after %d s" % (what, left, timeout))
        time.sleep(0.5)


def active_control_plane(label, n, user=USERS[OURS]):
    """A fresh control plane whose fake nodes have room for n jobs' pods and the Job controller's."""
    cp = ControlPlane(label, user)
    try:
        cp.add_nodes(FAKE_NODES, (n * (WORKERS + 1)) // FAKE_NODES + 100)
    except BaseException:
        cp.stop(False)
        raise
    return cp


ACTIVE_PARTS = CONTROL_PLANE + ("kube-scheduler",)


def cpu_split(before, after, client_s):
    """Who used the machine's cores from `before` to `after` (machine_cpu snapshots): CPU seconds
    of each part of the control plane, of the client (the plain client or the operator) and of
    this benchmark's own watches, and the share of the cores that were busy."""
    out = {k: after[k] - before[k] for k in ACTIVE_PARTS + ("benchmark",)}
    out["client"] = client_s
    all_s = after["all"] - before["all"]
    out["busy"] = (after["busy"] - before["busy"]) / all_s if all_s > 0 else float("nan")
    return out


def plain_half(n, keep):
    """The plain client's half of an active point, on a control plane of its own."""
    as_admin = os.environ.get("BENCH_SCALE_PLAIN_AS", "user") == "admin"
    cp = active_control_plane("a%d-plain" % n, n, USERS[OURS] if as_admin else PLAIN_USER)
    try:
        ns = cp.bench.namespace("plain")
        template = os.path.join(cp.state, "plain-mpijob.json")
        with open(template, "w") as f:
            json.dump(mpijob(ns, "x", WORKERS), f)
        m0 = cp.machine_cpu(ACTIVE_PARTS)
        c0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        wall0 = time.time()
        t0 = time.monotonic()
        r = subprocess.run([os.path.join(ROOT, "build", "bench", "plain_client"),
                            os.path.join(cp.state, "kubeconfig" if as_admin else PLAIN_USER + ".kubeconfig"),
                            ns, template, "p", str(n), str(PLAIN_THREADS)], capture_output=True, text=True,
                           timeout=3600)
        if r.returncode != 0:
            raise RuntimeError("plain_client: %s%s" % (r.stdout, r.stderr[-2000:]))
        c1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        objects = wait_all(cp, ns, ["p%d" % i for i in range(n)], "plain client", 1800) - t0
        cpu = cpu_split(m0, cp.machine_cpu(ACTIVE_PARTS), c1.ru_utime + c1.ru_stime - c0.ru_utime - c0.ru_stime)
        reqs = len(cp.bench.audit.select(PLAIN_USER, wall0 - 1, time.time(), ns=ns)) if not as_admin else 0
        bound = wait_bound(cp, ns, "plain client", 1800) - t0
        return {"objects_s": objects, "bound_s": bound, "cpu": cpu, "requests_per_job": reqs / n,
                "as": "admin" if as_admin else PLAIN_USER}
    finally:
        cp.stop(keep)


def operator_half(n, keep):
    """The operator's half of an active point, on a control plane of its own."""
    cp = active_control_plane("a%d" % n, n)
    try:
        bench = cp.bench
        op = bench.ops[OURS]
        op.start()
        bench.warm_up(op)
        ns = bench.namespace("ours")
        cpu0 = op.cpu_s()
        m0 = cp.machine_cpu(ACTIVE_PARTS)
        wall0 = time.time()
        t0 = time.monotonic()
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda i: bench.api.must("POST", mpijobs_path(ns), mpijob(ns, "a%d" % i, WORKERS)),
                          range(n)))
        created = time.monotonic() - t0
        objects = wait_all(cp, ns, ["a%d" % i for i in range(n)], "operator", 1800) - t0
        cpu = cpu_split(m0, cp.machine_cpu(ACTIVE_PARTS), op.cpu_s() - cpu0)
        bound = wait_bound(cp, ns, "operator", 1800) - t0
        time.sleep(peer.SETTLE_S)
        op.check()
        reqs = bench.audit.select(USERS[OURS], wall0 - 1, time.time(), ns=ns)
        writes = [e for e in reqs if e[2] in WRITE_VERBS]
        return {"objects_s": objects, "bound_s": bound, "cpu": cpu, "mpijobs_created_s": created,
                "requests_per_job": len(reqs) / n, "writes_per_job": len(writes) / n,
                "requests_by_verb": dict(by_verb(reqs)), "rss_mib": op.rss_mib(), "cpu_s": op.cpu_s() - cpu0,
                "apiserver_rss_mib": cp.rss_mib("kube-apiserver"), "etcd_db_mib": cp.etcd_db_bytes() / 2 ** 20}
    finally:
        cp.stop(keep)


def active_point(n, keep, operator_first=False):
    # The plain client and the operator each on a fresh control plane of their own, so that
    # neither starts on the other's objects (etcd, the API server's caches, the scheduler's).
    # Each runs as a user of its own, made alike (system:masters, its requests audited as they
    # arrive); BENCH_SCALE_PLAIN_AS=admin runs the plain client as the unaudited admin instead.
    if operator_first:
        ours = operator_half(n, keep)
        plain = plain_half(n, keep)
    else:
        plain = plain_half(n, keep)
        ours = operator_half(n, keep)
    point = {"jobs": n, "objects": n * (WORKERS + 4), "first": "operator" if operator_first else "plain client",
             "mpijobs_created_s": ours["mpijobs_created_s"],
             "ours_objects_s": ours["objects_s"], "plain_objects_s": plain["objects_s"],
             "ratio_objects": ours["objects_s"] / plain["objects_s"],
             "ours_bound_s": ours["bound_s"], "plain_bound_s": plain["bound_s"],
             "ratio_bound": ours["bound_s"] / plain["bound_s"],
             "requests_per_job": ours["requests_per_job"], "writes_per_job": ours["writes_per_job"],
             "plain_requests_per_job": plain["requests_per_job"], "plain_as": plain["as"],
             "requests_by_verb": ours["requests_by_verb"], "rss_mib": ours["rss_mib"], "cpu_s": ours["cpu_s"],
             "cpu_until_objects": {"plain": plain["cpu"], "ours": ours["cpu"]},
             "apiserver_rss_mib": ours["apiserver_rss_mib"], "etcd_db_mib": ours["etcd_db_mib"]}
    say("  active %5d (%s first): every object in %.1f s (plain client %.1f s, ratio %.2f); every pod bound in "
        "%.1f s (plain %.1f s, ratio %.2f); %.2f requests a job (%.2f writes; the plain client %.2f); "
        "RSS %.1f MiB, CPU %.2f s" % (
            n, point["first"], ours["objects_s"], plain["objects_s"], point["ratio_objects"], ours["bound_s"],
            plain["bound_s"], point["ratio_bound"], point["requests_per_job"], point["writes_per_job"],
            point["plain_requests_per_job"], point["rss_mib"], point["cpu_s"]))
    for who, c in (("plain client", plain["cpu"]), ("operator", ours["cpu"])):
        say("    until every object, %s: CPU s kube-apiserver %.1f, etcd %.1f, kube-controller-manager %.1f, "
            "kube-scheduler %.1f, client %.1f, benchmark %.1f; cores %.0f %% busy" % (
                who, c["kube-apiserver"], c["etcd"], c["kube-controller-manager"], c["kube-scheduler"],
                c["client"], c["benchmark"], 100 * c["busy"]))
    return point


def median_rounds(points):
    """One point per size: the round whose creation ratio is the median (of an even count, the
    higher of the two middle ones: the target is judged on the less flattering)."""
    out = []
    for n in sorted(set(p["jobs"] for p in points)):
        rounds = sorted((p for p in points if p["jobs"] == n), key=lambda p: p["ratio_objects"])
        out.append(rounds[len(rounds) // 2])
    return out


def table(rows, cols):
    out = ["| " + " | ".join(c[0] for c in cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        out.append("| " + " | ".join(c[1](r) for c in cols) + " |")
    return "\n".join(out)


def plot(out_dir, results):
    """build/bench/scale-*.dat and, where gnuplot is installed, scale.svg."""
    files = {}
    if results.get("suspended"):
        path = os.path.join(out_dir, "scale-suspended.dat")
        with open(path, "w") as f:
            f.write("# jobs sync_s rss_synced_mib rss_quiet_mib cpu_s requests_k per_job_ms plain_sync_s\n")
            plain = {p["jobs"]: p for p in results.get("suspended_plain") or []}
            for p in results["suspended"]:
                q = plain.get(p["jobs"])
                f.write("%d %.3f %.2f %.2f %.3f %.3f %.4f %s\n" % (p["jobs"], p["sync_s"], p["rss_synced_mib"],
                                                                  p["rss_quiet_mib"], p["cpu_synced_s"],
                                                                  p["requests"] / 1000.0, p["per_job_ms"],
                                                                  "%.3f" % q["sync_s"] if q else "NaN"))
        files["suspended"] = path
    if results.get("active"):
        path = os.path.join(out_dir, "scale-active.dat")
        with open(path, "w") as f:
            f.write("# jobs ours_objects_s plain_objects_s ours_bound_s plain_bound_s rss_mib cpu_s requests_per_job\n")
            for p in median_rounds(results["active"]):
                f.write("%d %.3f %.3f %.3f %.3f %.2f %.3f %.3f\n" % (
                    p["jobs"], p["ours_objects_s"], p["plain_objects_s"], p["ours_bound_s"], p["plain_bound_s"],
                    p["rss_mib"], p["cpu_s"], p["requests_per_job"]))
        files["active"] = path
    if not files or not shutil.which("gnuplot"):
        if files:
            say("  (no gnuplot: the plot was not drawn; scripts/install-deps.sh bench installs it)")
        return None
    svg = os.path.join(out_dir, "scale.svg")
    panels = []
    if "suspended" in files:
        panels.append(
            "set title 'Suspended MPIJobs of 8 workers, synced by the operator'\n"
            "set xlabel 'suspended MPIJobs'\n"
            "plot '{f}' u 1:2 w lp t 'time to sync (s)', '' u 1:3 w lp t 'RSS synced (MiB)', "
            "'' u 1:4 w lp t 'RSS after a quiet minute (MiB)', '' u 1:5 w lp t 'CPU to sync (s)', "
            "'' u 1:6 w lp t 'requests (thousands)', '' u 1:8 w lp dt 2 t 'plain client: time to sync (s)'\n"
            .format(f=files["suspended"]))
    if "active" in files:
        panels.append(
            "set title 'MPIJobs of 8 workers created at once: operator and plain client'\n"
            "set xlabel 'MPIJobs'\n"
            "plot '{f}' u 1:2 w lp t 'operator: every object (s)', '' u 1:3 w lp dt 2 t 'plain client: every object (s)', "
            "'' u 1:4 w lp t 'operator: every pod bound (s)', '' u 1:5 w lp dt 2 t 'plain client: every pod bound (s)', "
            "'' u 1:6 w lp t 'operator RSS (MiB)', '' u 1:7 w lp t 'operator CPU (s)'\n".format(f=files["active"]))
    script = ("set terminal svg size 900,%d dynamic font 'sans,11' background rgb 'white'\n"
              "set output '%s'\n"
              "set logscale xy\nset grid\nset key outside right top\nset ylabel 'cost'\n"
              "set multiplot layout %d,1\n%sunset multiplot\n" % (420 * len(panels), svg, len(panels), "".join(panels)))
    r = subprocess.run(["gnuplot"], input=script, capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        say("  gnuplot failed: %s" % r.stderr[-1000:])
        return None
    return svg


def report(results):
    s = results.get("suspended") or []
    if s:
        say("\nSuspended MPIJobs of 8 workers (the operator's sync, then a quiet minute):")
        say(table(s, [
            ("jobs", lambda p: "{:,}".format(p["jobs"])),
            ("time to sync", lambda p: "%.1f s" % p["sync_s"]),
            ("per job", lambda p: "%.2f ms" % p["per_job_ms"]),
            ("RSS synced", lambda p: "%.1f MiB" % p["rss_synced_mib"]),
            ("RSS after quiet minute", lambda p: "%.1f MiB" % p["rss_quiet_mib"]),
            ("CPU to sync", lambda p: "%.2f s" % p["cpu_synced_s"]),
            ("requests (per job)", lambda p: "%d (%.2f)" % (p["requests"], p["requests_per_job"])),
            ("quiet-minute writes", lambda p: "%d" % p["quiet_writes"]),
            ("etcd db (of quota)", lambda p: "%.0f MiB (%.1f %%)" % (p["etcd_db_mib"], 100 * p["etcd_quota_used"])),
            ("kube-apiserver RSS", lambda p: "%.0f MiB" % p["apiserver_rss_mib"]),
        ]))
        say("  while the operator synced, CPU seconds of the operator / kube-apiserver / etcd / "
            "kube-controller-manager / this benchmark, and how busy the machine's cores were:")
        for p in s:
            if "machine_busy" in p:
                c = p["machine_cpu_sync_s"]
                say("    %6s jobs: %.1f / %.1f / %.1f / %.1f / %.1f s; cores %.0f %% busy" % (
                    "{:,}".format(p["jobs"]), p["cpu_synced_s"], c["kube-apiserver"], c["etcd"],
                    c["kube-controller-manager"], c.get("benchmark", float("nan")), 100 * p["machine_busy"]))
        big = max(s, key=lambda p: p["jobs"])
        small = min(s, key=lambda p: p["jobs"])
        sp = {p["jobs"]: p for p in results.get("suspended_plain") or []}
        if sp:
            say("  the plain client's sync of the same jobs (plain_client --existing, a control plane of its own), "
                "time (per job), CPU seconds of it / kube-apiserver / etcd / kube-controller-manager, cores busy:")
            for p in s:
                q = sp.get(p["jobs"])
                if q:
                    c = q["machine_cpu_sync_s"]
                    say("    %6s jobs: %.1f s (%.2f ms; the operator's %.2f ms, %.2fx); %.1f / %.1f / %.1f / %.1f s; "
                        "cores %.0f %% busy; %.2f requests a job" % (
                            "{:,}".format(p["jobs"]), q["sync_s"], q["per_job_ms"], p["per_job_ms"],
                            p["per_job_ms"] / q["per_job_ms"], q["cpu_s"], c["kube-apiserver"], c["etcd"],
                            c["kube-controller-manager"], 100 * q["machine_busy"], q["requests_per_job"]))
        growth = ""
        if big["jobs"] in sp and small["jobs"] in sp:
            growth = " (the plain client's: %.2fx)" % (sp[big["jobs"]]["per_job_ms"] / sp[small["jobs"]]["per_job_ms"])
        say("  targets at %d jobs: RSS at most 150 MiB: %.1f MiB synced, %.1f MiB quiet; time per job at most 1.5x "
            "that at %d: %.2fx%s; no quiet-minute writes: %d" % (
                big["jobs"], big["rss_synced_mib"], big["rss_quiet_mib"], small["jobs"],
                big["per_job_ms"] / small["per_job_ms"], growth, big["quiet_writes"]))
    a = results.get("active") or []
    if a:
        say("\nMPIJobs of 8 workers created at once, %d fake Ready nodes, the real kube-scheduler:" % FAKE_NODES)
        say(table(a, [
            ("jobs", lambda p: "{:,}".format(p["jobs"])),
            ("first", lambda p: p.get("first", "")),
            ("every object: operator / plain", lambda p: "%.1f / %.1f s, %.2f" % (
                p["ours_objects_s"], p["plain_objects_s"], p["ratio_objects"])),
            ("every pod bound: operator / plain", lambda p: "%.1f / %.1f s, %.2f" % (
                p["ours_bound_s"], p["plain_bound_s"], p["ratio_bound"])),
            ("requests per job (writes)", lambda p: "%.2f (%.2f)" % (p["requests_per_job"], p["writes_per_job"])),
            ("operator RSS", lambda p: "%.1f MiB" % p["rss_mib"]),
            ("operator CPU", lambda p: "%.2f s" % p["cpu_s"]),
        ]))
        big = max(median_rounds(a), key=lambda p: p["jobs"])
        rounds = [p for p in a if p["jobs"] == big["jobs"]]
        say("  target at %d jobs: creation at most 1.2x the plain client: %.2fx%s (every pod bound: %.2fx)" % (
            big["jobs"], big["ratio_objects"],
            " (the median of %d rounds: %s)" % (len(rounds), ", ".join("%.2f" % p["ratio_objects"] for p in rounds))
            if len(rounds) > 1 else "", big["ratio_bound"]))


def main():
    if launch.real_assets() is None or launch.control_plane_assets() is None:
        say("SKIP bench_scale: KUBEBUILDER_ASSETS=%s does not hold a real control plane (etcd, kube-apiserver, "
            "kube-controller-manager, kube-scheduler)" % os.environ.get("KUBEBUILDER_ASSETS", ""))
        return 0
    for b in (os.path.join(ROOT, "build", "bin", "mpijob-operator"), os.path.join(ROOT, "build", "bench", "plain_client")):
        if not os.access(b, os.X_OK):
            say("bench_scale: %s is missing (make all build/bench/plain_client)" % b)
            return 1
    suspended = [int(x) for x in os.environ.get("BENCH_SCALE_SUSPENDED", "1000 3000 10000").split()]
    active = [int(x) for x in os.environ.get("BENCH_SCALE_ACTIVE", "100 300 1000").split()]
    rounds = max(1, peer.env_int("BENCH_SCALE_ROUNDS", 1))
    parts = os.environ.get("BENCH_SCALE_PARTS", "suspended active").split()
    quiet_s = peer.env_int("BENCH_QUIET_S", 60)
    keep = bool(os.environ.get("BENCH_SCALE_KEEP"))
    plain_sync = os.environ.get("BENCH_SCALE_PLAIN_SYNC", "1") != "0"
    out_dir = os.environ.get("BENCH_SCALE_OUT", os.path.join(ROOT, "build", "bench"))
    os.makedirs(out_dir, exist_ok=True)
    ours = subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty"], capture_output=True,
                          text=True).stdout.strip() or "?"
    kube = subprocess.run([os.path.join(os.environ["KUBEBUILDER_ASSETS"], "kube-apiserver"), "--version"], capture_output=True,
                          text=True).stdout.strip()
    say("== bench_scale %s: mpijob-operator %s on %s, %d CPUs; suspended %s, active %s, quiet %d s" % (
        time.strftime("%Y-%m-%d %H:%M"), ours, kube, os.cpu_count(), suspended, active, quiet_s))
    results = {"date": time.strftime("%Y-%m-%d %H:%M"), "operator": ours, "kubernetes": kube,
               "cpus": os.cpu_count(), "suspended": [], "suspended_plain": [], "active": []}
    try:
        if "suspended" in parts:
            for n in suspended:
                results["suspended"].append(suspended_point(n, quiet_s, keep))
                if plain_sync:
                    results["suspended_plain"].append(suspended_plain_point(n, keep))
        if "active" in parts:
            for n in active:
                for r in range(rounds):
                    results["active"].append(active_point(n, keep, operator_first=r % 2 == 1))
    except RuntimeError as e:
        say("bench_scale: %s" % e)
        return 1
    finally:
        with open(os.path.join(out_dir, "scale.json"), "w") as f:
            json.dump(results, f, indent=1)
    report(results)
    svg = plot(out_dir, results)
    say("\nfigures in %s%s" % (os.path.join(out_dir, "scale.json"), ", plot in %s" % svg if svg else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
