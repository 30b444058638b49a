/* Restart idempotency: the controller is stopped after each write of a job's creation sequence
 * (every prefix: after 0, 1, 2, ... writes) and a fresh one is started. The end state must be
 * the same every time: every object once, none missing, none created twice. */
#include <criterion/criterion.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kube/client.h"
#include "kube/config.h"
#include "mpijob/builders.h"
#include "mpijob/controller.h"
#include "support/apiserver.h"
#include "support/deadline.h"
#include "support/kube_test.h"
#include "util/json.h"

struct fence {
    struct kube_client *client;
    atomic_int writes;
    int limit;
};

/* After the limit-th successful write the client lets no further write out. */
static void count_writes(void *ctx, const char *verb, long code, uint64_t ms)
{
    struct fence *f = ctx;
    bool write = strcmp(verb, "POST") == 0 || strcmp(verb, "PUT") == 0 || strcmp(verb, "PATCH") == 0 ||
                 strcmp(verb, "DELETE") == 0;
    if (write && code >= 200 && code < 300 && atomic_fetch_add(&f->writes, 1) + 1 >= f->limit)
        kube_client_fence_writes(f->client, true);
}

/* How long a wait on a controller may take: generous, for a busy machine (scaled). */
#define WAIT_MS 60000

static struct kube_client *client_for(struct test_apiserver *s) { return test_kube_client(s, NULL); }

static const char *JOB =
    "{\"apiVersion\":\"kubeflow.org/v2beta1\",\"kind\":\"MPIJob\",\"metadata\":{\"name\":\"idem\"},\"spec\":{"
    "\"mpiReplicaSpecs\":{\"Launcher\":{\"template\":{\"spec\":{\"containers\":[{\"name\":\"l\",\"image\":\"w\","
    "\"command\":[\"mpirun\",\"mpijob-worker\",\"train\"]}]}}},\"Worker\":{\"replicas\":2,\"template\":{\"spec\":"
    "{\"containers\":[{\"name\":\"w\",\"image\":\"w\"}]}}}}}}";

static int count_listed(struct kube_client *c, const struct kube_resource *res)
{
    struct kube_list_opts lo = {.label_selector = "training.kubeflow.org/job-name=idem"};
    cJSON *items = NULL;
    if (kube_list_all(c, res, "default", &lo, &items, NULL, NULL) != 0)
        return -1;
    int n = cJSON_GetArraySize(items);
    cJSON_Delete(items);
    return n;
}

static bool settled(struct kube_client *admin)
{
    cJSON *job = NULL;
    bool ok = kube_get(admin, &KUBE_JOBS, "default", "idem-launcher", NULL, NULL) == 0 &&
              kube_get(admin, &MPIJOB_RESOURCE_V2BETA1, "default", "idem", &job, NULL) == 0 &&
              json_string(job, "status.startTime") != NULL;
    cJSON_Delete(job);
    return ok;
}

/* Runs the sequence with a stop after `limit` writes; returns how many writes the first
 * controller made (limit, or fewer when the sequence is shorter). */
static int run_prefix(int limit)
{
    struct test_apiserver srv;
    cr_assert_eq(test_apiserver_start(&srv), 0);
    struct kube_client *admin = client_for(&srv);
    cJSON *job = cJSON_Parse(JOB);
    cr_assert_eq(kube_create(admin, &MPIJOB_RESOURCE_V2BETA1, "default", job, NULL, NULL), 0);
    cJSON_Delete(job);

    struct fence f = {.client = test_operator_client(&srv, NULL), .limit = limit};
    if (limit == 0)
        kube_client_fence_writes(f.client, true);
    kube_client_set_observer(f.client, count_writes, &f);
    struct controller_config cfg = {.client = f.client, .threads = 1};
    struct controller *first = NULL;
    cr_assert_eq(controller_start(&cfg, &first), 0);
    /* Until its limit of writes (or the whole sequence) is done and its reconcile is over: the
     * one that met the fence has then given up. */
    struct test_deadline d = test_deadline_in(WAIT_MS);
    while ((atomic_load(&f.writes) < limit && !settled(admin)) || controller_reconciles(first) == 0)
        cr_assert(test_deadline_poll(&d), "prefix %d: %d writes, %llu reconciles after %s", limit,
                  atomic_load(&f.writes), (unsigned long long)controller_reconciles(first), test_deadline_text(&d));
    controller_stop(first);
    int made = atomic_load(&f.writes);

    struct kube_client *fresh = test_operator_client(&srv, NULL);
    cfg.client = fresh;
    struct controller *second = NULL;
    cr_assert_eq(controller_start(&cfg, &second), 0);
    /* The launcher is the last of the job's objects: once it is there (and the status), the
     * sequence is done. */
    d = test_deadline_in(WAIT_MS);
    while (!settled(admin))
        cr_assert(test_deadline_poll(&d), "prefix %d: the job did not reach its full set of objects in %s", limit,
                  test_deadline_text(&d));
    controller_stop(second);
    cr_assert_eq(count_listed(admin, &KUBE_SERVICES), 1, "prefix %d: one Service", limit);
    cr_assert_eq(count_listed(admin, &KUBE_CONFIGMAPS), 1, "prefix %d: one ConfigMap", limit);
    cr_assert_eq(count_listed(admin, &KUBE_SECRETS), 1, "prefix %d: one Secret", limit);
    cr_assert_eq(count_listed(admin, &KUBE_PODS), 2, "prefix %d: two workers", limit);
    cr_assert_eq(count_listed(admin, &KUBE_JOBS), 1, "prefix %d: one launcher Job", limit);

    /* No object was created twice: every successful create has its own name. */
    cJSON *log = test_apiserver_log(&srv, 0);
    cJSON *e;
    char seen[64][128];
    int n_seen = 0;
    cJSON_ArrayForEach(e, log) {
        const char *verb = json_string(e, "verb");
        if (!verb || strcmp(verb, "create") != 0 || json_int(e, "code", 0) != 201)
            continue;
        char key[128];
        snprintf(key, sizeof(key), "%s/%s", json_string(e, "resource"), json_string(e, "body.metadata.name"));
        for (int i = 0; i < n_seen; i++)
            cr_assert_str_neq(seen[i], key, "prefix %d: %s created twice", limit, key);
        if (n_seen < 64)
            snprintf(seen[n_seen++], sizeof(seen[0]), "%s", key);
    }
    cJSON_Delete(log);

    /* The Secret's key pair was made once: the second controller reused the first's. */
    kube_client_free(f.client);
    kube_client_free(fresh);
    kube_client_free(admin);
    test_apiserver_stop(&srv);
    return made;
}

Test(restart, every_prefix_of_the_creation_sequence_converges, .timeout = 600)
{
    struct test_apiserver probe;
    cr_assert_eq(test_apiserver_start(&probe), 0);
    bool is_double = probe.is_double;
    test_apiserver_stop(&probe);
    if (!is_double)
        cr_skip_test("needs the API-server double (request log)");
    /* Service, ConfigMap, Secret, 2 workers, launcher, status: 7 writes; one more prefix past it. */
    for (int limit = 0; limit <= 8; limit++) {
        int made = run_prefix(limit);
        cr_assert_leq(made, limit == 0 ? 0 : limit, "prefix %d: the fence held (%d writes)", limit, made);
    }
}
