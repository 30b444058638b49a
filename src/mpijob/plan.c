#include "mpijob/plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kube/errors.h"
#include "mpijob/hostfile.h"
#include "mpijob/sshkeys.h"
#include "mpijob/status.h"
#include "util/buf.h"
#include "util/clock.h"
#include "util/json.h"

/* Actions of one kind of step, concatenated in plan order at the end (plan.h). */
struct list {
    struct action *a;
    size_t n, cap;
};

struct workers_seen;

struct planner {
    const struct plan_input *in;
    const struct mpijob *job;
    cJSON *status;
    char now[21];
    struct list announced, decided, wanted;
    struct list restarts; /* a worker's failure announced, unless the job ends in the same pass */
    bool nomem;
    bool blocked;  /* an object under our name is not ours: nothing after it is created */
    bool all_ready; /* every worker exists and is Ready (WaitForWorkersReady) */
    const struct workers_seen *seen;
    uint64_t requeue_after_ms;
};

/* ---- building the list ------------------------------------------------------------------ */

/* Room in *a (capacity *cap, n used) for `more` actions. */
static bool reserve(struct action **a, size_t *cap, size_t n, size_t more)
{
    if (n + more <= *cap)
        return true;
    size_t want = *cap ? *cap : 8;
    while (want < n + more)
        want *= 2;
    struct action *grown = realloc(*a, want * sizeof(**a));
    if (!grown)
        return false;
    *a = grown;
    *cap = want;
    return true;
}

static struct action *add(struct planner *pl, struct list *l, enum action_type type,
                          const struct kube_resource *res, const char *name)
{
    if (!reserve(&l->a, &l->cap, l->n, 1)) {
        pl->nomem = true;
        return NULL;
    }
    struct action *a = &l->a[l->n];
    memset(a, 0, sizeof(*a));
    a->type = type;
    a->resource = res;
    if (name && !(a->name = strdup(name))) {
        pl->nomem = true;
        return NULL;
    }
    l->n++;
    return a;
}

static void action_clear(struct action *a)
{
    free(a->name);
    cJSON_Delete(a->object);
    free(a->patch);
    free(a->uid);
    free(a->selector);
    free(a->message);
}

static void list_clear(struct list *l)
{
    for (size_t i = 0; i < l->n; i++)
        action_clear(&l->a[i]);
    free(l->a);
    memset(l, 0, sizeof(*l));
}

/* Takes object (deleted on failure). */
static struct action *create(struct planner *pl, const struct kube_resource *res, const char *name, cJSON *object)
{
    struct action *a = object ? add(pl, &pl->wanted, ACTION_CREATE, res, name) : NULL;
    if (!a) {
        pl->nomem = true;
        cJSON_Delete(object);
        return NULL;
    }
    a->object = object;
    return a;
}

/* A creation with an order: the PodGroup before the pods it gathers, the launcher last. */
static void create_alone(struct planner *pl, const struct kube_resource *res, const char *name, cJSON *object)
{
    struct action *a = create(pl, res, name, object);
    if (a)
        a->alone = true;
}

static struct action *delete(struct planner *pl, struct list *l, const struct kube_resource *res,
                             const struct kube_object *o)
{
    struct action *a = add(pl, l, ACTION_DELETE, res, o->name);
    if (a && o->uid && !(a->uid = strdup(o->uid)))
        pl->nomem = true;
    return a;
}

/* The label selector every worker pod of this job matches ("k=v,k=v"), or NULL (no memory). The
 * keys and values of our labels need no escaping in a selector. */
static char *worker_selector(struct planner *pl, cJSON **labels)
{
    *labels = build_labels(pl->job, pl->in->options, ROLE_NAME_WORKER, -1);
    struct buf sel;
    buf_init(&sel, 0);
    int rc = *labels ? 0 : -1;
    const cJSON *l;
    cJSON_ArrayForEach(l, *labels) {
        if (rc == 0)
            rc = cJSON_IsString(l) ? buf_printf(&sel, "%s%s=%s", sel.len ? "," : "", l->string, l->valuestring) : -1;
    }
    if (rc < 0 || !sel.data) {
        buf_free(&sel);
        return NULL;
    }
    return buf_steal(&sel);
}

static bool has_labels(const struct kube_object *o, const cJSON *labels)
{
    cJSON *pod = kube_object_parse(o);
    const cJSON *have = json_path(pod, "metadata.labels");
    bool ok = have != NULL;
    const cJSON *l;
    cJSON_ArrayForEach(l, labels) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(have, l->string);
        ok = ok && cJSON_IsString(v) && strcmp(v->valuestring, l->valuestring) == 0;
    }
    cJSON_Delete(pod);
    return ok;
}

/* Deletes these worker pods (n of them). Two or more go in one request, a DELETE on the pods'
 * collection selected by the labels every worker of this job carries (and field_selector, which
 * must select the same pods the caller chose, by the server's view of them), when each of them
 * carries those labels; otherwise, and for one pod, each goes on its own. A job of 512 workers
 * is cleaned up or suspended in one request instead of 512. */
static void delete_workers(struct planner *pl, struct list *l, const struct kube_object **pods, size_t n,
                           const char *field_selector)
{
    cJSON *labels = NULL;
    char *selector = n >= 2 ? worker_selector(pl, &labels) : NULL;
    bool together = selector != NULL;
    for (size_t i = 0; together && i < n; i++)
        together = has_labels(pods[i], labels);
    cJSON_Delete(labels);
    if (n >= 2 && !labels)
        pl->nomem = true;
    if (!together) {
        free(selector);
        for (size_t i = 0; i < n; i++)
            delete(pl, l, &KUBE_PODS, pods[i]);
        return;
    }
    struct action *a = add(pl, l, ACTION_DELETE_COLLECTION, &KUBE_PODS, NULL);
    if (!a) {
        free(selector);
        return;
    }
    a->selector = selector;
    a->field_selector = field_selector;
}

static void patch(struct planner *pl, const struct kube_resource *res, const char *name, enum kube_patch_type type,
                  const char *subresource, char *body)
{
    struct action *a = body ? add(pl, &pl->wanted, ACTION_PATCH, res, name) : NULL;
    if (!a) {
        pl->nomem = true;
        free(body);
        return;
    }
    a->patch = body;
    a->patch_type = type;
    a->subresource = subresource;
}

static void event(struct planner *pl, struct list *l, const char *type, const char *reason, const char *message)
{
    struct action *a = add(pl, l, ACTION_EVENT, NULL, NULL);
    if (!a)
        return;
    a->event_type = type;
    a->reason = reason;
    /* One line: kubectl lists events as a table. The condition keeps the lines. */
    size_t len = strlen(message);
    char *m = malloc(2 * len + 1), *o = m;
    if (!m) {
        pl->nomem = true;
        return;
    }
    for (const char *p = message; *p; p++) {
        if (*p != '\n') {
            *o++ = *p;
        } else if (p[1]) {
            *o++ = ';';
            *o++ = ' ';
        }
    }
    *o = '\0';
    a->message = m;
}

/* An event announcing a status transition: recorded after the status is written. */
static void announce(struct planner *pl, const char *type, const char *reason, const char *message)
{
    event(pl, &pl->announced, type, reason, message);
}

static void requeue_in(struct planner *pl, long long seconds)
{
    uint64_t ms = seconds > 0 ? (uint64_t)seconds * 1000 : 1;
    if (!pl->requeue_after_ms || ms < pl->requeue_after_ms)
        pl->requeue_after_ms = ms;
}

static bool owned(const struct planner *pl, const struct kube_object *o)
{
    return o && o->owner_uid && strcmp(o->owner_uid, pl->job->uid) == 0;
}

/* A pod on its way out: being deleted, or its deletion accepted by the server and not yet in the
 * cache. It belongs to no run of the job any more, this one or the next: it counts nowhere (not
 * active, not Ready), is in no hostfile, and is not deleted again. Only the eviction it may be
 * undergoing (DisruptionTarget) is still read from it. */
static bool leaving(const struct kube_object *o, bool going)
{
    return o && (o->deleting || going);
}

static bool owned_pod_leaving(const struct planner *pl, size_t i)
{
    return leaving(pl->in->owned_pods[i], pl->in->owned_going && pl->in->owned_going[i]);
}

/* Seconds since the RFC 3339 time in status field `name`, or -1 when unset or unreadable. */
static long long seconds_since(const struct planner *pl, const char *name)
{
    const char *t = json_string(pl->status, name);
    time_t then;
    if (!t || clock_parse_rfc3339(t, &then) < 0)
        return -1;
    return (long long)(pl->in->now - then);
}

/* Whether the condition changed (an announcement is due); out of memory is noted. */
static bool set_condition(struct planner *pl, const char *type, bool value, const char *reason, const char *msg)
{
    int rc = mpijob_status_set_condition(pl->status, type, value, reason, msg, pl->now);
    if (rc < 0)
        pl->nomem = true;
    return rc > 0;
}

