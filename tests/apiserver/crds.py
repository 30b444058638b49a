"""Custom resources: a Kind from a CustomResourceDefinition, the project's CRD files, and the
admission of custom resources through their CRD's structural schema (schema.py does the pruning,
defaulting and validation; the CEL rules that compare with oldSelf are evaluated here)."""

import re
import sys

import schema as crd_schema
from errors import FieldError, err_bad_request, fe_invalid
from kinds import Kind
from tables import printer_columns_of


def kind_from_crd(spec):
    """A Kind from either a CustomResourceDefinition object or the short form
    {"group","versions"|"version","plural","kind","singular","namespaced","status","schema"}."""
    if spec.get("kind") == "CustomResourceDefinition":
        s = spec.get("spec") or {}
        names = s.get("names") or {}
        served = [v for v in (s.get("versions") or []) if v.get("served", True)]
        served.sort(key=lambda v: (not v.get("storage", False)))
        versions = [v["name"] for v in served]
        has_status = any("status" in ((v.get("subresources") or {})) for v in served)
        schema = None
        if served:
            schema = ((served[0].get("schema") or {}).get("openAPIV3Schema"))
        if schema and schema.get("x-kubernetes-preserve-unknown-fields") and not schema.get("properties"):
            schema = None
        kind = Kind(s["group"], versions, names["plural"], names["kind"],
                    names.get("singular") or names["kind"].lower(), namespaced=s.get("scope") != "Cluster",
                    status=has_status, crd=True, short=names.get("shortNames") or (), schema=schema,
                    categories=names.get("categories") or ())
        install_crd_schemas(kind, spec)
        kind.printer_columns = printer_columns_of(spec)
        kind.crd_object = spec
        return kind
    versions = spec.get("versions") or [spec.get("version", "v1")]
    return Kind(spec["group"], versions, spec["plural"], spec["kind"],
                spec.get("singular") or spec["kind"].lower(), namespaced=spec.get("namespaced", True),
                status=spec.get("status", spec.get("statusSubresource", True)), crd=True,
                short=spec.get("shortNames") or (), schema=spec.get("schema"))


_said_once = set()


def say_once(text):
    """One line on stderr, the first time only."""
    if text not in _said_once:
        _said_once.add(text)
        print("apiserver double: " + text, file=sys.stderr, flush=True)


