/* The plain client of tests/bench/bench_scale.py: what a program that knows an MPIJob's objects
 * does without a controller, as the baseline of the operator's figures in the same run.
 *
 * plain_client KUBECONFIG NAMESPACE TEMPLATE.json PREFIX N THREADS
 *   For each of N jobs it creates the MPIJob (from the template file, named PREFIX<i>, with
 *   spec.runPolicy.managedBy set to a controller of its own, so that the operator leaves it
 *   alone), then, with the UID the API server gave it, the same objects the operator makes, built
 *   by the same builders: Service, ConfigMap, Secret (a fresh key pair), every worker Pod and the
 *   launcher Job.
 *
 * plain_client --existing KUBECONFIG NAMESPACE THREADS
 *   The operator's sync of suspended MPIJobs, with no informer and no planner: one list of the
 *   namespace's MPIJobs, then for each one the writes the operator makes for a suspended job it
 *   has not seen: Service, ConfigMap, Secret and the suspended launcher Job, built by the same
 *   builders; the status with the Created and Suspended conditions and the replica counts (one
 *   PUT of /status); the two Events (MPIJobCreated, MPIJobSuspended) through the operator's
 *   event recorder.
 *
 * THREADS threads share the jobs, one job at a time each, with the operator's client (no
 * client-side limit). Prints the seconds it took and the requests that failed; exits 1 when any
 * did. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kube/client.h"
#include "kube/config.h"
#include "kube/events.h"
#include "mpijob/builders.h"
#include "mpijob/mpijob.h"
#include "mpijob/status.h"
#include "mpijob/sshkeys.h"
#include "util/clock.h"
#include "util/json.h"
#include "util/log.h"

static struct kube_client *client;
static const cJSON *template;
static const char *ns, *prefix;
static int jobs;
static atomic_int next_job, failed;
static cJSON *existing;                 /* --existing: the listed MPIJobs */
static const cJSON **existing_items;    /* and each one, by index (a cJSON array is a list) */
static struct event_recorder *events;

static void create(const struct kube_resource *res, cJSON *obj, cJSON **created)
{
    json_set_string(cJSON_GetObjectItem(obj, "metadata"), "namespace", ns);
    if (kube_create(client, res, ns, obj, created, NULL) < 0) {
        atomic_fetch_add(&failed, 1);
        fprintf(stderr, "plain_client: creating %s %s failed\n", res->kind, json_string(obj, "metadata.name"));
    }
    cJSON_Delete(obj);
}

/* The objects the operator makes for a job, built by its builders: Service, ConfigMap, Secret (a
 * fresh key pair), the worker Pods unless the job is suspended, and the launcher Job. */
static void create_objects(const struct mpijob *job)
{
    struct mpijob_options o = {0};
    struct ssh_keypair keys = {0};
    ssh_keypair_generate(&keys);
    create(&KUBE_SERVICES, build_service(job, &o), NULL);
    create(&KUBE_CONFIGMAPS, build_configmap(job, &o, NULL, 0), NULL);
    create(&KUBE_SECRETS, build_secret(job, &o, &keys), NULL);
    for (int w = 0; !job->run_policy.suspend && w < job->worker.replicas; w++) {
        cJSON *pod = NULL;
        build_worker_pod(job, &o, w, NULL, &pod);
        create(&KUBE_PODS, pod, NULL);
    }
    cJSON *launcher = NULL;
    build_launcher_job(job, &o, NULL, &launcher);
    create(&KUBE_JOBS, launcher, NULL);
    ssh_keypair_free(&keys);
}

static void one_job(int i)
{
    char name[64];
    snprintf(name, sizeof(name), "%s%d", prefix, i);
    cJSON *obj = cJSON_Duplicate(template, true), *created = NULL;
    json_set_string(cJSON_GetObjectItem(obj, "metadata"), "name", name);
    cJSON *spec = cJSON_GetObjectItem(obj, "spec");
    cJSON *rp = cJSON_GetObjectItem(spec, "runPolicy");
    if (!rp)
        rp = cJSON_AddObjectToObject(spec, "runPolicy");
    json_set_string(rp, "managedBy", "example.com/plain-client");
    create(&MPIJOB_RESOURCE_V2BETA1, obj, &created);
    struct mpijob *job = NULL;
    struct mpijob_problems problems = {0};
    if (!created || mpijob_parse(created, NULL, &job, &problems) < 0) {
        atomic_fetch_add(&failed, 1);
        cJSON_Delete(created);
        mpijob_problems_free(&problems);
        return;
    }
    create_objects(job);
    mpijob_free(job);
    mpijob_problems_free(&problems);
    cJSON_Delete(created);
}

/* The writes of the operator's first sync of a suspended MPIJob (src/mpijob/plan.c,
 * plan_lifecycle and the creation of the job's objects). */
