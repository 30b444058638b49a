/* MPIJob parsing, defaulting and validation (SPEC.md sections 1 and 4): defaults, every field,
 * the legacy v1alpha2 form, one exact problem line per rule, ordering, and a generator of
 * hostile bodies that must all be refused cleanly. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpijob/mpijob.h"
#include "support/sanitizer.h"
#include "util/json.h"

/* A valid v2beta1 job that sets every field, none to its default. */
static const char *full_job =
    "{\"apiVersion\":\"kubeflow.org/v2beta1\",\"kind\":\"MPIJob\","
    "\"metadata\":{\"name\":\"pi\",\"namespace\":\"research\",\"uid\":\"0b1c-77\","
    "\"generation\":3},"
    "\"spec\":{\"slotsPerWorker\":2,\"runLauncherAsWorker\":true,\"mpiImplementation\":\"Intel\","
    "\"sshAuthMountPath\":\"/home/mpiuser/.ssh\","
    "\"launcherCreationPolicy\":\"WaitForWorkersReady\","
    "\"runPolicy\":{\"cleanPodPolicy\":\"All\",\"backoffLimit\":3,\"activeDeadlineSeconds\":3600,"
    "\"ttlSecondsAfterFinished\":600,\"suspend\":true,\"managedBy\":\"kueue.x-k8s.io/multikueue\","
    "\"schedulingPolicy\":{\"minAvailable\":3,\"queue\":\"gpu-queue\",\"minResources\":"
    "{\"cpu\":\"4\",\"memory\":\"8Gi\",\"nvidia.com/gpu\":2},\"priorityClass\":\"high\","
    "\"scheduleTimeoutSeconds\":120}},"
    "\"mpiReplicaSpecs\":{"
    "\"Launcher\":{\"replicas\":1,\"restartPolicy\":\"Never\",\"template\":{\"metadata\":"
    "{\"labels\":{\"app\":\"pi\"}},\"spec\":{\"containers\":[{\"name\":\"launcher\",\"image\":"
    "\"mpioperator/mpi-pi:openmpi\",\"command\":[\"mpirun\"],\"args\":[\"-n\",\"4\",\"/pi\"],"
    "\"env\":[{\"name\":\"A\",\"value\":\"1\"}],\"resources\":{\"limits\":{\"cpu\":\"1\"}},"
    "\"securityContext\":{\"runAsUser\":1000}}]}}},"
    "\"Worker\":{\"replicas\":2,\"restartPolicy\":\"OnFailure\",\"template\":{\"spec\":"
    "{\"containers\":[{\"name\":\"worker\",\"image\":\"mpioperator/mpi-pi:openmpi\","
    "\"volumeMounts\":[]}],\"volumes\":[]}}}},"
    "\"networking\":{\"transport\":\"RDMA\",\"interface\":\"eth1\",\"rdma\":{\"devicePath\":"
    "\"/dev/ib\",\"resourceName\":\"rdma/hca\",\"hca\":\"^mlx5_0:1,=mlx5_1\",\"gidIndex\":3,"
    "\"gpuDirect\":true,\"trafficClass\":106}}}}";

static const char *minimal_job =
    "{\"apiVersion\":\"kubeflow.org/v2beta1\",\"kind\":\"MPIJob\","
    "\"metadata\":{\"name\":\"pi\",\"namespace\":\"default\"},"
    "\"spec\":{\"mpiReplicaSpecs\":{\"Launcher\":{\"template\":{\"spec\":{\"containers\":"
    "[{\"name\":\"launcher\",\"image\":\"pi\"}]}}}}}}";

/* The legacy form as users wrote it for v1alpha2 with GPUs over InfiniBand. */
static const char *legacy_job =
    "{\"apiVersion\":\"kubeflow.org/v1alpha2\",\"kind\":\"MPIJob\","
    "\"metadata\":{\"name\":\"tensorflow-benchmarks\",\"namespace\":\"default\"},"
    "\"spec\":{\"slotsPerWorker\":1,\"cleanPodPolicy\":\"None\",\"mpiReplicaSpecs\":{"
    "\"Launcher\":{\"replicas\":1,\"template\":{\"spec\":{\"containers\":[{\"name\":"
    "\"tensorflow-benchmarks\",\"image\":\"mpioperator/tensorflow-benchmarks:latest\","
    "\"command\":[\"mpirun\",\"--allow-run-as-root\",\"-np\",\"2\",\"-bind-to\",\"none\","
    "\"-map-by\",\"slot\",\"-x\",\"NCCL_DEBUG=INFO\",\"-x\",\"NCCL_IB_DISABLE=0\",\"-x\","
    "\"LD_LIBRARY_PATH\",\"-x\",\"PATH\",\"-mca\",\"pml\",\"ob1\",\"-mca\",\"btl\",\"^openib\","
    "\"python\",\"scripts/tf_cnn_benchmarks/tf_cnn_benchmarks.py\",\"--model=resnet101\","
    "\"--batch_size=64\",\"--variable_update=horovod\"]}]}}},"
    "\"Worker\":{\"replicas\":2,\"template\":{\"spec\":{\"containers\":[{\"name\":"
    "\"tensorflow-benchmarks\",\"image\":\"mpioperator/tensorflow-benchmarks:latest\","
    "\"resources\":{\"limits\":{\"nvidia.com/gpu\":1}},\"securityContext\":{\"privileged\":true},"
    "\"volumeMounts\":[{\"name\":\"infiniband\",\"mountPath\":\"/dev/infiniband\"}]}],"
    "\"volumes\":[{\"name\":\"infiniband\",\"hostPath\":{\"path\":\"/dev/infiniband\"}}]}}}}}}";

static cJSON *parse_text(const char *text)
{
    cJSON *j = cJSON_Parse(text);
    cr_assert_not_null(j, "test JSON does not parse: %.80s", text);
    return j;
}

/* Sets (value != NULL) or removes the member at a path like "spec.a.list[0].b", creating
 * missing objects on the way. Takes value. */
static void set_at(cJSON *root, const char *path, cJSON *value)
{
    char *copy = strdup(path), *save = NULL;
    cJSON *cur = root, *parent = NULL;
    char *seg = strtok_r(copy, ".", &save);
    while (seg) {
        char *next = strtok_r(NULL, ".", &save);
        char *bracket = strchr(seg, '[');
        int index = -1;
        if (bracket) {
            index = atoi(bracket + 1);
            *bracket = 0;
        }
        parent = cur;
        if (!next && index < 0) {
            cJSON_DeleteItemFromObjectCaseSensitive(parent, seg);
            if (value)
                cJSON_AddItemToObject(parent, seg, value);
            break;
        }
        cur = cJSON_GetObjectItemCaseSensitive(parent, seg);
        if (!cur)
            cur = cJSON_AddObjectToObject(parent, seg);
        cr_assert_not_null(cur, "cannot follow %s", path);
        if (index >= 0) {
            cr_assert(cJSON_IsArray(cur), "%s: not an array", path);
            if (!next) {
                if (value)
                    cJSON_ReplaceItemInArray(cur, index, value);
                else
                    cJSON_DeleteItemFromArray(cur, index);
                break;
            }
            cur = cJSON_GetArrayItem(cur, index);
            cr_assert_not_null(cur, "cannot follow %s", path);
        }
        seg = next;
    }
    free(copy);
}

static void set_text(cJSON *root, const char *path, const char *json_value)
{
    set_at(root, path, json_value ? parse_text(json_value) : NULL);
}

/* A member to set (path, JSON text) or, with value NULL, to remove. */
struct edit {
    const char *path, *value;
};

/* The job text parsed, with the n edits made in turn. */
static cJSON *edited(const char *text, const struct edit *edits, size_t n)
{
    cJSON *obj = parse_text(text);
    for (size_t i = 0; i < n; i++)
        set_text(obj, edits[i].path, edits[i].value);
    return obj;
}

