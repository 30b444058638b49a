#!/usr/bin/env python3
"""An HTTPS server for the client's TLS tests. Every GET is answered 200 with a JSON object that
says what the client sent: {"sni": the TLS server name (null when none), "host": the Host header,
"path": the request path}. It listens on 127.0.0.1, on a free port it writes to the port file
once it is ready, and runs until it is killed.

    python3 tests/support/tls_echo.py --cert CRT --key KEY --port-file FILE
"""

import argparse
import json
import os
import ssl
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        body = json.dumps({"sni": self.client_address[2], "host": self.headers.get("Host"),
                           "path": self.path}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, ctx):
        super().__init__(("127.0.0.1", 0), Handler)
        self.ctx = ctx
        self.sni = None
        ctx.sni_callback = self.on_sni

    def on_sni(self, sock, name, ctx):
        self.sni = name

    def get_request(self):
        # The handshake runs here, one connection at a time, so self.sni is this connection's.
        sock, addr = self.socket.accept()
        self.sni = None
        try:
            conn = self.ctx.wrap_socket(sock, server_side=True)
        except (ssl.SSLError, OSError):
            sock.close()
            raise
        return conn, (addr[0], addr[1], self.sni)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cert", required=True)
    ap.add_argument("--key", required=True)
    ap.add_argument("--port-file", required=True)
    args = ap.parse_args()
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(args.cert, args.key)
    srv = Server(ctx)
    tmp = args.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write("%d\n" % srv.server_address[1])
    os.rename(tmp, args.port_file)
    srv.serve_forever()


if __name__ == "__main__":
    main()
