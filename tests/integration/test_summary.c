/* The launcher's training summary on the MPIJob (SPEC.md section 3, status.launcherSummary),
 * against the API-server double, a real kube-apiserver, or a real control plane (its Job
 * controller and scheduler; KUBEBUILDER_ASSETS): when a launcher pod ends, the operator reads the
 * end of its log once through pods/log, which the server fetches from the pod's node's kubelet.
 * Here that kubelet serves logs only (support/kubelet_logs.h); the test plays the rest of it
 * (pod status) and, without a Job controller, the Job controller too.
 *
 * Six jobs at once: a summary (TCP asked, Socket used), a mismatch (RDMA asked, Socket used), a
 * log without a summary, a broken summary line, a 10 MB log whose last line is the summary, and
 * (without a scheduler, which could put any pod there) a launcher pod on a node whose kubelet is
 * gone, whose log cannot be read. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kube/client.h"
#include "mpijob/builders.h"
#include "mpijob/summary.h"
#include "support/apiserver.h"
#include "support/controller_env.h"
#include "support/deadline.h"
#include "support/kube_test.h"
#include "support/kube_wait.h"
#include "support/kubelet_logs.h"
#include "support/launcher_pod.h"
#include "util/json.h"

#define WAIT_MS 90000
#define NODE "summary-node"

static struct test_controller_env env;
static struct test_kubelet kubelet;

static void setup(void)
{
    test_controller_env_start_control_plane(&env);
    cr_assert_eq(test_kubelet_start(&kubelet, &env.srv, NODE), 0, "the kubelet's log server did not start");
}

static void teardown(void)
{
    test_kubelet_stop(&kubelet, &env.srv);
    test_controller_env_stop(&env);
}

TestSuite(launcher_summary, .init = setup, .fini = teardown, .timeout = 300);

/* mpijob-worker train's lines as mpirun passes them to the launcher's log. */
#define START_LINE                                                                                                  \
    "{\"event\":\"start\",\"ranks\":2,\"backend\":\"mpi\",\"device\":\"cpu\",\"placement\":{\"hosts\":{"            \
    "\"j-worker-0\":[0],\"j-worker-1\":[1]}},\"model\":{\"input\":64,\"hidden\":256,\"layers\":4,\"output\":10}}\n"
#define SUMMARY_LINE(transport)                                                                                     \
    "{\"event\":\"summary\",\"ranks\":2,\"backend\":\"mpi\",\"device\":\"cpu\",\"transport\":\"" transport "\","    \
    "\"loss_first\":2.31,\"loss_last\":0.42,\"weights_identical\":true,\"samples_per_sec\":20480.33,"               \
    "\"step_ms\":12.5,\"exposed_comm_ms\":0.75,\"compute_ms\":11.75,\"steps\":100,\"global_batch\":256,"            \
    "\"parameters\":215306,\"allreduce_bytes\":861224,\"buckets\":1,\"overlap\":true}\n"

struct job_case {
    const char *name;
    const char *spec;   /* extra spec fields (test_mpijob) */
    const char *node;   /* the launcher pod's node */
};

static const struct job_case jobs[] = {
    {"sum", "\"networking\":{\"transport\":\"TCP\"},", NODE},
    {"mis", "\"networking\":{\"transport\":\"RDMA\"},", NODE},
    {"none", NULL, NODE},
    {"broken", NULL, NODE},
    {"big", NULL, NODE},
    {"gone", NULL, "gone-node"},
    {"late", "\"networking\":{\"transport\":\"TCP\"},", NODE}, /* its node answers the first read empty */
    {"silent", NULL, NODE},                                       /* a launcher that printed nothing */
};
#define LATE 6
#define SILENT 7
#define N_JOBS (sizeof(jobs) / sizeof(jobs[0]))

/* The log of each job's launcher. */
static char *log_of(const char *job, size_t *len)
{
    char *text = NULL;
    if (strcmp(job, "sum") == 0 || strcmp(job, "mis") == 0) {
        text = strdup("+ mpirun -np 2 mpijob-worker train\n" START_LINE SUMMARY_LINE("Socket"));
    } else if (strcmp(job, "none") == 0) {
        text = strdup("+ mpirun -np 2 python3 train.py\nepoch 1: loss 0.52\nepoch 2: loss 0.31\n");
    } else if (strcmp(job, "broken") == 0) {
        text = strdup(START_LINE "{\"event\":\"summary\",\"ranks\":2,\"transport\":\"IB\",\"samples_per_sec\":12\n"
                                 "mpirun: process rank 0 exited on signal 9 (Killed)\n");
    } else if (strcmp(job, "big") == 0) {
        /* 10 MB of progress lines, then the summary: only the end is asked for and sent */
        size_t body = 10u << 20, tail = strlen(SUMMARY_LINE("mpi"));
        text = malloc(body + tail + 1);
        cr_assert_not_null(text);
        for (size_t i = 0; i < body; i++)
            text[i] = i % 100 == 99 ? '\n' : (char)('a' + i % 26);
        memcpy(text + body, SUMMARY_LINE("mpi"), tail + 1);
    } else if (strcmp(job, "silent") == 0) {
        text = strdup("");
    } else {
        text = strdup(START_LINE SUMMARY_LINE("Socket"));
    }
    cr_assert_not_null(text);
    *len = strlen(text);
    return text;
}

