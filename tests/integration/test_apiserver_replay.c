/* The API-server double itself: it replays the recorded kube-apiserver exchanges faithfully, and
 * the test support around it (start/stop, control API, request log) works. */
#include <criterion/criterion.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "support/apiserver.h"
#include "support/command.h"
#include "support/sanitizer.h"

static const char *str_item(const cJSON *obj, const char *key)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    return cJSON_IsString(it) ? it->valuestring : NULL;
}

static int int_item(const cJSON *obj, const char *key)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    return cJSON_IsNumber(it) ? it->valueint : -1;
}

Test(apiserver, replays_recordings, .timeout = 120)
{
    test_run_checked("replay_test.py", "python3 tests/apiserver/replay_test.py");
}

/* The same sequence recorded from a real 1.36.3, replayed against the double answering as 1.36
 * (tests/apiserver/release.py). */
Test(apiserver, replays_the_1_36_recordings, .timeout = 120)
{
    test_run_checked("replay_test.py (1.36)",
                     "python3 tests/apiserver/replay_test.py --recordings tests/apiserver/recordings-1.36");
}

/* launch.py stops on SIGTERM within seconds, leaves no process and closes its caller's output
 * (tests/apiserver/test_launch.py; the double, or real etcd and kube-apiserver). */
Test(apiserver, launcher_stops_on_sigterm, .timeout = 180)
{
    test_run_checked("test_launch.py", "python3 tests/support/pyresults.py discover -s tests/apiserver -p test_launch.py");
}

/* The RBAC authorizer that holds the operator's token to its role. */
Test(apiserver, rbac_authorizer, .timeout = 120) { test_run_checked("test_rbac.py", "python3 tests/support/pyresults.py discover -s tests/apiserver -p test_rbac.py"); }

Test(apiserver, starts_and_stops_cleanly, .timeout = 180)
{
    struct test_apiserver s;
    cr_assert_eq(test_apiserver_start(&s), 0);
    cr_assert_gt(s.port, 0);
    cr_assert_gt(s.pid, 0);
    cr_assert_eq(strncmp(s.url, "https://127.0.0.1:", 18), 0, "%s", s.url);
    struct stat st;
    cr_assert_eq(stat(s.kubeconfig, &st), 0, "kubeconfig %s missing", s.kubeconfig);

    cJSON *out = NULL;
    cr_assert_eq(test_apiserver_request(&s, "GET", "/version", NULL, NULL, &out), 200);
    cr_assert_str_eq(str_item(out, "major"), "1");
    cJSON_Delete(out);
    cr_assert_eq(test_apiserver_request(&s, "GET", "/api/v1/namespaces/default/pods/nope", NULL, NULL, &out), 404);
    cr_assert_str_eq(str_item(out, "reason"), "NotFound");
    cJSON_Delete(out);

    char dir[256];
    snprintf(dir, sizeof(dir), "%s", s.dir);
    int pid = s.pid;
    test_apiserver_stop(&s);
    cr_assert_neq(stat(dir, &st), 0, "state directory %s must be removed", dir);
    cr_assert_eq(kill(pid, 0), -1, "server process %d must be gone", pid);
    cr_assert_eq(kill(-pid, 0), -1, "no process of group %d may survive", pid);
    test_apiserver_stop(&s); /* twice is harmless */
}

/* A test that leaves by cr_skip_test, after its suite's .init started a server, ends its process
 * without the suite's .fini: only exit handlers run. The server and its state directory must go
 * all the same. A child process plays that test: it starts a server and exits without stopping
 * it. */
Test(apiserver, a_process_that_exits_without_stop_leaves_nothing, .timeout = 180)
{
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    pid_t child = fork();
    cr_assert_geq(child, 0);
    if (child == 0) {
        close(fds[0]);
        struct test_apiserver s;
        char line[300] = "";
        if (test_apiserver_start(&s) == 0)
            snprintf(line, sizeof(line), "%d %s\n", s.pid, s.dir);
        ssize_t w = write(fds[1], line, strlen(line));
        (void)w;
        close(fds[1]);
        test_no_leak_check_at_exit();
        exit(line[0] ? 0 : 1);
    }
    close(fds[1]);
    char line[300] = {0};
    size_t got = 0;
    for (ssize_t r; got < sizeof(line) - 1 && (r = read(fds[0], line + got, sizeof(line) - 1 - got)) != 0;) {
        if (r < 0 && errno == EINTR)
            continue;
        cr_assert_gt(r, 0, "read: %s", strerror(errno));
        got += (size_t)r;
    }
    close(fds[0]);
    int status = 0;
    cr_assert_eq(waitpid(child, &status, 0), child);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child could not start a server (status %d)",
              status);
    int pid = 0;
    char dir[256] = "";
    cr_assert_eq(sscanf(line, "%d %255s", &pid, dir), 2, "child said: %s", line);
    struct stat st;
    cr_assert_neq(stat(dir, &st), 0, "state directory %s must be removed at exit", dir);
    cr_assert_eq(kill(-pid, 0), -1, "no process of group %d may survive", pid);
}

