#!/usr/bin/env python3
"""The part of a kubelet's API that the API server calls for `kubectl logs`: container logs.

    python3 tests/cluster/kubeletapi.py --logs-dir DIR --address ADDR --port PORT [--ready-file F]
            [--node NAME --server URL --token TOKEN --ca FILE]

Serves, over HTTPS with a self-signed certificate made at start (the API server dials kubelets
without verifying them in these clusters: no --kubelet-certificate-authority),

    GET /containerLogs/{namespace}/{pod}/{container}?tailLines=N&limitBytes=M&timestamps=...
    GET /healthz

from DIR/<namespace>_<pod>_<container>.log, the simulated kubelet's layout (kubelet.py: a
container's output as it came, restarts appended). As the kubelet does: tailLines keeps the last
N lines (a last line without its newline counts), then limitBytes cuts what is left to its first
M bytes; a log that does not exist is a 404 naming the container. `previous` and `timestamps`
are accepted and ignored (the file keeps every run and no times); `follow` is answered as
without it. A 10 MB log costs what the answer needs: lines are found from the end.

With --node (for tests that have no kubelet but need the API server to reach one), it also keeps
that Node alive as a kubelet does: its Lease in kube-node-lease renewed every 10 s, so that a
real node lifecycle controller never marks it unreachable and evicts its pods.

Standard library only; `openssl` (Debian's) makes the certificate. The process ends with its
parent (PR_SET_PDEATHSIG), so a kubelet that dies leaves no server behind.
"""
import argparse
import ctypes
import http.server
import json
import os
import shutil
import signal
import socketserver
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

CHUNK = 64 * 1024


def tail_offset(f, size, lines):
    """The offset in a file of `size` bytes where its last `lines` lines begin."""
    if lines <= 0:
        return size
    pos, seen = size, 0
    # A last line without its newline is a line; with it, its newline ends it and is not a break.
    f.seek(max(0, size - 1))
    if size and f.read(1) == b"\n":
        pos -= 1
    while pos > 0:
        start = max(0, pos - CHUNK)
        f.seek(start)
        block = f.read(pos - start)
        i = len(block)
        while True:
            i = block.rfind(b"\n", 0, i)
            if i < 0:
                break
            seen += 1
            if seen == lines:
                return start + i + 1
        pos = start
    return 0


def read_log(path, tail_lines=None, limit_bytes=None):
    """The answer's bytes for a log file: the last tail_lines lines (None: all), then at most
    limit_bytes of them (None: no limit)."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        start = 0 if tail_lines is None else tail_offset(f, size, tail_lines)
        want = size - start
        if limit_bytes is not None:
            want = min(want, limit_bytes)
        f.seek(start)
        return f.read(want)


def parse_nonnegative(query, name):
    """The integer value of a query parameter, None when absent; ValueError when not an integer >= 0."""
    values = query.get(name)
    if not values or values[-1] == "":
        return None
    v = int(values[-1])
    if v < 0:
        raise ValueError("%s must be >= 0, got %d" % (name, v))
    return v


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    logs_dir = None

    def log_message(self, fmt, *args):  # noqa: A003 (quiet: the API server logs the request)
        pass

    def _answer(self, code, data, content_type="text/plain; charset=utf-8"):
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):  # noqa: N802
        url = urllib.parse.urlsplit(self.path)
        parts = [urllib.parse.unquote(p) for p in url.path.split("/") if p]
        if parts == ["healthz"]:
            self._answer(200, b"ok")
            return
        if len(parts) != 4 or parts[0] != "containerLogs" or any("/" in p or p in (".", "..") for p in parts[1:]):
            self._answer(404, b"404 page not found\n")
            return
        ns, pod, container = parts[1:]
        query = urllib.parse.parse_qs(url.query, keep_blank_values=True)
        try:
            tail = parse_nonnegative(query, "tailLines")
            limit = parse_nonnegative(query, "limitBytes")
        except ValueError as e:
            self._answer(400, ("invalid log options: %s\n" % e).encode())
            return
        path = os.path.join(self.logs_dir, "%s_%s_%s.log" % (ns, pod, container))
        try:
            data = read_log(path, tail, limit)
        except FileNotFoundError:
            self._answer(404, ('container "%s" in pod "%s" is not available\n' % (container, pod)).encode())
            return
        self._answer(200, data)


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def self_signed(folder, address):
    """(cert, key) files for address, made by openssl."""
    cert, key = os.path.join(folder, "kubelet.crt"), os.path.join(folder, "kubelet.key")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "30", "-subj",
                    "/CN=kubelet", "-addext", "subjectAltName=IP:%s" % address, "-keyout", key, "-out", cert],
                   check=True, capture_output=True)
    return cert, key


def die_with_parent():
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def serve(logs_dir, address, port, ready_file=None):
    Handler.logs_dir = logs_dir
    server = Server((address, port), Handler)
    folder = tempfile.mkdtemp(prefix="kubeletapi-")
    try:
        cert, key = self_signed(folder, address)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert, key)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    if ready_file:
        tmp = ready_file + ".tmp"
        with open(tmp, "w") as f:
            f.write("%d\n" % server.server_address[1])
        os.rename(tmp, ready_file)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        server.serve_forever(poll_interval=0.5)
    finally:
        server.server_close()


LEASE_RENEW = 10


def keep_node_alive(node, server, token, ca):
    """Renews the Lease kube-node-lease/<node> every LEASE_RENEW seconds, creating it first."""
    ctx = ssl.create_default_context(cafile=ca)

    def call(method, path, body):
        req = urllib.request.Request(server + path, method=method, data=json.dumps(body).encode(),
                                     headers={"Authorization": "Bearer " + token,
                                              "Content-Type": "application/json"})
        with urllib.request.urlopen(req, context=ctx, timeout=10) as resp:
            return json.load(resp)

    base = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"
    while True:
        now = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())
        lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                 "metadata": {"name": node, "namespace": "kube-node-lease"},
                 "spec": {"holderIdentity": node, "leaseDurationSeconds": 40, "renewTime": now}}
        try:
            try:
                call("POST", base, lease)
            except urllib.error.HTTPError as e:
                if e.code != 409:
                    raise
                req = urllib.request.Request(server + base + "/" + node,
                                             headers={"Authorization": "Bearer " + token})
                with urllib.request.urlopen(req, context=ctx, timeout=10) as resp:
                    have = json.load(resp)
                have["spec"]["renewTime"] = now
                call("PUT", base + "/" + node, have)
        except (OSError, ValueError, KeyError):
            pass  # the next round tries again
        time.sleep(LEASE_RENEW)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--logs-dir", required=True)
    ap.add_argument("--address", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=10250, help="0: a free port (written to --ready-file)")
    ap.add_argument("--ready-file", help="written with the port once serving")
    ap.add_argument("--node", help="keep this Node's Lease renewed (with --server, --token, --ca)")
    ap.add_argument("--server")
    ap.add_argument("--token")
    ap.add_argument("--ca")
    args = ap.parse_args(argv)
    die_with_parent()
    if args.node:
        if not (args.server and args.token and args.ca):
            ap.error("--node needs --server, --token and --ca")
        threading.Thread(target=keep_node_alive, args=(args.node, args.server, args.token, args.ca),
                         daemon=True).start()
    serve(args.logs_dir, args.address, args.port, args.ready_file)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
