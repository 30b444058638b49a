#include "mpijob/reconcile.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpijob/sshkeys.h"
#include "mpijob/status.h"
#include "util/clock.h"
#include "util/json.h"
#include "util/log.h"
#include "util/strmap.h"

#define RESOURCE_EXISTS (-2100) /* an object with our name that the job does not control */
#define EXPECTATION_TTL_MS 30000   /* after this, a creation the cache never showed is retried */

struct expectations {
    pthread_mutex_t lock;
    struct strmap *created; /* "plural/ns/name" -> (uintptr_t) monotonic ms of the creation */
    struct strmap *written; /* "ns/name" -> struct superseded: our last status write of an MPIJob */
};

/* The resourceVersion an MPIJob had when this controller wrote its status: while the cache still
 * shows it, the cache has not caught up with that write, and a reconcile would work from the
 * old status and have its own write refused with a Conflict. The write's watch event brings the
 * key back. */
struct superseded {
    uint64_t at; /* monotonic ms of the write */
    char rv[];
};

struct expectations *expectations_new(void)
{
    struct expectations *e = calloc(1, sizeof(*e));
    if (!e)
        return NULL;
    pthread_mutex_init(&e->lock, NULL);
    e->created = strmap_new(NULL);
    e->written = strmap_new(free);
    if (!e->created || !e->written) {
        strmap_free(e->created);
        strmap_free(e->written);
        free(e);
        return NULL;
    }
    return e;
}

void expectations_free(struct expectations *e)
{
    if (!e)
        return;
    strmap_free(e->created);
    strmap_free(e->written);
    pthread_mutex_destroy(&e->lock);
    free(e);
}

static void expect_key(char *key, size_t len, const struct kube_resource *res, const char *ns, const char *name)
{
    snprintf(key, len, "%s/%s/%s", res->plural, ns, name);
}

static void expect_created(struct expectations *e, const struct kube_resource *res, const char *ns, const char *name)
{
    if (!e)
        return;
    char key[512];
    expect_key(key, sizeof(key), res, ns, name);
    pthread_mutex_lock(&e->lock);
    strmap_put(e->created, key, (void *)(uintptr_t)clock_now_ms());
    pthread_mutex_unlock(&e->lock);
}

/* True while a creation of ours is on its way into the cache. */
static bool expect_pending(struct expectations *e, const struct kube_resource *res, const char *ns, const char *name)
{
    if (!e)
        return false;
    char key[512];
    expect_key(key, sizeof(key), res, ns, name);
    pthread_mutex_lock(&e->lock);
    uintptr_t at = (uintptr_t)strmap_get(e->created, key);
    bool pending = at && clock_now_ms() - at < EXPECTATION_TTL_MS;
    if (at && !pending)
        strmap_remove(e->created, key);
    pthread_mutex_unlock(&e->lock);
    return pending;
}

/* A failed worker whose replacement is already in status (by uid), so that a delete retried
 * after an error is not counted a second time. Kept for the expectation TTL. */
static bool failure_counted(struct expectations *e, const char *uid, bool mark)
{
    if (!e)
        return false;
    char key[128];
    snprintf(key, sizeof(key), "failed/%s", uid);
    pthread_mutex_lock(&e->lock);
    uintptr_t at = (uintptr_t)strmap_get(e->created, key);
    bool counted = at && clock_now_ms() - at < EXPECTATION_TTL_MS;
    if (mark)
        strmap_put(e->created, key, (void *)(uintptr_t)clock_now_ms());
    pthread_mutex_unlock(&e->lock);
    return counted;
}

/* The cache shows the object: the expectation is met. */
static void expect_seen(struct expectations *e, const struct kube_resource *res, const char *ns, const char *name)
{
    if (!e)
        return;
    char key[512];
    expect_key(key, sizeof(key), res, ns, name);
    pthread_mutex_lock(&e->lock);
    strmap_remove(e->created, key);
    pthread_mutex_unlock(&e->lock);
}

/* Our status write replaced resourceVersion old_rv of MPIJob key ("ns/name"). */
static void status_written(struct expectations *e, const char *key, const char *old_rv)
{
    if (!e || !old_rv || !*old_rv)
        return;
    size_t n = strlen(old_rv) + 1;
    struct superseded *s = malloc(sizeof(*s) + n);
    if (!s)
        return; /* the worst that follows is a Conflict */
    s->at = clock_now_ms();
    memcpy(s->rv, old_rv, n);
    pthread_mutex_lock(&e->lock);
    if (strmap_put(e->written, key, s) < 0)
        free(s);
    pthread_mutex_unlock(&e->lock);
}

/* True while the cache shows the MPIJob as it was before our last status write (rv NULL: the
 * job is gone, and so is the record). */
static bool status_behind(struct expectations *e, const char *key, const char *rv)
{
    if (!e)
        return false;
    pthread_mutex_lock(&e->lock);
    const struct superseded *s = strmap_get(e->written, key);
    bool behind = s && rv && strcmp(s->rv, rv) == 0 && clock_now_ms() - s->at < EXPECTATION_TTL_MS;
    if (s && !behind)
        strmap_remove(e->written, key);
    pthread_mutex_unlock(&e->lock);
    return behind;
}

struct kube_object *cache_get(const struct cache_set *set, const char *ns, const char *name)
{
    for (size_t i = 0; i < set->count; i++)
        if (!set->namespaces[i] || strcmp(set->namespaces[i], ns) == 0)
            return informer_get(set->informers[i], ns, name);
    return NULL;
}

static int cache_list_by_owner(const struct cache_set *set, const char *ns, const char *uid,
                               struct kube_object ***out)
{
    for (size_t i = 0; i < set->count; i++)
        if (!set->namespaces[i] || strcmp(set->namespaces[i], ns) == 0)
            return informer_list_by_owner(set->informers[i], uid, out);
    *out = NULL;
    return 0;
}

/* Everything one reconcile works with. */
struct run {
    struct reconcile_ctx *ctx;
    struct mpijob *job;
    cJSON *tree;   /* the MPIJob as cached (private copy) */
    cJSON *status; /* the status being computed (owned by tree) */
    char now[21];
    time_t now_t;
    struct reconcile_result *result;
    struct event_target target;
    /* Deletions that carry out a status decision: done only once that status is written, so a
     * write lost to a Conflict never leaves a deletion without its record. */
    struct {
        char uid[64], name[256];
    } failed[32];
    int n_failed;
    bool clean_after_write;
    bool stop_launcher_after_write;
    /* Events that announce a status transition: recorded only once that status is written. A
     * write lost to a Conflict is decided again by the retry, which would announce it twice. */
    struct {
        const char *type, *reason;
        char *message;
    } announce[8];
    int n_announce;
};

static void requeue_in(struct run *r, long long seconds)
{
    uint64_t ms = seconds > 0 ? (uint64_t)seconds * 1000 : 1;
    if (!r->result->requeue_after_ms || ms < r->result->requeue_after_ms)
        r->result->requeue_after_ms = ms;
}

