#!/usr/bin/env python3
"""Records request and response pairs from a real Kubernetes API server, for the double's replay test.

    python3 tests/apiserver/record.py [--kubeconfig PATH] [--out DIR] [--etcd URL]

Runs one fixed sequence of exchanges (discovery, pod create/get/replace/patch/apply/list/delete,
watches with bookmarks and from old versions, pagination and an expired continue token, a custom
resource with a schema and a status subresource, a bad token) against the cluster of the
kubeconfig (default $KUBECONFIG), in its `default` namespace, and writes one file per exchange
to DIR (default tests/apiserver/recordings): `### request` (method, target, content type, body),
then `### response` (status line, headers without the volatile ones, body; a watch's body is its
events, one per line). tests/apiserver/replay_test.py replays the same sequence against the
double and compares.

The sequence needs what an administrator has: it creates pods p1..p5 in `default` and the
CustomResourceDefinition widgets.example.com, and removes them at the end. Pods are never
scheduled, so no node is needed; the namespace must hold no other pod. Two watches start from
version 2 and so see every pod event `default` has had: record on a fresh cluster, such as

    KUBEBUILDER_ASSETS=DIR python3 tests/apiserver/launch.py --state-dir /tmp/rec --background
    python3 tests/apiserver/record.py --kubeconfig /tmp/rec/kubeconfig --etcd "$(cat /tmp/rec/etcd-url)"
    kill -TERM -"$(head -1 /tmp/rec/pid)"

Two exchanges need the server's storage compacted (an expired continue token, then a watch from a
compacted version, which the watch cache still serves). With --etcd URL (the etcd client URL, plain http) the script compacts
through etcd's JSON gateway; without it, it waits up to --compaction-wait seconds for the API
server's own periodic compaction (kube-apiserver --etcd-compaction-interval, 5 min by default).

Exits 0 when every exchange was recorded, 1 on any failure (with the reason), 2 on bad flags.
"""

import argparse
import base64
import http.client
import json
import os
import sys
import time
import urllib.parse
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "cluster"))

from kube import Kube  # noqa: E402

# Response headers that differ on every request, or name this server's flow-control objects.
VOLATILE = {"date", "audit-id", "x-kubernetes-pf-flowschema-uid", "x-kubernetes-pf-prioritylevel-uid",
            "connection", "keep-alive"}

WIDGETS = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.example.com"},
    "spec": {
        "group": "example.com", "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
        "versions": [{
            "name": "v1", "served": True, "storage": True, "subresources": {"status": {}},
            "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                "spec": {"type": "object", "properties": {"size": {"type": "integer"}}},
                "status": {"type": "object", "properties": {"phase": {"type": "string"}}}}}},
        }],
    },
}

PODS = "/api/v1/namespaces/default/pods"
JOBS = "/apis/batch/v1/namespaces/default/jobs"
def _suspended(status, reason):
    return {"type": "Suspended", "status": status, "reason": reason, "message": reason,
            "lastProbeTime": "2026-11-25T10:00:01Z", "lastTransitionTime": "2026-11-25T10:00:01Z"}


# A suspended Job resumed: the Job controller writes Suspended=False and a new startTime at once,
# which the server allows only on resumption (replay_test.py plays the same steps).
RESUME_SETUP = [
    ("PATCH", "/apis/batch/v1/namespaces/default/jobs/j1/status", {"status": {"startTime": "2026-11-25T10:00:00Z"}},
     "application/merge-patch+json"),
    ("PATCH", "/apis/batch/v1/namespaces/default/jobs/j1", {"spec": {"suspend": True}}, "application/merge-patch+json"),
    ("PATCH", "/apis/batch/v1/namespaces/default/jobs/j1/status",
     {"status": {"conditions": [_suspended("True", "JobSuspended")]}}, "application/merge-patch+json"),
    ("PATCH", "/apis/batch/v1/namespaces/default/jobs/j1", {"spec": {"suspend": False}}, "application/merge-patch+json"),
]
RESUME_WRITE = {"status": {"conditions": [_suspended("False", "JobResumed")], "startTime": "2026-11-25T10:00:05Z"}}

JOB = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j1"},
       "spec": {"template": {"spec": {"restartPolicy": "Never",
                                      "containers": [{"name": "c", "image": "busybox"}]}}}}
WIDGET_PATH = "/apis/example.com/v1/namespaces/default/widgets"


