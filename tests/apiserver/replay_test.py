#!/usr/bin/env python3
"""Replays the recorded kube-apiserver exchanges against a fresh API-server double and compares.

    python3 tests/apiserver/replay_test.py [--recordings DIR] [--verbose]

The recordings were made in one sequence on one server; this script recreates what happened
between them (pods p3..p5, a label on p4, the deletion of p5, a compaction, the example.com
widgets CRD) and translates what differs by nature (resourceVersions, uids, continue tokens,
timestamps, watch timeouts). Prints "ok NAME" or "FAIL NAME: reason" per recording, then a
summary line; exits 0 only when every recording passes.
"""

import argparse
import base64
import glob
import http.client
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "support"))
import record  # noqa: E402  (the recorded sequence's setup steps and body reading)
from deadline import Deadline, scaled  # noqa: E402  (tests/support/deadline.py)

ROOT = os.path.dirname(os.path.dirname(HERE))
DEFAULT_RECORDINGS = os.path.join(HERE, "recordings")   # made by record.py
TOKEN = "replay-token"

WIDGET_CRD = {
    "group": "example.com", "versions": ["v1"], "plural": "widgets", "kind": "Widget", "singular": "widget",
    "namespaced": True, "status": True,
    "schema": {"type": "object", "properties": {
        "spec": {"type": "object", "properties": {"size": {"type": "integer"}}},
        "status": {"type": "object", "properties": {"phase": {"type": "string"}}}}},
}

# Watches in the recordings wait for long timeouts; the replay shortens them.
WATCH_TIMEOUTS = {"17": 2, "18": 1, "28": 1}
TIME_KEYS = {"creationTimestamp", "deletionTimestamp", "time", "lastProbeTime", "lastTransitionTime",
             "lastUpdateTime", "buildDate"}


class Mismatch(Exception):
    pass


# --------------------------------------------------------------------------------------------
# Recordings
# --------------------------------------------------------------------------------------------

def _message(text):
    """(first line, {header: value} with lowercase names, body) of one recorded HTTP message."""
    lines = text.lstrip("\n").split("\n")
    headers, i = {}, 1
    while i < len(lines) and lines[i].strip():
        k, v = lines[i].split(":", 1)
        headers[k.strip().lower()] = v.strip()
        i += 1
    return lines[0], headers, "\n".join(lines[i:]).strip()


class Recording:
    def __init__(self, path):
        self.path = path
        self.name = os.path.basename(path)[:-4]
        self.num = self.name.split("-", 1)[0]
        text = open(path, encoding="utf-8").read()
        req_part, resp_part = text.split("### response", 1)
        first, self.req_headers, self.req_body = _message(req_part.split("### request", 1)[1])
        self.method, self.target = first.strip().split(" ", 1)
        first, self.resp_headers, self.resp_body = _message(resp_part)
        self.status = int(first.split()[1])

    @property
    def is_watch(self):
        q = urllib.parse.parse_qs(urllib.parse.urlsplit(self.target).query)
        return (q.get("watch") or [""])[0] in ("1", "true")


# --------------------------------------------------------------------------------------------
# The double
# --------------------------------------------------------------------------------------------

class Double:
    def __init__(self, kubernetes):
        self.dir = tempfile.mkdtemp(prefix="replay-double-")
        self.proc = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "apiserver.py"), "--state-dir", self.dir, "--token", TOKEN,
             "--extra-crd", json.dumps(WIDGET_CRD), "--kubernetes", kubernetes],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        deadline = Deadline(60)
        while not os.path.exists(os.path.join(self.dir, "ready")):
            if self.proc.poll() is not None:
                raise RuntimeError("the double exited with status %s" % self.proc.returncode)
            if deadline.passed():
                raise RuntimeError("the double did not become ready in %.0f s" % deadline.seconds)
            time.sleep(0.01)
        self.port = int(open(os.path.join(self.dir, "port")).read())
        self.ctx = ssl.create_default_context(cafile=os.path.join(self.dir, "ca.crt"))

    def close(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)

    def request(self, method, target, body=None, content_type=None, token=TOKEN, watch=False):
        conn = http.client.HTTPSConnection("127.0.0.1", self.port, context=self.ctx, timeout=scaled(60))
        headers = {"Accept": "application/json", "User-Agent": "replay-test"}
        if token:
            headers["Authorization"] = "Bearer " + token
        data = None
        if body is not None:
            data = body.encode() if isinstance(body, str) else body
            headers["Content-Type"] = content_type or "application/json"
        conn.request(method, target, body=data, headers=headers)
        resp = conn.getresponse()
        payload = record.read_body(resp, watch)
        conn.close()
        return resp.status, dict((k.lower(), v) for k, v in resp.getheaders()), payload

    def json(self, method, target, body=None, content_type=None):
        code, _, text = self.request(method, target, json.dumps(body) if body is not None else None, content_type)
        return code, (json.loads(text) if text.strip() else None)

    def state(self):
        return self.json("GET", "/_double/state")[1]


