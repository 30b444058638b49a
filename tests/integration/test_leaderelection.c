/* Leader election on a Lease against the API-server double: one leader at a time, takeover
 * after the lease runs out, fast takeover after a release, loss when renewals fail.
 * Durations are short: lease 2000 ms, renew deadline 1500 ms, retry 300 ms. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kube/client.h"
#include "kube/config.h"
#include "kube/leaderelection.h"
#include "support/apiserver.h"
#include "support/kube_test.h"
#include "util/clock.h"
#include "util/json.h"

#define LEASE_MS 2000
#define RENEW_DEADLINE_MS 1500
#define RETRY_MS 300
#define LEASE_NS "default"
#define LEASE_NAME "mpijob-operator-lock"

static struct test_apiserver srv;

struct candidate {
    const char *identity;
    struct kube_client *client;
    struct leader_elector *le;
    atomic_int started;
    atomic_int stopped;
    atomic_int new_leader_calls;
    atomic_uint_fast64_t started_ms, stopped_ms; /* when the callbacks last ran */
    pthread_mutex_t mu; /* guards last_new_leader */
    char last_new_leader[64];
};

static void on_started(void *ctx)
{
    struct candidate *cand = ctx;
    atomic_store(&cand->started_ms, clock_now_ms());
    atomic_fetch_add(&cand->started, 1);
}
static void on_stopped(void *ctx)
{
    struct candidate *cand = ctx;
    atomic_store(&cand->stopped_ms, clock_now_ms());
    atomic_fetch_add(&cand->stopped, 1);
}
static void on_new_leader(void *ctx, const char *identity)
{
    struct candidate *cand = ctx;
    pthread_mutex_lock(&cand->mu);
    snprintf(cand->last_new_leader, sizeof(cand->last_new_leader), "%s", identity);
    pthread_mutex_unlock(&cand->mu);
    atomic_fetch_add(&cand->new_leader_calls, 1);
}

static struct kube_client *new_client(const struct kube_client_options *opts)
{
    return test_kube_client(&srv, opts);
}

/* fenced: the client of the candidate's "controller", fenced by its elector (may be NULL). */
static void candidate_start_fenced(struct candidate *cand, const char *identity, bool keep_lease_on_stop,
                                   const struct kube_client_options *opts, struct kube_client *fenced)
{
    memset(cand, 0, sizeof(*cand));
    pthread_mutex_init(&cand->mu, NULL);
    cand->identity = identity;
    cand->client = new_client(opts);
    struct leader_election_config cfg = {
        .lease_namespace = LEASE_NS,
        .lease_name = LEASE_NAME,
        .identity = identity,
        .lease_duration_ms = LEASE_MS,
        .renew_deadline_ms = RENEW_DEADLINE_MS,
        .retry_period_ms = RETRY_MS,
        .keep_lease_on_stop = keep_lease_on_stop,
        .fenced_client = fenced,
        .on_started_leading = on_started,
        .on_stopped_leading = on_stopped,
        .on_new_leader = on_new_leader,
        .ctx = cand,
    };
    cr_assert_eq(leader_elector_start(cand->client, &cfg, &cand->le), 0);
}

static void candidate_start(struct candidate *cand, const char *identity, bool keep_lease_on_stop,
                            const struct kube_client_options *opts)
{
    candidate_start_fenced(cand, identity, keep_lease_on_stop, opts, NULL);
}

static void candidate_stop(struct candidate *cand)
{
    leader_elector_stop(cand->le);
    cand->le = NULL;
}

static void candidate_free(struct candidate *cand)
{
    if (cand->le)
        candidate_stop(cand);
    kube_client_free(cand->client);
    cand->client = NULL;
    pthread_mutex_destroy(&cand->mu);
}

/* The identity last given to on_new_leader. */
static void last_new_leader(struct candidate *cand, char out[64])
{
    pthread_mutex_lock(&cand->mu);
    memcpy(out, cand->last_new_leader, 64);
    pthread_mutex_unlock(&cand->mu);
}

