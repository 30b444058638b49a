#!/usr/bin/env python3
"""The part of a kubelet's API that the API server calls for `kubectl logs`: container logs.

    python3 tests/cluster/kubeletapi.py --logs-dir DIR --address ADDR --port PORT [--ready-file F]
            [--node NAME --server URL --token TOKEN --ca FILE]

Serves, over HTTPS with a self-signed certificate made at start (EC P-256, by the openssl
command; API servers dial kubelets without verifying them where they are given no
--kubelet-certificate-authority, as in every cluster of this project), without authentication
(a kubelet that allows anonymous requests),

    GET /containerLogs/{namespace}/{pod}/{container}?tailLines=N&limitBytes=M&...
    GET /healthz

from DIR/<namespace>_<pod>_<container>.log, the simulated kubelet's layout (kubelet.py: a
container's output as it came, restarts appended) and, when it exists, DIR/<same>.log.runs: the
byte offset at which each run of the container began, one a line (the simulated kubelet appends
one at each start). --port 0 takes a free port; --ready-file is written (whole) with the port
once the socket listens. SIGTERM or SIGINT stops it; so does the end of its parent
(PR_SET_PDEATHSIG). The simulated kubelet runs one per node inside the node's network namespace
(`ip netns exec`), on the node's address and port 10250; tests without a kubelet run one on
127.0.0.1 (tests/support/kubelet_logs.h).

What it answers is what the kubelet answers (pkg/kubelet/server getContainerLogs and the CRI log
reader, k8s.io/cri-client/pkg/logs ReadLogs), the query being what kube-apiserver passes on:

  - the log of the container's last run (the whole file without a .runs file); previous=true: the
    run before it, or 400 `previous terminated container "C" in pod "P" not found` when there is
    none (a real kubelet, while the container waits to be restarted, returns the run that just
    ended for both; this one keeps "last" and "the one before" throughout). Once a pod has ended
    by itself the simulated kubelet forgets the earlier runs (keep_last_run), as a real one
    removes those containers: previous=true is then refused, as there;
  - tailLines=N: the last N lines of that. A line is what ends in a newline, and a last line
    without one (containerd records it as a partial entry, which the reader counts and returns
    without a newline). 0: nothing. Found by reading blocks from the end, so the tail of a
    10 MB log costs what the tail is;
  - limitBytes=M: at most the first M bytes of what is left, a line cut where the limit falls;
  - timestamps=true: each line after "<RFC 3339, 9 digits of nanoseconds, UTC> ", the time
    being the log file's modification time (the file records no time per line);
    sinceSeconds/sinceTime: each line is as old as that time, so all lines or none;
  - follow=true is answered as without it (what the file holds now, then the answer ends);
    `tail` is tailLines' old name (tail=all: no limit);
  - DIR/<same>.log.empty-reads, when a test writes it (a number N): the next N reads of that
    log answer an empty log, as a node whose runtime has not yet written a container's last
    output to its log (tests/support/kubelet_logs.h, test_kubelet_hold_log);
  - a log file that does not exist: 400 `container "C" in pod "P" is not available`, the
    kubelet's words for a container of a pod it knows but has no status of (one that has not
    started); a number it cannot read: 400 {"message": "Unable to decode query."}; a negative
    tailLines, limitBytes or sinceSeconds below 1, or both since options: 422
    {"message": "Invalid request."}; any other path: 404 "404 page not found".

The answer is streamed (chunked), never read whole. With --node (for tests that have no kubelet
but need an API server to reach one) it also keeps that Node alive as a kubelet does: its Lease in
kube-node-lease renewed every 10 s (created when missing), through --server as the bearer token
--token, so that a real node lifecycle controller never marks the Node unreachable and evicts its
pods.

Standard library only, besides the openssl command.
"""
import argparse
import ctypes
import datetime
import http.client
import json
import os
import re
import shutil
import signal
import socketserver
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, HTTPServer

KUBELET_PORT = 10250
CHUNK = 64 * 1024            # bytes read and sent at a time
TAIL_BLOCK = 8 * 1024        # bytes read at a time from the end, looking for line starts
LEASE_NS = "kube-node-lease"
LEASE_DURATION = 40
LEASE_RENEW = 10


def log_name(ns, pod, container):
    return "%s_%s_%s.log" % (ns, pod, container)


def add_run(log_path):
    """Records that a new run of the container begins at the current end of its log (the
    simulated kubelet calls this before each start)."""
    try:
        size = os.path.getsize(log_path)
    except OSError:
        size = 0
    with open(log_path + ".runs", "a") as f:
        f.write("%d\n" % size)


