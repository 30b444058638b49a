/* --gang-scheduling workload: kube-scheduler's own gang scheduling through the Workload API
 * (scheduling.k8s.io/v1alpha2, Kubernetes 1.36; docs/internals/gang-scheduling.md). The objects,
 * their order and their lifecycle on any server that serves the API: the double in its 1.36 mode,
 * a real 1.36 control plane started with the API's runtime-config and feature gates (the
 * garbage collector and the PodGroup finalizer's controller real too). Elsewhere (1.32) each test
 * skips, saying why. The placement verdicts of the real scheduler are tests/e2e/test_gang.py's. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kube/client.h"
#include "kube/discovery.h"
#include "mpijob/builders.h"
#include "mpijob/controller.h"
#include "support/apiserver.h"
#include "support/controller_env.h"
#include "support/deadline.h"
#include "support/kube_test.h"
#include "support/kubelet_logs.h"
#include "support/kube_wait.h"
#include "support/request_log.h"
#include "util/json.h"

static struct test_controller_env env;

#define WAIT_MS 60000

static void teardown(void) { test_controller_env_stop(&env); }

TestSuite(gang_workload, .fini = teardown, .timeout = 300);

/* The server with the Workload API when it can have it; skips the test when it does not serve
 * it (a real 1.32). */
static void start_or_skip(void)
{
    test_controller_env_start_workload_api(&env);
    struct kube_status st = {.retry_after_s = -1};
    int served = kube_resource_served(env.admin, &WORKLOADS, &st);
    kube_status_clear(&st);
    if (served == 0) {
        /* The RBAC rules on these cannot be exercised on this server: say so to the coverage check
         * (tests/apiserver/rbac_coverage.py), which would otherwise call them unused. */
        const char *usage = getenv("MPIJOB_TEST_RBAC_USAGE");
        FILE *f = usage && *usage ? fopen(usage, "a") : NULL;
        if (f) {
            fputs("unserved scheduling.k8s.io workloads\nunserved scheduling.k8s.io podgroups\n", f);
            fclose(f);
        }
        cr_skip_test("needs a server with scheduling.k8s.io/v1alpha2 (Kubernetes 1.36 with the Workload API); "
                     "KUBEBUILDER_ASSETS holds an older one");
    }
    cr_assert_eq(served, 1, "discovery of scheduling.k8s.io/v1alpha2 failed");
}

static void create_job(const char *name, const char *extra_spec)
{
    cJSON *job = test_mpijob(name, extra_spec);
    cr_assert_eq(kube_create(env.admin, &MPIJOB_RESOURCE_V2BETA1, "default", job, NULL, NULL), 0);
    cJSON_Delete(job);
}

static cJSON *get(const struct kube_resource *res, const char *name)
{
    cJSON *obj = test_kube_get(env.admin, res, "default", name);
    cr_assert_not_null(obj, "%s %s not found", res->kind, name);
    return obj;
}

/* The pods of MPIJob `job` (role "worker" or "launcher"; NULL: all), as the server lists them. */
static cJSON *job_pods(const char *job, const char *role)
{
    char sel[200];
    snprintf(sel, sizeof(sel), "%s=%s%s%s%s", LABEL_JOB_NAME, job, role ? "," : "", role ? LABEL_JOB_ROLE "=" : "",
             role ? role : "");
    struct kube_list_opts o = {.label_selector = sel};
    cJSON *items = NULL;
    cr_assert_eq(kube_list_all(env.admin, &KUBE_PODS, "default", &o, &items, NULL, NULL), 0);
    return items;
}

static void set_suspend(const char *name, bool suspend)
{
    struct kube_patch_opts po = {.type = KUBE_PATCH_MERGE};
    cr_assert_eq(kube_patch(env.admin, &MPIJOB_RESOURCE_V2BETA1, "default", name,
                            suspend ? "{\"spec\":{\"runPolicy\":{\"suspend\":true}}}"
                                    : "{\"spec\":{\"runPolicy\":{\"suspend\":false}}}",
                            &po, NULL, NULL),
                 0);
}

