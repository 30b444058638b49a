"""Kubernetes protobuf request bodies, decoded to the JSON form the double stores.

kubectl's `create` subcommands (namespace, configmap, secret, serviceaccount, clusterrole, token,
...) and `auth whoami` send
their object as
`application/vnd.kubernetes.protobuf`: the 4 bytes "k8s\\0", then a runtime.Unknown message
{1: typeMeta {1: apiVersion, 2: kind}, 2: raw, 3: contentEncoding, 4: contentType} whose raw
field holds the object in the protobuf form of k8s.io/api (generated.proto).

Only v1 Namespace, ConfigMap, Secret and ServiceAccount, the four RBAC kinds, and
authentication.k8s.io/v1 TokenRequest and SelfSubjectReview are described here. Any other kind,
and any field of
those that is set but not described, is refused with ProtobufError naming it, rather than
dropped: an object must never lose a field on its way in.
"""

import base64

MAGIC = b"k8s\x00"


class ProtobufError(ValueError):
    pass


# ---- wire format -----------------------------------------------------------------------

def _varint(buf, i):
    shift = value = 0
    while True:
        if i >= len(buf):
            raise ProtobufError("truncated varint")
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, i
        shift += 7
        if shift > 63:
            raise ProtobufError("varint longer than 64 bits")


def fields(buf):
    """(field number, wire type, value) for each field of a message; value is an int for
    varints and fixed-size fields, bytes for length-delimited ones."""
    i = 0
    while i < len(buf):
        key, i = _varint(buf, i)
        num, wt = key >> 3, key & 7
        if num == 0:
            raise ProtobufError("field number 0")
        if wt == 0:
            v, i = _varint(buf, i)
        elif wt == 1:
            if i + 8 > len(buf):
                raise ProtobufError("truncated fixed64")
            v, i = int.from_bytes(buf[i:i + 8], "little"), i + 8
        elif wt == 2:
            n, i = _varint(buf, i)
            if i + n > len(buf):
                raise ProtobufError("length-delimited field %d runs past the end" % num)
            v, i = bytes(buf[i:i + n]), i + n
        elif wt == 5:
            if i + 4 > len(buf):
                raise ProtobufError("truncated fixed32")
            v, i = int.from_bytes(buf[i:i + 4], "little"), i + 4
        else:
            raise ProtobufError("wire type %d (groups) is not used by Kubernetes" % wt)
        yield num, wt, v


def _key(num, wt):
    return _enc_varint(num << 3 | wt)


def _enc_varint(v):
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        out.append(b | (0x80 if v else 0))
        if not v:
            return bytes(out)


def _enc_bytes(num, data):
    return _key(num, 2) + _enc_varint(len(data)) + data


# ---- schemas: field number -> (JSON name, type) ----------------------------------------------
# types: "string", "bytes" (base64 in JSON), "bool", "int", ("map", value type),
# ("repeated", type), a schema dict (a nested message), None (ignored when empty)

OBJECT_META = {
    1: ("name", "string"),
    2: ("generateName", "string"),
    3: ("namespace", "string"),
    8: ("creationTimestamp", None),   # a non-nullable Time, sent empty by clients
    11: ("labels", ("map", "string")),
    12: ("annotations", ("map", "string")),
    14: ("finalizers", ("repeated", "string")),
}

POLICY_RULE = {1: ("verbs", ("repeated", "string")), 2: ("apiGroups", ("repeated", "string")),
               3: ("resources", ("repeated", "string")), 4: ("resourceNames", ("repeated", "string")),
               5: ("nonResourceURLs", ("repeated", "string"))}
BINDING = {
    1: ("metadata", OBJECT_META),
    2: ("subjects", ("repeated", {1: ("kind", "string"), 2: ("apiGroup", "string"), 3: ("name", "string"),
                                  4: ("namespace", "string")})),
    3: ("roleRef", {1: ("apiGroup", "string"), 2: ("kind", "string"), 3: ("name", "string")}),
}

