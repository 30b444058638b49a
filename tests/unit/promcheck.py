#!/usr/bin/env python3
"""Checks Prometheus text exposition format 0.0.4, independently of the C renderer.

Usage: promcheck.py [FILE]   (stdin when no FILE). Exit 0 when valid; otherwise exit 1 with
one line per problem on stderr ("line N: ...").

Checked: every line is a HELP or TYPE comment, another comment, empty, or a sample
`name{label="value",...} value [timestamp]`; metric names [a-zA-Z_:][a-zA-Z0-9_:]*, label
names [a-zA-Z_][a-zA-Z0-9_]* (no repeats); label values use only the escapes \\\\, \\" and \\n;
values are floats, NaN, +Inf or -Inf; timestamps are integers; at most one HELP and one TYPE
per family, both before its first sample; a family's samples are contiguous; no sample
repeats; counters are not negative; histograms have le on every _bucket with cumulative
counts in increasing le order, a +Inf bucket equal to _count, and a _sum and a _count.
"""
import math
import re
import sys

NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
FLOAT = re.compile(r"[+-]?(?:\d+\.?\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?)$")
TYPES = {"counter", "gauge", "histogram", "summary", "untyped"}


def parse_value(s):
    if s in ("NaN", "+Inf", "-Inf", "Inf"):
        return float(s.replace("Inf", "inf").replace("NaN", "nan"))
    if not FLOAT.match(s):
        raise ValueError("bad value %r" % s)
    return float(s)


def parse_sample(line):
    """Returns (name, [(label, value)], value, timestamp or None); raises ValueError."""
    m = NAME.match(line)
    if not m:
        raise ValueError("bad metric name")
    name, i, labels = m.group(0), m.end(), []
    if i < len(line) and line[i] == "{":
        i += 1
        while True:
            if line[i:i + 1] == "}":
                i += 1
                break
            lm = LABEL.match(line, i)
            if not lm:
                raise ValueError("bad label name at column %d" % (i + 1))
            i = lm.end()
            if line[i:i + 2] != '="':
                raise ValueError("expected =\" after label %s" % lm.group(0))
            i += 2
            val = []
            while True:
                if i >= len(line):
                    raise ValueError("unterminated label value")
                c = line[i]
                if c == "\\":
                    nxt = line[i + 1:i + 2]
                    if nxt not in ("\\", '"', "n"):
                        raise ValueError("bad escape \\%s in label value" % nxt)
                    val.append("\n" if nxt == "n" else nxt)
                    i += 2
                elif c == '"':
                    i += 1
                    break
                else:
                    val.append(c)
                    i += 1
            labels.append((lm.group(0), "".join(val)))
            if line[i:i + 1] == ",":
                i += 1
            elif line[i:i + 1] != "}":
                raise ValueError("expected , or } at column %d" % (i + 1))
    if line[i:i + 1] != " ":
        raise ValueError("expected a space before the value")
    fields = line[i:].strip(" ").split(" ")
    fields = [f for f in fields if f]
    if len(fields) not in (1, 2):
        raise ValueError("expected value [timestamp]")
    value = parse_value(fields[0])
    ts = None
    if len(fields) == 2:
        if not re.match(r"-?\d+$", fields[1]):
            raise ValueError("bad timestamp %r" % fields[1])
        ts = int(fields[1])
    names = [k for k, _ in labels]
    if len(set(names)) != len(names):
        raise ValueError("repeated label name")
    return name, labels, value, ts


def family_of(name, types):
    for suffix in ("_bucket", "_sum", "_count"):
        if name.endswith(suffix):
            base = name[: -len(suffix)]
            if types.get(base) in ("histogram", "summary") and (
                    suffix != "_bucket" or types[base] == "histogram"):
                return base
    return name


def check(text):
    errors = []
    if text and not text.endswith("\n"):
        errors.append("last line does not end with a newline")
    types, helps, seen_samples, done = {}, set(), set(), set()
    current = None
    hist = {}  # (family, labels without le) -> {"buckets": [(le, v)], "sum": v, "count": v}
    for n, line in enumerate(text.split("\n")[:-1] if text.endswith("\n") else text.split("\n"), 1):
        def err(msg):
            errors.append("line %d: %s: %r" % (n, msg, line))
        if line.strip() == "":
            continue
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) >= 2 and parts[1] in ("HELP", "TYPE"):
                if len(parts) < 3 or not NAME.fullmatch(parts[2]):
                    err("bad metric name in %s" % parts[1])
                    continue
                fam = parts[2]
                if fam in done or (fam == current and fam in seen_samples):
                    err("%s after the family's samples" % parts[1])
                if parts[1] == "HELP":
                    if fam in helps:
                        err("second HELP")
                    helps.add(fam)
                    doc = parts[3] if len(parts) > 3 else ""
                    if "\\" in re.sub(r"\\[\\n]", "", doc):
                        err("bad escape in HELP")
                else:
                    if fam in types:
                        err("second TYPE")
                    if len(parts) != 4 or parts[3] not in TYPES:
                        err("bad TYPE")
                        continue
                    types[fam] = parts[3]
            continue
        try:
            name, labels, value, _ = parse_sample(line)
        except (ValueError, IndexError) as e:
            err(str(e))
            continue
        fam = family_of(name, types)
        if fam != current:
            if current is not None:
                done.add(current)
            if fam in done:
                err("samples of family %s are not contiguous" % fam)
            current = fam
        seen_samples.add(fam)
        key = (name, tuple(sorted(labels)))
        if key in seen_samples:
            err("repeated sample")
        seen_samples.add(key)
        kind = types.get(fam, "untyped")
        if kind == "counter" and (value < 0 or math.isnan(value)):
            err("negative counter")
        if kind == "histogram":
            rest = tuple(sorted((k, v) for k, v in labels if k != "le"))
            h = hist.setdefault((fam, rest), {"buckets": [], "sum": None, "count": None,
                                              "line": n})
            if name == fam + "_bucket":
                le = [v for k, v in labels if k == "le"]
                if not le:
                    err("bucket without le")
                    continue
                try:
                    h["buckets"].append((parse_value(le[0]), value))
                except ValueError:
                    err("bad le %r" % le[0])
            elif name == fam + "_sum":
                h["sum"] = value
            elif name == fam + "_count":
                h["count"] = value
            else:
                err("histogram sample must be _bucket, _sum or _count")
            if any(k == "le" for k, _ in labels) and name != fam + "_bucket":
                err("le on a non-bucket sample")
    for (fam, rest), h in hist.items():
        where = "histogram %s%s (line %d)" % (fam, dict(rest) or "", h["line"])
        b = h["buckets"]
        if not b:
            errors.append(where + ": no buckets")
            continue
        les = [le for le, _ in b]
        if les != sorted(les) or len(set(les)) != len(les):
            errors.append(where + ": le not strictly increasing")
        if any(b[i][1] > b[i + 1][1] for i in range(len(b) - 1)):
            errors.append(where + ": bucket counts not cumulative")
        if les[-1] != math.inf:
            errors.append(where + ": no +Inf bucket")
        if h["count"] is None or h["sum"] is None:
            errors.append(where + ": missing _sum or _count")
        elif les[-1] == math.inf and b[-1][1] != h["count"]:
            errors.append(where + ": +Inf bucket differs from _count")
    return errors


def main():
    if len(sys.argv) > 1:
        with open(sys.argv[1], encoding="utf-8") as f:
            text = f.read()
    else:
        text = sys.stdin.read()
    errors = check(text)
    for e in errors:
        print(e, file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
