/* Test support: the API server for integration tests (see apiserver.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "support/apiserver.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <openssl/evp.h>

#include "support/command.h"
#include "support/deadline.h"

#define START_TIMEOUT_MS 120000 /* launch.py reports its own reason after 90 s (both scaled) */
#define CONTROL_PLANE_START_TIMEOUT_MS 240000 /* launch.py gives the controllers 90 s more */
#define STOP_GRACE_MS 8000
#define MAX_ANSWER (64u * 1024u * 1024u)

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;

static void curl_init_once(void) { curl_global_init(CURL_GLOBAL_DEFAULT); }

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {
    }
}

/* Reads a small file whole; NULL when missing. Caller frees. */
static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    if (!buf) {
        fclose(f);
        return NULL;
    }
    size_t n;
    while ((n = fread(buf + len, 1, cap - len - 1, f)) > 0) {
        len += n;
        if (cap - len - 1 == 0) {
            if (cap >= (1u << 20))
                break;
            char *bigger = realloc(buf, cap * 2);
            if (!bigger)
                break;
            buf = bigger;
            cap *= 2;
        }
    }
    buf[len] = 0;
    fclose(f);
    return buf;
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

static void remove_tree(const char *dir)
{
    if (dir[0])
        nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static void kill_group(int pid, int sig)
{
    if (pid <= 0)
        return;
    if (kill(-pid, sig) < 0)
        kill(pid, sig);
}

/* Waits for the launcher to exit; SIGKILLs its group after grace_ms. */
static void reap(int pid, long grace_ms)
{
    long long end = now_ms() + grace_ms;
    for (;;) {
        int status;
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid || (r < 0 && errno != EINTR))
            return;
        if (now_ms() > end) {
            kill_group(pid, SIGKILL);
            while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
            }
            return;
        }
        sleep_ms(10);
    }
}

/* The process ids listed in <dir>/pid (at most max). */
static int read_pids(const char *dir, int *pids, int max)
{
    char path[300];
    snprintf(path, sizeof(path), "%s/pid", dir);
    char *text = slurp(path);
    int n = 0;
    char *save = NULL;
    for (char *tok = text ? strtok_r(text, " \n", &save) : NULL; tok && n < max; tok = strtok_r(NULL, " \n", &save)) {
        int p = atoi(tok);
        if (p > 0)
            pids[n++] = p;
    }
    free(text);
    return n;
}

static void track(const char *dir, int pid);

static int start_with2(struct test_apiserver *s, const char *extra_arg, const char *extra_arg2, const char *rbac_file,
                      long long timeout_ms);

static int start_with(struct test_apiserver *s, const char *extra_arg, const char *rbac_file, long long timeout_ms)
{
    return start_with2(s, extra_arg, NULL, rbac_file, timeout_ms);
}

