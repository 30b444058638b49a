/* REST client for the Kubernetes API over libcurl.
 *
 * One kube_client is shared by every thread of the process: it holds one connection pool
 * (a curl share handle for connections, TLS sessions and DNS), the QPS/burst limiter and the
 * retry policy. Objects travel as cJSON trees kept whole, so unknown fields pass through.
 *
 * Retries, inside every call:
 *  - 5xx answers and transport errors: exponential backoff with jitter, at most max_retries;
 *  - 429: waits the Retry-After seconds (at most retry_after_max_ms; backoff when absent) and
 *    retries;
 *  - 401: the token is re-read once (kube_config_invalidate_token) and the request repeated.
 * Every other non-2xx answer is returned as the code of its Status reason (errors.h), with the
 * decoded Status in *status when the caller passes one. */
#ifndef KUBE_CLIENT_H
#define KUBE_CLIENT_H

#include <cjson/cJSON.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kube/config.h"
#include "kube/errors.h"

struct kube_resource {
    const char *group;   /* "" for the core group */
    const char *version; /* "v1" */
    const char *plural;  /* "pods" */
    const char *kind;    /* "Pod" */
    bool namespaced;
};

extern const struct kube_resource KUBE_PODS, KUBE_SERVICES, KUBE_CONFIGMAPS, KUBE_SECRETS,
    KUBE_EVENTS, KUBE_NAMESPACES, KUBE_LEASES, KUBE_JOBS;

struct kube_client_options {
    double qps;               /* client-side limit in requests/s; default (0) and < 0: none */
    int burst;                /* with qps > 0; default 30 */
    int max_retries;          /* for 5xx, transport errors and 429; default 5 */
    uint64_t backoff_base_ms; /* default 100 */
    uint64_t backoff_max_ms;  /* default 5000 */
    size_t max_body;          /* response body cap; default 64 MiB */
    size_t max_watch_line;    /* one watch event's cap; default 16 MiB */
    long timeout_ms;          /* whole-request timeout for non-watch calls; default 30000 */
    const char *user_agent;   /* default "mpijob-operator" */
    uint64_t retry_after_max_ms; /* longest wait a server's Retry-After gets; default 60000 */
};

/* The decoded Status of a failed call. */
struct kube_status {
    long http_code;
    char reason[48];   /* "NotFound", "AlreadyExists", "Conflict", ... ("" when none) */
    char *message;     /* owned; NULL when none */
    cJSON *details;    /* owned; the Status "details" (name, kind, causes[]); NULL when none */
    char *continue_token; /* owned; a 410 Expired list's fresh token, when the server gave one */
    int retry_after_s; /* from Retry-After, -1 when absent */
};
void kube_status_clear(struct kube_status *st);

struct kube_client;

/* Takes ownership of cfg (freed by kube_client_free, also on failure). opts may be NULL. */
int kube_client_new(struct kube_config *cfg, const struct kube_client_options *opts,
                    struct kube_client **out);
void kube_client_free(struct kube_client *c);
struct kube_config *kube_client_config(struct kube_client *c);

/* Statistics, for metrics and tests. */
struct kube_client_stats {
    uint64_t requests;      /* HTTP requests sent, retries included */
    uint64_t connections;   /* new connections those made (the rest reused one) */
    uint64_t retries;
    uint64_t throttled_ms;  /* time spent waiting in the client-side limiter */
    uint64_t token_reloads;
    uint64_t server_throttles; /* 429 answers (API Priority and Fairness, or a server's own limit) */
    uint64_t paused_ms;     /* time requests waited for a 429's Retry-After to pass */
};
void kube_client_stats(struct kube_client *c, struct kube_client_stats *out);

/* Called after every HTTP exchange (verb like "GET", "LIST", "WATCH", "POST"..., HTTP code or
 * 0 for a transport error). Optional; for metrics. */