/* Polls until cand leads; the milliseconds it took, or -1 after timeout_ms. */
static long wait_leading(struct candidate *cand, uint64_t timeout_ms)
{
    uint64_t t0 = clock_now_ms();
    while (clock_now_ms() - t0 < timeout_ms) {
        if (leader_elector_is_leader(cand->le))
            return (long)(clock_now_ms() - t0);
        clock_sleep_ms(10);
    }
    return -1;
}

static cJSON *get_lease(void)
{
    struct kube_client *c = new_client(NULL);
    cJSON *lease = NULL;
    cr_assert_eq(kube_get(c, &KUBE_LEASES, LEASE_NS, LEASE_NAME, &lease, NULL), 0);
    kube_client_free(c);
    return lease;
}

static int count_requests(const char *method, const char *path)
{
    cJSON *log = test_apiserver_log(&srv, 0);
    int n = 0;
    cJSON *e;
    cJSON_ArrayForEach(e, log) {
        const char *m = json_string(e, "method");
        const char *p = json_string(e, "path");
        if (m && p && strcmp(m, method) == 0 && strcmp(p, path) == 0)
            n++;
    }
    cJSON_Delete(log);
    return n;
}

static void start(void) { cr_assert_eq(test_apiserver_start(&srv), 0, "API server did not start"); }
static void stop(void) { test_apiserver_stop(&srv); }

TestSuite(leaderelection, .init = start, .fini = stop, .timeout = 60);

Test(leaderelection, exactly_one_of_two_candidates_leads)
{
    struct candidate a, b;
    candidate_start(&a, "candidate-a", false, NULL);
    candidate_start(&b, "candidate-b", false, NULL);

    uint64_t t0 = clock_now_ms();
    while (!leader_elector_is_leader(a.le) && !leader_elector_is_leader(b.le)) {
        cr_assert_lt(clock_now_ms() - t0, 3000, "nobody became leader");
        clock_sleep_ms(10);
    }
    struct candidate *leader = leader_elector_is_leader(a.le) ? &a : &b;
    struct candidate *standby = leader == &a ? &b : &a;

    /* Over twice the lease duration: the leader keeps renewing, the standby never leads. */
    t0 = clock_now_ms();
    while (clock_now_ms() - t0 < 2 * LEASE_MS) {
        bool la = leader_elector_is_leader(a.le), lb = leader_elector_is_leader(b.le);
        cr_assert(!(la && lb), "both candidates lead at once");
        cr_assert(leader_elector_is_leader(leader->le), "%s lost the lease while renewing",
                  leader->identity);
        clock_sleep_ms(5);
    }
    cr_assert_eq(atomic_load(&leader->started), 1);
    cr_assert_eq(atomic_load(&leader->stopped), 0);
    cr_assert_eq(atomic_load(&standby->started), 0);
    cr_assert_eq(atomic_load(&standby->stopped), 0);

    char *seen = leader_elector_holder(standby->le);
    cr_assert_not_null(seen);
    cr_assert_str_eq(seen, leader->identity);
    free(seen);
    char reported[64];
    last_new_leader(standby, reported);
    cr_assert_str_eq(reported, leader->identity);
    cr_assert_geq(atomic_load(&standby->new_leader_calls), 1);

    cJSON *lease = get_lease();
    cr_assert_str_eq(json_string(lease, "spec.holderIdentity"), leader->identity);
    cr_assert_eq(json_int(lease, "spec.leaseDurationSeconds", -1), LEASE_MS / 1000);
    const char *renew = json_string(lease, "spec.renewTime");
    cr_assert_not_null(renew);
    /* MicroTime: 2006-01-02T15:04:05.000000Z */
    cr_assert_eq(strlen(renew), 27, "renewTime %s", renew);
    cr_assert_eq(renew[19], '.');
    cr_assert_eq(renew[26], 'Z');
    cr_assert_not_null(json_string(lease, "spec.acquireTime"));
    cJSON_Delete(lease);

    if (srv.is_double) {
        /* Both tried to create it; the loser got AlreadyExists and did not write again. */
        cr_assert_geq(count_requests("POST", "/apis/coordination.k8s.io/v1/namespaces/" LEASE_NS
                                             "/leases"),
                      1);
        cr_assert_geq(count_requests("PUT", "/apis/coordination.k8s.io/v1/namespaces/" LEASE_NS
                                            "/leases/" LEASE_NAME),
                      4, "the leader renews every retry period");
    }

    candidate_free(standby);
    candidate_free(leader);
}