def read_body(resp, watch):
    """A response's body as text; a watch's events one per line, blank lines dropped."""
    if not watch:
        return resp.read().decode()
    lines = []
    while True:
        line = resp.readline()
        if not line:
            break
        if line.strip():
            lines.append(line.decode().rstrip("\n") + "\n")
    return "".join(lines)


class Failed(Exception):
    pass


def pod(name, labels=None):
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels or {"app": "demo"}},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}}


def compact(obj):
    return json.dumps(obj, separators=(",", ":"))


class Recorder:
    def __init__(self, kube, out):
        self.kube = kube
        self.out = out
        self.num = 0
        self.written = []

    def raw(self, method, target, body=None, content_type=None, token=None, watch=False):
        """One exchange: (status, reason, [(header, value)], body text)."""
        conn = self.kube._connect(60)
        headers = {"Accept": "application/json", "User-Agent": "mpijob-record/1"}
        tok = self.kube.token if token is None else token
        if tok:
            headers["Authorization"] = "Bearer " + tok
        if body is not None:
            headers["Content-Type"] = content_type or "application/json"
        try:
            conn.request(method, self.kube.prefix + target, body=body.encode() if body is not None else None,
                         headers=headers)
            resp = conn.getresponse()
            return resp.status, resp.reason, resp.getheaders(), read_body(resp, watch)
        finally:
            conn.close()

    def exchange(self, name, method, target, body=None, content_type=None, token=None, expect=None):
        """Records one exchange as NN-name.txt; returns (status, parsed body or None)."""
        self.num += 1
        watch = "watch=1" in target
        text_body = compact(body) if isinstance(body, (dict, list)) else body
        code, reason, headers, text = self.raw(method, target, text_body, content_type, token, watch)
        if expect is not None and code != expect:
            raise Failed("%02d-%s: %s %s answered %d, expected %d: %s" % (
                self.num, name, method, target, code, expect, text[:300]))
        lines = ["### request", "%s %s" % (method, target)]
        if text_body is not None:
            lines.append("Content-Type: %s" % (content_type or "application/json"))
        lines.append("")
        if text_body is not None:
            lines.append(text_body)
        lines += ["", "### response", "HTTP/1.1 %d %s" % (code, reason)]
        for k, v in headers:
            if k.lower() not in VOLATILE:
                lines.append("%s: %s" % (k.lower(), v))
        lines += ["", text.rstrip("\n"), ""]
        path = os.path.join(self.out, "%02d-%s.txt" % (self.num, name))
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            f.write("\n".join(lines))
        os.replace(path + ".tmp", path)
        self.written.append(path)
        parsed = None
        if not watch:
            try:
                parsed = json.loads(text) if text.strip() else None
            except ValueError:
                parsed = None
        return code, parsed

    # ---------------------------------------------------------------- setup, not recorded
    def must(self, method, path, body=None, content_type=None, ok=(200, 201)):
        code, obj = self.kube.request(method, path, body, content_type)
        if code not in ok:
            raise Failed("setup: %s %s answered %d: %s" % (method, path, code, json.dumps(obj)[:300]))
        return obj

    def clean(self):
        self.kube.request("DELETE", JOBS + "/j1?propagationPolicy=Background")
        for n in ("p1", "p2", "p3", "p4", "p5"):
            self.kube.request("DELETE", "%s/%s" % (PODS, n), {"gracePeriodSeconds": 0})
        self.kube.request("DELETE", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.com")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            code, crd = self.kube.request("GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"
                                          "widgets.example.com")
            _, pods = self.kube.request("GET", PODS)
            if code == 404 and not (pods or {}).get("items"):
                return
            time.sleep(0.2)
        raise Failed("setup: pods or the widgets CRD of an earlier run are still there after 60 s")

    def install_widgets(self):
        self.must("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", WIDGETS)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            code, body = self.kube.request("GET", "/apis/example.com/v1")
            if code == 200 and any(r.get("name") == "widgets" for r in (body or {}).get("resources", [])):
                return
            time.sleep(0.2)
        raise Failed("setup: the widgets CRD was not served after 30 s")


