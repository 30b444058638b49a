/* The mpijob-operator program itself: flags, a missing CRD, an unreachable API server,
 * serving a job, and SIGTERM. Runs build/bin/mpijob-operator (make test builds it first). */
#include <criterion/criterion.h>
#include <curl/curl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kube/client.h"
#include "mpijob/builders.h"
#include "support/apiserver.h"
#include "support/deadline.h"
#include "support/kube_test.h"
#include "support/kube_wait.h"
#include "support/request_log.h"
#include "util/clock.h"
#include "util/json.h"

static char binary[512], log_path[600];
static pid_t children[8];
static int n_children;

/* Whatever a failed assertion left running is stopped here. */
static void reap_children(void)
{
    for (int i = 0; i < n_children; i++)
        if (children[i] > 0 && kill(children[i], SIGKILL) == 0)
            waitpid(children[i], NULL, 0);
    n_children = 0;
}

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
    pid_t parent = getpid();
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        /* The operator goes with the test process, also when a runner stops it mid-test. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(1);
        FILE *out = freopen(log_path, "w", stderr);
        (void)out;
        dup2(2, 1);
        execv(binary, args);
        _exit(127);
    }
    if (n_children < 8)
        children[n_children++] = pid;
    return pid;
}

/* How long a wait on the operator or the server may take: generous, for a busy machine (scaled). */
#define WAIT_MS 60000

/* Exit status, or -1 while it is still running after WAIT_MS (scaled). */
static int wait_exit(pid_t pid)
{
    struct test_deadline d = test_deadline_in(WAIT_MS);
    int status;
    do {
        if (waitpid(pid, &status, WNOHANG) == pid)
            return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    } while (test_deadline_poll(&d));
    test_wait_failed("the operator to exit", &d, NULL);
    return -1;
}

/* The port a server of the operator reports in its log ("what=metrics ... port=N"), or 0. */
static int served_port(const char *what)
{
    FILE *f = fopen(log_path, "r");
    if (!f)
        return 0;
    char line[1024], key[64];
    int port = 0;
    snprintf(key, sizeof(key), "what=%s ", what);
    while (!port && fgets(line, sizeof(line), f)) {
        const char *p = strstr(line, key);
        const char *q = p ? strstr(p, "port=") : NULL;
        if (q)
            port = atoi(q + 5);
    }
    fclose(f);
    return port;
}

static size_t collect_body(char *data, size_t size, size_t n, void *out)
{
    strncat(out, data, 65535 - strlen(out) < size * n ? 65535 - strlen(out) : size * n);
    return size * n;
}

/* GET http://127.0.0.1:port/path: the status code; the body in a static buffer. */
static long http_get(int port, const char *path, const char **body)
{
    static char buf[65536];
    buf[0] = 0;
    char url[128];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d%s", port, path);
    CURL *h = curl_easy_init();
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, collect_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, buf);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 5000L);
    long code = 0;
    if (curl_easy_perform(h) == CURLE_OK)
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
    curl_easy_cleanup(h);
    *body = buf;
    return code;
}

/* How many times text stands in the operator's log. */
static int log_count(const char *text)
{
    FILE *f = fopen(log_path, "r");
    if (!f)
        return 0;
    static char buf[65536];
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    buf[n] = 0;
    fclose(f);
    int count = 0;
    for (const char *p = buf; (p = strstr(p, text)) != NULL; p += strlen(text))
        count++;
    return count;
}

static bool log_has(const char *text) { return log_count(text) > 0; }

/* Polls the metrics until their text holds line; *body is the last text seen. */
static bool wait_metric(int port, const char *line, const char **body)
{
    struct test_deadline d = test_deadline_in(WAIT_MS);
    do {
        cr_assert_eq(http_get(port, "/metrics", body), 200);
        if (strstr(*body, line))
            return true;
    } while (test_deadline_poll(&d));
    test_wait_failed(line, &d, *body);
    return false;
}

