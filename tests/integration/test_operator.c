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
#include "support/deadline.h"
#include "support/kube_test.h"
#include "support/kube_wait.h"
#include "support/kubelet_logs.h"
#include "support/launcher_pod.h"
#include "support/operator.h"
#include "support/request_log.h"
#include "util/clock.h"
#include "util/json.h"

/* How long a wait on the operator or the server may take: generous, for a busy machine (scaled). */
#define WAIT_MS 60000

static const char *binary;

static void find_binary(void) { binary = test_operator_binary(); }

/* Starts the operator with args (argv[0] first, NULL-terminated). */
static struct test_operator spawn(char *const args[])
{
    struct test_operator op;
    test_operator_start(&op, args, NULL, NULL);
    return op;
}

static int wait_exit(struct test_operator *op) { return test_operator_wait_exit(op, WAIT_MS); }

/* Creates an MPIJob of `workers` workers in ns, its launcher running mpirun. */
static void create_job(struct kube_client *admin, const char *ns, const char *name, int workers)
{
    char text[1024];
    snprintf(text, sizeof(text),
             "{\"apiVersion\":\"kubeflow.org/v2beta1\",\"kind\":\"MPIJob\",\"metadata\":{\"name\":\"%s\"},\"spec\":{"
             "\"mpiReplicaSpecs\":{\"Launcher\":{\"template\":{\"spec\":{\"containers\":[{\"name\":\"l\",\"image\":\"w\","
             "\"command\":[\"mpirun\",\"train\"]}]}}},\"Worker\":{\"replicas\":%d,\"template\":{\"spec\":{\"containers\":"
             "[{\"name\":\"w\",\"image\":\"w\"}]}}}}}}", name, workers);
    cJSON *job = cJSON_Parse(text);
    cr_assert_not_null(job);
    cr_assert_eq(kube_create(admin, &MPIJOB_RESOURCE_V2BETA1, ns, job, NULL, NULL), 0);
    cJSON_Delete(job);
}

/* Polls the metrics until their text holds line; body holds the last text seen. */
static bool wait_metric(int port, const char *line, char *body, size_t len)
{
    struct test_deadline d = test_deadline_in(WAIT_MS);
    do {
        cr_assert_eq(test_http_get(port, "/metrics", body, len), 200);
        if (strstr(body, line))
            return true;
    } while (test_deadline_poll(&d));
    test_wait_failed(line, &d, body);
    return false;
}

TestSuite(operator, .init = find_binary, .fini = test_operator_stop_all);

Test(operator, bad_flags_exit_2_with_usage, .timeout = 120)
{
    char *const a1[] = {(char *)binary, "--threads", "many", NULL};
    struct test_operator op = spawn(a1);
    cr_assert_eq(wait_exit(&op), 2);
    cr_assert(test_operator_log_has(&op, "--threads must be an integer"));
    cr_assert(test_operator_log_has(&op, "Usage: mpijob-operator"));
    test_operator_stop(&op);
    char *const a2[] = {(char *)binary, "--no-such-flag", NULL};
    op = spawn(a2);
    cr_assert_eq(wait_exit(&op), 2);
    test_operator_stop(&op);
    char *const a3[] = {(char *)binary, "--help", NULL};
    op = spawn(a3);
    cr_assert_eq(wait_exit(&op), 0);
    test_operator_stop(&op);
}

Test(operator, missing_crd_is_a_clear_error, .timeout = 180)
{
    struct test_apiserver srv;
    cr_assert_eq(test_apiserver_start_without_crds(&srv), 0);
    char *const args[] = {(char *)binary, "--kubeconfig", srv.operator_kubeconfig, "--metrics-addr", "0",
                          "--health-addr", "0", NULL};
    struct test_operator op = spawn(args);
    int rc = wait_exit(&op);
    test_apiserver_stop(&srv);
    cr_assert_eq(rc, 1, "exit status %d", rc);
    cr_assert(test_operator_log_has(&op, "the MPIJob CRD is not installed"));
    test_operator_stop(&op);
}

/* At start the operator names the server's Kubernetes version, as its /version gives it, and the
 * range it is tested on. */
