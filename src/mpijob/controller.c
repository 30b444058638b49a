#include "mpijob/controller.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kube/discovery.h"
#include "kube/informer.h"
#include "kube/workqueue.h"
#include "mpijob/builders.h"
#include "mpijob/reconcile.h"
#include "mpijob/status.h"
#include "mpijob/trim.h"
#include "util/clock.h"
#include "util/log.h"

enum { R_MPIJOBS, R_PODS, R_SERVICES, R_CONFIGMAPS, R_SECRETS, R_JOBS, R_PODGROUPS, R_WORKLOADS, R_COUNT };

struct controller {
    struct controller_config cfg;
    struct reconcile_ctx ctx;
    struct workqueue *queue;
    struct informer **informers[R_COUNT];
    const char **namespaces; /* one entry per informer of a resource; NULL: all */
    size_t n_ns;
    pthread_t *threads;
    int n_threads;
    atomic_ullong reconciles;
    atomic_ullong pod_reports_held;
    char selector[256];
    uint64_t watch_restarts_reported;
};

/* How long a report that needs no answer at once waits, so that the reports which come with it
 * are answered together: one reconcile, one hostfile write and one status write for a burst.
 * A key has one deadline, the earliest asked for (workqueue_add_after): reports that keep coming
 * do not put the reconcile off. */
#define PROGRESS_HOLD_MS 300
/* A launcher pod's success, held until its Job's outcome (see launcher_succeeded). */
#define LAUNCHER_SUCCESS_HOLD_MS 2000

/* The job key ns/name on the queue after ms (0: at once). */
static void hold_key(struct controller *c, const char *ns, const char *name, uint64_t ms)
{
    char key[512];
    snprintf(key, sizeof(key), "%s/%s", ns, name);
    workqueue_add_after(c->queue, key, ms);
}

static void enqueue_key(struct controller *c, const char *ns, const char *name) { hold_key(c, ns, name, 0); }

static void on_job(void *ctx, struct kube_object *o) { enqueue_key(ctx, o->namespace, o->name); }

/* An MPIJob update with the same generation, not newly being deleted, changed only its status or
 * metadata: most often it is the echo of our own status write, and the reconcile it asks for
 * has nothing to do but see the reports that came meanwhile. Answered after PROGRESS_HOLD_MS,
 * so that an echo does not start a reconcile in the midst of a burst of pod reports (and a
 * status write for half of them). A change of spec, or a deletion, is answered at once. */
static void on_job_update(void *ctx, struct kube_object *old_obj, struct kube_object *o)
{
    if (old_obj && old_obj->generation == o->generation && old_obj->deleting == o->deleting) {
        hold_key(ctx, o->namespace, o->name, PROGRESS_HOLD_MS);
        return;
    }
    enqueue_key(ctx, o->namespace, o->name);
}

/* A dependent's job, through the job-name label every object of ours carries (kept by the
 * informer as index_label: no parsing per event). */
static void on_dependent(void *ctx, struct kube_object *o)
{
    if (o->index_label)
        enqueue_key(ctx, o->namespace, o->index_label);
}

/* An update of a Service, ConfigMap, Secret, PodGroup or Workload: the echo of our own write,
 * a scheduler's word on a gang, or someone's edit that the reconcile puts right. None of them
 * needs an answer within PROGRESS_HOLD_MS; one being deleted is answered at once. */
static void on_dependent_update(void *ctx, struct kube_object *old_obj, struct kube_object *o)
{
    if (!o->index_label)
        return;
    if (o->deleting)
        enqueue_key(ctx, o->namespace, o->index_label);
    else
        hold_key(ctx, o->namespace, o->index_label, PROGRESS_HOLD_MS);
}

/* A launcher Job's state (job_state_of), or -1 when it cannot be read. */
static int launcher_job_state(const struct kube_object *o)
{
    cJSON *job = kube_object_parse(o);
    if (!job)
        return -1;
    char reason[8], message[8];
    int state = (int)job_state_of(job, reason, sizeof(reason), message, sizeof(message));
    cJSON_Delete(job);
    return state;
}