/* Waits until text stands in the log `times` times; on a timeout, shows the log's end. */
static bool wait_log(const char *text, int times)
{
    struct test_deadline d = test_deadline_in(WAIT_MS);
    do {
        if (log_count(text) >= times)
            return true;
    } while (test_deadline_poll(&d));
    char last[2048] = "";
    FILE *f = fopen(log_path, "r");
    if (f) {
        fseek(f, -(long)sizeof(last) + 1, SEEK_END);
        size_t n = fread(last, 1, sizeof(last) - 1, f);
        last[n] = 0;
        fclose(f);
    }
    test_wait_failed(text, &d, last);
    return false;
}

TestSuite(operator, .init = find_binary, .fini = reap_children);

Test(operator, bad_flags_exit_2_with_usage, .timeout = 120)
{
    char *const a1[] = {binary, "--threads", "many", NULL};
    cr_assert_eq(wait_exit(spawn(a1)), 2);
    cr_assert(log_has("--threads must be an integer"));
    cr_assert(log_has("Usage: mpijob-operator"));
    char *const a2[] = {binary, "--no-such-flag", NULL};
    cr_assert_eq(wait_exit(spawn(a2)), 2);
    char *const a3[] = {binary, "--help", NULL};
    cr_assert_eq(wait_exit(spawn(a3)), 0);
    unlink(log_path);
}

Test(operator, missing_crd_is_a_clear_error, .timeout = 180)
{
    struct test_apiserver srv;
    cr_assert_eq(test_apiserver_start_without_crds(&srv), 0);
    char *const args[] = {binary, "--kubeconfig", srv.operator_kubeconfig, "--metrics-addr", "0", "--health-addr", "0", NULL};
    int rc = wait_exit(spawn(args));
    test_apiserver_stop(&srv);
    cr_assert_eq(rc, 1, "exit status %d", rc);
    cr_assert(log_has("the MPIJob CRD is not installed"));
    unlink(log_path);
}

Test(operator, unreachable_api_server_is_waited_for, .timeout = 120)
{
    char kc[640];
    snprintf(kc, sizeof(kc), "%s.kubeconfig", log_path);
    FILE *f = fopen(kc, "w");
    /* a loopback port nothing listens on */
    fputs("apiVersion: v1\nkind: Config\ncurrent-context: t\nclusters:\n- name: c\n  cluster:\n"
          "    server: http://127.0.0.1:9\nusers:\n- name: u\n  user:\n    token: t\n"
          "contexts:\n- name: t\n  context:\n    cluster: c\n    user: u\n", f);
    fclose(f);
    char *const args[] = {binary, "--kubeconfig", kc, "--metrics-addr", "0", "--health-addr", "0", NULL};
    pid_t pid = spawn(args);
    /* It tried, failed, and tried again: still running after its second failure. */
    cr_assert(wait_log("API server not reachable yet; retrying", 2), "retries the API server");
    cr_assert_eq(waitpid(pid, NULL, WNOHANG), 0, "keeps waiting instead of exiting");
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    unlink(kc);
    unlink(log_path);
}

