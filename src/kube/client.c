#include "kube/client.h"

#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "kube/ratelimit.h"
#include "util/buf.h"
#include "util/clock.h"
#include "util/json.h"
#include "util/log.h"

const struct kube_resource KUBE_PODS = {"", "v1", "pods", "Pod", true};
const struct kube_resource KUBE_SERVICES = {"", "v1", "services", "Service", true};
const struct kube_resource KUBE_CONFIGMAPS = {"", "v1", "configmaps", "ConfigMap", true};
const struct kube_resource KUBE_SECRETS = {"", "v1", "secrets", "Secret", true};
const struct kube_resource KUBE_EVENTS = {"", "v1", "events", "Event", true};
const struct kube_resource KUBE_NAMESPACES = {"", "v1", "namespaces", "Namespace", false};
const struct kube_resource KUBE_LEASES = {"coordination.k8s.io", "v1", "leases", "Lease", true};
const struct kube_resource KUBE_JOBS = {"batch", "v1", "jobs", "Job", true};

#define DEFAULT_MAX_BODY (64u << 20)
#define DEFAULT_MAX_WATCH_LINE (16u << 20)
#define MAX_ERROR_BODY (1u << 20)
/* Idle connections kept for reuse (the share's cache also holds the watches', in use). */
#define MAX_CACHED_CONNECTIONS 64
/* A server's Retry-After is honoured up to this long (kube_client_options.retry_after_max_ms).
 * kube-apiserver asks for 1 s (max-in-flight, priority and fairness); a longer wait comes from
 * a proxy or a confused server, and a controller that sleeps on it holds a worker (and would
 * ignore a stop) for as long: like client-go, which caps every retry wait, we retry after a
 * minute at most and let the retry budget decide. */
#define DEFAULT_RETRY_AFTER_MAX_MS 60000u

struct kube_client {
    struct kube_config *cfg;
    /* The base of every URL: cfg->server, or with tls-server-name, the server's URL with that
     * name as its host, connected to the server's address (connect_to) and sent with the
     * server's own Host header (host_header), as client-go's tls.Config.ServerName does. */
    char *base_url;
    struct curl_slist *connect_to;
    char *host_header;
    struct kube_client_options opts;
    struct ratelimit *limiter;
    CURLSH *share;
    pthread_mutex_t share_locks[CURL_LOCK_DATA_LAST];
    kube_request_observer observer;
    void *observer_ctx;
    atomic_bool writes_fenced;
    atomic_uint_fast64_t write_deadline_ms; /* kube_client_set_write_deadline; 0: none */
    /* kube_client_shutdown: every request ends with KUBE_ECANCELED; waits are woken. */
    atomic_bool shut_down;
    pthread_mutex_t wait_lock;
    pthread_cond_t wait_cond; /* on CLOCK_MONOTONIC */
    atomic_ullong requests, retries, throttled_ms, token_reloads, connections;
    /* The server's back-pressure: after a 429, no request of this client starts before the time
     * its Retry-After named (monotonic ms), as APF asks of a client that is over its share. */
    atomic_uint_fast64_t paused_until_ms;
    atomic_ullong server_throttles, paused_ms;
};

struct kube_cancel {
    pthread_mutex_t lock;
    atomic_bool fired;
    CURLM *multi;                /* the stream in progress, woken on fire */
    struct kube_client *waiter;  /* a client whose retry wait this token's request is in */
};

struct kube_cancel *kube_cancel_new(void)
{
    struct kube_cancel *k = calloc(1, sizeof(*k));
    if (k)
        pthread_mutex_init(&k->lock, NULL);
    return k;
}

void kube_cancel_fire(struct kube_cancel *k)
{
    pthread_mutex_lock(&k->lock);
    atomic_store(&k->fired, true);
    if (k->multi)
        curl_multi_wakeup(k->multi);
    if (k->waiter) { /* lock order: a token's lock, then its waiter's wait_lock */
        pthread_mutex_lock(&k->waiter->wait_lock);
        pthread_cond_broadcast(&k->waiter->wait_cond);
        pthread_mutex_unlock(&k->waiter->wait_lock);
    }
    pthread_mutex_unlock(&k->lock);
}

bool kube_cancel_fired(struct kube_cancel *k) { return atomic_load(&k->fired); }

void kube_cancel_free(struct kube_cancel *k)
{
    if (!k)
        return;
    pthread_mutex_destroy(&k->lock);
    free(k);
}

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static void curl_global(void) { curl_global_init(CURL_GLOBAL_DEFAULT); }

static void share_lock(CURL *h, curl_lock_data data, curl_lock_access access, void *ctx)
{
    struct kube_client *c = ctx;
    pthread_mutex_lock(&c->share_locks[data]);
}

static void share_unlock(CURL *h, curl_lock_data data, void *ctx)
{
    struct kube_client *c = ctx;
    pthread_mutex_unlock(&c->share_locks[data]);
}

void kube_status_clear(struct kube_status *st)
{
    if (!st)
        return;
    free(st->message);
    free(st->continue_token);
    cJSON_Delete(st->details);
    memset(st, 0, sizeof(*st));
    st->retry_after_s = -1;
}

/* With a tls-server-name: the TLS name becomes the URL's host, so that libcurl sends it as SNI
 * and verifies the certificate against it, while CURLOPT_CONNECT_TO sends the connection to
 * the server's real address and the Host header keeps naming the server. */