static int parse_job(const cJSON *obj, struct mpijob **job, struct mpijob_problems *p)
{
    return mpijob_parse(obj, NULL, job, p);
}

static void print_problems(const struct mpijob_problems *p)
{
    for (size_t i = 0; i < p->count; i++)
        cr_log_info("problem: %s", p->items[i]);
}

/* The job obj describes, which must parse without a problem (they are logged). */
static struct mpijob *parse_ok(const cJSON *obj)
{
    struct mpijob *job = NULL;
    struct mpijob_problems p;
    int rc = parse_job(obj, &job, &p);
    print_problems(&p);
    cr_assert_eq(rc, 0);
    cr_assert_eq(p.count, 0);
    cr_assert_not_null(job);
    mpijob_problems_free(&p);
    return job;
}

/* ---- a job's fields against a table of them ---------------------------------------------- */

static void expect_str(const char *field, const char *got, const char *want)
{
    if (!want)
        cr_expect_null(got, "%s: \"%s\", want none", field, got);
    else
        cr_expect(got && strcmp(got, want) == 0, "%s: \"%s\", want \"%s\"", field, got ? got : "(none)", want);
}

/* The fields expect_fields compares: strings, and numbers (enums and flags too). */
#define JOB_STRINGS(X)                                                                                \
    X(api_version) X(name) X(namespace) X(uid) X(ssh_auth_mount_path) X(run_policy.managed_by)         \
    X(run_policy.scheduling.queue) X(run_policy.scheduling.priority_class) X(networking.interface)     \
    X(networking.rdma.device_path) X(networking.rdma.resource_name) X(networking.rdma.hca)
#define JOB_NUMBERS(X)                                                                                \
    X(generation) X(slots_per_worker) X(run_launcher_as_worker) X(implementation)                      \
    X(launcher_creation_policy) X(run_policy.clean_pod_policy) X(run_policy.backoff_limit)             \
    X(run_policy.active_deadline_s) X(run_policy.ttl_after_finished_s) X(run_policy.suspend)           \
    X(run_policy.scheduling.present) X(run_policy.scheduling.min_available)                            \
    X(run_policy.scheduling.schedule_timeout_s) X(launcher.replicas) X(launcher.restart_policy)        \
    X(worker.replicas) X(worker.restart_policy) X(networking.transport) X(networking.rdma.gid_index)   \
    X(networking.rdma.gpu_direct) X(networking.rdma.traffic_class) X(networking.host_network)      \
    X(networking.ssh_port)

#define EXPECT_STR(f) expect_str(#f, got->f, want->f);
#define EXPECT_NUM(f)                                                                                 \
    cr_expect_eq((long long)got->f, (long long)want->f, "%s: %lld, want %lld", #f, (long long)got->f,  \
                 (long long)want->f);

/* Every field of the parsed job but the pod templates and minResources is as in want. */
static void expect_fields(const struct mpijob *got, const struct mpijob *want)
{
    JOB_STRINGS(EXPECT_STR)
    JOB_NUMBERS(EXPECT_NUM)
}

/* full_job's fields. */
static const struct mpijob FULL = {
    .api_version = "kubeflow.org/v2beta1", .name = "pi", .namespace = "research", .uid = "0b1c-77", .generation = 3,
    .slots_per_worker = 2, .run_launcher_as_worker = true, .implementation = MPI_INTEL,
    .ssh_auth_mount_path = "/home/mpiuser/.ssh", .launcher_creation_policy = LAUNCHER_WAIT_FOR_WORKERS_READY,
    .run_policy = {.clean_pod_policy = CLEAN_POD_ALL, .backoff_limit = 3, .active_deadline_s = 3600,
                   .ttl_after_finished_s = 600, .suspend = true, .managed_by = "kueue.x-k8s.io/multikueue",
                   .scheduling = {.present = true, .min_available = 3, .queue = "gpu-queue", .priority_class = "high",
                                  .schedule_timeout_s = 120}},
    .launcher = {.replicas = 1, .restart_policy = RESTART_NEVER},
    .worker = {.replicas = 2, .restart_policy = RESTART_ON_FAILURE},
    .networking = {.transport = TRANSPORT_RDMA, .interface = "eth1",
                   .rdma = {.device_path = "/dev/ib", .resource_name = "rdma/hca", .hca = "^mlx5_0:1,=mlx5_1",
                            .gid_index = 3, .gpu_direct = true, .traffic_class = 106}},
};

/* obj parses, and the job's cleanPodPolicy is want. */
static void expect_clean_pod_policy(const cJSON *obj, enum clean_pod_policy want)
{
    struct mpijob *job = parse_ok(obj);
    cr_assert_eq(job->run_policy.clean_pod_policy, want, "cleanPodPolicy %s, want %s",
                 clean_pod_policy_name(job->run_policy.clean_pod_policy), clean_pod_policy_name(want));
    mpijob_free(job);
}

/* ---- defaults and fields ------------------------------------------------------------------ */

Test(spec, minimal_job_gets_every_default)
{
    cJSON *obj = parse_text(minimal_job);
    struct mpijob *job = parse_ok(obj);
    static const struct mpijob defaults = {
        .api_version = "kubeflow.org/v2beta1", .name = "pi", .namespace = "default", .uid = NULL, .generation = 0,
        .slots_per_worker = 1, .run_launcher_as_worker = false, .implementation = MPI_OPENMPI,
        .ssh_auth_mount_path = "/root/.ssh", .launcher_creation_policy = LAUNCHER_AT_STARTUP,
        .run_policy = {.clean_pod_policy = CLEAN_POD_RUNNING, .backoff_limit = 6, .active_deadline_s = -1,
                       .ttl_after_finished_s = -1, .suspend = false, .managed_by = NULL,
                       .scheduling = {.present = false, .min_available = -1, .queue = NULL, .priority_class = NULL,
                                      .schedule_timeout_s = -1}},
        .launcher = {.replicas = 1, .restart_policy = RESTART_ON_FAILURE},
        .worker = {.replicas = 0, .restart_policy = RESTART_NEVER},
        .networking = {.transport = TRANSPORT_AUTO, .interface = NULL,
                       .rdma = {.device_path = "/dev/infiniband", .resource_name = NULL, .hca = NULL, .gid_index = -1,
                                .gpu_direct = false, .traffic_class = -1}},
    };
    expect_fields(job, &defaults);
    cr_assert_null(job->run_policy.scheduling.min_resources);
    cr_assert_not_null(job->launcher.template);
    cr_assert_null(job->worker.template);
    mpijob_free(job);

    /* A Worker without replicas or restartPolicy gets one worker that is never restarted. */
    set_text(obj, "spec.mpiReplicaSpecs.Worker", "{\"template\":{\"spec\":{\"containers\":"
                                                 "[{\"name\":\"w\"}]}}}");
    job = parse_ok(obj);
    cr_assert_eq(job->worker.replicas, 1);
    cr_assert_eq(job->worker.restart_policy, RESTART_NEVER);
    cr_assert_not_null(job->worker.template);
    mpijob_free(job);
    cJSON_Delete(obj);
}

Test(spec, full_job_parses_every_field)
{
    cJSON *obj = parse_text(full_job);
    struct mpijob *job = parse_ok(obj);
    cJSON *launcher_template = cJSON_Duplicate(
        json_path(obj, "spec.mpiReplicaSpecs.Launcher.template"), true);
    cJSON *worker_template = cJSON_Duplicate(
        json_path(obj, "spec.mpiReplicaSpecs.Worker.template"), true);
    cJSON_Delete(obj); /* the job owns everything it holds */

    expect_fields(job, &FULL);
    const cJSON *min_resources = job->run_policy.scheduling.min_resources;
    cr_assert_str_eq(json_string(min_resources, "memory"), "8Gi");
    cr_assert_eq(cJSON_GetObjectItem(min_resources, "nvidia.com/gpu")->valueint, 2);
    cr_assert(cJSON_Compare(job->launcher.template, launcher_template, true));
    cr_assert(cJSON_Compare(job->worker.template, worker_template, true));
    cJSON_Delete(launcher_template);
    cJSON_Delete(worker_template);
    mpijob_free(job);
}