KINDS = {
    ("v1", "Namespace"): {
        1: ("metadata", OBJECT_META),
        2: ("spec", {1: ("finalizers", ("repeated", "string"))}),
        3: ("status", None),
    },
    ("v1", "ConfigMap"): {
        1: ("metadata", OBJECT_META),
        2: ("data", ("map", "string")),
        3: ("binaryData", ("map", "bytes")),
        4: ("immutable", "bool"),
    },
    ("v1", "Secret"): {
        1: ("metadata", OBJECT_META),
        2: ("data", ("map", "bytes")),
        3: ("type", "string"),
        4: ("stringData", ("map", "string")),
        5: ("immutable", "bool"),
    },
    ("v1", "ServiceAccount"): {
        1: ("metadata", OBJECT_META),
        2: ("secrets", None),
        3: ("imagePullSecrets", ("repeated", {1: ("name", "string")})),
        4: ("automountServiceAccountToken", "bool"),
    },
    ("rbac.authorization.k8s.io/v1", "ClusterRole"): {
        1: ("metadata", OBJECT_META),
        2: ("rules", ("repeated", POLICY_RULE)),
        3: ("aggregationRule", None),
    },
    ("rbac.authorization.k8s.io/v1", "Role"): {
        1: ("metadata", OBJECT_META),
        2: ("rules", ("repeated", POLICY_RULE)),
    },
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): BINDING,
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): BINDING,
    # kubectl create token
    ("authentication.k8s.io/v1", "TokenRequest"): {
        1: ("metadata", OBJECT_META),
        2: ("spec", {1: ("audiences", ("repeated", "string")),
                     3: ("boundObjectRef", {1: ("kind", "string"), 2: ("apiVersion", "string"),
                                            3: ("name", "string"), 4: ("uid", "string")}),
                     4: ("expirationSeconds", "int")}),
        3: ("status", None),
    },
    # kubectl auth whoami
    ("authentication.k8s.io/v1", "SelfSubjectReview"): {
        1: ("metadata", OBJECT_META),
        2: ("status", None),
    },
}


def _scalar(t, wt, v, where):
    if t == "string":
        if wt != 2:
            raise ProtobufError("%s: expected a string" % where)
        try:
            return v.decode("utf-8")
        except UnicodeDecodeError:
            raise ProtobufError("%s: not UTF-8" % where)
    if t == "bytes":
        if wt != 2:
            raise ProtobufError("%s: expected bytes" % where)
        return base64.b64encode(v).decode("ascii")
    if t == "bool":
        if wt != 0:
            raise ProtobufError("%s: expected a bool" % where)
        return bool(v)
    if t == "int":
        if wt != 0:
            raise ProtobufError("%s: expected an integer" % where)
        return v - (1 << 64) if v >= 1 << 63 else v
    raise ProtobufError("%s: no decoder for %r" % (where, t))


def _is_zero(wt, v):
    """Go's generated marshallers write every non-pointer field, zero or not: an empty string,
    a 0, or a message (a Time, say) whose own fields are all zero says nothing."""
    if wt != 2:
        return v == 0
    if not v:
        return True
    try:
        return all(_is_zero(w, x) for _, w, x in fields(v))
    except ProtobufError:
        return False


