"""The control API under /_double/ (README.md's table), a part of Api (api.py): the request log,
the tokens, the faults it injects (failNext, delayLeases, blockWatches, dropWatches, compact,
restart) and reset."""

import copy
import threading
import time

from crds import kind_from_crd
from errors import api_error, err_bad_request, err_internal, err_not_found_generic
from store import DELETED

LOG_MAX = 200000                    # request log entries kept


class Control:
    """The control requests and the state they set, which the HTTP layer consults per request."""

    def control(self, method, path, body):
        if path == "/_double/log" and method == "GET":
            return None  # handled by the caller (needs the query string)
        if path == "/_double/log/clear" and method == "POST":
            with self.meta_lock:
                self.log = []
            return {"ok": True}
        if path == "/_double/tokens" and method == "POST":
            toks = body.get("tokens") if isinstance(body, dict) else None
            if not isinstance(toks, list) or not all(isinstance(t, str) for t in toks):
                raise err_bad_request('expected {"tokens": ["..."]}')
            with self.meta_lock:
                self.tokens = set(toks)
            return {"ok": True}
        if path == "/_double/fault" and method == "POST":
            if not isinstance(body, dict):
                raise err_bad_request("expected a JSON object")
            return self.apply_fault(body)
        if path == "/_double/state" and method == "GET":
            with self.store.lock:
                return {"resourceVersion": str(self.store.rv), "compactedRV": str(self.store.compacted),
                        "watchers": len(self.store.watchers)}
        if path == "/_double/reset" and method == "POST":
            self.reset()
            return {"ok": True}
        if path == "/_double/crd" and method == "POST":
            if not isinstance(body, dict):
                raise err_bad_request("expected a JSON object")
            try:
                kind = kind_from_crd(body)
            except (KeyError, TypeError, AttributeError) as e:
                raise err_bad_request("bad CRD description: missing %s" % e)
            with self.store.lock:
                self.store.add_kind(kind)
                if self.controllers:
                    self._ensure_crd_object(kind)
            return {"ok": True}
        raise err_not_found_generic()

    def apply_fault(self, body):
        known = {"dropWatches", "blockWatches", "compact", "failNext", "restart", "delayLeases", "version"}
        unknown = [k for k in body if k not in known]
        if unknown:
            raise err_bad_request("unknown fault: %s" % ", ".join(unknown))
        if "failNext" in body:
            fn = body["failNext"]
            if not isinstance(fn, dict):
                raise err_bad_request("failNext must be an object")
            count = int(fn.get("count", 1))
            code = int(fn.get("code", 500))
            with self.meta_lock:
                if count <= 0:
                    self.faults = []
                else:
                    self.faults.append({"count": count, "code": code, "retryAfter": fn.get("retryAfter"),
                                        "verb": fn.get("verb"), "resource": fn.get("resource")})
        if "version" in body:
            v = body["version"]
            if v is not None and (not isinstance(v, dict) or not all(isinstance(x, str) for x in v.values())):
                raise err_bad_request('version must be an object of strings ({"gitVersion": "v1.29.4", '
                                      '"major": "1", "minor": "29"}) or null')
            self.version_override = v
        if "blockWatches" in body:
            self.block_watches = bool(body["blockWatches"])
        if "delayLeases" in body:
            dl = body["delayLeases"]
            holder = None
            if isinstance(dl, dict):
                holder = dl.get("holder")
                dl = dl.get("seconds", 0)
            if isinstance(dl, bool) or not isinstance(dl, (int, float)) or dl < 0 or \
                    (holder is not None and not isinstance(holder, str)):
                raise err_bad_request('delayLeases takes SECONDS or {"seconds": S, "holder": "identity"}')
            with self.meta_lock:
                self.lease_delay = {"seconds": float(dl), "holder": holder} if dl > 0 else None
        compact = body.get("compact")
        if compact not in (None, False, True, "storage"):
            raise err_bad_request('compact must be true (storage and the watch window) or "storage"')
        if compact:
            self.store.compact(storage_only=compact == "storage")
        drop = body.get("dropWatches")
        if drop:
            with self.store.lock:
                watchers = list(self.store.watchers)
            for w in watchers:
                with w.cond:
                    if drop == "midEvent":
                        w.drop_mid_event = True
                    else:
                        w.drop = True
                    w.cond.notify()
            if drop != "midEvent":
                def force_close(ws=watchers):
                    time.sleep(0.5)
                    for x in ws:
                        with self.store.lock:
                            still = x in self.store.watchers
                        if still and x.conn is not None:
                            x.conn.kill()
                threading.Thread(target=force_close, daemon=True).start()
        if body.get("restart"):
            r = body["restart"]
            down_ms = int(r.get("downMs", 500)) if isinstance(r, dict) else 500
            if self.server is not None:
                threading.Thread(target=self.server.restart, args=(down_ms / 1000.0,), daemon=True).start()
        return {"ok": True}

    def reset(self):
        """Deletes every object but the system namespaces, then puts back what the server starts
        with (the `kubernetes` Service, each namespace's ServiceAccount and kube-root-ca.crt, the
        --rbac objects, a CustomResourceDefinition for each custom resource served)."""
        with self.store.lock:
            running, self.controllers = self.controllers, False
            try:
                for kind in list(self.store.kinds):
                    for (ons, oname), obj in sorted(self.store.objects[kind.skey].items()):
                        if kind.skey == ("", "namespaces") and oname in self.system_namespaces:
                            continue
                        self.store.commit(kind, DELETED, ons, oname, copy.deepcopy(obj), obj)
                self.store.applied = {}
            finally:
                self.controllers = running
            if running:
                self._seed()

    def lease_write_delay(self, verb, resource, body):
        """Seconds to hold an update or patch of a Lease (delayLeases), 0 for anything else. With
        a holder, only writes whose spec.holderIdentity names it are held."""
        with self.meta_lock:
            d = self.lease_delay
        if not d or resource != "leases" or verb not in ("update", "patch"):
            return 0
        if d["holder"] is not None:
            spec = body.get("spec") if isinstance(body, dict) else None
            if not isinstance(spec, dict) or spec.get("holderIdentity") != d["holder"]:
                return 0
        return d["seconds"]

    def take_fault(self, verb, resource):
        with self.meta_lock:
            for f in self.faults:
                if f["count"] <= 0:
                    continue
                if f.get("verb") and f["verb"] != verb:
                    continue
                if f.get("resource") and f["resource"] != resource:
                    continue
                f["count"] -= 1
                self.faults = [x for x in self.faults if x["count"] > 0]
                return f
        return None

    def add_log(self, entry):
        with self.meta_lock:
            self.log_seq += 1
            entry["seq"] = self.log_seq
            self.log.append(entry)
            if len(self.log) > LOG_MAX:
                del self.log[:len(self.log) - LOG_MAX]

    def log_answer(self, entry, code):
        """Logs a request with the status code it was answered with."""
        entry["code"] = code
        self.add_log(entry)

    def get_log(self, since):
        with self.meta_lock:
            entries = [e for e in self.log if e["seq"] >= since]
            nxt = self.log_seq + 1
        return {"entries": entries, "next": nxt}


def fault_error(fault):
    """The ApiError a failNext rule answers with."""
    code = fault["code"]
    headers = {}
    if code == 429:
        details = {}
        if fault.get("retryAfter") is not None:
            headers["Retry-After"] = str(int(fault["retryAfter"]))
            details["retryAfterSeconds"] = int(fault["retryAfter"])
        return api_error(429, "TooManyRequests", "Too many requests, please try again later.", details,
                         headers=headers)
    if code == 503:
        if fault.get("retryAfter") is not None:
            headers["Retry-After"] = str(int(fault["retryAfter"]))
        return api_error(503, "ServiceUnavailable", "the server is currently unable to handle the request "
                                                    "(injected fault)", {}, headers=headers)
    if code == 500:
        return err_internal("injected fault")
    return api_error(code, "Unknown", "the server responded with the status code %d (injected fault)" % code, {})