static int start_with2(struct test_apiserver *s, const char *extra_arg, const char *extra_arg2, const char *rbac_file,
                      long long timeout_ms)
{
    memset(s, 0, sizeof(*s));
    pthread_once(&curl_once, curl_init_once);
    char script[512];
    snprintf(script, sizeof(script), "%s/tests/apiserver/launch.py", test_src_dir());
    if (access(script, R_OK) != 0) {
        fprintf(stderr, "test_apiserver: %s not found (run from the repository root or set MPIJOB_SRC_DIR)\n",
                script);
        return -1;
    }
    snprintf(s->dir, sizeof(s->dir), "/tmp/apiserver-XXXXXX");
    if (!mkdtemp(s->dir)) {
        fprintf(stderr, "test_apiserver: mkdtemp: %s\n", strerror(errno));
        s->dir[0] = 0;
        return -1;
    }
    snprintf(s->token, sizeof(s->token), "test-token");
    snprintf(s->kubeconfig, sizeof(s->kubeconfig), "%s/kubeconfig", s->dir);
    char python[512];
    if (test_find_python(python, sizeof(python)) != 0) {
        fprintf(stderr, "test_apiserver: python3 not found in PATH\n");
        remove_tree(s->dir);
        s->dir[0] = 0;
        return -1;
    }
    /* The operator's own token is held to RBAC: the role the deploy manifest grants, unless
     * MPIJOB_TEST_RBAC names another file (a role with one rule removed, a namespaced one). */
    char rbac[512];
    const char *rbac_env = getenv("MPIJOB_TEST_RBAC");
    if (rbac_file)
        snprintf(rbac, sizeof(rbac), "%s/%s", test_src_dir(), rbac_file);
    else if (rbac_env && rbac_env[0])
        snprintf(rbac, sizeof(rbac), "%s", rbac_env);
    else
        snprintf(rbac, sizeof(rbac), "%s/%s", test_src_dir(), TEST_RBAC_DEFAULT);
    snprintf(s->operator_kubeconfig, sizeof(s->operator_kubeconfig), "%s/operator.kubeconfig", s->dir);
    char *const argv[] = {python, script, "--state-dir", s->dir, "--token", s->token, "--rbac", rbac,
                          (char *)(extra_arg ? extra_arg : extra_arg2), (char *)(extra_arg ? extra_arg2 : NULL), NULL};
    static const char exec_failed[] = "test_apiserver: cannot exec python3\n";

    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "test_apiserver: fork: %s\n", strerror(errno));
        remove_tree(s->dir);
        s->dir[0] = 0;
        return -1;
    }
    if (pid == 0) {
        setsid();
        /* the server goes away with the test process, even when that one is killed */
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent)
            _exit(1);
        int devnull = open("/dev/null", O_RDWR);
        if (devnull >= 0) {
            dup2(devnull, 0);
            dup2(devnull, 1);
            if (devnull > 2)
                close(devnull);
        }
        test_close_inherited_fds();
        execv(python, argv);
        ssize_t ignored = write(2, exec_failed, sizeof(exec_failed) - 1);
        (void)ignored;
        _exit(127);
    }
    s->pid = (int)pid;
    track(s->dir, s->pid);

    char ready[300];
    snprintf(ready, sizeof(ready), "%s/ready", s->dir);
    timeout_ms = (long long)test_ms((uint64_t)timeout_ms);
    long long end = now_ms() + timeout_ms;
    for (;;) {
        if (access(ready, F_OK) == 0)
            break;
        int status;
        if (waitpid(pid, &status, WNOHANG) == pid) {
            fprintf(stderr, "test_apiserver: launcher exited (status %d) before the server was ready\n", status);
            s->pid = 0;
            kill(-pid, SIGKILL);
            test_apiserver_stop(s);
            return -1;
        }
        if (now_ms() > end) {
            fprintf(stderr, "test_apiserver: server not ready after %lld s (state in %s)\n", timeout_ms / 1000,
                    s->dir);
            test_apiserver_stop(s);
            return -1;
        }
        sleep_ms(10);
    }

    char path[300];
    snprintf(path, sizeof(path), "%s/port", s->dir);
    char *text = slurp(path);
    s->port = text ? atoi(text) : 0;
    free(text);
    if (s->port <= 0) {
        fprintf(stderr, "test_apiserver: no port in %s\n", path);
        test_apiserver_stop(s);
        return -1;
    }
    snprintf(s->url, sizeof(s->url), "https://127.0.0.1:%d", s->port);
    snprintf(path, sizeof(path), "%s/info.json", s->dir);
    text = slurp(path);
    s->is_double = !(text && strstr(text, "\"real\""));
    s->control_plane = text && strstr(text, "\"controlPlane\": true");
    free(text);
    return 0;
}

/* Stops the launcher pid (0: none) and what it started, and removes its state directory. */
static void stop_server(int pid, const char *dir)
{
    if (pid > 0) {
        int pids[8];
        int n = read_pids(dir, pids, 8);
        /* The launcher stops what it started, in order (kube-apiserver before its etcd). */
        kill_group(pid, SIGTERM);
        reap(pid, STOP_GRACE_MS);
        /* Whatever it started and left behind (it was killed, or ran out of time) goes now. */
        for (int i = 0; i < n; i++)
            if (pids[i] != pid && kill(pids[i], 0) == 0)
                kill(pids[i], SIGKILL);
    }
    remove_tree(dir);
}

/* Servers started and not yet stopped, by copy (a test's struct may live on its stack). A test
 * that ends by cr_skip_test leaves the process without running its suite's .fini, and exit
 * handlers are all that runs then: without this, every skipped test that had started a server
 * in .init left its state directory (a real etcd's is about 60 MB) in /tmp. Only the process that
 * started a server stops it at exit, not a child forked from it. */
