/* The controller against the API server: the double, or a real kube-apiserver (with
 * kube-controller-manager and kube-scheduler when KUBEBUILDER_ASSETS has them) when
 * KUBEBUILDER_ASSETS is set.
 *
 * 1. One job of W workers (W = 8, 64, 512; BENCH_SIZES overrides): time from the MPIJob's
 *    creation (the API server's answer to its POST) until its last object (the launcher Job,
 *    created after every worker) shows on a watch, divided by the time a plain client takes to
 *    make the same key pair and create the same objects (built by the same builders) with the
 *    same concurrency (2 threads). Both run against the same server, alternating, BENCH_ROUNDS
 *    rounds (default 5; median, min and max reported), with the same watches open on both
 *    namespaces (the controller's own, and passive informers on the baseline's), so that the API
 *    server does the same work for every object in both runs. Measured with the operator's
 *    default client flags (no client-side limit) and with the former default, --qps 20
 *    --burst 30, for comparison (BENCH_CONFIGS=defaults or qps20 runs one of them).
 * 2. N jobs of 8 workers (default 100): total time until every launcher exists, API requests
 *    per job from the operator's client, resident memory and CPU time of this process (the
 *    controller; the API server is another process).
 * Prints figures; asserts nothing about time. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "kube/client.h"
#include "kube/config.h"
#include "kube/informer.h"
#include "mpijob/builders.h"
#include "mpijob/controller.h"
#include "mpijob/sshkeys.h"
#include "support/apiserver.h"
#include "util/clock.h"
#include "util/json.h"
#include "util/log.h"

static struct test_apiserver srv;

/* A client as the operator makes one from its flags: qps 0 is its default (no limit). */
static struct kube_client *new_client_with(double qps, int burst)
{
    struct kube_config *cfg = NULL;
    char err[256];
    if (kube_config_load_kubeconfig(srv.kubeconfig, NULL, &cfg, err, sizeof(err)) < 0) {
        fprintf(stderr, "%s\n", err);
        exit(1);
    }
    struct kube_client_options opts = {.qps = qps, .burst = burst};
    struct kube_client *c = NULL;
    kube_client_new(cfg, &opts, &c);
    return c;
}

static struct kube_client *new_client(void) { return new_client_with(-1, 0); }

static cJSON *job_json(const char *ns, const char *name, int workers)
{
    char text[2048];
    snprintf(text, sizeof(text),
             "{\"apiVersion\":\"kubeflow.org/v2beta1\",\"kind\":\"MPIJob\",\"metadata\":{\"name\":\"%s\","
             "\"namespace\":\"%s\"},\"spec\":{\"mpiReplicaSpecs\":{\"Launcher\":{\"template\":{\"spec\":{\"containers\":"
             "[{\"name\":\"l\",\"image\":\"w\",\"command\":[\"mpirun\",\"mpijob-worker\",\"train\"]}]}}},"
             "\"Worker\":{\"replicas\":%d,\"template\":{\"spec\":{\"containers\":[{\"name\":\"w\",\"image\":\"w\"}]}}}}}}",
             name, ns, workers);
    return cJSON_Parse(text);
}

static bool exists(struct kube_client *c, const struct kube_resource *res, const char *ns, const char *name)
{
    return kube_get(c, res, ns, name, NULL, NULL) == 0;
}

/* The end of a round, for both sides: the launcher Job's ADDED event on a watch (a passive
 * informer per namespace). Polling with GETs would load the API server during the controller's
 * round only. */
static pthread_mutex_t seen_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t seen_cv = PTHREAD_COND_INITIALIZER;
static char awaited[160];
static uint64_t seen_at;

static void on_job_added(void *ctx, struct kube_object *obj)
{
    pthread_mutex_lock(&seen_mu);
    if (!seen_at && awaited[0] && strcmp(obj->name, awaited) == 0) {
        seen_at = clock_now_ms();
        pthread_cond_broadcast(&seen_cv);
    }
    pthread_mutex_unlock(&seen_mu);
}

