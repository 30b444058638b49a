"""Api, the one state every connection shares (the store and the resources it serves, the tokens,
what the control API set), and route(), which maps a request's path to a resource. Its behaviour
comes in parts, a module each, that Api puts together:

    writes.py       the write pipeline: create, update and delete of one object
    verbs.py        the REST verbs, lists and the registration of watches
    auth.py         authentication, RBAC, TokenRequest and SelfSubjectReview
    controllers.py  the controllers the double plays
    control.py      the control API under /_double/
    discovery.py    discovery and the OpenAPI documents

The helpers they all use are here: _kind, _namespace_exists and the request body checks."""

import os
import threading

from auth import Auth
from builtin_kinds import builtin_kinds
from control import Control
from controllers import Controllers
from crds import install_crd_schemas, load_crd_file
from discovery import Discovery
from errors import api_error, err_bad_request, err_not_found_generic, go_quote
from store import Store
from objects import as_dict, as_list
from podlogs import PodLogs
from tables import printer_columns_of
from verbs import Verbs
from writes import ObjectWrites

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MPIJOB_CRD_FILE = os.path.join(REPO_ROOT, "manifests", "crd", "kubeflow.org_mpijobs.yaml")


class Request:
    """A parsed API request."""

    def __init__(self):
        self.method = ""
        self.path = ""
        self.raw_query = ""
        self.query = {}
        self.verb = ""
        self.kind = None
        self.version = ""
        self.ns = None
        self.name = ""
        self.sub = ""
        self.resource = ""
        self.content_type = ""
        self.body_bytes = b""
        self.body_json = None
        self.body_error = None
        self.protobuf_error = None
        self.user_agent = ""
        self.watch = False
        self.user = None            # who the credentials are (Api.identify)

    def q(self, key, default=None):
        v = self.query.get(key)
        return v[0] if v else default


