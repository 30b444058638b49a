/* Event recorder: a bounded queue drained by one writer thread, and a correlator that turns
 * repeats into count patches, as client-go's EventCorrelator and recordToSink do. */
#include "kube/events.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util/buf.h"
#include "util/clock.h"
#include "util/json.h"
#include "util/log.h"
#include "util/strmap.h"

#define EVENT_QUEUE_MAX 1000
#define EVENT_CACHE_MAX 4096
#define EVENT_MESSAGE_MAX 1024

/* One recorded occurrence, waiting for the writer. */
struct pending_event {
    struct pending_event *next;
    char *api_version, *kind, *namespace, *name, *uid, *resource_version;
    char *type, *reason, *message;
    time_t when;
};

/* An Event already on the server, by correlation key. Kept in LRU order. */
struct aggregate {
    struct aggregate *newer, *older;
    char *key;
    char *namespace;
    char *event_name;
    long count;
};

struct event_recorder {
    struct kube_client *client;
    char *component;
    char *host;
    pthread_t thread;

    pthread_mutex_t mu;
    pthread_cond_t work; /* queue non-empty, or stopping */
    pthread_cond_t idle; /* queue empty and nothing in flight */
    struct pending_event *head, *tail;
    size_t queued;
    bool busy;
    bool stopping;
    unsigned long dropped;

    /* Writer thread only. */
    struct strmap *cache;
    struct aggregate *newest, *oldest;
};

static void pending_free(struct pending_event *ev)
{
    if (!ev)
        return;
    free(ev->api_version);
    free(ev->kind);
    free(ev->namespace);
    free(ev->name);
    free(ev->uid);
    free(ev->resource_version);
    free(ev->type);
    free(ev->reason);
    free(ev->message);
    free(ev);
}

/* ---- correlation cache ----------------------------------------------------------------- */

/* Length-prefixed fields, so no message content can make two keys collide. */
static char *correlation_key(const struct pending_event *ev)
{
    const char *parts[] = {ev->namespace, ev->kind, ev->name, ev->uid, ev->type, ev->reason,
                           ev->message};
    struct buf b;
    buf_init(&b, 0);
    for (size_t i = 0; i < sizeof(parts) / sizeof(parts[0]); i++) {
        const char *p = parts[i] ? parts[i] : "";
        if (buf_printf(&b, "%zu:%s;", strlen(p), p) < 0) {
            buf_free(&b);
            return NULL;
        }
    }
    return buf_steal(&b);
}

static void lru_unlink(struct event_recorder *r, struct aggregate *a)
{
    if (a->newer)
        a->newer->older = a->older;
    else
        r->newest = a->older;
    if (a->older)
        a->older->newer = a->newer;
    else
        r->oldest = a->newer;
    a->newer = a->older = NULL;
}

static void lru_push(struct event_recorder *r, struct aggregate *a)
{
    a->older = r->newest;
    a->newer = NULL;
    if (r->newest)
        r->newest->newer = a;
    r->newest = a;
    if (!r->oldest)
        r->oldest = a;
}

static void aggregate_free(struct aggregate *a)
{
    free(a->key);
    free(a->namespace);
    free(a->event_name);
    free(a);
}

static void cache_remove(struct event_recorder *r, struct aggregate *a)
{
    strmap_take(r->cache, a->key);
    lru_unlink(r, a);
    aggregate_free(a);
}

static void cache_add(struct event_recorder *r, const char *key, const char *ns,
                      const char *event_name)
{
    struct aggregate *a = calloc(1, sizeof(*a));
    if (!a)
        return;
    a->key = strdup(key);
    a->namespace = strdup(ns);
    a->event_name = strdup(event_name);
    a->count = 1;
    if (!a->key || !a->namespace || !a->event_name) {
        aggregate_free(a);
        return;
    }
    while (strmap_size(r->cache) >= EVENT_CACHE_MAX && r->oldest)
        cache_remove(r, r->oldest);
    if (strmap_put(r->cache, key, a) < 0) {
        aggregate_free(a);
        return;
    }
    lru_push(r, a);
}

/* ---- writing --------------------------------------------------------------------------- */

/* "<object name>.<16 hex digits>": wall-clock nanoseconds, as client-go names Events, made
 * strictly increasing within the process so two Events never share a name. */
static char *event_name(const char *object_name)
{
    static _Atomic uint64_t last;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t now = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
    uint64_t prev = atomic_load(&last), next;
    do {
        next = now > prev ? now : prev + 1;
    } while (!atomic_compare_exchange_weak(&last, &prev, next));
    char *s = NULL;
    if (asprintf(&s, "%s.%016llx", object_name, (unsigned long long)next) < 0)
        return NULL;
    return s;
}

static int add_string(cJSON *obj, const char *name, const char *value)
{
    if (!value)
        return 0;
    return cJSON_AddStringToObject(obj, name, value) ? 0 : KUBE_ENOMEM;
}