/* The Job controller writes a Job's status several times on the way to one outcome: its active
 * and ready counts, a pod's success recorded before Complete (SuccessCriteriaMet), a failure
 * before Failed (FailureTarget). An update that leaves the Job in the state it was in (active,
 * suspended) waits PROGRESS_HOLD_MS, so that the update with the outcome is answered by one
 * reconcile and one status write. A Job that finished, was suspended or resumed, or is being
 * deleted is answered at once. */
static void on_launcher_job_update(void *ctx, struct kube_object *old_obj, struct kube_object *o)
{
    if (!o->index_label)
        return;
    int was = old_obj && !old_obj->deleting ? launcher_job_state(old_obj) : -1;
    if (o->deleting || was < 0 || was != launcher_job_state(o))
        enqueue_key(ctx, o->namespace, o->index_label);
    else
        hold_key(ctx, o->namespace, o->index_label, PROGRESS_HOLD_MS);
}

/* A pod's status.phase in its compact JSON ("" when it has none yet). The only "phase" member
 * of a Pod is its status's. */
static size_t pod_phase(const struct kube_object *o, const char **phase)
{
    static const char member[] = "\"phase\":\"";
    const char *p = o->json ? strstr(o->json, member) : NULL;
    if (!p) {
        *phase = "";
        return 0;
    }
    *phase = p + sizeof(member) - 1;
    const char *end = strchr(*phase, '"');
    return end ? (size_t)(end - *phase) : 0;
}

static bool phase_is(const char *phase, size_t len, const char *want)
{
    return len == strlen(want) && memcmp(phase, want, len) == 0;
}

/* A pod that was and still is Pending or Running, and is not being deleted: a worker starting,
 * turning Running or Ready. The kubelets report a job's workers within moments of each other:
 * held by PROGRESS_HOLD_MS. A pod that failed, ended or is being deleted is answered at once
 * (but for a launcher's success, below). */
static bool pod_progressed(const struct kube_object *old_obj, const struct kube_object *o)
{
    if (o->deleting || !old_obj || old_obj->deleting)
        return false;
    const char *was, *is;
    size_t was_len = pod_phase(old_obj, &was), is_len = pod_phase(o, &is);
    return (phase_is(was, was_len, "Pending") || phase_is(was, was_len, "Running")) &&
           (phase_is(is, is_len, "Pending") || phase_is(is, is_len, "Running"));
}

/* A launcher pod that has just Succeeded. Its Job's completion follows (the Job controller
 * batches pod updates for up to a second), and the reconcile for that says Succeeded with the
 * launcher's counts and training summary. Holding the pod's own report by
 * LAUNCHER_SUCCESS_HOLD_MS spares a status write that the Job's outcome would replace at once;
 * should the Job be slower, the held reconcile writes the pod's news then. */
static bool launcher_succeeded(const struct kube_object *old_obj, const struct kube_object *o)
{
    if (o->deleting || !old_obj || !o->json || !strstr(o->json, "\"" LABEL_JOB_ROLE "\":\"launcher\""))
        return false;
    const char *was, *is;
    size_t was_len = pod_phase(old_obj, &was), is_len = pod_phase(o, &is);
    return phase_is(is, is_len, "Succeeded") && !phase_is(was, was_len, "Succeeded");
}

static void on_pod_update(void *ctx, struct kube_object *old_obj, struct kube_object *o)
{
    struct controller *c = ctx;
    if (!o->index_label)
        return;
    uint64_t hold = launcher_succeeded(old_obj, o) ? LAUNCHER_SUCCESS_HOLD_MS
                    : pod_progressed(old_obj, o)   ? PROGRESS_HOLD_MS
                                                   : 0;
    if (!hold) {
        enqueue_key(c, o->namespace, o->index_label);
        return;
    }
    hold_key(c, o->namespace, o->index_label, hold);
    atomic_fetch_add(&c->pod_reports_held, 1);
}