/* ---- objects that exist -------------------------------------------------------------------- */

enum presence { ABSENT, PENDING, OURS, FOREIGN };

/* Whether the object the job wants under `name` is there. An object with our name that the job
 * does not control is left alone and reported (ErrResourceExists); nothing after it is made. */
static enum presence presence(struct planner *pl, const struct kube_resource *res, const struct plan_object *po,
                              const char *name)
{
    if (!po->obj)
        return po->pending ? PENDING : ABSENT;
    if (owned(pl, po->obj))
        return OURS;
    char what[400];
    snprintf(what, sizeof(what), "%s %s exists and is not controlled by this MPIJob", res->kind, name);
    if (set_condition(pl, MPIJOB_COND_CREATED, false, "ErrResourceExists", what))
        announce(pl, "Warning", "ErrResourceExists", what);
    pl->blocked = true;
    return FOREIGN;
}

/* Whether cleanPodPolicy deletes a finished job's pod in state s: All every one, Running the
 * Pending and Running ones, None none. */
static bool cleaned_by_policy(const struct planner *pl, enum pod_state s)
{
    switch (pl->job->run_policy.clean_pod_policy) {
    case CLEAN_POD_NONE: return false;
    case CLEAN_POD_ALL: return true;
    default: return s == POD_PENDING || s == POD_RUNNING;
    }
}

/* cleanPodPolicy on a finished job: All deletes every worker, Running the Pending and Running
 * ones, None keeps them. */
static void clean_pods(struct planner *pl)
{
    enum clean_pod_policy policy = pl->job->run_policy.clean_pod_policy;
    if (policy == CLEAN_POD_NONE)
        return;
    const struct kube_object **going = calloc(pl->in->n_owned_pods + 1, sizeof(*going));
    if (!going) {
        pl->nomem = true;
        return;
    }
    size_t n = 0;
    for (size_t i = 0; i < pl->in->n_owned_pods; i++) {
        const struct kube_object *o = pl->in->owned_pods[i];
        if (owned_pod_leaving(pl, i))
            continue;
        cJSON *pod = kube_object_parse(o);
        enum pod_state s = pod ? pod_state_of(pod) : POD_UNKNOWN;
        cJSON_Delete(pod);
        if (cleaned_by_policy(pl, s))
            going[n++] = o;
    }
    /* Running: the server deletes what it sees Pending or Running (one that has just ended,
     * which the cache does not show yet, is kept, as the policy says) */
    delete_workers(pl, &pl->decided, going, n,
                   policy == CLEAN_POD_ALL ? NULL : "status.phase!=Succeeded,status.phase!=Failed");
    free(going);
}

/* Adds one pod to the counts (active: phase Running, as the reference operator counts; ready:
 * the Ready condition) and returns its state. pod may be NULL (unparsable): counted nowhere. */
static enum pod_state count_pod(struct replica_counts *c, const cJSON *pod)
{
    enum pod_state s = pod ? pod_state_of(pod) : POD_UNKNOWN;
    switch (s) {
    case POD_RUNNING: c->active++; break;
    case POD_SUCCEEDED: c->succeeded++; break;
    case POD_FAILED: c->failed++; break;
    default: break;
    }
    if (pod && pod_is_ready(pod))
        c->ready++;
    return s;
}

/* status.replicaStatuses.Worker and the WORKERS column ("ready/replicas"). */
static void set_worker_status(struct planner *pl, const struct replica_counts *wc)
{
    int workers = pl->job->worker.replicas;
    if (workers > 0 && mpijob_status_set_replicas(pl->status, "Worker", wc) < 0)
        pl->nomem = true;
    char ready[32];
    snprintf(ready, sizeof(ready), "%d/%d", wc->ready, workers);
    if (json_set_string(pl->status, "workers", ready) < 0)
        pl->nomem = true;
}

static void finish(struct planner *pl, bool succeeded, const char *reason, const char *message)
{
    const char *type = succeeded ? MPIJOB_COND_SUCCEEDED : MPIJOB_COND_FAILED;
    if (set_condition(pl, type, true, reason, message))
        announce(pl, succeeded ? "Normal" : "Warning", succeeded ? "MPIJobSucceeded" : "MPIJobFailed", message);
    if (!cJSON_GetObjectItemCaseSensitive(pl->status, "completionTime"))
        json_set_string(pl->status, "completionTime", pl->now);
}

/* ---- a finished job ------------------------------------------------------------------------ */

/* succeeded and failed at least what the launcher Job's status says: the Job controller counts
 * pods it has since deleted, and its Complete or Failed can reach us before the pod's last phase
 * does (two watches keep no order between them). */
static void add_launcher_job_counts(const cJSON *lj, struct replica_counts *lc)
{
    long long succeeded = json_int(lj, "status.succeeded", 0), failed = json_int(lj, "status.failed", 0);
    if (succeeded > lc->succeeded)
        lc->succeeded = (int)succeeded;
    if (failed > lc->failed)
        lc->failed = (int)failed;
}

/* The launcher's counts after the finish, as its pods now are (one being deleted no longer
 * counts), so that a count taken from a cache that was a moment behind is corrected. */
static void recount_launcher(struct planner *pl)
{
    struct replica_counts lc = {0};
    for (size_t i = 0; i < pl->in->n_launcher_pods; i++) {
        const struct kube_object *o = pl->in->launcher_pods[i];
        cJSON *pod = o->deleting ? NULL : kube_object_parse(o);
        if (pod)
            count_pod(&lc, pod);
        cJSON_Delete(pod);
    }
    const struct kube_object *launcher = pl->in->launcher.obj;
    cJSON *lj = owned(pl, launcher) ? kube_object_parse(launcher) : NULL;
    add_launcher_job_counts(lj, &lc);
    cJSON_Delete(lj);
    if (mpijob_status_set_replicas(pl->status, "Launcher", &lc) < 0)
        pl->nomem = true;
}

/* A finished job's workers as they are once cleanPodPolicy has done its work: a pod being
 * deleted, or one clean_pods deletes in this same plan, counts nowhere. The status that says
 * the job finished says so too, instead of a second write once the deletions show. */
static void set_finished_worker_status(struct planner *pl)
{
    const struct mpijob *job = pl->job;
    struct replica_counts wc = {0};
    for (int i = 0; i < job->worker.replicas; i++) {
        const struct kube_object *o = pl->in->workers[i].obj;
        if (!owned(pl, o) || leaving(o, pl->in->workers[i].going))
            continue;
        cJSON *pod = kube_object_parse(o);
        if (!pod || !cleaned_by_policy(pl, pod_state_of(pod)))
            count_pod(&wc, pod);
        cJSON_Delete(pod);
    }
    if (job->worker.replicas > 0)
        set_worker_status(pl, &wc);
}

/* The workers' counts as the pods are once cleaned up (a pod being deleted no longer counts);
 * cleanPodPolicy; ttlSecondsAfterFinished, which deletes the MPIJob itself and with it its
 * dependents. */
static void plan_finished(struct planner *pl)
{
    const struct mpijob *job = pl->job;
    set_finished_worker_status(pl);
    recount_launcher(pl);
    clean_pods(pl);
    if (!cJSON_GetObjectItemCaseSensitive(pl->status, "completionTime"))
        json_set_string(pl->status, "completionTime", pl->now);
    long long ttl = job->run_policy.ttl_after_finished_s;
    long long done_for = seconds_since(pl, "completionTime");
    if (ttl < 0 || done_for < 0)
        return;
    if (done_for < ttl) {
        requeue_in(pl, ttl - done_for);
        return;
    }
    struct kube_object self = {.name = job->name, .uid = job->uid};
    struct action *a = delete(pl, &pl->decided, &MPIJOB_RESOURCE_V2BETA1, &self);
    if (a)
        a->propagation = "Background";
}

/* ---- the lifecycle of a running job --------------------------------------------------------- */

