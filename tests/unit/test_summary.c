/* The launcher's training summary (summary.h): finding the line in a log's end, what status gets
 * from it, when the transport used contradicts the one asked for, and which launcher pod's log
 * the reconciler reads (plan_summary_source). The planner's use of it is in test_plan.c. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kube/object.h"
#include "mpijob/plan.h"
#include "mpijob/summary.h"
#include "util/json.h"

#define LINE(transport)                                                                                           \
    "{\"event\":\"summary\",\"ranks\":2,\"backend\":\"mpi\",\"device\":\"cpu\",\"transport\":\"" transport "\","  \
    "\"loss_first\":2.5,\"loss_last\":0.5,\"weights_identical\":true,\"samples_per_sec\":1000.04,"                \
    "\"step_ms\":4.25,\"exposed_comm_ms\":0.5,\"compute_ms\":3.75,\"steps\":20}"

struct parse_case {
    const char *name;
    const char *log;
    enum summary_found want;
    const char *transport; /* SUMMARY_FOUND */
    const char *why;       /* SUMMARY_BROKEN: a part of the reason */
};

static const struct parse_case parse_cases[] = {
    {"the last line", "+ mpirun -np 2 mpijob-worker train\n{\"event\":\"start\"}\n" LINE("mpi") "\n", SUMMARY_FOUND, "mpi", NULL},
    {"no newline at the end", LINE("Socket"), SUMMARY_FOUND, "Socket", NULL},
    {"CRLF line ends", LINE("IB") "\r\n", SUMMARY_FOUND, "IB", NULL},
    {"mpirun's --tag-output prefix", "[1,0]<stdout>:" LINE("IB") "\n", SUMMARY_FOUND, "IB", NULL},
    {"lines after it (mpirun's own report)", LINE("Socket") "\n---\nprterun noticed that process rank 1 exited\n",
     SUMMARY_FOUND, "Socket", NULL},
    {"the last of two runs counts", LINE("Socket") "\n" LINE("IB") "\n", SUMMARY_FOUND, "IB", NULL},
    {"an empty log", "", SUMMARY_NONE, NULL, NULL},
    {"another program's log", "epoch 1: loss 0.3\n{\"event\":\"step\",\"step\":3}\nsummary: all good\n", SUMMARY_NONE, NULL, NULL},
    {"a summary cut short", "{\"event\":\"summary\",\"ranks\":2,\"transport\":\"IB\",\"samp", SUMMARY_BROKEN, NULL,
     "not JSON"},
    {"no transport", "{\"event\":\"summary\",\"ranks\":2,\"backend\":\"mpi\",\"samples_per_sec\":1,\"step_ms\":1,"
     "\"exposed_comm_ms\":0,\"weights_identical\":true}", SUMMARY_BROKEN, NULL, "\"transport\" is missing"},
    {"a transport that is no name", "{\"event\":\"summary\",\"ranks\":2,\"backend\":\"mpi\",\"transport\":\"a\\nb\","
     "\"samples_per_sec\":1,\"step_ms\":1,\"exposed_comm_ms\":0,\"weights_identical\":true}", SUMMARY_BROKEN, NULL,
     "not printable"},
    {"ranks not a number", "{\"event\":\"summary\",\"ranks\":\"two\",\"backend\":\"mpi\",\"transport\":\"mpi\","
     "\"samples_per_sec\":1,\"step_ms\":1,\"exposed_comm_ms\":0,\"weights_identical\":true}", SUMMARY_BROKEN, NULL,
     "\"ranks\""},
    {"a negative rate", "{\"event\":\"summary\",\"ranks\":2,\"backend\":\"mpi\",\"transport\":\"mpi\","
     "\"samples_per_sec\":-1,\"step_ms\":1,\"exposed_comm_ms\":0,\"weights_identical\":true}", SUMMARY_BROKEN, NULL,
     "samples_per_sec"},
    {"weights_identical missing", "{\"event\":\"summary\",\"ranks\":2,\"backend\":\"mpi\",\"transport\":\"mpi\","
     "\"samples_per_sec\":1,\"step_ms\":1,\"exposed_comm_ms\":0}", SUMMARY_BROKEN, NULL, "weights_identical"},
};

