/* The MPIJob controller against the API-server double: the ordered requests of a job's
 * creation, status transitions driven by pod and Job status, and the jobs it must leave alone.
 * The tests play the roles of the kubelet and the Job controller by writing status. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kube/client.h"
#include "kube/config.h"
#include "mpijob/builders.h"
#include "mpijob/controller.h"
#include "mpijob/status.h"
#include "support/apiserver.h"
#include "support/controller_env.h"
#include "support/deadline.h"
#include "support/kube_test.h"
#include "support/kube_wait.h"
#include "support/launcher_pod.h"
#include "support/manual_clock.h"
#include "support/request_log.h"
#include "util/clock.h"
#include "util/json.h"

static struct test_controller_env env;

/* How long a wait on the controller may take: generous, for a busy machine (scaled). */
#define WAIT_MS 60000

#define REQUIRE_DOUBLE() TEST_REQUIRE_DOUBLE(&env.srv, "request log")

static void setup(void) { test_controller_env_start(&env); }
static void teardown(void) { test_controller_env_stop(&env); }

static void start_controller(void) { test_controller_env_run(&env, 2, NULL); }

static void create_job(const char *name, const char *extra_spec)
{
    cJSON *job = test_mpijob(name, extra_spec);
    cr_assert_eq(kube_create(env.admin, &MPIJOB_RESOURCE_V2BETA1, "default", job, NULL, NULL), 0);
    cJSON_Delete(job);
}

static cJSON *get_job(const char *name) { return test_kube_get(env.admin, &MPIJOB_RESOURCE_V2BETA1, "default", name); }

static bool condition_true(const char *job_name, const char *type, const char *reason)
{
    cJSON *job = get_job(job_name);
    bool found = test_kube_has_condition(job, type, NULL, reason);
    cJSON_Delete(job);
    return found;
}

static bool wait_condition(const char *job_name, const char *type, const char *reason)
{
    return test_kube_wait_condition(env.admin, &MPIJOB_RESOURCE_V2BETA1, "default", job_name, type, NULL, reason,
                                    WAIT_MS);
}

static bool exists(const struct kube_resource *res, const char *name)
{
    return test_kube_exists(env.admin, res, "default", name);
}

static bool wait_exists(const struct kube_resource *res, const char *name)
{
    return test_kube_wait_exists(env.admin, res, "default", name, WAIT_MS);
}

static bool wait_gone(const struct kube_resource *res, const char *name)
{
    return test_kube_wait_gone(env.admin, res, "default", name, WAIT_MS);
}

/* The writes (create/update/patch/delete) of the log, as "verb resource/name". */
static char *writes(void)
{
    cJSON *log = test_apiserver_log(&env.srv, 0);
    static char out[8192];
    out[0] = 0;
    cJSON *e;
    cJSON_ArrayForEach(e, log) {
        const char *verb = json_string(e, "verb"), *res = json_string(e, "resource");
        if (!verb || strcmp(verb, "get") == 0 || strcmp(verb, "list") == 0 || strcmp(verb, "watch") == 0)
            continue;
        if (strcmp(res, "events") == 0)
            continue;
        const char *sub = json_string(e, "subresource"), *name = json_string(e, "name");
        long long code = json_int(e, "code", 0);
        char line[256];
        /* creates carry the name in the body */
        if (!name || !*name)
            name = json_string(e, "body.metadata.name");
        snprintf(line, sizeof(line), "%s %s%s%s/%s %lld\n", verb, res, sub && *sub ? "/" : "", sub ? sub : "",
                 name ? name : "?", code);
        strncat(out, line, sizeof(out) - strlen(out) - 1);
    }
    cJSON_Delete(log);
    return out;
}

/* Plays the kubelet: sets a pod Running (and Ready). */
static void set_pod_running(const char *name)
{
    struct kube_patch_opts po = {.type = KUBE_PATCH_MERGE, .subresource = "status"};
    cr_assert_eq(kube_patch(env.admin, &KUBE_PODS, "default", name,
                            "{\"status\":{\"phase\":\"Running\",\"conditions\":[{\"type\":\"Ready\",\"status\":\"True\"}]}}",
                            &po, NULL, NULL), 0, "pod %s", name);
}

/* Plays the Job controller: a launcher pod owned by the launcher Job, Running. */
static void start_launcher_pod(const char *job_name)
{
    char pname[160];
    test_launcher_pod_create(env.admin, "default", job_name, NULL, pname, sizeof(pname));
    set_pod_running(pname);
}

static void set_launcher_job_condition(const char *job_name, const char *type, const char *reason)
{
    char lname[128];
    snprintf(lname, sizeof(lname), "%s-launcher", job_name);
    test_finish_job(env.admin, "default", lname, type, reason);
}

TestSuite(controller, .init = setup, .fini = teardown, .timeout = 240);

/* Starts the controller, creates the job, and waits until its launcher Job exists and it is
 * Created (the status is written before the objects are made, the launcher last). */
static void start_created(const char *name)
{
    char launcher[96];
    snprintf(launcher, sizeof(launcher), "%s-launcher", name);
    start_controller();
    create_job(name, NULL);
    cr_assert(wait_exists(&KUBE_JOBS, launcher), "launcher Job created");
    cr_assert(wait_condition(name, "Created", "MPIJobCreated"));
}

/* The ConfigMap's data[key] contains every one of the NULL-terminated texts in `has` and none
 * of those in `lacks` (either may be NULL). */
struct config_data {
    const char *key;
    const char *const *has, *const *lacks;
};

static bool config_data_check(const cJSON *cm, const void *arg)
{
    const struct config_data *w = arg;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(cm, "data"), w->key);
    if (!cJSON_IsString(v))
        return false;
    for (const char *const *t = w->has; t && *t; t++)
        if (!strstr(v->valuestring, *t))
            return false;
    for (const char *const *t = w->lacks; t && *t; t++)
        if (strstr(v->valuestring, *t))
            return false;
    return true;
}

static bool wait_config_data(const char *configmap, const struct config_data *w)
{
    return test_kube_wait(env.admin, &KUBE_CONFIGMAPS, "default", configmap, w->key, config_data_check, w, WAIT_MS);
}

static void check_creation_order(void)
{
    char *w = writes();
    /* The status that says Created is written before the objects are made (plan.h); the
     * Service, ConfigMap, Secret and workers have no order among them and are created
     * concurrently; the launcher comes last. */
    const char *first = "create mpijobs/pi 201\nupdate mpijobs/status/pi 200\n";
    cr_assert_eq(strncmp(w, first, strlen(first)), 0, "request log:\n%s", w);
    const char *launcher = strstr(w, "create jobs/pi-launcher 201\n");
    cr_assert_not_null(launcher, "request log:\n%s", w);
    static const char *const before[] = {"create services/pi 201\n", "create configmaps/pi-config 201\n",
                                         "create secrets/pi-ssh 201\n", "create pods/pi-worker-0 201\n",
                                         "create pods/pi-worker-1 201\n"};
    for (size_t i = 0; i < sizeof(before) / sizeof(before[0]); i++) {
        const char *at = strstr(w, before[i]);
        cr_assert(at && at < launcher, "%s before the launcher; request log:\n%s", before[i], w);
    }
    size_t n = 0;
    for (const char *p = w; (p = strstr(p, "\ncreate ")) != NULL; p++)
        n++;
    cr_assert_eq(n, 6, "each object created once; request log:\n%s", w);
}

Test(controller, creates_every_object_in_order_then_follows_the_job_to_success)
{
    start_created("pi");
    /* The order of the creates, which the double's request log shows. */
    if (env.srv.is_double)
        check_creation_order();

    /* Every object is controlled by the job and labelled. */
    cJSON *pod = NULL;
    cr_assert_eq(kube_get(env.admin, &KUBE_PODS, "default", "pi-worker-1", &pod, NULL), 0);
    cr_assert_str_eq(json_string(cJSON_GetArrayItem(json_path(pod, "metadata.ownerReferences"), 0), "kind"), "MPIJob");
    cr_assert_str_eq(cJSON_GetObjectItem(json_path(pod, "metadata.labels"), "training.kubeflow.org/job-role")->valuestring,
                     "worker");
    cJSON_Delete(pod);

    set_pod_running("pi-worker-0");
    set_pod_running("pi-worker-1");
    start_launcher_pod("pi");
    cr_assert(wait_condition("pi", "Running", "MPIJobRunning"), "Running when launcher and workers run");
    /* discover_hosts.sh follows the Running workers (Horovod elastic). */
    static const char *const both[] = {"echo pi-worker-0.pi.default.svc\n", "echo pi-worker-1.pi.default.svc\n", NULL};
    struct config_data listed = {.key = "discover_hosts.sh", .has = both};
    cr_assert(wait_config_data("pi-config", &listed), "discover_hosts.sh lists both Running workers");

    set_launcher_job_condition("pi", "Complete", "");
    cr_assert(wait_condition("pi", "Succeeded", "MPIJobSucceeded"));
    cJSON *job = get_job("pi");
    cr_assert_not_null(json_string(job, "status.completionTime"));
    cr_assert_str_eq(json_string(job, "status.state"), "Succeeded", "the STATE column");
    cr_assert_not_null(json_string(job, "status.workers"), "the WORKERS column");
    cr_assert_str_eq(json_string(cJSON_GetArrayItem(json_path(job, "status.conditions"),
                                                    cJSON_GetArraySize(json_path(job, "status.conditions")) - 1), "type"),
                     "Succeeded", "the latest condition is last");
    cJSON_Delete(job);
    /* cleanPodPolicy Running (the default): the Running workers are deleted */
    cr_assert(wait_gone(&KUBE_PODS, "pi-worker-0") && wait_gone(&KUBE_PODS, "pi-worker-1"));
}

