#include "server/http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "server/metrics.h"

struct http_server {
    struct MHD_Daemon *daemon;
    struct http_handlers h;
    int port;
};

/* Parses "HOST:PORT", "[V6]:PORT" or ":PORT" into ss. 0 or -EINVAL. */
static int parse_addr(const char *addr, struct sockaddr_storage *ss, socklen_t *sl)
{
    if (!addr)
        return -EINVAL;
    const char *colon = strrchr(addr, ':');
    if (!colon || !colon[1])
        return -EINVAL;
    char *end;
    errno = 0;
    long port = strtol(colon + 1, &end, 10);
    if (errno || *end || port < 0 || port > 65535)
        return -EINVAL;
    char host[64];
    size_t hl = (size_t)(colon - addr);
    if (hl >= sizeof(host))
        return -EINVAL;
    memcpy(host, addr, hl);
    host[hl] = 0;
    memset(ss, 0, sizeof(*ss));
    if (host[0] == '[') {
        if (hl < 2 || host[hl - 1] != ']')
            return -EINVAL;
        host[hl - 1] = 0;
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;
        s6->sin6_family = AF_INET6;
        s6->sin6_port = htons((uint16_t)port);
        if (inet_pton(AF_INET6, host + 1, &s6->sin6_addr) != 1)
            return -EINVAL;
        *sl = sizeof(*s6);
        return 0;
    }
    struct sockaddr_in *s4 = (struct sockaddr_in *)ss;
    s4->sin_family = AF_INET;
    s4->sin_port = htons((uint16_t)port);
    if (host[0] == 0)
        s4->sin_addr.s_addr = htonl(INADDR_ANY);
    else if (strcmp(host, "localhost") == 0)
        s4->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    else if (inet_pton(AF_INET, host, &s4->sin_addr) != 1)
        return -EINVAL;
    *sl = sizeof(*s4);
    return 0;
}

static enum MHD_Result reply(struct MHD_Connection *c, unsigned int code, const char *body,
                             enum MHD_ResponseMemoryMode mode, const char *content_type)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(body), (void *)body, mode);
    if (!r) {
        if (mode == MHD_RESPMEM_MUST_FREE)
            free((void *)body);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    if (code == MHD_HTTP_METHOD_NOT_ALLOWED)
        MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
    enum MHD_Result rc = MHD_queue_response(c, code, r);
    MHD_destroy_response(r);
    return rc;
}

#define TEXT "text/plain; charset=utf-8"

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url,
                              const char *method, const char *version, const char *upload,
                              size_t *upload_size, void **con_cls)
{
    const struct http_server *s = cls;
    if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0)
        return reply(c, MHD_HTTP_METHOD_NOT_ALLOWED, "method not allowed\n",
                     MHD_RESPMEM_PERSISTENT, TEXT);
    if (strcmp(url, "/healthz") == 0)
        return reply(c, MHD_HTTP_OK, "ok", MHD_RESPMEM_PERSISTENT, TEXT);
    if (strcmp(url, "/readyz") == 0) {
        char why[256] = "";
        if (!s->h.ready || s->h.ready(s->h.ready_ctx, why, sizeof(why)))
            return reply(c, MHD_HTTP_OK, "ok", MHD_RESPMEM_PERSISTENT, TEXT);
        why[sizeof(why) - 1] = 0;
        char body[sizeof(why) + 16];
        snprintf(body, sizeof(body), "not ready: %s\n", why[0] ? why : "unknown");
        return reply(c, MHD_HTTP_SERVICE_UNAVAILABLE, body, MHD_RESPMEM_MUST_COPY, TEXT);
    }
    if (strcmp(url, "/metrics") == 0 && s->h.metrics) {
        char *text = s->h.metrics(s->h.metrics_ctx);
        if (!text)
            return reply(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "cannot render metrics\n",
                         MHD_RESPMEM_PERSISTENT, TEXT);
        return reply(c, MHD_HTTP_OK, text, MHD_RESPMEM_MUST_FREE, METRICS_CONTENT_TYPE);
    }
    return reply(c, MHD_HTTP_NOT_FOUND, "not found\n", MHD_RESPMEM_PERSISTENT, TEXT);
}

struct http_server *http_server_start(const char *addr, const struct http_handlers *h,
                                      char *err, size_t err_len)
{
    struct sockaddr_storage ss;
    socklen_t sl = 0;
    if (parse_addr(addr, &ss, &sl) < 0) {
        snprintf(err, err_len, "bad listen address \"%s\" (want HOST:PORT or :PORT)",
                 addr ? addr : "");
        return NULL;
    }
    struct http_server *s = calloc(1, sizeof(*s));
    if (!s) {
        snprintf(err, err_len, "out of memory");
        return NULL;
    }
    if (h)
        s->h = *h;
    unsigned int flags = MHD_USE_INTERNAL_POLLING_THREAD;
    if (ss.ss_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    errno = 0;
    s->daemon = MHD_start_daemon(flags, 0, NULL, NULL, handle, s,
                                 MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
                                 MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)10,
                                 MHD_OPTION_CONNECTION_LIMIT, (unsigned int)64,
                                 MHD_OPTION_END);
    if (!s->daemon) {
        int e = errno;
        snprintf(err, err_len, "cannot listen on %s: %s", addr,
                 e ? strerror(e) : "libmicrohttpd failed to start");
        free(s);
        return NULL;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_LISTEN_FD);
    struct sockaddr_storage bound;
    socklen_t bl = sizeof(bound);
    if (info && getsockname(info->listen_fd, (struct sockaddr *)&bound, &bl) == 0)
        s->port = ntohs(bound.ss_family == AF_INET6
                            ? ((struct sockaddr_in6 *)&bound)->sin6_port
                            : ((struct sockaddr_in *)&bound)->sin_port);
    return s;
}

int http_server_port(const struct http_server *s) { return s ? s->port : -1; }

void http_server_stop(struct http_server *s)
{
    if (!s)
        return;
    MHD_stop_daemon(s->daemon);
    free(s);
}
