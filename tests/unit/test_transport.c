#include <criterion/criterion.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpijob/transport.h"

/* ---- helpers ---------------------------------------------------------------------------- */

static cJSON *parse(const char *text)
{
    cJSON *j = cJSON_Parse(text);
    cr_assert_not_null(j, "bad JSON in the test itself: %s", text);
    return j;
}

__attribute__((format(printf, 1, 2)))
static cJSON *parsef(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *text = NULL;
    cr_assert_geq(vasprintf(&text, fmt, ap), 0);
    va_end(ap);
    cJSON *j = parse(text);
    free(text);
    return j;
}

/* Semantic comparison (object member order does not matter, array order does); both trees are
 * printed when they differ. */
static void expect_json(const cJSON *got, const cJSON *want, const char *label)
{
    if (cJSON_Compare(got, want, true))
        return;
    char *g = cJSON_PrintUnformatted(got), *w = cJSON_PrintUnformatted(want);
    cr_log_error("%s\n--- got:\n%s\n--- want:\n%s", label, g, w);
    cr_assert_fail("%s: the templates differ (both printed above)", label);
}

static void expect_json_text(const cJSON *got, const char *want_text, const char *label)
{
    cJSON *want = parse(want_text);
    expect_json(got, want, label);
    cJSON_Delete(want);
}

/* want is NULL-terminated. */
static void expect_lines(char *const *got, size_t n, const char *const *want, const char *what,
                         const char *label)
{
    size_t n_want = 0;
    while (want && want[n_want])
        n_want++;
    for (size_t i = 0; i < n && i < n_want; i++)
        cr_assert_str_eq(got[i], want[i], "%s: %s line %zu", label, what, i);
    cr_assert_eq(n, n_want, "%s: %zu %s lines, want %zu%s%s", label, n, what, n_want,
                 n > n_want ? "; first extra: " : "", n > n_want ? got[n_want] : "");
}

/* Pieces of the templates RDMA writes: its variables, the device mount, the capability, the
 * device volume. */
#define RDMA_ENV "{\"name\":\"NCCL_IB_DISABLE\",\"value\":\"0\"},{\"name\":\"NCCL_NET\",\"value\":\"IB\"}"
#define RDMA_MOUNT "\"volumeMounts\":[{\"name\":\"rdma-devices\",\"mountPath\":\"/dev/infiniband\"}]"
#define IPC_LOCK_ADDED "\"securityContext\":{\"capabilities\":{\"add\":[\"IPC_LOCK\"]}}"
#define RDMA_VOLUME "\"volumes\":[{\"name\":\"rdma-devices\",\"hostPath\":{\"path\":\"/dev/infiniband\"}}]"

/* Built by hand so these tests do not depend on the parser; parser defaults otherwise. */
static struct mpijob *job_new(enum transport t, enum mpi_implementation impl)
{
    struct mpijob *job = calloc(1, sizeof(*job));
    cr_assert_not_null(job);
    job->name = strdup("pi");
    job->namespace = strdup("ns");
    job->implementation = impl;
    job->slots_per_worker = 1;
    job->networking.transport = t;
    job->networking.rdma.device_path = strdup("/dev/infiniband");
    job->networking.rdma.gid_index = -1;
    job->networking.rdma.traffic_class = -1;
    return job;
}

static void job_set(char **field, const char *value)
{
    free(*field);
    *field = value ? strdup(value) : NULL;
}

static void job_free(struct mpijob *job)
{
    free(job->name);
    free(job->namespace);
    free(job->networking.interface);
    free(job->networking.rdma.device_path);
    free(job->networking.rdma.resource_name);
    free(job->networking.rdma.hca);
    free(job);
}

/* RDMA with GPUDirect: nothing but the defaults and the two variables. */
static struct mpijob *job_rdma_gdr(enum mpi_implementation impl)
{
    struct mpijob *job = job_new(TRANSPORT_RDMA, impl);
    job->networking.rdma.gpu_direct = true;
    return job;
}

static struct mpijob *job_rdma_full(enum mpi_implementation impl)
{
    struct mpijob *job = job_new(TRANSPORT_RDMA, impl);
    job_set(&job->networking.interface, "eth1");
    job_set(&job->networking.rdma.hca, "mlx5_0:1");
    job_set(&job->networking.rdma.resource_name, "rdma/hca");
    job->networking.rdma.gid_index = 3;
    job->networking.rdma.traffic_class = 106;
    return job;
}

/* Applies and checks the result against want_text; the report is left for the caller. */
static void apply_expect(const struct mpijob *job, enum pod_role role, const char *template_text,
                         const char *want_text, struct transport_report *report, const char *label)
{
    cJSON *tmpl = parse(template_text);
    cr_assert_eq(transport_apply(job, role, tmpl, report), 0, "%s", label);
    expect_json_text(tmpl, want_text, label);
    cJSON_Delete(tmpl);
}

/* Applies and checks the result against want_text and the report: the conflicts it lists are
 * `conflicts` (NULL-terminated; NULL: none) and, with all_forwarded, nothing is left for the user
 * to forward. */
static void apply_reported(const struct mpijob *job, enum pod_role role, const char *template_text,
                           const char *want_text, const char *const *conflicts, bool all_forwarded, const char *label)
{
    struct transport_report r = {0};
    apply_expect(job, role, template_text, want_text, &r, label);
    expect_lines(r.conflicts, r.n_conflicts, conflicts, "conflict", label);
    if (all_forwarded)
        cr_assert_eq(r.n_unforwarded, 0, "%s: %zu variables not forwarded", label, r.n_unforwarded);
    transport_report_free(&r);
}

/* ---- the matrix ----------------------------------------------------------------------------
 * networking × implementation × user env × launcher command, plus worker templates. The
 * expected template is built here from literal pieces, independently of the code under test,
 * and the whole template is compared. */

struct var {
    const char *name, *value;
};

struct network_case {
    const char *label;
    enum transport transport;
    bool interface, rdma_full;
    struct var vars[8]; /* the NCCL variables, in order; the MPI interface one is added below */
};

