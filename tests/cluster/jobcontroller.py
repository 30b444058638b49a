"""The batch/v1 Job controller of the cluster simulation, modelled on kube-controller-manager 1.32.

Its status writes follow kube-controller-manager 1.32's, so that kube-apiserver 1.32's Job status
validation accepts them (the cluster tests fail on any 422 against a real server): the interim condition (SuccessCriteriaMet,
FailureTarget) at the latest in the write that adds Complete or Failed, startTime before any
terminal condition, completionTime with Complete, no active, terminating or uncounted pods in a
finished Job, a new startTime only in the write that turns Suspended to False.

What it does, as the real one does for non-indexed Jobs:
- pods named <job>-<5 random chars> from spec.template, labelled batch.kubernetes.io/job-name,
  batch.kubernetes.io/controller-uid, job-name, controller-uid, with a controller ownerReference
  to the Job and the batch.kubernetes.io/job-tracking finalizer;
- parallelism and completions (completions unset: done once any pod succeeded and none is active);
- finished pods are counted through status.uncountedTerminatedPods and the finalizer, so a pod is
  counted once even across restarts of this controller; pods deleted by the controller for
  suspension or scale-down lose the finalizer first and are not counted as failures;
- backoffLimit: failed pods (restartPolicy Never) or container restarts (OnFailure) beyond it ->
  FailureTarget, then, once no pod is left running or terminating, Failed, both with reason
  BackoffLimitExceeded; replacement pods after a failure wait an exponential back-off (10 s,
  20 s, ... capped at 6 min, as kube-controller-manager; settable);
- activeDeadlineSeconds -> the same two conditions with reason DeadlineExceeded, active pods deleted;
- spec.suspend: active pods deleted, Suspended=True (JobSuspended); on resume Suspended=False
  (JobResumed) and startTime reset;
- podReplacementPolicy Failed: no replacement while a pod is still terminating;
- success: SuccessCriteriaMet, then Complete, both with reason CompletionsReached, and
  completionTime;
- status.active/ready/terminating/succeeded/failed/startTime written through /status with a merge
  patch, only when something changed.

Level-triggered: every Job or Pod event queues the Job; a worker recomputes it from the caches. A
full pass runs every second as well (deadlines, back-off expiry, retries after errors, and the
tracking finalizer of pods whose Job is gone).
"""

import logging
import random
import time

from apitime import now_rfc3339, parse_time
from kube import Informer, KubeError
from pods import (condition_true, controller_ref, find_condition, pod_active, pod_deleting, pod_ready,
                  pod_terminal)
from workqueue import WorkQueue

log = logging.getLogger("jobs")

TRACKING_FINALIZER = "batch.kubernetes.io/job-tracking"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
JOB_UID_LABEL = "batch.kubernetes.io/controller-uid"

DEFAULT_BACKOFF = 10.0
MAX_BACKOFF = 360.0

MSG_BACKOFF = "Job has reached the specified backoff limit"
MSG_DEADLINE = "Job was active longer than specified deadline"
MSG_COMPLETE = "Reached expected number of succeeded pods"


def job_finished(job):
    st = job.get("status") or {}
    return condition_true(st, "Complete") or condition_true(st, "Failed")


def new_condition(ctype, status, reason, message):
    t = now_rfc3339()
    return {"type": ctype, "status": status, "lastProbeTime": t, "lastTransitionTime": t,
            "reason": reason, "message": message}


def set_condition(conditions, ctype, status, reason, message):
    """Adds or updates a condition; never adds one whose status is False. Returns True on change."""
    for i, c in enumerate(conditions):
        if c.get("type") == ctype:
            if c.get("status") == status and c.get("reason") == reason and c.get("message") == message:
                return False
            cond = new_condition(ctype, status, reason, message)
            if c.get("status") == status:
                cond["lastTransitionTime"] = c.get("lastTransitionTime", cond["lastTransitionTime"])
            conditions[i] = cond
            return True
    if status == "False":
        return False
    conditions.append(new_condition(ctype, status, reason, message))
    return True


def has_finalizer(pod):
    return TRACKING_FINALIZER in ((pod.get("metadata") or {}).get("finalizers") or [])