/* replicaStatuses.*.active counts pods in phase Running, as the reference operator does: created
 * but Pending workers and launcher are not active yet. */
static bool wait_active(const char *job_name, const char *role, long long want)
{
    char path[64];
    snprintf(path, sizeof(path), "status.replicaStatuses.%s.active", role);
    return test_kube_wait_int(env.admin, &MPIJOB_RESOURCE_V2BETA1, "default", job_name, path, want, WAIT_MS);
}

static bool reports_held(void *ctx)
{
    const uint64_t *want = ctx;
    return controller_pod_reports_held(env.ctl) >= *want;
}

/* How many requests since `since` wrote the resource/subresource `what` ("configmaps",
 * "mpijobs/status") of the object `name`. */
static int writes_of(int since, const char *resource, const char *subresource, const char *name)
{
    cJSON *log = test_apiserver_log(&env.srv, since);
    int n = 0;
    cJSON *e;
    cJSON_ArrayForEach(e, log) {
        const char *verb = json_string(e, "verb"), *res = json_string(e, "resource");
        const char *sub = json_string(e, "subresource"), *obj = json_string(e, "name");
        if (verb && (strcmp(verb, "update") == 0 || strcmp(verb, "patch") == 0) && res && strcmp(res, resource) == 0 &&
            strcmp(sub ? sub : "", subresource) == 0 && obj && strcmp(obj, name) == 0)
            n++;
    }
    cJSON_Delete(log);
    return n;
}

/* Eight workers turning Running and Ready, as kubelets report them within moments of each other:
 * the reconcile each report asks for is held for a moment (on the work queue's clock, which the
 * test moves), so that the whole burst makes one hostfile write and one status write, not one
 * of each per worker. */
Test(controller, a_burst_of_running_workers_makes_one_hostfile_write_and_one_status_write)
{
    REQUIRE_DOUBLE();
    /* static: the controller, stopped by the fixture after this function returns, reads it
     * until then (its timer thread sleeps on it) */
    static struct manual_clock clk;
    manual_clock_init(&clk);
    struct controller_config cfg = {.client = env.operator_client, .threads = 2, .events = env.recorder,
                                    .clock = &clk.source};
    cr_assert_eq(controller_start(&cfg, &env.ctl), 0);
    cJSON *job = test_mpijob("burst", NULL);
    cJSON_SetNumberValue(json_path(job, "spec.mpiReplicaSpecs.Worker.replicas"), 8);
    cr_assert_eq(kube_create(env.admin, &MPIJOB_RESOURCE_V2BETA1, "default", job, NULL, NULL), 0);
    cJSON_Delete(job);
    cr_assert(wait_exists(&KUBE_JOBS, "burst-launcher"));
    for (int i = 0; i < 8; i++) {
        char name[32];
        snprintf(name, sizeof(name), "burst-worker-%d", i);
        cr_assert(wait_exists(&KUBE_PODS, name));
    }
    cr_assert(wait_condition("burst", "Created", NULL));
    event_recorder_flush(env.recorder);

    int since = test_last_seq(&env.srv) + 1;
    uint64_t want = controller_pod_reports_held(env.ctl) + 8;
    for (int i = 0; i < 8; i++) {
        char name[32];
        snprintf(name, sizeof(name), "burst-worker-%d", i);
        set_pod_running(name);
    }
    cr_assert(test_wait_until("the controller holding the reconciles of 8 workers' reports", WAIT_MS, reports_held,
                              &want, NULL));
    cr_assert_eq(writes_of(since, "configmaps", "", "burst-config"), 0, "nothing written while held");
    cr_assert_eq(writes_of(since, "mpijobs", "status", "burst"), 0, "nothing written while held");

    manual_clock_advance(&clk, 1000);
    static const char *const all[] = {"burst-worker-0.", "burst-worker-7.", NULL};
    struct config_data listed = {.key = "discover_hosts.sh", .has = all};
    cr_assert(wait_config_data("burst-config", &listed), "discover_hosts.sh lists the Running workers");
    cr_assert(wait_active("burst", "Worker", 8));
    event_recorder_flush(env.recorder);
    cr_assert_eq(writes_of(since, "configmaps", "", "burst-config"), 1, "one hostfile write:\n%s", writes());
    cr_assert_eq(writes_of(since, "mpijobs", "status", "burst"), 1, "one status write:\n%s", writes());
}

Test(controller, active_counts_running_pods_not_pending_ones)
{
    start_created("act");
    cJSON *job = get_job("act");
    cr_assert_eq(json_int(job, "status.replicaStatuses.Worker.active", 0), 0, "two Pending workers are not active");
    cJSON_Delete(job);
    set_pod_running("act-worker-0");
    cr_assert(wait_active("act", "Worker", 1), "one Running worker is active");
    set_pod_running("act-worker-1");
    cr_assert(wait_active("act", "Worker", 2), "two Running workers are active");
    start_launcher_pod("act");
    cr_assert(wait_active("act", "Launcher", 1), "the Running launcher is active");
}

/* Counts are recomputed after cleanup: a finished job whose Running workers were deleted
 * (cleanPodPolicy Running) shows none active, and the WORKERS column says so. */
Test(controller, a_finished_job_shows_its_cleaned_up_workers_gone)
{
    start_controller();
    create_job("gone", NULL);
    cr_assert(wait_exists(&KUBE_JOBS, "gone-launcher"), "launcher Job created");
    set_pod_running("gone-worker-0");
    set_pod_running("gone-worker-1");
    start_launcher_pod("gone");
    cr_assert(wait_condition("gone", "Running", "MPIJobRunning"));
    cr_assert(wait_active("gone", "Worker", 2));
    set_launcher_job_condition("gone", "Complete", "CompletionsReached");
    cr_assert(wait_condition("gone", "Succeeded", "MPIJobSucceeded"));
    cr_assert(wait_active("gone", "Worker", 0), "the deleted workers are not active any more");
    cr_assert(test_kube_wait_string(env.admin, &MPIJOB_RESOURCE_V2BETA1, "default", "gone", "status.workers", "0/2",
                                    WAIT_MS),
              "WORKERS column");
}

/* Plays the kubelet for a worker whose image cannot be pulled. */
static void set_pod_pull_failing(const char *name, const char *reason, const char *message)
{
    struct kube_patch_opts po = {.type = KUBE_PATCH_MERGE, .subresource = "status"};
    char text[1024];
    snprintf(text, sizeof(text),
             "{\"status\":{\"phase\":\"Pending\",\"containerStatuses\":[{\"name\":\"worker\",\"image\":"
             "\"mpijob-worker:nope\",\"imageID\":\"\",\"ready\":false,\"restartCount\":0,\"started\":false,"
             "\"state\":{\"waiting\":{\"reason\":\"%s\",\"message\":\"%s\"}}}]}}",
             reason, message);
    cr_assert_eq(kube_patch(env.admin, &KUBE_PODS, "default", name, text, &po, NULL, NULL), 0, "pod %s", name);
}

static bool has_running_condition(const cJSON *job, const void *arg)
{
    return mpijob_status_condition(cJSON_GetObjectItem(job, "status"), "Running") != NULL;
}

/* A worker whose image cannot be pulled shows on the MPIJob: Running False with the kubelet's
 * reason and message, one Warning event; when the pod runs, Running turns True. */