def decode_message(buf, schema, where):
    out = {}
    for num, wt, v in fields(buf):
        name, t = schema.get(num, (None, None))
        here = "%s.%s" % (where, name) if name else "%s: field %d" % (where, num)
        if t is None:
            if not _is_zero(wt, v):
                raise ProtobufError("%s is set, and this API server does not decode it from protobuf; "
                                    "send the object as JSON (kubectl apply -f)" % here)
            continue
        if t == "string" and wt == 2 and not v:
            continue  # an unset string
        if isinstance(t, dict):
            if wt != 2:
                raise ProtobufError("%s: expected a message" % here)
            out[name] = decode_message(v, t, here)
        elif isinstance(t, tuple) and t[0] == "map":
            if wt != 2:
                raise ProtobufError("%s: expected a map entry" % here)
            key, value = "", None
            for enum, ewt, ev in fields(v):
                if enum == 1:
                    key = _scalar("string", ewt, ev, here + " key")
                elif enum == 2:
                    value = _scalar(t[1], ewt, ev, "%s[%s]" % (here, key))
            out.setdefault(name, {})[key] = value if value is not None else ""
        elif isinstance(t, tuple) and t[0] == "repeated" and isinstance(t[1], dict):
            if wt != 2:
                raise ProtobufError("%s: expected a message" % here)
            out.setdefault(name, []).append(decode_message(v, t[1], "%s[%d]" % (here, len(out.get(name, [])))))
        elif isinstance(t, tuple) and t[0] == "repeated":
            out.setdefault(name, []).append(_scalar(t[1], wt, v, here))
        else:
            out[name] = _scalar(t, wt, v, here)
    return out


def decode(body):
    """The JSON object of a Kubernetes protobuf body. Raises ProtobufError with a message for
    a person when the body is malformed or holds what is not described here."""
    if not body.startswith(MAGIC):
        raise ProtobufError("the body does not start with the Kubernetes protobuf prefix")
    api_version = kind = ""
    raw = None
    for num, wt, v in fields(body[len(MAGIC):]):
        if num == 1 and wt == 2:
            for tnum, twt, tv in fields(v):
                if tnum == 1:
                    api_version = _scalar("string", twt, tv, "typeMeta.apiVersion")
                elif tnum == 2:
                    kind = _scalar("string", twt, tv, "typeMeta.kind")
        elif num == 2 and wt == 2:
            raw = v
        elif num == 3 and wt == 2 and v:
            raise ProtobufError("contentEncoding %r is not supported" % v.decode("utf-8", "replace"))
    schema = KINDS.get((api_version, kind))
    if schema is None:
        raise ProtobufError("this API server decodes protobuf bodies only for %s; send %s %s as "
                            "JSON (kubectl apply -f does)" % (
                                ", ".join("%s %s" % k for k in sorted(KINDS)), api_version or "?", kind or "?"))
    obj = {"apiVersion": api_version, "kind": kind}
    obj.update(decode_message(raw or b"", schema, kind))
    return obj


# ---- encoding, for tests -------------------------------------------------------------------

def _enc_scalar(num, t, value):
    if t == "string":
        return _enc_bytes(num, value.encode("utf-8"))
    if t == "bytes":
        return _enc_bytes(num, base64.b64decode(value))
    if t in ("bool", "int"):
        return _key(num, 0) + _enc_varint(int(value) & ((1 << 64) - 1))
    raise ProtobufError("no encoder for %r" % t)


def encode_message(obj, schema):
    out = b""
    for num in sorted(schema):
        name, t = schema[num]
        if name not in obj or t is None:
            continue
        v = obj[name]
        if isinstance(t, dict):
            out += _enc_bytes(num, encode_message(v, t))
        elif isinstance(t, tuple) and t[0] == "map":
            for k in sorted(v):
                out += _enc_bytes(num, _enc_scalar(1, "string", k) + _enc_scalar(2, t[1], v[k]))
        elif isinstance(t, tuple) and t[0] == "repeated":
            for x in v:
                out += _enc_bytes(num, encode_message(x, t[1])) if isinstance(t[1], dict) else \
                    _enc_scalar(num, t[1], x)
        else:
            out += _enc_scalar(num, t, v)
    return out


def encode(obj):
    """A Kubernetes protobuf body for obj (one of KINDS)."""
    schema = KINDS[(obj["apiVersion"], obj["kind"])]
    type_meta = _enc_scalar(1, "string", obj["apiVersion"]) + _enc_scalar(2, "string", obj["kind"])
    return MAGIC + _enc_bytes(1, type_meta) + _enc_bytes(2, encode_message(obj, schema)) + \
        _enc_bytes(4, b"application/vnd.kubernetes.protobuf")
