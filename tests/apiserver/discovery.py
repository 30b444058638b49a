"""What kubectl asks for beyond the resource API: discovery (/version, /api, /apis, aggregated
discovery), OpenAPI v3 documents and the minimal v2 one, and the Accept header negotiation
that picks them."""

import copy
import hashlib
import json

import release
from kinds import CRD_GROUP, RBAC_GROUP

DISCOVERY_GVS = ("v2", "v2beta1")             # apidiscovery.k8s.io versions served


def parse_accept(header):
    """The media ranges of an Accept header, in order: [(type, {param: value})]."""
    out = []
    for part in (header or "").split(","):
        pieces = [p.strip() for p in part.split(";")]
        if not pieces or not pieces[0]:
            continue
        params = {}
        for p in pieces[1:]:
            k, sep, v = p.partition("=")
            if sep:
                params[k.strip().lower()] = v.strip().strip('"')
        out.append((pieces[0].lower(), params))
    return out


def negotiate(header, group, kinds_as, versions):
    """The version of `group`'s `kinds_as` (e.g. meta.k8s.io Table) the client asks for before
    any plain JSON, or None when plain JSON comes first (or is all it accepts)."""
    for mtype, params in parse_accept(header):
        if mtype not in ("application/json", "application/*", "*/*"):
            continue
        if "as" not in params:
            return None
        if params.get("g") == group and params.get("as") == kinds_as and params.get("v") in versions:
            return params["v"]
    return None


OPENAPI_V2_PB = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"


def served_in(kinds, group, version):
    """The kinds served in a group-version, by resource name."""
    return sorted([k for k in kinds if k.group == group and version in k.versions], key=lambda k: k.plural)


def resource_verbs(kind):
    """The verbs discovery names for a resource, in the real server's order (another one for
    custom resources)."""
    if kind.create_only:
        return ["create"]
    if kind.crd:
        return ["delete", "deletecollection", "get", "list", "patch", "create", "update", "watch"]
    return ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]


def with_names(kind, resource):
    """A discovery entry with the kind's shortNames and categories, where it has them."""
    if kind.short:
        resource["shortNames"] = list(kind.short)
    if kind.categories:
        resource["categories"] = list(kind.categories)
    return resource


def openapi_v2_protobuf():
    """A minimal OpenAPI v2 document in protobuf (gnostic openapi_v2.Document: swagger = 1,
    info = 2 {title = 1, version = 2}, paths = 8), which is how kubectl reads /openapi/v2: it names
    no path, so kubectl validates nothing against it and reports unknown kinds as on a real server."""
    def field(num, payload):
        assert len(payload) < 128
        return bytes([num << 3 | 2, len(payload)]) + payload
    info = field(1, b"Kubernetes") + field(2, b"v1.32.13")
    return field(1, b"2.0") + field(2, info) + field(8, b"")


def openapi_gv_path(group, version):
    return "api/" + version if not group else "apis/%s/%s" % (group, version)


def _param(name, where, description, ptype="string", required=False):
    p = {"name": name, "in": where, "description": description, "schema": {"type": ptype, "uniqueItems": True}}
    if required:
        p["required"] = True
    return p


def openapi_schema_name(kind, version):
    """The components/schemas key of a kind: io.k8s.api.core.v1.Pod, org.kubeflow.v2beta1.MPIJob."""
    if not kind.crd:
        if kind.group == CRD_GROUP:
            return "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.%s.%s" % (version, kind.kind)
        pkg = {"": "core", "batch": "batch", "coordination.k8s.io": "coordination", RBAC_GROUP: "rbac",
               "discovery.k8s.io": "discovery", "authentication.k8s.io": "authentication"}.get(kind.group,
                                                                                               kind.group)
        return "io.k8s.api.%s.%s.%s" % (pkg, version, kind.kind)
    return "%s.%s.%s" % (".".join(reversed(kind.group.split("."))), version, kind.kind)