#define MAX_LIVE 16
static struct live_server {
    pid_t owner; /* the process that started it: a forked child's exit must not stop it */
    int pid;
    char dir[sizeof(((struct test_apiserver *)0)->dir)];
} live[MAX_LIVE];
static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t live_once = PTHREAD_ONCE_INIT;

static void stop_live_servers(void)
{
    pthread_mutex_lock(&live_lock);
    for (int i = 0; i < MAX_LIVE; i++)
        if (live[i].dir[0] && live[i].owner == getpid()) {
            stop_server(live[i].pid, live[i].dir);
            live[i].dir[0] = 0;
        }
    pthread_mutex_unlock(&live_lock);
}

static void live_once_init(void) { atexit(stop_live_servers); }

/* Records the server whose launcher is pid and whose state directory is dir. */
static void track(const char *dir, int pid)
{
    pthread_once(&live_once, live_once_init);
    pthread_mutex_lock(&live_lock);
    for (int i = 0; i < MAX_LIVE; i++)
        if (!live[i].dir[0]) {
            live[i].owner = getpid();
            live[i].pid = pid;
            snprintf(live[i].dir, sizeof(live[i].dir), "%s", dir);
            break;
        }
    pthread_mutex_unlock(&live_lock);
}

/* Forgets the server whose state directory is dir: it is being stopped. */
static void untrack(const char *dir)
{
    pthread_mutex_lock(&live_lock);
    for (int i = 0; i < MAX_LIVE; i++)
        if (live[i].dir[0] && strcmp(live[i].dir, dir) == 0)
            live[i].dir[0] = 0;
    pthread_mutex_unlock(&live_lock);
}

void test_apiserver_stop(struct test_apiserver *s)
{
    if (s->dir[0])
        untrack(s->dir);
    stop_server(s->pid, s->dir);
    s->pid = 0;
    s->dir[0] = 0;
    s->port = 0;
}

/* ---- HTTP ---------------------------------------------------------------------------------- */

struct answer {
    char *data;
    size_t len;
    int overflow;
};

static size_t on_data(char *ptr, size_t size, size_t nmemb, void *userdata)
{
    struct answer *a = userdata;
    size_t n = size * nmemb;
    if (a->len + n > MAX_ANSWER) {
        a->overflow = 1;
        return 0;
    }
    char *bigger = realloc(a->data, a->len + n + 1);
    if (!bigger)
        return 0;
    a->data = bigger;
    memcpy(a->data + a->len, ptr, n);
    a->len += n;
    a->data[a->len] = 0;
    return n;
}

static int http(struct test_apiserver *s, const char *method, const char *path, const char *content_type,
                const char *body, cJSON **out)
{
    if (out)
        *out = NULL;
    if (!s->port)
        return -1;
    pthread_once(&curl_once, curl_init_once);
    CURL *curl = curl_easy_init();
    if (!curl)
        return -1;
    char url[1024], auth[128], ca[300], ctype[160];
    snprintf(url, sizeof(url), "%s%s", s->url, path);
    snprintf(auth, sizeof(auth), "Authorization: Bearer %s", s->token);
    snprintf(ca, sizeof(ca), "%s/ca.crt", s->dir);
    struct curl_slist *headers = NULL;
    headers = curl_slist_append(headers, auth);
    headers = curl_slist_append(headers, "Accept: application/json");
    headers = curl_slist_append(headers, "Expect:");
    if (body) {
        snprintf(ctype, sizeof(ctype), "Content-Type: %s", content_type ? content_type : "application/json");
        headers = curl_slist_append(headers, ctype);
    }
    struct answer a = {0};
    curl_easy_setopt(curl, CURLOPT_URL, url);
    curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(curl, CURLOPT_CAINFO, ca);
    curl_easy_setopt(curl, CURLOPT_USERAGENT, "mpijob-tests/apiserver-support");
    curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, (long)test_ms(60000));
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &a);
    if (body) {
        curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
    }
    CURLcode rc = curl_easy_perform(curl);
    long code = -1;
    if (rc == CURLE_OK)
        curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &code);
    else
        fprintf(stderr, "test_apiserver: %s %s: %s\n", method, path, curl_easy_strerror(rc));
    if (rc == CURLE_OK && out && a.data)
        *out = cJSON_Parse(a.data);
    free(a.data);
    curl_slist_free_all(headers);
    curl_easy_cleanup(curl);
    return rc == CURLE_OK ? (int)code : -1;
}