static void await_launcher(const char *job_name)
{
    pthread_mutex_lock(&seen_mu);
    snprintf(awaited, sizeof(awaited), "%s-launcher", job_name);
    seen_at = 0;
    pthread_mutex_unlock(&seen_mu);
}

/* When the awaited launcher was seen (0 after 30 s without it). */
static uint64_t launcher_seen(void)
{
    uint64_t end = clock_now_ms() + 30000;
    pthread_mutex_lock(&seen_mu);
    while (!seen_at && clock_now_ms() < end) {
        pthread_mutex_unlock(&seen_mu);
        clock_sleep_ms(1);
        pthread_mutex_lock(&seen_mu);
    }
    uint64_t at = seen_at;
    awaited[0] = '\0';
    pthread_mutex_unlock(&seen_mu);
    return at;
}

/* The plain client's share: the same objects, created by 2 threads. */
struct plain {
    struct kube_client *c;
    cJSON **objs;
    const struct kube_resource **res;
    int n;
    atomic_int next;
};

static void *plain_run(void *arg)
{
    struct plain *p = arg;
    for (int i; (i = atomic_fetch_add(&p->next, 1)) < p->n;)
        kube_create(p->c, p->res[i], json_string(p->objs[i], "metadata.namespace"), p->objs[i], NULL, NULL);
    return NULL;
}

static double plain_create(struct kube_client *c, const char *ns, const char *name, int workers)
{
    cJSON *obj = job_json(ns, name, workers), *created = NULL;
    kube_create(c, &MPIJOB_RESOURCE_V2BETA1, ns, obj, &created, NULL);
    struct mpijob *job = NULL;
    struct mpijob_problems problems = {0};
    mpijob_parse(created, NULL, &job, &problems);
    struct mpijob_options o = {0};
    struct ssh_keypair keys = {0};
    await_launcher(name);
    uint64_t t0 = clock_now_ms(); /* the key pair is part of the work: the controller makes one per job */
    ssh_keypair_generate(&keys);
    int n = 4 + workers;
    struct plain p = {.c = c, .objs = calloc((size_t)n, sizeof(cJSON *)),
                      .res = calloc((size_t)n, sizeof(struct kube_resource *)), .n = n};
    int k = 0;
    p.res[k] = &KUBE_SERVICES, p.objs[k++] = build_service(job, &o);
    p.res[k] = &KUBE_CONFIGMAPS, p.objs[k++] = build_configmap(job, &o, NULL, 0);
    p.res[k] = &KUBE_SECRETS, p.objs[k++] = build_secret(job, &o, &keys);
    for (int i = 0; i < workers; i++)
        p.res[k] = &KUBE_PODS, build_worker_pod(job, &o, i, NULL, &p.objs[k++]);
    p.res[k] = &KUBE_JOBS, build_launcher_job(job, &o, NULL, &p.objs[k++]);
    for (int i = 0; i < n; i++)
        json_set_string(cJSON_GetObjectItem(p.objs[i], "metadata"), "namespace", ns);
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&t[i], NULL, plain_run, &p);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    double ms = (double)(launcher_seen() - t0);
    for (int i = 0; i < n; i++)
        cJSON_Delete(p.objs[i]);
    free(p.objs);
    free(p.res);
    ssh_keypair_free(&keys);
    mpijob_free(job);
    mpijob_problems_free(&problems);
    cJSON_Delete(obj);
    cJSON_Delete(created);
    return ms;
}

