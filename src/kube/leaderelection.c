/* Leader election on a coordination.k8s.io/v1 Lease, following client-go's
 * tryAcquireOrRenew. Design note: docs/internals/leaderelection.md. */
#include "kube/leaderelection.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/clock.h"
#include "util/json.h"
#include "util/log.h"

#define DEFAULT_LEASE_DURATION_MS 15000
#define DEFAULT_RENEW_DEADLINE_MS 10000
#define DEFAULT_RETRY_PERIOD_MS 2000

struct leader_elector {
    struct kube_client *client;
    struct leader_election_config cfg; /* strings point at the copies below */
    char *lease_namespace;
    char *lease_name;
    char *identity;
    pthread_t thread;

    pthread_mutex_t mu; /* guards stopping and holder */
    pthread_cond_t wake;
    bool stopping;
    char *holder; /* holderIdentity as last observed; NULL or "" when none */

    /* Read by leader_elector_is_leader from any thread. */
    atomic_bool leading;
    atomic_uint_fast64_t valid_until_ms; /* leadership lapses here without a renew */

    /* Elector thread only. */
    cJSON *observed;       /* the Lease as last read or written (for its resourceVersion) */
    char *observed_record; /* its spec, flattened: a change of this restarts observed_ms */
    uint64_t observed_ms;  /* when observed_record last changed (the elector's clock) */
    char *reported_leader; /* the last identity given to on_new_leader */
    struct kube_status st; /* the Status of the last failed Lease request, for log lines */
};

/* The server's message about the last failed Lease request ("" when none). */
static const char *status_message(const struct leader_elector *le)
{
    return log_quote(le->st.message);
}

/* Now on the elector's clock. */
static uint64_t now_ms(const struct leader_elector *le) { return clock_source_now(le->cfg.clock); }

/* A deadline on the elector's clock as one on CLOCK_MONOTONIC, for the clients: the same time
 * left from now (none left: now). */
static uint64_t client_deadline(const struct leader_elector *le, uint64_t deadline_ms)
{
    if (!le->cfg.clock)
        return deadline_ms;
    uint64_t now = now_ms(le), real = clock_now_ms();
    return deadline_ms > now ? real + (deadline_ms - now) : real;
}

/* ---- the observed record ------------------------------------------------------------- */

static const char *spec_holder(const cJSON *lease)
{
    const char *h = json_string(lease, "spec.holderIdentity");
    return h ? h : "";
}

static char *flatten_record(const cJSON *lease)
{
    const char *acquire = json_string(lease, "spec.acquireTime");
    const char *renew = json_string(lease, "spec.renewTime");
    char *s = NULL;
    if (asprintf(&s, "%s|%lld|%s|%s|%lld", spec_holder(lease),
                 json_int(lease, "spec.leaseDurationSeconds", 0), acquire ? acquire : "",
                 renew ? renew : "", json_int(lease, "spec.leaseTransitions", 0)) < 0)
        return NULL;
    return s;
}

static bool observed_is_ours(const struct leader_elector *le)
{
    return le->observed && strcmp(spec_holder(le->observed), le->identity) == 0;
}

/* client-go's isLeaseValid: the holder's term, counted on our own clock from when we saw the
 * record change, has not run out. */
static bool observed_is_valid(const struct leader_elector *le, uint64_t now_ms)
{
    if (!le->observed)
        return false;
    long long duration_s = json_int(le->observed, "spec.leaseDurationSeconds", 0);
    if (duration_s <= 0)
        return false;
    return le->observed_ms + (uint64_t)duration_s * 1000u > now_ms;
}

static void report_new_leader(struct leader_elector *le, const char *holder)
{
    if (!holder[0] || (le->reported_leader && strcmp(le->reported_leader, holder) == 0))
        return;
    char *copy = strdup(holder);
    if (!copy)
        return;
    free(le->reported_leader);
    le->reported_leader = copy;
    log_info("new leader observed", "lease=%s/%s leader=%s identity=%s", le->lease_namespace,
             le->lease_name, holder, le->identity);
    if (le->cfg.on_new_leader)
        le->cfg.on_new_leader(le->cfg.ctx, holder);
}