/* The seq of the double's first 201 to a create on `path`; -1: none. */
static int first_create(const char *path)
{
    struct test_request_filter f = {.verb = "create", .path = path, .path_match = TEST_PATH_EXACT, .code = 201};
    int first = 0;
    int n = test_count_requests(&env.srv, 0, &f, &first, NULL);
    return n > 0 ? first : -1;
}

static void expect_owned_by(const cJSON *obj, const char *uid, const char *what)
{
    const cJSON *ref = cJSON_GetArrayItem(json_path(obj, "metadata.ownerReferences"), 0);
    const char *got = json_string(ref, "uid");
    cr_expect(got && strcmp(got, uid) == 0 && cJSON_IsTrue(cJSON_GetObjectItem(ref, "controller")),
              "%s is controlled by the MPIJob", what);
}

/* A Workload and a PodGroup owned by the MPIJob, made in that order before the pods, every gang
 * pod naming the group; suspend deletes both, resume makes both again, deletion of the MPIJob
 * takes them (the garbage collector, on a real control plane). */
Test(gang_workload, objects_order_and_lifecycle)
{
    start_or_skip();
    test_controller_env_run(&env, 2, GANG_SCHEDULER_WORKLOAD);
    create_job("gang", "\"placement\":{\"topologyKey\":\"example.com/rack\"},");
    cr_assert(test_kube_wait_exists(env.admin, &KUBE_JOBS, "default", "gang-launcher", WAIT_MS));
    cJSON *job = get(&MPIJOB_RESOURCE_V2BETA1, "gang");
    char uid[128];
    snprintf(uid, sizeof(uid), "%s", json_string(job, "metadata.uid"));
    cJSON_Delete(job);

    if (env.srv.is_double) {
        int wl = first_create("/apis/scheduling.k8s.io/v1alpha2/namespaces/default/workloads"),
            pg = first_create("/apis/scheduling.k8s.io/v1alpha2/namespaces/default/podgroups"),
            pod = first_create("/api/v1/namespaces/default/pods");
        cr_assert(wl > 0 && pg > wl && pod > pg, "Workload (%d), then PodGroup (%d), then the pods (%d)", wl, pg, pod);
    }
    cJSON *wl = get(&WORKLOADS, "gang");
    expect_owned_by(wl, uid, "the Workload");
    cr_expect_str_eq(json_string(wl, "spec.controllerRef.kind"), "MPIJob");
    cr_expect_str_eq(json_string(wl, "spec.controllerRef.name"), "gang");
    const cJSON *tmpl = cJSON_GetArrayItem(json_path(wl, "spec.podGroupTemplates"), 0);
    cr_expect_str_eq(json_string(tmpl, "name"), WORKLOAD_GANG_TEMPLATE);
    cr_expect_eq(json_int(tmpl, "schedulingPolicy.gang.minCount", -1), 3, "two workers and the launcher");
    cJSON_Delete(wl);

    cJSON *pg = get(&PODGROUP_WORKLOAD_API, "gang");
    expect_owned_by(pg, uid, "the PodGroup");
    cr_expect_str_eq(json_string(pg, "spec.podGroupTemplateRef.workload.workloadName"), "gang");
    cr_expect_eq(json_int(pg, "spec.schedulingPolicy.gang.minCount", -1), 3);
    /* kept only where the server runs TopologyAwareWorkloadScheduling, which the tests turn on */
    const cJSON *key = cJSON_GetArrayItem(json_path(pg, "spec.schedulingConstraints.topology"), 0);
    cr_expect_str_eq(json_string(key, "key"), "example.com/rack");
    cJSON_Delete(pg);

    cJSON *pod = get(&KUBE_PODS, "gang-worker-1");
    cr_expect_str_eq(json_string(pod, "spec.schedulingGroup.podGroupName"), "gang");
    cJSON_Delete(pod);
    cJSON *lj = get(&KUBE_JOBS, "gang-launcher");
    cr_expect_str_eq(json_string(lj, "spec.template.spec.schedulingGroup.podGroupName"), "gang",
                     "created with the workers (AtStartup), the launcher is one of the gang");
    cJSON_Delete(lj);

    if (!env.srv.is_double) {
        /* WorkloadWithJob is on: once the Job controller has made the launcher's pod it has
         * synced the Job, and made no Workload of its own for it */
        struct test_deadline d = test_deadline_in(WAIT_MS);
        int pods = 0;
        do {
            cJSON *items = job_pods("gang", "launcher");
            pods = cJSON_GetArraySize(items);
            cJSON_Delete(items);
        } while (pods == 0 && test_deadline_poll_every(&d, 200));
        cr_assert_gt(pods, 0, "the Job controller made the launcher's pod within %s", test_deadline_text(&d));
        cJSON *all = NULL;
        cr_assert_eq(kube_list_all(env.admin, &WORKLOADS, "default", NULL, &all, NULL, NULL), 0);
        cr_expect_eq(cJSON_GetArraySize(all), 1, "one Workload, the operator's: none from the Job controller");
        cJSON_Delete(all);
    }

    set_suspend("gang", true);
    cr_assert(test_kube_wait_gone(env.admin, &PODGROUP_WORKLOAD_API, "default", "gang", WAIT_MS),
              "suspend deletes the PodGroup (its finalizer goes with the last pod naming it)");
    cr_assert(test_kube_wait_gone(env.admin, &WORKLOADS, "default", "gang", WAIT_MS), "and the Workload");
    set_suspend("gang", false);
    cr_assert(test_kube_wait_exists(env.admin, &WORKLOADS, "default", "gang", WAIT_MS), "resume makes it again");
    cr_assert(test_kube_wait_exists(env.admin, &PODGROUP_WORKLOAD_API, "default", "gang", WAIT_MS));
    cr_assert(test_kube_wait_exists(env.admin, &KUBE_PODS, "default", "gang-worker-0", WAIT_MS),
              "and the workers once the old group is gone");

    if (!env.srv.is_double) { /* the double runs no garbage collector */
        cr_assert_eq(kube_delete(env.admin, &MPIJOB_RESOURCE_V2BETA1, "default", "gang", NULL, NULL, NULL), 0);
        cr_assert(test_kube_wait_gone(env.admin, &WORKLOADS, "default", "gang", WAIT_MS),
                  "the garbage collector takes the Workload with the MPIJob");
        cr_assert(test_kube_wait_gone(env.admin, &PODGROUP_WORKLOAD_API, "default", "gang", WAIT_MS),
                  "and the PodGroup");
    }
}

