"""Events as a kubelet writes them: core/v1 Events about a pod, with source {component: kubelet,
host: <node>} and reportingComponent/reportingInstance to match. A repeat (same object, type,
reason and message) is not a new Event: the one already written gets count + 1 and a new
lastTimestamp, as client-go's EventCorrelator aggregates them.

    rec = EventRecorder(kube, "kubelet", "sim-node")
    rec.record(pod, "Warning", "FailedMount",
               'MountVolume.SetUp failed for volume "kube-api-access-x" : configmap "kube-root-ca.crt" not found')

Writing an Event never fails the caller: a refusal is a warning in the log.
"""

import logging
import threading
import time

from apitime import now_rfc3339
from kube import KubeError

log = logging.getLogger("kubelet")

# Event names already written, by correlation key, at most this many (the oldest go first).
CACHE_MAX = 4096


class EventRecorder:
    """The Events of one component on one host (a kubelet: "kubelet", the node's name)."""

    def __init__(self, kube, component, host):
        self.kube = kube
        self.component = component
        self.host = host
        self._lock = threading.Lock()
        self._written = {}        # key -> [event name, count]
        self._serial = 0

    def _name(self, obj_name):
        """<object name>.<16 hex digits>, as client-go names Events: nanoseconds, strictly
        increasing within this process."""
        with self._lock:
            self._serial = max(self._serial + 1, time.time_ns())
            return "%s.%016x" % (obj_name, self._serial)

    def record(self, obj, etype, reason, message, field_path=None):
        """Records that reason happened to obj (a Pod as the API returned it)."""
        meta = obj.get("metadata") or {}
        ns, name = meta.get("namespace") or "default", meta.get("name") or ""
        key = (ns, obj.get("kind") or "Pod", name, meta.get("uid"), etype, reason, message, field_path)
        with self._lock:
            seen = self._written.get(key)
            if seen is not None:
                seen[1] += 1
                event_name, count = seen
        try:
            if seen is not None and self._bump(ns, event_name, count):
                return
            self._create(key, obj, ns, name, etype, reason, message, field_path)
        except (KubeError, OSError) as e:
            log.warning("event %s %s on %s/%s: %s (%s)", etype, reason, ns, name, e, message)

    def _bump(self, ns, event_name, count):
        """Raises the count of an Event already written; False when it is gone."""
        path = "/api/v1/namespaces/%s/events/%s" % (ns, event_name)
        try:
            self.kube.patch(path, {"count": count, "lastTimestamp": now_rfc3339()})
            return True
        except KubeError as e:
            if e.code == 404:
                return False
            raise

    def _create(self, key, obj, ns, name, etype, reason, message, field_path):
        meta = obj.get("metadata") or {}
        now = now_rfc3339()
        involved = {"kind": obj.get("kind") or "Pod", "namespace": ns, "name": name,
                    "uid": meta.get("uid"), "apiVersion": obj.get("apiVersion") or "v1",
                    "resourceVersion": meta.get("resourceVersion")}
        if field_path:
            involved["fieldPath"] = field_path
        event_name = self._name(name)
        self.kube.create("/api/v1/namespaces/%s/events" % ns, {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": event_name, "namespace": ns},
            "involvedObject": {k: v for k, v in involved.items() if v is not None},
            "reason": reason, "message": message, "type": etype,
            "source": {"component": self.component, "host": self.host},
            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
            "eventTime": None, "reportingComponent": self.component, "reportingInstance": self.host,
        })
        with self._lock:
            self._written[key] = [event_name, 1]
            while len(self._written) > CACHE_MAX:
                self._written.pop(next(iter(self._written)))