def only_replace_failed(job):
    spec = job.get("spec") or {}
    return spec.get("podReplacementPolicy") == "Failed" or bool(spec.get("podFailurePolicy"))


def pod_failed(pod, job):
    """A pod that counts as a failure: phase Failed, or (unless only Failed pods are replaced)
    deleted before it finished."""
    phase = (pod.get("status") or {}).get("phase")
    if phase == "Failed":
        return True
    if only_replace_failed(job):
        return False
    return pod_deleting(pod) and phase != "Succeeded"


def restart_count(pod):
    st = pod.get("status") or {}
    return sum(int(c.get("restartCount") or 0)
               for c in (st.get("initContainerStatuses") or []) + (st.get("containerStatuses") or []))


def random_suffix():
    return "".join(random.choice("bcdfghjklmnpqrstvwxz2456789") for _ in range(5))


class JobController:
    def __init__(self, kube, backoff=DEFAULT_BACKOFF, action_log=None):
        self.kube = kube
        self.backoff = backoff
        self.say = action_log or (lambda text: log.info("%s", text))
        self.jobs = Informer(kube, "/apis/batch/v1/jobs", self._job_event)
        self.pods = Informer(kube, "/api/v1/pods", self._pod_event)
        self.work = WorkQueue()
        self.enqueue = self.work.add
        # job uid -> (failures seen, time of the last one), for the back-off between replacements
        self.failures = {}

    # ------------------------------------------------------------------ events
    def _job_event(self, etype, job):
        meta = job.get("metadata") or {}
        if etype == "DELETED":
            self.failures.pop(meta.get("uid"), None)
        self.enqueue((meta.get("namespace"), meta.get("name")))

    def _pod_event(self, etype, pod):
        ref = controller_ref(pod)
        if ref and ref.get("kind") == "Job" and ref.get("apiVersion", "").startswith("batch/"):
            self.enqueue(((pod.get("metadata") or {}).get("namespace"), ref.get("name")))

    # ------------------------------------------------------------------ loop
    def run(self, stop_event):
        self.work.run(stop_event, (self.jobs, self.pods), self._sync_safely, self._resync)

    def _resync(self):
        for job in self.jobs.items():
            self.enqueue(((job.get("metadata") or {}).get("namespace"), job["metadata"]["name"]))
        self._release_orphans()

    def _sync_safely(self, key):
        try:
            self.sync(key)
        except (KubeError, OSError) as e:
            # The next pass retries: the state is recomputed from the caches.
            log.warning("job %s/%s: %s", key[0], key[1], e)
        except Exception:
            log.exception("job %s/%s: sync failed", key[0], key[1])

    # ------------------------------------------------------------------ API helpers
    @staticmethod
    def job_path(ns, name=None):
        return "/apis/batch/v1/namespaces/%s/jobs%s" % (ns, "/" + name if name else "")

    @staticmethod
    def pod_path(ns, name=None):
        return "/api/v1/namespaces/%s/pods%s" % (ns, "/" + name if name else "")

    def _remove_finalizer(self, pod):
        meta = pod["metadata"]
        rest = [f for f in meta.get("finalizers") or [] if f != TRACKING_FINALIZER]
        try:
            out = self.kube.patch(self.pod_path(meta["namespace"], meta["name"]),
                                  {"metadata": {"finalizers": rest or None}})
        except KubeError as e:
            if e.code == 404:
                return True
            raise
        if out and (out.get("metadata") or {}).get("deletionTimestamp") and not rest:
            self.pods.forget(out)       # that was what held the deletion: the pod is gone
        else:
            self.pods.note(out)
        return True

    def _delete_pod(self, job_name, pod, keep_finalizer):
        """Deletes a pod; without keep_finalizer it is untracked first so it is not counted."""
        meta = pod["metadata"]
        if not keep_finalizer and has_finalizer(pod):
            self._remove_finalizer(pod)
        if self.kube.delete(self.pod_path(meta["namespace"], meta["name"])):
            self.say("job %s/%s: deleted pod %s" % (meta["namespace"], job_name, meta["name"]))
        marked = dict(pod)
        marked["metadata"] = dict(meta, deletionTimestamp=now_rfc3339())
        if not keep_finalizer:
            self.pods.forget(pod)
        else:
            with self.pods.lock:
                cur = self.pods.cache.get((meta["namespace"], meta["name"]))
                if cur is not None and cur["metadata"].get("uid") == meta.get("uid"):
                    self.pods.cache[(meta["namespace"], meta["name"])] = marked

    def _create_pod(self, job):
        meta, spec = job["metadata"], job.get("spec") or {}
        tmpl = spec.get("template") or {}
        tmeta = tmpl.get("metadata") or {}
        labels = dict(tmeta.get("labels") or {})
        labels.setdefault(JOB_UID_LABEL, meta["uid"])
        labels.setdefault(JOB_NAME_LABEL, meta["name"])
        labels.setdefault("controller-uid", meta["uid"])
        labels.setdefault("job-name", meta["name"])
        prefix = meta["name"][:58]
        pod = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": "%s-%s" % (prefix, random_suffix()),
                "namespace": meta["namespace"],
                "labels": labels,
                "finalizers": [TRACKING_FINALIZER],
                "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": meta["name"],
                                     "uid": meta["uid"], "controller": True, "blockOwnerDeletion": True}],
            },
            "spec": tmpl.get("spec") or {},
        }
        if tmeta.get("annotations"):
            pod["metadata"]["annotations"] = dict(tmeta["annotations"])
        for attempt in range(3):
            try:
                out = self.kube.create(self.pod_path(meta["namespace"]), pod)
            except KubeError as e:
                if e.code == 409 and attempt < 2:
                    pod["metadata"]["name"] = "%s-%s" % (prefix, random_suffix())
                    continue
                raise
            self.pods.note(out)
            self.say("job %s/%s: created pod %s" % (meta["namespace"], meta["name"], out["metadata"]["name"]))
            return out

    # ------------------------------------------------------------------ sync
    def _release_orphans(self):
        """Removes the tracking finalizer from pods whose Job is gone or finished."""
        if not (self.jobs.synced.is_set() and self.pods.synced.is_set()):
            return
        for pod in self.pods.items():
            if not has_finalizer(pod):
                continue
            ref = controller_ref(pod)
            job = None
            if ref and ref.get("kind") == "Job":
                job = self.jobs.get(pod["metadata"].get("namespace"), ref.get("name"))
                if job is not None and job["metadata"].get("uid") != ref.get("uid"):
                    job = None
            if job is None:
                try:
                    self._remove_finalizer(pod)
                except (KubeError, OSError) as e:
                    log.warning("pod %s/%s: removing finalizer: %s", pod["metadata"].get("namespace"),
                                pod["metadata"].get("name"), e)

    def sync(self, key):
        ns, name = key
        job = self.jobs.get(ns, name)
        if job is None:
            return
        meta = job["metadata"]
        uid = meta["uid"]
        spec = job.get("spec") or {}
        status = job.get("status") or {}
        pods = [p for p in self.pods.items()
                if p["metadata"].get("namespace") == ns and (controller_ref(p) or {}).get("uid") == uid]

        if job_finished(job):
            for p in pods:
                if has_finalizer(p):
                    self._remove_finalizer(p)
            return

        st = {
            "conditions": [dict(c) for c in status.get("conditions") or []],
            "startTime": status.get("startTime"),
            "completionTime": status.get("completionTime"),
            "succeeded": int(status.get("succeeded") or 0),
            "failed": int(status.get("failed") or 0),
            "uncounted": {"succeeded": list((status.get("uncountedTerminatedPods") or {}).get("succeeded") or []),
                          "failed": list((status.get("uncountedTerminatedPods") or {}).get("failed") or [])},
        }
        suspended = bool(spec.get("suspend"))
        backoff_limit = spec.get("backoffLimit")
        backoff_limit = 6 if backoff_limit is None else int(backoff_limit)
        completions = spec.get("completions")
        parallelism = spec.get("parallelism")
        parallelism = 1 if parallelism is None else int(parallelism)
        restart_policy = ((spec.get("template") or {}).get("spec") or {}).get("restartPolicy")

        # Finished pods still carrying the finalizer and not yet recorded.
        counted = set(st["uncounted"]["succeeded"]) | set(st["uncounted"]["failed"])
        new_succeeded = [p for p in pods if has_finalizer(p) and p["metadata"]["uid"] not in counted
                         and (p.get("status") or {}).get("phase") == "Succeeded"]
        new_failed = [p for p in pods if has_finalizer(p) and p["metadata"]["uid"] not in counted
                      and (p.get("status") or {}).get("phase") != "Succeeded" and pod_failed(p, job)]
        self._note_failures(uid, new_failed)
        succeeded = st["succeeded"] + len(st["uncounted"]["succeeded"]) + len(new_succeeded)
        failed = st["failed"] + len(st["uncounted"]["failed"]) + len(new_failed)

        active_pods = [p for p in pods if pod_active(p)]
        terminating = sum(1 for p in pods if pod_deleting(p) and not pod_terminal(p))
        if st["startTime"] is None and not suspended:
            st["startTime"] = now_rfc3339()

        # Terminal decision (interim condition first, as the real controller writes it).
        finished = None      # ("success"|"failure", reason, message)
        if condition_true(st, "SuccessCriteriaMet"):
            c = find_condition(st, "SuccessCriteriaMet")
            finished = ("success", c.get("reason"), c.get("message"))
        elif condition_true(st, "FailureTarget"):
            c = find_condition(st, "FailureTarget")
            finished = ("failure", c.get("reason"), c.get("message"))
        elif failed > backoff_limit or self._past_backoff_on_failure(restart_policy, backoff_limit, active_pods):
            finished = ("failure", "BackoffLimitExceeded", MSG_BACKOFF)
        elif self._past_deadline(spec, st, suspended):
            finished = ("failure", "DeadlineExceeded", MSG_DEADLINE)

        if finished is None and meta.get("deletionTimestamp"):
            active = len(active_pods)
        elif finished is None:
            active, terminating = self._manage(job, st, active_pods, terminating, succeeded, completions,
                                               parallelism, suspended)
            if completions is None:
                complete = succeeded > 0 and active == 0
            else:
                complete = succeeded >= int(completions) and active == 0
            if complete:
                finished = ("success", "CompletionsReached", MSG_COMPLETE)
        else:
            for p in active_pods:
                self._delete_pod(name, p, keep_finalizer=True)
                terminating += 1
            active = 0
            if finished[0] == "failure":
                # A failed Job counts every pod it still tracks, running or not, as failed.
                seen = counted | {p["metadata"]["uid"] for p in new_failed + new_succeeded}
                for p in pods:
                    if has_finalizer(p) and p["metadata"]["uid"] not in seen:
                        new_failed.append(p)
                        failed += 1

        if finished is not None:
            interim = "SuccessCriteriaMet" if finished[0] == "success" else "FailureTarget"
            set_condition(st["conditions"], interim, "True", finished[1], finished[2])

        ready = sum(1 for p in active_pods if pod_ready(p) and pod_active(p)) if active else 0

        # Record newly finished pods, then untrack them, then move them to the counters.
        if new_succeeded or new_failed:
            st["uncounted"]["succeeded"] += [p["metadata"]["uid"] for p in new_succeeded]
            st["uncounted"]["failed"] += [p["metadata"]["uid"] for p in new_failed]
            self._write_status(job, st, active, ready, terminating)
            job = self.jobs.get(ns, name) or job
        uncounted_uids = set(st["uncounted"]["succeeded"]) | set(st["uncounted"]["failed"])
        by_uid = {p["metadata"]["uid"]: p for p in pods}
        for u in list(uncounted_uids):
            p = by_uid.get(u)
            if p is not None and has_finalizer(p):
                self._remove_finalizer(p)
        for which in ("succeeded", "failed"):
            moved = st["uncounted"][which]
            st[which] += len(moved)
            st["uncounted"][which] = []

        if finished is not None and active == 0 and terminating == 0:
            final = "Complete" if finished[0] == "success" else "Failed"
            if set_condition(st["conditions"], final, "True", finished[1], finished[2]):
                if final == "Complete":
                    st["completionTime"] = now_rfc3339()
                self.say("job %s/%s: %s (%s)" % (ns, name, final.lower() if final == "Failed" else "complete",
                                                  finished[1]))
        self._write_status(job, st, active, ready, terminating)

    def _note_failures(self, uid, new_failed):
        if not new_failed:
            return
        count, _ = self.failures.get(uid, (0, 0.0))
        self.failures[uid] = (count + len(new_failed), time.monotonic())

    def _backoff_remaining(self, uid):
        count, last = self.failures.get(uid, (0, 0.0))
        if count == 0 or self.backoff <= 0:
            return 0.0
        delay = min(self.backoff * (2 ** (count - 1)), MAX_BACKOFF)
        return max(0.0, last + delay - time.monotonic())

    @staticmethod
    def _past_backoff_on_failure(restart_policy, backoff_limit, active_pods):
        if restart_policy != "OnFailure":
            return False
        restarts = sum(restart_count(p) for p in active_pods)
        if backoff_limit == 0:
            return restarts > 0
        return restarts >= backoff_limit

    @staticmethod
    def _past_deadline(spec, st, suspended):
        ads = spec.get("activeDeadlineSeconds")
        if ads is None or suspended or not st["startTime"]:
            return False
        start = parse_time(st["startTime"])
        return start is not None and time.time() - start >= int(ads)

    def _manage(self, job, st, active_pods, terminating, succeeded, completions, parallelism, suspended):
        """Creates or deletes pods toward the wanted number; returns (active, terminating)."""
        meta = job["metadata"]
        ns, name = meta["namespace"], meta["name"]
        active = len(active_pods)
        if suspended:
            for p in active_pods:
                self._delete_pod(name, p, keep_finalizer=False)
            if set_condition(st["conditions"], "Suspended", "True", "JobSuspended", "Job suspended"):
                self.say("job %s/%s: suspended" % (ns, name))
            return 0, terminating + active
        cond = find_condition(st, "Suspended")
        if cond is not None and cond.get("status") == "True":
            set_condition(st["conditions"], "Suspended", "False", "JobResumed", "Job resumed")
            st["startTime"] = now_rfc3339()
            self.say("job %s/%s: resumed" % (ns, name))
        if completions is None:
            want = 0 if succeeded > 0 else parallelism
        else:
            want = max(0, min(int(completions) - succeeded, parallelism))
        if active > want:
            # Not-ready and younger pods go first, as in the real controller.
            victims = sorted(active_pods, key=lambda p: (pod_ready(p), p["metadata"].get("creationTimestamp") or ""),
                             reverse=False)[:active - want]
            for p in victims:
                self._delete_pod(name, p, keep_finalizer=False)
            return want, terminating + len(victims)
        create = want - active
        if only_replace_failed(job):
            create -= terminating
        if create > 0 and self._backoff_remaining(meta["uid"]) > 0:
            create = 0
        for _ in range(max(0, create)):
            self._create_pod(job)
            active += 1
        return active, terminating

    def _write_status(self, job, st, active, ready, terminating):
        meta = job["metadata"]
        old = job.get("status") or {}
        new = {
            "active": active or None,
            "ready": ready,
            "terminating": terminating,
            "succeeded": st["succeeded"] or None,
            "failed": st["failed"] or None,
            "startTime": st["startTime"],
            "completionTime": st["completionTime"],
            "conditions": st["conditions"] or None,
            "uncountedTerminatedPods": {k: v for k, v in st["uncounted"].items() if v},
        }
        patch = {}
        for k, v in new.items():
            cur = old.get(k)
            if k == "uncountedTerminatedPods":
                cur = {a: b for a, b in (cur or {}).items() if b}
                if cur != v:
                    patch[k] = {"succeeded": v.get("succeeded"), "failed": v.get("failed")}
                elif k not in old:
                    patch[k] = {}
                continue
            if cur != v:
                patch[k] = v
        if not patch:
            return
        out = self.kube.patch_status(self.job_path(meta["namespace"], meta["name"]), {"status": patch})
        self.jobs.note(out)
