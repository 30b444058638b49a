"""Validation of what every object has (apimachinery's ValidateObjectMeta, in the parts an
operator meets): the name under its kind's rule, label keys and values, annotation keys,
ownerReferences and finalizers."""

import re

from errors import fe_invalid


DNS1123_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS1123_SUBDOMAIN = DNS1123_LABEL + r"(\." + DNS1123_LABEL + r")*"
DNS1035_LABEL = r"[a-z]([-a-z0-9]*[a-z0-9])?"
MSG_SUBDOMAIN = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
                 "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used "
                 "for validation is '" + DNS1123_SUBDOMAIN + "')")
MSG_LABEL1123 = ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and "
                 "must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used "
                 "for validation is '" + DNS1123_LABEL + "')")
MSG_LABEL1035 = ("a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an "
                 "alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', "
                 "regex used for validation is '" + DNS1035_LABEL + "')")
LABEL_VALUE_RE = r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?"
MSG_LABEL_VALUE = ("a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
                   "'.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',"
                   "  or '12345', regex used for validation is '" + LABEL_VALUE_RE + "')")
QNAME_RE = r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
MSG_QNAME = ("name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with "
             "an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
             "validation is '" + QNAME_RE + "')")


# name rule -> (longest, regex, what the regex wants)
NAME_RULES = {"subdomain": (253, DNS1123_SUBDOMAIN, MSG_SUBDOMAIN),
              "label1123": (63, DNS1123_LABEL, MSG_LABEL1123),
              "label1035": (63, DNS1035_LABEL, MSG_LABEL1035)}


def form_problems(value, longest, regex, message, part=""):
    """The two checks of most of apimachinery's validators: a length, then a regex (`part`
    prefixes the length message, e.g. "prefix part ")."""
    out = []
    if len(value) > longest:
        out.append("%smust be no more than %d characters" % (part, longest))
    if not re.fullmatch(regex, value):
        out.append(message)
    return out


def name_problems(name, rule):
    """What is wrong with an object's name under its kind's rule: one of NAME_RULES, or "path"
    (the RBAC kinds' names, anything that can be a path segment)."""
    if rule == "path":
        out = []
        if name in (".", ".."):
            out.append("may not be '%s'" % name)
        for ch in ("/", "%"):
            if ch in name:
                out.append("may not contain '%s'" % ch)
        return out
    if rule in NAME_RULES:
        return form_problems(name, *NAME_RULES[rule])
    return []


def qualified_name_problems(key):
    """What is wrong with a label or annotation key, or a finalizer: [prefix/]name."""
    out = []
    parts = key.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            out.append("prefix part must be non-empty")
        else:
            out.extend(form_problems(prefix, 253, DNS1123_SUBDOMAIN, "prefix part " + MSG_SUBDOMAIN, "prefix part "))
    else:
        return ["a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start and "
                "end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used "
                "for validation is '" + QNAME_RE + "') with an optional DNS subdomain prefix and '/' (e.g. "
                "'example.com/MyName')"]
    if not name:
        out.append("name part must be non-empty")
    else:
        out.extend(form_problems(name, 63, QNAME_RE, MSG_QNAME, "name part "))
    return out


def validate_meta(kind, obj, errors):
    """Appends to errors what is wrong with obj's labels, annotations, ownerReferences and finalizers."""
    meta = obj.get("metadata") or {}
    labels = meta.get("labels")
    if labels is not None:
        if not isinstance(labels, dict):
            errors.append(fe_invalid("metadata.labels", labels, "must be a map of string to string"))
        else:
            for k, v in labels.items():
                for p in qualified_name_problems(k):
                    errors.append(fe_invalid("metadata.labels", k, p))
                if not isinstance(v, str):
                    errors.append(fe_invalid("metadata.labels", v, "must be a string"))
                    continue
                for p in form_problems(v, 63, LABEL_VALUE_RE, MSG_LABEL_VALUE):
                    errors.append(fe_invalid("metadata.labels", v, p))
    ann = meta.get("annotations")
    if ann is not None and isinstance(ann, dict):
        for k, v in ann.items():
            for p in qualified_name_problems(k):
                errors.append(fe_invalid("metadata.annotations", k, p))
    refs = meta.get("ownerReferences")
    if refs is not None:
        if not isinstance(refs, list):
            errors.append(fe_invalid("metadata.ownerReferences", refs, "must be a list"))
        else:
            controllers = 0
            for r in refs:
                if not isinstance(r, dict):
                    errors.append(fe_invalid("metadata.ownerReferences", r, "must be an object"))
                    continue
                for field, word in (("apiVersion", "version"), ("kind", "kind"), ("name", "name"), ("uid", "uid")):
                    if not r.get(field):
                        errors.append(fe_invalid("metadata.ownerReferences." + field, r.get(field, ""),
                                                 "%s must not be empty" % word))
                if r.get("controller") is True:
                    controllers += 1
            if controllers > 1:
                errors.append(fe_invalid("metadata.ownerReferences", refs,
                                         "Only one reference can have Controller set to true. Found \"true\" "
                                         "in references for multiple owners"))
    fin = meta.get("finalizers")
    if fin is not None:
        if not isinstance(fin, list) or not all(isinstance(f, str) for f in fin):
            errors.append(fe_invalid("metadata.finalizers", fin, "must be a list of strings"))
        else:
            for f in fin:
                for p in qualified_name_problems(f):
                    errors.append(fe_invalid("metadata.finalizers", f, p))