/* Takes ownership of lease. The observation time restarts only when the record changed. */
static void set_observed(struct leader_elector *le, cJSON *lease)
{
    char *record = flatten_record(lease);
    bool changed = !record || !le->observed_record || strcmp(record, le->observed_record) != 0;
    cJSON_Delete(le->observed);
    le->observed = lease;
    if (changed) {
        free(le->observed_record);
        le->observed_record = record;
        le->observed_ms = now_ms(le);
    } else {
        free(record);
    }

    char *holder = strdup(spec_holder(lease));
    pthread_mutex_lock(&le->mu);
    free(le->holder);
    le->holder = holder;
    pthread_mutex_unlock(&le->mu);
    report_new_leader(le, spec_holder(lease));
}

/* ---- writes ---------------------------------------------------------------------------- */

static long long lease_duration_seconds(const struct leader_elector *le)
{
    long long s = (long long)((le->cfg.lease_duration_ms + 999) / 1000);
    return s > 0 ? s : 1;
}

/* Writes holder, duration and times into lease's spec. acquire_time NULL keeps the old one. */
static int fill_spec(cJSON *lease, const char *holder, long long duration_s,
                     const char *acquire_time, const char *renew_time, long long transitions)
{
    cJSON *spec = json_ensure_object(lease, "spec");
    if (!spec)
        return KUBE_ENOMEM;
    cJSON_DeleteItemFromObjectCaseSensitive(spec, "leaseDurationSeconds");
    cJSON_DeleteItemFromObjectCaseSensitive(spec, "leaseTransitions");
    if (json_set_string(spec, "holderIdentity", holder) < 0 ||
        !cJSON_AddNumberToObject(spec, "leaseDurationSeconds", (double)duration_s) ||
        (acquire_time && json_set_string(spec, "acquireTime", acquire_time) < 0) ||
        json_set_string(spec, "renewTime", renew_time) < 0 ||
        !cJSON_AddNumberToObject(spec, "leaseTransitions", (double)transitions))
        return KUBE_ENOMEM;
    return 0;
}

static cJSON *new_lease(const struct leader_elector *le, const char *now)
{
    cJSON *lease = cJSON_CreateObject();
    cJSON *meta = lease ? json_ensure_object(lease, "metadata") : NULL;
    if (!meta || json_set_string(lease, "apiVersion", "coordination.k8s.io/v1") < 0 ||
        json_set_string(lease, "kind", "Lease") < 0 ||
        json_set_string(meta, "name", le->lease_name) < 0 ||
        json_set_string(meta, "namespace", le->lease_namespace) < 0 ||
        fill_spec(lease, le->identity, lease_duration_seconds(le), now, now, 0) < 0) {
        cJSON_Delete(lease);
        return NULL;
    }
    return lease;
}

/* PUT lease; on success the server's answer becomes the observed record. Consumes lease. */
static int replace_lease(struct leader_elector *le, cJSON *lease)
{
    cJSON *out = NULL;
    int rc = kube_replace(le->client, &KUBE_LEASES, le->lease_namespace, le->lease_name, lease,
                          &out, &le->st);
    if (rc < 0) {
        cJSON_Delete(lease);
        return rc;
    }
    if (out) {
        cJSON_Delete(lease);
        set_observed(le, out);
    } else {
        set_observed(le, lease);
    }
    return 0;
}

