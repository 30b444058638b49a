/* Test support: a kubelet that serves container logs only (see kubelet_logs.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "support/kubelet_logs.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "support/command.h"
#include "support/deadline.h"

#define START_TIMEOUT_MS 30000

static void stop_child(struct test_kubelet *k)
{
    if (k->pid <= 0)
        return;
    kill(k->pid, SIGTERM);
    struct test_deadline d = test_deadline_in(5000);
    int status;
    while (waitpid(k->pid, &status, WNOHANG) == 0) {
        if (!test_deadline_poll(&d)) {
            kill(k->pid, SIGKILL);
            waitpid(k->pid, &status, 0);
            break;
        }
    }
    k->pid = 0;
}

static void remove_dir(const char *dir)
{
    char cmd[400];
    if (dir[0] && strncmp(dir, "/tmp/kubelet-", 13) == 0) {
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
        if (system(cmd) != 0)
            fprintf(stderr, "test_kubelet: could not remove %s\n", dir);
    }
}

static int create_node(struct test_apiserver *s, const char *node, int port, const char *capacity, const char *labels)
{
    char body[2048];
    snprintf(body, sizeof(body),
             "{\"apiVersion\":\"v1\",\"kind\":\"Node\",\"metadata\":{\"name\":\"%s\",\"labels\":{%s%s"
             "\"kubernetes.io/hostname\":\"%s\",\"kubernetes.io/os\":\"linux\",\"kubernetes.io/arch\":\"amd64\"}},"
             "\"status\":{\"addresses\":[{\"type\":\"InternalIP\",\"address\":\"127.0.0.1\"},"
             "{\"type\":\"Hostname\",\"address\":\"%s\"}],"
             "\"daemonEndpoints\":{\"kubeletEndpoint\":{\"Port\":%d}},"
             "\"capacity\":{%s%s\"cpu\":\"64\",\"memory\":\"256Gi\",\"pods\":\"250\"},"
             "\"allocatable\":{%s%s\"cpu\":\"64\",\"memory\":\"256Gi\",\"pods\":\"250\"},"
             "\"conditions\":[{\"type\":\"Ready\",\"status\":\"True\",\"reason\":\"KubeletReady\","
             "\"message\":\"kubelet is posting ready status\"}]}}",
             node, labels ? labels : "", labels && labels[0] ? "," : "", node, node, port, capacity ? capacity : "",
             capacity && capacity[0] ? "," : "", capacity ? capacity : "", capacity && capacity[0] ? "," : "");
    int code = test_apiserver_request(s, "POST", "/api/v1/nodes", NULL, body, NULL);
    if (code != 201) {
        fprintf(stderr, "test_kubelet: creating Node %s answered %d\n", node, code);
        return -1;
    }
    /* A real server may keep only some of a new Node's status: write it through /status too. */
    char path[256];
    snprintf(path, sizeof(path), "/api/v1/nodes/%s/status", node);
    const char *status = strstr(body, "\"status\":");
    char patch[2048];
    snprintf(patch, sizeof(patch), "{%s", status); /* status runs to the body's closing brace */
    code = test_apiserver_request(s, "PATCH", path, "application/merge-patch+json", patch, NULL);
    if (code != 200) {
        fprintf(stderr, "test_kubelet: the status of Node %s answered %d\n", node, code);
        return -1;
    }
    return 0;
}

int test_kubelet_start(struct test_kubelet *k, struct test_apiserver *s, const char *node)
{
    return test_kubelet_start_shaped(k, s, node, NULL, NULL);
}

