#!/usr/bin/env python3
"""A Kubernetes API-server double for the integration tests (Python 3 standard library only).

A real HTTPS server on 127.0.0.1 that speaks the parts of the Kubernetes REST API the operator
relies on, shaped after exchanges recorded from kube-apiserver 1.32 (see
recordings/, made by record.py), plus a control API under /_double/ for fault injection.

    python3 tests/apiserver/apiserver.py --state-dir DIR [--port 0] [--token T ...]
                                         [--bookmark-interval 5] [--extra-crd JSON ...]

DIR receives ca.crt, server.crt/key, kubeconfig, port, info.json and finally ready. See README.md.

What pods need for in-cluster configuration is here too: the TokenRequest API and the
authentication of its tokens (serviceaccounts.py), RBAC over the RBAC objects stored (rbac.py),
the `kubernetes` Service, and with --control-plane the ServiceAccount admission plugin and each
namespace's `default` ServiceAccount and kube-root-ca.crt, as kube-controller-manager keeps them.

kubectl works against it too: aggregated discovery, /openapi/v3 (whose PATCH operations name
fieldValidation, so kubectl leaves validation to the server), a minimal /openapi/v2, and
server-side Tables (Accept ...;as=Table;g=meta.k8s.io) for lists, gets and watches, with the
printer columns of the built-in kinds and a CRD's additionalPrinterColumns
(test_kubectl.py).

This file is the entry point (the state directory's files and main()); the server is in modules
of their own, by concern:

    http_server.py    connections, request bodies, dispatch and logging, answers, watch streams
    api.py            Api, the state every connection shares, and routing; put together from
      writes.py         the write pipeline: create, update and delete of one object
      verbs.py          the REST verbs, lists (selectors, pagination) and watch registration
      auth.py           tokens, RBAC, TokenRequest and SelfSubjectReview
      controllers.py    the controllers the double plays
      control.py        the control API under /_double/ and the faults it injects
      discovery.py      discovery, OpenAPI documents, Accept negotiation
    store.py          objects, resourceVersions, history, compaction, watchers, continue tokens
    kinds.py          Kind, one served resource, and render()
    builtin_kinds.py  the built-in resources' defaulting and validation, and the resource table
    crds.py           custom resources: Kinds from CRDs, admission through their schemas
    decoding.py       what the decoder refuses before admission
    metadata.py       validation of names, labels, annotations, owner references, finalizers
    selection.py      label and field selectors
    patches.py        merge, JSON and strategic merge patches, server-side apply
    tables.py         server-side Tables
    errors.py         Status bodies and field errors
    objects.py        helpers on JSON objects: key order, timestamps, generated names

with schema.py (structural schemas), rbac.py, serviceaccounts.py and protobuf.py beside them.
"""

import argparse
import base64
import faulthandler
import json
import os
import random
import signal
import ssl
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))   # the modules beside this file
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "support"))
import rbac  # noqa: E402  (tests/apiserver/rbac.py: RBAC authorization)
from api import MPIJOB_CRD_FILE, Api  # noqa: E402
from controllers import KUBERNETES_SERVICE_IP, KUBERNETES_SERVICE_PORT  # noqa: E402
from crds import kind_from_crd, load_crd_file  # noqa: E402
import release  # noqa: E402
from builtin_kinds import workload_api_kinds  # noqa: E402
from http_server import MAX_DEPTH, ServerHost  # noqa: E402
from atomic import write_atomic  # noqa: E402  (tests/support)


# --------------------------------------------------------------------------------------------
# Certificates, kubeconfig, main
# --------------------------------------------------------------------------------------------

OPENSSL_CNF = """[req]
distinguished_name = dn
prompt = no
[dn]
CN = mpijob-apiserver-double
[v3_ca]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign,digitalSignature
subjectKeyIdentifier = hash
[v3_server]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = @names
[names]
IP.1 = 127.0.0.1
IP.2 = 10.96.0.1
DNS.1 = localhost
DNS.2 = kubernetes
DNS.3 = kubernetes.default
DNS.4 = kubernetes.default.svc
DNS.5 = kubernetes.default.svc.cluster.local
"""


