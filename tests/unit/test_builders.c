/* The desired objects of a job against expected JSON kept as data (SPEC.md section 2).
 *
 * Each file in tests/unit/data/builders/ is one case: the MPIJob as a user writes it, the
 * operator options, and under "expect" the objects the builders must produce. Only the
 * objects a case lists are compared (whole, semantically: member order does not matter, array
 * order does); every builder runs anyway, so the sanitizers see all of them. */
#include <criterion/criterion.h>
#include <errno.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpijob/builders.h"
#include "util/json.h"

#define CASE_DIR "tests/unit/data/builders"
#define MAX_CASE_BYTES (4 << 20)

/* The template builders give their object through an out parameter; NULL on any failure. */
static cJSON *worker_pod(const struct mpijob *job, const struct mpijob_options *o, int index,
                         struct transport_report *report)
{
    cJSON *out = NULL;
    int rc = build_worker_pod(job, o, index, report, &out);
    cr_assert((rc == 0) == (out != NULL));
    return out;
}

static cJSON *launcher_job(const struct mpijob *job, const struct mpijob_options *o, struct transport_report *report)
{
    cJSON *out = NULL;
    int rc = build_launcher_job(job, o, report, &out);
    cr_assert((rc == 0) == (out != NULL));
    return out;
}

/* ---- loading --------------------------------------------------------------------------- */

static char *read_text(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *text = malloc(MAX_CASE_BYTES + 1);
    cr_assert_not_null(text);
    size_t n = fread(text, 1, MAX_CASE_BYTES, f);
    fclose(f);
    cr_assert_lt(n, (size_t)MAX_CASE_BYTES, "%s is too large for a test case", path);
    text[n] = 0;
    return text;
}

/* The case file, from $MPIJOB_SRC_DIR or else the current directory. */
static cJSON *load_case(const char *name)
{
    const char *root = getenv("MPIJOB_SRC_DIR");
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s/%s.json", root && root[0] ? root : ".", CASE_DIR, name);
    char *text = read_text(path);
    cr_assert_not_null(text, "cannot read %s (run from the repository root or set MPIJOB_SRC_DIR)",
                       path);
    cJSON *c = cJSON_Parse(text);
    cr_assert_not_null(c, "%s is not valid JSON near: %.60s", path, cJSON_GetErrorPtr());
    free(text);
    return c;
}

static const char *opt_string(const cJSON *obj, const char *name)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static struct mpijob *parse_job(const cJSON *obj, const char *label)
{
    struct mpijob *job = NULL;
    struct mpijob_problems problems = {0};
    int rc = mpijob_parse(obj, NULL, &job, &problems);
    if (rc != 0) {
        char *why = mpijob_problems_join(&problems);
        cr_log_error("%s: the case's MPIJob does not parse (%d): %s", label, rc, why ? why : "");
        free(why);
        mpijob_problems_free(&problems);
        cr_assert_fail("%s: bad MPIJob in the case file", label);
    }
    return job;
}

/* ---- comparing ------------------------------------------------------------------------- */

/* The path of the first difference ("$.spec.containers[0].env[3]"), written into where. */
static bool first_difference(const cJSON *got, const cJSON *want, char *where, size_t size)
{
    size_t len = strlen(where);
    if (!got || !want || (got->type & 0xFF) != (want->type & 0xFF))
        return true;
    if (cJSON_IsObject(want)) {
        const cJSON *w, *g;
        cJSON_ArrayForEach(w, want) {
            snprintf(where + len, size - len, ".%s", w->string);
            if (first_difference(cJSON_GetObjectItemCaseSensitive(got, w->string), w, where, size))
                return true;
        }
        cJSON_ArrayForEach(g, got) {
            snprintf(where + len, size - len, ".%s", g->string);
            if (!cJSON_GetObjectItemCaseSensitive(want, g->string))
                return true;
        }
        where[len] = 0;
        return false;
    }
    if (cJSON_IsArray(want)) {
        int n_got = cJSON_GetArraySize(got), n_want = cJSON_GetArraySize(want);
        for (int i = 0; i < n_got || i < n_want; i++) {
            snprintf(where + len, size - len, "[%d]", i);
            if (first_difference(cJSON_GetArrayItem(got, i), cJSON_GetArrayItem(want, i), where,
                                 size))
                return true;
        }
        where[len] = 0;
        return false;
    }
    return !cJSON_Compare(got, want, true);
}