/* One attempt, as client-go's tryAcquireOrRenew. True when we hold the Lease afterwards. */
static bool attempt_acquire_or_renew(struct leader_elector *le)
{
    char now[28];
    clock_rfc3339_micro(now);
    long long duration_s = lease_duration_seconds(le);

    /* Fast path for a leader: renew on top of what we last wrote, without a GET. */
    if (atomic_load(&le->leading) && observed_is_ours(le) &&
        observed_is_valid(le, now_ms(le))) {
        cJSON *lease = cJSON_Duplicate(le->observed, true);
        if (lease && fill_spec(lease, le->identity, duration_s, NULL, now,
                               json_int(le->observed, "spec.leaseTransitions", 0)) == 0) {
            int rc = replace_lease(le, lease);
            if (rc == 0)
                return true;
            log_debug("lease renew on cached copy failed", "lease=%s/%s error=\"%s\" message=\"%s\"",
                      le->lease_namespace, le->lease_name, error_str(rc), status_message(le));
            if (rc == KUBE_ETIMEOUT)
                return false; /* cut off at the deadline: no time left for a GET */
        } else {
            cJSON_Delete(lease);
        }
    }

    cJSON *current = NULL;
    int rc = kube_get(le->client, &KUBE_LEASES, le->lease_namespace, le->lease_name, &current,
                      &le->st);
    if (rc == KUBE_ENOTFOUND) {
        cJSON *lease = new_lease(le, now);
        cJSON *out = NULL;
        rc = lease ? kube_create(le->client, &KUBE_LEASES, le->lease_namespace, lease, &out, &le->st)
                   : KUBE_ENOMEM;
        if (rc < 0) {
            cJSON_Delete(lease);
            if (rc != KUBE_EALREADYEXISTS)
                log_warn("lease create failed", "lease=%s/%s error=\"%s\" message=\"%s\"", le->lease_namespace,
                         le->lease_name, error_str(rc), status_message(le));
            return false;
        }
        if (out) {
            cJSON_Delete(lease);
            lease = out;
        }
        set_observed(le, lease);
        return true;
    }
    if (rc < 0) {
        log_warn("lease get failed", "lease=%s/%s error=\"%s\" message=\"%s\"", le->lease_namespace,
                 le->lease_name, error_str(rc), status_message(le));
        return false;
    }
    if (!current)
        return false;

    set_observed(le, current); /* ownership moves; le->observed == current */
    const char *holder = spec_holder(current);
    bool ours = strcmp(holder, le->identity) == 0;
    if (holder[0] && !ours && observed_is_valid(le, now_ms(le)))
        return false; /* held by someone else and not expired */

    cJSON *lease = cJSON_Duplicate(current, true);
    if (!lease)
        return false;
    long long transitions = json_int(current, "spec.leaseTransitions", 0);
    rc = fill_spec(lease, le->identity, duration_s, ours ? NULL : now, now,
                   ours ? transitions : transitions + 1);
    if (ours && !json_string(lease, "spec.acquireTime") && rc == 0)
        rc = json_set_string(cJSON_GetObjectItemCaseSensitive(lease, "spec"), "acquireTime", now);
    if (rc < 0) {
        cJSON_Delete(lease);
        return false;
    }
    rc = replace_lease(le, lease);
    if (rc < 0) {
        if (rc == KUBE_ECONFLICT)
            log_debug("lease update lost a race", "lease=%s/%s identity=%s", le->lease_namespace,
                      le->lease_name, le->identity);
        else
            log_warn("lease update failed", "lease=%s/%s error=\"%s\" message=\"%s\"", le->lease_namespace,
                     le->lease_name, error_str(rc), status_message(le));
        return false;
    }
    return true;
}

/* One attempt whose requests all end by deadline_ms (the elector's clock), as client-go runs
 * tryAcquireOrRenew under a context with the renew deadline. */
static bool try_acquire_or_renew(struct leader_elector *le, uint64_t deadline_ms)
{
    uint64_t prev = kube_set_thread_deadline(client_deadline(le, deadline_ms));
    bool held = attempt_acquire_or_renew(le);
    kube_set_thread_deadline(prev);
    return held;
}

/* Moves the fenced client's write deadline (no-op without one). */
static void fence_writes_at(struct leader_elector *le, uint64_t until_ms)
{
    if (le->cfg.fenced_client)
        kube_client_set_write_deadline(le->cfg.fenced_client, until_ms);
}

/* client-go's release: an empty holder and a one-second term, so a standby need not wait. */
static void release_lease(struct leader_elector *le)
{
    if (!observed_is_ours(le))
        return;
    char now[28];
    clock_rfc3339_micro(now);
    cJSON *lease = cJSON_Duplicate(le->observed, true);
    if (!lease || fill_spec(lease, "", 1, now, now,
                            json_int(le->observed, "spec.leaseTransitions", 0)) < 0) {
        cJSON_Delete(lease);
        return;
    }
    int rc = replace_lease(le, lease);
    if (rc < 0)
        log_warn("lease release failed", "lease=%s/%s error=\"%s\" message=\"%s\"", le->lease_namespace,
                 le->lease_name, error_str(rc), status_message(le));
    else
        log_info("lease released", "lease=%s/%s identity=%s", le->lease_namespace,
                 le->lease_name, le->identity);
}

/* ---- the elector thread -------------------------------------------------------------- */

