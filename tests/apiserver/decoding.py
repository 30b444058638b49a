"""What kube-apiserver's decoder refuses before any admission, with its 400 messages: a body that
is not an object of the kind and version in the path, metadata fields of another JSON type,
undecodable base64, and built-in fields whose JSON type cannot decode into their Go type."""

import base64
import json
import string

from errors import api_error, err_bad_request, go_json_kind, go_quote
from kinds import CRD_GROUP, RBAC_GROUP


# Go types of the built-in fields builtin_kinds.py defaults and validates: a body whose
# field has another JSON type is undecodable there (400), as on the real server.
# A dict is an object with known fields; [x] an array of x; "map" a map of string to string;
# "object"/"string" just the JSON type.
_PROBE = {"httpGet": "object", "exec": "object", "tcpSocket": "object", "grpc": "object"}
_CONTAINER = {"name": "string", "image": "string", "imagePullPolicy": "string",
              "resources": {"limits": "object", "requests": "object", "claims": ["object"]},
              "ports": ["object"], "env": [{"name": "string", "valueFrom": {"fieldRef": "object"}}],
              "envFrom": ["object"], "volumeMounts": ["object"], "command": ["string"], "args": ["string"],
              "livenessProbe": _PROBE, "readinessProbe": _PROBE, "startupProbe": _PROBE,
              "terminationMessagePath": "string", "terminationMessagePolicy": "string"}
_POD_SPEC = {"containers": [_CONTAINER], "initContainers": [_CONTAINER], "ephemeralContainers": [_CONTAINER],
             "volumes": [{"name": "string", "secret": "object", "configMap": "object", "downwardAPI": "object",
                          "projected": "object", "emptyDir": "object"}],
             "tolerations": ["object"], "restartPolicy": "string", "dnsPolicy": "string",
             "schedulerName": "string", "securityContext": "object", "nodeName": "string",
             "nodeSelector": "map", "affinity": "object", "imagePullSecrets": ["object"],
             "hostname": "string", "subdomain": "string", "serviceAccountName": "string"}
_STATUS = {"conditions": ["object"], "phase": "string"}
SHAPES = {
    ("", "pods"): {"spec": _POD_SPEC, "status": _STATUS},
    ("batch", "jobs"): {"spec": {"template": {"metadata": {"labels": "map", "annotations": "map"},
                                              "spec": _POD_SPEC},
                                 "selector": {"matchLabels": "map", "matchExpressions": ["object"]},
                                 "podFailurePolicy": "object"},
                        "status": _STATUS},
    ("", "services"): {"spec": {"ports": ["object"], "selector": "map", "type": "string", "clusterIP": "string",
                                "clusterIPs": ["string"]}, "status": "object"},
    ("", "secrets"): {"data": "map", "stringData": "map", "type": "string"},
    ("", "configmaps"): {"data": "map", "binaryData": "map"},
    ("", "namespaces"): {"spec": {"finalizers": ["string"]}, "status": "object"},
    ("", "events"): {"involvedObject": "object", "source": "object"},
    ("coordination.k8s.io", "leases"): {"spec": "object"},
    ("", "serviceaccounts"): {"secrets": ["object"], "imagePullSecrets": ["object"]},
    ("apps", "deployments"): {"spec": {"template": {"metadata": {"labels": "map", "annotations": "map"},
                                                    "spec": _POD_SPEC},
                                       "selector": {"matchLabels": "map", "matchExpressions": ["object"]},
                                       "strategy": "object"},
                              "status": _STATUS},
    ("apps", "replicasets"): {"spec": {"template": {"metadata": {"labels": "map", "annotations": "map"},
                                                    "spec": _POD_SPEC},
                                       "selector": {"matchLabels": "map", "matchExpressions": ["object"]}},
                              "status": _STATUS},
    (RBAC_GROUP, "clusterroles"): {"rules": [{"verbs": ["string"], "apiGroups": ["string"],
                                              "resources": ["string"], "resourceNames": ["string"],
                                              "nonResourceURLs": ["string"]}], "aggregationRule": "object"},
    (RBAC_GROUP, "roles"): {"rules": [{"verbs": ["string"], "apiGroups": ["string"], "resources": ["string"],
                                       "resourceNames": ["string"], "nonResourceURLs": ["string"]}]},
    (RBAC_GROUP, "clusterrolebindings"): {"subjects": [{"kind": "string", "name": "string", "namespace": "string",
                                                        "apiGroup": "string"}],
                                          "roleRef": {"kind": "string", "name": "string", "apiGroup": "string"}},
    (RBAC_GROUP, "rolebindings"): {"subjects": [{"kind": "string", "name": "string", "namespace": "string",
                                                 "apiGroup": "string"}],
                                   "roleRef": {"kind": "string", "name": "string", "apiGroup": "string"}},
    (CRD_GROUP, "customresourcedefinitions"): {"spec": {"group": "string", "scope": "string",
                                                        "names": {"plural": "string", "kind": "string",
                                                                  "singular": "string", "listKind": "string"},
                                                        "versions": [{"name": "string", "schema": "object"}]},
                                               "status": "object"},
}