static void expect_json(const cJSON *got, const cJSON *want, const char *label)
{
    if (cJSON_Compare(got, want, true))
        return;
    char where[1024] = "$";
    first_difference(got, want, where, sizeof(where));
    char *g = got ? cJSON_Print(got) : strdup("(nothing: the builder returned NULL)");
    char *w = cJSON_Print(want);
    cr_log_error("%s: first difference at %s\n--- got:\n%s\n--- want:\n%s", label, where, g, w);
    free(g);
    free(w);
    cr_assert_fail("%s: the objects differ at %s (both printed above)", label, where);
}

static void expect_lines(char *const *got, size_t n, const cJSON *want, const char *label)
{
    cJSON *array = cJSON_CreateArray();
    for (size_t i = 0; i < n; i++)
        cJSON_AddItemToArray(array, cJSON_CreateString(got[i]));
    expect_json(array, want, label);
    cJSON_Delete(array);
}

/* ---- running a case -------------------------------------------------------------------- */

struct case_run {
    cJSON *file, *expect;
    struct mpijob *job;
    struct mpijob_options options;
    const char *name;
};

static void compare_if_expected(struct case_run *r, const char *key, cJSON *got)
{
    const cJSON *want = cJSON_GetObjectItemCaseSensitive(r->expect, key);
    char label[256];
    snprintf(label, sizeof(label), "%s: %s", r->name, key);
    if (want && cJSON_IsNull(want))
        cr_assert_null(got, "%s: expected no object", label);
    else if (want)
        expect_json(got, want, label);
    cJSON_Delete(got);
}

