"""Kubernetes RBAC authorization for the API-server double.

Takes RBAC objects (ClusterRole, ClusterRoleBinding, Role, RoleBinding) from YAML files or, as the
double does, from the objects it stores, and decides requests the way kube-apiserver's RBAC
authorizer does:

- request attributes come from the path, like the apiserver's RequestInfoFactory: /api/v1/... and
  /apis/<group>/<version>/...; GET is get, list or watch (watch=true or a /watch/ prefix); POST
  create; PUT update; PATCH patch; DELETE delete or deletecollection; anything else is a
  non-resource URL (discovery, /version, /healthz);
- a ClusterRoleBinding grants its ClusterRole everywhere; a RoleBinding grants its Role or
  ClusterRole in its own namespace only;
- a rule matches when apiGroups, resources ("pods", "mpijobs/status", "*", "*/status"), verbs
  and resourceNames (none given = all names; given = only requests naming one, so never create,
  list or watch) all match; nonResourceURLs for non-resource requests;
- subjects: ServiceAccount (user system:serviceaccount:<ns>:<name>, groups system:serviceaccounts
  and system:serviceaccounts:<ns>), User, Group; every user is in system:authenticated.
- Discovery and health endpoints are open to every authenticated user, as the built-in
  system:discovery and system:public-info-viewer roles make them on a real cluster, and so is
  asking who one is (SelfSubjectReview and the self access reviews of system:basic-user). The
  other bootstrap roles (cluster-admin, admin, edit, view, system:*) are not modelled, nor is
  ClusterRole aggregation.

The forbidden message is the one kube-apiserver writes.
"""

import yaml

RBAC_GROUP = "rbac.authorization.k8s.io"


class RequestInfo:
    def __init__(self):
        self.resource_request = False
        self.verb = ""
        self.group = ""
        self.resource = ""
        self.subresource = ""
        self.namespace = ""
        self.name = ""
        self.path = ""


def request_info(method, path, query):
    """RequestInfo for a request. query: dict of lists (as urllib.parse.parse_qs gives)."""
    info = RequestInfo()
    info.path = path
    segs = [s for s in path.split("/") if s]
    lower = method.upper()
    info.verb = {"GET": "get", "HEAD": "get", "POST": "post", "PUT": "put", "PATCH": "patch",
                 "DELETE": "delete"}.get(lower, lower.lower())
    if not segs or segs[0] not in ("api", "apis"):
        return info
    if segs[0] == "api":
        if len(segs) < 3:
            return info
        group, rest = "", segs[2:]
    else:
        if len(segs) < 4:
            return info
        group, rest = segs[1], segs[3:]
    info.resource_request = True
    info.group = group
    watch_prefix = False
    if rest and rest[0] == "watch":
        watch_prefix = True
        rest = rest[1:]
    if rest and rest[0] == "namespaces" and len(rest) > 1:
        info.namespace = rest[1]
        # namespaces/<ns>/<resource>/...; "namespaces/<ns>" (and its status, finalize) is the
        # Namespace object itself, whose namespace attribute is its own name.
        if len(rest) > 2 and rest[2] not in ("status", "finalize"):
            rest = rest[2:]
    if rest:
        info.resource = rest[0]
    if len(rest) > 1:
        info.name = rest[1]
    if len(rest) > 2:
        info.subresource = rest[2]
    watch_param = ((query.get("watch") or [""])[0]).lower() in ("1", "true")
    if lower in ("GET", "HEAD"):
        if watch_prefix or (not info.name and watch_param):
            info.verb = "watch"
        elif info.name:
            info.verb = "get"
        else:
            info.verb = "list"
    elif lower == "POST":
        info.verb = "create"
    elif lower == "PUT":
        info.verb = "update"
    elif lower == "DELETE":
        info.verb = "delete" if info.name else "deletecollection"
    return info


_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)   # libyaml: the deploy file holds the CRD
_loaded = {}


def _load_docs(paths):
    key = tuple(paths)
    if key not in _loaded:
        docs = []
        for p in paths:
            with open(p) as f:
                for d in yaml.load_all(f, Loader=_LOADER):
                    if isinstance(d, dict):
                        docs.append(d)
        _loaded[key] = docs
    return _loaded[key]


def _rule_ok(rule):
    for key in ("verbs",):
        if not isinstance(rule.get(key), list) or not rule[key]:
            raise ValueError("RBAC rule without %s: %r" % (key, rule))
    return rule