# --------------------------------------------------------------------------------------------
# Translation between the recorded server and the double
# --------------------------------------------------------------------------------------------

def decode_token(token):
    return json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode())


class Translator:
    def __init__(self):
        self.rv = {}          # recorded resourceVersion -> double's
        self.rv_back = {}
        self.uid = {}         # recorded uid -> double's
        self.tokens = {}      # recorded continue token -> double's
        self.base_rv = None   # the double's resourceVersion before the first recorded write

    def bind_rv(self, rec, dbl, where):
        rec, dbl = str(rec), str(dbl)
        if rec in self.rv:
            if self.rv[rec] != dbl:
                raise Mismatch("%s: resourceVersion %s maps to %s earlier, %s now" % (where, rec, self.rv[rec], dbl))
            return
        if dbl in self.rv_back and self.rv_back[dbl] != rec:
            raise Mismatch("%s: the double's resourceVersion %s stands for both %s and %s" % (
                where, dbl, self.rv_back[dbl], rec))
        self.rv[rec] = dbl
        self.rv_back[dbl] = rec

    def bind_uid(self, rec, dbl, where):
        if rec in self.uid and self.uid[rec] != dbl:
            raise Mismatch("%s: uid %s maps to %s earlier, %s now" % (where, rec, self.uid[rec], dbl))
        self.uid[rec] = dbl

    def rv_for_request(self, rec):
        if rec in ("", "0"):
            return rec
        if rec in self.rv:
            return self.rv[rec]
        known = [int(r) for r in self.rv if r.lstrip("-").isdigit() and int(r) > 0]
        if self.base_rv is not None and (not known or int(rec) < min(known)):
            return str(self.base_rv)       # older than anything recorded: before the first write
        raise Mismatch("no translation for resourceVersion %s" % rec)

    def message(self, text):
        for rec, dbl in self.uid.items():
            text = text.replace(rec, dbl)
        return text

    def target(self, target, num):
        parts = urllib.parse.urlsplit(target)
        query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
        out = []
        for k, v in query:
            if k == "resourceVersion":
                v = self.rv_for_request(v)
            elif k == "continue":
                if v not in self.tokens:
                    raise Mismatch("no translation for continue token %s" % v)
                v = self.tokens[v]
            elif k == "timeoutSeconds" and num in WATCH_TIMEOUTS:
                v = str(WATCH_TIMEOUTS[num])
            out.append((k, v))
        return urllib.parse.urlunsplit(("", "", parts.path, urllib.parse.urlencode(out, safe=",="), ""))

    def body(self, text):
        if not text:
            return None
        try:
            obj = json.loads(text)
        except ValueError:
            return text
        meta = obj.get("metadata") if isinstance(obj, dict) else None
        if isinstance(meta, dict) and meta.get("resourceVersion"):
            meta["resourceVersion"] = self.rv_for_request(meta["resourceVersion"])
        return json.dumps(obj, separators=(",", ":"))

    # ---- deep comparison ----
    def compare(self, rec, dbl, path="$"):
        if isinstance(rec, dict):
            if not isinstance(dbl, dict):
                raise Mismatch("%s: recorded an object, got %s" % (path, json.dumps(dbl)[:200]))
            rk = set(rec) - {"managedFields"}
            dk = set(dbl) - {"managedFields"}
            if rk != dk:
                raise Mismatch("%s: keys differ: only recorded %s, only in the double %s" % (
                    path, sorted(rk - dk), sorted(dk - rk)))
            for k in sorted(rk):
                self.compare_key(k, rec[k], dbl[k], path + "." + k)
            return
        if isinstance(rec, list):
            if not isinstance(dbl, list) or len(rec) != len(dbl):
                raise Mismatch("%s: recorded %d items, got %s" % (
                    path, len(rec), len(dbl) if isinstance(dbl, list) else json.dumps(dbl)[:200]))
            for i, (a, b) in enumerate(zip(rec, dbl)):
                self.compare(a, b, "%s[%d]" % (path, i))
            return
        if rec != dbl or type(rec) is not type(dbl):
            raise Mismatch("%s: recorded %s, got %s" % (path, json.dumps(rec), json.dumps(dbl)))

    def compare_key(self, key, rec, dbl, path):
        if key in TIME_KEYS and (isinstance(rec, str) or isinstance(dbl, str)):
            if not (isinstance(rec, str) and isinstance(dbl, str) and dbl.endswith("Z")):
                raise Mismatch("%s: recorded %s, got %s" % (path, json.dumps(rec), json.dumps(dbl)))
            return
        if key in ("uid", "controller-uid", "batch.kubernetes.io/controller-uid") and isinstance(rec, str):
            if not isinstance(dbl, str) or len(dbl) != 36:
                raise Mismatch("%s: got uid %s" % (path, json.dumps(dbl)))
            self.bind_uid(rec, dbl, path)
            return
        if key == "resourceVersion" and isinstance(rec, str):
            if not isinstance(dbl, str) or not dbl.isdigit():
                raise Mismatch("%s: got resourceVersion %s" % (path, json.dumps(dbl)))
            self.bind_rv(rec, dbl, path)
            return
        if key == "continue" and isinstance(rec, str):
            if not isinstance(dbl, str):
                raise Mismatch("%s: recorded a continue token, got %s" % (path, json.dumps(dbl)))
            r, d = decode_token(rec), decode_token(dbl)
            if set(r) != set(d) or r["v"] != d["v"] or r["start"] != d["start"]:
                raise Mismatch("%s: continue token %s, got %s" % (path, r, d))
            if r["rv"] < 0 or d["rv"] < 0:
                if r["rv"] != d["rv"]:
                    raise Mismatch("%s: continue token rv %s, got %s" % (path, r["rv"], d["rv"]))
            else:
                self.bind_rv(r["rv"], d["rv"], path + "(rv)")
            self.tokens[rec] = dbl
            return
        if key == "message" and isinstance(rec, str):
            if self.message(rec) != dbl:
                raise Mismatch("%s:\n    recorded %s\n    got      %s" % (path, json.dumps(self.message(rec)),
                                                                        json.dumps(dbl)))
            return
        self.compare(rec, dbl, path)