/* WaitForWorkersReady: the gang is the workers; the launcher, made once they run, is no member. */
Test(gang_workload, waiting_for_workers_the_gang_is_the_workers)
{
    start_or_skip();
    test_controller_env_run(&env, 2, GANG_SCHEDULER_WORKLOAD);
    create_job("wait", "\"launcherCreationPolicy\":\"WaitForWorkersReady\",");
    cr_assert(test_kube_wait_exists(env.admin, &PODGROUP_WORKLOAD_API, "default", "wait", WAIT_MS));
    cJSON *pg = get(&PODGROUP_WORKLOAD_API, "wait");
    cr_expect_eq(json_int(pg, "spec.schedulingPolicy.gang.minCount", -1), 2);
    cJSON_Delete(pg);
}

/* ---- placement by the real kube-scheduler ---------------------------------------------------
 * Fake Ready nodes (support/kubelet_logs.h: their Lease kept renewed) with a set number of an
 * extended resource, example.com/gpu, that each worker asks one of; the launcher asks none. The
 * scheduler binds the pods and nothing runs them: placement is the verdict. */

#define GPU "example.com/gpu"
#define MAX_NODES 6
#define PLACE_MS 120000

static struct test_kubelet nodes[MAX_NODES];
static int n_nodes;

static void stop_nodes(void)
{
    for (int i = 0; i < n_nodes; i++)
        test_kubelet_stop(&nodes[i], &env.srv);
    n_nodes = 0;
}