static double controller_create(struct kube_client *admin, const char *ns, const char *name, int workers)
{
    cJSON *obj = job_json(ns, name, workers);
    /* From the moment the API server has accepted the MPIJob. */
    await_launcher(name);
    kube_create(admin, &MPIJOB_RESOURCE_V2BETA1, ns, obj, NULL, NULL);
    uint64_t t0 = clock_now_ms();
    if (getenv("BENCH_TRACE")) {
        char w0[128];
        snprintf(w0, sizeof(w0), "%s-worker-0", name);
        while (!exists(admin, &KUBE_SERVICES, ns, name))
            clock_sleep_ms(1);
        fprintf(stderr, "  service after %llu ms\n", (unsigned long long)(clock_now_ms() - t0));
        while (!exists(admin, &KUBE_PODS, ns, w0))
            clock_sleep_ms(1);
        fprintf(stderr, "  worker-0 after %llu ms\n", (unsigned long long)(clock_now_ms() - t0));
    }
    double ms = (double)(launcher_seen() - t0);
    cJSON_Delete(obj);
    return ms;
}

static long rss_kib(const char *field)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long v = -1;
    while (f && fgets(line, sizeof(line), f))
        if (strncmp(line, field, strlen(field)) == 0)
            v = strtol(line + strlen(field), NULL, 10);
    if (f)
        fclose(f);
    return v;
}

static atomic_ullong obs_n[8], obs_ms[8];
static void observe(void *ctx, const char *verb, long code, uint64_t ms)
{
    static const char *verbs[] = {"GET", "LIST", "WATCH", "POST", "PUT", "PATCH", "DELETE"};
    int k = 7;
    for (int i = 0; i < 7; i++)
        if (strcmp(verb, verbs[i]) == 0)
            k = i;
    obs_n[k]++;
    obs_ms[k] += ms;
    if (k == 3 && code != 201)
        fprintf(stderr, "  POST answered %ld after %llu ms\n", code, (unsigned long long)ms);
}

static int compare_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* With the real control plane, the scheduler tries every new pod (no node runs here, so each
 * attempt ends in a status write and an Event) and the Job controller makes the launcher's pod;
 * pods left from earlier rounds are tried again in bursts. So after each side the job is deleted
 * (its objects go with it, by the garbage collector) and the next side waits, up to 120 s, until
 * none of its pods is left: every side is timed on a server with the same few objects, not
 * while it still works for the other. The double has neither scheduler nor collector. */
static void settle(struct kube_client *admin, const char *ns, const char *name)
{
    if (!srv.control_plane)
        return;
    struct kube_delete_opts del = {.propagation_policy = "Background", .grace_period_s = -1};
    kube_delete(admin, &MPIJOB_RESOURCE_V2BETA1, ns, name, &del, NULL, NULL);
    char selector[160];
    snprintf(selector, sizeof(selector), LABEL_JOB_NAME "=%s", name);
    struct kube_list_opts opts = {.label_selector = selector};
    for (uint64_t end = clock_now_ms() + 120000; clock_now_ms() < end; clock_sleep_ms(200)) {
        cJSON *items = NULL;
        if (kube_list_all(admin, &KUBE_PODS, ns, &opts, &items, NULL, NULL) < 0)
            continue;
        int left = cJSON_GetArraySize(items);
        cJSON_Delete(items);
        if (left == 0)
            return;
    }
    fprintf(stderr, "  %s/%s: pods still there 120 s after the job's deletion; going on\n", ns, name);
}

/* Part 1 for one client configuration and job size. The sides take turns at going first, and
 * each starts once the other's job is gone (settle). */
static void ratio_rounds(struct kube_client *admin, const char *label, int workers, int rounds)
{
    double ratios[32], ctrl_ms[32], plain_ms[32];
    if (rounds > 32)
        rounds = 32;
    for (int round = 0; round < rounds; round++) {
        char name[64];
        snprintf(name, sizeof(name), "%s-w%d-r%d", label, workers, round);
        for (int side = 0; side < 2; side++) {
            if ((side + round) % 2 == 0) {
                plain_ms[round] = plain_create(admin, "baseline", name, workers);
                settle(admin, "baseline", name);
            } else {
                ctrl_ms[round] = controller_create(admin, "default", name, workers);
                settle(admin, "default", name);
            }
        }
        ratios[round] = ctrl_ms[round] / plain_ms[round];
        printf("    round %d: controller %.0f ms, plain client %.0f ms, ratio %.2f\n", round + 1, ctrl_ms[round],
               plain_ms[round], ratios[round]);
        fflush(stdout);
    }
    qsort(ratios, (size_t)rounds, sizeof(double), compare_double);
    qsort(ctrl_ms, (size_t)rounds, sizeof(double), compare_double);
    qsort(plain_ms, (size_t)rounds, sizeof(double), compare_double);
    printf("  RESULT %s workers=%d controller_ms=%.0f plain_ms=%.0f ratio_median=%.2f ratio_min=%.2f "
           "ratio_max=%.2f\n",
           label, workers, ctrl_ms[rounds / 2], plain_ms[rounds / 2], ratios[rounds / 2], ratios[0],
           ratios[rounds - 1]);
    fflush(stdout);
}

