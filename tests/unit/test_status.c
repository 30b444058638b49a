#include <criterion/criterion.h>
#include <string.h>

#include "mpijob/status.h"
#include "util/json.h"

static const char *T1 = "2026-11-21T10:00:00Z", *T2 = "2026-11-21T10:05:00Z", *T3 = "2026-11-21T10:09:00Z";

static const char *last_type(const cJSON *status)
{
    const cJSON *list = cJSON_GetObjectItem(status, "conditions");
    return json_string(cJSON_GetArrayItem(list, cJSON_GetArraySize(list) - 1), "type");
}

Test(status, setting_the_same_condition_again_changes_nothing)
{
    cJSON *st = cJSON_CreateObject();
    cr_assert_eq(mpijob_status_set_condition(st, MPIJOB_COND_CREATED, true, "MPIJobCreated", "created", T1), 1);
    cr_assert_eq(mpijob_status_set_condition(st, MPIJOB_COND_CREATED, true, "MPIJobCreated", "created", T2), 0);
    const cJSON *c = mpijob_status_condition(st, MPIJOB_COND_CREATED);
    cr_assert_str_eq(json_string(c, "lastTransitionTime"), T1);
    cr_assert_str_eq(json_string(c, "lastUpdateTime"), T1);
    /* a new message updates lastUpdateTime only */
    cr_assert_eq(mpijob_status_set_condition(st, MPIJOB_COND_CREATED, true, "MPIJobCreated", "again", T2), 1);
    cr_assert_str_eq(json_string(c = mpijob_status_condition(st, MPIJOB_COND_CREATED), "lastTransitionTime"), T1);
    cr_assert_str_eq(json_string(c, "lastUpdateTime"), T2);
    cr_assert_str_eq(json_string(c, "message"), "again");
    cJSON_Delete(st);
}

Test(status, running_and_restarting_exclude_each_other_and_latest_goes_last)
{
    cJSON *st = cJSON_CreateObject();
    mpijob_status_set_condition(st, MPIJOB_COND_CREATED, true, "MPIJobCreated", "c", T1);
    mpijob_status_set_condition(st, MPIJOB_COND_RUNNING, true, "MPIJobRunning", "r", T1);
    cr_assert_str_eq(last_type(st), "Running");
    mpijob_status_set_condition(st, MPIJOB_COND_RESTARTING, true, "MPIJobRestarting", "worker 1 OOMKilled", T2);
    cr_assert_null(mpijob_status_condition(st, MPIJOB_COND_RUNNING));
    cr_assert_str_eq(last_type(st), "Restarting");
    mpijob_status_set_condition(st, MPIJOB_COND_RUNNING, true, "MPIJobRunning", "r", T3);
    cr_assert_null(mpijob_status_condition(st, MPIJOB_COND_RESTARTING));
    cr_assert_str_eq(last_type(st), "Running");
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(st, "conditions")), 2);
    cJSON_Delete(st);
}

Test(status, finishing_turns_running_false)
{
    cJSON *st = cJSON_CreateObject();
    mpijob_status_set_condition(st, MPIJOB_COND_RUNNING, true, "MPIJobRunning", "r", T1);
    cr_assert(!mpijob_status_finished(st));
    cr_assert_eq(mpijob_status_set_condition(st, MPIJOB_COND_SUCCEEDED, true, "MPIJobSucceeded", "done", T2), 1);
    cr_assert(mpijob_status_finished(st));
    cr_assert(!mpijob_status_is_true(st, MPIJOB_COND_RUNNING));
    cr_assert_str_eq(json_string(mpijob_status_condition(st, MPIJOB_COND_RUNNING), "lastTransitionTime"), T2);
    cr_assert_str_eq(last_type(st), "Succeeded");

    cJSON *st2 = cJSON_CreateObject();
    mpijob_status_set_condition(st2, MPIJOB_COND_FAILED, true, "InvalidSpec", "spec.slotsPerWorker: bad", T1);
    cr_assert(mpijob_status_finished(st2));
    cr_assert_null(mpijob_status_condition(st2, MPIJOB_COND_RUNNING));
    cJSON_Delete(st);
    cJSON_Delete(st2);
}

Test(status, suspend_flips_keep_transition_times_right)
{
    cJSON *st = cJSON_CreateObject();
    mpijob_status_set_condition(st, MPIJOB_COND_SUSPENDED, true, "MPIJobSuspended", "s", T1);
    mpijob_status_set_condition(st, MPIJOB_COND_SUSPENDED, false, "MPIJobResumed", "r", T2);
    const cJSON *c = mpijob_status_condition(st, MPIJOB_COND_SUSPENDED);
    cr_assert_str_eq(json_string(c, "status"), "False");
    cr_assert_str_eq(json_string(c, "reason"), "MPIJobResumed");
    cr_assert_str_eq(json_string(c, "lastTransitionTime"), T2);
    cJSON_Delete(st);
}