# --------------------------------------------------------------------------------------------
# Per-recording setup: what happened on the recorded server between the exchanges
# --------------------------------------------------------------------------------------------

def pod_body(name):
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": "demo"}},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}}


def must(code_body, want, what):
    code, body = code_body
    if code != want:
        raise Mismatch("setup (%s) answered %s: %s" % (what, code, json.dumps(body)[:300]))
    return body


def setup_before(num, dbl, tr):
    if num == "04":
        tr.base_rv = int(dbl.state()["resourceVersion"])
    elif num == "12":
        for n in ("p3", "p4", "p5"):
            must(dbl.json("POST", "/api/v1/namespaces/default/pods", pod_body(n)), 201, "create " + n)
    elif num == "17":
        must(dbl.json("PATCH", "/api/v1/namespaces/default/pods/p4", {"metadata": {"labels": {"w": "1"}}},
                      "application/merge-patch+json"), 200, "label p4")
        must(dbl.json("DELETE", "/api/v1/namespaces/default/pods/p5"), 200, "delete p5")
    elif num == "30":
        must(dbl.json("POST", "/apis/batch/v1/namespaces/default/jobs", {
            "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j1"},
            "spec": {"template": {"spec": {"restartPolicy": "Never",
                                           "containers": [{"name": "c", "image": "busybox"}]}}}}), 201, "create j1")
    elif num == "32":
        for method, path, body, ct in record.RESUME_SETUP:
            must(dbl.json(method, path, body, ct), 200, "%s %s" % (method, path))
    elif num == "19":
        # etcd's compaction: a real watch cache still serves older versions (recording 28)
        must(dbl.json("POST", "/_double/fault", {"compact": "storage"}), 200, "compact")


# --------------------------------------------------------------------------------------------
# Comparisons
# --------------------------------------------------------------------------------------------

def compare_version(rec, got, tr):
    if set(rec) != set(got):
        raise Mismatch("keys differ: %s vs %s" % (sorted(rec), sorted(got)))
    for k in ("major", "minor", "gitVersion", "gitTreeState", "compiler"):
        if rec[k] != got[k]:
            raise Mismatch("%s: recorded %s, got %s" % (k, rec[k], got[k]))


def compare_api_versions(rec, got, tr):
    if rec["kind"] != got.get("kind") or rec["versions"] != got.get("versions"):
        raise Mismatch("kind/versions differ: %s" % json.dumps(got))
    rc = [c["clientCIDR"] for c in rec["serverAddressByClientCIDRs"]]
    gc = [c["clientCIDR"] for c in got.get("serverAddressByClientCIDRs") or []]
    if rc != gc:
        raise Mismatch("serverAddressByClientCIDRs differ: %s" % gc)


def compare_group_list(rec, got, tr):
    for k in ("kind", "apiVersion"):
        if rec[k] != got.get(k):
            raise Mismatch("%s: recorded %s, got %s" % (k, rec[k], got.get(k)))
    recorded = {g["name"]: g for g in rec["groups"]}
    served = {g["name"]: g for g in got.get("groups") or []}
    common = set(recorded) & set(served)
    if not common:
        raise Mismatch("no group in common with the recording")
    for name in sorted(common):
        tr.compare(recorded[name], served[name], "$.groups[%s]" % name)
    for name, g in served.items():
        for key in ("name", "versions", "preferredVersion"):
            if key not in g:
                raise Mismatch("group %s lacks %s" % (name, key))