typedef void (*kube_request_observer)(void *ctx, const char *verb, long http_code, uint64_t ms);
void kube_client_set_observer(struct kube_client *c, kube_request_observer fn, void *ctx);

/* While fenced, every request but GET fails at once with KUBE_ECANCELED without being sent:
 * a process that must stop writing (a leader that lost its lease, a test stopping a controller
 * after its k-th write) stops between two requests, never in the middle of one. */
void kube_client_fence_writes(struct kube_client *c, bool fenced);

/* A write fence driven by a lease (leader_election_config.fenced_client): from the monotonic
 * time until_ms (clock_now_ms) on, every write of this client (POST, PUT, PATCH, DELETE) fails
 * with KUBE_ENOTLEADER without being sent, and a write sent before has its timeout cut to end
 * by then, so that none is in flight once another replica may hold the lease. GETs are never
 * fenced. KUBE_WRITES_UNFENCED lifts the fence, KUBE_WRITES_FENCED fences at once. */
#define KUBE_WRITES_UNFENCED 0u
#define KUBE_WRITES_FENCED 1u
void kube_client_set_write_deadline(struct kube_client *c, uint64_t until_ms);

/* A deadline (clock_now_ms) for every request the calling thread makes, through any client,
 * as a context deadline is in client-go: each attempt's timeout is cut to the time left, no
 * attempt or retry starts at or past it, and a request it cuts short fails with
 * KUBE_ETIMEOUT. 0 removes it. Returns the previous deadline, for the caller to restore. */
uint64_t kube_set_thread_deadline(uint64_t deadline_ms);

/* Ends this client's work for good, from any thread: every request to come, and every one
 * waiting to retry (a Retry-After, a backoff), ends at once with KUBE_ECANCELED; a transfer in
 * progress is aborted within a second. For a process that is stopping. */
void kube_client_shutdown(struct kube_client *c);

/* Paths. Builds "/api/v1/namespaces/ns/pods/name/status" and the like, each segment
 * percent-encoded. ns and name may be NULL; subresource may be NULL. Caller frees. */
char *kube_path(const struct kube_resource *res, const char *ns, const char *name,
                const char *subresource);
/* Percent-encodes a query value (RFC 3986 unreserved kept). Caller frees. */
char *kube_escape(const char *s);

/* A raw request. path is already encoded; query (without '?') may be NULL; body may be NULL.
 * *out receives the parsed JSON body of a 2xx answer (caller cJSON_Delete's), may be NULL. */
int kube_request(struct kube_client *c, const char *method, const char *path, const char *query,
                 const char *content_type, const char *body, cJSON **out, struct kube_status *st);

/* A cancellation token for streaming requests: kube_cancel_fire, from any thread, ends the
 * stream that uses it at once (the request's poll is woken, not left to time out, and so is a
 * wait before a retry), and every later stream with it ends before it starts. A token serves
 * one request at a time. */
struct kube_cancel;
struct kube_cancel *kube_cancel_new(void);
void kube_cancel_fire(struct kube_cancel *cancel);
bool kube_cancel_fired(struct kube_cancel *cancel);
void kube_cancel_free(struct kube_cancel *cancel);

/* A streaming GET (watch): bytes of a 2xx answer go to fn as they arrive; fn returns len to
 * continue, anything else to stop (then KUBE_ECANCELED). A non-2xx answer is decoded as usual.
 * cancel (optional) ends it with KUBE_ECANCELED. A stream that has started is not retried. */
int kube_request_stream(struct kube_client *c, const char *path, const char *query,
                        size_t (*fn)(void *ctx, const char *data, size_t len), void *ctx,
                        struct kube_cancel *cancel, struct kube_status *st);

/* A GET whose answer is text, not JSON (a pod's log): the 2xx body as it came into *text
 * (NUL-terminated, caller frees; "" when empty) and its length into *len. An answer longer than
 * max_bytes fails with KUBE_ETOOBIG: callers that want a bounded read ask the server to bound
 * it (a log's limitBytes). Retries and errors as every other call, except that a 5xx answer is
 * not retried: for a log it is the kubelet's (or its node's) and would come again. */