Test(spec, other_enum_values_and_empty_optional_strings)
{
    static const struct edit edits[] = {
        {"apiVersion", "\"kubeflow.org/v1alpha2\""},
        {"spec.mpiImplementation", "\"MPICH\""},
        {"spec.runPolicy.cleanPodPolicy", "\"None\""},
        {"spec.networking.transport", "\"TCP\""},
        {"spec.networking.interface", "\"\""},
        {"spec.networking.rdma.resourceName", "\"\""},
        {"spec.networking.rdma.hca", "\"\""},
        {"spec.networking.rdma.gidIndex", "null"},
        {"spec.networking.rdma.trafficClass", "null"},
        {"spec.mpiReplicaSpecs.Launcher.restartPolicy", "\"OnFailure\""},
        {"spec.mpiReplicaSpecs.Worker.restartPolicy", "\"Never\""},
        {"spec.mpiReplicaSpecs.Worker.replicas", "10000"},
        {"metadata.name", "\"a\""},
    };
    cJSON *obj = edited(full_job, edits, sizeof(edits) / sizeof(edits[0]));
    struct mpijob *job = parse_ok(obj);
    struct mpijob want = FULL;
    want.api_version = "kubeflow.org/v1alpha2";
    want.name = "a";
    want.implementation = MPI_MPICH;
    want.run_policy.clean_pod_policy = CLEAN_POD_NONE;
    want.networking.transport = TRANSPORT_TCP;
    want.networking.interface = NULL;
    want.networking.rdma.resource_name = NULL;
    want.networking.rdma.hca = NULL;
    want.networking.rdma.gid_index = -1;
    want.networking.rdma.traffic_class = -1;
    want.launcher.restart_policy = RESTART_ON_FAILURE;
    want.worker.restart_policy = RESTART_NEVER;
    want.worker.replicas = 10000;
    expect_fields(job, &want);
    mpijob_free(job);
    cJSON_Delete(obj);
}

Test(spec, legacy_v1alpha2_manifest_parses_and_keeps_templates)
{
    cJSON *obj = parse_text(legacy_job);
    struct mpijob *job = parse_ok(obj);
    cr_assert_str_eq(job->api_version, "kubeflow.org/v1alpha2");
    cr_assert_eq(job->run_policy.clean_pod_policy, CLEAN_POD_NONE);
    cr_assert_eq(job->worker.replicas, 2);
    cr_assert(cJSON_Compare(job->launcher.template,
                            json_path(obj, "spec.mpiReplicaSpecs.Launcher.template"), true));
    cr_assert(cJSON_Compare(job->worker.template,
                            json_path(obj, "spec.mpiReplicaSpecs.Worker.template"), true));
    cr_assert_neq(job->worker.template, json_path(obj, "spec.mpiReplicaSpecs.Worker.template"));
    cJSON *launcher0 = cJSON_GetArrayItem(json_path(job->launcher.template, "spec.containers"), 0);
    cJSON *cmd = json_path(launcher0, "command");
    cr_assert_str_eq(cJSON_GetArrayItem(cmd, 11)->valuestring, "NCCL_IB_DISABLE=0");
    cJSON *worker0 = cJSON_GetArrayItem(json_path(job->worker.template, "spec.containers"), 0);
    cr_assert(cJSON_IsTrue(json_path(worker0, "securityContext.privileged")));
    cr_assert_eq(cJSON_GetObjectItem(json_path(worker0, "resources.limits"), "nvidia.com/gpu")
                     ->valueint, 1);
    mpijob_free(job);

    /* The same object read through v2beta1 (conversion None keeps the legacy field). */
    set_text(obj, "apiVersion", "\"kubeflow.org/v2beta1\"");
    expect_clean_pod_policy(obj, CLEAN_POD_NONE);
    cJSON_Delete(obj);
}

Test(spec, run_policy_clean_pod_policy_wins_over_legacy)
{
    cJSON *obj = parse_text(legacy_job);
    set_text(obj, "spec.runPolicy", "{\"cleanPodPolicy\":\"All\"}");
    expect_clean_pod_policy(obj, CLEAN_POD_ALL);
    set_text(obj, "spec.runPolicy.cleanPodPolicy", "\"Running\"");
    expect_clean_pod_policy(obj, CLEAN_POD_RUNNING);
    cJSON_Delete(obj);
}

/* ---- one rule at a time --------------------------------------------------------------------- */

struct rule_case {
    const char *path;
    const char *value; /* JSON text; NULL removes the member */
    const char *want;
};

#define LAUNCHER "spec.mpiReplicaSpecs.Launcher"
#define WORKER "spec.mpiReplicaSpecs.Worker"
#define WORKER_C0 WORKER ".template.spec.containers[0]"
#define SCHED "spec.runPolicy.schedulingPolicy"
#define RDMA "spec.networking.rdma"