static const struct network_case networks[] = {
    {"Auto", TRANSPORT_AUTO, false, false, {{0}}},
    {"TCP", TRANSPORT_TCP, false, false, {{"NCCL_IB_DISABLE", "1"}, {"NCCL_NET", "Socket"}}},
    {"TCP eth1", TRANSPORT_TCP, true, false,
     {{"NCCL_IB_DISABLE", "1"}, {"NCCL_NET", "Socket"}, {"NCCL_SOCKET_IFNAME", "eth1"}}},
    {"RDMA", TRANSPORT_RDMA, false, false,
     {{"NCCL_IB_DISABLE", "0"}, {"NCCL_NET", "IB"}, {"NCCL_NET_GDR_LEVEL", "LOC"}}},
    {"RDMA full", TRANSPORT_RDMA, true, true,
     {{"NCCL_IB_DISABLE", "0"},
      {"NCCL_NET", "IB"},
      {"NCCL_IB_HCA", "mlx5_0:1"},
      {"NCCL_IB_GID_INDEX", "3"},
      {"NCCL_NET_GDR_LEVEL", "LOC"},
      {"NCCL_IB_TC", "106"},
      {"NCCL_SOCKET_IFNAME", "eth1"}}},
};

static const struct {
    enum mpi_implementation impl;
    const char *label;
    struct var iface; /* MPI's own traffic on networking.interface */
} implementations[] = {
    {MPI_OPENMPI, "OpenMPI", {"OMPI_MCA_btl_tcp_if_include", "eth1"}},
    {MPI_INTEL, "Intel", {"I_MPI_HYDRA_IFACE", "eth1"}},
    {MPI_MPICH, "MPICH", {"HYDRA_IFACE", "eth1"}},
};

enum user_env { USER_NONE, USER_CONFLICT, USER_SAME };
static const char *const user_env_labels[] = {"no user env", "user conflict", "user same value"};

enum forwarding { FWD_ENV_LIST, FWD_X, FWD_UNFORWARDED };

static const struct command_case {
    const char *label;
    const char *command, *args; /* JSON arrays, or NULL */
    const char *env_list;       /* the user's OMPI_MCA_mca_base_env_list, or NULL */
    enum forwarding openmpi;    /* what Open MPI needs */
} commands[] = {
    {"mpirun", "[\"mpirun\",\"-np\",\"2\",\"mpijob-worker\",\"train\"]", NULL, NULL, FWD_ENV_LIST},
    {"mpirun -x", "[\"mpirun\",\"-x\",\"FOO\",\"-np\",\"2\",\"python\",\"train.py\"]", NULL, NULL, FWD_X},
    {"command mpirun, args -x", "[\"mpirun\"]", "[\"-x\",\"A\",\"train.py\"]", NULL, FWD_X},
    {"sh -c with -x", "[\"sh\",\"-c\",\"mpirun -x FOO -np 2 python train.py\"]", NULL, NULL, FWD_UNFORWARDED},
    {"sh -c without -x", "[\"sh\",\"-c\",\"mpirun -np 2 python train.py\"]", NULL, NULL, FWD_ENV_LIST},
    {"user env list", "[\"mpirun\",\"-np\",\"2\",\"mpijob-worker\",\"train\"]", NULL, "FOO", FWD_ENV_LIST},
};

/* The wanted value of NCCL_IB_DISABLE for the transport, and the other one. */
static const char *ib_disable(enum transport t, bool conflicting)
{
    bool tcp = t != TRANSPORT_RDMA; /* Auto wants nothing; any value will do */
    return (tcp != conflicting) ? "1" : "0";
}

static cJSON *input_template(enum pod_role role, const struct network_case *net, const struct command_case *c,
                             enum user_env u)
{
    cJSON *tmpl = parse("{\"metadata\":{\"labels\":{\"app\":\"pi\"}},"
                        "\"spec\":{\"containers\":[{\"name\":\"main\",\"image\":\"mpi:1\","
                        "\"env\":[{\"name\":\"FOO\",\"value\":\"bar\"}]}],"
                        "\"volumes\":[{\"name\":\"data\",\"emptyDir\":{}}]}}");
    cJSON *container = cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetObjectItem(tmpl, "spec"), "containers"), 0);
    cJSON *env = cJSON_GetObjectItem(container, "env");
    if (u != USER_NONE)
        cJSON_AddItemToArray(env, parsef("{\"name\":\"NCCL_IB_DISABLE\",\"value\":\"%s\"}",
                                         ib_disable(net->transport, u == USER_CONFLICT)));
    if (role == ROLE_LAUNCHER) {
        if (c->command)
            cJSON_AddItemToObject(container, "command", parse(c->command));
        if (c->args)
            cJSON_AddItemToObject(container, "args", parse(c->args));
        if (c->env_list)
            cJSON_AddItemToArray(env, parsef("{\"name\":\"OMPI_MCA_mca_base_env_list\",\"value\":\"%s\"}",
                                             c->env_list));
    }
    return tmpl;
}

static size_t expected_vars(const struct network_case *net, size_t impl, struct var *out)
{
    size_t n = 0;
    for (; n < 8 && net->vars[n].name; n++)
        out[n] = net->vars[n];
    if (net->interface)
        out[n++] = implementations[impl].iface;
    return n;
}