Test(controller, a_pull_failure_shows_on_the_job)
{
    start_created("pull");
    set_pod_pull_failing("pull-worker-1", "ErrImagePull",
                         "failed to pull and unpack image \\\"docker.io/library/mpijob-worker:nope\\\": not found");
    cr_assert(test_kube_wait(env.admin, &MPIJOB_RESOURCE_V2BETA1, "default", "pull", "a Running condition",
                             has_running_condition, NULL, WAIT_MS));
    cJSON *job = get_job("pull");
    const cJSON *cond = mpijob_status_condition(cJSON_GetObjectItem(job, "status"), "Running");
    cr_assert_not_null(cond, "no Running condition");
    cr_expect_str_eq(json_string(cond, "status"), "False");
    cr_expect_str_eq(json_string(cond, "reason"), "ImagePullBackOff");
    const char *msg = json_string(cond, "message");
    cr_expect(strstr(msg, "pod pull-worker-1 container worker:") && strstr(msg, "mpijob-worker:nope") &&
                  strstr(msg, "not found"), "message: %s", msg);
    cr_expect_str_eq(json_string(job, "status.state"), "Created", "STATE stays the last true condition");
    cJSON_Delete(job);
    /* The kubelet's back-off message names nothing new: the condition keeps naming the image.
     * Then the other worker runs: once the job counts it, the controller has seen the back-off
     * too (the same watch of pods, in order) and written the status it decides with both. */
    set_pod_pull_failing("pull-worker-1", "ImagePullBackOff", "Back-off pulling image \\\"mpijob-worker:nope\\\"");
    set_pod_running("pull-worker-0");
    cr_assert(wait_active("pull", "Worker", 1));
    job = get_job("pull");
    cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(job, "status"), "conditions"))
        if (strcmp(json_string(c, "type"), "Running") == 0)
            cr_expect(strstr(json_string(c, "message"), "mpijob-worker:nope") != NULL, "%s", json_string(c, "message"));
    cJSON_Delete(job);
    /* The image appears: the pods run, and Running turns True. */
    set_pod_running("pull-worker-0");
    set_pod_running("pull-worker-1");
    start_launcher_pod("pull");
    cr_assert(wait_condition("pull", "Running", "MPIJobRunning"));
}

Test(controller, launcher_failure_fails_the_job_with_its_reason)
{
    start_controller();
    create_job("bad", NULL);
    cr_assert(wait_exists(&KUBE_JOBS, "bad-launcher"));
    set_launcher_job_condition("bad", "Failed", "BackoffLimitExceeded");
    cr_assert(wait_condition("bad", "Failed", NULL));
    cJSON *job = get_job("bad");
    cr_assert_not_null(json_string(job, "status.completionTime"));
    cJSON_Delete(job);
}

static int count_events(const char *reason);
static bool wait_events(const char *reason, int n);

Test(controller, invalid_spec_fails_with_every_bad_field_and_an_event)
{
    start_controller();
    /* Problems the CRD schema lets through and only the operator's validation catches. */
    create_job("inv", "\"networking\":{\"transport\":\"RDMA\",\"interface\":\"eth/0\",\"rdma\":{\"hca\":\"mlx5 0\"}},");
    cr_assert(wait_condition("inv", "Failed", "InvalidSpec"));
    cJSON *job = get_job("inv");
    const cJSON *c = cJSON_GetArrayItem(json_path(job, "status.conditions"), 0);
    const char *msg = json_string(c, "message");
    cr_assert_not_null(strstr(msg, "spec.networking.rdma.hca"), "%s", msg);
    cr_assert_not_null(strstr(msg, "spec.networking.interface"), "%s", msg);
    cJSON_Delete(job);
    cr_assert(!exists(&KUBE_SERVICES, "inv"), "nothing is created for an invalid job");
    /* the event follows the status write that shows the condition: waited for, not listed once */
    cr_assert(wait_events("InvalidSpec", 1), "a Warning event InvalidSpec");
}

/* With one reconcile thread the jobs are taken in the order of their watch events: once ours has
 * its launcher, the foreign job created before it has had its turn. */
Test(controller, foreign_managed_by_gets_not_a_single_request)
{
    REQUIRE_DOUBLE();
    test_controller_env_run(&env, 1, NULL);
    create_job("theirs", "\"runPolicy\":{\"managedBy\":\"kueue.x-k8s.io/multikueue\"},");
    create_job("ours", NULL);
    cr_assert(wait_exists(&KUBE_JOBS, "ours-launcher"));
    char *w = writes();
    cr_assert_null(strstr(w, "theirs-"), "no object for the foreign job:\n%s", w);
    cr_assert_null(strstr(w, "mpijobs/status/theirs"), "no status write for the foreign job:\n%s", w);
}

static bool first_condition_resource_exists(const cJSON *job, const void *arg)
{
    const char *reason = json_string(cJSON_GetArrayItem(json_path(job, "status.conditions"), 0), "reason");
    return reason && strcmp(reason, "ErrResourceExists") == 0;
}

Test(controller, an_object_with_our_name_that_is_not_ours_is_left_alone)
{
    const char *cm = "{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"taken-config\",\"labels\":{"
                     "\"training.kubeflow.org/operator-name\":\"mpijob-operator\",\"training.kubeflow.org/job-name\":"
                     "\"taken\"}},\"data\":{\"mine\":\"yes\"}}";
    cJSON *obj = cJSON_Parse(cm);
    cr_assert_eq(kube_create(env.admin, &KUBE_CONFIGMAPS, "default", obj, NULL, NULL), 0);
    cJSON_Delete(obj);
    start_controller();
    create_job("taken", NULL);
    cr_assert(test_kube_wait(env.admin, &MPIJOB_RESOURCE_V2BETA1, "default", "taken", "ErrResourceExists",
                             first_condition_resource_exists, NULL, WAIT_MS),
              "condition says ErrResourceExists");
    cJSON *have = NULL;
    cr_assert_eq(kube_get(env.admin, &KUBE_CONFIGMAPS, "default", "taken-config", &have, NULL), 0);
    cr_assert_str_eq(json_string(have, "data.mine"), "yes", "untouched");
    cJSON_Delete(have);
    cr_assert(!exists(&KUBE_PODS, "taken-worker-0"), "no further objects");
}

/* Plays the kubelet: a pod ends Failed (OOM kill or eviction). */
static void fail_pod(const char *name, bool evicted)
{
    struct kube_patch_opts po = {.type = KUBE_PATCH_MERGE, .subresource = "status"};
    const char *patch = evicted
        ? "{\"status\":{\"phase\":\"Failed\",\"reason\":\"Evicted\",\"message\":\"The node was low on resource: memory.\"}}"
        : "{\"status\":{\"phase\":\"Failed\",\"containerStatuses\":[{\"name\":\"worker\",\"state\":{\"terminated\":"
          "{\"exitCode\":137,\"reason\":\"OOMKilled\"}}}]}}";
    cr_assert_eq(kube_patch(env.admin, &KUBE_PODS, "default", name, patch, &po, NULL, NULL), 0);
}

static char *pod_uid(const char *name)
{
    cJSON *pod = NULL;
    if (kube_get(env.admin, &KUBE_PODS, "default", name, &pod, NULL) != 0)
        return NULL;
    char *uid = strdup(json_string(pod, "metadata.uid"));
    cJSON_Delete(pod);
    return uid;
}

static bool has_other_uid(const cJSON *pod, const void *old_uid)
{
    const char *uid = json_string(pod, "metadata.uid");
    return uid && strcmp(uid, old_uid) != 0;
}

static bool wait_recreated(const char *name, const char *old_uid)
{
    return test_kube_wait(env.admin, &KUBE_PODS, "default", name, "a new uid", has_other_uid, old_uid, WAIT_MS);
}

static bool launcher_suspended(const char *job_name)
{
    char lname[128];
    snprintf(lname, sizeof(lname), "%s-launcher", job_name);
    cJSON *lj = NULL;
    if (kube_get(env.admin, &KUBE_JOBS, "default", lname, &lj, NULL) != 0)
        return false;
    bool s = json_bool(lj, "spec.suspend", false);
    cJSON_Delete(lj);
    return s;
}

static bool suspend_is(const cJSON *lj, const void *want)
{
    return lj && json_bool(lj, "spec.suspend", false) == *(const bool *)want;
}


static bool wait_launcher_suspended(const char *job_name, bool suspended)
{
    char lname[128];
    snprintf(lname, sizeof(lname), "%s-launcher", job_name);
    return test_kube_wait(env.admin, &KUBE_JOBS, "default", lname, suspended ? "suspended" : "not suspended",
                          suspend_is, &suspended, WAIT_MS);
}

static void set_suspend(const char *job_name, bool suspend)
{
    struct kube_patch_opts po = {.type = KUBE_PATCH_MERGE};
    cr_assert_eq(kube_patch(env.admin, &MPIJOB_RESOURCE_V2BETA1, "default", job_name,
                            suspend ? "{\"spec\":{\"runPolicy\":{\"suspend\":true}}}"
                                    : "{\"spec\":{\"runPolicy\":{\"suspend\":false}}}",
                            &po, NULL, NULL), 0);
}


/* Plays the kubelet restarting the launcher's container under restartPolicy OnFailure: the pod
 * Running and not Ready, the container waiting in CrashLoopBackOff, its last run ended with
 * exit_code and message (JSON-escaped already). */