Test(operator, serves_a_job_and_stops_on_sigterm, .timeout = 240)
{
    struct test_apiserver srv;
    cr_assert_eq(test_apiserver_start(&srv), 0);
    struct kube_client *admin = test_kube_client(&srv, NULL);
    char *const args[] = {binary, "--kubeconfig", srv.operator_kubeconfig, "--namespace", "default", "--threads", "2",
                          "--leader-elect=false", "--metrics-addr", "127.0.0.1:0", "--health-addr", "127.0.0.1:0",
                          NULL};
    pid_t pid = spawn(args);
    cJSON *job = cJSON_Parse(
        "{\"apiVersion\":\"kubeflow.org/v2beta1\",\"kind\":\"MPIJob\",\"metadata\":{\"name\":\"cli\"},\"spec\":{"
        "\"mpiReplicaSpecs\":{\"Launcher\":{\"template\":{\"spec\":{\"containers\":[{\"name\":\"l\",\"image\":\"w\","
        "\"command\":[\"mpirun\",\"train\"]}]}}},\"Worker\":{\"replicas\":1,\"template\":{\"spec\":{\"containers\":"
        "[{\"name\":\"w\",\"image\":\"w\"}]}}}}}}");
    cr_assert_eq(kube_create(admin, &MPIJOB_RESOURCE_V2BETA1, "default", job, NULL, NULL), 0);
    cJSON_Delete(job);
    cr_assert(test_kube_wait_exists(admin, &KUBE_JOBS, "default", "cli-launcher", WAIT_MS), "the operator made the launcher");

    /* Health and metrics: ready, and the job counted once its status is written. */
    int health = served_port("health"), metrics_port = served_port("metrics");
    cr_assert_gt(health, 0, "the health server's port is logged");
    cr_assert_gt(metrics_port, 0, "the metrics server's port is logged");
    const char *body;
    cr_assert_eq(http_get(health, "/healthz", &body), 200);
    cr_assert_eq(http_get(health, "/readyz", &body), 200, "ready once the caches are synced: %s", body);
    cr_assert(wait_metric(metrics_port, "mpijob_jobs_created_total{namespace=\"default\"} 1\n", &body),
              "jobs created counted:\n%s", body);
    cr_assert_not_null(strstr(body, "mpijob_api_requests_total{code=\"201\",verb=\"POST\"}"), "%s", body);
    cr_assert_not_null(strstr(body, "mpijob_reconcile_duration_seconds_bucket"), "%s", body);
    cr_assert_not_null(strstr(body, "mpijob_leader 1"), "%s", body);
    cr_assert_not_null(strstr(body, "mpijob_operator_build_info{version="), "%s", body);

    /* The job finishes: the succeeded counter moves. */
    test_finish_job(admin, "default", "cli-launcher", "Complete", "CompletionsReached");
    cr_assert(wait_metric(metrics_port, "mpijob_jobs_succeeded_total{namespace=\"default\"} 1\n", &body),
              "jobs succeeded counted:\n%s", body);
    kill(pid, SIGTERM);
    int rc = wait_exit(pid);
    cr_assert_eq(rc, 0, "SIGTERM: exit 0 (got %d)", rc);
    kube_client_free(admin);
    test_apiserver_stop(&srv);
    unlink(log_path);
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
    char *const args[] = {binary, "--kubeconfig", srv.operator_kubeconfig, "--namespace", "team-a",
                          "--lease-namespace", "mpijob-system", "--metrics-addr", "0", "--health-addr", "0", NULL};
    pid_t pid = spawn(args);
    cJSON *job = cJSON_Parse(
        "{\"apiVersion\":\"kubeflow.org/v2beta1\",\"kind\":\"MPIJob\",\"metadata\":{\"name\":\"ns\"},\"spec\":{"
        "\"mpiReplicaSpecs\":{\"Launcher\":{\"template\":{\"spec\":{\"containers\":[{\"name\":\"l\",\"image\":\"w\","
        "\"command\":[\"mpirun\",\"train\"]}]}}},\"Worker\":{\"replicas\":2,\"template\":{\"spec\":{\"containers\":"
        "[{\"name\":\"w\",\"image\":\"w\"}]}}}}}}");
    cr_assert_eq(kube_create(admin, &MPIJOB_RESOURCE_V2BETA1, "team-a", job, NULL, NULL), 0);
    cJSON_Delete(job);
    cr_assert(test_kube_wait_exists(admin, &KUBE_JOBS, "team-a", "ns-launcher", WAIT_MS), "the operator made the launcher");
    if (srv.is_double) {
        cJSON *log = test_apiserver_log(&srv, 0), *e;
        cr_assert_not_null(log);
        cJSON_ArrayForEach(e, log) {
            cr_assert_neq(json_int(e, "code", 0), 403, "refused: %s %s", json_string(e, "method"), json_string(e, "path"));
        }
        cJSON_Delete(log);
    }
    kill(pid, SIGTERM);
    cr_assert_eq(wait_exit(pid), 0);
    kube_client_free(admin);
    test_apiserver_stop(&srv);
    unlink(log_path);
}

/* Cluster-wide operator, namespaced permissions: it says what it may not do instead of
 * spinning in silence. */