Test(leaderelection, standby_takes_over_after_the_lease_runs_out)
{
    struct candidate a, b;
    candidate_start(&a, "candidate-a", true, NULL);
    cr_assert_geq(wait_leading(&a, 3000), 0, "a did not become leader");
    candidate_start(&b, "candidate-b", false, NULL);
    clock_sleep_ms(LEASE_MS);
    cr_assert(!leader_elector_is_leader(b.le), "b took a lease that is being renewed");

    /* a stops renewing without releasing: b must wait for the lease to run out. */
    uint64_t t0 = clock_now_ms();
    candidate_stop(&a);
    cr_assert_eq(atomic_load(&a.started), 1);
    cr_assert_eq(atomic_load(&a.stopped), 1, "on_stopped_leading when a leader stops");
    cr_assert_geq(wait_leading(&b, 4 * LEASE_MS), 0, "b never took over");
    long took = (long)(clock_now_ms() - t0);
    /* Earliest: the lease duration after a's last renew, which was at most one retry period
     * before the stop. Latest: b sees the last renew up to one jittered retry period late,
     * then polls again up to one jittered retry period after the lease ran out. */
    cr_assert_geq(took, LEASE_MS - RETRY_MS - 200, "b took over after %ld ms, before the lease ran out",
                  took);
    cr_assert_leq(took, LEASE_MS + 3 * RETRY_MS, "b took over only after %ld ms", took);
    /* on_started_leading runs on the elector's thread just after it leads: give it a moment on
     * a loaded machine instead of racing it. */
    for (uint64_t end = clock_now_ms() + 2000; atomic_load(&b.started) != 1 && clock_now_ms() < end;)
        clock_sleep_ms(10);
    cr_assert_eq(atomic_load(&b.started), 1);

    cJSON *lease = get_lease();
    cr_assert_str_eq(json_string(lease, "spec.holderIdentity"), "candidate-b");
    cr_assert_eq(json_int(lease, "spec.leaseTransitions", -1), 1);
    cJSON_Delete(lease);

    candidate_free(&a);
    candidate_free(&b);
}

Test(leaderelection, released_lease_is_taken_over_at_once)
{
    struct candidate a, b;
    candidate_start(&a, "candidate-a", false, NULL);
    cr_assert_geq(wait_leading(&a, 3000), 0, "a did not become leader");
    candidate_start(&b, "candidate-b", false, NULL);
    clock_sleep_ms(2 * RETRY_MS);
    cr_assert(!leader_elector_is_leader(b.le));

    uint64_t t0 = clock_now_ms();
    candidate_stop(&a);
    cr_assert_eq(atomic_load(&a.stopped), 1, "on_stopped_leading when a leader stops");
    cr_assert_geq(wait_leading(&b, 4 * LEASE_MS), 0, "b never took over");
    long took = (long)(clock_now_ms() - t0);
    cr_assert_lt(took, LEASE_MS / 2, "b took %ld ms; a released lease needs no waiting", took);
    cr_assert_eq(atomic_load(&b.started), 1);

    candidate_stop(&b);
    cr_assert_eq(atomic_load(&b.stopped), 1);
    cJSON *lease = get_lease();
    cr_assert_str_eq(json_string(lease, "spec.holderIdentity"), "", "stopped leader releases");
    cr_assert_eq(json_int(lease, "spec.leaseDurationSeconds", -1), 1);
    cJSON_Delete(lease);

    candidate_free(&a);
    candidate_free(&b);
}

/* The holder's renewTime is far in the past by our wall clock; expiry must still be judged
 * from when this candidate first saw the record, as client-go does, so clock skew between
 * machines cannot make a candidate steal a live lease. */
