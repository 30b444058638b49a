#include "kube/informer.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kube/watch.h"
#include "util/clock.h"
#include "util/json.h"
#include "util/log.h"
#include "util/strmap.h"

struct informer {
    struct kube_client *client;
    struct kube_resource resource;
    char *namespace, *label_selector, *field_selector, *index_label;
    long page_size;
    int watch_timeout_s;
    uint64_t backoff_base_ms, backoff_max_ms;
    int strip_managed_fields;
    void (*transform)(cJSON *object);
    struct informer_handlers handlers;

    pthread_mutex_t lock;     /* guards the maps, last_rv and stats */
    pthread_cond_t wake;      /* synced, stop */
    struct strmap *items;     /* key -> kube_object (one reference held) */
    struct strmap *by_ns;     /* namespace -> strmap(key -> kube_object, borrowed) */
    struct strmap *by_owner;  /* owner uid -> strmap(key -> kube_object, borrowed) */
    char *last_rv;
    struct informer_stats stats;
    atomic_bool synced;
    atomic_int stop;
    struct kube_cancel *cancel; /* ends the watch in progress when the informer stops */
    pthread_t thread;
    int started, joined;
};

static void free_index_set(void *v) { strmap_free(v); }
static void unref_value(void *v) { kube_object_unref(v); }

/* The cached form of a listed or watched object: its transform applied, then made immutable. */
static struct kube_object *cached_form(struct informer *inf, cJSON *tree)
{
    if (inf->transform && cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(tree, "metadata")))
        inf->transform(tree);
    return kube_object_new(tree, inf->strip_managed_fields, inf->index_label);
}

static char *dup_or_null(const char *s) { return s && *s ? strdup(s) : NULL; }

int informer_new(struct kube_client *c, const struct informer_config *cfg, struct informer **out)
{
    *out = NULL;
    if (!c || !cfg || !cfg->resource)
        return KUBE_EINVAL;
    struct informer *inf = calloc(1, sizeof(*inf));
    if (!inf)
        return KUBE_ENOMEM;
    inf->client = c;
    inf->resource = *cfg->resource;
    inf->namespace = dup_or_null(cfg->namespace);
    inf->label_selector = dup_or_null(cfg->label_selector);
    inf->field_selector = dup_or_null(cfg->field_selector);
    inf->index_label = dup_or_null(cfg->index_label);
    inf->page_size = cfg->page_size > 0 ? cfg->page_size : 500;
    inf->watch_timeout_s = cfg->watch_timeout_s > 0 ? cfg->watch_timeout_s : 300;
    inf->backoff_base_ms = cfg->backoff_base_ms ? cfg->backoff_base_ms : 200;
    inf->backoff_max_ms = cfg->backoff_max_ms ? cfg->backoff_max_ms : 10000;
    inf->strip_managed_fields = !cfg->keep_managed_fields;
    inf->transform = cfg->transform;
    inf->handlers = cfg->handlers;
    pthread_mutex_init(&inf->lock, NULL);
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&inf->wake, &attr);
    pthread_condattr_destroy(&attr);
    inf->cancel = kube_cancel_new();
    inf->items = strmap_new(unref_value);
    inf->by_ns = strmap_new(free_index_set);
    inf->by_owner = strmap_new(free_index_set);
    if (!inf->cancel || !inf->items || !inf->by_ns || !inf->by_owner ||
        (cfg->namespace && *cfg->namespace && !inf->namespace)) {
        informer_free(inf);
        return KUBE_ENOMEM;
    }
    *out = inf;
    return 0;
}

/* ---- cache ------------------------------------------------------------------------------ */

static void index_add(struct strmap *index, const char *value, struct kube_object *o)
{
    if (!value || !*value)
        return;
    struct strmap *set = strmap_get(index, value);
    if (!set) {
        set = strmap_new(NULL);
        if (!set || strmap_put(index, value, set) < 0) {
            strmap_free(set);
            log_error("informer index update failed", "error=ENOMEM key=%s", o->key);
            return;
        }
    }
    if (strmap_put(set, o->key, o) < 0)
        log_error("informer index update failed", "error=ENOMEM key=%s", o->key);
}

static void index_remove(struct strmap *index, const char *value, const char *key)
{
    if (!value || !*value)
        return;
    struct strmap *set = strmap_get(index, value);
    if (!set)
        return;
    strmap_remove(set, key);
    if (strmap_size(set) == 0)
        strmap_remove(index, value);
}

/* Puts o in the cache (taking over the caller's reference). Returns the replaced object with
 * its reference (caller unrefs), or NULL. Lock held. */
