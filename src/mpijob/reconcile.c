#include "mpijob/reconcile.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpijob/plan.h"
#include "mpijob/status.h"
#include "util/clock.h"
#include "util/json.h"
#include "util/log.h"

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

/* Counts the job transitions a written status made: Created, Succeeded and Failed turning True,
 * and workers replaced (status.workerRestarts going up). */
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
    long long replaced = json_int(after, "workerRestarts", 0) - json_int(before, "workerRestarts", 0);
    if (replaced > 0)
        metrics_counter_add(ctx->metrics, "mpijob_worker_replacements_total",
                            "Failed workers replaced (counted against backoffLimit as status.workerRestarts).",
                            (double)replaced, labels);
}

/* ---- gathering: what the caches show, and what this controller remembers -------------------- */

/* Everything the planner reads, with the references it holds. */
struct snapshot {
    struct plan_input in;
    int n_workers;
    struct refusal refusal;
};

static void look_up(struct reconcile_ctx *ctx, const struct cache_set *set, const struct kube_resource *res,
                    const char *ns, const char *name, struct plan_object *out)
{
    out->obj = name ? cache_get(set, ns, name) : NULL;
    if (out->obj)
        expect_seen(ctx->expect, res, ns, name);
    else
        out->pending = name && expect_pending(ctx->expect, res, ns, name);
}

static int gather_named(struct reconcile_ctx *ctx, const struct mpijob *job, struct plan_input *in)
{
    const char *ns = job->namespace;
    char *cm = mpijob_configmap_name(job), *secret = mpijob_secret_name(job);
    char *launcher = mpijob_launcher_name(job);
    int rc = cm && secret && launcher ? 0 : KUBE_ENOMEM;
    if (rc == 0) {
        look_up(ctx, &ctx->services, &KUBE_SERVICES, ns, job->name, &in->service);
        look_up(ctx, &ctx->configmaps, &KUBE_CONFIGMAPS, ns, cm, &in->configmap);
        look_up(ctx, &ctx->secrets, &KUBE_SECRETS, ns, secret, &in->secret);
        look_up(ctx, &ctx->jobs, &KUBE_JOBS, ns, launcher, &in->launcher);
        const struct kube_resource *pg = podgroup_resource(&ctx->options);
        in->gang = pg && ctx->podgroups.count;
        if (in->gang)
            look_up(ctx, &ctx->podgroups, pg, ns, job->name, &in->podgroup);
        const struct kube_resource *wl = workload_resource(&ctx->options);
        in->workloads = in->gang && wl && ctx->workloads.count;
        if (in->workloads)
            look_up(ctx, &ctx->workloads, wl, ns, job->name, &in->workload);
    }
    free(cm);
    free(secret);
    free(launcher);
    return rc;
}

static int gather_pods(struct reconcile_ctx *ctx, const struct mpijob *job, struct snapshot *s)
{
    struct plan_input *in = &s->in;
    int workers = job->worker.replicas > 0 ? job->worker.replicas : 0;
    in->workers = calloc((size_t)workers + 1, sizeof(*in->workers));
    in->worker_counted = calloc((size_t)workers + 1, sizeof(bool));
    if (!in->workers || !in->worker_counted)
        return KUBE_ENOMEM;
    s->n_workers = workers;
    for (int i = 0; i < workers; i++) {
        char *name = mpijob_worker_name(job, i);
        if (!name)
            return KUBE_ENOMEM;
        look_up(ctx, &ctx->pods, &KUBE_PODS, job->namespace, name, &in->workers[i]);
        free(name);
        const struct kube_object *o = in->workers[i].obj;
        in->worker_counted[i] = o && o->uid && expect_failure_is_counted(ctx->expect, o->uid);
        in->workers[i].going = o && !o->deleting && expect_deletion_pending(ctx->expect, o->uid);
    }
    struct kube_object **list = NULL;
    int n = cache_list_by_owner(&ctx->pods, job->namespace, job->uid, &list);
    in->owned_pods = list;
    in->n_owned_pods = n > 0 ? (size_t)n : 0;
    if (n < 0)
        return n;
    bool *going = calloc(in->n_owned_pods + 1, sizeof(*going));
    if (!going)
        return KUBE_ENOMEM;
    for (size_t i = 0; i < in->n_owned_pods; i++)
        going[i] = !list[i]->deleting && expect_deletion_pending(ctx->expect, list[i]->uid);
    in->owned_going = going;
    if (in->launcher.obj) {
        n = cache_list_by_owner(&ctx->pods, job->namespace, in->launcher.obj->uid, &list);
        in->launcher_pods = list;
        in->n_launcher_pods = n > 0 ? (size_t)n : 0;
    }
    return n < 0 ? n : 0;
}