int kube_get_text(struct kube_client *c, const char *path, const char *query, size_t max_bytes, char **text,
                  size_t *len, struct kube_status *st);

/* The options in force (defaults filled in). */
const struct kube_client_options *kube_client_options(struct kube_client *c);

int kube_get(struct kube_client *c, const struct kube_resource *res, const char *ns,
             const char *name, cJSON **out, struct kube_status *st);

struct kube_list_opts {
    const char *label_selector;
    const char *field_selector;
    long limit;                  /* 0: no limit */
    const char *continue_token;
    const char *resource_version;
    const char *resource_version_match; /* "NotOlderThan", "Exact" */
};
/* One page: the List object as returned (items, metadata.continue, metadata.resourceVersion). */
int kube_list_page(struct kube_client *c, const struct kube_resource *res, const char *ns,
                   const struct kube_list_opts *opts, cJSON **out, struct kube_status *st);
/* Every page, following metadata.continue. *items gets one array of all items (caller frees),
 * *resource_version the list's resourceVersion (caller frees). When a continue token expires
 * (410) the whole list starts again, at most 3 times. */
int kube_list_all(struct kube_client *c, const struct kube_resource *res, const char *ns,
                  const struct kube_list_opts *opts, cJSON **items, char **resource_version,
                  struct kube_status *st);

int kube_create(struct kube_client *c, const struct kube_resource *res, const char *ns,
                const cJSON *obj, cJSON **out, struct kube_status *st);
/* PUT: obj must carry metadata.resourceVersion for optimistic concurrency (Conflict if stale). */
int kube_replace(struct kube_client *c, const struct kube_resource *res, const char *ns,
                 const char *name, const cJSON *obj, cJSON **out, struct kube_status *st);
/* PUT on the /status subresource. */
int kube_replace_status(struct kube_client *c, const struct kube_resource *res, const char *ns,
                        const char *name, const cJSON *obj, cJSON **out, struct kube_status *st);

enum kube_patch_type {
    KUBE_PATCH_MERGE,     /* application/merge-patch+json */
    KUBE_PATCH_JSON,      /* application/json-patch+json */
    KUBE_PATCH_STRATEGIC, /* application/strategic-merge-patch+json (built-in kinds only) */
    KUBE_PATCH_APPLY,     /* application/apply-patch+yaml: server-side apply */
};
struct kube_patch_opts {
    enum kube_patch_type type;
    const char *subresource;   /* NULL or "status" */
    const char *field_manager; /* required for APPLY */
    bool force;                /* APPLY: take ownership of conflicting fields */
};
int kube_patch(struct kube_client *c, const struct kube_resource *res, const char *ns,
               const char *name, const char *body, const struct kube_patch_opts *opts, cJSON **out,
               struct kube_status *st);

struct kube_delete_opts {
    const char *precondition_uid;
    const char *precondition_resource_version;
    const char *propagation_policy; /* "Foreground", "Background", "Orphan" or NULL */
    long grace_period_s;            /* -1: server default */
};
/* *out (may be NULL) receives the object or Status the server returned. */
int kube_delete(struct kube_client *c, const struct kube_resource *res, const char *ns,
                const char *name, const struct kube_delete_opts *opts, cJSON **out,
                struct kube_status *st);
/* DELETE on the collection: every object of res in ns that label_selector (required, never
 * empty) and field_selector (may be NULL) select, in one request; opts as above, but no uid
 * precondition (KUBE_EINVAL). *out (may be NULL) receives the list of what was deleted. */
int kube_delete_collection(struct kube_client *c, const struct kube_resource *res, const char *ns,
                           const char *label_selector, const char *field_selector,
                           const struct kube_delete_opts *opts, cJSON **out, struct kube_status *st);

#endif
