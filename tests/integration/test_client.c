/* The REST client against the API-server double: verbs, Status decoding, retries, credentials,
 * TLS, caps. Each test starts its own double. */
#include <criterion/criterion.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kube/client.h"
#include "kube/config.h"
#include "kube/watch.h"
#include "support/apiserver.h"
#include "support/command.h"
#include "support/deadline.h"
#include "support/kube_test.h"
#include "support/request_log.h"
#include "util/clock.h"
#include "util/json.h"
#include "util/log.h"

static const struct kube_resource MPIJOBS = {"kubeflow.org", "v2beta1", "mpijobs", "MPIJob", true};

static struct test_apiserver srv;

/* How long a wait on the server or the client may take: generous, for a busy machine (scaled). */
#define WAIT_MS 30000

#define REQUIRE_DOUBLE() TEST_REQUIRE_DOUBLE(&srv, "fault injection or request log")

static void start(void)
{
    cr_assert_eq(test_apiserver_start(&srv), 0, "API server did not start");
}
static void stop(void) { test_apiserver_stop(&srv); }

/* opts NULL: the client's own defaults (rate limit and backoffs as in production). */
static struct kube_client *client_with(const struct kube_client_options *opts)
{
    static const struct kube_client_options defaults;
    return test_kube_client(&srv, opts ? opts : &defaults);
}

static cJSON *pod(const char *name)
{
    char text[512];
    snprintf(text, sizeof(text),
             "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"%s\",\"labels\":{\"app\":\"demo\"}},"
             "\"spec\":{\"containers\":[{\"name\":\"c\",\"image\":\"busybox\"}]}}",
             name);
    return cJSON_Parse(text);
}

/* How many log entries since `since` match method, a path suffix and code. */
static int count_requests(int since, const char *method, const char *path_suffix, int code)
{
    struct test_request_filter f = {.method = method, .path = path_suffix, .path_match = TEST_PATH_SUFFIX, .code = code};
    return test_count_requests(&srv, since, &f, NULL, NULL);
}

TestSuite(client, .init = start, .fini = stop, .timeout = 180);

Test(client, create_get_conflict_and_already_exists_told_apart)
{
    struct kube_client *c = client_with(NULL);
    struct kube_status st = {.retry_after_s = -1};
    cJSON *p = pod("p1"), *out = NULL;
    cr_assert_eq(kube_create(c, &KUBE_PODS, "default", p, &out, &st), 0);
    cr_assert_str_eq(json_string(out, "metadata.name"), "p1");
    cr_assert_not_null(json_string(out, "metadata.uid"));
    char *rv = strdup(json_string(out, "metadata.resourceVersion"));
    cJSON_Delete(out);

    cr_assert_eq(kube_create(c, &KUBE_PODS, "default", p, NULL, &st), KUBE_EALREADYEXISTS);
    cr_assert_eq(st.http_code, 409);
    cr_assert_str_eq(st.reason, "AlreadyExists");
    cr_assert_str_eq(st.message, "pods \"p1\" already exists");

    /* A replace carrying a stale resourceVersion is a Conflict, not AlreadyExists. */
    cJSON *meta = cJSON_GetObjectItem(p, "metadata");
    cJSON_AddStringToObject(meta, "resourceVersion", "1");
    cr_assert_eq(kube_replace(c, &KUBE_PODS, "default", "p1", p, NULL, &st), KUBE_ECONFLICT);
    cr_assert_eq(st.http_code, 409);
    cr_assert_str_eq(st.reason, "Conflict");
    cr_assert_not_null(strstr(st.message, "the object has been modified"));

    /* With the current version it goes through (and a real change gets a new version). */
    cJSON_ReplaceItemInObject(meta, "resourceVersion", cJSON_CreateString(rv));
    cJSON_AddStringToObject(cJSON_GetObjectItem(meta, "labels"), "changed", "yes");
    cr_assert_eq(kube_replace(c, &KUBE_PODS, "default", "p1", p, &out, &st), 0);
    cr_assert_str_neq(json_string(out, "metadata.resourceVersion"), rv);
    cJSON_Delete(out);

    cr_assert_eq(kube_get(c, &KUBE_PODS, "default", "nope", &out, &st), KUBE_ENOTFOUND);
    cr_assert_null(out);
    cr_assert_str_eq(st.reason, "NotFound");
    cr_assert_str_eq(json_string(st.details, "name"), "nope");
    kube_status_clear(&st);
    free(rv);
    cJSON_Delete(p);
    kube_client_free(c);
}

Test(client, invalid_object_carries_causes)
{
    struct kube_client *c = client_with(NULL);
    struct kube_status st = {.retry_after_s = -1};
    cJSON *p = pod("Bad_Name");
    cr_assert_eq(kube_create(c, &KUBE_PODS, "default", p, NULL, &st), KUBE_EINVALID);
    cr_assert_eq(st.http_code, 422);
    cJSON *causes = cJSON_GetObjectItem(st.details, "causes");
    cr_assert_geq(cJSON_GetArraySize(causes), 1);
    cr_assert_str_eq(json_string(cJSON_GetArrayItem(causes, 0), "field"), "metadata.name");
    kube_status_clear(&st);
    cJSON_Delete(p);
    kube_client_free(c);
}