/* The upper bounds of mpijob_reconcile_duration_seconds, in seconds. */
static const double RECONCILE_BUCKETS[] = {0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10};
#define N_RECONCILE_BUCKETS (sizeof(RECONCILE_BUCKETS) / sizeof(RECONCILE_BUCKETS[0]))
#define HELP_RECONCILES "Reconciles of MPIJobs."
#define HELP_RECONCILE_TIME "Time one reconcile took."
#define HELP_RETRIES "Job keys put back on the queue with backoff after an error."

/* The reconcile series, before the first reconcile: the counters of known label values at 0, so
 * that a rate over them (the alerts' error ratios) is defined before the first error, and the
 * histogram with nothing in it. */
static void declare_metrics(struct metrics *m)
{
    static const char *const results[] = {"success", "error"};
    for (size_t i = 0; i < sizeof(results) / sizeof(results[0]); i++) {
        const char *const labels[] = {"result", results[i], NULL};
        metrics_counter_add(m, "mpijob_reconcile_total", HELP_RECONCILES, 0, labels);
    }
    metrics_counter_add(m, "mpijob_workqueue_retries_total", HELP_RETRIES, 0, NULL);
    metrics_histogram_declare(m, "mpijob_reconcile_duration_seconds", HELP_RECONCILE_TIME, RECONCILE_BUCKETS,
                              N_RECONCILE_BUCKETS, NULL);
}

static void *worker(void *arg)
{
    struct controller *c = arg;
    char *key;
    while (workqueue_get(c->queue, &key) == 0) {
        struct reconcile_result res = {0};
        uint64_t t0 = clock_now_ms();
        int rc = reconcile_job(&c->ctx, key, &res);
        c->reconciles++;
        if (c->cfg.metrics) {
            const char *const labels[] = {"result", rc < 0 ? "error" : "success", NULL};
            metrics_counter_add(c->cfg.metrics, "mpijob_reconcile_total", HELP_RECONCILES, 1, labels);
            metrics_histogram_observe(c->cfg.metrics, "mpijob_reconcile_duration_seconds", HELP_RECONCILE_TIME,
                                      RECONCILE_BUCKETS, N_RECONCILE_BUCKETS,
                                      (double)(clock_now_ms() - t0) / 1000.0, NULL);
            if (rc < 0)
                metrics_counter_add(c->cfg.metrics, "mpijob_workqueue_retries_total", HELP_RETRIES, 1, NULL);
        }
        if (rc < 0) {
            /* A Conflict only means the cache was behind our own last write: routine. */
            if (rc == KUBE_ECONFLICT)
                log_debug("reconcile saw a stale object; retrying", "job=%s", key);
            else
                log_info("reconcile failed; retrying with backoff", "job=%s error=\"%s\"", key, error_str(rc));
            workqueue_add_rate_limited(c->queue, key);
        } else {
            workqueue_forget(c->queue, key);
            if (res.requeue_after_ms)
                workqueue_add_after(c->queue, key, res.requeue_after_ms);
        }
        workqueue_done(c->queue, key);
        free(key);
    }
    return NULL;
}

static int start_informers(struct controller *c, int which, const struct kube_resource *res,
                           const char *selector, struct cache_set *set)
{
    c->informers[which] = calloc(c->n_ns, sizeof(struct informer *));
    if (!c->informers[which])
        return KUBE_ENOMEM;
    set->informers = c->informers[which];
    set->namespaces = c->namespaces;
    set->count = c->n_ns;
    bool is_job = which == R_MPIJOBS;
    for (size_t i = 0; i < c->n_ns; i++) {
        struct informer_config icfg = {
            .resource = res,
            .namespace = c->namespaces[i],
            .label_selector = selector,
            .index_label = is_job ? NULL : LABEL_JOB_NAME,
            .transform = which == R_JOBS ? trim_launcher_job : which == R_SECRETS ? trim_secret : NULL,
            .handlers = {is_job ? on_job : on_dependent,
                         is_job ? on_job_update
                         : which == R_PODS ? on_pod_update
                         : which == R_JOBS ? on_launcher_job_update
                         : on_dependent_update,
                         is_job ? NULL : on_dependent, c},
        };
        int rc = informer_new(c->cfg.client, &icfg, &c->informers[which][i]);
        if (rc == 0)
            rc = informer_start(c->informers[which][i]);
        if (rc < 0)
            return rc;
    }
    return 0;
}