/* Seconds since the RFC 3339 time in status field `name`, or -1 when unset or unreadable. */
static long long seconds_since(struct run *r, const char *name)
{
    const char *t = json_string(r->status, name);
    time_t then;
    if (!t || clock_parse_rfc3339(t, &then) < 0)
        return -1;
    return (long long)(r->now_t - then);
}

static void event(struct run *r, const char *type, const char *reason, const char *fmt, const char *arg)
{
    if (r->ctx->events)
        event_record(r->ctx->events, &r->target, type, reason, fmt, arg);
}

/* An event for a status transition, held until that status is written (struct run). type and
 * reason are string literals. */
static void announce(struct run *r, const char *type, const char *reason, const char *message)
{
    if (!r->ctx->events || r->n_announce == (int)(sizeof(r->announce) / sizeof(r->announce[0])))
        return;
    /* One line: kubectl lists events as a table. The condition keeps the lines. */
    size_t lines = 0;
    for (const char *p = message; *p; p++)
        lines += *p == '\n';
    char *m = malloc(strlen(message) + lines + 1), *o = m;
    if (!m)
        return;
    for (const char *p = message; *p; p++) {
        if (*p != '\n') {
            *o++ = *p;
        } else if (p[1]) {
            *o++ = ';';
            *o++ = ' ';
        }
    }
    *o = '\0';
    r->announce[r->n_announce].type = type;
    r->announce[r->n_announce].reason = reason;
    r->announce[r->n_announce++].message = m;
}

/* Records the held events when written is true, then drops them. */
static void flush_announcements(struct run *r, bool written)
{
    for (int i = 0; i < r->n_announce; i++) {
        if (written)
            event_record(r->ctx->events, &r->target, r->announce[i].type, r->announce[i].reason, "%s",
                         r->announce[i].message);
        free(r->announce[i].message);
    }
    r->n_announce = 0;
}

static bool owned_by_job(const struct kube_object *o, const struct mpijob *job)
{
    return o->owner_uid && strcmp(o->owner_uid, job->uid) == 0;
}

/* Creates desired (which it frees) unless an object of that name exists. Sets *existing to
 * the cached object (a reference) when there is one. RESOURCE_EXISTS when the name is taken
 * by an object the job does not control. */
static int ensure(struct run *r, const struct kube_resource *res, const struct cache_set *cache,
                  const char *name, cJSON *desired, struct kube_object **existing)
{
    struct kube_object *o = cache_get(cache, r->job->namespace, name);
    if (existing)
        *existing = NULL;
    if (o)
        expect_seen(r->ctx->expect, res, r->job->namespace, name);
    if (!o && expect_pending(r->ctx->expect, res, r->job->namespace, name)) {
        cJSON_Delete(desired); /* created by us a moment ago; the cache has not caught up */
        return 0;
    }
    if (o) {
        cJSON_Delete(desired);
        if (!owned_by_job(o, r->job)) {
            char what[300];
            snprintf(what, sizeof(what), "%s %s exists and is not controlled by this MPIJob", res->kind, name);
            log_warn("object exists and is not ours", "job=%s/%s object=%s", r->job->namespace, r->job->name, name);
            if (mpijob_status_set_condition(r->status, MPIJOB_COND_CREATED, false, "ErrResourceExists", what,
                                            r->now) > 0)
                announce(r, "Warning", "ErrResourceExists", what);
            kube_object_unref(o);
            return RESOURCE_EXISTS;
        }
        if (existing)
            *existing = o;
        else
            kube_object_unref(o);
        return 0;
    }
    if (!desired)
        return KUBE_ENOMEM;
    struct kube_status st = {.retry_after_s = -1};
    int rc = kube_create(r->ctx->client, res, r->job->namespace, desired, NULL, &st);
    cJSON_Delete(desired);
    if (rc == KUBE_EALREADYEXISTS)
        rc = 0; /* created earlier; the cache has not caught up yet */
    if (rc == 0)
        expect_created(r->ctx->expect, res, r->job->namespace, name);
    if (rc < 0)
        log_warn("create failed", "job=%s/%s kind=%s name=%s error=\"%s\" message=\"%s\"", r->job->namespace,
                 r->job->name, res->kind, name, kube_strerror(rc), st.message ? st.message : "");
    kube_status_clear(&st);
    return rc;
}

static int delete_pod(struct run *r, const struct kube_object *pod)
{
    struct kube_delete_opts opts = {.precondition_uid = pod->uid, .grace_period_s = -1};
    int rc = kube_delete(r->ctx->client, &KUBE_PODS, pod->namespace, pod->name, &opts, NULL, NULL);
    return rc == KUBE_ENOTFOUND || rc == KUBE_ECONFLICT ? 0 : rc;
}

static int delete_launcher_job(struct run *r)
{
    char *name = mpijob_launcher_name(r->job);
    struct kube_delete_opts opts = {.propagation_policy = "Background", .grace_period_s = -1};
    int rc = name ? kube_delete(r->ctx->client, &KUBE_JOBS, r->job->namespace, name, &opts, NULL, NULL) : KUBE_ENOMEM;
    free(name);
    return rc == KUBE_ENOTFOUND ? 0 : rc;
}

/* Every worker pod of the job, whatever its state (suspend). */
static int delete_workers(struct run *r)
{
    struct kube_object **owned = NULL;
    int n = cache_list_by_owner(&r->ctx->pods, r->job->namespace, r->job->uid, &owned);
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++)
        if (!owned[i]->deleting)
            rc = delete_pod(r, owned[i]);
    kube_object_list_free(owned, n > 0 ? (size_t)n : 0);
    return rc;
}

/* cleanPodPolicy on a finished job: All deletes every worker, Running the Pending and Running
 * ones, None keeps them. */
static int clean_pods(struct run *r)
{
    if (r->job->run_policy.clean_pod_policy == CLEAN_POD_NONE)
        return 0;
    struct kube_object **owned = NULL;
    int n = cache_list_by_owner(&r->ctx->pods, r->job->namespace, r->job->uid, &owned);
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        if (owned[i]->deleting)
            continue;
        cJSON *pod = kube_object_parse(owned[i]);
        enum pod_state s = pod ? pod_state_of(pod) : POD_UNKNOWN;
        cJSON_Delete(pod);
        if (r->job->run_policy.clean_pod_policy == CLEAN_POD_ALL || s == POD_PENDING || s == POD_RUNNING)
            rc = delete_pod(r, owned[i]);
    }
    kube_object_list_free(owned, n > 0 ? (size_t)n : 0);
    return rc;
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

/* A job that cannot start because a pod's container cannot (its image cannot be pulled, its
 * configuration is wrong) says so until it can: Running False with the kubelet's reason and
 * message, and a Warning event when that reason first shows. Once nothing is stuck, that
 * condition goes; Running True replaces it in any case. */
