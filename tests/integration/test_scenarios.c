/* Seven scenarios of an MPIJob's life, each followed from creation through the objects the
 * operator makes, the status it writes and the events it records: a job that succeeds, one whose
 * launcher waits for Ready workers, suspend and resume, a launcher that fails, gang scheduling
 * with scheduler-plugins and with Volcano, and a job another controller manages. They are the
 * behaviours the reference operator's own integration tests walk through.
 *
 * Who plays what:
 * - on the API-server double, the test is the kubelet (it writes pod status) and the Job
 *   controller (it creates the launcher Job's pod and writes the Job's terminal status);
 * - on a real control plane (KUBEBUILDER_ASSETS with etcd, kube-apiserver,
 *   kube-controller-manager and kube-scheduler), the Job controller is the real one: it creates
 *   the launcher pod and decides whether the Job completed or failed from that pod's phase. There
 *   are no nodes, so the test still plays the kubelet through pods/status.
 * With etcd and kube-apiserver but no controller-manager the scenarios skip: on a real server they
 * are about the real Job controller. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kube/client.h"
#include "kube/events.h"
#include "mpijob/builders.h"
#include "mpijob/controller.h"
#include "support/apiserver.h"
#include "support/deadline.h"
#include "support/kube_test.h"
#include "support/kube_wait.h"
#include "util/json.h"

/* Generous: the machine is shared and a real control plane is slow to react; nothing is asserted
 * about how long anything takes (scaled by the tests' time factor). */
#define WAIT_MS 90000u
#define NS "default"

static struct test_apiserver srv;
static struct kube_client *admin, *operator_client;
static struct event_recorder *recorder;
static struct controller *ctl;
static int launcher_pods_made; /* the double: launcher pods the test made as the Job controller (name suffix) */

/* ---- the cluster and the controller ------------------------------------------------------ */

/* Starts the server (with the real controllers when KUBEBUILDER_ASSETS has them) and the
 * controller with `threads` reconcile threads; gang_scheduler as the operator's
 * --gang-scheduling (NULL: none). */
static void begin_with(int threads, const char *gang_scheduler)
{
    if (test_apiserver_assets() == TEST_ASSETS_SERVER)
        cr_skip_test("KUBEBUILDER_ASSETS=%s has etcd and kube-apiserver but not kube-controller-manager and "
                     "kube-scheduler: on a real server these scenarios need the real Job controller",
                     getenv("KUBEBUILDER_ASSETS"));
    cr_assert_eq(test_apiserver_start_control_plane(&srv), 0, "the API server starts");
    cr_assert(srv.is_double || srv.control_plane, "a real server runs with its controller-manager");
    cr_log_info("%s", srv.is_double ? "on the API-server double: the test plays the kubelet and the Job controller"
                                    : "on a real control plane: the test plays the kubelet");
    admin = test_kube_client(&srv, NULL);
    operator_client = test_operator_client(&srv, NULL);
    cr_assert_eq(event_recorder_new(operator_client, "mpijob-operator", NULL, &recorder), 0);
    struct controller_config cfg = {.client = operator_client, .threads = threads, .events = recorder,
                                    .options = {.gang_scheduler = gang_scheduler}};
    cr_assert_eq(controller_start(&cfg, &ctl), 0);
}

static void begin(const char *gang_scheduler) { begin_with(2, gang_scheduler); }

static void end(void)
{
    controller_stop(ctl);
    ctl = NULL;
    event_recorder_free(recorder);
    recorder = NULL;
    kube_client_free(operator_client);
    kube_client_free(admin);
    operator_client = admin = NULL;
    test_apiserver_stop(&srv);
    launcher_pods_made = 0;
}

TestSuite(scenarios, .fini = end, .timeout = 420);

/* An MPIJob of 2 workers with cleanPodPolicy Running; run_policy and spec are more fields (each
 * ending with a comma) for runPolicy and spec. */
static void create_job(const char *name, const char *run_policy, const char *spec)
{
    char text[4096];
    snprintf(text, sizeof(text),
             "{\"apiVersion\":\"kubeflow.org/v2beta1\",\"kind\":\"MPIJob\",\"metadata\":{\"name\":\"%s\"},"
             "\"spec\":{\"slotsPerWorker\":1,%s\"runPolicy\":{%s\"cleanPodPolicy\":\"Running\"},"
             "\"mpiReplicaSpecs\":{"
             "\"Launcher\":{\"replicas\":1,\"template\":{\"spec\":{\"containers\":[{\"name\":\"main\","
             "\"image\":\"mpi-image\",\"command\":[\"mpirun\",\"-np\",\"2\",\"mpijob-worker\",\"train\"]}]}}},"
             "\"Worker\":{\"replicas\":2,\"template\":{\"spec\":{\"containers\":[{\"name\":\"main\","
             "\"image\":\"mpi-image\"}]}}}}}}",
             name, spec ? spec : "", run_policy ? run_policy : "");
    cJSON *job = cJSON_Parse(text);
    cr_assert_not_null(job);
    cr_assert_eq(kube_create(admin, &MPIJOB_RESOURCE_V2BETA1, NS, job, NULL, NULL), 0, "creating MPIJob %s", name);
    cJSON_Delete(job);
}