int controller_start(const struct controller_config *cfg, struct controller **out)
{
    *out = NULL;
    struct controller *c = calloc(1, sizeof(*c));
    if (!c)
        return KUBE_ENOMEM;
    c->cfg = *cfg;
    if (c->cfg.metrics)
        declare_metrics(c->cfg.metrics);
    if (c->cfg.threads <= 0)
        c->cfg.threads = 2;
    if (!c->cfg.sync_timeout_ms)
        c->cfg.sync_timeout_ms = 60000;
    c->n_ns = cfg->n_namespaces ? cfg->n_namespaces : 1;
    c->namespaces = calloc(c->n_ns, sizeof(char *));
    struct workqueue_options qopts = {.clock = cfg->clock};
    c->queue = workqueue_new(&qopts);
    if (!c->namespaces || !c->queue) {
        controller_stop(c);
        return KUBE_ENOMEM;
    }
    for (size_t i = 0; i < cfg->n_namespaces; i++)
        c->namespaces[i] = cfg->namespaces[i];
    snprintf(c->selector, sizeof(c->selector), "%s=%s", LABEL_OPERATOR_NAME,
             cfg->options.operator_name ? cfg->options.operator_name : DEFAULT_OPERATOR_NAME);

    c->ctx = (struct reconcile_ctx){.client = cfg->client, .events = cfg->events, .options = cfg->options,
                                    .limits = cfg->limits, .create_parallelism = c->cfg.threads,
                                    .expect = expectations_new(), .metrics = cfg->metrics};
    if (!c->ctx.expect) {
        controller_stop(c);
        return KUBE_ENOMEM;
    }
    int rc = start_informers(c, R_MPIJOBS, &MPIJOB_RESOURCE_V2BETA1, NULL, &c->ctx.mpijobs);
    if (rc == 0)
        rc = start_informers(c, R_PODS, &KUBE_PODS, c->selector, &c->ctx.pods);
    if (rc == 0)
        rc = start_informers(c, R_SERVICES, &KUBE_SERVICES, c->selector, &c->ctx.services);
    if (rc == 0)
        rc = start_informers(c, R_CONFIGMAPS, &KUBE_CONFIGMAPS, c->selector, &c->ctx.configmaps);
    if (rc == 0)
        rc = start_informers(c, R_SECRETS, &KUBE_SECRETS, c->selector, &c->ctx.secrets);
    if (rc == 0)
        rc = start_informers(c, R_JOBS, &KUBE_JOBS, c->selector, &c->ctx.jobs);
    /* PodGroups carry no labels of ours: they are found by name and owner. */
    const struct kube_resource *pg = podgroup_resource(&cfg->options);
    if (rc == 0 && pg)
        rc = start_informers(c, R_PODGROUPS, pg, NULL, &c->ctx.podgroups);
    const struct kube_resource *wl = workload_resource(&cfg->options);
    if (rc == 0 && wl)
        rc = start_informers(c, R_WORKLOADS, wl, NULL, &c->ctx.workloads);
    for (int r = 0; rc == 0 && r < R_COUNT; r++)
        for (size_t i = 0; rc == 0 && c->informers[r] && i < c->n_ns; i++)
            rc = informer_wait_synced(c->informers[r][i], c->cfg.sync_timeout_ms);
    if (rc < 0) {
        controller_stop(c);
        return rc;
    }
    c->threads = calloc((size_t)c->cfg.threads, sizeof(pthread_t));
    if (!c->threads) {
        controller_stop(c);
        return KUBE_ENOMEM;
    }
    for (int i = 0; i < c->cfg.threads; i++) {
        if (pthread_create(&c->threads[i], NULL, worker, c) != 0)
            break;
        c->n_threads++;
    }
    log_info("controller started", "threads=%d namespaces=%zu", c->n_threads, cfg->n_namespaces);
    *out = c;
    return 0;
}

uint64_t controller_reconciles(struct controller *c) { return c->reconciles; }
uint64_t controller_pod_reports_held(struct controller *c) { return c->pod_reports_held; }

