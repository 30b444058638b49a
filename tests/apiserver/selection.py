"""Which objects a request selects: label selectors and field selectors in their query syntax
(parsed as the real server parses them, with its error messages), and the metav1.LabelSelector
objects of workloads."""

import json
import re

from errors import go_quote
from metadata import qualified_name_problems


def selector_matches(sel, labels):
    """Whether a metav1.LabelSelector selects labels (an empty selector selects everything)."""
    labels = labels if isinstance(labels, dict) else {}
    for k, v in ((sel or {}).get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for e in (sel or {}).get("matchExpressions") or []:
        if not isinstance(e, dict):
            return False
        key, op, values = e.get("key"), e.get("operator"), e.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


class SelectorError(Exception):
    pass


_LKEY = r"[A-Za-z0-9][-A-Za-z0-9_./]*"


def parse_label_selector(text):
    """Kubernetes label selector syntax -> list of (op, key, values)."""
    text = (text or "").strip()
    if not text:
        return []
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    reqs = []
    for part in parts:
        p = part.strip()
        if not p:
            raise SelectorError("unable to parse requirement: found '', expected: !, identifier, or 'end of "
                                "string'")
        m = re.fullmatch(r"!\s*(%s)" % _LKEY, p)
        if m:
            reqs.append(("!", m.group(1), None))
            continue
        m = re.fullmatch(r"(%s)\s+(in|notin)\s*\((.*)\)" % _LKEY, p)
        if m:
            vals = [v.strip() for v in m.group(3).split(",")]
            if vals == [""]:
                raise SelectorError("unable to parse requirement: for 'in', 'notin' operators, values set "
                                    "can't be empty")
            reqs.append((m.group(2), m.group(1), set(vals)))
            continue
        m = re.fullmatch(r"(%s)\s*(==|=|!=|>|<)\s*([-A-Za-z0-9_.]*)" % _LKEY, p)
        if m:
            op = "=" if m.group(2) == "==" else m.group(2)
            if op in (">", "<"):
                try:
                    int(m.group(3))
                except ValueError:
                    raise SelectorError("unable to parse requirement: for 'Gt', 'Lt' operators, the value "
                                        "must be an integer")
            reqs.append((op, m.group(1), m.group(3)))
            continue
        m = re.fullmatch(_LKEY, p)
        if m:
            reqs.append(("exists", p, None))
            continue
        raise SelectorError("unable to parse requirement: %s" % p)
    for _, key, _v in reqs:
        probs = qualified_name_problems(key)
        if probs:
            raise SelectorError("unable to parse requirement: key: Invalid value: %s: %s" % (
                go_quote(key), probs[0]))
    return reqs


def labels_match(reqs, labels):
    labels = labels if isinstance(labels, dict) else {}
    for op, key, val in reqs:
        has = key in labels
        v = labels.get(key)
        if op == "exists" and not has:
            return False
        if op == "!" and has:
            return False
        if op == "=" and (not has or v != val):
            return False
        if op == "!=" and has and v == val:
            return False
        if op == "in" and (not has or v not in val):
            return False
        if op == "notin" and has and v in val:
            return False
        if op in (">", "<"):
            try:
                n = int(v)
            except (TypeError, ValueError):
                return False
            if (op == ">" and not n > int(val)) or (op == "<" and not n < int(val)):
                return False
    return True


def _split_unescaped(text, sep):
    out, cur, i = [], [], 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            cur.append(text[i:i + 2])
            i += 2
            continue
        if ch == sep:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
        i += 1
    out.append("".join(cur))
    return out


def _unescape_field(v):
    out, i = [], 0
    while i < len(v):
        if v[i] == "\\" and i + 1 < len(v):
            if v[i + 1] not in "\\,=":
                raise SelectorError("invalid field selector: invalid escape sequence: \\%s" % v[i + 1])
            out.append(v[i + 1])
            i += 2
        else:
            out.append(v[i])
            i += 1
    return "".join(out)


def parse_field_selector(text, kind):
    text = (text or "").strip()
    if not text:
        return []
    reqs = []
    for term in _split_unescaped(text, ","):
        term = term.strip()
        if not term:
            continue
        m = None
        for op in ("!=", "==", "="):
            idx = _find_unescaped(term, op)
            if idx >= 0:
                m = (term[:idx], op, term[idx + len(op):])
                break
        if not m:
            raise SelectorError("invalid selector: '%s'; can't understand '%s'" % (text, term))
        path, op, value = m[0].strip(), m[1], _unescape_field(m[2])
        if path not in kind.fields:
            raise SelectorError('field label not supported: %s' % path)
        reqs.append(("!=" if op == "!=" else "=", path, value))
    return reqs


def _find_unescaped(text, op):
    i = 0
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        if text.startswith(op, i):
            if op == "=" and i > 0 and text[i - 1] == "!":
                i += 1
                continue
            return i
        i += 1
    return -1


def field_value(obj, path):
    cur = obj
    for part in path.split("."):
        if isinstance(cur, dict):
            cur = cur.get(part)
        else:
            cur = None
    if cur is None:
        return ""
    if isinstance(cur, bool):
        return "true" if cur else "false"
    if isinstance(cur, (int, float)):
        return str(cur)
    if isinstance(cur, str):
        return cur
    return json.dumps(cur, separators=(",", ":"))


def fields_match(reqs, obj):
    for op, path, value in reqs:
        v = field_value(obj, path)
        if op == "=" and v != value:
            return False
        if op == "!=" and v == value:
            return False
    return True
