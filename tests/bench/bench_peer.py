#!/usr/bin/env python3
"""bench_peer: this operator against the reference kubeflow/mpi-operator, side by side.

    MPI_OPERATOR_BIN=/path/to/mpi-operator KUBEBUILDER_ASSETS=DIR tests/bench/bench_peer.py

Both operators serve the same kubeflow.org/v2beta1 MPIJob. The benchmark starts one real control
plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler from KUBEBUILDER_ASSETS; no
nodes, so no pod runs) with this project's CRD, and runs the two operators in turns on it, each
with its own default flags and its own user (mpijob-operator, mpi-operator), whose every request
the API server's audit log records as it arrives. Only one operator runs at a time; after each
turn every object it made is deleted and gone before the other starts.

Measures, each printed for both operators with their ratio (ours / reference):
 1. create: time from an MPIJob's creation (the API server's answer to the POST) until the last of
    its objects (Service, ConfigMap, Secret, every worker Pod, launcher Job) shows on a watch, at
    8, 64 and 512 workers; BENCH_ROUNDS rounds each (default 3; median, min, max), every round in
    a namespace of its own that is deleted, and gone, before the next ("settled" rounds);
 2. requests per job by verb: what the operator's user asked of the API server in that round's
    namespace, from the job's creation until the benchmark deletes it (5 s after its last object);
    and over a job's whole life (part "life", BENCH_LIFE_SIZES, default "8 64"): the benchmark
    plays the kubelet (every worker, then the launcher, Running; then the launcher Succeeded) and
    counts until 5 s after the MPIJob's Succeeded condition and every worker's deletion
    (cleanPodPolicy Running in that manifest, as the reference's own examples set it). Creation
    alone is one request per object for both; the whole life is the figure per job;
 3. sync: BENCH_PEER_JOBS (default 1000) suspended MPIJobs of 8 workers are created while no
    operator runs; the operator then starts, and once every one shows Suspended=True: its resident
    memory (VmRSS) and CPU seconds (user+system since its start). Then the cluster settles:
    kube-controller-manager's Job controller writes the Suspended condition of every launcher
    Job, and nothing in the namespace changes for 5 s (the time and the operator's CPU seconds
    and requests meanwhile, Lease renewals apart, are printed). Then a quiet minute (BENCH_QUIET_S, default 60) in which
    nothing changes: resident memory, CPU seconds in that minute, and the writes it made then
    (its Lease's renewals counted apart);
 4. failure: a job of 8 workers; worker 0 is marked Failed (reason Evicted, as a kubelet's
    eviction leaves it); the time from that status write until the operator's answer, whichever
    its policy gives: a new worker 0 (a new UID under the same name) or the MPIJob's Failed
    condition; BENCH_ROUNDS rounds. Then once more with a plain crash (reason Error), where the
    answer is awaited 30 s.

Prints figures, and the targets beside them; it judges nothing and exits 0 unless the benchmark
itself cannot run (exit 1). Without MPI_OPERATOR_BIN, or without a real control plane in
KUBEBUILDER_ASSETS, it prints why it is skipped and exits 0.

Environment: BENCH_ROUNDS (3), BENCH_SIZES ("8 64 512"), BENCH_LIFE_SIZES ("8 64"), BENCH_PEER_JOBS
(1000), BENCH_QUIET_S
(60), BENCH_PEER_PARTS ("create life sync failure"), BENCH_PEER_OPERATORS ("ours reference": one of
them alone prints its own figures, no ratios), BENCH_PEER_KEEP=1 keeps the state directory
(logs of the control plane and of both operators, the audit log).
"""

import http.client
import json
import os
import shutil
import signal
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "apiserver"))
import launch  # noqa: E402

OURS, REF = "ours", "reference"
USERS = {OURS: "mpijob-operator", REF: "mpi-operator"}
IMAGE = "localhost/mpijob-worker:bench"        # never pulled: the control plane has no nodes
WRITE_VERBS = ("create", "update", "patch", "delete", "deletecollection")
SETTLE_S = 5.0          # after a job's last object, for its status writes and events to land
HTTP_TIMEOUT = 120.0


def env_int(name, default):
    try:
        return int(os.environ.get(name, default))
    except ValueError:
        sys.exit("bench_peer: %s=%r is not a number" % (name, os.environ.get(name)))


def say(msg):
    print(msg, flush=True)


# --------------------------------------------------------------------------------------------
# A small API client (one connection per thread) and watches
# --------------------------------------------------------------------------------------------