void controller_update_metrics(struct controller *c)
{
    if (!c->cfg.metrics)
        return;
    metrics_gauge_set(c->cfg.metrics, "mpijob_workqueue_depth", "Job keys waiting to be reconciled.",
                      (double)(workqueue_len(c->queue) + workqueue_delayed_len(c->queue)), NULL);
    uint64_t restarts = 0;
    for (int r = 0; r < R_COUNT; r++)
        for (size_t i = 0; c->informers[r] && i < c->n_ns; i++) {
            struct informer_stats st;
            informer_stats(c->informers[r][i], &st);
            restarts += st.watch_restarts + st.relists;
        }
    /* A counter only grows: add what happened since the last scrape. */
    metrics_counter_add(c->cfg.metrics, "mpijob_watch_restarts_total",
                        "Watches resumed or relisted after a stream ended, dropped or expired.",
                        (double)(restarts - c->watch_restarts_reported), NULL);
    c->watch_restarts_reported = restarts;
}

enum server_support controller_server_support(int major, int minor, char *msg, size_t msg_len)
{
    if (major < 0 || minor < 0) {
        snprintf(msg, msg_len, "its version does not read as major.minor; supported: Kubernetes 1.%d to 1.%d",
                 MPIJOB_OLDEST_TESTED_MINOR, MPIJOB_NEWEST_TESTED_MINOR);
        return SERVER_UNKNOWN;
    }
    if (major < 1 || (major == 1 && minor < MPIJOB_OLDEST_TESTED_MINOR)) {
        snprintf(msg, msg_len,
                 "Kubernetes %d.%d is older than 1.%d, the oldest version this operator is tested on; "
                 "it may work, but nothing here proves it",
                 major, minor, MPIJOB_OLDEST_TESTED_MINOR);
        return SERVER_OLDER;
    }
    if (major > 1 || minor > MPIJOB_NEWEST_TESTED_MINOR) {
        snprintf(msg, msg_len, "Kubernetes %d.%d is newer than 1.%d, the newest version this operator is tested on",
                 major, minor, MPIJOB_NEWEST_TESTED_MINOR);
        return SERVER_NEWER;
    }
    snprintf(msg, msg_len, "supported: Kubernetes 1.%d to 1.%d, tested on both", MPIJOB_OLDEST_TESTED_MINOR,
             MPIJOB_NEWEST_TESTED_MINOR);
    return SERVER_TESTED;
}

/* An API the controller needs, and what for (the words of the error when it is not served). */
struct need {
    const struct kube_resource *res;
    const char *for_what;
};