static void launcher_container_restarted(const char *pod, int exit_code, const char *message)
{
    char patch[2048];
    snprintf(patch, sizeof(patch),
             "{\"status\":{\"phase\":\"Running\",\"conditions\":[{\"type\":\"Ready\",\"status\":\"False\"}],"
             "\"containerStatuses\":[{\"name\":\"launcher\",\"restartCount\":1,\"ready\":false,"
             "\"state\":{\"waiting\":{\"reason\":\"CrashLoopBackOff\"}},\"lastState\":{\"terminated\":{"
             "\"exitCode\":%d,\"reason\":\"Error\",\"finishedAt\":\"2026-01-01T00:00:05Z\",\"message\":\"%s\"}}}]}}",
             exit_code, message);
    struct kube_patch_opts po = {.type = KUBE_PATCH_MERGE, .subresource = "status"};
    cr_assert_eq(kube_patch(env.admin, &KUBE_PODS, "default", pod, patch, &po, NULL, NULL), 0);
}

/* Under restartPolicy OnFailure the kubelet restarts the launcher's container in its pod, and
 * the Job controller deletes that pod when the Job fails: the launcher's last words must be read
 * while they are there, and still be the reason the MPIJob gives afterwards. */
Test(controller, launcher_restart_message_outlives_the_launcher_pod)
{
    start_controller();
    create_job("lr", NULL);
    cr_assert(wait_exists(&KUBE_JOBS, "lr-launcher"));
    set_pod_running("lr-worker-0");
    set_pod_running("lr-worker-1");
    start_launcher_pod("lr");
    launcher_container_restarted("lr-launcher-abcde", 1,
                                 "mpijob-worker train: rank 0: RDMA requested but no usable device: no devices found\\n"
                                 "--------------------------------------------------------------------------\\n"
                                 "mpirun detected that one or more processes exited with non-zero status\\n\\n"
                                 "  Exit code:    1\\n");
    cr_assert(wait_condition("lr", "Restarting", "MPIJobRestarting"));
    cJSON *job = get_job("lr");
    const char *msg = json_string(mpijob_status_condition(cJSON_GetObjectItem(job, "status"), "Restarting"), "message");
    cr_assert_not_null(strstr(msg, "launcher pod lr-launcher-abcde failed (Error): container launcher exited with "
                                   "code 1: mpijob-worker train: rank 0: RDMA requested but no usable device"), "%s", msg);
    cr_assert_null(strstr(msg, "----"), "separator lines are dropped: %s", msg);
    cr_assert_null(strstr(msg, "\n\n"), "blank lines are dropped: %s", msg);
    cJSON_Delete(job);
    cr_assert(wait_events("MPIJobRestarting", 1), "a Warning event says the launcher failed");

    /* The Job controller gives up: the pod goes first, then the Job turns Failed. */
    cr_assert_eq(kube_delete(env.admin, &KUBE_PODS, "default", "lr-launcher-abcde", NULL, NULL, NULL), 0);
    cr_assert(wait_gone(&KUBE_PODS, "lr-launcher-abcde"));
    set_launcher_job_condition("lr", "Failed", "BackoffLimitExceeded");
    cr_assert(wait_condition("lr", "Failed", NULL));
    job = get_job("lr");
    msg = json_string(mpijob_status_condition(cJSON_GetObjectItem(job, "status"), "Failed"), "message");
    cr_assert_not_null(strstr(msg, "MPIJob default/lr has failed: from the test: launcher pod lr-launcher-abcde failed (Error)"), "%s",
                       msg);
    cr_assert_not_null(strstr(msg, "RDMA requested but no usable device"), "%s", msg);
    cr_assert_str_eq(json_string(mpijob_status_condition(cJSON_GetObjectItem(job, "status"), "Failed"), "reason"),
                     "BackoffLimitExceeded/Error");
    cr_assert_str_eq(json_string(job, "status.lastLauncherFailure.pod"), "lr-launcher-abcde");
    cr_assert_str_eq(json_string(job, "status.lastLauncherFailure.finishedAt"), "2026-01-01T00:00:05Z");
    cJSON_Delete(job);
}

Test(controller, failed_worker_is_replaced_and_the_job_restarts)
{
    start_controller();
    create_job("rs", NULL);
    cr_assert(wait_exists(&KUBE_JOBS, "rs-launcher"));
    set_pod_running("rs-worker-0");
    set_pod_running("rs-worker-1");
    char *uid = pod_uid("rs-worker-1");
    fail_pod("rs-worker-1", false);
    cr_assert(wait_condition("rs", "Restarting", "MPIJobRestarting"));
    cr_assert(wait_recreated("rs-worker-1", uid), "the failed worker is recreated");
    free(uid);
    cJSON *job = get_job("rs");
    const char *msg = json_string(mpijob_status_condition(cJSON_GetObjectItem(job, "status"), "Restarting"), "message");
    cr_assert_not_null(strstr(msg, "OOMKilled"), "%s", msg);
    cr_assert_eq(json_int(job, "status.workerRestarts", 0), 1);
    cJSON_Delete(job);
    cr_assert(wait_events("MPIJobRestarting", 1), "a Warning event names the worker and why it failed");
    cr_assert_eq(count_events("MPIJobRestarting"), 1, "one event for one failure");
}

/* mpirun loses an OOM-killed worker's daemon, and the launcher's failure can reach the API
 * server before the kubelet's report of the worker: Restarting first quotes the launcher, then,
 * once the worker's failure is seen, names the worker, its cause, and keeps naming it while the
 * launcher waits for its next run (under load on 1.32.13 the launcher's words overwrote the
 * worker's in the same reconcile, and the OOM kill was never named). */
Test(controller, a_worker_failure_behind_a_launcher_failure_is_the_reason_given)
{
    start_controller();
    create_job("wl", "\"runPolicy\":{\"backoffLimit\":3},");
    cr_assert(wait_exists(&KUBE_JOBS, "wl-launcher"));
    set_pod_running("wl-worker-0");
    set_pod_running("wl-worker-1");
    start_launcher_pod("wl");
    launcher_container_restarted("wl-launcher-abcde", 205,
                                 "mpirun noticed that process rank 1 on node wl-worker-1 exited on signal 9 (Killed).\\n");
    cr_assert(wait_condition("wl", "Restarting", "MPIJobRestarting"));

    char *uid = pod_uid("wl-worker-1");
    fail_pod("wl-worker-1", false);
    struct test_deadline d = test_deadline_in(WAIT_MS);
    for (;;) {
        cJSON *job = get_job("wl");
        const char *msg = json_string(mpijob_status_condition(cJSON_GetObjectItem(job, "status"), "Restarting"),
                                      "message");
        bool named = msg && strstr(msg, "worker wl-worker-1 failed (OOMKilled)");
        char said[600];
        snprintf(said, sizeof(said), "%s", msg ? msg : "(none)");
        cJSON_Delete(job);
        if (named)
            break;
        cr_assert(test_deadline_poll(&d), "Restarting still says %s after %s", said, test_deadline_text(&d));
    }
    cr_assert(wait_events("MPIJobRestarting", 2), "the launcher's failure, then the worker's");

    /* The reconcile that makes the new worker (its status written first) kept the reason. */
    cr_assert(wait_recreated("wl-worker-1", uid), "the failed worker is recreated");
    free(uid);
    cJSON *job = get_job("wl");
    const char *msg = json_string(mpijob_status_condition(cJSON_GetObjectItem(job, "status"), "Restarting"), "message");
    cr_assert(msg && strstr(msg, "worker wl-worker-1 failed (OOMKilled)"), "%s", msg ? msg : "(none)");
    cJSON_Delete(job);
}

Test(controller, evictions_past_the_backoff_limit_fail_the_job_and_clean_up)
{
    start_controller();
    create_job("ev", "\"runPolicy\":{\"backoffLimit\":0,\"cleanPodPolicy\":\"All\"},");
    cr_assert(wait_exists(&KUBE_JOBS, "ev-launcher"));
    cr_assert(wait_exists(&KUBE_PODS, "ev-worker-1"));
    set_pod_running("ev-worker-0");
    fail_pod("ev-worker-1", true);
    cr_assert(wait_condition("ev", "Failed", "MPIJobEvicted"));
    cr_assert(wait_gone(&KUBE_PODS, "ev-worker-0"), "cleanPodPolicy All removes every worker");
}

/* Whether n events of this reason were recorded (counted by count_events) within WAIT_MS; the
 * recorder writes them after the status write that a test waits for. */
static bool wait_events(const char *reason, int n)
{
    struct test_deadline d = test_deadline_in(WAIT_MS);
    int seen;
    while ((seen = count_events(reason)) < n)
        if (!test_deadline_poll(&d)) {
            fprintf(stderr, "%d of %d %s events after %s\n", seen, n, reason, test_deadline_text(&d));
            return false;
        }
    return true;
}

/* Plays the scheduler: the pod is bound to a node, so that its deletion is graceful (it stays,
 * Running, with a deletionTimestamp until a kubelet finishes it; none does here). */