static void snapshot_free(struct snapshot *s)
{
    struct plan_input *in = &s->in;
    struct plan_object *single[] = {&in->service,  &in->configmap, &in->secret,
                                    &in->podgroup, &in->workload,  &in->launcher};
    for (size_t i = 0; i < sizeof(single) / sizeof(single[0]); i++)
        kube_object_unref(single[i]->obj);
    for (int i = 0; in->workers && i < s->n_workers; i++)
        kube_object_unref(in->workers[i].obj);
    free(in->workers);
    free(in->worker_counted);
    free((bool *)in->owned_going);
    kube_object_list_free(in->owned_pods, in->n_owned_pods);
    kube_object_list_free(in->launcher_pods, in->n_launcher_pods);
}

static int gather(struct reconcile_ctx *ctx, const struct mpijob *job, const cJSON *tree, const char *key,
                  struct snapshot *s)
{
    memset(s, 0, sizeof(*s));
    s->in.job = job;
    s->in.status = cJSON_GetObjectItemCaseSensitive(tree, "status");
    s->in.generation = json_int(tree, "metadata.generation", 0);
    s->in.options = &ctx->options;
    s->in.now = ctx->now ? ctx->now() : time(NULL);
    if (expect_refusal(ctx->expect, key, &s->refusal))
        s->in.refusal = &s->refusal;
    int rc = gather_named(ctx, job, &s->in);
    return rc < 0 ? rc : gather_pods(ctx, job, s);
}

/* ---- executing: the plan's actions through the client, stopping at the first failure -------- */

struct executor {
    struct reconcile_ctx *ctx;
    const char *ns, *name;
    const char *key; /* "ns/name" */
    cJSON *tree;     /* the MPIJob as cached; its status is replaced by the plan's when written */
    const cJSON *old_status;
    const struct plan *plan;
    struct event_target target;
};

static bool refused(int rc)
{
    return rc == KUBE_EFORBIDDEN || rc == KUBE_EINVALID || rc == KUBE_EBADREQUEST;
}

/* A failed request, logged with the server's message. A create or update the server refused
 * (quota, admission, a webhook, RBAC) is remembered for the next plan's status and said in a
 * FailedCreate event, which the recorder aggregates across retries. */
static void request_failed(struct executor *ex, const struct action *a, int rc, const struct kube_status *st)
{
    char what[32];
    snprintf(what, sizeof(what), "%s", a->type == ACTION_CREATE ? "create" : a->type == ACTION_DELETE ? "delete"
                                       : a->type == ACTION_DELETE_COLLECTION ? "deletecollection"
                                       : a->type == ACTION_PATCH ? "patch" : "update");
    const char *message = st->message ? st->message : error_str(rc);
    /* A Conflict is the cache being behind: the retry works from the newer object. */
    log_write(rc == KUBE_ECONFLICT ? LOG_INFO : LOG_WARN, "request failed",
              "job=%s verb=%s kind=%s name=%s code=%ld error=\"%s\" message=\"%s\"", ex->key, what,
              a->resource->kind, a->name ? a->name : a->selector, st->http_code, error_str(rc), log_quote(message));
    if (a->type == ACTION_DELETE || a->type == ACTION_DELETE_COLLECTION || !refused(rc))
        return;
    expect_refused(ex->ctx->expect, ex->key, a->resource->kind, a->name, message);
    if (ex->ctx->events)
        event_record(ex->ctx->events, &ex->target, "Warning", "FailedCreate", "cannot %s %s %s: %s", what,
                     a->resource->kind, a->name, message);
}