def keep_last_run(log_path):
    """Forgets every run of the container but the last (the kubelet has removed them): its log
    is still there, `previous` is not."""
    starts = runs(log_path)
    if len(starts) > 1:
        tmp = log_path + ".runs.tmp"
        with open(tmp, "w") as f:
            f.write("%d\n" % starts[-1])
        os.replace(tmp, log_path + ".runs")


def runs(log_path):
    """The offsets at which the runs of a container began ([] without a .runs file)."""
    try:
        with open(log_path + ".runs") as f:
            return [int(x) for x in f.read().split() if x.isdigit()]
    except OSError:
        return []


class KubeletError(Exception):
    """An answer other than a log: its status and the text (go-restful's WriteError: the error's
    text, no newline)."""

    def __init__(self, code, text):
        super().__init__(text)
        self.code = code
        self.text = text


_held_lock = threading.Lock()


def take_held_read(path):
    """True when a read of the log at path is to answer empty: its .empty-reads count (a test's)
    is above 0, and is lowered by one."""
    held = path + ".empty-reads"
    with _held_lock:
        try:
            with open(held) as f:
                n = int(f.read().strip() or 0)
        except (OSError, ValueError):
            return False
        if n <= 0:
            return False
        tmp = held + ".tmp"
        with open(tmp, "w") as f:
            f.write("%d\n" % (n - 1))
        os.replace(tmp, held)
        return True


def log_range(logs_dir, ns, pod, container, previous):
    """(path, start, end or None) of the bytes that are the log asked for; KubeletError when
    there is none."""
    path = os.path.join(logs_dir, log_name(ns, pod, container))
    if not os.path.isfile(path):
        raise KubeletError(400, 'container "%s" in pod "%s" is not available' % (container, pod))
    starts = runs(path)
    if previous:
        if len(starts) < 2:
            raise KubeletError(400, 'previous terminated container "%s" in pod "%s" not found' % (container, pod))
        return path, starts[-2], starts[-1]
    return path, starts[-1] if starts else 0, None


# ---- the reader -----------------------------------------------------------------------------

def tail_offset(f, size, lines, start=0):
    """The offset where the last `lines` lines of bytes [start, size) of the open file f begin,
    found by reading blocks backwards from size."""
    if lines <= 0 or size <= start:
        return size
    f.seek(size - 1)
    # A newline that ends the range closes the last line; lines are counted before it.
    pos = size - 1 if f.read(1) == b"\n" else size
    seen = 0
    while pos > start:
        begin = max(start, pos - TAIL_BLOCK)
        f.seek(begin)
        block = f.read(pos - begin)
        i = len(block)
        while True:
            i = block.rfind(b"\n", 0, i)
            if i < 0:
                break
            seen += 1
            if seen == lines:
                return begin + i + 1
        pos = begin
    return start


