/* Watch decode into the informer cache, and the cache's memory per object.
 *
 * 1. Throughput: N watch lines of ~2 KB pod objects (as a kube-apiserver sends them, with
 *    managedFields) go through the watch decoder into the informer cache, on one thread.
 *    Baseline in the same run: cJSON parsing the same lines and nothing else.
 * 2. Memory: heap bytes held by the cache for 10,000 such pods, per object, against the
 *    object's JSON size on the wire.
 * Prints figures; asserts nothing about time. */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kube/client.h"
#include "kube/config.h"
#include "kube/informer.h"
#include "kube/watch.h"

#define PODS 10000

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* A realistic pod of about 2 KB: labels, owner, one container with env, status, managedFields. */
static char *pod_line(int i, int rv, const char *type)
{
    char *line = NULL;
    int n = asprintf(&line,
        "{\"type\":\"%s\",\"object\":{\"kind\":\"Pod\",\"apiVersion\":\"v1\",\"metadata\":{\"name\":\"job-%d-worker-%d\","
        "\"namespace\":\"team-%d\",\"uid\":\"3f80ae1d-9965-40b5-9771-%012d\",\"resourceVersion\":\"%d\","
        "\"creationTimestamp\":\"2026-11-21T12:56:42Z\",\"labels\":{\"training.kubeflow.org/job-name\":\"job-%d\","
        "\"training.kubeflow.org/job-role\":\"worker\",\"training.kubeflow.org/operator-name\":\"mpijob-operator\","
        "\"training.kubeflow.org/replica-index\":\"%d\"},\"ownerReferences\":[{\"apiVersion\":\"kubeflow.org/v2beta1\","
        "\"kind\":\"MPIJob\",\"name\":\"job-%d\",\"uid\":\"aaaaaaaa-bbbb-cccc-dddd-%012d\",\"controller\":true,"
        "\"blockOwnerDeletion\":true}],\"managedFields\":[{\"manager\":\"mpijob-operator\",\"operation\":\"Update\","
        "\"apiVersion\":\"v1\",\"time\":\"2026-11-21T12:56:42Z\",\"fieldsType\":\"FieldsV1\",\"fieldsV1\":{\"f:metadata\":"
        "{\"f:labels\":{\".\":{},\"f:training.kubeflow.org/job-name\":{}}},\"f:spec\":{\"f:containers\":{\"k:{\\\"name\\\":\\\"worker\\\"}\":"
        "{\".\":{},\"f:image\":{},\"f:name\":{}}}}}}]},\"spec\":{\"hostname\":\"job-%d-worker-%d\",\"subdomain\":\"job-%d\","
        "\"containers\":[{\"name\":\"worker\",\"image\":\"registry.example/mpijob-worker:1.0\",\"command\":[\"/usr/sbin/sshd\",\"-De\"],"
        "\"env\":[{\"name\":\"K_MPI_JOB_ROLE\",\"value\":\"worker\"},{\"name\":\"NCCL_IB_DISABLE\",\"value\":\"1\"}],"
        "\"resources\":{\"limits\":{\"nvidia.com/gpu\":\"1\"},\"requests\":{\"nvidia.com/gpu\":\"1\"}},"
        "\"volumeMounts\":[{\"name\":\"ssh-auth\",\"mountPath\":\"/root/.ssh\"}],\"terminationMessagePath\":\"/dev/termination-log\","
        "\"terminationMessagePolicy\":\"File\",\"imagePullPolicy\":\"IfNotPresent\"}],\"volumes\":[{\"name\":\"ssh-auth\","
        "\"secret\":{\"secretName\":\"job-%d-ssh\",\"defaultMode\":384}}],\"restartPolicy\":\"Never\","
        "\"terminationGracePeriodSeconds\":30,\"dnsPolicy\":\"ClusterFirst\",\"schedulerName\":\"default-scheduler\","
        "\"nodeName\":\"gpu-node-%d\"},\"status\":{\"phase\":\"Running\",\"conditions\":[{\"type\":\"Ready\",\"status\":\"True\","
        "\"lastTransitionTime\":\"2026-11-21T12:57:02Z\"},{\"type\":\"PodScheduled\",\"status\":\"True\","
        "\"lastTransitionTime\":\"2026-11-21T12:56:42Z\"}],\"hostIP\":\"10.0.%d.%d\",\"podIP\":\"10.244.%d.%d\","
        "\"startTime\":\"2026-11-21T12:56:42Z\",\"containerStatuses\":[{\"name\":\"worker\",\"ready\":true,\"restartCount\":0,"
        "\"state\":{\"running\":{\"startedAt\":\"2026-11-21T12:56:59Z\"}},\"image\":\"registry.example/mpijob-worker:1.0\"}],"
        "\"qosClass\":\"BestEffort\"}}}\n",
        type, i / 8, i % 8, i % 50, i, rv, i / 8, i % 8, i / 8, i / 8, i / 8, i % 8, i / 8, i / 8, i % 64,
        (i / 256) % 256, i % 256, (i / 256) % 256, i % 256);
    return n < 0 ? NULL : line;
}

static int to_cache(void *ctx, enum kube_watch_type type, cJSON *object)
{
    return informer_apply_event(ctx, (int)type, object);
}

static int parse_only(void *ctx, enum kube_watch_type type, cJSON *object)
{
    cJSON_Delete(object);
    return 0;
}