static void launcher_name(const char *job, char *out, size_t len) { snprintf(out, len, "%s-launcher", job); }

/* Without a Job controller: the launcher pod it would make, owned by the launcher Job. */
static void create_launcher_pod(const struct job_case *c, char *pod, size_t pod_len)
{
    test_launcher_pod_create(env.admin, "default", c->name, c->node, pod, pod_len);
}

/* With a Job controller: the launcher pod it made (and the scheduler bound). */
static bool find_launcher_pod(const char *job, char *pod, size_t pod_len)
{
    char selector[128];
    snprintf(selector, sizeof(selector), "batch.kubernetes.io/job-name=%s-launcher", job);
    struct kube_list_opts lo = {.label_selector = selector};
    struct test_deadline d = test_deadline_in(WAIT_MS);
    while (test_deadline_poll(&d)) {
        cJSON *items = NULL;
        if (kube_list_all(env.admin, &KUBE_PODS, "default", &lo, &items, NULL, NULL) == 0) {
            const cJSON *p = cJSON_GetArrayItem(items, 0);
            const char *name = json_string(p, "metadata.name"), *node = json_string(p, "spec.nodeName");
            if (name && node && *node) {
                snprintf(pod, pod_len, "%s", name);
                cJSON_Delete(items);
                return true;
            }
        }
        cJSON_Delete(items);
    }
    test_wait_failed("the launcher pod of the Job controller, bound to a node", &d, selector);
    return false;
}

/* Plays the kubelet: the launcher container ran and exited 0. */
static void set_pod_succeeded(const char *pod) { test_pod_succeeded(env.admin, "default", pod); }

static int events_of(const char *job, const char *reason)
{
    char selector[256];
    snprintf(selector, sizeof(selector), "involvedObject.kind=MPIJob,involvedObject.name=%s,reason=%s", job, reason);
    return test_kube_count_events(env.admin, "default", selector);
}

static bool wait_events(const char *job, const char *reason, int want)
{
    struct test_deadline d = test_deadline_in(WAIT_MS);
    int n = -1;
    while (test_deadline_poll(&d))
        if ((n = events_of(job, reason)) == want)
            return true;
    char last[128];
    snprintf(last, sizeof(last), "%d events %s on MPIJob %s", n, reason, job);
    test_wait_failed(reason, &d, last);
    return false;
}

/* The log reads of pod, as the double's request log has them: "query code" per line. */
static int log_reads(const char *pod, char *queries, size_t len)
{
    cJSON *log = test_apiserver_log(&env.srv, 0);
    int n = 0;
    size_t used = 0;
    queries[0] = '\0';
    const cJSON *e;
    cJSON_ArrayForEach(e, log) {
        const char *sub = json_string(e, "subresource"), *name = json_string(e, "name");
        if (!sub || strcmp(sub, "log") != 0 || !name || strcmp(name, pod) != 0)
            continue;
        n++;
        int w = snprintf(queries + used, len - used, "%s %lld\n", json_string(e, "query") ? json_string(e, "query") : "",
                         json_int(e, "code", 0));
        if (w > 0 && (size_t)w < len - used)
            used += (size_t)w;
    }
    cJSON_Delete(log);
    return n;
}