static void run_case(const char *name)
{
    struct case_run r = {.name = name};
    r.file = load_case(name);
    r.expect = cJSON_GetObjectItemCaseSensitive(r.file, "expect");
    cr_assert(cJSON_IsObject(r.expect), "%s: no \"expect\" object", name);
    const cJSON *opts = cJSON_GetObjectItemCaseSensitive(r.file, "options");
    r.options.cluster_domain = opt_string(opts, "clusterDomain");
    r.options.gang_scheduler = opt_string(opts, "gangScheduler");
    r.options.operator_name = opt_string(opts, "operatorName");
    r.job = parse_job(cJSON_GetObjectItemCaseSensitive(r.file, "mpijob"), name);
    /* A host-network job's port is the reconciler's choice, given to the builders in the job. */
    const cJSON *ssh_port = cJSON_GetObjectItemCaseSensitive(r.file, "sshPort");
    if (cJSON_IsNumber(ssh_port))
        r.job->networking.ssh_port = ssh_port->valueint;

    /* The builders must not touch the job they read. */
    cJSON *launcher_before = cJSON_Duplicate(r.job->launcher.template, true);
    cJSON *worker_before = cJSON_Duplicate(r.job->worker.template, true);

    compare_if_expected(&r, "service", build_service(r.job, &r.options));

    const cJSON *running = cJSON_GetObjectItemCaseSensitive(r.file, "runningWorkers");
    size_t n_running = (size_t)cJSON_GetArraySize(running);
    const char **names = calloc(n_running + 1, sizeof(*names));
    cr_assert_not_null(names);
    for (size_t i = 0; i < n_running; i++)
        names[i] = cJSON_GetArrayItem(running, (int)i)->valuestring;
    compare_if_expected(&r, "configmap", build_configmap(r.job, &r.options, names, n_running));
    free(names);

    const cJSON *keys_obj = cJSON_GetObjectItemCaseSensitive(r.file, "sshKeys");
    struct ssh_keypair keys = {
        .private_pem = (char *)opt_string(keys_obj, "privateKey"),
        .public_authorized = (char *)opt_string(keys_obj, "publicKey"),
    };
    if (cJSON_GetObjectItemCaseSensitive(r.expect, "secret"))
        cr_assert(keys.private_pem && keys.public_authorized, "%s: expects a secret without sshKeys",
                  name);
    compare_if_expected(&r, "secret", keys.private_pem ? build_secret(r.job, &r.options, &keys)
                                                       : NULL);

    compare_if_expected(&r, "podgroup", build_podgroup(r.job, &r.options));

    /* Workers first, then the launcher, into one report. */
    struct transport_report report = {0};
    cJSON *workers = cJSON_CreateArray();
    for (int i = 0; i < r.job->worker.replicas; i++) {
        cJSON *pod = worker_pod(r.job, &r.options, i, &report);
        cr_assert_not_null(pod, "%s: worker %d not built", name, i);
        cJSON_AddItemToArray(workers, pod);
    }
    compare_if_expected(&r, "workers", workers);
    cJSON *launcher = launcher_job(r.job, &r.options, &report);
    cr_assert_not_null(launcher, "%s: launcher not built", name);
    compare_if_expected(&r, "launcher", launcher);

    const cJSON *want_report = cJSON_GetObjectItemCaseSensitive(r.expect, "report");
    if (want_report) {
        char label[256];
        snprintf(label, sizeof(label), "%s: report conflicts", name);
        expect_lines(report.conflicts, report.n_conflicts,
                     cJSON_GetObjectItemCaseSensitive(want_report, "conflicts"), label);
        snprintf(label, sizeof(label), "%s: report unforwarded", name);
        expect_lines(report.unforwarded, report.n_unforwarded,
                     cJSON_GetObjectItemCaseSensitive(want_report, "unforwarded"), label);
    }
    transport_report_free(&report);

    expect_json(r.job->launcher.template, launcher_before, "launcher template after building");
    expect_json(r.job->worker.template, worker_before, "worker template after building");
    cJSON_Delete(launcher_before);
    cJSON_Delete(worker_before);
    mpijob_free(r.job);
    cJSON_Delete(r.file);
}

/* ---- the cases ------------------------------------------------------------------------- */

Test(builders, openmpi_basic) { run_case("openmpi-basic"); }
Test(builders, intel) { run_case("intel"); }
Test(builders, mpich) { run_case("mpich"); }
Test(builders, cluster_domain) { run_case("cluster-domain"); }
Test(builders, launcher_as_worker) { run_case("launcher-as-worker"); }
Test(builders, user_overrides) { run_case("user-overrides"); }
Test(builders, worker_args_only) { run_case("worker-args-only"); }
Test(builders, transport_tcp) { run_case("transport-tcp"); }
Test(builders, transport_rdma) { run_case("transport-rdma"); }
Test(builders, gang_volcano) { run_case("gang-volcano"); }
Test(builders, gang_volcano_priority_from_template)
{
    run_case("gang-volcano-priority-from-template");
}
Test(builders, gang_scheduler_plugins) { run_case("gang-scheduler-plugins"); }
Test(builders, suspended) { run_case("suspended"); }
Test(builders, legacy_v1alpha2) { run_case("legacy-v1alpha2"); }
Test(builders, legacy_v1alpha2_rdma) { run_case("legacy-v1alpha2-rdma"); }
Test(builders, host_network_openmpi_tcp) { run_case("host-network-openmpi-tcp"); }
Test(builders, host_network_from_worker_template_mpich_rdma)
{
    run_case("host-network-from-worker-template-mpich-rdma");
}

/* ---- the rest, in code ----------------------------------------------------------------- */

static struct mpijob *basic_job(void)
{
    cJSON *c = load_case("openmpi-basic");
    struct mpijob *job = parse_job(cJSON_GetObjectItemCaseSensitive(c, "mpijob"), "basic");
    cJSON_Delete(c);
    return job;
}