Test(operator, logs_the_server_version_at_start, .timeout = 180)
{
    struct test_apiserver srv;
    cr_assert_eq(test_apiserver_start(&srv), 0);
    struct kube_client *admin = test_kube_client(&srv, NULL);
    cJSON *v = NULL;
    cr_assert_eq(kube_request(admin, "GET", "/version", NULL, NULL, NULL, &v, NULL), 0);
    char want[128];
    snprintf(want, sizeof(want), "version=%s ", json_string(v, "gitVersion"));
    cJSON_Delete(v);
    kube_client_free(admin);
    char *const args[] = {(char *)binary, "--kubeconfig", srv.operator_kubeconfig, "--leader-elect=false",
                          "--metrics-addr", "0", "--health-addr", "0", NULL};
    struct test_operator op = spawn(args);
    struct test_deadline d = test_deadline_in(WAIT_MS);
    while (!test_operator_log_has(&op, "controller started") && test_deadline_poll(&d))
        ;
    kill(op.pid, SIGTERM);
    int rc = wait_exit(&op);
    test_apiserver_stop(&srv);
    cr_assert_eq(rc, 0, "exit status %d", rc);
    cr_assert(test_operator_log_has(&op, "API server"), "the server is named");
    cr_assert(test_operator_log_has(&op, want), "its version is logged (%s)", want);
    cr_assert(test_operator_log_has(&op, "supported: Kubernetes 1.32 to 1.36, tested on both"), "with the tested range");
    test_operator_stop(&op);
}

/* A server older than the oldest tested version: a warning naming that version, and the operator
 * still serves (it may work; nothing here proves it). */
Test(operator, an_older_server_is_warned_naming_the_oldest_tested_version, .timeout = 180)
{
    if (test_apiserver_assets() != TEST_ASSETS_NONE)
        cr_skip_test("needs the API-server double (an older /version: fault injection)");
    struct test_apiserver srv;
    cr_assert_eq(test_apiserver_start(&srv), 0);
    cr_assert_eq(test_apiserver_fault(&srv, "{\"version\":{\"gitVersion\":\"v1.29.4\",\"major\":\"1\","
                                            "\"minor\":\"29\"}}"),
                 0);
    char *const args[] = {(char *)binary, "--kubeconfig", srv.operator_kubeconfig, "--leader-elect=false",
                          "--metrics-addr", "0", "--health-addr", "0", NULL};
    struct test_operator op = spawn(args);
    struct test_deadline d = test_deadline_in(WAIT_MS);
    while (!test_operator_log_has(&op, "controller started") && test_deadline_poll(&d))
        ;
    kill(op.pid, SIGTERM);
    int rc = wait_exit(&op);
    test_apiserver_stop(&srv);
    cr_assert_eq(rc, 0, "still serves, then exits 0 on SIGTERM (got %d)", rc);
    cr_assert(test_operator_log_has(&op, "WARN"), "a warning");
    cr_assert(test_operator_log_has(&op, "version=v1.29.4"), "naming the server's version");
    cr_assert(test_operator_log_has(&op, "Kubernetes 1.29 is older than 1.32, the oldest version this operator "
                                         "is tested on"),
              "and the oldest tested one");
    test_operator_stop(&op);
}

/* The operator started with --gang-scheduling `gang` against `srv`, which lacks the API that
 * needs: it must exit 1 at start. The server is stopped; the caller reads the log and stops op. */
static struct test_operator gang_scheduling_fails_to_start(struct test_apiserver *srv, const char *gang)
{
    char *const args[] = {(char *)binary, "--kubeconfig", srv->operator_kubeconfig, "--gang-scheduling", (char *)gang,
                          "--metrics-addr", "0", "--health-addr", "0", NULL};
    struct test_operator op = spawn(args);
    int rc = wait_exit(&op);
    test_apiserver_stop(srv);
    cr_assert_eq(rc, 1, "--gang-scheduling %s: exit status %d", gang, rc);
    return op;
}

/* An API the operator's flags need and the server does not serve (--gang-scheduling volcano
 * without Volcano's PodGroup CRD) is an error at start naming the API, not a controller that
 * starts and fails every job. */
