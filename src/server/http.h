/* The operator's health and metrics endpoint (libmicrohttpd, one internal polling thread).
 *
 *   GET /healthz  200 "ok" while the process runs
 *   GET /readyz   200 "ok", or 503 with the reason the ready callback gave
 *   GET /metrics  200 with the metrics callback's text, served as METRICS_CONTENT_TYPE
 *                 (404 when no metrics callback is set, 500 when it returns NULL)
 *   other paths   404;  methods other than GET and HEAD: 405 with "Allow: GET, HEAD"
 *
 * The callbacks run on the server's thread and must be thread-safe. */
#ifndef SERVER_HTTP_H
#define SERVER_HTTP_H

#include <stdbool.h>
#include <stddef.h>

struct http_handlers {
    /* true when ready; otherwise false with a reason written to why (NUL-terminated, at most
     * len bytes). NULL: always ready. */
    bool (*ready)(void *ctx, char *why, size_t len);
    void *ready_ctx;
    /* The exposition text, malloc'd (the server frees it), or NULL on failure. NULL callback:
     * this server has no /metrics. */
    char *(*metrics)(void *ctx);
    void *metrics_ctx;
};

struct http_server;

/* Starts serving on addr: "HOST:PORT" (HOST a numeric IPv4 address or "localhost"),
 * "[IPV6]:PORT", or ":PORT" for every IPv4 address. Port 0 picks a free port (see
 * http_server_port). The handlers are copied. Returns NULL with a message in err on failure. */
struct http_server *http_server_start(const char *addr, const struct http_handlers *h,
                                      char *err, size_t err_len);
/* The port actually bound. */
int http_server_port(const struct http_server *s);
/* Stops the thread, closes every connection and frees the server. NULL is fine. */
void http_server_stop(struct http_server *s);

#endif