Test(status, replica_counts_omit_zeros_and_report_changes)
{
    cJSON *st = cJSON_CreateObject();
    struct replica_counts w = {.active = 2, .ready = 2};
    cr_assert_eq(mpijob_status_set_replicas(st, "Worker", &w), 1);
    cr_assert_eq(mpijob_status_set_replicas(st, "Worker", &w), 0);
    cr_assert_eq(json_int(st, "replicaStatuses.Worker.active", -1), 2);
    cr_assert_null(json_path(st, "replicaStatuses.Worker.failed"));
    w.failed = 1;
    w.active = 1;
    cr_assert_eq(mpijob_status_set_replicas(st, "Worker", &w), 1);
    cr_assert_eq(json_int(st, "replicaStatuses.Worker.failed", -1), 1);
    cJSON_Delete(st);
}

Test(status, equality_ignores_last_reconcile_time)
{
    cJSON *a = cJSON_Parse("{\"lastReconcileTime\":\"x\",\"startTime\":\"s\"}");
    cJSON *b = cJSON_Parse("{\"lastReconcileTime\":\"y\",\"startTime\":\"s\"}");
    cJSON *c = cJSON_Parse("{\"startTime\":\"t\"}");
    cr_assert(mpijob_status_equal(a, b));
    cr_assert(!mpijob_status_equal(a, c));
    cr_assert(mpijob_status_equal(NULL, cJSON_GetObjectItem(c, "nothing")));
    cJSON_Delete(a);
    cJSON_Delete(b);
    cJSON_Delete(c);
}

Test(status, pod_states_and_failures)
{
    cJSON *p = cJSON_Parse("{\"status\":{\"phase\":\"Running\",\"conditions\":[{\"type\":\"Ready\",\"status\":\"True\"}]}}");
    cr_assert_eq(pod_state_of(p), POD_RUNNING);
    cr_assert(pod_is_ready(p));
    cJSON_Delete(p);
    p = cJSON_Parse("{\"status\":{}}");
    cr_assert_eq(pod_state_of(p), POD_PENDING);
    cr_assert(!pod_is_ready(p));
    cJSON_Delete(p);

    char reason[64], message[256];
    p = cJSON_Parse("{\"status\":{\"phase\":\"Failed\",\"containerStatuses\":[{\"name\":\"worker\",\"state\":"
                    "{\"terminated\":{\"exitCode\":137,\"reason\":\"OOMKilled\"}}}]}}");
    cr_assert_eq(pod_state_of(p), POD_FAILED);
    cr_assert(!pod_failure(p, reason, sizeof(reason), message, sizeof(message)));
    cr_assert_str_eq(reason, "OOMKilled");
    cr_assert_str_eq(message, "container worker exited with code 137");
    cJSON_Delete(p);
    p = cJSON_Parse("{\"status\":{\"phase\":\"Failed\",\"reason\":\"Evicted\",\"message\":\"The node was low on "
                    "resource: memory.\"}}");
    cr_assert(pod_failure(p, reason, sizeof(reason), message, sizeof(message)));
    cr_assert_str_eq(reason, "Evicted");
    cr_assert_str_eq(message, "The node was low on resource: memory.");
    cJSON_Delete(p);
    p = cJSON_Parse("{\"status\":{\"phase\":\"Failed\",\"conditions\":[{\"type\":\"DisruptionTarget\",\"status\":"
                    "\"True\",\"reason\":\"TerminationByKubelet\"}]}}");
    cr_assert(pod_failure(p, reason, sizeof(reason), message, sizeof(message)), "DisruptionTarget counts as eviction");
    cJSON_Delete(p);
}

