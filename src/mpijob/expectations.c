#include "mpijob/expectations.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/clock.h"
#include "util/strmap.h"

struct expectations {
    pthread_mutex_t lock;
    struct strmap *created; /* "plural/ns/name" -> (uintptr_t) monotonic ms of the creation */
    struct strmap *counted; /* pod uid -> (uintptr_t) monotonic ms it was counted */
    struct strmap *deleted; /* pod uid -> (uintptr_t) monotonic ms the server accepted its deletion */
    struct strmap *written; /* "ns/name" -> struct superseded */
    struct strmap *refused; /* "ns/name" -> struct refusal */
    struct strmap *logs_read; /* "ns/name" -> uid of the launcher pod whose log was read last */
    struct strmap *logs_empty; /* "ns/name" -> struct empty_reads, while a launcher's log reads empty */
    uint64_t swept_at;
    uint64_t ttl_ms;
    const struct clock_source *clock; /* NULL: CLOCK_MONOTONIC */
};

struct empty_reads {
    int count;
    uint64_t at; /* the last empty read, on the expectations' clock */
    char uid[];
};

struct superseded {
    uint64_t at; /* monotonic ms of the write */
    char rv[];
};

struct expectations *expectations_new(void)
{
    struct expectations *e = calloc(1, sizeof(*e));
    if (!e)
        return NULL;
    pthread_mutex_init(&e->lock, NULL);
    e->created = strmap_new(NULL);
    e->counted = strmap_new(NULL);
    e->deleted = strmap_new(NULL);
    e->written = strmap_new(free);
    e->refused = strmap_new(free);
    e->logs_read = strmap_new(free);
    e->logs_empty = strmap_new(free);
    e->swept_at = clock_now_ms();
    e->ttl_ms = EXPECTATION_TTL_MS;
    if (!e->created || !e->counted || !e->deleted || !e->written || !e->refused || !e->logs_read || !e->logs_empty) {
        expectations_free(e);
        return NULL;
    }
    return e;
}

void expectations_free(struct expectations *e)
{
    if (!e)
        return;
    strmap_free(e->created);
    strmap_free(e->counted);
    strmap_free(e->deleted);
    strmap_free(e->written);
    strmap_free(e->refused);
    strmap_free(e->logs_read);
    strmap_free(e->logs_empty);
    pthread_mutex_destroy(&e->lock);
    free(e);
}

/* Removes the entries of m older than the TTL (values: a stamp, or a struct superseded). */
static void sweep_map(struct strmap *m, uint64_t now, uint64_t ttl, bool superseded)
{
    size_t n = 0, cap = strmap_size(m);
    char **old = cap ? calloc(cap, sizeof(*old)) : NULL;
    const char *key;
    void *value;
    for (size_t it = 0; old && strmap_next(m, &it, &key, &value);) {
        uint64_t at = superseded ? ((struct superseded *)value)->at : (uintptr_t)value;
        if (now - at >= ttl && n < cap)
            old[n++] = strdup(key);
    }
    for (size_t i = 0; i < n; i++) {
        if (old[i])
            strmap_remove(m, old[i]);
        free(old[i]);
    }
    free(old);
}

/* At most once per TTL, drops what has expired: a creation the cache never showed (the job was
 * deleted meanwhile, say), a counted failure, a status write long since seen. Lock held. */
static void sweep(struct expectations *e, uint64_t now)
{
    if (now - e->swept_at < e->ttl_ms)
        return;
    e->swept_at = now;
    sweep_map(e->created, now, e->ttl_ms, false);
    sweep_map(e->counted, now, e->ttl_ms, false);
    sweep_map(e->deleted, now, e->ttl_ms, false);
    sweep_map(e->written, now, e->ttl_ms, true);
}

static void object_key(char *key, size_t len, const struct kube_resource *res, const char *ns, const char *name)
{
    snprintf(key, len, "%s/%s/%s", res->plural, ns, name);
}

static void stamp(struct expectations *e, struct strmap *m, const char *key)
{
    pthread_mutex_lock(&e->lock);
    uint64_t now = clock_source_now(e->clock);
    sweep(e, now);
    strmap_put(m, key, (void *)(uintptr_t)now);
    pthread_mutex_unlock(&e->lock);
}

