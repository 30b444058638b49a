"""The HTTP layer: TLS connections, a thread each (Handler); request bodies read within
kube-apiserver's limits; authentication, then each request sent to the control API, discovery or
Api and logged with its answer (JSON, or a Table when asked for); watches streamed as chunked
event lines with bookmarks. ServerHost owns the listener and can take it down and bring it back
on the same port (the restart fault)."""

import copy
import json
import select
import socket
import ssl
import sys
import threading
import time
import traceback
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import protobuf
import release
from api import Request
from control import fault_error
from discovery import DISCOVERY_GVS, OPENAPI_V2_PB, negotiate, openapi_v2_protobuf, parse_accept
from errors import ApiError, api_error, err_bad_request, err_internal, err_method_not_allowed, \
    err_not_found_generic, err_unauthorized, go_quote, status_body
from kinds import render
from objects import json_depth
from store import BOOKMARK, ERROR
from tables import TABLE_GVS, check_include_object, to_table

MAX_BODY = 3 * 1024 * 1024          # kube-apiserver's request body limit for JSON
DRAIN_MAX = 64 * 1024 * 1024        # an oversized body up to this size is read and discarded
MAX_DEPTH = 10000                   # kube-apiserver's JSON nesting limit (sigs.k8s.io/json)


class Conn:
    """A client connection; kill() closes it abruptly from any thread."""

    def __init__(self, raw):
        self.raw = raw
        self.lock = threading.Lock()
        self.dead = False

    def kill(self):
        with self.lock:
            if self.dead:
                return
            self.dead = True
            try:
                self.raw.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class ClientGone(Exception):
    pass


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "kube-apiserver-double"
    sys_version = ""

    def __init__(self, request, client_address, server, conn=None):
        self.conn = conn
        super().__init__(request, client_address, server)

    # quiet: errors of our own are reported explicitly
    def log_message(self, fmt, *args):
        pass

    def send_response(self, code, message=None):
        self.send_response_only(code, message)
        self.send_header("Date", self.date_time_string())

    def log_error(self, fmt, *args):
        pass

    @property
    def api(self):
        return self.server.api

    # ---- plumbing ----
    def _pretty(self, req):
        p = req.q("pretty") if req else None
        if p is not None:
            return p.lower() in ("true", "1")
        ua = self.headers.get("User-Agent", "") if self.headers else ""
        return ua.startswith("curl") or ua.startswith("Wget")

    def _send_json(self, code, body, headers=None, req=None, content_type="application/json"):
        if self._pretty(req):
            data = (json.dumps(body, indent=2, ensure_ascii=False) + "\n").encode()
        else:
            data = (json.dumps(body, separators=(",", ":"), ensure_ascii=False) + "\n").encode()
        self.send_response(code)
        self.send_header("Cache-Control", "no-cache, private")
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            for item in (v if isinstance(v, list) else [v]):
                self.send_header(k, str(item))
        if self.close_connection:
            self.send_header("Connection", "close")
        self._end_with(data)

    def _end_with(self, data):
        """end_headers() plus the body in one write: one TLS record, no Nagle stall."""
        self._headers_buffer.append(b"\r\n")
        self._headers_buffer.append(data)
        self.flush_headers()

    def _send_text(self, code, text):
        data = text.encode()
        self.send_response(code)
        self.send_header("Cache-Control", "no-cache, private")
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self._end_with(data)

    def handle_expect_100(self):
        try:
            n = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            n = 0
        if n > MAX_BODY:
            self.close_connection = True
            e = api_error(413, "RequestEntityTooLarge", "Request entity too large: limit is %d" % MAX_BODY)
            self._send_json(e.code, e.body)
            return False
        return super().handle_expect_100()

    def _read_body(self):
        """Returns the body bytes, or raises ApiError 413/400. An oversized body is still read (and
        thrown away, up to DRAIN_MAX) so that the client gets the answer instead of a reset."""
        too_big = False
        te = (self.headers.get("Transfer-Encoding") or "").lower()
        if "chunked" in te:
            out = bytearray()
            total = 0
            while True:
                line = self.rfile.readline(1024)
                if not line:
                    raise ClientGone()
                try:
                    size = int(line.split(b";")[0].strip(), 16)
                except ValueError:
                    self.close_connection = True
                    raise err_bad_request("malformed chunked request body")
                if size == 0:
                    while True:
                        trailer = self.rfile.readline(1024)
                        if trailer in (b"\r\n", b"\n", b""):
                            break
                    break
                total += size
                if total > DRAIN_MAX:
                    self.close_connection = True
                    too_big = True
                    break
                chunk = self.rfile.read(size)
                if len(chunk) < size:
                    raise ClientGone()
                if total > MAX_BODY:
                    too_big = True
                else:
                    out += chunk
                self.rfile.readline(16)
            data = bytes(out)
        else:
            cl = self.headers.get("Content-Length")
            if not cl:
                return b""
            try:
                n = int(cl)
            except ValueError:
                self.close_connection = True
                raise err_bad_request("invalid Content-Length")
            if n > MAX_BODY:
                too_big = True
                if n > DRAIN_MAX:
                    self.close_connection = True
                else:
                    left = n
                    while left > 0:
                        got = self.rfile.read(min(left, 65536))
                        if not got:
                            raise ClientGone()
                        left -= len(got)
                data = b""
            else:
                data = self.rfile.read(n) if n > 0 else b""
                if len(data) < n:
                    raise ClientGone()
        if too_big:
            raise api_error(413, "RequestEntityTooLarge", "Request entity too large: limit is %d" % MAX_BODY)
        return data

    # ---- entry points ----
    def do_GET(self):
        self._dispatch()

    def do_POST(self):
        self._dispatch()

    def do_PUT(self):
        self._dispatch()

    def do_PATCH(self):
        self._dispatch()

    def do_DELETE(self):
        self._dispatch()

    def do_HEAD(self):
        self.close_connection = True
        self._dispatch()

    def do_OPTIONS(self):
        self._dispatch()

    def _dispatch(self):
        req = Request()
        try:
            self._dispatch_inner(req)
        except ClientGone:
            self.close_connection = True
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError, OSError):
            self.close_connection = True
        except Exception:  # noqa: BLE001 - never crash the server on one request
            traceback.print_exc(file=sys.stderr)
            self.close_connection = True
            try:
                e = err_internal("unexpected error in the API-server double")
                self._send_json(e.code, e.body)
            except Exception:  # noqa: BLE001
                pass

    def _dispatch_inner(self, req):
        api = self.api
        parsed = urllib.parse.urlsplit(self.path)
        req.method = self.command
        req.path = parsed.path
        req.raw_query = parsed.query
        req.query = urllib.parse.parse_qs(parsed.query, keep_blank_values=True)
        req.content_type = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
        req.user_agent = self.headers.get("User-Agent", "")
        segs = [urllib.parse.unquote(s) for s in parsed.path.split("/") if s != ""]

        body_exc = None
        try:
            req.body_bytes = self._read_body()
        except ApiError as e:
            body_exc = e
        if req.body_bytes and req.content_type == "application/vnd.kubernetes.protobuf":
            # kubectl create sends protobuf; what protobuf.py describes becomes the JSON it means
            try:
                req.body_json = protobuf.decode(req.body_bytes)
                req.content_type = "application/json"
            except protobuf.ProtobufError as e:
                req.protobuf_error = str(e)
        elif req.body_bytes:
            try:
                req.body_json = json.loads(req.body_bytes.decode("utf-8"))
                if json_depth(req.body_json) > MAX_DEPTH:
                    req.body_json = None
                    req.body_error = "couldn't get version/kind; json parse error: exceeded max depth"
            except RecursionError:
                req.body_error = "couldn't get version/kind; json parse error: exceeded max depth"
            except (UnicodeDecodeError, ValueError) as e:
                req.body_error = "couldn't get version/kind; json parse error: %s" % e

        auth = self.headers.get("Authorization", "")
        token = auth[7:].strip() if auth[:7].lower() == "bearer " else None

        # ---- control API ----
        if segs and segs[0] == "_double":
            with api.meta_lock:
                ok = token is not None and (token in api.tokens or token in api.startup_tokens)
            if body_exc:
                self._send_json(body_exc.code, body_exc.body)
                return
            if not ok:
                e = err_unauthorized()
                self._send_json(e.code, e.body)
                return
            try:
                if req.body_error:
                    raise err_bad_request(req.body_error)
                if req.path.rstrip("/") == "/_double/log" and req.method == "GET":
                    try:
                        since = int(req.q("since", "0") or 0)
                    except ValueError:
                        raise err_bad_request("since must be an integer")
                    self._send_json(200, api.get_log(since))
                    return
                out = api.control(req.method, req.path.rstrip("/"), req.body_json)
                self._send_json(200, out)
            except ApiError as e:
                self._send_json(e.code, e.body, e.headers)
            return

        # ---- everything else is logged ----
        entry = {"seq": 0, "method": req.method, "path": req.path, "query": req.raw_query, "verb": "",
                 "resource": "", "subresource": "", "namespace": "", "name": "",
                 "contentType": self.headers.get("Content-Type") or "", "code": 0,
                 "body": req.body_json if not req.body_error else None}
        try:
            self._serve(req, segs, token, body_exc, entry)
        except ApiError as e:
            api.log_answer(entry, e.code)
            self._send_json(e.code, e.body, e.headers, req)

    def _serve(self, req, segs, token, body_exc, entry):
        api = self.api
        public = req.method == "GET" and segs in (["version"], ["healthz"], ["readyz"], ["livez"])
        user, restricted = api.identify(token)
        if token is not None and user is None:
            raise err_unauthorized()
        if user is None and not public:
            raise err_unauthorized()
        req.user = user
        if body_exc:
            raise body_exc
        if restricted:
            api.authorize(req, user["username"], entry)

        # classify for the log and for failNext
        is_api = bool(segs) and segs[0] in ("api", "apis")
        routed = None
        if is_api:
            try:
                api.route(req, segs)
                routed = True
            except ApiError as e:
                routed = e
        if routed is True:
            req.watch = req.watch or (req.method == "GET" and (req.q("watch") or "").lower() in ("1", "true"))
            m = req.method
            if m == "GET":
                verb = "watch" if req.watch else ("get" if req.name else "list")
            else:
                verb = {"POST": "create", "PUT": "update", "PATCH": "patch",
                        "DELETE": "delete" if req.name else "deletecollection"}.get(m, m.lower())
            entry.update(verb=verb, resource=req.resource, subresource=req.sub, namespace=req.ns or "",
                         name=req.name)
        else:
            entry["verb"] = "get" if req.method == "GET" else req.method.lower()

        delay = api.lease_write_delay(entry["verb"], entry["resource"], req.body_json)
        if delay:
            time.sleep(delay)   # a slow server: the write is then served as usual
        fault = api.take_fault(entry["verb"], entry["resource"])
        if fault:
            raise fault_error(fault)

        if not is_api:
            if req.method != "GET":
                if segs and segs[0] in ("version", "healthz", "readyz", "livez"):
                    raise err_method_not_allowed()
                raise err_not_found_generic()
            if segs in (["healthz"], ["readyz"], ["livez"]):
                api.log_answer(entry, 200)
                self._send_text(200, "ok")
                return
            if segs == ["openapi", "v2"] and any(t == OPENAPI_V2_PB for t, _ in parse_accept(
                    self.headers.get("Accept"))):
                api.log_answer(entry, 200)
                data = openapi_v2_protobuf()
                self.send_response(200)
                self.send_header("Content-Type", "application/com.github.proto-openapi.spec.v2.v1.0+protobuf")
                self.send_header("Content-Length", str(len(data)))
                self._end_with(data)
                return
            body = api.discovery(segs)
            if body is None:
                raise err_not_found_generic()
            api.log_answer(entry, 200)
            self._send_json(200, body, None, req)
            return
        if isinstance(routed, ApiError):
            disc = api.discovery(segs) if req.method == "GET" else None
            agg = negotiate(self.headers.get("Accept"), "apidiscovery.k8s.io", "APIGroupDiscoveryList",
                            DISCOVERY_GVS) if segs in (["api"], ["apis"]) else None
            if disc is not None and agg:
                api.log_answer(entry, 200)
                self._send_json(200, api.aggregated_discovery(segs[0], agg), {"Vary": "Accept"}, req,
                                "application/json;g=apidiscovery.k8s.io;v=%s;as=APIGroupDiscoveryList" % agg)
                return
            if disc is not None:
                api.log_answer(entry, 200)
                self._send_json(200, disc, None, req)
                return
            if req.method != "GET" and api.discovery(segs) is not None:
                raise err_method_not_allowed()
            raise routed

        if req.watch:
            if req.method != "GET":
                raise err_method_not_allowed()
            self._serve_watch(req, entry)
            return
        table = negotiate(self.headers.get("Accept"), "meta.k8s.io", "Table", TABLE_GVS) \
            if req.method == "GET" else None
        code, body, headers = api.handle(req)
        if isinstance(body, bytes):  # a log (podlogs.py): text as it came
            api.log_answer(entry, code)
            self.send_response(code)
            self.send_header("Cache-Control", "no-cache, private")
            if code == 204:      # a pod on no node: no content, no type
                self._end_with(b"")
                return
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self._end_with(body)
            return
        content_type = "application/json"
        if table and code == 200 and isinstance(body, dict):
            body = to_table(req.kind, req.version, body, req.q("includeObject") or "Metadata", table)
            content_type = "application/json;as=Table;v=%s;g=meta.k8s.io" % table
        api.log_answer(entry, code)
        self._send_json(code, body, headers, req, content_type)

    # ---- watch ----
    def _write_chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    def _serve_watch(self, req, entry):
        api = self.api
        if api.block_watches:
            raise api_error(503, "ServiceUnavailable", "the server is currently unable to handle the request "
                                                       "(watches are blocked)", {})
        timeout = None
        if req.q("timeoutSeconds"):
            try:
                timeout = float(req.q("timeoutSeconds"))
            except ValueError:
                raise err_bad_request("timeoutSeconds: Invalid value: %s: must be an integer" %
                                      go_quote(req.q("timeoutSeconds")))
            if timeout <= 0:
                timeout = None          # like the real server: 0 means its own (long) default
        table = negotiate(self.headers.get("Accept"), "meta.k8s.io", "Table", TABLE_GVS)
        include = req.q("includeObject") or "Metadata"
        if table:
            check_include_object(include)
        w, expired = api.open_watch(req)
        api.log_answer(entry, 200)
        w.conn = self.conn
        w.table = (table, include) if table else None
        try:
            self.send_response(200)
            self.send_header("Cache-Control", "no-cache, private")
            self.send_header("Content-Type", "application/json" if not table else
                             "application/json;as=Table;v=%s;g=meta.k8s.io" % table)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            if expired:
                ev = {"type": ERROR, "object": status_body(410, "Expired", "The resourceVersion for the provided "
                                                                           "watch is too old.")}
                self._write_chunk((json.dumps(ev, separators=(",", ":")) + "\n").encode())
                self.wfile.write(b"0\r\n\r\n")
                return
            self._watch_loop(req, w, timeout)
        finally:
            api.close_watch(w)

    def _watch_loop(self, req, w, timeout):
        api = self.api
        kind = req.kind
        now = time.monotonic()
        deadline = now + timeout if timeout is not None else None
        interval = api.bookmark_interval if api.bookmark_interval > 0 else None
        next_bm = now + interval if (w.bookmarks and interval) else None
        pre_timeout_bm = None
        next_probe = now + 0.25
        if w.bookmarks and deadline is not None and timeout > 0:
            pre_timeout_bm = deadline - min(2.0, 0.2 * timeout)
        while True:
            with w.cond:
                while True:
                    if w.queue or w.drop or w.overflow:
                        break
                    now = time.monotonic()
                    wake = [t for t in (deadline, next_bm, pre_timeout_bm) if t is not None]
                    if wake and now >= min(wake):
                        break
                    if now >= next_probe:
                        next_probe = now + 0.25
                        if self._client_gone():
                            w.drop = True
                            break
                    w.cond.wait(max(0.0, min(min(wake) - now if wake else 1.0, next_probe - now)))
                # a small batch at a time, so a slow client's backlog stays in the bounded queue
                items = [w.queue.popleft() for _ in range(min(len(w.queue), 64))]
                drop, overflow, mid = w.drop, w.overflow, w.drop_mid_event
            if drop:
                self._abort()
                return
            for i, (etype, obj) in enumerate(items):
                shown = render(kind, obj, req.version)
                if getattr(w, "table", None):
                    # a one-row Table per event; the column definitions come with the first only
                    shown = to_table(kind, req.version, shown, w.table[1], w.table[0])
                    if getattr(w, "table_headers_sent", False):
                        shown["columnDefinitions"] = []
                    w.table_headers_sent = True
                line = (json.dumps({"type": etype, "object": shown},
                                   separators=(",", ":"), ensure_ascii=False) + "\n").encode()
                if mid or w.drop_mid_event:
                    self._write_chunk(line[:max(1, len(line) // 2)])
                    self.wfile.flush()
                    self._abort()
                    return
                self._write_chunk(line)
            if overflow:
                with w.cond:
                    more = bool(w.queue)
                if not more:
                    self.wfile.write(b"0\r\n\r\n")
                    return
                continue
            now = time.monotonic()
            due = (next_bm is not None and now >= next_bm) or (pre_timeout_bm is not None and now >= pre_timeout_bm)
            if due:
                rv = api.bookmark_rv(w)
                if rv is not None:
                    self._write_chunk((json.dumps({"type": BOOKMARK, "object": self._bookmark_obj(req, rv)},
                                                  separators=(",", ":")) + "\n").encode())
                    if next_bm is not None and now >= next_bm:
                        next_bm = now + interval
                    if pre_timeout_bm is not None and now >= pre_timeout_bm:
                        pre_timeout_bm = None
            if deadline is not None and time.monotonic() >= deadline:
                with w.cond:
                    pending = bool(w.queue)
                if not pending:
                    self.wfile.write(b"0\r\n\r\n")
                    return

    def _bookmark_obj(self, req, rv):
        kind = req.kind
        if kind.crd:
            return {"kind": kind.kind, "apiVersion": kind.gv(req.version), "metadata": {"resourceVersion": str(rv)}}
        obj = {"kind": kind.kind, "apiVersion": kind.gv(req.version),
               "metadata": {"resourceVersion": str(rv), "creationTimestamp": None}}
        obj.update(copy.deepcopy(kind.bookmark))
        return release.drop_unset_times(obj)

    def _client_gone(self):
        """A watching client never sends anything: readability means EOF, reset or close_notify."""
        if self.conn is None:
            return False
        try:
            readable, _, _ = select.select([self.conn.raw], [], [], 0)
            if not readable:
                return False
            self.conn.raw.recv(1, socket.MSG_PEEK)
            return True
        except (OSError, ValueError):
            return True

    def _abort(self):
        self.close_connection = True
        if self.conn is not None:
            self.conn.kill()


class DoubleHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, addr, api, ssl_ctx, host):
        self.api = api
        self.ssl_ctx = ssl_ctx
        self.host = host
        super().__init__(addr, Handler)

    def handle_error(self, request, client_address):
        pass

    def server_bind(self):
        import socketserver
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = self.server_address[:2]

    def finish_request(self, request, client_address):
        try:
            raw = request.dup()
        except OSError:
            return
        conn = Conn(raw)
        self.host.track(conn)
        ssock = None
        try:
            request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            request.settimeout(10)
            ssock = self.ssl_ctx.wrap_socket(request, server_side=True)
            ssock.settimeout(None)
            Handler(ssock, client_address, self, conn)
        except (ssl.SSLError, OSError, ValueError):
            pass
        finally:
            self.host.untrack(conn)
            try:
                if ssock is not None:
                    ssock.close()
            except OSError:
                pass
            try:
                raw.close()
            except OSError:
                pass

    def shutdown_request(self, request):
        try:
            request.close()
        except OSError:
            pass


class ServerHost:
    """Owns the listening server; can take it down and bring it back on the same port."""

    def __init__(self, api, ssl_ctx, port):
        self.api = api
        self.ssl_ctx = ssl_ctx
        self.port = port
        self.lock = threading.Lock()
        self.conns = set()
        self.server = None
        self.thread = None
        self.restarting = threading.Lock()

    def track(self, conn):
        with self.lock:
            self.conns.add(conn)

    def untrack(self, conn):
        with self.lock:
            self.conns.discard(conn)

    def start(self):
        last = None
        for _ in range(100):
            try:
                self.server = DoubleHTTPServer(("127.0.0.1", self.port), self.api, self.ssl_ctx, self)
                break
            except OSError as e:
                last = e
                if self.port == 0:
                    raise
                time.sleep(0.02)
        else:
            raise last
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05},
                                       daemon=True)
        self.thread.start()

    def stop(self):
        srv = self.server
        if srv is not None:
            srv.shutdown()
            srv.server_close()
        with self.lock:
            conns = list(self.conns)
        for c in conns:
            c.kill()

    def restart(self, down_s):
        with self.restarting:
            time.sleep(0.05)            # let the control response reach its client
            self.stop()
            time.sleep(max(0.0, down_s))
            self.start()