Test(operator, an_api_it_needs_and_the_server_lacks_is_an_error_naming_it, .timeout = 180)
{
    struct test_apiserver srv;
    cr_assert_eq(test_apiserver_start_without_crds(&srv), 0);
    struct test_operator op = gang_scheduling_fails_to_start(&srv, "volcano");
    cr_assert(test_operator_log_has(&op, "does not serve scheduling.volcano.sh/v1beta1 podgroups, which the operator "
                                         "needs for gang scheduling (--gang-scheduling)"),
              "the API and what it is for are named");
    test_operator_stop(&op);
}

/* --gang-scheduling workload against a server without kube-scheduler's Workload API (the double
 * as 1.32, a real 1.32, or a 1.36 started without the API's runtime-config and gates) stops at
 * start naming the API and what turns it on: never a silent fallback to no gang. */
Test(operator, gang_scheduling_workload_without_the_api_is_an_error_naming_it, .timeout = 180)
{
    struct test_apiserver srv;
    cr_assert_eq(test_apiserver_start(&srv), 0);
    struct test_operator op = gang_scheduling_fails_to_start(&srv, "workload");
    cr_assert(test_operator_log_has(&op, "does not serve scheduling.k8s.io/v1alpha2 workloads, which the operator "
                                         "needs for gang scheduling by kube-scheduler (--gang-scheduling workload)"),
              "the API and what it is for are named");
    cr_assert(test_operator_log_has(&op, "--runtime-config=scheduling.k8s.io/v1alpha2=true"), "the runtime-config");
    cr_assert(test_operator_log_has(&op, "GenericWorkload=true,GangScheduling=true"), "and the feature gates");
    test_operator_stop(&op);
}

/* An API server that cannot be reached yet is waited for, with the process alive (/healthz) and
 * not ready (/readyz, saying why): a kubelet must not restart a replica for waiting. */
Test(operator, unreachable_api_server_is_waited_for_alive_and_not_ready, .timeout = 120)
{
    char kc[64];
    snprintf(kc, sizeof(kc), "/tmp/mpijob-operator-test.%d.kubeconfig", (int)getpid());
    FILE *f = fopen(kc, "w");
    cr_assert_not_null(f);
    /* a loopback port nothing listens on */
    fputs("apiVersion: v1\nkind: Config\ncurrent-context: t\nclusters:\n- name: c\n  cluster:\n"
          "    server: http://127.0.0.1:9\nusers:\n- name: u\n  user:\n    token: t\n"
          "contexts:\n- name: t\n  context:\n    cluster: c\n    user: u\n", f);
    fclose(f);
    char *const args[] = {(char *)binary, "--kubeconfig", kc, "--metrics-addr", "0", "--health-addr", "127.0.0.1:0",
                          NULL};
    struct test_operator op = spawn(args);
    /* It tried, failed, and tried again: still running after its second failure. */
    cr_assert(test_operator_wait_log(&op, "API server not reachable yet; retrying", 2, WAIT_MS), "retries the API server");
    cr_assert_eq(test_operator_wait_exit(&op, 0), -1, "keeps waiting instead of exiting");
    int health = test_operator_port(&op, "health");
    cr_assert_gt(health, 0, "the health server is up before the API server answers:\n%s",
                 test_operator_log_tail(&op, 2000));
    char body[4096];
    cr_assert_eq(test_http_get(health, "/healthz", body, sizeof(body)), 200, "alive: %s", body);
    cr_assert_eq(test_http_get(health, "/readyz", body, sizeof(body)), 503, "not ready: %s", body);
    cr_assert_not_null(strstr(body, "API server not reachable yet"), "/readyz says why: %s", body);
    cr_assert_not_null(strstr(body, "127.0.0.1"), "... and what it could not reach: %s", body);
    test_operator_stop(&op);
    unlink(kc);
}