static struct kube_object *cache_put(struct informer *inf, struct kube_object *o)
{
    struct kube_object *old = strmap_take(inf->items, o->key);
    if (old) {
        index_remove(inf->by_ns, old->namespace, old->key);
        index_remove(inf->by_owner, old->owner_uid, old->key);
    }
    if (strmap_put(inf->items, o->key, o) < 0) {
        log_error("informer cache update failed", "error=ENOMEM key=%s", o->key);
        kube_object_unref(o);
        return old;
    }
    index_add(inf->by_ns, o->namespace, o);
    index_add(inf->by_owner, o->owner_uid, o);
    return old;
}

/* Removes key; returns the object with its reference, or NULL. Lock held. */
static struct kube_object *cache_take(struct informer *inf, const char *key)
{
    struct kube_object *old = strmap_take(inf->items, key);
    if (old) {
        index_remove(inf->by_ns, old->namespace, old->key);
        index_remove(inf->by_owner, old->owner_uid, old->key);
    }
    return old;
}

static void set_last_rv(struct informer *inf, const char *rv)
{
    if (!rv || !*rv)
        return;
    char *copy = strdup(rv);
    if (!copy)
        return;
    free(inf->last_rv);
    inf->last_rv = copy;
}

static void deliver_upsert(struct informer *inf, struct kube_object *old, struct kube_object *o)
{
    if (old) {
        if (inf->handlers.on_update)
            inf->handlers.on_update(inf->handlers.ctx, old, o);
    } else if (inf->handlers.on_add) {
        inf->handlers.on_add(inf->handlers.ctx, o);
    }
}

int informer_apply_event(struct informer *inf, int type, cJSON *object)
{
    if (type == KUBE_WATCH_BOOKMARK) {
        pthread_mutex_lock(&inf->lock);
        set_last_rv(inf, json_string(object, "metadata.resourceVersion"));
        inf->stats.bookmarks++;
        pthread_mutex_unlock(&inf->lock);
        cJSON_Delete(object);
        return 0;
    }
    struct kube_object *o = cached_form(inf, object);
    cJSON_Delete(object);
    if (!o) {
        log_warn("informer dropped an event without metadata.name", "resource=%s", inf->resource.plural);
        return 0;
    }
    if (type == KUBE_WATCH_DELETED) {
        pthread_mutex_lock(&inf->lock);
        struct kube_object *old = cache_take(inf, o->key);
        set_last_rv(inf, o->resource_version);
        inf->stats.events++;
        pthread_mutex_unlock(&inf->lock);
        if (old && inf->handlers.on_delete)
            inf->handlers.on_delete(inf->handlers.ctx, o);
        kube_object_unref(old);
        kube_object_unref(o);
        return 0;
    }
    kube_object_ref(o); /* one for the cache, one for the handlers below */
    pthread_mutex_lock(&inf->lock);
    struct kube_object *old = cache_put(inf, o);
    set_last_rv(inf, o->resource_version);
    inf->stats.events++;
    pthread_mutex_unlock(&inf->lock);
    deliver_upsert(inf, old, o);
    kube_object_unref(old);
    kube_object_unref(o);
    return 0;
}

/* ---- list and relist -------------------------------------------------------------------- */

/* Replaces the cache with a fresh list: adds and updates what changed and delivers DELETED for
 * every cached object the list no longer has (it vanished while we were not watching). */
static int replace_from_list(struct informer *inf, cJSON *items, const char *rv)
{
    struct strmap *seen = strmap_new(NULL);
    if (!seen)
        return KUBE_ENOMEM;
    cJSON *item;
    while ((item = cJSON_DetachItemFromArray(items, 0)) != NULL) {
        struct kube_object *o = cached_form(inf, item);
        cJSON_Delete(item);
        if (!o)
            continue;
        strmap_put(seen, o->key, NULL);
        pthread_mutex_lock(&inf->lock);
        struct kube_object *cur = strmap_get(inf->items, o->key);
        int same = cur && strcmp(cur->resource_version, o->resource_version) == 0 &&
                   strcmp(cur->uid, o->uid) == 0;
        struct kube_object *old = NULL;
        if (!same) {
            kube_object_ref(o);
            old = cache_put(inf, o);
        }
        pthread_mutex_unlock(&inf->lock);
        if (!same)
            deliver_upsert(inf, old, o);
        kube_object_unref(old);
        kube_object_unref(o);
    }

    /* Collect the vanished keys first: handlers must not run under the lock. */
    pthread_mutex_lock(&inf->lock);
    size_t n = 0, cap = strmap_size(inf->items);
    char **gone = cap ? calloc(cap, sizeof(char *)) : NULL;
    const char *key;
    size_t it = 0;
    while (gone && strmap_next(inf->items, &it, &key, NULL))
        if (!strmap_has(seen, key))
            gone[n++] = strdup(key);
    pthread_mutex_unlock(&inf->lock);
    for (size_t i = 0; i < n; i++) {
        if (!gone[i])
            continue;
        pthread_mutex_lock(&inf->lock);
        struct kube_object *old = cache_take(inf, gone[i]);
        pthread_mutex_unlock(&inf->lock);
        if (old && inf->handlers.on_delete)
            inf->handlers.on_delete(inf->handlers.ctx, old);
        kube_object_unref(old);
        free(gone[i]);
    }
    free(gone);
    strmap_free(seen);

    pthread_mutex_lock(&inf->lock);
    set_last_rv(inf, rv);
    inf->stats.lists++;
    if (inf->stats.lists > 1)
        inf->stats.relists++;
    pthread_mutex_unlock(&inf->lock);
    if (!atomic_load(&inf->synced)) {
        pthread_mutex_lock(&inf->lock);
        atomic_store(&inf->synced, true);
        pthread_cond_broadcast(&inf->wake);
        pthread_mutex_unlock(&inf->lock);
    }
    return 0;
}

