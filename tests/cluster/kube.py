"""A small Kubernetes REST client for the cluster simulation (standard library + PyYAML).

    k = Kube.from_kubeconfig(path)
    k.request(method, path, body=None, content_type=None) -> (status_code, obj or None)
    k.get(path) -> dict, or None on 404
    k.list(path, label_selector=None) -> (items, resourceVersion)
    k.create(path, obj) -> dict
    k.delete(path) -> True, or False on 404
    k.patch(path, merge_patch)            merge patch on path
    k.patch_status(path, merge_patch)     merge patch on path + "/status"
    k.watch(path, rv, on_event, stop_event)
    k.ensure_namespace(name)              creates the Namespace unless it exists

Paths are API paths such as "/api/v1/namespaces/default/pods". Any answer other than 2xx (and 404
where the method says so) raises KubeError(code, body). Every call opens its own connection, so
one Kube is safe to share between threads.

watch() is a blocking list+watch loop: it lists (unless rv is given), reports every listed object,
then watches from the list's resourceVersion with bookmarks, resumes from the last version seen
when the connection drops (short backoff), and lists again on 410 Gone (HTTP or an ERROR event),
reporting objects that vanished meanwhile as DELETED and the others as MODIFIED. on_event(type,
obj) gets ADDED, MODIFIED or DELETED with the whole object; an exception it raises is logged and
the loop goes on. on_listed(), when given, runs after each list has been reported. It returns
once stop_event is set.
"""

import base64
import collections
import http.client
import json
import logging
import os
import random
import socket
import ssl
import tempfile
import threading
import time
import urllib.parse

import yaml

log = logging.getLogger("kube")

# Caps on what is read from the network.
MAX_BODY = 64 << 20
MAX_WATCH_LINE = 16 << 20

REQUEST_TIMEOUT = 30.0
# A watch with no byte (event or bookmark) for this long is treated as dead and resumed.
WATCH_IDLE_TIMEOUT = 90.0
LIST_PAGE = 500
TOMBSTONES = 65536         # deleted uids an Informer remembers (Informer._apply)


class KubeError(Exception):
    """An API answer that the caller did not ask to be tolerated. body: the decoded Status or text."""

    def __init__(self, code, body):
        self.code = code
        self.body = body
        if isinstance(body, dict):
            text = "%s: %s" % (body.get("reason", ""), body.get("message", ""))
        else:
            text = str(body)[:500]
        super().__init__("HTTP %d %s" % (code, text))

    @property
    def reason(self):
        return self.body.get("reason", "") if isinstance(self.body, dict) else ""


class _Gone(Exception):
    """The resourceVersion a watch resumed from has been compacted away."""


def _load_kubeconfig(path):
    with open(path) as f:
        cfg = yaml.safe_load(f)
    if not isinstance(cfg, dict):
        raise ValueError("%s: not a kubeconfig" % path)
    base = os.path.dirname(os.path.abspath(path))

    def named(section, name):
        for entry in cfg.get(section) or []:
            if entry.get("name") == name:
                return entry
        raise ValueError("%s: no %s named %r" % (path, section[:-1], name))

    ctx_name = cfg.get("current-context")
    if ctx_name:
        ctx = named("contexts", ctx_name).get("context") or {}
    else:
        contexts = cfg.get("contexts") or []
        if not contexts:
            raise ValueError("%s: no current-context and no contexts" % path)
        ctx = contexts[0].get("context") or {}
    cluster = named("clusters", ctx.get("cluster")).get("cluster") or {}
    user = {}
    if ctx.get("user"):
        user = named("users", ctx["user"]).get("user") or {}

    def resolve(p):
        return p if os.path.isabs(p) else os.path.join(base, p)

    server = cluster.get("server")
    if not server:
        raise ValueError("%s: the cluster has no server" % path)
    ca_pem = None
    if cluster.get("certificate-authority-data"):
        ca_pem = base64.b64decode(cluster["certificate-authority-data"]).decode()
    elif cluster.get("certificate-authority"):
        with open(resolve(cluster["certificate-authority"])) as f:
            ca_pem = f.read()
    token = user.get("token")
    if not token and user.get("tokenFile"):
        with open(resolve(user["tokenFile"])) as f:
            token = f.read().strip()
    cert = key = None
    if user.get("client-certificate-data"):
        cert = base64.b64decode(user["client-certificate-data"])
    elif user.get("client-certificate"):
        with open(resolve(user["client-certificate"]), "rb") as f:
            cert = f.read()
    if user.get("client-key-data"):
        key = base64.b64decode(user["client-key-data"])
    elif user.get("client-key"):
        with open(resolve(user["client-key"]), "rb") as f:
            key = f.read()
    return {"server": server, "ca_pem": ca_pem, "token": token, "cert": cert, "key": key,
            "insecure": bool(cluster.get("insecure-skip-tls-verify")),
            "namespace": ctx.get("namespace") or "default"}