Test(client, patches_apply_status_and_strategic_refused_on_custom_resources)
{
    struct kube_client *c = client_with(NULL);
    struct kube_status st = {.retry_after_s = -1};
    cJSON *job = cJSON_Parse("{\"apiVersion\":\"kubeflow.org/v2beta1\",\"kind\":\"MPIJob\",\"metadata\":"
                             "{\"name\":\"j1\"},\"spec\":{\"slotsPerWorker\":1,\"mpiReplicaSpecs\":{\"Launcher\":"
                             "{\"template\":{\"spec\":{\"containers\":[{\"name\":\"l\",\"image\":\"w\"}]}}}}},"
                             "\"status\":{\"state\":\"ignored\"}}");
    cJSON *out = NULL;
    cr_assert_eq(kube_create(c, &MPIJOBS, "default", job, &out, &st), 0);
    cr_assert_eq(json_int(out, "metadata.generation", 0), 1);
    cr_assert_null(json_path(out, "status.state"), "status must be ignored on create");
    cJSON_Delete(out);

    struct kube_patch_opts merge = {.type = KUBE_PATCH_MERGE};
    cr_assert_eq(kube_patch(c, &MPIJOBS, "default", "j1", "{\"spec\":{\"runPolicy\":{\"backoffLimit\":2}},\"status\":{\"workers\":\"1/1\"}}",
                            &merge, &out, &st), 0);
    cr_assert_eq(json_int(out, "spec.runPolicy.backoffLimit", 0), 2);
    cr_assert_eq(json_int(out, "metadata.generation", 0), 2);
    cr_assert_null(json_path(out, "status.workers"));
    cJSON_Delete(out);

    struct kube_patch_opts status = {.type = KUBE_PATCH_MERGE, .subresource = "status"};
    cr_assert_eq(kube_patch(c, &MPIJOBS, "default", "j1", "{\"spec\":{\"runPolicy\":{\"backoffLimit\":9}},\"status\":{\"workers\":\"1/1\"}}",
                            &status, &out, &st), 0);
    cr_assert_str_eq(json_string(out, "status.workers"), "1/1");
    cr_assert_eq(json_int(out, "spec.runPolicy.backoffLimit", 0), 2);
    cr_assert_eq(json_int(out, "metadata.generation", 0), 2, "status writes do not bump generation");
    cJSON_Delete(out);

    struct kube_patch_opts strategic = {.type = KUBE_PATCH_STRATEGIC};
    cr_assert_eq(kube_patch(c, &MPIJOBS, "default", "j1", "{\"spec\":{}}", &strategic, NULL, &st),
                 KUBE_EUNSUPPORTEDMEDIA);
    cr_assert_eq(st.http_code, 415);

    struct kube_patch_opts apply = {.type = KUBE_PATCH_APPLY, .field_manager = "mpijob-operator", .force = true};
    cr_assert_eq(kube_patch(c, &KUBE_CONFIGMAPS, "default", "cm-applied",
                            "{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"cm-applied\"},"
                            "\"data\":{\"a\":\"1\"}}",
                            &apply, &out, &st), 0);
    cr_assert_str_eq(json_string(out, "data.a"), "1");
    int found = 0;
    cJSON *e;
    if (!srv.is_double) {
        /* a real server records the apply under our field manager (the double keeps no
         * managedFields) */
        cJSON_ArrayForEach(e, cJSON_GetObjectItem(cJSON_GetObjectItem(out, "metadata"), "managedFields")) {
            const char *m = json_string(e, "manager"), *op = json_string(e, "operation");
            if (m && op && strcmp(m, "mpijob-operator") == 0 && strcmp(op, "Apply") == 0)
                found = 1;
        }
        cr_assert(found, "server-side apply must be recorded for field manager mpijob-operator");
    }
    cJSON_Delete(out);
    if (srv.is_double) {
        cJSON *log = test_apiserver_log(&srv, 0);
        found = 0;
        cJSON_ArrayForEach(e, log) {
            const char *q = json_string(e, "query");
            if (q && strstr(q, "fieldManager=mpijob-operator") && strstr(q, "force=true"))
                found = 1;
        }
        cJSON_Delete(log);
        cr_assert(found, "server-side apply must send fieldManager and force");
    }
    struct kube_patch_opts apply_no_manager = {.type = KUBE_PATCH_APPLY};
    cr_assert_eq(kube_patch(c, &KUBE_CONFIGMAPS, "default", "x", "{}", &apply_no_manager, NULL, &st), KUBE_EINVAL);

    struct kube_status st2 = {.retry_after_s = -1};
    cJSON *full = NULL;
    cr_assert_eq(kube_get(c, &MPIJOBS, "default", "j1", &full, &st2), 0);
    cJSON_ReplaceItemInObject(full, "status", cJSON_Parse("{\"state\":\"Done\"}"));
    cr_assert_eq(kube_replace_status(c, &MPIJOBS, "default", "j1", full, &out, &st2), 0);
    cr_assert_str_eq(json_string(out, "status.state"), "Done");
    cJSON_Delete(out);
    cJSON_Delete(full);
    kube_status_clear(&st);
    kube_status_clear(&st2);
    cJSON_Delete(job);
    kube_client_free(c);
}

Test(client, delete_with_preconditions)
{
    struct kube_client *c = client_with(NULL);
    struct kube_status st = {.retry_after_s = -1};
    cJSON *p = pod("p3"), *out = NULL;
    cr_assert_eq(kube_create(c, &KUBE_PODS, "default", p, &out, &st), 0);
    char *uid = strdup(json_string(out, "metadata.uid"));
    cJSON_Delete(out);
    struct kube_delete_opts wrong = {.precondition_uid = "00000000-0000-0000-0000-000000000000",
                                     .grace_period_s = -1};
    cr_assert_eq(kube_delete(c, &KUBE_PODS, "default", "p3", &wrong, NULL, &st), KUBE_ECONFLICT);
    cr_assert_not_null(strstr(st.message, "the UID in the precondition"));
    struct kube_delete_opts right = {.precondition_uid = uid, .propagation_policy = "Background",
                                     .grace_period_s = -1};
    cr_assert_eq(kube_delete(c, &KUBE_PODS, "default", "p3", &right, NULL, &st), 0);
    cr_assert_eq(kube_get(c, &KUBE_PODS, "default", "p3", NULL, &st), KUBE_ENOTFOUND);
    cr_assert_eq(kube_delete(c, &KUBE_PODS, "default", "p3", NULL, NULL, &st), KUBE_ENOTFOUND);
    free(uid);
    kube_status_clear(&st);
    cJSON_Delete(p);
    kube_client_free(c);
}

/* Requests reuse the client's connections, also while watches hold some of theirs: curl's
 * cache, sized by each transfer's multi handle, once closed the connection just used whenever
 * more than 4 were open, and every request paid a new TCP and TLS handshake. */

static int ignore_event(void *ctx, enum kube_watch_type type, cJSON *object) { return 0; }

struct held_watch {
    struct kube_client *c;
    struct kube_cancel *cancel;
};

static void *hold_watch(void *arg)
{
    struct held_watch *w = arg;
    struct kube_watch_opts opts = {.timeout_s = 60, .cancel = w->cancel};
    kube_watch(w->c, &KUBE_PODS, "default", &opts, ignore_event, NULL, NULL);
    return NULL;
}