static int write_status(struct executor *ex)
{
    cJSON *status = cJSON_Duplicate(ex->plan->status, true);
    if (!status)
        return KUBE_ENOMEM;
    cJSON_DeleteItemFromObjectCaseSensitive(ex->tree, "status");
    cJSON_AddItemToObject(ex->tree, "status", status);
    struct kube_status st = {.retry_after_s = -1};
    int rc = kube_replace_status(ex->ctx->client, &MPIJOB_RESOURCE_V2BETA1, ex->ns, ex->name,
                                 ex->tree, NULL, &st);
    if (rc == 0) {
        expect_status_written(ex->ctx->expect, ex->key, json_string(ex->tree, "metadata.resourceVersion"));
        count_transitions(ex->ctx, ex->ns, ex->old_status, status);
    } else if (rc != KUBE_ECONFLICT) { /* Conflict: the cache was stale; the retry reads the newer object */
        log_warn("status update failed", "job=%s error=\"%s\" message=\"%s\"", ex->key, error_str(rc),
                 log_quote(st.message));
    }
    kube_status_clear(&st);
    return rc;
}

static int send(struct executor *ex, const struct action *a, struct kube_status *st)
{
    struct kube_client *c = ex->ctx->client;
    const char *ns = ex->ns;
    switch (a->type) {
    case ACTION_CREATE: {
        int rc = kube_create(c, a->resource, ns, a->object, NULL, st);
        return rc == KUBE_EALREADYEXISTS ? 0 : rc; /* created earlier; the cache has not caught up */
    }
    case ACTION_REPLACE: return kube_replace(c, a->resource, ns, a->name, a->object, NULL, st);
    case ACTION_PATCH: {
        struct kube_patch_opts opts = {.type = a->patch_type, .subresource = a->subresource};
        int rc = kube_patch(c, a->resource, ns, a->name, a->patch, &opts, NULL, st);
        return rc == KUBE_ENOTFOUND ? 0 : rc; /* deleted meanwhile: the next pass sees it */
    }
    case ACTION_DELETE: {
        struct kube_delete_opts opts = {.precondition_uid = a->uid, .propagation_policy = a->propagation,
                                        .grace_period_s = -1};
        if (a->count_failure)
            expect_failure_counted(ex->ctx->expect, a->uid);
        int rc = kube_delete(c, a->resource, ns, a->name, &opts, NULL, st);
        if (rc == 0 && a->resource == &KUBE_PODS)
            expect_deleted(ex->ctx->expect, a->uid);
        /* Gone, or replaced by a newer object of that name (the uid precondition failed). */
        return rc == KUBE_ENOTFOUND || (rc == KUBE_ECONFLICT && a->uid) ? 0 : rc;
    }
    case ACTION_DELETE_COLLECTION: {
        struct kube_delete_opts opts = {.grace_period_s = -1};
        cJSON *deleted = NULL;
        int rc = kube_delete_collection(c, a->resource, ns, a->selector, a->field_selector, &opts, &deleted, st);
        const cJSON *items = rc == 0 ? cJSON_GetObjectItemCaseSensitive(deleted, "items") : NULL, *item;
        cJSON_ArrayForEach(item, items)
            expect_deleted(ex->ctx->expect, json_string(item, "metadata.uid"));
        cJSON_Delete(deleted);
        return rc;
    }
    default: return KUBE_EINVAL;
    }
}