/* Created; suspend and resume (resuming restarts the clock: startTime is reset). */
static void plan_lifecycle(struct planner *pl)
{
    const struct mpijob *job = pl->job;
    if (!mpijob_status_condition(pl->status, MPIJOB_COND_CREATED)) {
        char msg[600];
        snprintf(msg, sizeof(msg), "MPIJob %s/%s is created.", job->namespace, job->name);
        set_condition(pl, MPIJOB_COND_CREATED, true, "MPIJobCreated", msg);
        announce(pl, "Normal", "MPIJobCreated", msg);
    }
    if (job->run_policy.suspend) {
        if (set_condition(pl, MPIJOB_COND_SUSPENDED, true, "MPIJobSuspended", "MPIJob suspended"))
            announce(pl, "Normal", "MPIJobSuspended", "MPIJob suspended");
        if (mpijob_status_condition(pl->status, MPIJOB_COND_RUNNING))
            set_condition(pl, MPIJOB_COND_RUNNING, false, "MPIJobSuspended", "MPIJob suspended");
        cJSON_DeleteItemFromObjectCaseSensitive(pl->status, "startTime");
        return;
    }
    if (mpijob_status_is_true(pl->status, MPIJOB_COND_SUSPENDED)) {
        set_condition(pl, MPIJOB_COND_SUSPENDED, false, "MPIJobResumed", "MPIJob resumed");
        announce(pl, "Normal", "MPIJobResumed", "MPIJob resumed");
        json_set_string(pl->status, "startTime", pl->now);
    }
    if (!cJSON_GetObjectItemCaseSensitive(pl->status, "startTime"))
        json_set_string(pl->status, "startTime", pl->now);
}

/* activeDeadlineSeconds, counted from the MPIJob's start. True when the deadline has passed:
 * the job fails, its launcher is deleted and its pods cleaned. */
static bool plan_deadline(struct planner *pl)
{
    const struct mpijob *job = pl->job;
    long long deadline = job->run_policy.active_deadline_s;
    long long active_for = seconds_since(pl, "startTime");
    if (job->run_policy.suspend || deadline <= 0 || active_for < 0)
        return false;
    if (active_for < deadline) {
        requeue_in(pl, deadline - active_for);
        return false;
    }
    char msg[600];
    snprintf(msg, sizeof(msg), "MPIJob %s/%s was active longer than its deadline of %llds.", job->namespace,
             job->name, deadline);
    finish(pl, false, "DeadlineExceeded", msg);
    /* By name: a launcher whose creation the cache has not shown yet goes too. */
    const struct kube_object *have = pl->in->launcher.obj;
    char *name = mpijob_launcher_name(job);
    struct kube_object launcher = {.name = name};
    struct action *a = name && (!have || owned(pl, have)) ? delete(pl, &pl->decided, &KUBE_JOBS, &launcher) : NULL;
    if (a)
        a->propagation = "Background";
    pl->nomem = pl->nomem || !name;
    free(name);
    clean_pods(pl);
    return true;
}

/* How the Restarting condition's message begins when a worker's failure set it. */
#define WORKER_FAILED "worker "

/* A worker that ended (Failed, or Succeeded: see below) while the job runs is deleted, so the
 * next reconcile creates it afresh and the launcher's retry finds a complete set (the reference never does this, so its
 * retries are futile). Replacements count against backoffLimit, kept in status.workerRestarts. */
static void replace_failed_worker(struct planner *pl, int index, const cJSON *pod, enum pod_state state)
{
    const struct kube_object *obj = pl->in->workers[index].obj;
    struct action *del = delete(pl, &pl->decided, &KUBE_PODS, obj);
    if (del)
        del->count_failure = true;
    if (pl->in->worker_counted && pl->in->worker_counted[index])
        return; /* counted before; only its deletion is still to do */
    char reason[128], message[512];
    bool evicted = false;
    if (state == POD_SUCCEEDED) {
        /* sshd exits 0 on SIGTERM: a worker stopped by its node (a kubelet's eviction, which
         * then reports the pod Succeeded with no reason) looks like one that completed */
        snprintf(reason, sizeof(reason), "Completed");
        snprintf(message, sizeof(message), "its containers exited 0 while the job ran: stopped, not done");
    } else {
        evicted = pod_failure(pod, reason, sizeof(reason), message, sizeof(message));
    }
    long long restarts = json_int(pl->status, "workerRestarts", 0) + 1;
    cJSON_DeleteItemFromObjectCaseSensitive(pl->status, "workerRestarts");
    cJSON_AddNumberToObject(pl->status, "workerRestarts", (double)restarts);
    char msg[1000];
    snprintf(msg, sizeof(msg), WORKER_FAILED "%s failed (%s): %s", obj->name, reason, message);
    if (restarts > pl->job->run_policy.backoff_limit) {
        char full[1400];
        snprintf(full, sizeof(full), "MPIJob %s/%s has failed: %s; %lld worker replacements exceed backoffLimit %d",
                 pl->job->namespace, pl->job->name, msg, restarts, pl->job->run_policy.backoff_limit);
        finish(pl, false, evicted ? "MPIJobEvicted" : "WorkerFailed", full);
        return;
    }
    /* Each counted failure is announced: a second worker failing while the job is already
     * Restarting is news too. */
    set_condition(pl, MPIJOB_COND_RESTARTING, true, "MPIJobRestarting", msg);
    event(pl, &pl->restarts, "Warning", "MPIJobRestarting", msg);
}

/* What the worker pods show. */
struct workers_seen {
    struct replica_counts counts;
    const char **running; /* names of the Running workers, for the hostfile */
    size_t n_running;
    const char *stuck;    /* the first reason a pod's container cannot start (ImagePullBackOff...) */
    char stuck_pod[256];
    char stuck_message[768];
    /* the first worker a component is disrupting (DisruptionTarget True: the kubelet's eviction,
     * the taint manager's, the Eviction API, preemption), before its pod has failed */
    char disrupted_pod[256];
    char disrupted_message[768];
    /* the first gang pod the scheduler could not place (PodScheduled False, Unschedulable), and
     * its message; one saying why it does not fit is kept over one saying it waits for the rest
     * of its gang */
    char unschedulable_pod[256];
    char unschedulable_message[768];
};

#define GANG_WAITING_WORDS "waiting for minCount pods"

/* A pending pod the scheduler could not place: its PodScheduled message into w, preferring a
 * reason of its own over a gang's wait. */
static void note_unschedulable(struct workers_seen *w, const struct kube_object *o, const cJSON *pod)
{
    if (!pod || o->deleting || pod_state_of(pod) != POD_PENDING)
        return;
    const cJSON *c;
    cJSON_ArrayForEach(c, json_path(pod, "status.conditions")) {
        const char *t = json_string(c, "type"), *st = json_string(c, "status"), *r = json_string(c, "reason");
        if (!t || !st || !r || strcmp(t, "PodScheduled") != 0 || strcmp(st, "False") != 0 ||
            strcmp(r, "Unschedulable") != 0)
            continue;
        const char *m = json_string(c, "message");
        bool waiting = !m || strstr(m, GANG_WAITING_WORDS);
        bool had_waiting = !w->unschedulable_pod[0] || strstr(w->unschedulable_message, GANG_WAITING_WORDS);
        if (!w->unschedulable_pod[0] || (!waiting && had_waiting)) {
            snprintf(w->unschedulable_pod, sizeof(w->unschedulable_pod), "%s", o->name);
            status_tidy_message(w->unschedulable_message, sizeof(w->unschedulable_message), m ? m : "Unschedulable");
        }
    }
}

/* A DisruptionTarget condition that is True: "<reason>: <message>" in out. */
static bool disruption_of(const cJSON *pod, char *out, size_t len)
{
    const cJSON *c;
    cJSON_ArrayForEach(c, json_path(pod, "status.conditions")) {
        const char *t = json_string(c, "type"), *st = json_string(c, "status");
        if (t && st && strcmp(t, "DisruptionTarget") == 0 && strcmp(st, "True") == 0) {
            const char *r = json_string(c, "reason"), *m = json_string(c, "message");
            snprintf(out, len, "%s: %s", r ? r : "DisruptionTarget", m ? m : "");
            return true;
        }
    }
    return false;
}

static void note_stuck(struct workers_seen *w, const struct kube_object *o, const cJSON *pod)
{
    if (!w->stuck && pod && !o->deleting &&
        (w->stuck = pod_waiting_problem(pod, w->stuck_message, sizeof(w->stuck_message))))
        snprintf(w->stuck_pod, sizeof(w->stuck_pod), "%s", o->name);
}

static void scan_workers(struct planner *pl, struct workers_seen *w)
{
    const struct mpijob *job = pl->job;
    int workers = job->worker.replicas;
    pl->all_ready = workers > 0;
    for (int i = 0; i < workers; i++) {
        const struct kube_object *o = pl->in->workers[i].obj;
        /* Of the current run: a worker still Ready while it is deleted (a suspend's, a resume
         * that came before the old workers were gone) is not one the launcher may wait for. */
        bool current = o && !leaving(o, pl->in->workers[i].going);
        if (!current)
            pl->all_ready = false;
        if (!owned(pl, o))
            continue;
        cJSON *pod = kube_object_parse(o);
        enum pod_state state = current ? count_pod(&w->counts, pod) : pod ? pod_state_of(pod) : POD_UNKNOWN;
        if (current) {
            note_stuck(w, o, pod);
            note_unschedulable(w, o, pod);
        }
        if (!w->disrupted_pod[0] && state != POD_FAILED &&
            disruption_of(pod, w->disrupted_message, sizeof(w->disrupted_message)))
            snprintf(w->disrupted_pod, sizeof(w->disrupted_pod), "%s", o->name);
        if (state == POD_RUNNING && current)
            w->running[w->n_running++] = o->name;
        else if ((state == POD_FAILED || state == POD_SUCCEEDED) && !job->run_policy.suspend && current)
            replace_failed_worker(pl, i, pod, state); /* a worker serves until the job ends: one that ended failed */
        cJSON_Delete(pod);
    }
    if (w->counts.ready < workers)
        pl->all_ready = false;
}