/* Sleeps until the deadline (the elector's clock) or until stop. Returns false when stopping. */
static bool wait_until(struct leader_elector *le, uint64_t deadline_ms)
{
    pthread_mutex_lock(&le->mu);
    for (;;) {
        uint64_t now = now_ms(le);
        if (le->stopping || now >= deadline_ms)
            break;
        struct timespec ts;
        clock_deadline_realtime(&ts, clock_source_sleep_ms(le->cfg.clock, deadline_ms - now));
        pthread_cond_timedwait(&le->wake, &le->mu, &ts);
    }
    bool running = !le->stopping;
    pthread_mutex_unlock(&le->mu);
    return running;
}

static bool is_stopping(struct leader_elector *le)
{
    pthread_mutex_lock(&le->mu);
    bool s = le->stopping;
    pthread_mutex_unlock(&le->mu);
    return s;
}

/* A little jitter spreads candidates apart; kept small (20%) so a takeover after the holder
 * dies stays close to leaseDuration + retryPeriod. */
static uint64_t jittered_retry(const struct leader_elector *le)
{
    return le->cfg.retry_period_ms + clock_jitter(le->cfg.retry_period_ms / 5 + 1);
}

static void stop_leading(struct leader_elector *le, const char *why)
{
    fence_writes_at(le, KUBE_WRITES_FENCED);
    atomic_store(&le->leading, false);
    atomic_store(&le->valid_until_ms, 0);
    log_warn("stopped leading", "lease=%s/%s identity=%s reason=\"%s\"", le->lease_namespace,
             le->lease_name, le->identity, why);
    if (le->cfg.on_stopped_leading)
        le->cfg.on_stopped_leading(le->cfg.ctx);
}

/* Returns false when stopping before the Lease was acquired. */
static bool acquire(struct leader_elector *le)
{
    log_info("trying to acquire lease", "lease=%s/%s identity=%s", le->lease_namespace,
             le->lease_name, le->identity);
    for (;;) {
        if (is_stopping(le))
            return false;
        uint64_t start = now_ms(le);
        uint64_t term_end = start + le->cfg.renew_deadline_ms;
        /* A write that took past the renew deadline would start a term already over. */
        if (try_acquire_or_renew(le, term_end) && now_ms(le) < term_end) {
            atomic_store(&le->valid_until_ms, term_end);
            fence_writes_at(le, client_deadline(le, term_end));
            atomic_store(&le->leading, true);
            log_info("started leading", "lease=%s/%s identity=%s", le->lease_namespace,
                     le->lease_name, le->identity);
            if (le->cfg.on_started_leading)
                le->cfg.on_started_leading(le->cfg.ctx);
            return true;
        }
        if (!wait_until(le, start + jittered_retry(le)))
            return false;
    }
}

/* Renews every retry_period until stop (returns true) or until leadership is lost: the Lease
 * shows another holder, or renew_deadline passed without a successful renew (returns false). */
static bool renew(struct leader_elector *le)
{
    uint64_t last_attempt = now_ms(le);
    for (;;) {
        if (!wait_until(le, last_attempt + le->cfg.retry_period_ms))
            return true;
        last_attempt = now_ms(le);
        uint64_t term_end = atomic_load(&le->valid_until_ms);
        /* As client-go: the renew's requests are cut off when the term ends, so leadership
         * ends on time even when the server holds them. */
        bool renewed = try_acquire_or_renew(le, term_end);
        if (renewed && now_ms(le) < term_end) {
            uint64_t next = last_attempt + le->cfg.renew_deadline_ms;
            atomic_store(&le->valid_until_ms, next);
            fence_writes_at(le, client_deadline(le, next));
            continue;
        }
        if (le->observed && !observed_is_ours(le)) {
            stop_leading(le, "lease taken by another candidate");
            return false;
        }
        if (now_ms(le) >= atomic_load(&le->valid_until_ms)) {
            stop_leading(le, "renew deadline passed");
            return false;
        }
    }
}