static void placement_teardown(void)
{
    stop_nodes();
    test_controller_env_stop(&env);
}

TestSuite(gang_placement, .fini = placement_teardown, .timeout = 600);

static void start_placement_or_skip(void)
{
    if (test_apiserver_assets() != TEST_ASSETS_CONTROL_PLANE)
        cr_skip_test("placement is kube-scheduler's verdict: needs KUBEBUILDER_ASSETS with a real 1.36 control "
                     "plane (the double runs no scheduler)");
    start_or_skip();
}

/* A node with one example.com/gpu and, when rack is given, the label example.com/rack=RACK. */
static void add_node(const char *name, const char *rack)
{
    cr_assert_lt(n_nodes, MAX_NODES);
    char labels[128] = "";
    if (rack)
        snprintf(labels, sizeof(labels), "\"example.com/rack\":\"%s\"", rack);
    cr_assert_eq(test_kubelet_start_shaped(&nodes[n_nodes], &env.srv, name, "\"" GPU "\":\"1\"", labels), 0,
                 "node %s", name);
    n_nodes++;
}

/* An MPIJob of `workers` workers, each asking one example.com/gpu. */
static void create_gpu_job(const char *name, int workers, const char *extra_spec)
{
    cJSON *job = test_mpijob(name, extra_spec);
    cJSON *worker = cJSON_GetObjectItem(json_path(job, "spec.mpiReplicaSpecs"), "Worker");
    cJSON_ReplaceItemInObject(worker, "replicas", cJSON_CreateNumber(workers));
    cJSON *c = cJSON_GetArrayItem(json_path(worker, "template.spec.containers"), 0);
    cJSON *limits = cJSON_AddObjectToObject(cJSON_AddObjectToObject(c, "resources"), "limits");
    cJSON_AddStringToObject(limits, GPU, "1");
    cr_assert_eq(kube_create(env.admin, &MPIJOB_RESOURCE_V2BETA1, "default", job, NULL, NULL), 0);
    cJSON_Delete(job);
}

struct placed {
    int workers, bound; /* the job's workers, and those of them bound to a node */
    bool launcher_bound;
    char racks[8][16];  /* the rack of each bound worker's node */
};

static void node_rack(const char *node, char *out, size_t len)
{
    out[0] = 0;
    for (int i = 0; i < n_nodes; i++)
        if (strcmp(nodes[i].node, node) == 0)
            snprintf(out, len, "%c", node[strlen(node) - 2]); /* nodes are named rack-<r><n> */
}

static struct placed placement(const char *job)
{
    struct placed p = {0};
    cJSON *items = job_pods(job, NULL);
    const cJSON *pod;
    cJSON_ArrayForEach(pod, items) {
        const char *role = cJSON_GetStringValue(cJSON_GetObjectItem(json_path(pod, "metadata.labels"), LABEL_JOB_ROLE));
        const char *node = json_string(pod, "spec.nodeName");
        if (json_path(pod, "metadata.deletionTimestamp"))
            continue;
        if (role && strcmp(role, "worker") == 0) {
            if (node && p.bound < 8)
                node_rack(node, p.racks[p.bound], sizeof(p.racks[0]));
            p.workers++;
            p.bound += node != NULL;
        } else if (node) {
            p.launcher_bound = true;
        }
    }
    cJSON_Delete(items);
    return p;
}

/* Waits until `job` has `workers` workers of which `bound` are bound (and, with launcher, the
 * launcher too), then holds that for a few seconds more when nothing should move. */
