"""The built-in resources: their defaulting and the validations an operator can trip over, as
kube-apiserver 1.32 does them, and builtin_kinds(), the table of every resource served."""

import base64
import copy
import json

import release
import serviceaccounts
from errors import FieldError, Raw, fe_forbidden, fe_invalid, fe_not_supported, fe_required, go_label_selector, \
    go_quote, go_string_map, go_strings
from kinds import CRD_GROUP, RBAC_GROUP, Kind
from metadata import form_problems, name_problems
from objects import META_ORDER, ordered
from selection import selector_matches


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
    if release.unset_times_written():
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
            for p in form_problems(k, 253, CONFIG_KEY_RE, MSG_CONFIG_KEY):
                errors.append(fe_invalid("%s[%s]" % (field, k), k, p))
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


def _default_template(spec):
    tmpl = spec.get("template")
    if not isinstance(tmpl, dict):
        tmpl = {}
    tmeta = dict(tmpl.get("metadata") or {}) if isinstance(tmpl.get("metadata"), dict) else {}
    if release.unset_times_written():
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


def validate_spec_immutable(old, new, errors):
    """Workloads and PodGroups of scheduling.k8s.io/v1alpha2: the whole spec is immutable."""
    if (old.get("spec") or {}) != (new.get("spec") or {}):
        errors.append(fe_invalid("spec", Raw("{...}"), "field is immutable"))


def workload_api_kinds():
    """kube-scheduler's Workload API of Kubernetes 1.36 (scheduling.k8s.io/v1alpha2, alpha: served
    only with its runtime-config and the GenericWorkload feature gate; apiserver.py --workload-api).
    Not modelled: the PodGroupWorkloadExists admission (a PodGroup naming a Workload that does not
    exist is refused) and the PodGroup's protection finalizer; the planner's order and its wait for
    the old group are checked on a real 1.36 control plane."""
    return [
        Kind("scheduling.k8s.io", ["v1alpha2"], "workloads", "Workload", "workload", status=False,
             generation="spec", top=("spec",), update_validator=validate_spec_immutable, bookmark={"spec": {}}),
        Kind("scheduling.k8s.io", ["v1alpha2"], "podgroups", "PodGroup", "podgroup", status=True,
             generation="spec", update_validator=validate_spec_immutable, bookmark={"spec": {}, "status": {}}),
    ]


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


POD_FIELDS = ("spec.nodeName", "spec.restartPolicy", "spec.schedulerName", "spec.serviceAccountName",
              "spec.hostNetwork", "status.phase", "status.podIP", "status.podIPs", "status.nominatedNodeName")
EVENT_FIELDS = ("involvedObject.kind", "involvedObject.namespace", "involvedObject.name",
                "involvedObject.uid", "involvedObject.apiVersion", "involvedObject.resourceVersion",
                "involvedObject.fieldPath", "reason", "reportingComponent", "source", "type")


def builtin_kinds():
    """The served resources: one line each."""
    return [
        Kind("", ["v1"], "pods", "Pod", "pod", status=True, short=("po",), return_deleted=True, graceful=True,
             generation="spec" if release.pods_have_generation() else None,
             fields=POD_FIELDS, defaulter=default_pod, validator=validate_pod,
             update_validator=validate_pod_update, categories=("all",),
             subresources={"log": ("", "", "Pod", ["get"])},
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
