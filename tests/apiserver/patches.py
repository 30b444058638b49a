"""The patch types: JSON merge patch (RFC 7386), JSON patch (RFC 6902), strategic merge patch
with the merge keys of the built-in lists, and the field ownership of server-side apply."""

import copy
import json


def merge_patch(target, patch):
    """RFC 7386."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            result.pop(k, None)
        else:
            result[k] = merge_patch(result.get(k), v)
    return result


class PatchError(Exception):
    pass


def _pointer(path):
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError("JSON pointer must start with '/': %s" % path)
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _container(doc, parts, path):
    cur = doc
    for p in parts[:-1]:
        if isinstance(cur, dict):
            if p not in cur:
                raise PatchError("doc is missing path: %s" % path)
            cur = cur[p]
        elif isinstance(cur, list):
            try:
                cur = cur[int(p)]
            except (ValueError, IndexError):
                raise PatchError("doc is missing path: %s" % path)
        else:
            raise PatchError("doc is missing path: %s" % path)
    return cur


def _parent(doc, path):
    """(the container of the value a JSON pointer names, the pointer's last step), or None when it
    names the whole document."""
    parts = _pointer(path)
    if not parts:
        return None
    return _container(doc, parts, path), parts[-1]


def _jp_get(doc, path):
    at = _parent(doc, path)
    if at is None:
        return doc
    c, last = at
    if isinstance(c, dict):
        if last not in c:
            raise PatchError("doc is missing key: %s" % path)
        return c[last]
    if isinstance(c, list):
        try:
            return c[int(last)]
        except (ValueError, IndexError):
            raise PatchError("doc is missing index: %s" % path)
    raise PatchError("doc is missing path: %s" % path)


def _jp_add(doc, path, value):
    at = _parent(doc, path)
    if at is None:
        return value
    c, last = at
    if isinstance(c, dict):
        c[last] = value
    elif isinstance(c, list):
        if last == "-":
            c.append(value)
        else:
            try:
                i = int(last)
            except ValueError:
                raise PatchError("invalid index: %s" % path)
            if i < 0 or i > len(c):
                raise PatchError("index out of bounds: %s" % path)
            c.insert(i, value)
    else:
        raise PatchError("doc is missing path: %s" % path)
    return doc


def _jp_remove(doc, path):
    at = _parent(doc, path)
    if at is None:
        raise PatchError("cannot remove the whole document")
    c, last = at
    if isinstance(c, dict):
        if last not in c:
            raise PatchError("Unable to remove nonexistent key: %s: missing value" % last)
        del c[last]
    elif isinstance(c, list):
        try:
            i = int(last)
            if i < 0:
                raise IndexError
            del c[i]
        except (ValueError, IndexError):
            raise PatchError("Unable to remove index %s: out of bounds" % last)
    else:
        raise PatchError("doc is missing path: %s" % path)
    return doc


def json_patch(doc, ops):
    for op in ops:
        kind = op.get("op")
        path = op.get("path")
        if not isinstance(path, str):
            raise PatchError("operation missing path")
        if kind == "add":
            doc = _jp_add(doc, path, copy.deepcopy(op.get("value")))
        elif kind == "remove":
            doc = _jp_remove(doc, path)
        elif kind == "replace":
            _jp_get(doc, path)
            at = _parent(doc, path)
            if at is None:
                doc = copy.deepcopy(op.get("value"))
            else:
                c, last = at
                c[int(last) if isinstance(c, list) else last] = copy.deepcopy(op.get("value"))
        elif kind == "test":
            try:
                cur = _jp_get(doc, path)
            except PatchError:
                cur = None
            if cur != op.get("value"):
                raise PatchError("testing value %s failed: test failed" % path)
        elif kind in ("move", "copy"):
            frm = op.get("from")
            if not isinstance(frm, str):
                raise PatchError("operation missing from")
            value = copy.deepcopy(_jp_get(doc, frm))
            if kind == "move":
                doc = _jp_remove(doc, frm)
            doc = _jp_add(doc, path, value)
        else:
            raise PatchError("Unexpected kind: %s" % kind)
    return doc


# Merge keys of built-in lists (patchMergeKey in the Go types); "*" = list of scalars merged as a set.
SMP_KEYS = {"containers": "name", "initContainers": "name", "ephemeralContainers": "name", "env": "name",
            "volumes": "name", "volumeMounts": "mountPath", "conditions": "type", "imagePullSecrets": "name",
            "ownerReferences": "uid", "hostAliases": "ip", "resourceClaims": "name", "finalizers": "*",
            "volumeDevices": "devicePath"}


def smp_merge_key(field, items):
    if field == "ports":
        for it in items:
            if isinstance(it, dict):
                return "containerPort" if "containerPort" in it else "port"
        return "port"
    return SMP_KEYS.get(field)


def strategic_merge(target, patch):
    """Strategic merge patch, simplified: maps merge, lists of maps with a merge key merge by key, the
    finalizers list merges as a set; $patch (replace/delete) and $deleteFromPrimitiveList honoured."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    directive = patch.get("$patch")
    if directive == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    result = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if k in ("$patch", "$retainKeys") or k.startswith("$setElementOrder/"):
            continue
        if k.startswith("$deleteFromPrimitiveList/"):
            field = k.split("/", 1)[1]
            if isinstance(result.get(field), list) and isinstance(v, list):
                result[field] = [x for x in result[field] if x not in v]
            continue
        if v is None:
            result.pop(k, None)
            continue
        cur = result.get(k)
        if isinstance(v, dict):
            if v.get("$patch") == "delete":
                result.pop(k, None)
            else:
                result[k] = strategic_merge(cur, v)
        elif isinstance(v, list):
            key = smp_merge_key(k, v + (cur if isinstance(cur, list) else []))
            if key == "*" and isinstance(cur, list):
                merged = list(cur)
                for x in v:
                    if x not in merged:
                        merged.append(copy.deepcopy(x))
                result[k] = merged
            elif key and key != "*":
                result[k] = merge_keyed_list(cur if isinstance(cur, list) else [], v, key, strategic_merge)
            else:
                result[k] = [x for x in copy.deepcopy(v)
                             if not (isinstance(x, dict) and x.get("$patch") == "delete")]
        else:
            result[k] = copy.deepcopy(v)
    return result


def merge_keyed_list(cur, patch, key, merge):
    out = list(cur)
    for item in patch:
        if not isinstance(item, dict) or key not in item:
            out.append(copy.deepcopy(item))
            continue
        idx = next((i for i, x in enumerate(out) if isinstance(x, dict) and x.get(key) == item[key]), None)
        if item.get("$patch") == "delete":
            if idx is not None:
                del out[idx]
            continue
        if idx is None:
            out.append(merge({}, item))
        else:
            out[idx] = merge(out[idx], item)
    return out


# ---- server-side apply (simplified field ownership between appliers) ----

def apply_paths(cfg, builtin, prefix=()):
    """Leaf paths of an applied configuration (keyed-list elements are path steps of (key, value))."""
    out = set()
    if isinstance(cfg, dict) and cfg:
        for k, v in cfg.items():
            p = prefix + (k,)
            if isinstance(v, list) and builtin:
                key = smp_merge_key(k, v)
                if key and key != "*" and all(isinstance(x, dict) and key in x for x in v):
                    for x in v:
                        ep = p + ((key, json.dumps(x[key], sort_keys=True)),)
                        out.add(ep)
                        out |= apply_paths(x, builtin, ep)
                    continue
            if isinstance(v, dict) and v:
                out |= apply_paths(v, builtin, p)
            else:
                out.add(p)
    return out


def _step(cur, step):
    if isinstance(step, tuple):
        if not isinstance(cur, list):
            return None, None
        key, val = step
        for i, x in enumerate(cur):
            if isinstance(x, dict) and json.dumps(x.get(key), sort_keys=True) == val:
                return x, i
        return None, None
    if isinstance(cur, dict) and step in cur:
        return cur[step], step
    return None, None


def path_get(obj, path):
    cur = obj
    for s in path:
        cur, idx = _step(cur, s)
        if idx is None:
            return False, None
    return True, cur


def path_remove(obj, path):
    cur = obj
    for s in path[:-1]:
        cur, idx = _step(cur, s)
        if idx is None:
            return
    _, idx = _step(cur, path[-1])
    if idx is not None:
        del cur[idx]


def path_str(path):
    out = []
    for s in path:
        if isinstance(s, tuple):
            out.append("[%s=%s]" % (s[0], s[1]))
        else:
            out.append("." + s)
    return "".join(out)


def apply_merge(target, cfg, builtin):
    if not isinstance(cfg, dict):
        return copy.deepcopy(cfg)
    result = dict(target) if isinstance(target, dict) else {}
    for k, v in cfg.items():
        cur = result.get(k)
        if isinstance(v, dict):
            result[k] = apply_merge(cur, v, builtin)
        elif isinstance(v, list) and builtin:
            key = smp_merge_key(k, v)
            if key == "*":
                merged = [x for x in (cur if isinstance(cur, list) else [])]
                for x in v:
                    if x not in merged:
                        merged.append(copy.deepcopy(x))
                result[k] = merged
            elif key and all(isinstance(x, dict) and key in x for x in v):
                result[k] = merge_keyed_list(cur if isinstance(cur, list) else [], v, key,
                                             lambda a, b: apply_merge(a, b, builtin))
            else:
                result[k] = copy.deepcopy(v)
        else:
            result[k] = copy.deepcopy(v)
    return result