Test(operator, serves_a_job_and_stops_on_sigterm, .timeout = 240)
{
    struct test_apiserver srv;
    cr_assert_eq(test_apiserver_start(&srv), 0);
    struct kube_client *admin = test_kube_client(&srv, NULL);
    char *const args[] = {(char *)binary, "--kubeconfig", srv.operator_kubeconfig, "--namespace", "default",
                          "--threads", "2", "--leader-elect=false", "--metrics-addr", "127.0.0.1:0", "--health-addr",
                          "127.0.0.1:0", NULL};
    struct test_operator op = spawn(args);
    create_job(admin, "default", "cli", 1);
    cr_assert(test_kube_wait_exists(admin, &KUBE_JOBS, "default", "cli-launcher", WAIT_MS), "the operator made the launcher");

    /* Health and metrics: ready, and the job counted once its status is written. */
    int health = test_operator_port(&op, "health"), metrics_port = test_operator_port(&op, "metrics");
    cr_assert_gt(health, 0, "the health server's port is logged");
    cr_assert_gt(metrics_port, 0, "the metrics server's port is logged");
    static char body[65536];
    cr_assert_eq(test_http_get(health, "/healthz", body, sizeof(body)), 200);
    cr_assert_eq(test_http_get(health, "/readyz", body, sizeof(body)), 200, "ready once the caches are synced: %s",
                 body);
    cr_assert(wait_metric(metrics_port, "mpijob_jobs_created_total{namespace=\"default\"} 1\n", body, sizeof(body)),
              "jobs created counted:\n%s", body);
    cr_assert_not_null(strstr(body, "mpijob_api_requests_total{code=\"201\",verb=\"POST\"}"), "%s", body);
    cr_assert_not_null(strstr(body, "mpijob_reconcile_duration_seconds_bucket"), "%s", body);
    cr_assert_not_null(strstr(body, "mpijob_leader 1"), "%s", body);
    cr_assert_not_null(strstr(body, "mpijob_operator_build_info{version="), "%s", body);

    /* The job finishes: the succeeded counter moves. */
    test_finish_job(admin, "default", "cli-launcher", "Complete", "CompletionsReached");
    cr_assert(wait_metric(metrics_port, "mpijob_jobs_succeeded_total{namespace=\"default\"} 1\n", body,
                          sizeof(body)), "jobs succeeded counted:\n%s", body);
    kill(op.pid, SIGTERM);
    int rc = wait_exit(&op);
    cr_assert_eq(rc, 0, "SIGTERM: exit 0 (got %d)", rc);
    test_operator_stop(&op);
    kube_client_free(admin);
    test_apiserver_stop(&srv);
}

/* Every metric that an alert of the chart's PrometheusRule or a panel of its Grafana dashboard
 * names (tests/monitoring/metric_names.py lists them) is in a scrape of a running operator that
 * has seen a job succeed, and a job fail after a worker was replaced: a rename or a typo cannot
 * leave an alert watching nothing. */
