/* The client and the operator with an in-cluster configuration (a pod's ServiceAccount folder:
 * token, ca.crt, namespace) against a running API server: a ca.crt the kubelet writes late is
 * waited for and then used, a rotated CA is read again after the first failed verification, and
 * the system's trust store is never asked instead. The operator waits for its CA alive and not
 * ready, saying why. */
#include <criterion/criterion.h>
#include <sched.h>
#include <sys/mount.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kube/client.h"
#include "kube/config.h"
#include "kube/errors.h"
#include "support/apiserver.h"
#include "support/deadline.h"
#include "support/kube_test.h"
#include "support/operator.h"

static struct test_apiserver srv;
static char sa_dir[300];

static void put(const char *name, const char *text)
{
    char path[400], aside[420];
    snprintf(path, sizeof(path), "%s/%s", sa_dir, name);
    snprintf(aside, sizeof(aside), "%s.new", path);
    FILE *f = fopen(aside, "w");
    cr_assert_not_null(f, "cannot write %s", aside);
    fputs(text, f);
    cr_assert_eq(fclose(f), 0);
    cr_assert_eq(rename(aside, path), 0, "the kubelet's way: write aside, then rename");
}

/* The whole text of a file of the server's state folder, in static storage of the slot. */
static const char *state_file(int slot, const char *name)
{
    static char text[2][16384];
    char path[400];
    snprintf(path, sizeof(path), "%s/%s", srv.dir, name);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "cannot read %s", path);
    size_t n = fread(text[slot], 1, sizeof(text[slot]) - 1, f);
    text[slot][n] = '\0';
    fclose(f);
    return text[slot];
}

static void setup(void)
{
    cr_assert_eq(test_apiserver_start(&srv), 0, "API server did not start");
    snprintf(sa_dir, sizeof(sa_dir), "%s/serviceaccount", srv.dir);
    cr_assert_eq(mkdir(sa_dir, 0755), 0);
    /* The operator's token, as its pod would have it. */
    struct kube_config *cfg = NULL;
    char err[512];
    cr_assert_eq(kube_config_load_kubeconfig(srv.operator_kubeconfig, NULL, &cfg, err, sizeof(err)), 0, "%s", err);
    char *token = kube_config_token(cfg);
    cr_assert_not_null(token);
    put("token", token);
    free(token);
    kube_config_free(cfg);
    put("namespace", "default\n");
    char port[16];
    snprintf(port, sizeof(port), "%d", srv.port);
    setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1", 1);
    setenv("KUBERNETES_SERVICE_PORT", port, 1);
}

static void teardown(void) { test_apiserver_stop(&srv); }

static void teardown_all(void)
{
    test_operator_stop_all();
    teardown();
}

TestSuite(incluster, .init = setup, .fini = teardown_all);

/* A client of the in-cluster configuration in sa_dir (the client owns it; *cfg_out is for the
 * test's settings), with no retries of its own: each call is one attempt. */
static struct kube_client *in_cluster_client(struct kube_config **cfg_out)
{
    struct kube_config *cfg = NULL;
    char err[512];
    cr_assert_eq(kube_config_load_in_cluster(sa_dir, &cfg, err, sizeof(err)), 0, "%s", err);
    struct kube_client_options opts = {.qps = -1, .max_retries = -1};
    struct kube_client *c = NULL;
    cr_assert_eq(kube_client_new(cfg, &opts, &c), 0);
    *cfg_out = cfg;
    return c;
}

/* One GET /version (open to every ServiceAccount): the client's code, and the message in msg. */
static int get_version(struct kube_client *c, char *msg, size_t len)
{
    struct kube_status st = {.retry_after_s = -1};
    cJSON *version = NULL;
    int rc = kube_request(c, "GET", "/version", NULL, NULL, NULL, &version, &st);
    snprintf(msg, len, "%s", st.message ? st.message : "");
    kube_status_clear(&st);
    cJSON_Delete(version);
    return rc;
}

Test(incluster, a_ca_written_late_is_waited_for_then_used, .timeout = 120)
{
    struct kube_config *cfg;
    struct kube_client *c = in_cluster_client(&cfg);
    char msg[1024];
    char ca_path[400];
    snprintf(ca_path, sizeof(ca_path), "%s/ca.crt", sa_dir);

    int rc = get_version(c, msg, sizeof(msg));
    cr_assert_eq(rc, KUBE_ETRANSPORT, "no CA yet: a transport error to retry (got %d: %s)", rc, msg);
    cr_assert_not_null(strstr(msg, ca_path), "the error names the CA file: %s", msg);
    cr_assert_null(strstr(msg, "issuer"), "nothing was verified with the system's trust store: %s", msg);

    put("ca.crt", state_file(0, "ca.crt"));
    rc = get_version(c, msg, sizeof(msg));
    cr_assert_eq(rc, 0, "the CA, once written, is used at the next request (got %d: %s)", rc, msg);
    kube_client_free(c); /* and its configuration */
}