static const struct rule_case rule_cases[] = {
    {"apiVersion", "\"kubeflow.org/v1\"",
     "apiVersion: must be one of kubeflow.org/v2beta1, kubeflow.org/v1alpha2, "
     "got \"kubeflow.org/v1\""},
    {"apiVersion", NULL, "apiVersion: is required"},
    {"kind", "\"TFJob\"", "kind: must be MPIJob, got \"TFJob\""},
    {"metadata", "[]", "metadata: must be an object, got array"},
    {"metadata.name", NULL, "metadata.name: is required"},
    {"metadata.name", "\"Bad_Name\"",
     "metadata.name: must be a DNS-1035 label (at most 63 lowercase letters, digits and '-', "
     "starting with a letter and ending with a letter or digit), got \"Bad_Name\""},
    {"metadata.name", "\"1job\"",
     "metadata.name: must be a DNS-1035 label (at most 63 lowercase letters, digits and '-', "
     "starting with a letter and ending with a letter or digit), got \"1job\""},
    {"metadata.name", "\"job\\u00e9\"",
     "metadata.name: must be a DNS-1035 label (at most 63 lowercase letters, digits and '-', "
     "starting with a letter and ending with a letter or digit), got \"job\\xc3\\xa9\""},
    {"metadata.name", "\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"", /* 55 */
     "metadata.name: too long: the last worker pod name "
     "\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-worker-1\" would have 64 "
     "characters, more than the 63 of a DNS-1035 label"},
    {"metadata.namespace", NULL, "metadata.namespace: is required"},
    {"metadata.namespace", "5", "metadata.namespace: must be a string, got number"},
    {"metadata.namespace", "\"Team A\"",
     "metadata.namespace: must be a DNS-1123 label, got \"Team A\""},
    {"metadata.uid", "[]", "metadata.uid: must be a string, got array"},
    {"metadata.generation", "-1", "metadata.generation: must be at least 0, got -1"},
    {"spec", NULL, "spec: is required"},
    {"spec", "\"x\"", "spec: must be an object, got string"},
    {"spec.slotsPerWorker", "0", "spec.slotsPerWorker: must be at least 1, got 0"},
    {"spec.slotsPerWorker", "-4", "spec.slotsPerWorker: must be at least 1, got -4"},
    {"spec.slotsPerWorker", "1025", "spec.slotsPerWorker: must be at most 1024, got 1025"},
    {"spec.slotsPerWorker", "\"4\"", "spec.slotsPerWorker: must be an integer, got string"},
    {"spec.slotsPerWorker", "1.5", "spec.slotsPerWorker: must be an integer, got 1.5"},
    {"spec.slotsPerWorker", "1e300", "spec.slotsPerWorker: must be at most 1024, got 1e+300"},
    {"spec.slotsPerWorker", "null", "spec.slotsPerWorker: must be an integer, got null"},
    {"spec.runLauncherAsWorker", "\"yes\"",
     "spec.runLauncherAsWorker: must be a boolean, got string"},
    {"spec.mpiImplementation", "\"OpenMPI5\"",
     "spec.mpiImplementation: must be one of OpenMPI, Intel, MPICH, got \"OpenMPI5\""},
    {"spec.mpiImplementation", "2",
     "spec.mpiImplementation: must be one of OpenMPI, Intel, MPICH, got number"},
    {"spec.sshAuthMountPath", "\"\"", "spec.sshAuthMountPath: must be an absolute path, got \"\""},
    {"spec.sshAuthMountPath", "\"root/.ssh\"",
     "spec.sshAuthMountPath: must be an absolute path, got \"root/.ssh\""},
    {"spec.sshAuthMountPath", "\"/root/../etc\"",
     "spec.sshAuthMountPath: must not contain a \"..\" component, got \"/root/../etc\""},
    {"spec.sshAuthMountPath", "\"/root/.ssh\\nx\"",
     "spec.sshAuthMountPath: must not contain control characters, got \"/root/.ssh\\x0ax\""},
    {"spec.sshAuthMountPath", "\"/\"",
     "spec.sshAuthMountPath: must not be the root directory, got \"/\""},
    {"spec.launcherCreationPolicy", "\"Later\"",
     "spec.launcherCreationPolicy: must be one of AtStartup, WaitForWorkersReady, got \"Later\""},
    {"spec.cleanPodPolicy", "\"Sometimes\"",
     "spec.cleanPodPolicy: must be one of None, Running, All, got \"Sometimes\""},
    {"spec.runPolicy", "[]", "spec.runPolicy: must be an object, got array"},
    {"spec.runPolicy.cleanPodPolicy", "\"running\"",
     "spec.runPolicy.cleanPodPolicy: must be one of None, Running, All, got \"running\""},
    {"spec.runPolicy.backoffLimit", "-1",
     "spec.runPolicy.backoffLimit: must be at least 0, got -1"},
    {"spec.runPolicy.backoffLimit", "3000000000",
     "spec.runPolicy.backoffLimit: must be at most 2147483647, got 3000000000"},
    {"spec.runPolicy.activeDeadlineSeconds", "0",
     "spec.runPolicy.activeDeadlineSeconds: must be at least 1, got 0"},
    {"spec.runPolicy.ttlSecondsAfterFinished", "-5",
     "spec.runPolicy.ttlSecondsAfterFinished: must be at least 0, got -5"},
    {"spec.runPolicy.suspend", "\"true\"", "spec.runPolicy.suspend: must be a boolean, got string"},
    {"spec.runPolicy.managedBy", "7", "spec.runPolicy.managedBy: must be a string, got number"},
    {"spec.runPolicy.managedBy", "\"\"", "spec.runPolicy.managedBy: must not be empty"},
    {SCHED, "true", SCHED ": must be an object, got boolean"},
    {SCHED ".minAvailable", "0", SCHED ".minAvailable: must be at least 1, got 0"},
    {SCHED ".queue", "3", SCHED ".queue: must be a string, got number"},
    {SCHED ".minResources", "\"cpu=4\"", SCHED ".minResources: must be an object, got string"},
    {SCHED ".minResources", "{\"cpu\":true}",
     SCHED ".minResources[cpu]: must be a quantity (a string or a number), got boolean"},
    {SCHED ".minResources", "{\"cpu\":\"4 cores\"}",
     SCHED ".minResources[cpu]: must be a non-negative quantity like 4, 500m or 8Gi, "
     "got \"4 cores\""},
    {SCHED ".minResources", "{\"c\\npu\":1}",
     SCHED ".minResources: \"c\\x0apu\" is not a resource name (like cpu or nvidia.com/gpu)"},
    {SCHED ".minResources", "{\"cpu\":-1}",
     SCHED ".minResources[cpu]: must be a non-negative quantity like 4, 500m or 8Gi, got -1"},
    {SCHED ".priorityClass", "{}", SCHED ".priorityClass: must be a string, got object"},
    {SCHED ".scheduleTimeoutSeconds", "-1",
     SCHED ".scheduleTimeoutSeconds: must be at least 0, got -1"},
    {"spec.mpiReplicaSpecs", NULL, "spec.mpiReplicaSpecs: is required"},
    {"spec.mpiReplicaSpecs", "[]", "spec.mpiReplicaSpecs: must be an object, got array"},
    {LAUNCHER, NULL, LAUNCHER ": is required"},
    {LAUNCHER, "[]", LAUNCHER ": must be an object, got array"},
    {LAUNCHER ".replicas", "3", LAUNCHER ".replicas: must be 1, got 3"},
    {LAUNCHER ".replicas", "0", LAUNCHER ".replicas: must be 1, got 0"},
    {LAUNCHER ".replicas", "\"1\"", LAUNCHER ".replicas: must be an integer, got string"},
    {LAUNCHER ".restartPolicy", "\"Always\"",
     LAUNCHER ".restartPolicy: must be one of OnFailure, Never, got \"Always\""},
    {LAUNCHER ".template", NULL, LAUNCHER ".template: is required"},
    {LAUNCHER ".template.spec.containers", "[]",
     LAUNCHER ".template.spec.containers: must not be empty"},
    {LAUNCHER ".template.metadata", "\"x\"",
     LAUNCHER ".template.metadata: must be an object, got string"},
    {WORKER, "null", WORKER ": must be an object, got null"},
    {WORKER ".replicas", "0", WORKER ".replicas: must be at least 1, got 0"},
    {WORKER ".replicas", "1e9", WORKER ".replicas: must be at most 10000, got 1000000000"},
    {WORKER ".replicas", "2.5", WORKER ".replicas: must be an integer, got 2.5"},
    {WORKER ".restartPolicy", "\"Always\"",
     WORKER ".restartPolicy: must be one of Never, OnFailure, got \"Always\""},
    {WORKER ".template", "[]", WORKER ".template: must be an object, got array"},
    {WORKER ".template.spec", NULL, WORKER ".template.spec: is required"},
    {WORKER ".template.spec.containers", NULL, WORKER ".template.spec.containers: is required"},
    {WORKER ".template.spec.containers", "{}",
     WORKER ".template.spec.containers: must be an array, got object"},
    {WORKER ".template.spec.volumes", "{}",
     WORKER ".template.spec.volumes: must be an array, got object"},
    {WORKER_C0, "\"worker\"", WORKER_C0 ": must be an object, got string"},
    {WORKER_C0 ".name", NULL, WORKER_C0 ".name: must be a non-empty string"},
    {WORKER_C0 ".name", "\"\"", WORKER_C0 ".name: must be a non-empty string"},
    {WORKER_C0 ".name", "7", WORKER_C0 ".name: must be a string, got number"},
    {WORKER_C0 ".env", "\"A=1\"", WORKER_C0 ".env: must be an array, got string"},
    {WORKER_C0 ".env", "[\"A=1\"]",
     WORKER_C0 ".env: every item must be an object with a string name"},
    {WORKER_C0 ".command", "\"sshd\"", WORKER_C0 ".command: must be an array, got string"},
    {WORKER_C0 ".resources", "[]", WORKER_C0 ".resources: must be an object, got array"},
    {"spec.networking", "\"RDMA\"", "spec.networking: must be an object, got string"},
    {"spec.networking.transport", "\"Infiniband\"",
     "spec.networking.transport: must be one of Auto, TCP, RDMA, got \"Infiniband\""},
    {"spec.networking.interface", "\"enp0s31f6-longer\"",
     "spec.networking.interface: must be a Linux interface name (1 to 15 printable characters, "
     "no '/', ':' or whitespace), got \"enp0s31f6-longer\""},
    {"spec.networking.interface", "\"eth 0\"",
     "spec.networking.interface: must be a Linux interface name (1 to 15 printable characters, "
     "no '/', ':' or whitespace), got \"eth 0\""},
    {"spec.networking.interface", "\"../x\"",
     "spec.networking.interface: must be a Linux interface name (1 to 15 printable characters, "
     "no '/', ':' or whitespace), got \"../x\""},
    {"spec.networking.hostNetwork", "\"yes\"",
     "spec.networking.hostNetwork: must be a boolean, got string"},
    {RDMA, "[]", RDMA ": must be an object, got array"},
    {RDMA ".devicePath", "\"dev/infiniband\"",
     RDMA ".devicePath: must be an absolute path, got \"dev/infiniband\""},
    {RDMA ".resourceName", "\"hca\"",
     RDMA ".resourceName: must be an extended resource name like rdma/hca (a DNS subdomain "
     "outside kubernetes.io, '/', a name), got \"hca\""},
    {RDMA ".resourceName", "\"kubernetes.io/hca\"",
     RDMA ".resourceName: must be an extended resource name like rdma/hca (a DNS subdomain "
     "outside kubernetes.io, '/', a name), got \"kubernetes.io/hca\""},
    {RDMA ".resourceName", "\"Rdma/hca\"",
     RDMA ".resourceName: must be an extended resource name like rdma/hca (a DNS subdomain "
     "outside kubernetes.io, '/', a name), got \"Rdma/hca\""},
    {RDMA ".hca", "\"mlx5_0;reboot\"",
     RDMA ".hca: must be an NCCL_IB_HCA list (letters, digits and _:.,^=-), got \"mlx5_0;reboot\""},
    {RDMA ".gidIndex", "256", RDMA ".gidIndex: must be at most 255, got 256"},
    {RDMA ".gidIndex", "\"3\"", RDMA ".gidIndex: must be an integer, got string"},
    {RDMA ".gpuDirect", "\"no\"", RDMA ".gpuDirect: must be a boolean, got string"},
    {RDMA ".trafficClass", "-1", RDMA ".trafficClass: must be at least 0, got -1"},
    {"spec.placement", "\"rack\"", "spec.placement: must be an object, got string"},
    {"spec.placement.topologyKey", "7", "spec.placement.topologyKey: must be a string, got number"},
    {"spec.placement.topologyKey", "\"rack id\"",
     "spec.placement.topologyKey: must be a node label key (a qualified name such as "
     "topology.kubernetes.io/zone), got \"rack id\""},
    {"spec.placement.topologyKey", "\"Example.com/rack\"",
     "spec.placement.topologyKey: must be a node label key (a qualified name such as "
     "topology.kubernetes.io/zone), got \"Example.com/rack\""},
};

