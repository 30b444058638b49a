#!/usr/bin/env python3
"""A Kubernetes API-server double for the integration tests (Python 3 standard library only).

A real HTTPS server on 127.0.0.1 that speaks the parts of the Kubernetes REST API the operator
relies on, shaped after exchanges recorded from kube-apiserver 1.32 (see
recordings/, made by record.py), plus a control API under /_double/ for fault injection.

    python3 tests/apiserver/apiserver.py --state-dir DIR [--port 0] [--token T ...]
                                         [--bookmark-interval 5] [--extra-crd JSON ...]

DIR receives ca.crt, server.crt/key, kubeconfig, port, info.json and finally ready. See README.md.

What pods need for in-cluster configuration is here too: the TokenRequest API and the
authentication of its tokens (serviceaccounts.py), RBAC over the RBAC objects stored (rbac.py),
the `kubernetes` Service, and with --control-plane the ServiceAccount admission plugin and each
namespace's `default` ServiceAccount and kube-root-ca.crt, as kube-controller-manager keeps them.

kubectl works against it too: aggregated discovery, /openapi/v3 (whose PATCH operations name
fieldValidation, so kubectl leaves validation to the server), a minimal /openapi/v2, and
server-side Tables (Accept ...;as=Table;g=meta.k8s.io) for lists, gets and watches, with the
printer columns of the built-in kinds and a CRD's additionalPrinterColumns
(test_kubectl.py).
"""

import argparse
import base64
import collections
import copy
import datetime
import faulthandler
import hashlib
import json
import os
import random
import re
import select
import signal
import socket
import ssl
import string
import subprocess
import sys
import threading
import time
import traceback
import urllib.parse
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import schema as crd_schema  # noqa: E402  (tests/apiserver/schema.py: structural schemas)
import rbac  # noqa: E402  (tests/apiserver/rbac.py: RBAC authorization)
import protobuf  # noqa: E402  (tests/apiserver/protobuf.py: kubectl create's protobuf bodies)
import serviceaccounts  # noqa: E402  (tests/apiserver/serviceaccounts.py: admission and tokens)

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RBAC_GROUP = "rbac.authorization.k8s.io"
CRD_GROUP = "apiextensions.k8s.io"
# The `kubernetes` Service of namespace default, as kube-apiserver keeps it with
# --service-cluster-ip-range=10.96.0.0/12 (the first address of the range)
KUBERNETES_SERVICE_IP = "10.96.0.1"
KUBERNETES_SERVICE_PORT = 443
MPIJOB_CRD_FILE = os.path.join(REPO_ROOT, "manifests", "crd", "kubeflow.org_mpijobs.yaml")

MAX_BODY = 3 * 1024 * 1024          # kube-apiserver's request body limit for JSON
WATCH_QUEUE_MAX = 10000             # events buffered per watcher before it is closed
HISTORY_MAX = 200000                # events kept for watch replay; older ones are compacted
LOG_MAX = 200000                    # request log entries kept
DRAIN_MAX = 64 * 1024 * 1024        # an oversized body up to this size is read and discarded
MAX_DEPTH = 10000                   # kube-apiserver's JSON nesting limit (sigs.k8s.io/json)

ADDED, MODIFIED, DELETED, BOOKMARK, ERROR = "ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"


# --------------------------------------------------------------------------------------------
# Errors and Status bodies
# --------------------------------------------------------------------------------------------

class ApiError(Exception):
    """An error answered with a Kubernetes Status body."""

    def __init__(self, code, body, headers=None):
        super().__init__(body.get("message", ""))
        self.code = code
        self.body = body
        self.headers = headers or {}


def status_body(code, reason, message, details=None, metadata=None, status="Failure"):
    body = {"kind": "Status", "apiVersion": "v1", "metadata": metadata if metadata is not None else {},
            "status": status}
    if message is not None:
        body["message"] = message
    if reason:
        body["reason"] = reason
    if details is not None:
        body["details"] = details
    if code is not None:
        body["code"] = code
    return body


def api_error(code, reason, message, details=None, metadata=None, headers=None):
    return ApiError(code, status_body(code, reason, message, details, metadata), headers)


def err_bad_request(message):
    return api_error(400, "BadRequest", message)


def err_not_found_generic():
    return api_error(404, "NotFound", "the server could not find the requested resource", {})


def err_method_not_allowed():
    return api_error(405, "MethodNotAllowed",
                     "the server does not allow this method on the requested resource", {})


def err_unauthorized():
    return api_error(401, "Unauthorized", "Unauthorized")


def err_internal(text):
    return api_error(500, "InternalError", "Internal error occurred: " + text, {"causes": [{"message": text}]})


def err_unprocessable_generic():
    return api_error(422, "Invalid", "the server rejected our request due to an error in our request", {})


class FieldError:
    """One entry of field.ErrorList; renders like k8s.io/apimachinery/pkg/util/validation/field."""

    def __init__(self, reason, field, message):
        self.reason = reason
        self.field = field
        self.message = message

    def cause(self):
        return {"reason": self.reason, "message": self.message, "field": self.field}

    def __str__(self):
        return "%s: %s" % (self.field, self.message)


class Raw(str):
    """A value already rendered the way Go prints it (e.g. 0x0)."""


def go_quote(value):
    """Go's %#v / %q rendering of a value inside an error message (close enough for strings)."""
    if isinstance(value, Raw):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (int, float)):
        return str(value)
    return json.dumps(value, separators=(",", ":"))


def fe_invalid(field, value, detail):
    return FieldError("FieldValueInvalid", field, "Invalid value: %s: %s" % (go_quote(value), detail))


def fe_required(field, detail=""):
    return FieldError("FieldValueRequired", field, "Required value" + (": " + detail if detail else ""))


def fe_not_supported(field, value, supported):
    return FieldError("FieldValueNotSupported", field, "Unsupported value: %s: supported values: %s" % (
        go_quote(value), ", ".join(go_quote(s) for s in supported)))


def fe_forbidden(field, detail):
    return FieldError("FieldValueForbidden", field, "Forbidden: " + detail)


def fe_type_invalid(field, actual, detail):
    return FieldError("FieldValueTypeInvalid", field, "Invalid value: %s: %s" % (go_quote(actual), detail))


# --------------------------------------------------------------------------------------------
# Resource table
# --------------------------------------------------------------------------------------------

META_ORDER = ["name", "generateName", "namespace", "selfLink", "uid", "resourceVersion", "generation",
              "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "labels", "annotations",
              "ownerReferences", "finalizers", "managedFields"]


class Kind:
    """One served resource. Everything the handlers need to know about it is here."""

    def __init__(self, group, versions, plural, kind, singular, namespaced=True, status=False, crd=False,
                 short=(), generation=None, return_deleted=False, create_on_update=False, graceful=False,
                 fields=(), name_rule="subdomain", bookmark=None, defaulter=None, validator=None,
                 update_validator=None, schema=None, categories=(), top=("spec", "status"), subresources=None,
                 create_only=None):
        self.group = group
        self.versions = list(versions)       # served; the first is the preferred (storage) version
        self.plural = plural
        self.kind = kind
        self.singular = singular
        self.namespaced = namespaced
        self.status = status                 # has a /status subresource
        self.crd = crd                       # CRD-backed: unstructured, sorted keys, no strategic merge
        self.short = list(short)
        # generation: None (not tracked), "spec" (bumped when .spec changes), "nonmeta" (anything but
        # metadata and status): CRDs always use "nonmeta".
        self.generation = "nonmeta" if crd else generation
        self.return_deleted = return_deleted  # DELETE answers the object (else a Success Status)
        self.create_on_update = create_on_update
        self.graceful = graceful             # pods: deletionTimestamp write, then the delete
        self.fields = ("metadata.name", "metadata.namespace") + tuple(fields)
        self.name_rule = name_rule
        self.bookmark = bookmark or {}
        self.defaulter = defaulter
        self.validator = validator
        self.update_validator = update_validator
        self.schema = schema                 # openAPIV3Schema (CRDs registered with one)
        self.schemas = {}                    # version -> openAPIV3Schema, when they are known per version
        self.categories = list(categories)
        self.top = tuple(top)                # field order after kind/apiVersion/metadata
        self.unconditional_update = not crd  # CRs need metadata.resourceVersion on PUT
        self.printer_columns = {}            # version -> the CRD's additionalPrinterColumns
        # other subresources: name -> (group, version, kind, verbs), e.g. serviceaccounts/token
        self.subresources = dict(subresources or {})
        # a kind that is only ever created, never stored (SelfSubjectReview): Api method name
        self.create_only = create_only
        self.crd_object = None               # the CustomResourceDefinition it was built from

    def schema_for(self, version):
        """The structural schema a write through `version` is admitted with, or None."""
        return self.schemas.get(version, self.schema) if self.schemas else self.schema

    @property
    def skey(self):
        return (self.group, self.plural)

    def gv(self, version):
        return "%s/%s" % (self.group, version) if self.group else version

    @property
    def qualified(self):                      # "pods", "jobs.batch", "mpijobs.kubeflow.org"
        return self.plural + ("." + self.group if self.group else "")

    @property
    def qualified_kind(self):                 # "Pod", "Job.batch", "MPIJob.kubeflow.org"
        return self.kind + ("." + self.group if self.group else "")

    def details(self, name, use_kind=False):
        d = {"name": name}
        if self.group:
            d["group"] = self.group
        d["kind"] = self.kind if use_kind else self.plural
        return d

    def not_found(self, name):
        return api_error(404, "NotFound", '%s "%s" not found' % (self.qualified, name), self.details(name))

    def already_exists(self, name):
        return api_error(409, "AlreadyExists", '%s "%s" already exists' % (self.qualified, name),
                         self.details(name))

    def conflict(self, name, why="the object has been modified; please apply your changes to the latest "
                                 "version and try again"):
        return api_error(409, "Conflict", 'Operation cannot be fulfilled on %s "%s": %s' % (
            self.qualified, name, why), self.details(name))

    def invalid(self, name, errors):
        if len(errors) == 1:
            agg = str(errors[0])
        else:
            agg = "[" + ", ".join(str(e) for e in errors) + "]"
        details = self.details(name, use_kind=True)
        details["causes"] = [e.cause() for e in errors]
        return api_error(422, "Invalid", '%s "%s" is invalid: %s' % (self.qualified_kind, name, agg), details)

    def storage_version_hash(self, version):
        h = hashlib.sha256(("%s/%s/%s" % (self.group, version, self.kind)).encode()).digest()[:8]
        return base64.b64encode(h).decode()


def kind_from_crd(spec):
    """A Kind from either a CustomResourceDefinition object or the short form
    {"group","versions"|"version","plural","kind","singular","namespaced","status","schema"}."""
    if spec.get("kind") == "CustomResourceDefinition":
        s = spec.get("spec") or {}
        names = s.get("names") or {}
        served = [v for v in (s.get("versions") or []) if v.get("served", True)]
        served.sort(key=lambda v: (not v.get("storage", False)))
        versions = [v["name"] for v in served]
        has_status = any("status" in ((v.get("subresources") or {})) for v in served)
        schema = None
        if served:
            schema = ((served[0].get("schema") or {}).get("openAPIV3Schema"))
        if schema and schema.get("x-kubernetes-preserve-unknown-fields") and not schema.get("properties"):
            schema = None
        kind = Kind(s["group"], versions, names["plural"], names["kind"],
                    names.get("singular") or names["kind"].lower(), namespaced=s.get("scope") != "Cluster",
                    status=has_status, crd=True, short=names.get("shortNames") or (), schema=schema,
                    categories=names.get("categories") or ())
        install_crd_schemas(kind, spec)
        kind.printer_columns = printer_columns_of(spec)
        kind.crd_object = spec
        return kind
    versions = spec.get("versions") or [spec.get("version", "v1")]
    return Kind(spec["group"], versions, spec["plural"], spec["kind"],
                spec.get("singular") or spec["kind"].lower(), namespaced=spec.get("namespaced", True),
                status=spec.get("status", spec.get("statusSubresource", True)), crd=True,
                short=spec.get("shortNames") or (), schema=spec.get("schema"))


# --------------------------------------------------------------------------------------------
# Validation helpers (names, labels, owner references)
# --------------------------------------------------------------------------------------------

DNS1123_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS1123_SUBDOMAIN = DNS1123_LABEL + r"(\." + DNS1123_LABEL + r")*"
DNS1035_LABEL = r"[a-z]([-a-z0-9]*[a-z0-9])?"
MSG_SUBDOMAIN = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
                 "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used "
                 "for validation is '" + DNS1123_SUBDOMAIN + "')")
MSG_LABEL1123 = ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and "
                 "must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used "
                 "for validation is '" + DNS1123_LABEL + "')")
MSG_LABEL1035 = ("a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an "
                 "alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', "
                 "regex used for validation is '" + DNS1035_LABEL + "')")
LABEL_VALUE_RE = r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?"
MSG_LABEL_VALUE = ("a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
                   "'.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',"
                   "  or '12345', regex used for validation is '" + LABEL_VALUE_RE + "')")
QNAME_RE = r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
MSG_QNAME = ("name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with "
             "an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
             "validation is '" + QNAME_RE + "')")


def name_problems(name, rule):
    out = []
    if rule == "subdomain":
        if len(name) > 253:
            out.append("must be no more than 253 characters")
        if not re.fullmatch(DNS1123_SUBDOMAIN, name):
            out.append(MSG_SUBDOMAIN)
    elif rule == "label1123":
        if len(name) > 63:
            out.append("must be no more than 63 characters")
        if not re.fullmatch(DNS1123_LABEL, name):
            out.append(MSG_LABEL1123)
    elif rule == "path":
        if name in (".", ".."):
            out.append("may not be '%s'" % name)
        for ch in ("/", "%"):
            if ch in name:
                out.append("may not contain '%s'" % ch)
    elif rule == "label1035":
        if len(name) > 63:
            out.append("must be no more than 63 characters")
        if not re.fullmatch(DNS1035_LABEL, name):
            out.append(MSG_LABEL1035)
    return out


def qualified_name_problems(key):
    out = []
    parts = key.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            out.append("prefix part must be non-empty")
        else:
            if len(prefix) > 253:
                out.append("prefix part must be no more than 253 characters")
            if not re.fullmatch(DNS1123_SUBDOMAIN, prefix):
                out.append("prefix part " + MSG_SUBDOMAIN)
    else:
        return ["a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start and "
                "end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used "
                "for validation is '" + QNAME_RE + "') with an optional DNS subdomain prefix and '/' (e.g. "
                "'example.com/MyName')"]
    if not name:
        out.append("name part must be non-empty")
    else:
        if len(name) > 63:
            out.append("name part must be no more than 63 characters")
        if not re.fullmatch(QNAME_RE, name):
            out.append(MSG_QNAME)
    return out


def validate_meta(kind, obj, errors):
    meta = obj.get("metadata") or {}
    labels = meta.get("labels")
    if labels is not None:
        if not isinstance(labels, dict):
            errors.append(fe_invalid("metadata.labels", labels, "must be a map of string to string"))
        else:
            for k, v in labels.items():
                for p in qualified_name_problems(k):
                    errors.append(fe_invalid("metadata.labels", k, p))
                if not isinstance(v, str):
                    errors.append(fe_invalid("metadata.labels", v, "must be a string"))
                    continue
                if len(v) > 63:
                    errors.append(fe_invalid("metadata.labels", v, "must be no more than 63 characters"))
                if not re.fullmatch(LABEL_VALUE_RE, v):
                    errors.append(fe_invalid("metadata.labels", v, MSG_LABEL_VALUE))
    ann = meta.get("annotations")
    if ann is not None and isinstance(ann, dict):
        for k, v in ann.items():
            for p in qualified_name_problems(k):
                errors.append(fe_invalid("metadata.annotations", k, p))
    refs = meta.get("ownerReferences")
    if refs is not None:
        if not isinstance(refs, list):
            errors.append(fe_invalid("metadata.ownerReferences", refs, "must be a list"))
        else:
            controllers = 0
            for r in refs:
                if not isinstance(r, dict):
                    errors.append(fe_invalid("metadata.ownerReferences", r, "must be an object"))
                    continue
                if not r.get("apiVersion"):
                    errors.append(fe_invalid("metadata.ownerReferences.apiVersion", r.get("apiVersion", ""),
                                             "version must not be empty"))
                if not r.get("kind"):
                    errors.append(fe_invalid("metadata.ownerReferences.kind", r.get("kind", ""),
                                             "kind must not be empty"))
                if not r.get("name"):
                    errors.append(fe_invalid("metadata.ownerReferences.name", r.get("name", ""),
                                             "name must not be empty"))
                if not r.get("uid"):
                    errors.append(fe_invalid("metadata.ownerReferences.uid", r.get("uid", ""),
                                             "uid must not be empty"))
                if r.get("controller") is True:
                    controllers += 1
            if controllers > 1:
                errors.append(fe_invalid("metadata.ownerReferences", refs,
                                         "Only one reference can have Controller set to true. Found \"true\" "
                                         "in references for multiple owners"))
    fin = meta.get("finalizers")
    if fin is not None:
        if not isinstance(fin, list) or not all(isinstance(f, str) for f in fin):
            errors.append(fe_invalid("metadata.finalizers", fin, "must be a list of strings"))
        else:
            for f in fin:
                for p in qualified_name_problems(f):
                    errors.append(fe_invalid("metadata.finalizers", f, p))


# --------------------------------------------------------------------------------------------
# Built-in defaulting and validation (the parts an operator can trip over)
# --------------------------------------------------------------------------------------------

POD_SPEC_ORDER = ["volumes", "initContainers", "containers", "ephemeralContainers", "restartPolicy",
                  "terminationGracePeriodSeconds", "activeDeadlineSeconds", "dnsPolicy", "nodeSelector",
                  "serviceAccountName", "serviceAccount", "automountServiceAccountToken", "nodeName",
                  "hostNetwork", "hostPID", "hostIPC", "shareProcessNamespace", "securityContext",
                  "imagePullSecrets", "hostname", "subdomain", "affinity", "schedulerName", "tolerations",
                  "hostAliases", "priorityClassName", "priority", "dnsConfig", "readinessGates",
                  "runtimeClassName", "enableServiceLinks", "preemptionPolicy", "overhead",
                  "topologySpreadConstraints", "setHostnameAsFQDN", "os", "hostUsers", "schedulingGates",
                  "resourceClaims", "resources"]
CONTAINER_ORDER = ["name", "image", "command", "args", "workingDir", "ports", "envFrom", "env", "resources",
                   "resizePolicy", "restartPolicy", "volumeMounts", "volumeDevices", "livenessProbe",
                   "readinessProbe", "startupProbe", "lifecycle", "terminationMessagePath",
                   "terminationMessagePolicy", "imagePullPolicy", "securityContext", "stdin", "stdinOnce", "tty"]
CONDITION_ORDER = ["type", "status", "lastProbeTime", "lastUpdateTime", "lastTransitionTime", "reason",
                   "message"]
JOB_SPEC_ORDER = ["parallelism", "completions", "activeDeadlineSeconds", "podFailurePolicy", "successPolicy",
                  "backoffLimit", "backoffLimitPerIndex", "maxFailedIndexes", "selector", "manualSelector",
                  "template", "ttlSecondsAfterFinished", "completionMode", "suspend", "podReplacementPolicy",
                  "managedBy"]
SERVICE_SPEC_ORDER = ["ports", "selector", "clusterIP", "clusterIPs", "type", "externalIPs", "sessionAffinity",
                      "loadBalancerIP", "loadBalancerSourceRanges", "externalName", "externalTrafficPolicy",
                      "healthCheckNodePort", "publishNotReadyAddresses", "sessionAffinityConfig",
                      "ipFamilies", "ipFamilyPolicy", "allocateLoadBalancerNodePorts", "loadBalancerClass",
                      "internalTrafficPolicy", "trafficDistribution"]


def ordered(d, order):
    if not isinstance(d, dict):
        return d
    out = {k: d[k] for k in order if k in d}
    for k, v in d.items():
        if k not in out:
            out[k] = v
    return out


def image_pull_default(image):
    if not isinstance(image, str) or "@" in image:
        return "IfNotPresent"
    last = image.rsplit("/", 1)[-1]
    if ":" in last:
        return "Always" if last.split(":", 1)[1] == "latest" else "IfNotPresent"
    return "Always"


def default_probe(p):
    if not isinstance(p, dict):
        return p
    p.setdefault("timeoutSeconds", 1)
    p.setdefault("periodSeconds", 10)
    p.setdefault("successThreshold", 1)
    p.setdefault("failureThreshold", 3)
    if isinstance(p.get("httpGet"), dict):
        p["httpGet"].setdefault("scheme", "HTTP")
    return p


def default_container(c):
    if not isinstance(c, dict):
        return c
    res = c.get("resources")
    if not isinstance(res, dict):
        res = {}
    if isinstance(res.get("limits"), dict):
        req = res.get("requests") if isinstance(res.get("requests"), dict) else {}
        for k, v in res["limits"].items():
            req.setdefault(k, v)
        res["requests"] = req
    c["resources"] = res
    for p in c.get("ports") or []:
        if isinstance(p, dict):
            p.setdefault("protocol", "TCP")
    for e in c.get("env") or []:
        if isinstance(e, dict) and isinstance(e.get("valueFrom"), dict):
            fr = e["valueFrom"].get("fieldRef")
            if isinstance(fr, dict):
                fr.setdefault("apiVersion", "v1")
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        if probe in c:
            default_probe(c[probe])
    c.setdefault("terminationMessagePath", "/dev/termination-log")
    c.setdefault("terminationMessagePolicy", "File")
    c.setdefault("imagePullPolicy", image_pull_default(c.get("image")))
    return ordered(c, CONTAINER_ORDER)


NOT_READY_TOLERATIONS = [
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
     "tolerationSeconds": 300},
]