static int list_once(struct informer *inf)
{
    struct kube_list_opts opts = {.label_selector = inf->label_selector,
                                  .field_selector = inf->field_selector,
                                  .limit = inf->page_size};
    cJSON *items = NULL;
    char *rv = NULL;
    struct kube_status st = {.retry_after_s = -1};
    int rc = kube_list_all(inf->client, &inf->resource, inf->namespace, &opts, &items, &rv, &st);
    if (rc == 0)
        rc = replace_from_list(inf, items, rv);
    else
        log_warn("list failed", "resource=%s error=\"%s\" message=\"%s\"", inf->resource.plural,
                 error_str(rc), log_quote(st.message));
    kube_status_clear(&st);
    cJSON_Delete(items);
    free(rv);
    return rc;
}

/* ---- the list/watch loop ---------------------------------------------------------------- */

static int on_watch_event(void *ctx, enum kube_watch_type type, cJSON *object)
{
    struct informer *inf = ctx;
    return informer_apply_event(inf, (int)type, object);
}

/* Sleeps up to ms, waking early on stop. */
static void pause_ms(struct informer *inf, uint64_t ms)
{
    struct timespec ts;
    clock_deadline_monotonic(&ts, ms);
    pthread_mutex_lock(&inf->lock);
    while (!atomic_load(&inf->stop))
        if (pthread_cond_timedwait(&inf->wake, &inf->lock, &ts) == ETIMEDOUT)
            break;
    pthread_mutex_unlock(&inf->lock);
}

static uint64_t next_backoff(struct informer *inf, uint64_t cur)
{
    uint64_t d = cur ? cur * 2 : inf->backoff_base_ms;
    return d > inf->backoff_max_ms ? inf->backoff_max_ms : d;
}

static void *run(void *arg)
{
    struct informer *inf = arg;
    int need_list = 1;
    uint64_t backoff = 0;
    while (!atomic_load(&inf->stop)) {
        if (need_list) {
            int rc = list_once(inf);
            if (rc < 0) {
                pthread_mutex_lock(&inf->lock);
                inf->stats.errors++;
                pthread_mutex_unlock(&inf->lock);
                backoff = next_backoff(inf, backoff);
                pause_ms(inf, backoff / 2 + clock_jitter(backoff / 2 + 1));
                continue;
            }
            need_list = 0;
        }

        pthread_mutex_lock(&inf->lock);
        char *rv = inf->last_rv ? strdup(inf->last_rv) : NULL;
        uint64_t events_before = inf->stats.events + inf->stats.bookmarks;
        inf->stats.watches++;
        pthread_mutex_unlock(&inf->lock);

        /* Jittered server-side timeout, so many watches do not all restart at once. */
        int timeout = inf->watch_timeout_s + (int)clock_jitter((uint64_t)inf->watch_timeout_s + 1);
        struct kube_watch_opts wopts = {.label_selector = inf->label_selector,
                                        .field_selector = inf->field_selector,
                                        .resource_version = rv,
                                        .allow_bookmarks = true,
                                        .timeout_s = timeout,
                                        .cancel = inf->cancel};
        struct kube_status st = {.retry_after_s = -1};
        uint64_t t0 = clock_now_ms();
        int rc = kube_watch(inf->client, &inf->resource, inf->namespace, &wopts, on_watch_event, inf, &st);
        free(rv);
        if (atomic_load(&inf->stop)) {
            kube_status_clear(&st); /* a stop during a 429's wait leaves that answer's Status here */
            break;
        }

        pthread_mutex_lock(&inf->lock);
        int progressed = inf->stats.events + inf->stats.bookmarks > events_before;
        pthread_mutex_unlock(&inf->lock);
        if (progressed || clock_now_ms() - t0 > 30000)
            backoff = 0;

        if (rc == KUBE_EGONE) {
            log_info("watch expired; relisting", "resource=%s", inf->resource.plural);
            need_list = 1;
        } else {
            pthread_mutex_lock(&inf->lock);
            inf->stats.watch_restarts++;
            if (rc != 0)
                inf->stats.errors++;
            pthread_mutex_unlock(&inf->lock);
            if (rc != 0) {
                log_info("watch ended; resuming from last resourceVersion",
                         "resource=%s error=\"%s\" message=\"%s\"", inf->resource.plural, error_str(rc),
                         log_quote(st.message));
                backoff = next_backoff(inf, backoff);
                pause_ms(inf, backoff / 2 + clock_jitter(backoff / 2 + 1));
            }
        }
        kube_status_clear(&st);
    }
    return NULL;
}