static cJSON *expected_template(enum pod_role role, const struct network_case *net, size_t impl,
                                const struct command_case *c, enum user_env u)
{
    cJSON *tmpl = input_template(role, net, c, u);
    if (net->transport == TRANSPORT_AUTO)
        return tmpl;
    cJSON *spec = cJSON_GetObjectItem(tmpl, "spec");
    cJSON *container = cJSON_GetArrayItem(cJSON_GetObjectItem(spec, "containers"), 0);
    cJSON *env = cJSON_GetObjectItem(container, "env");

    struct var vars[10];
    size_t n = expected_vars(net, impl, vars);
    char names[512] = "";
    for (size_t i = 0; i < n; i++) {
        if (!(u != USER_NONE && strcmp(vars[i].name, "NCCL_IB_DISABLE") == 0))
            cJSON_AddItemToArray(env, parsef("{\"name\":\"%s\",\"value\":\"%s\"}", vars[i].name, vars[i].value));
        if (strncmp(vars[i].name, "OMPI_MCA_", 9) != 0)
            snprintf(names + strlen(names), sizeof(names) - strlen(names), "%s%s", names[0] ? ";" : "",
                     vars[i].name);
    }

    if (role == ROLE_LAUNCHER && implementations[impl].impl == MPI_OPENMPI) {
        if (c->openmpi == FWD_ENV_LIST && c->env_list) {
            cJSON *entry = cJSON_GetArrayItem(env, u != USER_NONE ? 2 : 1);
            char merged[600];
            snprintf(merged, sizeof(merged), "%s;%s", c->env_list, names);
            cJSON_ReplaceItemInObject(entry, "value", cJSON_CreateString(merged));
        } else if (c->openmpi == FWD_ENV_LIST) {
            cJSON_AddItemToArray(env, parsef("{\"name\":\"OMPI_MCA_mca_base_env_list\",\"value\":\"%s\"}", names));
        } else if (c->openmpi == FWD_X) {
            /* argv[0] is in command; rebuilt rather than inserted into, because Debian's cJSON
             * 1.7.15 (deb12u4) fails cJSON_InsertItemInArray past index 0 */
            cJSON *command = cJSON_GetObjectItem(container, "command");
            cJSON *rebuilt = cJSON_CreateArray();
            cJSON_AddItemToArray(rebuilt, cJSON_DetachItemFromArray(command, 0));
            for (char *name = strtok(names, ";"); name; name = strtok(NULL, ";")) {
                cJSON_AddItemToArray(rebuilt, cJSON_CreateString("-x"));
                cJSON_AddItemToArray(rebuilt, cJSON_CreateString(name));
            }
            while (cJSON_GetArraySize(command) > 0)
                cJSON_AddItemToArray(rebuilt, cJSON_DetachItemFromArray(command, 0));
            cJSON_ReplaceItemInObject(container, "command", rebuilt);
        }
    }

    if (net->transport == TRANSPORT_RDMA) {
        cJSON_AddItemToArray(cJSON_GetObjectItem(spec, "volumes"),
                             parse("{\"name\":\"rdma-devices\",\"hostPath\":{\"path\":\"/dev/infiniband\"}}"));
        cJSON_AddItemToObject(container, "volumeMounts",
                              parse("[{\"name\":\"rdma-devices\",\"mountPath\":\"/dev/infiniband\"}]"));
        cJSON_AddItemToObject(container, "securityContext", parse("{\"capabilities\":{\"add\":[\"IPC_LOCK\"]}}"));
        if (net->rdma_full)
            cJSON_AddItemToObject(container, "resources",
                                  parse("{\"limits\":{\"rdma/hca\":\"1\"},\"requests\":{\"rdma/hca\":\"1\"}}"));
    }
    return tmpl;
}

static struct mpijob *matrix_job(const struct network_case *net, size_t impl)
{
    struct mpijob *job = net->rdma_full ? job_rdma_full(implementations[impl].impl)
                                        : job_new(net->transport, implementations[impl].impl);
    if (net->interface)
        job_set(&job->networking.interface, "eth1");
    return job;
}

static void run_matrix_case(enum pod_role role, size_t ni, size_t ii, const struct command_case *c, enum user_env u)
{
    const struct network_case *net = &networks[ni];
    char label[256];
    snprintf(label, sizeof(label), "%s / %s / %s / %s", role == ROLE_LAUNCHER ? "launcher" : "worker",
             net->label, implementations[ii].label, role == ROLE_LAUNCHER ? c->label : "sshd");
    snprintf(label + strlen(label), sizeof(label) - strlen(label), " / %s", user_env_labels[u]);

    struct mpijob *job = matrix_job(net, ii);
    cJSON *tmpl = input_template(role, net, c, u);
    cJSON *want = expected_template(role, net, ii, c, u);
    struct transport_report report = {0};
    cr_assert_eq(transport_apply(job, role, tmpl, &report), 0, "%s", label);
    expect_json(tmpl, want, label);

    /* conflicts: only a differing user value, and only when the transport wants one */
    char conflict[200];
    snprintf(conflict, sizeof(conflict),
             "NCCL_IB_DISABLE: the %s template sets %s, transport %s wants %s; the template's value is kept",
             role == ROLE_LAUNCHER ? "launcher" : "worker", ib_disable(net->transport, true),
             net->transport == TRANSPORT_TCP ? "TCP" : "RDMA", ib_disable(net->transport, false));
    const char *conflicts[] = {conflict, NULL};
    bool conflicted = u == USER_CONFLICT && net->transport != TRANSPORT_AUTO;
    expect_lines(report.conflicts, report.n_conflicts, conflicted ? conflicts : NULL, "conflict", label);

    /* unforwarded: an Open MPI launcher whose shell line uses -x; all but OMPI_MCA_* */
    const char *unforwarded[10] = {0};
    if (role == ROLE_LAUNCHER && implementations[ii].impl == MPI_OPENMPI && c->openmpi == FWD_UNFORWARDED &&
        net->transport != TRANSPORT_AUTO) {
        struct var vars[10];
        size_t n = expected_vars(net, ii, vars), k = 0;
        for (size_t i = 0; i < n; i++)
            if (strncmp(vars[i].name, "OMPI_MCA_", 9) != 0)
                unforwarded[k++] = vars[i].name;
    }
    expect_lines(report.unforwarded, report.n_unforwarded, unforwarded, "unforwarded", label);
    cr_assert_eq(report.unforwarded_reason != NULL, report.n_unforwarded > 0, "%s", label);

    /* the variables in order, as transport_env lists them */
    struct var vars[10];
    size_t n = net->transport == TRANSPORT_AUTO ? 0 : expected_vars(net, ii, vars);
    cJSON *env = transport_env(job), *want_env = cJSON_CreateArray();
    for (size_t i = 0; i < n; i++)
        cJSON_AddItemToArray(want_env, parsef("{\"name\":\"%s\",\"value\":\"%s\"}", vars[i].name, vars[i].value));
    expect_json(env, want_env, label);

    /* applying again changes nothing: a template already edited reads as the user's own */
    struct transport_report again = {0};
    cr_assert_eq(transport_apply(job, role, tmpl, &again), 0, "%s (again)", label);
    expect_json(tmpl, want, label);
    expect_lines(again.unforwarded, again.n_unforwarded, unforwarded, "unforwarded (again)", label);

    cJSON_Delete(env);
    cJSON_Delete(want_env);
    transport_report_free(&again);
    transport_report_free(&report);
    cJSON_Delete(want);
    cJSON_Delete(tmpl);
    job_free(job);
}

