/* The event recorder against the API-server double: create, aggregation into count patches,
 * distinct messages, the involved object, and recreation after the Event was deleted. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kube/client.h"
#include "kube/config.h"
#include "kube/events.h"
#include "support/apiserver.h"
#include "support/deadline.h"
#include "support/kube_test.h"
#include "support/request_log.h"
#include "util/clock.h"
#include "util/json.h"
#include "util/log.h"

#define NS "research"
#define EVENTS_PATH "/api/v1/namespaces/" NS "/events"

static struct test_apiserver srv;
static struct kube_client *client;
static struct event_recorder *recorder;

static const struct event_target job = {
    .api_version = "kubeflow.org/v2beta1",
    .kind = "MPIJob",
    .namespace = NS,
    .name = "pi",
    .uid = "5f0c1a7e-1111-4222-8333-944445555666",
    .resource_version = "42",
};

static void start(void)
{
    cr_assert_eq(test_apiserver_start(&srv), 0, "API server did not start");
    cr_assert_eq(test_apiserver_namespace(&srv, NS), 0);
    /* No client-side rate limit: the flood test writes a thousand events. */
    struct kube_client_options opts = {.qps = -1};
    client = test_kube_client(&srv, &opts);
    cr_assert_eq(event_recorder_new(client, "mpijob-operator", "node-1", &recorder), 0);
}

static void stop(void)
{
    event_recorder_free(recorder);
    recorder = NULL;
    kube_client_free(client);
    client = NULL;
    test_apiserver_stop(&srv);
}

TestSuite(events, .init = start, .fini = stop, .timeout = 180);

/* Requests whose method matches and whose path equals path, or starts with it followed by
 * '/' when prefix is set. */
static int count_requests(const char *method, const char *path, bool prefix)
{
    struct test_request_filter f = {.method = method, .path = path,
                                    .path_match = prefix ? TEST_PATH_UNDER : TEST_PATH_EXACT};
    return test_count_requests(&srv, 0, &f, NULL, NULL);
}

/* Every Event in the namespace (caller frees the array). */
static cJSON *list_events(void)
{
    cJSON *list = NULL;
    cr_assert_eq(kube_list_page(client, &KUBE_EVENTS, NS, NULL, &list, NULL), 0);
    cJSON *items = cJSON_DetachItemFromObjectCaseSensitive(list, "items");
    cJSON_Delete(list);
    cr_assert_not_null(items);
    return items;
}

static cJSON *only_event(void)
{
    cJSON *items = list_events();
    cr_assert_eq(cJSON_GetArraySize(items), 1);
    cJSON *ev = cJSON_DetachItemFromArray(items, 0);
    cJSON_Delete(items);
    return ev;
}

static bool is_hex(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!strchr("0123456789abcdef", s[i]))
            return false;
    return s[n] == 0;
}

Test(events, first_record_creates_an_event_about_the_object)
{
    cr_assert_eq(event_record(recorder, &job, "Normal", "MPIJobCreated", "MPIJob %s/%s is created.",
                              NS, "pi"),
                 0);
    event_recorder_flush(recorder);
    if (srv.is_double)
        cr_assert_eq(count_requests("POST", EVENTS_PATH, false), 1);

    cJSON *ev = only_event();
    const char *name = json_string(ev, "metadata.name");
    cr_assert_not_null(name);
    cr_assert_eq(strlen(name), strlen("pi.") + 16, "name %s", name);
    cr_assert_eq(strncmp(name, "pi.", 3), 0, "name %s", name);
    cr_assert(is_hex(name + 3, 16), "name %s", name);
    cr_assert_str_eq(json_string(ev, "metadata.namespace"), NS);
    cr_assert_str_eq(json_string(ev, "involvedObject.apiVersion"), "kubeflow.org/v2beta1");
    cr_assert_str_eq(json_string(ev, "involvedObject.kind"), "MPIJob");
    cr_assert_str_eq(json_string(ev, "involvedObject.namespace"), NS);
    cr_assert_str_eq(json_string(ev, "involvedObject.name"), "pi");
    cr_assert_str_eq(json_string(ev, "involvedObject.uid"), job.uid);
    cr_assert_str_eq(json_string(ev, "involvedObject.resourceVersion"), "42");
    cr_assert_str_eq(json_string(ev, "reason"), "MPIJobCreated");
    cr_assert_str_eq(json_string(ev, "message"), "MPIJob research/pi is created.");
    cr_assert_str_eq(json_string(ev, "type"), "Normal");
    cr_assert_str_eq(json_string(ev, "source.component"), "mpijob-operator");
    cr_assert_str_eq(json_string(ev, "source.host"), "node-1");
    cr_assert_str_eq(json_string(ev, "reportingComponent"), "mpijob-operator");
    cr_assert_str_eq(json_string(ev, "reportingInstance"), "node-1");
    cr_assert_eq(json_int(ev, "count", -1), 1);
    const char *first = json_string(ev, "firstTimestamp");
    cr_assert_not_null(first);
    cr_assert_eq(strlen(first), 20, "RFC 3339 seconds: %s", first);
    cr_assert_eq(first[19], 'Z');
    cr_assert_str_eq(json_string(ev, "lastTimestamp"), first);
    cJSON_Delete(ev);
}

