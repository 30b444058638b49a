/* The operator as a daemon with many existing MPIJobs: start-up (time from exec to /readyz, and
 * the API requests it makes on the way) and idle cost (resident memory, CPU over a window).
 *
 * The benchmark runs the release binary build/bin/mpijob-operator against the API-server double
 * with the operator's RBAC-restricted token and leader election on, as deployed:
 *   1. creates N MPIJobs (1 worker each) and lets a first operator process create every object;
 *   2. stops it, starts a fresh one, and times exec -> /readyz 200, counting the requests in the
 *      double's log by verb until then (and the writes in the settling time after);
 *   3. lets it idle and reads VmRSS / VmHWM and utime+stime from /proc over the window.
 * Baseline in the same run: the bytes of JSON the cache holds (every MPIJob and dependent object
 * as the API server serialises it), to set against the resident memory.
 *
 * Usage: bench_daemon [jobs (1000)] [idle_window_s (60)] */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <curl/curl.h>

#include "kube/client.h"
#include "kube/config.h"
#include "mpijob/builders.h"
#include "support/apiserver.h"
#include "util/clock.h"
#include "util/json.h"
#include "util/log.h"

static struct test_apiserver srv;

static struct kube_client *new_client(const char *kubeconfig)
{
    struct kube_config *cfg = NULL;
    char err[256];
    if (kube_config_load_kubeconfig(kubeconfig, NULL, &cfg, err, sizeof(err)) < 0) {
        fprintf(stderr, "kubeconfig: %s\n", err);
        exit(1);
    }
    struct kube_client_options opts = {.qps = -1};
    struct kube_client *c = NULL;
    if (kube_client_new(cfg, &opts, &c) < 0)
        exit(1);
    return c;
}

static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 || getsockname(fd, (struct sockaddr *)&a, &len) < 0)
        exit(1);
    close(fd);
    return ntohs(a.sin_port);
}

static size_t discard(char *p, size_t size, size_t n, void *ud)
{
    (void)p;
    (void)ud;
    return size * n;
}

static long http_code(int port, const char *path)
{
    char url[128];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d%s", port, path);
    CURL *h = curl_easy_init();
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, discard);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 1000L);
    long code = 0;
    if (curl_easy_perform(h) == CURLE_OK)
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
    curl_easy_cleanup(h);
    return code;
}

static pid_t start_operator(int health_port, const char *log_path, const char *qps)
{
    char binary[512], health[64];
    const char *root = getenv("MPIJOB_SRC_DIR");
    snprintf(binary, sizeof(binary), "%s/build/bin/mpijob-operator", root && root[0] ? root : ".");
    snprintf(health, sizeof(health), "127.0.0.1:%d", health_port);
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(log_path, O_WRONLY | O_APPEND | O_CREAT, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        const char *wrap = getenv("BENCH_WRAP"); /* e.g. a heap profiler: "valgrind --tool=massif" */
        if (wrap && wrap[0] && strcmp(qps, "20") == 0) {
            char cmd[2048];
            snprintf(cmd, sizeof(cmd), "exec %s %s --kubeconfig %s --lease-namespace mpijob-system --threads 4 "
                     "--metrics-addr 0 --health-addr %s", wrap, binary, srv.operator_kubeconfig, health);
            execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
            _exit(127);
        }
        execl(binary, binary, "--kubeconfig", srv.operator_kubeconfig, "--lease-namespace", "mpijob-system",
              "--threads", "4", "--qps", qps, "--burst", strcmp(qps, "20") == 0 ? "30" : qps, "--metrics-addr", "0", "--health-addr", health,
              (char *)NULL);
        _exit(127);
    }
    return pid;
}