static struct informer *passive[7];

/* The same watches the controller keeps open, on the baseline's namespace, so that the API
 * server streams the same events during both runs. */
static void start_passive_watches(struct kube_client *admin)
{
    const struct kube_resource *watched_kinds[] = {&MPIJOB_RESOURCE_V2BETA1, &KUBE_PODS, &KUBE_SERVICES,
                                                   &KUBE_CONFIGMAPS, &KUBE_SECRETS, &KUBE_JOBS};
    for (int i = 0; i < 7; i++) {
        /* 0-5: the baseline's namespace; 6: the launcher Jobs in the controller's, for the end of
         * its rounds (the baseline's rounds end on passive[5]) */
        const bool jobs = i >= 5;
        struct informer_config icfg = {.resource = watched_kinds[i < 6 ? i : 5],
                                       .namespace = i < 6 ? "baseline" : "default",
                                       .label_selector = i ? LABEL_OPERATOR_NAME "=" DEFAULT_OPERATOR_NAME : NULL,
                                       .handlers = {.on_add = jobs ? on_job_added : NULL}};
        informer_new(admin, &icfg, &passive[i]);
        informer_start(passive[i]);
        informer_wait_synced(passive[i], 10000);
    }
}

/* The baseline's MPIJobs live in their own namespace, which the controller does not watch. */
static const char *const watched[] = {"default", "many"};

static struct controller *start_controller(struct kube_client *op)
{
    struct controller_config cfg = {.client = op, .threads = 2, .namespaces = watched, .n_namespaces = 2};
    struct controller *ctl = NULL;
    if (controller_start(&cfg, &ctl) < 0)
        exit(1);
    return ctl;
}

/* Part 1 for each client configuration and job size. */
static void creation_ratios(struct kube_client *admin)
{
    static const struct {
        const char *label, *what;
        double qps;
        int burst;
    } configs[] = {
        {"defaults", "the operator's default flags (no client-side limit)", 0, 0},
        {"qps20", "--qps 20 --burst 30 (the former default)", 20, 30},
    };
    const char *sizes = getenv("BENCH_SIZES") ? getenv("BENCH_SIZES") : "8,64,512";
    int rounds = getenv("BENCH_ROUNDS") ? atoi(getenv("BENCH_ROUNDS")) : 5;
    const char *only = getenv("BENCH_CONFIGS"); /* e.g. "defaults": the labels to run */
    for (size_t k = 0; k < sizeof(configs) / sizeof(configs[0]); k++) {
        if (only && !strstr(only, configs[k].label))
            continue;
        struct kube_client *op = new_client_with(configs[k].qps, configs[k].burst);
        if (getenv("BENCH_TRACE"))
            kube_client_set_observer(op, observe, NULL);
        struct controller *ctl = start_controller(op);
        printf("operator with %s, 2 threads; plain client with 2 threads:\n", configs[k].what);
        for (const char *p = sizes; *p;) {
            int workers = atoi(p);
            if (workers > 0) {
                printf("  one job of %d workers (%d objects):\n", workers, workers + 5);
                ratio_rounds(admin, configs[k].label, workers, rounds);
            }
            p += strcspn(p, ",");
            p += *p == ',';
        }
        struct kube_client_stats st;
        kube_client_stats(op, &st);
        printf("  operator client: %llu requests, %llu ms in the client-side limiter, %llu 429s, %llu ms held by "
               "Retry-After\n",
               (unsigned long long)st.requests, (unsigned long long)st.throttled_ms,
               (unsigned long long)st.server_throttles, (unsigned long long)st.paused_ms);
        controller_stop(ctl);
        kube_client_free(op);
    }
}