static int apply(struct executor *ex, const struct action *a)
{
    if (a->type == ACTION_WRITE_STATUS)
        return write_status(ex);
    if (a->type == ACTION_EVENT) {
        if (ex->ctx->events)
            event_record(ex->ctx->events, &ex->target, a->event_type, a->reason, "%s", a->message);
        return 0;
    }
    struct kube_status st = {.retry_after_s = -1};
    int rc = send(ex, a, &st);
    if (rc < 0) {
        request_failed(ex, a, rc, &st);
    } else if (a->type == ACTION_CREATE || a->type == ACTION_REPLACE || a->type == ACTION_PATCH) {
        if (a->type == ACTION_CREATE)
            expect_created(ex->ctx->expect, a->resource, ex->ns, a->name);
        expect_accepted(ex->ctx->expect, ex->key, a->resource->kind, a->name);
    }
    if (rc == 0 && a->type == ACTION_DELETE && (a->count_failure || a->resource == &MPIJOB_RESOURCE_V2BETA1))
        log_info(a->count_failure ? "replacing failed worker" : "deleted finished MPIJob after its TTL",
                 "job=%s name=%s", ex->key, a->name);
    kube_status_clear(&st);
    return rc;
}

/* A run of creations with no order among them (the Service, ConfigMap and Secret; the workers)
 * is sent by up to create_parallelism threads at once, so a large job is not created one object
 * at a time. A creation the plan marks `alone` never joins a run: the PodGroup, which must exist
 * before the pods it gathers (a gang scheduler may otherwise place a worker alone), and the
 * launcher Job, which comes last. A restart at any moment still converges: every creation is
 * idempotent (AlreadyExists). */
struct batch {
    struct executor *ex;
    const struct action *actions;
    int n;
    atomic_int next;
    atomic_int rc;
};

static void *create_some(void *arg)
{
    struct batch *b = arg;
    for (int k; atomic_load(&b->rc) == 0 && (k = atomic_fetch_add(&b->next, 1)) < b->n;) {
        int rc = apply(b->ex, &b->actions[k]);
        if (rc < 0)
            atomic_store(&b->rc, rc);
    }
    return NULL;
}

static int create_in_parallel(struct executor *ex, const struct action *actions, int n)
{
    struct batch b = {.ex = ex, .actions = actions, .n = n};
    int threads = ex->ctx->create_parallelism > 1 ? ex->ctx->create_parallelism : 1;
    threads = threads > n ? n : threads > 16 ? 16 : threads;
    pthread_t helpers[16];
    int started = 0;
    for (int t = 1; t < threads; t++)
        if (pthread_create(&helpers[started], NULL, create_some, &b) == 0)
            started++;
    create_some(&b); /* this thread takes its share too */
    for (int t = 0; t < started; t++)
        pthread_join(helpers[t], NULL);
    return atomic_load(&b.rc);
}

static bool unordered_create(const struct action *a)
{
    return a->type == ACTION_CREATE && !a->alone;
}

static int execute(struct executor *ex)
{
    const struct plan *p = ex->plan;
    /* A refusal of an object the job no longer wants is over (the plan's status says so). */
    struct refusal standing;
    if (expect_refusal(ex->ctx->expect, ex->key, &standing) && !plan_writes(p, standing.kind, standing.name))
        expect_accepted(ex->ctx->expect, ex->key, standing.kind, standing.name);
    for (size_t i = 0; i < p->n;) {
        size_t run = 1;
        while (unordered_create(&p->actions[i]) && i + run < p->n && unordered_create(&p->actions[i + run]))
            run++;
        int rc = run > 1 ? create_in_parallel(ex, &p->actions[i], (int)run) : apply(ex, &p->actions[i]);
        if (rc < 0)
            return rc;
        i += run;
    }
    return 0;
}

/* ---- one reconcile ---------------------------------------------------------------------------- */

/* Applies a plan to the MPIJob `tree` (its status is replaced by the plan's when written). */
static int execute_plan(struct reconcile_ctx *ctx, const char *key, const char *ns, const char *name, cJSON *tree,
                        const struct plan *plan)
{
    cJSON *old_status = cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(tree, "status"), true);
    struct executor ex = {.ctx = ctx, .ns = ns, .name = name, .key = key, .tree = tree, .old_status = old_status,
                          .plan = plan,
                          .target = {.api_version = "kubeflow.org/v2beta1", .kind = MPIJOB_KIND, .namespace = ns,
                                     .name = name, .uid = json_string(tree, "metadata.uid")}};
    int rc = execute(&ex);
    cJSON_Delete(old_status);
    return rc;
}