Test(leaderelection, expiry_is_measured_on_the_local_clock)
{
    struct kube_client *admin = new_client(NULL);
    cJSON *lease = cJSON_Parse(
        "{\"apiVersion\":\"coordination.k8s.io/v1\",\"kind\":\"Lease\",\"metadata\":{\"name\":\"" LEASE_NAME
        "\"},\"spec\":{\"holderIdentity\":\"skewed-holder\",\"leaseDurationSeconds\":2,"
        "\"acquireTime\":\"2001-01-01T00:00:00.000000Z\",\"renewTime\":\"2001-01-01T00:00:00.000000Z\","
        "\"leaseTransitions\":4}}");
    cr_assert_eq(kube_create(admin, &KUBE_LEASES, LEASE_NS, lease, NULL, NULL), 0);
    cJSON_Delete(lease);

    struct candidate a;
    candidate_start(&a, "candidate-a", false, NULL);
    long took = wait_leading(&a, 4 * LEASE_MS);
    cr_assert_geq(took, LEASE_MS - 100, "took over after %ld ms from a lease it had seen only now",
                  took);
    cr_assert_leq(took, LEASE_MS + 3 * RETRY_MS);
    char reported[64];
    last_new_leader(&a, reported);
    cr_assert_str_eq(reported, "candidate-a");

    lease = get_lease();
    cr_assert_str_eq(json_string(lease, "spec.holderIdentity"), "candidate-a");
    cr_assert_eq(json_int(lease, "spec.leaseTransitions", -1), 5);
    cJSON_Delete(lease);
    candidate_free(&a);
    kube_client_free(admin);
}

/* When renewals fail for longer than the renew deadline, leadership ends at once (is_leader
 * false, on_stopped_leading), and the elector competes again when the server comes back. */
Test(leaderelection, failed_renewals_end_leadership_and_it_comes_back)
{
    if (!srv.is_double)
        cr_skip_test("needs the API-server double (fault injection)");
    struct kube_client_options opts = {.max_retries = 1, .backoff_base_ms = 10,
                                       .backoff_max_ms = 20, .timeout_ms = 1000};
    struct candidate a;
    candidate_start(&a, "candidate-a", false, &opts);
    cr_assert_geq(wait_leading(&a, 3000), 0, "a did not become leader");

    cr_assert_eq(test_apiserver_fault(&srv, "{\"failNext\":{\"count\":100000,\"code\":500}}"), 0);
    uint64_t t0 = clock_now_ms();
    while (leader_elector_is_leader(a.le)) {
        cr_assert_lt(clock_now_ms() - t0, RENEW_DEADLINE_MS + 2 * RETRY_MS,
                     "still leading without renewals");
        clock_sleep_ms(10);
    }
    long lost_after = (long)(clock_now_ms() - t0);
    cr_assert_geq(lost_after, RENEW_DEADLINE_MS - 2 * RETRY_MS - 100,
                  "gave up after %ld ms, before the renew deadline", lost_after);
    t0 = clock_now_ms();
    while (atomic_load(&a.stopped) == 0) {
        cr_assert_lt(clock_now_ms() - t0, 3000, "on_stopped_leading not called");
        clock_sleep_ms(10);
    }

    cr_assert_eq(test_apiserver_fault(&srv, "{\"failNext\":{\"count\":0,\"code\":500}}"), 0);
    cr_assert_geq(wait_leading(&a, 3000), 0, "did not lead again once the server recovered");
    cr_assert_eq(atomic_load(&a.started), 2);
    cr_assert_eq(atomic_load(&a.stopped), 1);
    candidate_free(&a);
    cr_assert_eq(atomic_load(&a.stopped), 2);
}

Test(leaderelection, bad_config_is_refused)
{
    struct kube_client *c = new_client(NULL);
    struct leader_elector *le = NULL;
    struct leader_election_config cfg = {.lease_namespace = LEASE_NS, .lease_name = LEASE_NAME,
                                         .identity = "x", .lease_duration_ms = 1000,
                                         .renew_deadline_ms = 1000, .retry_period_ms = 100};
    cr_assert_eq(leader_elector_start(c, &cfg, &le), KUBE_EINVAL, "renew deadline >= lease");
    cfg.renew_deadline_ms = 500;
    cfg.identity = "";
    cr_assert_eq(leader_elector_start(c, &cfg, &le), KUBE_EINVAL, "empty identity");
    cr_assert_null(le);
    kube_client_free(c);
}