static void stop_operator(pid_t pid)
{
    kill(pid, SIGTERM);
    int status;
    for (int i = 0; i < 100; i++) {
        if (waitpid(pid, &status, WNOHANG) == pid)
            return;
        clock_sleep_ms(100);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
}

static long proc_status_kib(pid_t pid, const char *field)
{
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    long v = -1;
    while (f && fgets(line, sizeof(line), f))
        if (strncmp(line, field, strlen(field)) == 0)
            v = strtol(line + strlen(field), NULL, 10);
    if (f)
        fclose(f);
    return v;
}

/* utime + stime of the process in seconds. */
static double cpu_seconds(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *p = strrchr(buf, ')');
    unsigned long long ut = 0, st = 0;
    /* after ") ": state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime */
    if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
        return -1;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

static int last_seq(void)
{
    cJSON *log = test_apiserver_log(&srv, 0);
    int n = cJSON_GetArraySize(log);
    int seq = n ? (int)json_int(cJSON_GetArrayItem(log, n - 1), "seq", 0) : 0;
    cJSON_Delete(log);
    return seq;
}

/* Requests of the operator's token since seq, by verb; returns the total. *writes leaves out
 * the Lease renewals of leader election, counted in *lease_writes. */
static int count_requests(int since, int *reads, int *writes, int *lease_writes, char *by_verb, size_t len)
{
    cJSON *log = test_apiserver_log(&srv, since + 1), *e;
    static const char *verbs[] = {"get", "list", "watch", "create", "update", "patch", "delete"};
    int counts[7] = {0}, total = 0;
    *reads = *writes = *lease_writes = 0;
    cJSON_ArrayForEach(e, log) {
        const char *user = json_string(e, "user");
        if (!user || !strstr(user, "mpijob-operator"))
            continue;
        const char *verb = json_string(e, "verb");
        for (int i = 0; verb && i < 7; i++)
            if (strcmp(verb, verbs[i]) == 0) {
                counts[i]++;
                const char *res = json_string(e, "resource");
                if (i < 3)
                    (*reads)++;
                else if (res && strcmp(res, "leases") == 0)
                    (*lease_writes)++;
                else
                    (*writes)++;
            }
        total++;
    }
    cJSON_Delete(log);
    size_t used = 0;
    by_verb[0] = 0;
    for (int i = 0; i < 7; i++)
        if (counts[i] && used < len)
            used += (size_t)snprintf(by_verb + used, len - used, "%s%s=%d", used ? " " : "", verbs[i], counts[i]);
    return total;
}

static size_t list_bytes(struct kube_client *c, const struct kube_resource *res)
{
    cJSON *items = NULL, *it;
    size_t bytes = 0;
    if (kube_list_all(c, res, NULL, NULL, &items, NULL, NULL) != 0)
        return 0;
    cJSON_ArrayForEach(it, items) {
        char *s = cJSON_PrintUnformatted(it);
        bytes += s ? strlen(s) : 0;
        free(s);
    }
    cJSON_Delete(items);
    return bytes;
}

int main(int argc, char **argv)
{
    int jobs = argc > 1 ? atoi(argv[1]) : 1000;
    int window = argc > 2 ? atoi(argv[2]) : 60;
    if (jobs <= 0 || window <= 0) {
        fprintf(stderr, "usage: bench_daemon [jobs] [idle_window_s]\n");
        return 2;
    }
    log_set_level(LOG_WARN);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    if (test_apiserver_start(&srv) < 0)
        return 1;
    printf("API server: %s\n", srv.is_double ? "the API-server double" : "a real kube-apiserver (KUBEBUILDER_ASSETS)");
    struct kube_client *admin = new_client(srv.kubeconfig);
    cJSON *ns = cJSON_Parse("{\"apiVersion\":\"v1\",\"kind\":\"Namespace\",\"metadata\":{\"name\":\"mpijob-system\"}}");
    kube_create(admin, &KUBE_NAMESPACES, NULL, ns, NULL, NULL);
    cJSON_Delete(ns);

    uint64_t t0 = clock_now_ms();
    for (int i = 0; i < jobs; i++) {
        char text[1024];
        snprintf(text, sizeof(text),
                 "{\"apiVersion\":\"kubeflow.org/v2beta1\",\"kind\":\"MPIJob\",\"metadata\":{\"name\":\"j%d\"},\"spec\":{"
                 "\"mpiReplicaSpecs\":{\"Launcher\":{\"template\":{\"spec\":{\"containers\":[{\"name\":\"l\",\"image\":\"w\","
                 "\"command\":[\"mpirun\",\"mpijob-worker\",\"train\"]}]}}},\"Worker\":{\"replicas\":1,\"template\":{\"spec\":"
                 "{\"containers\":[{\"name\":\"w\",\"image\":\"w\"}]}}}}}}", i);
        cJSON *obj = cJSON_Parse(text);
        if (kube_create(admin, &MPIJOB_RESOURCE_V2BETA1, "default", obj, NULL, NULL) != 0) {
            fprintf(stderr, "creating MPIJob j%d failed\n", i);
            return 1;
        }
        cJSON_Delete(obj);
    }
    printf("created %d MPIJobs in %.1f s\n", jobs, (double)(clock_now_ms() - t0) / 1000.0);

    /* First operator: creates every dependent object. */
    char log_path[] = "/tmp/bench-daemon-XXXXXX";
    int lfd = mkstemp(log_path);
    if (lfd >= 0)
        close(lfd);
    int port = free_port();
    t0 = clock_now_ms();
    pid_t first = start_operator(port, log_path, "500"); /* setup only: no client-side limit */
    for (;;) {
        cJSON *items = NULL;
        int n = 0;
        if (kube_list_all(admin, &KUBE_JOBS, "default", NULL, &items, NULL, NULL) == 0)
            n = cJSON_GetArraySize(items);
        cJSON_Delete(items);
        if (n >= jobs)
            break;
        if (clock_now_ms() - t0 > 900000) {
            fprintf(stderr, "the first operator made only %d of %d launchers in 15 min\n", n, jobs);
            return 1;
        }
        clock_sleep_ms(1000);
    }
    printf("first operator created the objects of %d jobs in %.1f s\n", jobs, (double)(clock_now_ms() - t0) / 1000.0);
    clock_sleep_ms(3000); /* status writes settle */
    stop_operator(first);

    size_t bytes = 0;
    const struct kube_resource *kinds[] = {&MPIJOB_RESOURCE_V2BETA1, &KUBE_PODS, &KUBE_SERVICES, &KUBE_CONFIGMAPS,
                                           &KUBE_SECRETS, &KUBE_JOBS};
    for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++)
        bytes += list_bytes(admin, kinds[i]);

    /* Second operator: start-up with everything already there. */
    int since = last_seq();
    port = free_port();
    t0 = clock_now_ms();
    pid_t pid = start_operator(port, log_path, "20"); /* the default rate */
    while (http_code(port, "/readyz") != 200) {
        if (clock_now_ms() - t0 > 300000) {
            fprintf(stderr, "not ready after 300 s (log in %s)\n", log_path);
            return 1;
        }
        clock_sleep_ms(20);
    }
    double ready_s = (double)(clock_now_ms() - t0) / 1000.0;
    int reads, writes, lease_writes;
    char verbs[256];
    if (srv.is_double) {
        int total = count_requests(since, &reads, &writes, &lease_writes, verbs, sizeof(verbs));
        printf("start to ready with %d existing jobs: %.2f s; %d API requests (%s)\n", jobs, ready_s, total, verbs);
        int ready_seq = last_seq();
        clock_sleep_ms(10000);
        total = count_requests(ready_seq, &reads, &writes, &lease_writes, verbs, sizeof(verbs));
        printf("in the 10 s after ready: %d requests (%s): %d writes to jobs and their objects, %d Lease renewals\n",
               total, verbs, writes, lease_writes);
    } else {
        /* requests are counted from the double's request log, which a real server lacks */
        printf("start to ready with %d existing jobs: %.2f s (requests not counted: no request log on a real "
               "kube-apiserver)\n", jobs, ready_s);
        clock_sleep_ms(10000);
    }

    long rss0 = proc_status_kib(pid, "VmRSS:");
    double cpu0 = cpu_seconds(pid);
    uint64_t w0 = clock_now_ms();
    clock_sleep_ms((uint64_t)window * 1000);
    double wall = (double)(clock_now_ms() - w0) / 1000.0;
    double cpu = cpu_seconds(pid) - cpu0;
    long rss = proc_status_kib(pid, "VmRSS:"), hwm = proc_status_kib(pid, "VmHWM:");
    printf("idle with %d jobs (%d objects): RSS %.1f MiB at the start of the window, %.1f MiB at its end, "
           "peak %.1f MiB (target <= 40 MiB)\n",
           jobs, jobs * 6, rss0 / 1024.0, rss / 1024.0, hwm / 1024.0);
    printf("idle CPU: %.3f s in %.0f s = %.3f%% of one core (target < 1%%)\n", cpu, wall, 100.0 * cpu / wall);
    printf("baseline: the cached objects as JSON: %.1f MiB; resident / JSON = %.2f\n", bytes / 1048576.0,
           (double)rss * 1024.0 / (double)bytes);
    stop_operator(pid);
    if (getenv("BENCH_KEEP_LOG"))
        printf("operator log: %s\n", log_path);
    else
        unlink(log_path);
    kube_client_free(admin);
    test_apiserver_stop(&srv);
    curl_global_cleanup();
    return 0;
}