/* ---- a host-network job's ssh port ------------------------------------------------------------ */

static int port_of_object(const struct kube_object *o)
{
    if (!o || !strstr(o->json, ANNOTATION_SSH_PORT))
        return 0;
    cJSON *tree = kube_object_parse(o);
    int port = mpijob_ssh_port_of(tree);
    cJSON_Delete(tree);
    return port;
}

/* Where the search for a free port starts (FNV-1a of the uid): jobs spread over the range, and
 * a job starts from the same place every time. */
static int port_search_start(const char *uid)
{
    uint32_t h = 2166136261u;
    for (const char *c = uid ? uid : ""; *c; c++)
        h = (h ^ (uint8_t)*c) * 16777619u;
    return (int)(h % MPIJOB_SSH_PORT_COUNT);
}

/* The port of a host-network job (SPEC.md section 4): the one its ConfigMap carries, or while
 * the ConfigMap is on its way into the cache, the one its workers carry; for a new job, the
 * first port from port_search_start that no other job's ConfigMap in the caches carries. Two
 * jobs choosing at the same moment may choose the same port: their pods then never share a
 * node (it is their hostPort), which costs room, not a collision. 0, or KUBE_ENOMEM. */
static int choose_ssh_port(struct reconcile_ctx *ctx, struct mpijob *job, const struct plan_input *in)
{
    job->networking.ssh_port = port_of_object(in->configmap.obj);
    for (int i = 0; !job->networking.ssh_port && i < job->worker.replicas; i++)
        job->networking.ssh_port = port_of_object(in->workers[i].obj);
    if (job->networking.ssh_port)
        return 0;
    unsigned char used[(MPIJOB_SSH_PORT_COUNT + 7) / 8] = {0};
    for (size_t i = 0; i < ctx->configmaps.count; i++) {
        struct kube_object **list = NULL;
        int n = informer_list(ctx->configmaps.informers[i], NULL, &list);
        if (n < 0)
            return n;
        for (int k = 0; k < n; k++) {
            int port = list[k]->owner_uid && job->uid && strcmp(list[k]->owner_uid, job->uid) == 0
                           ? 0
                           : port_of_object(list[k]) - MPIJOB_SSH_PORT_MIN;
            if (port >= 0 && port < MPIJOB_SSH_PORT_COUNT)
                used[port / 8] |= (unsigned char)(1u << (port % 8));
        }
        kube_object_list_free(list, (size_t)n);
    }
    int start = port_search_start(job->uid);
    for (int k = 0; k < MPIJOB_SSH_PORT_COUNT; k++) {
        int port = (start + k) % MPIJOB_SSH_PORT_COUNT;
        if (!(used[port / 8] & (1u << (port % 8)))) {
            job->networking.ssh_port = MPIJOB_SSH_PORT_MIN + port;
            return 0;
        }
    }
    job->networking.ssh_port = MPIJOB_SSH_PORT_MIN + start; /* every port taken: share one */
    return 0;
}

/* ---- the training summary in an ended launcher's log ----------------------------------------- */

/* The longest the log reads of one reconcile may hold it up, retries included. */
#define LAUNCHER_LOG_READ_DEADLINE_MS 10000

/* One bounded read of the end of a pod's log: 0 with the text (*text to free), or the error with
 * the server's message in why. */