/* spec.placement, our extension: a node label key, kept as given; empty or absent is none. */
Test(spec, placement_topology_key)
{
    static const char *const good[] = {"topology.kubernetes.io/zone", "rack", "example.com/switch_1"};
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        cJSON *obj = parse_text(full_job);
        char value[128];
        snprintf(value, sizeof(value), "\"%s\"", good[i]);
        set_text(obj, "spec.placement.topologyKey", value);
        struct mpijob *job = parse_ok(obj);
        cr_expect_str_eq(job->placement.topology_key, good[i]);
        mpijob_free(job);
        cJSON_Delete(obj);
    }
    cJSON *obj = parse_text(full_job);
    set_text(obj, "spec.placement.topologyKey", "\"\"");
    struct mpijob *job = parse_ok(obj);
    cr_expect_null(job->placement.topology_key);
    mpijob_free(job);
    cJSON_Delete(obj);
}

Test(spec, each_rule_gives_exactly_its_problem_line)
{
    for (size_t i = 0; i < sizeof(rule_cases) / sizeof(rule_cases[0]); i++) {
        const struct rule_case *rc = &rule_cases[i];
        cJSON *obj = parse_text(full_job);
        set_text(obj, rc->path, rc->value);
        struct mpijob *job = (struct mpijob *)1;
        struct mpijob_problems p;
        int r = parse_job(obj, &job, &p);
        print_problems(&p);
        cr_expect_eq(r, MPIJOB_EINVALID, "%s=%s: rc %d", rc->path, rc->value, r);
        cr_expect_null(job, "%s: job set", rc->path);
        cr_expect_eq(p.count, 1, "%s=%s: %zu problems", rc->path, rc->value, p.count);
        if (p.count >= 1)
            cr_expect_str_eq(p.items[0], rc->want, "%s=%s", rc->path, rc->value);
        mpijob_problems_free(&p);
        cJSON_Delete(obj);
    }
}

/* Host network is one mode for the job, asked by the field or by either template; what cannot
 * work is refused naming the field (SPEC.md section 4). */
Test(spec, host_network_from_the_field_or_a_template_and_its_refusals)
{
    static const struct {
        struct edit edits[3];
        bool host_network;
        const char *problem; /* NULL: parses */
    } cases[] = {
        {{{"spec.networking.hostNetwork", "true"}}, true, NULL},
        {{{"spec.networking.hostNetwork", "false"}}, false, NULL},
        {{{WORKER ".template.spec.hostNetwork", "true"}}, true, NULL},
        {{{LAUNCHER ".template.spec.hostNetwork", "true"}}, true, NULL},
        {{{WORKER ".template.spec.hostNetwork", "false"}}, false, NULL},
        {{{"spec.networking.hostNetwork", "true"}, {WORKER ".template.spec.dnsPolicy", "\"None\""}},
         true, NULL},
        {{{"spec.networking.hostNetwork", "true"},
          {LAUNCHER ".template.spec.dnsPolicy", "\"ClusterFirstWithHostNet\""}},
         true, NULL},
        {{{"spec.networking.hostNetwork", "true"}, {WORKER ".template.spec.hostNetwork", "false"}},
         false,
         WORKER ".template.spec.hostNetwork: is false, but spec.networking.hostNetwork is true: "
                "the launcher and the workers must share one network mode"},
        {{{WORKER ".template.spec.hostNetwork", "true"}, {LAUNCHER ".template.spec.hostNetwork", "false"}},
         false,
         LAUNCHER ".template.spec.hostNetwork: is false, but " WORKER ".template.spec.hostNetwork "
                  "is true: the launcher and the workers must share one network mode"},
        {{{WORKER ".template.spec.hostNetwork", "true"}, {LAUNCHER ".template.spec.dnsPolicy", "\"ClusterFirst\""}},
         false,
         LAUNCHER ".template.spec.dnsPolicy: must be ClusterFirstWithHostNet (or None, with a "
                  "dnsConfig of your own) for a job on the host network (" WORKER
                  ".template.spec.hostNetwork), got \"ClusterFirst\": a host-network pod under "
                  "any other policy asks the node's resolver, which does not know the workers' names"},
        /* Without host network, a template's dnsPolicy is the user's business. */
        {{{WORKER ".template.spec.dnsPolicy", "\"Default\""}}, false, NULL},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        size_t n = 0;
        while (n < 3 && cases[i].edits[n].path)
            n++;
        cJSON *obj = edited(full_job, cases[i].edits, n);
        struct mpijob *job = NULL;
        struct mpijob_problems p;
        int rc = parse_job(obj, &job, &p);
        print_problems(&p);
        if (cases[i].problem) {
            cr_expect_eq(rc, MPIJOB_EINVALID, "case %zu: rc %d", i, rc);
            cr_expect_eq(p.count, 1, "case %zu: %zu problems", i, p.count);
            if (p.count == 1)
                cr_expect_str_eq(p.items[0], cases[i].problem, "case %zu", i);
        } else {
            cr_expect_eq(rc, 0, "case %zu: rc %d", i, rc);
            cr_expect(job && job->networking.host_network == cases[i].host_network,
                      "case %zu: host_network %d", i, job ? job->networking.host_network : -1);
            cr_expect(job && job->networking.ssh_port == 0, "case %zu: the port is not the spec's", i);
        }
        mpijob_problems_free(&p);
        mpijob_free(job);
        cJSON_Delete(obj);
    }
}

