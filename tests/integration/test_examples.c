/* The example manifests apply and reconcile unchanged, the legacy v1alpha2 one included, and
 * the transport field shows in the launcher the operator builds. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kube/client.h"
#include "kube/config.h"
#include "mpijob/builders.h"
#include "mpijob/controller.h"
#include "support/apiserver.h"
#include "support/kube_test.h"
#include "support/kube_wait.h"
#include "util/buf.h"
#include "util/json.h"

static struct test_apiserver srv;
static struct kube_client *admin, *op;
static struct controller *ctl;

static struct kube_client *new_client(void) { return test_kube_client(&srv, NULL); }

static void setup(void)
{
    cr_assert_eq(test_apiserver_start(&srv), 0);
    admin = new_client();
    op = test_operator_client(&srv, NULL);
    struct controller_config cfg = {.client = op, .threads = 2};
    cr_assert_eq(controller_start(&cfg, &ctl), 0);
}

static void teardown(void)
{
    controller_stop(ctl);
    kube_client_free(op);
    kube_client_free(admin);
    test_apiserver_stop(&srv);
}

/* The manifest as JSON (YAML read by python3's yaml module, as kubectl would send it). */
static cJSON *load_manifest(const char *file)
{
    const char *root = getenv("MPIJOB_SRC_DIR");
    char cmd[1024];
    snprintf(cmd, sizeof(cmd),
             "python3 -c 'import json,sys,yaml; print(json.dumps(yaml.safe_load(open(sys.argv[1]))))' "
             "'%s/manifests/examples/%s'", root ? root : ".", file);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    struct buf b;
    buf_init(&b, 1 << 20);
    char chunk[4096];
    size_t n;
    while ((n = fread(chunk, 1, sizeof(chunk), p)) > 0)
        buf_append(&b, chunk, n);
    cr_assert_eq(pclose(p), 0, "could not read %s", file);
    cJSON *obj = cJSON_Parse(b.data);
    buf_free(&b);
    cr_assert_not_null(obj);
    return obj;
}

/* How long a wait on the controller may take: generous, for a busy machine (scaled). */
#define WAIT_MS 60000

/* The object once it exists (caller frees); fails the test after WAIT_MS. */
static cJSON *wait_object(const struct kube_resource *res, const char *name)
{
    cr_assert(test_kube_wait_exists(admin, res, "default", name, WAIT_MS), "%s %s created", res->kind, name);
    cJSON *obj = test_kube_get(admin, res, "default", name);
    cr_assert_not_null(obj, "%s %s is gone again", res->kind, name);
    return obj;
}

static cJSON *wait_launcher(const char *name)
{
    char lname[160];
    snprintf(lname, sizeof(lname), "%s-launcher", name);
    return wait_object(&KUBE_JOBS, lname);
}

/* Creates the example as a user applies it and returns its launcher Job (caller frees). No
 * kubelet runs here, so no worker turns Ready: the launcher is wanted at once. */
static cJSON *apply_example(const char *file)
{
    cJSON *obj = load_manifest(file);
    char name[128];
    snprintf(name, sizeof(name), "%s", json_string(obj, "metadata.name"));
    cJSON_DeleteItemFromObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(obj, "spec"), "launcherCreationPolicy");
    cr_assert_eq(kube_create(admin, &MPIJOB_RESOURCE_V2BETA1, "default", obj, NULL, NULL), 0, "%s created", file);
    cJSON_Delete(obj);
    return wait_launcher(name);
}

static const char *env_value(const cJSON *job, const char *name)
{
    const cJSON *c0 = cJSON_GetArrayItem(json_path(job, "spec.template.spec.containers"), 0);
    const cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(c0, "env")) {
        const char *n = json_string(e, "name");
        if (n && strcmp(n, name) == 0)
            return json_string(e, "value");
    }
    return NULL;
}

static const struct kube_resource MPIJOBS_V1ALPHA2 = {"kubeflow.org", "v1alpha2", "mpijobs", "MPIJob", true};

TestSuite(examples, .init = setup, .fini = teardown, .timeout = 180);