static void bind_pod(const char *name)
{
    char path[256], body[512];
    snprintf(path, sizeof(path), "/api/v1/namespaces/default/pods/%s/binding", name);
    snprintf(body, sizeof(body),
             "{\"apiVersion\":\"v1\",\"kind\":\"Binding\",\"metadata\":{\"name\":\"%s\"},"
             "\"target\":{\"apiVersion\":\"v1\",\"kind\":\"Node\",\"name\":\"node-a\"}}", name);
    cr_assert_eq(kube_request(env.admin, "POST", path, NULL, "application/json", body, NULL, NULL), 0, "bind %s", name);
}

/* Suspending a running job whose workers take their time to stop: Running turns False and stays
 * so while the deleted workers still show Running, and MPIJobRunning is recorded once in all
 * (issue: the Running check ran while suspended and set it True again on every reconcile). */
Test(controller, running_stays_false_while_suspending)
{
    start_controller();
    create_job("sp", NULL);
    cr_assert(wait_exists(&KUBE_JOBS, "sp-launcher"));
    bind_pod("sp-worker-0");
    bind_pod("sp-worker-1");
    set_pod_running("sp-worker-0");
    set_pod_running("sp-worker-1");
    start_launcher_pod("sp");
    cr_assert(wait_condition("sp", "Running", "MPIJobRunning"));
    set_suspend("sp", true);
    cr_assert(wait_condition("sp", "Suspended", "MPIJobSuspended"));
    /* The workers are being deleted, still Running in every cache, for as long as we look: no
     * event marks the reconciles that must not turn Running True again (a correct one writes
     * nothing), so the test looks for two seconds (not scaled: a longer look finds more). */
    for (struct test_deadline d = test_deadline_in(2000); test_deadline_poll(&d);)
        cr_assert(!condition_true("sp", "Running", NULL), "Running True while suspended");
    cJSON *w = NULL;
    cr_assert_eq(kube_get(env.admin, &KUBE_PODS, "default", "sp-worker-0", &w, NULL), 0, "the worker is still there");
    cr_assert_not_null(json_path(w, "metadata.deletionTimestamp"), "... being deleted");
    cJSON_Delete(w);
    cr_assert_eq(count_events("MPIJobRunning"), 1, "one MPIJobRunning for one transition");
}

/* A queue manager (Kueue) admits a suspended MPIJob by giving its templates a nodeSelector,
 * tolerations, labels and annotations, then unsuspends it: the launcher Job's template has them
 * before it starts (issue: only spec.suspend was patched, and the launcher landed anywhere). */
Test(controller, resume_carries_scheduling_directives_to_the_launcher)
{
    start_controller();
    create_job("kq", "\"runPolicy\":{\"suspend\":true},");
    cr_assert(wait_exists(&KUBE_JOBS, "kq-launcher"));
    cr_assert(launcher_suspended("kq"));
    struct kube_patch_opts merge = {.type = KUBE_PATCH_MERGE};
    cr_assert_eq(kube_patch(env.admin, &MPIJOB_RESOURCE_V2BETA1, "default", "kq",
                            "{\"spec\":{\"runPolicy\":{\"suspend\":false},\"mpiReplicaSpecs\":{\"Launcher\":{\"template\":{"
                            "\"metadata\":{\"labels\":{\"kueue.x-k8s.io/podset\":\"launcher\"},"
                            "\"annotations\":{\"kueue.x-k8s.io/workload\":\"kq-1\"}},"
                            "\"spec\":{\"nodeSelector\":{\"pool\":\"gpu-a\"},"
                            "\"tolerations\":[{\"key\":\"gpu\",\"operator\":\"Exists\",\"effect\":\"NoSchedule\"}]}}}}}}",
                            &merge, NULL, NULL),
                 0);
    cr_assert(wait_exists(&KUBE_PODS, "kq-worker-0"), "resume recreates the workers");
    cr_assert(wait_launcher_suspended("kq", false), "the launcher Job was resumed");
    cJSON *lj = NULL;
    cr_assert_eq(kube_get(env.admin, &KUBE_JOBS, "default", "kq-launcher", &lj, NULL), 0);
    cr_expect_str_eq(json_string(lj, "spec.template.spec.nodeSelector.pool"), "gpu-a");
    cr_expect_str_eq(json_string(cJSON_GetArrayItem(json_path(lj, "spec.template.spec.tolerations"), 0), "key"), "gpu");
    /* Label keys hold dots: looked up as keys, not paths. */
    const cJSON *labels = json_path(lj, "spec.template.metadata.labels");
    const cJSON *podset = cJSON_GetObjectItemCaseSensitive(labels, "kueue.x-k8s.io/podset");
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(labels, "training.kubeflow.org/job-role");
    cr_expect(cJSON_IsString(podset) && strcmp(podset->valuestring, "launcher") == 0, "the queue's label copied");
    cr_expect(cJSON_IsString(role) && strcmp(role->valuestring, "launcher") == 0, "the operator's labels stay");
    const cJSON *sel = json_path(lj, "spec.selector.matchLabels"), *l;
    cJSON_ArrayForEach(l, sel) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(labels, l->string);
        cr_expect(cJSON_IsString(v) && strcmp(v->valuestring, l->valuestring) == 0, "the selector's label %s stays",
                  l->string);
    }
    cJSON *ann = cJSON_GetObjectItemCaseSensitive(json_path(lj, "spec.template.metadata.annotations"),
                                                  "kueue.x-k8s.io/workload");
    cr_expect(cJSON_IsString(ann) && strcmp(ann->valuestring, "kq-1") == 0, "annotation copied");
    cJSON_Delete(lj);
}

Test(controller, suspended_at_creation_creates_no_workers_and_a_suspended_launcher)
{
    start_controller();
    create_job("sus", "\"runPolicy\":{\"suspend\":true},");
    cr_assert(wait_condition("sus", "Suspended", "MPIJobSuspended"));
    cr_assert(wait_exists(&KUBE_JOBS, "sus-launcher"));
    cr_assert(launcher_suspended("sus"));
    /* A pass makes the launcher last, after the workers: a worker the pass that made it had made
     * would be there already. */
    cr_assert(!exists(&KUBE_PODS, "sus-worker-0"));
}

/* WaitForWorkersReady, just after the workers were made: the launcher Job is not there (or, when
 * resuming, stays suspended) with one worker Ready, and the other's Ready brings it. The status
 * that counts the first Ready worker comes from a later pass than the one that made the workers
 * (that one decided its status before they existed), so by then the pass that would have made or
 * resumed the launcher right after the workers is over. */
static void expect_launcher_waits_for_ready_workers(const char *job_name, bool resuming)
{
    char worker[96], launcher[96];
    snprintf(launcher, sizeof(launcher), "%s-launcher", job_name);
    snprintf(worker, sizeof(worker), "%s-worker-0", job_name);
    /* each worker as it exists now: after a resume, the cache may show one before the other */
    cr_assert(wait_exists(&KUBE_PODS, worker));
    set_pod_running(worker);
    cr_assert(wait_active(job_name, "Worker", 1));
    if (resuming)
        cr_assert(launcher_suspended(job_name), "the launcher stays suspended until the workers are Ready");
    else
        cr_assert(!exists(&KUBE_JOBS, launcher), "WaitForWorkersReady: no launcher before Ready workers");
    snprintf(worker, sizeof(worker), "%s-worker-1", job_name);
    cr_assert(wait_exists(&KUBE_PODS, worker));
    set_pod_running(worker);
}

Test(controller, suspend_while_running_then_resume_waits_for_ready_workers)
{
    start_controller();
    create_job("sr", "\"launcherCreationPolicy\":\"WaitForWorkersReady\",");
    cr_assert(wait_exists(&KUBE_PODS, "sr-worker-1"));
    expect_launcher_waits_for_ready_workers("sr", false);
    cr_assert(wait_exists(&KUBE_JOBS, "sr-launcher"));

    /* the Job controller would have started it */
    struct kube_patch_opts po = {.type = KUBE_PATCH_MERGE, .subresource = "status"};
    cr_assert_eq(kube_patch(env.admin, &KUBE_JOBS, "default", "sr-launcher",
                            "{\"status\":{\"startTime\":\"2026-11-21T10:00:00Z\",\"active\":1}}", &po, NULL, NULL), 0);

    set_suspend("sr", true);
    cr_assert(wait_condition("sr", "Suspended", "MPIJobSuspended"));
    cr_assert(wait_gone(&KUBE_PODS, "sr-worker-0") && wait_gone(&KUBE_PODS, "sr-worker-1"),
              "suspend deletes the workers");
    cr_assert(wait_launcher_suspended("sr", true));

    set_suspend("sr", false);
    cr_assert(wait_exists(&KUBE_PODS, "sr-worker-1"), "resume recreates the workers");
    expect_launcher_waits_for_ready_workers("sr", true);
    cr_assert(wait_launcher_suspended("sr", false), "unsuspended once the workers are Ready");
    cJSON *lj = NULL;
    cr_assert_eq(kube_get(env.admin, &KUBE_JOBS, "default", "sr-launcher", &lj, NULL), 0);
    cr_assert_null(json_path(lj, "status.startTime"), "the Job's startTime was cleared before unsuspending");
    cJSON_Delete(lj);
    cr_assert(!condition_true("sr", "Suspended", NULL));
}