Test(apiserver, fail_next_fails_exactly_one_request, .timeout = 180)
{
    struct test_apiserver s;
    cr_assert_eq(test_apiserver_start(&s), 0);
    if (!s.is_double) {
        test_apiserver_stop(&s);
        cr_skip_test("fault injection needs the API-server double");
    }
    cr_assert_eq(test_apiserver_fault(&s, "{\"failNext\":{\"count\":1,\"code\":500}}"), 0);
    cJSON *out = NULL;
    cr_assert_eq(test_apiserver_request(&s, "GET", "/api/v1/namespaces/default/configmaps", NULL, NULL, &out), 500);
    cr_assert_str_eq(str_item(out, "kind"), "Status");
    cr_assert_str_eq(str_item(out, "reason"), "InternalError");
    cr_assert_eq(int_item(out, "code"), 500);
    cJSON_Delete(out);
    cr_assert_eq(test_apiserver_request(&s, "GET", "/api/v1/namespaces/default/configmaps", NULL, NULL, &out), 200);
    cr_assert_str_eq(str_item(out, "kind"), "ConfigMapList");
    cJSON_Delete(out);
    cr_assert_eq(test_apiserver_fault(&s, "{\"noSuchFault\":true}"), -1);
    test_apiserver_stop(&s);
}

Test(apiserver, log_shows_a_create, .timeout = 180)
{
    struct test_apiserver s;
    cr_assert_eq(test_apiserver_start(&s), 0);
    if (!s.is_double) {
        test_apiserver_stop(&s);
        cr_skip_test("the request log needs the API-server double");
    }
    cJSON *out = NULL;
    cr_assert_eq(test_apiserver_request(&s, "POST", "/api/v1/namespaces/default/configmaps", NULL,
                                        "{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":"
                                        "\"logged\"},\"data\":{\"a\":\"b\"}}",
                                        &out),
                 201);
    cr_assert_str_eq(str_item(cJSON_GetObjectItem(out, "metadata"), "name"), "logged");
    cJSON_Delete(out);

    cJSON *log = test_apiserver_log(&s, 0);
    cr_assert_not_null(log);
    int found = 0, last_seq = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, log) {
        last_seq = int_item(e, "seq");
        const char *verb = str_item(e, "verb");
        if (!verb || strcmp(verb, "create") != 0)
            continue;
        cr_assert_str_eq(str_item(e, "method"), "POST");
        cr_assert_str_eq(str_item(e, "path"), "/api/v1/namespaces/default/configmaps");
        cr_assert_str_eq(str_item(e, "resource"), "configmaps");
        cr_assert_str_eq(str_item(e, "namespace"), "default");
        cr_assert_eq(int_item(e, "code"), 201);
        cr_assert_str_eq(str_item(cJSON_GetObjectItem(cJSON_GetObjectItem(e, "body"), "metadata"), "name"), "logged");
        found++;
    }
    cJSON_Delete(log);
    cr_assert_eq(found, 1, "exactly one create in the log");

    /* entries since a sequence number: only what came after */
    cr_assert_eq(test_apiserver_request(&s, "GET", "/api/v1/namespaces/default/configmaps/logged", NULL, NULL, NULL),
                 200);
    log = test_apiserver_log(&s, last_seq + 1);
    cr_assert_eq(cJSON_GetArraySize(log), 1);
    cr_assert_str_eq(str_item(cJSON_GetArrayItem(log, 0), "verb"), "get");
    cJSON_Delete(log);

    /* control requests are not logged, and a wrong token is refused with a Status */
    cJSON *state = NULL;
    cr_assert_eq(test_apiserver_control(&s, "GET", "/_double/state", NULL, &state), 200);
    cr_assert_not_null(str_item(state, "resourceVersion"));
    cJSON_Delete(state);
    char saved[64];
    snprintf(saved, sizeof(saved), "%s", s.token);
    snprintf(s.token, sizeof(s.token), "wrong");
    cr_assert_eq(test_apiserver_request(&s, "GET", "/api/v1/namespaces/default/configmaps", NULL, NULL, &out), 401);
    cr_assert_str_eq(str_item(out, "reason"), "Unauthorized");
    cJSON_Delete(out);
    snprintf(s.token, sizeof(s.token), "%s", saved);
    log = test_apiserver_log(&s, last_seq + 2);
    cr_assert_eq(cJSON_GetArraySize(log), 1, "the 401 is logged, the control request is not");
    cr_assert_eq(int_item(cJSON_GetArrayItem(log, 0), "code"), 401);
    cJSON_Delete(log);
    test_apiserver_stop(&s);
}