static void patch_job(const char *name, const char *merge_patch)
{
    struct kube_patch_opts po = {.type = KUBE_PATCH_MERGE};
    cr_assert_eq(kube_patch(admin, &MPIJOB_RESOURCE_V2BETA1, NS, name, merge_patch, &po, NULL, NULL), 0,
                 "patching MPIJob %s with %s", name, merge_patch);
}

static cJSON *get(const struct kube_resource *res, const char *name)
{
    cJSON *out = NULL;
    if (kube_get(admin, res, NS, name, &out, NULL) != 0) {
        cJSON_Delete(out);
        return NULL;
    }
    return out;
}

static bool exists(const struct kube_resource *res, const char *name)
{
    return kube_get(admin, res, NS, name, NULL, NULL) == 0;
}

/* The job's status as text, for failure messages (a static buffer). */
static const char *status_text(const char *name)
{
    static char out[4096];
    cJSON *job = get(&MPIJOB_RESOURCE_V2BETA1, name);
    char *text = job ? cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(job, "status")) : NULL;
    snprintf(out, sizeof(out), "%s", text ? text : "(no status)");
    free(text);
    cJSON_Delete(job);
    return out;
}

/* ---- waiting for what the operator does ------------------------------------------------------ */

typedef bool (*check_fn)(const char *name, const void *arg);

struct expectation {
    check_fn check;
    const char *name;
    const void *arg;
};

static bool expectation_holds(void *ctx)
{
    const struct expectation *e = ctx;
    return e->check(e->name, e->arg);
}

/* Waits until check holds for the job (WAIT_MS, scaled); fails the test saying what was wanted,
 * with the job's status as it is then. */
static void expect(check_fn check, const char *name, const void *arg, const char *what)
{
    struct expectation e = {check, name, arg};
    cr_assert(test_wait_until(what, WAIT_MS, expectation_holds, &e, NULL), "MPIJob %s: %s; status %s", name, what,
              status_text(name));
}

/* The condition of `type` has status `want` ("True"/"False") on the job. */
static bool has_condition(const char *name, const char *type, const char *want)
{
    cJSON *job = get(&MPIJOB_RESOURCE_V2BETA1, name);
    bool found = test_kube_has_condition(job, type, want, NULL);
    cJSON_Delete(job);
    return found;
}

struct want_condition {
    const char *type, *status;
};

static bool condition_check(const char *name, const void *arg)
{
    const struct want_condition *w = arg;
    return has_condition(name, w->type, w->status);
}

static void expect_condition(const char *name, const char *type, const char *status)
{
    struct want_condition w = {type, status};
    char what[128];
    snprintf(what, sizeof(what), "condition %s=%s", type, status);
    expect(condition_check, name, &w, what);
}

/* status.replicaStatuses.<role> is there with these counts (Ready is not compared: the reference
 * operator's tests do not count it). */
struct want_replicas {
    const char *role;
    long long active, succeeded, failed;
};

static bool replicas_check(const char *name, const void *arg)
{
    const struct want_replicas *w = arg;
    cJSON *job = get(&MPIJOB_RESOURCE_V2BETA1, name);
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(json_path(job, "status.replicaStatuses"), w->role);
    bool ok = cJSON_IsObject(r) && json_int(r, "active", 0) == w->active &&
              json_int(r, "succeeded", 0) == w->succeeded && json_int(r, "failed", 0) == w->failed;
    cJSON_Delete(job);
    return ok;
}

static void expect_replicas(const char *name, const char *role, long long active, long long succeeded,
                            long long failed)
{
    struct want_replicas w = {role, active, succeeded, failed};
    char what[128];
    snprintf(what, sizeof(what), "replicaStatuses.%s active %lld succeeded %lld failed %lld", role, active, succeeded,
             failed);
    expect(replicas_check, name, &w, what);
}

/* The Events recorded for the MPIJob with this reason and type, counted with their repeats. */
static int count_events(const char *name, const char *reason, const char *type)
{
    event_recorder_flush(recorder);
    char selector[256];
    snprintf(selector, sizeof(selector), "involvedObject.kind=MPIJob,involvedObject.name=%s,reason=%s,type=%s",
             name, reason, type);
    return test_kube_count_events(admin, NS, selector);
}

struct want_event {
    const char *reason, *type;
};

static bool event_check(const char *name, const void *arg)
{
    const struct want_event *w = arg;
    return count_events(name, w->reason, w->type) > 0;
}

static void expect_event(const char *name, const char *reason, const char *type)
{
    struct want_event w = {reason, type};
    char what[128];
    snprintf(what, sizeof(what), "a %s event %s", type, reason);
    expect(event_check, name, &w, what);
}

/* The pods of the job in a role, listed by the operator's labels (caller frees). */
static cJSON *pods_of(const char *name, const char *role)
{
    char selector[256];
    snprintf(selector, sizeof(selector), "training.kubeflow.org/job-name=%s,training.kubeflow.org/job-role=%s", name,
             role);
    struct kube_list_opts lo = {.label_selector = selector};
    cJSON *items = NULL;
    cr_assert_eq(kube_list_all(admin, &KUBE_PODS, NS, &lo, &items, NULL, NULL), 0);
    return items;
}