Test(operator, every_metric_an_alert_or_the_dashboard_names_is_served, .timeout = 240)
{
    struct test_apiserver srv;
    cr_assert_eq(test_apiserver_start(&srv), 0);
    struct kube_client *admin = test_kube_client(&srv, NULL);
    char *const args[] = {(char *)binary, "--kubeconfig", srv.operator_kubeconfig, "--namespace", "default",
                          "--leader-elect=false", "--metrics-addr", "127.0.0.1:0", "--health-addr", "0", NULL};
    struct test_operator op = spawn(args);
    create_job(admin, "default", "fine", 1);
    create_job(admin, "default", "flaky", 2);
    cr_assert(test_kube_wait_exists(admin, &KUBE_JOBS, "default", "fine-launcher", WAIT_MS));
    cr_assert(test_kube_wait_exists(admin, &KUBE_PODS, "default", "flaky-worker-1", WAIT_MS));
    int port = test_operator_port(&op, "metrics");
    cr_assert_gt(port, 0);
    static char body[262144];
    test_finish_job(admin, "default", "fine-launcher", "Complete", "CompletionsReached");
    cr_assert(wait_metric(port, "mpijob_jobs_succeeded_total{namespace=\"default\"} 1\n", body, sizeof(body)),
              "%s", body);
    struct kube_patch_opts po = {.type = KUBE_PATCH_MERGE, .subresource = "status"};
    cr_assert_eq(kube_patch(admin, &KUBE_PODS, "default", "flaky-worker-1",
                            "{\"status\":{\"phase\":\"Failed\",\"containerStatuses\":[{\"name\":\"w\",\"state\":"
                            "{\"terminated\":{\"exitCode\":137,\"reason\":\"OOMKilled\"}}}]}}",
                            &po, NULL, NULL), 0);
    cr_assert(wait_metric(port, "mpijob_worker_replacements_total{namespace=\"default\"} 1\n", body, sizeof(body)),
              "the replaced worker counted:\n%s", body);
    test_finish_job(admin, "default", "flaky-launcher", "Failed", "BackoffLimitExceeded");
    cr_assert(wait_metric(port, "mpijob_jobs_failed_total{namespace=\"default\"} 1\n", body, sizeof(body)), "%s",
              body);

    char cmd[4200];
    snprintf(cmd, sizeof(cmd), "python3 '%s/tests/monitoring/metric_names.py'",
             getenv("MPIJOB_SRC_DIR") ? getenv("MPIJOB_SRC_DIR") : ".");
    FILE *names = popen(cmd, "r");
    cr_assert_not_null(names);
    char line[256], name[128], where[64], missing[4096] = "";
    int n = 0;
    while (fgets(line, sizeof(line), names))
        if (sscanf(line, "%127s %63s", name, where) == 2) {
            n++;
            char with_labels[160], bare[160];
            snprintf(with_labels, sizeof(with_labels), "\n%s{", name);
            snprintf(bare, sizeof(bare), "\n%s ", name);
            if (!strstr(body, with_labels) && !strstr(body, bare))
                snprintf(missing + strlen(missing), sizeof(missing) - strlen(missing), " %s (%s)", name, where);
        }
    cr_assert_eq(pclose(names), 0, "metric_names.py failed");
    cr_assert_gt(n, 10, "the alerts and the dashboard name metrics");
    cr_assert_str_eq(missing, "", "named but not served:%s\nthe scrape:\n%s", missing, body);
    test_operator_stop(&op);
    kube_client_free(admin);
    test_apiserver_stop(&srv);
}

/* A single-namespace install: the operator holds only manifests/rbac/namespaced.yaml (a Role in
 * team-a, the Lease Role in mpijob-system) and serves team-a with no request refused. */
Test(operator, namespaced_rbac_serves_its_namespace, .timeout = 240)
{
    struct test_apiserver srv;
    cr_assert_eq(test_apiserver_start_rbac(&srv, "manifests/rbac/namespaced.yaml"), 0);
    /* the namespace the Role lives in exists already, as on a cluster it was installed into */
    cr_assert_eq(test_apiserver_namespace(&srv, "team-a"), 0);
    struct kube_client *admin = test_kube_client(&srv, NULL);
    char *const args[] = {(char *)binary, "--kubeconfig", srv.operator_kubeconfig, "--namespace", "team-a",
                          "--lease-namespace", "mpijob-system", "--metrics-addr", "0", "--health-addr", "0", NULL};
    struct test_kubelet kubelet;
    cr_assert_eq(test_kubelet_start(&kubelet, &srv, "team-a-node"), 0);
    struct test_operator op = spawn(args);
    create_job(admin, "team-a", "ns", 2);
    cr_assert(test_kube_wait_exists(admin, &KUBE_JOBS, "team-a", "ns-launcher", WAIT_MS), "the operator made the launcher");
    /* The launcher's summary is read with the Role's get on pods/log. */
    char pod[96];
    test_launcher_pod_create(admin, "team-a", "ns", "team-a-node", pod, sizeof(pod));
    static const char summary[] =
        "{\"event\":\"summary\",\"ranks\":2,\"backend\":\"mpi\",\"device\":\"cpu\",\"transport\":\"mpi\","
        "\"loss_first\":2.3,\"loss_last\":0.4,\"weights_identical\":true,\"samples_per_sec\":1000,\"step_ms\":5,"
        "\"exposed_comm_ms\":1,\"compute_ms\":4}\n";
    cr_assert_eq(test_kubelet_write_log(&kubelet, "team-a", pod, "launcher", summary, sizeof(summary) - 1), 0);
    test_pod_succeeded(admin, "team-a", pod);
    cr_assert(test_kube_wait_string(admin, &MPIJOB_RESOURCE_V2BETA1, "team-a", "ns", "status.launcherSummary.transport",
                                    "mpi", WAIT_MS), "the summary read under the namespaced Role");
    if (srv.is_double) {
        cJSON *log = test_apiserver_log(&srv, 0), *e;
        cr_assert_not_null(log);
        cJSON_ArrayForEach(e, log) {
            cr_assert_neq(json_int(e, "code", 0), 403, "refused: %s %s", json_string(e, "method"), json_string(e, "path"));
        }
        cJSON_Delete(log);
    }
    kill(op.pid, SIGTERM);
    cr_assert_eq(wait_exit(&op), 0);
    test_operator_stop(&op);
    test_kubelet_stop(&kubelet, &srv);
    kube_client_free(admin);
    test_apiserver_stop(&srv);
}