def openapi_gv_document(kinds, group, version):
    """An OpenAPI v3 document of one group-version: every path with its operations, tagged with
    x-kubernetes-group-version-kind, the PATCH ones naming fieldValidation (what kubectl checks
    before it leaves validation to the server), and each kind's schema."""
    paths, schemas = {}, {}
    gv = openapi_gv_path(group, version)
    for kind in served_in(kinds, group, version):
        gvk = {"group": group, "version": version, "kind": kind.kind}
        ref = {"$ref": "#/components/schemas/" + openapi_schema_name(kind, version)}
        ok = {"200": {"description": "OK", "content": {"application/json": {"schema": ref}}}}
        write_params = [
            _param("dryRun", "query", "When present, indicates that modifications should not be persisted."),
            _param("fieldManager", "query", "fieldManager is a name associated with the actor or entity that is "
                   "making these changes."),
            _param("fieldValidation", "query", "fieldValidation instructs the server on how to handle objects in "
                   "the request containing unknown or duplicate fields: Ignore, Warn or Strict."),
        ]
        patch_types = ["application/json-patch+json", "application/merge-patch+json", "application/apply-patch+yaml"]
        body = {"content": {"*/*": {"schema": ref}}, "required": True}

        def op(action, params=(), request=None, tag=kind.kind):
            o = {"tags": [tag], "description": "%s %s" % (action, kind.kind), "operationId": action + kind.kind,
                 "responses": ok, "x-kubernetes-action": action, "x-kubernetes-group-version-kind": gvk}
            if params:
                o["parameters"] = list(params)
            if request is not None:
                o["requestBody"] = request
            return o
        base = "/" + gv + ("/namespaces/{namespace}" if kind.namespaced else "") + "/" + kind.plural
        common = [_param("pretty", "query", "If 'true', then the output is pretty printed.")]
        if kind.namespaced:
            common.insert(0, _param("namespace", "path", "object name and auth scope", required=True))
        named = [_param("name", "path", "name of the %s" % kind.kind, required=True)] + common
        if kind.create_only:
            paths[base] = {"post": op("post", write_params, body), "parameters": common}
            schemas[openapi_schema_name(kind, version)] = {"type": "object", "x-kubernetes-preserve-unknown-fields":
                                                           True, "x-kubernetes-group-version-kind": [gvk]}
            continue
        paths[base] = {"get": op("list"), "post": op("post", write_params, body),
                       "delete": op("deletecollection"), "parameters": common}
        patch = op("patch", write_params + [_param("force", "query", "Force is going to \"force\" Apply requests.",
                                                   "boolean")],
                   {"content": {t: {"schema": {"type": "object"}} for t in patch_types}, "required": True})
        paths[base + "/{name}"] = {"get": op("get"), "put": op("put", write_params, body), "patch": patch,
                                   "delete": op("delete"), "parameters": named}
        if kind.status:
            paths[base + "/{name}/status"] = {"get": op("get"), "put": op("put", write_params, body),
                                              "patch": copy.deepcopy(patch), "parameters": named}
        schema = copy.deepcopy(kind.schema_for(version)) if kind.crd and kind.schema_for(version) else \
            {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
        schema["x-kubernetes-group-version-kind"] = [gvk]
        schemas[openapi_schema_name(kind, version)] = schema
    return {"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": release.version()["gitVersion"]}, "paths": paths,
            "components": {"schemas": schemas}}