static int setup_tls_server_name(struct kube_client *c)
{
    const char *name = c->cfg->tls_server_name;
    if (!name || !*name || strncasecmp(c->cfg->server, "https://", 8) != 0)
        return (c->base_url = strdup(c->cfg->server)) ? 0 : KUBE_ENOMEM;
    CURLU *u = curl_url();
    char *host = NULL, *port = NULL, *given_port = NULL, *url = NULL;
    int rc = KUBE_ENOMEM;
    if (!u)
        return rc;
    if (curl_url_set(u, CURLUPART_URL, c->cfg->server, 0) != CURLUE_OK ||
        curl_url_get(u, CURLUPART_HOST, &host, 0) != CURLUE_OK ||
        curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT) != CURLUE_OK) {
        log_error("cannot parse the server URL", "server=\"%s\"", log_quote(c->cfg->server));
        rc = KUBE_ECONFIG;
        goto out;
    }
    if (curl_url_get(u, CURLUPART_PORT, &given_port, 0) != CURLUE_OK)
        given_port = NULL; /* none written: the scheme's default */
    if (curl_url_set(u, CURLUPART_HOST, name, 0) != CURLUE_OK) {
        log_error("tls-server-name is not a host name", "tls_server_name=\"%s\"", log_quote(name));
        rc = KUBE_ECONFIG;
        goto out;
    }
    if (curl_url_get(u, CURLUPART_URL, &url, 0) != CURLUE_OK)
        goto out;
    /* curl_url_get adds a '/' path; paths are appended to the base. */
    size_t len = strlen(url);
    while (len > 0 && url[len - 1] == '/')
        url[--len] = 0;
    char *connect_to = NULL;
    if (asprintf(&connect_to, "%s:%s:%s:%s", name, port, host, port) < 0)
        goto out;
    c->connect_to = curl_slist_append(NULL, connect_to);
    free(connect_to);
    if (!c->connect_to)
        goto out;
    if (asprintf(&c->host_header, "Host: %s%s%s", host, given_port ? ":" : "", given_port ? given_port : "") < 0) {
        c->host_header = NULL;
        goto out;
    }
    c->base_url = strdup(url);
    rc = c->base_url ? 0 : KUBE_ENOMEM;
out:
    curl_free(host);
    curl_free(port);
    curl_free(given_port);
    curl_free(url);
    curl_url_cleanup(u);
    return rc;
}

int kube_client_new(struct kube_config *cfg, const struct kube_client_options *opts,
                    struct kube_client **out)
{
    *out = NULL;
    if (!cfg || !cfg->server)
        return kube_config_free(cfg), KUBE_EINVAL;
    pthread_once(&curl_once, curl_global);
    struct kube_client *c = calloc(1, sizeof(*c));
    if (!c) {
        kube_config_free(cfg);
        return KUBE_ENOMEM;
    }
    c->cfg = cfg;
    if (opts)
        c->opts = *opts;
    /* No client-side limit unless one is asked for: API Priority and Fairness (on by default
     * since Kubernetes 1.20, GA in 1.29) protects the server and says when to slow down (429 with
     * Retry-After, honoured below for the whole client). SIG API Machinery recommends this, and
     * controller-runtime dropped its default limiter for it (docs/internals/client.md). */
    if (c->opts.qps == 0)
        c->opts.qps = -1;
    if (c->opts.burst == 0)
        c->opts.burst = 30;
    if (c->opts.max_retries == 0)
        c->opts.max_retries = 5;
    if (c->opts.max_retries < 0)
        c->opts.max_retries = 0;
    if (!c->opts.backoff_base_ms)
        c->opts.backoff_base_ms = 100;
    if (!c->opts.backoff_max_ms)
        c->opts.backoff_max_ms = 5000;
    if (!c->opts.max_body)
        c->opts.max_body = DEFAULT_MAX_BODY;
    if (!c->opts.max_watch_line)
        c->opts.max_watch_line = DEFAULT_MAX_WATCH_LINE;
    if (!c->opts.timeout_ms)
        c->opts.timeout_ms = 30000;
    if (!c->opts.user_agent)
        c->opts.user_agent = "mpijob-operator";
    if (!c->opts.retry_after_max_ms)
        c->opts.retry_after_max_ms = DEFAULT_RETRY_AFTER_MAX_MS;
    pthread_mutex_init(&c->wait_lock, NULL);
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&c->wait_cond, &attr);
    pthread_condattr_destroy(&attr);
    int rc = setup_tls_server_name(c);
    if (rc < 0) {
        kube_client_free(c);
        return rc;
    }
    c->limiter = ratelimit_new(c->opts.qps, c->opts.burst);
    c->share = curl_share_init();
    if (!c->limiter || !c->share) {
        kube_client_free(c);
        return KUBE_ENOMEM;
    }
    for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
        pthread_mutex_init(&c->share_locks[i], NULL);
    curl_share_setopt(c->share, CURLSHOPT_LOCKFUNC, share_lock);
    curl_share_setopt(c->share, CURLSHOPT_UNLOCKFUNC, share_unlock);
    curl_share_setopt(c->share, CURLSHOPT_USERDATA, c);
    curl_share_setopt(c->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_CONNECT);
    curl_share_setopt(c->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION);
    curl_share_setopt(c->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
    *out = c;
    return 0;
}

void kube_client_free(struct kube_client *c)
{
    if (!c)
        return;
    free(c->base_url);
    curl_slist_free_all(c->connect_to);
    free(c->host_header);
    if (c->share) {
        curl_share_cleanup(c->share);
        for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
            pthread_mutex_destroy(&c->share_locks[i]);
    }
    ratelimit_free(c->limiter);
    kube_config_free(c->cfg);
    pthread_mutex_destroy(&c->wait_lock);
    pthread_cond_destroy(&c->wait_cond);
    free(c);
}

struct kube_config *kube_client_config(struct kube_client *c) { return c->cfg; }

const struct kube_client_options *kube_client_options(struct kube_client *c) { return &c->opts; }

void kube_client_stats(struct kube_client *c, struct kube_client_stats *out)
{
    out->requests = c->requests;
    out->connections = c->connections;
    out->retries = c->retries;
    out->throttled_ms = c->throttled_ms;
    out->token_reloads = c->token_reloads;
    out->server_throttles = c->server_throttles;
    out->paused_ms = c->paused_ms;
}

void kube_client_fence_writes(struct kube_client *c, bool fenced) { atomic_store(&c->writes_fenced, fenced); }

void kube_client_set_write_deadline(struct kube_client *c, uint64_t until_ms)
{
    atomic_store(&c->write_deadline_ms, until_ms);
}

static _Thread_local uint64_t thread_deadline_ms;

uint64_t kube_set_thread_deadline(uint64_t deadline_ms)
{
    uint64_t prev = thread_deadline_ms;
    thread_deadline_ms = deadline_ms;
    return prev;
}

void kube_client_shutdown(struct kube_client *c)
{
    atomic_store(&c->shut_down, true);
    pthread_mutex_lock(&c->wait_lock);
    pthread_cond_broadcast(&c->wait_cond);
    pthread_mutex_unlock(&c->wait_lock);
}

static bool canceled(struct kube_client *c, struct kube_cancel *cancel)
{
    return atomic_load(&c->shut_down) || (cancel && atomic_load(&cancel->fired));
}

