"""Structural OpenAPI v3 schemas of CustomResourceDefinitions, applied the way kube-apiserver
applies them to a custom resource on create and update (Python 3.11 standard library only).

The server's order, and the functions here:

    obj = prune(schema, obj)            fields the schema does not know are dropped
                                        (unknown_fields lists them first: the warnings, or the
                                        400 under fieldValidation=Strict)
    obj = apply_defaults(schema, obj)   nulls of non-nullable fields dropped, defaults filled in
    causes = validate(schema, obj)      422 Invalid, details.causes

`admit(schema, obj)` runs the three. A cause is {"reason", "message", "field"} worded like
kube-apiserver 1.32 (see recordings/22-cr-schema-invalid.txt):

    FieldValueTypeInvalid   Invalid value: "string": spec.size in body must be of type integer: "string"
    FieldValueNotSupported  Unsupported value: "Sometimes": supported values: "OnFailure", "Never"
    FieldValueRequired      Required value
    FieldValueInvalid       Invalid value: 0: spec.n in body should be greater than or equal to 1
    FieldValueTooLong       Too long: may not be more than 15 bytes
    FieldValueTooMany       Too many: 20: must have at most 16 items
    FieldValueDuplicate     Duplicate value: map[string]interface {}{"name":"a"}

Field paths are dotted, list items `[i]`, map keys dotted too (`spec.x.limits.cpu`). At the root
of a resource, `apiVersion`, `kind` and `metadata` are the server's business: metadata is neither
pruned nor validated here.

CEL rules (`x-kubernetes-validations`) are not evaluated: `validation_rules(schema)` and
`transition_rules(schema)` list them, and `structural_problems(schema)` checks that the fields
they name exist. `structural_problems` also checks what the server checks before it accepts a
CRD: types everywhere, properties and additionalProperties never together, list-map keys
required or defaulted, defaults valid and already pruned.
"""

import copy
import json
import re

import release

__all__ = ["validate", "apply_defaults", "prune", "unknown_fields", "admit", "json_type",
           "validation_rules", "transition_rules", "structural_problems", "crd_version_schema"]

ROOT_SERVER_FIELDS = ("apiVersion", "kind", "metadata")
INT_OR_STRING_ANYOF = [{"type": "integer"}, {"type": "string"}]


# ----------------------------------------------------------------------------------------------
# Values as Go sees them
# ----------------------------------------------------------------------------------------------

def _float_type(value):
    """kube-openapi counts a float64 as an integer when it is whole and within +-(2**53 - 1)."""
    if value.is_integer() and abs(value) <= (1 << 53) - 1:
        return "integer"
    return "number"


def json_type(value):
    """The JSON type name the server reports: integer for 3 and 3.0, number for 3.5 and 1e20."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        # a JSON integer that does not fit int64 is decoded as a float64
        return "integer" if -(1 << 63) <= value < (1 << 63) else _float_type(float(value))
    if isinstance(value, float):
        return _float_type(value)
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def go_quote(s):
    """strconv.Quote, closely enough: JSON escaping without escaping non-ASCII."""
    return json.dumps(s, ensure_ascii=False)


def go_number(v):
    if isinstance(v, float) and v.is_integer() and abs(v) < 1e21:
        return str(int(v))
    if isinstance(v, float):
        return repr(v).replace("inf", "+Inf")
    return str(v)


def go_value(v):
    """How field.Error prints a bad value: %q for strings, %v for numbers, %#v for the rest."""
    if isinstance(v, str):
        return go_quote(v)
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return go_number(v)
    if v is None:
        return "null"
    if isinstance(v, dict):
        return "map[string]interface {}{%s}" % ", ".join(
            "%s:%s" % (go_quote(k), go_nested(v[k])) for k in sorted(v))
    return "[]interface {}{%s}" % ", ".join(go_nested(x) for x in v)


def go_nested(v):
    if isinstance(v, str):
        return go_quote(v)
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return go_number(v)
    if v is None:
        return "interface {}(nil)"
    return go_value(v)