Test(controller, ttl_after_finished_deletes_the_mpijob)
{
    start_controller();
    /* timestamps have whole seconds: a TTL of 3 s leaves at least 2 s to see Succeeded first */
    create_job("ttl", "\"runPolicy\":{\"ttlSecondsAfterFinished\":3},");
    cr_assert(wait_exists(&KUBE_JOBS, "ttl-launcher"));
    set_launcher_job_condition("ttl", "Complete", "");
    cr_assert(wait_condition("ttl", "Succeeded", NULL));
    cr_assert(wait_gone(&MPIJOB_RESOURCE_V2BETA1, "ttl"), "the MPIJob is deleted after its TTL");
}

/* Timestamps have whole seconds, so a deadline of 2 s passes 1 to 2 s after the first reconcile.
 * The launcher is normally created long before, and then deleted; on a loaded machine the
 * deadline can pass before it is, and then it is never created. Either way the end is the same:
 * Failed, and no launcher Job. */
Test(controller, active_deadline_fails_the_job)
{
    start_controller();
    create_job("dl", "\"runPolicy\":{\"activeDeadlineSeconds\":2},");
    cr_assert(wait_exists(&KUBE_PODS, "dl-worker-0"));
    cr_assert(wait_condition("dl", "Failed", "DeadlineExceeded"));
    cr_assert(wait_gone(&KUBE_JOBS, "dl-launcher"), "the launcher Job is stopped");
}

Test(controller, steady_state_makes_no_writes)
{
    REQUIRE_DOUBLE();
    start_controller();
    create_job("run", NULL);
    create_job("fin", NULL);
    cr_assert(wait_exists(&KUBE_JOBS, "run-launcher"));
    cr_assert(wait_exists(&KUBE_JOBS, "fin-launcher"));
    set_pod_running("run-worker-0");
    set_pod_running("run-worker-1");
    start_launcher_pod("run");
    cr_assert(wait_condition("run", "Running", NULL));
    set_launcher_job_condition("fin", "Complete", "");
    cr_assert(wait_condition("fin", "Succeeded", NULL));
    /* The last writes were those status writes and the Events they announced, sent by the
     * recorder's thread: flushed, nothing is left to write. */
    event_recorder_flush(env.recorder);

    int since = test_last_seq(&env.srv) + 1;
    /* No event marks a steady state: the test watches the log for three seconds (not scaled: a
     * longer look finds more), in which nothing may be written. */
    clock_sleep_ms(3000);
    cJSON *log = test_apiserver_log(&env.srv, since);
    cJSON *e;
    cJSON_ArrayForEach(e, log) {
        const char *verb = json_string(e, "verb");
        cr_assert(verb && (strcmp(verb, "get") == 0 || strcmp(verb, "list") == 0 || strcmp(verb, "watch") == 0),
                  "a write in steady state: %s %s", json_string(e, "method"), json_string(e, "path"));
    }
    cJSON_Delete(log);
}

/* The PodGroup after the schedulingPolicy of check_gang: minMember 2, queue team-a (Volcano) or
 * scheduleTimeoutSeconds 120 (scheduler-plugins). */
static bool follows_volcano(const cJSON *pg, const void *arg)
{
    const char *queue = json_string(pg, "spec.queue");
    return json_int(pg, "spec.minMember", 0) == 2 && queue && strcmp(queue, "team-a") == 0;
}

static bool follows_scheduler_plugins(const cJSON *pg, const void *arg)
{
    return json_int(pg, "spec.minMember", 0) == 2 && json_int(pg, "spec.scheduleTimeoutSeconds", 0) == 120;
}

/* Gang scheduling with `scheduler`: the PodGroup (in `group`'s API group) is created before the
 * pods, counts workers + launcher, and the pods name the scheduler and find their group by
 * `key` in their annotations (Volcano) or labels (scheduler-plugins); suspend deletes the group. */
static void check_gang(const char *scheduler, const char *name, const struct kube_resource *group,
                       const char *where, const char *key)
{
    test_controller_env_run(&env, 2, scheduler);
    create_job(name, NULL);
    char launcher[64], worker0[64], pg_create[96], pod_create[96];
    snprintf(launcher, sizeof(launcher), "%s-launcher", name);
    snprintf(worker0, sizeof(worker0), "%s-worker-0", name);
    cr_assert(wait_exists(&KUBE_JOBS, launcher));
    if (env.srv.is_double) {
        /* the order of the creates: the double's request log shows it */
        char *w = writes();
        snprintf(pg_create, sizeof(pg_create), "create podgroups/%s 201", name);
        snprintf(pod_create, sizeof(pod_create), "create pods/%s 201", worker0);
        const char *pg = strstr(w, pg_create), *pod = strstr(w, pod_create);
        cr_assert(pg && pod && pg < pod, "PodGroup first:\n%s", w);
    }
    cJSON *obj = NULL;
    cr_assert_eq(kube_get(env.admin, group, "default", name, &obj, NULL), 0);
    cr_assert_eq(json_int(obj, "spec.minMember", 0), 3, "workers + 1");
    cJSON_Delete(obj);
    cr_assert_eq(kube_get(env.admin, &KUBE_PODS, "default", worker0, &obj, NULL), 0);
    cr_assert_str_eq(json_string(obj, "spec.schedulerName"), scheduler);
    const cJSON *ref = cJSON_GetObjectItem(json_path(obj, where), key);
    cr_assert(cJSON_IsString(ref) && strcmp(ref->valuestring, name) == 0, "the pod names its group in %s", where);
    cJSON_Delete(obj);

    /* A changed schedulingPolicy reaches the PodGroup (it was only ever created). */
    struct kube_patch_opts merge = {.type = KUBE_PATCH_MERGE};
    cr_assert_eq(kube_patch(env.admin, &MPIJOB_RESOURCE_V2BETA1, "default", name,
                            "{\"spec\":{\"runPolicy\":{\"schedulingPolicy\":{\"minAvailable\":2,\"queue\":\"team-a\","
                            "\"scheduleTimeoutSeconds\":120}}}}",
                            &merge, NULL, NULL),
                 0);
    bool volcano = group == &PODGROUP_VOLCANO;
    cr_assert(test_kube_wait(env.admin, group, "default", name, "minMember 2 and the new policy",
                             volcano ? follows_volcano : follows_scheduler_plugins, NULL, WAIT_MS),
              "the PodGroup follows schedulingPolicy (minMember 2, %s)",
              volcano ? "queue team-a" : "scheduleTimeoutSeconds 120");

    set_suspend(name, true);
    cr_assert(wait_gone(group, name), "suspend deletes the PodGroup");
}

Test(controller, gang_scheduling_with_volcano)
{
    check_gang("volcano", "gang", &PODGROUP_VOLCANO, "metadata.annotations", VOLCANO_GROUP_ANNOTATION);
}

/* Any other scheduler name is the scheduler-plugins coscheduler: scheduling.x-k8s.io PodGroups. */
Test(controller, gang_scheduling_with_scheduler_plugins)
{
    check_gang("scheduler-plugins-scheduler", "coscheduled", &PODGROUP_SCHED_PLUGINS, "metadata.labels",
               SCHED_PLUGINS_GROUP_LABEL);
}

static int count_events(const char *reason)
{
    event_recorder_flush(env.recorder);
    char selector[128];
    snprintf(selector, sizeof(selector), "reason=%s", reason);
    return test_kube_count_events(env.admin, "default", selector);
}

/* The controller does not trip over its own status writes: a reconcile that comes before the
 * cache shows the last write (a pod event, say) waits for that write's event instead of working
 * from the old status and meeting a Conflict. */
Test(controller, a_job_runs_to_success_without_a_status_conflict)
{
    start_controller();
    create_job("calm", NULL);
    cr_assert(wait_exists(&KUBE_JOBS, "calm-launcher"));
    for (int round = 0; round < 3; round++) {
        set_pod_running("calm-worker-0");
        set_pod_running("calm-worker-1");
    }
    start_launcher_pod("calm");
    cr_assert(wait_condition("calm", "Running", "MPIJobRunning"));
    set_launcher_job_condition("calm", "Complete", "Completed");
    cr_assert(wait_condition("calm", "Succeeded", "MPIJobSucceeded"));
    /* The last status write of its life: the cleaned-up Running workers counted out. */
    cr_assert(wait_active("calm", "Worker", 0));
    const char *log = writes();
    cr_assert_null(strstr(log, "mpijobs/status/calm 409"), "%s", log);
}

/* A status write lost to a Conflict is decided again by the retry: its transitions are announced
 * once, by the write that lands. */