class Kube:
    def __init__(self, server, ca_pem=None, token=None, cert_pem=None, key_pem=None, insecure=False,
                 namespace="default"):
        url = urllib.parse.urlsplit(server)
        if url.scheme not in ("https", "http"):
            raise ValueError("server %r: only https:// and http:// are supported" % server)
        self.scheme = url.scheme
        self.host = url.hostname
        self.port = url.port or (443 if url.scheme == "https" else 80)
        self.prefix = url.path.rstrip("/")
        self.token = token
        self.namespace = namespace
        self.ctx = None
        if self.scheme == "https":
            if insecure:
                self.ctx = ssl._create_unverified_context()
            else:
                self.ctx = ssl.create_default_context(cadata=ca_pem) if ca_pem else ssl.create_default_context()
            if cert_pem and key_pem:
                # ssl wants files; they live only as long as loading takes.
                with tempfile.TemporaryDirectory() as d:
                    cf, kf = os.path.join(d, "tls.crt"), os.path.join(d, "tls.key")
                    for name, data in ((cf, cert_pem), (kf, key_pem)):
                        fd = os.open(name, os.O_WRONLY | os.O_CREAT, 0o600)
                        with os.fdopen(fd, "wb") as f:
                            f.write(data)
                    self.ctx.load_cert_chain(cf, kf)

    @classmethod
    def from_kubeconfig(cls, path):
        c = _load_kubeconfig(path)
        return cls(c["server"], ca_pem=c["ca_pem"], token=c["token"], cert_pem=c["cert"], key_pem=c["key"],
                   insecure=c["insecure"], namespace=c["namespace"])

    # ------------------------------------------------------------------ plumbing
    def _connect(self, timeout):
        if self.scheme == "https":
            return http.client.HTTPSConnection(self.host, self.port, timeout=timeout, context=self.ctx)
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def _headers(self, content_type=None):
        h = {"Accept": "application/json", "User-Agent": "mpijob-cluster-sim/1"}
        if self.token:
            h["Authorization"] = "Bearer " + self.token
        if content_type:
            h["Content-Type"] = content_type
        return h

    @staticmethod
    def _decode(raw):
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError:
            return raw.decode(errors="replace")

    def request(self, method, path, body=None, content_type=None):
        """One request; returns (status, decoded body: dict, text, or None). Raises OSError when the
        server cannot be reached (GETs are tried three times first)."""
        data = None
        if body is not None:
            data = body if isinstance(body, (bytes, str)) else json.dumps(body)
            if isinstance(data, str):
                data = data.encode()
            content_type = content_type or "application/json"
        attempts = 3 if method == "GET" else 1
        for attempt in range(attempts):
            conn = self._connect(REQUEST_TIMEOUT)
            try:
                conn.request(method, self.prefix + path, body=data, headers=self._headers(content_type))
                resp = conn.getresponse()
                raw = resp.read(MAX_BODY + 1)
                if len(raw) > MAX_BODY:
                    raise KubeError(resp.status, "answer larger than %d bytes" % MAX_BODY)
                return resp.status, self._decode(raw)
            except (OSError, http.client.HTTPException) as e:
                if attempt + 1 == attempts:
                    raise OSError("%s %s: %s" % (method, path, e)) from e
                time.sleep(0.2 * (attempt + 1))
            finally:
                conn.close()

    def _ok(self, method, path, body=None, content_type=None, allow_404=False):
        code, obj = self.request(method, path, body, content_type)
        if 200 <= code < 300:
            return obj
        if code == 404 and allow_404:
            return None
        raise KubeError(code, obj)

    # ------------------------------------------------------------------ verbs
    def get(self, path):
        return self._ok("GET", path, allow_404=True)

    def list(self, path, label_selector=None):
        items = []
        cont = None
        while True:
            q = {"limit": str(LIST_PAGE)}
            if label_selector:
                q["labelSelector"] = label_selector
            if cont:
                q["continue"] = cont
            obj = self._ok("GET", path + "?" + urllib.parse.urlencode(q))
            items += obj.get("items") or []
            meta = obj.get("metadata") or {}
            cont = meta.get("continue")
            if not cont:
                return items, meta.get("resourceVersion", "")

    def create(self, path, obj):
        return self._ok("POST", path, obj)

    def delete(self, path):
        # Background: dependents go through the garbage collector, never an "orphan" finalizer that
        # nothing in a simulated cluster would remove.
        return self._ok("DELETE", path, {"kind": "DeleteOptions", "apiVersion": "v1",
                                         "propagationPolicy": "Background"}, allow_404=True) is not None

    def finish_pod_deletion(self, ns, name, uid, deadline=60.0):
        """A kubelet's last delete of a pod it has stopped (gracePeriodSeconds=0, that uid only),
        tried again while the server cannot be reached or answers 429 or 5xx, as a kubelet's sync
        loop does: one lost request would leave the pod Terminating for ever. True once the pod is
        gone or is another pod (404, 409); False with a warning when the deadline passes."""
        path = "/api/v1/namespaces/%s/pods/%s?gracePeriodSeconds=0" % (ns, name)
        body = {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0, "preconditions": {"uid": uid}}
        end = time.monotonic() + deadline
        pause, last = 0.2, None
        while True:
            try:
                code, obj = self.request("DELETE", path, body)
                if code in (200, 202, 404, 409):
                    return True
                last = "HTTP %d %s" % (code, obj)
                if code != 429 and code < 500:
                    break
            except OSError as e:
                last = str(e)
            if time.monotonic() + pause > end:
                break
            time.sleep(pause)
            pause = min(pause * 2, 2.0)
        log.warning("delete %s/%s: %s", ns, name, last)
        return False

    def ensure_namespace(self, name):
        """Creates the Namespace `name` unless it exists: a real kube-apiserver refuses to create
        objects in a namespace that does not exist (404 namespaces "x" not found)."""
        code, obj = self.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                                  "metadata": {"name": name}})
        if code not in (200, 201, 409):
            raise KubeError(code, obj)

    def patch(self, path, merge_patch):
        return self._ok("PATCH", path, merge_patch, "application/merge-patch+json")

    def patch_status(self, path, merge_patch):
        return self._ok("PATCH", path + "/status", merge_patch, "application/merge-patch+json")

    # ------------------------------------------------------------------ watch
    def watch(self, path, rv, on_event, stop_event, on_listed=None):
        known = {}          # uid -> last object seen, to report deletions missed across a relist
        backoff = 0.2
        need_list = not rv
        while not stop_event.is_set():
            try:
                if need_list:
                    rv = self._relist(path, known, on_event)
                    need_list = False
                    if on_listed:
                        on_listed()
                rv = self._watch_once(path, rv, known, on_event, stop_event)
                backoff = 0.2
            except _Gone:
                log.info("watch %s: resourceVersion expired; listing again", path)
                need_list = True
            except (OSError, http.client.HTTPException, KubeError, ValueError) as e:
                if stop_event.is_set():
                    break
                log.warning("watch %s: %s; retrying in %.1fs", path, e, backoff)
                stop_event.wait(backoff)
                backoff = min(backoff * 2, 5.0)
                if isinstance(e, KubeError) and e.code not in (429, 500, 502, 503, 504):
                    need_list = True

    def _relist(self, path, known, on_event):
        items, rv = self.list(path)
        seen = set()
        for obj in items:
            uid = (obj.get("metadata") or {}).get("uid")
            seen.add(uid)
            etype = "MODIFIED" if uid in known else "ADDED"
            known[uid] = obj
            self._deliver(on_event, etype, obj)
        for uid in [u for u in known if u not in seen]:
            self._deliver(on_event, "DELETED", known.pop(uid))
        return rv

    @staticmethod
    def _deliver(on_event, etype, obj):
        try:
            on_event(etype, obj)
        except Exception:   # a handler bug must not end the watch
            log.exception("watch handler failed on %s %s", etype, (obj.get("metadata") or {}).get("name"))

    def _watch_once(self, path, rv, known, on_event, stop_event):
        """Streams one watch connection; returns the last resourceVersion seen."""
        q = {"watch": "true", "resourceVersion": rv, "allowWatchBookmarks": "true",
             "timeoutSeconds": str(random.randint(300, 600))}
        conn = self._connect(WATCH_IDLE_TIMEOUT)
        done = threading.Event()

        def closer():
            # Unblocks the reader when the caller asks to stop.
            while not done.is_set():
                if stop_event.wait(0.5):
                    try:
                        if conn.sock is not None:
                            conn.sock.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
                    return

        t = threading.Thread(target=closer, name="watch-closer", daemon=True)
        t.start()
        try:
            conn.request("GET", self.prefix + path + "?" + urllib.parse.urlencode(q), headers=self._headers())
            resp = conn.getresponse()
            if resp.status == 410:
                raise _Gone()
            if resp.status != 200:
                raise KubeError(resp.status, self._decode(resp.read(MAX_BODY)))
            while not stop_event.is_set():
                line = resp.readline(MAX_WATCH_LINE + 1)
                if not line:
                    return rv           # the server ended the watch: resume
                if len(line) > MAX_WATCH_LINE:
                    raise ValueError("watch event longer than %d bytes" % MAX_WATCH_LINE)
                line = line.strip()
                if not line:
                    continue
                ev = json.loads(line)
                etype, obj = ev.get("type"), ev.get("object") or {}
                if etype == "ERROR":
                    if obj.get("code") == 410:
                        raise _Gone()
                    raise KubeError(obj.get("code") or 500, obj)
                meta = obj.get("metadata") or {}
                if meta.get("resourceVersion"):
                    rv = meta["resourceVersion"]
                if etype == "BOOKMARK":
                    continue
                uid = meta.get("uid")
                if etype == "DELETED":
                    known.pop(uid, None)
                else:
                    known[uid] = obj
                self._deliver(on_event, etype, obj)
            return rv
        except (socket.timeout, TimeoutError):
            return rv
        finally:
            done.set()
            conn.close()


