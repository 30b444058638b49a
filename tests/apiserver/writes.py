"""The write pipeline of Api (api.py): create, update and delete of one object, with the
admission steps of kube-apiserver in its order (decoding, mutating admission, defaulting,
validation, the schema of a custom resource), generation, finalizers and graceful deletion."""

import copy
import json
import uuid

import serviceaccounts
from builtin_kinds import CONTAINER_ORDER, POD_SPEC_ORDER, service_preserve
from crds import admit_rules, admit_schema, unknown_field_warnings
from decoding import check_body_kind
from errors import Raw, api_error, err_bad_request, err_internal, fe_forbidden, fe_invalid, fe_required, \
    status_body
from metadata import name_problems, validate_meta
from objects import META_ORDER, generate_suffix, now_rfc3339, ordered, rfc3339_after, sort_keys, \
    strip_server_meta
from store import ADDED, DELETED, MODIFIED


class ObjectWrites:
    """The writes of Api, a part of it (api.py); the caller holds the store lock."""

    def _decode(self, kind, version, obj, req, warnings, raw):
        """obj as the decoder leaves it (refused when it cannot be the kind, unknown fields named),
        in the storage version; returns its metadata. raw: the request's bytes, if obj is them."""
        check_body_kind(kind, version, obj, raw=raw)
        self._field_validation(kind, version, obj, req, warnings)
        obj["apiVersion"] = kind.gv(kind.versions[0])
        obj["kind"] = kind.kind
        return obj["metadata"]

    def _field_validation(self, kind, version, body, req, warnings):
        """Unknown fields of a custom resource body as the decoder sees it (before the status or
        the rest is dropped for the endpoint): 400 under fieldValidation=Strict, else warnings."""
        mode = (req.q("fieldValidation") or "Warn") if req else "Warn"
        warnings.extend(unknown_field_warnings(kind, version, body, mode))

    def _finish_object(self, kind, obj):
        """Key order like the real server's encoder."""
        if kind.crd:
            return sort_keys(obj)
        out = {"kind": obj.get("kind"), "apiVersion": obj.get("apiVersion"),
               "metadata": ordered(obj.get("metadata") or {}, META_ORDER)}
        for k in kind.top:
            if k in obj:
                out[k] = obj[k]
        for k, v in obj.items():
            if k not in out:
                out[k] = v
        return out

    def _validate(self, kind, obj, old, errors):
        name = obj["metadata"].get("name", "")
        if old is None:
            for p in name_problems(name, kind.name_rule):
                errors.append(fe_invalid("metadata.name", name, p))
        validate_meta(kind, obj, errors)
        if kind.validator:
            kind.validator(obj, errors)
        if old is not None and kind.update_validator:
            kind.update_validator(old, obj, errors)

    # ------------------------------------------------------------------ create
    def _create_object(self, kind, version, ns, body, query, req=None, warnings=None, dry_run=False):
        """Create from a request body. Caller holds the store lock. Returns the stored object."""
        warnings = warnings if warnings is not None else []
        obj = copy.deepcopy(body)
        meta = self._decode(kind, version, obj, req, warnings, getattr(req, "body_bytes", None) if req else None)
        if meta.get("resourceVersion"):
            raise err_internal("resourceVersion should not be set on objects to be created")
        set_namespace(kind, meta, ns)
        if kind.namespaced:
            # NamespaceLifecycle admission: content only goes into a namespace that exists
            ns_kind = self.store.by_gvr[("", "v1", "namespaces")]
            if self.store.get(ns_kind, None, ns) is None:
                raise api_error(404, "NotFound", 'namespaces "%s" not found' % ns,
                                {"name": ns, "kind": "namespaces"})
        name = meta.get("name") or ""
        if not name and meta.get("generateName"):
            for _ in range(8):
                candidate = meta["generateName"] + generate_suffix()
                if self.store.get(kind, ns, candidate) is None:
                    break
            name = candidate
            meta["name"] = name
        strip_server_meta(meta)
        if kind.status:
            obj.pop("status", None)
        obj, schema_errors = admit_schema(kind, version, obj)
        meta = obj["metadata"]
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = now_rfc3339()
        if kind.generation:
            meta["generation"] = 1
        if kind.defaulter and name:
            kind.defaulter(obj, True)
        if kind.skey == ("", "pods") and self.service_accounts and name:
            self._admit_service_account(obj, ns, (body.get("metadata") or {}) if isinstance(body, dict) else {})
        if kind.skey == ("", "pods") and name and not dry_run:
            self._admit_quota(ns, name)
        errors = []
        if not name:
            errors.append(fe_required("metadata.name", "name or generateName is required"))
        else:
            self._validate(kind, obj, None, errors)
        errors.extend(schema_errors)
        admit_rules(kind, version, obj, None, errors)
        if errors:
            raise kind.invalid(name, errors)
        if self.store.get(kind, ns, name) is not None:
            raise kind.already_exists(name)
        obj["metadata"]["resourceVersion"] = ""     # keeps its place in the key order
        obj = self._finish_object(kind, obj)
        if dry_run:
            obj["metadata"]["resourceVersion"] = ""
            return obj
        return self.store.commit(kind, ADDED, ns, name, obj, None)

    def _admit_quota(self, ns, name):
        """The ResourceQuota admission plugin, for the object count it is most often used for:
        `pods` (or `count/pods`) in spec.hard. Pods in a terminal phase do not count, as in
        kube-apiserver; the refusal is its 403 and message."""
        quota_kind = self.store.by_gvr[("", "v1", "resourcequotas")]
        pods = self.store.by_gvr[("", "v1", "pods")]
        for (qns, qname), quota in sorted(self.store.objects[quota_kind.skey].items()):
            hard = (quota.get("spec") or {}).get("hard") or {}
            key = "pods" if "pods" in hard else "count/pods" if "count/pods" in hard else None
            if qns != ns or key is None:
                continue
            try:
                limit = int(str(hard[key]))
            except ValueError:
                continue
            used = sum(1 for (pns, _), p in self.store.objects[pods.skey].items()
                       if pns == ns and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed"))
            if used + 1 > limit:
                raise api_error(403, "Forbidden",
                                'pods "%s" is forbidden: exceeded quota: %s, requested: %s=1, used: %s=%d, '
                                'limited: %s=%d' % (name, qname, key, key, used, key, limit),
                                {"name": name, "kind": "pods"})

    def _admit_service_account(self, pod, ns, given_meta):
        """The ServiceAccount admission plugin (mutating admission runs before validation and
        before a generateName is filled in, which is the name its refusal then quotes)."""
        sa_kind = self.store.by_gvr[("", "v1", "serviceaccounts")]
        why = serviceaccounts.admit_pod(pod, ns, lambda n, name: self.store.get(sa_kind, n, name), generate_suffix)
        if why:
            shown = given_meta.get("name") or given_meta.get("generateName") or ""
            raise api_error(403, "Forbidden", 'pods "%s" is forbidden: %s' % (shown, why),
                            {"name": shown, "kind": "pods"})
        spec = pod.get("spec")
        if isinstance(spec, dict):
            for key in ("initContainers", "containers"):
                if isinstance(spec.get(key), list):
                    spec[key] = [ordered(c, CONTAINER_ORDER) for c in spec[key]]
            pod["spec"] = ordered(spec, POD_SPEC_ORDER)

    # ------------------------------------------------------------------ update
    def _update_object(self, kind, version, ns, name, old, new, sub, req, warnings, rv_required,
                       dry_run=False, from_patch=False):
        """Replace old by new (already a full object). Returns (obj, code). Caller holds the lock."""
        meta = self._decode(kind, version, new, req, warnings,
                            getattr(req, "body_bytes", None) if req is not None and not from_patch else None)
        set_namespace(kind, meta, ns)
        bname = meta.get("name") or ""
        if bname != name:
            if from_patch:
                raise kind.invalid(name, [fe_invalid("metadata.name", bname, "field is immutable")])
            raise err_bad_request("the name of the object (%s) does not match the name on the URL (%s)" % (
                bname, name))
        old_meta = old["metadata"]
        given_rv = meta.get("resourceVersion")
        if given_rv:
            if given_rv != old_meta["resourceVersion"]:
                raise kind.conflict(name)
        elif rv_required and not kind.unconditional_update:
            raise kind.invalid(name, [fe_invalid("metadata.resourceVersion", Raw("0x0"),
                                                 "must be specified for an update")])
        if meta.get("uid") and meta["uid"] != old_meta["uid"]:
            raise kind.conflict(name, "Precondition failed: UID in precondition: %s, UID in object meta: %s" % (
                old_meta["uid"], meta["uid"]))
        if sub == "status":
            status = new.get("status")
            has_status = "status" in new
            new = copy.deepcopy(old)
            if has_status:
                new["status"] = status
            else:
                new.pop("status", None)
            meta = new["metadata"]
        else:
            if kind.status:
                if "status" in old:
                    new["status"] = copy.deepcopy(old["status"])
                else:
                    new.pop("status", None)
            for k in ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds",
                      "generation"):
                if k in old_meta:
                    meta[k] = old_meta[k]
                else:
                    meta.pop(k, None)
            meta.pop("managedFields", None)
            meta.pop("selfLink", None)
            if kind.skey == ("", "services"):
                service_preserve(old, new)
        new, schema_errors = admit_schema(kind, version, new)
        meta = new["metadata"]
        if kind.defaulter:
            kind.defaulter(new, False, old, sub)
        errors = []
        self._validate(kind, new, old, errors)
        if old_meta.get("deletionTimestamp"):
            added = [f for f in (meta.get("finalizers") or []) if f not in (old_meta.get("finalizers") or [])]
            if added:
                errors.append(fe_forbidden("metadata.finalizers", "no new finalizers can be added if the object "
                                                                  "is being deleted, found new finalizers %s" %
                                           json.dumps(added)))
        errors.extend(schema_errors)
        admit_rules(kind, version, new, old, errors)
        if errors:
            raise kind.invalid(name, errors)
        if kind.generation:
            if kind.generation == "spec":
                changed = old.get("spec") != new.get("spec")
            else:
                skip = ("metadata", "status") if kind.status else ("metadata",)
                changed = ({k: v for k, v in old.items() if k not in skip} !=
                           {k: v for k, v in new.items() if k not in skip})
            meta["generation"] = old_meta.get("generation", 1) + (1 if changed else 0)
        meta["resourceVersion"] = old_meta["resourceVersion"]
        new = self._finish_object(kind, new)
        if new == old:
            return old, 200
        if dry_run:
            return new, 200
        stored = self.store.commit(kind, MODIFIED, ns, name, new, old)
        if stored["metadata"].get("deletionTimestamp") and not stored["metadata"].get("finalizers"):
            gone = copy.deepcopy(stored)
            stored = self.store.commit(kind, DELETED, ns, name, gone, stored)
        return stored, 200

    # ------------------------------------------------------------------ delete
    def _delete_object(self, kind, ns, name, options, dry_run=False):
        """Returns (response body object, code, deleted_obj_or_None). Caller holds the lock."""
        old = self.store.get(kind, ns, name)
        if old is None:
            raise kind.not_found(name)
        old_meta = old["metadata"]
        pre = options.get("preconditions") if isinstance(options, dict) else None
        if isinstance(pre, dict):
            conflict_kind = kind.qualified_kind
            if pre.get("uid") and pre["uid"] != old_meta["uid"]:
                raise api_error(409, "Conflict", 'Operation cannot be fulfilled on %s "%s": the UID in the '
                                'precondition (%s) does not match the UID in record (%s). The object might '
                                'have been deleted and then recreated' % (conflict_kind, name, pre["uid"],
                                                                          old_meta["uid"]),
                                kind.details(name, use_kind=True))
            if pre.get("resourceVersion") and pre["resourceVersion"] != old_meta["resourceVersion"]:
                raise api_error(409, "Conflict", 'Operation cannot be fulfilled on %s "%s": the ResourceVersion '
                                'in the precondition (%s) does not match the ResourceVersion in record (%s). '
                                'The object might have been modified' % (conflict_kind, name,
                                                                         pre["resourceVersion"],
                                                                         old_meta["resourceVersion"]),
                                kind.details(name, use_kind=True))
        grace = self._pod_grace(old, options) if kind.skey == ("", "pods") else 0
        if old_meta.get("deletionTimestamp"):
            # already being deleted: only a shorter grace period changes anything (a kubelet's
            # final delete with gracePeriodSeconds=0 removes the pod)
            have = old_meta.get("deletionGracePeriodSeconds") or 0
            if dry_run or grace >= have or kind.skey != ("", "pods"):
                if kind.return_deleted:
                    return old, 200, None
                return self._success_status(kind, old), 200, None
        elif dry_run:
            return old, 200, None
        if grace > 0 or (old_meta.get("deletionTimestamp") and old_meta.get("finalizers")):
            # A pod bound to a node is deleted gracefully: it stays, Terminating, until its
            # kubelet has stopped it and deletes it again with gracePeriodSeconds=0. (Or a pod
            # held by finalizers whose grace period was shortened.)
            marked = copy.deepcopy(old)
            m = marked["metadata"]
            m["deletionTimestamp"] = rfc3339_after(grace)
            m["deletionGracePeriodSeconds"] = grace
            marked["metadata"] = ordered(m, META_ORDER)
            stored = self.store.commit(kind, MODIFIED, ns, name, marked, old)
            return stored, 200, None
        if not old_meta.get("deletionTimestamp") and (old_meta.get("finalizers") or kind.graceful):
            marked = copy.deepcopy(old)
            m = marked["metadata"]
            m["deletionTimestamp"] = now_rfc3339()
            m["deletionGracePeriodSeconds"] = 0
            if m.get("generation"):
                m["generation"] += 1
            marked["metadata"] = ordered(m, META_ORDER) if not kind.crd else sort_keys(m)
            if kind.crd:
                marked = sort_keys(marked)
            stored = self.store.commit(kind, MODIFIED, ns, name, marked, old)
            if m.get("finalizers"):
                return stored, 200, None
            old = stored
        gone = copy.deepcopy(old)
        stored = self.store.commit(kind, DELETED, ns, name, gone, old)
        if kind.skey == ("", "namespaces"):
            self._delete_namespace_contents(name)
        if kind.return_deleted:
            return stored, 200, stored
        return self._success_status(kind, stored), 200, stored

    @staticmethod
    def _pod_grace(pod, options):
        """The grace period a pod deletion gets, as the real pod strategy computes it: the
        request's gracePeriodSeconds, else the pod's terminationGracePeriodSeconds (30); 0 for a
        pod bound to no node or already Succeeded or Failed."""
        spec, status = pod.get("spec") or {}, pod.get("status") or {}
        if not spec.get("nodeName") or status.get("phase") in ("Succeeded", "Failed"):
            return 0
        grace = options.get("gracePeriodSeconds") if isinstance(options, dict) else None
        if not isinstance(grace, int) or isinstance(grace, bool):
            grace = spec.get("terminationGracePeriodSeconds")
            if not isinstance(grace, int) or isinstance(grace, bool):
                grace = 30
        return max(grace, 0)

    def _success_status(self, kind, obj):
        d = {"name": obj["metadata"]["name"]}
        if kind.group:
            d["group"] = kind.group
        d["kind"] = kind.plural
        d["uid"] = obj["metadata"]["uid"]
        return status_body(None, None, None, d, status="Success")

    def _delete_namespace_contents(self, ns):
        for kind in list(self.store.kinds):
            if not kind.namespaced:
                continue
            for (ons, oname), obj in sorted(self.store.objects[kind.skey].items()):
                if ons == ns:
                    self.store.commit(kind, DELETED, ons, oname, copy.deepcopy(obj), obj)


def set_namespace(kind, meta, ns):
    """metadata.namespace from the path (400 when the body names another one); none for a
    cluster-scoped kind."""
    if kind.namespaced:
        bns = meta.get("namespace")
        if bns and bns != ns:
            raise err_bad_request("the namespace of the provided object does not match the namespace sent on "
                                  "the request")
        meta["namespace"] = ns
    else:
        meta.pop("namespace", None)