int informer_start(struct informer *inf)
{
    if (inf->started)
        return KUBE_EINVAL;
    if (pthread_create(&inf->thread, NULL, run, inf) != 0)
        return KUBE_ENOMEM;
    inf->started = 1;
    return 0;
}

bool informer_has_synced(struct informer *inf) { return atomic_load(&inf->synced); }

int informer_wait_synced(struct informer *inf, uint64_t timeout_ms)
{
    struct timespec ts;
    clock_deadline_monotonic(&ts, timeout_ms);
    pthread_mutex_lock(&inf->lock);
    while (!atomic_load(&inf->synced) && !atomic_load(&inf->stop))
        if (pthread_cond_timedwait(&inf->wake, &inf->lock, &ts) == ETIMEDOUT)
            break;
    pthread_mutex_unlock(&inf->lock);
    return atomic_load(&inf->synced) ? 0 : KUBE_ETIMEOUT;
}

struct kube_object *informer_get(struct informer *inf, const char *ns, const char *name)
{
    char key[512];
    if (ns && *ns)
        snprintf(key, sizeof(key), "%s/%s", ns, name);
    else
        snprintf(key, sizeof(key), "%s", name);
    pthread_mutex_lock(&inf->lock);
    struct kube_object *o = kube_object_ref(strmap_get(inf->items, key));
    pthread_mutex_unlock(&inf->lock);
    return o;
}

static int collect(const struct strmap *set, struct kube_object ***out)
{
    size_t n = set ? strmap_size(set) : 0;
    struct kube_object **list = calloc(n ? n : 1, sizeof(*list));
    if (!list)
        return KUBE_ENOMEM;
    size_t i = 0, it = 0;
    void *v;
    while (set && strmap_next(set, &it, NULL, &v))
        list[i++] = kube_object_ref(v);
    *out = list;
    return (int)i;
}

int informer_list(struct informer *inf, const char *ns, struct kube_object ***out)
{
    pthread_mutex_lock(&inf->lock);
    int n = collect(ns ? strmap_get(inf->by_ns, ns) : inf->items, out);
    pthread_mutex_unlock(&inf->lock);
    return n;
}

int informer_list_by_owner(struct informer *inf, const char *owner_uid, struct kube_object ***out)
{
    pthread_mutex_lock(&inf->lock);
    int n = collect(owner_uid ? strmap_get(inf->by_owner, owner_uid) : NULL, out);
    pthread_mutex_unlock(&inf->lock);
    return n;
}

size_t informer_size(struct informer *inf)
{
    pthread_mutex_lock(&inf->lock);
    size_t n = strmap_size(inf->items);
    pthread_mutex_unlock(&inf->lock);
    return n;
}

char *informer_last_resource_version(struct informer *inf)
{
    pthread_mutex_lock(&inf->lock);
    char *rv = inf->last_rv ? strdup(inf->last_rv) : NULL;
    pthread_mutex_unlock(&inf->lock);
    return rv;
}

void informer_stats(struct informer *inf, struct informer_stats *out)
{
    pthread_mutex_lock(&inf->lock);
    *out = inf->stats;
    pthread_mutex_unlock(&inf->lock);
}

void informer_stop(struct informer *inf)
{
    if (!inf)
        return;
    pthread_mutex_lock(&inf->lock);
    atomic_store(&inf->stop, 1);
    pthread_cond_broadcast(&inf->wake);
    pthread_mutex_unlock(&inf->lock);
    if (inf->cancel)
        kube_cancel_fire(inf->cancel);
    if (inf->started && !inf->joined) {
        pthread_join(inf->thread, NULL);
        inf->joined = 1;
    }
}

void informer_free(struct informer *inf)
{
    if (!inf)
        return;
    informer_stop(inf);
    strmap_free(inf->by_ns);
    strmap_free(inf->by_owner);
    strmap_free(inf->items);
    pthread_mutex_destroy(&inf->lock);
    pthread_cond_destroy(&inf->wake);
    free(inf->namespace);
    free(inf->label_selector);
    free(inf->field_selector);
    free(inf->index_label);
    free(inf->last_rv);
    kube_cancel_free(inf->cancel);
    free(inf);
}