Test(status, launcher_job_states)
{
    char reason[64], message[256];
    cJSON *j = cJSON_Parse("{\"spec\":{},\"status\":{\"conditions\":[{\"type\":\"Complete\",\"status\":\"True\"}]}}");
    cr_assert_eq(job_state_of(j, reason, sizeof(reason), message, sizeof(message)), JOB_COMPLETE);
    cJSON_Delete(j);
    j = cJSON_Parse("{\"spec\":{},\"status\":{\"conditions\":[{\"type\":\"FailureTarget\",\"status\":\"True\"},"
                    "{\"type\":\"Failed\",\"status\":\"True\",\"reason\":\"BackoffLimitExceeded\","
                    "\"message\":\"Job has reached the specified backoff limit\"}]}}");
    cr_assert_eq(job_state_of(j, reason, sizeof(reason), message, sizeof(message)), JOB_FAILED);
    cr_assert_str_eq(reason, "BackoffLimitExceeded");
    cr_assert_str_eq(message, "Job has reached the specified backoff limit");
    cJSON_Delete(j);
    j = cJSON_Parse("{\"spec\":{\"suspend\":true},\"status\":{}}");
    cr_assert_eq(job_state_of(j, reason, sizeof(reason), message, sizeof(message)), JOB_SUSPENDED);
    cJSON_Delete(j);
    j = cJSON_Parse("{\"spec\":{},\"status\":{\"conditions\":[{\"type\":\"Failed\",\"status\":\"False\"}]}}");
    cr_assert_eq(job_state_of(j, reason, sizeof(reason), message, sizeof(message)), JOB_ACTIVE);
    cJSON_Delete(j);
}

Test(status, tidy_message_drops_frames_and_cuts_on_a_character)
{
    char out[64];
    status_tidy_message(out, sizeof(out), "first line  \n-----------\n\n   \nsecond\r\n=====\n");
    cr_assert_str_eq(out, "first line\nsecond");
    status_tidy_message(out, 8, "abcdefghij");
    cr_assert_str_eq(out, "abcdefg");
    /* "é" is two bytes: a cut that would split it leaves it out */
    status_tidy_message(out, 6, "abcd\xc3\xa9z");
    cr_assert_str_eq(out, "abcd");
    status_tidy_message(out, 9, "abc\ndefghijk");
    cr_assert_str_eq(out, "abc\ndefg");
    status_tidy_message(out, 5, "abcd\nef");
    cr_assert_str_eq(out, "abcd");
    status_tidy_message(out, sizeof(out), NULL);
    cr_assert_str_eq(out, "");
}

Test(status, pod_runs_of_a_restarting_launcher)
{
    struct pod_run run;
    cJSON *p = cJSON_Parse("{\"status\":{\"phase\":\"Running\",\"containerStatuses\":[{\"name\":\"l\",\"state\":"
                           "{\"waiting\":{\"reason\":\"CrashLoopBackOff\"}},\"lastState\":{\"terminated\":{\"exitCode\":2,"
                           "\"finishedAt\":\"2026-01-01T00:00:09Z\",\"message\":\"bad\\n---\\n\"}}}]}}");
    pod_run_of(p, &run);
    cr_assert(run.failed && !run.in_progress, "between two runs");
    cr_assert_str_eq(run.reason, "Error");
    cr_assert_str_eq(run.message, "container l exited with code 2: bad");
    cr_assert_str_eq(run.finished_at, "2026-01-01T00:00:09Z");
    cJSON_Delete(p);

    p = cJSON_Parse("{\"status\":{\"phase\":\"Running\",\"containerStatuses\":[{\"name\":\"l\",\"state\":"
                    "{\"running\":{}},\"lastState\":{\"terminated\":{\"exitCode\":2}}}]}}");
    pod_run_of(p, &run);
    cr_assert(run.failed && run.in_progress, "the retry runs");
    cJSON_Delete(p);

    p = cJSON_Parse("{\"metadata\":{\"creationTimestamp\":\"2026-01-01T00:00:00Z\"},\"status\":{\"phase\":"
                    "\"Failed\",\"reason\":\"Evicted\",\"message\":\"low on memory\"}}");
    pod_run_of(p, &run);
    cr_assert(run.failed && !run.in_progress);
    cr_assert_str_eq(run.reason, "Evicted");
    cr_assert_str_eq(run.finished_at, "2026-01-01T00:00:00Z", "no finishedAt: the pod's creation orders it");
    cJSON_Delete(p);

    p = cJSON_Parse("{\"status\":{\"phase\":\"Pending\"}}");
    pod_run_of(p, &run);
    cr_assert(!run.failed && run.in_progress);
    cJSON_Delete(p);
    p = cJSON_Parse("{\"status\":{\"phase\":\"Succeeded\",\"containerStatuses\":[{\"name\":\"l\",\"state\":"
                    "{\"terminated\":{\"exitCode\":0}}}]}}");
    pod_run_of(p, &run);
    cr_assert(!run.failed && !run.in_progress);
    cJSON_Delete(p);
}

/* A launcher pod being deleted (`deletion`: its metadata's members) in `phase`, its container's
 * current run `state` and, unless NULL, the run before it: pod_run_of must quote `want`, or find
 * no failure when want is NULL. */