static void show_stuck_pod(struct run *r, bool suspended, const char *reason, const char *pod, const char *message)
{
    const cJSON *running = mpijob_status_condition(r->status, MPIJOB_COND_RUNNING);
    const char *had = json_string(running, "reason");
    bool showing = running && !mpijob_status_is_true(r->status, MPIJOB_COND_RUNNING) && had &&
                   (strcmp(had, "ImagePullBackOff") == 0 || strcmp(had, "InvalidImageName") == 0 ||
                    strcmp(had, "CreateContainerConfigError") == 0 || strcmp(had, "CreateContainerError") == 0);
    bool quiet = suspended || mpijob_status_finished(r->status) ||
                 mpijob_status_is_true(r->status, MPIJOB_COND_RUNNING) ||
                 mpijob_status_is_true(r->status, MPIJOB_COND_RESTARTING);
    if (!reason || quiet) {
        if (showing && !mpijob_status_is_true(r->status, MPIJOB_COND_RUNNING))
            mpijob_status_remove_condition(r->status, MPIJOB_COND_RUNNING);
        return;
    }
    char msg[1100];
    snprintf(msg, sizeof(msg), "MPIJob %s/%s cannot start: pod %s %s", r->job->namespace, r->job->name, pod, message);
    mpijob_status_set_condition(r->status, MPIJOB_COND_RUNNING, false, reason, msg, r->now);
    if (!showing || strcmp(had, reason) != 0)
        announce(r, "Warning", reason, msg);
}

/* status.replicaStatuses.Worker and the WORKERS column ("ready/replicas"). */
static void set_worker_status(struct run *r, const struct replica_counts *wc, int workers)
{
    if (workers > 0)
        mpijob_status_set_replicas(r->status, "Worker", wc);
    char ready[32];
    snprintf(ready, sizeof(ready), "%d/%d", wc->ready, workers);
    json_set_string(r->status, "workers", ready);
}

/* After the job finished: the workers' counts as the pods now are, so that a job whose workers
 * were cleaned up shows none active (a pod being deleted no longer counts). */
static void recount_finished_workers(struct run *r)
{
    const struct mpijob *job = r->job;
    int workers = job->worker.replicas;
    if (workers <= 0)
        return;
    struct replica_counts wc = {0};
    for (int i = 0; i < workers; i++) {
        char *name = mpijob_worker_name(job, i);
        struct kube_object *o = name ? cache_get(&r->ctx->pods, job->namespace, name) : NULL;
        free(name);
        if (o && owned_by_job(o, job) && !o->deleting) {
            cJSON *pod = kube_object_parse(o);
            count_pod(&wc, pod);
            cJSON_Delete(pod);
        }
        kube_object_unref(o);
    }
    set_worker_status(r, &wc, workers);
}

static void finish(struct run *r, bool succeeded, const char *reason, const char *message)
{
    if (succeeded) {
        if (mpijob_status_set_condition(r->status, MPIJOB_COND_SUCCEEDED, true, reason, message, r->now) > 0)
            announce(r, "Normal", "MPIJobSucceeded", message);
    } else {
        if (mpijob_status_set_condition(r->status, MPIJOB_COND_FAILED, true, reason, message, r->now) > 0)
            announce(r, "Warning", "MPIJobFailed", message);
    }
    if (!cJSON_GetObjectItemCaseSensitive(r->status, "completionTime"))
        json_set_string(r->status, "completionTime", r->now);
}

/* status.state, the STATE column: the type of the latest condition that is True. */
static void set_state(cJSON *status)
{
    const char *state = NULL;
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(status, "conditions")) {
        const char *t = json_string(c, "type"), *v = json_string(c, "status");
        if (t && v && strcmp(v, "True") == 0)
            state = t;
    }
    if (state)
        json_set_string(status, "state", state);
}

/* Writes status through /status when it differs from what the cache holds. */
static int write_status(struct run *r, const cJSON *old_status)
{
    set_state(r->status);
    if (mpijob_status_equal(old_status, r->status))
        return 0;
    json_set_string(r->status, "lastReconcileTime", r->now);
    struct kube_status st = {.retry_after_s = -1};
    int rc = kube_replace_status(r->ctx->client, &MPIJOB_RESOURCE_V2BETA1, r->job->namespace, r->job->name,
                                 r->tree, NULL, &st);
    if (rc == 0) {
        char key[512];
        snprintf(key, sizeof(key), "%s/%s", r->job->namespace, r->job->name);
        status_written(r->ctx->expect, key, json_string(r->tree, "metadata.resourceVersion"));
    }
    if (rc < 0 && rc != KUBE_ECONFLICT)
        log_warn("status update failed", "job=%s/%s error=\"%s\"", r->job->namespace, r->job->name, kube_strerror(rc));
    kube_status_clear(&st);
    return rc; /* Conflict: the cache was stale; the retry reads the newer object */
}

/* Counts the job transitions a written status made: Created, Succeeded and Failed turning True. */
static void count_transitions(struct reconcile_ctx *ctx, const char *ns, const cJSON *before, const cJSON *after)
{
    if (!ctx->metrics)
        return;
    static const struct {
        const char *condition, *metric, *help;
    } counted[] = {
        {MPIJOB_COND_CREATED, "mpijob_jobs_created_total", "MPIJobs the operator started handling."},
        {MPIJOB_COND_SUCCEEDED, "mpijob_jobs_succeeded_total", "MPIJobs that succeeded."},
        {MPIJOB_COND_FAILED, "mpijob_jobs_failed_total", "MPIJobs that failed."},
    };
    const char *const labels[] = {"namespace", ns, NULL};
    for (size_t i = 0; i < sizeof(counted) / sizeof(counted[0]); i++)
        if (mpijob_status_is_true(after, counted[i].condition) && !mpijob_status_is_true(before, counted[i].condition))
            metrics_counter_add(ctx->metrics, counted[i].metric, counted[i].help, 1, labels);
}

/* The invalid-spec path: Failed/InvalidSpec naming every problem, once. */
static int reject(struct reconcile_ctx *ctx, cJSON *tree, const struct mpijob_problems *problems,
                  const char *ns, const char *name)
{
    cJSON *old = cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(tree, "status"), true);
    cJSON *status = json_ensure_object(tree, "status");
    char now[21];
    clock_rfc3339(ctx->now ? ctx->now() : time(NULL), now);
    char *message = mpijob_problems_join(problems);
    int rc = 0;
    if (!status || !message) {
        rc = KUBE_ENOMEM;
        goto out;
    }
    if (mpijob_status_set_condition(status, MPIJOB_COND_FAILED, true, "InvalidSpec", message, now) > 0 &&
        ctx->events) {
        struct event_target t = {.api_version = "kubeflow.org/v2beta1", .kind = MPIJOB_KIND, .namespace = ns,
                                 .name = name, .uid = json_string(tree, "metadata.uid")};
        event_record(ctx->events, &t, "Warning", "InvalidSpec", "%s", message);
    }
    if (!cJSON_GetObjectItemCaseSensitive(status, "completionTime"))
        json_set_string(status, "completionTime", now);
    set_state(status);
    if (!mpijob_status_equal(old, status)) {
        json_set_string(status, "lastReconcileTime", now);
        rc = kube_replace_status(ctx->client, &MPIJOB_RESOURCE_V2BETA1, ns, name, tree, NULL, NULL);
        if (rc == 0)
            count_transitions(ctx, ns, old, status);
    }