int test_apiserver_control(struct test_apiserver *s, const char *method, const char *path, const char *body,
                           cJSON **out)
{
    return http(s, method, path, "application/json", body, out);
}

int test_apiserver_fault(struct test_apiserver *s, const char *fault_json)
{
    cJSON *out = NULL;
    int code = test_apiserver_control(s, "POST", "/_double/fault", fault_json, &out);
    if (code != 200) {
        char *text = out ? cJSON_PrintUnformatted(out) : NULL;
        fprintf(stderr, "test_apiserver: fault %s refused (HTTP %d): %s\n", fault_json, code, text ? text : "");
        free(text);
    }
    cJSON_Delete(out);
    return code == 200 ? 0 : -1;
}

cJSON *test_apiserver_log(struct test_apiserver *s, int since)
{
    char path[64];
    snprintf(path, sizeof(path), "/_double/log?since=%d", since);
    cJSON *out = NULL;
    int code = test_apiserver_control(s, "GET", path, NULL, &out);
    if (code != 200 || !out) {
        cJSON_Delete(out);
        return NULL;
    }
    cJSON *entries = cJSON_DetachItemFromObject(out, "entries");
    cJSON_Delete(out);
    if (entries && !cJSON_IsArray(entries)) {
        cJSON_Delete(entries);
        return NULL;
    }
    return entries;
}

int test_apiserver_request(struct test_apiserver *s, const char *method, const char *path, const char *content_type,
                           const char *body, cJSON **out)
{
    return http(s, method, path, content_type, body, out);
}

int test_apiserver_start(struct test_apiserver *s) { return start_with(s, NULL, NULL, START_TIMEOUT_MS); }

int test_apiserver_start_rbac(struct test_apiserver *s, const char *rbac_file)
{
    return start_with(s, NULL, rbac_file, START_TIMEOUT_MS);
}

int test_apiserver_start_without_crds(struct test_apiserver *s)
{
    return start_with(s, "--without-crds", NULL, START_TIMEOUT_MS);
}

/* Whether each named binary is an executable in dir. */
static bool has_binaries(const char *dir, const char *const *names)
{
    for (; *names; names++) {
        char path[1024];
        snprintf(path, sizeof(path), "%s/%s", dir, *names);
        if (access(path, X_OK) != 0)
            return false;
    }
    return true;
}

enum test_assets test_apiserver_assets(void)
{
    static const char *const server[] = {"etcd", "kube-apiserver", NULL};
    static const char *const controllers[] = {"kube-controller-manager", "kube-scheduler", NULL};
    const char *dir = getenv("KUBEBUILDER_ASSETS");
    if (!dir || !dir[0] || !has_binaries(dir, server))
        return TEST_ASSETS_NONE;
    return has_binaries(dir, controllers) ? TEST_ASSETS_CONTROL_PLANE : TEST_ASSETS_SERVER;
}

int test_apiserver_start_control_plane(struct test_apiserver *s)
{
    if (test_apiserver_assets() != TEST_ASSETS_CONTROL_PLANE)
        return test_apiserver_start(s);
    return start_with(s, "--control-plane", NULL, CONTROL_PLANE_START_TIMEOUT_MS);
}

int test_apiserver_start_workload_api(struct test_apiserver *s)
{
    if (test_apiserver_assets() != TEST_ASSETS_CONTROL_PLANE)
        return start_with2(s, "--workload-api", NULL, NULL, START_TIMEOUT_MS);
    return start_with2(s, "--control-plane", "--workload-api", NULL, CONTROL_PLANE_START_TIMEOUT_MS);
}

int test_apiserver_namespace(struct test_apiserver *s, const char *name)
{
    char body[512];
    snprintf(body, sizeof(body), "{\"apiVersion\":\"v1\",\"kind\":\"Namespace\",\"metadata\":{\"name\":\"%s\"}}",
             name);
    int code = test_apiserver_request(s, "POST", "/api/v1/namespaces", NULL, body, NULL);
    if (code == 201 || code == 409)
        return 0;
    fprintf(stderr, "test_apiserver: creating namespace %s: HTTP %d\n", name, code);
    return -1;
}