Test(transport, launcher_matrix)
{
    size_t cases = 0;
    for (size_t ni = 0; ni < sizeof(networks) / sizeof(networks[0]); ni++)
        for (size_t ii = 0; ii < 3; ii++)
            for (size_t ci = 0; ci < sizeof(commands) / sizeof(commands[0]); ci++)
                for (int u = USER_NONE; u <= USER_SAME; u++, cases++)
                    run_matrix_case(ROLE_LAUNCHER, ni, ii, &commands[ci], u);
    cr_assert_eq(cases, 5 * 3 * 6 * 3);
}

Test(transport, worker_matrix)
{
    for (size_t ni = 0; ni < sizeof(networks) / sizeof(networks[0]); ni++)
        for (size_t ii = 0; ii < 3; ii++)
            for (int u = USER_NONE; u <= USER_SAME; u++)
                run_matrix_case(ROLE_WORKER, ni, ii, &commands[0], u);
}

/* ---- whole templates written out -------------------------------------------------------- */

Test(transport, tcp_openmpi_plain_mpirun_gets_env_list)
{
    struct mpijob *job = job_new(TRANSPORT_TCP, MPI_OPENMPI);
    apply_reported(job, ROLE_LAUNCHER,
                   "{\"metadata\":{},\"spec\":{\"containers\":[{\"name\":\"l\","
                   "\"command\":[\"mpirun\",\"-np\",\"2\",\"mpijob-worker\",\"train\"]}]}}",
                   "{\"metadata\":{},\"spec\":{\"containers\":[{\"name\":\"l\","
                   "\"command\":[\"mpirun\",\"-np\",\"2\",\"mpijob-worker\",\"train\"],"
                   "\"env\":[{\"name\":\"NCCL_IB_DISABLE\",\"value\":\"1\"},"
                   "{\"name\":\"NCCL_NET\",\"value\":\"Socket\"},"
                   "{\"name\":\"OMPI_MCA_mca_base_env_list\",\"value\":\"NCCL_IB_DISABLE;NCCL_NET\"}]}]}}",
                   NULL, true, "tcp plain");
    job_free(job);
}

Test(transport, rdma_openmpi_mpirun_x_gets_x_and_device)
{
    struct mpijob *job = job_rdma_full(MPI_OPENMPI);
    apply_reported(job, ROLE_LAUNCHER,
                   "{\"spec\":{\"containers\":[{\"name\":\"l\",\"image\":\"i\","
                   "\"command\":[\"mpirun\",\"-x\",\"FOO\",\"-np\",\"2\",\"python\",\"train.py\"]}]}}",
                   "{\"spec\":{\"containers\":[{\"name\":\"l\",\"image\":\"i\","
                   "\"command\":[\"mpirun\",\"-x\",\"NCCL_IB_DISABLE\",\"-x\",\"NCCL_NET\",\"-x\",\"NCCL_IB_HCA\","
                   "\"-x\",\"NCCL_IB_GID_INDEX\",\"-x\",\"NCCL_NET_GDR_LEVEL\",\"-x\",\"NCCL_IB_TC\","
                   "\"-x\",\"NCCL_SOCKET_IFNAME\",\"-x\",\"FOO\",\"-np\",\"2\",\"python\",\"train.py\"],"
                   "\"env\":[" RDMA_ENV ","
                   "{\"name\":\"NCCL_IB_HCA\",\"value\":\"mlx5_0:1\"},{\"name\":\"NCCL_IB_GID_INDEX\",\"value\":\"3\"},"
                   "{\"name\":\"NCCL_NET_GDR_LEVEL\",\"value\":\"LOC\"},{\"name\":\"NCCL_IB_TC\",\"value\":\"106\"},"
                   "{\"name\":\"NCCL_SOCKET_IFNAME\",\"value\":\"eth1\"},"
                   "{\"name\":\"OMPI_MCA_btl_tcp_if_include\",\"value\":\"eth1\"}],"
                   RDMA_MOUNT ","
                   IPC_LOCK_ADDED ","
                   "\"resources\":{\"limits\":{\"rdma/hca\":\"1\"},\"requests\":{\"rdma/hca\":\"1\"}}}],"
                   RDMA_VOLUME "}}",
                   NULL, true, "rdma -x");
    job_free(job);
}

Test(transport, rdma_intel_worker_env_and_device_only)
{
    struct mpijob *job = job_rdma_gdr(MPI_INTEL);
    job_set(&job->networking.rdma.hca, "vmw_pvrdma0");
    apply_expect(job, ROLE_WORKER, "{\"spec\":{\"containers\":[{\"name\":\"w\"}]}}",
                 "{\"spec\":{\"containers\":[{\"name\":\"w\","
                 "\"env\":[" RDMA_ENV ","
                 "{\"name\":\"NCCL_IB_HCA\",\"value\":\"vmw_pvrdma0\"}],"
                 RDMA_MOUNT ","
                 IPC_LOCK_ADDED "}],"
                 RDMA_VOLUME "}}",
                 NULL, "intel worker");
    job_free(job);
}

Test(transport, auto_changes_nothing)
{
    struct mpijob *job = job_new(TRANSPORT_AUTO, MPI_OPENMPI);
    job_set(&job->networking.interface, "eth1");
    const char *t = "{\"spec\":{\"containers\":[{\"name\":\"l\",\"command\":[\"mpirun\",\"prog\"]}]}}";
    apply_expect(job, ROLE_LAUNCHER, t, t, NULL, "auto launcher");
    apply_expect(job, ROLE_WORKER, t, t, NULL, "auto worker");
    job_free(job);
}

/* ---- RDMA merges with what the template already has ---------------------------------------- */