def go_time(t):
    """A time as the CRI log reader writes it (RFC3339NanoFixed), in UTC."""
    secs = int(t)
    nanos = int(round((t - secs) * 1e9))
    if nanos >= 1000000000:
        secs, nanos = secs + 1, nanos - 1000000000
    return datetime.datetime.fromtimestamp(secs, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S") + \
        ".%09dZ" % nanos


def log_blocks(path, start=0, end=None, tail_lines=None, limit_bytes=None, timestamps=False, since=None):
    """The answer for bytes [start, end) of a log file, as a generator of blocks (see the
    module's docstring). OSError when the file cannot be opened."""
    f = open(path, "rb")
    try:
        st = os.fstat(f.fileno())
        end = st.st_size if end is None else min(end, st.st_size)
        start = min(start, end)
        if since is not None and st.st_mtime < since:
            return
        if tail_lines is not None:
            start = tail_offset(f, end, tail_lines, start)
        remain = limit_bytes
        f.seek(start)
        left = end - start
        prefix = (go_time(st.st_mtime) + " ").encode() if timestamps else None
        at_line_start = True
        while left > 0 and (remain is None or remain > 0):
            data = f.read(min(CHUNK, left))
            if not data:
                return
            left -= len(data)
            if prefix is not None:
                out = bytearray()
                for piece in data.splitlines(keepends=True):
                    if at_line_start:
                        out += prefix
                    out += piece
                    at_line_start = piece.endswith(b"\n")
                data = bytes(out)
            if remain is not None:
                data = data[:remain]
                remain -= len(data)
            yield data
    finally:
        f.close()


def read_log(path, tail_lines=None, limit_bytes=None):
    """The answer's bytes for a whole log file: the last tail_lines lines (None: all), then at
    most limit_bytes of them (None: no limit)."""
    return b"".join(log_blocks(path, tail_lines=tail_lines, limit_bytes=limit_bytes))


# ---- the query, as the kubelet decodes and validates it -----------------------------------------

_INT = re.compile(r"^[+-]?[0-9]+$")
_TIME = re.compile(r"^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(\.\d+)?(Z|[+-]\d{2}:\d{2})$")


class LogOptions:
    def __init__(self):
        self.previous = self.timestamps = self.follow = False
        self.tail_lines = self.limit_bytes = self.since_seconds = self.since_time = None

    def since(self):
        """The time before which lines are left out, or None."""
        if self.since_seconds is not None:
            return time.time() - self.since_seconds
        return self.since_time


def _rfc3339(text):
    m = _TIME.match(text)
    if not m:
        return None
    try:
        zone = m.group(8)
        tz = datetime.timezone.utc if zone == "Z" else datetime.timezone(
            (1 if zone[0] == "+" else -1) * datetime.timedelta(hours=int(zone[1:3]), minutes=int(zone[4:6])))
        dt = datetime.datetime(*[int(m.group(i)) for i in range(1, 7)], tzinfo=tz)
    except ValueError:
        return None
    return dt.timestamp() + (float(m.group(7)) if m.group(7) else 0.0)


def parse_query(raw):
    """LogOptions from a query string; KubeletError 400 or 422 as the kubelet answers."""
    q = urllib.parse.parse_qs(raw, keep_blank_values=True)
    if q.get("tail"):
        if q["tail"][0] == "all":
            q.pop("tailLines", None)
        else:
            q["tailLines"] = [q["tail"][0]]

    def flag(key):
        v = q.get(key)
        return bool(v) and not (v[0] == "0" or v[0].lower() == "false")
    o = LogOptions()
    o.follow, o.previous, o.timestamps = flag("follow"), flag("previous"), flag("timestamps")
    bad = KubeletError(400, '{"message": "Unable to decode query."}')
    for key, attr in (("sinceSeconds", "since_seconds"), ("tailLines", "tail_lines"), ("limitBytes", "limit_bytes")):
        if key in q:
            text = q[key][0]
            if not _INT.match(text) or not -(1 << 63) <= int(text) < (1 << 63):
                raise bad
            setattr(o, attr, int(text))
    if "sinceTime" in q and q["sinceTime"][0] not in ("", "null"):
        o.since_time = _rfc3339(q["sinceTime"][0])
        if o.since_time is None:
            raise bad
    if (o.tail_lines is not None and o.tail_lines < 0) or (o.limit_bytes is not None and o.limit_bytes < 1) or \
            (o.since_seconds is not None and (o.since_time is not None or o.since_seconds < 1)):
        raise KubeletError(422, '{"message": "Invalid request."}')
    return o


# ---- the server -----------------------------------------------------------------------------------

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "kubelet-sim"
    sys_version = ""

    def log_message(self, fmt, *args):  # quiet: the API server logs the request
        pass

    def _answer(self, code, text):
        data = text.encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _chunk(self, data):
        if data:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    def do_GET(self):  # noqa: N802
        url = urllib.parse.urlsplit(self.path)
        parts = [urllib.parse.unquote(p) for p in url.path.split("/")[1:]]
        if parts == ["healthz"]:
            self._answer(200, "ok")
            return
        if len(parts) != 4 or parts[0] != "containerLogs" or \
                any("/" in p or p in (".", "..") for p in parts[1:]):
            self._answer(404, "404 page not found\n")
            return
        ns, pod, container = parts[1:]
        try:
            for value, what in ((pod, "podID"), (container, "container name"), (ns, "podNamespace")):
                if not value:
                    raise KubeletError(400, '{"message": "Missing %s."}' % what)
            opts = parse_query(url.query)
            path, start, end = log_range(self.server.logs_dir, ns, pod, container, opts.previous)
            if take_held_read(path):
                start = end = 0
        except KubeletError as e:
            self._answer(e.code, e.text)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            for data in log_blocks(path, start, end, opts.tail_lines, opts.limit_bytes, opts.timestamps,
                                   opts.since()):
                self._chunk(data)
        except OSError as e:
            # ReadLogs' error comes after the kubelet has begun its answer: in its body
            self._chunk(('failed to open log file "%s": %s' % (path, e.strerror or e)).encode())
        self.wfile.write(b"0\r\n\r\n")


class Server(socketserver.ThreadingMixIn, HTTPServer):
    """A thread per connection; the TLS handshake happens in that thread, so a client that
    connects and says nothing holds up no one else."""

    daemon_threads = True
    allow_reuse_address = True
    block_on_close = False

    def __init__(self, address, port, logs_dir, ctx):
        super().__init__((address, port), Handler)
        self.logs_dir = logs_dir
        self.ctx = ctx

    def handle_error(self, request, client_address):
        pass

    def finish_request(self, request, client_address):
        try:
            request.settimeout(10)
            tls = self.ctx.wrap_socket(request, server_side=True)
            tls.settimeout(300)
        except (OSError, ValueError):
            return
        try:
            self.RequestHandlerClass(tls, client_address, self)
        except (OSError, ValueError):
            pass
        finally:
            try:
                tls.close()
            except OSError:
                pass


def self_signed(folder, address):
    """(cert, key) files for address, made by openssl, as a kubelet makes its own."""
    cert, key = os.path.join(folder, "kubelet.crt"), os.path.join(folder, "kubelet.key")
    san = ("IP:%s" if re.match(r"^[0-9.]+$|:", address) else "DNS:%s") % address
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-days", "365", "-subj", "/CN=kubelet@%s" % address, "-addext",
                    "subjectAltName=" + san, "-keyout", key, "-out", cert], check=True, capture_output=True)
    return cert, key