Test(client, requests_reuse_connections_while_watches_are_open)
{
    struct kube_client *c = client_with(NULL);
    enum { WATCHES = 6, REQUESTS = 40 };
    pthread_t threads[WATCHES];
    struct held_watch held[WATCHES];
    struct kube_client_stats before, after;
    kube_client_stats(c, &before);
    for (int i = 0; i < WATCHES; i++) {
        held[i] = (struct held_watch){.c = c, .cancel = kube_cancel_new()};
        cr_assert_not_null(held[i].cancel);
        cr_assert_eq(pthread_create(&threads[i], NULL, hold_watch, &held[i]), 0);
    }
    /* every watch has its connection before the GETs start */
    for (uint64_t end = clock_now_ms() + test_ms(WAIT_MS);; clock_sleep_ms(20)) {
        kube_client_stats(c, &after);
        cr_assert_lt(clock_now_ms(), end, "only %llu of %d watches started",
                     (unsigned long long)(after.requests - before.requests), WATCHES);
        if (after.requests - before.requests >= WATCHES)
            break;
    }
    clock_sleep_ms(300);
    struct kube_status st = {.retry_after_s = -1};
    kube_client_stats(c, &before);
    for (int i = 0; i < REQUESTS; i++)
        cr_assert_eq(kube_get(c, &KUBE_NAMESPACES, NULL, "default", NULL, &st), 0, "%s", st.message);
    kube_client_stats(c, &after);
    for (int i = 0; i < WATCHES; i++) {
        kube_cancel_fire(held[i].cancel);
        pthread_join(threads[i], NULL);
        kube_cancel_free(held[i].cancel);
    }
    unsigned long long made = after.connections - before.connections;
    cr_assert_leq(made, 2, "%d GETs made %llu new connections (watches open: %d)", REQUESTS, made, WATCHES);
    kube_status_clear(&st);
    kube_client_free(c);
}

/* One DELETE on a collection, as the controller cleans up and suspends a job's workers: what the
 * label and field selectors select goes, the rest stays; never an unselected collection. */
Test(client, delete_collection_by_label_and_field_selectors)
{
    struct kube_client *c = client_with(NULL);
    struct kube_status st = {.retry_after_s = -1};
    const char *names[] = {"dc-running", "dc-done", "dc-other"};
    for (int i = 0; i < 3; i++) {
        cJSON *p = pod(names[i]);
        if (i == 2)
            json_set_string(json_path(p, "metadata.labels"), "app", "other");
        cr_assert_eq(kube_create(c, &KUBE_PODS, "default", p, NULL, &st), 0, "%s", st.message);
        cJSON_Delete(p);
    }
    struct kube_patch_opts status = {.type = KUBE_PATCH_MERGE, .subresource = "status"};
    cr_assert_eq(kube_patch(c, &KUBE_PODS, "default", "dc-running", "{\"status\":{\"phase\":\"Running\"}}", &status,
                            NULL, &st), 0, "%s", st.message);
    cr_assert_eq(kube_patch(c, &KUBE_PODS, "default", "dc-done", "{\"status\":{\"phase\":\"Succeeded\"}}", &status,
                            NULL, &st), 0, "%s", st.message);

    cr_assert_eq(kube_delete_collection(c, &KUBE_PODS, "default", "", NULL, NULL, NULL, &st), KUBE_EINVAL);
    cr_assert_eq(kube_delete_collection(c, &KUBE_PODS, "default", NULL, "status.phase=Running", NULL, NULL, &st),
                 KUBE_EINVAL);
    struct kube_delete_opts uid = {.precondition_uid = "x", .grace_period_s = -1};
    cr_assert_eq(kube_delete_collection(c, &KUBE_PODS, "default", "app=demo", NULL, &uid, NULL, &st), KUBE_EINVAL);

    /* cleanPodPolicy Running: Pending and Running go, ended pods stay */
    cJSON *out = NULL;
    struct kube_delete_opts opts = {.grace_period_s = -1};
    cr_assert_eq(kube_delete_collection(c, &KUBE_PODS, "default", "app=demo",
                                        "status.phase!=Succeeded,status.phase!=Failed", &opts, &out, &st),
                 0, "%s", st.message);
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(out, "items")), 1);
    cr_assert_str_eq(json_string(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(out, "items"), 0),
                                 "metadata.name"), "dc-running");
    cJSON_Delete(out);
    cr_assert_eq(kube_get(c, &KUBE_PODS, "default", "dc-running", NULL, &st), KUBE_ENOTFOUND);
    cr_assert_eq(kube_get(c, &KUBE_PODS, "default", "dc-done", NULL, &st), 0);

    /* All: the rest of the selection; another label's pod stays */
    cr_assert_eq(kube_delete_collection(c, &KUBE_PODS, "default", "app=demo", NULL, NULL, NULL, &st), 0);
    cr_assert_eq(kube_get(c, &KUBE_PODS, "default", "dc-done", NULL, &st), KUBE_ENOTFOUND);
    cr_assert_eq(kube_get(c, &KUBE_PODS, "default", "dc-other", NULL, &st), 0);
    /* nothing selected: nothing deleted, no error */
    cr_assert_eq(kube_delete_collection(c, &KUBE_PODS, "default", "app=demo", NULL, NULL, NULL, &st), 0);
    cr_assert_eq(kube_delete(c, &KUBE_PODS, "default", "dc-other", NULL, NULL, &st), 0);
    kube_status_clear(&st);
    kube_client_free(c);
}

Test(client, list_pagination_and_selectors)
{
    /* On a real server the pages are checked by their contents; the double also shows the
     * requests they took. */
    struct kube_client *c = client_with(NULL);
    struct kube_status st = {.retry_after_s = -1};
    for (int i = 0; i < 7; i++) {
        char name[16];
        snprintf(name, sizeof(name), "p%d", i);
        cJSON *p = pod(name);
        if (i % 2)
            cJSON_AddStringToObject(cJSON_GetObjectItem(cJSON_GetObjectItem(p, "metadata"), "labels"), "tier", "odd");
        cr_assert_eq(kube_create(c, &KUBE_PODS, "default", p, NULL, &st), 0);
        cJSON_Delete(p);
    }
    int since = srv.is_double ? test_last_seq(&srv) + 1 : 0;

    struct kube_list_opts page = {.limit = 3};
    cJSON *list = NULL;
    cr_assert_eq(kube_list_page(c, &KUBE_PODS, "default", &page, &list, &st), 0);
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(list, "items")), 3);
    cr_assert_not_null(json_string(list, "metadata.continue"));
    cJSON_Delete(list);

    cJSON *items = NULL;
    char *rv = NULL;
    cr_assert_eq(kube_list_all(c, &KUBE_PODS, "default", &page, &items, &rv, &st), 0);
    cr_assert_eq(cJSON_GetArraySize(items), 7);
    cr_assert_not_null(rv);
    if (srv.is_double)
        cr_assert_eq(count_requests(since, "GET", "/api/v1/namespaces/default/pods", 200), 1 + 3);
    cJSON_Delete(items);
    free(rv);

    struct kube_list_opts sel = {.label_selector = "app=demo,tier in (odd)", .field_selector = "metadata.name!=p1"};
    cr_assert_eq(kube_list_all(c, &KUBE_PODS, "default", &sel, &items, NULL, &st), 0);
    cr_assert_eq(cJSON_GetArraySize(items), 2, "p3 and p5");
    cJSON_Delete(items);
    kube_status_clear(&st);
    kube_client_free(c);
}