Test(transport, rdma_keeps_users_device_mount_capability_and_resource)
{
    struct mpijob *job = job_rdma_full(MPI_MPICH);
    apply_reported(job, ROLE_WORKER,
                   "{\"spec\":{\"containers\":[{\"name\":\"w\","
                   "\"volumeMounts\":[{\"name\":\"ib\",\"mountPath\":\"/dev/infiniband/\"}],"
                   "\"securityContext\":{\"runAsUser\":0,\"capabilities\":{\"add\":[\"SYS_NICE\",\"ipc_lock\"],"
                   "\"drop\":[\"ALL\"]}},"
                   "\"resources\":{\"limits\":{\"rdma/hca\":\"2\",\"cpu\":\"4\"}}}],"
                   "\"volumes\":[{\"name\":\"ib\",\"hostPath\":{\"path\":\"/dev/infiniband\"}}]}}",
                   "{\"spec\":{\"containers\":[{\"name\":\"w\","
                   "\"volumeMounts\":[{\"name\":\"ib\",\"mountPath\":\"/dev/infiniband/\"}],"
                   "\"securityContext\":{\"runAsUser\":0,\"capabilities\":{\"add\":[\"SYS_NICE\",\"ipc_lock\"],"
                   "\"drop\":[\"ALL\"]}},"
                   "\"resources\":{\"limits\":{\"rdma/hca\":\"2\",\"cpu\":\"4\"},\"requests\":{\"rdma/hca\":\"2\"}},"
                   "\"env\":[" RDMA_ENV ","
                   "{\"name\":\"NCCL_IB_HCA\",\"value\":\"mlx5_0:1\"},{\"name\":\"NCCL_IB_GID_INDEX\",\"value\":\"3\"},"
                   "{\"name\":\"NCCL_NET_GDR_LEVEL\",\"value\":\"LOC\"},{\"name\":\"NCCL_IB_TC\",\"value\":\"106\"},"
                   "{\"name\":\"NCCL_SOCKET_IFNAME\",\"value\":\"eth1\"},{\"name\":\"HYDRA_IFACE\",\"value\":\"eth1\"}]}],"
                   "\"volumes\":[{\"name\":\"ib\",\"hostPath\":{\"path\":\"/dev/infiniband\"}}]}}",
                   NULL, false, "user's own");
    job_free(job);
}

/* A worker container under RDMA with GPUDirect: its fields `in` are kept as `kept`, and RDMA
 * adds its variables, the device mount and the device volume (and its capability, where the
 * container has neither it nor privileged mode); the report lists `conflicts`. */
struct rdma_worker_case {
    enum mpi_implementation impl;
    const char *resource_name; /* NULL: none */
    const char *in, *kept;
    const char *conflicts[2];
};

static void expect_rdma_worker(const struct rdma_worker_case *k, const char *label)
{
    struct mpijob *job = job_rdma_gdr(k->impl);
    if (k->resource_name)
        job_set(&job->networking.rdma.resource_name, k->resource_name);
    char *in = NULL, *want = NULL;
    cr_assert_geq(asprintf(&in, "{\"spec\":{\"containers\":[{\"name\":\"w\",%s}]}}", k->in), 0);
    cr_assert_geq(asprintf(&want, "{\"spec\":{\"containers\":[{\"name\":\"w\",%s,\"env\":[" RDMA_ENV "]," RDMA_MOUNT
                                  "}]," RDMA_VOLUME "}}",
                           k->kept),
                  0);
    apply_reported(job, ROLE_WORKER, in, want, k->conflicts, false, label);
    free(in);
    free(want);
    job_free(job);
}