def load_crd_file(path):
    """The CustomResourceDefinition object of a YAML file, or None (said once on stderr) when the
    file or PyYAML is missing or the file holds no CRD."""
    try:
        import yaml
    except ImportError:
        say_once("PyYAML is missing: %s is not loaded, its kind is served without a schema" % path)
        return None
    try:
        with open(path, encoding="utf-8") as f:
            crd = yaml.load(f, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except (OSError, yaml.YAMLError) as e:
        say_once("cannot load %s (%s): its kind is served without a schema" % (path, e))
        return None
    if not isinstance(crd, dict) or crd.get("kind") != "CustomResourceDefinition":
        say_once("%s holds no CustomResourceDefinition: its kind is served without a schema" % path)
        return None
    return crd


def install_crd_schemas(kind, crd):
    """Gives kind the openAPIV3Schema of each of its versions that the CRD object describes."""
    spec = crd.get("spec") or {}
    for v in spec.get("versions") or []:
        name = v.get("name")
        if name not in kind.versions:
            continue
        try:
            schema = crd_schema.crd_version_schema(crd, name)
        except KeyError:
            continue
        if not schema or (schema.get("x-kubernetes-preserve-unknown-fields") and not schema.get("properties")):
            continue
        kind.schemas[name] = schema
        if kind.schema is None or name == kind.versions[0]:
            kind.schema = schema


def schema_field_errors(causes):
    return [FieldError(c["reason"], c["field"], c["message"]) for c in causes]


# field.ErrorTypes after which kube-apiserver skips the CEL rules (apiextensions hasBlockingErr)
CEL_BLOCKING = ("FieldValueNotSupported", "FieldValueRequired", "FieldValueTooLong", "FieldValueTooMany",
                "FieldValueTypeInvalid")
CEL_SKIPPED = FieldError("FieldValueInvalid", "<nil>", 'Invalid value: "null": some validation rules were not '
                         'checked because the object was invalid; correct the existing errors to complete '
                         'validation')

# The root rule of the MPIJob CRD (scripts/gen-crd.py root_rules), compared without whitespace.
NETWORKING_RULE = re.sub(r"\s+", "", """
    (has(oldSelf.status) && has(oldSelf.status.conditions) &&
      oldSelf.status.conditions.exists(c,
        (c.type == 'Succeeded' || c.type == 'Failed') && c.status == 'True'))
    || (has(self.spec.networking) == has(oldSelf.spec.networking) &&
      (!has(self.spec.networking) || self.spec.networking == oldSelf.spec.networking))""")


_rules_of = {}                      # id(schema) -> its x-kubernetes-validations rules (schemas live on)


def schema_rules(schema):
    rules = _rules_of.get(id(schema))
    if rules is None:
        rules = _rules_of[id(schema)] = crd_schema.validation_rules(schema)
    return rules


def _rule_target(obj, schema, path):
    """(present, value, schema type) of the field a rule at `path` ("" or "spec.x") sits on."""
    value, node = obj, schema or {}
    for part in [p for p in path.split(".") if p]:
        if not isinstance(value, dict) or part not in value:
            return False, None, None
        value = value[part]
        node = (node.get("properties") or {}).get(part) or {}
    return True, value, node.get("type") or "object"


def _finished(obj):
    conds = (obj.get("status") or {}).get("conditions") if isinstance(obj.get("status"), dict) else None
    return any(isinstance(c, dict) and c.get("type") in ("Succeeded", "Failed") and c.get("status") == "True"
               for c in (conds if isinstance(conds, list) else []))


def transition_errors(schema, new, old):
    """The x-kubernetes-validations rules that compare with oldSelf, evaluated by hand for the rules
    the MPIJob CRD has: `self == oldSelf` on a field, and the root networking rule. Others are named
    once on stderr and pass. Like the server, a field rule runs only where old and new both have
    the field."""
    errors = []
    for r in [r for r in schema_rules(schema) if r["transition"]]:
        path, rule = r["path"], re.sub(r"\s+", "", r["rule"])
        if "[" in path or "*" in path:
            say_once("transition rule at %s not evaluated: %s" % (path, r["rule"]))
            continue
        has_new, new_v, t = _rule_target(new, schema, path)
        has_old, old_v, _ = _rule_target(old, schema, path)
        if not (has_new and has_old):
            continue
        field = r["fieldPath"].lstrip(".") if r["fieldPath"] else path
        if rule == "self==oldSelf":
            ok = crd_schema.same_value(new_v, old_v)
        elif rule == NETWORKING_RULE and path == "":
            def net(o):
                spec = o.get("spec") if isinstance(o.get("spec"), dict) else {}
                return ("networking" in spec), spec.get("networking")
            (nh, nv), (oh, ov) = net(new_v), net(old_v)
            ok = _finished(old_v) or (nh == oh and (not nh or crd_schema.same_value(nv, ov)))
        else:
            say_once("transition rule at %s not evaluated: %s" % (path or "<root>", r["rule"]))
            continue
        if not ok:
            errors.append(fe_invalid(field, t, r["message"] or "failed rule: " + r["rule"]))
    return errors


def unknown_field_warnings(kind, version, body, mode):
    """fieldValidation on the body as decoded: Strict refuses unknown fields (400), Warn (the default)
    names each in a warning, Ignore says nothing. Pruning happens later, in admit_schema."""
    schema = kind.schema_for(version)
    if not schema or mode == "Ignore" or not isinstance(body, dict):
        return []
    unknown = crd_schema.unknown_fields(schema, body)
    if unknown and mode == "Strict":
        raise err_bad_request('%s in version "%s" cannot be handled as a %s: strict decoding error: %s' % (
            kind.kind, version, kind.kind, ", ".join('unknown field "%s"' % u for u in unknown)))
    return ['unknown field "%s"' % u for u in unknown]


def admit_schema(kind, version, obj):
    """(pruned and defaulted object, schema errors) for a write through `version`."""
    schema = kind.schema_for(version)
    if not schema:
        return obj, []
    out = crd_schema.apply_defaults(schema, crd_schema.prune(schema, obj))
    return out, schema_field_errors(crd_schema.validate(schema, out))


def admit_rules(kind, version, obj, old, errors):
    """The CEL step after the schema: skipped with one fieldless cause when an earlier error blocks
    it (as kube-apiserver does whenever the schema has rules), else the transition rules on update."""
    schema = kind.schema_for(version)
    if not schema or not schema_rules(schema):
        return
    if any(e.reason in CEL_BLOCKING for e in errors):
        errors.append(CEL_SKIPPED)
    elif old is not None:
        errors.extend(transition_errors(schema, obj, old))