static int read_log_tail(struct reconcile_ctx *ctx, const char *ns, const char *pod, const char *container,
                         int lines, char **text, size_t *len, char *why, size_t why_len)
{
    char *path = kube_path(&KUBE_PODS, ns, pod, "log");
    char *c = container ? kube_escape(container) : NULL;
    char query[512];
    snprintf(query, sizeof(query), "%s%s%stailLines=%d&limitBytes=%d", c ? "container=" : "", c ? c : "",
             c ? "&" : "", lines, LAUNCHER_LOG_LIMIT_BYTES);
    struct kube_status st = {.retry_after_s = -1};
    int rc = KUBE_ENOMEM;
    /* The server stops at limitBytes; a server that does not is refused, not read whole. */
    if (path && (c || !container))
        rc = kube_get_text(ctx->client, path, query, LAUNCHER_LOG_LIMIT_BYTES + 4096, text, len, &st);
    if (rc < 0)
        snprintf(why, why_len, "%s%s%s", error_str(rc), st.message ? ": " : "", st.message ? st.message : "");
    kube_status_clear(&st);
    free(path);
    free(c);
    return rc;
}

/* Reads the log of the launcher pod plan_summary_source names, once (SPEC.md section 3,
 * status.launcherSummary): out->pod stays NULL when there is nothing to read. */
static void read_summary(struct reconcile_ctx *ctx, const char *key, const struct plan_input *in,
                         struct summary_read *out)
{
    char read_uid[128];
    bool have_uid = expect_log_read_uid(ctx->expect, key, read_uid, sizeof(read_uid));
    const struct kube_object *o = plan_summary_source(in, have_uid ? read_uid : NULL);
    if (!o)
        return;
    /* An empty log read before: read again only once its time has come (a reconcile for any other
     * reason comes sooner); until then nothing is read and nothing planned for it. */
    uint64_t since = 0;
    int empties = expect_log_empty_reads(ctx->expect, key, o->uid, &since);
    uint64_t due = (uint64_t)LAUNCHER_LOG_EMPTY_RETRY_MS * (uint64_t)empties;
    if (empties > 0 && since < due) {
        out->retry_after_ms = (unsigned)(due - since);
        return;
    }
    cJSON *pod = kube_object_parse(o);
    const cJSON *first = cJSON_GetArrayItem(json_path(pod, "spec.containers"), 0);
    const char *container = json_string(first, "name"); /* the launcher's mpirun runs in the first */
    char *text = NULL;
    size_t len = 0;
    out->pod = o->name;
    uint64_t before = kube_set_thread_deadline(clock_now_ms() + LAUNCHER_LOG_READ_DEADLINE_MS);
    int rc = read_log_tail(ctx, in->job->namespace, o->name, container, LAUNCHER_LOG_TAIL_LINES, &text, &len,
                           out->message, sizeof(out->message));
    if (rc == 0) {
        out->found = summary_parse(text, len, &out->summary, out->message, sizeof(out->message));
        if (out->found == SUMMARY_NONE && len >= LAUNCHER_LOG_LIMIT_BYTES) {
            /* Cut at the byte limit: long lines may have pushed the summary past it. */
            free(text);
            text = NULL;
            if (read_log_tail(ctx, in->job->namespace, o->name, container, LAUNCHER_LOG_RETRY_TAIL_LINES, &text,
                              &len, out->message, sizeof(out->message)) == 0)
                out->found = summary_parse(text, len, &out->summary, out->message, sizeof(out->message));
        }
    }
    kube_set_thread_deadline(before);
    out->unreadable = rc < 0;
    int empty = rc == 0 && len == 0 ? expect_log_empty(ctx->expect, key, o->uid) : 0;
    if (empty > 0 && empty < LAUNCHER_LOG_EMPTY_READS)
        out->retry_after_ms = LAUNCHER_LOG_EMPTY_RETRY_MS * (unsigned)empty;
    log_info("read the launcher's log",
              "job=%s pod=%s bytes=%zu result=%s transport=%s message=\"%s\" read_again_ms=%u", key, o->name, len,
              rc < 0 ? "unreadable" : out->found == SUMMARY_FOUND ? "summary" : out->found == SUMMARY_BROKEN
                                                                                    ? "broken summary"
                                                                                    : "no summary",
              out->found == SUMMARY_FOUND ? out->summary.transport : "", log_quote(out->message), out->retry_after_ms);
    /* A summary is remembered by the status that shows it (and read again should that write be
     * lost); an empty log is read again (LAUNCHER_LOG_EMPTY_READS); anything else is remembered
     * here: the log is read once. */
    if ((rc < 0 || out->found != SUMMARY_FOUND) && !out->retry_after_ms)
        expect_log_read(ctx->expect, key, o->uid);
    free(text);
    cJSON_Delete(pod);
}