ParameterizedTestParameters(summary, parse)
{
    static int index[sizeof(parse_cases) / sizeof(parse_cases[0])];
    for (size_t i = 0; i < sizeof(index) / sizeof(index[0]); i++)
        index[i] = (int)i;
    return cr_make_param_array(int, index, sizeof(index) / sizeof(index[0]));
}

ParameterizedTest(int *i, summary, parse)
{
    const struct parse_case *c = &parse_cases[*i];
    struct launcher_summary s;
    char why[256];
    enum summary_found got = summary_parse(c->log, strlen(c->log), &s, why, sizeof(why));
    cr_assert_eq(got, c->want, "case %s: found %d, want %d (%s)", c->name, got, c->want, why);
    if (c->transport)
        cr_expect_str_eq(s.transport, c->transport, "case %s", c->name);
    if (c->why)
        cr_expect(strstr(why, c->why) != NULL, "case %s: why \"%s\" lacks \"%s\"", c->name, why, c->why);
}

Test(summary, a_10_mb_log_without_a_summary_is_scanned_to_its_start)
{
    size_t len = 10u << 20;
    char *log = malloc(len + 1);
    for (size_t i = 0; i < len; i++)
        log[i] = i % 100 == 99 ? '\n' : 'x';
    log[len] = '\0';
    struct launcher_summary s;
    char why[128];
    cr_expect_eq(summary_parse(log, len, &s, why, sizeof(why)), SUMMARY_NONE);
    memcpy(log + len - strlen(LINE("IB")) - 1, LINE("IB") "\n", strlen(LINE("IB")) + 1);
    cr_expect_eq(summary_parse(log, len, &s, why, sizeof(why)), SUMMARY_FOUND, "%s", why);
    free(log);
}

Test(summary, status_fields_are_rounded_so_that_they_read_back_as_written)
{
    struct launcher_summary s;
    char why[128];
    const char *log = LINE("mpi");
    cr_assert_eq(summary_parse(log, strlen(log), &s, why, sizeof(why)), SUMMARY_FOUND);
    cJSON *o = summary_to_status(&s, "pi-launcher-x");
    char *text = cJSON_PrintUnformatted(o);
    cr_expect_str_eq(text, "{\"pod\":\"pi-launcher-x\",\"transport\":\"mpi\",\"backend\":\"mpi\",\"device\":\"cpu\","
                           "\"ranks\":2,\"samplesPerSecond\":1000,\"stepMs\":4.25,\"exposedCommunicationMs\":0.5,"
                           "\"weightsIdentical\":true}");
    free(text);
    cJSON_Delete(o);
}

struct mismatch_case {
    enum transport asked;
    const char *used;
    bool mismatch;
};

Test(summary, mismatch_rules)
{
    static const struct mismatch_case cases[] = {
        {TRANSPORT_RDMA, "IB", false},     {TRANSPORT_RDMA, "Socket", true},
        {TRANSPORT_RDMA, "mpi", true},     {TRANSPORT_RDMA, "P2P", true},
        {TRANSPORT_RDMA, "SHM", true},     {TRANSPORT_RDMA, "unknown", true},
        {TRANSPORT_RDMA, "AWS Libfabric", true}, {TRANSPORT_RDMA, SUMMARY_TRANSPORT_ONE_RANK, false},
        {TRANSPORT_TCP, "Socket", false},  {TRANSPORT_TCP, "mpi", false},
        {TRANSPORT_TCP, "IB", true},       {TRANSPORT_TCP, "unknown", false},
        {TRANSPORT_AUTO, "IB", false},     {TRANSPORT_AUTO, "Socket", false},
        {TRANSPORT_AUTO, "mpi", false},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char msg[512] = "";
        bool got = summary_mismatch(cases[i].asked, cases[i].used, "pi-launcher-x", msg, sizeof(msg));
        cr_expect_eq(got, cases[i].mismatch, "asked %s, used %s: mismatch %d", transport_name(cases[i].asked),
                     cases[i].used, got);
        if (got) {
            char asked[64], used[80];
            snprintf(asked, sizeof(asked), "asks for %s", transport_name(cases[i].asked));
            snprintf(used, sizeof(used), "reports transport %s", cases[i].used);
            cr_expect(strstr(msg, asked) && strstr(msg, used) && strstr(msg, "pi-launcher-x"),
                      "the message quotes both: %s", msg);
        }
    }
}