static void expect_json_text(const cJSON *got, const char *text, const char *label)
{
    cJSON *want = cJSON_Parse(text);
    cr_assert_not_null(want, "bad JSON in the test itself: %s", text);
    expect_json(got, want, label);
    cJSON_Delete(want);
}

Test(builders, labels_and_owner_reference)
{
    struct mpijob *job = basic_job();
    cJSON *l = build_labels(job, NULL, NULL, -1);
    expect_json_text(l, "{\"training.kubeflow.org/operator-name\":\"mpijob-operator\","
                        "\"training.kubeflow.org/job-name\":\"pi\"}", "labels without role");
    cJSON_Delete(l);
    struct mpijob_options o = {.operator_name = "op"};
    l = build_labels(job, &o, "worker", 12);
    expect_json_text(l, "{\"training.kubeflow.org/operator-name\":\"op\","
                        "\"training.kubeflow.org/job-name\":\"pi\","
                        "\"training.kubeflow.org/job-role\":\"worker\","
                        "\"training.kubeflow.org/replica-index\":\"12\"}", "worker labels");
    cJSON_Delete(l);
    cJSON *ref = build_owner_reference(job);
    expect_json_text(ref, "{\"apiVersion\":\"kubeflow.org/v2beta1\",\"kind\":\"MPIJob\","
                          "\"name\":\"pi\",\"uid\":\"6f1b7c1e-58d2-4c1a-9d7e-1a2b3c4d5e6f\","
                          "\"controller\":true,\"blockOwnerDeletion\":true}", "owner reference");
    cJSON_Delete(ref);
    mpijob_free(job);
}

Test(builders, podgroup_resources)
{
    struct mpijob *job = basic_job();
    struct mpijob_options none = {0}, empty = {.gang_scheduler = ""},
                          volcano = {.gang_scheduler = "volcano"},
                          plugins = {.gang_scheduler = "scheduler-plugins-scheduler"};
    cr_assert_null(podgroup_resource(NULL));
    cr_assert_null(podgroup_resource(&none));
    cr_assert_null(podgroup_resource(&empty));
    cr_assert_null(build_podgroup(job, &none));
    cr_assert_null(build_podgroup(job, &empty));
    cr_assert_eq(podgroup_resource(&volcano), &PODGROUP_VOLCANO);
    cr_assert_eq(podgroup_resource(&plugins), &PODGROUP_SCHED_PLUGINS);
    cr_assert_str_eq(PODGROUP_VOLCANO.group, "scheduling.volcano.sh");
    cr_assert_str_eq(PODGROUP_VOLCANO.version, "v1beta1");
    cr_assert_str_eq(PODGROUP_SCHED_PLUGINS.group, "scheduling.x-k8s.io");
    cr_assert_str_eq(PODGROUP_SCHED_PLUGINS.version, "v1alpha1");
    cr_assert_str_eq(MPIJOB_RESOURCE_V2BETA1.plural, "mpijobs");
    mpijob_free(job);
}

static const char *pod_group_name(const cJSON *pod_spec)
{
    return json_string(pod_spec, "schedulingGroup.podGroupName");
}

/* --gang-scheduling workload: a Workload whose one template the PodGroup names, the same gang
 * policy on both, and each gang pod naming the PodGroup (SPEC.md section 2, item 6). */