out:
    free(message);
    cJSON_Delete(old);
    return rc;
}

/* The launcher Job follows runPolicy.suspend. Resuming waits for Ready workers under
 * WaitForWorkersReady, and first clears the Job's status.startTime through /status: a real
 * kube-apiserver refuses to unsuspend a Job that keeps the startTime of its earlier run. */
/* The PodGroup, created when missing and following schedulingPolicy when it changes: the fields
 * the operator sets (minMember, minResources, queue, priorityClassName, scheduleTimeoutSeconds)
 * are merge-patched to what the job now says, those it no longer sets removed; fields a
 * scheduler wrote are left alone. */
static int ensure_podgroup(struct run *r, const struct kube_resource *pg)
{
    static const char *const ours[] = {"minMember", "minResources", "queue", "priorityClassName",
                                       "scheduleTimeoutSeconds", NULL};
    cJSON *desired = build_podgroup(r->job, &r->ctx->options);
    cJSON *want = desired ? cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(desired, "spec"), true) : NULL;
    struct kube_object *existing = NULL;
    int rc = ensure(r, pg, &r->ctx->podgroups, r->job->name, desired, &existing);
    if (rc == 0 && existing && want) {
        cJSON *have = kube_object_parse(existing);
        const cJSON *have_spec = cJSON_GetObjectItemCaseSensitive(have, "spec");
        cJSON *patch_spec = cJSON_CreateObject();
        bool differ = false;
        for (int i = 0; patch_spec && ours[i]; i++) {
            const cJSON *h = cJSON_GetObjectItemCaseSensitive(have_spec, ours[i]);
            const cJSON *w = cJSON_GetObjectItemCaseSensitive(want, ours[i]);
            if (w && !(h && cJSON_Compare(h, w, true))) {
                cJSON_AddItemToObject(patch_spec, ours[i], cJSON_Duplicate(w, true));
                differ = true;
            } else if (!w && h) {
                cJSON_AddNullToObject(patch_spec, ours[i]);
                differ = true;
            }
        }
        if (!patch_spec || !have) {
            rc = KUBE_ENOMEM;
        } else if (differ) {
            cJSON *patch = cJSON_CreateObject();
            char *body = NULL;
            if (patch && cJSON_AddItemToObject(patch, "spec", patch_spec)) {
                patch_spec = NULL;
                body = cJSON_PrintUnformatted(patch);
            }
            struct kube_patch_opts merge = {.type = KUBE_PATCH_MERGE};
            struct kube_status st = {0};
            rc = body ? kube_patch(r->ctx->client, pg, r->job->namespace, r->job->name, body, &merge, NULL, &st)
                      : KUBE_ENOMEM;
            if (rc == 0)
                log_info("PodGroup follows the scheduling policy", "job=%s/%s", r->job->namespace, r->job->name);
            else if (rc != KUBE_ENOMEM)
                log_warn("PodGroup update failed", "job=%s/%s code=%ld message=\"%s\"", r->job->namespace, r->job->name,
                         st.http_code, st.message ? st.message : "");
            if (rc == KUBE_ENOTFOUND)
                rc = 0; /* deleted meanwhile: the next pass creates it */
            kube_status_clear(&st);
            free(body);
            cJSON_Delete(patch);
        }
        cJSON_Delete(patch_spec);
        cJSON_Delete(have);
    }
    kube_object_unref(existing);
    cJSON_Delete(want);
    return rc;
}

/* One JSON Patch operation making the launcher Job's template field at `path` (under
 * /spec/template) what the MPIJob's Launcher template now says: add (which replaces) or remove. */
static int sync_field(cJSON *ops, const cJSON *have_tmpl, const cJSON *want_tmpl, const char *dotted,
                      const char *pointer)
{
    const cJSON *have = json_path(have_tmpl, dotted), *want = json_path(want_tmpl, dotted);
    if ((!have && !want) || (have && want && cJSON_Compare(have, want, true)))
        return 0;
    cJSON *op = cJSON_CreateObject();
    char path[128];
    snprintf(path, sizeof(path), "/spec/template/%s", pointer);
    if (!op || !cJSON_AddStringToObject(op, "op", want ? "add" : "remove") || !cJSON_AddStringToObject(op, "path", path) ||
        (want && !cJSON_AddItemToObject(op, "value", cJSON_Duplicate(want, true)))) {
        cJSON_Delete(op);
        return KUBE_ENOMEM;
    }
    cJSON_AddItemToArray(ops, op);
    return 0;
}

/* Before a suspended launcher Job starts again: the scheduling directives a queue manager (Kueue)
 * may have changed on the suspended MPIJob's Launcher template (nodeSelector, tolerations,
 * affinity, schedulingGates, labels, annotations) are copied into the Job's template, as the
 * reference operator does on every unsuspend; labels and annotations are merged into the Job's.
 * A suspended Job whose startTime is clear accepts these changes. */
static int sync_scheduling_directives(struct run *r, const struct kube_object *launcher, const cJSON *lj)
{
    struct transport_report report = {0};
    cJSON *want_job = build_launcher_job(r->job, &r->ctx->options, &report);
    transport_report_free(&report);
    if (!want_job)
        return KUBE_ENOMEM;
    const cJSON *have = json_path(lj, "spec.template");
    cJSON *want = cJSON_Duplicate(json_path(want_job, "spec.template"), true);
    cJSON_Delete(want_job);
    cJSON *ops = cJSON_CreateArray();
    int rc = want && ops ? 0 : KUBE_ENOMEM;
    if (rc == 0) {
        /* Labels and annotations are merged into the Job's (the Job API adds labels of its own
         * that its template must keep: controller-uid, job-name and their batch.kubernetes.io/
         * spellings); the other directives are replaced. */
        cJSON *meta = cJSON_GetObjectItemCaseSensitive(want, "metadata");
        if (!meta)
            meta = cJSON_AddObjectToObject(want, "metadata");
        static const char *const maps[] = {"labels", "annotations"};
        for (size_t m = 0; rc == 0 && m < 2; m++) {
            cJSON *mine = meta ? cJSON_GetObjectItemCaseSensitive(meta, maps[m]) : NULL;
            const cJSON *theirs = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(have, "metadata"),
                                                                   maps[m]);
            if (meta && !mine && theirs)
                mine = cJSON_AddObjectToObject(meta, maps[m]);
            const cJSON *l;
            cJSON_ArrayForEach(l, theirs) {
                if (mine && !cJSON_GetObjectItemCaseSensitive(mine, l->string))
                    cJSON_AddItemToObject(mine, l->string, cJSON_Duplicate(l, true));
            }
            if (!meta || (theirs && !mine))
                rc = KUBE_ENOMEM;
        }
    }
    static const char *const fields[][2] = {
        {"metadata.labels", "metadata/labels"},     {"metadata.annotations", "metadata/annotations"},
        {"spec.nodeSelector", "spec/nodeSelector"}, {"spec.tolerations", "spec/tolerations"},
        {"spec.affinity", "spec/affinity"},         {"spec.schedulingGates", "spec/schedulingGates"},
    };
    for (size_t i = 0; rc == 0 && i < sizeof(fields) / sizeof(fields[0]); i++)
        rc = sync_field(ops, have, want, fields[i][0], fields[i][1]);
    if (rc == 0 && cJSON_GetArraySize(ops) > 0) {
        char *body = cJSON_PrintUnformatted(ops);
        struct kube_patch_opts jp = {.type = KUBE_PATCH_JSON};
        struct kube_status st = {0};
        rc = body ? kube_patch(r->ctx->client, &KUBE_JOBS, launcher->namespace, launcher->name, body, &jp, NULL, &st)
                  : KUBE_ENOMEM;
        if (rc == 0)
            log_info("launcher template follows the resumed job", "job=%s/%s changes=%d", r->job->namespace,
                     r->job->name, cJSON_GetArraySize(ops));
        else if (rc != KUBE_ENOMEM)
            log_warn("launcher template update failed", "job=%s/%s code=%ld message=\"%s\"", r->job->namespace,
                     r->job->name, st.http_code, st.message ? st.message : "");
        kube_status_clear(&st);
        free(body);
    }
    cJSON_Delete(ops);
    cJSON_Delete(want);
    return rc;
}

