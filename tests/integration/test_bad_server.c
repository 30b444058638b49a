/* The client against a server that misbehaves in ways the double never does: bodies that are
 * not JSON, watch streams with garbage, truncated or oversized lines, connections closed
 * before any answer. Every case must end in a clear error code, never a crash or a leak. */
#include <criterion/criterion.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "kube/client.h"
#include "kube/config.h"
#include "kube/watch.h"
#include "util/json.h"

struct canned {
    int listen_fd;
    int port;
    const char *reply; /* written as is after reading the request; NULL: close at once */
    size_t reply_len;
    int connections;
    pthread_t thread;
};

static void *serve(void *arg)
{
    struct canned *c = arg;
    for (;;) {
        int fd = accept(c->listen_fd, NULL, NULL);
        if (fd < 0)
            return NULL;
        c->connections++;
        char req[8192];
        ssize_t got = 0, n;
        /* read the request head (all our requests here are bodiless GETs) */
        while (got < (ssize_t)sizeof(req) - 1 && (n = read(fd, req + got, sizeof(req) - 1 - (size_t)got)) > 0) {
            got += n;
            req[got] = 0;
            if (strstr(req, "\r\n\r\n"))
                break;
        }
        if (c->reply) {
            size_t off = 0;
            while (off < c->reply_len) {
                ssize_t w = write(fd, c->reply + off, c->reply_len - off);
                if (w <= 0)
                    break;
                off += (size_t)w;
            }
        }
        close(fd);
    }
}

static void canned_start(struct canned *c, const char *reply, size_t len)
{
    c->reply = reply;
    c->reply_len = len;
    c->listen_fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    cr_assert_eq(bind(c->listen_fd, (struct sockaddr *)&a, sizeof(a)), 0);
    socklen_t alen = sizeof(a);
    getsockname(c->listen_fd, (struct sockaddr *)&a, &alen);
    c->port = ntohs(a.sin_port);
    listen(c->listen_fd, 16);
    pthread_create(&c->thread, NULL, serve, c);
}

static void canned_stop(struct canned *c)
{
    shutdown(c->listen_fd, SHUT_RDWR);
    close(c->listen_fd);
    pthread_join(c->thread, NULL);
}

static struct kube_client *client_for(struct canned *c, size_t max_line)
{
    char text[512];
    snprintf(text, sizeof(text),
             "apiVersion: v1\nkind: Config\ncurrent-context: t\n"
             "clusters:\n- name: c\n  cluster:\n    server: http://127.0.0.1:%d\n"
             "users:\n- name: u\n  user:\n    token: abc\n"
             "contexts:\n- name: t\n  context:\n    cluster: c\n    user: u\n",
             c->port);
    struct kube_config *cfg = NULL;
    char err[256];
    cr_assert_eq(kube_config_parse(text, strlen(text), NULL, NULL, &cfg, err, sizeof(err)), 0, "%s", err);
    struct kube_client_options opts = {.max_retries = 2, .backoff_base_ms = 10, .backoff_max_ms = 20,
                                       .max_watch_line = max_line};
    struct kube_client *client = NULL;
    cr_assert_eq(kube_client_new(cfg, &opts, &client), 0);
    return client;
}

static char *http_reply(int code, const char *body)
{
    char *out = NULL;
    if (asprintf(&out, "HTTP/1.1 %d X\r\nContent-Type: application/json\r\nConnection: close\r\n"
                       "Content-Length: %zu\r\n\r\n%s", code, strlen(body), body) < 0)
        return NULL;
    return out;
}

static char *chunked_reply(const char *body)
{
    char *out = NULL;
    if (asprintf(&out, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n"
                       "Connection: close\r\n\r\n%zx\r\n%s\r\n", strlen(body), body) < 0)
        return NULL;
    return out; /* no terminating chunk: the stream is cut */
}

static int count_events(void *ctx, enum kube_watch_type type, cJSON *object)
{
    (*(int *)ctx)++;
    cJSON_Delete(object);
    return 0;
}

Test(bad_server, body_that_is_not_json, .timeout = 20)
{
    struct canned c = {0};
    char *r = http_reply(200, "this is not json {");
    canned_start(&c, r, strlen(r));
    struct kube_client *client = client_for(&c, 0);
    cJSON *out = NULL;
    cr_assert_eq(kube_get(client, &KUBE_PODS, "default", "x", &out, NULL), KUBE_EDECODE);
    cr_assert_null(out);
    kube_client_free(client);
    canned_stop(&c);
    free(r);
}

Test(bad_server, list_without_items_array, .timeout = 20)
{
    struct canned c = {0};
    char *r = http_reply(200, "{\"kind\":\"PodList\",\"items\":{\"a\":1}}");
    canned_start(&c, r, strlen(r));
    struct kube_client *client = client_for(&c, 0);
    cJSON *out = NULL;
    cr_assert_eq(kube_list_page(client, &KUBE_PODS, "default", NULL, &out, NULL), KUBE_EDECODE);
    cr_assert_null(out);
    kube_client_free(client);
    canned_stop(&c);
    free(r);
}