Test(examples, legacy_v1alpha2_manifest_reconciles_unchanged)
{
    cJSON *obj = load_manifest("mpijob-v1alpha2-legacy.yaml");
    const char *name = json_string(obj, "metadata.name");
    char *copy = strdup(name);
    cr_assert_eq(kube_create(admin, &MPIJOBS_V1ALPHA2, "default", obj, NULL, NULL), 0);
    cJSON_Delete(obj);
    cJSON *job = wait_launcher(copy);
    /* The user's -x list is kept as written; mpirun and privileged pods are untouched. */
    const cJSON *cmd = json_path(cJSON_GetArrayItem(json_path(job, "spec.template.spec.containers"), 0), "command");
    cr_assert_str_eq(cJSON_GetArrayItem(cmd, 0)->valuestring, "mpirun");
    cr_assert_null(env_value(job, "NCCL_NET"), "Auto: nothing transport-specific injected");
    cJSON_Delete(job);
    char w1[160];
    snprintf(w1, sizeof(w1), "%s-worker-1", copy);
    cJSON *pod = wait_object(&KUBE_PODS, w1);
    const cJSON *c0 = cJSON_GetArrayItem(json_path(pod, "spec.containers"), 0);
    cr_assert(json_bool(c0, "securityContext.privileged", false), "the legacy privileged worker is kept as written");
    cJSON_Delete(pod);
    free(copy);
}

Test(examples, tcp_example_gets_socket_transport)
{
    cJSON *job = apply_example("mpijob-tcp.yaml");
    cr_assert_str_eq(env_value(job, "NCCL_IB_DISABLE"), "1");
    cr_assert_str_eq(env_value(job, "NCCL_NET"), "Socket");
    cJSON_Delete(job);
}

Test(examples, rdma_examples_get_ib_transport_without_privileged)
{
    const char *files[] = {"mpijob-rdma.yaml", "mpijob-pvrdma.yaml"};
    for (size_t i = 0; i < 2; i++) {
        cJSON *job = apply_example(files[i]);
        cr_assert_str_eq(env_value(job, "NCCL_IB_DISABLE"), "0", "%s", files[i]);
        cr_assert_str_eq(env_value(job, "NCCL_NET"), "IB", "%s", files[i]);
        const cJSON *c0 = cJSON_GetArrayItem(json_path(job, "spec.template.spec.containers"), 0);
        cr_assert(!json_bool(c0, "securityContext.privileged", false), "%s: no privileged mode", files[i]);
        if (i == 1) {
            cr_assert_str_eq(env_value(job, "NCCL_IB_HCA"), "vmw_pvrdma0");
            cr_assert_str_eq(env_value(job, "NCCL_NET_GDR_LEVEL"), "LOC", "PVRDMA has no GPUDirect");
        }
        cJSON_Delete(job);
    }
}

/* The host-network RDMA example: every pod on the node's network with cluster DNS, the job's ssh
 * port declared, in the workers' sshd and in mpirun's ssh arguments; RDMA as without it. */
Test(examples, hostnetwork_rdma_example_puts_pods_on_the_node_network_with_a_port_of_their_own)
{
    cJSON *job = apply_example("mpijob-hostnetwork-rdma.yaml");
    const cJSON *spec = json_path(job, "spec.template.spec");
    cr_assert(json_bool(spec, "hostNetwork", false));
    cr_assert_str_eq(json_string(spec, "dnsPolicy"), "ClusterFirstWithHostNet");
    const char *port = env_value(job, "MPIJOB_SSH_PORT");
    cr_assert_not_null(port);
    char args[160];
    snprintf(args, sizeof(args), "-o ConnectionAttempts=10 -o ConnectTimeout=10 -o ServerAliveInterval=10 -o ServerAliveCountMax=3 -p %s", port);
    cr_assert_str_eq(env_value(job, "OMPI_MCA_plm_rsh_args"), args);
    cr_assert_str_eq(env_value(job, "NCCL_NET"), "IB");
    cr_assert_str_eq(env_value(job, "NCCL_SOCKET_IFNAME"), "ens1f0");
    cr_assert_str_eq(env_value(job, "NCCL_IB_GID_INDEX"), "3");
    const cJSON *c0 = cJSON_GetArrayItem(json_path(spec, "containers"), 0);
    cr_assert(!json_bool(c0, "securityContext.privileged", false), "no privileged mode");
    cr_assert_eq(json_int(cJSON_GetArrayItem(json_path(c0, "ports"), 0), "hostPort", 0), atoi(port));
    cJSON_Delete(job);
}