def same_value(a, b):
    """JSON equality: True is not 1, 1 is 1.0."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same_value(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b))
    return a == b


def cause(reason, field, message):
    return {"reason": reason, "message": message, "field": field}


def type_invalid(field, actual, expected):
    return cause("FieldValueTypeInvalid", field, 'Invalid value: "%s": %s in body must be of type '
                 '%s: "%s"' % (actual, field, expected, actual))


def invalid(field, value, detail):
    return cause("FieldValueInvalid", field, "Invalid value: %s: %s" % (go_value(value), detail))


def join(path, key):
    return path + "." + key if path else key


# ----------------------------------------------------------------------------------------------
# Schema navigation
# ----------------------------------------------------------------------------------------------

def is_int_or_string(schema):
    return bool(schema.get("x-kubernetes-int-or-string")) or (
        schema.get("type") == "string" and schema.get("format") == "int-or-string")


def preserves_unknown(schema):
    return bool(schema.get("x-kubernetes-preserve-unknown-fields"))


def field_schema(schema, key):
    """Schema of object field `key`, or None when the schema does not know it."""
    props = schema.get("properties")
    if props is not None and key in props:
        return props[key]
    addl = schema.get("additionalProperties")
    if isinstance(addl, dict):
        return addl
    if addl is True:
        return {}
    return None


def knows_every_field(schema):
    """True when a field missing from properties is unknown (pruned)."""
    if preserves_unknown(schema):
        return False
    addl = schema.get("additionalProperties")
    return not (isinstance(addl, dict) or addl is True)


def is_root_server_field(path, key):
    return path == "" and key in ROOT_SERVER_FIELDS


# ----------------------------------------------------------------------------------------------
# Pruning and unknown fields
# ----------------------------------------------------------------------------------------------

def unknown_fields(schema, obj, path=""):
    """Paths of the fields pruning would drop, in document order (strict field validation
    reports them as `unknown field "spec.colour"`)."""
    out = []
    _unknown(schema or {}, obj, path, out)
    return out


def _unknown(schema, value, path, out):
    if isinstance(value, dict):
        for k, v in value.items():
            p = join(path, k)
            if is_root_server_field(path, k) and k == "metadata":
                continue
            sub = field_schema(schema, k)
            if sub is not None:
                _unknown(sub, v, p, out)
            elif is_root_server_field(path, k):
                continue
            elif knows_every_field(schema) and (schema.get("type") == "object" or
                                                 "properties" in schema):
                out.append(p)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, v in enumerate(value):
            _unknown(schema["items"], v, "%s[%d]" % (path, i), out)


def prune(schema, obj, path=""):
    """A copy of obj without the fields the schema does not know."""
    return _prune(schema or {}, obj, path)


def _prune(schema, value, path):
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if is_root_server_field(path, k) and k == "metadata":
                out[k] = copy.deepcopy(v)
                continue
            sub = field_schema(schema, k)
            if sub is not None:
                out[k] = _prune(sub, v, join(path, k))
            elif (is_root_server_field(path, k) or not knows_every_field(schema) or
                  not (schema.get("type") == "object" or "properties" in schema)):
                out[k] = copy.deepcopy(v)
        return out
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [_prune(schema["items"], v, "%s[%d]" % (path, i)) for i, v in enumerate(value)]
    return copy.deepcopy(value)


# ----------------------------------------------------------------------------------------------
# Defaulting
# ----------------------------------------------------------------------------------------------

def apply_defaults(schema, obj, path=""):
    """A copy of obj with defaults filled in, top down, so that a defaulted object gets its own
    fields' defaults too. A null in a field that is not nullable is dropped first, then
    defaulted if the field has a default (a nullable field keeps its null)."""
    return _default(schema or {}, copy.deepcopy(obj), path)


def _default(schema, value, path):
    if isinstance(value, dict):
        skip = {"metadata"} if path == "" else set()
        for k in list(value):
            if k in skip:
                continue
            sub = field_schema(schema, k)
            if sub is not None and value[k] is None and not sub.get("nullable"):
                if "default" in sub:
                    value[k] = copy.deepcopy(sub["default"])
                else:
                    del value[k]
        for k, sub in (schema.get("properties") or {}).items():
            if k not in value and "default" in sub and k not in skip:
                value[k] = copy.deepcopy(sub["default"])
        for k in list(value):
            if k in skip:
                continue
            sub = field_schema(schema, k)
            if sub is not None:
                value[k] = _default(sub, value[k], join(path, k))
        return value
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        items = schema["items"]
        out = []
        for i, v in enumerate(value):
            if v is None and "default" in items and not items.get("nullable"):
                v = copy.deepcopy(items["default"])
            out.append(_default(items, v, "%s[%d]" % (path, i)))
        return out
    return value


# ----------------------------------------------------------------------------------------------
# Validation
# ----------------------------------------------------------------------------------------------

def validate(schema, obj, path=""):
    """Every way obj breaks the schema, as 422 causes. Pass a pruned and defaulted object to see
    what the server would answer."""
    out = []
    _validate(schema or {}, obj, path, out)
    return out


def _type_ok(expected, actual):
    if expected == actual:
        return True
    return expected == "number" and actual == "integer"


def _validate(schema, value, path, out):
    if value is None and schema.get("nullable"):
        return
    actual = json_type(value)

    if is_int_or_string(schema):
        if actual not in ("integer", "string"):
            out.append(type_invalid(path, actual, "integer,string"))
            return
    elif schema.get("type"):
        expected = schema["type"]
        if not _type_ok(expected, actual):
            out.append(type_invalid(path, actual, expected))
            if expected == "integer" and actual == "number" and release.integer_format_cause():
                out.append(cause("FieldValueInvalid", "<nil>", 'Invalid value: "": Checked value must be of type '
                                 'integer (default format) in %s' % path))
            return

    anyof = schema.get("anyOf")
    if anyof and not (is_int_or_string(schema) and anyof == INT_OR_STRING_ANYOF):
        if not any(not validate(branch, value, path) for branch in anyof):
            out.append(invalid(path, value, '"%s" must validate at least one schema (anyOf)' % path))

    if "enum" in schema and not any(same_value(value, e) for e in schema["enum"]):
        out.append(cause("FieldValueNotSupported", path, "Unsupported value: %s: supported "
                         "values: %s" % (go_value(value), ", ".join(
                             go_quote(e) if isinstance(e, str) else json.dumps(e)
                             for e in schema["enum"]))))

    if actual in ("integer", "number"):
        _validate_number(schema, value, path, out)
    elif actual == "string":
        _validate_string(schema, value, path, out)
    elif actual == "array":
        _validate_array(schema, value, path, out)
    elif actual == "object":
        _validate_object(schema, value, path, out)


def _validate_number(schema, value, path, out):
    if "minimum" in schema:
        low = schema["minimum"]
        if schema.get("exclusiveMinimum") and value <= low:
            out.append(invalid(path, value, "%s in body should be greater than %s" % (
                path, go_number(low))))
        elif value < low:
            out.append(invalid(path, value, "%s in body should be greater than or equal to %s" % (
                path, go_number(low))))
    if "maximum" in schema:
        high = schema["maximum"]
        if schema.get("exclusiveMaximum") and value >= high:
            out.append(invalid(path, value, "%s in body should be less than %s" % (
                path, go_number(high))))
        elif value > high:
            out.append(invalid(path, value, "%s in body should be less than or equal to %s" % (
                path, go_number(high))))
    if "multipleOf" in schema and schema["multipleOf"] and value % schema["multipleOf"]:
        out.append(invalid(path, value, "%s in body should be a multiple of %s" % (
            path, go_number(schema["multipleOf"]))))


DATE_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")


def _validate_string(schema, value, path, out):
    # Lengths count characters (runes), although the message says bytes, like the server's.
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        out.append(cause("FieldValueTooLong", path, "Too long: may not be more than %d bytes" %
                         schema["maxLength"]))
    if "minLength" in schema and len(value) < schema["minLength"]:
        out.append(invalid(path, value, "%s in body should be at least %d chars long" % (
            path, schema["minLength"])))
    if "pattern" in schema and not re.search(schema["pattern"], value):
        out.append(invalid(path, value, "%s in body should match '%s'" % (path, schema["pattern"])))
    if schema.get("format") == "date-time" and not DATE_TIME.match(value):
        out.append(type_invalid_value(path, value, "date-time"))


def type_invalid_value(path, value, fmt):
    return cause("FieldValueTypeInvalid", path, "Invalid value: %s: %s in body must be of type "
                 "%s: %s" % (go_value(value), path, fmt, go_quote(value)))


def _list_map_key(item, keys, item_schema):
    """The key tuple of a list-map entry; a missing key counts as its default."""
    props = item_schema.get("properties") or {}
    key = {}
    for k in keys:
        if k in item:
            key[k] = item[k]
        elif "default" in props.get(k, {}):
            key[k] = props[k]["default"]
    return key


def _validate_size(schema, value, path, out, what, unit):
    """maxItems/minItems (what "Items") or maxProperties/minProperties ("Properties"); `unit` is the
    word the minimum's message counts in (the maximum's always says items, as the server's does)."""
    if "max" + what in schema and len(value) > schema["max" + what]:
        out.append(cause("FieldValueTooMany", path, "Too many: %d: must have at most %d items" % (
            len(value), schema["max" + what])))
    if "min" + what in schema and len(value) < schema["min" + what]:
        out.append(invalid(path, value, "%s in body should have at least %d %s" % (
            path, schema["min" + what], unit)))