static int count_workers(const char *name)
{
    cJSON *items = pods_of(name, "worker");
    int n = cJSON_GetArraySize(items);
    cJSON_Delete(items);
    return n;
}

/* Everything the operator makes for a job: Service, ConfigMap, Secret, `workers` worker pods,
 * the launcher Job and, with `group`, the PodGroup. */
struct want_objects {
    int workers;
    const struct kube_resource *group;
    char problem[160];
};

static bool objects_check(const char *name, const void *arg)
{
    struct want_objects *w = (struct want_objects *)arg;
    char n[128];
    if (!exists(&KUBE_SERVICES, name)) {
        snprintf(w->problem, sizeof(w->problem), "no Service %s", name);
        return false;
    }
    snprintf(n, sizeof(n), "%s-config", name);
    if (!exists(&KUBE_CONFIGMAPS, n)) {
        snprintf(w->problem, sizeof(w->problem), "no ConfigMap %s", n);
        return false;
    }
    snprintf(n, sizeof(n), "%s-ssh", name);
    if (!exists(&KUBE_SECRETS, n)) {
        snprintf(w->problem, sizeof(w->problem), "no Secret %s", n);
        return false;
    }
    int have = count_workers(name);
    if (have != w->workers) {
        snprintf(w->problem, sizeof(w->problem), "%d workers, want %d", have, w->workers);
        return false;
    }
    snprintf(n, sizeof(n), "%s-launcher", name);
    if (!exists(&KUBE_JOBS, n)) {
        snprintf(w->problem, sizeof(w->problem), "no launcher Job %s", n);
        return false;
    }
    if (w->group && !exists(w->group, name)) {
        snprintf(w->problem, sizeof(w->problem), "no PodGroup %s in %s", name, w->group->group);
        return false;
    }
    return true;
}

static void expect_objects(const char *name, int workers, const struct kube_resource *group)
{
    struct want_objects w = {.workers = workers, .group = group};
    char what[128];
    snprintf(what, sizeof(what), "its objects, %d workers", workers);
    struct expectation e = {objects_check, name, &w};
    cr_assert(test_wait_until(what, WAIT_MS, expectation_holds, &e, NULL), "MPIJob %s: %s", name, w.problem);
}

static bool launcher_suspended(const char *name)
{
    char n[128];
    snprintf(n, sizeof(n), "%s-launcher", name);
    cJSON *lj = get(&KUBE_JOBS, n);
    bool s = json_bool(lj, "spec.suspend", false);
    cJSON_Delete(lj);
    return s;
}

static bool suspended_check(const char *name, const void *arg)
{
    return launcher_suspended(name) == *(const bool *)arg;
}

static void expect_launcher_suspended(const char *name, bool suspended)
{
    expect(suspended_check, name, &suspended, suspended ? "the launcher Job suspended" : "the launcher Job not suspended");
}

/* A job just created: announced, its objects made (with the PodGroup in `group`, when not NULL),
 * Created, and no pod counted yet. */
static void expect_just_created(const char *name, const struct kube_resource *group)
{
    expect_event(name, "MPIJobCreated", "Normal");
    expect_objects(name, 2, group);
    expect_condition(name, "Created", "True");
    expect_replicas(name, "Launcher", 0, 0, 0);
    expect_replicas(name, "Worker", 0, 0, 0);
}

/* ---- the kubelet --------------------------------------------------------------------------- */

/* Writes a pod's phase and its Ready condition through pods/status. A failed pod's container
 * ends with exit code 1. */
static void set_pod(const char *pod, const char *phase, bool ready)
{
    char patch[1024];
    const char *failed = strcmp(phase, "Failed") == 0
                             ? ",\"containerStatuses\":[{\"name\":\"main\",\"image\":\"mpi-image\",\"imageID\":\"\","
                               "\"ready\":false,\"restartCount\":0,\"state\":{\"terminated\":{\"exitCode\":1,"
                               "\"reason\":\"Error\"}}}]"
                             : "";
    snprintf(patch, sizeof(patch),
             "{\"status\":{\"phase\":\"%s\",\"conditions\":[{\"type\":\"Ready\",\"status\":\"%s\"}]%s}}", phase,
             ready ? "True" : "False", failed);
    struct kube_patch_opts po = {.type = KUBE_PATCH_MERGE, .subresource = "status"};
    cr_assert_eq(kube_patch(admin, &KUBE_PODS, NS, pod, patch, &po, NULL, NULL), 0, "pod %s phase %s", pod, phase);
}

static void set_workers(const char *name, const char *phase, bool ready)
{
    for (int i = 0; i < 2; i++) {
        char pod[128];
        snprintf(pod, sizeof(pod), "%s-worker-%d", name, i);
        set_pod(pod, phase, ready);
    }
}

/* ---- the Job controller -------------------------------------------------------------------- */