Test(builders, workload_api_gang_at_startup)
{
    struct mpijob *job = basic_job();
    struct mpijob_options o = {.gang_scheduler = "workload"};
    cr_assert_eq(podgroup_resource(&o), &PODGROUP_WORKLOAD_API);
    cr_assert_eq(workload_resource(&o), &WORKLOADS);
    cr_assert_null(workload_resource(&(struct mpijob_options){.gang_scheduler = "volcano"}));
    cr_assert_str_eq(WORKLOADS.group, "scheduling.k8s.io");
    cr_assert_str_eq(WORKLOADS.version, "v1alpha2");
    cr_assert_str_eq(PODGROUP_WORKLOAD_API.plural, "podgroups");
    job->placement.topology_key = strdup("example.com/rack");
    job->run_policy.scheduling.priority_class = strdup("training");

    cJSON *wl = build_workload(job, &o);
    expect_json_text(json_path(wl, "spec"),
                     "{\"controllerRef\":{\"apiGroup\":\"kubeflow.org\",\"kind\":\"MPIJob\",\"name\":\"pi\"},"
                     "\"podGroupTemplates\":[{\"name\":\"gang\",\"schedulingPolicy\":{\"gang\":{\"minCount\":3}},"
                     "\"schedulingConstraints\":{\"topology\":[{\"key\":\"example.com/rack\"}]},"
                     "\"priorityClassName\":\"training\"}]}",
                     "Workload spec: two workers and the launcher");
    cr_assert_str_eq(json_string(wl, "apiVersion"), "scheduling.k8s.io/v1alpha2");
    cr_assert_str_eq(json_string(wl, "kind"), "Workload");
    cr_assert_str_eq(json_string(wl, "metadata.name"), "pi");
    cr_assert_not_null(json_path(wl, "metadata.ownerReferences"));
    cJSON_Delete(wl);

    cJSON *pg = build_podgroup(job, &o);
    expect_json_text(json_path(pg, "spec"),
                     "{\"podGroupTemplateRef\":{\"workload\":{\"workloadName\":\"pi\",\"podGroupTemplateName\":\"gang\"}},"
                     "\"schedulingPolicy\":{\"gang\":{\"minCount\":3}},"
                     "\"schedulingConstraints\":{\"topology\":[{\"key\":\"example.com/rack\"}]},"
                     "\"priorityClassName\":\"training\"}",
                     "PodGroup spec");
    cr_assert_str_eq(json_string(pg, "apiVersion"), "scheduling.k8s.io/v1alpha2");
    cr_assert_str_eq(json_string(pg, "metadata.name"), "pi");
    cJSON_Delete(pg);

    cJSON *pod = NULL;
    cr_assert_eq(build_worker_pod(job, &o, 1, NULL, &pod), 0);
    cr_assert_str_eq(pod_group_name(json_path(pod, "spec")), "pi");
    cr_assert_null(json_string(pod, "spec.schedulerName"), "kube-scheduler's own: no schedulerName");
    cJSON_Delete(pod);
    cJSON *launcher = NULL;
    cr_assert_eq(build_launcher_job(job, &o, NULL, &launcher), 0);
    cr_assert_str_eq(pod_group_name(json_path(launcher, "spec.template.spec")), "pi",
                     "created with the workers, the launcher is one of the gang");
    cJSON_Delete(launcher);
    mpijob_free(job);
}

/* WaitForWorkersReady: the launcher comes once the workers run, so it cannot be one of a gang
 * that kube-scheduler holds until minCount of its pods exist: the gang is the workers. */
Test(builders, workload_api_gang_waiting_for_workers)
{
    struct mpijob *job = basic_job();
    struct mpijob_options o = {.gang_scheduler = "workload"}, volcano = {.gang_scheduler = "volcano"};
    job->launcher_creation_policy = LAUNCHER_WAIT_FOR_WORKERS_READY;
    cr_assert_eq(mpijob_gang_size(job, &o), 2);
    cr_assert_not(mpijob_launcher_in_gang(job, &o));
    cr_assert_eq(mpijob_gang_size(job, &volcano), 3, "the other schedulers keep the reference's rule");
    cr_assert(mpijob_launcher_in_gang(job, &volcano));
    job->run_policy.scheduling.min_available = 3;
    cr_assert_eq(mpijob_gang_size(job, &o), 2, "minAvailable is capped at the workers");
    job->run_policy.scheduling.min_available = 1;
    cr_assert_eq(mpijob_gang_size(job, &o), 1);
    cJSON *pg = build_podgroup(job, &o);
    cr_assert_eq(json_int(pg, "spec.schedulingPolicy.gang.minCount", -1), 1);
    cr_assert_null(json_path(pg, "spec.schedulingConstraints"), "no placement asked");
    cJSON_Delete(pg);
    cJSON *launcher = NULL;
    cr_assert_eq(build_launcher_job(job, &o, NULL, &launcher), 0);
    cr_assert_null(json_path(launcher, "spec.template.spec.schedulingGroup"));
    cJSON_Delete(launcher);
    cJSON *pod = NULL;
    cr_assert_eq(build_worker_pod(job, &o, 0, NULL, &pod), 0);
    cr_assert_str_eq(pod_group_name(json_path(pod, "spec")), "pi");
    cJSON_Delete(pod);
    mpijob_free(job);
}

