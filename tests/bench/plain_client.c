/* The plain client of tests/bench/bench_scale.py: what a program that knows an MPIJob's objects
 * does without a controller. For each of N jobs it creates the MPIJob (from the template file,
 * named PREFIX<i>, with spec.runPolicy.managedBy set to a controller of its own, so that the
 * operator leaves it alone), then, with the UID the API server gave it, the same objects the
 * operator makes, built by the same builders: Service, ConfigMap, Secret (a fresh key pair),
 * every worker Pod and the launcher Job. THREADS threads share the jobs, one job at a time each,
 * with the operator's client (no client-side limit).
 *
 * Usage: plain_client KUBECONFIG NAMESPACE TEMPLATE.json PREFIX N THREADS
 * Prints the seconds it took and the requests that failed; exits 1 when any did. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kube/client.h"
#include "kube/config.h"
#include "mpijob/builders.h"
#include "mpijob/mpijob.h"
#include "mpijob/sshkeys.h"
#include "util/clock.h"
#include "util/json.h"
#include "util/log.h"

static struct kube_client *client;
static const cJSON *template;
static const char *ns, *prefix;
static int jobs;
static atomic_int next_job, failed;

static void create(const struct kube_resource *res, cJSON *obj, cJSON **created)
{
    json_set_string(cJSON_GetObjectItem(obj, "metadata"), "namespace", ns);
    if (kube_create(client, res, ns, obj, created, NULL) < 0) {
        atomic_fetch_add(&failed, 1);
        fprintf(stderr, "plain_client: creating %s %s failed\n", res->kind, json_string(obj, "metadata.name"));
    }
    cJSON_Delete(obj);
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
    struct mpijob_options o = {0};
    struct ssh_keypair keys = {0};
    ssh_keypair_generate(&keys);
    create(&KUBE_SERVICES, build_service(job, &o), NULL);
    create(&KUBE_CONFIGMAPS, build_configmap(job, &o, NULL, 0), NULL);
    create(&KUBE_SECRETS, build_secret(job, &o, &keys), NULL);
    for (int w = 0; w < job->worker.replicas; w++) {
        cJSON *pod = NULL;
        build_worker_pod(job, &o, w, NULL, &pod);
        create(&KUBE_PODS, pod, NULL);
    }
    cJSON *launcher = NULL;
    build_launcher_job(job, &o, NULL, &launcher);
    create(&KUBE_JOBS, launcher, NULL);
    ssh_keypair_free(&keys);
    mpijob_free(job);
    mpijob_problems_free(&problems);
    cJSON_Delete(created);
}

static void *run(void *arg)
{
    (void)arg;
    for (int i; (i = atomic_fetch_add(&next_job, 1)) < jobs;)
        one_job(i);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 7) {
        fprintf(stderr, "usage: plain_client KUBECONFIG NAMESPACE TEMPLATE.json PREFIX N THREADS\n");
        return 2;
    }
    log_set_level(LOG_WARN);
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
    struct kube_config *cfg = NULL;
    char err[256];
    if (kube_config_load_kubeconfig(argv[1], NULL, &cfg, err, sizeof(err)) < 0) {
        fprintf(stderr, "plain_client: %s\n", err);
        return 2;
    }
    struct kube_client_options opts = {0};
    if (kube_client_new(cfg, &opts, &client) < 0)
        return 2;
    uint64_t t0 = clock_now_ms();
    pthread_t tid[64];
    for (int i = 0; i < threads; i++)
        pthread_create(&tid[i], NULL, run, NULL);
    for (int i = 0; i < threads; i++)
        pthread_join(tid[i], NULL);
    printf("{\"seconds\":%.3f,\"failed\":%d}\n", (double)(clock_now_ms() - t0) / 1000.0, atomic_load(&failed));
    kube_client_free(client);
    cJSON_Delete(t);
    return atomic_load(&failed) ? 1 : 0;
}