def make_certs(d):
    """CA and server certificate (EC P-256) with the openssl command-line tool, for the names a
    real API server's certificate holds: 127.0.0.1, the `kubernetes` Service's ClusterIP
    10.96.0.1 and kubernetes, kubernetes.default, kubernetes.default.svc(.cluster.local)."""
    cnf = os.path.join(d, "openssl.cnf")
    with open(cnf, "w") as f:
        f.write(OPENSSL_CNF)
    ca_key, ca_crt = os.path.join(d, "ca.key"), os.path.join(d, "ca.crt")
    key, csr, crt = os.path.join(d, "server.key"), os.path.join(d, "server.csr"), os.path.join(d, "server.crt")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    p1 = subprocess.Popen(["openssl", "req", "-x509", *ec, "-keyout", ca_key, "-out", ca_crt, "-days", "3650",
                           "-subj", "/CN=apiserver-double-ca", "-config", cnf, "-extensions", "v3_ca"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    p2 = subprocess.Popen(["openssl", "req", "-new", *ec, "-keyout", key, "-out", csr,
                           "-subj", "/CN=127.0.0.1", "-config", cnf],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    for p in (p1, p2):
        _, err = p.communicate()
        if p.returncode != 0:
            raise RuntimeError("openssl failed: %s" % err.decode(errors="replace"))
    serial = "0x%x" % random.getrandbits(63)
    p3 = subprocess.run(["openssl", "x509", "-req", "-in", csr, "-CA", ca_crt, "-CAkey", ca_key, "-set_serial",
                         serial, "-out", crt, "-days", "3650", "-extfile", cnf, "-extensions", "v3_server"],
                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    if p3.returncode != 0:
        raise RuntimeError("openssl failed: %s" % p3.stderr.decode(errors="replace"))
    return ca_crt, crt, key


def kubeconfig_text(server, ca_pem, token):
    ca_b64 = base64.b64encode(ca_pem).decode()
    return ("apiVersion: v1\n"
            "kind: Config\n"
            "clusters:\n"
            "- name: double\n"
            "  cluster:\n"
            "    server: %s\n"
            "    certificate-authority-data: %s\n"
            "users:\n"
            "- name: double\n"
            "  user:\n"
            "    token: %s\n"
            "contexts:\n"
            "- name: double\n"
            "  context:\n"
            "    cluster: double\n"
            "    user: double\n"
            "    namespace: default\n"
            "current-context: double\n") % (server, ca_b64, token)


def kubernetes_service_info(port):
    """How a pod reaches the API server: the `kubernetes` Service's ClusterIP and port, and the
    address behind it (what a node's proxy forwards to)."""
    return {"ip": KUBERNETES_SERVICE_IP, "port": KUBERNETES_SERVICE_PORT, "target": "127.0.0.1:%d" % port}


def info_json(port):
    return {"kind": "double", "version": release.version()["gitVersion"],
            "kubernetesService": kubernetes_service_info(port)}


def main(argv=None):
    # Bodies nest as deep as kube-apiserver's limit (10,000): recursion in the handler threads
    # (decoding, pruning, copying) needs the room.
    sys.setrecursionlimit(4 * MAX_DEPTH + 1000)
    threading.stack_size(256 << 20)
    ap = argparse.ArgumentParser(description="Kubernetes API-server double for tests")
    ap.add_argument("--state-dir", required=True)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--token", action="append", default=[])
    ap.add_argument("--bookmark-interval", type=float, default=5.0)
    ap.add_argument("--extra-crd", action="append", default=[],
                    help="JSON: a CustomResourceDefinition or {group,version(s),plural,kind,singular,"
                         "namespaced,status,schema}; or @FILE")
    ap.add_argument("--mpijob-crd", default=MPIJOB_CRD_FILE,
                    help="the MPIJob CRD whose schema admits MPIJobs (\"\": none, no schema checks)")
    ap.add_argument("--without-crds", action="store_true",
                    help="serve no custom resources (MPIJobs, PodGroups), as a cluster without the CRDs")
    ap.add_argument("--rbac", action="append", default=[],
                    help="YAML file of RBAC objects enforced for --rbac-token (repeatable)")
    ap.add_argument("--rbac-token", default="operator-token",
                    help="the bearer token RBAC applies to; its kubeconfig is <state-dir>/operator.kubeconfig")
    ap.add_argument("--rbac-user", default="",
                    help="the user that token authenticates as (default: the ServiceAccount the files define)")
    ap.add_argument("--control-plane", action="store_true",
                    help="also do what kube-controller-manager does for pods' in-cluster configuration (a "
                         "default ServiceAccount and kube-root-ca.crt in every namespace) and admit pods with "
                         "the ServiceAccount plugin; without it the double is kube-apiserver as launch.py runs "
                         "it alone")
    ap.add_argument("--kubernetes", default=release.DEFAULT, choices=sorted(release.RELEASES),
                    help="the release to answer as (tests/apiserver/release.py)")
    ap.add_argument("--workload-api", action="store_true",
                    help="also serve kube-scheduler's Workload API, scheduling.k8s.io/v1alpha2 workloads and "
                         "podgroups, as a 1.36 server with its runtime-config and feature gates does (implies "
                         "--kubernetes 1.36)")
    args = ap.parse_args(argv)
    if args.workload_api:
        args.kubernetes = "1.36"
    release.select(args.kubernetes)
    tokens = args.token or ["test-token"]
    d = os.path.abspath(args.state_dir)
    os.makedirs(d, exist_ok=True)
    try:
        os.unlink(os.path.join(d, "ready"))
    except FileNotFoundError:
        pass

    crd = {}                        # the CRD loads while openssl makes the certificates
    loader = threading.Thread(target=lambda: crd.update(obj=load_crd_file(args.mpijob_crd)), daemon=True)
    if args.mpijob_crd:
        loader.start()
    api = Api(tokens, args.bookmark_interval, mpijob_crd=None)
    api.service_accounts = args.control_plane
    if args.without_crds:
        for kind in [k for k in api.store.kinds if k.crd]:
            api.store.remove_kind(kind)
        args.mpijob_crd = ""
    if args.workload_api:
        for kind in workload_api_kinds():
            api.store.add_kind(kind)
    for spec in args.extra_crd:
        text = open(spec[1:]).read() if spec.startswith("@") else spec
        api.store.add_kind(kind_from_crd(json.loads(text)))
    if args.rbac:
        user = args.rbac_user or rbac.service_account_user(args.rbac)
        if not user:
            ap.error("--rbac: the files define no single ServiceAccount; give --rbac-user")
        api.rbac_tokens = {args.rbac_token: user}
        api.rbac_user = user
        api.rbac_objects = rbac.manifest_objects(args.rbac)
        api.rbac_namespaces = rbac.namespaces_of(args.rbac)

    ca_crt, crt, key = make_certs(d)
    if args.mpijob_crd:
        loader.join()
        api.install_mpijob_crd(crd.get("obj"))
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(crt, key)
    ctx.set_alpn_protocols(["http/1.1"])

    host = ServerHost(api, ctx, args.port)
    host.start()
    api.port = host.port
    api.server = host
    with open(ca_crt, "rb") as f:
        ca_pem = f.read()
    try:
        api.start_controllers(ca_pem.decode(), host.port)
    except RuntimeError as e:
        sys.stderr.write("apiserver: %s\n" % e)
        host.stop()
        os._exit(1)


    # The handler only sets a flag: taking the lock of a threading.Event in a signal handler
    # deadlocks when a second signal lands while the first handler holds that lock.
    stopping = []

    def on_signal(signum, frame):
        stopping.append(signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    faulthandler.register(signal.SIGUSR2, all_threads=True)   # thread dump for a hung test

    server_url = "https://127.0.0.1:%d" % host.port
    write_atomic(os.path.join(d, "kubeconfig"), kubeconfig_text(server_url, ca_pem, tokens[0]))
    if args.rbac:
        write_atomic(os.path.join(d, "operator.kubeconfig"), kubeconfig_text(server_url, ca_pem, args.rbac_token))
    write_atomic(os.path.join(d, "port"), "%d\n" % host.port)
    write_atomic(os.path.join(d, "info.json"), json.dumps(info_json(host.port)) + "\n")
    write_atomic(os.path.join(d, "ready"), "%d\n" % os.getpid())

    while not stopping:
        time.sleep(0.05)
    try:
        host.stop()
    except Exception:  # noqa: BLE001
        pass
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