/* The Secret holds exactly the generated key pair: decode it back. */
Test(builders, secret_round_trips_real_keys)
{
    struct mpijob *job = basic_job();
    struct ssh_keypair keys = {0};
    cr_assert_eq(ssh_keypair_generate(&keys), 0);
    cJSON *secret = build_secret(job, NULL, &keys);
    cr_assert_not_null(secret);
    const char *names[] = {"ssh-privatekey", "ssh-publickey"};
    const char *want[] = {keys.private_pem, keys.public_authorized};
    for (int i = 0; i < 2; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(secret, "data"),
                                                          names[i]);
        cr_assert(cJSON_IsString(v), "%s missing", names[i]);
        size_t len = strlen(v->valuestring);
        cr_assert_null(strchr(v->valuestring, '\n'), "%s: base64 must be one line", names[i]);
        unsigned char *raw = calloc(len + 1, 1);
        int n = EVP_DecodeBlock(raw, (const unsigned char *)v->valuestring, (int)len);
        cr_assert_geq(n, 0);
        /* EVP_DecodeBlock counts the padding bytes as data. */
        while (len > 0 && v->valuestring[len - 1] == '=') {
            len--;
            n--;
        }
        cr_assert_eq((size_t)n, strlen(want[i]), "%s length", names[i]);
        cr_assert_eq(memcmp(raw, want[i], (size_t)n), 0, "%s content", names[i]);
        free(raw);
    }
    cJSON_Delete(secret);
    ssh_keypair_free(&keys);
    cr_assert_null(build_secret(job, NULL, &keys), "no keys, no Secret");
    mpijob_free(job);
}

/* Building twice gives the same objects: reconcile compares them across passes. */
Test(builders, deterministic)
{
    struct mpijob *job = basic_job();
    struct mpijob_options o = {.cluster_domain = "cluster.local", .gang_scheduler = "volcano"};
    cJSON *a = launcher_job(job, &o, NULL), *b = launcher_job(job, &o, NULL);
    expect_json(a, b, "launcher twice");
    cJSON_Delete(a);
    cJSON_Delete(b);
    a = worker_pod(job, &o, 1, NULL);
    b = worker_pod(job, &o, 1, NULL);
    expect_json(a, b, "worker twice");
    cJSON_Delete(a);
    cJSON_Delete(b);
    mpijob_free(job);
}

/* A template field of the wrong JSON type (the CRD schema would refuse it) yields no object
 * instead of a half-edited one, and a code that says no retry will help (MPIJOB_EINVALID, not
 * out of memory); so does a job without a Worker spec. */