def _validate_array(schema, value, path, out):
    _validate_size(schema, value, path, out, "Items", "items")
    items = schema.get("items")
    if isinstance(items, dict):
        for i, v in enumerate(value):
            _validate(items, v, "%s[%d]" % (path, i), out)
    list_type = schema.get("x-kubernetes-list-type")
    if list_type == "map" and isinstance(items, dict):
        keys = schema.get("x-kubernetes-list-map-keys") or []
        seen = []
        for i, v in enumerate(value):
            if not isinstance(v, dict):
                continue
            key = _list_map_key(v, keys, items)
            if any(same_value(key, s) for s in seen):
                out.append(cause("FieldValueDuplicate", "%s[%d]" % (path, i),
                                 "Duplicate value: %s" % go_value(key)))
            else:
                seen.append(key)
    elif list_type == "set" or schema.get("uniqueItems"):
        seen = []
        for i, v in enumerate(value):
            if any(same_value(v, s) for s in seen):
                out.append(cause("FieldValueDuplicate", "%s[%d]" % (path, i),
                                 "Duplicate value: %s" % go_value(v)))
            else:
                seen.append(v)


def _validate_object(schema, value, path, out):
    for r in schema.get("required") or []:
        if r not in value:
            out.append(cause("FieldValueRequired", join(path, r), "Required value"))
    _validate_size(schema, value, path, out, "Properties", "properties")
    for k, v in value.items():
        if path == "" and k == "metadata":
            continue
        sub = field_schema(schema, k)
        if sub is not None:
            _validate(sub, v, join(path, k), out)