/* The name of a launcher pod the launcher Job controls, neither finished nor being deleted, other
 * than `other` (may be NULL); copied into out. */
static bool find_launcher_pod(const char *name, const char *other, char *out, size_t len)
{
    char lname[128];
    snprintf(lname, sizeof(lname), "%s-launcher", name);
    cJSON *items = pods_of(name, "launcher");
    bool found = false;
    const cJSON *p;
    cJSON_ArrayForEach(p, items) {
        const char *pod = json_string(p, "metadata.name"), *phase = json_string(p, "status.phase");
        if (!pod || (other && strcmp(pod, other) == 0) || json_path(p, "metadata.deletionTimestamp"))
            continue;
        if (phase && (strcmp(phase, "Succeeded") == 0 || strcmp(phase, "Failed") == 0))
            continue;
        const cJSON *ref;
        cJSON_ArrayForEach(ref, json_path(p, "metadata.ownerReferences")) {
            const char *kind = json_string(ref, "kind"), *owner = json_string(ref, "name");
            if (json_bool(ref, "controller", false) && kind && owner && strcmp(kind, "Job") == 0 &&
                strcmp(owner, lname) == 0 && !found) {
                snprintf(out, len, "%s", pod);
                found = true;
            }
        }
    }
    cJSON_Delete(items);
    return found;
}

struct launcher_pod {
    const char *other;
    char name[256];
};

static bool launcher_pod_check(const char *name, const void *arg)
{
    struct launcher_pod *lp = (struct launcher_pod *)arg;
    return find_launcher_pod(name, lp->other, lp->name, sizeof(lp->name));
}

/* A launcher pod of the job's launcher Job (not `other`): on a real control plane the one the Job
 * controller made; on the double the test makes it, as the Job controller would, from the Job's
 * template labels, controlled by the Job. */
static void launcher_pod(const char *name, const char *other, char *out, size_t len)
{
    char lname[128];
    snprintf(lname, sizeof(lname), "%s-launcher", name);
    if (srv.is_double) {
        cJSON *lj = get(&KUBE_JOBS, lname);
        cr_assert_not_null(lj, "launcher Job %s", lname);
        cJSON *pod = cJSON_CreateObject();
        cJSON_AddStringToObject(pod, "apiVersion", "v1");
        cJSON_AddStringToObject(pod, "kind", "Pod");
        cJSON *meta = cJSON_AddObjectToObject(pod, "metadata");
        snprintf(out, len, "%s-%d", lname, ++launcher_pods_made);
        cJSON_AddStringToObject(meta, "name", out);
        cJSON_AddItemToObject(meta, "labels", cJSON_Duplicate(json_path(lj, "spec.template.metadata.labels"), true));
        cJSON *refs = cJSON_AddArrayToObject(meta, "ownerReferences");
        cJSON *ref = cJSON_CreateObject();
        cJSON_AddStringToObject(ref, "apiVersion", "batch/v1");
        cJSON_AddStringToObject(ref, "kind", "Job");
        cJSON_AddStringToObject(ref, "name", lname);
        cJSON_AddStringToObject(ref, "uid", json_string(lj, "metadata.uid"));
        cJSON_AddBoolToObject(ref, "controller", true);
        cJSON_AddBoolToObject(ref, "blockOwnerDeletion", true);
        cJSON_AddItemToArray(refs, ref);
        cJSON_AddItemToObject(pod, "spec", cJSON_Duplicate(json_path(lj, "spec.template.spec"), true));
        cJSON_Delete(lj);
        cr_assert_eq(kube_create(admin, &KUBE_PODS, NS, pod, NULL, NULL), 0, "creating launcher pod %s", out);
        cJSON_Delete(pod);
        return;
    }
    struct launcher_pod lp = {.other = other};
    expect(launcher_pod_check, name, &lp, "a launcher pod made by the Job controller");
    snprintf(out, len, "%s", lp.name);
}

/* The launcher runs (its pod from the Job controller, Running and Ready) next to two Running
 * workers: announced and counted. The pod's name goes to pod. */
static void launcher_runs(const char *name, char *pod, size_t len)
{
    launcher_pod(name, NULL, pod, len);
    set_pod(pod, "Running", true);
    expect_event(name, "MPIJobRunning", "Normal");
    expect_replicas(name, "Launcher", 1, 0, 0);
    expect_replicas(name, "Worker", 2, 0, 0);
}

/* The launcher Job ends: on the double the test writes what the Job controller writes; on a real
 * control plane the Job controller does it, from the pod phase the test wrote. */
static void launcher_job_ends(const char *name, bool complete)
{
    if (!srv.is_double)
        return;
    char lname[128];
    snprintf(lname, sizeof(lname), "%s-launcher", name);
    test_finish_job(admin, NS, lname, complete ? "Complete" : "Failed", complete ? "CompletionsReached"
                                                                                 : "BackoffLimitExceeded");
}

/* ---- the scenarios ------------------------------------------------------------------------- */

/* A job runs to success: created with its objects, Running once the launcher and both workers run,
 * Succeeded when the launcher Job completes; cleanPodPolicy Running then removes the workers. */