static struct informer *offline_informer(struct kube_client **client)
{
    const char *kc = "apiVersion: v1\nkind: Config\ncurrent-context: t\nclusters:\n- name: c\n  cluster:\n"
                     "    server: https://127.0.0.1:1\nusers:\n- name: u\n  user:\n    token: t\n"
                     "contexts:\n- name: t\n  context:\n    cluster: c\n    user: u\n";
    struct kube_config *cfg = NULL;
    char err[256];
    if (kube_config_parse(kc, strlen(kc), NULL, NULL, &cfg, err, sizeof(err)) < 0 ||
        kube_client_new(cfg, NULL, client) < 0) {
        fprintf(stderr, "config: %s\n", err);
        exit(1);
    }
    struct informer_config icfg = {.resource = &KUBE_PODS};
    struct informer *inf = NULL;
    if (informer_new(*client, &icfg, &inf) < 0)
        exit(1);
    return inf; /* never started: events are applied directly */
}

int main(int argc, char **argv)
{
    int events = argc > 1 ? atoi(argv[1]) : 200000;
    /* The stream: PODS ADDED, then MODIFIED events cycling over the pods. */
    char **lines = malloc(sizeof(char *) * (size_t)events);
    size_t bytes = 0;
    for (int e = 0; e < events; e++) {
        lines[e] = pod_line(e % PODS, 1000 + e, e < PODS ? "ADDED" : "MODIFIED");
        bytes += strlen(lines[e]);
    }
    printf("watch stream: %d events, %.0f bytes per event line\n", events, (double)bytes / events);

    /* Baseline: JSON parsing alone. */
    struct kube_watch_decoder *d = kube_watch_decoder_new(0, parse_only, NULL);
    double t0 = now_s();
    for (int e = 0; e < events; e++)
        kube_watch_decoder_feed(d, lines[e], strlen(lines[e]));
    double parse_s = now_s() - t0;
    kube_watch_decoder_free(d);

    struct kube_client *client = NULL;
    struct informer *inf = offline_informer(&client);
    d = kube_watch_decoder_new(0, to_cache, inf);
    t0 = now_s();
    for (int e = 0; e < events; e++)
        kube_watch_decoder_feed(d, lines[e], strlen(lines[e]));
    double cache_s = now_s() - t0;
    kube_watch_decoder_free(d);
    printf("baseline (cJSON parse only):      %9.0f events/s\n", events / parse_s);
    printf("decode into informer cache:       %9.0f events/s  (%.2fx the parse-only time)\n",
           events / cache_s, cache_s / parse_s);
    printf("cache holds %zu objects\n", informer_size(inf));
    informer_free(inf);

    /* Memory: heap held by a cache of PODS objects. */
    for (int e = 0; e < events; e++)
        free(lines[e]);
    free(lines);
    malloc_trim(0);
    struct mallinfo2 before = mallinfo2();
    inf = NULL;
    {
        struct informer_config icfg = {.resource = &KUBE_PODS};
        informer_new(client, &icfg, &inf);
    }
    size_t object_bytes = 0, stored_bytes = 0;
    d = kube_watch_decoder_new(0, to_cache, inf);
    for (int i = 0; i < PODS; i++) {
        char *line = pod_line(i, 5000 + i, "ADDED");
        cJSON *ev = cJSON_Parse(line);
        char *obj = cJSON_PrintUnformatted(cJSON_GetObjectItem(ev, "object"));
        object_bytes += strlen(obj);
        free(obj);
        cJSON_Delete(ev);
        kube_watch_decoder_feed(d, line, strlen(line));
        free(line);
    }
    kube_watch_decoder_free(d);
    struct kube_object **all = NULL;
    int n = informer_list(inf, NULL, &all);
    for (int i = 0; i < n; i++)
        stored_bytes += all[i]->json_len;
    kube_object_list_free(all, (size_t)n);
    malloc_trim(0);
    struct mallinfo2 after = mallinfo2();
    double held = (double)(after.uordblks - before.uordblks);
    printf("memory for %d cached pods: %.0f bytes per object; object JSON %.0f bytes "
           "(%.2fx); stored JSON without managedFields %.0f bytes\n",
           PODS, held / PODS, (double)object_bytes / PODS, held / (double)object_bytes,
           (double)stored_bytes / PODS);
    informer_free(inf);
    kube_client_free(client);

    /* Baseline: what a cache of parsed cJSON trees of the same pods would hold. */
    malloc_trim(0);
    before = mallinfo2();
    cJSON **trees = malloc(sizeof(cJSON *) * PODS);
    for (int i = 0; i < PODS; i++) {
        char *line = pod_line(i, 5000 + i, "ADDED");
        cJSON *ev = cJSON_Parse(line);
        trees[i] = cJSON_DetachItemFromObject(ev, "object");
        cJSON_DeleteItemFromObject(cJSON_GetObjectItem(trees[i], "metadata"), "managedFields");
        cJSON_Delete(ev);
        free(line);
    }
    malloc_trim(0);
    after = mallinfo2();
    printf("baseline, parsed cJSON trees without managedFields: %.0f bytes per object (%.2fx the JSON)\n",
           (double)(after.uordblks - before.uordblks) / PODS,
           (double)(after.uordblks - before.uordblks) / (double)object_bytes);
    for (int i = 0; i < PODS; i++)
        cJSON_Delete(trees[i]);
    free(trees);
    return 0;
}
