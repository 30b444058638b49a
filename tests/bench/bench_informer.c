/* Watch decode into the informer cache, and the cache's memory per object.
 *
 * 1. Throughput: N watch lines of ~2 KB pod objects (as a kube-apiserver sends them, with
 *    managedFields) go through the watch decoder into the informer cache, on one thread.
 *    Baseline in the same run: cJSON parsing the same lines and nothing else.
 * 2. Memory: heap bytes held by the cache for 10,000 such pods, per object, against the
 *    object's JSON size on the wire.
 * 3. Memory of the controller's caches per suspended MPIJob: 10,000 copies of one suspended
 *    job of 8 workers and its Service, ConfigMap, Secret and launcher Job, as Kubernetes 1.36.3
 *    served them (tests/bench/data/suspended-job-1.36.json), held by five informers with the
 *    controller's transforms (src/mpijob/trim.h) and, as the baseline in the same run, without.
 * Prints figures; asserts nothing about time. */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kube/client.h"
#include "kube/config.h"
#include "kube/informer.h"
#include "kube/watch.h"
#include "mpijob/builders.h"
#include "mpijob/trim.h"
#include "util/json.h"

#define PODS 10000
#define SUSPENDED_JOBS 10000
#define FIXTURE "tests/bench/data/suspended-job-1.36.json"

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

static struct kube_client *offline_client(void)
{
    const char *kc = "apiVersion: v1\nkind: Config\ncurrent-context: t\nclusters:\n- name: c\n  cluster:\n"
                     "    server: https://127.0.0.1:1\nusers:\n- name: u\n  user:\n    token: t\n"
                     "contexts:\n- name: t\n  context:\n    cluster: c\n    user: u\n";
    struct kube_config *cfg = NULL;
    struct kube_client *client = NULL;
    char err[256];
    if (kube_config_parse(kc, strlen(kc), NULL, NULL, &cfg, err, sizeof(err)) < 0 ||
        kube_client_new(cfg, NULL, &client) < 0) {
        fprintf(stderr, "config: %s\n", err);
        exit(1);
    }
    return client;
}

static struct informer *offline_informer(struct kube_client **client)
{
    *client = offline_client();
    struct informer_config icfg = {.resource = &KUBE_PODS};
    struct informer *inf = NULL;
    if (informer_new(*client, &icfg, &inf) < 0)
        exit(1);
    return inf; /* never started: events are applied directly */
}

/* The fixture: a JSON array of the objects of one suspended job, as a real server served them. */
static cJSON *load_fixture(void)
{
    const char *root = getenv("MPIJOB_SRC_DIR");
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", root && *root ? root : ".", FIXTURE);
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "cannot read %s (run from the repository root or set MPIJOB_SRC_DIR)\n", path);
        exit(1);
    }
    static char text[1 << 20];
    size_t n = fread(text, 1, sizeof(text) - 1, f);
    fclose(f);
    text[n] = 0;
    cJSON *objects = cJSON_Parse(text);
    if (!cJSON_IsArray(objects)) {
        fprintf(stderr, "%s is not a JSON array\n", path);
        exit(1);
    }
    return objects;
}

struct cached_kind {
    const char *kind;
    const struct kube_resource *resource;
    void (*transform)(cJSON *object);
};

/* The controller's informers of one job's objects, with its transforms (controller.c). */
static const struct cached_kind kinds[] = {{"MPIJob", &MPIJOB_RESOURCE_V2BETA1, NULL},
                                           {"Service", &KUBE_SERVICES, NULL},
                                           {"ConfigMap", &KUBE_CONFIGMAPS, NULL},
                                           {"Secret", &KUBE_SECRETS, trim_secret},
                                           {"Job", &KUBE_JOBS, trim_launcher_job}};
enum { KINDS = sizeof(kinds) / sizeof(kinds[0]) };

/* The index in kinds of an object's kind, or KINDS. */
static int kind_index(const cJSON *object)
{
    const char *kind = json_string(object, "kind");
    int k = 0;
    while (k < KINDS && !(kind && strcmp(kind, kinds[k].kind) == 0))
        k++;
    return k;
}

/* Heap held by the five caches for SUSPENDED_JOBS copies of the fixture's job, per job; with
 * the controller's transforms or without. The JSON kept per job goes to *json_per_job. */