/* Out of retries: the launcher's own last words. Under OnFailure the Job controller has usually
 * deleted the pod by now; status.lastLauncherFailure kept them. Any other reason (a deadline,
 * say) is the Job's to give. */
static void launcher_failed(struct planner *pl, const char *reason, const char *message)
{
    const cJSON *kept = cJSON_GetObjectItemCaseSensitive(pl->status, "lastLauncherFailure");
    const char *kept_pod = json_string(kept, "pod"), *kept_reason = json_string(kept, "reason");
    const char *kept_message = json_string(kept, "message");
    bool backoff = strcmp(reason, "BackoffLimitExceeded") == 0;
    char *words = NULL, *msg = NULL;
    if (backoff && kept_message &&
        asprintf(&words, "%s: launcher pod %s failed (%s): %s", message, kept_pod ? kept_pod : "?",
                 kept_reason ? kept_reason : "Error", kept_message) < 0)
        words = NULL;
    char full_reason[300];
    if (words && kept_reason && *kept_reason)
        snprintf(full_reason, sizeof(full_reason), "%s/%s", reason, kept_reason);
    else
        snprintf(full_reason, sizeof(full_reason), "%s", reason);
    if (asprintf(&msg, "MPIJob %s/%s has failed: %s", pl->job->namespace, pl->job->name, words ? words : message) < 0) {
        msg = NULL; /* asprintf leaves it undefined on failure */
        pl->nomem = true;
    } else {
        finish(pl, false, full_reason, msg);
    }
    free(msg);
    free(words);
}

/* The launcher's pods: counts, the latest failed run (kept in status.lastLauncherFailure), and
 * whether a run is going on now. */
static bool scan_launcher_pods(struct planner *pl, struct workers_seen *w, struct replica_counts *lc,
                               struct pod_run *last, char *last_pod, size_t last_pod_len)
{
    struct pod_run *run = calloc(1, sizeof(*run));
    bool attempt = false;
    if (!run) {
        pl->nomem = true;
        return false;
    }
    for (size_t i = 0; i < pl->in->n_launcher_pods; i++) {
        const struct kube_object *o = pl->in->launcher_pods[i];
        cJSON *p = kube_object_parse(o);
        if (!o->deleting) /* one being deleted (by the Job controller: a suspend) runs no more */
            count_pod(lc, p);
        note_stuck(w, o, p);
        if (mpijob_launcher_in_gang(pl->job, pl->in->options))
            note_unschedulable(w, o, p);
        if (p) {
            pod_run_of(p, run);
            attempt = attempt || (run->in_progress && !o->deleting);
            if (run->failed && (!last->failed || strcmp(run->finished_at, last->finished_at) >= 0)) {
                *last = *run;
                snprintf(last_pod, last_pod_len, "%s", o->name);
            }
        }
        cJSON_Delete(p);
    }
    free(run);
    if (last->failed && mpijob_status_set_launcher_failure(pl->status, last_pod, last) < 0)
        pl->nomem = true;
    return attempt;
}

/* Whether the Restarting condition names a worker's failure. The launcher's failure that comes
 * with it (mpirun loses that worker's daemon, a moment before or after the kubelet reports the
 * worker) is its consequence, so the condition keeps naming the worker until the next run is
 * going, as the job's failure does after LAUNCHER_FAILURE_SETTLE_S (below). */
static bool restarting_for_a_worker(const struct planner *pl)
{
    const char *said = json_string(mpijob_status_condition(pl->status, MPIJOB_COND_RESTARTING), "message");
    return mpijob_status_is_true(pl->status, MPIJOB_COND_RESTARTING) && said &&
           strncmp(said, WORKER_FAILED, strlen(WORKER_FAILED)) == 0;
}

/* A launcher that fails because a worker died (evicted, OOM-killed, its node lost) usually fails
 * a moment before the worker's Failed status reaches the API server: mpirun sees its daemon go
 * at once, while a kubelet writes the pod's status after killing it. So the job's failure is
 * decided this many seconds after the launcher Job's, and a worker's failure seen meanwhile (the
 * cause) is the one reported. */
#define LAUNCHER_FAILURE_SETTLE_S 5

/* Seconds since the launcher Job's Failed condition turned True; -1 when it has no time. */
static long long launcher_failed_for(const struct planner *pl, const cJSON *lj)
{
    const cJSON *c;
    cJSON_ArrayForEach(c, json_path(lj, "status.conditions")) {
        const char *t = json_string(c, "type"), *at = json_string(c, "lastTransitionTime");
        time_t then;
        if (t && strcmp(t, "Failed") == 0 && at && clock_parse_rfc3339(at, &then) == 0)
            return (long long)(pl->in->now - then);
    }
    return -1;
}

/* Succeeded, Failed, Restarting or Running, from the launcher Job and its pods. */
static void plan_launcher_state(struct planner *pl, struct workers_seen *w, struct replica_counts *lc)
{
    const struct mpijob *job = pl->job;
    const struct kube_object *launcher = pl->in->launcher.obj;
    if (!owned(pl, launcher))
        return;
    cJSON *lj = kube_object_parse(launcher);
    char reason[128] = "", message[512] = "", last_pod[256] = "";
    enum job_state js = lj ? job_state_of(lj, reason, sizeof(reason), message, sizeof(message)) : JOB_ACTIVE;
    struct pod_run *last = calloc(1, sizeof(*last));
    if (!last) {
        cJSON_Delete(lj);
        pl->nomem = true;
        return;
    }
    bool attempt = scan_launcher_pods(pl, w, lc, last, last_pod, sizeof(last_pod));
    add_launcher_job_counts(lj, lc);
    long long failed_for = js == JOB_FAILED ? launcher_failed_for(pl, lj) : -1;
    cJSON_Delete(lj);
    bool suspended = job->run_policy.suspend;
    char msg[3000];
    if (js == JOB_COMPLETE) {
        snprintf(msg, sizeof(msg), "MPIJob %s/%s successfully completed.", job->namespace, job->name);
        finish(pl, true, "MPIJobSucceeded", msg);
    } else if (js == JOB_FAILED && w->disrupted_pod[0]) {
        /* the launcher failed because a worker is being taken away: that is the job's reason */
        snprintf(msg, sizeof(msg), "MPIJob %s/%s has failed: worker %s was evicted (%s); the launcher then failed: %s",
                 job->namespace, job->name, w->disrupted_pod, w->disrupted_message, message);
        finish(pl, false, "MPIJobEvicted", msg);
    } else if (js == JOB_FAILED && failed_for >= 0 && failed_for < LAUNCHER_FAILURE_SETTLE_S) {
        requeue_in(pl, LAUNCHER_FAILURE_SETTLE_S - failed_for);
    } else if (js == JOB_FAILED) {
        launcher_failed(pl, reason, message);
    } else if (js == JOB_ACTIVE && !suspended && last->failed && !attempt) {
        /* Between two launcher runs: the Job retries (a new pod, or the kubelet restarts the
         * container), and the failure is kept here until the next run is going. */
        snprintf(msg, sizeof(msg), "launcher pod %s failed (%s): %s", last_pod, last->reason, last->message);
        if (!restarting_for_a_worker(pl) && set_condition(pl, MPIJOB_COND_RESTARTING, true, "MPIJobRestarting", msg))
            announce(pl, "Warning", "MPIJobRestarting", msg);
    } else if (!suspended && lc->active > 0 && lc->ready > 0 && job->worker.replicas > 0 &&
               (int)w->n_running == job->worker.replicas) {
        /* Never while suspended: the workers being deleted may still show Running. */
        snprintf(msg, sizeof(msg), "MPIJob %s/%s is running.", job->namespace, job->name);
        bool was = mpijob_status_is_true(pl->status, MPIJOB_COND_RUNNING);
        set_condition(pl, MPIJOB_COND_RUNNING, true, "MPIJobRunning", msg);
        if (!was)
            announce(pl, "Normal", "MPIJobRunning", msg);
    }
    free(last);
}

/* A job that cannot start because a pod's container cannot (its image cannot be pulled, its
 * configuration is wrong) says so until it can: Running False with the kubelet's reason and
 * message, and a Warning event when that reason first shows. Once nothing is stuck, that
 * condition goes; Running True replaces it in any case. */
