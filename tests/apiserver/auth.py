"""Who a request is and what it may do, a part of Api (api.py): the bearer tokens (the startup
tokens are the administrator, --rbac-token the operator, and the ServiceAccount tokens this server
issued), RBAC over the RBAC objects stored now (rbac.py) with OwnerReferencesPermissionEnforcement,
and the two authentication.k8s.io APIs, TokenRequest (serviceaccounts/NAME/token) and
SelfSubjectReview."""

import copy
import os
import sys
import time

import rbac
import serviceaccounts
from atomic import append_whole  # tests/support, on the path apiserver.py sets
from errors import api_error, err_bad_request, fe_invalid, field_errors_text, go_json_kind
from kinds import RBAC_GROUP
from objects import META_ORDER, now_rfc3339, ordered


class Auth:
    """Authentication, authorization and the token APIs of Api."""

    ADMIN = {"username": "admin", "uid": "admin-uid", "groups": ["system:masters", "system:authenticated"]}
    RBAC_SKEYS = tuple((RBAC_GROUP, p) for p in ("clusterroles", "clusterrolebindings", "roles", "rolebindings"))

    def identify(self, token):
        """(user, restricted) for a bearer token: the user as a SelfSubjectReview shows it, and
        whether RBAC decides its requests; (None, False) for a token the server refuses. The
        startup tokens are the administrator (system:masters) of launch.py's real server."""
        if token is None:
            return None, False
        with self.meta_lock:
            name = self.rbac_tokens.get(token)
            admin = token in self.tokens
        if name is not None:
            user = {"username": name, "uid": "operator-uid",
                    "groups": sorted(rbac.Authorizer.groups_of(name) - {"system:authenticated"}) +
                    ["system:authenticated"]}
            return user, True
        if admin:
            return copy.deepcopy(self.ADMIN), False
        user = self.authenticate_service_account(token)
        return (user, True) if user is not None else (None, False)

    def authenticate_service_account(self, token):
        """The user of a token this server issued (TokenRequest), while it is unexpired, its
        ServiceAccount exists with the same uid and so does the Pod or Secret it is bound to.
        (A real server caches an accepted token for up to 10 s; this one checks every request.)"""
        if self.issuer is None or token.count(".") != 2:
            return None
        claims = self.issuer.claims(token)
        if claims is None:
            return None
        priv = claims["kubernetes.io"]
        sa_ref = priv.get("serviceaccount")
        ns = priv.get("namespace")
        if not isinstance(sa_ref, dict) or not isinstance(ns, str):
            return None
        with self.store.lock:
            sa = self.store.get(self._kind("", "serviceaccounts"), ns, sa_ref.get("name"))
            if sa is None or sa["metadata"]["uid"] != sa_ref.get("uid") or sa["metadata"].get("deletionTimestamp"):
                return None
            for what, plural, namespaced in (("pod", "pods", True), ("secret", "secrets", True),
                                             ("node", "nodes", False)):
                ref = priv.get(what)
                if ref is None or (what == "node" and "pod" in priv):
                    continue          # a pod-bound token's node claims are information only
                kind = self._kind("", plural)
                bound = self.store.get(kind, ns if namespaced else None, ref.get("name")) if kind else None
                if bound is None or bound["metadata"]["uid"] != ref.get("uid"):
                    return None
        return serviceaccounts.user_of(claims)

    def rbac_authorizer(self):
        """rbac.Authorizer over the RBAC objects stored now (rebuilt when one of them changes)."""
        with self.store.lock:
            key = tuple(self.store.written.get(k, 0) for k in self.RBAC_SKEYS)
            if self._authz[0] != key:
                docs = []
                for k in self.RBAC_SKEYS:
                    docs.extend(obj for _, obj in sorted(self.store.objects.get(k, {}).items()))
                self._authz = (key, rbac.Authorizer(docs=docs))
            return self._authz[1]

    # ------------------------------------------------------------------ TokenRequest, SelfSubjectReview
    def do_token(self, req):
        """POST serviceaccounts/NAME/token (TokenREST.Create of kube-apiserver 1.32)."""
        self._require_json(req)
        body = self._body(req)
        if not isinstance(body, dict):
            raise err_bad_request("the body of the request must be a JSON object")
        k, av = body.get("kind"), body.get("apiVersion")
        if k and k != "TokenRequest":
            v = str(av or "").rpartition("/")[2]
            raise err_bad_request('%s in version "%s" cannot be handled as a TokenRequest: converting (%s.%s) to '
                                  '(authentication.TokenRequest): unknown conversion' % (k, v, v, k))
        meta = body.get("metadata") if isinstance(body.get("metadata"), dict) else {}
        name, ns = req.name, req.ns

        def invalid(obj_name, errors):
            details = {"group": "authentication.k8s.io", "kind": "TokenRequest",
                       "causes": [e.cause() for e in errors]}
            if obj_name:
                details = dict({"name": obj_name}, **details)
            return api_error(422, "Invalid", 'TokenRequest.authentication.k8s.io "%s" is invalid: %s' % (
                obj_name, field_errors_text(errors)), details)

        if meta.get("name") and meta["name"] != name:
            raise invalid(name, [fe_invalid("metadata.name", meta["name"],
                                            "must match the service account name if specified")])
        if meta.get("namespace") and meta["namespace"] != ns:
            raise invalid(name, [fe_invalid("metadata.namespace", meta["namespace"],
                                            "must match the service account namespace if specified")])
        spec = body.get("spec") if isinstance(body.get("spec"), dict) else {}
        audiences = spec.get("audiences") or list(self.issuer.audiences)
        seconds = spec.get("expirationSeconds")
        if seconds is None:
            seconds = serviceaccounts.DEFAULT_EXPIRATION
        if not isinstance(seconds, int) or isinstance(seconds, bool):
            raise err_bad_request('TokenRequest in version "v1" cannot be handled as a TokenRequest: json: cannot '
                                  'unmarshal %s into Go struct field TokenRequestSpec.spec.expirationSeconds of '
                                  'type int64' % go_json_kind(seconds))
        ref = spec.get("boundObjectRef") if isinstance(spec.get("boundObjectRef"), dict) else None
        with self.store.lock:
            if not self._namespace_exists(ns):
                raise api_error(404, "NotFound", 'namespaces "%s" not found' % ns,
                                {"name": ns, "kind": "namespaces"})
            sa_kind = req.kind
            sa = self.store.get(sa_kind, ns, name)
            if sa is None:
                raise sa_kind.not_found(name)
            errors = []
            if seconds < serviceaccounts.MIN_EXPIRATION:
                errors.append(fe_invalid("spec.expirationSeconds", seconds,
                                         "may not specify a duration less than 10 minutes"))
            if seconds > serviceaccounts.MAX_EXPIRATION:
                errors.append(fe_invalid("spec.expirationSeconds", seconds,
                                         "may not specify a duration larger than 2^32 seconds"))
            if errors:
                raise invalid(meta.get("name") or "", errors)
            bound = node = None
            if ref is not None:
                group, _, version = str(ref.get("apiVersion") or "").rpartition("/")
                rkind, rname = ref.get("kind") or "", ref.get("name") or ""
                plural = {"Pod": "pods", "Secret": "secrets", "Node": "nodes"}.get(rkind) if not group else None
                if plural is None:
                    raise err_bad_request("cannot bind token to object of type %s/%s, Kind=%s" % (
                        group, version, rkind))
                okind = self._kind("", plural)
                target = self.store.get(okind, ns if okind.namespaced else None, rname) if okind else None
                if target is None:
                    raise api_error(404, "NotFound", '%s "%s" not found' % (plural, rname),
                                    {"name": rname, "kind": plural})
                if rkind == "Pod":
                    if ((target.get("spec") or {}).get("serviceAccountName") or "") != name:
                        raise err_bad_request('cannot bind token for serviceaccount "%s" to pod running with '
                                              'different serviceaccount name.' % name)
                    node_name = (target.get("spec") or {}).get("nodeName")
                    nodes = self._kind("", "nodes")
                    n = self.store.get(nodes, None, node_name) if node_name and nodes else None
                    if n is not None:
                        node = (node_name, n["metadata"]["uid"])
                uid = target["metadata"]["uid"]
                if ref.get("uid") and ref["uid"] != uid:
                    raise api_error(409, "Conflict", 'Operation cannot be fulfilled on %s "%s": the UID in the '
                                    'bound object reference (%s) does not match the UID in record. The object might '
                                    'have been deleted and then recreated' % (rkind, rname, ref["uid"]),
                                    {"name": rname, "kind": rkind})
                bound = (rkind.lower(), rname, uid)
            now = time.time()
            token, _ = self.issuer.token(ns, sa, audiences, seconds, bound, node, now)
        out_meta = {k: v for k, v in meta.items() if k not in ("uid", "resourceVersion", "generation",
                                                               "managedFields", "selfLink")}
        out_meta.update(name=name, namespace=ns, creationTimestamp=time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                                   time.gmtime(now)))
        out_ref = None
        if ref is not None:
            out_ref = {k: ref[k] for k in ("kind", "apiVersion", "name", "uid") if ref.get(k)}
        out = {"kind": "TokenRequest", "apiVersion": "authentication.k8s.io/v1",
               "metadata": ordered(out_meta, META_ORDER),
               "spec": {"audiences": list(audiences), "expirationSeconds": seconds, "boundObjectRef": out_ref},
               "status": {"token": token, "expirationTimestamp": time.strftime(
                   "%Y-%m-%dT%H:%M:%SZ", time.gmtime(int(now) + seconds))}}
        return 201, out, {}

    def self_subject_review(self, req):
        """POST authentication.k8s.io/v1 selfsubjectreviews: who the request's credentials are."""
        self._require_json(req)
        body = self._body(req)
        if not isinstance(body, dict):
            raise err_bad_request("the body of the request must be a JSON object")
        user = dict(req.user or {})
        info = {k: user[k] for k in ("username", "uid", "groups", "extra") if user.get(k)}
        return 201, {"kind": "SelfSubjectReview", "apiVersion": "authentication.k8s.io/v1",
                     "metadata": {"creationTimestamp": now_rfc3339()}, "status": {"userInfo": info}}, {}

    def authorize(self, req, user, entry):
        """RBAC for a restricted token (--rbac-token, ServiceAccount tokens), over the RBAC objects
        stored now: 403 Forbidden, as kube-apiserver answers, for anything the roles do not grant;
        and OwnerReferencesPermissionEnforcement for blockOwnerDeletion."""
        authorizer = self.rbac_authorizer()
        info = rbac.request_info(req.method, req.path, req.query)
        entry.update(user=user)
        if not authorizer.allowed(user, info):
            details = {}
            if info.resource_request:
                if info.name:
                    details["name"] = info.name
                if info.group:
                    details["group"] = info.group
                details["kind"] = info.resource
            raise self._forbidden(authorizer.forbidden_message(user, info), details)
        usage = os.environ.get("MPIJOB_TEST_RBAC_USAGE") if user == self.rbac_user else None
        if usage and info.resource_request:
            # One line per granted request: which rules a test suite really needs (rbac_coverage.py).
            resource = info.resource + ("/" + info.subresource if info.subresource else "")
            append_usage(usage, "%s %s %s %s\n" % (info.verb, info.group or '""', resource, info.namespace or "-"))
        if info.verb not in ("create", "update") or not isinstance(req.body_json, dict):
            return
        refs = (req.body_json.get("metadata") or {}).get("ownerReferences") or []
        for ref in refs if isinstance(refs, list) else []:
            if not isinstance(ref, dict) or ref.get("blockOwnerDeletion") is not True:
                continue
            group = str(ref.get("apiVersion", "")).rpartition("/")[0]
            kind = self.store.kind_by_group_kind(group, ref.get("kind"))
            plural = kind.plural if kind is not None else str(ref.get("kind", "")).lower() + "s"
            granted = authorizer.owner_finalizer_allowed(user, info.namespace, group, plural, ref.get("name", ""))
            if granted and usage:
                append_usage(usage, "update %s %s/finalizers %s\n" % (group or '""', plural, info.namespace or "-"))
            if not granted:
                name = info.name or (req.body_json.get("metadata") or {}).get("name", "")
                msg = ('%s "%s" is forbidden: cannot set blockOwnerDeletion if an ownerReference refers to a '
                       'resource you can\'t set finalizers on: User "%s" cannot update resource "%s/finalizers" '
                       'in API group "%s" in the namespace "%s"' % (
                           info.resource + ("." + info.group if info.group else ""), name, user, plural, group,
                           info.namespace))
                details = {"name": name, "group": info.group, "kind": info.resource} if info.group else \
                    {"name": name, "kind": info.resource}
                raise self._forbidden(msg, details)

    def _forbidden(self, msg, details):
        """The 403 of a refusal, which is also said on stderr, once each, so a failing test shows why."""
        if msg not in self.rbac_said:
            self.rbac_said.add(msg)
            sys.stderr.write("apiserver: RBAC: %s\n" % msg)
        return api_error(403, "Forbidden", msg, details)


def append_usage(path, line):
    """One usage line added to MPIJOB_TEST_RBAC_USAGE's file, which every server of a run shares."""
    append_whole(path, line)