Test(scenarios, success)
{
    begin(NULL);
    create_job("job", NULL, NULL);
    expect_just_created("job", NULL);

    set_workers("job", "Running", true);
    expect_replicas("job", "Worker", 2, 0, 0);

    char pod[256];
    launcher_runs("job", pod, sizeof(pod));
    expect_condition("job", "Running", "True");

    set_pod(pod, "Succeeded", false);
    launcher_job_ends("job", true);
    expect_event("job", "MPIJobSucceeded", "Normal");
    expect_objects("job", 0, NULL);
    expect_replicas("job", "Launcher", 0, 1, 0);
    expect_replicas("job", "Worker", 0, 0, 0);
    expect_condition("job", "Succeeded", "True");
    cr_assert_eq(count_events("job", "MPIJobCreated", "Normal"), 1, "MPIJobCreated once");
    cr_assert_eq(count_events("job", "MPIJobRunning", "Normal"), 1, "MPIJobRunning once");
}

static bool workers_check(const char *name, const void *arg)
{
    return count_workers(name) == *(const int *)arg;
}

static void expect_workers(const char *name, int n)
{
    char what[64];
    snprintf(what, sizeof(what), "%d workers", n);
    expect(workers_check, name, &n, what);
}

static bool ready_check(const char *name, const void *arg)
{
    cJSON *job = get(&MPIJOB_RESOURCE_V2BETA1, name);
    bool ok = json_int(job, "status.replicaStatuses.Worker.ready", 0) == *(const long long *)arg;
    cJSON_Delete(job);
    return ok;
}

static void expect_ready_workers(const char *name, long long ready)
{
    char what[64];
    snprintf(what, sizeof(what), "replicaStatuses.Worker.ready %lld", ready);
    expect(ready_check, name, &ready, what);
}

/* launcherCreationPolicy WaitForWorkersReady: Running workers are not enough, the launcher Job
 * comes once they are Ready. */
Test(scenarios, wait_for_workers_ready)
{
    begin(NULL);
    create_job("job", NULL, "\"launcherCreationPolicy\":\"WaitForWorkersReady\",");
    expect_event("job", "MPIJobCreated", "Normal");
    expect_condition("job", "Created", "True");
    expect_replicas("job", "Worker", 0, 0, 0);
    expect_workers("job", 2);

    set_workers("job", "Running", false);
    expect_replicas("job", "Worker", 2, 0, 0);
    /* One worker Ready: the status that counts it comes from a pass after the one that saw both
     * Running but not Ready (a job's passes run one at a time), which would have made the
     * launcher then. */
    set_pod("job-worker-0", "Running", true);
    expect_ready_workers("job", 1);
    cr_assert(!exists(&KUBE_JOBS, "job-launcher"), "no launcher Job while the workers are not Ready");

    set_workers("job", "Running", true);
    expect_objects("job", 2, NULL);
    expect_replicas("job", "Launcher", 0, 0, 0);
    expect_replicas("job", "Worker", 2, 0, 0);

    char pod[256];
    launcher_runs("job", pod, sizeof(pod));
}

/* ---- WaitForWorkersReady across a suspend ---------------------------------------------------- */

#define HOLD "test.mpijob-operator.io/hold"

/* A finalizer of the test's on a pod (or none): its deletion then waits for the test. */
static void hold_pod(const char *pod, bool hold)
{
    struct kube_patch_opts po = {.type = KUBE_PATCH_MERGE};
    cr_assert_eq(kube_patch(admin, &KUBE_PODS, NS, pod,
                            hold ? "{\"metadata\":{\"finalizers\":[\"" HOLD "\"]}}" : "{\"metadata\":{\"finalizers\":null}}",
                            &po, NULL, NULL),
                 0, "%s the finalizer of pod %s", hold ? "setting" : "removing", pod);
}

static bool pod_deleting_check(const char *pod, const void *arg)
{
    cJSON *p = get(&KUBE_PODS, pod);
    bool deleting = json_path(p, "metadata.deletionTimestamp") != NULL;
    cJSON_Delete(p);
    return deleting;
}

static void expect_pod_deleting(const char *pod)
{
    expect(pod_deleting_check, pod, NULL, "the pod being deleted (held by the test's finalizer)");
}

static void uid_of_pod(const char *pod, char *out, size_t len)
{
    cJSON *p = get(&KUBE_PODS, pod);
    const char *uid = json_string(p, "metadata.uid");
    snprintf(out, len, "%s", uid ? uid : "");
    cJSON_Delete(p);
    cr_assert(*out, "pod %s has a uid", pod);
}

/* The pod exists under a uid other than old_uid, not being deleted: a new worker. */
static bool new_pod_check(const char *pod, const void *old_uid)
{
    cJSON *p = get(&KUBE_PODS, pod);
    const char *uid = json_string(p, "metadata.uid");
    bool fresh = uid && strcmp(uid, (const char *)old_uid) != 0 && !json_path(p, "metadata.deletionTimestamp");
    cJSON_Delete(p);
    return fresh;
}