static int mirror_suspend(struct run *r, const struct kube_object *launcher, bool suspend, bool may_start)
{
    cJSON *lj = kube_object_parse(launcher);
    if (!lj)
        return KUBE_ENOMEM;
    bool is_suspended = json_bool(lj, "spec.suspend", false);
    bool has_start = json_path(lj, "status.startTime") != NULL;
    struct kube_patch_opts merge = {.type = KUBE_PATCH_MERGE};
    int rc = 0;
    if (suspend && !is_suspended) {
        rc = kube_patch(r->ctx->client, &KUBE_JOBS, launcher->namespace, launcher->name, "{\"spec\":{\"suspend\":true}}",
                        &merge, NULL, NULL);
    } else if (!suspend && is_suspended && may_start) {
        if (has_start) {
            struct kube_patch_opts status = {.type = KUBE_PATCH_MERGE, .subresource = "status"};
            rc = kube_patch(r->ctx->client, &KUBE_JOBS, launcher->namespace, launcher->name,
                            "{\"status\":{\"startTime\":null}}", &status, NULL, NULL);
        }
        if (rc == 0)
            rc = sync_scheduling_directives(r, launcher, lj);
        if (rc == 0)
            rc = kube_patch(r->ctx->client, &KUBE_JOBS, launcher->namespace, launcher->name,
                            "{\"spec\":{\"suspend\":false}}", &merge, NULL, NULL);
    }
    cJSON_Delete(lj);
    return rc == KUBE_ENOTFOUND ? 0 : rc;
}

/* A worker that ended Failed while the job runs is deleted, so the next reconcile creates it
 * afresh and the launcher's retry finds a complete set (the reference never does this, so its
 * retries are futile). Replacements count against backoffLimit, kept in status.workerRestarts. */
static void replace_failed_worker(struct run *r, const struct kube_object *obj, const cJSON *pod)
{
    if (r->n_failed == (int)(sizeof(r->failed) / sizeof(r->failed[0])))
        return; /* the rest on the next pass */
    snprintf(r->failed[r->n_failed].uid, sizeof(r->failed[0].uid), "%s", obj->uid);
    snprintf(r->failed[r->n_failed].name, sizeof(r->failed[0].name), "%s", obj->name);
    r->n_failed++;
    if (failure_counted(r->ctx->expect, obj->uid, false))
        return; /* counted before; only its deletion is still to do */

    char reason[128], message[512];
    bool evicted = pod_failure(pod, reason, sizeof(reason), message, sizeof(message));
    long long restarts = json_int(r->status, "workerRestarts", 0) + 1;
    cJSON_DeleteItemFromObjectCaseSensitive(r->status, "workerRestarts");
    cJSON_AddNumberToObject(r->status, "workerRestarts", (double)restarts);
    char msg[800];
    snprintf(msg, sizeof(msg), "worker %s failed (%s): %s", obj->name, reason, message);
    log_info("replacing failed worker", "job=%s/%s pod=%s reason=%s restarts=%lld", r->job->namespace,
             r->job->name, obj->name, reason, restarts);
    if (restarts > r->job->run_policy.backoff_limit) {
        char full[900];
        snprintf(full, sizeof(full), "MPIJob %s/%s has failed: %s; %lld worker replacements exceed backoffLimit %d",
                 r->job->namespace, r->job->name, msg, restarts, r->job->run_policy.backoff_limit);
        finish(r, false, evicted ? "MPIJobEvicted" : "WorkerFailed", full);
        return;
    }
    mpijob_status_set_condition(r->status, MPIJOB_COND_RESTARTING, true, "MPIJobRestarting", msg, r->now);
}

/* What a written status decided: replace failed workers, stop the launcher, clean the pods. */
static int after_status_written(struct run *r)
{
    int rc = 0;
    for (int i = 0; i < r->n_failed; i++) {
        failure_counted(r->ctx->expect, r->failed[i].uid, true);
        struct kube_delete_opts opts = {.precondition_uid = r->failed[i].uid, .grace_period_s = -1};
        int drc = kube_delete(r->ctx->client, &KUBE_PODS, r->job->namespace, r->failed[i].name, &opts, NULL, NULL);
        if (drc < 0 && drc != KUBE_ENOTFOUND && drc != KUBE_ECONFLICT && rc == 0)
            rc = drc;
    }
    if (rc == 0 && r->stop_launcher_after_write)
        rc = delete_launcher_job(r);
    if (rc == 0 && r->clean_after_write)
        rc = clean_pods(r);
    return rc;
}

/* Missing worker pods are created by up to create_parallelism threads at once, so a large job
 * is not created one pod at a time. These threads only build and create pods: everything that
 * touches the job's status stays on the reconcile's own thread. */
struct worker_batch {
    struct run *r;
    const int *indexes;
    int n;
    atomic_int next;
    atomic_int rc;
};