static void *elector_main(void *arg)
{
    struct leader_elector *le = arg;
    for (;;) {
        if (!acquire(le))
            break;
        if (renew(le))
            break;
        /* Lost: back to candidate after one retry period. */
        if (!wait_until(le, now_ms(le) + jittered_retry(le)))
            break;
    }
    if (atomic_load(&le->leading)) {
        fence_writes_at(le, KUBE_WRITES_FENCED);
        if (!le->cfg.keep_lease_on_stop) {
            uint64_t prev = kube_set_thread_deadline(clock_now_ms() + le->cfg.renew_deadline_ms);
            release_lease(le);
            kube_set_thread_deadline(prev);
        }
        atomic_store(&le->leading, false);
        atomic_store(&le->valid_until_ms, 0);
        log_info("stopped leading", "lease=%s/%s identity=%s reason=shutdown",
                 le->lease_namespace, le->lease_name, le->identity);
        if (le->cfg.on_stopped_leading)
            le->cfg.on_stopped_leading(le->cfg.ctx);
    }
    return NULL;
}

/* ---- public surface ------------------------------------------------------------------ */

static void elector_free(struct leader_elector *le)
{
    pthread_mutex_destroy(&le->mu);
    pthread_cond_destroy(&le->wake);
    free(le->lease_namespace);
    free(le->lease_name);
    free(le->identity);
    free(le->holder);
    cJSON_Delete(le->observed);
    free(le->observed_record);
    free(le->reported_leader);
    kube_status_clear(&le->st);
    free(le);
}

int leader_elector_start(struct kube_client *c, const struct leader_election_config *cfg,
                         struct leader_elector **out)
{
    *out = NULL;
    if (!c || !cfg || !cfg->lease_namespace || !cfg->lease_namespace[0] || !cfg->lease_name ||
        !cfg->lease_name[0] || !cfg->identity || !cfg->identity[0])
        return KUBE_EINVAL;
    struct leader_election_config conf = *cfg;
    if (!conf.lease_duration_ms)
        conf.lease_duration_ms = DEFAULT_LEASE_DURATION_MS;
    if (!conf.renew_deadline_ms)
        conf.renew_deadline_ms = DEFAULT_RENEW_DEADLINE_MS;
    if (!conf.retry_period_ms)
        conf.retry_period_ms = DEFAULT_RETRY_PERIOD_MS;
    /* As client-go: the leader must give up before anyone else may take over. */
    if (conf.renew_deadline_ms >= conf.lease_duration_ms ||
        conf.retry_period_ms >= conf.renew_deadline_ms)
        return KUBE_EINVAL;
    /* Fencing its own client would keep the elector from ever writing the Lease. */
    if (conf.fenced_client == c)
        return KUBE_EINVAL;

    struct leader_elector *le = calloc(1, sizeof(*le));
    if (!le)
        return KUBE_ENOMEM;
    pthread_mutex_init(&le->mu, NULL);
    pthread_cond_init(&le->wake, NULL);
    atomic_init(&le->leading, false);
    atomic_init(&le->valid_until_ms, 0);
    le->client = c;
    le->lease_namespace = strdup(conf.lease_namespace);
    le->lease_name = strdup(conf.lease_name);
    le->identity = strdup(conf.identity);
    if (!le->lease_namespace || !le->lease_name || !le->identity) {
        elector_free(le);
        return KUBE_ENOMEM;
    }
    conf.lease_namespace = le->lease_namespace;
    conf.lease_name = le->lease_name;
    conf.identity = le->identity;
    le->cfg = conf;
    fence_writes_at(le, KUBE_WRITES_FENCED); /* a candidate writes nothing until it leads */
    if (pthread_create(&le->thread, NULL, elector_main, le) != 0) {
        elector_free(le);
        return KUBE_ENOMEM;
    }
    *out = le;
    return 0;
}

bool leader_elector_is_leader(struct leader_elector *le)
{
    /* The deadline check makes leadership lapse on time even while the elector thread is
     * stuck in a slow request. */
    return le && atomic_load_explicit(&le->leading, memory_order_acquire) &&
           now_ms(le) < atomic_load_explicit(&le->valid_until_ms, memory_order_acquire);
}

char *leader_elector_holder(struct leader_elector *le)
{
    if (!le)
        return NULL;
    pthread_mutex_lock(&le->mu);
    char *h = le->holder && le->holder[0] ? strdup(le->holder) : NULL;
    pthread_mutex_unlock(&le->mu);
    return h;
}

void leader_elector_stop(struct leader_elector *le)
{
    if (!le)
        return;
    pthread_mutex_lock(&le->mu);
    le->stopping = true;
    pthread_cond_broadcast(&le->wake);
    pthread_mutex_unlock(&le->mu);
    pthread_join(le->thread, NULL);
    elector_free(le);
}