/* A plain-HTTP JSON POST to etcd's gateway: the HTTP status, or -1. */
static int etcd_post(const char *url, const char *body, cJSON **out)
{
    *out = NULL;
    CURL *curl = curl_easy_init();
    if (!curl)
        return -1;
    struct curl_slist *headers = curl_slist_append(NULL, "Content-Type: application/json");
    struct answer a = {0};
    curl_easy_setopt(curl, CURLOPT_URL, url);
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, (long)test_ms(30000));
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &a);
    CURLcode rc = curl_easy_perform(curl);
    long code = -1;
    if (rc == CURLE_OK)
        curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &code);
    if (rc == CURLE_OK && a.data)
        *out = cJSON_Parse(a.data);
    free(a.data);
    curl_slist_free_all(headers);
    curl_easy_cleanup(curl);
    return rc == CURLE_OK ? (int)code : -1;
}

int test_apiserver_compact(struct test_apiserver *s)
{
    if (s->is_double)
        return test_apiserver_fault(s, "{\"compact\":\"storage\"}");
    pthread_once(&curl_once, curl_init_once);
    char path[300], url[512], body[128];
    snprintf(path, sizeof(path), "%s/etcd-url", s->dir);
    char *base = slurp(path);
    if (!base) {
        fprintf(stderr, "test_apiserver: no %s\n", path);
        return -1;
    }
    base[strcspn(base, "\n")] = 0;
    /* A write of a key of its own (as kube-apiserver's compactor writes one), so that the
     * compaction at its revision expires every version handed out so far. */
    snprintf(url, sizeof(url), "%s/v3/kv/put", base);
    cJSON *out = NULL;
    int code = etcd_post(url, "{\"key\":\"bXBpam9iLXRlc3RzL2NvbXBhY3Q=\",\"value\":\"MQ==\"}", &out);
    const cJSON *hdr = cJSON_GetObjectItemCaseSensitive(out, "header");
    const cJSON *rev = cJSON_GetObjectItemCaseSensitive(hdr, "revision");
    long long revision = cJSON_IsString(rev) ? atoll(rev->valuestring) : 0;
    cJSON_Delete(out);
    if (code != 200 || revision <= 0) {
        fprintf(stderr, "test_apiserver: etcd at %s gave no revision (HTTP %d)\n", base, code);
        free(base);
        return -1;
    }
    /* Then what kube-apiserver's own compactor writes before it compacts: compact_rev_key, the
     * revision compacted at. From 1.34 on, a server serves list pages (continue tokens) and
     * watches from its watch cache's snapshots, and it drops those below a compaction only when
     * it learns of it through this key (its cacher polls every 15 s): a compaction it is not told
     * of is never seen, and an expired continue token goes on being served. */
    char value[24], b64[40];
    snprintf(value, sizeof(value), "%lld", revision);
    EVP_EncodeBlock((unsigned char *)b64, (const unsigned char *)value, (int)strlen(value)); /* 4/3 of <= 23, and a NUL */
    snprintf(url, sizeof(url), "%s/v3/kv/put", base);
    snprintf(body, sizeof(body), "{\"key\":\"Y29tcGFjdF9yZXZfa2V5\",\"value\":\"%s\"}", b64); /* compact_rev_key */
    code = etcd_post(url, body, &out);
    cJSON_Delete(out);
    if (code != 200) {
        fprintf(stderr, "test_apiserver: etcd at %s: writing compact_rev_key: HTTP %d\n", base, code);
        free(base);
        return -1;
    }
    snprintf(url, sizeof(url), "%s/v3/kv/compaction", base);
    snprintf(body, sizeof(body), "{\"revision\":\"%lld\",\"physical\":true}", revision);
    code = etcd_post(url, body, &out);
    cJSON_Delete(out);
    free(base);
    if (code != 200) {
        fprintf(stderr, "test_apiserver: etcd compaction at revision %lld: HTTP %d\n", revision, code);
        return -1;
    }
    return 0;
}