static void *create_worker_pods(void *arg)
{
    struct worker_batch *b = arg;
    for (int k; (k = atomic_fetch_add(&b->next, 1)) < b->n && atomic_load(&b->rc) == 0;) {
        struct transport_report report = {0};
        cJSON *pod = build_worker_pod(b->r->job, &b->r->ctx->options, b->indexes[k], &report);
        transport_report_free(&report);
        int rc = KUBE_ENOMEM;
        if (pod) {
            rc = kube_create(b->r->ctx->client, &KUBE_PODS, b->r->job->namespace, pod, NULL, NULL);
            if (rc == KUBE_EALREADYEXISTS)
                rc = 0;
            if (rc < 0)
                log_warn("create failed", "job=%s/%s kind=Pod index=%d error=\"%s\"", b->r->job->namespace,
                         b->r->job->name, b->indexes[k], kube_strerror(rc));
        }
        cJSON_Delete(pod);
        if (rc == 0) {
            char *name = mpijob_worker_name(b->r->job, b->indexes[k]);
            if (name)
                expect_created(b->r->ctx->expect, &KUBE_PODS, b->r->job->namespace, name);
            free(name);
        }
        if (rc < 0)
            atomic_store(&b->rc, rc);
    }
    return NULL;
}

static int create_workers(struct run *r, const int *indexes, int n)
{
    struct worker_batch b = {.r = r, .indexes = indexes, .n = n};
    int threads = r->ctx->create_parallelism > 1 ? r->ctx->create_parallelism : 1;
    if (threads > n)
        threads = n;
    if (threads > 16)
        threads = 16;
    pthread_t helpers[16];
    int started = 0;
    for (int t = 1; t < threads; t++)
        if (pthread_create(&helpers[started], NULL, create_worker_pods, &b) == 0)
            started++;
    create_worker_pods(&b); /* this thread takes its share too */
    for (int t = 0; t < started; t++)
        pthread_join(helpers[t], NULL);
    return atomic_load(&b.rc);
}