static struct placed wait_placed(const char *job, int workers, int bound)
{
    struct test_deadline d = test_deadline_in(PLACE_MS);
    struct placed p;
    do {
        p = placement(job);
        if (p.workers == workers && p.bound == bound)
            return p;
    } while (test_deadline_poll_every(&d, 250));
    cJSON *obj = test_kube_get(env.admin, &MPIJOB_RESOURCE_V2BETA1, "default", job);
    char status[2000] = "(none)";
    if (obj && !cJSON_PrintPreallocated(json_path(obj, "status"), status, sizeof(status), false))
        snprintf(status, sizeof(status), "(too long to print)");
    cJSON_Delete(obj);
    cr_assert_fail("MPIJob %s: %d of %d workers bound after %s (wanted %d of %d); its status: %s", job, p.bound,
                   p.workers, test_deadline_text(&d), bound, workers, status);
    return p;
}

/* Deletes an MPIJob and, since no kubelet confirms a bound pod's deletion, its pods at once. */
static void delete_job_now(const char *job)
{
    struct kube_delete_opts bg = {.propagation_policy = "Background", .grace_period_s = -1};
    cr_assert_eq(kube_delete(env.admin, &MPIJOB_RESOURCE_V2BETA1, "default", job, &bg, NULL, NULL), 0);
    struct test_deadline d = test_deadline_in(PLACE_MS);
    for (;;) {
        cJSON *items = job_pods(job, NULL);
        int left = cJSON_GetArraySize(items);
        const cJSON *pod;
        struct kube_delete_opts now = {.grace_period_s = 0};
        cJSON_ArrayForEach(pod, items)
            kube_delete(env.admin, &KUBE_PODS, "default", json_string(pod, "metadata.name"), &now, NULL, NULL);
        cJSON_Delete(items);
        if (left == 0)
            break;
        cr_assert(test_deadline_poll_every(&d, 250), "pods of %s still there after %s", job, test_deadline_text(&d));
    }
}

static char *running_message(const char *job)
{
    cJSON *obj = get(&MPIJOB_RESOURCE_V2BETA1, job);
    const cJSON *c;
    char *msg = NULL;
    cJSON_ArrayForEach(c, json_path(obj, "status.conditions")) {
        const char *t = json_string(c, "type");
        if (t && strcmp(t, "Running") == 0 && json_string(c, "message"))
            msg = strdup(json_string(c, "message"));
    }
    cJSON_Delete(obj);
    return msg;
}

/* Waits until the MPIJob says its gang cannot be placed (with `words` of the scheduler's, when
 * given), and checks that nothing of it is bound. */
static void expect_unplaced(const char *job, int workers, const char *words)
{
    cr_assert(test_kube_wait_condition(env.admin, &MPIJOB_RESOURCE_V2BETA1, "default", job, "Running", "False",
                                       "GangUnschedulable", PLACE_MS),
              "MPIJob %s says its gang cannot be placed", job);
    struct test_deadline d = test_deadline_in(PLACE_MS);
    char *msg = NULL;
    for (;;) {
        free(msg);
        msg = running_message(job);
        if (!words || (msg && strstr(msg, words)) || !test_deadline_poll_every(&d, 250))
            break;
    }
    cr_log_info("%s: %s", job, msg ? msg : "(no message)");
    cr_expect(msg && strstr(msg, "kube-scheduler cannot place its gang"), "%s", msg ? msg : "");
    if (words)
        cr_expect(msg && strstr(msg, words), "the scheduler's words (%s) are quoted within %s: %s", words,
                  test_deadline_text(&d), msg ? msg : "");
    free(msg);
    struct placed p = placement(job);
    cr_expect_eq(p.bound, 0, "no worker of %s is bound (%d of %d are)", job, p.bound, workers);
    cr_expect(!p.launcher_bound, "nor its launcher");
}

/* Three nodes with one GPU each. Without a gang, a job of 4 workers takes all three and waits for
 * a fourth (the three GPUs held for nothing); with one, no worker is bound and the MPIJob says
 * why; a fourth node lets the whole gang in at once. */