SPECIAL = {"01": compare_version, "02": compare_api_versions, "03": compare_group_list}


def parse_events(text):
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def run_one(rec, dbl, tr):
    setup_before(rec.num, dbl, tr)
    target = tr.target(rec.target, rec.num)
    body = tr.body(rec.req_body)
    token = TOKEN if rec.status != 401 else "not-a-valid-token"
    code, headers, text = dbl.request(rec.method, target, body, rec.req_headers.get("content-type"), token,
                                      watch=rec.is_watch)
    if code != rec.status:
        raise Mismatch("HTTP %d, recorded %d: %s" % (code, rec.status, text[:400]))
    if (rec.resp_headers.get("content-type") or "").startswith("application/json") and \
            not (headers.get("content-type") or "").startswith("application/json"):
        raise Mismatch("content-type %s" % headers.get("content-type"))
    if rec.is_watch:
        if (headers.get("transfer-encoding") or "").lower() != "chunked":
            raise Mismatch("a watch must be chunked, got transfer-encoding %s" % headers.get("transfer-encoding"))
        want, got = parse_events(rec.resp_body), parse_events(text)
        # Bookmarks are best effort: when one comes within a short watch depends on timers and
        # on etcd's progress notifications. Each one either side sent must be well formed; the
        # other events must agree one for one.
        for side, evs in (("recorded", want), ("the double's", got)):
            for e in evs:
                if e.get("type") == "BOOKMARK":
                    meta = (e.get("object") or {}).get("metadata") or {}
                    if not str(meta.get("resourceVersion") or "").isdigit():
                        raise Mismatch("%s BOOKMARK without a resourceVersion: %s" % (side, json.dumps(e)[:200]))
        want = [e for e in want if e.get("type") != "BOOKMARK"]
        got = [e for e in got if e.get("type") != "BOOKMARK"]
        summary = lambda evs: [(e["type"], (e["object"].get("metadata") or {}).get("name")) for e in evs]  # noqa
        if summary(want) != summary(got):
            raise Mismatch("watch events differ:\n    recorded %s\n    got      %s" % (summary(want), summary(got)))
        for i, (a, b) in enumerate(zip(want, got)):
            tr.compare(a, b, "$[event %d]" % i)
        return
    if not rec.resp_body:
        return
    want = json.loads(rec.resp_body)
    try:
        got = json.loads(text)
    except ValueError:
        raise Mismatch("the double's body is not JSON: %s" % text[:200])
    special = SPECIAL.get(rec.num)
    if special:
        special(want, got, tr)
    else:
        tr.compare(want, got)


def recorded_release(files):
    """"1.32" or "1.36": the release the recordings were made on, from the /version exchange."""
    version = next((f for f in files if os.path.basename(f).startswith("01-version")), None)
    if version:
        body = Recording(version).resp_body
        try:
            v = json.loads(body)
            return "%s.%s" % (v["major"], "".join(c for c in v["minor"] if c.isdigit()))
        except (ValueError, KeyError, TypeError):
            pass
    return "1.32"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--recordings", default=DEFAULT_RECORDINGS)
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args()
    files = sorted(glob.glob(os.path.join(args.recordings, "[0-9]*.txt")))
    if not files:
        print("FAIL no recordings found in %s" % args.recordings)
        print("0 passed, 1 failed")
        return 1
    t0 = time.monotonic()
    kubernetes = recorded_release(files)
    print("the recordings are of Kubernetes %s: the double answers as %s" % (kubernetes, kubernetes))
    try:
        dbl = Double(kubernetes)
    except (RuntimeError, OSError, ValueError) as e:
        print("FAIL starting the double: %s" % e)
        print("0 passed, %d failed" % len(files))
        return 1
    tr = Translator()
    passed = failed = 0
    try:
        for path in files:
            try:
                rec = Recording(path)
            except (ValueError, IndexError) as e:
                print("FAIL %s: cannot parse the recording: %s" % (os.path.basename(path), e))
                failed += 1
                continue
            try:
                run_one(rec, dbl, tr)
                print("ok %s" % rec.name)
                passed += 1
            except Mismatch as e:
                print("FAIL %s: %s" % (rec.name, e))
                failed += 1
            except (OSError, http.client.HTTPException, ValueError, KeyError) as e:
                print("FAIL %s: %s: %s" % (rec.name, type(e).__name__, e))
                failed += 1
            sys.stdout.flush()
    finally:
        dbl.close()
    if args.verbose:
        print("took %.1f s" % (time.monotonic() - t0))
    print("%d passed, %d failed" % (passed, failed))
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