def add_default_tolerations(spec):
    """The DefaultTolerationSeconds admission plugin (create and update of pods proper)."""
    tol = spec.get("tolerations")
    if not isinstance(tol, list):
        tol = []
    for t in NOT_READY_TOLERATIONS:
        if not any(isinstance(x, dict) and x.get("key", "") in (t["key"], "") and
                   x.get("effect", "") in ("NoExecute", "") for x in tol):
            tol.append(dict(t))
    spec["tolerations"] = tol


def default_pod_spec(spec, admission=True, pod=True):
    """Defaults of a PodSpec; pod: it is a Pod's own (SetDefaults_Pod adds enableServiceLinks,
    which pod templates do not get)."""
    if not isinstance(spec, dict):
        return spec
    for key in ("containers", "initContainers", "ephemeralContainers"):
        if isinstance(spec.get(key), list):
            spec[key] = [default_container(c) for c in spec[key]]
    for v in spec.get("volumes") or []:
        if not isinstance(v, dict):
            continue
        for src in ("secret", "configMap", "downwardAPI", "projected"):
            if isinstance(v.get(src), dict):
                v[src].setdefault("defaultMode", 420)
    serviceaccounts.mirror_service_account(spec)
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("securityContext", {})
    spec.setdefault("schedulerName", "default-scheduler")
    if admission:
        add_default_tolerations(spec)
        spec.setdefault("priority", 0)
        spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
    if pod:
        spec.setdefault("enableServiceLinks", True)
    return ordered(spec, POD_SPEC_ORDER)


def qos_class(spec):
    containers = [c for key in ("containers", "initContainers") for c in (spec.get(key) or [])
                  if isinstance(c, dict)]
    any_set = False
    guaranteed = True
    for c in containers:
        res = c.get("resources") or {}
        req = res.get("requests") or {}
        lim = res.get("limits") or {}
        if req or lim:
            any_set = True
        for r in ("cpu", "memory"):
            if r not in lim or (r in req and str(req[r]) != str(lim[r])):
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def order_conditions(status):
    if isinstance(status, dict) and isinstance(status.get("conditions"), list):
        conds = []
        for c in status["conditions"]:
            if isinstance(c, dict):
                c = dict(c)
                c.setdefault("lastProbeTime", None)
                c.setdefault("lastTransitionTime", None)
                c = ordered(c, CONDITION_ORDER)
            conds.append(c)
        status["conditions"] = conds


def default_pod(obj, create, old=None, sub=""):
    if create:
        obj["spec"] = default_pod_spec(obj.get("spec"))
        spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
        obj["status"] = {"phase": "Pending", "qosClass": qos_class(spec)}
    else:
        spec = obj.get("spec")
        if isinstance(spec, dict) and not sub:
            # admission on update: default tolerations again, priority kept from the stored pod
            add_default_tolerations(spec)
            ospec = (old or {}).get("spec") or {}
            for k in ("priority", "preemptionPolicy"):
                if k not in spec and k in ospec:
                    spec[k] = ospec[k]
        obj["spec"] = default_pod_spec(spec, admission=False)
    order_conditions(obj.get("status"))


def validate_containers(spec, path, errors, required=True):
    containers = spec.get("containers") if isinstance(spec, dict) else None
    if not containers:
        if required:
            errors.append(fe_required(path + ".containers"))
        return
    if not isinstance(containers, list):
        errors.append(fe_invalid(path + ".containers", containers, "must be a list"))
        return
    seen = set()
    for i, c in enumerate(containers):
        p = "%s.containers[%d]" % (path, i)
        if not isinstance(c, dict):
            errors.append(fe_invalid(p, c, "must be an object"))
            continue
        name = c.get("name")
        if not name:
            errors.append(fe_required(p + ".name"))
        elif not isinstance(name, str) or name_problems(name, "label1123"):
            for msg in name_problems(name if isinstance(name, str) else "", "label1123"):
                errors.append(fe_invalid(p + ".name", name, msg))
        elif name in seen:
            errors.append(FieldError("FieldValueDuplicate", p + ".name", "Duplicate value: " + go_quote(name)))
        else:
            seen.add(name)
        if not c.get("image"):
            errors.append(fe_required(p + ".image"))


def validate_pod(obj, errors):
    validate_containers(obj.get("spec"), "spec", errors)
    spec = obj.get("spec") or {}
    rp = spec.get("restartPolicy")
    if rp not in (None, "Always", "OnFailure", "Never"):
        errors.append(fe_not_supported("spec.restartPolicy", rp, ["Always", "OnFailure", "Never"]))


def _strip_mutable_pod_spec(spec):
    s = copy.deepcopy(spec) if isinstance(spec, dict) else {}
    for key in ("containers", "initContainers"):
        for c in s.get(key) or []:
            if isinstance(c, dict):
                c.pop("image", None)
    s.pop("activeDeadlineSeconds", None)
    s.pop("tolerations", None)
    s.pop("terminationGracePeriodSeconds", None)
    s.pop("schedulingGates", None)
    return s


def validate_pod_update(old, new, errors):
    if _strip_mutable_pod_spec(old.get("spec")) != _strip_mutable_pod_spec(new.get("spec")):
        errors.append(fe_forbidden("spec", "pod updates may not change fields other than "
                                           "`spec.containers[*].image`,`spec.initContainers[*].image`,"
                                           "`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to "
                                           "existing tolerations),`spec.terminationGracePeriodSeconds` (allow it "
                                           "to be set to 1 if it was previously negative)"))


def default_job(obj, create, old=None, sub=""):
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        spec = obj["spec"] = {}
    if spec.get("completions") is None and spec.get("parallelism") is None:
        spec["completions"] = 1
        spec["parallelism"] = 1
    spec.setdefault("parallelism", 1)
    if spec.get("backoffLimit") is None:
        spec["backoffLimit"] = 2147483647 if spec.get("backoffLimitPerIndex") is not None else 6
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("suspend", False)
    spec.setdefault("podReplacementPolicy", "Failed" if spec.get("podFailurePolicy") else "TerminatingOrFailed")
    tmpl = spec.get("template")
    if not isinstance(tmpl, dict):
        tmpl = spec["template"] = {}
    tmeta = tmpl.get("metadata")
    if not isinstance(tmeta, dict):
        tmeta = {}
    tmeta = dict(tmeta)
    tmeta.setdefault("creationTimestamp", None)
    if create and not spec.get("manualSelector"):
        uid = obj["metadata"]["uid"]
        name = obj["metadata"]["name"]
        labels = dict(tmeta.get("labels") or {})
        labels.update({"batch.kubernetes.io/controller-uid": uid, "batch.kubernetes.io/job-name": name,
                       "controller-uid": uid, "job-name": name})
        tmeta["labels"] = labels
        sel = spec.get("selector") if isinstance(spec.get("selector"), dict) else {}
        ml = sel.get("matchLabels") if isinstance(sel.get("matchLabels"), dict) else {}
        ml.setdefault(JOB_UID_LABEL, uid)
        sel["matchLabels"] = ml
        spec["selector"] = sel
        spec["manualSelector"] = False      # as the Job strategy records a generated selector
    tmpl["metadata"] = ordered(tmeta, ["name", "namespace", "creationTimestamp", "labels", "annotations"])
    if create and not obj["metadata"].get("labels") and tmeta.get("labels"):
        # SetDefaults_Job: a Job without labels takes its pod template's
        obj["metadata"]["labels"] = dict(tmeta["labels"])
        obj["metadata"] = ordered(obj["metadata"], META_ORDER)
    tmpl["spec"] = default_pod_spec(tmpl.get("spec"), admission=False, pod=False)
    spec["template"] = ordered(tmpl, ["metadata", "spec"])
    obj["spec"] = ordered(spec, JOB_SPEC_ORDER)
    if create:
        obj["status"] = {}
    order_conditions(obj.get("status"))


JOB_UID_LABEL = "batch.kubernetes.io/controller-uid"


def validate_job(obj, errors):
    spec = obj.get("spec") or {}
    if not spec.get("manualSelector"):
        want = {"matchLabels": {JOB_UID_LABEL: obj["metadata"].get("uid", "")}}
        if spec.get("selector") != want:
            errors.append(fe_invalid("spec.selector", spec.get("selector"), "`selector` not auto-generated"))
    tspec = ((spec.get("template") or {}).get("spec")) or {}
    validate_containers(tspec, "spec.template.spec", errors)
    rp = tspec.get("restartPolicy")
    if rp not in ("OnFailure", "Never"):
        errors.append(fe_not_supported("spec.template.spec.restartPolicy", rp, ["OnFailure", "Never"]))


def _job_cond(job, ctype):
    for c in (job.get("status") or {}).get("conditions") or []:
        if isinstance(c, dict) and c.get("type") == ctype and c.get("status") == "True":
            return True
    return False


def validate_job_status_update(old, new, errors):
    """What kube-apiserver 1.32 checks of a Job status write (pkg/apis/batch/validation, with the
    options pkg/registry/batch/job sets): a finished Job's conditions, times and counters."""
    ost, nst = old.get("status") or {}, new.get("status") or {}
    cond = {t: _job_cond(new, t) for t in ("Complete", "Failed", "FailureTarget", "SuccessCriteriaMet")}
    was = {t: _job_cond(old, t) for t in cond}
    changed = {t: cond[t] != was[t] for t in cond}
    finished, was_finished = cond["Complete"] or cond["Failed"], was["Complete"] or was["Failed"]
    start_changed = ost.get("startTime") != nst.get("startTime")
    completion_changed = ost.get("completionTime") != nst.get("completionTime")
    active = nst.get("active") or 0
    for f in ("active", "succeeded", "failed", "ready", "terminating"):
        v = nst.get(f)
        if isinstance(v, int) and not isinstance(v, bool) and v < 0:
            errors.append(fe_invalid("status." + f, v, "must be greater than or equal to 0"))
    omit = lambda field, detail: FieldError("FieldValueInvalid", field, "Invalid value: " + detail)  # noqa: E731
    if (changed["Complete"] or changed["Failed"]) and cond["Complete"] and cond["Failed"]:
        errors.append(omit("status.conditions", "cannot set Complete=True and Failed=true conditions"))
    if (changed["Complete"] or changed["FailureTarget"]) and cond["Complete"] and cond["FailureTarget"]:
        errors.append(omit("status.conditions", "cannot set Complete=True and FailureTarget=true conditions"))
    if changed["Complete"] or completion_changed:
        if nst.get("completionTime") and not cond["Complete"]:
            errors.append(fe_invalid("status.completionTime", nst["completionTime"],
                                     "cannot set completionTime when there is no Complete=True condition"))
        if not nst.get("completionTime") and cond["Complete"]:
            errors.append(fe_required("status.completionTime", "completionTime is required for Complete jobs"))
    if (start_changed or completion_changed) and nst.get("startTime") and nst.get("completionTime") and \
            str(nst["completionTime"]) < str(nst["startTime"]):
        errors.append(fe_invalid("status.completionTime", nst["completionTime"],
                                 "completionTime cannot be set before startTime"))
    if changed["Failed"] and cond["Failed"] and not cond["FailureTarget"]:
        errors.append(omit("status.conditions",
                           "cannot set Failed=True condition without the FailureTarget=true condition"))
    if (changed["Complete"] or changed["SuccessCriteriaMet"]) and cond["Complete"] and not cond["SuccessCriteriaMet"]:
        errors.append(omit("status.conditions",
                           "cannot set Complete=True condition without the SuccessCriteriaMet=true condition"))
    if (finished != was_finished or ost.get("active") != nst.get("active")) and finished and active > 0:
        errors.append(fe_invalid("status.active", active, "active>0 is invalid for finished job"))
    suspended_without_work = (new.get("spec") or {}).get("suspend") and (new.get("spec") or {}).get("completions") == 0
    if (finished != was_finished or start_changed) and finished and not nst.get("startTime") and \
            not suspended_without_work:
        errors.append(fe_required("status.startTime", "startTime is required for finished job"))
    for t in ("Failed", "Complete", "FailureTarget"):
        if was[t] and not cond[t]:
            errors.append(omit("status.conditions", "cannot disable the terminal %s=True condition" % t))
    for f, word in (("failed", "failed"), ("succeeded", "succeeded")):
        if (nst.get(f) or 0) < (ost.get(f) or 0):
            errors.append(fe_invalid("status." + f, nst.get(f) or 0, "cannot decrease the %s counter" % word))
    if nst.get("completionTime") and ost.get("completionTime") and nst["completionTime"] != ost["completionTime"]:
        errors.append(fe_invalid("status.completionTime", nst["completionTime"], "completionTime cannot be mutated"))
    resuming = _job_cond(old, "Suspended") and any(
        isinstance(c, dict) and c.get("type") == "Suspended" and c.get("status") == "False"
        for c in nst.get("conditions") or [])
    if ost.get("startTime") and ost.get("startTime") != nst.get("startTime") and \
            not (new.get("spec") or {}).get("suspend") and not resuming:
        errors.append(fe_required("status.startTime", "startTime cannot be removed for unsuspended job"))
    if was["SuccessCriteriaMet"] and not cond["SuccessCriteriaMet"]:
        errors.append(omit("status.conditions", "cannot disable the SuccessCriteriaMet=True condition"))


def validate_job_update(old, new, errors):
    if old.get("status") != new.get("status"):
        validate_job_status_update(old, new, errors)
    os_, ns_ = old.get("spec") or {}, new.get("spec") or {}
    if os_.get("selector") != ns_.get("selector"):
        errors.append(fe_invalid("spec.selector", ns_.get("selector"), "field is immutable"))
    if os_.get("template") != ns_.get("template") and not os_.get("suspend"):
        errors.append(fe_invalid("spec.template", ns_.get("template"), "field is immutable"))
    if os_.get("completions") != ns_.get("completions") and ns_.get("completionMode") != "Indexed":
        errors.append(fe_invalid("spec.completions", ns_.get("completions"), "field is immutable"))


_cluster_ip_counter = [10]


def default_service(obj, create, old=None, sub=""):
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        spec = obj["spec"] = {}
    spec.setdefault("type", "ClusterIP")
    spec.setdefault("sessionAffinity", "None")
    if spec["type"] != "ExternalName":
        if create and not spec.get("clusterIP"):
            _cluster_ip_counter[0] += 1
            n = _cluster_ip_counter[0]
            spec["clusterIP"] = "10.96.%d.%d" % ((n >> 8) & 255, n & 255)
        if spec.get("clusterIP"):
            spec.setdefault("clusterIPs", [spec["clusterIP"]])
        spec.setdefault("ipFamilies", ["IPv4"])
        spec.setdefault("ipFamilyPolicy", "SingleStack")
        spec.setdefault("internalTrafficPolicy", "Cluster")
    for p in spec.get("ports") or []:
        if isinstance(p, dict):
            p.setdefault("protocol", "TCP")
            if "port" in p:
                p.setdefault("targetPort", p["port"])
    obj["spec"] = ordered(spec, SERVICE_SPEC_ORDER)
    if create:
        obj["status"] = {"loadBalancer": {}}


def validate_service_update(old, new, errors):
    os_, ns_ = old.get("spec") or {}, new.get("spec") or {}
    if os_.get("clusterIP") and os_.get("clusterIP") != ns_.get("clusterIP"):
        errors.append(fe_invalid("spec.clusterIPs[0]", ns_.get("clusterIP"), "may not change once set"))


def service_preserve(old, new):
    """The real REST layer fills an omitted clusterIP on update from the stored object."""
    os_, ns_ = old.get("spec") or {}, new.get("spec")
    if isinstance(ns_, dict):
        for k in ("clusterIP", "clusterIPs"):
            if k not in ns_ and k in os_:
                ns_[k] = copy.deepcopy(os_[k])


def default_secret(obj, create, old=None, sub=""):
    obj.setdefault("type", "Opaque")
    sd = obj.pop("stringData", None)
    if isinstance(sd, dict):
        data = obj.get("data") if isinstance(obj.get("data"), dict) else {}
        for k, v in sd.items():
            data[k] = base64.b64encode(str(v).encode()).decode()
        obj["data"] = data


CONFIG_KEY_RE = r"[-._a-zA-Z0-9]+"
MSG_CONFIG_KEY = ("a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  "
                  "or 'KEY_NAME',  or 'key-name', regex used for validation is '" + CONFIG_KEY_RE + "')")


def validate_config_keys(obj, fields, errors):
    seen = set()
    for field in fields:
        for k in (obj.get(field) or {}):
            if len(k) > 253:
                errors.append(fe_invalid("%s[%s]" % (field, k), k, "must be no more than 253 characters"))
            if not re.fullmatch(CONFIG_KEY_RE, k):
                errors.append(fe_invalid("%s[%s]" % (field, k), k, MSG_CONFIG_KEY))
            if k in seen:
                errors.append(fe_invalid("%s[%s]" % (field, k), k, "duplicate of key present in data"))
            seen.add(k)


def validate_configmap(obj, errors):
    validate_config_keys(obj, ("data", "binaryData"), errors)


SECRET_REQUIRED_KEYS = {"kubernetes.io/ssh-auth": "ssh-privatekey",
                        "kubernetes.io/basic-auth": None,
                        "kubernetes.io/tls": "tls.crt",
                        "kubernetes.io/dockerconfigjson": ".dockerconfigjson",
                        "kubernetes.io/dockercfg": ".dockercfg"}


def validate_secret(obj, errors):
    validate_config_keys(obj, ("data",), errors)
    t = obj.get("type")
    data = obj.get("data") or {}
    key = SECRET_REQUIRED_KEYS.get(t)
    if key and not data.get(key):
        errors.append(fe_required("data[%s]" % key))
    if t == "kubernetes.io/tls" and not data.get("tls.key"):
        errors.append(fe_required("data[tls.key]"))


def validate_secret_update(old, new, errors):
    if old.get("type") != new.get("type"):
        errors.append(fe_invalid("type", new.get("type"), "field is immutable"))
    if old.get("immutable") and (old.get("data") != new.get("data")):
        errors.append(fe_forbidden("data", "field is immutable when `immutable` is set"))


def validate_configmap_update(old, new, errors):
    if old.get("immutable") and (old.get("data") != new.get("data") or
                                 old.get("binaryData") != new.get("binaryData")):
        errors.append(fe_forbidden("data", "field is immutable when `immutable` is set"))


def default_namespace(obj, create, old=None, sub=""):
    name = obj["metadata"].get("name", "")
    labels = dict(obj["metadata"].get("labels") or {})
    labels["kubernetes.io/metadata.name"] = name
    obj["metadata"]["labels"] = labels
    spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    spec.setdefault("finalizers", ["kubernetes"])
    obj["spec"] = spec
    if create:
        obj["status"] = {"phase": "Active"}


def go_string_map(m):
    """Go's %#v of a map[string]string."""
    if m is None:
        return "map[string]string(nil)"
    return "map[string]string{%s}" % ", ".join("%s:%s" % (json.dumps(k), json.dumps(v))
                                               for k, v in sorted(m.items()))


def go_strings(values):
    """Go's %#v of a []string."""
    if values is None:
        return "[]string(nil)"
    return "[]string{%s}" % ", ".join(json.dumps(str(v)) for v in values)


def go_label_selector(sel):
    sel = sel if isinstance(sel, dict) else {}
    exprs = sel.get("matchExpressions")
    if exprs:
        rendered = "[]v1.LabelSelectorRequirement{%s}" % ", ".join(
            'v1.LabelSelectorRequirement{Key:%s, Operator:%s, Values:%s}' % (
                json.dumps(e.get("key", "")), json.dumps(e.get("operator", "")), go_strings(e.get("values")))
            for e in exprs if isinstance(e, dict))
    else:
        rendered = "[]v1.LabelSelectorRequirement(nil)"
    return "v1.LabelSelector{MatchLabels:%s, MatchExpressions:%s}" % (go_string_map(sel.get("matchLabels")),
                                                                       rendered)


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


def _default_template(spec):
    tmpl = spec.get("template")
    if not isinstance(tmpl, dict):
        tmpl = {}
    tmeta = dict(tmpl.get("metadata") or {}) if isinstance(tmpl.get("metadata"), dict) else {}
    tmeta.setdefault("creationTimestamp", None)
    tmpl["metadata"] = ordered(tmeta, ["name", "namespace", "creationTimestamp", "labels", "annotations"])
    tmpl["spec"] = default_pod_spec(tmpl.get("spec"), admission=False, pod=False)
    spec["template"] = ordered(tmpl, ["metadata", "spec"])


DEPLOYMENT_SPEC_ORDER = ["replicas", "selector", "template", "strategy", "minReadySeconds", "revisionHistoryLimit",
                         "paused", "progressDeadlineSeconds"]


def default_deployment(obj, create, old=None, sub=""):
    """SetDefaults_Deployment (apps/v1)."""
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        spec = obj["spec"] = {}
    spec.setdefault("replicas", 1)
    strategy = spec.get("strategy") if isinstance(spec.get("strategy"), dict) else {}
    strategy.setdefault("type", "RollingUpdate")
    if strategy["type"] == "RollingUpdate":
        ru = strategy.get("rollingUpdate") if isinstance(strategy.get("rollingUpdate"), dict) else {}
        ru.setdefault("maxUnavailable", "25%")
        ru.setdefault("maxSurge", "25%")
        strategy["rollingUpdate"] = ordered(ru, ["maxUnavailable", "maxSurge"])
    spec["strategy"] = ordered(strategy, ["type", "rollingUpdate"])
    spec.setdefault("revisionHistoryLimit", 10)
    spec.setdefault("progressDeadlineSeconds", 600)
    _default_template(spec)
    obj["spec"] = ordered(spec, DEPLOYMENT_SPEC_ORDER)
    if create:
        obj["status"] = {}
    order_conditions(obj.get("status"))