Test(events, repeats_are_patched_into_one_event)
{
    for (int i = 0; i < 3; i++)
        cr_assert_eq(event_record(recorder, &job, "Warning", "WorkersNotReady", "%d of %d ready", 1,
                                  2),
                     0);
    event_recorder_flush(recorder);

    cJSON *ev = only_event();
    cr_assert_eq(json_int(ev, "count", -1), 3);
    cr_assert_str_eq(json_string(ev, "message"), "1 of 2 ready");
    cr_assert_str_eq(json_string(ev, "type"), "Warning");
    cr_assert_not_null(json_string(ev, "lastTimestamp"));
    cr_assert_geq(strcmp(json_string(ev, "lastTimestamp"), json_string(ev, "firstTimestamp")), 0);
    if (srv.is_double) {
        cr_assert_eq(count_requests("POST", EVENTS_PATH, false), 1, "one create");
        char path[256];
        snprintf(path, sizeof(path), EVENTS_PATH "/%s", json_string(ev, "metadata.name"));
        cr_assert_eq(count_requests("PATCH", path, false), 2, "then a patch per repeat");
        /* The patches are merge patches of count and lastTimestamp only. */
        cJSON *log = test_apiserver_log(&srv, 0);
        long long expected_count = 2;
        cJSON *e;
        cJSON_ArrayForEach(e, log) {
            const char *m = json_string(e, "method");
            if (!m || strcmp(m, "PATCH") != 0)
                continue;
            cr_assert_str_eq(json_string(e, "contentType"), "application/merge-patch+json");
            cJSON *body = cJSON_GetObjectItemCaseSensitive(e, "body");
            cr_assert_eq(json_int(body, "count", -1), expected_count++);
            cr_assert_not_null(json_string(body, "lastTimestamp"));
            cr_assert_eq(cJSON_GetArraySize(body), 2);
        }
        cJSON_Delete(log);
    }
    cJSON_Delete(ev);
}

Test(events, a_different_message_makes_a_second_event)
{
    cr_assert_eq(event_record(recorder, &job, "Normal", "Scaling", "workers: %d", 2), 0);
    cr_assert_eq(event_record(recorder, &job, "Normal", "Scaling", "workers: %d", 4), 0);
    cr_assert_eq(event_record(recorder, &job, "Normal", "Scaling", "workers: %d", 2), 0);
    event_recorder_flush(recorder);
    if (srv.is_double) {
        cr_assert_eq(count_requests("POST", EVENTS_PATH, false), 2);
        cr_assert_eq(count_requests("PATCH", EVENTS_PATH, true), 1);
    }
    cJSON *items = list_events();
    cr_assert_eq(cJSON_GetArraySize(items), 2);
    long long counts[2] = {0};
    cJSON *e;
    cJSON_ArrayForEach(e, items) {
        const char *msg = json_string(e, "message");
        cr_assert_not_null(msg);
        counts[strcmp(msg, "workers: 2") == 0 ? 0 : 1] = json_int(e, "count", -1);
    }
    cr_assert_eq(counts[0], 2);
    cr_assert_eq(counts[1], 1);
    cJSON_Delete(items);

    /* Another object with the same reason and message is another Event too. */
    struct event_target other = job;
    other.name = "pi-2";
    other.uid = "00000000-0000-4000-8000-000000000002";
    cr_assert_eq(event_record(recorder, &other, "Normal", "Scaling", "workers: %d", 2), 0);
    event_recorder_flush(recorder);
    items = list_events();
    cr_assert_eq(cJSON_GetArraySize(items), 3);
    cJSON_Delete(items);
}