def tls_context(address):
    folder = tempfile.mkdtemp(prefix="kubeletapi-")
    try:
        cert, key = self_signed(folder, address)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert, key)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    ctx.set_alpn_protocols(["http/1.1"])
    return ctx


def die_with_parent():
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


# ---- the Lease of a Node that no kubelet runs ---------------------------------------------------

def now_micro():
    t = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + ".%06dZ" % int((t % 1) * 1e6)


def renew_lease(node, server, token, ctx):
    """One renewal of kube-node-lease/<node> (a merge patch of its spec; created when missing)."""
    url = urllib.parse.urlsplit(server)
    spec = {"holderIdentity": node, "leaseDurationSeconds": LEASE_DURATION, "renewTime": now_micro()}
    base = "/apis/coordination.k8s.io/v1/namespaces/%s/leases" % LEASE_NS

    def call(method, path, body, content_type):
        conn = http.client.HTTPSConnection(url.hostname, url.port or 443, context=ctx, timeout=30)
        try:
            conn.request(method, path, json.dumps(body), {"Authorization": "Bearer " + token,
                                                          "Content-Type": content_type,
                                                          "Accept": "application/json"})
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()
    code, body = call("PATCH", base + "/" + node, {"spec": spec}, "application/merge-patch+json")
    if code == 404:
        code, body = call("POST", base, {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                                         "metadata": {"name": node, "namespace": LEASE_NS}, "spec": spec},
                          "application/json")
    if code not in (200, 201, 409):
        raise OSError("the Lease of %s: HTTP %d %s" % (node, code, body[:300].decode(errors="replace")))


def keep_node_alive(node, server, token, ca, stop):
    """Renews the Lease of node every LEASE_RENEW seconds until stop is set."""
    ctx = ssl.create_default_context(cafile=ca)
    said = None
    while not stop.is_set():
        try:
            renew_lease(node, server, token, ctx)
            said = None
        except OSError as e:
            if str(e) != said:      # the next round tries again; each new trouble said once
                said = str(e)
                sys.stderr.write("kubeletapi: %s\n" % e)
        stop.wait(LEASE_RENEW)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--logs-dir", required=True)
    ap.add_argument("--address", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=KUBELET_PORT, help="0: a free port (written to --ready-file)")
    ap.add_argument("--ready-file", help="written with the port once serving")
    ap.add_argument("--node", help="keep this Node's Lease renewed (with --server, --token, --ca)")
    ap.add_argument("--server")
    ap.add_argument("--token")
    ap.add_argument("--ca")
    args = ap.parse_args(argv)
    if args.node and not (args.server and args.token and args.ca):
        ap.error("--node needs --server, --token and --ca")
    die_with_parent()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    server = Server(args.address, args.port, args.logs_dir, tls_context(args.address))
    serving = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True)
    serving.start()
    if args.ready_file:
        tmp = args.ready_file + ".tmp"
        with open(tmp, "w") as f:
            f.write("%d\n" % server.server_address[1])
        os.replace(tmp, args.ready_file)
    if args.node:
        threading.Thread(target=keep_node_alive, args=(args.node, args.server, args.token, args.ca, stop),
                         name="lease", daemon=True).start()
    while not stop.wait(0.5):
        pass
    server.shutdown()
    server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