static void expect_new_pod(const char *pod, const char *old_uid)
{
    char what[160];
    snprintf(what, sizeof(what), "a new pod %s (not uid %s)", pod, old_uid);
    expect(new_pod_check, pod, old_uid, what);
}

/* discover_hosts.sh in the job's ConfigMap names every one of `hosts` (NULL-ended). */
static bool discover_hosts_check(const char *name, const void *arg)
{
    char cm[128];
    snprintf(cm, sizeof(cm), "%s-config", name);
    cJSON *c = get(&KUBE_CONFIGMAPS, cm);
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(json_path(c, "data"), "discover_hosts.sh");
    const char *script = cJSON_IsString(d) ? d->valuestring : NULL;
    bool all = script != NULL;
    for (const char *const *h = arg; all && *h; h++)
        all = strstr(script, *h) != NULL;
    cJSON_Delete(c);
    return all;
}

static bool observed_generation_check(const char *name, const void *arg)
{
    cJSON *job = get(&MPIJOB_RESOURCE_V2BETA1, name);
    bool seen = json_int(job, "status.observedGeneration", -1) >= *(const long long *)arg;
    cJSON_Delete(job);
    return seen;
}

/* A pass of the operator has run since this call began: the spec's generation moves (a field only
 * the operator reads, ttlSecondsAfterFinished), and status.observedGeneration follows it, which is
 * the first write of a pass. Every action of the passes before it is done: a job's passes run one
 * at a time, in order. */
static long long ttl_bumps;
static void expect_a_later_pass(const char *name)
{
    char patch[160];
    snprintf(patch, sizeof(patch), "{\"spec\":{\"runPolicy\":{\"ttlSecondsAfterFinished\":%lld}}}", 3600 + ++ttl_bumps);
    patch_job(name, patch);
    cJSON *job = get(&MPIJOB_RESOURCE_V2BETA1, name);
    long long generation = json_int(job, "metadata.generation", -1);
    cJSON_Delete(job);
    cr_assert_gt(generation, 0);
    expect(observed_generation_check, name, &generation, "status.observedGeneration after the spec changed");
}

/* The launcher has not started: its Job stays suspended, and no launcher pod runs or waits (on a
 * real control plane, none made by the Job controller; one being deleted does not count). */
static void expect_launcher_held(const char *name, const char *when)
{
    cr_assert(launcher_suspended(name), "%s: the launcher Job stays suspended; status %s", when, status_text(name));
    char pod[256];
    cr_assert(!find_launcher_pod(name, NULL, pod, sizeof(pod)), "%s: launcher pod %s exists; status %s", when, pod,
              status_text(name));
}

/* TestMPIJobWaitWorkers with the suspend and resume of SPEC.md: a job of 2 workers under
 * WaitForWorkersReady runs, is suspended while its workers are held in Terminating (Running and
 * Ready, a finalizer of the test's on them) and resumed before they are gone. Those workers are
 * of the earlier run: the launcher waits for the new ones to be Ready, through every step of their
 * coming, and the Running condition, the counts and discover_hosts.sh leave the old ones out. */
Test(scenarios, wait_for_workers_ready_after_a_resume)
{
    begin(NULL);
    create_job("job", NULL, "\"launcherCreationPolicy\":\"WaitForWorkersReady\",");
    expect_workers("job", 2);
    set_workers("job", "Running", true);
    expect_objects("job", 2, NULL);
    char pod[256];
    launcher_runs("job", pod, sizeof(pod));
    expect_condition("job", "Running", "True");

    char old0[64], old1[64];
    uid_of_pod("job-worker-0", old0, sizeof(old0));
    uid_of_pod("job-worker-1", old1, sizeof(old1));
    hold_pod("job-worker-0", true);
    hold_pod("job-worker-1", true);
    patch_job("job", "{\"spec\":{\"runPolicy\":{\"suspend\":true}}}");
    expect_condition("job", "Suspended", "True");
    expect_pod_deleting("job-worker-0");
    expect_pod_deleting("job-worker-1");
    expect_launcher_suspended("job", true);
    if (srv.is_double) /* the Job controller deletes the pods of a suspended Job */
        cr_assert_eq(kube_delete(admin, &KUBE_PODS, NS, pod, NULL, NULL, NULL), 0);
    expect_replicas("job", "Worker", 0, 0, 0);
    expect_ready_workers("job", 0);

    /* Resumed while both old workers are Terminating, Running and Ready. */
    patch_job("job", "{\"spec\":{\"runPolicy\":{\"suspend\":false}}}");
    expect_condition("job", "Suspended", "False");
    expect_a_later_pass("job");
    expect_launcher_held("job", "resumed, both old workers Terminating and Ready");
    cr_assert(!has_condition("job", "Running", "True"), "not Running: %s", status_text("job"));
    expect_ready_workers("job", 0);

    /* One old worker goes; its successor comes and is Ready beside the other old one. */
    hold_pod("job-worker-0", false);
    expect_new_pod("job-worker-0", old0);
    set_pod("job-worker-0", "Running", true);
    expect_ready_workers("job", 1);
    expect_a_later_pass("job");
    expect_launcher_held("job", "one new worker Ready, the other old one Terminating and Ready");

    /* The other goes; its successor is Running but not Ready: discover_hosts.sh lists both new
     * workers, and the launcher still waits. */
    hold_pod("job-worker-1", false);
    expect_new_pod("job-worker-1", old1);
    set_pod("job-worker-1", "Running", false);
    static const char *const both[] = {"job-worker-0", "job-worker-1", NULL};
    expect(discover_hosts_check, "job", both, "discover_hosts.sh listing both new workers");
    expect_replicas("job", "Worker", 2, 0, 0);
    expect_a_later_pass("job");
    expect_launcher_held("job", "both new workers Running, one not Ready");

    /* Both Ready: the launcher starts. */
    set_pod("job-worker-1", "Running", true);
    expect_launcher_suspended("job", false);
    char again[256];
    launcher_pod("job", pod, again, sizeof(again));
    set_pod(again, "Running", true);
    expect_condition("job", "Running", "True");
}