/* Cluster-wide operator, namespaced permissions: it says what it may not do instead of
 * spinning in silence. */
Test(operator, cluster_wide_without_cluster_rbac_says_forbidden, .timeout = 180)
{
    struct test_apiserver srv;
    cr_assert_eq(test_apiserver_start_rbac(&srv, "manifests/rbac/namespaced.yaml"), 0);
    char *const args[] = {(char *)binary, "--kubeconfig", srv.operator_kubeconfig, "--leader-elect=false",
                          "--metrics-addr", "0", "--health-addr", "0", NULL};
    struct test_operator op = spawn(args);
    cr_assert(test_operator_wait_log(&op, "cannot list resource", 1, WAIT_MS), "the API server's reason is logged");
    test_operator_stop(&op);
    test_apiserver_stop(&srv);
}

/* The Lease's holder ("<host>_<pid>"), or "" when none. */
static void lease_holder(struct kube_client *admin, char *out, size_t len)
{
    cJSON *lease = NULL;
    out[0] = 0;
    if (kube_get(admin, &KUBE_LEASES, "mpijob-system", "mpijob-operator", &lease, NULL) == 0) {
        const cJSON *h = cJSON_GetObjectItem(cJSON_GetObjectItem(lease, "spec"), "holderIdentity");
        if (cJSON_IsString(h))
            snprintf(out, len, "%s", h->valuestring);
    }
    cJSON_Delete(lease);
}

static pid_t holder_pid(struct kube_client *admin)
{
    char h[256];
    lease_holder(admin, h, sizeof(h));
    const char *us = strrchr(h, '_');
    return us ? (pid_t)atoi(us + 1) : 0;
}

/* The pid of a holder of the Lease other than not_this, once there is one; 0 after WAIT_MS. */
static pid_t wait_holder(struct kube_client *admin, pid_t not_this)
{
    struct test_deadline d = test_deadline_in(WAIT_MS);
    do {
        pid_t p = holder_pid(admin);
        if (p && p != not_this)
            return p;
    } while (test_deadline_poll(&d));
    char h[256];
    lease_holder(admin, h, sizeof(h));
    test_wait_failed("a new holder of the Lease", &d, h[0] ? h : "(none)");
    return 0;
}

static bool holder_ends_with(const cJSON *entry, const void *suffix)
{
    const char *h = json_string(cJSON_GetObjectItemCaseSensitive(entry, "body"), "spec.holderIdentity");
    size_t lh = h ? strlen(h) : 0, ls = strlen(suffix);
    return h && lh >= ls && strcmp(h + lh - ls, suffix) == 0;
}

/* The seq of the first Lease update the double accepted whose holder ends with suffix ("" for a
 * release), from seq since on; 0 when none. */
static int lease_write(struct test_apiserver *srv, int since, const char *suffix)
{
    struct test_request_filter f = {.method = "PUT", .resource = "leases", .code = 200, .match = holder_ends_with,
                                    .arg = suffix};
    int seq;
    test_count_requests(srv, since, &f, &seq, NULL);
    return seq;
}


static bool wait_launcher(struct kube_client *admin, const char *job)
{
    char name[128];
    snprintf(name, sizeof(name), "%s-launcher", job);
    return test_kube_wait_exists(admin, &KUBE_JOBS, "default", name, WAIT_MS);
}