Test(operator, cluster_wide_without_cluster_rbac_says_forbidden, .timeout = 180)
{
    struct test_apiserver srv;
    cr_assert_eq(test_apiserver_start_rbac(&srv, "manifests/rbac/namespaced.yaml"), 0);
    char *const args[] = {binary, "--kubeconfig", srv.operator_kubeconfig, "--leader-elect=false",
                          "--metrics-addr", "0", "--health-addr", "0", NULL};
    pid_t pid = spawn(args);
    cr_assert(wait_log("cannot list resource", 1), "the API server's reason is logged");
    /* Not waited for: it may sit out its wait for caches that cannot sync (a minute) before it
     * sees the signal; the suite's fini kills what is left. */
    kill(pid, SIGTERM);
    test_apiserver_stop(&srv);
    unlink(log_path);
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

static void create_named_job(struct kube_client *admin, const char *name)
{
    char text[1024];
    snprintf(text, sizeof(text),
             "{\"apiVersion\":\"kubeflow.org/v2beta1\",\"kind\":\"MPIJob\",\"metadata\":{\"name\":\"%s\"},\"spec\":{"
             "\"mpiReplicaSpecs\":{\"Launcher\":{\"template\":{\"spec\":{\"containers\":[{\"name\":\"l\",\"image\":\"w\","
             "\"command\":[\"mpirun\",\"train\"]}]}}},\"Worker\":{\"replicas\":1,\"template\":{\"spec\":{\"containers\":"
             "[{\"name\":\"w\",\"image\":\"w\"}]}}}}}}", name);
    cJSON *job = cJSON_Parse(text);
    cr_assert_eq(kube_create(admin, &MPIJOB_RESOURCE_V2BETA1, "default", job, NULL, NULL), 0);
    cJSON_Delete(job);
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
    char *const args[] = {binary, "--kubeconfig", srv.operator_kubeconfig, "--namespace", "default",
                          "--lease-namespace", "mpijob-system", "--lease-duration", "3", "--renew-deadline", "2", "--retry-period", "1", "--metrics-addr", "127.0.0.1:0",
                          "--health-addr", "127.0.0.1:0", NULL};
    pid_t a = spawn(args), b = spawn(args);
    pid_t leader = wait_holder(admin, 0);
    cr_assert(leader == a || leader == b, "one of the two leads (holder pid %d)", (int)leader);
    pid_t standby = leader == a ? b : a;

    /* Exactly one writes: every object is created once, with no AlreadyExists from a second writer. */
    create_named_job(admin, "le1");
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
    kill(leader, SIGTERM);
    cr_assert_eq(wait_exit(leader), 0, "the leader exits 0 on SIGTERM");
    pid_t next = wait_holder(admin, leader);
    cr_assert_eq(next, standby, "the standby leads (holder %d)", (int)next);
    char standby_suffix[32];
    snprintf(standby_suffix, sizeof(standby_suffix), "_%d", (int)standby);
    int released = lease_write(&srv, since, ""), taken = lease_write(&srv, since, standby_suffix);
    cr_assert_gt(released, 0, "the leader released the Lease");
    cr_assert(taken > released, "the standby took the Lease (seq %d) after the release (seq %d)", taken, released);

    /* kill -9 of the leader: a new candidate takes over once the lease has run out and finishes
     * the pending job. (How long that takes is the elector's lease timing, which its own tests
     * check on a clock they move: tests/integration/test_leaderelection.c.) The new candidate's
     * log starts the shared log file anew. */
    pid_t c = spawn(args);
    cr_assert(wait_log("trying to acquire lease", 1), "the new candidate competes");
    create_named_job(admin, "le2");
    kill(standby, SIGKILL);
    waitpid(standby, NULL, 0);
    pid_t third = wait_holder(admin, standby);
    cr_assert_eq(third, c, "the new candidate leads");
    cr_assert(wait_launcher(admin, "le2"), "the pending job is finished by the new leader");
    kill(c, SIGTERM);
    cr_assert_eq(wait_exit(c), 0);
    kube_client_free(admin);
    test_apiserver_stop(&srv);
    unlink(log_path);
}