/* A retry wait of ms, cut short by kube_client_shutdown or by the request's cancel token.
 * False when it was cut short. */
static bool wait_ms(struct kube_client *c, struct kube_cancel *cancel, uint64_t ms)
{
    if (cancel) {
        pthread_mutex_lock(&cancel->lock);
        cancel->waiter = c;
        pthread_mutex_unlock(&cancel->lock);
    }
    uint64_t end = clock_now_ms() + ms;
    pthread_mutex_lock(&c->wait_lock);
    for (;;) {
        uint64_t now = clock_now_ms();
        if (canceled(c, cancel) || now >= end)
            break;
        struct timespec ts;
        clock_deadline_monotonic(&ts, end - now);
        pthread_cond_timedwait(&c->wait_cond, &c->wait_lock, &ts);
    }
    bool waited = !canceled(c, cancel);
    pthread_mutex_unlock(&c->wait_lock);
    if (cancel) {
        pthread_mutex_lock(&cancel->lock);
        cancel->waiter = NULL;
        pthread_mutex_unlock(&cancel->lock);
    }
    return waited;
}

void kube_client_set_observer(struct kube_client *c, kube_request_observer fn, void *ctx)
{
    c->observer = fn;
    c->observer_ctx = ctx;
}

/* ---- paths and queries ------------------------------------------------------------------ */

/* Appends s percent-encoded: curl_easy_escape keeps RFC 3986's unreserved characters
 * (ALPHA, DIGIT, "-", ".", "_", "~") and encodes every other byte. */
static int escape_into(struct buf *b, const char *s)
{
    char *enc = curl_easy_escape(NULL, s, 0);
    if (!enc)
        return KUBE_ENOMEM;
    int rc = buf_append_str(b, enc);
    curl_free(enc);
    return rc;
}

char *kube_escape(const char *s)
{
    char *enc = curl_easy_escape(NULL, s ? s : "", 0);
    char *out = enc ? strdup(enc) : NULL;
    curl_free(enc);
    return out;
}

char *kube_path(const struct kube_resource *res, const char *ns, const char *name,
                const char *subresource)
{
    struct buf b;
    buf_init(&b, 0);
    int rc;
    if (res->group && *res->group)
        rc = buf_printf(&b, "/apis/%s/%s", res->group, res->version);
    else
        rc = buf_printf(&b, "/api/%s", res->version);
    if (rc == 0 && res->namespaced && ns && *ns) {
        rc = buf_append_str(&b, "/namespaces/");
        if (rc == 0)
            rc = escape_into(&b, ns);
    }
    if (rc == 0)
        rc = buf_printf(&b, "/%s", res->plural);
    if (rc == 0 && name) {
        rc = buf_append_str(&b, "/");
        if (rc == 0)
            rc = escape_into(&b, name);
    }
    if (rc == 0 && subresource && *subresource)
        rc = buf_printf(&b, "/%s", subresource);
    if (rc < 0) {
        buf_free(&b);
        return NULL;
    }
    return buf_steal(&b);
}

/* Appends "&key=value" (value percent-encoded) when value is set. */
static int query_add(struct buf *q, const char *key, const char *value)
{
    if (!value || !*value)
        return 0;
    int rc = buf_printf(q, "%s%s=", q->len ? "&" : "", key);
    return rc < 0 ? rc : escape_into(q, value);
}

/* ---- one HTTP exchange --------------------------------------------------------------------- */

struct exchange {
    struct buf body;
    int retry_after_s;
    /* API Priority and Fairness: the priority level and flow schema that classified the request
     * (X-Kubernetes-PF-PriorityLevel-UID, X-Kubernetes-PF-FlowSchema-UID), for the log of a 429. */
    char priority_level[64], flow_schema[64];
    /* streaming mode: bytes go to the callback instead of the body */
    size_t (*stream_fn)(void *ctx, const char *data, size_t len);
    void *stream_ctx;
    long stream_code; /* HTTP code seen before streaming begins */
    CURL *curl;
    struct kube_cancel *cancel;
    struct kube_client *client;
    int too_big;
    int any_type; /* the answer may be text (a log): Accept what client-go's GetLogs accepts */
};

static size_t on_body(char *data, size_t size, size_t nmemb, void *userdata)
{
    struct exchange *ex = userdata;
    size_t n = size * nmemb;
    if (ex->stream_fn) {
        if (!ex->stream_code)
            curl_easy_getinfo(ex->curl, CURLINFO_RESPONSE_CODE, &ex->stream_code);
        if (ex->stream_code >= 200 && ex->stream_code < 300)
            return ex->stream_fn(ex->stream_ctx, data, n);
    }
    if (buf_append(&ex->body, data, n) < 0) {
        ex->too_big = 1;
        return 0; /* aborts the transfer */
    }
    return n;
}

/* The value of header line data (n bytes) when its name is `name` (with the colon), trimmed,
 * into out; false when it is another header. */
static bool header_value(const char *data, size_t n, const char *name, char *out, size_t out_len)
{
    size_t len = strlen(name);
    if (n <= len || strncasecmp(data, name, len) != 0)
        return false;
    const char *v = data + len, *end = data + n;
    while (v < end && (*v == ' ' || *v == '\t'))
        v++;
    while (end > v && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' '))
        end--;
    snprintf(out, out_len, "%.*s", (int)(end - v), v);
    return true;
}

static size_t on_header(char *data, size_t size, size_t nmemb, void *userdata)
{
    struct exchange *ex = userdata;
    size_t n = size * nmemb;
    if (header_value(data, n, "x-kubernetes-pf-prioritylevel-uid:", ex->priority_level, sizeof(ex->priority_level)) ||
        header_value(data, n, "x-kubernetes-pf-flowschema-uid:", ex->flow_schema, sizeof(ex->flow_schema)))
        return n;
    static const char name[] = "retry-after:";
    if (n > sizeof(name) - 1 && strncasecmp(data, name, sizeof(name) - 1) == 0) {
        char val[32];
        size_t vlen = n - (sizeof(name) - 1);
        if (vlen >= sizeof(val))
            vlen = sizeof(val) - 1;
        memcpy(val, data + sizeof(name) - 1, vlen);
        val[vlen] = 0;
        char *end;
        long secs = strtol(val, &end, 10);
        if (end != val && secs >= 0)
            ex->retry_after_s = secs > 3600 ? 3600 : (int)secs;
    }
    return n;
}