class Api(ObjectWrites, Controllers, Auth, PodLogs, Verbs, Control, Discovery):
    """The API server's state and behaviour; one instance shared by every connection."""

    def __init__(self, tokens, bookmark_interval, mpijob_crd=MPIJOB_CRD_FILE):
        self.store = Store()
        for k in builtin_kinds():
            self.store.add_kind(k)
        if mpijob_crd:
            self.install_mpijob_crd(load_crd_file(mpijob_crd))
        self.startup_tokens = set(tokens)
        self.tokens = set(tokens)
        self.rbac_tokens = {}           # token -> user name, authorized by RBAC (--rbac-token)
        self.rbac_user = None           # that user, whose granted requests MPIJOB_TEST_RBAC_USAGE records
        self.rbac_objects = []          # the objects of the --rbac files, stored at start and after a reset
        self.rbac_namespaces = []       # the namespaces those files name (launch.py creates them on a real server)
        self.rbac_said = set()          # refusals already written to stderr
        self._authz = (None, None)      # (RBAC objects' versions, rbac.Authorizer over them)
        # --control-plane: kube-controller-manager's serviceaccount and root-ca-cert-publisher
        # controllers and the ServiceAccount admission plugin, which launch.py turns off on a real
        # kube-apiserver running without the controller-manager
        self.service_accounts = False
        self.issuer = None              # serviceaccounts.Issuer, once the port is known
        self.ca_pem = ""                # what kube-root-ca.crt publishes
        self.controllers = False        # the control plane's controllers run (start_controllers)
        self.bookmark_interval = bookmark_interval
        self.meta_lock = threading.Lock()
        self.log = []
        self.log_seq = 0
        self.faults = []                # failNext rules
        self.version_override = None    # the fault {"version": ...}: what /version answers instead
        self.block_watches = False
        self.lease_delay = None         # delayLeases: {"seconds": S, "holder": identity or None}
        self.port = 0
        self.server = None              # the ServerHost, for restart
        self.system_namespaces = ["default", "kube-node-lease", "kube-public", "kube-system"]
        self.store.on_commit = self.on_commit
        with self.store.lock:
            ns_kind = self.store.by_gvr[("", "v1", "namespaces")]
            for n in self.system_namespaces:
                self._create_object(ns_kind, "v1", None, {"apiVersion": "v1", "kind": "Namespace",
                                                          "metadata": {"name": n}}, {})

    def install_mpijob_crd(self, crd):
        """MPIJobs are admitted through the project's own CRD object (None: without a schema), like
        on a real server with that CRD installed."""
        if crd is not None:
            kind = self.store.by_gvr[("kubeflow.org", "v2beta1", "mpijobs")]
            kind.crd_object = crd
            install_crd_schemas(kind, crd)
            kind.printer_columns = printer_columns_of(crd)
            names = as_dict(as_dict(crd.get("spec")).get("names"))
            kind.short = [str(n) for n in as_list(names.get("shortNames"))] or kind.short
            kind.categories = [str(n) for n in as_list(names.get("categories"))] or kind.categories

    def _kind(self, group, plural):
        """The Kind served as group/plural, or None."""
        return self.store.by_skey.get((group, plural))

    def _namespace_exists(self, ns):
        """Whether namespace ns is stored (None: no namespace, so no)."""
        return ns is not None and self.store.get(self._kind("", "namespaces"), None, ns) is not None

    def _body(self, req, required=True):
        """The request's JSON body; 400 when it did not decode, or is missing and required."""
        if req.body_error:
            raise err_bad_request(req.body_error)
        if req.body_json is None and required:
            raise err_bad_request("the body of the request was empty")
        return req.body_json

    def _require_json(self, req):
        """415 unless the body came as JSON or YAML (protobuf.py turns what it knows into JSON; its
        refusal of the rest is the message)."""
        ct = req.content_type
        if ct == "application/vnd.kubernetes.protobuf" and req.protobuf_error:
            raise api_error(415, "UnsupportedMediaType", req.protobuf_error)
        if ct not in ("application/json", "application/yaml"):
            raise api_error(415, "UnsupportedMediaType", "the body of the request was in an unknown format - "
                            "accepted media types include: application/json, application/yaml, "
                            "application/vnd.kubernetes.protobuf")

    def _dry_run(self, req):
        """Whether the request is a dry run (dryRun=All; any other value is a 400)."""
        dr = req.query.get("dryRun") or []
        for v in dr:
            if v != "All":
                raise err_bad_request("dryRun: Unsupported value: %s: supported values: \"All\"" % go_quote(v))
        return bool(dr)

    def _warn_headers(self, warnings):
        """The Warning headers of an answer, one per warning."""
        return {"Warning": ['299 - "%s"' % w.replace('"', '\\"') for w in warnings]} if warnings else {}

    def route(self, req, segs):
        """Fills req.kind/version/ns/name/sub from API path segments; raises 404 for unknown paths."""
        if segs and segs[0] == "api":
            if len(segs) < 3 or segs[1] != "v1":
                raise err_not_found_generic()
            group, version, rest = "", "v1", segs[2:]
        elif segs and segs[0] == "apis":
            if len(segs) < 4:
                raise err_not_found_generic()
            group, version, rest = segs[1], segs[2], segs[3:]
        else:
            raise err_not_found_generic()
        if rest and rest[0] == "watch":
            req.watch = True
            rest = rest[1:]
        by = self.store.by_gvr

        def lookup(plural):
            return by.get((group, version, plural))

        ns = None
        if len(rest) >= 3 and rest[0] == "namespaces" and lookup(rest[2]) is not None and lookup(rest[2]).namespaced:
            ns, rest = rest[1], rest[2:]
        if not rest:
            raise err_not_found_generic()
        kind = lookup(rest[0])
        if kind is None:
            raise err_not_found_generic()
        if kind.namespaced and ns is None and len(rest) > 1:
            raise err_not_found_generic()
        if len(rest) > 3:
            raise err_not_found_generic()
        name = rest[1] if len(rest) > 1 else ""
        sub = rest[2] if len(rest) > 2 else ""
        binding = sub == "binding" and kind.skey == ("", "pods")
        if sub and not binding and sub not in kind.subresources and (sub != "status" or not kind.status):
            raise err_not_found_generic()
        if len(rest) > 1 and not name:
            raise err_not_found_generic()
        req.kind, req.version, req.ns, req.name, req.sub = kind, version, ns, name, sub
        req.resource = kind.plural