/* ---- fencing ----------------------------------------------------------------------------- */

static int create_configmap(struct kube_client *c, const char *name)
{
    char text[256];
    snprintf(text, sizeof(text), "{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"%s\"}}",
             name);
    cJSON *cm = cJSON_Parse(text);
    int rc = kube_create(c, &KUBE_CONFIGMAPS, LEASE_NS, cm, NULL, NULL);
    cJSON_Delete(cm);
    return rc;
}

/* The leader's "controller": writes a ConfigMap every 20 ms through its fenced client until
 * the first write is refused. */
struct writer {
    struct kube_client *c;
    int ok;
    uint64_t last_ok_ms; /* when the last successful write had returned */
    int refused_rc;
    uint64_t refused_ms;
};

static void *writer_run(void *arg)
{
    struct writer *w = arg;
    for (int i = 0;; i++) {
        char name[64];
        snprintf(name, sizeof(name), "fenced-%d", i);
        int rc = create_configmap(w->c, name);
        uint64_t now = clock_now_ms();
        if (rc != 0) {
            w->refused_rc = rc;
            w->refused_ms = now;
            return NULL;
        }
        w->ok++;
        w->last_ok_ms = now;
        clock_sleep_ms(20);
    }
}

/* ConfigMap creates the server answered 201, and the highest seq among them. */
static int server_configmap_creates(int *max_seq)
{
    cJSON *log = test_apiserver_log(&srv, 0);
    int n = 0;
    cJSON *e;
    *max_seq = 0;
    cJSON_ArrayForEach(e, log) {
        const char *m = json_string(e, "method");
        const char *r = json_string(e, "resource");
        if (m && r && strcmp(m, "POST") == 0 && strcmp(r, "configmaps") == 0 && json_int(e, "code", 0) == 201) {
            n++;
            *max_seq = (int)json_int(e, "seq", 0);
        }
    }
    cJSON_Delete(log);
    return n;
}

/* The seq of the first Lease update the server accepted from holder, or 0. */
static int first_lease_write_by(const char *holder)
{
    cJSON *log = test_apiserver_log(&srv, 0);
    int seq = 0;
    cJSON *e;
    cJSON_ArrayForEach(e, log) {
        const char *m = json_string(e, "method");
        const char *r = json_string(e, "resource");
        cJSON *body = cJSON_GetObjectItemCaseSensitive(e, "body");
        const char *h = body ? json_string(body, "spec.holderIdentity") : NULL;
        if (m && r && h && strcmp(m, "PUT") == 0 && strcmp(r, "leases") == 0 && strcmp(h, holder) == 0 &&
            json_int(e, "code", 0) == 200) {
            seq = (int)json_int(e, "seq", 0);
            break;
        }
    }
    cJSON_Delete(log);
    return seq;
}

/* The server holds the leader's renewals for 5 s, far past the renew deadline. As client-go:
 * the renew is cut off when the term ends, leadership ends then (not when the held request
 * comes back), and the leader's controller client refuses writes from that moment, locally;
 * its last write reached the server before the standby could take the Lease. */