static bool start_time_check(const char *name, const void *arg)
{
    cJSON *job = get(&MPIJOB_RESOURCE_V2BETA1, name);
    bool has = json_string(job, "status.startTime") != NULL;
    cJSON_Delete(job);
    return has == *(const bool *)arg;
}

/* Created suspended: no workers, a suspended launcher Job, no startTime. Resumed: workers, the
 * launcher runs, startTime set. Suspended again while running: workers gone, launcher suspended,
 * Running False. */
Test(scenarios, resuming_and_suspending)
{
    begin(NULL);
    create_job("job", "\"suspend\":true,", NULL);
    expect_event("job", "MPIJobCreated", "Normal");
    expect_event("job", "MPIJobSuspended", "Normal");
    expect_objects("job", 0, NULL);
    expect_replicas("job", "Launcher", 0, 0, 0);
    expect_replicas("job", "Worker", 0, 0, 0);
    expect_condition("job", "Created", "True");
    expect_condition("job", "Suspended", "True");
    cr_assert(launcher_suspended("job"), "the launcher Job is suspended");
    bool no = false, yes = true;
    cr_assert(start_time_check("job", &no), "no startTime while suspended: %s", status_text("job"));

    patch_job("job", "{\"spec\":{\"runPolicy\":{\"suspend\":false}}}");
    expect_event("job", "MPIJobResumed", "Normal");
    expect_objects("job", 2, NULL);
    expect_launcher_suspended("job", false);
    expect(start_time_check, "job", &yes, "startTime once resumed");
    expect_condition("job", "Suspended", "False");
    expect_replicas("job", "Launcher", 0, 0, 0);
    expect_replicas("job", "Worker", 0, 0, 0);

    set_workers("job", "Running", true);
    char pod[256];
    launcher_runs("job", pod, sizeof(pod));

    patch_job("job", "{\"spec\":{\"runPolicy\":{\"suspend\":true}}}");
    if (srv.is_double) /* the Job controller deletes the pods of a suspended Job */
        cr_assert_eq(kube_delete(admin, &KUBE_PODS, NS, pod, NULL, NULL, NULL), 0);
    expect_objects("job", 0, NULL);
    expect_launcher_suspended("job", true);
    expect_replicas("job", "Launcher", 0, 0, 0);
    expect_replicas("job", "Worker", 0, 0, 0);
    expect_condition("job", "Suspended", "True");
    expect_condition("job", "Running", "False");
}

/* A failed launcher pod is a retry of the launcher Job, not the end of the MPIJob; the Job that
 * gives up (backoffLimit 1: the second failure) fails it, and the Running workers go. */
Test(scenarios, failure)
{
    begin(NULL);
    create_job("job", "\"backoffLimit\":1,", NULL);
    expect_objects("job", 2, NULL);
    set_workers("job", "Running", true);
    char pod[256];
    launcher_pod("job", NULL, pod, sizeof(pod));
    set_pod(pod, "Running", true);
    expect_event("job", "MPIJobRunning", "Normal");

    set_pod(pod, "Failed", false);
    if (srv.is_double) { /* the Job controller counts the failure */
        struct kube_patch_opts po = {.type = KUBE_PATCH_MERGE, .subresource = "status"};
        cr_assert_eq(kube_patch(admin, &KUBE_JOBS, NS, "job-launcher", "{\"status\":{\"failed\":1}}", &po, NULL, NULL),
                     0);
    }
    expect_replicas("job", "Launcher", 0, 0, 1);
    expect_replicas("job", "Worker", 2, 0, 0);
    cr_assert(!has_condition("job", "Failed", "True"), "a failed launcher pod alone does not fail the job: %s",
              status_text("job"));

    if (!srv.is_double) {
        /* The Job controller retries: its second pod fails too, past backoffLimit 1. */
        char retry[256];
        launcher_pod("job", pod, retry, sizeof(retry));
        cr_log_info("the Job controller's second launcher pod: %s", retry);
        set_pod(retry, "Failed", false);
    }
    launcher_job_ends("job", false);
    expect_event("job", "MPIJobFailed", "Warning");
    expect_condition("job", "Failed", "True");
    expect_objects("job", 0, NULL);
    expect_replicas("job", "Worker", 0, 0, 0);
    cJSON *job = get(&MPIJOB_RESOURCE_V2BETA1, "job");
    cr_assert_geq(json_int(job, "status.replicaStatuses.Launcher.failed", 0), 1, "%s", status_text("job"));
    cr_assert_not_null(json_string(job, "status.completionTime"));
    cJSON_Delete(job);
}