Test(client, expired_continue_token_restarts_the_list)
{
    struct kube_client *c = client_with(NULL);
    struct kube_status st = {.retry_after_s = -1};
    for (int i = 0; i < 5; i++) {
        char name[16];
        snprintf(name, sizeof(name), "c%d", i);
        cJSON *p = pod(name);
        cr_assert_eq(kube_create(c, &KUBE_PODS, "default", p, NULL, &st), 0);
        cJSON_Delete(p);
    }
    struct kube_list_opts page = {.limit = 2};
    cJSON *list = NULL;
    cr_assert_eq(kube_list_page(c, &KUBE_PODS, "default", &page, &list, &st), 0);
    char cont[4096];
    const char *token = json_string(list, "metadata.continue");
    cr_assert(token && strlen(token) < sizeof(cont), "a continue token of under 4 KiB");
    snprintf(cont, sizeof(cont), "%s", token);
    cJSON_Delete(list);
    cr_assert_eq(test_apiserver_compact(&srv), 0);
    page.continue_token = cont;
    /* A real kube-apiserver learns of etcd's compaction a moment later: through compact_rev_key,
     * which its cacher reads every 15 s from 1.34 on (test_apiserver_compact). */
    int rc;
    struct test_deadline d = test_deadline_in(WAIT_MS);
    while ((rc = kube_list_page(c, &KUBE_PODS, "default", &page, &list, &st)) == 0 && test_deadline_poll(&d)) {
        cJSON_Delete(list);
        list = NULL;
    }
    if (rc != KUBE_EGONE) {
        kube_status_clear(&st);
        kube_client_free(c);
    }
    cr_assert_eq(rc, KUBE_EGONE, "the continue token still served after %s (rc %d)", test_deadline_text(&d), rc);
    cr_assert_eq(st.http_code, 410);
    cr_assert_str_eq(st.reason, "Expired");
    cr_assert_not_null(st.continue_token, "the 410 Status carries a fresh continue token");
    /* kube_list_all starts over and still returns everything. */
    cJSON *items = NULL;
    cr_assert_eq(kube_list_all(c, &KUBE_PODS, "default", &page, &items, NULL, &st), 0);
    cr_assert_eq(cJSON_GetArraySize(items), 5);
    cJSON_Delete(items);
    kube_status_clear(&st);
    kube_client_free(c);
}

Test(client, burst_of_500s_is_retried_with_backoff)
{
    REQUIRE_DOUBLE();
    struct kube_client_options opts = {.backoff_base_ms = 50, .backoff_max_ms = 400, .max_retries = 5};
    struct kube_client *c = client_with(&opts);
    struct kube_status st = {.retry_after_s = -1};
    cJSON *p = pod("r1");
    cr_assert_eq(kube_create(c, &KUBE_PODS, "default", p, NULL, &st), 0);
    cr_assert_eq(test_apiserver_fault(&srv, "{\"failNext\":{\"count\":3,\"code\":500}}"), 0);
    uint64_t t0 = clock_now_ms();
    cJSON *out = NULL;
    cr_assert_eq(kube_get(c, &KUBE_PODS, "default", "r1", &out, &st), 0);
    uint64_t took = clock_now_ms() - t0;
    cr_assert_str_eq(json_string(out, "metadata.name"), "r1");
    cJSON_Delete(out);
    cr_assert_eq(count_requests(0, "GET", "/pods/r1", 500), 3);
    cr_assert_eq(count_requests(0, "GET", "/pods/r1", 200), 1);
    struct kube_client_stats stats;
    kube_client_stats(c, &stats);
    cr_assert_eq(stats.retries, 3);
    /* backoff: at least half of 50+100+200 ms with equal jitter */
    cr_assert_geq(took, 175, "retries must back off (took %llu ms)", (unsigned long long)took);

    /* more failures than retries: the error reaches the caller, bounded */
    cr_assert_eq(test_apiserver_fault(&srv, "{\"failNext\":{\"count\":50,\"code\":503}}"), 0);
    cr_assert_eq(kube_get(c, &KUBE_PODS, "default", "r1", NULL, &st), KUBE_ESERVER);
    cr_assert_eq(st.http_code, 503);
    cr_assert_eq(count_requests(0, "GET", "/pods/r1", 503), 6, "1 try + 5 retries");
    test_apiserver_fault(&srv, "{\"failNext\":{\"count\":0,\"code\":500}}");
    kube_status_clear(&st);
    cJSON_Delete(p);
    kube_client_free(c);
}

Test(client, too_many_requests_honours_retry_after)
{
    REQUIRE_DOUBLE();
    struct kube_client_options opts = {.backoff_base_ms = 10, .backoff_max_ms = 20};
    struct kube_client *c = client_with(&opts);
    struct kube_status st = {.retry_after_s = -1};
    cJSON *p = pod("t1");
    cr_assert_eq(kube_create(c, &KUBE_PODS, "default", p, NULL, &st), 0);
    cr_assert_eq(test_apiserver_fault(&srv, "{\"failNext\":{\"count\":1,\"code\":429,\"retryAfter\":1}}"), 0);
    uint64_t t0 = clock_now_ms();
    cr_assert_eq(kube_get(c, &KUBE_PODS, "default", "t1", NULL, &st), 0);
    uint64_t took = clock_now_ms() - t0;
    cr_assert_geq(took, 950, "Retry-After: 1 must be waited out even with a 20 ms backoff cap (took %llu)",
                  (unsigned long long)took);
    cr_assert_eq(count_requests(0, "GET", "/pods/t1", 429), 1);
    kube_status_clear(&st);
    cJSON_Delete(p);
    kube_client_free(c);
}

struct getter {
    struct kube_client *c;
    const char *name;
    int rc;
};