Test(spec, limits_bound_the_worker_count)
{
    cJSON *obj = parse_text(full_job);
    set_text(obj, WORKER ".replicas", "5");
    struct mpijob_limits limits = {.max_workers = 4};
    struct mpijob *job = NULL;
    struct mpijob_problems p;
    cr_assert_eq(mpijob_parse(obj, &limits, &job, &p), MPIJOB_EINVALID);
    cr_assert_eq(p.count, 1);
    cr_assert_str_eq(p.items[0], WORKER ".replicas: must be at most 4, got 5");
    mpijob_problems_free(&p);
    limits.max_workers = 5;
    cr_assert_eq(mpijob_parse(obj, &limits, &job, &p), 0);
    cr_assert_eq(job->worker.replicas, 5);
    mpijob_free(job);
    cJSON_Delete(obj);
}

Test(spec, several_bad_fields_are_all_listed_in_field_order)
{
    /* Set in an order different from the field order. */
    static const struct edit edits[] = {
        {"spec.networking.transport", "\"Infiniband\""},
        {LAUNCHER ".replicas", "3"},
        {WORKER ".restartPolicy", "\"Always\""},
        {"spec.slotsPerWorker", "0"},
        {"metadata.namespace", NULL},
        {RDMA ".gidIndex", "300"},
        {"spec.runPolicy.backoffLimit", "-2"},
    };
    cJSON *obj = edited(full_job, edits, sizeof(edits) / sizeof(edits[0]));
    struct mpijob *job = NULL;
    struct mpijob_problems p;
    cr_assert_eq(parse_job(obj, &job, &p), MPIJOB_EINVALID);
    const char *want[] = {
        "metadata.namespace: is required",
        "spec.slotsPerWorker: must be at least 1, got 0",
        "spec.runPolicy.backoffLimit: must be at least 0, got -2",
        LAUNCHER ".replicas: must be 1, got 3",
        WORKER ".restartPolicy: must be one of Never, OnFailure, got \"Always\"",
        "spec.networking.transport: must be one of Auto, TCP, RDMA, got \"Infiniband\"",
        RDMA ".gidIndex: must be at most 255, got 300",
    };
    print_problems(&p);
    cr_assert_eq(p.count, sizeof(want) / sizeof(want[0]));
    for (size_t i = 0; i < p.count; i++)
        cr_assert_str_eq(p.items[i], want[i]);

    char *joined = mpijob_problems_join(&p);
    cr_assert_not_null(joined);
    const char *head = "metadata.namespace: is required; spec.slotsPerWorker: must be";
    cr_assert(strncmp(joined, head, strlen(head)) == 0, "%s", joined);
    cr_assert_not_null(strstr(joined, "got 0; spec.runPolicy.backoffLimit"));
    free(joined);
    mpijob_problems_free(&p);
    cr_assert_eq(p.count, 0);
    cr_assert_null(p.items);
    cJSON_Delete(obj);
}

Test(spec, a_flood_of_problems_is_capped_with_a_count)
{
    cJSON *obj = parse_text(full_job);
    cJSON *containers = json_path(obj, LAUNCHER ".template.spec.containers");
    for (int i = 0; i < 1000; i++)
        cJSON_AddItemToArray(containers, cJSON_CreateNumber(i));
    struct mpijob *job = NULL;
    struct mpijob_problems p;
    cr_assert_eq(parse_job(obj, &job, &p), MPIJOB_EINVALID);
    cr_assert_eq(p.count, 33);
    cr_assert_str_eq(p.items[0],
                     LAUNCHER ".template.spec.containers[1]: must be an object, got number");
    cr_assert_str_eq(p.items[32], "spec: 968 more problems not listed");
    mpijob_problems_free(&p);
    cJSON_Delete(obj);
}

Test(spec, problems_may_be_null_and_non_objects_are_refused)
{
    cJSON *obj = parse_text(full_job);
    set_text(obj, "kind", "\"Job\"");
    struct mpijob *job = NULL;
    cr_assert_eq(mpijob_parse(obj, NULL, &job, NULL), MPIJOB_EINVALID);
    cr_assert_null(job);
    cJSON_Delete(obj);

    struct mpijob_problems p;
    cJSON *arr = cJSON_CreateArray();
    cr_assert_eq(mpijob_parse(arr, NULL, &job, &p), MPIJOB_EINVALID);
    cr_assert_eq(p.count, 1);
    cr_assert_str_eq(p.items[0], "MPIJob: must be an object, got array");
    mpijob_problems_free(&p);
    cJSON_Delete(arr);
    cr_assert_eq(mpijob_parse(NULL, NULL, &job, &p), MPIJOB_EINVALID);
    mpijob_problems_free(&p);
}

Test(spec, names_of_objects_and_enums)
{
    cJSON *obj = parse_text(full_job);
    struct mpijob *job = parse_ok(obj);
    char *s = mpijob_worker_name(job, 3);
    cr_assert_str_eq(s, "pi-worker-3");
    free(s);
    s = mpijob_launcher_name(job);
    cr_assert_str_eq(s, "pi-launcher");
    free(s);
    s = mpijob_configmap_name(job);
    cr_assert_str_eq(s, "pi-config");
    free(s);
    s = mpijob_secret_name(job);
    cr_assert_str_eq(s, "pi-ssh");
    free(s);
    mpijob_free(job);
    cJSON_Delete(obj);

    cr_assert_str_eq(mpi_implementation_name(MPI_OPENMPI), "OpenMPI");
    cr_assert_str_eq(mpi_implementation_name(MPI_INTEL), "Intel");
    cr_assert_str_eq(mpi_implementation_name(MPI_MPICH), "MPICH");
    cr_assert_str_eq(transport_name(TRANSPORT_AUTO), "Auto");
    cr_assert_str_eq(transport_name(TRANSPORT_TCP), "TCP");
    cr_assert_str_eq(transport_name(TRANSPORT_RDMA), "RDMA");
    cr_assert_str_eq(clean_pod_policy_name(CLEAN_POD_NONE), "None");
    cr_assert_str_eq(clean_pod_policy_name(CLEAN_POD_RUNNING), "Running");
    cr_assert_str_eq(clean_pod_policy_name(CLEAN_POD_ALL), "All");

    struct mpijob_problems none = {0};
    char *empty = mpijob_problems_join(&none);
    cr_assert_str_eq(empty, "");
    free(empty);
}

