"""The REST verbs of Api (api.py) on the resources it serves: create, get, update, the patch types
and server-side apply, delete and deletecollection, list with selectors and pagination, and the
registration of watches (http_server.py streams them)."""

import collections
import copy

from decoding import check_body_kind
from errors import api_error, err_bad_request, err_method_not_allowed, err_unprocessable_generic, go_quote, \
    status_body
from kinds import render
from objects import now_rfc3339
from patches import PatchError, apply_merge, apply_paths, json_patch, merge_patch, path_get, path_remove, \
    path_str, strategic_merge
from selection import SelectorError, fields_match, labels_match, parse_field_selector, parse_label_selector
import release
from store import ADDED, MODIFIED, Watcher, decode_continue, encode_continue


class Verbs:
    """The verbs, a part of Api: handle() serves a routed request by its method."""

    def handle(self, req):
        """Returns (code, body_dict, headers) or raises ApiError. Watches are handled by the caller."""
        kind = req.kind
        if kind.create_only:
            verbs = {"POST": getattr(self, kind.create_only)} if not req.name else {}
        elif req.sub == "token":
            verbs = {"POST": self.do_token}
        elif req.name == "":
            verbs = {"GET": self.do_list}
            if req.ns is not None or not kind.namespaced:
                verbs.update(POST=self.do_create, DELETE=self.do_delete_collection)
        elif req.sub == "binding":
            verbs = {"POST": self.do_bind}
        elif req.sub == "log":
            verbs = {"GET": self.do_log}  # podlogs.py
        else:
            verbs = {"GET": self.do_get, "PUT": self.do_update, "PATCH": self.do_patch}
            if not req.sub:
                verbs["DELETE"] = self.do_delete
        if req.method not in verbs:
            raise err_method_not_allowed()
        return verbs[req.method](req)

    def do_create(self, req):
        self._require_json(req)
        body = self._body(req)
        warnings = []
        with self.store.lock:
            obj = self._create_object(req.kind, req.version, req.ns, body, req.query, req, warnings,
                                      dry_run=self._dry_run(req))
        return 201, render(req.kind, obj, req.version), self._warn_headers(warnings)

    def do_bind(self, req):
        """POST pods/<name>/binding, as a scheduler binds a pod: sets spec.nodeName and the
        PodScheduled condition, once; a pod already bound is a Conflict."""
        self._require_json(req)
        body = self._body(req)
        target = body.get("target") if isinstance(body, dict) else None
        node = target.get("name") if isinstance(target, dict) else None
        if not isinstance(node, str) or not node:
            raise api_error(422, "Invalid", 'Binding.core "%s" is invalid: target.name: Required value' % req.name,
                            {"name": req.name, "kind": "Binding",
                             "causes": [{"reason": "FieldValueRequired", "message": "Required value",
                                         "field": "target.name"}]})
        with self.store.lock:
            old = self.store.get(req.kind, req.ns, req.name)
            if old is None:
                raise req.kind.not_found(req.name)
            have = (old.get("spec") or {}).get("nodeName")
            if have:
                raise api_error(409, "Conflict", 'Operation cannot be fulfilled on pods/binding "%s": pod %s is '
                                'already assigned to node "%s"' % (req.name, req.name, have),
                                {"name": req.name, "kind": "pods/binding"})
            if old["metadata"].get("deletionTimestamp"):
                raise api_error(409, "Conflict", 'Operation cannot be fulfilled on pods/binding "%s": pod %s is '
                                'being deleted, cannot be assigned to a host' % (req.name, req.name),
                                {"name": req.name, "kind": "pods/binding"})
            new = copy.deepcopy(old)
            new.setdefault("spec", {})["nodeName"] = node
            status = new.setdefault("status", {})
            conds = [c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"]
            conds.append({"type": "PodScheduled", "status": "True", "lastProbeTime": None,
                          "lastTransitionTime": now_rfc3339()})
            status["conditions"] = conds
            self.store.commit(req.kind, MODIFIED, req.ns, req.name, new, old)
        return 201, status_body(201, "", None, status="Success"), {}

    def do_get(self, req):
        with self.store.lock:
            obj = self.store.get(req.kind, req.ns, req.name)
        if obj is None:
            raise req.kind.not_found(req.name)
        return 200, render(req.kind, obj, req.version), {}

    def do_update(self, req):
        self._require_json(req)
        body = self._body(req)
        kind = req.kind
        warnings = []
        with self.store.lock:
            old = self.store.get(kind, req.ns, req.name)
            if old is None:
                if kind.create_on_update and not req.sub:
                    if not isinstance(body, dict):
                        raise err_bad_request("the body of the request must be a JSON object")
                    bname = (body.get("metadata") or {}).get("name") if isinstance(body.get("metadata"),
                                                                                     dict) else None
                    if bname != req.name:
                        raise err_bad_request("the name of the object (%s) does not match the name on the URL "
                                              "(%s)" % (bname or "", req.name))
                    b = copy.deepcopy(body)
                    b["metadata"].pop("resourceVersion", None)
                    obj = self._create_object(kind, req.version, req.ns, b, req.query, req, warnings,
                                              dry_run=self._dry_run(req))
                    return 201, render(kind, obj, req.version), self._warn_headers(warnings)
                raise kind.not_found(req.name)
            obj, code = self._update_object(kind, req.version, req.ns, req.name, old, copy.deepcopy(body),
                                            req.sub, req, warnings, rv_required=True,
                                            dry_run=self._dry_run(req))
        return code, render(kind, obj, req.version), self._warn_headers(warnings)

    def do_patch(self, req):
        kind = req.kind
        ct = req.content_type
        warnings = []
        patch_types = ("application/json-patch+json", "application/merge-patch+json",
                       "application/strategic-merge-patch+json", "application/apply-patch+yaml")
        if ct not in patch_types or (kind.crd and ct == "application/strategic-merge-patch+json"):
            accepted = "application/json-patch+json, application/merge-patch+json, "
            if not kind.crd:
                accepted += "application/strategic-merge-patch+json, "
            accepted += "application/apply-patch+yaml"
            raise api_error(415, "UnsupportedMediaType", "the body of the request was in an unknown format - "
                                                         "accepted media types include: " + accepted)
        if ct == "application/apply-patch+yaml":
            return self.do_apply(req)
        if req.q("force") is not None:
            raise err_bad_request("force: Invalid value: %s: may not be specified for non-apply patch" %
                                  go_quote(req.q("force")))
        patch = self._body(req)
        dry_run = self._dry_run(req)
        with self.store.lock:
            old = self.store.get(kind, req.ns, req.name)
            if old is None:
                raise kind.not_found(req.name)
            current = copy.deepcopy(render(kind, old, req.version))
            if ct == "application/json-patch+json":
                if not isinstance(patch, list) or not all(isinstance(op, dict) for op in patch):
                    raise err_bad_request("json: cannot unmarshal object into Go value of type jsonpatch.Patch")
                try:
                    new = json_patch(current, copy.deepcopy(patch))
                except PatchError:
                    raise err_unprocessable_generic()
                except (ValueError, IndexError, TypeError):
                    raise err_unprocessable_generic()
            elif ct == "application/merge-patch+json":
                if not isinstance(patch, dict):
                    raise err_bad_request("error decoding patch: the patch must be a JSON object")
                new = merge_patch(current, patch)
            else:
                if not isinstance(patch, dict):
                    raise err_bad_request("error decoding patch: the patch must be a JSON object")
                new = strategic_merge(current, patch)
            new = copy.deepcopy(new)
            obj, code = self._update_object(kind, req.version, req.ns, req.name, old, new, req.sub, req,
                                            warnings, rv_required=False, dry_run=dry_run, from_patch=True)
        return code, render(kind, obj, req.version), self._warn_headers(warnings)

    def do_apply(self, req):
        kind = req.kind
        manager = req.q("fieldManager")
        if not manager:
            raise err_bad_request("PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is "
                                  "required for apply patch")
        force = (req.q("force") or "").lower() in ("true", "1")
        if req.body_error:
            raise err_bad_request("error decoding YAML: " + req.body_error + " (the double accepts JSON "
                                  "documents only)")
        cfg = self._body(req)
        if not isinstance(cfg, dict):
            raise err_bad_request("error decoding YAML: the applied configuration must be an object")
        check_body_kind(kind, req.version, copy.deepcopy(cfg), for_apply=True)
        meta = cfg.get("metadata") or {}
        if meta.get("name") not in (None, "", req.name):
            raise err_bad_request("the name of the object (%s) does not match the name on the URL (%s)" % (
                meta.get("name"), req.name))
        if kind.namespaced and meta.get("namespace") not in (None, "", req.ns):
            raise err_bad_request("the namespace of the provided object does not match the namespace sent on "
                                  "the request")
        builtin = not kind.crd
        # what this manager may set through this endpoint
        owned_cfg = copy.deepcopy(cfg)
        if kind.status:
            if req.sub == "status":
                owned_cfg = {"status": owned_cfg.get("status")} if "status" in owned_cfg else {}
            else:
                owned_cfg.pop("status", None)
        for k in ("apiVersion", "kind"):
            owned_cfg.pop(k, None)
        m = owned_cfg.get("metadata")
        if isinstance(m, dict):
            for k in ("name", "namespace", "resourceVersion", "uid", "creationTimestamp", "generation",
                      "managedFields"):
                m.pop(k, None)
            if not m:
                owned_cfg.pop("metadata", None)
        new_paths = apply_paths(owned_cfg, builtin)
        dry_run = self._dry_run(req)
        warnings = []
        with self.store.lock:
            akey = (kind.skey, req.ns, req.name)
            old = self.store.get(kind, req.ns, req.name)
            if old is None:
                if req.sub:
                    raise kind.not_found(req.name)
                body = copy.deepcopy(cfg)
                body.setdefault("metadata", {})["name"] = req.name
                body["metadata"].pop("resourceVersion", None)
                obj = self._create_object(kind, req.version, req.ns, body, req.query, req, warnings,
                                          dry_run=dry_run)
                if not dry_run:
                    self.store.applied[akey] = {manager: new_paths}
                return 201, render(kind, obj, req.version), self._warn_headers(warnings)
            given_rv = meta.get("resourceVersion")
            if given_rv and given_rv != old["metadata"]["resourceVersion"]:
                raise kind.conflict(req.name)
            managers = self.store.applied.get(akey, {})
            current = copy.deepcopy(render(kind, old, req.version))
            if not force:
                conflicts = []
                for other, paths in managers.items():
                    if other == manager:
                        continue
                    for p in sorted(new_paths & paths, key=path_str):
                        ok, cur_v = path_get(current, p)
                        _, new_v = path_get(owned_cfg, p)
                        if ok and cur_v != new_v and not isinstance(p[-1], tuple):
                            conflicts.append((other, p))
                if conflicts:
                    if len(conflicts) == 1:
                        text = 'conflict with "%s": %s' % (conflicts[0][0], path_str(conflicts[0][1]))
                    else:
                        by = collections.OrderedDict()
                        for mgr, p in conflicts:
                            by.setdefault(mgr, []).append(path_str(p))
                        text = "conflicts with"
                        for mgr, ps in by.items():
                            text += ' "%s"' % mgr
                            text += (": " + ps[0]) if len(ps) == 1 else ":" + "".join("\n- " + x for x in ps)
                    causes = [{"reason": "FieldManagerConflict", "message": 'conflict with "%s"' % mgr,
                               "field": path_str(p)} for mgr, p in conflicts]
                    details = kind.details(req.name)
                    details["causes"] = causes
                    raise api_error(409, "Conflict", "Apply failed with %d conflict%s: %s" % (
                        len(conflicts), "" if len(conflicts) == 1 else "s", text), details)
            # fields this manager applied before and no longer applies (and nobody else applies) go away
            prev_paths = managers.get(manager, set())
            others = set()
            for other, paths in managers.items():
                if other != manager:
                    others |= paths
            if force:
                for other in list(managers):
                    if other != manager:
                        managers[other] = managers[other] - new_paths
                others = set().union(*[p for o, p in managers.items() if o != manager]) if managers else set()
            stale = sorted(prev_paths - new_paths - others, key=len)
            removed = []
            for p in stale:
                if any(p[:len(r)] == r for r in removed):
                    continue
                path_remove(current, p)
                removed.append(p)
            new = apply_merge(current, owned_cfg, builtin)
            obj, code = self._update_object(kind, req.version, req.ns, req.name, old, new, req.sub, req,
                                            warnings, rv_required=False, dry_run=dry_run, from_patch=True)
            if not dry_run and self.store.get(kind, req.ns, req.name) is not None:
                managers = self.store.applied.setdefault(akey, managers)
                managers[manager] = new_paths
        return code, render(kind, obj, req.version), self._warn_headers(warnings)

    def do_delete(self, req):
        options = {}
        if req.body_bytes.strip():
            if req.body_error:
                raise err_bad_request(req.body_error)
            options = req.body_json if isinstance(req.body_json, dict) else {}
        if req.q("gracePeriodSeconds") not in (None, "") and "gracePeriodSeconds" not in options:
            try:
                options = dict(options, gracePeriodSeconds=int(req.q("gracePeriodSeconds")))
            except ValueError:
                raise err_bad_request("gracePeriodSeconds: Invalid value: %s: must be an integer" %
                                      go_quote(req.q("gracePeriodSeconds")))
        dry_run = self._dry_run(req)
        with self.store.lock:
            body, code, _ = self._delete_object(req.kind, req.ns, req.name, options, dry_run=dry_run)
        if body.get("kind") == "Status":
            return code, body, {}
        return code, render(req.kind, body, req.version), {}

    def do_delete_collection(self, req):
        kind = req.kind
        lsel, fsel = self._selectors(req)
        options = req.body_json if isinstance(req.body_json, dict) else {}
        items = []
        with self.store.lock:
            for (ons, oname), obj in sorted(self.store.objects[kind.skey].items()):
                if kind.namespaced and ons != req.ns:
                    continue
                if not (labels_match(lsel, (obj.get("metadata") or {}).get("labels")) and fields_match(fsel, obj)):
                    continue
                body, _, deleted = self._delete_object(kind, ons, oname, options)
                items.append(render(kind, deleted or body, req.version, in_list=True))
            rv = str(self.store.rv)
        return 200, self._list_body(kind, req.version, {"resourceVersion": rv}, items), {}

    def _selectors(self, req):
        try:
            lsel = parse_label_selector(req.q("labelSelector", ""))
            fsel = parse_field_selector(req.q("fieldSelector", ""), req.kind)
        except SelectorError as e:
            raise err_bad_request(str(e))
        if req.name and req.watch:
            fsel = fsel + [("=", "metadata.name", req.name)]
        return lsel, fsel

    def _list_body(self, kind, version, meta, items):
        if kind.crd:
            return {"apiVersion": kind.gv(version), "items": items, "kind": kind.kind + "List",
                    "metadata": {k: meta[k] for k in sorted(meta)}}
        return {"kind": kind.kind + "List", "apiVersion": kind.gv(version), "metadata": meta, "items": items}

    def _key(self, kind, req, ns, name):
        if kind.namespaced and req.ns is None:
            return ns + "/" + name
        return name

    def do_list(self, req):
        kind = req.kind
        lsel, fsel = self._selectors(req)
        limit = 0
        if req.q("limit"):
            try:
                limit = int(req.q("limit"))
            except ValueError:
                raise err_bad_request("limit: Invalid value: %s: must be a non-negative integer" %
                                      go_quote(req.q("limit")))
            if limit < 0:
                limit = 0
        token = req.q("continue") or ""
        with self.store.lock:
            start = ""
            first_page = True
            if token:
                if req.q("resourceVersion") not in (None, ""):
                    raise err_bad_request("specifying resource version is not allowed when using continue")
                rv, start = decode_continue(token)
                first_page = False
                if rv == -1:
                    snap = self.store.objects[kind.skey]
                    list_rv = self.store.rv
                else:
                    if rv < self.store.compacted:
                        new_token = encode_continue(-1, start)
                        raise api_error(410, "Expired", "The provided continue parameter is too old to display a "
                                        "consistent list result. You can start a new list without the continue "
                                        "parameter, or use the continue token in this response to retrieve the "
                                        "remainder of the results. Continuing with the provided token results in "
                                        "an inconsistent list - objects that were created, modified, or deleted "
                                        "between the time the first chunk was returned and now may show up in "
                                        "the list.", None, {"continue": new_token})
                    snap = self.store.snapshot(kind, rv) if rv < self.store.rv else self.store.objects[kind.skey]
                    list_rv = rv
            else:
                list_rv = self.store.rv
                snap = self.store.objects[kind.skey]
                rvq = req.q("resourceVersion")
                if rvq and req.q("resourceVersionMatch") == "Exact":
                    try:
                        want = int(rvq)
                    except ValueError:
                        raise err_bad_request("resourceVersion: Invalid value: %s: must be an integer" %
                                              go_quote(rvq))
                    if want < self.store.compacted:
                        raise api_error(410, "Expired", "The resourceVersion for the provided list is too old.")
                    snap = self.store.snapshot(kind, want)
                    list_rv = want
            entries = []
            for (ons, oname), obj in snap.items():
                if obj is None:
                    continue
                if kind.namespaced and req.ns is not None and ons != req.ns:
                    continue
                entries.append((self._key(kind, req, ons, oname), obj))
            entries.sort(key=lambda e: e[0])
        matched = []
        for key, obj in entries:
            if start and key < start:
                continue
            if labels_match(lsel, (obj.get("metadata") or {}).get("labels")) and fields_match(fsel, obj):
                matched.append((key, obj))
        meta = {"resourceVersion": str(list_rv)}
        if limit and len(matched) > limit:
            page = matched[:limit]
            rest = len(matched) - limit
            last = page[-1][0]
            rooted = first_page or release.continue_keys_rooted()
            meta["continue"] = encode_continue(list_rv, ("/" if rooted else "") + last + "\u0000")
            if not lsel and not fsel:
                meta["remainingItemCount"] = rest
        else:
            page = matched
        items = [render(kind, obj, req.version, in_list=True) for _, obj in page]
        return 200, self._list_body(kind, req.version, meta, items), {}

    # ------------------------------------------------------------------ watch registration
    def open_watch(self, req):
        """Registers a watcher. Returns (watcher, expired) where expired means: answer one ERROR event."""
        kind = req.kind
        lsel, fsel = self._selectors(req)
        rvq = req.q("resourceVersion") or ""
        bookmarks = (req.q("allowWatchBookmarks") or "").lower() in ("true", "1")
        w = Watcher(self.store, kind, req.version, req.ns if kind.namespaced else None, lsel, fsel, bookmarks)
        with self.store.lock:
            if rvq in ("", "0"):
                initial = []
                for (ons, oname), obj in self.store.objects[kind.skey].items():
                    if w.ns is not None and ons != w.ns:
                        continue
                    if w.matches(obj):
                        initial.append(((ons, oname), obj))
                initial.sort(key=lambda e: e[0])
                w.queue.extend((ADDED, obj) for _, obj in initial)
                w.start_rv = self.store.rv
            else:
                try:
                    since = int(rvq)
                except ValueError:
                    raise err_bad_request("resourceVersion: Invalid value: %s: must be an integer" % go_quote(rvq))
                if since < self.store.watch_compacted:
                    return w, True
                for ev in self.store.events_after(since):
                    item = w.translate(ev)
                    if item is not None:
                        w.queue.append(item)
                w.start_rv = max(since, 0)
            self.store.watchers.add(w)
        return w, False

    def close_watch(self, w):
        with self.store.lock:
            self.store.watchers.discard(w)

    def bookmark_rv(self, w):
        """The resourceVersion a bookmark may carry now, or None when events are still queued."""
        with self.store.lock:
            with w.cond:
                if w.queue:
                    return None
            return max(self.store.rv, w.start_rv)