static void *get_pod(void *arg)
{
    struct getter *g = arg;
    g->rc = kube_get(g->c, &KUBE_PODS, "default", g->name, NULL, NULL);
    return NULL;
}

/* Waits until the client has met a 429 (it is then in, or going into, its Retry-After wait). */
static void wait_throttled(struct kube_client *c, struct kube_client_stats *stats)
{
    struct test_deadline d = test_deadline_in(WAIT_MS);
    for (kube_client_stats(c, stats); stats->server_throttles == 0; kube_client_stats(c, stats))
        cr_assert(test_deadline_poll(&d), "no 429 met after %s", test_deadline_text(&d));
}

/* A 429 paces the whole client, not only the request that met it: APF tells a client over its
 * share to slow down, and a request started meanwhile waits for the Retry-After too. The 429 is
 * counted, and the time waited shows in the stats. */
Test(client, a_429_holds_every_request_of_the_client_until_its_retry_after)
{
    REQUIRE_DOUBLE();
    struct kube_client *c = client_with(NULL);
    cJSON *p = pod("t2");
    cr_assert_eq(kube_create(c, &KUBE_PODS, "default", p, NULL, NULL), 0);
    cJSON_Delete(p);
    cr_assert_eq(test_apiserver_fault(&srv, "{\"failNext\":{\"count\":1,\"code\":429,\"retryAfter\":2}}"), 0);
    struct getter first = {.c = c, .name = "t2"};
    pthread_t t;
    pthread_create(&t, NULL, get_pod, &first);
    struct kube_client_stats stats = {0};
    wait_throttled(c, &stats);
    cr_assert_eq(stats.server_throttles, 1, "the 429 is counted");
    /* Another request now: it is held until the Retry-After has passed. */
    cr_assert_eq(kube_get(c, &KUBE_PODS, "default", "t2", NULL, NULL), 0);
    pthread_join(t, NULL);
    cr_assert_eq(first.rc, 0);
    kube_client_stats(c, &stats);
    cr_assert_gt(stats.paused_ms, 0, "the second request waited for the first one's Retry-After");
    cr_assert_eq(stats.throttled_ms, 0, "no client-side limiter by default");
    kube_client_free(c);
}

/* A Retry-After longer than the client's cap is waited only up to the cap. */
Test(client, retry_after_is_capped)
{
    REQUIRE_DOUBLE();
    struct kube_client_options opts = {.retry_after_max_ms = 300};
    struct kube_client *c = client_with(&opts);
    cr_assert_eq(kube_client_options(c)->retry_after_max_ms, 300);
    struct kube_client *d = client_with(NULL);
    cr_assert_eq(kube_client_options(d)->retry_after_max_ms, 60000, "a minute by default");
    kube_client_free(d);
    cr_assert_eq(test_apiserver_fault(&srv, "{\"failNext\":{\"count\":1,\"code\":429,\"retryAfter\":3600}}"), 0);
    uint64_t t0 = clock_now_ms();
    cr_assert_eq(kube_get(c, &KUBE_PODS, "default", "absent", NULL, NULL), KUBE_ENOTFOUND);
    uint64_t took = clock_now_ms() - t0;
    cr_assert_geq(took, 280, "the capped wait was skipped (%llu ms)", (unsigned long long)took);
    cr_assert_lt(took, test_ms(WAIT_MS), "Retry-After: 3600 was not capped (%llu ms)", (unsigned long long)took);
    cr_assert_eq(count_requests(0, "GET", "/pods/absent", 429), 1);
    kube_client_free(c);
}

struct waiting_call {
    struct kube_client *c;
    struct kube_cancel *cancel; /* NULL: a GET; else a watch with this token */
    int rc;
    uint64_t done_ms;
    atomic_int done;
};

static size_t ignore_bytes(void *ctx, const char *data, size_t len) { return len; }

static void *waiting_call_run(void *arg)
{
    struct waiting_call *w = arg;
    if (w->cancel)
        w->rc = kube_request_stream(w->c, "/api/v1/namespaces/default/pods", "watch=1", ignore_bytes, NULL,
                                    w->cancel, NULL);
    else
        w->rc = kube_get(w->c, &KUBE_PODS, "default", "absent", NULL, NULL);
    w->done_ms = clock_now_ms();
    atomic_store(&w->done, 1);
    return NULL;
}

/* The call ended within WAIT_MS (scaled) of `since`, far less than the hour it would wait
 * otherwise; joins its thread. */
static void expect_cut_short(struct waiting_call *w, pthread_t t, uint64_t since, const char *what)
{
    struct test_deadline d = test_deadline_in(WAIT_MS);
    while (!atomic_load(&w->done))
        cr_assert(test_deadline_poll(&d), "%s still waiting %s after it was cut", what, test_deadline_text(&d));
    pthread_join(t, NULL);
    cr_assert_eq(w->rc, KUBE_ECANCELED, "%s: rc %d", what, w->rc);
    cr_assert_geq(w->done_ms, since);
}

/* A Retry-After wait (an hour here) ends as soon as the client is shut down, or the stream's
 * cancel token fires: a stopping process does not sit out the server's wait. */
Test(client, shutdown_and_cancel_cut_a_retry_after_wait_short)
{
    REQUIRE_DOUBLE();
    struct kube_client_options hour = {.retry_after_max_ms = 3600 * 1000};
    struct kube_client *c = client_with(&hour);
    cr_assert_eq(test_apiserver_fault(&srv, "{\"failNext\":{\"count\":1,\"code\":429,\"retryAfter\":3600,"
                                            "\"verb\":\"watch\"}}"), 0);
    struct kube_cancel *cancel = kube_cancel_new();
    struct waiting_call w = {.c = c, .cancel = cancel};
    pthread_t t;
    pthread_create(&t, NULL, waiting_call_run, &w);
    struct kube_client_stats stats;
    wait_throttled(c, &stats); /* the client has the 429: it waits, or is about to */
    uint64_t fired = clock_now_ms();
    kube_cancel_fire(cancel);
    expect_cut_short(&w, t, fired, "the watch");
    kube_cancel_free(cancel);
    /* That 429 still holds the first client (a client-wide pause); a fresh one meets its own. */
    kube_client_free(c);
    c = client_with(&hour);

    cr_assert_eq(test_apiserver_fault(&srv, "{\"failNext\":{\"count\":1,\"code\":429,\"retryAfter\":3600}}"), 0);
    w = (struct waiting_call){.c = c};
    pthread_create(&t, NULL, waiting_call_run, &w);
    wait_throttled(c, &stats);
    uint64_t shut = clock_now_ms();
    kube_client_shutdown(c);
    expect_cut_short(&w, t, shut, "the GET");
    /* Nothing leaves a client that was shut down. */
    int before = test_last_seq(&srv);
    cr_assert_eq(kube_get(c, &KUBE_PODS, "default", "absent", NULL, NULL), KUBE_ECANCELED);
    cr_assert_eq(test_last_seq(&srv), before, "a request was sent after the shutdown");
    kube_client_free(c);
}