Test(gang_placement, all_or_nothing)
{
    start_placement_or_skip();
    add_node("rack-a1", "a");
    add_node("rack-a2", "a");
    add_node("rack-b1", "b");

    test_controller_env_run(&env, 2, NULL);
    create_gpu_job("plain", 4, NULL);
    struct placed p = wait_placed("plain", 4, 3);
    cr_log_info("without a gang: %d of %d workers bound, holding every GPU, one Pending", p.bound, p.workers);
    delete_job_now("plain");
    controller_stop(env.ctl);
    env.ctl = NULL;

    test_controller_env_run(&env, 2, GANG_SCHEDULER_WORKLOAD);
    create_gpu_job("whole", 4, NULL);
    expect_unplaced("whole", 4, GPU);

    add_node("rack-b2", "b");
    wait_placed("whole", 4, 4);
    struct test_deadline d = test_deadline_in(PLACE_MS);
    char *msg = NULL;
    do {
        free(msg);
        msg = running_message("whole");
    } while (msg && strstr(msg, "cannot place its gang") && test_deadline_poll_every(&d, 250));
    cr_expect(!msg || !strstr(msg, "cannot place its gang"), "placed, the MPIJob no longer says it cannot be: %s",
              msg ? msg : "");
    free(msg);
    cr_expect(placement("whole").launcher_bound, "the launcher is bound with the workers");
}

/* Four GPUs and two jobs of 3 workers: one runs whole, the other waits whole (no GPU held); when
 * the first goes, the second is placed. */
Test(gang_placement, no_deadlock_between_gangs)
{
    start_placement_or_skip();
    add_node("rack-a1", "a");
    add_node("rack-a2", "a");
    add_node("rack-b1", "b");
    add_node("rack-b2", "b");
    test_controller_env_run(&env, 2, GANG_SCHEDULER_WORKLOAD);
    create_gpu_job("first", 3, NULL);
    create_gpu_job("second", 3, NULL);

    struct test_deadline d = test_deadline_in(PLACE_MS);
    struct placed a, b;
    do {
        a = placement("first");
        b = placement("second");
        if ((a.bound == 3 && b.workers == 3) || (b.bound == 3 && a.workers == 3))
            break;
    } while (test_deadline_poll_every(&d, 250));
    cr_assert((a.bound == 3) != (b.bound == 3), "one job placed whole: first %d/3, second %d/3 after %s", a.bound,
              b.bound, test_deadline_text(&d));
    const char *won = a.bound == 3 ? "first" : "second", *waits = a.bound == 3 ? "second" : "first";
    expect_unplaced(waits, 3, NULL);
    cr_log_info("%s placed whole, %s waits whole", won, waits);
    delete_job_now(won);
    wait_placed(waits, 3, 3);
}

/* Two racks of two nodes: with spec.placement.topologyKey a 2-worker job lands in one rack and a
 * 3-worker job stays unplaced, saying why; without it the 3 workers are placed across racks. */
Test(gang_placement, topology_keeps_the_gang_in_one_rack)
{
    start_placement_or_skip();
    add_node("rack-a1", "a");
    add_node("rack-a2", "a");
    add_node("rack-b1", "b");
    add_node("rack-b2", "b");
    test_controller_env_run(&env, 2, GANG_SCHEDULER_WORKLOAD);
    static const char rack[] = "\"placement\":{\"topologyKey\":\"example.com/rack\"},";

    create_gpu_job("pair", 2, rack);
    struct placed p = wait_placed("pair", 2, 2);
    cr_expect_str_eq(p.racks[0], p.racks[1], "both workers in one rack");
    cr_log_info("2 workers with the rack constraint: racks %s and %s", p.racks[0], p.racks[1]);
    delete_job_now("pair");

    create_gpu_job("three", 3, rack);
    expect_unplaced("three", 3, NULL);
    create_gpu_job("spread", 3, NULL);
    p = wait_placed("spread", 3, 3);
    cr_log_info("3 workers without it: racks %s, %s and %s", p.racks[0], p.racks[1], p.racks[2]);
    cr_expect(strcmp(p.racks[0], p.racks[1]) || strcmp(p.racks[1], p.racks[2]), "across racks");
    cr_expect_eq(placement("three").bound, 0, "the constrained job still has no worker bound");
}