Test(events, a_deleted_event_is_created_again)
{
    cr_assert_eq(event_record(recorder, &job, "Warning", "LauncherFailed", "exit code %d", 137), 0);
    event_recorder_flush(recorder);
    cJSON *ev = only_event();
    char *first_name = strdup(json_string(ev, "metadata.name"));
    cJSON_Delete(ev);

    cr_assert_eq(kube_delete(client, &KUBE_EVENTS, NS, first_name, NULL, NULL, NULL), 0);
    cr_assert_eq(event_record(recorder, &job, "Warning", "LauncherFailed", "exit code %d", 137), 0);
    event_recorder_flush(recorder);

    ev = only_event();
    cr_assert_eq(json_int(ev, "count", -1), 1);
    cr_assert_str_neq(json_string(ev, "metadata.name"), first_name);
    cr_assert_str_eq(json_string(ev, "message"), "exit code 137");
    cJSON_Delete(ev);

    /* And the new one is the one that repeats patch from now on. */
    cr_assert_eq(event_record(recorder, &job, "Warning", "LauncherFailed", "exit code %d", 137), 0);
    event_recorder_flush(recorder);
    ev = only_event();
    cr_assert_eq(json_int(ev, "count", -1), 2);
    cJSON_Delete(ev);
    if (srv.is_double)
        cr_assert_eq(count_requests("POST", EVENTS_PATH, false), 2);
    free(first_name);
}

Test(events, long_messages_are_capped)
{
    char big[3000];
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = 0;
    /* A two-byte character straddling the cap is dropped whole. */
    big[1023] = (char)0xc3;
    big[1024] = (char)0xa9;
    cr_assert_eq(event_record(recorder, &job, "Normal", "Chatty", "%s", big), 0);
    event_recorder_flush(recorder);
    cJSON *ev = only_event();
    const char *msg = json_string(ev, "message");
    cr_assert_not_null(msg);
    cr_assert_eq(strlen(msg), 1023);
    cJSON_Delete(ev);
}

/* Recording never waits for the API server: past the queue's bound events are dropped, and
 * event_record still returns at once. The server holds the recorder back from its first Event on
 * (a 429 with a Retry-After of 10 s, scaled): every one of the records that follow returns while
 * it is held, with nothing written yet, whatever the machine's speed. */
Test(events, a_full_queue_drops_instead_of_blocking)
{
    TEST_REQUIRE_DOUBLE(&srv, "fault injection: the server holds the recorder back");
    enum { N = 5000 };
    char fault[192];
    snprintf(fault, sizeof(fault),
             "{\"failNext\":{\"count\":1,\"code\":429,\"retryAfter\":%llu,\"verb\":\"create\",\"resource\":\"events\"}}",
             (unsigned long long)(test_ms(10000) / 1000));
    cr_assert_eq(test_apiserver_fault(&srv, fault), 0);
    cr_assert_eq(event_record(recorder, &job, "Normal", "Flood", "same again"), 0);
    struct kube_client_stats stats;
    struct test_deadline d = test_deadline_in(30000);
    for (kube_client_stats(client, &stats); stats.server_throttles == 0; kube_client_stats(client, &stats))
        cr_assert(test_deadline_poll(&d), "the recorder's first Event met no 429 after %s", test_deadline_text(&d));
    for (int i = 1; i < N; i++)
        cr_assert_eq(event_record(recorder, &job, "Normal", "Flood", "same again"), 0);
    cr_assert_eq(count_requests("POST", EVENTS_PATH, false), 1,
                 "the records returned while the recorder was held: only its refused first Event was sent");
    event_recorder_flush(recorder);
    cJSON *ev = only_event();
    long long count = json_int(ev, "count", -1);
    cr_assert_gt(count, 0);
    cr_assert_lt(count, N, "count %lld: nothing was dropped", count);
    cJSON_Delete(ev);
}

Test(events, bad_arguments_are_refused)
{
    struct event_target nameless = job;
    nameless.name = NULL;
    cr_assert_eq(event_record(recorder, &nameless, "Normal", "X", "y"), KUBE_EINVAL);
    cr_assert_eq(event_record(recorder, &job, NULL, "X", "y"), KUBE_EINVAL);
    event_recorder_flush(recorder);
}

/* A refused Event is logged with the server's own words. */
Test(events, a_refused_event_is_logged_with_the_status_message)
{
    char path[] = "/tmp/mpijob-log.XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    unlink(path);
    struct event_target elsewhere = job;
    elsewhere.namespace = "nowhere";
    log_set_fd(fd);
    cr_assert_eq(event_record(recorder, &elsewhere, "Warning", "Lost", "in a namespace that does not exist"), 0);
    event_recorder_flush(recorder);
    log_set_fd(2);
    static char out[8192];
    ssize_t n = pread(fd, out, sizeof(out) - 1, 0);
    close(fd);
    out[n > 0 ? n : 0] = 0;
    cr_assert_not_null(strstr(out, "event create failed"), "%s", out);
    cr_assert_not_null(strstr(out, "error=\"not found\""), "%s", out);
    cr_assert_not_null(strstr(out, "message=\"namespaces \\\"nowhere\\\" not found\""), "%s", out);
}