static double suspended_jobs_heap(const cJSON *objects, int trimmed, double *json_per_job)
{
    struct kube_client *client = offline_client();
    malloc_trim(0);
    struct mallinfo2 before = mallinfo2();
    struct informer *inf[KINDS] = {0};
    for (int k = 0; k < KINDS; k++) {
        struct informer_config icfg = {.resource = kinds[k].resource,
                                       .index_label = k ? "training.kubeflow.org/job-name" : NULL,
                                       .transform = trimmed ? kinds[k].transform : NULL};
        if (informer_new(client, &icfg, &inf[k]) < 0)
            exit(1);
    }
    for (int i = 0; i < SUSPENDED_JOBS; i++) {
        const cJSON *o;
        cJSON_ArrayForEach(o, objects) {
            int k = kind_index(o);
            if (k == KINDS)
                continue;
            cJSON *copy = cJSON_Duplicate(o, 1);
            cJSON *meta = cJSON_GetObjectItemCaseSensitive(copy, "metadata");
            char name[300], uid[300];
            snprintf(name, sizeof(name), "%s-%d", json_string(meta, "name"), i);
            snprintf(uid, sizeof(uid), "%.24s%012d", json_string(meta, "uid"), i);
            json_set_string(meta, "name", name);
            json_set_string(meta, "uid", uid);
            informer_apply_event(inf[k], KUBE_WATCH_ADDED, copy);
        }
    }
    size_t stored = 0;
    for (int k = 0; k < KINDS; k++) {
        struct kube_object **all = NULL;
        int n = informer_list(inf[k], NULL, &all);
        for (int i = 0; i < n; i++)
            stored += all[i]->json_len;
        kube_object_list_free(all, (size_t)n);
    }
    malloc_trim(0);
    struct mallinfo2 after = mallinfo2();
    for (int k = 0; k < KINDS; k++)
        informer_free(inf[k]);
    kube_client_free(client);
    *json_per_job = (double)stored / SUSPENDED_JOBS;
    return (double)(after.uordblks - before.uordblks) / SUSPENDED_JOBS;
}

/* The same, measured in a child process of its own, so that neither variant starts from a heap
 * the other has shaped. */
static double heap_in_child(const cJSON *objects, int trimmed, double *json_per_job)
{
    int fds[2];
    double figures[2] = {0, 0};
    if (pipe(fds) < 0) {
        perror("pipe");
        exit(1);
    }
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        exit(1);
    }
    if (pid == 0) {
        close(fds[0]);
        figures[0] = suspended_jobs_heap(objects, trimmed, &figures[1]);
        _exit(write(fds[1], figures, sizeof(figures)) == (ssize_t)sizeof(figures) ? 0 : 1);
    }
    close(fds[1]);
    ssize_t n = read(fds[0], figures, sizeof(figures));
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    if (n != (ssize_t)sizeof(figures) || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "the measuring child failed\n");
        exit(1);
    }
    *json_per_job = figures[1];
    return figures[0];
}

static void suspended_jobs_memory(void)
{
    cJSON *objects = load_fixture();
    const cJSON *o;
    printf("one suspended job of 8 workers as 1.36.3 served it (%s), JSON without managedFields:\n", FIXTURE);
    cJSON_ArrayForEach(o, objects) {
        cJSON *copy = cJSON_Duplicate(o, 1);
        cJSON_DeleteItemFromObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(copy, "metadata"), "managedFields");
        char *whole = cJSON_PrintUnformatted(copy);
        int k = kind_index(o);
        if (k < KINDS && kinds[k].transform)
            kinds[k].transform(copy);
        char *kept = cJSON_PrintUnformatted(copy);
        printf("  %-10s %5zu bytes, %5zu kept\n", k < KINDS ? kinds[k].kind : "?", strlen(whole), strlen(kept));
        free(whole);
        free(kept);
        cJSON_Delete(copy);
    }
    double json_whole = 0, json_kept = 0;
    double whole = heap_in_child(objects, 0, &json_whole);
    double kept = heap_in_child(objects, 1, &json_kept);
    printf("controller caches, %d suspended jobs: baseline (whole objects) %.0f bytes per job (%.1f MiB; JSON %.0f); "
           "with the transforms %.0f bytes per job (%.1f MiB; JSON %.0f): %.2fx\n",
           SUSPENDED_JOBS, whole, whole * SUSPENDED_JOBS / 1048576.0, json_whole, kept,
           kept * SUSPENDED_JOBS / 1048576.0, json_kept, kept / whole);
    cJSON_Delete(objects);
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "suspended") == 0) {
        suspended_jobs_memory();
        return 0;
    }
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

    suspended_jobs_memory();
    return 0;
}