Test(incluster, a_rotated_ca_is_read_again_after_a_failed_verification, .timeout = 120)
{
    /* Another CA first: a cluster whose CA was rotated after the pod read the old one. */
    char cmd[1024];
    snprintf(cmd, sizeof(cmd),
             "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj /CN=old-root "
             "-keyout /dev/null -out %s/old-ca.crt -days 1 2>/dev/null", srv.dir);
    cr_assert_eq(system(cmd), 0);
    put("ca.crt", state_file(0, "old-ca.crt"));
    struct kube_config *cfg;
    struct kube_client *c = in_cluster_client(&cfg);
    kube_config_set_ca_check_ms(cfg, UINT64_MAX); /* only a failed verification makes it look */
    char msg[1024];

    int rc = get_version(c, msg, sizeof(msg));
    cr_assert_eq(rc, KUBE_ETRANSPORT, "the old CA does not verify the server (got %d: %s)", rc, msg);
    cr_assert_not_null(strstr(msg, "certificate"), "curl's reason: %s", msg);

    put("ca.crt", state_file(1, "ca.crt"));
    rc = get_version(c, msg, sizeof(msg));
    cr_assert_eq(rc, 0, "the failed verification made the client read the CA file again (got %d: %s)", rc, msg);
    kube_client_free(c); /* and its configuration */
}

/* In the operator's child: a mount namespace of its own where the test's folder is
 * /var/run/secrets/kubernetes.io/serviceaccount, as in a pod (a tmpfs over /run keeps the host's
 * untouched), and no kubeconfig in the environment. */
static int enter_pod_mounts(void *arg)
{
    const char *dir = arg;
    if (unshare(CLONE_NEWNS) != 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
        mount("tmpfs", "/run", "tmpfs", 0, "mode=0755") != 0)
        return -1;
    const char *parts[] = {"/run/secrets", "/run/secrets/kubernetes.io", "/run/secrets/kubernetes.io/serviceaccount"};
    for (size_t i = 0; i < sizeof(parts) / sizeof(parts[0]); i++)
        if (mkdir(parts[i], 0755) != 0)
            return -1;
    if (mount(dir, "/var/run/secrets/kubernetes.io/serviceaccount", NULL, MS_BIND, NULL) != 0)
        return -1;
    unsetenv("KUBECONFIG");
    return 0;
}

/* Polls the operator's /readyz until it answers want, for up to test_ms(ms); the last answer in
 * body. */
static bool wait_ready(int port, long want, char *body, size_t len, uint64_t ms)
{
    struct test_deadline d = test_deadline_in(ms);
    do {
        if (test_http_get(port, "/readyz", body, len) == want)
            return true;
    } while (test_deadline_poll_every(&d, 100));
    test_wait_failed("/readyz to answer", &d, body);
    return false;
}

Test(incluster, the_operator_waits_for_its_ca_alive_and_not_ready, .timeout = 240)
{
    if (geteuid() != 0)
        cr_skip_test("needs root: a mount namespace puts the ServiceAccount folder where a pod has it");
    struct test_operator op;
    char *const args[] = {(char *)test_operator_binary(), "--leader-elect=false", "--namespace", "default",
                          "--metrics-addr", "0", "--health-addr", "127.0.0.1:0", NULL};
    test_operator_start(&op, args, enter_pod_mounts, sa_dir);

    /* No ca.crt: alive from the start, not ready, and both say why, naming the file. */
    const char *ca_file = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt";
    cr_assert(test_operator_wait_log(&op, "API server not reachable yet", 1, 60000), "it waits for the API server");
    cr_assert(test_operator_log_has(&op, ca_file), "the log names the CA file:\n%s", test_operator_log_tail(&op, 4000));
    int port = test_operator_port(&op, "health");
    cr_assert_gt(port, 0, "the health server's port is logged:\n%s", test_operator_log_tail(&op, 4000));
    char body[4096];
    cr_assert_eq(test_http_get(port, "/healthz", body, sizeof(body)), 200, "alive while it waits: %s", body);
    cr_assert_eq(test_http_get(port, "/readyz", body, sizeof(body)), 503, "not ready while it waits: %s", body);
    cr_assert_not_null(strstr(body, ca_file), "/readyz says why: %s", body);
    cr_assert_eq(test_operator_wait_exit(&op, 0), -1, "still running:\n%s", test_operator_log_tail(&op, 4000));

    /* The kubelet writes ca.crt: the next attempt connects, and the operator becomes ready. */
    put("ca.crt", state_file(0, "ca.crt"));
    bool ready = wait_ready(port, 200, body, sizeof(body), 120000);
    cr_assert(ready, "ready once its CA is there; last /readyz: %s\nlog:\n%s", body, test_operator_log_tail(&op, 4000));
    cr_assert(test_operator_log_has(&op, "the in-cluster CA is there now"));
    test_operator_stop(&op);
}