Test(operator, two_replicas_one_leader_takeover_and_sigterm, .timeout = 360)
{
    struct test_apiserver srv;
    cr_assert_eq(test_apiserver_start(&srv), 0);
    if (!srv.is_double) {
        test_apiserver_stop(&srv);
        cr_skip_test("needs the API-server double (request log)");
    }
    struct kube_client *admin = test_kube_client(&srv, NULL);
    char *const args[] = {(char *)binary, "--kubeconfig", srv.operator_kubeconfig, "--namespace", "default",
                          "--lease-namespace", "mpijob-system", "--lease-duration", "3", "--renew-deadline", "2",
                          "--retry-period", "1", "--metrics-addr", "127.0.0.1:0", "--health-addr", "127.0.0.1:0",
                          NULL};
    struct test_operator a = spawn(args), b = spawn(args);
    pid_t leader_pid = wait_holder(admin, 0);
    cr_assert(leader_pid == a.pid || leader_pid == b.pid, "one of the two leads (holder pid %d)", (int)leader_pid);
    struct test_operator *leader = leader_pid == a.pid ? &a : &b, *standby = leader_pid == a.pid ? &b : &a;
    pid_t standby_pid = standby->pid;

    /* Exactly one writes: every object is created once, with no AlreadyExists from a second writer. */
    create_job(admin, "default", "le1", 1);
    cr_assert(wait_launcher(admin, "le1"));
    /* No event marks what a second writer would do (the standby, rightly, does nothing): half a
     * second's room for its creates to meet AlreadyExists. */
    clock_sleep_ms(500);
    cJSON *log = test_apiserver_log(&srv, 0);
    cJSON *e;
    cJSON_ArrayForEach(e, log) {
        const char *verb = cJSON_GetObjectItem(e, "verb")->valuestring;
        const char *res = cJSON_GetObjectItem(e, "resource")->valuestring;
        int code = cJSON_GetObjectItem(e, "code")->valueint;
        if (strcmp(verb, "create") == 0 && strcmp(res, "leases") != 0 && strcmp(res, "events") != 0)
            cr_assert_neq(code, 409, "a second writer: create %s answered 409", res);
    }
    cJSON_Delete(log);

    /* SIGTERM: exit 0, and the standby leads at once: the leader released the Lease (an empty
     * holder) on its way out, before the standby took it. */
    int since = test_last_seq(&srv) + 1;
    kill(leader_pid, SIGTERM);
    cr_assert_eq(wait_exit(leader), 0, "the leader exits 0 on SIGTERM");
    pid_t next = wait_holder(admin, leader_pid);
    cr_assert_eq(next, standby_pid, "the standby leads (holder %d)", (int)next);
    char standby_suffix[32];
    snprintf(standby_suffix, sizeof(standby_suffix), "_%d", (int)standby_pid);
    int released = lease_write(&srv, since, ""), taken = lease_write(&srv, since, standby_suffix);
    cr_assert_gt(released, 0, "the leader released the Lease");
    cr_assert(taken > released, "the standby took the Lease (seq %d) after the release (seq %d)", taken, released);

    /* kill -9 of the leader: a new candidate takes over once the lease has run out and finishes
     * the pending job. (How long that takes is the elector's lease timing, which its own tests
     * check on a clock they move: tests/integration/test_leaderelection.c.) */
    struct test_operator c = spawn(args);
    cr_assert(test_operator_wait_log(&c, "trying to acquire lease", 1, WAIT_MS), "the new candidate competes");
    create_job(admin, "default", "le2", 1);
    test_operator_stop(standby); /* SIGKILL */
    pid_t third = wait_holder(admin, standby_pid);
    cr_assert_eq(third, c.pid, "the new candidate leads");
    cr_assert(wait_launcher(admin, "le2"), "the pending job is finished by the new leader");
    kill(c.pid, SIGTERM);
    cr_assert_eq(wait_exit(&c), 0);
    test_operator_stop(&c);
    test_operator_stop(leader);
    kube_client_free(admin);
    test_apiserver_stop(&srv);
}