int main(int argc, char **argv)
{
    int many = argc > 1 ? atoi(argv[1]) : 100;
    log_set_level(LOG_WARN);
    if (test_apiserver_start_control_plane(&srv) < 0)
        return 1;
    if (test_apiserver_namespace(&srv, "baseline") < 0 || test_apiserver_namespace(&srv, "many") < 0) {
        test_apiserver_stop(&srv);
        return 1;
    }
    printf("API server: %s\n", srv.is_double ? "the API-server double"
                                              : "a real kube-apiserver (KUBEBUILDER_ASSETS), with its control plane "
                                                "where the assets have one");
    struct kube_client *admin = new_client();
    start_passive_watches(admin);
    creation_ratios(admin);
    if (getenv("BENCH_TRACE")) {
        static const char *verbs[] = {"GET", "LIST", "WATCH", "POST", "PUT", "PATCH", "DELETE", "other"};
        for (int i = 0; i < 8; i++)
            if (obs_n[i])
                fprintf(stderr, "  operator %s: %llu requests, %llu ms in total\n", verbs[i],
                        (unsigned long long)obs_n[i], (unsigned long long)obs_ms[i]);
    }

    struct kube_client *op = new_client_with(0, 0);
    struct controller *ctl = start_controller(op);
    struct kube_client_stats before;
    kube_client_stats(op, &before);
    struct rusage ru0, ru1;
    getrusage(RUSAGE_SELF, &ru0);
    uint64_t t0 = clock_now_ms();
    for (int i = 0; i < many; i++) {
        char name[32];
        snprintf(name, sizeof(name), "job%d", i);
        cJSON *obj = job_json("many", name, 8);
        kube_create(admin, &MPIJOB_RESOURCE_V2BETA1, "many", obj, NULL, NULL);
        cJSON_Delete(obj);
    }
    for (int i = 0; i < many; i++) {
        char name[40];
        snprintf(name, sizeof(name), "job%d-launcher", i);
        while (!exists(admin, &KUBE_JOBS, "many", name))
            clock_sleep_ms(20);
    }
    double total = (double)(clock_now_ms() - t0) / 1000.0;
    clock_sleep_ms(2000); /* status writes that follow the last creation */
    getrusage(RUSAGE_SELF, &ru1);
    struct kube_client_stats after;
    kube_client_stats(op, &after);
    double cpu = (double)(ru1.ru_utime.tv_sec - ru0.ru_utime.tv_sec + ru1.ru_stime.tv_sec - ru0.ru_stime.tv_sec) +
                 (double)(ru1.ru_utime.tv_usec - ru0.ru_utime.tv_usec + ru1.ru_stime.tv_usec - ru0.ru_stime.tv_usec) / 1e6;
    printf("%d jobs of 8 workers: %.1f s until every launcher exists\n", many, total);
    printf("  operator requests per job: %.1f (objects per job: 12, target objects + at most 3 status writes = 15)\n",
           (double)(after.requests - before.requests) / many);
    printf("  resident memory of this process: %ld KiB now, %ld KiB peak (includes the benchmark's own client)\n",
           rss_kib("VmRSS:"), rss_kib("VmHWM:"));
    printf("  CPU time of this process: %.2f s\n", cpu);
    for (int i = 0; i < 7; i++)
        informer_free(passive[i]);
    controller_stop(ctl);
    kube_client_free(op);
    kube_client_free(admin);
    test_apiserver_stop(&srv);
    return 0;
}