#define ASKED_DELETION "\"deletionTimestamp\":\"2026-01-01T00:00:40Z\",\"deletionGracePeriodSeconds\":30"
#define CONFIRMED_DELETION "\"deletionTimestamp\":\"2026-01-01T00:00:12Z\",\"deletionGracePeriodSeconds\":0"
static void expect_run_of_deleted_pod(const char *deletion, const char *phase, const char *state, const char *last_state,
                                      const char *want)
{
    char text[1024];
    snprintf(text, sizeof(text),
             "{\"metadata\":{%s},\"status\":{\"phase\":\"%s\",\"containerStatuses\":[{\"name\":\"l\","
             "\"state\":{\"terminated\":%s}%s%s%s}]}}",
             deletion, phase, state, last_state ? ",\"lastState\":{\"terminated\":" : "", last_state ? last_state : "",
             last_state ? "}" : "");
    cJSON *p = cJSON_Parse(text);
    cr_assert_not_null(p, "%s", text);
    struct pod_run run;
    pod_run_of(p, &run);
    cr_assert_eq(run.failed, want != NULL, "%s", text);
    if (want)
        cr_assert_str_eq(run.message, want);
    cJSON_Delete(p);
}

/* A Job out of retries has its pod deleted; the kubelet had just started the container again
 * (restartPolicy OnFailure), and that run, stopped by the deletion, ended in a crash dump. The
 * run before it says why the job failed. */
Test(status, a_run_stopped_by_the_pods_deletion_is_not_the_failure)
{
    struct pod_run run;
    cJSON *p = cJSON_Parse(
        "{\"metadata\":{\"deletionTimestamp\":\"2026-01-01T00:00:40Z\",\"deletionGracePeriodSeconds\":30},"
        "\"status\":{\"phase\":\"Running\",\"containerStatuses\":[{\"name\":\"l\","
        "\"state\":{\"terminated\":{\"exitCode\":139,\"finishedAt\":\"2026-01-01T00:00:11Z\",\"message\":\"Segmentation fault\"}},"
        "\"lastState\":{\"terminated\":{\"exitCode\":1,\"finishedAt\":\"2026-01-01T00:00:09Z\",\"message\":\"no usable device\"}}}]}}");
    pod_run_of(p, &run);
    cr_assert(run.failed);
    cr_assert_str_eq(run.message, "container l exited with code 1: no usable device");
    cr_assert_str_eq(run.finished_at, "2026-01-01T00:00:09Z");
    char reason[64], message[256];
    pod_failure(p, reason, sizeof(reason), message, sizeof(message));
    cr_assert_str_eq(message, "container l exited with code 1: no usable device");
    cJSON_Delete(p);

    /* a run that failed before the deletion was asked for is the failure */
    expect_run_of_deleted_pod(ASKED_DELETION, "Failed",
                              "{\"exitCode\":3,\"finishedAt\":\"2026-01-01T00:00:05Z\",\"message\":\"own words\"}", NULL,
                              "container l exited with code 3: own words");

    /* Once the kubelet confirms the deletion, deletionTimestamp is the moment the pod goes (grace
     * 0), after the stopped run ended (as seen on 1.36.3): a run that ended by a signal while the
     * pod is deleted was stopped by it. */
    expect_run_of_deleted_pod(CONFIRMED_DELETION, "Failed",
                              "{\"exitCode\":139,\"finishedAt\":\"2026-01-01T00:00:11Z\",\"message\":\"Segmentation fault\"}",
                              "{\"exitCode\":1,\"finishedAt\":\"2026-01-01T00:00:09Z\",\"message\":\"no usable device\"}",
                              "container l exited with code 1: no usable device");
    /* ... and a run after a failed one: mpirun stopped by SIGTERM exits 1, so the exit code does
     * not tell; the failed run before it does */
    expect_run_of_deleted_pod(CONFIRMED_DELETION, "Failed", "{\"exitCode\":1,\"finishedAt\":\"2026-01-01T00:00:11Z\"}",
                              "{\"exitCode\":255,\"finishedAt\":\"2026-01-01T00:00:09Z\","
                              "\"message\":\"ORTE was unable to reliably start one or more daemons.\"}",
                              "container l exited with code 255: ORTE was unable to reliably start one or more daemons.");
    /* the only run was stopped by the deletion: no failure of the job's own */
    expect_run_of_deleted_pod(ASKED_DELETION, "Running", "{\"exitCode\":143,\"finishedAt\":\"2026-01-01T00:00:12Z\"}", NULL,
                              NULL);
}