def admit(schema, obj, strict=False):
    """(stored object, causes, unknown field paths) as the server computes them on a write.
    With strict=True and unknown fields the server answers 400 before validating; the causes
    are still computed here."""
    unknown = unknown_fields(schema, obj)
    out = apply_defaults(schema, prune(schema, obj))
    return out, validate(schema, out), unknown


# ----------------------------------------------------------------------------------------------
# CEL rules (listed, not evaluated)
# ----------------------------------------------------------------------------------------------

def validation_rules(schema, path=""):
    """Every x-kubernetes-validations rule with the schema path it sits at ("" is the root,
    `[*]` a list item, `.*` a map value): [{"path", "rule", "message", "fieldPath",
    "transition"}]; transition is True for rules that compare with oldSelf."""
    out = []
    _rules(schema or {}, path, out)
    return out


def transition_rules(schema):
    """The rules that compare the new object with the old one (immutability and the like)."""
    return [r for r in validation_rules(schema) if r["transition"]]


def _rules(schema, path, out):
    for r in schema.get("x-kubernetes-validations") or []:
        rule = r.get("rule", "")
        out.append({
            "path": path,
            "rule": rule,
            "message": r.get("message") or r.get("messageExpression") or "",
            "fieldPath": r.get("fieldPath", ""),
            "transition": bool(re.search(r"\boldSelf\b", rule)),
        })
    for k, sub in (schema.get("properties") or {}).items():
        _rules(sub, join(path, k), out)
    if isinstance(schema.get("additionalProperties"), dict):
        _rules(schema["additionalProperties"], path + ".*", out)
    if isinstance(schema.get("items"), dict):
        _rules(schema["items"], path + "[*]", out)


