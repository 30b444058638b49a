"""The object store: one global resourceVersion, the history of events that watches replay from,
compaction, snapshots for paginated lists and their continue tokens, and the watchers each
write is fanned out to."""

import base64
import collections
import copy
import json
import threading

from errors import api_error, err_bad_request
from selection import fields_match, labels_match

ADDED, MODIFIED, DELETED, BOOKMARK, ERROR = "ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"
WATCH_QUEUE_MAX = 10000             # events buffered per watcher before it is closed
HISTORY_MAX = 200000                # events kept for watch replay; older ones are compacted


def encode_continue(rv, start):
    """A continue token as the real server makes it: the list's resourceVersion (-1: none, for a
    list that goes on inconsistently) and the key to start from."""
    raw = json.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": start}, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_continue(token):
    """(resourceVersion, start key) of a continue token; 400 with the real messages otherwise."""
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        data = json.loads(raw.decode())
    except Exception as e:  # noqa: BLE001 - any decoding problem is a bad request
        raise err_bad_request("continue key is not valid: %s" % e)
    if not isinstance(data, dict) or data.get("v") != "meta.k8s.io/v1":
        raise err_bad_request("continue key is not valid: server does not recognize this encoded version")
    start = data.get("start")
    rv = data.get("rv")
    if not isinstance(start, str) or not start:
        raise err_bad_request("continue key is not valid: encoded start key empty")
    if not isinstance(rv, int) or rv == 0:
        raise err_bad_request("continue key is not valid: incorrect encoded start resourceVersion "
                              "(version meta.k8s.io/v1)")
    start = start.lstrip("/")
    return rv, start


class HistoryEvent:
    __slots__ = ("rv", "etype", "skey", "ns", "name", "obj", "prev")

    def __init__(self, rv, etype, skey, ns, name, obj, prev):
        self.rv, self.etype, self.skey, self.ns, self.name, self.obj, self.prev = rv, etype, skey, ns, name, obj, prev


class Watcher:
    def __init__(self, store, kind, version, ns, lsel, fsel, bookmarks):
        self.store = store
        self.kind = kind
        self.version = version
        self.ns = ns
        self.lsel = lsel
        self.fsel = fsel
        self.bookmarks = bookmarks
        self.cond = threading.Condition()
        self.queue = collections.deque()
        self.overflow = False
        self.drop = False
        self.drop_mid_event = False
        self.conn = None
        self.start_rv = 0

    def matches(self, obj):
        if obj is None:
            return False
        return labels_match(self.lsel, (obj.get("metadata") or {}).get("labels")) and fields_match(self.fsel, obj)

    def translate(self, ev):
        """The event this watcher sees for a history event, or None (cacheWatcher semantics)."""
        if ev.skey != self.kind.skey:
            return None
        if self.ns is not None and ev.ns != self.ns:
            return None
        if ev.etype == ADDED:
            return (ADDED, ev.obj) if self.matches(ev.obj) else None
        if ev.etype == DELETED:
            return (DELETED, ev.obj) if self.matches(ev.prev) else None
        cur, old = self.matches(ev.obj), self.matches(ev.prev)
        if cur and old:
            return (MODIFIED, ev.obj)
        if cur:
            return (ADDED, ev.obj)
        if old:
            gone = copy.copy(ev.prev)
            gone["metadata"] = dict(gone.get("metadata") or {})
            gone["metadata"]["resourceVersion"] = ev.obj["metadata"]["resourceVersion"]
            return (DELETED, gone)
        return None

    def offer(self, ev):
        """Called with the store lock held, in resourceVersion order."""
        item = self.translate(ev)
        if item is None:
            return
        with self.cond:
            if self.overflow or self.drop:
                return
            if len(self.queue) >= WATCH_QUEUE_MAX:
                self.overflow = True
            else:
                self.queue.append(item)
            self.cond.notify()

    def wake(self):
        with self.cond:
            self.cond.notify()


ETCD_MAX_REQUEST = 1572864       # etcd's --max-request-bytes default (1.5 MiB)
GRPC_MAX_SEND = 2097152          # the gRPC message limit between kube-apiserver and etcd


def check_storage_size(obj):
    """etcd refuses a write larger than its request limit, and kube-apiserver answers 500 with
    etcd's words; above the gRPC message limit the client library refuses it first. Objects
    under kube-apiserver's 3 MiB body limit reach this (custom resources have no size rule of
    their own)."""
    size = len(json.dumps(obj, separators=(",", ":")))
    if size > GRPC_MAX_SEND:
        raise api_error(500, None, "rpc error: code = ResourceExhausted desc = trying to send message larger than "
                        "max (%d vs. %d)" % (size, GRPC_MAX_SEND))
    if size > ETCD_MAX_REQUEST:
        raise api_error(500, None, "etcdserver: request is too large")