Test(controller, a_status_conflict_announces_each_transition_once)
{
    if (!env.srv.is_double)
        cr_skip_test("needs the API-server double (fault injection: a 409 on the next status write)");
    cr_assert_eq(test_apiserver_fault(&env.srv, "{\"failNext\":{\"count\":1,\"code\":409,\"verb\":\"update\","
                                            "\"resource\":\"mpijobs\"}}"), 0);
    start_controller();
    create_job("once", NULL);
    cr_assert(wait_condition("once", "Created", "MPIJobCreated"));
    cr_assert(wait_exists(&KUBE_JOBS, "once-launcher"));
    set_pod_running("once-worker-0");
    set_pod_running("once-worker-1");
    cr_assert_eq(test_apiserver_fault(&env.srv, "{\"failNext\":{\"count\":1,\"code\":409,\"verb\":\"update\","
                                            "\"resource\":\"mpijobs\"}}"), 0);
    start_launcher_pod("once");
    cr_assert(wait_condition("once", "Running", "MPIJobRunning"));
    char *log = writes();
    cr_assert_not_null(strstr(log, "409"), "a status write was refused:\n%s", log);
    cr_assert_eq(count_events("MPIJobCreated"), 1);
    cr_assert_eq(count_events("MPIJobRunning"), 1);
}

Test(controller, transport_conflicts_and_unforwarded_variables_are_warned)
{
    start_controller();
    /* The user pins NCCL_IB_DISABLE=0 while asking for TCP: kept, and a Warning says so. */
    const char *conflict =
        "{\"apiVersion\":\"kubeflow.org/v2beta1\",\"kind\":\"MPIJob\",\"metadata\":{\"name\":\"tc\"},\"spec\":{"
        "\"networking\":{\"transport\":\"TCP\"},\"mpiReplicaSpecs\":{\"Launcher\":{\"template\":{\"spec\":{\"containers\":"
        "[{\"name\":\"l\",\"image\":\"w\",\"command\":[\"mpirun\",\"train\"],\"env\":[{\"name\":\"NCCL_IB_DISABLE\","
        "\"value\":\"0\"}]}]}}},\"Worker\":{\"replicas\":1,\"template\":{\"spec\":{\"containers\":[{\"name\":\"w\","
        "\"image\":\"w\"}]}}}}}}";
    /* A shell line that uses -x: nothing is changed in it, and a Warning names what to forward. */
    const char *shell =
        "{\"apiVersion\":\"kubeflow.org/v2beta1\",\"kind\":\"MPIJob\",\"metadata\":{\"name\":\"sh\"},\"spec\":{"
        "\"networking\":{\"transport\":\"RDMA\"},\"mpiReplicaSpecs\":{\"Launcher\":{\"template\":{\"spec\":{\"containers\":"
        "[{\"name\":\"l\",\"image\":\"w\",\"command\":[\"sh\",\"-c\",\"mpirun -x FOO -np 2 python train.py\"]}]}}},"
        "\"Worker\":{\"replicas\":1,\"template\":{\"spec\":{\"containers\":[{\"name\":\"w\",\"image\":\"w\"}]}}}}}}";
    const char *bodies[] = {conflict, shell};
    for (int i = 0; i < 2; i++) {
        cJSON *job = cJSON_Parse(bodies[i]);
        cr_assert_eq(kube_create(env.admin, &MPIJOB_RESOURCE_V2BETA1, "default", job, NULL, NULL), 0);
        cJSON_Delete(job);
    }
    cr_assert(wait_exists(&KUBE_JOBS, "tc-launcher"));
    cr_assert(wait_exists(&KUBE_JOBS, "sh-launcher"));
    cr_assert_geq(count_events("TransportConflict"), 1, "a Warning for the conflicting variable");
    cr_assert_geq(count_events("TransportNotForwarded"), 1, "a Warning naming what the shell line must forward");

    cJSON *lj = NULL;
    cr_assert_eq(kube_get(env.admin, &KUBE_JOBS, "default", "tc-launcher", &lj, NULL), 0);
    const cJSON *e;
    const char *value = NULL;
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(cJSON_GetArrayItem(json_path(lj, "spec.template.spec.containers"), 0), "env")) {
        if (strcmp(json_string(e, "name"), "NCCL_IB_DISABLE") == 0)
            value = json_string(e, "value");
    }
    cr_assert_str_eq(value, "0", "the user's value is kept");
    cJSON_Delete(lj);
    cJSON *shj = NULL;
    cr_assert_eq(kube_get(env.admin, &KUBE_JOBS, "default", "sh-launcher", &shj, NULL), 0);
    const cJSON *cmd = json_path(cJSON_GetArrayItem(json_path(shj, "spec.template.spec.containers"), 0), "command");
    cr_assert_str_eq(cJSON_GetArrayItem(cmd, 2)->valuestring, "mpirun -x FOO -np 2 python train.py",
                     "the shell line is not touched");
    cJSON_Delete(shj);
}

static bool no_replica_failure(const cJSON *job, const void *arg)
{
    return job && !test_kube_has_condition(job, "ReplicaFailure", NULL, NULL);
}

static void set_worker_replicas(const char *job_name, int replicas)
{
    char body[128];
    snprintf(body, sizeof(body), "{\"spec\":{\"mpiReplicaSpecs\":{\"Worker\":{\"replicas\":%d}}}}", replicas);
    struct kube_patch_opts po = {.type = KUBE_PATCH_MERGE};
    cr_assert_eq(kube_patch(env.admin, &MPIJOB_RESOURCE_V2BETA1, "default", job_name, body, &po, NULL, NULL), 0);
}

static char *configmap_data(const char *name, const char *key)
{
    cJSON *cm = NULL;
    char *out = NULL;
    if (kube_get(env.admin, &KUBE_CONFIGMAPS, "default", name, &cm, NULL) == 0) {
        const cJSON *v = cJSON_GetObjectItem(cJSON_GetObjectItem(cm, "data"), key);
        out = cJSON_IsString(v) ? strdup(v->valuestring) : NULL;
    }
    cJSON_Delete(cm);
    return out;
}

/* Elastic jobs (Horovod's contract): replicas may change while the job runs. New indexes are
 * created, indexes >= replicas deleted, discover_hosts.sh follows; the launcher is left alone. */
Test(controller, scaling_workers_follows_replicas_and_leaves_the_launcher_alone)
{
    start_created("el");
    char *launcher_uid = NULL;
    cJSON *lj = NULL;
    cr_assert_eq(kube_get(env.admin, &KUBE_JOBS, "default", "el-launcher", &lj, NULL), 0);
    launcher_uid = strdup(json_string(lj, "metadata.uid"));
    cJSON_Delete(lj);

    set_worker_replicas("el", 3);
    cr_assert(wait_exists(&KUBE_PODS, "el-worker-2"), "scaling up creates the new index");
    for (int i = 0; i < 3; i++) {
        char name[32];
        snprintf(name, sizeof(name), "el-worker-%d", i);
        set_pod_running(name);
    }
    start_launcher_pod("el");
    cr_assert(wait_condition("el", "Running", "MPIJobRunning"));

    set_worker_replicas("el", 1);
    cr_assert(wait_gone(&KUBE_PODS, "el-worker-2"), "index 2 >= replicas is deleted");
    cr_assert(wait_gone(&KUBE_PODS, "el-worker-1"), "index 1 >= replicas is deleted");
    cr_assert(exists(&KUBE_PODS, "el-worker-0"));
    static const char *const left[] = {"el-worker-0.", NULL}, *const gone[] = {"el-worker-1.", "el-worker-2.", NULL};
    struct config_data follows = {.key = "discover_hosts.sh", .has = left, .lacks = gone};
    cr_assert(wait_config_data("el-config", &follows), "discover_hosts.sh lists the one worker left");
    char *hostfile = configmap_data("el-config", "hostfile");
    cr_assert(hostfile && !strstr(hostfile, "el-worker-1.") && !strstr(hostfile, "el-worker-2."),
              "the hostfile lists one host:\n%s", hostfile ? hostfile : "(none)");
    free(hostfile);

    lj = NULL;
    cr_assert_eq(kube_get(env.admin, &KUBE_JOBS, "default", "el-launcher", &lj, NULL), 0);
    cr_assert_str_eq(json_string(lj, "metadata.uid"), launcher_uid, "the launcher is the same Job");
    cr_assert_not(json_bool(lj, "spec.suspend", false));
    cJSON_Delete(lj);
    free(launcher_uid);
    if (env.srv.is_double) {
        const char *w = writes();
        cr_assert_null(strstr(w, "patch jobs/"), "the launcher Job was not touched:\n%s", w);
        cr_assert_null(strstr(w, "delete jobs/"), "the launcher Job was not touched:\n%s", w);
    }
}

/* A quota of 2 pods and a job of 4 workers: the server refuses the third worker. The refusal
 * shows on the MPIJob: a FailedCreate Warning event with the server's message (one Event whose
 * count grows, not one per retry), and ReplicaFailure naming the pod while it lasts. When the
 * quota goes, the workers are made and the condition goes too. */
