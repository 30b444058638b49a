"""Helpers on JSON objects as the server stores and writes them: the key order of the real
encoder, nesting depth, timestamps, generated name suffixes and the metadata only the server sets."""

import datetime
import random


META_ORDER = ["name", "generateName", "namespace", "selfLink", "uid", "resourceVersion", "generation",
              "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "labels", "annotations",
              "ownerReferences", "finalizers", "managedFields"]


def ordered(d, order):
    """d with the keys of `order` first, in that order, then the others as they were."""
    if not isinstance(d, dict):
        return d
    out = {k: d[k] for k in order if k in d}
    for k, v in d.items():
        if k not in out:
            out[k] = v
    return out


def as_dict(v):
    """v when it is an object, else an empty one (for reading fields of any JSON value)."""
    return v if isinstance(v, dict) else {}


def as_list(v):
    """v when it is an array, else an empty one."""
    return v if isinstance(v, list) else []


def json_depth(v):
    """Nesting depth, without recursion."""
    deepest, stack = 0, [(v, 1)]
    while stack:
        x, d = stack.pop()
        if isinstance(x, dict):
            deepest = max(deepest, d)
            stack.extend((y, d + 1) for y in x.values())
        elif isinstance(x, list):
            deepest = max(deepest, d)
            stack.extend((y, d + 1) for y in x)
    return deepest


def now_rfc3339():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def rfc3339_after(seconds):
    t = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=seconds)
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def sort_keys(v):
    if isinstance(v, dict):
        return {k: sort_keys(v[k]) for k in sorted(v)}
    if isinstance(v, list):
        return [sort_keys(x) for x in v]
    return v


GEN_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def generate_suffix():
    return "".join(random.choice(GEN_ALPHABET) for _ in range(5))


def strip_server_meta(meta):
    for k in ("uid", "resourceVersion", "creationTimestamp", "deletionTimestamp",
              "deletionGracePeriodSeconds", "generation", "managedFields", "selfLink"):
        meta.pop(k, None)
