/* Steady state: 100 running and 100 finished MPIJobs, nothing changing; the operator's write
 * requests in a 60-second window (target: zero), and its reads. The benchmark plays the
 * kubelet and the Job controller by writing pod and Job status, then stops writing.
 * Usage: bench_steady [jobs_per_kind (100)] [window_s (60)] */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kube/client.h"
#include "kube/config.h"
#include "mpijob/builders.h"
#include "mpijob/controller.h"
#include "support/apiserver.h"
#include "util/clock.h"
#include "util/json.h"
#include "util/log.h"

static struct test_apiserver srv;
static atomic_ullong writes, reads;

static void observe(void *ctx, const char *verb, long code, uint64_t ms)
{
    if (strcmp(verb, "GET") == 0 || strcmp(verb, "LIST") == 0 || strcmp(verb, "WATCH") == 0)
        reads++;
    else
        writes++;
}

static struct kube_client *new_client(void)
{
    struct kube_config *cfg = NULL;
    char err[256];
    if (kube_config_load_kubeconfig(srv.kubeconfig, NULL, &cfg, err, sizeof(err)) < 0)
        exit(1);
    struct kube_client_options opts = {.qps = -1};
    struct kube_client *c = NULL;
    kube_client_new(cfg, &opts, &c);
    return c;
}

static void create_job(struct kube_client *c, const char *name)
{
    char text[1024];
    snprintf(text, sizeof(text),
             "{\"apiVersion\":\"kubeflow.org/v2beta1\",\"kind\":\"MPIJob\",\"metadata\":{\"name\":\"%s\"},\"spec\":{"
             "\"mpiReplicaSpecs\":{\"Launcher\":{\"template\":{\"spec\":{\"containers\":[{\"name\":\"l\",\"image\":\"w\","
             "\"command\":[\"mpirun\",\"train\"]}]}}},\"Worker\":{\"replicas\":1,\"template\":{\"spec\":{\"containers\":"
             "[{\"name\":\"w\",\"image\":\"w\"}]}}}}}}", name);
    cJSON *obj = cJSON_Parse(text);
    kube_create(c, &MPIJOB_RESOURCE_V2BETA1, "default", obj, NULL, NULL);
    cJSON_Delete(obj);
}

static void wait_get(struct kube_client *c, const struct kube_resource *res, const char *name, cJSON **out)
{
    while (kube_get(c, res, "default", name, out, NULL) != 0)
        clock_sleep_ms(20);
}

static void run_pod(struct kube_client *c, const char *name)
{
    struct kube_patch_opts po = {.type = KUBE_PATCH_MERGE, .subresource = "status"};
    kube_patch(c, &KUBE_PODS, "default", name,
               "{\"status\":{\"phase\":\"Running\",\"conditions\":[{\"type\":\"Ready\",\"status\":\"True\"}]}}", &po,
               NULL, NULL);
}

static int count_true(struct kube_client *c, const char *type)
{
    cJSON *items = NULL;
    if (kube_list_all(c, &MPIJOB_RESOURCE_V2BETA1, "default", NULL, &items, NULL, NULL) != 0)
        return 0;
    int n = 0;
    cJSON *job, *cond;
    cJSON_ArrayForEach(job, items) {
        cJSON_ArrayForEach(cond, json_path(job, "status.conditions")) {
            const char *t = json_string(cond, "type"), *s = json_string(cond, "status");
            if (t && s && strcmp(t, type) == 0 && strcmp(s, "True") == 0)
                n++;
        }
    }
    cJSON_Delete(items);
    return n;
}

int main(int argc, char **argv)
{
    int per_kind = argc > 1 ? atoi(argv[1]) : 100;
    int window = argc > 2 ? atoi(argv[2]) : 60;
    log_set_level(LOG_WARN);
    if (test_apiserver_start(&srv) < 0)
        return 1;
    struct kube_client *admin = new_client(), *op = new_client();
    kube_client_set_observer(op, observe, NULL);
    struct controller_config cfg = {.client = op, .threads = 2};
    struct controller *ctl = NULL;
    if (controller_start(&cfg, &ctl) < 0)
        return 1;
    char name[64];
    for (int i = 0; i < 2 * per_kind; i++) {
        snprintf(name, sizeof(name), "%s%d", i < per_kind ? "run" : "fin", i);
        create_job(admin, name);
    }
    for (int i = 0; i < 2 * per_kind; i++) {
        char lname[80], pname[96];
        snprintf(name, sizeof(name), "%s%d", i < per_kind ? "run" : "fin", i);
        snprintf(lname, sizeof(lname), "%s-launcher", name);
        cJSON *lj = NULL;
        wait_get(admin, &KUBE_JOBS, lname, &lj);
        if (i < per_kind) {
            snprintf(pname, sizeof(pname), "%s-worker-0", name);
            cJSON *w = NULL;
            wait_get(admin, &KUBE_PODS, pname, &w);
            cJSON_Delete(w);
            run_pod(admin, pname);
            char text[1024];
            snprintf(text, sizeof(text),
                     "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"%s-x\",\"labels\":{"
                     "\"training.kubeflow.org/operator-name\":\"mpijob-operator\",\"training.kubeflow.org/job-name\":\"%s\"},"
                     "\"ownerReferences\":[{\"apiVersion\":\"batch/v1\",\"kind\":\"Job\",\"name\":\"%s\",\"uid\":\"%s\","
                     "\"controller\":true}]},\"spec\":{\"containers\":[{\"name\":\"l\",\"image\":\"w\"}]}}",
                     lname, name, lname, json_string(lj, "metadata.uid"));
            cJSON *pod = cJSON_Parse(text);
            kube_create(admin, &KUBE_PODS, "default", pod, NULL, NULL);
            cJSON_Delete(pod);
            snprintf(pname, sizeof(pname), "%s-x", lname);
            run_pod(admin, pname);
        } else {
            struct kube_patch_opts po = {.type = KUBE_PATCH_MERGE, .subresource = "status"};
            kube_patch(admin, &KUBE_JOBS, "default", lname,
                       "{\"status\":{\"conditions\":[{\"type\":\"Complete\",\"status\":\"True\"}]}}", &po, NULL, NULL);
        }
        cJSON_Delete(lj);
    }
    uint64_t end = clock_now_ms() + 120000;
    int running = 0, done = 0;
    while (clock_now_ms() < end && (running < per_kind || done < per_kind)) {
        clock_sleep_ms(500);
        running = count_true(admin, "Running");
        done = count_true(admin, "Succeeded");
    }
    printf("%d running and %d succeeded MPIJobs reached; waiting 5 s for the last events\n", running, done);
    clock_sleep_ms(5000);
    unsigned long long w0 = writes, r0 = reads;
    uint64_t reconciles0 = controller_reconciles(ctl);
    clock_sleep_ms((uint64_t)window * 1000);
    printf("steady state over %d s: %llu write requests (target 0), %llu read requests, %llu reconciles\n", window,
           writes - w0, reads - r0, (unsigned long long)(controller_reconciles(ctl) - reconciles0));
    controller_stop(ctl);
    kube_client_free(op);
    kube_client_free(admin);
    test_apiserver_stop(&srv);
    return 0;
}