def _rv_int(obj):
    try:
        return int((obj.get("metadata") or {}).get("resourceVersion") or 0)
    except (TypeError, ValueError):
        return 0


def object_key(obj):
    meta = obj.get("metadata") or {}
    return (meta.get("namespace") or "", meta.get("name") or "")


class Informer:
    """A cache of one resource kept current by list+watch.

    Informer(kube, path, on_change) : on_change(etype, obj) runs on the watch thread after the cache
    is updated. start(stop_event) lists (so `synced` is set once the cache is whole), then watches
    on a daemon thread. The cache maps (namespace, name) to the object; objects are shared, treat
    them as read-only. note(obj) / forget(obj) let a controller record its own writes at once, so
    its next pass does not act twice on a stale cache; events older than what is cached are dropped.
    A deletion is final: the uids of the last TOMBSTONES objects seen deleted are remembered, and
    nothing of theirs enters the cache again (a write answered before the deletion can be noted
    after the watch has delivered it; without this, the object would be cached for ever).
    """

    def __init__(self, kube, path, on_change=None):
        self.kube = kube
        self.path = path
        self.on_change = on_change
        self.lock = threading.Lock()
        self.cache = {}
        self.deleted = collections.OrderedDict()     # uids seen deleted, oldest first
        self.synced = threading.Event()
        self.thread = None

    def _apply(self, etype, obj):
        key = object_key(obj)
        uid = (obj.get("metadata") or {}).get("uid")
        with self.lock:
            cur = self.cache.get(key)
            cur_uid = (cur.get("metadata") or {}).get("uid") if cur is not None else None
            if etype == "DELETED":
                if uid:
                    self.deleted[uid] = True
                    if len(self.deleted) > TOMBSTONES:
                        self.deleted.popitem(last=False)
                if cur is None:
                    return True
                if cur_uid == uid or not cur_uid:
                    del self.cache[key]
                    return True
                return False            # a newer object of that name
            if uid and uid in self.deleted:
                return False
            if cur_uid == uid and _rv_int(obj) and _rv_int(obj) < _rv_int(cur):
                return False
            self.cache[key] = obj
        return True

    def _event(self, etype, obj):
        if self._apply(etype, obj) and self.on_change:
            self.on_change(etype, obj)

    def note(self, obj):
        """Records an object this process just wrote (the answer to a create/patch)."""
        if obj:
            self._apply("MODIFIED", obj)

    def forget(self, obj):
        """Records a deletion this process just made."""
        with self.lock:
            cur = self.cache.get(object_key(obj))
            if cur is not None and (cur.get("metadata") or {}).get("uid") == (obj.get("metadata") or {}).get("uid"):
                del self.cache[object_key(obj)]

    def items(self):
        with self.lock:
            return list(self.cache.values())

    def get(self, namespace, name):
        with self.lock:
            return self.cache.get((namespace or "", name))

    def start(self, stop_event):
        def loop():
            self.kube.watch(self.path, None, self._event, stop_event, on_listed=self.synced.set)

        self.thread = threading.Thread(target=loop, name="informer " + self.path, daemon=True)
        self.thread.start()