def compact_storage(rec, args, token, target):
    """Compacts the server's storage, then waits until `target` (a list with an old continue
    token) answers 410."""
    if args.etcd:
        _, status = rec.kube.request("GET", PODS + "?limit=1")
        rv = int(((status or {}).get("metadata") or {}).get("resourceVersion") or 0)
        # First what kube-apiserver's compactor writes before it compacts, the revision in
        # compact_rev_key: from 1.34 a server serves continue tokens from its watch cache and
        # learns of a compaction only through that key (its cacher looks every 15 s).
        for path, body in (("/v3/kv/put", {"key": base64.b64encode(b"compact_rev_key").decode(),
                                           "value": base64.b64encode(str(rv).encode()).decode()}),
                           ("/v3/kv/compaction", {"revision": rv, "physical": True})):
            req = urllib.request.Request(args.etcd.rstrip("/") + path, method="POST", data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=30) as resp:
                resp.read()
    deadline = time.monotonic() + (60 if args.etcd else args.compaction_wait)
    while time.monotonic() < deadline:
        code, _ = rec.kube.request("GET", target)
        if code == 410:
            return
        time.sleep(1)
    raise Failed("the continue token did not expire: the storage was not compacted (give --etcd URL, or a "
                 "longer --compaction-wait)")


def run(rec, args):
    token = rec.kube.token
    rec.clean()
    rec.install_widgets()

    rec.exchange("version", "GET", "/version", expect=200)
    rec.exchange("discovery-core", "GET", "/api", expect=200)
    rec.exchange("discovery-groups", "GET", "/apis", expect=200)
    _, p1 = rec.exchange("pod-create", "POST", PODS, pod("p1"), expect=201)
    rec.exchange("pod-create-again", "POST", PODS, pod("p1"), expect=409)
    rec.exchange("pod-get-missing", "GET", PODS + "/nope", expect=404)
    stale = pod("p1", {"app": "x"})
    stale["metadata"]["resourceVersion"] = str(int(p1["metadata"]["resourceVersion"]) - 1)
    rec.exchange("pod-replace-stale", "PUT", PODS + "/p1", stale, expect=409)
    rec.exchange("pod-invalid", "POST", PODS, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "Bad_Name"},
                                               "spec": {"containers": []}}, expect=422)
    rec.exchange("pod-status-patch", "PATCH", PODS + "/p1/status",
                 {"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}},
                 "application/merge-patch+json", expect=200)
    rec.exchange("pod-strategic-patch", "PATCH", PODS + "/p1", {"metadata": {"labels": {"tier": "a"}}},
                 "application/strategic-merge-patch+json", expect=200)
    rec.exchange("pod-apply", "PATCH", PODS + "/p2?fieldManager=mpijob-operator&force=true",
                 {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p2", "namespace": "default"},
                  "spec": {"containers": [{"name": "c", "image": "busybox"}]}},
                 "application/apply-patch+yaml", expect=201)
    for n in ("p3", "p4", "p5"):
        rec.must("POST", PODS, pod(n))
    _, page = rec.exchange("pod-list-page", "GET", PODS + "?limit=2", expect=200)
    token_2 = page["metadata"]["continue"]
    continue_target = PODS + "?limit=2&continue=" + urllib.parse.quote(token_2, safe="")
    rec.exchange("pod-list-continue", "GET", continue_target, expect=200)
    rec.exchange("pod-list-selector", "GET", PODS + "?labelSelector=app%3Ddemo&fieldSelector=metadata.name%3Dp1",
                 expect=200)
    rec.exchange("pod-delete-precondition-fail", "DELETE", PODS + "/p3",
                 {"kind": "DeleteOptions", "apiVersion": "v1",
                  "preconditions": {"uid": "00000000-0000-0000-0000-000000000000"}}, expect=409)
    _, deleted = rec.exchange("pod-delete", "DELETE", PODS + "/p3", expect=200)
    rv_after_delete = deleted["metadata"]["resourceVersion"]
    rec.must("PATCH", PODS + "/p4", {"metadata": {"labels": {"w": "1"}}}, "application/merge-patch+json")
    rec.must("DELETE", PODS + "/p5")
    rec.exchange("pod-watch-bookmarks", "GET",
                 PODS + "?watch=1&resourceVersion=%s&allowWatchBookmarks=true&timeoutSeconds=8" % rv_after_delete,
                 expect=200)
    rec.exchange("pod-watch-old-version-from-cache", "GET", PODS + "?watch=1&resourceVersion=2&timeoutSeconds=3",
                 expect=200)
    compact_storage(rec, args, token, continue_target)
    rec.exchange("pod-list-expired-continue", "GET", continue_target, expect=410)
    rec.exchange("discovery-group-version", "GET", "/apis/example.com/v1", expect=200)
    rec.exchange("cr-create", "POST", WIDGET_PATH,
                 {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w1"}, "spec": {"size": 1},
                  "status": {"phase": "ignored"}}, expect=201)
    rec.exchange("cr-schema-invalid", "POST", WIDGET_PATH,
                 {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w2"},
                  "spec": {"size": "big"}}, expect=422)
    rec.exchange("cr-unknown-field-strict", "POST", WIDGET_PATH + "?fieldValidation=Strict",
                 {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w3"},
                  "spec": {"size": 1, "colour": "red"}}, expect=400)
    rec.exchange("cr-main-patch-ignores-status", "PATCH", WIDGET_PATH + "/w1",
                 {"spec": {"size": 2}, "status": {"phase": "nope"}}, "application/merge-patch+json", expect=200)
    rec.exchange("cr-status-patch", "PATCH", WIDGET_PATH + "/w1/status",
                 {"spec": {"size": 9}, "status": {"phase": "Ready"}}, "application/merge-patch+json", expect=200)
    rec.exchange("cr-strategic-patch-refused", "PATCH", WIDGET_PATH + "/w1", {"spec": {"size": 3}},
                 "application/strategic-merge-patch+json", expect=415)
    rec.exchange("cr-get", "GET", WIDGET_PATH + "/w1", expect=200)
    rec.exchange("pod-watch-compacted-version-from-cache", "GET", PODS + "?watch=1&resourceVersion=2&timeoutSeconds=3", expect=200)
    rec.exchange("unauthorized", "GET", PODS, token="not-a-valid-token", expect=401)
    rec.must("POST", JOBS, JOB)
    rec.exchange("job-status-complete-refused", "PATCH", JOBS + "/j1/status",
                 {"status": {"conditions": [{"type": "Complete", "status": "True", "reason": "x", "message": "m"}]}},
                 "application/merge-patch+json", expect=422)
    rec.exchange("job-status-failed-refused", "PATCH", JOBS + "/j1/status",
                 {"status": {"conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
                                             "message": "m"}]}},
                 "application/merge-patch+json", expect=422)
    for step in RESUME_SETUP:
        rec.must(*step)
    rec.exchange("job-status-resume-with-new-start-time", "PATCH", JOBS + "/j1/status", RESUME_WRITE,
                 "application/merge-patch+json", expect=200)
    # bodies that do not decode as the resource's kind
    rec.exchange("cr-string-body", "POST", WIDGET_PATH, '"x"', expect=400)
    rec.exchange("cr-kind-missing", "POST", WIDGET_PATH,
                 {"apiVersion": "example.com/v1", "metadata": {"name": "w4"}, "spec": {"size": 1}}, expect=400)
    rec.exchange("cr-wrong-kind", "POST", WIDGET_PATH,
                 {"apiVersion": "example.com/v1", "kind": "Pod", "metadata": {"name": "w5"}, "spec": {"size": 1}},
                 expect=422)
    rec.exchange("cr-integer-too-large-for-a-float", "POST", WIDGET_PATH,
                 '{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w6"},"spec":{"size":1e20}}',
                 expect=422)
    rec.exchange("pod-array-body", "POST", PODS, "[1]", expect=400)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG"))
    ap.add_argument("--out", default=os.path.join(HERE, "recordings"))
    ap.add_argument("--etcd", help="etcd client URL (http), to compact the storage directly")
    ap.add_argument("--compaction-wait", type=float, default=420.0,
                    help="seconds to wait for the API server's own compaction (without --etcd)")
    args = ap.parse_args()
    if not args.kubeconfig:
        ap.error("no kubeconfig: give --kubeconfig or set KUBECONFIG")
    try:
        kube = Kube.from_kubeconfig(args.kubeconfig)
    except (OSError, ValueError) as e:
        print("record: %s" % e, file=sys.stderr)
        return 1
    os.makedirs(args.out, exist_ok=True)
    rec = Recorder(kube, args.out)
    try:
        run(rec, args)
    except (Failed, OSError, http.client.HTTPException, KeyError, TypeError) as e:
        print("record: %s" % e, file=sys.stderr)
        return 1
    finally:
        try:
            rec.clean()
        except (Failed, OSError) as e:
            print("record: cleaning up: %s" % e, file=sys.stderr)
    for old in sorted(os.listdir(args.out)):
        p = os.path.join(args.out, old)
        if old.endswith(".txt") and old[:2].isdigit() and p not in rec.written:
            os.unlink(p)
    print("recorded %d exchanges in %s" % (len(rec.written), args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