def default_replicaset(obj, create, old=None, sub=""):
    """SetDefaults_ReplicaSet (apps/v1)."""
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        spec = obj["spec"] = {}
    spec.setdefault("replicas", 1)
    _default_template(spec)
    obj["spec"] = ordered(spec, ["replicas", "minReadySeconds", "selector", "template"])
    if create:
        obj["status"] = {"replicas": 0}
    order_conditions(obj.get("status"))


def validate_workload(obj, errors):
    """The checks of a Deployment or ReplicaSet an operator meets: a selector that selects the
    template's labels, valid containers, restartPolicy Always, replicas not negative."""
    spec = obj.get("spec") or {}
    sel = spec.get("selector")
    tmpl = spec.get("template") if isinstance(spec.get("template"), dict) else {}
    tlabels = (tmpl.get("metadata") or {}).get("labels")
    if not isinstance(sel, dict):
        errors.append(fe_required("spec.selector"))
    elif not sel.get("matchLabels") and not sel.get("matchExpressions"):
        errors.append(fe_invalid("spec.selector", Raw(go_label_selector(sel)), "empty selector is invalid for "
                                                                              "deployment"))
    if not isinstance(sel, dict) or not selector_matches(sel, tlabels):
        errors.append(fe_invalid("spec.template.metadata.labels", Raw(go_string_map(tlabels)),
                                 "`selector` does not match template `labels`"))
    replicas = spec.get("replicas")
    if isinstance(replicas, int) and not isinstance(replicas, bool) and replicas < 0:
        errors.append(fe_invalid("spec.replicas", replicas, "must be greater than or equal to 0"))
    tspec = tmpl.get("spec") if isinstance(tmpl.get("spec"), dict) else {}
    validate_containers(tspec, "spec.template.spec", errors)
    rp = tspec.get("restartPolicy")
    if rp != "Always":
        errors.append(fe_not_supported("spec.template.spec.restartPolicy", rp, ["Always"]))


def validate_workload_update(old, new, errors):
    osel, nsel = (old.get("spec") or {}).get("selector"), (new.get("spec") or {}).get("selector")
    if osel != nsel:
        errors.append(fe_invalid("spec.selector", Raw(go_label_selector(nsel)), "field is immutable"))


RULE_ORDER = ["verbs", "apiGroups", "resources", "resourceNames", "nonResourceURLs"]


def default_role(obj, create, old=None, sub=""):
    rules = obj.get("rules")
    if isinstance(rules, list):
        obj["rules"] = [ordered(r, RULE_ORDER) for r in rules]
    else:
        obj["rules"] = None           # a Go nil slice without omitempty


def validate_role(obj, errors):
    """ValidatePolicyRule for each rule of a Role or ClusterRole."""
    namespaced = obj.get("kind") == "Role"
    for i, r in enumerate(obj.get("rules") or []):
        path = "rules[%d]" % i
        if not isinstance(r, dict):
            continue
        if not r.get("verbs"):
            errors.append(fe_required(path + ".verbs", "verbs must contain at least one value"))
        urls = r.get("nonResourceURLs")
        if urls:
            if namespaced:
                errors.append(fe_invalid(path + ".nonResourceURLs", Raw(go_strings(urls)),
                                         "namespaced rules cannot apply to non-resource URLs"))
            if r.get("apiGroups") or r.get("resources"):
                errors.append(fe_invalid(path + ".nonResourceURLs", Raw(go_strings(urls)),
                                         "rules cannot apply to both regular resources and non-resource URLs"))
            continue
        if not r.get("apiGroups"):
            errors.append(fe_required(path + ".apiGroups", "resource rules must supply at least one api group"))
        if not r.get("resources"):
            errors.append(fe_required(path + ".resources", "resource rules must supply at least one resource"))


def default_binding(obj, create, old=None, sub=""):
    """SetDefaults_RoleBinding / _ClusterRoleBinding and SetDefaults_Subject."""
    ref = obj.get("roleRef")
    if isinstance(ref, dict):
        if not ref.get("apiGroup"):
            ref["apiGroup"] = RBAC_GROUP
        obj["roleRef"] = ordered(ref, ["apiGroup", "kind", "name"])
    subjects = obj.get("subjects")
    if isinstance(subjects, list):
        out = []
        for subj in subjects:
            if isinstance(subj, dict):
                if not subj.get("apiGroup") and subj.get("kind") in ("User", "Group"):
                    subj["apiGroup"] = RBAC_GROUP
                subj = ordered(subj, ["kind", "apiGroup", "name", "namespace"])
            out.append(subj)
        obj["subjects"] = out


def validate_binding(obj, errors):
    cluster = obj.get("kind") == "ClusterRoleBinding"
    ref = obj.get("roleRef") if isinstance(obj.get("roleRef"), dict) else {}
    if ref.get("apiGroup") != RBAC_GROUP:
        errors.append(fe_not_supported("roleRef.apiGroup", ref.get("apiGroup", ""), [RBAC_GROUP]))
    kinds = ["ClusterRole"] if cluster else ["Role", "ClusterRole"]
    if ref.get("kind") not in kinds:
        errors.append(fe_not_supported("roleRef.kind", ref.get("kind", ""), kinds))
    if not ref.get("name"):
        errors.append(fe_required("roleRef.name"))
    else:
        for p in name_problems(ref["name"], "path"):
            errors.append(fe_invalid("roleRef.name", ref["name"], p))
    for i, subj in enumerate(obj.get("subjects") or []):
        path = "subjects[%d]" % i
        if not isinstance(subj, dict):
            continue
        if not subj.get("name"):
            errors.append(fe_required(path + ".name"))
        kind = subj.get("kind")
        if kind == "ServiceAccount":
            if subj.get("apiGroup"):
                errors.append(fe_not_supported(path + ".apiGroup", subj["apiGroup"], [""]))
            if cluster and not subj.get("namespace"):
                errors.append(fe_required(path + ".namespace"))
        elif kind in ("User", "Group"):
            if subj.get("apiGroup") != RBAC_GROUP:
                errors.append(fe_not_supported(path + ".apiGroup", subj.get("apiGroup", ""), [RBAC_GROUP]))
        else:
            errors.append(fe_not_supported(path + ".kind", kind or "", ["ServiceAccount", "User", "Group"]))


def validate_binding_update(old, new, errors):
    if old.get("roleRef") != new.get("roleRef"):
        ref = new.get("roleRef") if isinstance(new.get("roleRef"), dict) else {}
        errors.append(fe_invalid("roleRef", Raw("rbac.RoleRef{APIGroup:%s, Kind:%s, Name:%s}" % (
            json.dumps(ref.get("apiGroup", "")), json.dumps(ref.get("kind", "")), json.dumps(ref.get("name", "")))),
            "cannot change roleRef"))


def default_crd(obj, create, old=None, sub=""):
    """The defaults of a CustomResourceDefinition (apiextensions/v1) and, on create, the status
    the API server writes before the establishing controller runs."""
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        spec = obj["spec"] = {}
    names = spec.get("names") if isinstance(spec.get("names"), dict) else {}
    if names.get("kind"):
        names.setdefault("singular", str(names["kind"]).lower())
        names.setdefault("listKind", names["kind"] + "List")
    spec["names"] = ordered(names, ["plural", "singular", "shortNames", "kind", "listKind", "categories"])
    conv = spec.get("conversion") if isinstance(spec.get("conversion"), dict) else {}
    conv.setdefault("strategy", "None")
    spec["conversion"] = conv
    spec = ordered(spec, ["group", "names", "scope", "versions", "conversion", "preserveUnknownFields"])
    obj["spec"] = spec
    if create:
        storage = [v.get("name") for v in spec.get("versions") or [] if isinstance(v, dict) and v.get("storage")]
        obj["status"] = {"conditions": None, "acceptedNames": {"plural": "", "kind": ""},
                         "storedVersions": storage[:1]}


def validate_crd(obj, errors):
    spec = obj.get("spec") or {}
    names = spec.get("names") or {}
    name = obj["metadata"].get("name", "")
    if name != "%s.%s" % (names.get("plural", ""), spec.get("group", "")):
        errors.append(fe_invalid("metadata.name", name, 'must be spec.names.plural+"."+spec.group'))
    if not spec.get("group"):
        errors.append(fe_required("spec.group"))
    if not names.get("plural"):
        errors.append(fe_required("spec.names.plural"))
    if not names.get("kind"):
        errors.append(fe_required("spec.names.kind"))
    if spec.get("scope") not in ("Cluster", "Namespaced"):
        errors.append(fe_not_supported("spec.scope", spec.get("scope", ""), ["Cluster", "Namespaced"]))
    versions = [v for v in spec.get("versions") or [] if isinstance(v, dict)]
    if not versions:
        errors.append(fe_invalid("spec.versions", Raw("[]apiextensions.CustomResourceDefinitionVersion(nil)"),
                                 "must have exactly one version marked as storage version"))
    elif sum(1 for v in versions if v.get("storage")) != 1:
        errors.append(fe_invalid("spec.versions", Raw("[]apiextensions.CustomResourceDefinitionVersion{...}"),
                                 "must have exactly one version marked as storage version"))


# Go types of the built-in fields the defaulting and validation above look into: a body whose
# field has another JSON type is undecodable there (400), as on the real server.
# A dict is an object with known fields; [x] an array of x; "map" a map of string to string;
# "object"/"string" just the JSON type.
_PROBE = {"httpGet": "object", "exec": "object", "tcpSocket": "object", "grpc": "object"}
_CONTAINER = {"name": "string", "image": "string", "imagePullPolicy": "string",
              "resources": {"limits": "object", "requests": "object", "claims": ["object"]},
              "ports": ["object"], "env": [{"name": "string", "valueFrom": {"fieldRef": "object"}}],
              "envFrom": ["object"], "volumeMounts": ["object"], "command": ["string"], "args": ["string"],
              "livenessProbe": _PROBE, "readinessProbe": _PROBE, "startupProbe": _PROBE,
              "terminationMessagePath": "string", "terminationMessagePolicy": "string"}
_POD_SPEC = {"containers": [_CONTAINER], "initContainers": [_CONTAINER], "ephemeralContainers": [_CONTAINER],
             "volumes": [{"name": "string", "secret": "object", "configMap": "object", "downwardAPI": "object",
                          "projected": "object", "emptyDir": "object"}],
             "tolerations": ["object"], "restartPolicy": "string", "dnsPolicy": "string",
             "schedulerName": "string", "securityContext": "object", "nodeName": "string",
             "nodeSelector": "map", "affinity": "object", "imagePullSecrets": ["object"],
             "hostname": "string", "subdomain": "string", "serviceAccountName": "string"}
_STATUS = {"conditions": ["object"], "phase": "string"}
SHAPES = {
    ("", "pods"): {"spec": _POD_SPEC, "status": _STATUS},
    ("batch", "jobs"): {"spec": {"template": {"metadata": {"labels": "map", "annotations": "map"},
                                              "spec": _POD_SPEC},
                                 "selector": {"matchLabels": "map", "matchExpressions": ["object"]},
                                 "podFailurePolicy": "object"},
                        "status": _STATUS},
    ("", "services"): {"spec": {"ports": ["object"], "selector": "map", "type": "string", "clusterIP": "string",
                                "clusterIPs": ["string"]}, "status": "object"},
    ("", "secrets"): {"data": "map", "stringData": "map", "type": "string"},
    ("", "configmaps"): {"data": "map", "binaryData": "map"},
    ("", "namespaces"): {"spec": {"finalizers": ["string"]}, "status": "object"},
    ("", "events"): {"involvedObject": "object", "source": "object"},
    ("coordination.k8s.io", "leases"): {"spec": "object"},
    ("", "serviceaccounts"): {"secrets": ["object"], "imagePullSecrets": ["object"]},
    ("apps", "deployments"): {"spec": {"template": {"metadata": {"labels": "map", "annotations": "map"},
                                                    "spec": _POD_SPEC},
                                       "selector": {"matchLabels": "map", "matchExpressions": ["object"]},
                                       "strategy": "object"},
                              "status": _STATUS},
    ("apps", "replicasets"): {"spec": {"template": {"metadata": {"labels": "map", "annotations": "map"},
                                                    "spec": _POD_SPEC},
                                       "selector": {"matchLabels": "map", "matchExpressions": ["object"]}},
                              "status": _STATUS},
    (RBAC_GROUP, "clusterroles"): {"rules": [{"verbs": ["string"], "apiGroups": ["string"],
                                              "resources": ["string"], "resourceNames": ["string"],
                                              "nonResourceURLs": ["string"]}], "aggregationRule": "object"},
    (RBAC_GROUP, "roles"): {"rules": [{"verbs": ["string"], "apiGroups": ["string"], "resources": ["string"],
                                       "resourceNames": ["string"], "nonResourceURLs": ["string"]}]},
    (RBAC_GROUP, "clusterrolebindings"): {"subjects": [{"kind": "string", "name": "string", "namespace": "string",
                                                        "apiGroup": "string"}],
                                          "roleRef": {"kind": "string", "name": "string", "apiGroup": "string"}},
    (RBAC_GROUP, "rolebindings"): {"subjects": [{"kind": "string", "name": "string", "namespace": "string",
                                                 "apiGroup": "string"}],
                                   "roleRef": {"kind": "string", "name": "string", "apiGroup": "string"}},
    (CRD_GROUP, "customresourcedefinitions"): {"spec": {"group": "string", "scope": "string",
                                                        "names": {"plural": "string", "kind": "string",
                                                                  "singular": "string", "listKind": "string"},
                                                        "versions": [{"name": "string", "schema": "object"}]},
                                               "status": "object"},
}


def shape_problem(value, shape, path):
    """(path, value, Go type) of the first field whose JSON type cannot decode into the Go type."""
    if value is None:
        return None
    if isinstance(shape, dict):
        if not isinstance(value, dict):
            return (path, value, "object")
        for k, sub in shape.items():
            if k in value:
                p = shape_problem(value[k], sub, path + "." + k)
                if p:
                    return p
        return None
    if isinstance(shape, list):
        if not isinstance(value, list):
            return (path, value, "array")
        for i, v in enumerate(value):
            p = shape_problem(v, shape[0], "%s[%d]" % (path, i))
            if p:
                return p
        return None
    if shape == "map":
        if not isinstance(value, dict):
            return (path, value, "map[string]string")
        for k, v in value.items():
            if not isinstance(v, str):
                return (path + "." + k, v, "string")
        return None
    if shape == "object" and not isinstance(value, dict):
        return (path, value, "object")
    if shape == "string" and not isinstance(value, str):
        return (path, value, "string")
    return None


POD_FIELDS = ("spec.nodeName", "spec.restartPolicy", "spec.schedulerName", "spec.serviceAccountName",
              "spec.hostNetwork", "status.phase", "status.podIP", "status.podIPs", "status.nominatedNodeName")
EVENT_FIELDS = ("involvedObject.kind", "involvedObject.namespace", "involvedObject.name",
                "involvedObject.uid", "involvedObject.apiVersion", "involvedObject.resourceVersion",
                "involvedObject.fieldPath", "reason", "reportingComponent", "source", "type")


def builtin_kinds():
    """The served resources: one line each."""
    return [
        Kind("", ["v1"], "pods", "Pod", "pod", status=True, short=("po",), return_deleted=True, graceful=True,
             fields=POD_FIELDS, defaulter=default_pod, validator=validate_pod,
             update_validator=validate_pod_update, categories=("all",),
             bookmark={"spec": {"containers": None}, "status": {}}),
        Kind("", ["v1"], "services", "Service", "service", status=True, short=("svc",), return_deleted=True,
             name_rule="label1035", defaulter=default_service, update_validator=validate_service_update,
             categories=("all",), bookmark={"spec": {}, "status": {"loadBalancer": {}}}),
        Kind("", ["v1"], "configmaps", "ConfigMap", "configmap", short=("cm",), validator=validate_configmap,
             update_validator=validate_configmap_update, top=("immutable", "data", "binaryData")),
        Kind("", ["v1"], "secrets", "Secret", "secret", fields=("type",), defaulter=default_secret,
             validator=validate_secret, update_validator=validate_secret_update,
             top=("immutable", "data", "stringData", "type")),
        Kind("", ["v1"], "events", "Event", "event", short=("ev",), create_on_update=True, fields=EVENT_FIELDS,
             bookmark={"involvedObject": {}, "source": {}, "firstTimestamp": None, "lastTimestamp": None,
                       "eventTime": None, "reportingComponent": "", "reportingInstance": ""}),
        Kind("", ["v1"], "namespaces", "Namespace", "namespace", namespaced=False, status=True, short=("ns",),
             return_deleted=True, name_rule="label1123", fields=("status.phase",), defaulter=default_namespace,
             bookmark={"spec": {}, "status": {}}),
        Kind("", ["v1"], "nodes", "Node", "node", namespaced=False, status=True, short=("no",),
             bookmark={"spec": {}, "status": {}}),
        Kind("", ["v1"], "serviceaccounts", "ServiceAccount", "serviceaccount", short=("sa",),
             top=("secrets", "imagePullSecrets", "automountServiceAccountToken"),
             subresources={"token": ("authentication.k8s.io", "v1", "TokenRequest", ["create"])}),
        Kind("", ["v1"], "endpoints", "Endpoints", "endpoints", short=("ep",), top=("subsets",)),
        Kind("", ["v1"], "resourcequotas", "ResourceQuota", "resourcequota", status=True, short=("quota",),
             bookmark={"spec": {}, "status": {}}),
        Kind("apps", ["v1"], "deployments", "Deployment", "deployment", status=True, generation="spec",
             short=("deploy",), categories=("all",), defaulter=default_deployment, validator=validate_workload,
             update_validator=validate_workload_update,
             bookmark={"spec": {"selector": None, "template": {"metadata": {"creationTimestamp": None},
                                                               "spec": {"containers": None}},
                                "strategy": {}}, "status": {}}),
        Kind("apps", ["v1"], "replicasets", "ReplicaSet", "replicaset", status=True, generation="spec",
             short=("rs",), categories=("all",), defaulter=default_replicaset, validator=validate_workload,
             update_validator=validate_workload_update,
             bookmark={"spec": {"selector": None, "template": {"metadata": {"creationTimestamp": None},
                                                               "spec": {"containers": None}}},
                       "status": {"replicas": 0}}),
        Kind("authentication.k8s.io", ["v1"], "selfsubjectreviews", "SelfSubjectReview", "selfsubjectreview",
             namespaced=False, create_only="self_subject_review"),
        Kind("batch", ["v1"], "jobs", "Job", "job", status=True, generation="spec", fields=("status.successful",),
             defaulter=default_job, validator=validate_job, update_validator=validate_job_update,
             categories=("all",),
             bookmark={"spec": {"template": {"metadata": {"creationTimestamp": None},
                                             "spec": {"containers": None}}}, "status": {}}),
        Kind(RBAC_GROUP, ["v1"], "clusterroles", "ClusterRole", "clusterrole", namespaced=False, name_rule="path",
             defaulter=default_role, validator=validate_role, top=("rules", "aggregationRule"),
             bookmark={"rules": None}),
        Kind(RBAC_GROUP, ["v1"], "clusterrolebindings", "ClusterRoleBinding", "clusterrolebinding",
             namespaced=False, name_rule="path", defaulter=default_binding, validator=validate_binding,
             update_validator=validate_binding_update, top=("subjects", "roleRef"),
             bookmark={"roleRef": {"apiGroup": "", "kind": "", "name": ""}}),
        Kind(RBAC_GROUP, ["v1"], "roles", "Role", "role", name_rule="path", defaulter=default_role,
             validator=validate_role, top=("rules",), bookmark={"rules": None}),
        Kind(RBAC_GROUP, ["v1"], "rolebindings", "RoleBinding", "rolebinding", name_rule="path",
             defaulter=default_binding, validator=validate_binding, update_validator=validate_binding_update,
             top=("subjects", "roleRef"), bookmark={"roleRef": {"apiGroup": "", "kind": "", "name": ""}}),
        Kind(CRD_GROUP, ["v1"], "customresourcedefinitions", "CustomResourceDefinition",
             "customresourcedefinition", namespaced=False, status=True, generation="spec", short=("crd", "crds"),
             defaulter=default_crd, validator=validate_crd,
             bookmark={"spec": {"group": "", "names": {"plural": "", "kind": ""}, "scope": "", "versions": None},
                       "status": {"conditions": None, "acceptedNames": {"plural": "", "kind": ""},
                                  "storedVersions": None}}),
        Kind("coordination.k8s.io", ["v1"], "leases", "Lease", "lease", create_on_update=True,
             bookmark={"spec": {}}),
        Kind("discovery.k8s.io", ["v1"], "endpointslices", "EndpointSlice", "endpointslice",
             top=("addressType", "endpoints", "ports"), bookmark={"addressType": "", "endpoints": None}),
        Kind("kubeflow.org", ["v2beta1", "v1alpha2"], "mpijobs", "MPIJob", "mpijob", status=True, crd=True),
        Kind("scheduling.volcano.sh", ["v1beta1"], "podgroups", "PodGroup", "podgroup", status=True, crd=True,
             short=("pg", "podgroup-v1beta1")),
        Kind("scheduling.x-k8s.io", ["v1alpha1"], "podgroups", "PodGroup", "podgroup", status=True, crd=True,
             short=("pgs",)),
    ]


# --------------------------------------------------------------------------------------------
# Admission of custom resources through their CRD's structural schema (schema.py does the
# pruning, defaulting and validation; the CEL rules that compare with oldSelf are evaluated here)
# --------------------------------------------------------------------------------------------

def json_type(v):
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, float):
        return "integer" if v.is_integer() else "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    return "object"


_said_once = set()


def say_once(text):
    """One line on stderr, the first time only."""
    if text not in _said_once:
        _said_once.add(text)
        print("apiserver double: " + text, file=sys.stderr, flush=True)