# ----------------------------------------------------------------------------------------------
# Structural checks of a CRD schema
# ----------------------------------------------------------------------------------------------

SCALAR_TYPES = ("string", "integer", "number", "boolean")
CEL_MACROS = ("all", "exists", "exists_one", "map", "filter", "size", "contains", "startsWith",
              "endsWith", "matches", "lowerAscii", "upperAscii", "split", "join", "trim")


def structural_problems(schema):
    """Reasons a server would refuse this openAPIV3Schema (or misuse it), as strings; [] when
    it is structural and self-consistent."""
    out = []
    if (schema or {}).get("type") != "object":
        out.append("<root>: type must be object")
    _structural(schema or {}, "", out, root=True)
    return out


def _structural(schema, path, out, root=False):
    where = path or "<root>"
    for bad in ("$ref", "definitions", "dependencies", "patternProperties", "additionalItems"):
        if bad in schema:
            out.append("%s: %s is not allowed" % (where, bad))
    t = schema.get("type")
    if is_int_or_string(schema):
        if t:
            out.append("%s: x-kubernetes-int-or-string must not have a type" % where)
        if "anyOf" in schema and schema["anyOf"] != INT_OR_STRING_ANYOF:
            out.append("%s: int-or-string anyOf must be exactly integer, string" % where)
    elif not t and not preserves_unknown(schema):
        out.append("%s: type is required" % where)
    if t and t not in SCALAR_TYPES + ("object", "array"):
        out.append("%s: unknown type %r" % (where, t))
    if "properties" in schema and "additionalProperties" in schema:
        out.append("%s: properties and additionalProperties are mutually exclusive" % where)
    if schema.get("additionalProperties") is False:
        out.append("%s: additionalProperties: false is not allowed" % where)
    if t == "array" and not isinstance(schema.get("items"), dict):
        out.append("%s: an array needs items" % where)
    if t != "array" and ("items" in schema or "x-kubernetes-list-type" in schema):
        out.append("%s: items and list types belong to arrays" % where)
    for r in schema.get("required") or []:
        if r not in (schema.get("properties") or {}):
            out.append("%s: required field %s is not a property" % (where, r))
    for e in schema.get("enum") or []:
        if t and not _type_ok(t, json_type(e)) and not (e is None and schema.get("nullable")):
            out.append("%s: enum value %r is not of type %s" % (where, e, t))
    if "default" in schema:
        d = schema["default"]
        if d is None and not schema.get("nullable"):
            out.append("%s: a null default needs nullable" % where)
        problems = validate(_without_rules(schema), d, path)
        if problems:
            out.append("%s: default %r is invalid: %s" % (where, d, problems[0]["message"]))
        if prune(schema, d, path) != d:
            out.append("%s: default %r holds fields the schema does not know" % (where, d))
    _check_list_type(schema, where, out)
    _check_rules(schema, where, out)

    if root:
        meta = (schema.get("properties") or {}).get("metadata")
        if meta is not None:
            extra = set(meta) - {"type", "properties", "description"}
            props = set((meta.get("properties") or {}))
            if extra or props - {"name", "generateName"}:
                out.append("metadata: only name and generateName may be restricted")
    for k, sub in (schema.get("properties") or {}).items():
        if root and k == "metadata":
            continue
        _structural(sub, join(path, k), out)
    if isinstance(schema.get("additionalProperties"), dict):
        _structural(schema["additionalProperties"], path + ".*", out)
    if isinstance(schema.get("items"), dict):
        _structural(schema["items"], path + "[*]", out)
    for key in ("anyOf", "allOf", "oneOf"):
        for branch in schema.get(key) or []:
            for bad in ("type", "default", "nullable", "description", "additionalProperties",
                        "x-kubernetes-preserve-unknown-fields"):
                if bad in branch and not (is_int_or_string(schema) and bad == "type"):
                    out.append("%s: %s inside %s is not allowed" % (where, bad, key))