static int on_progress(void *userdata, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                       curl_off_t ulnow)
{
    struct exchange *ex = userdata;
    return canceled(ex->client, ex->cancel) ? 1 : 0;
}

/* Runs a transfer on its own multi handle, so that kube_cancel_fire (cancel may be NULL) can
 * wake its poll and end it at once instead of waiting for curl's next progress callback.
 *
 * The connections live in the client's share, but when a transfer ends the cache keeps only as
 * many as its multi handle allows, 4 per transfer by default, closing the oldest idle one: with
 * the watches' connections in the cache that was the one just used, and every request paid a
 * new TCP and TLS handshake (curl_easy_perform's own multi handle has the same limit). */
static CURLcode perform_transfer(struct kube_client *c, CURL *h, struct kube_cancel *cancel)
{
    CURLM *m = curl_multi_init();
    if (!m)
        return CURLE_OUT_OF_MEMORY;
    curl_multi_setopt(m, CURLMOPT_MAXCONNECTS, (long)MAX_CACHED_CONNECTIONS);
    curl_multi_add_handle(m, h);
    bool fired = false;
    if (cancel) {
        pthread_mutex_lock(&cancel->lock);
        fired = canceled(c, cancel);
        if (!fired)
            cancel->multi = m;
        pthread_mutex_unlock(&cancel->lock);
    }
    CURLcode res = fired ? CURLE_ABORTED_BY_CALLBACK : CURLE_OK;
    while (!fired) {
        int running = 0;
        if (curl_multi_perform(m, &running) != CURLM_OK) {
            res = CURLE_RECV_ERROR;
            break;
        }
        if (!running) {
            int queued;
            CURLMsg *msg;
            while ((msg = curl_multi_info_read(m, &queued)) != NULL)
                if (msg->msg == CURLMSG_DONE)
                    res = msg->data.result;
            break;
        }
        if (canceled(c, cancel)) {
            res = CURLE_ABORTED_BY_CALLBACK;
            break;
        }
        /* kube_cancel_fire wakes the poll; kube_client_shutdown is seen within a second. */
        curl_multi_poll(m, NULL, 0, 1000, NULL);
    }
    if (cancel) {
        pthread_mutex_lock(&cancel->lock);
        cancel->multi = NULL;
        pthread_mutex_unlock(&cancel->lock);
    }
    curl_multi_remove_handle(m, h);
    curl_multi_cleanup(m);
    return res;
}

/* A transfer that failed while the request body was still being sent, after the server had
 * answered it with an error: kube-apiserver refuses a body over its 3 MiB limit with 413 before
 * reading the rest, and under HTTP/2 resets the stream once the answer is written (RST_STREAM
 * NO_ERROR, which RFC 9113 section 8.1 says a client must not take as a failure; libcurl 7.88
 * fails the transfer with it, and drops the answer's body). The server's status code is the
 * answer: its Status body is kept when it arrived whole, else one is made that says what was
 * lost. Returns true when the answer counts. */
static bool answered_before_the_body(CURLcode res, const char *body, long http_code, struct exchange *ex)
{
    if (!body || ex->stream_fn || ex->too_big || http_code < 400 || http_code > 599)
        return false;
    if (res != CURLE_PARTIAL_FILE && res != CURLE_HTTP2_STREAM && res != CURLE_HTTP2 && res != CURLE_SEND_ERROR &&
        res != CURLE_RECV_ERROR)
        return false;
    cJSON *json = ex->body.len ? cJSON_ParseWithLength(ex->body.data, ex->body.len) : NULL;
    const char *kind = json_string(json, "kind");
    bool whole = kind && strcmp(kind, "Status") == 0;
    cJSON_Delete(json);
    if (whole)
        return true;
    cJSON *st = cJSON_CreateObject();
    char msg[256];
    snprintf(msg, sizeof(msg), "HTTP %ld from the API server for a request body of %zu bytes; its message was cut off (%s)",
             http_code, strlen(body), curl_easy_strerror(res));
    char *text = NULL;
    if (st && json_put_string(st, "kind", "Status") == 0 && json_put_string(st, "status", "Failure") == 0 &&
        json_put_string(st, "message", msg) == 0 && json_put_number(st, "code", (double)http_code) == 0)
        text = json_print(st);
    cJSON_Delete(st);
    if (!text)
        return false;
    ex->body.len = 0;
    int rc = buf_append(&ex->body, text, strlen(text));
    free(text);
    return rc == 0;
}

/* Performs one request. Returns 0 with *http_code set, or KUBE_ETRANSPORT / KUBE_ETOOBIG /
 * KUBE_ECANCELED / KUBE_ENOMEM. */
static int perform(struct kube_client *c, const char *method, const char *url,
                   const char *content_type, const char *body, long timeout_ms,
                   struct exchange *ex, long *http_code, char *errbuf)
{
    struct kube_config *cfg = c->cfg;
    /* The CA first: an in-cluster CA that cannot be read yet fails the attempt before anything
     * is sent (a transport error, so it is retried with backoff and the file read again). */
    char *ca = NULL;
    size_t ca_len = 0;
    if (!cfg->insecure_skip_tls_verify) {
        char why[CURL_ERROR_SIZE];
        int carc = kube_config_ca(cfg, &ca, &ca_len, why, sizeof(why));
        if (carc == KUBE_ENOMEM)
            return KUBE_ENOMEM;
        if (carc < 0) {
            snprintf(errbuf, CURL_ERROR_SIZE, "%s", why);
            return KUBE_ETRANSPORT;
        }
    }
    CURL *h = curl_easy_init();
    if (!h) {
        free(ca);
        return KUBE_ENOMEM;
    }
    ex->curl = h;
    struct curl_slist *headers = NULL;
    char *token = kube_config_token(c->cfg);
    int rc = 0;
    char line[256];