static void show_stuck_pod(struct planner *pl, const struct workers_seen *w)
{
    const cJSON *running = mpijob_status_condition(pl->status, MPIJOB_COND_RUNNING);
    const char *had = json_string(running, "reason");
    bool is_running = mpijob_status_is_true(pl->status, MPIJOB_COND_RUNNING);
    bool showing = running && !is_running && had &&
                   (strcmp(had, "ImagePullBackOff") == 0 || strcmp(had, "InvalidImageName") == 0 ||
                    strcmp(had, "CreateContainerConfigError") == 0 || strcmp(had, "CreateContainerError") == 0);
    bool quiet = pl->job->run_policy.suspend || mpijob_status_finished(pl->status) || is_running ||
                 mpijob_status_is_true(pl->status, MPIJOB_COND_RESTARTING);
    if (!w->stuck || quiet) {
        if (showing)
            mpijob_status_remove_condition(pl->status, MPIJOB_COND_RUNNING);
        return;
    }
    char msg[1100];
    snprintf(msg, sizeof(msg), "MPIJob %s/%s cannot start: pod %s %s", pl->job->namespace, pl->job->name,
             w->stuck_pod, w->stuck_message);
    set_condition(pl, MPIJOB_COND_RUNNING, false, w->stuck, msg);
    if (!showing || strcmp(had, w->stuck) != 0)
        announce(pl, "Warning", w->stuck, msg);
}

/* The PodGroupScheduled condition kube-scheduler writes on a Workload API PodGroup: 1 True,
 * 0 False (its message, often empty, in msg), -1 none yet. */
static int podgroup_scheduled(const struct kube_object *o, char *msg, size_t len)
{
    msg[0] = '\0';
    if (!o || !strstr(o->json, "PodGroupScheduled"))
        return -1;
    cJSON *pg = kube_object_parse(o);
    int verdict = -1;
    const cJSON *c;
    cJSON_ArrayForEach(c, json_path(pg, "status.conditions")) {
        const char *t = json_string(c, "type"), *st = json_string(c, "status");
        if (!t || !st || strcmp(t, "PodGroupScheduled") != 0)
            continue;
        verdict = strcmp(st, "True") == 0;
        const char *r = json_string(c, "reason"), *m = json_string(c, "message");
        snprintf(msg, len, "%s%s%s", r ? r : "", m && *m ? ": " : "", m && *m ? m : "");
    }
    cJSON_Delete(pg);
    return verdict;
}

/* Under the Workload API: while kube-scheduler cannot place the gang, Running False with reason
 * GangUnschedulable and the scheduler's words (a pod's own reason for not fitting, else the
 * PodGroup's condition, else a pod waiting for the rest of its gang), and a Warning event when
 * it first shows. It goes once the gang is placed. Pods the scheduler holds before queueing
 * them (their PodGroup missing, fewer than minCount pods) carry no condition: nothing is said. */
static void show_gang(struct planner *pl, const struct workers_seen *w)
{
    if (podgroup_resource(pl->in->options) != &PODGROUP_WORKLOAD_API)
        return;
    const cJSON *running = mpijob_status_condition(pl->status, MPIJOB_COND_RUNNING);
    const char *had = json_string(running, "reason");
    bool showing = running && had && strcmp(had, "GangUnschedulable") == 0 &&
                   !mpijob_status_is_true(pl->status, MPIJOB_COND_RUNNING);
    bool quiet = pl->job->run_policy.suspend || mpijob_status_finished(pl->status) ||
                 mpijob_status_is_true(pl->status, MPIJOB_COND_RUNNING) || (running && had && !showing && w->stuck);
    char pg_msg[600];
    int placed = podgroup_scheduled(pl->in->podgroup.obj, pg_msg, sizeof(pg_msg));
    bool unplaced = !quiet && (w->unschedulable_pod[0] || placed == 0) && placed != 1;
    if (!unplaced) {
        if (showing)
            mpijob_status_remove_condition(pl->status, MPIJOB_COND_RUNNING);
        return;
    }
    /* A pod's own reason first; the PodGroup's when it has words; a pod waiting for its gang. */
    bool pod_reason = w->unschedulable_pod[0] && !strstr(w->unschedulable_message, GANG_WAITING_WORDS);
    bool use_pod = pod_reason || (w->unschedulable_pod[0] && !(placed == 0 && pg_msg[0]));
    const char *why = use_pod ? w->unschedulable_message : pg_msg;
    char from[300];
    if (use_pod)
        snprintf(from, sizeof(from), "pod %s", w->unschedulable_pod);
    else
        snprintf(from, sizeof(from), "PodGroup %s", pl->job->name);
    char msg[1400];
    snprintf(msg, sizeof(msg), "MPIJob %s/%s cannot start: kube-scheduler cannot place its gang of %d pods "
             "(PodGroup %s) all at once; %s: %s",
             pl->job->namespace, pl->job->name, mpijob_gang_size(pl->job, pl->in->options), pl->job->name, from,
             why[0] ? why : "Unschedulable");
    set_condition(pl, MPIJOB_COND_RUNNING, false, "GangUnschedulable", msg);
    if (!showing)
        announce(pl, "Warning", "GangUnschedulable", msg);
}

/* ---- the objects the spec wants --------------------------------------------------------- */

static void invalid_spec(struct planner *pl, const char *message);

static void want_service(struct planner *pl)
{
    const struct mpijob *job = pl->job;
    if (presence(pl, &KUBE_SERVICES, &pl->in->service, job->name) == ABSENT)
        create(pl, &KUBE_SERVICES, job->name, build_service(job, pl->in->options));
}

/* The hostfile and discover_hosts.sh follow the Running workers: the data is replaced when it
 * changed (a PUT carrying the cached resourceVersion, so a concurrent change is a Conflict). */
static void want_configmap(struct planner *pl)
{
    const struct mpijob *job = pl->job;
    const struct workers_seen *w = pl->seen;
    char *name = mpijob_configmap_name(job);
    cJSON *desired = build_configmap(job, pl->in->options, w->running, w->n_running);
    enum presence p = name ? presence(pl, &KUBE_CONFIGMAPS, &pl->in->configmap, name) : PENDING;
    if (!name || !desired) {
        pl->nomem = true;
    } else if (p == ABSENT) {
        create(pl, &KUBE_CONFIGMAPS, name, desired);
        desired = NULL;
    } else if (p == OURS) {
        cJSON *have = kube_object_parse(pl->in->configmap.obj);
        cJSON *want_data = cJSON_GetObjectItemCaseSensitive(desired, "data");
        pl->nomem = pl->nomem || !have || !want_data;
        if (have && want_data && !cJSON_Compare(cJSON_GetObjectItemCaseSensitive(have, "data"), want_data, true)) {
            cJSON_DetachItemViaPointer(desired, want_data);
            cJSON_DeleteItemFromObjectCaseSensitive(have, "data");
            cJSON_AddItemToObject(have, "data", want_data);
            struct action *a = add(pl, &pl->wanted, ACTION_REPLACE, &KUBE_CONFIGMAPS, name);
            if (a) {
                a->object = have;
                have = NULL;
            }
        }
        cJSON_Delete(have);
    }
    cJSON_Delete(desired);
    free(name);
}

/* The SSH keys: a key pair per job, made once, when the Secret has to be created. */
static void want_secret(struct planner *pl)
{
    const struct mpijob *job = pl->job;
    char *name = mpijob_secret_name(job);
    if (name && presence(pl, &KUBE_SECRETS, &pl->in->secret, name) == ABSENT) {
        struct ssh_keypair keys = {0};
        cJSON *secret = ssh_keypair_generate(&keys) == 0 ? build_secret(job, pl->in->options, &keys) : NULL;
        ssh_keypair_free(&keys);
        create(pl, &KUBE_SECRETS, name, secret);
    }
    pl->nomem = pl->nomem || !name;
    free(name);
}

/* The fields of a PodGroup's spec the operator sets, merge-patched to what the job now says. */
static char *podgroup_patch(const cJSON *have, const cJSON *want)
{
    static const char *const ours[] = {"minMember", "minResources", "queue", "priorityClassName",
                                       "scheduleTimeoutSeconds", NULL};
    const cJSON *have_spec = cJSON_GetObjectItemCaseSensitive(have, "spec");
    const cJSON *want_spec = cJSON_GetObjectItemCaseSensitive(want, "spec");
    cJSON *patch = cJSON_CreateObject();
    cJSON *spec = patch ? cJSON_AddObjectToObject(patch, "spec") : NULL;
    bool differ = false;
    for (int i = 0; spec && ours[i]; i++) {
        const cJSON *h = cJSON_GetObjectItemCaseSensitive(have_spec, ours[i]);
        const cJSON *w = cJSON_GetObjectItemCaseSensitive(want_spec, ours[i]);
        if (w && !(h && cJSON_Compare(h, w, true))) {
            cJSON_AddItemToObject(spec, ours[i], cJSON_Duplicate(w, true));
            differ = true;
        } else if (!w && h) {
            cJSON_AddNullToObject(spec, ours[i]);
            differ = true;
        }
    }
    char *body = differ ? cJSON_PrintUnformatted(patch) : NULL;
    cJSON_Delete(patch);
    return body;
}