class Discovery:
    """The discovery and OpenAPI documents of what Api serves now, a part of Api (api.py)."""

    def discovery(self, segs):
        """segs: the path split; returns a body or None when the path is not a discovery path."""
        if segs == ["version"]:
            return dict(release.version(), **(getattr(self, "version_override", None) or {}))
        if segs == ["api"]:
            return {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [
                {"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1:%d" % self.port}]}
        if segs == ["api", "v1"]:
            return self._resource_list("", "v1", legacy=True)
        if segs == ["apis"]:
            groups = []
            for g, vs in self.store.groups().items():
                groups.append(self._group(g, vs))
            return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}
        if len(segs) == 2 and segs[0] == "apis":
            vs = self.store.groups().get(segs[1])
            if vs:
                body = self._group(segs[1], vs)
                return {"kind": "APIGroup", "apiVersion": "v1", **body}
            return None
        if len(segs) == 3 and segs[0] == "apis":
            vs = self.store.groups().get(segs[1])
            if vs and segs[2] in vs:
                return self._resource_list(segs[1], segs[2])
        if segs[:2] == ["openapi", "v3"]:
            return self.openapi_v3(segs[2:])
        if segs == ["openapi", "v2"]:
            return {"swagger": "2.0", "info": {"title": "Kubernetes", "version": release.version()["gitVersion"]}, "paths": {}}
        return None

    def openapi_v3(self, rest):
        """/openapi/v3 (the index of group-versions) and /openapi/v3/<gv path> (one document)."""
        with self.store.lock:
            kinds = list(self.store.kinds)
        gvs = [("", "v1")] + [(g, v) for g, vs in self.store.groups().items() for v in vs]
        if not rest:
            index = {}
            for g, v in gvs:
                doc = json.dumps(openapi_gv_document(kinds, g, v), sort_keys=True).encode()
                digest = hashlib.sha512(doc).hexdigest()[:128].upper()
                index[openapi_gv_path(g, v)] = {"serverRelativeURL": "/openapi/v3/%s?hash=%s" % (
                    openapi_gv_path(g, v), digest)}
            return {"paths": index}
        for g, v in gvs:
            if "/".join(rest) == openapi_gv_path(g, v):
                return openapi_gv_document(kinds, g, v)
        return None

    def aggregated_discovery(self, root, version):
        """The apidiscovery.k8s.io APIGroupDiscoveryList of /api (root "api") or /apis."""
        with self.store.lock:
            kinds = list(self.store.kinds)
        groups = [("", ["v1"])] if root == "api" else list(self.store.groups().items())
        items = []
        for g, vs in groups:
            versions = []
            for v in vs:
                resources = []
                for k in served_in(kinds, g, v):
                    gvk = {"group": g, "version": v, "kind": k.kind}
                    r = with_names(k, {"resource": k.plural, "responseKind": gvk,
                                       "scope": "Namespaced" if k.namespaced else "Cluster",
                                       "singularResource": k.singular, "verbs": resource_verbs(k)})
                    subs = []
                    if k.status:
                        subs.append({"subresource": "status", "responseKind": gvk,
                                     "verbs": ["get", "patch", "update"]})
                    for sub, (sg, sv, skind, sverbs) in sorted(k.subresources.items()):
                        subs.append({"subresource": sub, "responseKind": {"group": sg, "version": sv, "kind": skind},
                                     "verbs": list(sverbs)})
                    if subs:
                        r["subresources"] = subs
                    resources.append(r)
                versions.append({"version": v, "resources": resources, "freshness": "Current"})
            meta = {"name": g, "creationTimestamp": None} if g else {"creationTimestamp": None}
            items.append({"metadata": meta, "versions": versions})
        return {"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/" + version,
                "metadata": {}, "items": items}

    def _group(self, g, vs):
        return {"name": g, "versions": [{"groupVersion": "%s/%s" % (g, v), "version": v} for v in vs],
                "preferredVersion": {"groupVersion": "%s/%s" % (g, vs[0]), "version": vs[0]}}

    def _resource_list(self, group, version, legacy=False):
        resources = []
        for k in served_in(self.store.kinds, group, version):
            r = with_names(k, {"name": k.plural, "singularName": k.singular, "namespaced": k.namespaced,
                               "kind": k.kind, "verbs": resource_verbs(k)})
            r["storageVersionHash"] = k.storage_version_hash(version)
            resources.append(r)
            if k.status:
                resources.append({"name": k.plural + "/status", "singularName": "", "namespaced": k.namespaced,
                                  "kind": k.kind, "verbs": ["get", "patch", "update"]})
            for sub, (sg, sv, skind, sverbs) in sorted(k.subresources.items()):
                r = {"name": "%s/%s" % (k.plural, sub), "singularName": "", "namespaced": k.namespaced,
                     "group": sg, "version": sv, "kind": skind, "verbs": list(sverbs)}
                if not sg and not sv:   # a kind of the resource's own group and version: not named
                    del r["group"], r["version"]
                resources.append(r)
        if legacy:
            return {"kind": "APIResourceList", "groupVersion": "v1", "resources": resources}
        return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "%s/%s" % (group, version),
                "resources": resources}