#define RDMA_WORKER_CASE(name, ...)                                                                   \
    Test(transport, name)                                                                             \
    {                                                                                                 \
        static const struct rdma_worker_case k = {__VA_ARGS__};                                       \
        expect_rdma_worker(&k, #name);                                                                \
    }

RDMA_WORKER_CASE(rdma_capability_forms_and_requests_only, .impl = MPI_INTEL, .resource_name = "rdma/hca",
                 .in = "\"securityContext\":{\"capabilities\":{\"add\":[\"CAP_IPC_LOCK\"]}},"
                       "\"resources\":{\"requests\":{\"rdma/hca\":2}}",
                 .kept = "\"securityContext\":{\"capabilities\":{\"add\":[\"CAP_IPC_LOCK\"]}},"
                         "\"resources\":{\"requests\":{\"rdma/hca\":2},\"limits\":{\"rdma/hca\":2}}")

RDMA_WORKER_CASE(rdma_legacy_privileged_template_stays_as_written, .impl = MPI_OPENMPI,
                 .in = "\"securityContext\":{\"privileged\":true}", .kept = "\"securityContext\":{\"privileged\":true}")

RDMA_WORKER_CASE(rdma_never_sets_privileged_and_reports_a_dropped_ipc_lock, .impl = MPI_OPENMPI,
                 .in = "\"securityContext\":{\"privileged\":false,\"capabilities\":{\"drop\":[\"IPC_LOCK\"]}}",
                 .kept = "\"securityContext\":{\"privileged\":false,"
                         "\"capabilities\":{\"drop\":[\"IPC_LOCK\"],\"add\":[\"IPC_LOCK\"]}}",
                 .conflicts = {"IPC_LOCK: the worker template drops this capability, transport RDMA needs it to "
                               "register memory; the template's drop is kept"})

Test(transport, rdma_volume_names)
{
    struct mpijob *job = job_rdma_gdr(MPI_OPENMPI);
    job_set(&job->networking.rdma.device_path, "/dev/rdma");
    /* the name is taken by something else: the next free one */
    apply_expect(job, ROLE_WORKER,
                 "{\"spec\":{\"containers\":[{\"name\":\"w\",\"env\":null}],"
                 "\"volumes\":[{\"name\":\"rdma-devices\",\"emptyDir\":{}}]}}",
                 "{\"spec\":{\"containers\":[{\"name\":\"w\","
                 "\"env\":[" RDMA_ENV "],"
                 "\"volumeMounts\":[{\"name\":\"rdma-devices-1\",\"mountPath\":\"/dev/rdma\"}],"
                 IPC_LOCK_ADDED "}],"
                 "\"volumes\":[{\"name\":\"rdma-devices\",\"emptyDir\":{}},"
                 "{\"name\":\"rdma-devices-1\",\"hostPath\":{\"path\":\"/dev/rdma\"}}]}}",
                 NULL, "name taken");
    /* the same host path declared but not mounted in container 0: reused */
    apply_expect(job, ROLE_WORKER,
                 "{\"spec\":{\"containers\":[{\"name\":\"w\"},{\"name\":\"side\",\"volumeMounts\":"
                 "[{\"name\":\"rdma-devices\",\"mountPath\":\"/dev/rdma\"}]}],"
                 "\"volumes\":[{\"name\":\"rdma-devices\",\"hostPath\":{\"path\":\"/dev/rdma/\"}}]}}",
                 "{\"spec\":{\"containers\":[{\"name\":\"w\","
                 "\"env\":[" RDMA_ENV "],"
                 "\"volumeMounts\":[{\"name\":\"rdma-devices\",\"mountPath\":\"/dev/rdma\"}],"
                 IPC_LOCK_ADDED "},"
                 "{\"name\":\"side\",\"volumeMounts\":[{\"name\":\"rdma-devices\",\"mountPath\":\"/dev/rdma\"}]}],"
                 "\"volumes\":[{\"name\":\"rdma-devices\",\"hostPath\":{\"path\":\"/dev/rdma/\"}}]}}",
                 NULL, "same volume");
    job_free(job);
}

Test(transport, tcp_mounts_no_device)
{
    struct mpijob *job = job_new(TRANSPORT_TCP, MPI_MPICH);
    job_set(&job->networking.rdma.resource_name, "rdma/hca"); /* ignored for TCP */
    apply_expect(job, ROLE_WORKER, "{\"spec\":{\"containers\":[{\"name\":\"w\"}]}}",
                 "{\"spec\":{\"containers\":[{\"name\":\"w\","
                 "\"env\":[{\"name\":\"NCCL_IB_DISABLE\",\"value\":\"1\"},{\"name\":\"NCCL_NET\",\"value\":\"Socket\"}]}]}}",
                 NULL, "tcp");
    job_free(job);
}

/* ---- Open MPI forwarding details ---------------------------------------------------------- */

#define TCP_ENV                                                                                    \
    "{\"name\":\"NCCL_IB_DISABLE\",\"value\":\"1\"},{\"name\":\"NCCL_NET\",\"value\":\"Socket\"}"

struct forwarding_case {
    const char *label;
    const char *container_in, *container_want; /* container 0, without the transport's env */
    const char *env_in, *env_want;              /* env arrays */
    const char *unforwarded[3];
    const char *conflict;
};

static const struct forwarding_case forwarding_cases[] = {
    {"--x counts as -x", "\"command\":[\"mpirun\",\"--x\",\"FOO\",\"prog\"]",
     "\"command\":[\"mpirun\",\"-x\",\"NCCL_IB_DISABLE\",\"-x\",\"NCCL_NET\",\"--x\",\"FOO\",\"prog\"]", "[]",
     "[" TCP_ENV "]", {NULL}, NULL},
    {"mpirun by path", "\"command\":[\"/usr/bin/mpirun.openmpi\",\"-x\",\"FOO\",\"prog\"]",
     "\"command\":[\"/usr/bin/mpirun.openmpi\",\"-x\",\"NCCL_IB_DISABLE\",\"-x\",\"NCCL_NET\",\"-x\",\"FOO\",\"prog\"]",
     "[]", "[" TCP_ENV "]", {NULL}, NULL},
    {"args only", "\"args\":[\"mpiexec\",\"-x\",\"FOO\",\"prog\"]",
     "\"args\":[\"mpiexec\",\"-x\",\"NCCL_IB_DISABLE\",\"-x\",\"NCCL_NET\",\"-x\",\"FOO\",\"prog\"]", "[]",
     "[" TCP_ENV "]", {NULL}, NULL},
    {"-x already names ours", "\"command\":[\"orterun\",\"-x\",\"NCCL_NET\",\"prog\"]",
     "\"command\":[\"orterun\",\"-x\",\"NCCL_IB_DISABLE\",\"-x\",\"NCCL_NET\",\"prog\"]", "[]",
     "[" TCP_ENV "]", {NULL}, NULL},
    {"-x NAME=other value", "\"command\":[\"mpirun\",\"-x\",\"NCCL_NET=IB\",\"prog\"]",
     "\"command\":[\"mpirun\",\"-x\",\"NCCL_IB_DISABLE\",\"-x\",\"NCCL_NET=IB\",\"prog\"]", "[]",
     "[" TCP_ENV "]", {NULL},
     "NCCL_NET: the launcher command forwards NCCL_NET=IB, transport TCP wants Socket; that value is kept"},
    {"mpirun --mca mca_base_env_list", "\"command\":[\"mpirun\",\"--mca\",\"mca_base_env_list\",\"FOO\",\"prog\"]",
     "\"command\":[\"mpirun\",\"--mca\",\"mca_base_env_list\",\"FOO;NCCL_IB_DISABLE;NCCL_NET\",\"prog\"]", "[]",
     "[" TCP_ENV "]", {NULL}, NULL},
    {"mpirun -mca list in args", "\"command\":[\"mpirun\"],\"args\":[\"-mca\",\"mca_base_env_list\",\"NCCL_NET\",\"p\"]",
     "\"command\":[\"mpirun\"],\"args\":[\"-mca\",\"mca_base_env_list\",\"NCCL_NET;NCCL_IB_DISABLE\",\"p\"]", "[]",
     "[" TCP_ENV "]", {NULL}, NULL},
    {"set -x in a shell line", "\"command\":[\"bash\",\"-c\",\"set -x; mpirun -np 2 prog\"]",
     "\"command\":[\"bash\",\"-c\",\"set -x; mpirun -np 2 prog\"]", "[]",
     "[" TCP_ENV ",{\"name\":\"OMPI_MCA_mca_base_env_list\",\"value\":\"NCCL_IB_DISABLE;NCCL_NET\"}]", {NULL}, NULL},
    {"bash -x -c", "\"command\":[\"/bin/bash\",\"-x\",\"-c\",\"mpirun -np 2 prog\"]",
     "\"command\":[\"/bin/bash\",\"-x\",\"-c\",\"mpirun -np 2 prog\"]", "[]",
     "[" TCP_ENV ",{\"name\":\"OMPI_MCA_mca_base_env_list\",\"value\":\"NCCL_IB_DISABLE;NCCL_NET\"}]", {NULL}, NULL},
    {"shell line forwards one of ours", "\"command\":[\"sh\",\"-c\",\"mpirun -x 'NCCL_IB_DISABLE' -x FOO prog\"]",
     "\"command\":[\"sh\",\"-c\",\"mpirun -x 'NCCL_IB_DISABLE' -x FOO prog\"]", "[]", "[" TCP_ENV "]",
     {"NCCL_NET", NULL}, NULL},
    {"shell line sets its own env list",
     "\"command\":[\"sh\",\"-c\",\"export OMPI_MCA_mca_base_env_list=FOO\\nmpirun prog\"]",
     "\"command\":[\"sh\",\"-c\",\"export OMPI_MCA_mca_base_env_list=FOO\\nmpirun prog\"]", "[]",
     "[" TCP_ENV "]", {"NCCL_IB_DISABLE", "NCCL_NET", NULL}, NULL},
    {"wrapper program", "\"command\":[\"python\",\"launch.py\",\"--np\",\"2\"]",
     "\"command\":[\"python\",\"launch.py\",\"--np\",\"2\"]", "[]",
     "[" TCP_ENV ",{\"name\":\"OMPI_MCA_mca_base_env_list\",\"value\":\"NCCL_IB_DISABLE;NCCL_NET\"}]", {NULL}, NULL},
    {"wrapper program with -x", "\"command\":[\"/opt/run.sh\"],\"args\":[\"-x\",\"FOO\"]",
     "\"command\":[\"/opt/run.sh\"],\"args\":[\"-x\",\"FOO\"]", "[]", "[" TCP_ENV "]",
     {"NCCL_IB_DISABLE", "NCCL_NET", NULL}, NULL},
    {"image entrypoint", "\"image\":\"x\"", "\"image\":\"x\"", "[]",
     "[" TCP_ENV ",{\"name\":\"OMPI_MCA_mca_base_env_list\",\"value\":\"NCCL_IB_DISABLE;NCCL_NET\"}]", {NULL}, NULL},
    {"user env list with its own delimiter", "\"image\":\"x\"", "\"image\":\"x\"",
     "[{\"name\":\"OMPI_MCA_mca_base_env_list_delimiter\",\"value\":\",\"},"
     "{\"name\":\"OMPI_MCA_mca_base_env_list\",\"value\":\"A,NCCL_NET\"}]",
     "[{\"name\":\"OMPI_MCA_mca_base_env_list_delimiter\",\"value\":\",\"},"
     "{\"name\":\"OMPI_MCA_mca_base_env_list\",\"value\":\"A,NCCL_NET,NCCL_IB_DISABLE\"}," TCP_ENV "]",
     {NULL}, NULL},
    {"user env list ending in the delimiter", "\"image\":\"x\"", "\"image\":\"x\"",
     "[{\"name\":\"OMPI_MCA_mca_base_env_list\",\"value\":\"A=1;\"}]",
     "[{\"name\":\"OMPI_MCA_mca_base_env_list\",\"value\":\"A=1;NCCL_IB_DISABLE;NCCL_NET\"}," TCP_ENV "]",
     {NULL}, NULL},
    {"user env list with another value", "\"image\":\"x\"", "\"image\":\"x\"",
     "[{\"name\":\"OMPI_MCA_mca_base_env_list\",\"value\":\"NCCL_IB_DISABLE=0\"}]",
     "[{\"name\":\"OMPI_MCA_mca_base_env_list\",\"value\":\"NCCL_IB_DISABLE=0;NCCL_NET\"}," TCP_ENV "]", {NULL},
     "NCCL_IB_DISABLE: OMPI_MCA_mca_base_env_list in the launcher template forwards NCCL_IB_DISABLE=0, "
     "transport TCP wants 1; that value is kept"},
    {"user env list from valueFrom", "\"image\":\"x\"", "\"image\":\"x\"",
     "[{\"name\":\"OMPI_MCA_mca_base_env_list\",\"valueFrom\":{\"configMapKeyRef\":{\"name\":\"c\",\"key\":\"k\"}}}]",
     "[{\"name\":\"OMPI_MCA_mca_base_env_list\",\"valueFrom\":{\"configMapKeyRef\":{\"name\":\"c\",\"key\":\"k\"}}},"
     TCP_ENV "]",
     {"NCCL_IB_DISABLE", "NCCL_NET", NULL}, NULL},
    {"user variable from valueFrom", "\"image\":\"x\"", "\"image\":\"x\"",
     "[{\"name\":\"NCCL_NET\",\"valueFrom\":{\"fieldRef\":{\"fieldPath\":\"metadata.name\"}}}]",
     "[{\"name\":\"NCCL_NET\",\"valueFrom\":{\"fieldRef\":{\"fieldPath\":\"metadata.name\"}}},"
     "{\"name\":\"NCCL_IB_DISABLE\",\"value\":\"1\"},"
     "{\"name\":\"OMPI_MCA_mca_base_env_list\",\"value\":\"NCCL_IB_DISABLE;NCCL_NET\"}]",
     {NULL},
     "NCCL_NET: the launcher template takes it from valueFrom, transport TCP wants Socket; the template's value "
     "is kept"},
    {"user variable set twice: the last one counts", "\"image\":\"x\"", "\"image\":\"x\"",
     "[{\"name\":\"NCCL_NET\",\"value\":\"IB\"},{\"name\":\"NCCL_NET\",\"value\":\"Socket\"}]",
     "[{\"name\":\"NCCL_NET\",\"value\":\"IB\"},{\"name\":\"NCCL_NET\",\"value\":\"Socket\"},"
     "{\"name\":\"NCCL_IB_DISABLE\",\"value\":\"1\"},"
     "{\"name\":\"OMPI_MCA_mca_base_env_list\",\"value\":\"NCCL_IB_DISABLE;NCCL_NET\"}]",
     {NULL}, NULL},
    {"user variable without a value", "\"image\":\"x\"", "\"image\":\"x\"", "[{\"name\":\"NCCL_NET\"}]",
     "[{\"name\":\"NCCL_NET\"},{\"name\":\"NCCL_IB_DISABLE\",\"value\":\"1\"},"
     "{\"name\":\"OMPI_MCA_mca_base_env_list\",\"value\":\"NCCL_IB_DISABLE;NCCL_NET\"}]",
     {NULL}, "NCCL_NET: the launcher template sets \"\", transport TCP wants Socket; the template's value is kept"},
};

Test(transport, openmpi_forwarding_cases)
{
    struct mpijob *job = job_new(TRANSPORT_TCP, MPI_OPENMPI);
    for (size_t i = 0; i < sizeof(forwarding_cases) / sizeof(forwarding_cases[0]); i++) {
        const struct forwarding_case *c = &forwarding_cases[i];
        cJSON *tmpl = parsef("{\"spec\":{\"containers\":[{%s,\"env\":%s}]}}", c->container_in, c->env_in);
        cJSON *want = parsef("{\"spec\":{\"containers\":[{%s,\"env\":%s}]}}", c->container_want, c->env_want);
        struct transport_report r = {0};
        cr_assert_eq(transport_apply(job, ROLE_LAUNCHER, tmpl, &r), 0, "%s", c->label);
        expect_json(tmpl, want, c->label);
        expect_lines(r.unforwarded, r.n_unforwarded, c->unforwarded, "unforwarded", c->label);
        const char *conflicts[] = {c->conflict, NULL};
        expect_lines(r.conflicts, r.n_conflicts, conflicts, "conflict", c->label);
        transport_report_free(&r);
        cJSON_Delete(want);
        cJSON_Delete(tmpl);
    }
    job_free(job);
}

Test(transport, interface_exclude_list_refuses_our_include)
{
    struct mpijob *job = job_new(TRANSPORT_TCP, MPI_OPENMPI);
    job_set(&job->networking.interface, "eth1");
    static const char *const conflicts[] = {"OMPI_MCA_btl_tcp_if_include: the launcher template sets OMPI_MCA_btl_tcp_if_exclude, "
                          "which cannot be combined with it; networking.interface eth1 is not applied to it",
                          NULL};
    apply_reported(job, ROLE_LAUNCHER,
                   "{\"spec\":{\"containers\":[{\"command\":[\"mpirun\",\"p\"],"
                   "\"env\":[{\"name\":\"OMPI_MCA_btl_tcp_if_exclude\",\"value\":\"lo,eth0\"}]}]}}",
                   "{\"spec\":{\"containers\":[{\"command\":[\"mpirun\",\"p\"],"
                   "\"env\":[{\"name\":\"OMPI_MCA_btl_tcp_if_exclude\",\"value\":\"lo,eth0\"}," TCP_ENV ","
                   "{\"name\":\"NCCL_SOCKET_IFNAME\",\"value\":\"eth1\"},"
                   "{\"name\":\"OMPI_MCA_mca_base_env_list\",\"value\":\"NCCL_IB_DISABLE;NCCL_NET;NCCL_SOCKET_IFNAME\"}]}]}}",
                   conflicts, false, "exclude");
    job_free(job);
}

Test(transport, intel_and_mpich_launchers_are_never_rewritten)
{
    for (int impl = MPI_INTEL; impl <= MPI_MPICH; impl++) {
        struct mpijob *job = job_new(TRANSPORT_TCP, impl);
        apply_reported(job, ROLE_LAUNCHER,
                       "{\"spec\":{\"containers\":[{\"command\":[\"sh\",\"-c\",\"mpirun -x A -n 2 p\"]}]}}",
                       "{\"spec\":{\"containers\":[{\"command\":[\"sh\",\"-c\",\"mpirun -x A -n 2 p\"],"
                       "\"env\":[" TCP_ENV "]}]}}",
                       NULL, true, impl == MPI_INTEL ? "intel" : "mpich");
        job_free(job);
    }
}

/* ---- report and errors ---------------------------------------------------------------------- */

Test(transport, report_accumulates_and_names_what_to_forward)
{
    struct mpijob *job = job_new(TRANSPORT_TCP, MPI_OPENMPI);
    struct transport_report r = {0};
    cr_assert_null(transport_unforwarded_message(&r));
    cJSON *launcher = parse("{\"spec\":{\"containers\":[{\"command\":[\"sh\",\"-c\",\"mpirun -x A p\"],"
                            "\"env\":[{\"name\":\"NCCL_NET\",\"value\":\"IB\"}]}]}}");
    cJSON *worker = parse("{\"spec\":{\"containers\":[{\"env\":[{\"name\":\"NCCL_NET\",\"value\":\"IB\"}]}]}}");
    cr_assert_eq(transport_apply(job, ROLE_LAUNCHER, launcher, &r), 0);
    cr_assert_eq(transport_apply(job, ROLE_WORKER, worker, &r), 0);
    const char *conflicts[] = {
        "NCCL_NET: the launcher template sets IB, transport TCP wants Socket; the template's value is kept",
        "NCCL_NET: the worker template sets IB, transport TCP wants Socket; the template's value is kept", NULL};
    expect_lines(r.conflicts, r.n_conflicts, conflicts, "conflict", "accumulated");
    char *msg = transport_unforwarded_message(&r);
    cr_assert_str_eq(msg, "the launcher command is a shell line or wrapper that forwards variables with -x, "
                          "which the operator does not rewrite: add -x NCCL_IB_DISABLE -x NCCL_NET to it so "
                          "that the ranks get them");
    free(msg);
    transport_report_free(&r);
    cr_assert_eq(r.n_conflicts + r.n_unforwarded, 0);
    transport_report_free(&r); /* twice is harmless */
    cJSON_Delete(launcher);
    cJSON_Delete(worker);
    job_free(job);
}

Test(transport, rejects_templates_it_cannot_edit)
{
    static const char *const bad[] = {
        "{}",
        "{\"spec\":{}}",
        "{\"spec\":{\"containers\":[]}}",
        "{\"spec\":{\"containers\":{}}}",
        "{\"spec\":{\"containers\":[\"c\"]}}",
        "{\"spec\":{\"containers\":[{\"env\":{}}]}}",
        "{\"spec\":{\"containers\":[{\"command\":\"mpirun\"}]}}",
        "{\"spec\":{\"containers\":[{\"volumeMounts\":{}}]}}",
        "{\"spec\":{\"volumes\":7,\"containers\":[{}]}}",
        "{\"spec\":{\"containers\":[{\"securityContext\":[]}]}}",
        "{\"spec\":{\"containers\":[{\"resources\":{\"limits\":\"x\"}}]}}",
    };
    struct mpijob *job = job_rdma_full(MPI_OPENMPI);
    struct mpijob *auto_job = job_new(TRANSPORT_AUTO, MPI_OPENMPI);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        cJSON *tmpl = parse(bad[i]);
        struct transport_report r = {0};
        cr_assert_eq(transport_apply(job, ROLE_LAUNCHER, tmpl, &r), -EINVAL, "%s", bad[i]);
        transport_report_free(&r);
        cJSON_Delete(tmpl);
    }
    for (size_t i = 0; i < 5; i++) { /* without containers even Auto refuses */
        cJSON *tmpl = parse(bad[i]);
        cr_assert_eq(transport_apply(auto_job, ROLE_WORKER, tmpl, NULL), -EINVAL, "auto %s", bad[i]);
        cJSON_Delete(tmpl);
    }
    job_free(auto_job);
    job_free(job);
}