def shape_problem(value, shape, path):
    """(path, value, Go type) of the first field whose JSON type cannot decode into the Go type."""
    if value is None:
        return None
    if isinstance(shape, dict):
        if not isinstance(value, dict):
            return (path, value, "object")
        for k, sub in shape.items():
            if k in value:
                p = shape_problem(value[k], sub, path + "." + k)
                if p:
                    return p
        return None
    if isinstance(shape, list):
        if not isinstance(value, list):
            return (path, value, "array")
        for i, v in enumerate(value):
            p = shape_problem(v, shape[0], "%s[%d]" % (path, i))
            if p:
                return p
        return None
    if shape == "map":
        if not isinstance(value, dict):
            return (path, value, "map[string]string")
        for k, v in value.items():
            if not isinstance(v, str):
                return (path + "." + k, v, "string")
        return None
    if shape == "object" and not isinstance(value, dict):
        return (path, value, "object")
    if shape == "string" and not isinstance(value, str):
        return (path, value, "string")
    return None


def check_body_kind(kind, version, body, for_apply=False, raw=None):
    """Refuses (400) a body the decoder of the real server would not take as `kind` through
    `version` (for_apply: as an apply patch). raw: the request's bytes, which the real server
    quotes in some refusals."""
    if raw is None:
        raw = json.dumps(body, separators=(",", ":")).encode()

    def unrecognized(why):
        # handlers.transformDecodeError, with summarizeData(body, 30)
        if not raw:
            summary = "<empty>"
        elif raw[:1] == b"{":
            summary = raw[:30].decode("utf-8", "replace") + (" ..." if len(raw) > 30 else "")
        else:
            summary = raw[:30].hex() + (" ..." if len(raw) > 30 else "")
        return err_bad_request("the object provided is unrecognized (must be of type %s): %s (%s)" % (
            kind.kind, why, summary))

    if not isinstance(body, dict):
        if isinstance(body, (str, list, int, float)):
            go = "string" if isinstance(body, str) else "array" if isinstance(body, list) else \
                "bool" if isinstance(body, bool) else "number"
            raise unrecognized('couldn\'t get version/kind; json parse error: json: cannot unmarshal %s into '
                               'Go value of type struct { APIVersion string "json:\\"apiVersion,omitempty\\""; '
                               'Kind string "json:\\"kind,omitempty\\"" }' % go)
        raise err_bad_request("the body of the request must be a JSON object")
    api_version = body.get("apiVersion")
    k = body.get("kind")

    def undecodable(field, value, go_type):
        return err_bad_request('%s in version "%s" cannot be handled as a %s: json: cannot unmarshal %s into '
                               'Go struct field %s of type %s' % (kind.kind, version, kind.kind,
                                                                  go_json_kind(value), field, go_type))

    for field, value in (("apiVersion", api_version), ("kind", k)):
        if value is not None and not isinstance(value, str):
            raise undecodable(field, value, "string")
    if kind.crd and not for_apply and not k:
        raise unrecognized("Object 'Kind' is missing in '%s'" % raw[:1024].decode("utf-8", "replace"))
    if kind.crd and not for_apply and k != kind.kind and isinstance(body.get("metadata"), dict):
        # a custom resource's decoder takes any kind; validation then names it
        name = body["metadata"].get("name") or ""
        raise api_error(422, "Invalid", '%s.%s "%s" is invalid: kind: Invalid value: %s: must be %s' % (
            k, kind.group, name, go_quote(k), kind.kind),
            {"name": name, "group": kind.group, "kind": k,
             "causes": [{"reason": "FieldValueInvalid", "message": "Invalid value: %s: must be %s" % (
                 go_quote(k), kind.kind), "field": "kind"}]})
    if kind.crd or for_apply:
        if not k:
            raise err_bad_request("Object 'Kind' is missing in '%s'" % json.dumps(
                body, separators=(",", ":"))[:1024])
        if not api_version:
            raise err_bad_request("Object 'apiVersion' is missing in '%s'" % json.dumps(
                body, separators=(",", ":"))[:1024])
    if k and k != kind.kind:
        raise err_bad_request('%s in version "%s" cannot be handled as a %s: the object provided is '
                              'unrecognized (must be of type %s)' % (k, version, kind.kind, kind.kind))
    if api_version:
        g, _, v = api_version.rpartition("/")
        if g != kind.group or v not in kind.versions:
            raise err_bad_request('the API version in the data (%s) does not match the expected API '
                                  'version (%s)' % (api_version, kind.gv(version)))
    meta = body.get("metadata")
    if meta is None:
        body["metadata"] = meta = {}
    elif not isinstance(meta, dict):
        raise undecodable("%s.metadata" % kind.kind, meta, "v1.ObjectMeta")
    for field in ("name", "generateName", "namespace", "resourceVersion", "uid", "creationTimestamp",
                  "deletionTimestamp"):
        if meta.get(field) is not None and not isinstance(meta[field], str):
            raise undecodable("ObjectMeta.metadata." + field, meta[field], "string")
    for field in ("labels", "annotations"):
        value = meta.get(field)
        if value is None:
            continue
        if not isinstance(value, dict):
            raise undecodable("ObjectMeta.metadata." + field, value, "map[string]string")
        for v in value.values():
            if not isinstance(v, str):
                raise undecodable("ObjectMeta.metadata." + field, v, "string")
    fin = meta.get("finalizers")
    if fin is not None and (not isinstance(fin, list) or not all(isinstance(f, str) for f in fin)):
        raise undecodable("ObjectMeta.metadata.finalizers", fin, "[]string")
    refs = meta.get("ownerReferences")
    if refs is not None:
        if not isinstance(refs, list) or not all(isinstance(r, dict) for r in refs):
            raise undecodable("ObjectMeta.metadata.ownerReferences", refs, "[]v1.OwnerReference")
        for r in refs:
            for field in ("apiVersion", "kind", "name", "uid"):
                if r.get(field) is not None and not isinstance(r[field], str):
                    raise undecodable("OwnerReference.metadata.ownerReferences." + field, r[field], "string")
    gen = meta.get("generation")
    if gen is not None and (isinstance(gen, bool) or not isinstance(gen, int)):
        raise undecodable("ObjectMeta.metadata.generation", gen, "int64")
    if kind.skey in (("", "secrets"), ("", "configmaps")):
        field = "data" if kind.skey == ("", "secrets") else "binaryData"
        for v in (body.get(field) or {}).values() if isinstance(body.get(field), dict) else ():
            if isinstance(v, str):
                try:
                    base64.b64decode(v, validate=True)
                except ValueError:
                    alphabet = string.ascii_letters + string.digits + "+/="
                    at = next((i for i, ch in enumerate(v) if ch not in alphabet), len(v) // 4 * 4)
                    raise err_bad_request('%s in version "%s" cannot be handled as a %s: illegal base64 '
                                          'data at input byte %d' % (kind.kind, version, kind.kind, at))
    if not kind.crd:
        problem = shape_problem({k: v for k, v in body.items() if k != "metadata"},
                                SHAPES.get(kind.skey, {"spec": "object", "status": "object"}), kind.kind)
        if problem:
            raise undecodable(*problem)