int controller_check_server(struct kube_client *client, const struct server_needs *needs, char *err,
                            size_t err_len)
{
    const char *server = kube_client_config(client)->server;
    struct kube_server_version v;
    struct kube_status st = {.retry_after_s = -1};
    int rc = kube_server_version(client, &v, &st);
    if (rc < 0) {
        snprintf(err, err_len, "GET /version: %s%s%s", error_str(rc), st.message ? ": " : "",
                 st.message ? st.message : "");
        kube_status_clear(&st);
        return rc;
    }
    kube_status_clear(&st);
    char words[300];
    enum server_support support = controller_server_support(v.major, v.minor, words, sizeof(words));
    if (support == SERVER_OLDER || support == SERVER_UNKNOWN)
        log_warn("the API server's Kubernetes version is outside the tested range", "server=%s version=%s note=\"%s\"",
                 server, v.git_version[0] ? v.git_version : "(none)", words);
    else
        log_info("API server", "server=%s version=%s note=\"%s\"", server, v.git_version, words);

    const struct kube_resource *pg = needs && needs->options ? podgroup_resource(needs->options) : NULL;
    const struct kube_resource *wl = needs && needs->options ? workload_resource(needs->options) : NULL;
    static const char workload_words[] =
        "gang scheduling by kube-scheduler (--gang-scheduling workload): Kubernetes 1.36 or later, with "
        "kube-apiserver --runtime-config=scheduling.k8s.io/v1alpha2=true and --feature-gates="
        "GenericWorkload=true,GangScheduling=true on kube-apiserver, kube-scheduler and "
        "kube-controller-manager (TopologyAwareWorkloadScheduling=true too for spec.placement)";
    const struct need list[] = {
        {&KUBE_PODS, "the workers"},
        {&KUBE_SERVICES, "the workers' headless Service"},
        {&KUBE_CONFIGMAPS, "the hostfile"},
        {&KUBE_SECRETS, "the SSH keys"},
        {&KUBE_EVENTS, "events"},
        {&KUBE_JOBS, "the launcher"},
        {needs && needs->leases ? &KUBE_LEASES : NULL, "leader election (--leader-elect)"},
        {wl, workload_words},
        {wl ? NULL : pg, "gang scheduling (--gang-scheduling): install the gang scheduler and its PodGroup CRD"},
        {wl ? pg : NULL, workload_words},
    };
    for (size_t i = 0; i < sizeof(list) / sizeof(list[0]); i++) {
        if (!list[i].res)
            continue;
        rc = kube_resource_served(client, list[i].res, &st);
        if (rc == 0) {
            char gv[200];
            kube_group_version(list[i].res, gv, sizeof(gv));
            snprintf(err, err_len, "the API server %s (Kubernetes %s) does not serve %s %s, which the operator needs for %s",
                     server, v.git_version, gv, list[i].res->plural, list[i].for_what);
            kube_status_clear(&st);
            return MPIJOB_ENOAPI;
        }
        if (rc < 0) {
            snprintf(err, err_len, "discovery of %s/%s: %s%s%s", list[i].res->group, list[i].res->version,
                     error_str(rc), st.message ? ": " : "", st.message ? st.message : "");
            kube_status_clear(&st);
            return rc;
        }
        kube_status_clear(&st);
    }
    return controller_check_crd(client, err, err_len);
}

int controller_check_crd(struct kube_client *client, char *err, size_t err_len)
{
    char path[128];
    snprintf(path, sizeof(path), "/apis/%s/%s", MPIJOB_RESOURCE_V2BETA1.group, MPIJOB_RESOURCE_V2BETA1.version);
    cJSON *list = NULL;
    struct kube_status st = {.retry_after_s = -1};
    int rc = kube_request(client, "GET", path, NULL, NULL, NULL, &list, &st);
    bool served = false;
    if (rc == 0) {
        const cJSON *r;
        cJSON_ArrayForEach(r, cJSON_GetObjectItemCaseSensitive(list, "resources")) {
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(r, "name");
            if (cJSON_IsString(name) && strcmp(name->valuestring, MPIJOB_RESOURCE_V2BETA1.plural) == 0)
                served = true;
        }
    }
    if (rc == KUBE_ENOTFOUND || (rc == 0 && !served)) {
        snprintf(err, err_len,
                 "the MPIJob CRD is not installed: %s does not serve %s/%s %s; install it with "
                 "kubectl apply -f manifests/crd/kubeflow.org_mpijobs.yaml",
                 kube_client_config(client)->server, MPIJOB_RESOURCE_V2BETA1.group,
                 MPIJOB_RESOURCE_V2BETA1.version, MPIJOB_RESOURCE_V2BETA1.plural);
        rc = MPIJOB_ENOCRD;
    } else if (rc < 0) {
        snprintf(err, err_len, "%s%s%s", error_str(rc), st.message ? ": " : "", st.message ? st.message : "");
    }
    kube_status_clear(&st);
    cJSON_Delete(list);
    return rc;
}

void controller_stop(struct controller *c)
{
    if (!c)
        return;
    if (c->queue)
        workqueue_shutdown(c->queue);
    for (int i = 0; i < c->n_threads; i++)
        pthread_join(c->threads[i], NULL);
    /* Informers stop before the queue goes: their handlers still add keys until then. */
    for (int r = 0; r < R_COUNT; r++) {
        for (size_t i = 0; c->informers[r] && i < c->n_ns; i++)
            informer_free(c->informers[r][i]);
        free(c->informers[r]);
    }
    workqueue_free(c->queue);
    expectations_free(c->ctx.expect);
    free(c->threads);
    free(c->namespaces);
    free(c);
}