/* ---- which pod's log is read ---- */

static struct kube_object *launcher_pod(const char *name, const char *phase, const char *finished)
{
    char text[1024];
    snprintf(text, sizeof(text),
             "{\"kind\":\"Pod\",\"metadata\":{\"name\":\"%s\",\"namespace\":\"default\",\"uid\":\"uid-%s\","
             "\"resourceVersion\":\"1\",\"creationTimestamp\":\"2027-01-15T07:00:00Z\"},"
             "\"spec\":{\"containers\":[{\"name\":\"launcher\"}]},\"status\":{\"phase\":\"%s\"%s%s%s}}",
             name, name, phase, finished ? ",\"containerStatuses\":[{\"name\":\"launcher\",\"state\":{\"terminated\":"
                                           "{\"exitCode\":0,\"finishedAt\":\""
                                         : "",
             finished ? finished : "", finished ? "\"}}}]" : "");
    cJSON *tree = cJSON_Parse(text);
    cr_assert_not_null(tree);
    struct kube_object *o = kube_object_new(tree, 1, NULL);
    cJSON_Delete(tree);
    return o;
}

#define ENDED_B 1795159200 /* 2026-11-20T07:20:00Z, when l-b ended */

static const char *source_at(struct kube_object **pods, size_t n, const char *status, const char *read_uid,
                             time_t now)
{
    cJSON *st = status ? cJSON_Parse(status) : NULL;
    struct plan_input in = {.status = st, .launcher_pods = pods, .n_launcher_pods = n, .now = now};
    const struct kube_object *o = plan_summary_source(&in, read_uid);
    cJSON_Delete(st);
    return o ? o->name : "(none)";
}

static const char *source(struct kube_object **pods, size_t n, const char *status, const char *read_uid)
{
    return source_at(pods, n, status, read_uid, ENDED_B + 60);
}

Test(summary, the_log_read_is_the_last_ended_launcher_pods_and_only_once)
{
    struct kube_object *pods[3] = {
        launcher_pod("l-a", "Failed", "2026-11-20T07:10:00Z"),
        launcher_pod("l-b", "Succeeded", "2026-11-20T07:20:00Z"),
        launcher_pod("l-c", "Running", NULL),
    };
    cr_expect_str_eq(source(pods + 2, 1, NULL, NULL), "(none)", "a running launcher is not read");
    cr_expect_str_eq(source(pods, 1, NULL, NULL), "l-a", "a failed launcher pod is read");
    cr_expect_str_eq(source(pods, 3, NULL, NULL), "l-b", "the one that ended last");
    cr_expect_str_eq(source(pods, 3, "{\"launcherSummary\":{\"pod\":\"l-b\"}}", NULL), "(none)",
                     "not again once status shows its summary");
    cr_expect_str_eq(source(pods, 3, "{\"launcherSummary\":{\"pod\":\"l-a\"}}", NULL), "l-b",
                     "a later run's summary replaces an earlier one's");
    cr_expect_str_eq(source(pods, 3, NULL, "uid-l-b"), "(none)", "not again once read without a summary");
    cr_expect_str_eq(source(pods, 3, NULL, "uid-l-a"), "l-b");
    cr_expect_str_eq(source_at(pods, 3, NULL, NULL, ENDED_B + LAUNCHER_LOG_MAX_AGE_S), "l-b", "an hour after");
    cr_expect_str_eq(source_at(pods, 3, NULL, NULL, ENDED_B + LAUNCHER_LOG_MAX_AGE_S + 1), "(none)",
                     "ended long before the operator saw it: not read");
    for (size_t i = 0; i < 3; i++)
        kube_object_unref(pods[i]);
}