/* The PodGroup gathers the pods for gang scheduling, so it comes before them; it follows
 * schedulingPolicy when that changes (fields a scheduler wrote are left alone); suspend
 * removes it. */
/* --gang-scheduling workload: the Workload first (the API server's PodGroupWorkloadExists
 * admission refuses a PodGroup whose Workload is missing), then the PodGroup made from its
 * template, then the pods naming it. Both objects are immutable: a gang keeps the size and
 * topology it was made with until the job is suspended (both go) and resumed (both are made
 * again, once the old PodGroup is gone: its finalizer holds it while a pod still names it, and a
 * new pod naming it meanwhile would join the old gang). */
static void want_workload_gang(struct planner *pl)
{
    const struct mpijob *job = pl->job;
    const struct plan_object *pgo = &pl->in->podgroup, *wlo = &pl->in->workload;
    if (job->run_policy.suspend) {
        if (owned(pl, pgo->obj) && !pgo->obj->deleting)
            delete(pl, &pl->wanted, &PODGROUP_WORKLOAD_API, &(struct kube_object){.name = pgo->obj->name});
        if (owned(pl, wlo->obj) && !wlo->obj->deleting)
            delete(pl, &pl->wanted, &WORKLOADS, &(struct kube_object){.name = wlo->obj->name});
        return;
    }
    enum presence w = presence(pl, &WORKLOADS, wlo, job->name);
    if (w == FOREIGN)
        return;
    enum presence p = presence(pl, &PODGROUP_WORKLOAD_API, pgo, job->name);
    if (p == FOREIGN)
        return;
    if ((w == OURS && wlo->obj->deleting) || (p == OURS && pgo->obj->deleting)) {
        /* A suspend's gang, still going: no pod is made until it is gone (its deletion
         * brings this job back; the requeue is a safety net). */
        pl->blocked = true;
        if (!pl->requeue_after_ms || pl->requeue_after_ms > 5000)
            pl->requeue_after_ms = 5000;
        return;
    }
    if (w == ABSENT)
        create_alone(pl, &WORKLOADS, job->name, build_workload(job, pl->in->options));
    if (p == ABSENT)
        create_alone(pl, &PODGROUP_WORKLOAD_API, job->name, build_podgroup(job, pl->in->options));
}

static void want_podgroup(struct planner *pl)
{
    const struct mpijob *job = pl->job;
    const struct kube_resource *pg = podgroup_resource(pl->in->options);
    if (job->placement.topology_key && !workload_resource(pl->in->options)) {
        invalid_spec(pl, "spec.placement.topologyKey needs gang scheduling by kube-scheduler's Workload API "
                         "(the operator's --gang-scheduling workload, Kubernetes 1.36); this operator runs "
                         "without it, so the gang could not be kept within one topology domain");
        return;
    }
    if (!pg || !pl->in->gang)
        return;
    if (pg == &PODGROUP_WORKLOAD_API) {
        if (pl->in->workloads)
            want_workload_gang(pl);
        return;
    }
    const struct plan_object *po = &pl->in->podgroup;
    if (job->run_policy.suspend) {
        if (owned(pl, po->obj))
            delete(pl, &pl->wanted, pg, &(struct kube_object){.name = po->obj->name});
        return;
    }
    enum presence p = presence(pl, pg, po, job->name);
    if (p != ABSENT && p != OURS)
        return;
    cJSON *desired = build_podgroup(job, pl->in->options);
    if (p == ABSENT) {
        create_alone(pl, pg, job->name, desired);
        return;
    }
    cJSON *have = kube_object_parse(po->obj);
    char *body = have && desired ? podgroup_patch(have, desired) : NULL;
    pl->nomem = pl->nomem || !have || !desired;
    if (body)
        patch(pl, pg, job->name, KUBE_PATCH_MERGE, NULL, body);
    cJSON_Delete(have);
    cJSON_Delete(desired);
}

/* A template the builders cannot make into a pod (a field of a type they cannot edit; the CRD
 * schema refuses those, a server without it may not) fails the job as an invalid spec would:
 * no retry can change it. */
static void invalid_spec(struct planner *pl, const char *message)
{
    if (set_condition(pl, MPIJOB_COND_FAILED, true, "InvalidSpec", message))
        announce(pl, "Warning", "InvalidSpec", message);
    if (!cJSON_GetObjectItemCaseSensitive(pl->status, "completionTime"))
        json_set_string(pl->status, "completionTime", pl->now);
    pl->blocked = true;
}

static void unusable_template(struct planner *pl, const char *role)
{
    char msg[600];
    snprintf(msg, sizeof(msg),
             "MPIJob %s/%s has failed: spec.mpiReplicaSpecs.%s.template cannot be made into a pod: a field "
             "has a type the operator cannot edit",
             pl->job->namespace, pl->job->name, role);
    invalid_spec(pl, msg);
}

/* The built object in *out, or a reason to stop: out of memory, or an unusable template. */
static bool built(struct planner *pl, int rc, const char *role)
{
    if (rc == MPIJOB_EINVALID)
        unusable_template(pl, role);
    else if (rc < 0)
        pl->nomem = true;
    return rc == 0;
}

/* Workers: while suspended every worker goes. Otherwise those at indexes >= replicas go (the
 * job was scaled down), and the missing ones are created. */
static void want_workers(struct planner *pl)
{
    const struct mpijob *job = pl->job;
    bool suspended = job->run_policy.suspend;
    const struct kube_object **going = calloc(pl->in->n_owned_pods + 1, sizeof(*going));
    size_t n = 0;
    for (size_t i = 0; going && i < pl->in->n_owned_pods; i++) {
        const struct kube_object *o = pl->in->owned_pods[i];
        long index = hostfile_worker_index(job->name, o->name);
        if (!owned_pod_leaving(pl, i) && (suspended || index >= job->worker.replicas))
            going[n++] = o;
    }
    pl->nomem = pl->nomem || !going;
    if (suspended) /* every worker goes: all of them in one request */
        delete_workers(pl, &pl->wanted, going, n, NULL);
    else           /* scaled down: those at the indexes above, each by name */
        for (size_t i = 0; i < n; i++)
            delete(pl, &pl->wanted, &KUBE_PODS, going[i]);
    free(going);
    for (int i = 0; i < job->worker.replicas && !suspended && !pl->blocked; i++) {
        const struct plan_object *w = &pl->in->workers[i];
        char *name = mpijob_worker_name(job, i);
        if (name && presence(pl, &KUBE_PODS, w, name) == ABSENT) {
            struct transport_report report = {0};
            cJSON *pod = NULL;
            if (built(pl, build_worker_pod(job, pl->in->options, i, &report, &pod), "Worker"))
                create(pl, &KUBE_PODS, name, pod);
            transport_report_free(&report);
        }
        pl->nomem = pl->nomem || !name;
        free(name);
    }
}

/* One JSON Patch operation making the launcher Job's template field at `dotted` (under
 * spec.template) what the MPIJob's Launcher template now says: add (which replaces) or remove. */
static int sync_field(cJSON *ops, const cJSON *have_tmpl, const cJSON *want_tmpl, const char *dotted)
{
    const cJSON *have = json_path(have_tmpl, dotted), *want = json_path(want_tmpl, dotted);
    if ((!have && !want) || (have && want && cJSON_Compare(have, want, true)))
        return 0;
    char path[128];
    snprintf(path, sizeof(path), "/spec/template/%s", dotted);
    for (char *c = path; *c; c++)
        *c = *c == '.' ? '/' : *c;
    cJSON *op = cJSON_CreateObject();
    if (!op || !cJSON_AddStringToObject(op, "op", want ? "add" : "remove") ||
        !cJSON_AddStringToObject(op, "path", path) ||
        (want && !cJSON_AddItemToObject(op, "value", cJSON_Duplicate(want, true)))) {
        cJSON_Delete(op);
        return KUBE_ENOMEM;
    }
    cJSON_AddItemToArray(ops, op);
    return 0;
}

/* Labels and annotations of the wanted template are merged over the Job's: the Job API adds
 * labels of its own that its template must keep (controller-uid, job-name and their
 * batch.kubernetes.io/ spellings). */