Test(builders, refuses_templates_it_cannot_edit)
{
    struct mpijob *job = basic_job();
    cJSON *container = cJSON_GetArrayItem(
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(job->worker.template, "spec"),
                                         "containers"),
        0);
    cJSON_AddItemToObject(container, "env", cJSON_CreateString("not a list"));
    cJSON *out = NULL;
    cr_assert_eq(build_worker_pod(job, NULL, 0, NULL, &out), MPIJOB_EINVALID);
    cr_assert_null(out);

    cJSON *lspec = cJSON_GetObjectItemCaseSensitive(job->launcher.template, "spec");
    cJSON_AddItemToObject(lspec, "volumes", cJSON_CreateNumber(3));
    cr_assert_eq(build_launcher_job(job, NULL, NULL, &out), MPIJOB_EINVALID);
    cr_assert_null(out);

    cJSON_Delete(job->worker.template);
    job->worker.template = NULL;
    cr_assert_eq(build_worker_pod(job, NULL, 0, NULL, &out), MPIJOB_EINVALID);
    cr_assert_null(out);
    mpijob_free(job);
}

/* ---- allocation failures ---------------------------------------------------------------- */

/* cJSON's allocator fails once, at the n-th call. */
static long alloc_countdown = -1;
static bool alloc_failed;

static void *failing_malloc(size_t size)
{
    if (alloc_countdown >= 0 && alloc_countdown-- == 0) {
        alloc_failed = true;
        return NULL;
    }
    return malloc(size);
}

enum built { BUILT_SERVICE, BUILT_CONFIGMAP, BUILT_SECRET, BUILT_PODGROUP, BUILT_WORKER, BUILT_LAUNCHER };

static cJSON *build_one(enum built what, const struct mpijob *job, const struct mpijob_options *o,
                        const struct ssh_keypair *keys, struct transport_report *report)
{
    static const char *const running[] = {"pi-worker-0"};
    switch (what) {
    case BUILT_SERVICE: return build_service(job, o);
    case BUILT_CONFIGMAP: return build_configmap(job, o, running, 1);
    case BUILT_SECRET: return build_secret(job, o, keys);
    case BUILT_PODGROUP: return build_podgroup(job, o);
    case BUILT_WORKER: return worker_pod(job, o, 0, report);
    case BUILT_LAUNCHER: return launcher_job(job, o, report);
    }
    return NULL;
}

/* Every failing allocation gives NULL (or, where a failure is harmless, the right object),
 * never a wrong object, a crash or a leak (LeakSanitizer checks at exit). */
Test(builders, survives_allocation_failures)
{
    cJSON *c = load_case("transport-rdma");
    struct mpijob *job = parse_job(cJSON_GetObjectItemCaseSensitive(c, "mpijob"), "rdma");
    cJSON_Delete(c);
    struct ssh_keypair keys = {.private_pem = "-----BEGIN EC PRIVATE KEY-----\nAAAA\n",
                               .public_authorized = "ecdsa-sha2-nistp521 AAAA\n"};
    const struct mpijob_options options[] = {
        {.gang_scheduler = "volcano", .cluster_domain = "cluster.local"},
        {.gang_scheduler = "scheduler-plugins-scheduler"},
    };
    cJSON_Hooks hooks = {.malloc_fn = failing_malloc, .free_fn = free};
    for (size_t k = 0; k < sizeof(options) / sizeof(options[0]); k++) {
        for (int what = BUILT_SERVICE; what <= BUILT_LAUNCHER; what++) {
            cJSON *reference = build_one((enum built)what, job, &options[k], &keys, NULL);
            cr_assert_not_null(reference);
            cJSON_InitHooks(&hooks);
            bool finished = false;
            for (long n = 0; !finished && n < 100000; n++) {
                struct transport_report report = {0};
                alloc_countdown = n;
                alloc_failed = false;
                cJSON *got = build_one((enum built)what, job, &options[k], &keys, &report);
                alloc_countdown = -1;
                finished = !alloc_failed;
                if (got || finished) {
                    char label[96];
                    snprintf(label, sizeof(label), "object %d, options %zu, allocation %ld failed",
                             what, k, n);
                    expect_json(got, reference, label);
                }
                cJSON_Delete(got);
                transport_report_free(&report);
            }
            cJSON_InitHooks(NULL);
            cr_assert(finished, "object %d never built", what);
            cJSON_Delete(reference);
        }
    }
    mpijob_free(job);
}