Test(bad_server, error_without_status_body, .timeout = 20)
{
    struct canned c = {0};
    char *r = http_reply(500, "<html>gateway exploded</html>");
    canned_start(&c, r, strlen(r));
    struct kube_client *client = client_for(&c, 0);
    struct kube_status st = {.retry_after_s = -1};
    cr_assert_eq(kube_get(client, &KUBE_PODS, "default", "x", NULL, &st), KUBE_ESERVER);
    cr_assert_eq(st.http_code, 500);
    cr_assert_not_null(strstr(st.message, "gateway exploded"));
    cr_assert_eq(c.connections, 3, "1 try + 2 retries");
    kube_status_clear(&st);
    kube_client_free(client);
    canned_stop(&c);
    free(r);
}

Test(bad_server, connection_closed_without_answer, .timeout = 20)
{
    struct canned c = {0};
    canned_start(&c, NULL, 0);
    struct kube_client *client = client_for(&c, 0);
    struct kube_status st = {.retry_after_s = -1};
    cr_assert_eq(kube_get(client, &KUBE_PODS, "default", "x", NULL, &st), KUBE_ETRANSPORT);
    cr_assert_not_null(st.message);
    cr_assert_eq(c.connections, 3);
    kube_status_clear(&st);
    kube_client_free(client);
    canned_stop(&c);
}

Test(bad_server, watch_with_a_garbage_line, .timeout = 20)
{
    struct canned c = {0};
    char *r = chunked_reply("{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"a\",\"resourceVersion\":\"2\"}}}\n"
                            "garbage garbage\n"
                            "{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"b\",\"resourceVersion\":\"3\"}}}\n");
    canned_start(&c, r, strlen(r));
    struct kube_client *client = client_for(&c, 0);
    struct kube_watch_opts opts = {.resource_version = "1"};
    int n = 0;
    cr_assert_eq(kube_watch(client, &KUBE_PODS, "default", &opts, count_events, &n, NULL), KUBE_EDECODE);
    cr_assert_eq(n, 1, "events before the garbage are delivered, none after");
    kube_client_free(client);
    canned_stop(&c);
    free(r);
}

Test(bad_server, watch_cut_inside_an_event, .timeout = 20)
{
    struct canned c = {0};
    char *r = chunked_reply("{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"a\",\"resourceVersion\":\"2\"}}}\n"
                            "{\"type\":\"MODIFIED\",\"object\":{\"metadata\":{\"na");
    canned_start(&c, r, strlen(r));
    struct kube_client *client = client_for(&c, 0);
    struct kube_watch_opts opts = {.resource_version = "1"};
    int n = 0;
    int rc = kube_watch(client, &KUBE_PODS, "default", &opts, count_events, &n, NULL);
    cr_assert(rc == KUBE_ETRANSPORT || rc == KUBE_EDECODE, "got %s", error_str(rc));
    cr_assert_eq(n, 1, "the half event is never delivered");
    kube_client_free(client);
    canned_stop(&c);
    free(r);
}

Test(bad_server, watch_line_over_the_cap, .timeout = 20)
{
    struct canned c = {0};
    size_t big = 100000;
    char *line = malloc(big + 64);
    int len = snprintf(line, 64, "{\"type\":\"ADDED\",\"object\":{\"x\":\"");
    memset(line + len, 'x', big);
    strcpy(line + len + big, "\"}}\n");
    char *r = chunked_reply(line);
    free(line);
    canned_start(&c, r, strlen(r));
    struct kube_client *client = client_for(&c, 4096);
    struct kube_watch_opts opts = {.resource_version = "1"};
    int n = 0;
    cr_assert_eq(kube_watch(client, &KUBE_PODS, "default", &opts, count_events, &n, NULL), KUBE_ETOOBIG);
    cr_assert_eq(n, 0);
    kube_client_free(client);
    canned_stop(&c);
    free(r);
}

Test(bad_server, watch_410_error_event, .timeout = 20)
{
    struct canned c = {0};
    char *r = chunked_reply("{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},"
                            "\"status\":\"Failure\",\"message\":\"The resourceVersion for the provided watch is too old.\","
                            "\"reason\":\"Expired\",\"code\":410}}\n");
    canned_start(&c, r, strlen(r));
    struct kube_client *client = client_for(&c, 0);
    struct kube_watch_opts opts = {.resource_version = "1"};
    struct kube_status st = {.retry_after_s = -1};
    int n = 0;
    cr_assert_eq(kube_watch(client, &KUBE_PODS, "default", &opts, count_events, &n, &st), KUBE_EGONE);
    cr_assert_eq(st.http_code, 410);
    cr_assert_str_eq(st.reason, "Expired");
    kube_status_clear(&st);
    kube_client_free(client);
    canned_stop(&c);
    free(r);
}
