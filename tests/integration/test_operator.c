/* The mpijob-operator program itself: flags, a missing CRD, an unreachable API server,
 * serving a job, and SIGTERM. Runs build/bin/mpijob-operator (make test builds it first). */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kube/client.h"
#include "mpijob/builders.h"
#include "support/apiserver.h"
#include "support/kube_test.h"
#include "util/clock.h"

static char binary[512], log_path[600];

static void find_binary(void)
{
    const char *root = getenv("MPIJOB_SRC_DIR");
    snprintf(binary, sizeof(binary), "%s/build/bin/mpijob-operator", root ? root : ".");
    cr_assert_eq(access(binary, X_OK), 0, "%s is missing: make all first", binary);
    snprintf(log_path, sizeof(log_path), "/tmp/mpijob-operator-test.%d.log", getpid());
}

/* Starts the operator with args (NULL-terminated after argv[0]); output goes to log_path. */
static pid_t spawn(char *const args[])
{
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        FILE *out = freopen(log_path, "w", stderr);
        (void)out;
        dup2(2, 1);
        execv(binary, args);
        _exit(127);
    }
    return pid;
}

/* Exit status, or -1 while it is still running after ms. */
static int wait_exit(pid_t pid, uint64_t ms)
{
    uint64_t end = clock_now_ms() + ms;
    int status;
    while (clock_now_ms() < end) {
        if (waitpid(pid, &status, WNOHANG) == pid)
            return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        clock_sleep_ms(20);
    }
    return -1;
}

static bool log_has(const char *text)
{
    FILE *f = fopen(log_path, "r");
    if (!f)
        return false;
    static char buf[65536];
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    buf[n] = 0;
    fclose(f);
    return strstr(buf, text) != NULL;
}

Test(operator, bad_flags_exit_2_with_usage, .init = find_binary, .timeout = 30)
{
    char *const a1[] = {binary, "--threads", "many", NULL};
    cr_assert_eq(wait_exit(spawn(a1), 5000), 2);
    cr_assert(log_has("--threads must be an integer"));
    cr_assert(log_has("Usage: mpijob-operator"));
    char *const a2[] = {binary, "--no-such-flag", NULL};
    cr_assert_eq(wait_exit(spawn(a2), 5000), 2);
    char *const a3[] = {binary, "--help", NULL};
    cr_assert_eq(wait_exit(spawn(a3), 5000), 0);
    unlink(log_path);
}

Test(operator, missing_crd_is_a_clear_error, .init = find_binary, .timeout = 60)
{
    struct test_apiserver srv;
    cr_assert_eq(test_apiserver_start_without_crds(&srv), 0);
    char *const args[] = {binary, "--kubeconfig", srv.kubeconfig, NULL};
    int rc = wait_exit(spawn(args), 20000);
    test_apiserver_stop(&srv);
    cr_assert_eq(rc, 1, "exit status %d", rc);
    cr_assert(log_has("the MPIJob CRD is not installed"));
    unlink(log_path);
}

Test(operator, unreachable_api_server_is_waited_for, .init = find_binary, .timeout = 60)
{
    char kc[640];
    snprintf(kc, sizeof(kc), "%s.kubeconfig", log_path);
    FILE *f = fopen(kc, "w");
    /* a loopback port nothing listens on */
    fputs("apiVersion: v1\nkind: Config\ncurrent-context: t\nclusters:\n- name: c\n  cluster:\n"
          "    server: http://127.0.0.1:9\nusers:\n- name: u\n  user:\n    token: t\n"
          "contexts:\n- name: t\n  context:\n    cluster: c\n    user: u\n", f);
    fclose(f);
    char *const args[] = {binary, "--kubeconfig", kc, NULL};
    pid_t pid = spawn(args);
    cr_assert_eq(wait_exit(pid, 8000), -1, "keeps waiting instead of exiting");
    cr_assert(log_has("API server not reachable yet; retrying"));
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    unlink(kc);
    unlink(log_path);
}

Test(operator, serves_a_job_and_stops_on_sigterm, .init = find_binary, .timeout = 60)
{
    struct test_apiserver srv;
    cr_assert_eq(test_apiserver_start(&srv), 0);
    struct kube_client *admin = test_kube_client(&srv, NULL);
    char *const args[] = {binary, "--kubeconfig", srv.kubeconfig, "--namespace", "default", "--threads", "2", NULL};
    pid_t pid = spawn(args);
    cJSON *job = cJSON_Parse(
        "{\"apiVersion\":\"kubeflow.org/v2beta1\",\"kind\":\"MPIJob\",\"metadata\":{\"name\":\"cli\"},\"spec\":{"
        "\"mpiReplicaSpecs\":{\"Launcher\":{\"template\":{\"spec\":{\"containers\":[{\"name\":\"l\",\"image\":\"w\","
        "\"command\":[\"mpirun\",\"train\"]}]}}},\"Worker\":{\"replicas\":1,\"template\":{\"spec\":{\"containers\":"
        "[{\"name\":\"w\",\"image\":\"w\"}]}}}}}}");
    cr_assert_eq(kube_create(admin, &MPIJOB_RESOURCE_V2BETA1, "default", job, NULL, NULL), 0);
    cJSON_Delete(job);
    uint64_t end = clock_now_ms() + 20000;
    while (clock_now_ms() < end && kube_get(admin, &KUBE_JOBS, "default", "cli-launcher", NULL, NULL) != 0)
        clock_sleep_ms(50);
    cr_assert_eq(kube_get(admin, &KUBE_JOBS, "default", "cli-launcher", NULL, NULL), 0, "the operator made the launcher");
    uint64_t t0 = clock_now_ms();
    kill(pid, SIGTERM);
    int rc = wait_exit(pid, 5000);
    cr_assert_eq(rc, 0, "SIGTERM: exit 0 (got %d)", rc);
    cr_assert_lt(clock_now_ms() - t0, 5000);
    kube_client_free(admin);
    test_apiserver_stop(&srv);
    unlink(log_path);
}
