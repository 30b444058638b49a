"""Errors as kube-apiserver answers them: Status bodies (ApiError and the common ones), the entries
of a field.ErrorList (FieldError) that make a 422 Invalid, and Go's rendering of values inside
their messages."""

import json


class ApiError(Exception):
    """An error answered with a Kubernetes Status body."""

    def __init__(self, code, body, headers=None):
        super().__init__(body.get("message", ""))
        self.code = code
        self.body = body
        self.headers = headers or {}


def status_body(code, reason, message, details=None, metadata=None, status="Failure"):
    body = {"kind": "Status", "apiVersion": "v1", "metadata": metadata if metadata is not None else {},
            "status": status}
    if message is not None:
        body["message"] = message
    if reason:
        body["reason"] = reason
    if details is not None:
        body["details"] = details
    if code is not None:
        body["code"] = code
    return body


def api_error(code, reason, message, details=None, metadata=None, headers=None):
    return ApiError(code, status_body(code, reason, message, details, metadata), headers)


def err_bad_request(message):
    return api_error(400, "BadRequest", message)


def err_not_found_generic():
    return api_error(404, "NotFound", "the server could not find the requested resource", {})


def err_method_not_allowed():
    return api_error(405, "MethodNotAllowed",
                     "the server does not allow this method on the requested resource", {})


def err_unauthorized():
    return api_error(401, "Unauthorized", "Unauthorized")


def err_internal(text):
    return api_error(500, "InternalError", "Internal error occurred: " + text, {"causes": [{"message": text}]})


def err_unprocessable_generic():
    return api_error(422, "Invalid", "the server rejected our request due to an error in our request", {})


class FieldError:
    """One entry of field.ErrorList; renders like k8s.io/apimachinery/pkg/util/validation/field."""

    def __init__(self, reason, field, message):
        self.reason = reason
        self.field = field
        self.message = message

    def cause(self):
        return {"reason": self.reason, "message": self.message, "field": self.field}

    def __str__(self):
        return "%s: %s" % (self.field, self.message)


def field_errors_text(errors):
    """A field.ErrorList as an aggregate error prints it: the one error, or all in brackets."""
    if len(errors) == 1:
        return str(errors[0])
    return "[" + ", ".join(str(e) for e in errors) + "]"


class Raw(str):
    """A value already rendered the way Go prints it (e.g. 0x0)."""


def go_quote(value):
    """Go's %#v / %q rendering of a value inside an error message (close enough for strings)."""
    if isinstance(value, Raw):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (int, float)):
        return str(value)
    return json.dumps(value, separators=(",", ":"))


def go_json_kind(value):
    """How a decoding error names the JSON type of a value it cannot unmarshal."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def fe_invalid(field, value, detail):
    return FieldError("FieldValueInvalid", field, "Invalid value: %s: %s" % (go_quote(value), detail))


def fe_required(field, detail=""):
    return FieldError("FieldValueRequired", field, "Required value" + (": " + detail if detail else ""))


def fe_not_supported(field, value, supported):
    return FieldError("FieldValueNotSupported", field, "Unsupported value: %s: supported values: %s" % (
        go_quote(value), ", ".join(go_quote(s) for s in supported)))


def fe_forbidden(field, detail):
    return FieldError("FieldValueForbidden", field, "Forbidden: " + detail)


def fe_type_invalid(field, actual, detail):
    return FieldError("FieldValueTypeInvalid", field, "Invalid value: %s: %s" % (go_quote(actual), detail))


def go_string_map(m):
    """Go's %#v of a map[string]string."""
    if m is None:
        return "map[string]string(nil)"
    return "map[string]string{%s}" % ", ".join("%s:%s" % (json.dumps(k), json.dumps(v))
                                               for k, v in sorted(m.items()))


def go_strings(values):
    """Go's %#v of a []string."""
    if values is None:
        return "[]string(nil)"
    return "[]string{%s}" % ", ".join(json.dumps(str(v)) for v in values)


def go_label_selector(sel):
    sel = sel if isinstance(sel, dict) else {}
    exprs = sel.get("matchExpressions")
    if exprs:
        rendered = "[]v1.LabelSelectorRequirement{%s}" % ", ".join(
            'v1.LabelSelectorRequirement{Key:%s, Operator:%s, Values:%s}' % (
                json.dumps(e.get("key", "")), json.dumps(e.get("operator", "")), go_strings(e.get("values")))
            for e in exprs if isinstance(e, dict))
    else:
        rendered = "[]v1.LabelSelectorRequirement(nil)"
    return "v1.LabelSelector{MatchLabels:%s, MatchExpressions:%s}" % (go_string_map(sel.get("matchLabels")),
                                                                       rendered)