static cJSON *build_event(const struct event_recorder *r, const struct pending_event *ev,
                          const char *name)
{
    char ts[21];
    clock_rfc3339(ev->when, ts);
    cJSON *e = cJSON_CreateObject();
    if (!e)
        return NULL;
    cJSON *meta = cJSON_AddObjectToObject(e, "metadata");
    cJSON *obj = cJSON_AddObjectToObject(e, "involvedObject");
    cJSON *source = cJSON_AddObjectToObject(e, "source");
    int rc = (meta && obj && source) ? 0 : KUBE_ENOMEM;
    if (rc == 0)
        rc = add_string(e, "apiVersion", "v1") ?: add_string(e, "kind", "Event") ?:
             add_string(meta, "name", name) ?: add_string(meta, "namespace", ev->namespace) ?:
             add_string(obj, "apiVersion", ev->api_version) ?:
             add_string(obj, "kind", ev->kind) ?: add_string(obj, "namespace", ev->namespace) ?:
             add_string(obj, "name", ev->name) ?: add_string(obj, "uid", ev->uid) ?:
             add_string(obj, "resourceVersion", ev->resource_version) ?:
             add_string(e, "reason", ev->reason) ?: add_string(e, "message", ev->message) ?:
             add_string(e, "type", ev->type) ?:
             add_string(source, "component", r->component) ?:
             add_string(source, "host", r->host) ?:
             add_string(e, "reportingComponent", r->component) ?:
             add_string(e, "reportingInstance", r->host ? r->host : "") ?:
             add_string(e, "firstTimestamp", ts) ?: add_string(e, "lastTimestamp", ts);
    if (rc == 0 && !cJSON_AddNumberToObject(e, "count", 1))
        rc = KUBE_ENOMEM;
    if (rc < 0) {
        cJSON_Delete(e);
        return NULL;
    }
    return e;
}

static void create_event(struct event_recorder *r, const struct pending_event *ev,
                         const char *key)
{
    int rc = KUBE_ENOMEM;
    struct kube_status st = {.retry_after_s = -1};
    /* A second name only on AlreadyExists, which another process's clock could cause. */
    for (int attempt = 0; attempt < 2; attempt++) {
        char *name = event_name(ev->name);
        cJSON *e = name ? build_event(r, ev, name) : NULL;
        rc = e ? kube_create(r->client, &KUBE_EVENTS, ev->namespace, e, NULL, &st) : KUBE_ENOMEM;
        if (rc == 0 && key)
            cache_add(r, key, ev->namespace, name);
        cJSON_Delete(e);
        free(name);
        if (rc != KUBE_EALREADYEXISTS)
            break;
    }
    if (rc < 0)
        log_warn("event create failed", "namespace=%s object=%s/%s reason=%s error=\"%s\" message=\"%s\"",
                 ev->namespace, ev->kind, ev->name, ev->reason, error_str(rc), log_quote(st.message));
    kube_status_clear(&st);
}

static void write_event(struct event_recorder *r, const struct pending_event *ev)
{
    char *key = correlation_key(ev);
    struct aggregate *a = key ? strmap_get(r->cache, key) : NULL;
    if (a) {
        a->count++;
        lru_unlink(r, a);
        lru_push(r, a);
        char ts[21];
        clock_rfc3339(ev->when, ts);
        char body[96];
        snprintf(body, sizeof(body), "{\"count\":%ld,\"lastTimestamp\":\"%s\"}", a->count, ts);
        struct kube_patch_opts opts = {.type = KUBE_PATCH_MERGE};
        struct kube_status st = {.retry_after_s = -1};
        int rc = kube_patch(r->client, &KUBE_EVENTS, a->namespace, a->event_name, body, &opts,
                            NULL, &st);
        if (rc == KUBE_ENOTFOUND) {
            /* Deleted behind our back (or expired by the server's TTL): start over. */
            cache_remove(r, a);
            create_event(r, ev, key);
        } else if (rc < 0) {
            log_warn("event patch failed", "namespace=%s event=%s count=%ld error=\"%s\" message=\"%s\"",
                     a->namespace, a->event_name, a->count, error_str(rc), log_quote(st.message));
        }
        kube_status_clear(&st);
    } else {
        create_event(r, ev, key);
    }
    free(key);
}