Test(controller, refused_workers_surface_as_failed_create_and_replica_failure)
{
    const char *quota = "{\"apiVersion\":\"v1\",\"kind\":\"ResourceQuota\",\"metadata\":{\"name\":\"two-pods\"},"
                        "\"spec\":{\"hard\":{\"pods\":\"2\"}}}";
    const struct kube_resource quotas = {"", "v1", "resourcequotas", "ResourceQuota", true};
    cJSON *q = cJSON_Parse(quota);
    cr_assert_eq(kube_create(env.admin, &quotas, "default", q, NULL, NULL), 0);
    cJSON_Delete(q);
    /* kube-controller-manager's quota controller fills status; without one, the test does. */
    struct kube_patch_opts po = {.type = KUBE_PATCH_MERGE, .subresource = "status"};
    cr_assert_eq(kube_patch(env.admin, &quotas, "default", "two-pods",
                            "{\"status\":{\"hard\":{\"pods\":\"2\"},\"used\":{\"pods\":\"0\"}}}", &po, NULL, NULL),
                 0);

    start_controller();
    create_job("qt", NULL);
    set_worker_replicas("qt", 4);
    cr_assert(wait_condition("qt", "ReplicaFailure", "FailedCreate"), "ReplicaFailure while refused");
    cJSON *job = get_job("qt");
    const cJSON *c;
    const char *message = NULL;
    cJSON_ArrayForEach(c, json_path(job, "status.conditions")) {
        if (strcmp(json_string(c, "type"), "ReplicaFailure") == 0)
            message = json_string(c, "message");
    }
    cr_assert(message && strstr(message, "cannot create Pod qt-worker-") && strstr(message, "exceeded quota: two-pods"),
              "the condition names the pod and the server's reason: %s", message ? message : "(none)");
    cr_assert_str_eq(json_string(job, "status.state"), "ReplicaFailure", "the STATE column shows it");
    cJSON_Delete(job);

    /* A few retries, each refused and recorded: the Events fold them into counts. */
    struct test_deadline d = test_deadline_in(WAIT_MS);
    while (count_events("FailedCreate") < 3)
        cr_assert(test_deadline_poll(&d), "%d FailedCreate after %s", count_events("FailedCreate"),
                  test_deadline_text(&d));
    struct kube_list_opts lo = {.field_selector = "reason=FailedCreate"};
    cJSON *items = NULL;
    cr_assert_eq(kube_list_all(env.admin, &KUBE_EVENTS, "default", &lo, &items, NULL, NULL), 0);
    cr_assert_geq(cJSON_GetArraySize(items), 1, "a FailedCreate event");
    const cJSON *e = cJSON_GetArrayItem(items, 0);
    cr_assert_str_eq(json_string(e, "type"), "Warning");
    cr_assert_str_eq(json_string(e, "involvedObject.kind"), "MPIJob");
    cr_assert(strstr(json_string(e, "message"), "exceeded quota: two-pods"), "%s", json_string(e, "message"));
    cr_assert_leq(cJSON_GetArraySize(items), 2, "aggregated, not one Event per retry");
    cJSON_Delete(items);

    cr_assert_eq(kube_delete(env.admin, &quotas, "default", "two-pods", NULL, NULL, NULL), 0);
    cr_assert(wait_exists(&KUBE_PODS, "qt-worker-3"), "the workers are made once the quota goes");
    cr_assert(wait_exists(&KUBE_PODS, "qt-worker-2"));
    cr_assert(test_kube_wait(env.admin, &MPIJOB_RESOURCE_V2BETA1, "default", "qt", "no ReplicaFailure",
                             no_replica_failure, NULL, WAIT_MS),
              "the condition goes with the refusal");
}

/* ---- host network: the job's ssh port (SPEC.md section 4) ------------------------------------ */

/* The ssh-port annotation of a ConfigMap or pod, 0 when absent. */
static int ssh_port_of(const struct kube_resource *res, const char *name)
{
    cJSON *obj = test_kube_get(env.admin, res, "default", name);
    int port = obj ? mpijob_ssh_port_of(obj) : 0;
    cJSON_Delete(obj);
    return port;
}

static bool has_ssh_port(const cJSON *obj, const void *arg) { return mpijob_ssh_port_of(obj) != 0; }

static bool wait_ssh_port(const struct kube_resource *res, const char *name, int *port)
{
    bool ok = test_kube_wait(env.admin, res, "default", name, "an ssh-port annotation", has_ssh_port, NULL, WAIT_MS);
    *port = ssh_port_of(res, name);
    return ok && *port;
}

static const char *env_value(const cJSON *env_list, const char *name)
{
    return json_string(json_env_find(env_list, name), "value");
}

/* Two host-network jobs get different ports from the range, each carried the same way by its
 * ConfigMap, workers (hostPort, MPIJOB_SSH_PORT, sshd -p) and launcher (ssh arguments); a
 * controller started again finds the same ports and rewrites nothing. */
Test(controller, host_network_jobs_get_their_own_ssh_ports_which_a_restart_keeps)
{
    start_controller();
    create_job("hn-a", "\"networking\":{\"hostNetwork\":true},");
    int port_a = 0, port_b = 0, w;
    cr_assert(wait_ssh_port(&KUBE_CONFIGMAPS, "hn-a-config", &port_a), "hn-a's ConfigMap carries its port");
    cr_assert(port_a >= MPIJOB_SSH_PORT_MIN && port_a < MPIJOB_SSH_PORT_MIN + MPIJOB_SSH_PORT_COUNT, "port %d", port_a);
    cr_assert(wait_exists(&KUBE_PODS, "hn-a-worker-1") && wait_exists(&KUBE_JOBS, "hn-a-launcher"));
    /* hn-a's ConfigMap is in the controller's cache before hn-b is chosen for. */
    cr_assert(wait_ssh_port(&KUBE_PODS, "hn-a-worker-1", &w));
    create_job("hn-b", "\"networking\":{\"hostNetwork\":true},");
    cr_assert(wait_ssh_port(&KUBE_CONFIGMAPS, "hn-b-config", &port_b));
    cr_assert_neq(port_a, port_b, "two jobs, one port %d", port_a);

    char text[16];
    snprintf(text, sizeof(text), "%d", port_a);
    cJSON *pod = test_kube_get(env.admin, &KUBE_PODS, "default", "hn-a-worker-0");
    cr_assert_not_null(pod);
    cr_assert(cJSON_IsTrue(json_path(pod, "spec.hostNetwork")));
    cr_assert_str_eq(json_string(pod, "spec.dnsPolicy"), "ClusterFirstWithHostNet");
    const cJSON *c0 = cJSON_GetArrayItem(json_path(pod, "spec.containers"), 0);
    const cJSON *decl = cJSON_GetArrayItem(json_path(c0, "ports"), 0);
    cr_assert_eq(json_int(decl, "hostPort", 0), port_a);
    cr_assert_eq(json_int(decl, "containerPort", 0), port_a);
    const cJSON *cmd = json_path(c0, "command");
    cr_assert_str_eq(cJSON_GetArrayItem(cmd, 3)->valuestring, text, "sshd -De -p PORT");
    cr_assert_str_eq(env_value(json_path(c0, "env"), "MPIJOB_SSH_PORT"), text);
    cJSON_Delete(pod);
    cJSON *launcher = test_kube_get(env.admin, &KUBE_JOBS, "default", "hn-a-launcher");
    cr_assert_not_null(launcher);
    const cJSON *lenv = json_path(cJSON_GetArrayItem(json_path(launcher, "spec.template.spec.containers"), 0), "env");
    char args[160];
    snprintf(args, sizeof(args), "-o ConnectionAttempts=10 -o ConnectTimeout=10 -o ServerAliveInterval=10 -o ServerAliveCountMax=3 -p %d", port_a);
    cr_assert_str_eq(env_value(lenv, "OMPI_MCA_plm_rsh_args"), args);
    cr_assert_str_eq(env_value(lenv, "PRTE_MCA_plm_ssh_args"), args);
    cr_assert(cJSON_IsTrue(json_path(launcher, "spec.template.spec.hostNetwork")));
    cJSON_Delete(launcher);

    /* A controller started again reads the ports back. */
    controller_stop(env.ctl);
    env.ctl = NULL;
    start_controller();
    /* Once the restarted controller has caught up, hn-b's launcher is there as before. */
    cr_assert(wait_exists(&KUBE_JOBS, "hn-b-launcher"));
    cr_assert_eq(ssh_port_of(&KUBE_CONFIGMAPS, "hn-a-config"), port_a);
    cr_assert_eq(ssh_port_of(&KUBE_CONFIGMAPS, "hn-b-config"), port_b);
    cr_assert_eq(ssh_port_of(&KUBE_PODS, "hn-b-worker-0"), port_b);
}