Test(leaderelection, held_renew_ends_leadership_at_the_renew_deadline_and_fences_writes)
{
    if (!srv.is_double)
        cr_skip_test("needs the API-server double (fault injection)");
    struct kube_client *ctl_a = new_client(NULL), *ctl_b = new_client(NULL);
    struct candidate a, b;
    candidate_start_fenced(&a, "candidate-a", false, NULL, ctl_a);
    cr_assert_geq(wait_leading(&a, 3000), 0, "a did not become leader");
    struct writer w = {.c = ctl_a};
    pthread_t writer;
    pthread_create(&writer, NULL, writer_run, &w);
    candidate_start_fenced(&b, "candidate-b", false, NULL, ctl_b);
    clock_sleep_ms(3 * RETRY_MS);
    cr_assert(!leader_elector_is_leader(b.le));
    int before_seq, before = server_configmap_creates(&before_seq);
    cr_assert_eq(create_configmap(ctl_b, "from-standby"), KUBE_ENOTLEADER, "a standby's writes are fenced");
    cr_assert_geq(server_configmap_creates(&before_seq), before);

    uint64_t t_fault = clock_now_ms();
    cr_assert_eq(test_apiserver_fault(&srv, "{\"delayLeases\":{\"seconds\":5,\"holder\":\"candidate-a\"}}"), 0);
    for (uint64_t end = t_fault + 4000; atomic_load(&a.stopped) == 0;) {
        cr_assert_lt(clock_now_ms(), end, "a never stopped leading");
        clock_sleep_ms(5);
    }
    uint64_t stopped_ms = atomic_load(&a.stopped_ms);
    long after = (long)(stopped_ms - t_fault);
    /* a's term began with its last successful renew, at most one retry period before the fault,
     * and ends renew_deadline after that; the held renew (5 s) must not keep it going. */
    cr_assert_leq(after, RENEW_DEADLINE_MS + 400, "a stopped leading %ld ms after its renewals were held", after);
    cr_assert_geq(after, RENEW_DEADLINE_MS - RETRY_MS - 100, "a stopped leading after only %ld ms", after);
    cr_assert(!leader_elector_is_leader(a.le));

    pthread_join(writer, NULL);
    cr_assert_eq(w.refused_rc, KUBE_ENOTLEADER, "the writer ended with %d (%s)", w.refused_rc,
                 error_str(w.refused_rc));
    cr_assert_gt(w.ok, 0);
    cr_assert_leq(w.last_ok_ms, stopped_ms + 50, "a write succeeded %ld ms after leadership ended",
                  (long)(w.last_ok_ms - stopped_ms));
    cr_assert_geq(w.refused_ms + 50, t_fault + RENEW_DEADLINE_MS - RETRY_MS - 100,
                  "writes were refused before the term could have ended");

    /* Refused locally: a write attempted now never reaches the server. */
    int seq_now, sent = server_configmap_creates(&seq_now);
    cr_assert(sent >= w.ok && sent <= w.ok + 1, "server saw %d creates, the writer %d", sent, w.ok);
    cr_assert_eq(create_configmap(ctl_a, "after-the-deadline"), KUBE_ENOTLEADER);
    int seq_later;
    cr_assert_eq(server_configmap_creates(&seq_later), sent, "a fenced write reached the server");

    /* The standby takes over once the lease has run out, after a's last write. */
    cr_assert_geq(wait_leading(&b, 4 * LEASE_MS), 0, "b never took over");
    for (uint64_t end = clock_now_ms() + 2000; atomic_load(&b.started) != 1 && clock_now_ms() < end;)
        clock_sleep_ms(10);
    cr_assert_eq(atomic_load(&b.started), 1);
    cr_assert_lt(w.last_ok_ms, atomic_load(&b.started_ms), "a wrote after b started leading");
    int b_seq = first_lease_write_by("candidate-b");
    cr_assert_gt(b_seq, 0, "no Lease update by b in the server's log");
    cr_assert_lt(seq_later, b_seq, "a's last write (seq %d) reached the server after b took the Lease (seq %d)",
                 seq_later, b_seq);
    /* b's own controller may write now. */
    cr_assert_eq(create_configmap(ctl_b, "from-the-new-leader"), 0);

    cr_assert_eq(test_apiserver_fault(&srv, "{\"delayLeases\":0}"), 0);
    candidate_free(&b);
    candidate_free(&a);
    kube_client_free(ctl_a);
    kube_client_free(ctl_b);
}

Test(leaderelection, an_elector_cannot_fence_its_own_client)
{
    struct kube_client *c = new_client(NULL);
    struct leader_elector *le = NULL;
    struct leader_election_config cfg = {.lease_namespace = LEASE_NS, .lease_name = LEASE_NAME,
                                         .identity = "x", .fenced_client = c};
    cr_assert_eq(leader_elector_start(c, &cfg, &le), KUBE_EINVAL);
    cr_assert_null(le);
    kube_client_free(c);
}