    headers = curl_slist_append(headers, ex->any_type ? "Accept: application/json, */*" : "Accept: application/json");
    if (content_type) {
        snprintf(line, sizeof(line), "Content-Type: %s", content_type);
        headers = curl_slist_append(headers, line);
    }
    if (token) {
        struct buf auth;
        buf_init(&auth, 0);
        if (buf_printf(&auth, "Authorization: Bearer %s", token) == 0)
            headers = curl_slist_append(headers, auth.data);
        buf_free(&auth);
        free(token);
    }
    headers = curl_slist_append(headers, "Expect:");
    if (c->host_header)
        headers = curl_slist_append(headers, c->host_header);
    if (c->connect_to)
        curl_easy_setopt(h, CURLOPT_CONNECT_TO, c->connect_to);

    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_SHARE, c->share);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(h, CURLOPT_USERAGENT, c->opts.user_agent);
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, 10000L);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    /* A watch can sit idle for minutes: keepalives notice a peer that vanished without a FIN. */
    curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(h, CURLOPT_TCP_KEEPIDLE, 30L);
    curl_easy_setopt(h, CURLOPT_TCP_KEEPINTVL, 10L);
    if (timeout_ms > 0)
        curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, timeout_ms);
    if (body) {
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(body));
    } else if (strcmp(method, "GET") == 0) {
        curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
    }
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, ex);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, ex);
    curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(h, CURLOPT_XFERINFODATA, ex);

    if (cfg->insecure_skip_tls_verify) {
        curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 0L);
        curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 0L);
    } else {
        curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 1L);
        curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 2L);
        if (ca) {
            /* ca outlives the handle (freed after curl_easy_cleanup): no second copy. */
            struct curl_blob blob = {ca, ca_len, CURL_BLOB_NOCOPY};
            curl_easy_setopt(h, CURLOPT_CAINFO_BLOB, &blob);
        }
    }
    if (cfg->client_cert.data) {
        struct curl_blob blob = {cfg->client_cert.data, cfg->client_cert.len, CURL_BLOB_COPY};
        curl_easy_setopt(h, CURLOPT_SSLCERT_BLOB, &blob);
        curl_easy_setopt(h, CURLOPT_SSLCERTTYPE, "PEM");
    }
    if (cfg->client_key.data) {
        struct curl_blob blob = {cfg->client_key.data, cfg->client_key.len, CURL_BLOB_COPY};
        curl_easy_setopt(h, CURLOPT_SSLKEY_BLOB, &blob);
        curl_easy_setopt(h, CURLOPT_SSLKEYTYPE, "PEM");
    }

    c->requests++;
    CURLcode res = perform_transfer(c, h, ex->cancel);
    *http_code = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, http_code);
    long connects = 0;
    if (curl_easy_getinfo(h, CURLINFO_NUM_CONNECTS, &connects) == CURLE_OK && connects > 0)
        c->connections += (unsigned long long)connects;
    if (res != CURLE_OK && answered_before_the_body(res, body, *http_code, ex)) {
        /* The server refused the request before reading all of its body and reset the stream
         * (kube-apiserver's 413 for a body over its 3 MiB limit, under HTTP/2): its answer
         * arrived whole, and is the answer, as Go's client takes it. */
        log_debug("the API server answered before reading the whole request body", "code=%ld curl=\"%s\"",
                  *http_code, curl_easy_strerror(res));
        res = CURLE_OK;
    }
    if (res != CURLE_OK) {
        if (ex->too_big)
            rc = KUBE_ETOOBIG;
        else if (res == CURLE_ABORTED_BY_CALLBACK)
            rc = KUBE_ECANCELED;
        else if (res == CURLE_WRITE_ERROR && ex->stream_fn)
            rc = KUBE_ECANCELED; /* the stream callback asked to stop */
        else {
            rc = KUBE_ETRANSPORT;
            if (!errbuf[0])
                snprintf(errbuf, CURL_ERROR_SIZE, "%s", curl_easy_strerror(res));
            /* The server's certificate did not verify, or curl could not use the CA: the CA
             * file may have been rotated or was half-written; the next attempt reads it again. */
            if ((res == CURLE_PEER_FAILED_VERIFICATION || res == CURLE_SSL_CACERT_BADFILE) &&
                kube_config_invalidate_ca(cfg))
                log_info("the API server's certificate did not verify; reading the CA file again",
                         "error=\"%s\"", log_quote(errbuf));
        }
    }
    curl_slist_free_all(headers);
    curl_easy_cleanup(h);
    free(ca);
    return rc;
}

/* Decodes a Status body into st and returns the matching error code. */
static int decode_status(long http_code, const struct buf *body, struct kube_status *st)
{
    cJSON *json = body->len ? cJSON_ParseWithLength(body->data, body->len) : NULL;
    const char *reason = json ? json_string(json, "reason") : NULL;
    int code = kube_error_from_status(http_code, reason);
    if (st) {
        st->http_code = http_code;
        snprintf(st->reason, sizeof(st->reason), "%s", reason ? reason : "");
        free(st->message);
        const char *msg = json ? json_string(json, "message") : NULL;
        if (msg) {
            st->message = strdup(msg);
        } else if (body->len) {
            size_t n = body->len > 512 ? 512 : body->len;
            st->message = strndup(body->data, n);
        } else {
            st->message = NULL;
        }
        cJSON_Delete(st->details);
        st->details = json ? cJSON_DetachItemFromObjectCaseSensitive(json, "details") : NULL;
        free(st->continue_token);
        const char *cont = json ? json_string(json, "metadata.continue") : NULL;
        st->continue_token = cont ? strdup(cont) : NULL;
    }
    cJSON_Delete(json);
    return code;
}

static uint64_t backoff_ms(struct kube_client *c, int attempt)
{
    uint64_t d = c->opts.backoff_base_ms;
    for (int i = 0; i < attempt && d < c->opts.backoff_max_ms; i++)
        d *= 2;
    if (d > c->opts.backoff_max_ms)
        d = c->opts.backoff_max_ms;
    /* "equal jitter": half fixed, half random, so retries from many clients spread out. */
    return d / 2 + clock_jitter(d / 2 + 1);
}

/* The wait before a retry: what the server asked for (capped), else exponential backoff. */
static uint64_t retry_delay_ms(struct kube_client *c, int retry_after_s, int attempt)
{
    if (retry_after_s < 0)
        return backoff_ms(c, attempt);
    uint64_t d = (uint64_t)retry_after_s * 1000;
    return d > c->opts.retry_after_max_ms ? c->opts.retry_after_max_ms : d;
}

static int retryable_code(long code) { return code == 500 || code == 502 || code == 503 || code == 504; }

