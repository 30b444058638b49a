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

/* ---- the cases ------------------------------------------------------------------------------ */

enum call { CALL_GET, CALL_LIST, CALL_WATCH };

struct bad_case {
    enum call call;
    /* What the server answers: a GET or LIST gets `body` as an HTTP answer of `code`; a WATCH gets
     * it as the start of a stream that is then cut (chunked, no last chunk), with `filler` bytes
     * 'x' inside a string first when set. NULL: the connection closes with no answer at all. */
    const char *body;
    int code;
    size_t filler;
    size_t max_line; /* the client's max_watch_line (0: its default) */
    int rc, rc_too;  /* the error the call must end with (rc_too: another one accepted) */
    int events;      /* WATCH: how many events are delivered before it */
    int connections; /* how many times the client connected (0: not counted) */
    long http_code;  /* the Status the call fills (0: not looked at) */
    const char *reason, *message_has;
    const char *why; /* what the check of events or connections means */
};

static char *reply_for(const struct bad_case *k)
{
    if (!k->body)
        return NULL;
    if (k->call != CALL_WATCH)
        return http_reply(k->code, k->body);
    char *body = NULL;
    if (k->filler) {
        static const char head[] = "{\"type\":\"ADDED\",\"object\":{\"x\":\"", tail[] = "\"}}\n";
        body = malloc(sizeof(head) + k->filler + sizeof(tail));
        cr_assert_not_null(body);
        memcpy(body, head, sizeof(head) - 1);
        memset(body + sizeof(head) - 1, 'x', k->filler);
        memcpy(body + sizeof(head) - 1 + k->filler, tail, sizeof(tail));
    }
    char *r = chunked_reply(body ? body : k->body);
    free(body);
    return r;
}

static void run_case(const struct bad_case *k)
{
    struct canned c = {0};
    char *r = reply_for(k);
    canned_start(&c, r, r ? strlen(r) : 0);
    struct kube_client *client = client_for(&c, k->max_line);
    struct kube_status st = {.retry_after_s = -1};
    cJSON *out = NULL;
    int n = 0, rc;
    struct kube_watch_opts opts = {.resource_version = "1"};
    switch (k->call) {
    case CALL_GET:
        rc = kube_get(client, &KUBE_PODS, "default", "x", &out, &st);
        break;
    case CALL_LIST:
        rc = kube_list_page(client, &KUBE_PODS, "default", NULL, &out, &st);
        break;
    case CALL_WATCH:
    default:
        rc = kube_watch(client, &KUBE_PODS, "default", &opts, count_events, &n, &st);
        break;
    }
    cr_assert(rc == k->rc || (k->rc_too && rc == k->rc_too), "got %s, want %s", error_str(rc), error_str(k->rc));
    cr_assert_null(out);
    if (k->call == CALL_WATCH)
        cr_assert_eq(n, k->events, "%s: %d events", k->why ? k->why : "events delivered", n);
    if (k->connections)
        cr_assert_eq(c.connections, k->connections, "%s", k->why ? k->why : "connections");
    if (k->http_code)
        cr_assert_eq(st.http_code, k->http_code);
    if (k->reason)
        cr_assert_str_eq(st.reason, k->reason);
    if (k->message_has)
        cr_assert(st.message && strstr(st.message, k->message_has), "message: %s", st.message ? st.message : "(none)");
    kube_status_clear(&st);
    kube_client_free(client);
    canned_stop(&c);
    free(r);
}

/* One test per case, so that each has its own verdict. */
#define BAD_SERVER_CASE(name, ...)                                                                    \
    Test(bad_server, name, .timeout = 60)                                                             \
    {                                                                                                 \
        static const struct bad_case k = {__VA_ARGS__};                                               \
        run_case(&k);                                                                                 \
    }

BAD_SERVER_CASE(body_that_is_not_json, .call = CALL_GET, .body = "this is not json {", .code = 200,
                .rc = KUBE_EDECODE)

BAD_SERVER_CASE(list_without_items_array, .call = CALL_LIST, .body = "{\"kind\":\"PodList\",\"items\":{\"a\":1}}",
                .code = 200, .rc = KUBE_EDECODE)

BAD_SERVER_CASE(error_without_status_body, .call = CALL_GET, .body = "<html>gateway exploded</html>", .code = 500,
                .rc = KUBE_ESERVER, .http_code = 500, .message_has = "gateway exploded", .connections = 3,
                .why = "1 try + 2 retries")

BAD_SERVER_CASE(connection_closed_without_answer, .call = CALL_GET, .body = NULL, .rc = KUBE_ETRANSPORT,
                .message_has = "", .connections = 3, .why = "1 try + 2 retries")

BAD_SERVER_CASE(watch_with_a_garbage_line, .call = CALL_WATCH,
                .body = "{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"a\",\"resourceVersion\":\"2\"}}}\n"
                        "garbage garbage\n"
                        "{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"b\",\"resourceVersion\":\"3\"}}}\n",
                .rc = KUBE_EDECODE, .events = 1, .why = "events before the garbage are delivered, none after")

BAD_SERVER_CASE(watch_cut_inside_an_event, .call = CALL_WATCH,
                .body = "{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"a\",\"resourceVersion\":\"2\"}}}\n"
                        "{\"type\":\"MODIFIED\",\"object\":{\"metadata\":{\"na",
                .rc = KUBE_ETRANSPORT, .rc_too = KUBE_EDECODE, .events = 1, .why = "the half event is never delivered")

BAD_SERVER_CASE(watch_line_over_the_cap, .call = CALL_WATCH, .body = "", .filler = 100000, .max_line = 4096,
                .rc = KUBE_ETOOBIG, .events = 0)

BAD_SERVER_CASE(watch_410_error_event, .call = CALL_WATCH,
                .body = "{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},"
                        "\"status\":\"Failure\",\"message\":\"The resourceVersion for the provided watch is too old.\","
                        "\"reason\":\"Expired\",\"code\":410}}\n",
                .rc = KUBE_EGONE, .events = 0, .http_code = 410, .reason = "Expired")