class Store:
    def __init__(self):
        self.lock = threading.RLock()
        self.rv = 0
        self.compacted = 0           # storage: lists and continue tokens older than this are 410
        self.watch_compacted = 0     # the watch window: watches from older versions get ERROR 410
        self.objects = {}            # skey -> {(ns, name): obj}
        self.history = []            # HistoryEvent, ascending rv
        self.watchers = set()
        self.applied = {}            # (skey, ns, name) -> {manager: applied config}
        self.kinds = []
        self.by_gvr = {}             # (group, version, plural) -> Kind
        self.by_skey = {}
        self.written = {}            # skey -> resourceVersion of the kind's last write
        self.on_commit = None        # called after each write: (kind, etype, ns, name, obj, prev)

    # ---- kinds ----
    def kind_by_group_kind(self, group, kind_name):
        with self.lock:
            for k in self.kinds:
                if k.group == group and k.kind == kind_name:
                    return k
        return None

    def remove_kind(self, kind):
        """Stops serving a kind, as when its CRD is deleted (its objects go with it)."""
        with self.lock:
            if kind in self.kinds:
                self.kinds.remove(kind)
            for v in kind.versions:
                if self.by_gvr.get((kind.group, v, kind.plural)) is kind:
                    del self.by_gvr[(kind.group, v, kind.plural)]
            self.by_skey.pop(kind.skey, None)
            self.objects.pop(kind.skey, None)

    def add_kind(self, kind):
        with self.lock:
            for v in kind.versions:
                old = self.by_gvr.get((kind.group, v, kind.plural))
                if old is not None and old in self.kinds:
                    self.kinds.remove(old)
            self.kinds.append(kind)
            for v in kind.versions:
                self.by_gvr[(kind.group, v, kind.plural)] = kind
            self.by_skey[kind.skey] = kind
            self.objects.setdefault(kind.skey, {})

    def groups(self):
        """group -> list of versions (preferred first), built-in groups first like the real server."""
        out = collections.OrderedDict()
        builtin = [k for k in self.kinds if not k.crd and k.group]
        crds = sorted([k for k in self.kinds if k.crd], key=lambda k: k.group)
        for k in builtin + crds:
            vs = out.setdefault(k.group, [])
            for v in k.versions:
                if v not in vs:
                    vs.append(v)
        return out

    # ---- writes ----
    def _next_rv(self):
        self.rv += 1
        return self.rv

    def commit(self, kind, etype, ns, name, obj, prev):
        """Record a write: obj is owned by the store from now on (never mutated again)."""
        if etype != DELETED:
            check_storage_size(obj)
        rv = self._next_rv()
        obj["metadata"]["resourceVersion"] = str(rv)
        coll = self.objects[kind.skey]
        if etype == DELETED:
            coll.pop((ns, name), None)
            self.applied.pop((kind.skey, ns, name), None)
        else:
            coll[(ns, name)] = obj
        ev = HistoryEvent(rv, etype, kind.skey, ns, name, obj, prev)
        self.history.append(ev)
        if len(self.history) > HISTORY_MAX:
            drop = len(self.history) - HISTORY_MAX + HISTORY_MAX // 10
            self.compacted = max(self.compacted, self.history[drop - 1].rv)
            self.watch_compacted = max(self.watch_compacted, self.compacted)
            del self.history[:drop]
        for w in list(self.watchers):
            w.offer(ev)
        self.written[kind.skey] = rv
        if self.on_commit is not None:
            self.on_commit(kind, etype, ns, name, obj, prev)
        return obj

    def compact(self, storage_only=False):
        """Like the real server's compaction: it writes its own bookkeeping key (one revision, no
        object event), then every earlier resourceVersion is gone from storage: lists and continue
        tokens at those versions are 410. A real kube-apiserver still serves watches from its
        watch cache, whose window a storage compaction does not touch: storage_only keeps that
        window; otherwise it goes too, as after an API server restart or a window overrun."""
        with self.lock:
            self.rv += 1
            self.compacted = self.rv
            if not storage_only:
                self.watch_compacted = self.rv
                self.history = []

    def get(self, kind, ns, name):
        return self.objects[kind.skey].get((ns, name))

    def snapshot(self, kind, rv):
        """Objects of kind as of resourceVersion rv (rv >= compacted)."""
        coll = dict(self.objects[kind.skey])
        for ev in reversed(self.history):
            if ev.rv <= rv:
                break
            if ev.skey != kind.skey:
                continue
            if ev.etype == ADDED:
                coll.pop((ev.ns, ev.name), None)
            else:
                coll[(ev.ns, ev.name)] = ev.prev
        return coll

    def events_after(self, rv):
        lo, hi = 0, len(self.history)
        while lo < hi:
            mid = (lo + hi) // 2
            if self.history[mid].rv <= rv:
                lo = mid + 1
            else:
                hi = mid
        return self.history[lo:]