class Api:
    def __init__(self, url, token, cafile):
        hostport = url.split("://", 1)[1]
        self.host, port = hostport.rsplit(":", 1)
        self.port = int(port)
        self.token = token
        self.ctx = ssl.create_default_context(cafile=cafile)
        self.local = threading.local()

    def connect(self, timeout=HTTP_TIMEOUT):
        return http.client.HTTPSConnection(self.host, self.port, context=self.ctx, timeout=timeout)

    def request(self, method, path, body=None, ctype="application/json"):
        """(HTTP status, decoded JSON or None); one retry on a dropped keep-alive connection."""
        headers = {"Authorization": "Bearer " + self.token, "Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = ctype
        for attempt in (0, 1):
            conn = getattr(self.local, "conn", None)
            if conn is None:
                conn = self.local.conn = self.connect()
            try:
                conn.request(method, path, body=data, headers=headers)
                resp = conn.getresponse()
                raw = resp.read()
            except (OSError, http.client.HTTPException):
                conn.close()
                self.local.conn = None
                if attempt:
                    raise
                continue
            try:
                return resp.status, json.loads(raw) if raw else None
            except ValueError:
                return resp.status, None
        raise RuntimeError("not reached")

    def must(self, method, path, body=None, ok=(200, 201), ctype="application/json"):
        code, out = self.request(method, path, body, ctype)
        if code not in ok:
            raise RuntimeError("%s %s: HTTP %d: %s" % (method, path, code, json.dumps(out)[:400]))
        return out


class Book:
    """What the watches saw: for every object, the monotonic time each UID was first seen; the
    latest MPIJobs; and which MPIJobs show Suspended=True. Waiters wake on every event."""

    def __init__(self):
        self.cv = threading.Condition()
        self.first = {}        # (kind, ns, name) -> {uid: t}
        self.gone = set()      # (kind, ns, name, uid) of objects deleted
        self.mpijobs = {}      # (ns, name) -> object
        self.suspended = {}    # ns -> set of names
        self.jobs_suspended = {}  # ns -> set of names of batch Jobs that show Suspended=True
        self.last_event = {}   # ns -> monotonic time of the latest event on anything in it

    def record(self, kind, etype, obj, t):
        meta = obj.get("metadata") or {}
        ns, name, uid = meta.get("namespace", ""), meta.get("name", ""), meta.get("uid", "")
        with self.cv:
            self.last_event[ns] = t
            if kind == "jobs":
                names = self.jobs_suspended.setdefault(ns, set())
                if etype != "DELETED" and condition(obj, "Suspended") == "True":
                    names.add(name)
                else:
                    names.discard(name)
            if etype in ("ADDED", "MODIFIED", "LISTED"):
                self.first.setdefault((kind, ns, name), {}).setdefault(uid, t)
            elif etype == "DELETED":
                self.gone.add((kind, ns, name, uid))
            if kind == "mpijobs":
                if etype == "DELETED":
                    self.mpijobs.pop((ns, name), None)
                    self.suspended.get(ns, set()).discard(name)
                else:
                    self.mpijobs[(ns, name)] = obj
                    names = self.suspended.setdefault(ns, set())
                    if condition(obj, "Suspended") == "True":
                        names.add(name)
                    else:
                        names.discard(name)
            self.cv.notify_all()

    def seen(self, kind, ns, name):
        """The time the object was first seen (its first UID), or None."""
        uids = self.first.get((kind, ns, name))
        return min(uids.values()) if uids else None

    def wait(self, pred, timeout):
        end = time.monotonic() + timeout
        with self.cv:
            while not pred():
                left = end - time.monotonic()
                if left <= 0:
                    return False
                self.cv.wait(min(left, 1.0))
            return True

    def poll(self, pred, timeout, every=0.5):
        """Like wait, but asks pred every `every` seconds, not on every event: for a pred whose
        cost grows with the objects, which asked on every event of thousands of jobs would take a
        core from the run being measured. The times pred reads were taken as each event came."""
        end = time.monotonic() + timeout
        while True:
            with self.cv:
                if pred():
                    return True
            if time.monotonic() >= end:
                return False
            time.sleep(every)


def condition(obj, ctype):
    for c in ((obj.get("status") or {}).get("conditions") or []):
        if c.get("type") == ctype:
            return c.get("status")
    return None


class Watcher(threading.Thread):
    """A cluster-wide list+watch of one resource into the Book, re-listing after a 410."""

    def __init__(self, api, path, kind, book):
        super().__init__(daemon=True)
        self.api, self.path, self.kind, self.book = api, path, kind, book
        self.ready = threading.Event()

    def run(self):
        rv = None
        while True:
            try:
                if rv is None:
                    out = self.api.must("GET", self.path)
                    t = time.monotonic()
                    for item in out.get("items") or []:
                        self.book.record(self.kind, "LISTED", item, t)
                    rv = out["metadata"]["resourceVersion"]
                    self.ready.set()
                conn = self.api.connect(timeout=900)
                conn.request("GET", "%s?watch=1&allowWatchBookmarks=true&timeoutSeconds=600&resourceVersion=%s"
                             % (self.path, rv), headers={"Authorization": "Bearer " + self.api.token})
                resp = conn.getresponse()
                if resp.status != 200:
                    resp.read()
                    conn.close()
                    rv = None
                    time.sleep(1)
                    continue
                while True:
                    line = resp.readline()
                    if not line:
                        break
                    ev = json.loads(line)
                    t = time.monotonic()
                    obj = ev.get("object") or {}
                    if ev.get("type") == "ERROR":
                        rv = None        # 410 Gone: list again
                        break
                    rv = (obj.get("metadata") or {}).get("resourceVersion", rv)
                    if ev.get("type") != "BOOKMARK":
                        self.book.record(self.kind, ev["type"], obj, t)
                conn.close()
            except (OSError, ValueError, RuntimeError, http.client.HTTPException):
                time.sleep(1)


# --------------------------------------------------------------------------------------------
# The audit log: one RequestReceived event per request of each operator's user
# --------------------------------------------------------------------------------------------

class Audit:
    def __init__(self, path):
        self.path = path
        self.offset = 0
        self.events = []       # (wall time, user, verb, resource[/sub], namespace, apiGroup)

    def refresh(self):
        time.sleep(0.5)        # blocking mode writes before answering; leave a margin anyway
        try:
            with open(self.path) as f:
                f.seek(self.offset)
                for line in f:
                    if not line.endswith("\n"):
                        break
                    self.offset += len(line.encode())
                    try:
                        ev = json.loads(line)
                    except ValueError:
                        continue
                    if ev.get("stage") != "RequestReceived":
                        continue
                    ref = ev.get("objectRef") or {}
                    res = (ref.get("resource") or "") + ("/" + ref["subresource"] if ref.get("subresource") else "")
                    ts = ev.get("requestReceivedTimestamp") or ev.get("stageTimestamp")
                    self.events.append((datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp(),
                                        (ev.get("user") or {}).get("username"), ev.get("verb"), res,
                                        ref.get("namespace") or "", ref.get("apiGroup") or ""))
        except OSError:
            pass

    def select(self, user, since=0.0, until=float("inf"), ns=None):
        self.refresh()
        return [e for e in self.events if e[1] == user and since <= e[0] < until and (ns is None or e[4] == ns)]


def by_verb(events):
    return Counter(e[2] for e in events)


def verbs_text(counter, per=1):
    if not counter:
        return "none"
    return ", ".join("%s %s" % (v, fmt_num(n / per)) for v, n in sorted(counter.items(), key=lambda x: (-x[1], x[0])))


def fmt_num(x):
    return "%d" % x if abs(x - round(x)) < 1e-9 else "%.2f" % x


# --------------------------------------------------------------------------------------------
# The operators
# --------------------------------------------------------------------------------------------

def proc_rss_mib(pid):
    """Process pid's resident memory in MiB, or NaN when it cannot be read."""
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024.0
    except (OSError, TypeError):
        pass
    return float("nan")


def proc_cpu_s(pid):
    """CPU seconds (user and system) process pid has used, or NaN when it cannot be read."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, TypeError):
        return float("nan")


class Operator:
    def __init__(self, key, argv, log_path, before_start=None):
        self.key, self.argv, self.log_path, self.before_start = key, argv, log_path, before_start
        self.proc = None

    def start(self):
        if self.before_start:
            self.before_start()
        log = open(self.log_path, "ab")
        log.write(("\n==== start %s\n" % time.strftime("%H:%M:%S")).encode())
        log.flush()
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        log.close()
        self.started_wall = time.time()
        self.started = time.monotonic()

    def check(self):
        if self.proc.poll() is not None:
            raise RuntimeError("%s operator exited with status %s (log: %s)" % (self.key, self.proc.returncode,
                                                                                 self.log_path))

    def stop(self):
        if not self.proc or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def rss_mib(self):
        return proc_rss_mib(self.proc.pid)

    def cpu_s(self):
        return proc_cpu_s(self.proc.pid)


# --------------------------------------------------------------------------------------------
# The benchmark
# --------------------------------------------------------------------------------------------

def mpijob(ns, name, workers, suspend=False, clean_pod_policy=None):
    spec = {
        "slotsPerWorker": 1,
        "mpiReplicaSpecs": {
            "Launcher": {"replicas": 1, "template": {"spec": {"containers": [
                {"name": "launcher", "image": IMAGE, "command": ["mpirun", "mpijob-worker", "train"]}]}}},
            "Worker": {"replicas": workers, "template": {"spec": {"containers": [
                {"name": "worker", "image": IMAGE}]}}},
        },
    }
    if suspend:
        spec["runPolicy"] = {"suspend": True}
    if clean_pod_policy:
        spec["runPolicy"] = {"cleanPodPolicy": clean_pod_policy}
    return {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "metadata": {"name": name, "namespace": ns},
            "spec": spec}


def mpijobs_path(ns, name=None):
    return "/apis/kubeflow.org/v2beta1/namespaces/%s/mpijobs%s" % (ns, "/" + name if name else "")


def expected_objects(ns, name, workers):
    objs = [("services", ns, name), ("configmaps", ns, name + "-config"), ("secrets", ns, name + "-ssh"),
            ("jobs", ns, name + "-launcher")]
    return objs + [("pods", ns, "%s-worker-%d" % (name, i)) for i in range(workers)]


class SyncProgress:
    """How many suspended MPIJobs of namespace ns the book shows synced: Suspended=True, and their
    Service, ConfigMap, Secret and launcher Job seen (a job once complete stays counted)."""

    def __init__(self, book, ns):
        self.book, self.ns = book, ns
        self.complete = set()

    def count(self):
        names = self.book.suspended.get(self.ns, ())
        for x in names:
            if x not in self.complete and all(self.book.first.get(k) for k in expected_objects(self.ns, x, 0)):
                self.complete.add(x)
        return len(self.complete.intersection(names))


class Bench:
    def __init__(self, state, ref_bin, chosen=(OURS, REF)):
        self.state = state
        self.chosen = chosen
        with open(os.path.join(state, "kubeconfig")) as f:
            kc = f.read()
        port = int(open(os.path.join(state, "port")).read())
        token = [ln.split("token:", 1)[1].strip() for ln in kc.splitlines() if "token:" in ln][0]
        self.api = Api("https://127.0.0.1:%d" % port, token, os.path.join(state, "ca.crt"))
        self.book = Book()
        self.audit = Audit(os.path.join(state, "audit.log"))
        self.seq = 0
        # optional: a callable giving CPU seconds by component ({"kube-apiserver": s, ...}), read
        # by part_sync when the operator starts and when every job is synced
        self.machine_cpu = None
        self.ops = {
            OURS: Operator(OURS, [os.path.join(ROOT, "build", "bin", "mpijob-operator"), "--kubeconfig",
                                  os.path.join(state, USERS[OURS] + ".kubeconfig")],
                           os.path.join(state, "ours.log")),
            REF: Operator(REF, [ref_bin, "--kubeConfig", os.path.join(state, USERS[REF] + ".kubeconfig")],
                          os.path.join(state, "reference.log"), before_start=self.fresh_reference_lease),
        }

    def fresh_reference_lease(self):
        """The reference does not release its Lease when it stops; without this, each of its
        starts would wait for the previous one's Lease to expire (15 s)."""
        self.api.request("DELETE", "/apis/coordination.k8s.io/v1/namespaces/mpi-operator/leases/mpi-operator")

    def start_watches(self):
        for path, kind in (("/api/v1/pods", "pods"), ("/api/v1/services", "services"),
                           ("/api/v1/configmaps", "configmaps"), ("/api/v1/secrets", "secrets"),
                           ("/apis/batch/v1/jobs", "jobs"), ("/apis/kubeflow.org/v2beta1/mpijobs", "mpijobs")):
            w = Watcher(self.api, path, kind, self.book)
            w.start()
            if not w.ready.wait(60):
                raise RuntimeError("no list of %s in 60 s" % path)
        # the reference's leader election lock lives in a namespace that must exist
        self.api.must("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                     "metadata": {"name": "mpi-operator"}}, ok=(201, 409))

    def namespace(self, prefix):
        self.seq += 1
        ns = "%s-%d" % (prefix, self.seq)
        self.api.must("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                     "metadata": {"name": ns}})
        # pods need the namespace's default ServiceAccount, made by kube-controller-manager
        end = time.monotonic() + 120
        while self.api.request("GET", "/api/v1/namespaces/%s/serviceaccounts/default" % ns)[0] != 200:
            if time.monotonic() > end:
                raise RuntimeError("namespace %s got no default ServiceAccount in 120 s" % ns)
            time.sleep(0.2)
        return ns

    def drop(self, ns, name=None):
        """Deletes the MPIJob (its objects go with it, by the garbage collector), then the
        namespace, and waits until the namespace is gone."""
        if name:
            self.api.request("DELETE", mpijobs_path(ns, name), {"propagationPolicy": "Background"})
        self.api.request("DELETE", "/api/v1/namespaces/" + ns, {"propagationPolicy": "Background"})
        end = time.monotonic() + 900
        while self.api.request("GET", "/api/v1/namespaces/" + ns)[0] != 404:
            if time.monotonic() > end:
                raise RuntimeError("namespace %s still there after 900 s" % ns)
            time.sleep(0.5)

    def await_objects(self, op, objs, timeout):
        book = self.book
        ok = book.wait(lambda: all(book.first.get(k) for k in objs), timeout)
        if not ok:
            op.check()
            missing = [k for k in objs if not book.first.get(k)]
            raise RuntimeError("%s: %d of %d objects missing after %d s, e.g. %s" % (
                op.key, len(missing), len(objs), timeout, missing[:5]))
        return max(book.seen(*k) for k in objs)

    def warm_up(self, op):
        """Once the operator is leader with its caches synced, a one-worker job gets its objects."""
        ns = self.namespace("peer-warm")
        self.api.must("POST", mpijobs_path(ns), mpijob(ns, "warm", 1))
        self.await_objects(op, expected_objects(ns, "warm", 1), 180)
        self.drop(ns, "warm")

    # 1 and 2 ----------------------------------------------------------------------------------
    def create_round(self, op, workers):
        ns = self.namespace("peer-%s-w%d" % ("o" if op.key == OURS else "r", workers))
        name = "job"
        start_wall = time.time()
        self.api.must("POST", mpijobs_path(ns), mpijob(ns, name, workers))
        t0 = time.monotonic()
        end = self.await_objects(op, expected_objects(ns, name, workers), 600 + workers * 2)
        time.sleep(SETTLE_S)
        cut = time.time()
        self.drop(ns, name)
        reqs = self.audit.select(USERS[op.key], start_wall - 1, cut, ns)
        return end - t0, by_verb(reqs)

    # 2, over a job's whole life -------------------------------------------------------------
    def kubelet_status(self, ns, pod, container, phase):
        """Writes what a kubelet would: the pod Running with its container ready, or Succeeded."""
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        up = phase == "Running"
        state = {"running": {"startedAt": now}} if up else {
            "terminated": {"exitCode": 0, "reason": "Completed", "startedAt": now, "finishedAt": now}}
        status = {"phase": phase, "conditions": [
            {"type": t, "status": "True" if up else "False", "lastTransitionTime": now}
            for t in ("Initialized", "Ready", "ContainersReady")],
            "containerStatuses": [{"name": container, "ready": up, "started": up, "restartCount": 0,
                                   "image": IMAGE, "imageID": "", "state": state}]}
        if up:
            status["startTime"] = now
        self.api.must("PATCH", "/api/v1/namespaces/%s/pods/%s/status" % (ns, pod), {"status": status},
                      ctype="application/strategic-merge-patch+json")

    def await_job_condition(self, op, ns, name, ctype, timeout):
        book = self.book
        if not book.wait(lambda: condition(book.mpijobs.get((ns, name)) or {}, ctype) == "True", timeout):
            op.check()
            raise RuntimeError("%s: MPIJob %s/%s not %s after %d s; last status: %s" % (
                op.key, ns, name, ctype, timeout, json.dumps((book.mpijobs.get((ns, name)) or {}).get("status"))[:600]))

    def launcher_pod(self, op, ns, name, timeout):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            out = self.api.must("GET", "/api/v1/namespaces/%s/pods?labelSelector=job-name%%3D%s-launcher" % (ns, name))
            if out.get("items"):
                return out["items"][0]["metadata"]["name"]
            time.sleep(0.2)
        op.check()
        raise RuntimeError("%s: no launcher pod for %s/%s in %d s" % (op.key, ns, name, timeout))

    def life_round(self, op, workers):
        """A job from creation to Succeeded, the benchmark playing the kubelet: every worker and
        the launcher Running, then the launcher done. cleanPodPolicy Running, as the reference's
        own examples set it, so both delete the workers at the end."""
        ns = self.namespace("peer-%s-life%d" % ("o" if op.key == OURS else "r", workers))
        name = "job"
        start_wall = time.time()
        self.api.must("POST", mpijobs_path(ns), mpijob(ns, name, workers, clean_pod_policy="Running"))
        t0 = time.monotonic()
        self.await_objects(op, expected_objects(ns, name, workers), 600 + workers * 2)
        launcher = self.launcher_pod(op, ns, name, 120)
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda i: self.kubelet_status(ns, "%s-worker-%d" % (name, i), "worker", "Running"),
                          range(workers)))
        self.kubelet_status(ns, launcher, "launcher", "Running")
        self.await_job_condition(op, ns, name, "Running", 300 + workers)
        self.kubelet_status(ns, launcher, "launcher", "Succeeded")
        self.await_job_condition(op, ns, name, "Succeeded", 300 + workers)
        secs = time.monotonic() - t0
        # cleanPodPolicy Running: the count ends once every worker is gone, however long the
        # operator takes to delete them
        book = self.book

        def cleaned():
            return all((kind, n, w, u) in book.gone for kind, n, w in expected_objects(ns, name, workers)[4:]
                       for u in book.first.get((kind, n, w), {}))
        if not book.wait(cleaned, 300 + workers):
            op.check()
            raise RuntimeError("%s: the workers of %s/%s are not all gone %d s after Succeeded"
                               % (op.key, ns, name, 300 + workers))
        time.sleep(SETTLE_S)
        cut = time.time()
        self.drop(ns, name)
        return secs, by_verb(self.audit.select(USERS[op.key], start_wall - 1, cut, ns))

    def part_create(self, sizes, rounds, results, create=True):
        """Creation rounds (create) and whole-life rounds (the sizes in results["life"]), one
        operator turn per size, the operators taking turns at going first."""
        for i, workers in enumerate(sizes):
            if not create and workers not in results["life"]:
                continue
            order = (OURS, REF) if i % 2 == 0 else (REF, OURS)
            for key in [k for k in order if k in self.chosen]:
                op = self.ops[key]
                op.start()
                try:
                    self.warm_up(op)
                    for r in range(rounds if create and workers in results["create"] else 0):
                        secs, verbs = self.create_round(op, workers)
                        results["create"][workers][key].append(secs)
                        results["requests"][workers][key].append(verbs)
                        say("  create %3d workers  %-9s round %d: %7.2f s, %d requests (%s)" % (
                            workers, key, r + 1, secs, sum(verbs.values()), verbs_text(verbs)))
                    if workers not in results["life"]:
                        continue
                    for r in range(rounds):
                        secs, verbs = self.life_round(op, workers)
                        results["life"][workers][key].append(verbs)
                        say("  life   %3d workers  %-9s round %d: %7.2f s to Succeeded, %d requests (%s)" % (
                            workers, key, r + 1, secs, sum(verbs.values()), verbs_text(verbs)))
                finally:
                    op.stop()

    # 3 ----------------------------------------------------------------------------------------
    def part_sync(self, jobs, quiet_s, results, order):
        for key in [k for k in order if k in self.chosen]:
            op = self.ops[key]
            ns = self.namespace("peer-sync-%s" % ("o" if key == OURS else "r"))
            t = time.monotonic()
            with ThreadPoolExecutor(8) as pool:
                list(pool.map(lambda i: self.api.must("POST", mpijobs_path(ns),
                                                      mpijob(ns, "s%04d" % i, 8, suspend=True)), range(jobs)))
            say("  sync %-9s: %d suspended MPIJobs created in %.1f s; starting the operator"
                % (key, jobs, time.monotonic() - t))
            book = self.book
            machine0 = self.machine_cpu() if self.machine_cpu else None
            op.start()
            try:
                last = [0, time.monotonic()]
                progress = SyncProgress(book, ns)

                def synced():
                    n = progress.count()
                    if n != last[0]:
                        last[0], last[1] = n, time.monotonic()
                    return n >= jobs

                while not book.poll(synced, 30, 0.1):
                    op.check()
                    say("    %s: %d of %d synced after %.0f s" % (key, last[0], jobs, time.monotonic() - op.started))
                    if time.monotonic() - last[1] > 600:
                        raise RuntimeError("%s: stuck at %d of %d synced for 600 s" % (key, last[0], jobs))
                sync_s = time.monotonic() - op.started
                rss1, cpu1 = op.rss_mib(), op.cpu_s()
                machine1 = self.machine_cpu() if self.machine_cpu else None
                # The cluster settles: kube-controller-manager's Job controller writes the
                # Suspended condition of every launcher Job, and nothing in the namespace has
                # changed for SETTLE_S. The quiet minute starts then, for both operators alike.
                t_synced, wall_synced = time.monotonic(), time.time()

                def settled():
                    done = len(book.jobs_suspended.get(ns, ())) >= jobs
                    return done and time.monotonic() - book.last_event.get(ns, 0) >= SETTLE_S

                while not book.wait(settled, 30):
                    op.check()
                    say("    %s: %d of %d launcher Jobs Suspended, %.0f s after synced"
                        % (key, len(book.jobs_suspended.get(ns, ())), jobs, time.monotonic() - t_synced))
                    if time.monotonic() - t_synced > 900:
                        raise RuntimeError("%s: the cluster did not settle in 900 s" % key)
                settle_s = time.monotonic() - t_synced
                cpu_settled = op.cpu_s()
                quiet_from = time.time()
                time.sleep(quiet_s)
                op.check()
                rss2, cpu2 = op.rss_mib(), op.cpu_s()
                quiet_to = time.time()
                settle_reqs = [e for e in self.audit.select(USERS[key], wall_synced, quiet_from) if e[3] != "leases"]
            finally:
                op.stop()
            user = USERS[key]
            sync_reqs = self.audit.select(user, op.started_wall - 1, quiet_from)
            quiet = self.audit.select(user, quiet_from, quiet_to)
            writes = [e for e in quiet if e[2] in WRITE_VERBS]
            lease = [e for e in writes if e[3] == "leases"]
            other = [e for e in writes if e[3] != "leases"]
            res = dict(sync_s=sync_s, rss_synced=rss1, cpu_synced=cpu1, rss_quiet=rss2, cpu_quiet=cpu2 - cpu_settled,
                       settle_s=settle_s, cpu_settle=cpu_settled - cpu1, settle_requests=by_verb(settle_reqs),
                       requests=by_verb(sync_reqs), writes=len(other), lease_writes=len(lease),
                       writes_by=Counter("%s %s" % (e[2], e[3]) for e in other),
                       quiet_requests=by_verb(quiet))
            if machine0 is not None and machine1 is not None:
                res["machine_cpu_sync"] = {k: machine1[k] - machine0.get(k, 0.0) for k in machine1}
            results["sync"][key] = res
            say("  sync %-9s: all %d synced %.1f s after start; RSS %.1f MiB, CPU %.2f s; settled %.1f s later, "
                "CPU %.2f s and %d requests (%s; Lease renewals apart) meanwhile; after %d s quiet: "
                "RSS %.1f MiB, CPU %.2f s in it, %d writes (%s) + %d Lease renewals; requests while syncing: %d (%s)"
                % (key, jobs, sync_s, rss1, cpu1, settle_s, res["cpu_settle"], sum(res["settle_requests"].values()),
                   verbs_text(res["settle_requests"]), quiet_s, rss2, res["cpu_quiet"], len(other),
                   verbs_text(res["writes_by"]), len(lease), sum(res["requests"].values()),
                   verbs_text(res["requests"])))
            self.drop(ns)

    # 4 ----------------------------------------------------------------------------------------
    def failure_round(self, op, reason, wait_s):
        ns = self.namespace("peer-%s-fail" % ("o" if op.key == OURS else "r"))
        name = "job"
        self.api.must("POST", mpijobs_path(ns), mpijob(ns, name, 8))
        self.await_objects(op, expected_objects(ns, name, 8), 300)
        time.sleep(SETTLE_S)
        pod = "%s-worker-0" % name
        book = self.book
        with book.cv:
            old = set(book.first[("pods", ns, pod)])
        status = {"phase": "Failed", "reason": reason,
                  "message": "The node was low on resource: memory." if reason == "Evicted" else "exit code 1"}
        if reason == "Evicted":
            status["conditions"] = [{"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet",
                                     "message": status["message"]}]
        self.api.must("PATCH", "/api/v1/namespaces/%s/pods/%s/status" % (ns, pod), {"status": status},
                      ctype="application/merge-patch+json")
        t0 = time.monotonic()
        answer = {}

        def reacted():
            uids = book.first.get(("pods", ns, pod), {})
            new = [t for u, t in uids.items() if u not in old]
            if new:
                answer["what"], answer["t"] = "replaced", min(new)
                return True
            job = book.mpijobs.get((ns, name))
            if job and condition(job, "Failed") == "True":
                answer["what"], answer["t"] = "job Failed", time.monotonic()
                return True
            return False

        if book.wait(reacted, wait_s):
            secs, what = answer["t"] - t0, answer["what"]
        else:
            op.check()
            secs, what = None, "no answer in %d s" % wait_s
        self.drop(ns, name)
        return secs, what

    def part_failure(self, rounds, results, order):
        for key in [k for k in order if k in self.chosen]:
            op = self.ops[key]
            op.start()
            try:
                self.warm_up(op)
                for r in range(rounds):
                    secs, what = self.failure_round(op, "Evicted", 120)
                    results["failure"][key].append((secs, what))
                    say("  failure %-9s round %d: evicted worker -> %s%s" % (
                        key, r + 1, what, " after %.3f s" % secs if secs is not None else ""))
                secs, what = self.failure_round(op, "Error", 30)
                results["crash"][key] = (secs, what)
                say("  failure %-9s crash: failed worker (reason Error) -> %s%s" % (
                    key, what, " after %.3f s" % secs if secs is not None else ""))
            finally:
                op.stop()


# --------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------

def ratio(a, b):
    return "%.2f" % (a / b) if a is not None and b else "-"


def report(results, sizes, jobs, quiet_s):
    rows = []
    for w in sizes:
        o, r = results["create"][w][OURS], results["create"][w][REF]
        if o and r:
            mo, mr = statistics.median(o), statistics.median(r)
            rows.append(("create, %d workers (median of %d; min-max)" % (w, len(o)),
                         "%.2f s (%.2f-%.2f)" % (mo, min(o), max(o)), "%.2f s (%.2f-%.2f)" % (mr, min(r), max(r)),
                         ratio(mo, mr), "<= 0.2" if w >= 64 else ""))
            say("RESULT create workers=%d ours_s=%.3f reference_s=%.3f ratio=%s ours_rounds=%s reference_rounds=%s"
                % (w, mo, mr, ratio(mo, mr), ",".join("%.3f" % x for x in o), ",".join("%.3f" % x for x in r)))
    def request_rows(key, label, target):
        for w in sorted(results[key]):
            o, r = results[key][w][OURS], results[key][w][REF]
            if not (o and r):
                continue
            co, cr = sum(o, Counter()), sum(r, Counter())
            no, nr = sum(co.values()) / len(o), sum(cr.values()) / len(r)
            rows.append(("API requests per job, %d workers, %s" % (w, label),
                         "%s (%s)" % (fmt_num(no), verbs_text(co, len(o))),
                         "%s (%s)" % (fmt_num(nr), verbs_text(cr, len(r))), ratio(no, nr), target(w)))
            say("RESULT %s workers=%d ours=%s reference=%s ratio=%s ours_by_verb={%s} reference_by_verb={%s}"
                % ("requests" if key == "requests" else "life_requests", w, fmt_num(no), fmt_num(nr),
                   ratio(no, nr), verbs_text(co, len(o)), verbs_text(cr, len(r))))

    request_rows("requests", "creation only", lambda w: "")
    request_rows("life", "created to Succeeded", lambda w: "<= 0.7" if w == 8 else "<= 0.8")
    s = results["sync"]
    if OURS in s and REF in s:
        o, r = s[OURS], s[REF]
        rows += [
            ("time to sync %d suspended MPIJobs" % jobs, "%.1f s" % o["sync_s"], "%.1f s" % r["sync_s"],
             ratio(o["sync_s"], r["sync_s"]), ""),
            ("API requests per job while syncing", "%s (%s)" % (fmt_num(sum(o["requests"].values()) / jobs),
                                                             verbs_text(o["requests"], jobs)),
             "%s (%s)" % (fmt_num(sum(r["requests"].values()) / jobs), verbs_text(r["requests"], jobs)),
             ratio(sum(o["requests"].values()), sum(r["requests"].values())), ""),
            ("RSS, %d jobs synced" % jobs, "%.1f MiB" % o["rss_synced"], "%.1f MiB" % r["rss_synced"],
             ratio(o["rss_synced"], r["rss_synced"]), "<= 0.3"),
            ("CPU seconds, start to synced", "%.2f s" % o["cpu_synced"], "%.2f s" % r["cpu_synced"],
             ratio(o["cpu_synced"], r["cpu_synced"]), "<= 0.5"),
            ("synced to settled (launcher Jobs Suspended, %d s without events): time, CPU" % SETTLE_S,
             "%.1f s, %.2f s" % (o["settle_s"], o["cpu_settle"]), "%.1f s, %.2f s" % (r["settle_s"], r["cpu_settle"]),
             "", ""),
            ("RSS after the quiet %d s" % quiet_s, "%.1f MiB" % o["rss_quiet"], "%.1f MiB" % r["rss_quiet"],
             ratio(o["rss_quiet"], r["rss_quiet"]), "<= 0.3"),
            ("CPU seconds in the quiet %d s" % quiet_s, "%.2f s" % o["cpu_quiet"], "%.2f s" % r["cpu_quiet"],
             ratio(o["cpu_quiet"], r["cpu_quiet"]), "<= 0.5"),
            ("writes in the quiet %d s (Lease renewals apart)" % quiet_s,
             "%d (%s) + %d" % (o["writes"], verbs_text(o["writes_by"]), o["lease_writes"]),
             "%d (%s) + %d" % (r["writes"], verbs_text(r["writes_by"]), r["lease_writes"]), "", "0"),
        ]
        for key in (OURS, REF):
            x = s[key]
            say("RESULT sync %s jobs=%d sync_s=%.1f rss_mib=%.1f cpu_s=%.2f quiet_rss_mib=%.1f quiet_cpu_s=%.2f "
                "quiet_writes=%d quiet_lease_writes=%d requests=%d settle_s=%.1f settle_cpu_s=%.2f settle_requests=%d" % (
                    key, jobs, x["sync_s"], x["rss_synced"], x["cpu_synced"], x["rss_quiet"], x["cpu_quiet"],
                    x["writes"], x["lease_writes"], sum(x["requests"].values()), x["settle_s"], x["cpu_settle"],
                    sum(x["settle_requests"].values())))
    f = results["failure"]
    if f[OURS] and f[REF]:
        def med(lst):
            xs = [t for t, _ in lst if t is not None]
            return statistics.median(xs) if xs else None

        def txt(lst):
            m = med(lst)
            whats = sorted({w for _, w in lst})
            return ("%.2f s" % m if m is not None else "none") + " (" + ", ".join(whats) + ")"
        rows.append(("evicted worker to the answer (median of %d)" % len(f[OURS]), txt(f[OURS]), txt(f[REF]),
                     ratio(med(f[OURS]), med(f[REF])), "<= 1"))
        say("RESULT failure ours_s=%s reference_s=%s ours=%s reference=%s" % (
            med(f[OURS]), med(f[REF]), "; ".join(w for _, w in f[OURS]), "; ".join(w for _, w in f[REF])))
    c = results["crash"]
    if OURS in c and REF in c:
        def ctxt(x):
            return ("%.2f s, " % x[0] if x[0] is not None else "") + x[1]
        rows.append(("crashed worker (reason Error) to the answer", ctxt(c[OURS]), ctxt(c[REF]), "", ""))
    if not rows:
        return
    head = ("measure", "ours", "reference", "ratio", "target")
    widths = [max(len(str(x[i])) for x in rows + [head]) for i in range(5)]
    say("")
    for row in [head, tuple("-" * w for w in widths)] + rows:
        say("  " + " | ".join(str(x).ljust(widths[i]) for i, x in enumerate(row)))


def versions(api, ref_bin):
    kube = (api.must("GET", "/version") or {}).get("gitVersion", "?")
    ref = subprocess.run([ref_bin, "--version"], capture_output=True, text=True, timeout=30)
    ref_line = " ".join((ref.stdout + ref.stderr).split())[:200]
    try:
        ours = subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty"], capture_output=True,
                              text=True, timeout=30).stdout.strip()
    except OSError:
        ours = "?"
    return kube, ref_line, ours or "?"