static void sync_job(const cJSON *item)
{
    struct mpijob *job = NULL;
    struct mpijob_problems problems = {0};
    if (mpijob_parse(item, NULL, &job, &problems) < 0) {
        atomic_fetch_add(&failed, 1);
        fprintf(stderr, "plain_client: MPIJob %s is not valid\n", json_string(item, "metadata.name"));
        mpijob_problems_free(&problems);
        return;
    }
    create_objects(job);

    char now[21], created_msg[600];
    clock_rfc3339(time(NULL), now);
    snprintf(created_msg, sizeof(created_msg), "MPIJob %s/%s is created.", job->namespace, job->name);
    cJSON *obj = cJSON_Duplicate(item, true);
    cJSON_DeleteItemFromObjectCaseSensitive(obj, "status");
    cJSON *status = cJSON_AddObjectToObject(obj, "status");
    struct replica_counts none = {0};
    mpijob_status_set_condition(status, MPIJOB_COND_CREATED, true, "MPIJobCreated", created_msg, now);
    mpijob_status_set_condition(status, MPIJOB_COND_SUSPENDED, true, "MPIJobSuspended", "MPIJob suspended", now);
    mpijob_status_set_replicas(status, "Launcher", &none);
    mpijob_status_set_replicas(status, "Worker", &none);
    if (kube_replace_status(client, &MPIJOB_RESOURCE_V2BETA1, job->namespace, job->name, obj, NULL, NULL) < 0) {
        atomic_fetch_add(&failed, 1);
        fprintf(stderr, "plain_client: the status of MPIJob %s failed\n", job->name);
    }
    cJSON_Delete(obj);
    struct event_target target = {.api_version = "kubeflow.org/v2beta1", .kind = "MPIJob",
                                   .namespace = job->namespace, .name = job->name, .uid = job->uid};
    event_record(events, &target, "Normal", "MPIJobCreated", "%s", created_msg);
    event_record(events, &target, "Normal", "MPIJobSuspended", "MPIJob suspended");
    mpijob_free(job);
    mpijob_problems_free(&problems);
}

static void *run(void *arg)
{
    (void)arg;
    for (int i; (i = atomic_fetch_add(&next_job, 1)) < jobs;) {
        if (existing)
            sync_job(existing_items[i]);
        else
            one_job(i);
    }
    return NULL;
}

static int usage(void)
{
    fprintf(stderr, "usage: plain_client KUBECONFIG NAMESPACE TEMPLATE.json PREFIX N THREADS\n"
                    "       plain_client --existing KUBECONFIG NAMESPACE THREADS\n");
    return 2;
}

static int connect_client(const char *kubeconfig)
{
    struct kube_config *cfg = NULL;
    char err[256];
    if (kube_config_load_kubeconfig(kubeconfig, NULL, &cfg, err, sizeof(err)) < 0) {
        fprintf(stderr, "plain_client: %s\n", err);
        return -1;
    }
    struct kube_client_options opts = {0};
    return kube_client_new(cfg, &opts, &client) < 0 ? -1 : 0;
}

static void run_threads(int threads)
{
    pthread_t tid[64];
    for (int i = 0; i < threads; i++)
        pthread_create(&tid[i], NULL, run, NULL);
    for (int i = 0; i < threads; i++)
        pthread_join(tid[i], NULL);
}

/* --existing KUBECONFIG NAMESPACE THREADS */
static int sync_existing(int argc, char **argv)
{
    if (argc != 5)
        return usage();
    ns = argv[3];
    int threads = atoi(argv[4]);
    if (threads < 1 || threads > 64) {
        fprintf(stderr, "plain_client: THREADS must be 1 to 64\n");
        return 2;
    }
    if (connect_client(argv[2]) < 0)
        return 2;
    uint64_t t0 = clock_now_ms();
    struct kube_list_opts lo = {.limit = 500};
    char *rv = NULL;
    if (kube_list_all(client, &MPIJOB_RESOURCE_V2BETA1, ns, &lo, &existing, &rv, NULL) < 0 ||
        event_recorder_new(client, "mpijob-operator", NULL, &events) < 0) {
        fprintf(stderr, "plain_client: listing the MPIJobs of %s failed\n", ns);
        kube_client_free(client);
        return 1;
    }
    free(rv);
    jobs = cJSON_GetArraySize(existing);
    existing_items = calloc(jobs ? jobs : 1, sizeof(*existing_items));
    if (!existing_items) {
        fprintf(stderr, "plain_client: out of memory\n");
        return 1;
    }
    int n = 0;
    const cJSON *item;
    cJSON_ArrayForEach(item, existing)
        existing_items[n++] = item;
    run_threads(threads);
    event_recorder_free(events);
    printf("{\"seconds\":%.3f,\"jobs\":%d,\"failed\":%d}\n", (double)(clock_now_ms() - t0) / 1000.0, jobs,
           atomic_load(&failed));
    free(existing_items);
    cJSON_Delete(existing);
    kube_client_free(client);
    return atomic_load(&failed) ? 1 : 0;
}

int main(int argc, char **argv)
{
    log_set_level(LOG_WARN);
    if (argc > 1 && strcmp(argv[1], "--existing") == 0)
        return sync_existing(argc, argv);
    if (argc != 7)
        return usage();
    ns = argv[2];
    prefix = argv[4];
    jobs = atoi(argv[5]);
    int threads = atoi(argv[6]);
    if (jobs < 0 || threads < 1 || threads > 64) {
        fprintf(stderr, "plain_client: N must be 0 or more and THREADS 1 to 64\n");
        return 2;
    }
    FILE *f = fopen(argv[3], "r");
    char text[16384];
    size_t len = f ? fread(text, 1, sizeof(text) - 1, f) : 0;
    if (f)
        fclose(f);
    text[len] = '\0';
    cJSON *t = cJSON_Parse(text);
    if (!t) {
        fprintf(stderr, "plain_client: %s: not a JSON MPIJob\n", argv[3]);
        return 2;
    }
    template = t;
    if (connect_client(argv[1]) < 0) {
        cJSON_Delete(t);
        return 2;
    }
    uint64_t t0 = clock_now_ms();
    run_threads(threads);
    printf("{\"seconds\":%.3f,\"failed\":%d}\n", (double)(clock_now_ms() - t0) / 1000.0, atomic_load(&failed));
    kube_client_free(client);
    cJSON_Delete(t);
    return atomic_load(&failed) ? 1 : 0;
}