struct call {
    const char *verb; /* for the observer: GET, LIST, WATCH, POST, PUT, PATCH, DELETE */
    const char *method;
    const char *path;
    const char *query;
    const char *content_type;
    const char *body;
    /* streaming */
    size_t (*stream_fn)(void *ctx, const char *data, size_t len);
    void *stream_ctx;
    struct kube_cancel *cancel;
    int no_retry_after_stream; /* a stream that started is never retried here */
    /* text: a 2xx body is handed over as it came (a log), not parsed; at most text_max bytes */
    struct buf *text;
    size_t text_max;
};

/* The nearest deadline for a request: the thread's and, for a write, the client's fence; 0 when
 * there is none. *late_rc gets the code for a request that reaches it. */
static uint64_t call_deadline(struct kube_client *c, bool write, int *late_rc)
{
    uint64_t d = thread_deadline_ms;
    *late_rc = KUBE_ETIMEOUT;
    uint64_t fence = write ? atomic_load(&c->write_deadline_ms) : 0;
    if (fence && (!d || fence <= d)) {
        d = fence;
        *late_rc = KUBE_ENOTLEADER;
    }
    return d;
}

/* Runs a call with rate limiting and the retry policy. On a 2xx answer (non-streaming)
 * *out gets the parsed body. */
static int execute(struct kube_client *c, const struct call *call, cJSON **out,
                   struct kube_status *caller_st)
{
    if (out)
        *out = NULL;
    /* Always decoded, so that log lines can quote the server's message. */
    struct kube_status own = {.retry_after_s = -1};
    struct kube_status *st = caller_st ? caller_st : &own;
    kube_status_clear(st);
    bool write = strcmp(call->method, "GET") != 0;
    if (write && atomic_load(&c->writes_fenced))
        return KUBE_ECANCELED; /* fenced: no write leaves this client */
    struct buf url;
    buf_init(&url, 0);
    if (buf_printf(&url, "%s%s%s%s", c->base_url, call->path, call->query && *call->query ? "?" : "",
                   call->query ? call->query : "") < 0) {
        buf_free(&url);
        return KUBE_ENOMEM;
    }

    int rc = 0;
    int reloaded = 0;
    for (int attempt = 0;; attempt++) {
        if (canceled(c, call->cancel)) {
            rc = KUBE_ECANCELED;
            break;
        }
        uint64_t waited = ratelimit_wait(c->limiter);
        c->throttled_ms += waited;
        /* Checked before every attempt: a retry never goes out past a deadline or a fence. */
        int late_rc;
        uint64_t deadline = call_deadline(c, write, &late_rc);
        uint64_t now = clock_now_ms();
        /* The server asked this client to slow down. A call with a deadline of its own (a Lease
         * renewal) is not held: its own 429s pace it, and holding it could cost the lease. */
        uint64_t paused_until = atomic_load(&c->paused_until_ms);
        if (!deadline && paused_until > now) {
            c->paused_ms += paused_until - now;
            if (!wait_ms(c, call->cancel, paused_until - now)) {
                rc = KUBE_ECANCELED;
                break;
            }
            now = clock_now_ms();
        }
        if (deadline && now >= deadline) {
            rc = late_rc;
            break;
        }
        long timeout_ms = call->stream_fn ? 0 : c->opts.timeout_ms;
        if (deadline && (timeout_ms <= 0 || deadline - now < (uint64_t)timeout_ms))
            timeout_ms = (long)(deadline - now);

        struct exchange ex = {.retry_after_s = -1,
                              .stream_fn = call->stream_fn,
                              .stream_ctx = call->stream_ctx,
                              .cancel = call->cancel,
                              .client = c,
                              .any_type = call->text != NULL};
        buf_init(&ex.body, call->stream_fn ? MAX_ERROR_BODY : call->text ? call->text_max : c->opts.max_body);
        char errbuf[CURL_ERROR_SIZE] = "";
        long http_code = 0;
        uint64_t t0 = clock_now_ms();
        rc = perform(c, call->method, url.data, call->content_type, call->body, timeout_ms, &ex,
                     &http_code, errbuf);
        if (c->observer)
            c->observer(c->observer_ctx, call->verb, rc == 0 ? http_code : 0, clock_now_ms() - t0);

        if (rc == KUBE_ETRANSPORT) {
            buf_free(&ex.body);
            int streamed = call->stream_fn && ex.stream_code >= 200 && ex.stream_code < 300;
            uint64_t d = backoff_ms(c, attempt);
            uint64_t end = clock_now_ms();
            if (deadline && end >= deadline)
                rc = late_rc; /* cut short by the deadline */
            if (streamed || attempt >= c->opts.max_retries || (deadline && end + d >= deadline)) {
                log_debug("request failed", "verb=%s path=%s error=\"%s\"", call->verb, call->path,
                          log_quote(errbuf));
                free(st->message);
                st->message = strdup(errbuf);
                break;
            }
            log_debug("retrying after transport error", "verb=%s path=%s error=\"%s\" delay_ms=%llu",
                      call->verb, call->path, log_quote(errbuf), (unsigned long long)d);
            c->retries++;
            if (!wait_ms(c, call->cancel, d)) {
                rc = KUBE_ECANCELED;
                break;
            }
            continue;
        }
        if (rc < 0) { /* too big, canceled, nomem */
            buf_free(&ex.body);
            break;
        }
        if (http_code >= 200 && http_code < 300) {
            if (call->text) {
                buf_free(call->text);
                *call->text = ex.body; /* handed over */
                buf_init(&ex.body, 0);
            } else if (out && ex.body.len) {
                *out = cJSON_ParseWithLength(ex.body.data, ex.body.len);
                if (!*out)
                    rc = KUBE_EDECODE;
            }
            buf_free(&ex.body);
            break;
        }

        rc = decode_status(http_code, &ex.body, st);
        st->retry_after_s = ex.retry_after_s;
        buf_free(&ex.body);
        const char *msg = log_quote(st->message);

        if (http_code == 401 && !reloaded && kube_config_invalidate_token(c->cfg)) {
            reloaded = 1;
            c->token_reloads++;
            log_info("reloading credentials after 401", "path=%s message=\"%s\"", call->path, msg);
            attempt--; /* a credential reload is not a retry */
            continue;
        }
        if (attempt >= c->opts.max_retries)
            break;
        /* A text answer's 5xx comes from behind the server (a log's kubelet, unreachable) and is
         * not retried: another try a moment later meets the same node. */
        if (http_code == 429 || (retryable_code(http_code) && !call->text)) {
            uint64_t d = retry_delay_ms(c, ex.retry_after_s, attempt);
            if (deadline && clock_now_ms() + d >= deadline)
                break; /* the retry would start past the deadline */
            if (http_code == 429) {
                uint64_t until = clock_now_ms() + d, had = atomic_load(&c->paused_until_ms);
                while (had < until && !atomic_compare_exchange_weak(&c->paused_until_ms, &had, until))
                    ;
                c->server_throttles++;
                log_info("throttled by the API server; every request of this client waits", "path=%s "
                         "retry_after_ms=%llu priority_level_uid=%s flow_schema_uid=%s message=\"%s\"",
                         call->path, (unsigned long long)d, ex.priority_level, ex.flow_schema, msg);
            } else
                log_debug("retrying after server error", "path=%s code=%ld delay_ms=%llu message=\"%s\"",
                          call->path, http_code, (unsigned long long)d, msg);
            c->retries++;
            if (!wait_ms(c, call->cancel, d)) {
                rc = KUBE_ECANCELED;
                break;
            }
            continue;
        }
        break;
    }
    buf_free(&url);
    kube_status_clear(&own);
    return rc;
}