def main():
    ref_bin = os.environ.get("MPI_OPERATOR_BIN", "")
    if not ref_bin:
        say("SKIP bench_peer: MPI_OPERATOR_BIN is not set (the reference mpi-operator binary; "
            "docs/PERFORMANCE.md says how it is built)")
        return 0
    if not os.access(ref_bin, os.X_OK):
        say("SKIP bench_peer: MPI_OPERATOR_BIN=%s is not an executable" % ref_bin)
        return 0
    if launch.real_assets() is None or launch.control_plane_assets() is None:
        say("SKIP bench_peer: KUBEBUILDER_ASSETS=%s does not hold a real control plane (etcd, kube-apiserver, "
            "kube-controller-manager, kube-scheduler)" % os.environ.get("KUBEBUILDER_ASSETS", ""))
        return 0
    ours_bin = os.path.join(ROOT, "build", "bin", "mpijob-operator")
    if not os.access(ours_bin, os.X_OK):
        say("bench_peer: %s is missing (make all)" % ours_bin)
        return 1
    rounds = env_int("BENCH_ROUNDS", 3)
    sizes = [int(x) for x in os.environ.get("BENCH_SIZES", "8 64 512").split()]
    life_sizes = [int(x) for x in os.environ.get("BENCH_LIFE_SIZES", "8 64").split()]
    jobs = env_int("BENCH_PEER_JOBS", 1000)
    quiet_s = env_int("BENCH_QUIET_S", 60)
    parts = os.environ.get("BENCH_PEER_PARTS", "create life sync failure").split()
    chosen = [k for k in (OURS, REF) if k in os.environ.get("BENCH_PEER_OPERATORS", "ours reference").split()]

    state = tempfile.mkdtemp(prefix="bench-peer-")
    argv = [sys.executable, os.path.join(ROOT, "tests", "apiserver", "launch.py"), "--state-dir", state,
            "--control-plane", "--background", "--user", USERS[OURS], "--user", USERS[REF]]
    say("== bench_peer: starting a control plane in %s" % state)
    if subprocess.run(argv, stdout=subprocess.DEVNULL).returncode != 0:
        say("bench_peer: the control plane did not start (logs in %s)" % state)
        return 1
    bench = Bench(state, ref_bin, chosen)
    status = 0

    def on_signal(signum, frame):
        raise SystemExit(128 + signum)   # unwinds through the finally below: nothing is left running

    signal.signal(signal.SIGTERM, on_signal)
    try:
        kube, ref_line, ours = versions(bench.api, ref_bin)
        say("== bench_peer %s: mpijob-operator %s against mpi-operator (%s) on Kubernetes %s, %d CPUs" % (
            time.strftime("%Y-%m-%d %H:%M"), ours, ref_line, kube, os.cpu_count()))
        say("   each with its default flags; rounds %d, sizes %s, %d suspended jobs, quiet %d s, parts: %s"
            % (rounds, " ".join(map(str, sizes)), jobs, quiet_s, " ".join(parts)))
        bench.start_watches()
        results = {"create": {w: {OURS: [], REF: []} for w in sizes},
                   "requests": {w: {OURS: [], REF: []} for w in sizes},
                   "life": {w: {OURS: [], REF: []} for w in life_sizes},
                   "sync": {}, "failure": {OURS: [], REF: []}, "crash": {}}
        if "create" in parts or "life" in parts:
            if "life" not in parts:
                results["life"] = {}
            bench.part_create(sorted(set(sizes) | set(results["life"])), rounds, results, "create" in parts)
        if "sync" in parts:
            bench.part_sync(jobs, quiet_s, results, (REF, OURS))
        if "failure" in parts:
            bench.part_failure(rounds, results, (OURS, REF))
        report(results, sizes, jobs, quiet_s)
    except RuntimeError as e:
        say("bench_peer: %s (state in %s)" % (e, state))
        status = 1
    finally:
        for op in bench.ops.values():
            op.stop()
        launch.stop_background(state, 10)
        if status == 0 and not os.environ.get("BENCH_PEER_KEEP"):
            shutil.rmtree(state, ignore_errors=True)
        else:
            say("bench_peer: logs kept in %s" % state)
    return status


if __name__ == "__main__":
    sys.exit(main())