/* Runs fn with the log going to a file at level, in format; returns what was written. */
static char *capture_log(enum log_level level, enum log_format format, void (*fn)(void *), void *arg)
{
    char path[] = "/tmp/mpijob-log.XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    unlink(path);
    enum log_level saved = log_get_level();
    log_set_level(level);
    log_set_format(format);
    log_set_fd(fd);
    fn(arg);
    log_set_fd(2);
    log_set_format(LOG_TEXT);
    log_set_level(saved);
    static char out[16384];
    ssize_t n = pread(fd, out, sizeof(out) - 1, 0);
    close(fd);
    out[n > 0 ? n : 0] = 0;
    return out;
}

static void get_through_a_503(void *arg)
{
    cr_assert_eq(test_apiserver_fault(&srv, "{\"failNext\":{\"count\":1,\"code\":503}}"), 0);
    cr_assert_eq(kube_get(arg, &KUBE_PODS, "default", "absent", NULL, NULL), KUBE_ENOTFOUND);
}

/* The line about a failed request carries the server's Status message. */
Test(client, retry_log_lines_carry_the_status_message)
{
    REQUIRE_DOUBLE();
    struct kube_client *c = client_with(NULL);
    char *out = capture_log(LOG_DEBUG, LOG_TEXT, get_through_a_503, c);
    cr_assert_not_null(strstr(out, "retrying after server error"), "%s", out);
    cr_assert_not_null(strstr(out, "code=503"), "%s", out);
    cr_assert_not_null(strstr(out, "message=\"the server is currently unable to handle the request (injected "
                                   "fault)\""), "%s", out);
    out = capture_log(LOG_DEBUG, LOG_JSON, get_through_a_503, c);
    cr_assert_not_null(strstr(out, "\"message\":\"the server is currently unable to handle the request "
                                   "(injected fault)\""), "%s", out);
    kube_client_free(c);
}

/* A kubeconfig like the double's, but with the token taken from a file. */
static void write_kubeconfig_with_token_file(const char *path, const char *token_file, const char *ca_override,
                                             int insecure)
{
    FILE *in = fopen(srv.kubeconfig, "r");
    cr_assert_not_null(in);
    char text[16384];
    size_t n = fread(text, 1, sizeof(text) - 1, in);
    text[n] = 0;
    fclose(in);
    struct kube_config *cfg = NULL;
    char err[256];
    cr_assert_eq(kube_config_load_kubeconfig(srv.kubeconfig, NULL, &cfg, err, sizeof(err)), 0, "%s", err);
    char ca_path[512];
    snprintf(ca_path, sizeof(ca_path), "%s.ca", path);
    FILE *ca = fopen(ca_path, "w");
    if (ca_override)
        fputs(ca_override, ca);
    else
        fwrite(cfg->ca.data, 1, cfg->ca.len, ca);
    fclose(ca);
    FILE *out = fopen(path, "w");
    fprintf(out,
            "apiVersion: v1\nkind: Config\ncurrent-context: t\n"
            "clusters:\n- name: c\n  cluster:\n    server: %s\n    certificate-authority: %s\n%s"
            "users:\n- name: u\n  user:\n    tokenFile: %s\n"
            "contexts:\n- name: t\n  context:\n    cluster: c\n    user: u\n",
            cfg->server, ca_path, insecure ? "    insecure-skip-tls-verify: true\n" : "", token_file);
    fclose(out);
    kube_config_free(cfg);
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs(text, f);
    fclose(f);
}

Test(client, rotated_token_file_is_reloaded_after_401)
{
    REQUIRE_DOUBLE();
    char kc[512], tok[512];
    snprintf(kc, sizeof(kc), "%s/rotating.kubeconfig", srv.dir);
    snprintf(tok, sizeof(tok), "%s/token", srv.dir);
    write_file(tok, srv.token);
    write_kubeconfig_with_token_file(kc, tok, NULL, 0);
    struct kube_config *cfg = NULL;
    char err[256];
    cr_assert_eq(kube_config_load_kubeconfig(kc, NULL, &cfg, err, sizeof(err)), 0, "%s", err);
    struct kube_client *c = NULL;
    cr_assert_eq(kube_client_new(cfg, NULL, &c), 0);
    struct kube_status st = {.retry_after_s = -1};
    cr_assert_eq(kube_get(c, &KUBE_PODS, "default", "none", NULL, &st), KUBE_ENOTFOUND);

    /* The server now only accepts the new token; the file is rotated. */
    cr_assert_eq(test_apiserver_control(&srv, "POST", "/_double/tokens", "{\"tokens\":[\"rotated-token\"]}", NULL), 200);
    write_file(tok, "rotated-token\n");
    cr_assert_eq(kube_get(c, &KUBE_PODS, "default", "none", NULL, &st), KUBE_ENOTFOUND,
                 "401 must reload the token file and retry");
    struct kube_client_stats stats;
    kube_client_stats(c, &stats);
    cr_assert_eq(stats.token_reloads, 1);
    cr_assert_eq(count_requests(0, "GET", "/pods/none", 401), 1);

    /* A token the server does not know, and no newer file: Unauthorized reaches the caller. */
    cr_assert_eq(test_apiserver_control(&srv, "POST", "/_double/tokens", "{\"tokens\":[\"another\"]}", NULL), 200);
    cr_assert_eq(kube_get(c, &KUBE_PODS, "default", "none", NULL, &st), KUBE_EUNAUTHORIZED);
    cr_assert_str_eq(st.reason, "Unauthorized");
    kube_status_clear(&st);
    kube_client_free(c);
}