def load_crd_file(path):
    """The CustomResourceDefinition object of a YAML file, or None (said once on stderr) when the
    file or PyYAML is missing or the file holds no CRD."""
    try:
        import yaml
    except ImportError:
        say_once("PyYAML is missing: %s is not loaded, its kind is served without a schema" % path)
        return None
    try:
        with open(path, encoding="utf-8") as f:
            crd = yaml.load(f, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except (OSError, yaml.YAMLError) as e:
        say_once("cannot load %s (%s): its kind is served without a schema" % (path, e))
        return None
    if not isinstance(crd, dict) or crd.get("kind") != "CustomResourceDefinition":
        say_once("%s holds no CustomResourceDefinition: its kind is served without a schema" % path)
        return None
    return crd


def install_crd_schemas(kind, crd):
    """Gives kind the openAPIV3Schema of each of its versions that the CRD object describes."""
    spec = crd.get("spec") or {}
    for v in spec.get("versions") or []:
        name = v.get("name")
        if name not in kind.versions:
            continue
        try:
            schema = crd_schema.crd_version_schema(crd, name)
        except KeyError:
            continue
        if not schema or (schema.get("x-kubernetes-preserve-unknown-fields") and not schema.get("properties")):
            continue
        kind.schemas[name] = schema
        if kind.schema is None or name == kind.versions[0]:
            kind.schema = schema


def schema_field_errors(causes):
    return [FieldError(c["reason"], c["field"], c["message"]) for c in causes]


# field.ErrorTypes after which kube-apiserver skips the CEL rules (apiextensions hasBlockingErr)
CEL_BLOCKING = ("FieldValueNotSupported", "FieldValueRequired", "FieldValueTooLong", "FieldValueTooMany",
                "FieldValueTypeInvalid")
CEL_SKIPPED = FieldError("FieldValueInvalid", "<nil>", 'Invalid value: "null": some validation rules were not '
                         'checked because the object was invalid; correct the existing errors to complete '
                         'validation')

# The root rule of the MPIJob CRD (scripts/gen-crd.py root_rules), compared without whitespace.
NETWORKING_RULE = re.sub(r"\s+", "", """
    (has(oldSelf.status) && has(oldSelf.status.conditions) &&
      oldSelf.status.conditions.exists(c,
        (c.type == 'Succeeded' || c.type == 'Failed') && c.status == 'True'))
    || (has(self.spec.networking) == has(oldSelf.spec.networking) &&
      (!has(self.spec.networking) || self.spec.networking == oldSelf.spec.networking))""")


_rules_of = {}                      # id(schema) -> its x-kubernetes-validations rules (schemas live on)


def schema_rules(schema):
    rules = _rules_of.get(id(schema))
    if rules is None:
        rules = _rules_of[id(schema)] = crd_schema.validation_rules(schema)
    return rules


def _rule_target(obj, schema, path):
    """(present, value, schema type) of the field a rule at `path` ("" or "spec.x") sits on."""
    value, node = obj, schema or {}
    for part in [p for p in path.split(".") if p]:
        if not isinstance(value, dict) or part not in value:
            return False, None, None
        value = value[part]
        node = (node.get("properties") or {}).get(part) or {}
    return True, value, node.get("type") or "object"


def _finished(obj):
    conds = (obj.get("status") or {}).get("conditions") if isinstance(obj.get("status"), dict) else None
    return any(isinstance(c, dict) and c.get("type") in ("Succeeded", "Failed") and c.get("status") == "True"
               for c in (conds if isinstance(conds, list) else []))


def transition_errors(schema, new, old):
    """The x-kubernetes-validations rules that compare with oldSelf, evaluated by hand for the rules
    the MPIJob CRD has: `self == oldSelf` on a field, and the root networking rule. Others are named
    once on stderr and pass. Like the server, a field rule runs only where old and new both have
    the field."""
    errors = []
    for r in [r for r in schema_rules(schema) if r["transition"]]:
        path, rule = r["path"], re.sub(r"\s+", "", r["rule"])
        if "[" in path or "*" in path:
            say_once("transition rule at %s not evaluated: %s" % (path, r["rule"]))
            continue
        has_new, new_v, t = _rule_target(new, schema, path)
        has_old, old_v, _ = _rule_target(old, schema, path)
        if not (has_new and has_old):
            continue
        field = r["fieldPath"].lstrip(".") if r["fieldPath"] else path
        if rule == "self==oldSelf":
            ok = crd_schema.same_value(new_v, old_v)
        elif rule == NETWORKING_RULE and path == "":
            def net(o):
                spec = o.get("spec") if isinstance(o.get("spec"), dict) else {}
                return ("networking" in spec), spec.get("networking")
            (nh, nv), (oh, ov) = net(new_v), net(old_v)
            ok = _finished(old_v) or (nh == oh and (not nh or crd_schema.same_value(nv, ov)))
        else:
            say_once("transition rule at %s not evaluated: %s" % (path or "<root>", r["rule"]))
            continue
        if not ok:
            errors.append(fe_invalid(field, t, r["message"] or "failed rule: " + r["rule"]))
    return errors


def unknown_field_warnings(kind, version, body, mode):
    """fieldValidation on the body as decoded: Strict refuses unknown fields (400), Warn (the default)
    names each in a warning, Ignore says nothing. Pruning happens later, in admit_schema."""
    schema = kind.schema_for(version)
    if not schema or mode == "Ignore" or not isinstance(body, dict):
        return []
    unknown = crd_schema.unknown_fields(schema, body)
    if unknown and mode == "Strict":
        raise err_bad_request('%s in version "%s" cannot be handled as a %s: strict decoding error: %s' % (
            kind.kind, version, kind.kind, ", ".join('unknown field "%s"' % u for u in unknown)))
    return ['unknown field "%s"' % u for u in unknown]


def admit_schema(kind, version, obj):
    """(pruned and defaulted object, schema errors) for a write through `version`."""
    schema = kind.schema_for(version)
    if not schema:
        return obj, []
    out = crd_schema.apply_defaults(schema, crd_schema.prune(schema, obj))
    return out, schema_field_errors(crd_schema.validate(schema, out))


def admit_rules(kind, version, obj, old, errors):
    """The CEL step after the schema: skipped with one fieldless cause when an earlier error blocks
    it (as kube-apiserver does whenever the schema has rules), else the transition rules on update."""
    schema = kind.schema_for(version)
    if not schema or not schema_rules(schema):
        return
    if any(e.reason in CEL_BLOCKING for e in errors):
        errors.append(CEL_SKIPPED)
    elif old is not None:
        errors.extend(transition_errors(schema, obj, old))


# --------------------------------------------------------------------------------------------
# Selectors
# --------------------------------------------------------------------------------------------

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


# --------------------------------------------------------------------------------------------
# Patches
# --------------------------------------------------------------------------------------------

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


def _jp_get(doc, path):
    parts = _pointer(path)
    if not parts:
        return doc
    c = _container(doc, parts, path)
    last = parts[-1]
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
    parts = _pointer(path)
    if not parts:
        return value
    c = _container(doc, parts, path)
    last = parts[-1]
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
    parts = _pointer(path)
    if not parts:
        raise PatchError("cannot remove the whole document")
    c = _container(doc, parts, path)
    last = parts[-1]
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
            parts = _pointer(path)
            if not parts:
                doc = copy.deepcopy(op.get("value"))
            else:
                c = _container(doc, parts, path)
                if isinstance(c, list):
                    c[int(parts[-1])] = copy.deepcopy(op.get("value"))
                else:
                    c[parts[-1]] = copy.deepcopy(op.get("value"))
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


# --------------------------------------------------------------------------------------------
# Misc helpers
# --------------------------------------------------------------------------------------------

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


def encode_continue(rv, start):
    raw = json.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": start}, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_continue(token):
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


def strip_server_meta(meta):
    for k in ("uid", "resourceVersion", "creationTimestamp", "deletionTimestamp",
              "deletionGracePeriodSeconds", "generation", "managedFields", "selfLink"):
        meta.pop(k, None)


# --------------------------------------------------------------------------------------------
# Store: objects, history, watchers
# --------------------------------------------------------------------------------------------

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


# --------------------------------------------------------------------------------------------
# What kubectl asks for beyond the resource API: content negotiation (aggregated discovery,
# server-side Tables), OpenAPI v3 documents and the Table rendering of each kind
# --------------------------------------------------------------------------------------------

TABLE_GVS = ("v1", "v1beta1")                 # meta.k8s.io versions a Table is served in
DISCOVERY_GVS = ("v2", "v2beta1")             # apidiscovery.k8s.io versions served


def parse_accept(header):
    """The media ranges of an Accept header, in order: [(type, {param: value})]."""
    out = []
    for part in (header or "").split(","):
        pieces = [p.strip() for p in part.split(";")]
        if not pieces or not pieces[0]:
            continue
        params = {}
        for p in pieces[1:]:
            k, sep, v = p.partition("=")
            if sep:
                params[k.strip().lower()] = v.strip().strip('"')
        out.append((pieces[0].lower(), params))
    return out


def negotiate(header, group, kinds_as, versions):
    """The version of `group`'s `kinds_as` (e.g. meta.k8s.io Table) the client asks for before
    any plain JSON, or None when plain JSON comes first (or is all it accepts)."""
    for mtype, params in parse_accept(header):
        if mtype not in ("application/json", "application/*", "*/*"):
            continue
        if "as" not in params:
            return None
        if params.get("g") == group and params.get("as") == kinds_as and params.get("v") in versions:
            return params["v"]
    return None


def human_duration(seconds):
    """apimachinery's duration.HumanDuration, the AGE column format."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return "%ds" % s
    minutes = s // 60
    if minutes < 10:
        return "%dm" % minutes if s % 60 == 0 else "%dm%ds" % (minutes, s % 60)
    if minutes < 180:
        return "%dm" % minutes
    hours = s // 3600
    if hours < 8:
        return "%dh" % hours if minutes % 60 == 0 else "%dh%dm" % (hours, minutes % 60)
    if hours < 48:
        return "%dh" % hours
    if hours < 24 * 8:
        return "%dd" % (hours // 24) if hours % 24 == 0 else "%dd%dh" % (hours // 24, hours % 24)
    if hours < 24 * 365 * 2:
        return "%dd" % (hours // 24)
    if hours < 24 * 365 * 8:
        dy = (hours // 24) % 365
        return "%dy" % (hours // 24 // 365) if dy == 0 else "%dy%dd" % (hours // 24 // 365, dy)
    return "%dy" % (hours // 24 // 365)


def parse_time(text):
    """Seconds since the epoch of an RFC 3339 timestamp, or None."""
    if not isinstance(text, str) or not text:
        return None
    try:
        return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def age(text, now=None):
    t = parse_time(text)
    if t is None:
        return "<unknown>"
    return human_duration((now if now is not None else time.time()) - t)


def simple_jsonpath(obj, path):
    """Values of a printer-column JSONPath of the simple kind CRDs use: .a.b, .a[0].b, .a['x.y'],
    optionally wrapped in {}. Returns a list (empty when nothing is there)."""
    p = path.strip()
    if p.startswith("{") and p.endswith("}"):
        p = p[1:-1].strip()
    if p.startswith("$"):
        p = p[1:]
    steps = re.findall(r"\.([^.\[\]]+)|\[(-?\d+|\*)\]|\['([^']*)'\]|\[\"([^\"]*)\"\]", p)
    values = [obj]
    for name, index, quoted, dquoted in steps:
        out = []
        key = name or quoted or dquoted
        for v in values:
            if key:
                if key == "*" and isinstance(v, dict):
                    out.extend(v.values())
                elif isinstance(v, dict) and key in v:
                    out.append(v[key])
            elif index == "*":
                if isinstance(v, list):
                    out.extend(v)
            elif isinstance(v, list):
                i = int(index)
                if -len(v) <= i < len(v):
                    out.append(v[i])
        values = out
    return [v for v in values if v is not None]


def _col(name, ctype, description, priority=0, fmt=""):
    return {"name": name, "type": ctype, "format": fmt, "description": description, "priority": priority}


NAME_COLUMN = _col("Name", "string", "Name must be unique within a namespace. Is required when creating "
                   "resources, although some resources may allow a client to request the generation of an "
                   "appropriate name automatically. Name is primarily intended for creation idempotence and "
                   "configuration definition. Cannot be updated. More info: "
                   "https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names", fmt="name")
AGE_COLUMN = _col("Age", "string", "CreationTimestamp is a timestamp representing the server time when this "
                  "object was created.")


def _meta(obj):
    m = obj.get("metadata")
    return m if isinstance(m, dict) else {}


def _dict(v):
    return v if isinstance(v, dict) else {}


def _list(v):
    return v if isinstance(v, list) else []


def _pod_row(pod, now):
    spec, status = _dict(pod.get("spec")), _dict(pod.get("status"))
    containers = _list(spec.get("containers"))
    statuses = _list(status.get("containerStatuses"))
    reason = status.get("reason") or status.get("phase") or ""
    ready = restarts = 0
    last_restart = None
    init_statuses = _list(status.get("initContainerStatuses"))
    initializing = False
    for i, cs in enumerate(init_statuses):
        cs = _dict(cs)
        restarts += int(cs.get("restartCount") or 0)
        state = _dict(cs.get("state"))
        term, wait = _dict(state.get("terminated")), _dict(state.get("waiting"))
        if state.get("terminated") is not None and term.get("exitCode") == 0:
            continue
        if state.get("terminated") is not None:
            reason = "Init:" + (term.get("reason") or ("Signal:%d" % term["signal"] if term.get("signal")
                                                         else "ExitCode:%d" % int(term.get("exitCode") or 0)))
        elif wait.get("reason") and wait.get("reason") != "PodInitializing":
            reason = "Init:" + wait["reason"]
        else:
            reason = "Init:%d/%d" % (i, len(_list(spec.get("initContainers"))))
        initializing = True
        break
    if not initializing:
        has_running = False
        for cs in reversed(statuses):
            cs = _dict(cs)
            restarts += int(cs.get("restartCount") or 0)
            finished = parse_time(_dict(_dict(cs.get("lastState")).get("terminated")).get("finishedAt"))
            if finished is not None and (last_restart is None or finished > last_restart):
                last_restart = finished
            state = _dict(cs.get("state"))
            term, wait = _dict(state.get("terminated")), _dict(state.get("waiting"))
            if wait.get("reason"):
                reason = wait["reason"]
            elif state.get("terminated") is not None and term.get("reason"):
                reason = term["reason"]
            elif state.get("terminated") is not None:
                reason = ("Signal:%d" % term["signal"] if term.get("signal")
                          else "ExitCode:%d" % int(term.get("exitCode") or 0))
            elif state.get("running") is not None and cs.get("ready"):
                has_running = True
                ready += 1
        if reason == "Completed" and has_running:
            conds = _list(status.get("conditions"))
            is_ready = any(_dict(c).get("type") == "Ready" and _dict(c).get("status") == "True" for c in conds)
            reason = "Running" if is_ready else "NotReady"
    if _meta(pod).get("deletionTimestamp"):
        reason = "Unknown" if status.get("reason") == "NodeLost" else "Terminating"
    restarts_text = str(restarts)
    if restarts and last_restart is not None:
        restarts_text = "%d (%s ago)" % (restarts, human_duration(now - last_restart))
    gates = _list(spec.get("readinessGates"))
    if gates:
        conds = {_dict(c).get("type"): _dict(c).get("status") for c in _list(status.get("conditions"))}
        gates_text = "%d/%d" % (sum(1 for g in gates if conds.get(_dict(g).get("conditionType")) == "True"),
                                len(gates))
    else:
        gates_text = "<none>"
    return ["%d/%d" % (ready, len(containers)), reason, restarts_text, age(_meta(pod).get("creationTimestamp"), now),
            status.get("podIP") or "<none>", spec.get("nodeName") or "<none>",
            status.get("nominatedNodeName") or "<none>", gates_text]


POD_COLUMNS = [
    _col("Ready", "string", "The aggregate readiness state of this pod for accepting traffic."),
    _col("Status", "string", "The aggregate status of the containers in this pod."),
    _col("Restarts", "string", "The number of times the containers in this pod have been restarted and when the "
         "last container in this pod has restarted."),
    AGE_COLUMN,
    _col("IP", "string", "IP address allocated to the pod. Routable at least within the cluster. Empty if not "
         "yet allocated.", 1),
    _col("Node", "string", "NodeName is a request to schedule this pod onto a specific node.", 1),
    _col("Nominated Node", "string", "nominatedNodeName is set only when this pod preempts other pods on the "
         "node.", 1),
    _col("Readiness Gates", "string", "If specified, all readiness gates will be evaluated for pod readiness.", 1),
]


def _selector_text(sel):
    sel = _dict(sel)
    parts = ["%s=%s" % (k, v) for k, v in sorted(_dict(sel.get("matchLabels")).items())]
    for e in _list(sel.get("matchExpressions")):
        e = _dict(e)
        op, key, vals = e.get("operator"), e.get("key", ""), ",".join(_list(e.get("values")))
        if op == "In":
            parts.append("%s in (%s)" % (key, vals))
        elif op == "NotIn":
            parts.append("%s notin (%s)" % (key, vals))
        elif op == "Exists":
            parts.append(key)
        elif op == "DoesNotExist":
            parts.append("!" + key)
    return ",".join(parts) if parts else "<none>"


def _job_row(job, now):
    spec, status = _dict(job.get("spec")), _dict(job.get("status"))
    true = {_dict(c).get("type") for c in _list(status.get("conditions")) if _dict(c).get("status") == "True"}
    if "Complete" in true:
        state = "Complete"
    elif "Failed" in true:
        state = "Failed"
    elif _meta(job).get("deletionTimestamp"):
        state = "Terminating"
    elif "Suspended" in true:
        state = "Suspended"
    elif "FailureTarget" in true:
        state = "FailureTarget"
    elif "SuccessCriteriaMet" in true:
        state = "SuccessCriteriaMet"
    else:
        state = "Running"
    succeeded = int(status.get("succeeded") or 0)
    if spec.get("completions") is not None:
        completions = "%d/%d" % (succeeded, int(spec["completions"]))
    else:
        parallelism = int(spec.get("parallelism") if spec.get("parallelism") is not None else 1)
        completions = "%d/1 of %d" % (succeeded, parallelism) if parallelism > 1 else "%d/1" % succeeded
    start, done = parse_time(status.get("startTime")), parse_time(status.get("completionTime"))
    duration = "" if start is None else human_duration((done if done is not None else now) - start)
    pod_spec = _dict(_dict(spec.get("template")).get("spec"))
    containers = [_dict(c) for c in _list(pod_spec.get("containers"))]
    return [state, completions, duration, age(_meta(job).get("creationTimestamp"), now),
            ",".join(str(c.get("name", "")) for c in containers), ",".join(str(c.get("image", "")) for c in containers),
            _selector_text(spec.get("selector"))]


JOB_COLUMNS = [
    _col("Status", "string", "Status of the job."),
    _col("Completions", "string", "The desired number of successfully finished pods the job should be run "
         "with."),
    _col("Duration", "string", "Time required to complete the job."),
    AGE_COLUMN,
    _col("Containers", "string", "Names of each container in the template.", 1),
    _col("Images", "string", "Images referenced by each container in the template.", 1),
    _col("Selector", "string", "A label query over pods that should match the pod count.", 1),
]


def _event_row(ev, now):
    obj = _dict(ev.get("involvedObject"))
    last = ev.get("lastTimestamp") or ev.get("eventTime") or _meta(ev).get("creationTimestamp")
    kind = str(obj.get("kind") or "").lower()
    source = _dict(ev.get("source"))
    src = ev.get("reportingComponent") or source.get("component") or ""
    if source.get("host"):
        src += ", " + source["host"]
    first = ev.get("firstTimestamp") or ev.get("eventTime")
    return [age(last, now), ev.get("type") or "", ev.get("reason") or "",
            "%s/%s" % (kind, obj.get("name", "")), obj.get("fieldPath") or "", src,
            str(ev.get("message") or "").strip(), age(first, now) if first else "<unknown>",
            int(ev.get("count") or 1), _meta(ev).get("name", "")]


EVENT_COLUMNS = [
    _col("Last Seen", "string", "Time when this Event was last seen"),
    _col("Type", "string", "Type of this event (Normal, Warning), new types could be added in the future."),
    _col("Reason", "string", "This should be a short, machine understandable string that gives the reason "
         "for this event being generated."),
    _col("Object", "string", "The object this Event is about."),
    _col("Subobject", "string", "The field path of the object this Event is about.", 1),
    _col("Source", "string", "The component reporting this event.", 1),
    _col("Message", "string", "A human-readable description of the status of this operation."),
    _col("First Seen", "string", "The time at which the event was first recorded.", 1),
    _col("Count", "integer", "The number of times this event has occurred.", 1),
    dict(NAME_COLUMN, priority=1),
]


def _service_row(svc, now):
    spec = _dict(svc.get("spec"))
    ports = []
    for p in _list(spec.get("ports")):
        p = _dict(p)
        text = "%s/%s" % (p.get("port", ""), p.get("protocol") or "TCP")
        if p.get("nodePort"):
            text = "%s:%s/%s" % (p.get("port", ""), p["nodePort"], p.get("protocol") or "TCP")
        ports.append(text)
    external = ",".join(_list(spec.get("externalIPs"))) or "<none>"
    sel = _dict(spec.get("selector"))
    return [spec.get("type") or "ClusterIP", spec.get("clusterIP") or "<none>", external,
            ",".join(ports) or "<none>", age(_meta(svc).get("creationTimestamp"), now),
            ",".join("%s=%s" % kv for kv in sorted(sel.items())) or "<none>"]


SERVICE_COLUMNS = [
    _col("Type", "string", "The type of the service."),
    _col("Cluster-IP", "string", "The IP address of the service."),
    _col("External-IP", "string", "The external IP addresses of the service."),
    _col("Port(s)", "string", "The ports the service listens on."),
    AGE_COLUMN,
    _col("Selector", "string", "Route service traffic to pods with label keys and values matching this "
         "selector.", 1),
]

def _template_cells(obj):
    """Containers, Images, Selector of a Deployment or ReplicaSet (kubectl get -o wide)."""
    spec = _dict(obj.get("spec"))
    containers = [_dict(c) for c in _list(_dict(_dict(spec.get("template")).get("spec")).get("containers"))]
    sel = _dict(spec.get("selector"))
    return [",".join(str(c.get("name", "")) for c in containers),
            ",".join(str(c.get("image", "")) for c in containers), _selector_text(sel) if sel else "<none>"]


def _binding_row(b, now):
    ref = _dict(b.get("roleRef"))
    subjects = [_dict(x) for x in _list(b.get("subjects"))]

    def names(kind):
        return ",".join(("%s/%s" % (x.get("namespace", ""), x.get("name", "")) if kind == "ServiceAccount"
                         else str(x.get("name", ""))) for x in subjects if x.get("kind") == kind)
    return ["%s/%s" % (ref.get("kind", ""), ref.get("name", "")), age(_meta(b).get("creationTimestamp"), now),
            names("User"), names("Group"), names("ServiceAccount")]


TEMPLATE_COLUMNS = [_col("Containers", "string", "Names of each container in the template.", 1),
                    _col("Images", "string", "Images referenced by each container in the template.", 1),
                    _col("Selector", "string", "Label selector for pods.", 1)]
CREATED_AT = [_col("Created At", "date", AGE_COLUMN["description"])]


def _binding_columns(what):
    return [_col("Role", "string", "RoleRef of the %s." % what), AGE_COLUMN,
            _col("Users", "string", "Users in the %s" % what, 1),
            _col("Groups", "string", "Groups in the %s" % what, 1),
            _col("ServiceAccounts", "string", "ServiceAccounts in the %s" % what, 1)]


# (group, plural) -> (columns after Name, row function(obj, now) -> cells after the name); events
# have their own layout, the name last
BUILTIN_TABLES = {
    ("", "serviceaccounts"): ([_col("Secrets", "string", "Secrets is a list of the secrets in the same namespace "
                                    "that pods running using this ServiceAccount are allowed to use."), AGE_COLUMN],
                              lambda o, now: [len(_list(o.get("secrets"))),
                                              age(_meta(o).get("creationTimestamp"), now)]),
    ("apps", "deployments"): ([_col("Ready", "string", "Number of the pod with ready state"),
                               _col("Up-to-date", "string", "Total number of non-terminated pods targeted by this "
                                    "deployment that have the desired template spec."),
                               _col("Available", "string", "Total number of available pods (ready for at least "
                                    "minReadySeconds) targeted by this deployment."), AGE_COLUMN] + TEMPLATE_COLUMNS,
                              lambda o, now: ["%d/%d" % (_dict(o.get("status")).get("readyReplicas") or 0,
                                                         _dict(o.get("spec")).get("replicas") or 0),
                                              _dict(o.get("status")).get("updatedReplicas") or 0,
                                              _dict(o.get("status")).get("availableReplicas") or 0,
                                              age(_meta(o).get("creationTimestamp"), now)] + _template_cells(o)),
    ("apps", "replicasets"): ([_col("Desired", "integer", "Replicas is the number of desired replicas."),
                               _col("Current", "integer", "Replicas is the most recently observed number of "
                                    "replicas."),
                               _col("Ready", "integer", "The number of ready replicas for this replica set."),
                               AGE_COLUMN] + TEMPLATE_COLUMNS,
                              lambda o, now: [_dict(o.get("spec")).get("replicas") or 0,
                                              _dict(o.get("status")).get("replicas") or 0,
                                              _dict(o.get("status")).get("readyReplicas") or 0,
                                              age(_meta(o).get("creationTimestamp"), now)] + _template_cells(o)),
    (RBAC_GROUP, "clusterroles"): (CREATED_AT, lambda o, now: [_meta(o).get("creationTimestamp")]),
    (RBAC_GROUP, "roles"): (CREATED_AT, lambda o, now: [_meta(o).get("creationTimestamp")]),
    (RBAC_GROUP, "clusterrolebindings"): (_binding_columns("clusterRoleBinding"), _binding_row),
    (RBAC_GROUP, "rolebindings"): (_binding_columns("roleBinding"), _binding_row),
    (CRD_GROUP, "customresourcedefinitions"): (CREATED_AT, lambda o, now: [_meta(o).get("creationTimestamp")]),
    ("", "pods"): (POD_COLUMNS, _pod_row),
    ("batch", "jobs"): (JOB_COLUMNS, _job_row),
    ("", "services"): (SERVICE_COLUMNS, _service_row),
    ("", "configmaps"): ([_col("Data", "integer", "Data contains the configuration data."), AGE_COLUMN],
                         lambda o, now: [len(_dict(o.get("data"))) + len(_dict(o.get("binaryData"))),
                                         age(_meta(o).get("creationTimestamp"), now)]),
    ("", "secrets"): ([_col("Type", "string", "The type of the secret"),
                       _col("Data", "integer", "The number of items in the secret"), AGE_COLUMN],
                      lambda o, now: [o.get("type") or "", len(_dict(o.get("data"))),
                                      age(_meta(o).get("creationTimestamp"), now)]),
    ("", "namespaces"): ([_col("Status", "string", "The status of the namespace"), AGE_COLUMN],
                         lambda o, now: [_dict(o.get("status")).get("phase") or "",
                                         age(_meta(o).get("creationTimestamp"), now)]),
    ("coordination.k8s.io", "leases"): ([_col("Holder", "string", "The holder of the lease"), AGE_COLUMN],
                                        lambda o, now: [_dict(o.get("spec")).get("holderIdentity") or "",
                                                        age(_meta(o).get("creationTimestamp"), now)]),
}


def printer_columns_of(crd):
    """version -> additionalPrinterColumns of a CustomResourceDefinition object."""
    out = {}
    for v in _list(_dict(crd.get("spec")).get("versions")):
        v = _dict(v)
        if v.get("name") and v.get("additionalPrinterColumns") is not None:
            out[v["name"]] = [_dict(c) for c in _list(v["additionalPrinterColumns"])]
    return out


def _cr_cell(col, obj, now):
    values = simple_jsonpath(obj, col.get("jsonPath") or "")
    if not values:
        return None
    v = values[0]
    t = col.get("type")
    if t == "date":
        return age(v, now) if isinstance(v, str) else "<unknown>"
    if t == "integer":
        return v if isinstance(v, int) and not isinstance(v, bool) else None
    if t == "number":
        return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None
    if t == "boolean":
        return v if isinstance(v, bool) else None
    if isinstance(v, str):
        return v
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (dict, list)):
        return json.dumps(v, separators=(",", ":"))
    return str(v)


def table_layout(kind, version):
    """(column definitions, row function(obj, now) -> cells) for a kind seen through a version."""
    def name(o):
        return _meta(o).get("name", "")
    if kind.crd:
        cols = kind.printer_columns.get(version)
        if cols:
            defs = [NAME_COLUMN] + [_col(c.get("name", ""), "string" if c.get("type") == "date" else
                                         c.get("type") or "string", c.get("description") or "",
                                         int(c.get("priority") or 0),
                                         "" if c.get("type") == "date" else c.get("format") or "")
                                    for c in cols]
            return defs, lambda o, now: [name(o)] + [_cr_cell(c, o, now) for c in cols]
    if kind.skey == ("", "events"):
        return EVENT_COLUMNS, _event_row
    if kind.skey in BUILTIN_TABLES:
        cols, row = BUILTIN_TABLES[kind.skey]
        return [NAME_COLUMN] + cols, lambda o, now: [name(o)] + row(o, now)
    return [NAME_COLUMN, AGE_COLUMN], lambda o, now: [name(o), age(_meta(o).get("creationTimestamp"), now)]


def check_include_object(include):
    if include not in ("None", "Metadata", "Object"):
        raise err_bad_request('includeObject: Unsupported value: %s: supported values: "Metadata", "None", '
                              '"Object"' % go_quote(include))


def to_table(kind, version, body, include, table_version="v1"):
    """A meta.k8s.io Table of a list or single-object response; include is None, Metadata or Object."""
    check_include_object(include)
    defs, row_of = table_layout(kind, version)
    now = time.time()
    is_list = isinstance(body.get("items"), list) and "metadata" in body and body.get("kind", "").endswith("List")
    objs = body["items"] if is_list else [body]
    rows = []
    for o in objs:
        o = render(kind, o, version)
        row = {"cells": row_of(o, now)}
        if include == "Object":
            row["object"] = dict(o, kind=o.get("kind") or kind.kind)
        elif include == "Metadata":
            row["object"] = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                             "metadata": _meta(o)}
        rows.append(row)
    meta = dict(body["metadata"]) if is_list else {"resourceVersion": _meta(body).get("resourceVersion", "")}
    return {"kind": "Table", "apiVersion": "meta.k8s.io/" + table_version, "metadata": meta, "columnDefinitions": defs,
            "rows": rows}


OPENAPI_V2_PB = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"


def openapi_v2_protobuf():
    """A minimal OpenAPI v2 document in protobuf (gnostic openapi_v2.Document: swagger = 1,
    info = 2 {title = 1, version = 2}, paths = 8), which is how kubectl reads /openapi/v2: it names
    no path, so kubectl validates nothing against it and reports unknown kinds as on a real server."""
    def field(num, payload):
        assert len(payload) < 128
        return bytes([num << 3 | 2, len(payload)]) + payload
    info = field(1, b"Kubernetes") + field(2, b"v1.32.13")
    return field(1, b"2.0") + field(2, info) + field(8, b"")


def openapi_gv_path(group, version):
    return "api/" + version if not group else "apis/%s/%s" % (group, version)


def _param(name, where, description, ptype="string", required=False):
    p = {"name": name, "in": where, "description": description, "schema": {"type": ptype, "uniqueItems": True}}
    if required:
        p["required"] = True
    return p


def openapi_schema_name(kind, version):
    """The components/schemas key of a kind: io.k8s.api.core.v1.Pod, org.kubeflow.v2beta1.MPIJob."""
    if not kind.crd:
        if kind.group == CRD_GROUP:
            return "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.%s.%s" % (version, kind.kind)
        pkg = {"": "core", "batch": "batch", "coordination.k8s.io": "coordination", RBAC_GROUP: "rbac",
               "discovery.k8s.io": "discovery", "authentication.k8s.io": "authentication"}.get(kind.group,
                                                                                               kind.group)
        return "io.k8s.api.%s.%s.%s" % (pkg, version, kind.kind)
    return "%s.%s.%s" % (".".join(reversed(kind.group.split("."))), version, kind.kind)


def openapi_gv_document(kinds, group, version):
    """An OpenAPI v3 document of one group-version: every path with its operations, tagged with
    x-kubernetes-group-version-kind, the PATCH ones naming fieldValidation (what kubectl checks
    before it leaves validation to the server), and each kind's schema."""
    paths, schemas = {}, {}
    gv = openapi_gv_path(group, version)
    for kind in sorted([k for k in kinds if k.group == group and version in k.versions], key=lambda k: k.plural):
        gvk = {"group": group, "version": version, "kind": kind.kind}
        ref = {"$ref": "#/components/schemas/" + openapi_schema_name(kind, version)}
        ok = {"200": {"description": "OK", "content": {"application/json": {"schema": ref}}}}
        write_params = [
            _param("dryRun", "query", "When present, indicates that modifications should not be persisted."),
            _param("fieldManager", "query", "fieldManager is a name associated with the actor or entity that is "
                   "making these changes."),
            _param("fieldValidation", "query", "fieldValidation instructs the server on how to handle objects in "
                   "the request containing unknown or duplicate fields: Ignore, Warn or Strict."),
        ]
        patch_types = ["application/json-patch+json", "application/merge-patch+json", "application/apply-patch+yaml"]
        body = {"content": {"*/*": {"schema": ref}}, "required": True}

        def op(action, params=(), request=None, tag=kind.kind):
            o = {"tags": [tag], "description": "%s %s" % (action, kind.kind), "operationId": action + kind.kind,
                 "responses": ok, "x-kubernetes-action": action, "x-kubernetes-group-version-kind": gvk}
            if params:
                o["parameters"] = list(params)
            if request is not None:
                o["requestBody"] = request
            return o
        base = "/" + gv + ("/namespaces/{namespace}" if kind.namespaced else "") + "/" + kind.plural
        common = [_param("pretty", "query", "If 'true', then the output is pretty printed.")]
        if kind.namespaced:
            common.insert(0, _param("namespace", "path", "object name and auth scope", required=True))
        named = [_param("name", "path", "name of the %s" % kind.kind, required=True)] + common
        if kind.create_only:
            paths[base] = {"post": op("post", write_params, body), "parameters": common}
            schemas[openapi_schema_name(kind, version)] = {"type": "object", "x-kubernetes-preserve-unknown-fields":
                                                           True, "x-kubernetes-group-version-kind": [gvk]}
            continue
        paths[base] = {"get": op("list"), "post": op("post", write_params, body),
                       "delete": op("deletecollection"), "parameters": common}
        patch = op("patch", write_params + [_param("force", "query", "Force is going to \"force\" Apply requests.",
                                                   "boolean")],
                   {"content": {t: {"schema": {"type": "object"}} for t in patch_types}, "required": True})
        paths[base + "/{name}"] = {"get": op("get"), "put": op("put", write_params, body), "patch": patch,
                                   "delete": op("delete"), "parameters": named}
        if kind.status:
            paths[base + "/{name}/status"] = {"get": op("get"), "put": op("put", write_params, body),
                                              "patch": copy.deepcopy(patch), "parameters": named}
        schema = copy.deepcopy(kind.schema_for(version)) if kind.crd and kind.schema_for(version) else \
            {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
        schema["x-kubernetes-group-version-kind"] = [gvk]
        schemas[openapi_schema_name(kind, version)] = schema
    return {"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": "v1.32.13"}, "paths": paths,
            "components": {"schemas": schemas}}


# --------------------------------------------------------------------------------------------
# The API: one instance shared by every connection
# --------------------------------------------------------------------------------------------

def render(kind, obj, version, in_list=False):
    """The object as seen through a version (and, for built-in lists, without kind/apiVersion)."""
    if obj is None:
        return None
    gv = kind.gv(version)
    if in_list and not kind.crd:
        return {k: v for k, v in obj.items() if k not in ("kind", "apiVersion")}
    if obj.get("apiVersion") == gv:
        return obj
    out = dict(obj)
    out["apiVersion"] = gv
    return out


class Request:
    """A parsed API request."""

    def __init__(self):
        self.method = ""
        self.path = ""
        self.raw_query = ""
        self.query = {}
        self.verb = ""
        self.kind = None
        self.version = ""
        self.ns = None
        self.name = ""
        self.sub = ""
        self.resource = ""
        self.content_type = ""
        self.body_bytes = b""
        self.body_json = None
        self.body_error = None
        self.protobuf_error = None
        self.user_agent = ""
        self.watch = False
        self.user = None            # who the credentials are (Api.identify)

    def q(self, key, default=None):
        v = self.query.get(key)
        return v[0] if v else default


class Api:
    def __init__(self, tokens, bookmark_interval, mpijob_crd=MPIJOB_CRD_FILE):
        self.store = Store()
        for k in builtin_kinds():
            self.store.add_kind(k)
        if mpijob_crd:
            self.install_mpijob_crd(load_crd_file(mpijob_crd))
        self.startup_tokens = set(tokens)
        self.tokens = set(tokens)
        self.rbac_tokens = {}           # token -> user name, authorized by RBAC (--rbac-token)
        self.rbac_user = None           # that user, whose granted requests MPIJOB_TEST_RBAC_USAGE records
        self.rbac_objects = []          # the objects of the --rbac files, stored at start and after a reset
        self.rbac_namespaces = []       # the namespaces those files name (launch.py creates them on a real server)
        self.rbac_said = set()          # refusals already written to stderr
        self._authz = (None, None)      # (RBAC objects' versions, rbac.Authorizer over them)
        # --control-plane: kube-controller-manager's serviceaccount and root-ca-cert-publisher
        # controllers and the ServiceAccount admission plugin, which launch.py turns off on a real
        # kube-apiserver running without the controller-manager
        self.service_accounts = False
        self.issuer = None              # serviceaccounts.Issuer, once the port is known
        self.ca_pem = ""                # what kube-root-ca.crt publishes
        self.controllers = False        # the control plane's controllers run (start_controllers)
        self.bookmark_interval = bookmark_interval
        self.meta_lock = threading.Lock()
        self.log = []
        self.log_seq = 0
        self.faults = []                # failNext rules
        self.block_watches = False
        self.lease_delay = None         # delayLeases: {"seconds": S, "holder": identity or None}
        self.port = 0
        self.server = None              # the ServerHost, for restart
        self.system_namespaces = ["default", "kube-node-lease", "kube-public", "kube-system"]
        self.store.on_commit = self.on_commit
        with self.store.lock:
            ns_kind = self.store.by_gvr[("", "v1", "namespaces")]
            for n in self.system_namespaces:
                self._create_object(ns_kind, "v1", None, {"apiVersion": "v1", "kind": "Namespace",
                                                          "metadata": {"name": n}}, {})

    def install_mpijob_crd(self, crd):
        """MPIJobs are admitted through the project's own CRD object (None: without a schema), like
        on a real server with that CRD installed."""
        if crd is not None:
            kind = self.store.by_gvr[("kubeflow.org", "v2beta1", "mpijobs")]
            kind.crd_object = crd
            install_crd_schemas(kind, crd)
            kind.printer_columns = printer_columns_of(crd)
            names = _dict(_dict(crd.get("spec")).get("names"))
            kind.short = [str(n) for n in _list(names.get("shortNames"))] or kind.short
            kind.categories = [str(n) for n in _list(names.get("categories"))] or kind.categories

    # ------------------------------------------------------------------ object pipeline pieces
    def _check_body_kind(self, kind, version, body, for_apply=False, raw=None):
        """raw: the request's bytes, which the real server quotes in some refusals."""
        if raw is None:
            raw = json.dumps(body, separators=(",", ":")).encode()

        def unrecognized(why):
            # handlers.transformDecodeError, with summarizeData(body, 30)
            if not raw:
                summary = "<empty>"
            elif raw[:1] == b"{":
                summary = raw[:30].decode("utf-8", "replace") + (" ..." if len(raw) > 30 else "")
            else:
                summary = raw[:30].hex() + (" ..." if len(raw) > 30 else "")
            return err_bad_request("the object provided is unrecognized (must be of type %s): %s (%s)" % (
                kind.kind, why, summary))

        if not isinstance(body, dict):
            if isinstance(body, (str, list, int, float)):
                go = "string" if isinstance(body, str) else "array" if isinstance(body, list) else \
                    "bool" if isinstance(body, bool) else "number"
                raise unrecognized('couldn\'t get version/kind; json parse error: json: cannot unmarshal %s into '
                                   'Go value of type struct { APIVersion string "json:\\"apiVersion,omitempty\\""; '
                                   'Kind string "json:\\"kind,omitempty\\"" }' % go)
            raise err_bad_request("the body of the request must be a JSON object")
        api_version = body.get("apiVersion")
        k = body.get("kind")

        def undecodable(field, value, go_type):
            return err_bad_request('%s in version "%s" cannot be handled as a %s: json: cannot unmarshal %s into '
                                   'Go struct field %s of type %s' % (kind.kind, version, kind.kind,
                                                                      json_type(value).replace("integer", "number"),
                                                                      field, go_type))

        for field, value in (("apiVersion", api_version), ("kind", k)):
            if value is not None and not isinstance(value, str):
                raise undecodable(field, value, "string")
        if kind.crd and not for_apply and not k:
            raise unrecognized("Object 'Kind' is missing in '%s'" % raw[:1024].decode("utf-8", "replace"))
        if kind.crd and not for_apply and k != kind.kind and isinstance(body.get("metadata"), dict):
            # a custom resource's decoder takes any kind; validation then names it
            name = body["metadata"].get("name") or ""
            raise api_error(422, "Invalid", '%s.%s "%s" is invalid: kind: Invalid value: %s: must be %s' % (
                k, kind.group, name, go_quote(k), kind.kind),
                {"name": name, "group": kind.group, "kind": k,
                 "causes": [{"reason": "FieldValueInvalid", "message": "Invalid value: %s: must be %s" % (
                     go_quote(k), kind.kind), "field": "kind"}]})
        if kind.crd or for_apply:
            if not k:
                raise err_bad_request("Object 'Kind' is missing in '%s'" % json.dumps(
                    body, separators=(",", ":"))[:1024])
            if not api_version:
                raise err_bad_request("Object 'apiVersion' is missing in '%s'" % json.dumps(
                    body, separators=(",", ":"))[:1024])
        if k and k != kind.kind:
            raise err_bad_request('%s in version "%s" cannot be handled as a %s: the object provided is '
                                  'unrecognized (must be of type %s)' % (k, version, kind.kind, kind.kind))
        if api_version:
            g, _, v = api_version.rpartition("/")
            if g != kind.group or v not in kind.versions:
                raise err_bad_request('the API version in the data (%s) does not match the expected API '
                                      'version (%s)' % (api_version, kind.gv(version)))
        meta = body.get("metadata")
        if meta is None:
            body["metadata"] = meta = {}
        elif not isinstance(meta, dict):
            raise undecodable("%s.metadata" % kind.kind, meta, "v1.ObjectMeta")
        for field in ("name", "generateName", "namespace", "resourceVersion", "uid", "creationTimestamp",
                      "deletionTimestamp"):
            if meta.get(field) is not None and not isinstance(meta[field], str):
                raise undecodable("ObjectMeta.metadata." + field, meta[field], "string")
        for field in ("labels", "annotations"):
            value = meta.get(field)
            if value is None:
                continue
            if not isinstance(value, dict):
                raise undecodable("ObjectMeta.metadata." + field, value, "map[string]string")
            for v in value.values():
                if not isinstance(v, str):
                    raise undecodable("ObjectMeta.metadata." + field, v, "string")
        fin = meta.get("finalizers")
        if fin is not None and (not isinstance(fin, list) or not all(isinstance(f, str) for f in fin)):
            raise undecodable("ObjectMeta.metadata.finalizers", fin, "[]string")
        refs = meta.get("ownerReferences")
        if refs is not None:
            if not isinstance(refs, list) or not all(isinstance(r, dict) for r in refs):
                raise undecodable("ObjectMeta.metadata.ownerReferences", refs, "[]v1.OwnerReference")
            for r in refs:
                for field in ("apiVersion", "kind", "name", "uid"):
                    if r.get(field) is not None and not isinstance(r[field], str):
                        raise undecodable("OwnerReference.metadata.ownerReferences." + field, r[field], "string")
        gen = meta.get("generation")
        if gen is not None and (isinstance(gen, bool) or not isinstance(gen, int)):
            raise undecodable("ObjectMeta.metadata.generation", gen, "int64")
        if kind.skey in (("", "secrets"), ("", "configmaps")):
            field = "data" if kind.skey == ("", "secrets") else "binaryData"
            for v in (body.get(field) or {}).values() if isinstance(body.get(field), dict) else ():
                if isinstance(v, str):
                    try:
                        base64.b64decode(v, validate=True)
                    except ValueError:
                        alphabet = string.ascii_letters + string.digits + "+/="
                        at = next((i for i, ch in enumerate(v) if ch not in alphabet), len(v) // 4 * 4)
                        raise err_bad_request('%s in version "%s" cannot be handled as a %s: illegal base64 '
                                              'data at input byte %d' % (kind.kind, version, kind.kind, at))
        if not kind.crd:
            problem = shape_problem({k: v for k, v in body.items() if k != "metadata"},
                                    SHAPES.get(kind.skey, {"spec": "object", "status": "object"}), kind.kind)
            if problem:
                raise undecodable(*problem)

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
        self._check_body_kind(kind, version, obj, raw=getattr(req, "body_bytes", None) if req else None)
        self._field_validation(kind, version, obj, req, warnings)
        obj["apiVersion"] = kind.gv(kind.versions[0])
        obj["kind"] = kind.kind
        meta = obj["metadata"]
        if meta.get("resourceVersion"):
            raise err_internal("resourceVersion should not be set on objects to be created")
        if kind.namespaced:
            bns = meta.get("namespace")
            if bns and bns != ns:
                raise err_bad_request("the namespace of the provided object does not match the namespace sent "
                                      "on the request")
            meta["namespace"] = ns
            # NamespaceLifecycle admission: content only goes into a namespace that exists
            ns_kind = self.store.by_gvr[("", "v1", "namespaces")]
            if self.store.get(ns_kind, None, ns) is None:
                raise api_error(404, "NotFound", 'namespaces "%s" not found' % ns,
                                {"name": ns, "kind": "namespaces"})
        else:
            meta.pop("namespace", None)
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
        self._check_body_kind(kind, version, new,
                              raw=getattr(req, "body_bytes", None) if req is not None and not from_patch else None)
        self._field_validation(kind, version, new, req, warnings)
        new["apiVersion"] = kind.gv(kind.versions[0])
        new["kind"] = kind.kind
        meta = new["metadata"]
        if kind.namespaced:
            bns = meta.get("namespace")
            if bns and bns != ns:
                raise err_bad_request("the namespace of the provided object does not match the namespace sent "
                                      "on the request")
            meta["namespace"] = ns
        else:
            meta.pop("namespace", None)
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

    # ------------------------------------------------------------------ the control plane
    # What kube-apiserver's own controllers keep in place: the `kubernetes` Service and the
    # serving of each CustomResourceDefinition (establishing controller); with --control-plane
    # also what kube-controller-manager does for pods' in-cluster configuration: each namespace's
    # `default` ServiceAccount (serviceaccount controller) and kube-root-ca.crt ConfigMap
    # (root-ca-cert-publisher). The real ones act a moment after the write they follow; here they
    # act within it, so a namespace comes with its ServiceAccount.

    RBAC_SKEYS = tuple((RBAC_GROUP, p) for p in ("clusterroles", "clusterrolebindings", "roles", "rolebindings"))

    def _kind(self, group, plural):
        return self.store.by_skey.get((group, plural))

    def start_controllers(self, ca_pem, port):
        """Starts the controllers once the port and the CA are known; objects that exist already
        (the system namespaces, those the --rbac files name) get what they would have got."""
        self.ca_pem = ca_pem
        self.port = port
        self.issuer = serviceaccounts.Issuer("https://127.0.0.1:%d" % port)
        with self.store.lock:
            self.controllers = True
            self._seed()

    def _seed(self):
        self._ensure_kubernetes_service()
        ns_kind = self._kind("", "namespaces")
        for n in self.rbac_namespaces:
            if self.store.get(ns_kind, None, n) is None:
                self._create_object(ns_kind, "v1", None, {"apiVersion": "v1", "kind": "Namespace",
                                                          "metadata": {"name": n}}, {})
        if self.service_accounts:
            for (_, n) in sorted(self.store.objects[("", "namespaces")]):
                self._ensure_namespace_content(n)
        self._store_rbac_objects()
        for kind in list(self.store.kinds):
            if kind.crd:
                self._ensure_crd_object(kind)

    def _namespace_exists(self, ns):
        return ns is not None and self.store.get(self._kind("", "namespaces"), None, ns) is not None

    def _ensure_kubernetes_service(self):
        """The `kubernetes` Service as kube-apiserver reconciles it. Its Endpoints and
        EndpointSlice are not written: a real kube-apiserver advertising 127.0.0.1 cannot write
        them either (an Endpoints address may not be in the loopback range), so clients reach the
        API server through this Service's targetPort on 127.0.0.1 (launch.py's info.json)."""
        svc = self._kind("", "services")
        if self.store.get(svc, "default", "kubernetes") is None:
            self._create_object(svc, "v1", "default", {
                "apiVersion": "v1", "kind": "Service",
                "metadata": {"name": "kubernetes", "labels": {"component": "apiserver", "provider": "kubernetes"}},
                "spec": {"ports": [{"name": "https", "protocol": "TCP", "port": KUBERNETES_SERVICE_PORT,
                                    "targetPort": self.port}],
                         "clusterIP": KUBERNETES_SERVICE_IP, "type": "ClusterIP", "sessionAffinity": "None"}}, {})

    def _ensure_namespace_content(self, ns):
        sa = self._kind("", "serviceaccounts")
        if self.store.get(sa, ns, serviceaccounts.DEFAULT_NAME) is None:
            self._create_object(sa, "v1", ns, {"apiVersion": "v1", "kind": "ServiceAccount",
                                               "metadata": {"name": serviceaccounts.DEFAULT_NAME}}, {})
        self._publish_root_ca(ns)

    def _publish_root_ca(self, ns):
        """kube-controller-manager's root-ca-cert-publisher: kube-root-ca.crt holds the CA the
        server's certificate chains to, and is put back when changed or deleted."""
        cm = self._kind("", "configmaps")
        name = serviceaccounts.ROOT_CA_CONFIGMAP
        data = {"ca.crt": self.ca_pem}
        cur = self.store.get(cm, ns, name)
        if cur is None:
            self._create_object(cm, "v1", ns, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
                "name": name, "annotations": {"kubernetes.io/description": serviceaccounts.ROOT_CA_DESCRIPTION}},
                "data": data}, {})
            return
        ann = (cur["metadata"].get("annotations") or {})
        if cur.get("data") == data and ann.get("kubernetes.io/description"):
            return
        new = copy.deepcopy(cur)
        new["data"] = data
        new["metadata"]["annotations"] = dict(ann, **{"kubernetes.io/description":
                                                      serviceaccounts.ROOT_CA_DESCRIPTION})
        self._update_object(cm, "v1", ns, name, cur, new, "", None, [], rv_required=False, from_patch=True)

    def _store_rbac_objects(self):
        """The ServiceAccount and RBAC objects of the --rbac files, created as launch.py creates
        them on a real server (those missing only)."""
        for doc in self.rbac_objects:
            kind = self.store.kind_by_group_kind(str(doc.get("apiVersion", "")).rpartition("/")[0], doc.get("kind"))
            meta = doc.get("metadata") or {}
            ns = (meta.get("namespace") or "default") if kind.namespaced else None
            if self.store.get(kind, ns, meta.get("name")) is not None:
                continue
            try:
                self._create_object(kind, kind.versions[0], ns, doc, {})
            except ApiError as e:
                raise RuntimeError("--rbac: cannot store %s %s: %s" % (doc.get("kind"), meta.get("name"),
                                                                      e.body.get("message")))

    def _ensure_crd_object(self, kind):
        """A CustomResourceDefinition for a custom resource the double serves of its own (the
        project's MPIJob CRD, the PodGroup CRDs, --extra-crd), as they would be installed."""
        crds = self._kind(CRD_GROUP, "customresourcedefinitions")
        if crds is None or self.store.get(crds, None, "%s.%s" % (kind.plural, kind.group)) is not None:
            return
        if kind.crd_object is not None:
            body = copy.deepcopy(kind.crd_object)
            body.pop("status", None)
            strip_server_meta(body.setdefault("metadata", {}))
        else:
            preserve = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
            versions = []
            for i, v in enumerate(kind.versions):
                ver = {"name": v, "served": True, "storage": i == 0,
                       "schema": {"openAPIV3Schema": copy.deepcopy(kind.schema_for(v) or preserve)}}
                if kind.status:
                    ver["subresources"] = {"status": {}}
                versions.append(ver)
            names = {"plural": kind.plural, "singular": kind.singular, "kind": kind.kind,
                     "listKind": kind.kind + "List"}
            if kind.short:
                names["shortNames"] = list(kind.short)
            if kind.categories:
                names["categories"] = list(kind.categories)
            body = {"apiVersion": CRD_GROUP + "/v1", "kind": "CustomResourceDefinition",
                    "metadata": {"name": "%s.%s" % (kind.plural, kind.group)},
                    "spec": {"group": kind.group, "names": names,
                             "scope": "Namespaced" if kind.namespaced else "Cluster", "versions": versions}}
        try:
            self._create_object(crds, "v1", None, body, {})
        except ApiError as e:
            say_once("no CustomResourceDefinition for %s: %s" % (kind.qualified, e.body.get("message")))

    def on_commit(self, kind, etype, ns, name, obj, prev):
        """The controllers, after every write (the store lock held)."""
        if not self.controllers:
            return
        skey = kind.skey
        if skey == ("", "namespaces"):
            if etype == ADDED and self.service_accounts:
                self._ensure_namespace_content(name)
        elif skey == ("", "serviceaccounts"):
            if etype == DELETED and name == serviceaccounts.DEFAULT_NAME and self.service_accounts and \
                    self._namespace_exists(ns):
                self._ensure_namespace_content(ns)
        elif skey == ("", "configmaps"):
            if name == serviceaccounts.ROOT_CA_CONFIGMAP and etype != ADDED and self.service_accounts and \
                    self._namespace_exists(ns):
                self._publish_root_ca(ns)
        elif skey == ("", "services"):
            if etype == DELETED and ns == "default" and name == "kubernetes":
                self._ensure_kubernetes_service()
        elif skey == (CRD_GROUP, "customresourcedefinitions"):
            self._crd_changed(kind, etype, obj, prev)

    def _crd_changed(self, crds, etype, obj, prev):
        """apiextensions-apiserver: a new CRD is established and its resource served; a changed
        one is served anew; a deleted one takes its objects with it (DELETED events), then is
        served no more."""
        spec = obj.get("spec") or {}
        skey = (spec.get("group"), (spec.get("names") or {}).get("plural"))
        served = self.store.by_skey.get(skey)
        if etype == DELETED:
            if served is not None and served.crd:
                for (ons, oname), o in sorted(self.store.objects.get(skey, {}).items()):
                    self.store.commit(served, DELETED, ons, oname, copy.deepcopy(o), o)
                self.store.remove_kind(served)
            return
        if etype == ADDED:
            new = copy.deepcopy(obj)
            names = new["spec"].get("names") or {}
            now = now_rfc3339()
            new["status"] = {
                "conditions": [
                    {"type": "NamesAccepted", "status": "True", "lastTransitionTime": now, "reason": "NoConflicts",
                     "message": "no conflicts found"},
                    {"type": "Established", "status": "True", "lastTransitionTime": now,
                     "reason": "InitialNamesAccepted", "message": "the initial names have been accepted"}],
                "acceptedNames": {k: names[k] for k in ("plural", "singular", "shortNames", "kind", "listKind",
                                                        "categories") if k in names},
                "storedVersions": (obj.get("status") or {}).get("storedVersions") or []}
            self.store.commit(crds, MODIFIED, None, obj["metadata"]["name"], new, obj)
            if served is not None:
                return          # one of the double's own kinds: served already
        elif prev is not None and prev.get("spec") == obj.get("spec"):
            return
        try:
            self.store.add_kind(kind_from_crd(obj))
        except (KeyError, TypeError, AttributeError, ValueError) as e:
            say_once("cannot serve the CustomResourceDefinition %s: %s" % (obj["metadata"].get("name"), e))

    # ------------------------------------------------------------------ authentication, authorization
    ADMIN = {"username": "admin", "uid": "admin-uid", "groups": ["system:masters", "system:authenticated"]}

    def identify(self, token):
        """(user, restricted) for a bearer token: the user as a SelfSubjectReview shows it, and
        whether RBAC decides its requests; (None, False) for a token the server refuses. The
        startup tokens are the administrator (system:masters) of launch.py's real server."""
        if token is None:
            return None, False
        with self.meta_lock:
            name = self.rbac_tokens.get(token)
            admin = token in self.tokens
        if name is not None:
            user = {"username": name, "uid": "operator-uid",
                    "groups": sorted(rbac.Authorizer.groups_of(name) - {"system:authenticated"}) +
                    ["system:authenticated"]}
            return user, True
        if admin:
            return copy.deepcopy(self.ADMIN), False
        user = self.authenticate_service_account(token)
        return (user, True) if user is not None else (None, False)

    def authenticate_service_account(self, token):
        """The user of a token this server issued (TokenRequest), while it is unexpired, its
        ServiceAccount exists with the same uid and so does the Pod or Secret it is bound to.
        (A real server caches an accepted token for up to 10 s; this one checks every request.)"""
        if self.issuer is None or token.count(".") != 2:
            return None
        claims = self.issuer.claims(token)
        if claims is None:
            return None
        priv = claims["kubernetes.io"]
        sa_ref = priv.get("serviceaccount")
        ns = priv.get("namespace")
        if not isinstance(sa_ref, dict) or not isinstance(ns, str):
            return None
        with self.store.lock:
            sa = self.store.get(self._kind("", "serviceaccounts"), ns, sa_ref.get("name"))
            if sa is None or sa["metadata"]["uid"] != sa_ref.get("uid") or sa["metadata"].get("deletionTimestamp"):
                return None
            for what, plural, namespaced in (("pod", "pods", True), ("secret", "secrets", True),
                                             ("node", "nodes", False)):
                ref = priv.get(what)
                if ref is None or (what == "node" and "pod" in priv):
                    continue          # a pod-bound token's node claims are information only
                kind = self._kind("", plural)
                bound = self.store.get(kind, ns if namespaced else None, ref.get("name")) if kind else None
                if bound is None or bound["metadata"]["uid"] != ref.get("uid"):
                    return None
        return serviceaccounts.user_of(claims)

    def rbac_authorizer(self):
        """rbac.Authorizer over the RBAC objects stored now (rebuilt when one of them changes)."""
        with self.store.lock:
            key = tuple(self.store.written.get(k, 0) for k in self.RBAC_SKEYS)
            if self._authz[0] != key:
                docs = []
                for k in self.RBAC_SKEYS:
                    docs.extend(obj for _, obj in sorted(self.store.objects.get(k, {}).items()))
                self._authz = (key, rbac.Authorizer(docs=docs))
            return self._authz[1]

    # ------------------------------------------------------------------ TokenRequest, SelfSubjectReview
    def do_token(self, req):
        """POST serviceaccounts/NAME/token (TokenREST.Create of kube-apiserver 1.32)."""
        self._require_json(req)
        body = self._body(req)
        if not isinstance(body, dict):
            raise err_bad_request("the body of the request must be a JSON object")
        k, av = body.get("kind"), body.get("apiVersion")
        if k and k != "TokenRequest":
            v = str(av or "").rpartition("/")[2]
            raise err_bad_request('%s in version "%s" cannot be handled as a TokenRequest: converting (%s.%s) to '
                                  '(authentication.TokenRequest): unknown conversion' % (k, v, v, k))
        meta = body.get("metadata") if isinstance(body.get("metadata"), dict) else {}
        name, ns = req.name, req.ns

        def invalid(obj_name, errors):
            details = {"group": "authentication.k8s.io", "kind": "TokenRequest",
                       "causes": [e.cause() for e in errors]}
            if obj_name:
                details = dict({"name": obj_name}, **details)
            agg = str(errors[0]) if len(errors) == 1 else "[" + ", ".join(str(e) for e in errors) + "]"
            return api_error(422, "Invalid", 'TokenRequest.authentication.k8s.io "%s" is invalid: %s' % (
                obj_name, agg), details)

        if meta.get("name") and meta["name"] != name:
            raise invalid(name, [fe_invalid("metadata.name", meta["name"],
                                            "must match the service account name if specified")])
        if meta.get("namespace") and meta["namespace"] != ns:
            raise invalid(name, [fe_invalid("metadata.namespace", meta["namespace"],
                                            "must match the service account namespace if specified")])
        spec = body.get("spec") if isinstance(body.get("spec"), dict) else {}
        audiences = spec.get("audiences") or list(self.issuer.audiences)
        seconds = spec.get("expirationSeconds")
        if seconds is None:
            seconds = serviceaccounts.DEFAULT_EXPIRATION
        if not isinstance(seconds, int) or isinstance(seconds, bool):
            raise err_bad_request('TokenRequest in version "v1" cannot be handled as a TokenRequest: json: cannot '
                                  'unmarshal %s into Go struct field TokenRequestSpec.spec.expirationSeconds of '
                                  'type int64' % json_type(seconds).replace("integer", "number"))
        ref = spec.get("boundObjectRef") if isinstance(spec.get("boundObjectRef"), dict) else None
        with self.store.lock:
            if not self._namespace_exists(ns):
                raise api_error(404, "NotFound", 'namespaces "%s" not found' % ns,
                                {"name": ns, "kind": "namespaces"})
            sa_kind = req.kind
            sa = self.store.get(sa_kind, ns, name)
            if sa is None:
                raise sa_kind.not_found(name)
            errors = []
            if seconds < serviceaccounts.MIN_EXPIRATION:
                errors.append(fe_invalid("spec.expirationSeconds", seconds,
                                         "may not specify a duration less than 10 minutes"))
            if seconds > serviceaccounts.MAX_EXPIRATION:
                errors.append(fe_invalid("spec.expirationSeconds", seconds,
                                         "may not specify a duration larger than 2^32 seconds"))
            if errors:
                raise invalid(meta.get("name") or "", errors)
            bound = node = None
            if ref is not None:
                group, _, version = str(ref.get("apiVersion") or "").rpartition("/")
                rkind, rname = ref.get("kind") or "", ref.get("name") or ""
                plural = {"Pod": "pods", "Secret": "secrets", "Node": "nodes"}.get(rkind) if not group else None
                if plural is None:
                    raise err_bad_request("cannot bind token to object of type %s/%s, Kind=%s" % (
                        group, version, rkind))
                okind = self._kind("", plural)
                target = self.store.get(okind, ns if okind.namespaced else None, rname) if okind else None
                if target is None:
                    raise api_error(404, "NotFound", '%s "%s" not found' % (plural, rname),
                                    {"name": rname, "kind": plural})
                if rkind == "Pod":
                    if ((target.get("spec") or {}).get("serviceAccountName") or "") != name:
                        raise err_bad_request('cannot bind token for serviceaccount "%s" to pod running with '
                                              'different serviceaccount name.' % name)
                    node_name = (target.get("spec") or {}).get("nodeName")
                    nodes = self._kind("", "nodes")
                    n = self.store.get(nodes, None, node_name) if node_name and nodes else None
                    if n is not None:
                        node = (node_name, n["metadata"]["uid"])
                uid = target["metadata"]["uid"]
                if ref.get("uid") and ref["uid"] != uid:
                    raise api_error(409, "Conflict", 'Operation cannot be fulfilled on %s "%s": the UID in the '
                                    'bound object reference (%s) does not match the UID in record. The object might '
                                    'have been deleted and then recreated' % (rkind, rname, ref["uid"]),
                                    {"name": rname, "kind": rkind})
                bound = (rkind.lower(), rname, uid)
            now = time.time()
            token, _ = self.issuer.token(ns, sa, audiences, seconds, bound, node, now)
        out_meta = {k: v for k, v in meta.items() if k not in ("uid", "resourceVersion", "generation",
                                                               "managedFields", "selfLink")}
        out_meta.update(name=name, namespace=ns, creationTimestamp=time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                                   time.gmtime(now)))
        out_ref = None
        if ref is not None:
            out_ref = {k: ref[k] for k in ("kind", "apiVersion", "name", "uid") if ref.get(k)}
        out = {"kind": "TokenRequest", "apiVersion": "authentication.k8s.io/v1",
               "metadata": ordered(out_meta, META_ORDER),
               "spec": {"audiences": list(audiences), "expirationSeconds": seconds, "boundObjectRef": out_ref},
               "status": {"token": token, "expirationTimestamp": time.strftime(
                   "%Y-%m-%dT%H:%M:%SZ", time.gmtime(int(now) + seconds))}}
        return 201, out, {}

    def self_subject_review(self, req):
        """POST authentication.k8s.io/v1 selfsubjectreviews: who the request's credentials are."""
        self._require_json(req)
        body = self._body(req)
        if not isinstance(body, dict):
            raise err_bad_request("the body of the request must be a JSON object")
        user = dict(req.user or {})
        info = {k: user[k] for k in ("username", "uid", "groups", "extra") if user.get(k)}
        return 201, {"kind": "SelfSubjectReview", "apiVersion": "authentication.k8s.io/v1",
                     "metadata": {"creationTimestamp": now_rfc3339()}, "status": {"userInfo": info}}, {}

    # ------------------------------------------------------------------ request handling
    def handle(self, req):
        """Returns (code, body_dict, headers) or raises ApiError. Watches are handled by the caller."""
        kind = req.kind
        m = req.method
        if kind.create_only:
            if m == "POST" and not req.name:
                return getattr(self, kind.create_only)(req)
            raise err_method_not_allowed()
        if req.sub == "token":
            if m == "POST":
                return self.do_token(req)
            raise err_method_not_allowed()
        if req.name == "":
            if m == "GET":
                return self.do_list(req)
            if m == "POST":
                if req.ns is None and kind.namespaced:
                    raise err_method_not_allowed()
                return self.do_create(req)
            if m == "DELETE":
                if req.ns is None and kind.namespaced:
                    raise err_method_not_allowed()
                return self.do_delete_collection(req)
            raise err_method_not_allowed()
        if req.sub == "binding":
            if m == "POST":
                return self.do_bind(req)
            raise err_method_not_allowed()
        if req.sub:
            if m == "GET":
                return self.do_get(req)
            if m == "PUT":
                return self.do_update(req)
            if m == "PATCH":
                return self.do_patch(req)
            raise err_method_not_allowed()
        if m == "GET":
            return self.do_get(req)
        if m == "PUT":
            return self.do_update(req)
        if m == "PATCH":
            return self.do_patch(req)
        if m == "DELETE":
            return self.do_delete(req)
        raise err_method_not_allowed()

    def _body(self, req, required=True):
        if req.body_error:
            raise err_bad_request(req.body_error)
        if req.body_json is None and required:
            raise err_bad_request("the body of the request was empty")
        return req.body_json

    def _require_json(self, req):
        ct = req.content_type
        if ct == "application/vnd.kubernetes.protobuf" and req.protobuf_error:
            raise api_error(415, "UnsupportedMediaType", req.protobuf_error)
        if ct not in ("application/json", "application/yaml"):
            raise api_error(415, "UnsupportedMediaType", "the body of the request was in an unknown format - "
                            "accepted media types include: application/json, application/yaml, "
                            "application/vnd.kubernetes.protobuf")

    def _dry_run(self, req):
        dr = req.query.get("dryRun") or []
        for v in dr:
            if v != "All":
                raise err_bad_request("dryRun: Unsupported value: %s: supported values: \"All\"" % go_quote(v))
        return bool(dr)

    def _warn_headers(self, warnings):
        return {"Warning": ['299 - "%s"' % w.replace('"', '\\"') for w in warnings]} if warnings else {}

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
        self._check_body_kind(kind, req.version, copy.deepcopy(cfg), for_apply=True)
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
            meta["continue"] = encode_continue(list_rv, ("/" if first_page else "") + last + "\u0000")
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

    # ------------------------------------------------------------------ control API
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
        known = {"dropWatches", "blockWatches", "compact", "failNext", "restart", "delayLeases"}
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

    def get_log(self, since):
        with self.meta_lock:
            entries = [e for e in self.log if e["seq"] >= since]
            nxt = self.log_seq + 1
        return {"entries": entries, "next": nxt}

    # ------------------------------------------------------------------ discovery
    def discovery(self, segs):
        """segs: the path split; returns a body or None when the path is not a discovery path."""
        if segs == ["version"]:
            return {"major": "1", "minor": "32", "gitVersion": "v1.32.13", "gitCommit": "0" * 40,
                    "gitTreeState": "clean", "buildDate": "2025-01-01T00:00:00Z",
                    "goVersion": "go1.23.5", "compiler": "gc", "platform": "linux/amd64"}
        if segs == ["api"]:
            return {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [
                {"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1:%d" % self.port}]}
        if segs == ["api", "v1"]:
            return self._resource_list("", "v1", legacy=True)
        if segs == ["apis"]:
            groups = []
            for g, vs in self.store.groups().items():
                groups.append(self._group(g, vs))
            return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}
        if len(segs) == 2 and segs[0] == "apis":
            vs = self.store.groups().get(segs[1])
            if vs:
                body = self._group(segs[1], vs)
                return {"kind": "APIGroup", "apiVersion": "v1", **body}
            return None
        if len(segs) == 3 and segs[0] == "apis":
            vs = self.store.groups().get(segs[1])
            if vs and segs[2] in vs:
                return self._resource_list(segs[1], segs[2])
        if segs[:2] == ["openapi", "v3"]:
            return self.openapi_v3(segs[2:])
        if segs == ["openapi", "v2"]:
            return {"swagger": "2.0", "info": {"title": "Kubernetes", "version": "v1.32.13"}, "paths": {}}
        return None

    def openapi_v3(self, rest):
        """/openapi/v3 (the index of group-versions) and /openapi/v3/<gv path> (one document)."""
        with self.store.lock:
            kinds = list(self.store.kinds)
        gvs = [("", "v1")] + [(g, v) for g, vs in self.store.groups().items() for v in vs]
        if not rest:
            index = {}
            for g, v in gvs:
                doc = json.dumps(openapi_gv_document(kinds, g, v), sort_keys=True).encode()
                digest = hashlib.sha512(doc).hexdigest()[:128].upper()
                index[openapi_gv_path(g, v)] = {"serverRelativeURL": "/openapi/v3/%s?hash=%s" % (
                    openapi_gv_path(g, v), digest)}
            return {"paths": index}
        for g, v in gvs:
            if "/".join(rest) == openapi_gv_path(g, v):
                return openapi_gv_document(kinds, g, v)
        return None

    def aggregated_discovery(self, root, version):
        """The apidiscovery.k8s.io APIGroupDiscoveryList of /api (root "api") or /apis."""
        with self.store.lock:
            kinds = list(self.store.kinds)
        groups = [("", ["v1"])] if root == "api" else list(self.store.groups().items())
        items = []
        for g, vs in groups:
            versions = []
            for v in vs:
                resources = []
                for k in sorted([k for k in kinds if k.group == g and v in k.versions], key=lambda k: k.plural):
                    gvk = {"group": g, "version": v, "kind": k.kind}
                    r = {"resource": k.plural, "responseKind": gvk,
                         "scope": "Namespaced" if k.namespaced else "Cluster", "singularResource": k.singular,
                         "verbs": (["create"] if k.create_only else
                                   ["delete", "deletecollection", "get", "list", "patch", "create", "update",
                                    "watch"] if k.crd else
                                   ["create", "delete", "deletecollection", "get", "list", "patch", "update",
                                    "watch"])}
                    if k.short:
                        r["shortNames"] = list(k.short)
                    if k.categories:
                        r["categories"] = list(k.categories)
                    subs = []
                    if k.status:
                        subs.append({"subresource": "status", "responseKind": gvk,
                                     "verbs": ["get", "patch", "update"]})
                    for sub, (sg, sv, skind, sverbs) in sorted(k.subresources.items()):
                        subs.append({"subresource": sub, "responseKind": {"group": sg, "version": sv, "kind": skind},
                                     "verbs": list(sverbs)})
                    if subs:
                        r["subresources"] = subs
                    resources.append(r)
                versions.append({"version": v, "resources": resources, "freshness": "Current"})
            meta = {"name": g, "creationTimestamp": None} if g else {"creationTimestamp": None}
            items.append({"metadata": meta, "versions": versions})
        return {"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/" + version,
                "metadata": {}, "items": items}

    def _group(self, g, vs):
        return {"name": g, "versions": [{"groupVersion": "%s/%s" % (g, v), "version": v} for v in vs],
                "preferredVersion": {"groupVersion": "%s/%s" % (g, vs[0]), "version": vs[0]}}

    def _resource_list(self, group, version, legacy=False):
        resources = []
        kinds = [k for k in self.store.kinds if k.group == group and version in k.versions]
        kinds.sort(key=lambda k: k.plural)
        for k in kinds:
            if k.create_only:
                verbs = ["create"]
            elif k.crd:
                verbs = ["delete", "deletecollection", "get", "list", "patch", "create", "update", "watch"]
            else:
                verbs = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
            r = {"name": k.plural, "singularName": k.singular, "namespaced": k.namespaced, "kind": k.kind,
                 "verbs": verbs}
            if k.short:
                r["shortNames"] = list(k.short)
            if k.categories:
                r["categories"] = list(k.categories)
            r["storageVersionHash"] = k.storage_version_hash(version)
            resources.append(r)
            if k.status:
                resources.append({"name": k.plural + "/status", "singularName": "", "namespaced": k.namespaced,
                                  "kind": k.kind, "verbs": ["get", "patch", "update"]})
            for sub, (sg, sv, skind, sverbs) in sorted(k.subresources.items()):
                resources.append({"name": "%s/%s" % (k.plural, sub), "singularName": "", "namespaced": k.namespaced,
                                  "group": sg, "version": sv, "kind": skind, "verbs": list(sverbs)})
        if legacy:
            return {"kind": "APIResourceList", "groupVersion": "v1", "resources": resources}
        return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "%s/%s" % (group, version),
                "resources": resources}

    # ------------------------------------------------------------------ routing
    def route(self, req, segs):
        """Fills req.kind/version/ns/name/sub from API path segments; raises 404 for unknown paths."""
        if segs and segs[0] == "api":
            if len(segs) < 3 or segs[1] != "v1":
                raise err_not_found_generic()
            group, version, rest = "", "v1", segs[2:]
        elif segs and segs[0] == "apis":
            if len(segs) < 4:
                raise err_not_found_generic()
            group, version, rest = segs[1], segs[2], segs[3:]
        else:
            raise err_not_found_generic()
        if rest and rest[0] == "watch":
            req.watch = True
            rest = rest[1:]
        by = self.store.by_gvr

        def lookup(plural):
            return by.get((group, version, plural))

        ns = None
        if len(rest) >= 3 and rest[0] == "namespaces" and lookup(rest[2]) is not None and lookup(rest[2]).namespaced:
            ns, rest = rest[1], rest[2:]
        if not rest:
            raise err_not_found_generic()
        kind = lookup(rest[0])
        if kind is None:
            raise err_not_found_generic()
        if kind.namespaced and ns is None and len(rest) > 1:
            raise err_not_found_generic()
        if len(rest) > 3:
            raise err_not_found_generic()
        name = rest[1] if len(rest) > 1 else ""
        sub = rest[2] if len(rest) > 2 else ""
        binding = sub == "binding" and kind.skey == ("", "pods")
        if sub and not binding and sub not in kind.subresources and (sub != "status" or not kind.status):
            raise err_not_found_generic()
        if len(rest) > 1 and not name:
            raise err_not_found_generic()
        req.kind, req.version, req.ns, req.name, req.sub = kind, version, ns, name, sub
        req.resource = kind.plural