static int reconcile_valid(struct reconcile_ctx *ctx, const char *key, struct mpijob *job, cJSON *tree,
                           struct reconcile_result *result)
{
    struct snapshot s;
    struct plan plan = {0};
    struct summary_read summary = {0};
    int rc = gather(ctx, job, tree, key, &s);
    if (rc == 0 && job->networking.host_network)
        rc = choose_ssh_port(ctx, job, &s.in);
    if (rc == 0) {
        read_summary(ctx, key, &s.in, &summary);
        s.in.summary = &summary;
        rc = plan_job(&s.in, &plan);
    }
    if (rc == 0) {
        rc = execute_plan(ctx, key, job->namespace, job->name, tree, &plan);
        result->requeue_after_ms = plan.requeue_after_ms;
        if (summary.retry_after_ms && (!result->requeue_after_ms || summary.retry_after_ms < result->requeue_after_ms))
            result->requeue_after_ms = summary.retry_after_ms;
    }
    plan_free(&plan);
    snapshot_free(&s);
    return rc;
}

/* The invalid-spec path: Failed/InvalidSpec naming every problem, once (plan_invalid). */
static int reject(struct reconcile_ctx *ctx, const char *key, const char *ns, const char *name, cJSON *tree,
                  const struct mpijob_problems *problems)
{
    char *message = mpijob_problems_join(problems);
    struct plan plan = {0};
    int rc = message ? plan_invalid(cJSON_GetObjectItemCaseSensitive(tree, "status"),
                                    json_int(tree, "metadata.generation", 0), ctx->now ? ctx->now() : time(NULL),
                                    message, &plan)
                     : KUBE_ENOMEM;
    if (rc == 0)
        rc = execute_plan(ctx, key, ns, name, tree, &plan);
    plan_free(&plan);
    free(message);
    return rc;
}

/* The MPIJob from the cache, unless there is nothing to do: gone, being deleted, managed by
 * another controller, or our status write not yet seen. */
static cJSON *job_to_reconcile(struct reconcile_ctx *ctx, const char *key, const char *ns, const char *name)
{
    struct kube_object *obj = cache_get(&ctx->mpijobs, ns, name);
    if (!obj)
        expect_forget_job(ctx->expect, key); /* its dependents go with it through their ownerReferences */
    if (!obj || expect_status_behind(ctx->expect, key, obj->resource_version) || obj->deleting) {
        kube_object_unref(obj);
        return NULL; /* our status write is on its way into the cache; its event brings us back */
    }
    cJSON *tree = kube_object_parse(obj);
    kube_object_unref(obj);
    /* A job managed by another controller gets not a single request from us. */
    const char *managed_by = json_string(tree, "spec.runPolicy.managedBy");
    if (managed_by && *managed_by && strcmp(managed_by, MPIJOB_CONTROLLER_NAME) != 0) {
        cJSON_Delete(tree);
        return NULL;
    }
    return tree ? tree : cJSON_CreateNull(); /* a null tree: out of memory */
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
    cJSON *tree = job_to_reconcile(ctx, key, ns, name);
    if (!tree)
        return 0;
    if (cJSON_IsNull(tree)) {
        cJSON_Delete(tree);
        return KUBE_ENOMEM;
    }
    struct mpijob *job = NULL;
    struct mpijob_problems problems = {0};
    int rc = mpijob_parse(tree, &ctx->limits, &job, &problems);
    if (rc == MPIJOB_EINVALID)
        rc = reject(ctx, key, ns, name, tree, &problems);
    else if (rc == 0)
        rc = reconcile_valid(ctx, key, job, tree, result);
    mpijob_problems_free(&problems);
    cJSON_Delete(tree);
    mpijob_free(job);
    return rc;
}