Test(spec, launcher_only_job_checks_the_launcher_name_length)
{
    cJSON *obj = parse_text(minimal_job);
    /* 54 + "-launcher" = 63: fits; one more does not. */
    set_text(obj, "metadata.name", "\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"");
    struct mpijob *job = parse_ok(obj);
    mpijob_free(job);
    set_text(obj, "metadata.name", "\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"");
    struct mpijob_problems p;
    cr_assert_eq(parse_job(obj, &job, &p), MPIJOB_EINVALID);
    cr_assert_eq(p.count, 1);
    const char *head = "metadata.name: too long: the launcher Job name";
    cr_assert(strncmp(p.items[0], head, strlen(head)) == 0, "%s", p.items[0]);
    mpijob_problems_free(&p);
    cJSON_Delete(obj);
}

/* ---- generated hostile bodies ------------------------------------------------------------- */

enum field_kind {
    KIND_INT,          /* every int field refuses -5 and 1e300 */
    KIND_NULLABLE_INT, /* 0..255 or null */
    KIND_BOOL,
    KIND_ENUM,
    KIND_STRING,       /* bounded free text */
    KIND_NONEMPTY,     /* bounded free text, "" refused */
    KIND_DNS,
    KIND_PATH,
    KIND_OBJECT,
    KIND_ARRAY,        /* non-empty array of objects */
    KIND_LIST,         /* optional array: [] is fine */
    KIND_IFNAME,
    KIND_RESOURCE,
    KIND_HCA,
    KIND_QUANTITY,
};

/* Tokens resolved at run time: @BIG a 10 MB string, @DEEP 200 nested arrays, @DEEPOBJ 200
 * nested objects, @LONG a 300-character name, @UTF8 a non-ASCII name. */
static const char *const bad_values[][12] = {
    [KIND_INT] = {"\"1\"", "true", "null", "[]", "{}", "1.5", "-5", "1e300", "-1e300", "@BIG",
                  "@DEEP"},
    [KIND_NULLABLE_INT] = {"\"1\"", "false", "[1]", "{}", "0.5", "-5", "256", "1e300", "@DEEP"},
    [KIND_BOOL] = {"\"true\"", "1", "0", "null", "[]", "{}", "@BIG", "@DEEP"},
    [KIND_ENUM] = {"\"bogus\"", "\"\"", "7", "true", "null", "[]", "{}", "@BIG", "@UTF8", "@DEEP"},
    [KIND_STRING] = {"7", "true", "null", "[\"x\"]", "{}", "@BIG", "@DEEPOBJ"},
    [KIND_NONEMPTY] = {"\"\"", "7", "false", "null", "[]", "{\"a\":1}", "@BIG", "@DEEP"},
    [KIND_DNS] = {"\"Upper\"", "\"a_b\"", "\"\"", "@UTF8", "@LONG", "@BIG", "7", "null", "[]",
                  "{}"},
    [KIND_PATH] = {"\"relative\"", "\"\"", "\"/a/../b\"", "\"/a\\u0001\"", "7", "null", "[]", "{}",
                   "@BIG", "@DEEP"},
    [KIND_OBJECT] = {"\"x\"", "7", "true", "null", "[]", "[{}]", "@BIG", "@DEEP"},
    [KIND_ARRAY] = {"\"x\"", "7", "null", "{}", "[]", "[1]", "[null]", "[[]]", "@BIG", "@DEEP"},
    [KIND_LIST] = {"\"x\"", "7", "true", "null", "{}", "@BIG"},
    [KIND_IFNAME] = {"\"eth 0\"", "\"a/b\"", "\"abcdefghijklmnop\"", "\".\"", "@UTF8", "7", "null",
                     "@BIG"},
    [KIND_RESOURCE] = {"\"hca\"", "\"/hca\"", "\"rdma/\"", "\"kubernetes.io/x\"", "7", "null",
                       "@BIG"},
    [KIND_QUANTITY] = {"\"\"", "\"4 cores\"", "\"1Zi\"", "\"-1\"", "\"e3\"", "-2", "false", "null",
                       "[]", "{}", "@BIG", "@DEEP"},
    [KIND_HCA] = {"\"mlx5 0\"", "\"mlx5_0;x\"", "\"$(reboot)\"", "7", "null", "[]", "@BIG"},
};

struct gen_field {
    const char *path;
    enum field_kind kind;
};

#define LAUNCHER_C0 LAUNCHER ".template.spec.containers[0]"

static const struct gen_field gen_fields[] = {
    {"apiVersion", KIND_ENUM},
    {"kind", KIND_ENUM},
    {"metadata", KIND_OBJECT},
    {"metadata.name", KIND_DNS},
    {"metadata.namespace", KIND_DNS},
    {"metadata.uid", KIND_STRING},
    {"metadata.generation", KIND_INT},
    {"spec", KIND_OBJECT},
    {"spec.slotsPerWorker", KIND_INT},
    {"spec.runLauncherAsWorker", KIND_BOOL},
    {"spec.mpiImplementation", KIND_ENUM},
    {"spec.sshAuthMountPath", KIND_PATH},
    {"spec.launcherCreationPolicy", KIND_ENUM},
    {"spec.cleanPodPolicy", KIND_ENUM},
    {"spec.runPolicy", KIND_OBJECT},
    {"spec.runPolicy.cleanPodPolicy", KIND_ENUM},
    {"spec.runPolicy.backoffLimit", KIND_INT},
    {"spec.runPolicy.activeDeadlineSeconds", KIND_INT},
    {"spec.runPolicy.ttlSecondsAfterFinished", KIND_INT},
    {"spec.runPolicy.suspend", KIND_BOOL},
    {"spec.runPolicy.managedBy", KIND_NONEMPTY},
    {SCHED, KIND_OBJECT},
    {SCHED ".minAvailable", KIND_INT},
    {SCHED ".queue", KIND_STRING},
    {SCHED ".minResources", KIND_OBJECT},
    {SCHED ".minResources.cpu", KIND_QUANTITY},
    {SCHED ".priorityClass", KIND_STRING},
    {SCHED ".scheduleTimeoutSeconds", KIND_INT},
    {"spec.mpiReplicaSpecs", KIND_OBJECT},
    {LAUNCHER, KIND_OBJECT},
    {LAUNCHER ".replicas", KIND_INT},
    {LAUNCHER ".restartPolicy", KIND_ENUM},
    {LAUNCHER ".template", KIND_OBJECT},
    {LAUNCHER ".template.metadata", KIND_OBJECT},
    {LAUNCHER ".template.spec", KIND_OBJECT},
    {LAUNCHER ".template.spec.containers", KIND_ARRAY},
    {LAUNCHER_C0, KIND_OBJECT},
    {LAUNCHER_C0 ".name", KIND_NONEMPTY},
    {LAUNCHER_C0 ".command", KIND_LIST},
    {LAUNCHER_C0 ".args", KIND_LIST},
    {LAUNCHER_C0 ".env", KIND_LIST},
    {LAUNCHER_C0 ".securityContext", KIND_OBJECT},
    {WORKER, KIND_OBJECT},
    {WORKER ".replicas", KIND_INT},
    {WORKER ".restartPolicy", KIND_ENUM},
    {WORKER ".template", KIND_OBJECT},
    {WORKER ".template.spec", KIND_OBJECT},
    {WORKER ".template.spec.containers", KIND_ARRAY},
    {WORKER ".template.spec.volumes", KIND_LIST},
    {WORKER_C0, KIND_OBJECT},
    {WORKER_C0 ".name", KIND_NONEMPTY},
    {WORKER_C0 ".volumeMounts", KIND_LIST},
    {WORKER_C0 ".resources", KIND_OBJECT},
    {"spec.networking", KIND_OBJECT},
    {"spec.networking.transport", KIND_ENUM},
    {"spec.networking.interface", KIND_IFNAME},
    {RDMA, KIND_OBJECT},
    {RDMA ".devicePath", KIND_PATH},
    {RDMA ".resourceName", KIND_RESOURCE},
    {RDMA ".hca", KIND_HCA},
    {RDMA ".gidIndex", KIND_NULLABLE_INT},
    {RDMA ".gpuDirect", KIND_BOOL},
    {RDMA ".trafficClass", KIND_NULLABLE_INT},
};

/* Bodies that are not a single field's wrong value. */
static const struct {
    const char *path;
    const char *value;
} gen_extra[] = {
    {LAUNCHER ".template", "{}"},
    {LAUNCHER ".template", "{\"metadata\":{}}"},
    {WORKER ".template.spec", "{\"containers\":[{\"image\":\"x\"}]}"},
    {WORKER ".template.spec.containers[0].env", "[{\"value\":\"1\"}]"},
    {WORKER ".template.spec.containers[0].env", "[[]]"},
    {WORKER ".template.metadata.annotations", "@DEEPOBJ"},
    {WORKER ".template.metadata.annotations.big", "@BIG"},
    {WORKER ".replicas", "1000000000"},
    {WORKER ".replicas", "-1000000000"},
    {WORKER ".replicas", "10001"},
    {LAUNCHER ".replicas", "1e9"},
    {"spec.slotsPerWorker", "-2147483649"},
    {"spec.slotsPerWorker", "9223372036854775807"},
    {"spec.runPolicy.activeDeadlineSeconds", "1e19"},
    {"spec.runPolicy.activeDeadlineSeconds", "-9223372036854775808"},
    {"metadata.name", "\"abcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcd\""},
    {"metadata.name", "\"job-\""},
    {"metadata.name", "\"-job\""},
    {"metadata.name", "\"job\\u0001x\""},
    {"metadata.name", "\"\\u30b8\\u30e7\\u30d6\""},
    {"spec.mpiReplicaSpecs.Launcher", "{\"replicas\":1}"},
    {"spec.networking.rdma.hca", "\"mlx5_0\\n\""},
    {SCHED ".minResources", "{\"cpu\":\"\"}"},
    {SCHED ".minResources.@LONG", "@BIG"},
};

static char *big_json;  /* "aaaa...": 10 MB */
static char *deep_json; /* [[[...]]] */
static char *deep_obj_json;
static char long_json[303]; /* "aaa...": 300 characters */

static const char *resolve(const char *value)
{
    if (strcmp(value, "@BIG") == 0)
        return big_json;
    if (strcmp(value, "@DEEP") == 0)
        return deep_json;
    if (strcmp(value, "@DEEPOBJ") == 0)
        return deep_obj_json;
    if (strcmp(value, "@LONG") == 0)
        return long_json;
    if (strcmp(value, "@UTF8") == 0)
        return "\"j\\u00f6b-\\u4e2d\\u6587\"";
    return value;
}

static void make_hostile_values(void)
{
    size_t big = 10u * 1024 * 1024;
    big_json = malloc(big + 3);
    big_json[0] = '"';
    memset(big_json + 1, 'a', big);
    big_json[big + 1] = '"';
    big_json[big + 2] = 0;
    long_json[0] = '"';
    memset(long_json + 1, 'a', 300);
    long_json[301] = '"';
    long_json[302] = 0;
    int depth = 200;
    deep_json = malloc(2 * (size_t)depth + 1);
    memset(deep_json, '[', (size_t)depth);
    memset(deep_json + depth, ']', (size_t)depth);
    deep_json[2 * depth] = 0;
    deep_obj_json = malloc(6 * (size_t)depth + 8);
    char *w = deep_obj_json;
    for (int i = 0; i < depth; i++)
        w += sprintf(w, "{\"a\":");
    w += sprintf(w, "1");
    for (int i = 0; i < depth; i++)
        *w++ = '}';
    *w = 0;
}

static void free_hostile_values(void)
{
    free(big_json);
    free(deep_json);
    free(deep_obj_json);
}

/* "a[b]" as "a.b", so that brackets and dots compare alike. */
static size_t flatten(const char *s, size_t n, char *out, size_t size)
{
    size_t w = 0;
    for (size_t i = 0; i < n && w + 1 < size; i++)
        if (s[i] != ']')
            out[w++] = s[i] == '[' ? '.' : s[i];
    out[w] = 0;
    return w;
}

/* Segment-wise prefix: "a.b" relates to "a.b.c" and "a.b[0]", not to "a.bc". */
static bool path_related(const char *field_text, size_t field_text_len, const char *path_text)
{
    char field[1024], path[1024];
    size_t field_len = flatten(field_text, field_text_len, field, sizeof(field));
    size_t path_len = flatten(path_text, strlen(path_text), path, sizeof(path));
    size_t n = field_len < path_len ? field_len : path_len;
    if (strncmp(field, path, n) != 0)
        return false;
    const char *longer = field_len > path_len ? field : path;
    char next = longer[n];
    return next == 0 || next == '.';
}

static const char *const field_roots[] = {"apiVersion", "kind", "metadata", "spec", "MPIJob"};

/* Runs one generated body; returns the number of failed expectations. */
static int run_hostile(const char *path, const char *value)
{
    cJSON *obj = parse_text(full_job);
    set_at(obj, path, parse_text(resolve(value)));
    /* Through text and back, as the operator receives it. */
    char *text = cJSON_PrintUnformatted(obj);
    cJSON_Delete(obj);
    cr_assert_not_null(text);
    obj = parse_text(text);
    free(text);

    struct mpijob *job = (struct mpijob *)1;
    struct mpijob_problems p;
    int rc = mpijob_parse(obj, NULL, &job, &p);
    int failed = 0;
    const char *shown = strlen(value) > 40 ? "(long)" : value;
    if (rc != MPIJOB_EINVALID || job != NULL || p.count == 0) {
        cr_log_error("%s = %s: rc %d, %zu problems", path, shown, rc, p.count);
        failed++;
    }
    bool named = false;
    for (size_t i = 0; i < p.count; i++) {
        const char *colon = strstr(p.items[i], ": ");
        bool rooted = false;
        for (size_t r = 0; colon && r < sizeof(field_roots) / sizeof(field_roots[0]); r++)
            rooted |= strncmp(p.items[i], field_roots[r], strlen(field_roots[r])) == 0;
        if (!rooted || strlen(p.items[i]) > 1024) {
            cr_log_error("%s = %s: malformed problem %.200s", path, shown, p.items[i]);
            failed++;
        }
        if (colon && path_related(p.items[i], (size_t)(colon - p.items[i]), path))
            named = true;
    }
    if (!named && p.count) {
        cr_log_error("%s = %s: no problem names the field; first: %s", path, shown, p.items[0]);
        failed++;
    }
    if (rc == 0)
        mpijob_free(job);
    mpijob_problems_free(&p);
    cJSON_Delete(obj);
    return failed;
}

Test(spec, generated_hostile_bodies_are_refused_cleanly)
{
    make_hostile_values();
    int bodies = 0, failed = 0;
    char path[512];
    for (size_t f = 0; f < sizeof(gen_fields) / sizeof(gen_fields[0]); f++) {
        const char *const *values = bad_values[gen_fields[f].kind];
        for (size_t v = 0; v < 12 && values[v]; v++) {
            failed += run_hostile(gen_fields[f].path, values[v]);
            bodies++;
        }
    }
    for (size_t i = 0; i < sizeof(gen_extra) / sizeof(gen_extra[0]); i++) {
        const char *p = gen_extra[i].path;
        const char *long_key = strstr(p, "@LONG");
        if (long_key) { /* a 300-character resource name as the key */
            snprintf(path, sizeof(path), "%.*s%.300s", (int)(long_key - p), p,
                     resolve("@LONG") + 1); /* without the quotes */
            p = path;
        }
        failed += run_hostile(p, gen_extra[i].value);
        bodies++;
    }
    free_hostile_values();
    cr_log_info("%d hostile bodies", bodies);
    cr_expect_geq(bodies, 200);
    cr_expect_eq(failed, 0, "%d of %d bodies mishandled", failed, bodies);
    cr_expect_eq(test_leak_check(), 0, "memory leaked");
}

Test(spec, valid_body_after_hostile_ones_leaks_nothing)
{
    /* The success path too: everything the job holds is released by mpijob_free. */
    for (int i = 0; i < 3; i++) {
        cJSON *obj = parse_text(i == 0 ? full_job : i == 1 ? legacy_job : minimal_job);
        mpijob_free(parse_ok(obj));
        cJSON_Delete(obj);
    }
    mpijob_free(NULL);
    mpijob_problems_free(NULL);
    cr_expect_eq(test_leak_check(), 0, "memory leaked");
}

Test(spec, quantities_as_kubernetes_reads_them)
{
    static const char *const good[] = {"4", "0.5", ".5", "1.", "+1", "500m", "8Gi", "1Ei", "2Pi", "1E",
                                       "1e3", "1E-2", "2.5e+6", "100n", "3u", "7k", "1M"};
    static const char *const bad[] = {"", ".", "-1", "1e", "1e+", "1Gib", "1K", "1ki", "1.2.3", "Gi",
                                      "1 Gi", "1Ei5", "0x10", "e3"};
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
        cr_expect(mpijob_quantity_valid(good[i]), "%s is a quantity", good[i]);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        cr_expect(!mpijob_quantity_valid(bad[i]), "%s is not a quantity", bad[i]);
}