static int merge_template_maps(cJSON *want, const cJSON *have)
{
    cJSON *meta = cJSON_GetObjectItemCaseSensitive(want, "metadata");
    if (!meta && !(meta = cJSON_AddObjectToObject(want, "metadata")))
        return KUBE_ENOMEM;
    static const char *const maps[] = {"labels", "annotations"};
    for (size_t m = 0; m < 2; m++) {
        const cJSON *theirs = json_path(have, m ? "metadata.annotations" : "metadata.labels");
        cJSON *mine = cJSON_GetObjectItemCaseSensitive(meta, maps[m]);
        if (!mine && theirs && !(mine = cJSON_AddObjectToObject(meta, maps[m])))
            return KUBE_ENOMEM;
        const cJSON *l;
        cJSON_ArrayForEach(l, theirs) {
            if (!cJSON_GetObjectItemCaseSensitive(mine, l->string))
                cJSON_AddItemToObject(mine, l->string, cJSON_Duplicate(l, true));
        }
    }
    return 0;
}

/* Before a suspended launcher Job starts again: the scheduling directives a queue manager (Kueue)
 * may have changed on the suspended MPIJob's Launcher template (nodeSelector, tolerations,
 * affinity, schedulingGates, labels, annotations) are copied into the Job's template, as the
 * reference operator does on every unsuspend. A JSON Patch, or NULL when nothing differs. */
static char *scheduling_directives_patch(struct planner *pl, const cJSON *lj)
{
    struct transport_report report = {0};
    cJSON *want_job = NULL;
    bool ok = built(pl, build_launcher_job(pl->job, pl->in->options, &report, &want_job), "Launcher");
    transport_report_free(&report);
    if (!ok)
        return NULL;
    const cJSON *have = json_path(lj, "spec.template");
    cJSON *want = cJSON_DetachItemFromObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(want_job, "spec"),
                                                          "template");
    cJSON_Delete(want_job);
    cJSON *ops = cJSON_CreateArray();
    int rc = want && ops ? merge_template_maps(want, have) : KUBE_ENOMEM;
    static const char *const fields[] = {"metadata.labels", "metadata.annotations", "spec.nodeSelector",
                                         "spec.tolerations", "spec.affinity",       "spec.schedulingGates"};
    for (size_t i = 0; rc == 0 && i < sizeof(fields) / sizeof(fields[0]); i++)
        rc = sync_field(ops, have, want, fields[i]);
    char *body = rc == 0 && cJSON_GetArraySize(ops) > 0 ? cJSON_PrintUnformatted(ops) : NULL;
    pl->nomem = pl->nomem || rc < 0;
    cJSON_Delete(ops);
    cJSON_Delete(want);
    return body;
}

/* The launcher Job follows runPolicy.suspend. Resuming waits for Ready workers under
 * WaitForWorkersReady, and first clears the Job's status.startTime through /status: a real
 * kube-apiserver refuses to unsuspend a Job that keeps the startTime of its earlier run. */
static void mirror_suspend(struct planner *pl, bool may_start)
{
    const struct kube_object *launcher = pl->in->launcher.obj;
    cJSON *lj = kube_object_parse(launcher);
    if (!lj) {
        pl->nomem = true;
        return;
    }
    bool suspend = pl->job->run_policy.suspend, is_suspended = json_bool(lj, "spec.suspend", false);
    if (suspend && !is_suspended) {
        patch(pl, &KUBE_JOBS, launcher->name, KUBE_PATCH_MERGE, NULL, strdup("{\"spec\":{\"suspend\":true}}"));
    } else if (!suspend && is_suspended && may_start) {
        if (json_path(lj, "status.startTime"))
            patch(pl, &KUBE_JOBS, launcher->name, KUBE_PATCH_MERGE, "status",
                  strdup("{\"status\":{\"startTime\":null}}"));
        char *directives = scheduling_directives_patch(pl, lj);
        if (directives)
            patch(pl, &KUBE_JOBS, launcher->name, KUBE_PATCH_JSON, NULL, directives);
        if (!pl->blocked)
            patch(pl, &KUBE_JOBS, launcher->name, KUBE_PATCH_MERGE, NULL, strdup("{\"spec\":{\"suspend\":false}}"));
    }
    cJSON_Delete(lj);
}

/* The launcher: at once, or when every worker is Ready under WaitForWorkersReady. What the
 * operator could not carry into its environment is said in events just before it is made. */
static void want_launcher(struct planner *pl)
{
    const struct mpijob *job = pl->job;
    char *name = mpijob_launcher_name(job);
    enum presence p = name ? presence(pl, &KUBE_JOBS, &pl->in->launcher, name) : PENDING;
    bool may_start = job->launcher_creation_policy == LAUNCHER_AT_STARTUP || pl->all_ready;
    if (p == OURS) {
        mirror_suspend(pl, may_start);
    } else if (p == ABSENT && may_start) {
        struct transport_report report = {0};
        cJSON *lj = NULL;
        if (!built(pl, build_launcher_job(job, pl->in->options, &report, &lj), "Launcher")) {
            transport_report_free(&report);
            free(name);
            return;
        }
        for (size_t i = 0; i < report.n_conflicts; i++)
            event(pl, &pl->wanted, "Warning", "TransportConflict", report.conflicts[i]);
        char *unforwarded = transport_unforwarded_message(&report);
        if (unforwarded)
            event(pl, &pl->wanted, "Warning", "TransportNotForwarded", unforwarded);
        free(unforwarded);
        transport_report_free(&report);
        create_alone(pl, &KUBE_JOBS, name, lj);
    }
    pl->nomem = pl->nomem || !name;
    free(name);
}

/* In the order SPEC.md gives. */
static void want_objects(struct planner *pl)
{
    void (*const steps[])(struct planner *) = {want_service, want_configmap, want_secret,
                                               want_podgroup, want_workers,
                                               want_launcher};
    for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]) && !pl->blocked && !pl->nomem; i++)
        steps[i](pl);
}

/* ---- what the launcher reported ------------------------------------------------------------ */

/* When a pod ended, for picking the latest: its last container's finish, else its start. */
static void pod_ended_at(const cJSON *pod, char *out, size_t len)
{
    const char *latest = NULL;
    const cJSON *cs;
    cJSON_ArrayForEach(cs, json_path(pod, "status.containerStatuses")) {
        const char *at = json_string(json_path(cs, "state.terminated"), "finishedAt");
        if (at && (!latest || strcmp(at, latest) > 0))
            latest = at;
    }
    if (!latest)
        latest = json_string(pod, "status.startTime");
    if (!latest)
        latest = json_string(pod, "metadata.creationTimestamp");
    snprintf(out, len, "%s", latest ? latest : "");
}

const struct kube_object *plan_summary_source(const struct plan_input *in, const char *read_uid)
{
    const struct kube_object *source = NULL;
    char source_at[40] = "", at[40];
    for (size_t i = 0; i < in->n_launcher_pods; i++) {
        const struct kube_object *o = in->launcher_pods[i];
        /* Runs at every reconcile: a pod that has not ended is passed over without parsing it. */
        if (!strstr(o->json, "\"Succeeded\"") && !strstr(o->json, "\"Failed\""))
            continue;
        cJSON *pod = kube_object_parse(o);
        enum pod_state st = pod ? pod_state_of(pod) : POD_UNKNOWN;
        if (st == POD_SUCCEEDED || st == POD_FAILED) {
            pod_ended_at(pod, at, sizeof(at));
            if (!source || strcmp(at, source_at) > 0 || (strcmp(at, source_at) == 0 && strcmp(o->name, source->name) > 0)) {
                source = o;
                snprintf(source_at, sizeof(source_at), "%s", at);
            }
        }
        cJSON_Delete(pod);
    }
    if (!source)
        return NULL;
    /* Long ended when first seen (an operator started again among many finished jobs): not read,
     * so that a restart does not read every old launcher's log, nor wait on their lost nodes. */
    time_t ended;
    if (clock_parse_rfc3339(source_at, &ended) == 0 && in->now - ended > LAUNCHER_LOG_MAX_AGE_S)
        return NULL;
    const char *had = json_string(in->status, "launcherSummary.pod");
    if ((had && strcmp(had, source->name) == 0) || (read_uid && source->uid && strcmp(read_uid, source->uid) == 0))
        return NULL;
    return source;
}

/* status.launcherSummary from the log read for this reconcile; when the transport used is not
 * the one asked for, TransportMismatch and a Warning. A log that could not be read, or whose
 * summary line is broken, changes no status and gets one Normal event (the log is not read
 * again); a log without a summary line (a launcher not running mpijob-worker) gets nothing. */