def _without_rules(schema):
    return {k: v for k, v in schema.items() if k not in ("default", "x-kubernetes-validations")}


def _check_list_type(schema, where, out):
    lt = schema.get("x-kubernetes-list-type")
    keys = schema.get("x-kubernetes-list-map-keys")
    if lt not in (None, "atomic", "set", "map"):
        out.append("%s: unknown x-kubernetes-list-type %r" % (where, lt))
    if keys is not None and lt != "map":
        out.append("%s: x-kubernetes-list-map-keys needs x-kubernetes-list-type map" % where)
    if lt == "set":
        item_type = (schema.get("items") or {}).get("type")
        if item_type not in SCALAR_TYPES:
            out.append("%s: a set needs scalar items" % where)
    if lt == "map":
        items = schema.get("items") or {}
        if items.get("type") != "object":
            out.append("%s: a list map needs object items" % where)
        if not keys:
            out.append("%s: a list map needs x-kubernetes-list-map-keys" % where)
        props = items.get("properties") or {}
        for k in keys or []:
            sub = props.get(k)
            if sub is None:
                out.append("%s: list map key %s is not a property of the items" % (where, k))
                continue
            if sub.get("type") not in SCALAR_TYPES:
                out.append("%s: list map key %s must be a scalar" % (where, k))
            if k not in (items.get("required") or []) and "default" not in sub:
                out.append("%s: list map key %s must be required or have a default" % (where, k))


def _check_rules(schema, where, out):
    for r in schema.get("x-kubernetes-validations") or []:
        rule = r.get("rule")
        if not rule or not isinstance(rule, str):
            out.append("%s: a validation rule needs a rule" % where)
            continue
        if not r.get("message") and not r.get("messageExpression"):
            out.append("%s: rule %r has no message" % (where, rule))
        depth = 0
        for ch in _strip_literals(rule):
            depth += {"(": 1, ")": -1}.get(ch, 0)
            if depth < 0:
                break
        if depth:
            out.append("%s: rule %r has unbalanced parentheses" % (where, rule))
        for var, chain in re.findall(r"\b(self|oldSelf)((?:\.[A-Za-z_][A-Za-z0-9_]*)+)",
                                     _strip_literals(rule)):
            missing = _missing_field(schema, chain.split(".")[1:])
            if missing:
                out.append("%s: rule %r names %s%s, which the schema does not have" % (
                    where, rule, var, missing))
        fp = r.get("fieldPath")
        if fp:
            missing = _missing_field(schema, fp.lstrip(".").split("."))
            if missing or not fp.startswith("."):
                out.append("%s: fieldPath %r does not name a field" % (where, fp))


def _strip_literals(rule):
    return re.sub(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"", "''", rule)


def _missing_field(schema, names):
    """The first part of a field chain the schema lacks, or "" (stops at open or map nodes and
    at CEL methods)."""
    node = schema
    walked = ""
    for name in names:
        if name in CEL_MACROS:
            return ""
        props = node.get("properties")
        if props is None or preserves_unknown(node):
            return ""
        walked += "." + name
        if name not in props:
            return walked
        node = props[name]
    return ""


# ----------------------------------------------------------------------------------------------
# CustomResourceDefinition objects
# ----------------------------------------------------------------------------------------------

def crd_version_schema(crd, version):
    """The openAPIV3Schema of one version of a CustomResourceDefinition object."""
    spec = crd.get("spec") or {}
    for v in spec.get("versions") or []:
        if v.get("name") == version:
            schema = (v.get("schema") or {}).get("openAPIV3Schema")
            if schema is None:
                schema = ((spec.get("validation") or {}).get("openAPIV3Schema"))
            return schema
    raise KeyError("version %s is not in CRD %s" % (version, (crd.get("metadata") or {}).get("name")))