class Authorizer:
    """paths: YAML files of RBAC objects; docs: the objects themselves (both may be given)."""

    def __init__(self, paths=(), docs=()):
        self.paths = list(paths)
        self.cluster_roles = {}
        self.roles = {}
        self.cluster_bindings = []
        self.bindings = []
        for d in _load_docs(self.paths) + list(docs):
            kind = d.get("kind")
            api_version = str(d.get("apiVersion", ""))
            if not api_version.startswith(RBAC_GROUP + "/"):
                continue
            meta = d.get("metadata") or {}
            name = meta.get("name", "")
            ns = meta.get("namespace", "")
            rules = [_rule_ok(r) for r in (d.get("rules") or [])]
            if kind == "ClusterRole":
                self.cluster_roles[name] = rules
            elif kind == "Role":
                self.roles[(ns, name)] = rules
            elif kind == "ClusterRoleBinding":
                self.cluster_bindings.append(d)
            elif kind == "RoleBinding":
                self.bindings.append(d)

    # ---- subjects ----
    @staticmethod
    def _applies(binding, user, groups, binding_ns):
        for s in binding.get("subjects") or []:
            kind = s.get("kind")
            if kind == "ServiceAccount":
                ns = s.get("namespace") or binding_ns
                if user == "system:serviceaccount:%s:%s" % (ns, s.get("name")):
                    return True
            elif kind == "User" and s.get("name") == user:
                return True
            elif kind == "Group" and s.get("name") in groups:
                return True
        return False

    @staticmethod
    def groups_of(user):
        groups = {"system:authenticated"}
        if user.startswith("system:serviceaccount:"):
            parts = user.split(":")
            groups.add("system:serviceaccounts")
            if len(parts) == 4:
                groups.add("system:serviceaccounts:" + parts[2])
        return groups

    # ---- rules ----
    @staticmethod
    def _has(values, want):
        return "*" in values or want in values

    def _rule_allows(self, rule, info):
        if not info.resource_request:
            urls = rule.get("nonResourceURLs") or []
            for u in urls:
                if u == "*" or u == info.path or (u.endswith("*") and info.path.startswith(u[:-1])):
                    return self._has(rule.get("verbs") or [], info.verb)
            return False
        if not self._has(rule.get("verbs") or [], info.verb):
            return False
        if not self._has(rule.get("apiGroups") or [], info.group):
            return False
        resources = rule.get("resources") or []
        combined = info.resource + ("/" + info.subresource if info.subresource else "")
        ok = "*" in resources or combined in resources
        if not ok and info.subresource:
            ok = ("*/" + info.subresource) in resources
        if not ok:
            return False
        names = rule.get("resourceNames") or []
        if names:
            return info.name != "" and info.name in names
        return True

    def _roles_for(self, user, groups, namespace):
        for b in self.cluster_bindings:
            if self._applies(b, user, groups, ""):
                ref = b.get("roleRef") or {}
                if ref.get("kind") == "ClusterRole":
                    yield self.cluster_roles.get(ref.get("name"), [])
        if not namespace:
            return
        for b in self.bindings:
            bns = (b.get("metadata") or {}).get("namespace", "")
            if bns != namespace or not self._applies(b, user, groups, bns):
                continue
            ref = b.get("roleRef") or {}
            if ref.get("kind") == "ClusterRole":
                yield self.cluster_roles.get(ref.get("name"), [])
            elif ref.get("kind") == "Role":
                yield self.roles.get((bns, ref.get("name")), [])

    def allowed(self, user, info):
        if info.resource_request and info.verb == "create" and not info.name and (info.group, info.resource) in (
                ("authentication.k8s.io", "selfsubjectreviews"), ("authorization.k8s.io", "selfsubjectaccessreviews"),
                ("authorization.k8s.io", "selfsubjectrulesreviews")):
            return True       # system:basic-user, bound to every authenticated user
        if not info.resource_request:
            # system:discovery and system:public-info-viewer, bound to every authenticated user.
            if info.verb == "get" and (info.path in ("/api", "/apis", "/version", "/healthz", "/livez",
                                                     "/readyz", "/openapi/v2")
                                       or info.path.startswith("/api/") or info.path.startswith("/apis/")
                                       or info.path.startswith("/openapi/v3")):
                return True
        groups = self.groups_of(user)
        for rules in self._roles_for(user, groups, info.namespace):
            for r in rules:
                if self._rule_allows(r, info):
                    return True
        return False

    @staticmethod
    def forbidden_message(user, info):
        if not info.resource_request:
            return 'forbidden: User "%s" cannot %s path "%s"' % (user, info.verb, info.path)
        res = info.resource + ("/" + info.subresource if info.subresource else "")
        qualified = info.resource + ("." + info.group if info.group else "")     # jobs.batch
        subject = '%s "%s"' % (qualified, info.name) if info.name else qualified
        where = ('in the namespace "%s"' % info.namespace) if info.namespace else "at the cluster scope"
        return '%s is forbidden: User "%s" cannot %s resource "%s" in API group "%s" %s' % (
            subject, user, info.verb, res, info.group, where)

    def owner_finalizer_allowed(self, user, namespace, group, plural, name):
        """OwnerReferencesPermissionEnforcement: setting blockOwnerDeletion on a reference needs
        update on the owner's finalizers subresource."""
        info = RequestInfo()
        info.resource_request = True
        info.verb = "update"
        info.group = group
        info.resource = plural
        info.subresource = "finalizers"
        info.namespace = namespace
        info.name = name
        return self.allowed(user, info)


MANIFEST_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")


def manifest_objects(paths):
    """The ServiceAccounts and RBAC objects of the files, in their order: what launch.py creates
    on a real server for --rbac, and the double stores."""
    out = []
    for d in _load_docs(paths):
        api_version = str(d.get("apiVersion", ""))
        if d.get("kind") == "ServiceAccount" and api_version == "v1":
            out.append(d)
        elif d.get("kind") in MANIFEST_KINDS[1:] and api_version.startswith(RBAC_GROUP + "/"):
            out.append(d)
    return out


def service_account_user(paths):
    """The single ServiceAccount defined in the files, as a user name, or None."""
    users = []
    for d in _load_docs(paths):
        if d.get("kind") == "ServiceAccount" and str(d.get("apiVersion")) == "v1":
            meta = d.get("metadata") or {}
            users.append("system:serviceaccount:%s:%s" % (meta.get("namespace", "default"), meta.get("name")))
    return users[0] if len(users) == 1 else None


def namespaces_of(paths):
    """The namespaces the objects in the files name, sorted."""
    names = set()
    for d in _load_docs(paths):
        ns = (d.get("metadata") or {}).get("namespace")
        if isinstance(ns, str) and ns:
            names.add(ns)
    return sorted(names)