static void *writer_main(void *arg)
{
    struct event_recorder *r = arg;
    pthread_mutex_lock(&r->mu);
    for (;;) {
        while (!r->head && !r->stopping)
            pthread_cond_wait(&r->work, &r->mu);
        if (!r->head)
            break; /* stopping with nothing left */
        struct pending_event *ev = r->head;
        r->head = ev->next;
        if (!r->head)
            r->tail = NULL;
        r->queued--;
        r->busy = true;
        pthread_mutex_unlock(&r->mu);

        write_event(r, ev);
        pending_free(ev);

        pthread_mutex_lock(&r->mu);
        r->busy = false;
        if (!r->head)
            pthread_cond_broadcast(&r->idle);
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

/* ---- public surface -------------------------------------------------------------------- */

static void recorder_free_fields(struct event_recorder *r)
{
    while (r->head) {
        struct pending_event *ev = r->head;
        r->head = ev->next;
        pending_free(ev);
    }
    while (r->oldest)
        cache_remove(r, r->oldest);
    strmap_free(r->cache);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->work);
    pthread_cond_destroy(&r->idle);
    free(r->component);
    free(r->host);
    free(r);
}

int event_recorder_new(struct kube_client *c, const char *component, const char *host,
                       struct event_recorder **out)
{
    *out = NULL;
    if (!c || !component || !component[0])
        return KUBE_EINVAL;
    struct event_recorder *r = calloc(1, sizeof(*r));
    if (!r)
        return KUBE_ENOMEM;
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->work, NULL);
    pthread_cond_init(&r->idle, NULL);
    r->client = c;
    r->component = strdup(component);
    r->host = host ? strdup(host) : NULL;
    r->cache = strmap_new(NULL);
    if (!r->component || (host && !r->host) || !r->cache ||
        pthread_create(&r->thread, NULL, writer_main, r) != 0) {
        recorder_free_fields(r);
        return KUBE_ENOMEM;
    }
    *out = r;
    return 0;
}

/* Cuts s to at most max bytes without splitting a UTF-8 sequence. */
static void truncate_utf8(char *s, size_t max)
{
    size_t n = strlen(s);
    if (n <= max)
        return;
    n = max;
    while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80)
        n--;
    s[n] = 0;
}

static char *dup_or_null(const char *s, bool *failed)
{
    if (!s)
        return NULL;
    char *d = strdup(s);
    if (!d)
        *failed = true;
    return d;
}

int event_record(struct event_recorder *r, const struct event_target *target, const char *type,
                 const char *reason, const char *message_fmt, ...)
{
    if (!r || !target || !target->kind || !target->name || !target->name[0] || !type ||
        !reason || !message_fmt)
        return KUBE_EINVAL;
    struct pending_event *ev = calloc(1, sizeof(*ev));
    if (!ev)
        return KUBE_ENOMEM;
    va_list ap;
    va_start(ap, message_fmt);
    int n = vasprintf(&ev->message, message_fmt, ap);
    va_end(ap);
    if (n < 0) {
        ev->message = NULL;
        pending_free(ev);
        return KUBE_ENOMEM;
    }
    truncate_utf8(ev->message, EVENT_MESSAGE_MAX);
    bool failed = false;
    /* Events about cluster-scoped objects go to "default", as client-go does. */
    const char *ns = target->namespace && target->namespace[0] ? target->namespace : "default";
    ev->api_version = dup_or_null(target->api_version, &failed);
    ev->kind = dup_or_null(target->kind, &failed);
    ev->namespace = dup_or_null(ns, &failed);
    ev->name = dup_or_null(target->name, &failed);
    ev->uid = dup_or_null(target->uid, &failed);
    ev->resource_version = dup_or_null(target->resource_version, &failed);
    ev->type = dup_or_null(type, &failed);
    ev->reason = dup_or_null(reason, &failed);
    ev->when = time(NULL);
    if (failed) {
        pending_free(ev);
        return KUBE_ENOMEM;
    }

    pthread_mutex_lock(&r->mu);
    if (r->queued >= EVENT_QUEUE_MAX || r->stopping) {
        unsigned long dropped = ++r->dropped;
        bool stopping = r->stopping;
        pthread_mutex_unlock(&r->mu);
        /* One line per hundred drops: a flood of events must not become a flood of logs. */
        if (dropped % 100 == 1)
            log_warn("event dropped", "why=%s namespace=%s object=%s/%s reason=%s dropped_total=%lu",
                     stopping ? "stopping" : "queue-full", ev->namespace, ev->kind, ev->name,
                     ev->reason, dropped);
        pending_free(ev);
        return 0;
    }
    if (r->tail)
        r->tail->next = ev;
    else
        r->head = ev;
    r->tail = ev;
    r->queued++;
    pthread_cond_signal(&r->work);
    pthread_mutex_unlock(&r->mu);
    return 0;
}

void event_recorder_flush(struct event_recorder *r)
{
    if (!r)
        return;
    pthread_mutex_lock(&r->mu);
    while (r->head || r->busy)
        pthread_cond_wait(&r->idle, &r->mu);
    pthread_mutex_unlock(&r->mu);
}

void event_recorder_free(struct event_recorder *r)
{
    if (!r)
        return;
    event_recorder_flush(r);
    pthread_mutex_lock(&r->mu);
    r->stopping = true;
    pthread_cond_signal(&r->work);
    pthread_mutex_unlock(&r->mu);
    pthread_join(r->thread, NULL);
    recorder_free_fields(r);
}