/* True while key's stamp in m is younger than the TTL; an expired stamp is removed. */
static bool fresh(struct expectations *e, struct strmap *m, const char *key)
{
    pthread_mutex_lock(&e->lock);
    uintptr_t at = (uintptr_t)strmap_get(m, key);
    bool young = at && clock_source_now(e->clock) - at < e->ttl_ms;
    if (at && !young)
        strmap_remove(m, key);
    pthread_mutex_unlock(&e->lock);
    return young;
}

void expect_created(struct expectations *e, const struct kube_resource *res, const char *ns, const char *name)
{
    if (!e)
        return;
    char key[600];
    object_key(key, sizeof(key), res, ns, name);
    stamp(e, e->created, key);
}

bool expect_pending(struct expectations *e, const struct kube_resource *res, const char *ns, const char *name)
{
    if (!e)
        return false;
    char key[600];
    object_key(key, sizeof(key), res, ns, name);
    return fresh(e, e->created, key);
}

void expect_seen(struct expectations *e, const struct kube_resource *res, const char *ns, const char *name)
{
    if (!e)
        return;
    char key[600];
    object_key(key, sizeof(key), res, ns, name);
    pthread_mutex_lock(&e->lock);
    strmap_remove(e->created, key);
    pthread_mutex_unlock(&e->lock);
}

void expect_status_written(struct expectations *e, const char *key, const char *old_rv)
{
    if (!e || !old_rv || !*old_rv)
        return;
    size_t n = strlen(old_rv) + 1;
    struct superseded *s = malloc(sizeof(*s) + n);
    if (!s)
        return; /* the worst that follows is a Conflict */
    memcpy(s->rv, old_rv, n);
    pthread_mutex_lock(&e->lock);
    s->at = clock_source_now(e->clock);
    sweep(e, s->at);
    if (strmap_put(e->written, key, s) < 0)
        free(s);
    pthread_mutex_unlock(&e->lock);
}

bool expect_status_behind(struct expectations *e, const char *key, const char *rv)
{
    if (!e)
        return false;
    pthread_mutex_lock(&e->lock);
    const struct superseded *s = strmap_get(e->written, key);
    bool behind = s && rv && strcmp(s->rv, rv) == 0 && clock_source_now(e->clock) - s->at < e->ttl_ms;
    if (s && !behind)
        strmap_remove(e->written, key);
    pthread_mutex_unlock(&e->lock);
    return behind;
}

void expect_failure_counted(struct expectations *e, const char *uid)
{
    if (e && uid)
        stamp(e, e->counted, uid);
}

bool expect_failure_is_counted(struct expectations *e, const char *uid)
{
    return e && uid && fresh(e, e->counted, uid);
}

void expect_deleted(struct expectations *e, const char *uid)
{
    if (e && uid && *uid)
        stamp(e, e->deleted, uid);
}

bool expect_deletion_pending(struct expectations *e, const char *uid)
{
    return e && uid && fresh(e, e->deleted, uid);
}

void expect_refused(struct expectations *e, const char *job_key, const char *kind, const char *name,
                    const char *message)
{
    struct refusal *r = e ? calloc(1, sizeof(*r)) : NULL;
    if (!r)
        return;
    snprintf(r->kind, sizeof(r->kind), "%s", kind);
    snprintf(r->name, sizeof(r->name), "%s", name);
    snprintf(r->message, sizeof(r->message), "%s", message ? message : "");
    pthread_mutex_lock(&e->lock);
    const struct refusal *standing = strmap_get(e->refused, job_key);
    bool other = standing && (strcmp(standing->kind, kind) != 0 || strcmp(standing->name, name) != 0);
    if (other || strmap_put(e->refused, job_key, r) < 0)
        free(r);
    pthread_mutex_unlock(&e->lock);
}

void expect_accepted(struct expectations *e, const char *job_key, const char *kind, const char *name)
{
    if (!e)
        return;
    pthread_mutex_lock(&e->lock);
    const struct refusal *r = strmap_get(e->refused, job_key);
    if (r && strcmp(r->kind, kind) == 0 && strcmp(r->name, name) == 0)
        strmap_remove(e->refused, job_key);
    pthread_mutex_unlock(&e->lock);
}