# --------------------------------------------------------------------------------------------
# HTTP layer
# --------------------------------------------------------------------------------------------

class Conn:
    """A client connection; kill() closes it abruptly from any thread."""

    def __init__(self, raw):
        self.raw = raw
        self.lock = threading.Lock()
        self.dead = False

    def kill(self):
        with self.lock:
            if self.dead:
                return
            self.dead = True
            try:
                self.raw.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class ClientGone(Exception):
    pass


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "kube-apiserver-double"
    sys_version = ""

    def __init__(self, request, client_address, server, conn=None):
        self.conn = conn
        super().__init__(request, client_address, server)

    # quiet: errors of our own are reported explicitly
    def log_message(self, fmt, *args):
        pass

    def send_response(self, code, message=None):
        self.send_response_only(code, message)
        self.send_header("Date", self.date_time_string())

    def log_error(self, fmt, *args):
        pass

    @property
    def api(self):
        return self.server.api

    # ---- plumbing ----
    def _pretty(self, req):
        p = req.q("pretty") if req else None
        if p is not None:
            return p.lower() in ("true", "1")
        ua = self.headers.get("User-Agent", "") if self.headers else ""
        return ua.startswith("curl") or ua.startswith("Wget")

    def _send_json(self, code, body, headers=None, req=None, content_type="application/json"):
        if self._pretty(req):
            data = (json.dumps(body, indent=2, ensure_ascii=False) + "\n").encode()
        else:
            data = (json.dumps(body, separators=(",", ":"), ensure_ascii=False) + "\n").encode()
        self.send_response(code)
        self.send_header("Cache-Control", "no-cache, private")
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            for item in (v if isinstance(v, list) else [v]):
                self.send_header(k, str(item))
        if self.close_connection:
            self.send_header("Connection", "close")
        self._end_with(data)

    def _end_with(self, data):
        """end_headers() plus the body in one write: one TLS record, no Nagle stall."""
        self._headers_buffer.append(b"\r\n")
        self._headers_buffer.append(data)
        self.flush_headers()

    def _send_text(self, code, text):
        data = text.encode()
        self.send_response(code)
        self.send_header("Cache-Control", "no-cache, private")
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self._end_with(data)

    def handle_expect_100(self):
        try:
            n = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            n = 0
        if n > MAX_BODY:
            self.close_connection = True
            e = api_error(413, "RequestEntityTooLarge", "Request entity too large: limit is %d" % MAX_BODY)
            self._send_json(e.code, e.body)
            return False
        return super().handle_expect_100()

    def _read_body(self):
        """Returns the body bytes, or raises ApiError 413/400. An oversized body is still read (and
        thrown away, up to DRAIN_MAX) so that the client gets the answer instead of a reset."""
        too_big = False
        te = (self.headers.get("Transfer-Encoding") or "").lower()
        if "chunked" in te:
            out = bytearray()
            total = 0
            while True:
                line = self.rfile.readline(1024)
                if not line:
                    raise ClientGone()
                try:
                    size = int(line.split(b";")[0].strip(), 16)
                except ValueError:
                    self.close_connection = True
                    raise err_bad_request("malformed chunked request body")
                if size == 0:
                    while True:
                        trailer = self.rfile.readline(1024)
                        if trailer in (b"\r\n", b"\n", b""):
                            break
                    break
                total += size
                if total > DRAIN_MAX:
                    self.close_connection = True
                    too_big = True
                    break
                chunk = self.rfile.read(size)
                if len(chunk) < size:
                    raise ClientGone()
                if total > MAX_BODY:
                    too_big = True
                else:
                    out += chunk
                self.rfile.readline(16)
            data = bytes(out)
        else:
            cl = self.headers.get("Content-Length")
            if not cl:
                return b""
            try:
                n = int(cl)
            except ValueError:
                self.close_connection = True
                raise err_bad_request("invalid Content-Length")
            if n > MAX_BODY:
                too_big = True
                if n > DRAIN_MAX:
                    self.close_connection = True
                else:
                    left = n
                    while left > 0:
                        got = self.rfile.read(min(left, 65536))
                        if not got:
                            raise ClientGone()
                        left -= len(got)
                data = b""
            else:
                data = self.rfile.read(n) if n > 0 else b""
                if len(data) < n:
                    raise ClientGone()
        if too_big:
            raise api_error(413, "RequestEntityTooLarge", "Request entity too large: limit is %d" % MAX_BODY)
        return data

    # ---- entry points ----
    def do_GET(self):
        self._dispatch()

    def do_POST(self):
        self._dispatch()

    def do_PUT(self):
        self._dispatch()

    def do_PATCH(self):
        self._dispatch()

    def do_DELETE(self):
        self._dispatch()

    def do_HEAD(self):
        self.close_connection = True
        self._dispatch()

    def do_OPTIONS(self):
        self._dispatch()

    def _dispatch(self):
        req = Request()
        try:
            self._dispatch_inner(req)
        except ClientGone:
            self.close_connection = True
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError, OSError):
            self.close_connection = True
        except Exception:  # noqa: BLE001 - never crash the server on one request
            traceback.print_exc(file=sys.stderr)
            self.close_connection = True
            try:
                e = err_internal("unexpected error in the API-server double")
                self._send_json(e.code, e.body)
            except Exception:  # noqa: BLE001
                pass

    def _dispatch_inner(self, req):
        api = self.api
        parsed = urllib.parse.urlsplit(self.path)
        req.method = self.command
        req.path = parsed.path
        req.raw_query = parsed.query
        req.query = urllib.parse.parse_qs(parsed.query, keep_blank_values=True)
        req.content_type = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
        req.user_agent = self.headers.get("User-Agent", "")
        segs = [urllib.parse.unquote(s) for s in parsed.path.split("/") if s != ""]

        body_exc = None
        try:
            req.body_bytes = self._read_body()
        except ApiError as e:
            body_exc = e
        if req.body_bytes and req.content_type == "application/vnd.kubernetes.protobuf":
            # kubectl create sends protobuf; what protobuf.py describes becomes the JSON it means
            try:
                req.body_json = protobuf.decode(req.body_bytes)
                req.content_type = "application/json"
            except protobuf.ProtobufError as e:
                req.protobuf_error = str(e)
        elif req.body_bytes:
            try:
                req.body_json = json.loads(req.body_bytes.decode("utf-8"))
                if json_depth(req.body_json) > MAX_DEPTH:
                    req.body_json = None
                    req.body_error = "couldn't get version/kind; json parse error: exceeded max depth"
            except RecursionError:
                req.body_error = "couldn't get version/kind; json parse error: exceeded max depth"
            except (UnicodeDecodeError, ValueError) as e:
                req.body_error = "couldn't get version/kind; json parse error: %s" % e

        auth = self.headers.get("Authorization", "")
        token = auth[7:].strip() if auth[:7].lower() == "bearer " else None

        # ---- control API ----
        if segs and segs[0] == "_double":
            with api.meta_lock:
                ok = token is not None and (token in api.tokens or token in api.startup_tokens)
            if body_exc:
                self._send_json(body_exc.code, body_exc.body)
                return
            if not ok:
                e = err_unauthorized()
                self._send_json(e.code, e.body)
                return
            try:
                if req.body_error:
                    raise err_bad_request(req.body_error)
                if req.path.rstrip("/") == "/_double/log" and req.method == "GET":
                    try:
                        since = int(req.q("since", "0") or 0)
                    except ValueError:
                        raise err_bad_request("since must be an integer")
                    self._send_json(200, api.get_log(since))
                    return
                out = api.control(req.method, req.path.rstrip("/"), req.body_json)
                self._send_json(200, out)
            except ApiError as e:
                self._send_json(e.code, e.body, e.headers)
            return

        # ---- everything else is logged ----
        entry = {"seq": 0, "method": req.method, "path": req.path, "query": req.raw_query, "verb": "",
                 "resource": "", "subresource": "", "namespace": "", "name": "",
                 "contentType": self.headers.get("Content-Type") or "", "code": 0,
                 "body": req.body_json if not req.body_error else None}
        try:
            self._serve(req, segs, token, body_exc, entry)
        except ApiError as e:
            entry["code"] = e.code
            api.add_log(entry)
            self._send_json(e.code, e.body, e.headers, req)

    def _authorize(self, req, user, entry):
        """RBAC for a restricted token (--rbac-token, ServiceAccount tokens), over the RBAC objects
        stored now: 403 Forbidden, as kube-apiserver answers, for anything the roles do not grant;
        and OwnerReferencesPermissionEnforcement for blockOwnerDeletion."""
        api = self.api
        authorizer = api.rbac_authorizer()
        info = rbac.request_info(req.method, req.path, req.query)
        entry.update(user=user)
        if not authorizer.allowed(user, info):
            details = {}
            if info.resource_request:
                if info.name:
                    details["name"] = info.name
                if info.group:
                    details["group"] = info.group
                details["kind"] = info.resource
            msg = authorizer.forbidden_message(user, info)
            if msg not in api.rbac_said:   # each refusal said once, so a failing test shows why
                api.rbac_said.add(msg)
                sys.stderr.write("apiserver: RBAC: %s\n" % msg)
            raise api_error(403, "Forbidden", msg, details)
        usage = os.environ.get("MPIJOB_TEST_RBAC_USAGE") if user == api.rbac_user else None
        if usage and info.resource_request:
            # One line per granted request: which rules a test suite really needs (rbac_coverage.py).
            line = "%s %s %s %s\n" % (info.verb, info.group or '""',
                                      info.resource + ("/" + info.subresource if info.subresource else ""),
                                      info.namespace or "-")
            fd = os.open(usage, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, line.encode())
            finally:
                os.close(fd)
        if info.verb not in ("create", "update") or not isinstance(req.body_json, dict):
            return
        refs = (req.body_json.get("metadata") or {}).get("ownerReferences") or []
        for ref in refs if isinstance(refs, list) else []:
            if not isinstance(ref, dict) or ref.get("blockOwnerDeletion") is not True:
                continue
            group = str(ref.get("apiVersion", "")).rpartition("/")[0]
            kind = api.store.kind_by_group_kind(group, ref.get("kind"))
            plural = kind.plural if kind is not None else str(ref.get("kind", "")).lower() + "s"
            granted = authorizer.owner_finalizer_allowed(user, info.namespace, group, plural, ref.get("name", ""))
            if granted and usage:
                fd = os.open(usage, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
                try:
                    os.write(fd, ("update %s %s/finalizers %s\n" % (group or '""', plural, info.namespace or "-")).encode())
                finally:
                    os.close(fd)
            if not granted:
                name = info.name or (req.body_json.get("metadata") or {}).get("name", "")
                msg = ('%s "%s" is forbidden: cannot set blockOwnerDeletion if an ownerReference refers to a '
                       'resource you can\'t set finalizers on: User "%s" cannot update resource "%s/finalizers" '
                       'in API group "%s" in the namespace "%s"' % (
                           info.resource + ("." + info.group if info.group else ""), name, user, plural, group,
                           info.namespace))
                if msg not in api.rbac_said:
                    api.rbac_said.add(msg)
                    sys.stderr.write("apiserver: RBAC: %s\n" % msg)
                details = {"name": name, "group": info.group, "kind": info.resource} if info.group else \
                    {"name": name, "kind": info.resource}
                raise api_error(403, "Forbidden", msg, details)

    def _serve(self, req, segs, token, body_exc, entry):
        api = self.api
        public = req.method == "GET" and segs in (["version"], ["healthz"], ["readyz"], ["livez"])
        user, restricted = api.identify(token)
        if token is not None and user is None:
            raise err_unauthorized()
        if user is None and not public:
            raise err_unauthorized()
        req.user = user
        if body_exc:
            raise body_exc
        if restricted:
            self._authorize(req, user["username"], entry)

        # classify for the log and for failNext
        is_api = bool(segs) and segs[0] in ("api", "apis")
        routed = None
        if is_api:
            try:
                api.route(req, segs)
                routed = True
            except ApiError as e:
                routed = e
        if routed is True:
            req.watch = req.watch or (req.method == "GET" and (req.q("watch") or "").lower() in ("1", "true"))
            m = req.method
            if m == "GET":
                verb = "watch" if req.watch else ("get" if req.name else "list")
            else:
                verb = {"POST": "create", "PUT": "update", "PATCH": "patch",
                        "DELETE": "delete" if req.name else "deletecollection"}.get(m, m.lower())
            entry.update(verb=verb, resource=req.resource, subresource=req.sub, namespace=req.ns or "",
                         name=req.name)
        else:
            entry["verb"] = "get" if req.method == "GET" else req.method.lower()

        delay = api.lease_write_delay(entry["verb"], entry["resource"], req.body_json)
        if delay:
            time.sleep(delay)   # a slow server: the write is then served as usual
        fault = api.take_fault(entry["verb"], entry["resource"])
        if fault:
            code = fault["code"]
            headers = {}
            if code == 429:
                details = {}
                if fault.get("retryAfter") is not None:
                    headers["Retry-After"] = str(int(fault["retryAfter"]))
                    details["retryAfterSeconds"] = int(fault["retryAfter"])
                e = api_error(429, "TooManyRequests", "Too many requests, please try again later.", details,
                              headers=headers)
            elif code == 503:
                if fault.get("retryAfter") is not None:
                    headers["Retry-After"] = str(int(fault["retryAfter"]))
                e = api_error(503, "ServiceUnavailable", "the server is currently unable to handle the request "
                                                         "(injected fault)", {}, headers=headers)
            elif code == 500:
                e = err_internal("injected fault")
            else:
                e = api_error(code, "Unknown", "the server responded with the status code %d (injected fault)" %
                              code, {})
            raise e

        if not is_api:
            if req.method != "GET":
                if segs and segs[0] in ("version", "healthz", "readyz", "livez"):
                    raise err_method_not_allowed()
                raise err_not_found_generic()
            if segs in (["healthz"], ["readyz"], ["livez"]):
                entry["code"] = 200
                api.add_log(entry)
                self._send_text(200, "ok")
                return
            if segs == ["openapi", "v2"] and any(t == OPENAPI_V2_PB for t, _ in parse_accept(
                    self.headers.get("Accept"))):
                entry["code"] = 200
                api.add_log(entry)
                data = openapi_v2_protobuf()
                self.send_response(200)
                self.send_header("Content-Type", "application/com.github.proto-openapi.spec.v2.v1.0+protobuf")
                self.send_header("Content-Length", str(len(data)))
                self._end_with(data)
                return
            body = api.discovery(segs)
            if body is None:
                raise err_not_found_generic()
            entry["code"] = 200
            api.add_log(entry)
            self._send_json(200, body, None, req)
            return
        if isinstance(routed, ApiError):
            disc = api.discovery(segs) if req.method == "GET" else None
            agg = negotiate(self.headers.get("Accept"), "apidiscovery.k8s.io", "APIGroupDiscoveryList",
                            DISCOVERY_GVS) if segs in (["api"], ["apis"]) else None
            if disc is not None and agg:
                entry["code"] = 200
                api.add_log(entry)
                self._send_json(200, api.aggregated_discovery(segs[0], agg), {"Vary": "Accept"}, req,
                                "application/json;g=apidiscovery.k8s.io;v=%s;as=APIGroupDiscoveryList" % agg)
                return
            if disc is not None:
                entry["code"] = 200
                api.add_log(entry)
                self._send_json(200, disc, None, req)
                return
            if req.method != "GET" and api.discovery(segs) is not None:
                raise err_method_not_allowed()
            raise routed

        if req.watch:
            if req.method != "GET":
                raise err_method_not_allowed()
            self._serve_watch(req, entry)
            return
        table = negotiate(self.headers.get("Accept"), "meta.k8s.io", "Table", TABLE_GVS) \
            if req.method == "GET" else None
        code, body, headers = api.handle(req)
        if table and code == 200 and isinstance(body, dict):
            body = to_table(req.kind, req.version, body, req.q("includeObject") or "Metadata", table)
            entry["code"] = code
            api.add_log(entry)
            self._send_json(code, body, headers, req, "application/json;as=Table;v=%s;g=meta.k8s.io" % table)
            return
        entry["code"] = code
        api.add_log(entry)
        self._send_json(code, body, headers, req)

    # ---- watch ----
    def _write_chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    def _serve_watch(self, req, entry):
        api = self.api
        if api.block_watches:
            raise api_error(503, "ServiceUnavailable", "the server is currently unable to handle the request "
                                                       "(watches are blocked)", {})
        timeout = None
        if req.q("timeoutSeconds"):
            try:
                timeout = float(req.q("timeoutSeconds"))
            except ValueError:
                raise err_bad_request("timeoutSeconds: Invalid value: %s: must be an integer" %
                                      go_quote(req.q("timeoutSeconds")))
            if timeout <= 0:
                timeout = None          # like the real server: 0 means its own (long) default
        table = negotiate(self.headers.get("Accept"), "meta.k8s.io", "Table", TABLE_GVS)
        include = req.q("includeObject") or "Metadata"
        if table:
            check_include_object(include)
        w, expired = api.open_watch(req)
        entry["code"] = 200
        api.add_log(entry)
        w.conn = self.conn
        w.table = (table, include) if table else None
        try:
            self.send_response(200)
            self.send_header("Cache-Control", "no-cache, private")
            self.send_header("Content-Type", "application/json" if not table else
                             "application/json;as=Table;v=%s;g=meta.k8s.io" % table)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            if expired:
                ev = {"type": ERROR, "object": status_body(410, "Expired", "The resourceVersion for the provided "
                                                                           "watch is too old.")}
                self._write_chunk((json.dumps(ev, separators=(",", ":")) + "\n").encode())
                self.wfile.write(b"0\r\n\r\n")
                return
            self._watch_loop(req, w, timeout)
        finally:
            api.close_watch(w)

    def _watch_loop(self, req, w, timeout):
        api = self.api
        kind = req.kind
        now = time.monotonic()
        deadline = now + timeout if timeout is not None else None
        interval = api.bookmark_interval if api.bookmark_interval > 0 else None
        next_bm = now + interval if (w.bookmarks and interval) else None
        pre_timeout_bm = None
        next_probe = now + 0.25
        if w.bookmarks and deadline is not None and timeout > 0:
            pre_timeout_bm = deadline - min(2.0, 0.2 * timeout)
        while True:
            with w.cond:
                while True:
                    if w.queue or w.drop or w.overflow:
                        break
                    now = time.monotonic()
                    wake = [t for t in (deadline, next_bm, pre_timeout_bm) if t is not None]
                    if wake and now >= min(wake):
                        break
                    if now >= next_probe:
                        next_probe = now + 0.25
                        if self._client_gone():
                            w.drop = True
                            break
                    w.cond.wait(max(0.0, min(min(wake) - now if wake else 1.0, next_probe - now)))
                # a small batch at a time, so a slow client's backlog stays in the bounded queue
                items = [w.queue.popleft() for _ in range(min(len(w.queue), 64))]
                drop, overflow, mid = w.drop, w.overflow, w.drop_mid_event
            if drop:
                self._abort()
                return
            for i, (etype, obj) in enumerate(items):
                shown = render(kind, obj, req.version)
                if getattr(w, "table", None):
                    # a one-row Table per event; the column definitions come with the first only
                    shown = to_table(kind, req.version, shown, w.table[1], w.table[0])
                    if getattr(w, "table_headers_sent", False):
                        shown["columnDefinitions"] = []
                    w.table_headers_sent = True
                line = (json.dumps({"type": etype, "object": shown},
                                   separators=(",", ":"), ensure_ascii=False) + "\n").encode()
                if mid or w.drop_mid_event:
                    self._write_chunk(line[:max(1, len(line) // 2)])
                    self.wfile.flush()
                    self._abort()
                    return
                self._write_chunk(line)
            if overflow:
                with w.cond:
                    more = bool(w.queue)
                if not more:
                    self.wfile.write(b"0\r\n\r\n")
                    return
                continue
            now = time.monotonic()
            due = (next_bm is not None and now >= next_bm) or (pre_timeout_bm is not None and now >= pre_timeout_bm)
            if due:
                rv = api.bookmark_rv(w)
                if rv is not None:
                    self._write_chunk((json.dumps({"type": BOOKMARK, "object": self._bookmark_obj(req, rv)},
                                                  separators=(",", ":")) + "\n").encode())
                    if next_bm is not None and now >= next_bm:
                        next_bm = now + interval
                    if pre_timeout_bm is not None and now >= pre_timeout_bm:
                        pre_timeout_bm = None
            if deadline is not None and time.monotonic() >= deadline:
                with w.cond:
                    pending = bool(w.queue)
                if not pending:
                    self.wfile.write(b"0\r\n\r\n")
                    return

    def _bookmark_obj(self, req, rv):
        kind = req.kind
        if kind.crd:
            return {"kind": kind.kind, "apiVersion": kind.gv(req.version), "metadata": {"resourceVersion": str(rv)}}
        obj = {"kind": kind.kind, "apiVersion": kind.gv(req.version),
               "metadata": {"resourceVersion": str(rv), "creationTimestamp": None}}
        obj.update(copy.deepcopy(kind.bookmark))
        return obj

    def _client_gone(self):
        """A watching client never sends anything: readability means EOF, reset or close_notify."""
        if self.conn is None:
            return False
        try:
            readable, _, _ = select.select([self.conn.raw], [], [], 0)
            if not readable:
                return False
            self.conn.raw.recv(1, socket.MSG_PEEK)
            return True
        except (OSError, ValueError):
            return True

    def _abort(self):
        self.close_connection = True
        if self.conn is not None:
            self.conn.kill()


class DoubleHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, addr, api, ssl_ctx, host):
        self.api = api
        self.ssl_ctx = ssl_ctx
        self.host = host
        super().__init__(addr, Handler)

    def handle_error(self, request, client_address):
        pass

    def server_bind(self):
        import socketserver
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = self.server_address[:2]

    def finish_request(self, request, client_address):
        try:
            raw = request.dup()
        except OSError:
            return
        conn = Conn(raw)
        self.host.track(conn)
        ssock = None
        try:
            request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            request.settimeout(10)
            ssock = self.ssl_ctx.wrap_socket(request, server_side=True)
            ssock.settimeout(None)
            Handler(ssock, client_address, self, conn)
        except (ssl.SSLError, OSError, ValueError):
            pass
        finally:
            self.host.untrack(conn)
            try:
                if ssock is not None:
                    ssock.close()
            except OSError:
                pass
            try:
                raw.close()
            except OSError:
                pass

    def shutdown_request(self, request):
        try:
            request.close()
        except OSError:
            pass


class ServerHost:
    """Owns the listening server; can take it down and bring it back on the same port."""

    def __init__(self, api, ssl_ctx, port):
        self.api = api
        self.ssl_ctx = ssl_ctx
        self.port = port
        self.lock = threading.Lock()
        self.conns = set()
        self.server = None
        self.thread = None
        self.restarting = threading.Lock()

    def track(self, conn):
        with self.lock:
            self.conns.add(conn)

    def untrack(self, conn):
        with self.lock:
            self.conns.discard(conn)

    def start(self):
        last = None
        for _ in range(100):
            try:
                self.server = DoubleHTTPServer(("127.0.0.1", self.port), self.api, self.ssl_ctx, self)
                break
            except OSError as e:
                last = e
                if self.port == 0:
                    raise
                time.sleep(0.02)
        else:
            raise last
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05},
                                       daemon=True)
        self.thread.start()

    def stop(self):
        srv = self.server
        if srv is not None:
            srv.shutdown()
            srv.server_close()
        with self.lock:
            conns = list(self.conns)
        for c in conns:
            c.kill()

    def restart(self, down_s):
        with self.restarting:
            time.sleep(0.05)            # let the control response reach its client
            self.stop()
            time.sleep(max(0.0, down_s))
            self.start()


# --------------------------------------------------------------------------------------------
# Certificates, kubeconfig, main
# --------------------------------------------------------------------------------------------

OPENSSL_CNF = """[req]
distinguished_name = dn
prompt = no
[dn]
CN = mpijob-apiserver-double
[v3_ca]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign,digitalSignature
subjectKeyIdentifier = hash
[v3_server]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = @names
[names]
IP.1 = 127.0.0.1
IP.2 = 10.96.0.1
DNS.1 = localhost
DNS.2 = kubernetes
DNS.3 = kubernetes.default
DNS.4 = kubernetes.default.svc
DNS.5 = kubernetes.default.svc.cluster.local
"""


def make_certs(d):
    """CA and server certificate (EC P-256) with the openssl command-line tool, for the names a
    real API server's certificate holds: 127.0.0.1, the `kubernetes` Service's ClusterIP
    10.96.0.1 and kubernetes, kubernetes.default, kubernetes.default.svc(.cluster.local)."""
    cnf = os.path.join(d, "openssl.cnf")
    with open(cnf, "w") as f:
        f.write(OPENSSL_CNF)
    ca_key, ca_crt = os.path.join(d, "ca.key"), os.path.join(d, "ca.crt")
    key, csr, crt = os.path.join(d, "server.key"), os.path.join(d, "server.csr"), os.path.join(d, "server.crt")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    p1 = subprocess.Popen(["openssl", "req", "-x509", *ec, "-keyout", ca_key, "-out", ca_crt, "-days", "3650",
                           "-subj", "/CN=apiserver-double-ca", "-config", cnf, "-extensions", "v3_ca"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    p2 = subprocess.Popen(["openssl", "req", "-new", *ec, "-keyout", key, "-out", csr,
                           "-subj", "/CN=127.0.0.1", "-config", cnf],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    for p in (p1, p2):
        _, err = p.communicate()
        if p.returncode != 0:
            raise RuntimeError("openssl failed: %s" % err.decode(errors="replace"))
    serial = "0x%x" % random.getrandbits(63)
    p3 = subprocess.run(["openssl", "x509", "-req", "-in", csr, "-CA", ca_crt, "-CAkey", ca_key, "-set_serial",
                         serial, "-out", crt, "-days", "3650", "-extfile", cnf, "-extensions", "v3_server"],
                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    if p3.returncode != 0:
        raise RuntimeError("openssl failed: %s" % p3.stderr.decode(errors="replace"))
    return ca_crt, crt, key


def kubeconfig_text(server, ca_pem, token):
    ca_b64 = base64.b64encode(ca_pem).decode()
    return ("apiVersion: v1\n"
            "kind: Config\n"
            "clusters:\n"
            "- name: double\n"
            "  cluster:\n"
            "    server: %s\n"
            "    certificate-authority-data: %s\n"
            "users:\n"
            "- name: double\n"
            "  user:\n"
            "    token: %s\n"
            "contexts:\n"
            "- name: double\n"
            "  context:\n"
            "    cluster: double\n"
            "    user: double\n"
            "    namespace: default\n"
            "current-context: double\n") % (server, ca_b64, token)


def kubernetes_service_info(port):
    """How a pod reaches the API server: the `kubernetes` Service's ClusterIP and port, and the
    address behind it (what a node's proxy forwards to)."""
    return {"ip": KUBERNETES_SERVICE_IP, "port": KUBERNETES_SERVICE_PORT, "target": "127.0.0.1:%d" % port}


def info_json(port):
    return {"kind": "double", "kubernetesService": kubernetes_service_info(port)}


def write_atomic(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def main(argv=None):
    # Bodies nest as deep as kube-apiserver's limit (10,000): recursion in the handler threads
    # (decoding, pruning, copying) needs the room.
    sys.setrecursionlimit(4 * MAX_DEPTH + 1000)
    threading.stack_size(256 << 20)
    ap = argparse.ArgumentParser(description="Kubernetes API-server double for tests")
    ap.add_argument("--state-dir", required=True)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--token", action="append", default=[])
    ap.add_argument("--bookmark-interval", type=float, default=5.0)
    ap.add_argument("--extra-crd", action="append", default=[],
                    help="JSON: a CustomResourceDefinition or {group,version(s),plural,kind,singular,"
                         "namespaced,status,schema}; or @FILE")
    ap.add_argument("--mpijob-crd", default=MPIJOB_CRD_FILE,
                    help="the MPIJob CRD whose schema admits MPIJobs (\"\": none, no schema checks)")
    ap.add_argument("--without-crds", action="store_true",
                    help="serve no custom resources (MPIJobs, PodGroups), as a cluster without the CRDs")
    ap.add_argument("--rbac", action="append", default=[],
                    help="YAML file of RBAC objects enforced for --rbac-token (repeatable)")
    ap.add_argument("--rbac-token", default="operator-token",
                    help="the bearer token RBAC applies to; its kubeconfig is <state-dir>/operator.kubeconfig")
    ap.add_argument("--rbac-user", default="",
                    help="the user that token authenticates as (default: the ServiceAccount the files define)")
    ap.add_argument("--control-plane", action="store_true",
                    help="also do what kube-controller-manager does for pods' in-cluster configuration (a "
                         "default ServiceAccount and kube-root-ca.crt in every namespace) and admit pods with "
                         "the ServiceAccount plugin; without it the double is kube-apiserver as launch.py runs "
                         "it alone")
    args = ap.parse_args(argv)
    tokens = args.token or ["test-token"]
    d = os.path.abspath(args.state_dir)
    os.makedirs(d, exist_ok=True)
    try:
        os.unlink(os.path.join(d, "ready"))
    except FileNotFoundError:
        pass

    crd = {}                        # the CRD loads while openssl makes the certificates
    loader = threading.Thread(target=lambda: crd.update(obj=load_crd_file(args.mpijob_crd)), daemon=True)
    if args.mpijob_crd:
        loader.start()
    api = Api(tokens, args.bookmark_interval, mpijob_crd=None)
    api.service_accounts = args.control_plane
    if args.without_crds:
        for kind in [k for k in api.store.kinds if k.crd]:
            api.store.remove_kind(kind)
        args.mpijob_crd = ""
    for spec in args.extra_crd:
        text = open(spec[1:]).read() if spec.startswith("@") else spec
        api.store.add_kind(kind_from_crd(json.loads(text)))
    if args.rbac:
        user = args.rbac_user or rbac.service_account_user(args.rbac)
        if not user:
            ap.error("--rbac: the files define no single ServiceAccount; give --rbac-user")
        api.rbac_tokens = {args.rbac_token: user}
        api.rbac_user = user
        api.rbac_objects = rbac.manifest_objects(args.rbac)
        api.rbac_namespaces = rbac.namespaces_of(args.rbac)

    ca_crt, crt, key = make_certs(d)
    if args.mpijob_crd:
        loader.join()
        api.install_mpijob_crd(crd.get("obj"))
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(crt, key)
    ctx.set_alpn_protocols(["http/1.1"])

    host = ServerHost(api, ctx, args.port)
    host.start()
    api.port = host.port
    api.server = host
    with open(ca_crt, "rb") as f:
        ca_pem = f.read()
    try:
        api.start_controllers(ca_pem.decode(), host.port)
    except RuntimeError as e:
        sys.stderr.write("apiserver: %s\n" % e)
        host.stop()
        os._exit(1)


    # The handler only sets a flag: taking the lock of a threading.Event in a signal handler
    # deadlocks when a second signal lands while the first handler holds that lock.
    stopping = []

    def on_signal(signum, frame):
        stopping.append(signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    faulthandler.register(signal.SIGUSR2, all_threads=True)   # thread dump for a hung test

    server_url = "https://127.0.0.1:%d" % host.port
    write_atomic(os.path.join(d, "kubeconfig"), kubeconfig_text(server_url, ca_pem, tokens[0]))
    if args.rbac:
        write_atomic(os.path.join(d, "operator.kubeconfig"), kubeconfig_text(server_url, ca_pem, args.rbac_token))
    write_atomic(os.path.join(d, "port"), "%d\n" % host.port)
    write_atomic(os.path.join(d, "info.json"), json.dumps(info_json(host.port)) + "\n")
    write_atomic(os.path.join(d, "ready"), "%d\n" % os.getpid())

    while not stopping:
        time.sleep(0.05)
    try:
        host.stop()
    except Exception:  # noqa: BLE001
        pass
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
