"""Server-side Tables (Accept ...;as=Table;g=meta.k8s.io), as kubectl get asks for them: the
columns and cells of the built-in kinds, a CRD's additionalPrinterColumns, and the duration and
JSONPath helpers they need."""

import datetime
import json
import re
import time

from errors import err_bad_request, go_quote
from kinds import CRD_GROUP, RBAC_GROUP, render
from objects import as_dict, as_list

TABLE_GVS = ("v1", "v1beta1")                 # meta.k8s.io versions a Table is served in


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


def _pod_row(pod, now):
    spec, status = as_dict(pod.get("spec")), as_dict(pod.get("status"))
    containers = as_list(spec.get("containers"))
    statuses = as_list(status.get("containerStatuses"))
    reason = status.get("reason") or status.get("phase") or ""
    ready = restarts = 0
    last_restart = None
    init_statuses = as_list(status.get("initContainerStatuses"))
    initializing = False
    for i, cs in enumerate(init_statuses):
        cs = as_dict(cs)
        restarts += int(cs.get("restartCount") or 0)
        state = as_dict(cs.get("state"))
        term, wait = as_dict(state.get("terminated")), as_dict(state.get("waiting"))
        if state.get("terminated") is not None and term.get("exitCode") == 0:
            continue
        if state.get("terminated") is not None:
            reason = "Init:" + (term.get("reason") or ("Signal:%d" % term["signal"] if term.get("signal")
                                                         else "ExitCode:%d" % int(term.get("exitCode") or 0)))
        elif wait.get("reason") and wait.get("reason") != "PodInitializing":
            reason = "Init:" + wait["reason"]
        else:
            reason = "Init:%d/%d" % (i, len(as_list(spec.get("initContainers"))))
        initializing = True
        break
    if not initializing:
        has_running = False
        for cs in reversed(statuses):
            cs = as_dict(cs)
            restarts += int(cs.get("restartCount") or 0)
            finished = parse_time(as_dict(as_dict(cs.get("lastState")).get("terminated")).get("finishedAt"))
            if finished is not None and (last_restart is None or finished > last_restart):
                last_restart = finished
            state = as_dict(cs.get("state"))
            term, wait = as_dict(state.get("terminated")), as_dict(state.get("waiting"))
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
            conds = as_list(status.get("conditions"))
            is_ready = any(as_dict(c).get("type") == "Ready" and as_dict(c).get("status") == "True" for c in conds)
            reason = "Running" if is_ready else "NotReady"
    if _meta(pod).get("deletionTimestamp"):
        reason = "Unknown" if status.get("reason") == "NodeLost" else "Terminating"
    restarts_text = str(restarts)
    if restarts and last_restart is not None:
        restarts_text = "%d (%s ago)" % (restarts, human_duration(now - last_restart))
    gates = as_list(spec.get("readinessGates"))
    if gates:
        conds = {as_dict(c).get("type"): as_dict(c).get("status") for c in as_list(status.get("conditions"))}
        gates_text = "%d/%d" % (sum(1 for g in gates if conds.get(as_dict(g).get("conditionType")) == "True"),
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
    sel = as_dict(sel)
    parts = ["%s=%s" % (k, v) for k, v in sorted(as_dict(sel.get("matchLabels")).items())]
    for e in as_list(sel.get("matchExpressions")):
        e = as_dict(e)
        op, key, vals = e.get("operator"), e.get("key", ""), ",".join(as_list(e.get("values")))
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
    spec, status = as_dict(job.get("spec")), as_dict(job.get("status"))
    true = {as_dict(c).get("type") for c in as_list(status.get("conditions")) if as_dict(c).get("status") == "True"}
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
    pod_spec = as_dict(as_dict(spec.get("template")).get("spec"))
    containers = [as_dict(c) for c in as_list(pod_spec.get("containers"))]
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
    obj = as_dict(ev.get("involvedObject"))
    last = ev.get("lastTimestamp") or ev.get("eventTime") or _meta(ev).get("creationTimestamp")
    kind = str(obj.get("kind") or "").lower()
    source = as_dict(ev.get("source"))
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
    spec = as_dict(svc.get("spec"))
    ports = []
    for p in as_list(spec.get("ports")):
        p = as_dict(p)
        text = "%s/%s" % (p.get("port", ""), p.get("protocol") or "TCP")
        if p.get("nodePort"):
            text = "%s:%s/%s" % (p.get("port", ""), p["nodePort"], p.get("protocol") or "TCP")
        ports.append(text)
    external = ",".join(as_list(spec.get("externalIPs"))) or "<none>"
    sel = as_dict(spec.get("selector"))
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
    spec = as_dict(obj.get("spec"))
    containers = [as_dict(c) for c in as_list(as_dict(as_dict(spec.get("template")).get("spec")).get("containers"))]
    sel = as_dict(spec.get("selector"))
    return [",".join(str(c.get("name", "")) for c in containers),
            ",".join(str(c.get("image", "")) for c in containers), _selector_text(sel) if sel else "<none>"]


def _binding_row(b, now):
    ref = as_dict(b.get("roleRef"))
    subjects = [as_dict(x) for x in as_list(b.get("subjects"))]

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
                              lambda o, now: [len(as_list(o.get("secrets"))),
                                              age(_meta(o).get("creationTimestamp"), now)]),
    ("apps", "deployments"): ([_col("Ready", "string", "Number of the pod with ready state"),
                               _col("Up-to-date", "string", "Total number of non-terminated pods targeted by this "
                                    "deployment that have the desired template spec."),
                               _col("Available", "string", "Total number of available pods (ready for at least "
                                    "minReadySeconds) targeted by this deployment."), AGE_COLUMN] + TEMPLATE_COLUMNS,
                              lambda o, now: ["%d/%d" % (as_dict(o.get("status")).get("readyReplicas") or 0,
                                                         as_dict(o.get("spec")).get("replicas") or 0),
                                              as_dict(o.get("status")).get("updatedReplicas") or 0,
                                              as_dict(o.get("status")).get("availableReplicas") or 0,
                                              age(_meta(o).get("creationTimestamp"), now)] + _template_cells(o)),
    ("apps", "replicasets"): ([_col("Desired", "integer", "Replicas is the number of desired replicas."),
                               _col("Current", "integer", "Replicas is the most recently observed number of "
                                    "replicas."),
                               _col("Ready", "integer", "The number of ready replicas for this replica set."),
                               AGE_COLUMN] + TEMPLATE_COLUMNS,
                              lambda o, now: [as_dict(o.get("spec")).get("replicas") or 0,
                                              as_dict(o.get("status")).get("replicas") or 0,
                                              as_dict(o.get("status")).get("readyReplicas") or 0,
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
                         lambda o, now: [len(as_dict(o.get("data"))) + len(as_dict(o.get("binaryData"))),
                                         age(_meta(o).get("creationTimestamp"), now)]),
    ("", "secrets"): ([_col("Type", "string", "The type of the secret"),
                       _col("Data", "integer", "The number of items in the secret"), AGE_COLUMN],
                      lambda o, now: [o.get("type") or "", len(as_dict(o.get("data"))),
                                      age(_meta(o).get("creationTimestamp"), now)]),
    ("", "namespaces"): ([_col("Status", "string", "The status of the namespace"), AGE_COLUMN],
                         lambda o, now: [as_dict(o.get("status")).get("phase") or "",
                                         age(_meta(o).get("creationTimestamp"), now)]),
    ("coordination.k8s.io", "leases"): ([_col("Holder", "string", "The holder of the lease"), AGE_COLUMN],
                                        lambda o, now: [as_dict(o.get("spec")).get("holderIdentity") or "",
                                                        age(_meta(o).get("creationTimestamp"), now)]),
}


def printer_columns_of(crd):
    """version -> additionalPrinterColumns of a CustomResourceDefinition object."""
    out = {}
    for v in as_list(as_dict(crd.get("spec")).get("versions")):
        v = as_dict(v)
        if v.get("name") and v.get("additionalPrinterColumns") is not None:
            out[v["name"]] = [as_dict(c) for c in as_list(v["additionalPrinterColumns"])]
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