bool expect_refusal(struct expectations *e, const char *job_key, struct refusal *out)
{
    if (!e)
        return false;
    pthread_mutex_lock(&e->lock);
    const struct refusal *r = strmap_get(e->refused, job_key);
    if (r)
        *out = *r;
    pthread_mutex_unlock(&e->lock);
    return r != NULL;
}

void expect_forget_job(struct expectations *e, const char *job_key)
{
    if (!e)
        return;
    pthread_mutex_lock(&e->lock);
    strmap_remove(e->refused, job_key);
    strmap_remove(e->written, job_key);
    strmap_remove(e->logs_read, job_key);
    strmap_remove(e->logs_empty, job_key);
    pthread_mutex_unlock(&e->lock);
}

void expect_log_read(struct expectations *e, const char *job_key, const char *pod_uid)
{
    char *uid = e && pod_uid ? strdup(pod_uid) : NULL;
    if (!uid)
        return;
    pthread_mutex_lock(&e->lock);
    if (strmap_put(e->logs_read, job_key, uid) < 0)
        free(uid);
    strmap_remove(e->logs_empty, job_key);
    pthread_mutex_unlock(&e->lock);
}

int expect_log_empty(struct expectations *e, const char *job_key, const char *pod_uid)
{
    if (!e || !pod_uid)
        return 0;
    int count = 0;
    pthread_mutex_lock(&e->lock);
    struct empty_reads *r = strmap_get(e->logs_empty, job_key);
    uint64_t now = clock_source_now(e->clock);
    if (r && strcmp(r->uid, pod_uid) == 0) {
        count = ++r->count;
        r->at = now;
    } else {
        size_t n = strlen(pod_uid) + 1;
        r = malloc(sizeof(*r) + n);
        if (r) {
            r->count = 1;
            r->at = now;
            memcpy(r->uid, pod_uid, n);
            if (strmap_put(e->logs_empty, job_key, r) < 0)
                free(r);
            else
                count = 1;
        }
    }
    pthread_mutex_unlock(&e->lock);
    return count;
}

int expect_log_empty_reads(struct expectations *e, const char *job_key, const char *pod_uid, uint64_t *since_ms)
{
    *since_ms = 0;
    if (!e || !pod_uid)
        return 0;
    int count = 0;
    pthread_mutex_lock(&e->lock);
    const struct empty_reads *r = strmap_get(e->logs_empty, job_key);
    if (r && strcmp(r->uid, pod_uid) == 0) {
        count = r->count;
        uint64_t now = clock_source_now(e->clock);
        *since_ms = now > r->at ? now - r->at : 0;
    }
    pthread_mutex_unlock(&e->lock);
    return count;
}

bool expect_log_read_uid(struct expectations *e, const char *job_key, char *out, size_t len)
{
    if (!e || !len)
        return false;
    pthread_mutex_lock(&e->lock);
    const char *uid = strmap_get(e->logs_read, job_key);
    if (uid)
        snprintf(out, len, "%s", uid);
    pthread_mutex_unlock(&e->lock);
    return uid != NULL;
}

void expectations_set_ttl(struct expectations *e, uint64_t ttl_ms)
{
    pthread_mutex_lock(&e->lock);
    e->ttl_ms = ttl_ms;
    pthread_mutex_unlock(&e->lock);
}

void expectations_set_clock(struct expectations *e, const struct clock_source *clock)
{
    pthread_mutex_lock(&e->lock);
    e->clock = clock;
    e->swept_at = clock_source_now(clock);
    pthread_mutex_unlock(&e->lock);
}

size_t expectations_size(struct expectations *e)
{
    if (!e)
        return 0;
    pthread_mutex_lock(&e->lock);
    size_t n = strmap_size(e->created) + strmap_size(e->counted) + strmap_size(e->deleted) +
               strmap_size(e->written) + strmap_size(e->refused) + strmap_size(e->logs_read) +
               strmap_size(e->logs_empty);
    pthread_mutex_unlock(&e->lock);
    return n;
}