int test_kubelet_start_shaped(struct test_kubelet *k, struct test_apiserver *s, const char *node,
                              const char *capacity, const char *labels)
{
    memset(k, 0, sizeof(*k));
    snprintf(k->node, sizeof(k->node), "%s", node);
    snprintf(k->dir, sizeof(k->dir), "/tmp/kubelet-XXXXXX");
    if (!mkdtemp(k->dir)) {
        fprintf(stderr, "test_kubelet: mkdtemp: %s\n", strerror(errno));
        k->dir[0] = 0;
        return -1;
    }
    char script[512], ready[300], ca[300];
    snprintf(script, sizeof(script), "%s/tests/cluster/kubeletapi.py", test_src_dir());
    snprintf(ready, sizeof(ready), "%s/port", k->dir);
    snprintf(ca, sizeof(ca), "%s/ca.crt", s->dir);
    char python[512];
    if (test_find_python(python, sizeof(python)) != 0) {
        fprintf(stderr, "test_kubelet: python3 not found in PATH\n");
        remove_dir(k->dir);
        return -1;
    }
    char *const argv[] = {python, script, "--logs-dir", k->dir, "--address", "127.0.0.1", "--port", "0",
                          "--ready-file", ready, "--node", k->node, "--server", s->url, "--token", s->token,
                          "--ca", ca, NULL};
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "test_kubelet: fork: %s\n", strerror(errno));
        remove_dir(k->dir);
        return -1;
    }
    if (pid == 0) {
        /* the server goes away with the test process, even when that one is killed */
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent)
            _exit(1);
        int devnull = open("/dev/null", O_RDONLY);
        if (devnull >= 0) {
            dup2(devnull, 0);
            if (devnull > 2)
                close(devnull);
        }
        test_close_inherited_fds();
        execv(python, argv);
        _exit(127);
    }
    k->pid = pid;
    struct test_deadline d = test_deadline_in(START_TIMEOUT_MS);
    while (test_deadline_poll(&d)) {
        FILE *f = fopen(ready, "r");
        if (f) {
            if (fscanf(f, "%d", &k->port) != 1)
                k->port = 0;
            fclose(f);
            if (k->port > 0)
                break;
        }
        int status;
        if (waitpid(pid, &status, WNOHANG) == pid) {
            k->pid = 0;
            fprintf(stderr, "test_kubelet: kubeletapi.py exited (status %d) before serving\n", status);
            remove_dir(k->dir);
            return -1;
        }
    }
    if (k->port <= 0) {
        fprintf(stderr, "test_kubelet: kubeletapi.py did not write %s within %s\n", ready, test_deadline_text(&d));
        stop_child(k);
        remove_dir(k->dir);
        return -1;
    }
    if (create_node(s, k->node, k->port, capacity, labels) < 0) {
        stop_child(k);
        remove_dir(k->dir);
        return -1;
    }
    return 0;
}

int test_kubelet_gone_node(struct test_apiserver *s, const char *node)
{
    /* a port of 127.0.0.1 that nothing listens on: bound, read, closed, never listened on */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    int port = -1;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 && getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0)
        close(fd);
    return port > 0 ? create_node(s, node, port, NULL, NULL) : -1;
}

int test_kubelet_write_log(struct test_kubelet *k, const char *ns, const char *pod, const char *container,
                           const char *text, size_t len)
{
    char path[600], tmp[620];
    snprintf(path, sizeof(path), "%s/%s_%s_%s.log", k->dir, ns, pod, container);
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return -1;
    size_t n = len ? fwrite(text, 1, len, f) : 0;
    if (fclose(f) != 0 || n != len || rename(tmp, path) != 0) {
        unlink(tmp);
        return -1;
    }
    return 0;
}

int test_kubelet_hold_log(struct test_kubelet *k, const char *ns, const char *pod, const char *container, int reads)
{
    char path[620], tmp[640], text[32];
    snprintf(path, sizeof(path), "%s/%s_%s_%s.log.empty-reads", k->dir, ns, pod, container);
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    int len = snprintf(text, sizeof(text), "%d\n", reads);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return -1;
    size_t n = fwrite(text, 1, (size_t)len, f);
    if (fclose(f) != 0 || n != (size_t)len || rename(tmp, path) != 0) {
        unlink(tmp);
        return -1;
    }
    return 0;
}

void test_kubelet_stop(struct test_kubelet *k, struct test_apiserver *s)
{
    stop_child(k);
    if (k->node[0] && s && s->pid > 0) {
        char path[160];
        snprintf(path, sizeof(path), "/api/v1/nodes/%s", k->node);
        test_apiserver_request(s, "DELETE", path, NULL, NULL, NULL);
    }
    remove_dir(k->dir);
    k->dir[0] = 0;
    k->node[0] = 0;
}