static int reconcile_valid(struct run *r)
{
    struct reconcile_ctx *ctx = r->ctx;
    struct mpijob *job = r->job;
    int rc = 0;

    if (mpijob_status_finished(r->status)) {
        rc = clean_pods(r);
        recount_finished_workers(r);
        if (!cJSON_GetObjectItemCaseSensitive(r->status, "completionTime"))
            json_set_string(r->status, "completionTime", r->now);
        /* ttlSecondsAfterFinished deletes the MPIJob itself, and with it its dependents. */
        long long ttl = job->run_policy.ttl_after_finished_s;
        long long done_for = seconds_since(r, "completionTime");
        if (rc == 0 && ttl >= 0 && done_for >= 0) {
            if (done_for >= ttl) {
                struct kube_delete_opts opts = {.precondition_uid = job->uid, .propagation_policy = "Background",
                                                .grace_period_s = -1};
                rc = kube_delete(ctx->client, &MPIJOB_RESOURCE_V2BETA1, job->namespace, job->name, &opts, NULL, NULL);
                if (rc == KUBE_ENOTFOUND || rc == KUBE_ECONFLICT)
                    rc = 0;
                if (rc == 0)
                    log_info("deleted finished MPIJob after its TTL", "job=%s/%s ttl=%lld", job->namespace,
                             job->name, ttl);
            } else {
                requeue_in(r, ttl - done_for);
            }
        }
        return rc;
    }

    if (!mpijob_status_condition(r->status, MPIJOB_COND_CREATED)) {
        char msg[300];
        snprintf(msg, sizeof(msg), "MPIJob %s/%s is created.", job->namespace, job->name);
        mpijob_status_set_condition(r->status, MPIJOB_COND_CREATED, true, "MPIJobCreated", msg, r->now);
        announce(r, "Normal", "MPIJobCreated", msg);
    }
    /* Suspend and resume. Resuming restarts the clock: startTime is reset. */
    bool suspended = job->run_policy.suspend;
    if (suspended) {
        if (mpijob_status_set_condition(r->status, MPIJOB_COND_SUSPENDED, true, "MPIJobSuspended",
                                        "MPIJob suspended", r->now) > 0)
            announce(r, "Normal", "MPIJobSuspended", "MPIJob suspended");
        if (mpijob_status_condition(r->status, MPIJOB_COND_RUNNING))
            mpijob_status_set_condition(r->status, MPIJOB_COND_RUNNING, false, "MPIJobSuspended",
                                        "MPIJob suspended", r->now);
        cJSON_DeleteItemFromObjectCaseSensitive(r->status, "startTime");
    } else if (mpijob_status_is_true(r->status, MPIJOB_COND_SUSPENDED)) {
        mpijob_status_set_condition(r->status, MPIJOB_COND_SUSPENDED, false, "MPIJobResumed", "MPIJob resumed", r->now);
        announce(r, "Normal", "MPIJobResumed", "MPIJob resumed");
        json_set_string(r->status, "startTime", r->now);
    }
    if (!suspended && !cJSON_GetObjectItemCaseSensitive(r->status, "startTime"))
        json_set_string(r->status, "startTime", r->now);

    /* activeDeadlineSeconds, counted from the MPIJob's start. */
    long long active_for = seconds_since(r, "startTime");
    if (!suspended && job->run_policy.active_deadline_s > 0 && active_for >= 0) {
        if (active_for >= job->run_policy.active_deadline_s) {
            char msg[300];
            snprintf(msg, sizeof(msg), "MPIJob %s/%s was active longer than its deadline of %llds.", job->namespace,
                     job->name, job->run_policy.active_deadline_s);
            finish(r, false, "DeadlineExceeded", msg);
            r->stop_launcher_after_write = true;
            r->clean_after_write = true;
            return 0;
        }
        requeue_in(r, job->run_policy.active_deadline_s - active_for);
    }

    /* Service, ConfigMap, Secret, in the order SPEC.md gives. */
    rc = ensure(r, &KUBE_SERVICES, &ctx->services, job->name, build_service(job, &ctx->options), NULL);
    if (rc < 0)
        return rc;

    int workers = job->worker.replicas;
    char **running = calloc(workers > 0 ? (size_t)workers : 1, sizeof(char *));
    struct kube_object **worker_objs = calloc(workers > 0 ? (size_t)workers : 1, sizeof(*worker_objs));
    if (!running || !worker_objs) {
        free(running);
        free(worker_objs);
        return KUBE_ENOMEM;
    }
    size_t n_running = 0;
    struct replica_counts wc = {0};
    /* The first pod whose container cannot start (an image that cannot be pulled, say). */
    const char *stuck = NULL;
    char stuck_pod[256] = "", stuck_message[768] = "";
    for (int i = 0; i < workers; i++) {
        char *name = mpijob_worker_name(job, i);
        worker_objs[i] = name ? cache_get(&ctx->pods, job->namespace, name) : NULL;
        free(name);
        if (!worker_objs[i] || !owned_by_job(worker_objs[i], job))
            continue;
        expect_seen(ctx->expect, &KUBE_PODS, job->namespace, worker_objs[i]->name);
        cJSON *pod = kube_object_parse(worker_objs[i]);
        enum pod_state state = count_pod(&wc, pod);
        if (!stuck && pod && !worker_objs[i]->deleting &&
            (stuck = pod_waiting_problem(pod, stuck_message, sizeof(stuck_message))))
            snprintf(stuck_pod, sizeof(stuck_pod), "%s", worker_objs[i]->name);
        if (state == POD_RUNNING)
            running[n_running++] = (char *)worker_objs[i]->name;
        else if (state == POD_FAILED && !suspended && !worker_objs[i]->deleting)
            replace_failed_worker(r, worker_objs[i], pod);
        cJSON_Delete(pod);
    }

    char *cm_name = mpijob_configmap_name(job);
    struct kube_object *cm = NULL;
    cJSON *desired_cm = build_configmap(job, &ctx->options, (const char *const *)running, n_running);
    cJSON *desired_cm_copy = desired_cm ? cJSON_Duplicate(desired_cm, true) : NULL;
    rc = cm_name ? ensure(r, &KUBE_CONFIGMAPS, &ctx->configmaps, cm_name, desired_cm, &cm) : KUBE_ENOMEM;
    if (rc == 0 && cm && desired_cm_copy) {
        /* discover_hosts.sh follows the Running workers: update the data when it changed. */
        cJSON *have = kube_object_parse(cm);
        cJSON *have_data = cJSON_GetObjectItemCaseSensitive(have, "data");
        cJSON *want_data = cJSON_GetObjectItemCaseSensitive(desired_cm_copy, "data");
        if (have && want_data && !cJSON_Compare(have_data, want_data, true)) {
            cJSON_ReplaceItemInObjectCaseSensitive(have, "data", cJSON_Duplicate(want_data, true));
            rc = kube_replace(ctx->client, &KUBE_CONFIGMAPS, job->namespace, cm_name, have, NULL, NULL);
        }
        cJSON_Delete(have);
    }
    kube_object_unref(cm);
    cJSON_Delete(desired_cm_copy);
    free(cm_name);

    if (rc == 0) {
        char *secret_name = mpijob_secret_name(job);
        struct kube_object *secret = secret_name ? cache_get(&ctx->secrets, job->namespace, secret_name) : NULL;
        cJSON *desired_secret = NULL;
        if (!secret && secret_name) {
            /* Keys only when the Secret has to be created: a key pair per job, made once. */
            struct ssh_keypair keys = {0};
            if (ssh_keypair_generate(&keys) == 0)
                desired_secret = build_secret(job, &ctx->options, &keys);
            ssh_keypair_free(&keys);
        }
        kube_object_unref(secret);
        rc = secret_name ? ensure(r, &KUBE_SECRETS, &ctx->secrets, secret_name, desired_secret, NULL) : KUBE_ENOMEM;
        free(secret_name);
    }

    /* The PodGroup for gang scheduling comes before the pods it gathers; suspend removes it. */
    const struct kube_resource *pg = podgroup_resource(&ctx->options);
    if (rc == 0 && pg && ctx->podgroups.count) {
        if (suspended) {
            struct kube_object *have = cache_get(&ctx->podgroups, job->namespace, job->name);
            if (have && owned_by_job(have, job)) {
                rc = kube_delete(ctx->client, pg, job->namespace, job->name, NULL, NULL, NULL);
                if (rc == KUBE_ENOTFOUND)
                    rc = 0;
            }
            kube_object_unref(have);
        } else {
            rc = ensure_podgroup(r, pg);
        }
    }

    /* Workers: the missing ones are created; while suspended every worker goes. */
    if (rc == 0 && suspended)
        rc = delete_workers(r);
    bool all_ready = workers > 0;
    int *missing = calloc(workers > 0 ? (size_t)workers : 1, sizeof(int));
    int n_missing = 0;
    for (int i = 0; rc == 0 && i < workers; i++) {
        if (worker_objs[i]) {
            if (!owned_by_job(worker_objs[i], job)) {
                rc = ensure(r, &KUBE_PODS, &ctx->pods, worker_objs[i]->name, NULL, NULL);
                break;
            }
            continue;
        }
        all_ready = false;
        char *wname = mpijob_worker_name(job, i);
        bool pending = wname && expect_pending(ctx->expect, &KUBE_PODS, job->namespace, wname);
        free(wname);
        if (!suspended && missing && !pending)
            missing[n_missing++] = i;
    }
    if (rc == 0 && n_missing)
        rc = create_workers(r, missing, n_missing);
    else if (rc == 0 && !missing)
        rc = KUBE_ENOMEM;
    free(missing);
    if (wc.ready < workers)
        all_ready = false;

    /* The launcher: at once, or when every worker is Ready under WaitForWorkersReady. */
    struct kube_object *launcher = NULL;
    char *launcher_name = mpijob_launcher_name(job);
    if (rc == 0 && launcher_name) {
        launcher = cache_get(&ctx->jobs, job->namespace, launcher_name);
        if (!launcher && (job->launcher_creation_policy == LAUNCHER_AT_STARTUP || all_ready)) {
            struct transport_report report = {0};
            cJSON *lj = build_launcher_job(job, &ctx->options, &report);
            for (size_t i = 0; i < report.n_conflicts; i++)
                event(r, "Warning", "TransportConflict", "%s", report.conflicts[i]);
            char *unforwarded = transport_unforwarded_message(&report);
            if (unforwarded)
                event(r, "Warning", "TransportNotForwarded", "%s", unforwarded);
            free(unforwarded);
            transport_report_free(&report);
            rc = ensure(r, &KUBE_JOBS, &ctx->jobs, launcher_name, lj, NULL);
        } else if (launcher && !owned_by_job(launcher, job)) {
            rc = ensure(r, &KUBE_JOBS, &ctx->jobs, launcher_name, NULL, NULL);
        } else if (launcher) {
            rc = mirror_suspend(r, launcher, suspended, job->launcher_creation_policy == LAUNCHER_AT_STARTUP || all_ready);
        }
    }
    free(launcher_name);

    /* Status from what the caches show. */
    struct replica_counts lc = {0};
    if (rc == 0 && launcher) {
        cJSON *lj = kube_object_parse(launcher);
        char reason[128] = "", message[512] = "";
        enum job_state js = lj ? job_state_of(lj, reason, sizeof(reason), message, sizeof(message)) : JOB_ACTIVE;
        cJSON_Delete(lj);
        struct kube_object **lpods = NULL;
        int n = cache_list_by_owner(&ctx->pods, job->namespace, launcher->uid, &lpods);
        /* The latest failed launcher run, and whether a run is going on now. */
        struct pod_run *last = calloc(1, sizeof(*last)), *run = calloc(1, sizeof(*run));
        char last_pod[256] = "";
        bool attempt = false;
        if (!last || !run)
            rc = KUBE_ENOMEM;
        for (int i = 0; rc == 0 && i < n; i++) {
            cJSON *p = kube_object_parse(lpods[i]);
            count_pod(&lc, p);
            if (!stuck && p && !lpods[i]->deleting &&
                (stuck = pod_waiting_problem(p, stuck_message, sizeof(stuck_message))))
                snprintf(stuck_pod, sizeof(stuck_pod), "%s", lpods[i]->name);
            if (p) {
                pod_run_of(p, run);
                attempt = attempt || run->in_progress;
                if (run->failed && (!last->failed || strcmp(run->finished_at, last->finished_at) >= 0)) {
                    struct pod_run *t = last;
                    last = run;
                    run = t;
                    snprintf(last_pod, sizeof(last_pod), "%s", lpods[i]->name);
                }
            }
            cJSON_Delete(p);
        }
        kube_object_list_free(lpods, n > 0 ? (size_t)n : 0);
        free(run);
        if (rc == 0 && last->failed && mpijob_status_set_launcher_failure(r->status, last_pod, last) < 0)
            rc = KUBE_ENOMEM;

        if (rc != 0) {
            /* out of memory: nothing decided */
        } else if (js == JOB_COMPLETE) {
            char msg[300];
            snprintf(msg, sizeof(msg), "MPIJob %s/%s successfully completed.", job->namespace, job->name);
            finish(r, true, "MPIJobSucceeded", msg);
        } else if (js == JOB_FAILED) {
            /* Out of retries: the launcher's own last words. Under OnFailure the Job controller
             * has usually deleted the pod by now; status.lastLauncherFailure kept them. Any other
             * reason (a deadline, say) is the Job's to give. */
            const cJSON *kept = cJSON_GetObjectItemCaseSensitive(r->status, "lastLauncherFailure");
            const char *kept_pod = json_string(kept, "pod"), *kept_reason = json_string(kept, "reason");
            const char *kept_message = json_string(kept, "message");
            bool backoff = strcmp(reason, "BackoffLimitExceeded") == 0;
            char *words = NULL;
            if (backoff && kept_message &&
                asprintf(&words, "%s: launcher pod %s failed (%s): %s", message, kept_pod ? kept_pod : "?",
                         kept_reason ? kept_reason : "Error", kept_message) < 0)
                words = NULL;
            char full_reason[300], *msg = NULL;
            if (words && kept_reason && *kept_reason)
                snprintf(full_reason, sizeof(full_reason), "%s/%s", reason, kept_reason);
            else
                snprintf(full_reason, sizeof(full_reason), "%s", reason);
            if (asprintf(&msg, "MPIJob %s/%s has failed: %s", job->namespace, job->name, words ? words : message) < 0) {
                msg = NULL; /* asprintf leaves it undefined on failure */
                rc = KUBE_ENOMEM;
            } else {
                finish(r, false, full_reason, msg);
            }
            free(msg);
            free(words);
        } else if (js == JOB_ACTIVE && !suspended && last->failed && !attempt) {
            /* Between two launcher runs: the Job retries (a new pod, or the kubelet restarts the
             * container), and the failure is kept here until the next run is going. */
            char *msg = NULL;
            if (asprintf(&msg, "launcher pod %s failed (%s): %s", last_pod, last->reason, last->message) < 0) {
                msg = NULL;
                rc = KUBE_ENOMEM;
            } else {
                mpijob_status_set_condition(r->status, MPIJOB_COND_RESTARTING, true, "MPIJobRestarting", msg, r->now);
            }
            free(msg);
        } else if (!suspended && lc.active > 0 && lc.ready > 0 && workers > 0 && (int)n_running == workers) {
            /* Never while suspended: the workers being deleted may still show Running. */
            char msg[300];
            snprintf(msg, sizeof(msg), "MPIJob %s/%s is running.", job->namespace, job->name);
            bool was = mpijob_status_is_true(r->status, MPIJOB_COND_RUNNING);
            mpijob_status_set_condition(r->status, MPIJOB_COND_RUNNING, true, "MPIJobRunning", msg, r->now);
            if (!was)
                announce(r, "Normal", "MPIJobRunning", msg);
        }
        free(last);
    }
    kube_object_unref(launcher);
    if (rc == 0)
        show_stuck_pod(r, suspended, stuck, stuck_pod, stuck_message);
    if (rc == 0) {
        mpijob_status_set_replicas(r->status, "Launcher", &lc);
        set_worker_status(r, &wc, workers);
        if (mpijob_status_finished(r->status))
            r->clean_after_write = true;
    }

    for (int i = 0; i < workers; i++)
        kube_object_unref(worker_objs[i]);
    free(worker_objs);
    free(running);
    return rc;
}