static void plan_summary(struct planner *pl)
{
    const struct summary_read *r = pl->in->summary;
    char msg[1200];
    if (!r || !r->pod)
        return;
    if (r->unreadable) {
        snprintf(msg, sizeof(msg), "cannot read the log of launcher pod %s for its training summary: %s", r->pod,
                 r->message);
        announce(pl, "Normal", "LauncherLogUnreadable", msg);
        return;
    }
    if (r->found == SUMMARY_BROKEN) {
        snprintf(msg, sizeof(msg), "the training summary in the log of launcher pod %s cannot be read: %s", r->pod,
                 r->message);
        announce(pl, "Normal", "LauncherSummaryUnreadable", msg);
        return;
    }
    if (r->found != SUMMARY_FOUND)
        return;
    cJSON *summary = summary_to_status(&r->summary, r->pod);
    if (!summary) {
        pl->nomem = true;
        return;
    }
    cJSON_DeleteItemFromObjectCaseSensitive(pl->status, "launcherSummary");
    cJSON_AddItemToObject(pl->status, "launcherSummary", summary);
    summary_describe(&r->summary, r->pod, msg, sizeof(msg));
    announce(pl, "Normal", "TrainingSummary", msg);
    if (summary_mismatch(pl->job->networking.transport, r->summary.transport, r->pod, msg, sizeof(msg))) {
        set_condition(pl, MPIJOB_COND_TRANSPORT_MISMATCH, true, "TransportMismatch", msg);
        announce(pl, "Warning", "TransportMismatch", msg);
    } else if (mpijob_status_condition(pl->status, MPIJOB_COND_TRANSPORT_MISMATCH)) {
        /* an earlier launcher run's mismatch: this run's transport is the one asked for */
        snprintf(msg, sizeof(msg), "launcher pod %s reports transport %s, as spec.networking.transport (%s) asks",
                 r->pod, r->summary.transport, transport_name(pl->job->networking.transport));
        set_condition(pl, MPIJOB_COND_TRANSPORT_MISMATCH, false, "TransportAsRequested", msg);
    }
}

/* ---- the whole plan ------------------------------------------------------------------------ */

/* A create or update the server refused, while the plan still wants that object, stays in status
 * as ReplicaFailure (Kubernetes' own ReplicaSet convention: True, reason FailedCreate, the
 * server's message) until the object is made; the STATE column shows it meanwhile. */
static bool writes_object(const struct action *actions, size_t n, const char *kind, const char *name)
{
    for (size_t i = 0; i < n; i++) {
        const struct action *a = &actions[i];
        if ((a->type == ACTION_CREATE || a->type == ACTION_REPLACE || a->type == ACTION_PATCH) &&
            strcmp(a->resource->kind, kind) == 0 && strcmp(a->name, name) == 0)
            return true;
    }
    return false;
}

bool plan_writes(const struct plan *p, const char *kind, const char *name)
{
    return writes_object(p->actions, p->n, kind, name);
}

static void show_refusal(struct planner *pl)
{
    const struct refusal *r = pl->in->refusal;
    if (!r || !writes_object(pl->wanted.a, pl->wanted.n, r->kind, r->name)) {
        mpijob_status_remove_condition(pl->status, MPIJOB_COND_REPLICA_FAILURE);
        return;
    }
    char msg[1500];
    snprintf(msg, sizeof(msg), "cannot create %s %s: %s", r->kind, r->name, r->message);
    set_condition(pl, MPIJOB_COND_REPLICA_FAILURE, true, "FailedCreate", msg);
}

/* The status as a running (not yet finished) job's pods and launcher show it. */
static void plan_running(struct planner *pl, struct workers_seen *w)
{
    struct replica_counts lc = {0};
    scan_workers(pl, w);
    if (!mpijob_status_finished(pl->status))
        plan_launcher_state(pl, w, &lc);
    show_stuck_pod(pl, w);
    show_gang(pl, w);
    if (mpijob_status_set_replicas(pl->status, "Launcher", &lc) < 0)
        pl->nomem = true;
    if (mpijob_status_finished(pl->status)) {
        /* finished by this reconcile: the pods cleaned after the status that says so */
        set_finished_worker_status(pl);
        clean_pods(pl);
    } else {
        set_worker_status(pl, &w->counts);
        want_objects(pl);
    }
}

/* Moves the actions of l to the end of the plan. */
static void append_list(struct planner *pl, struct plan *out, struct list *l)
{
    if (!reserve(&out->actions, &out->cap, out->n, l->n)) {
        pl->nomem = true; /* l keeps its actions; plan_job frees them */
        return;
    }
    if (l->n)
        memcpy(out->actions + out->n, l->a, l->n * sizeof(*l->a));
    out->n += l->n;
    free(l->a);
    memset(l, 0, sizeof(*l));
}

/* The new status, written first when it changed, then the lists in plan order. */
static void assemble(struct planner *pl, struct plan *out)
{
    show_refusal(pl);
    cJSON_DeleteItemFromObjectCaseSensitive(pl->status, "observedGeneration");
    cJSON_AddNumberToObject(pl->status, "observedGeneration", (double)pl->in->generation);
    mpijob_status_set_state(pl->status);
    out->status = pl->status;
    pl->status = NULL;
    if (!mpijob_status_equal(pl->in->status, out->status)) {
        json_set_string(out->status, "lastReconcileTime", pl->now);
        struct list head = {0};
        add(pl, &head, ACTION_WRITE_STATUS, NULL, NULL);
        append_list(pl, out, &head);
    }
    if (!mpijob_status_finished(out->status))
        append_list(pl, out, &pl->restarts);
    append_list(pl, out, &pl->announced);
    append_list(pl, out, &pl->decided);
    append_list(pl, out, &pl->wanted);
    out->requeue_after_ms = pl->requeue_after_ms;
}

int plan_job(const struct plan_input *in, struct plan *out)
{
    memset(out, 0, sizeof(*out));
    struct planner pl = {.in = in, .job = in->job};
    clock_rfc3339(in->now, pl.now);
    pl.status = in->status ? cJSON_Duplicate(in->status, true) : cJSON_CreateObject();
    int workers = in->job->worker.replicas > 0 ? in->job->worker.replicas : 0;
    struct workers_seen w = {.running = calloc((size_t)workers + 1, sizeof(char *))};
    pl.seen = &w;
    if (!pl.status || !w.running) {
        pl.nomem = true;
    } else if (mpijob_status_finished(pl.status)) {
        plan_finished(&pl);
    } else {
        plan_lifecycle(&pl);
        if (!plan_deadline(&pl))
            plan_running(&pl, &w);
    }
    if (!pl.nomem)
        plan_summary(&pl);
    if (!pl.nomem)
        assemble(&pl, out);
    free(w.running);
    cJSON_Delete(pl.status);
    list_clear(&pl.restarts);
    list_clear(&pl.announced);
    list_clear(&pl.decided);
    list_clear(&pl.wanted);
    out->nomem = pl.nomem;
    if (pl.nomem) {
        plan_free(out);
        return KUBE_ENOMEM;
    }
    return 0;
}

int plan_invalid(const cJSON *status, long long generation, time_t now, const char *message, struct plan *out)
{
    memset(out, 0, sizeof(*out));
    struct plan_input in = {.status = status, .generation = generation, .now = now};
    struct planner pl = {.in = &in};
    clock_rfc3339(now, pl.now);
    pl.status = status ? cJSON_Duplicate(status, true) : cJSON_CreateObject();
    if (!pl.status)
        return KUBE_ENOMEM;
    invalid_spec(&pl, message);
    if (!pl.nomem)
        assemble(&pl, out);
    cJSON_Delete(pl.status);
    list_clear(&pl.announced);
    if (pl.nomem) {
        plan_free(out);
        return KUBE_ENOMEM;
    }
    return 0;
}

void plan_free(struct plan *p)
{
    for (size_t i = 0; i < p->n; i++)
        action_clear(&p->actions[i]);
    free(p->actions);
    cJSON_Delete(p->status);
    memset(p, 0, sizeof(*p));
}

void action_describe(const struct action *a, char *buf, size_t len)
{
    switch (a->type) {
    case ACTION_WRITE_STATUS: snprintf(buf, len, "write status"); break;
    case ACTION_EVENT: snprintf(buf, len, "event %s %s", a->event_type, a->reason); break;
    case ACTION_CREATE:
        snprintf(buf, len, "create %s %s%s", a->resource->kind, a->name, a->alone ? " alone" : "");
        break;
    case ACTION_REPLACE: snprintf(buf, len, "replace %s %s", a->resource->kind, a->name); break;
    case ACTION_PATCH:
        snprintf(buf, len, "patch %s %s %s", a->resource->kind, a->name, a->subresource ? a->subresource : "spec");
        break;
    case ACTION_DELETE: snprintf(buf, len, "delete %s %s", a->resource->kind, a->name); break;
    case ACTION_DELETE_COLLECTION:
        snprintf(buf, len, "delete %ss -l %s%s%s", a->resource->kind, a->selector,
                 a->field_selector ? " --field-selector " : "", a->field_selector ? a->field_selector : "");
        break;
    }
}