Test(client, tls_is_verified_unless_the_kubeconfig_says_otherwise)
{
    /* A real CA, just not the one that signed the server's certificate. */
    char cmd[1024], ca_file[512];
    snprintf(ca_file, sizeof(ca_file), "%s/other-ca.crt", srv.dir);
    snprintf(cmd, sizeof(cmd),
             "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj /CN=other-root "
             "-keyout %s/other-ca.key -out %s -days 1 2>/dev/null", srv.dir, ca_file);
    cr_assert_eq(system(cmd), 0);
    static char other_ca[8192];
    FILE *f = fopen(ca_file, "r");
    size_t len = fread(other_ca, 1, sizeof(other_ca) - 1, f);
    other_ca[len] = 0;
    fclose(f);
    char kc[512], tok[512];
    snprintf(tok, sizeof(tok), "%s/token2", srv.dir);
    write_file(tok, srv.token);
    snprintf(kc, sizeof(kc), "%s/wrong-ca.kubeconfig", srv.dir);
    write_kubeconfig_with_token_file(kc, tok, other_ca, 0);
    struct kube_config *cfg = NULL;
    char err[256];
    struct kube_client_options opts = {.max_retries = -1};
    struct kube_status st = {.retry_after_s = -1};
    struct kube_client *c = NULL;
    cr_assert_eq(kube_config_load_kubeconfig(kc, NULL, &cfg, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(kube_client_new(cfg, &opts, &c), 0);
    cr_assert_eq(kube_get(c, &KUBE_PODS, "default", "x", NULL, &st), KUBE_ETRANSPORT,
                 "a server certificate from an unknown CA must be refused");
    cr_assert_not_null(st.message);
    kube_client_free(c);
    snprintf(kc, sizeof(kc), "%s/insecure.kubeconfig", srv.dir);
    write_kubeconfig_with_token_file(kc, tok, other_ca, 1);
    cr_assert_eq(kube_config_load_kubeconfig(kc, NULL, &cfg, err, sizeof(err)), 0, "%s", err);
    cr_assert(cfg->insecure_skip_tls_verify);
    cr_assert_eq(kube_client_new(cfg, &opts, &c), 0);
    cr_assert_eq(kube_get(c, &KUBE_PODS, "default", "x", NULL, &st), KUBE_ENOTFOUND);
    kube_status_clear(&st);
    kube_client_free(c);
}

Test(client, oversized_body_is_refused)
{
    struct kube_client *c = client_with(NULL);
    struct kube_status st = {.retry_after_s = -1};
    cJSON *cm = cJSON_Parse("{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"big\"},\"data\":{}}");
    char *value = malloc(200000);
    memset(value, 'x', 199999);
    value[199999] = 0;
    cJSON_AddStringToObject(cJSON_GetObjectItem(cm, "data"), "v", value);
    free(value);
    cr_assert_eq(kube_create(c, &KUBE_CONFIGMAPS, "default", cm, NULL, &st), 0);
    cJSON_Delete(cm);
    kube_client_free(c);

    struct kube_client_options small = {.max_body = 64 * 1024};
    c = client_with(&small);
    cJSON *out = NULL;
    cr_assert_eq(kube_get(c, &KUBE_CONFIGMAPS, "default", "big", &out, &st), KUBE_ETOOBIG);
    cr_assert_null(out);
    kube_status_clear(&st);
    kube_client_free(c);
}

struct hammer {
    struct kube_client *c;
    int failures;
};

static void *hammer_run(void *arg)
{
    struct hammer *h = arg;
    struct kube_status st = {.retry_after_s = -1};
    for (int i = 0; i < 40; i++) {
        cJSON *out = NULL;
        if (kube_get(h->c, &KUBE_PODS, "default", "shared", &out, &st) != 0)
            h->failures++;
        cJSON_Delete(out);
    }
    kube_status_clear(&st);
    return NULL;
}

Test(client, one_client_shared_by_threads)
{
    struct kube_client_options opts = {.qps = -1};
    struct kube_client *c = client_with(&opts);
    cJSON *p = pod("shared");
    cr_assert_eq(kube_create(c, &KUBE_PODS, "default", p, NULL, NULL), 0);
    cJSON_Delete(p);
    pthread_t t[4];
    struct hammer h[4];
    for (int i = 0; i < 4; i++) {
        h[i] = (struct hammer){.c = c};
        pthread_create(&t[i], NULL, hammer_run, &h[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        cr_assert_eq(h[i].failures, 0);
    }
    kube_client_free(c);
}

/* The client's limiter in use (its arithmetic has a test of its own, tests/unit): requests past
 * the burst are spaced by 1/qps. The spacing is half a second (times the tests' time factor),
 * far more than a request to the double takes even on a busy machine, so the limiter is what
 * made them wait. */
Test(client, qps_limit_spaces_requests)
{
    const double qps = 2.0 / test_time_scale();
    struct kube_client_options opts = {.qps = qps, .burst = 1};
    struct kube_client *c = client_with(&opts);
    uint64_t t0 = clock_now_ms();
    for (int i = 0; i < 4; i++)
        kube_get(c, &KUBE_PODS, "default", "absent", NULL, NULL);
    uint64_t took = clock_now_ms() - t0;
    struct kube_client_stats stats;
    kube_client_stats(c, &stats);
    /* 3 requests past the burst cannot finish in less than 3 spacings, however fast or slow the
     * server is. */
    uint64_t spacing = (uint64_t)(1000.0 / qps);
    cr_assert_geq(took + 20, 3 * spacing, "4 requests took %llu ms", (unsigned long long)took);
    cr_assert_gt(stats.throttled_ms, 0, "the limiter made requests wait");
    kube_client_free(c);
}

/* ---- tls-server-name ------------------------------------------------------------------------- */

static char tls_dir[64];
static pid_t tls_echo_pid;
static int tls_echo_port;
static char tls_ca_b64[8192];

static void tls_start(void)
{
    snprintf(tls_dir, sizeof(tls_dir), "/tmp/mpijob-tls.XXXXXX");
    cr_assert_not_null(mkdtemp(tls_dir));
    /* A CA, and a server certificate for the name apiserver.test only (no IP address). */
    char cmd[2048];
    snprintf(cmd, sizeof(cmd),
             "cd %s && printf 'subjectAltName=DNS:apiserver.test\\nbasicConstraints=CA:FALSE\\n"
             "keyUsage=critical,digitalSignature\\nextendedKeyUsage=serverAuth\\n' > ext.cnf && "
             "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj /CN=test-ca "
             "-keyout ca.key -out ca.crt -days 1 2>/dev/null && "
             "openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj /CN=apiserver.test "
             "-keyout server.key -out server.csr 2>/dev/null && "
             "openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -set_serial 7 -days 1 -extfile ext.cnf "
             "-out server.crt 2>/dev/null && base64 -w0 ca.crt > ca.b64",
             tls_dir);
    cr_assert_eq(system(cmd), 0, "making certificates");
    char path[256];
    snprintf(path, sizeof(path), "%s/ca.b64", tls_dir);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f);
    size_t n = fread(tls_ca_b64, 1, sizeof(tls_ca_b64) - 1, f);
    tls_ca_b64[n] = 0;
    fclose(f);

    char script[512], cert[256], key[256], port_file[256];
    snprintf(script, sizeof(script), "%s/tests/support/tls_echo.py", test_src_dir());
    snprintf(cert, sizeof(cert), "%s/server.crt", tls_dir);
    snprintf(key, sizeof(key), "%s/server.key", tls_dir);
    snprintf(port_file, sizeof(port_file), "%s/port", tls_dir);
    tls_echo_pid = fork();
    cr_assert_geq(tls_echo_pid, 0);
    if (tls_echo_pid == 0) {
        execlp("python3", "python3", script, "--cert", cert, "--key", key, "--port-file", port_file, (char *)NULL);
        _exit(127);
    }
    struct test_deadline d = test_deadline_in(WAIT_MS);
    while (!tls_echo_port) {
        cr_assert(test_deadline_poll(&d), "the TLS echo server did not start (no %s after %s)", port_file,
                  test_deadline_text(&d));
        f = fopen(port_file, "r");
        if (f) {
            cr_assert_eq(fscanf(f, "%d", &tls_echo_port), 1);
            fclose(f);
        }
    }
}

static void tls_stop(void)
{
    if (tls_echo_pid > 0) {
        kill(tls_echo_pid, SIGTERM);
        waitpid(tls_echo_pid, NULL, 0);
    }
    if (tls_dir[0]) {
        char cmd[128];
        snprintf(cmd, sizeof(cmd), "rm -rf %s", tls_dir);
        cr_assert_eq(system(cmd), 0);
    }
}

/* A client for server with the test CA and, when not NULL, tls-server-name. */
static struct kube_client *tls_client(const char *server, const char *tls_server_name)
{
    char kc[12288];
    snprintf(kc, sizeof(kc),
             "apiVersion: v1\nkind: Config\ncurrent-context: t\n"
             "clusters:\n- name: c\n  cluster:\n    server: %s\n    certificate-authority-data: %s\n%s%s%s"
             "users:\n- name: u\n  user:\n    token: x\n"
             "contexts:\n- name: t\n  context:\n    cluster: c\n    user: u\n",
             server, tls_ca_b64, tls_server_name ? "    tls-server-name: " : "",
             tls_server_name ? tls_server_name : "", tls_server_name ? "\n" : "");
    struct kube_config *cfg = NULL;
    char err[256];
    cr_assert_eq(kube_config_parse(kc, strlen(kc), NULL, NULL, &cfg, err, sizeof(err)), 0, "%s", err);
    struct kube_client_options opts = {.max_retries = -1, .qps = -1};
    struct kube_client *c = NULL;
    cr_assert_eq(kube_client_new(cfg, &opts, &c), 0);
    return c;
}

TestSuite(tls, .init = tls_start, .fini = tls_stop, .timeout = 120);

/* The certificate names apiserver.test, not 127.0.0.1. With tls-server-name the client
 * connects to 127.0.0.1, sends the name as SNI, verifies the certificate against it, and still
 * names the server in its Host header; without it, or with another name, verification fails. */
Test(tls, tls_server_name_is_what_the_certificate_is_verified_against)
{
    char server[64], authority[64];
    snprintf(server, sizeof(server), "https://127.0.0.1:%d", tls_echo_port);
    snprintf(authority, sizeof(authority), "127.0.0.1:%d", tls_echo_port);
    struct kube_status st = {.retry_after_s = -1};

    struct kube_client *c = tls_client(server, NULL);
    cr_assert_eq(kube_request(c, "GET", "/version", NULL, NULL, NULL, NULL, &st), KUBE_ETRANSPORT,
                 "a certificate without 127.0.0.1 must be refused for https://127.0.0.1");
    kube_client_free(c);

    c = tls_client(server, "apiserver.test");
    cJSON *out = NULL;
    int rc = kube_request(c, "GET", "/version", "x=1", NULL, NULL, &out, &st);
    cr_assert_eq(rc, 0, "rc %d: %s", rc, st.message ? st.message : "");
    cr_assert_str_eq(json_string(out, "sni"), "apiserver.test");
    cr_assert_str_eq(json_string(out, "host"), authority);
    cr_assert_str_eq(json_string(out, "path"), "/version?x=1");
    cJSON_Delete(out);
    /* Paths and connections go on working (the pooled connection is reused). */
    cr_assert_eq(kube_get(c, &KUBE_PODS, "default", "p", &out, &st), 0);
    cr_assert_str_eq(json_string(out, "path"), "/api/v1/namespaces/default/pods/p");
    cJSON_Delete(out);
    kube_client_free(c);

    c = tls_client(server, "other.test");
    cr_assert_eq(kube_request(c, "GET", "/version", NULL, NULL, NULL, NULL, &st), KUBE_ETRANSPORT,
                 "tls-server-name must not turn verification off");
    kube_client_free(c);

    /* A name as server, with tls-server-name: connects by that name, verifies the TLS name. */
    snprintf(server, sizeof(server), "https://localhost:%d", tls_echo_port);
    c = tls_client(server, "apiserver.test");
    cr_assert_eq(kube_request(c, "GET", "/version", NULL, NULL, NULL, &out, &st), 0, "%s",
                 st.message ? st.message : "");
    snprintf(authority, sizeof(authority), "localhost:%d", tls_echo_port);
    cr_assert_str_eq(json_string(out, "host"), authority);
    cJSON_Delete(out);
    kube_client_free(c);
    kube_status_clear(&st);
}

Test(tls, a_tls_server_name_that_is_no_host_name_is_refused)
{
    char kc[12288];
    snprintf(kc, sizeof(kc),
             "current-context: t\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:1\n"
             "    tls-server-name: \"a b/c\"\ncontexts:\n- name: t\n  context:\n    cluster: c\n");
    struct kube_config *cfg = NULL;
    char err[256];
    cr_assert_eq(kube_config_parse(kc, strlen(kc), NULL, NULL, &cfg, err, sizeof(err)), 0, "%s", err);
    struct kube_client *c = NULL;
    cr_assert_eq(kube_client_new(cfg, NULL, &c), KUBE_ECONFIG);
    cr_assert_null(c);
}