int reconcile_job(struct reconcile_ctx *ctx, const char *key, struct reconcile_result *result)
{
    result->requeue_after_ms = 0;
    const char *slash = strchr(key, '/');
    if (!slash)
        return 0;
    char ns[256], name[256];
    snprintf(ns, sizeof(ns), "%.*s", (int)(slash - key), key);
    snprintf(name, sizeof(name), "%s", slash + 1);

    struct kube_object *obj = cache_get(&ctx->mpijobs, ns, name);
    if (status_behind(ctx->expect, key, obj ? obj->resource_version : NULL)) {
        kube_object_unref(obj);
        return 0; /* our status write is on its way into the cache; its event brings us back */
    }
    if (!obj)
        return 0; /* deleted: its dependents go with it through their ownerReferences */
    cJSON *tree = kube_object_parse(obj);
    int deleting = obj->deleting;
    kube_object_unref(obj);
    if (!tree)
        return KUBE_ENOMEM;

    /* A job managed by another controller gets not a single request from us. */
    const char *managed_by = json_string(tree, "spec.runPolicy.managedBy");
    if (deleting || (managed_by && *managed_by && strcmp(managed_by, MPIJOB_CONTROLLER_NAME) != 0)) {
        cJSON_Delete(tree);
        return 0;
    }

    struct mpijob *job = NULL;
    struct mpijob_problems problems = {0};
    int rc = mpijob_parse(tree, &ctx->limits, &job, &problems);
    if (rc == MPIJOB_EINVALID) {
        rc = reject(ctx, tree, &problems, ns, name);
        mpijob_problems_free(&problems);
        cJSON_Delete(tree);
        return rc;
    }
    mpijob_problems_free(&problems);
    if (rc < 0) {
        cJSON_Delete(tree);
        return rc;
    }

    cJSON *old_status = cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(tree, "status"), true);
    struct run r = {.ctx = ctx, .job = job, .tree = tree, .status = json_ensure_object(tree, "status")};
    r.now_t = ctx->now ? ctx->now() : time(NULL);
    r.result = result;
    clock_rfc3339(r.now_t, r.now);
    r.target = (struct event_target){.api_version = "kubeflow.org/v2beta1", .kind = MPIJOB_KIND,
                                     .namespace = job->namespace, .name = job->name, .uid = job->uid};
    if (!r.status) {
        rc = KUBE_ENOMEM;
    } else {
        rc = reconcile_valid(&r);
        if (rc == RESOURCE_EXISTS)
            rc = 0; /* reported in status and an event; nothing to retry until something changes */
        int wrc = write_status(&r, old_status);
        flush_announcements(&r, wrc == 0);
        if (rc == 0)
            rc = wrc;
        if (wrc == 0) {
            count_transitions(ctx, job->namespace, old_status, r.status);
            rc = after_status_written(&r) ?: rc;
        }
    }
    cJSON_Delete(old_status);
    cJSON_Delete(tree);
    mpijob_free(job);
    return rc;
}
