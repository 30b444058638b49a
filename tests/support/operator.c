#include "support/operator.h"

#include <criterion/criterion.h>
#include <curl/curl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "support/command.h"
#include "support/deadline.h"

/* What this process started and has not stopped, by value (a test's own struct may be gone by
 * the time its suite's .fini runs), for test_operator_stop_all. */
static struct test_operator started[16];
static size_t n_started;

const char *test_operator_binary(void)
{
    static char path[512];
    snprintf(path, sizeof(path), "%s/build/bin/mpijob-operator", test_src_dir());
    cr_assert_eq(access(path, X_OK), 0, "%s is missing: make all first", path);
    return path;
}

void test_operator_start(struct test_operator *op, char *const args[], int (*in_child)(void *), void *arg)
{
    static int runs;
    snprintf(op->log_path, sizeof(op->log_path), "/tmp/mpijob-operator-test.%d.%d.log", (int)getpid(), runs++);
    const char *binary = test_operator_binary();
    pid_t parent = getpid();
    op->pid = fork();
    cr_assert_geq(op->pid, 0);
    if (op->pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(1);
        if (!freopen(op->log_path, "w", stderr))
            _exit(1);
        dup2(2, 1);
        if (in_child && in_child(arg) != 0)
            _exit(126);
        execv(binary, args);
        _exit(127);
    }
    if (n_started < sizeof(started) / sizeof(started[0]))
        started[n_started++] = *op;
}

int test_operator_wait_exit(struct test_operator *op, uint64_t ms)
{
    struct test_deadline d = test_deadline_in(ms);
    for (;;) {
        int status;
        if (op->pid > 0 && waitpid(op->pid, &status, WNOHANG) == op->pid) {
            op->pid = 0;
            return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        }
        if (!test_deadline_poll(&d))
            break;
    }
    if (ms > 0)
        test_wait_failed("the operator to exit", &d, test_operator_log_tail(op, 2000));
    return -1;
}

static char *read_log(const struct test_operator *op, size_t *len)
{
    FILE *f = fopen(op->log_path, "r");
    if (!f)
        return NULL;
    size_t cap = 65536, n = 0;
    char *buf = malloc(cap + 1);
    size_t got;
    while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            char *bigger = realloc(buf, 2 * cap + 1);
            if (!bigger)
                break;
            buf = bigger;
            cap *= 2;
        }
    }
    fclose(f);
    if (buf)
        buf[n] = '\0';
    *len = n;
    return buf;
}

int test_operator_port(const struct test_operator *op, const char *what)
{
    size_t len;
    char *log = read_log(op, &len);
    if (!log)
        return 0;
    char key[64];
    snprintf(key, sizeof(key), "what=%s ", what);
    const char *p = strstr(log, key);
    const char *q = p ? strstr(p, "port=") : NULL;
    int port = q ? atoi(q + 5) : 0;
    free(log);
    return port;
}

int test_operator_log_count(const struct test_operator *op, const char *text)
{
    size_t len;
    char *log = read_log(op, &len);
    int count = 0;
    for (const char *p = log; p && (p = strstr(p, text)) != NULL; p += strlen(text))
        count++;
    free(log);
    return count;
}

bool test_operator_log_has(const struct test_operator *op, const char *text)
{
    return test_operator_log_count(op, text) > 0;
}

bool test_operator_wait_log(const struct test_operator *op, const char *text, int times, uint64_t ms)
{
    struct test_deadline d = test_deadline_in(ms);
    do {
        if (test_operator_log_count(op, text) >= times)
            return true;
    } while (test_deadline_poll(&d));
    if (test_operator_log_count(op, text) >= times)
        return true;
    test_wait_failed(text, &d, test_operator_log_tail(op, 2000));
    return false;
}

const char *test_operator_log_tail(const struct test_operator *op, size_t max)
{
    static char tail[16384];
    size_t len;
    char *log = read_log(op, &len);
    if (max >= sizeof(tail))
        max = sizeof(tail) - 1;
    snprintf(tail, sizeof(tail), "%s", log ? (len > max ? log + len - max : log) : "(no log)");
    free(log);
    return tail;
}

void test_operator_stop(struct test_operator *op)
{
    if (op->pid > 0 && kill(op->pid, SIGKILL) == 0)
        waitpid(op->pid, NULL, 0);
    for (size_t i = 0; i < n_started; i++)
        if (strcmp(started[i].log_path, op->log_path) == 0)
            started[i] = started[--n_started];
    op->pid = 0;
    if (op->log_path[0])
        unlink(op->log_path);
    op->log_path[0] = '\0';
}

void test_operator_stop_all(void)
{
    while (n_started > 0) {
        struct test_operator op = started[n_started - 1];
        /* A pid the test already waited for may be another process's by now: only a child of
         * this process that is still there is killed. */
        if (op.pid > 0 && waitpid(op.pid, NULL, WNOHANG) != 0)
            op.pid = 0;
        test_operator_stop(&op);
    }
}

struct body {
    char *data;
    size_t len, cap;
};

static size_t collect(char *data, size_t size, size_t n, void *arg)
{
    struct body *b = arg;
    size_t room = b->cap > b->len + 1 ? b->cap - b->len - 1 : 0;
    size_t take = size * n < room ? size * n : room;
    memcpy(b->data + b->len, data, take);
    b->len += take;
    b->data[b->len] = '\0';
    return size * n;
}

long test_http_get(int port, const char *path, char *body, size_t len)
{
    char url[256];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d%s", port, path);
    struct body b = {body, 0, len};
    if (len)
        body[0] = '\0';
    CURL *h = curl_easy_init();
    cr_assert_not_null(h);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 30000L);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    long code = 0;
    if (curl_easy_perform(h) == CURLE_OK)
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
    curl_easy_cleanup(h);
    return code;
}