struct want_podgroup {
    const struct kube_resource *group;
    long long min_member, timeout; /* -1: not compared */
    const char *queue;             /* NULL: not compared */
};

static bool podgroup_check(const char *name, const void *arg)
{
    const struct want_podgroup *w = arg;
    cJSON *pg = get(w->group, name);
    const char *queue = json_string(pg, "spec.queue");
    bool ok = pg && (w->min_member < 0 || json_int(pg, "spec.minMember", -1) == w->min_member) &&
              (w->timeout < 0 || json_int(pg, "spec.scheduleTimeoutSeconds", -1) == w->timeout) &&
              (!w->queue || (queue && strcmp(queue, w->queue) == 0));
    cJSON_Delete(pg);
    return ok;
}

static void expect_podgroup(const char *name, const struct want_podgroup *w)
{
    cJSON *pg = NULL;
    struct expectation e = {podgroup_check, name, w};
    bool ok = test_wait_until("the PodGroup", WAIT_MS, expectation_holds, &e, NULL);
    char *text = NULL;
    if (!ok) {
        pg = get(w->group, name);
        text = pg ? cJSON_PrintUnformatted(json_path(pg, "spec")) : NULL;
    }
    cr_assert(ok, "PodGroup %s (%s): minMember %lld, scheduleTimeoutSeconds %lld, queue %s; spec %s", name,
              w->group->group, w->min_member, w->timeout, w->queue ? w->queue : "-", text ? text : "(none)");
    cJSON_Delete(pg);
}

/* Gang scheduling with the scheduler-plugins coscheduler (any scheduler name but "volcano"; the
 * reference tests use the default scheduler's): the PodGroup comes with the job's objects and
 * follows schedulingPolicy.scheduleTimeoutSeconds. */
Test(scenarios, gang_with_scheduler_plugins)
{
    begin("default-scheduler");
    create_job("job", "\"schedulingPolicy\":{\"scheduleTimeoutSeconds\":900},", NULL);
    expect_just_created("job", &PODGROUP_SCHED_PLUGINS);
    struct want_podgroup w = {&PODGROUP_SCHED_PLUGINS, 3, 900, NULL};
    expect_podgroup("job", &w);

    patch_job("job", "{\"spec\":{\"runPolicy\":{\"schedulingPolicy\":{\"scheduleTimeoutSeconds\":10}}}}");
    w.timeout = 10;
    expect_podgroup("job", &w);
}

/* Gang scheduling with Volcano: the PodGroup follows schedulingPolicy.minAvailable and queue. */
Test(scenarios, gang_with_volcano)
{
    begin("volcano");
    create_job("job-by-volcano", "\"schedulingPolicy\":{\"queue\":\"default\"},", NULL);
    expect_just_created("job-by-volcano", &PODGROUP_VOLCANO);
    struct want_podgroup w = {&PODGROUP_VOLCANO, 3, -1, "default"};
    expect_podgroup("job-by-volcano", &w);

    patch_job("job-by-volcano",
              "{\"spec\":{\"runPolicy\":{\"schedulingPolicy\":{\"minAvailable\":2,\"queue\":\"queue-for-mpijob\"}}}}");
    w.min_member = 2;
    w.queue = "queue-for-mpijob";
    expect_podgroup("job-by-volcano", &w);
}

/* runPolicy.managedBy names another controller (MultiKueue): the operator leaves the job alone,
 * no status, no objects, while it serves a job of its own next to it. With one reconcile thread
 * the jobs are taken in the order of their watch events: once ours is served, the foreign job
 * created before it has had its turn. */
Test(scenarios, managed_externally)
{
    begin_with(1, NULL);
    create_job("job", "\"managedBy\":\"kueue.x-k8s.io/multikueue\",", NULL);
    create_job("ours", NULL, NULL);
    expect_objects("ours", 2, NULL);
    expect_condition("ours", "Created", "True");

    cJSON *job = get(&MPIJOB_RESOURCE_V2BETA1, "job");
    cr_assert_not_null(job);
    const cJSON *status = cJSON_GetObjectItemCaseSensitive(job, "status");
    cr_assert(!status || (cJSON_IsObject(status) && !status->child), "no status at all: %s", status_text("job"));
    cr_assert_null(json_path(job, "status.conditions"), "not even Created");
    cr_assert_null(json_path(job, "status.startTime"));
    cJSON_Delete(job);
    cr_assert(!exists(&KUBE_JOBS, "job-launcher"), "no launcher Job");
    cr_assert(!exists(&KUBE_SERVICES, "job"), "no Service");
    cr_assert_eq(count_workers("job"), 0, "no workers");
    cr_assert_eq(count_events("job", "MPIJobCreated", "Normal"), 0, "no event");
}