int kube_request(struct kube_client *c, const char *method, const char *path, const char *query,
                 const char *content_type, const char *body, cJSON **out, struct kube_status *st)
{
    struct call call = {.verb = method, .method = method, .path = path, .query = query,
                        .content_type = content_type, .body = body};
    return execute(c, &call, out, st);
}

int kube_request_stream(struct kube_client *c, const char *path, const char *query,
                        size_t (*fn)(void *ctx, const char *data, size_t len), void *ctx,
                        struct kube_cancel *cancel, struct kube_status *st)
{
    struct call call = {.verb = "WATCH", .method = "GET", .path = path, .query = query,
                        .stream_fn = fn, .stream_ctx = ctx, .cancel = cancel};
    return execute(c, &call, NULL, st);
}

int kube_get_text(struct kube_client *c, const char *path, const char *query, size_t max_bytes, char **text,
                  size_t *len, struct kube_status *st)
{
    struct buf body;
    buf_init(&body, max_bytes);
    struct call call = {.verb = "GET", .method = "GET", .path = path, .query = query, .text = &body,
                        .text_max = max_bytes ? max_bytes : 1};
    *text = NULL;
    *len = 0;
    int rc = execute(c, &call, NULL, st);
    if (rc == 0) {
        *len = body.len;
        *text = body.len ? buf_steal(&body) : strdup("");
        if (!*text)
            rc = KUBE_ENOMEM;
    }
    buf_free(&body);
    return rc;
}

static int with_body(struct kube_client *c, const char *verb, const char *method, char *path,
                     const char *query, const char *content_type, const cJSON *obj,
                     const char *text, cJSON **out, struct kube_status *st)
{
    if (!path)
        return KUBE_ENOMEM;
    char *body = NULL;
    if (obj) {
        body = cJSON_PrintUnformatted(obj);
        if (!body) {
            free(path);
            return KUBE_ENOMEM;
        }
    }
    struct call call = {.verb = verb, .method = method, .path = path, .query = query,
                        .content_type = content_type, .body = obj ? body : text};
    int rc = execute(c, &call, out, st);
    free(body);
    free(path);
    return rc;
}

int kube_get(struct kube_client *c, const struct kube_resource *res, const char *ns,
             const char *name, cJSON **out, struct kube_status *st)
{
    if (!name)
        return KUBE_EINVAL;
    return with_body(c, "GET", "GET", kube_path(res, ns, name, NULL), NULL, NULL, NULL, NULL, out, st);
}

int kube_list_page(struct kube_client *c, const struct kube_resource *res, const char *ns,
                   const struct kube_list_opts *opts, cJSON **out, struct kube_status *st)
{
    struct buf q;
    buf_init(&q, 0);
    int rc = 0;
    if (opts) {
        char limit[32] = "";
        if (opts->limit > 0)
            snprintf(limit, sizeof(limit), "%ld", opts->limit);
        rc = query_add(&q, "labelSelector", opts->label_selector);
        if (rc == 0)
            rc = query_add(&q, "fieldSelector", opts->field_selector);
        if (rc == 0)
            rc = query_add(&q, "limit", limit);
        if (rc == 0)
            rc = query_add(&q, "continue", opts->continue_token);
        if (rc == 0)
            rc = query_add(&q, "resourceVersion", opts->resource_version);
        if (rc == 0)
            rc = query_add(&q, "resourceVersionMatch", opts->resource_version_match);
    }
    if (rc < 0) {
        buf_free(&q);
        return KUBE_ENOMEM;
    }
    rc = with_body(c, "LIST", "GET", kube_path(res, ns, NULL, NULL), q.data, NULL, NULL, NULL, out, st);
    buf_free(&q);
    if (rc == 0 && (!*out || !cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(*out, "items")))) {
        /* "items": null is how the server writes an empty list in some versions */
        if (*out && cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(*out, "items"))) {
            cJSON_ReplaceItemInObjectCaseSensitive(*out, "items", cJSON_CreateArray());
        } else {
            cJSON_Delete(*out);
            *out = NULL;
            rc = KUBE_EDECODE;
        }
    }
    return rc;
}

int kube_list_all(struct kube_client *c, const struct kube_resource *res, const char *ns,
                  const struct kube_list_opts *opts, cJSON **items, char **resource_version,
                  struct kube_status *st)
{
    *items = NULL;
    if (resource_version)
        *resource_version = NULL;
    struct kube_list_opts page = {0};
    if (opts)
        page = *opts;
    int rc = 0;
    const char *start_token = opts ? opts->continue_token : NULL;
    for (int restart = 0; restart < 3; restart++) {
        cJSON *all = cJSON_CreateArray();
        char *rv = NULL;
        char *cont = start_token ? strdup(start_token) : NULL;
        if (!all)
            return KUBE_ENOMEM;
        for (;;) {
            page.continue_token = cont;
            cJSON *list = NULL;
            rc = kube_list_page(c, res, ns, &page, &list, st);
            free(cont);
            cont = NULL;
            if (rc < 0)
                break;
            if (!rv) {
                const char *v = json_string(list, "metadata.resourceVersion");
                rv = strdup(v ? v : "");
            }
            cJSON *arr = cJSON_GetObjectItemCaseSensitive(list, "items");
            cJSON *it;
            while ((it = cJSON_DetachItemFromArray(arr, 0)) != NULL)
                cJSON_AddItemToArray(all, it);
            const char *next = json_string(list, "metadata.continue");
            if (next && *next)
                cont = strdup(next);
            cJSON_Delete(list);
            if (!cont)
                break;
        }
        if (rc == 0) {
            *items = all;
            if (resource_version)
                *resource_version = rv;
            else
                free(rv);
            return 0;
        }
        cJSON_Delete(all);
        free(rv);
        if (rc != KUBE_EGONE || !page.limit)
            return rc;
        /* The continue token expired mid-list: start again for a consistent snapshot. */
        log_info("list continue token expired; listing again", "resource=%s", res->plural);
        start_token = NULL;
    }
    return rc;
}