Test(launcher_summary, a_launchers_summary_none_a_broken_line_a_10_mb_log_and_an_unreadable_one)
{
    bool jobs_run = env.srv.control_plane; /* a real Job controller and scheduler make the launcher pods */
    if (!jobs_run)
        cr_assert_eq(test_kubelet_gone_node(&env.srv, "gone-node"), 0);
    test_controller_env_run(&env, 2, NULL);
    char pods[N_JOBS][96];
    for (size_t i = 0; i < N_JOBS; i++) {
        if (jobs_run && strcmp(jobs[i].node, NODE) != 0)
            continue; /* a scheduler could put any pod on the gone node */
        cJSON *job = test_mpijob(jobs[i].name, jobs[i].spec);
        cr_assert_eq(kube_create(env.admin, &MPIJOB_RESOURCE_V2BETA1, "default", job, NULL, NULL), 0);
        cJSON_Delete(job);
    }
    for (size_t i = 0; i < N_JOBS; i++) {
        if (jobs_run && strcmp(jobs[i].node, NODE) != 0)
            continue;
        char lname[64];
        launcher_name(jobs[i].name, lname, sizeof(lname));
        cr_assert(test_kube_wait_exists(env.admin, &KUBE_JOBS, "default", lname, WAIT_MS), "launcher Job %s", lname);
        if (jobs_run)
            cr_assert(find_launcher_pod(jobs[i].name, pods[i], sizeof(pods[i])));
        else
            create_launcher_pod(&jobs[i], pods[i], sizeof(pods[i]));
        size_t len = 0;
        char *text = log_of(jobs[i].name, &len);
        cr_assert_eq(test_kubelet_write_log(&kubelet, "default", pods[i], "launcher", text, len), 0);
        free(text);
        if (i == LATE)
            cr_assert_eq(test_kubelet_hold_log(&kubelet, "default", pods[i], "launcher", 1), 0);
        set_pod_succeeded(pods[i]);
        if (!jobs_run)
            test_finish_job(env.admin, "default", lname, "Complete", "");
    }
    for (size_t i = 0; i < N_JOBS; i++)
        if (!jobs_run || strcmp(jobs[i].node, NODE) == 0)
            cr_assert(test_kube_wait_condition(env.admin, &MPIJOB_RESOURCE_V2BETA1, "default", jobs[i].name,
                                               "Succeeded", NULL, "MPIJobSucceeded", WAIT_MS),
                      "job %s", jobs[i].name);

    /* A summary: what it says, on the job (the USED column reads transport). */
    cr_assert(test_kube_wait_string(env.admin, &MPIJOB_RESOURCE_V2BETA1, "default", "sum",
                                    "status.launcherSummary.transport", "Socket", WAIT_MS));
    cJSON *sum = test_kube_get(env.admin, &MPIJOB_RESOURCE_V2BETA1, "default", "sum");
    char *got = cJSON_PrintUnformatted(json_path(sum, "status.launcherSummary"));
    char want[512];
    snprintf(want, sizeof(want),
             "{\"backend\":\"mpi\",\"device\":\"cpu\",\"exposedCommunicationMs\":0.75,\"pod\":\"%s\",\"ranks\":2,"
             "\"samplesPerSecond\":20480.3,\"stepMs\":12.5,\"transport\":\"Socket\",\"weightsIdentical\":true}",
             pods[0]);
    /* the server gives the fields back in its own order: compare as objects */
    cJSON *want_obj = cJSON_Parse(want);
    cr_expect(cJSON_Compare(json_path(sum, "status.launcherSummary"), want_obj, true), "launcherSummary %s, want %s",
              got, want);
    cJSON_Delete(want_obj);
    free(got);
    cr_expect_not(test_kube_has_condition(sum, "TransportMismatch", NULL, NULL), "TCP asked, Socket used: no mismatch");
    cr_expect_str_eq(json_string(sum, "status.state"), "Succeeded");
    cJSON_Delete(sum);
    cr_assert(wait_events("sum", "TrainingSummary", 1));

    /* RDMA asked, Socket used: a condition and a Warning, quoting both; STATE stays Succeeded. */
    cr_assert(test_kube_wait_condition(env.admin, &MPIJOB_RESOURCE_V2BETA1, "default", "mis", "TransportMismatch",
                                       "True", "TransportMismatch", WAIT_MS));
    cJSON *mis = test_kube_get(env.admin, &MPIJOB_RESOURCE_V2BETA1, "default", "mis");
    const cJSON *c;
    const char *message = NULL;
    cJSON_ArrayForEach(c, json_path(mis, "status.conditions"))
        if (strcmp(json_string(c, "type"), "TransportMismatch") == 0)
            message = json_string(c, "message");
    cr_expect(message && strstr(message, "asks for RDMA") && strstr(message, "reports transport Socket"),
              "the condition quotes both: %s", message ? message : "(none)");
    cr_expect_str_eq(json_string(mis, "status.state"), "Succeeded");
    cr_expect_str_eq(json_string(mis, "status.launcherSummary.transport"), "Socket");
    cJSON_Delete(mis);
    cr_assert(wait_events("mis", "TransportMismatch", 1));

    /* A log its node answered empty at first (the runtime had not yet written the launcher's
     * output): read again, and its summary found. */
    cr_assert(test_kube_wait_string(env.admin, &MPIJOB_RESOURCE_V2BETA1, "default", "late",
                                    "status.launcherSummary.transport", "Socket", WAIT_MS));
    cr_assert(wait_events("late", "TrainingSummary", 1));

    /* A launcher that printed nothing: read LAUNCHER_LOG_EMPTY_READS times, then left; nothing said. */
    if (env.srv.is_double) {
        char queries[1024];
        struct test_deadline d = test_deadline_in(WAIT_MS);
        while (log_reads(pods[SILENT], queries, sizeof(queries)) < LAUNCHER_LOG_EMPTY_READS && test_deadline_poll(&d))
            ;
        cr_assert_eq(log_reads(pods[SILENT], queries, sizeof(queries)), LAUNCHER_LOG_EMPTY_READS,
                     "the empty log of %s read:\n%s", pods[SILENT], queries);
        /* the time of one more read again: none comes (a wait that can only miss a bug, never
         * fail a good run) */
        sleep((LAUNCHER_LOG_EMPTY_RETRY_MS * LAUNCHER_LOG_EMPTY_READS + 1000) / 1000);
        int n = log_reads(pods[SILENT], queries, sizeof(queries));
        cr_expect_eq(n, LAUNCHER_LOG_EMPTY_READS, "the empty log of %s read %d times:\n%s", pods[SILENT], n, queries);
    }
    cr_expect_eq(events_of("silent", "LauncherSummaryUnreadable") + events_of("silent", "LauncherLogUnreadable") +
                     events_of("silent", "TrainingSummary"),
                 0, "an empty log says nothing");

    /* A 10 MB log: the summary at its end is found, and only the end was sent. */
    cr_assert(test_kube_wait_string(env.admin, &MPIJOB_RESOURCE_V2BETA1, "default", "big",
                                    "status.launcherSummary.transport", "mpi", WAIT_MS));

    /* A broken line: one Normal event, no summary. */
    cr_assert(wait_events("broken", "LauncherSummaryUnreadable", 1));
    cJSON *broken = test_kube_get(env.admin, &MPIJOB_RESOURCE_V2BETA1, "default", "broken");
    cr_expect_null(json_path(broken, "status.launcherSummary"), "a broken line leaves the status as it is");
    cJSON_Delete(broken);

    /* An unreadable log (its node's kubelet is gone): one Normal event, no summary. */
    if (!jobs_run) {
        cr_assert(wait_events("gone", "LauncherLogUnreadable", 1));
        cJSON *gone = test_kube_get(env.admin, &MPIJOB_RESOURCE_V2BETA1, "default", "gone");
        cr_expect_null(json_path(gone, "status.launcherSummary"));
        cJSON_Delete(gone);
    }

    /* No summary: nothing on the job, and nothing said. (On a real server, with no request log
     * to wait on, this holds trivially should the read come later; the double shows the read.) */
    if (env.srv.is_double) {
        char queries[1024];
        struct test_deadline d = test_deadline_in(WAIT_MS);
        while (log_reads(pods[2], queries, sizeof(queries)) == 0 && test_deadline_poll(&d))
            ;
        cr_assert_neq(log_reads(pods[2], queries, sizeof(queries)), 0, "the log of %s was never read", pods[2]);
    }
    cJSON *none = test_kube_get(env.admin, &MPIJOB_RESOURCE_V2BETA1, "default", "none");
    cr_expect_null(json_path(none, "status.launcherSummary"));
    cJSON_Delete(none);
    cr_expect_eq(events_of("none", "LauncherSummaryUnreadable") + events_of("none", "LauncherLogUnreadable") +
                     events_of("none", "TrainingSummary"),
                 0, "a log without a summary says nothing");

    /* Each log was read once, bounded; the 10 MB one too (the empty ones: more, as above). */
    if (env.srv.is_double) {
        for (size_t i = 0; i < N_JOBS; i++) {
            char queries[1024];
            int n = log_reads(pods[i], queries, sizeof(queries));
            if (i == SILENT)
                n = n > 0;
            else if (i == LATE)
                n = n == 2 ? 1 : -n; /* the empty answer, then the one with the summary */
            cr_expect_eq(n, 1, "the log of %s read %d times:\n%s", pods[i], n, queries);
            cr_expect(strstr(queries, "container=launcher&tailLines=200&limitBytes=65536 ") == queries,
                      "read of %s: %s", pods[i], queries);
        }
    }
}