int kube_create(struct kube_client *c, const struct kube_resource *res, const char *ns,
                const cJSON *obj, cJSON **out, struct kube_status *st)
{
    if (!obj)
        return KUBE_EINVAL;
    return with_body(c, "POST", "POST", kube_path(res, ns, NULL, NULL), NULL, "application/json",
                     obj, NULL, out, st);
}

int kube_replace(struct kube_client *c, const struct kube_resource *res, const char *ns,
                 const char *name, const cJSON *obj, cJSON **out, struct kube_status *st)
{
    if (!obj || !name)
        return KUBE_EINVAL;
    return with_body(c, "PUT", "PUT", kube_path(res, ns, name, NULL), NULL, "application/json",
                     obj, NULL, out, st);
}

int kube_replace_status(struct kube_client *c, const struct kube_resource *res, const char *ns,
                        const char *name, const cJSON *obj, cJSON **out, struct kube_status *st)
{
    if (!obj || !name)
        return KUBE_EINVAL;
    return with_body(c, "PUT", "PUT", kube_path(res, ns, name, "status"), NULL,
                     "application/json", obj, NULL, out, st);
}

int kube_patch(struct kube_client *c, const struct kube_resource *res, const char *ns,
               const char *name, const char *body, const struct kube_patch_opts *opts, cJSON **out,
               struct kube_status *st)
{
    if (!name || !body || !opts)
        return KUBE_EINVAL;
    static const char *types[] = {
        [KUBE_PATCH_MERGE] = "application/merge-patch+json",
        [KUBE_PATCH_JSON] = "application/json-patch+json",
        [KUBE_PATCH_STRATEGIC] = "application/strategic-merge-patch+json",
        [KUBE_PATCH_APPLY] = "application/apply-patch+yaml",
    };
    if ((unsigned)opts->type > KUBE_PATCH_APPLY)
        return KUBE_EINVAL;
    if (opts->type == KUBE_PATCH_APPLY && (!opts->field_manager || !*opts->field_manager))
        return KUBE_EINVAL;
    struct buf q;
    buf_init(&q, 0);
    int rc = query_add(&q, "fieldManager", opts->field_manager);
    if (rc == 0 && opts->force)
        rc = buf_append_str(&q, "&force=true");
    if (rc < 0) {
        buf_free(&q);
        return KUBE_ENOMEM;
    }
    rc = with_body(c, "PATCH", "PATCH", kube_path(res, ns, name, opts->subresource), q.data,
                   types[opts->type], NULL, body, out, st);
    buf_free(&q);
    return rc;
}

/* The DeleteOptions body for opts, or NULL when every option is the server's default. */
static int delete_options(const struct kube_delete_opts *opts, cJSON **body)
{
    *body = NULL;
    if (!opts || !(opts->precondition_uid || opts->precondition_resource_version || opts->propagation_policy ||
                   opts->grace_period_s >= 0))
        return 0;
    cJSON *b = cJSON_CreateObject();
    if (!b)
        return KUBE_ENOMEM;
    bool ok = cJSON_AddStringToObject(b, "kind", "DeleteOptions") && cJSON_AddStringToObject(b, "apiVersion", "v1");
    if (ok && (opts->precondition_uid || opts->precondition_resource_version)) {
        cJSON *pre = cJSON_AddObjectToObject(b, "preconditions");
        ok = pre && (!opts->precondition_uid || cJSON_AddStringToObject(pre, "uid", opts->precondition_uid)) &&
             (!opts->precondition_resource_version ||
              cJSON_AddStringToObject(pre, "resourceVersion", opts->precondition_resource_version));
    }
    if (ok && opts->propagation_policy)
        ok = cJSON_AddStringToObject(b, "propagationPolicy", opts->propagation_policy) != NULL;
    if (ok && opts->grace_period_s >= 0)
        ok = cJSON_AddNumberToObject(b, "gracePeriodSeconds", (double)opts->grace_period_s) != NULL;
    if (!ok) {
        cJSON_Delete(b);
        return KUBE_ENOMEM;
    }
    *body = b;
    return 0;
}

int kube_delete(struct kube_client *c, const struct kube_resource *res, const char *ns,
                const char *name, const struct kube_delete_opts *opts, cJSON **out,
                struct kube_status *st)
{
    if (!name)
        return KUBE_EINVAL;
    cJSON *body = NULL;
    if (delete_options(opts, &body) < 0)
        return KUBE_ENOMEM;
    int rc = with_body(c, "DELETE", "DELETE", kube_path(res, ns, name, NULL), NULL,
                       body ? "application/json" : NULL, body, NULL, out, st);
    cJSON_Delete(body);
    return rc;
}

int kube_delete_collection(struct kube_client *c, const struct kube_resource *res, const char *ns,
                           const char *label_selector, const char *field_selector,
                           const struct kube_delete_opts *opts, cJSON **out, struct kube_status *st)
{
    /* Never an unselected collection: a bug here must not delete every pod of a namespace. */
    if (!label_selector || !label_selector[0] || (opts && opts->precondition_uid))
        return KUBE_EINVAL;
    struct buf q;
    buf_init(&q, 0);
    int rc = query_add(&q, "labelSelector", label_selector);
    if (rc == 0)
        rc = query_add(&q, "fieldSelector", field_selector);
    cJSON *body = NULL;
    if (rc < 0 || delete_options(opts, &body) < 0) {
        buf_free(&q);
        return KUBE_ENOMEM;
    }
    rc = with_body(c, "DELETECOLLECTION", "DELETE", kube_path(res, ns, NULL, NULL), q.data,
                   body ? "application/json" : NULL, body, NULL, out, st);
    cJSON_Delete(body);
    buf_free(&q);
    return rc;
}
