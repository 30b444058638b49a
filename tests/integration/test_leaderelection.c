/* Leader election on a Lease against the API server: one leader at a time, takeover after the
 * lease runs out, fast takeover after a release, loss when renewals fail.
 *
 * The lease's timing runs on clocks the test moves by hand (support/manual_clock.h), one per
 * candidate: lease 15 s, renew deadline 10 s, retry 2 s on those clocks, and each step moves every
 * running candidate's clock by the longest jittered retry period, one candidate after the other,
 * waiting each time until the candidate has acted on it. A takeover is checked not to come a step
 * before the lease has run out and to come at the first step after, however slow the machine is.
 * The fencing test runs in real time (the cut-off of a held request is the client's, on
 * CLOCK_MONOTONIC), with durations scaled by the tests' time factor and checks that do not
 * measure how long anything took. */
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
#include "support/deadline.h"
#include "support/kube_test.h"
#include "support/manual_clock.h"
#include "support/request_log.h"
#include "util/clock.h"
#include "util/json.h"

#define LEASE_MS 15000
#define RENEW_DEADLINE_MS 10000
#define RETRY_MS 2000
/* The longest jittered retry period (leaderelection.c): a step this long brings every
 * candidate's next attempt. */
#define STEP_MS (RETRY_MS + RETRY_MS / 5 + 1)
#define LEASE_NS "default"
#define LEASE_NAME "mpijob-operator-lock"
#define LEASES_PATH "/apis/coordination.k8s.io/v1/namespaces/" LEASE_NS "/leases"

static struct test_apiserver srv;

struct candidate {
    const char *identity;
    struct kube_client *client;
    struct leader_elector *le;
    struct manual_clock clock; /* its own clock, unless it runs in real time */
    bool real_time;
    atomic_int started;
    atomic_int stopped;
    atomic_int new_leader_calls;
    atomic_uint_fast64_t started_ms, stopped_ms; /* CLOCK_MONOTONIC, when the callbacks last ran */
    pthread_mutex_t mu; /* guards last_new_leader and the lease writes below */
    char last_new_leader[64];
    int lease_writes_ok;                          /* Lease PUTs answered 200 */
    uint64_t lease_write_done_ms[2];              /* when the last two of them returned */
};

/* The test's time on the candidates' clocks: how far the steps have moved them. */
static uint64_t elapsed_ms;

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

/* Every request of the candidate's own client: the Lease writes it got through, and when. */
static void on_request(void *ctx, const char *verb, long http_code, uint64_t ms)
{
    struct candidate *cand = ctx;
    if (strcmp(verb, "PUT") != 0 || http_code != 200)
        return;
    pthread_mutex_lock(&cand->mu);
    cand->lease_writes_ok++;
    cand->lease_write_done_ms[0] = cand->lease_write_done_ms[1];
    cand->lease_write_done_ms[1] = clock_now_ms();
    pthread_mutex_unlock(&cand->mu);
}

static int lease_writes(struct candidate *cand)
{
    pthread_mutex_lock(&cand->mu);
    int n = cand->lease_writes_ok;
    pthread_mutex_unlock(&cand->mu);
    return n;
}

static struct kube_client *new_client(const struct kube_client_options *opts)
{
    return test_kube_client(&srv, opts);
}

struct start_opts {
    bool keep_lease_on_stop;
    const struct kube_client_options *client; /* NULL: test_kube_client's */
    struct kube_client *fenced;               /* the candidate's "controller" client, or NULL */
    bool real_time;                           /* CLOCK_MONOTONIC, and the durations below */
    uint64_t lease_ms, renew_deadline_ms, retry_ms;
};

static void candidate_start_with(struct candidate *cand, const char *identity, const struct start_opts *o)
{
    memset(cand, 0, sizeof(*cand));
    pthread_mutex_init(&cand->mu, NULL);
    cand->identity = identity;
    cand->client = new_client(o->client);
    kube_client_set_observer(cand->client, on_request, cand);
    cand->real_time = o->real_time;
    manual_clock_init(&cand->clock);
    manual_clock_advance(&cand->clock, elapsed_ms); /* the same time as the other candidates' */
    struct leader_election_config cfg = {
        .lease_namespace = LEASE_NS,
        .lease_name = LEASE_NAME,
        .identity = identity,
        .lease_duration_ms = o->real_time ? o->lease_ms : LEASE_MS,
        .renew_deadline_ms = o->real_time ? o->renew_deadline_ms : RENEW_DEADLINE_MS,
        .retry_period_ms = o->real_time ? o->retry_ms : RETRY_MS,
        .keep_lease_on_stop = o->keep_lease_on_stop,
        .fenced_client = o->fenced,
        .on_started_leading = on_started,
        .on_stopped_leading = on_stopped,
        .on_new_leader = on_new_leader,
        .ctx = cand,
        .clock = o->real_time ? NULL : &cand->clock.source,
    };
    cr_assert_eq(leader_elector_start(cand->client, &cfg, &cand->le), 0);
}

static void candidate_start(struct candidate *cand, const char *identity, bool keep_lease_on_stop)
{
    struct start_opts o = {.keep_lease_on_stop = keep_lease_on_stop};
    candidate_start_with(cand, identity, &o);
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

/* The Lease as the server has it, as text for a failure message (a buffer of the test's). */
static const char *lease_text(void)
{
    static char text[2048];
    cJSON *lease = NULL;
    int rc = test_apiserver_request(&srv, "GET", LEASES_PATH "/" LEASE_NAME, NULL, NULL, &lease);
    char *s = lease ? cJSON_PrintUnformatted(json_path(lease, "spec")) : NULL;
    snprintf(text, sizeof(text), "Lease spec (HTTP %d): %s", rc, s ? s : "(none)");
    free(s);
    cJSON_Delete(lease);
    return text;
}

/* Waits until the candidate has acted on the time its clock shows (manual_clock_settle). */
static void settle(struct candidate *cand)
{
    cr_assert(!cand->real_time);
    cr_assert(manual_clock_settle(&cand->clock), "%s did not act on its clock at +%llu ms; %s", cand->identity,
              (unsigned long long)elapsed_ms, lease_text());
}

/* One step of the test's time: each running candidate's clock moves by ms in turn, and the
 * candidate acts on it (attempts, renews, gives up) before the next one's moves. NULLs and
 * stopped candidates are skipped. */
static void step(uint64_t ms, struct candidate *a, struct candidate *b)
{
    elapsed_ms += ms;
    struct candidate *cands[] = {a, b};
    for (int i = 0; i < 2; i++) {
        if (!cands[i] || !cands[i]->le)
            continue;
        manual_clock_advance(&cands[i]->clock, ms);
        settle(cands[i]);
    }
}

/* Waits (real time, 30 s scaled) until the candidate leads: its first attempt needs no step. */
static bool wait_leading(struct candidate *cand)
{
    struct test_deadline d = test_deadline_in(30000);
    do {
        if (leader_elector_is_leader(cand->le))
            return true;
    } while (test_deadline_poll(&d));
    test_wait_failed(cand->identity, &d, lease_text());
    return false;
}

/* Waits for a callback counter to reach want (its thread runs it just after the state changes). */
static bool wait_count(atomic_int *count, int want, const char *what)
{
    struct test_deadline d = test_deadline_in(30000);
    do {
        if (atomic_load(count) >= want)
            return true;
    } while (test_deadline_poll(&d));
    char last[64];
    snprintf(last, sizeof(last), "%d calls", atomic_load(count));
    test_wait_failed(what, &d, last);
    return false;
}

/* a leads (keeping the Lease when it stops, or releasing it) and b stands by, having seen it. */
static void leader_and_standby(struct candidate *a, struct candidate *b, bool a_keeps_lease)
{
    candidate_start(a, "candidate-a", a_keeps_lease);
    cr_assert(wait_leading(a), "a did not become leader");
    settle(a);
    candidate_start(b, "candidate-b", false);
    settle(b);
}

static cJSON *get_lease(void)
{
    struct kube_client *c = new_client(NULL);
    cJSON *lease = NULL;
    cr_assert_eq(kube_get(c, &KUBE_LEASES, LEASE_NS, LEASE_NAME, &lease, NULL), 0);
    kube_client_free(c);
    return lease;
}

static void start(void)
{
    elapsed_ms = 0;
    cr_assert_eq(test_apiserver_start(&srv), 0, "API server did not start");
}
static void stop(void) { test_apiserver_stop(&srv); }

/* Each test starts a server of its own, and a real etcd and kube-apiserver take a while to start on
 * a loaded machine (up to a minute by launch.py's deadline, which this one must cover). */
TestSuite(leaderelection, .init = start, .fini = stop, .timeout = 180);

Test(leaderelection, exactly_one_of_two_candidates_leads)
{
    struct candidate a, b;
    candidate_start(&a, "candidate-a", false);
    candidate_start(&b, "candidate-b", false);

    /* Both try at once, on their first attempt: one creates the Lease. */
    struct test_deadline d = test_deadline_in(30000);
    while (!leader_elector_is_leader(a.le) && !leader_elector_is_leader(b.le))
        cr_assert(test_deadline_poll(&d), "nobody became leader after %s; %s", test_deadline_text(&d), lease_text());
    struct candidate *leader = leader_elector_is_leader(a.le) ? &a : &b;
    struct candidate *standby = leader == &a ? &b : &a;
    settle(&a);
    settle(&b);

    /* Over twice the lease duration: the leader keeps renewing, the standby never leads. */
    int writes_before = lease_writes(leader);
    while (elapsed_ms < 2 * LEASE_MS) {
        step(STEP_MS, &a, &b);
        bool la = leader_elector_is_leader(a.le), lb = leader_elector_is_leader(b.le);
        cr_assert(!(la && lb), "both candidates lead at once at +%llu ms", (unsigned long long)elapsed_ms);
        cr_assert(leader_elector_is_leader(leader->le), "%s lost the lease while renewing, at +%llu ms; %s",
                  leader->identity, (unsigned long long)elapsed_ms, lease_text());
    }
    cr_assert_geq(lease_writes(leader) - writes_before, (int)(2 * LEASE_MS / STEP_MS),
                  "the leader renews every retry period");
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
        struct test_request_filter creates = {.method = "POST", .path = LEASES_PATH};
        struct test_request_filter renews = {.method = "PUT", .path = LEASES_PATH "/" LEASE_NAME};
        cr_assert_geq(test_count_requests(&srv, 0, &creates, NULL, NULL), 1);
        cr_assert_geq(test_count_requests(&srv, 0, &renews, NULL, NULL), 4, "the leader renews every retry period");
    }

    candidate_free(standby);
    candidate_free(leader);
}

Test(leaderelection, standby_takes_over_after_the_lease_runs_out)
{
    struct candidate a, b;
    leader_and_standby(&a, &b, true);
    while (elapsed_ms < LEASE_MS) {
        step(STEP_MS, &a, &b);
        cr_assert(!leader_elector_is_leader(b.le), "b took a lease that is being renewed (+%llu ms)",
                  (unsigned long long)elapsed_ms);
    }

    /* a stops renewing without releasing: b must wait for the lease to run out. b saw a's last
     * renew at this step, after a made it: the lease runs out LEASE_MS from now on b's clock. */
    uint64_t stop_at = elapsed_ms;
    candidate_stop(&a);
    cr_assert_eq(atomic_load(&a.started), 1);
    cr_assert_eq(atomic_load(&a.stopped), 1, "on_stopped_leading when a leader stops");
    while (elapsed_ms - stop_at < LEASE_MS) {
        step(STEP_MS, &b, NULL);
        if (elapsed_ms - stop_at < LEASE_MS)
            cr_assert(!leader_elector_is_leader(b.le), "b took over %llu ms after a stopped, before the lease ran out",
                      (unsigned long long)(elapsed_ms - stop_at));
    }
    /* The first attempt after the lease ran out takes it. */
    cr_assert(leader_elector_is_leader(b.le), "b did not take over %llu ms after a stopped; %s",
              (unsigned long long)(elapsed_ms - stop_at), lease_text());
    cr_assert(wait_count(&b.started, 1, "b's on_started_leading"));
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
    leader_and_standby(&a, &b, false);
    step(STEP_MS, &a, &b);
    step(STEP_MS, &a, &b);
    cr_assert(!leader_elector_is_leader(b.le));

    candidate_stop(&a);
    cr_assert_eq(atomic_load(&a.stopped), 1, "on_stopped_leading when a leader stops");
    /* A released lease needs no waiting: b's next attempt takes it. */
    step(STEP_MS, &b, NULL);
    cr_assert(leader_elector_is_leader(b.le), "b did not take a released lease at its next attempt; %s", lease_text());
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
        "\"},\"spec\":{\"holderIdentity\":\"skewed-holder\",\"leaseDurationSeconds\":15,"
        "\"acquireTime\":\"2001-01-01T00:00:00.000000Z\",\"renewTime\":\"2001-01-01T00:00:00.000000Z\","
        "\"leaseTransitions\":4}}");
    cr_assert_eq(kube_create(admin, &KUBE_LEASES, LEASE_NS, lease, NULL, NULL), 0);
    cJSON_Delete(lease);

    struct candidate a;
    candidate_start(&a, "candidate-a", false);
    settle(&a); /* its first attempt sees the record: the lease runs 15 s from now on its clock */
    cr_assert_not(leader_elector_is_leader(a.le), "took over a lease it had seen only now");
    while (elapsed_ms < LEASE_MS) {
        step(STEP_MS, &a, NULL);
        if (elapsed_ms < LEASE_MS)
            cr_assert_not(leader_elector_is_leader(a.le), "took over after %llu ms from a lease it had seen only then",
                          (unsigned long long)elapsed_ms);
    }
    cr_assert(leader_elector_is_leader(a.le), "did not take over at its first attempt after the lease ran out; %s",
              lease_text());
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

/* When renewals fail for longer than the renew deadline, leadership ends (is_leader false,
 * on_stopped_leading), and the elector competes again when the server comes back. */
Test(leaderelection, failed_renewals_end_leadership_and_it_comes_back)
{
    if (!srv.is_double)
        cr_skip_test("needs the API-server double (fault injection)");
    struct kube_client_options opts = {.max_retries = 1, .backoff_base_ms = 10,
                                       .backoff_max_ms = 20, .timeout_ms = 1000};
    struct candidate a;
    struct start_opts o = {.client = &opts};
    candidate_start_with(&a, "candidate-a", &o);
    cr_assert(wait_leading(&a), "a did not become leader");
    settle(&a);
    step(STEP_MS, &a, NULL); /* a renews here, its last renew */
    cr_assert(leader_elector_is_leader(a.le));
    uint64_t last_renew = elapsed_ms;

    cr_assert_eq(test_apiserver_fault(&srv, "{\"failNext\":{\"count\":100000,\"code\":500}}"), 0);
    while (elapsed_ms - last_renew < RENEW_DEADLINE_MS) {
        step(STEP_MS, &a, NULL);
        if (elapsed_ms - last_renew < RENEW_DEADLINE_MS)
            cr_assert(leader_elector_is_leader(a.le), "gave up %llu ms after its last renew, before the renew deadline",
                      (unsigned long long)(elapsed_ms - last_renew));
    }
    cr_assert_not(leader_elector_is_leader(a.le), "still leading %llu ms after its last renew",
                  (unsigned long long)(elapsed_ms - last_renew));
    cr_assert_eq(atomic_load(&a.stopped), 1, "on_stopped_leading when the renew deadline passed");

    cr_assert_eq(test_apiserver_fault(&srv, "{\"failNext\":{\"count\":0,\"code\":500}}"), 0);
    step(STEP_MS, &a, NULL); /* one retry period as a candidate, then its attempt */
    cr_assert(leader_elector_is_leader(a.le), "did not lead again once the server recovered; %s", lease_text());
    cr_assert_eq(atomic_load(&a.started), 2);
    cr_assert_eq(atomic_load(&a.stopped), 1);
    candidate_free(&a);
    cr_assert_eq(atomic_load(&a.stopped), 2);
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
    uint64_t last_ok_sent_ms; /* when the last successful write was started */
    int refused_rc;
    uint64_t refused_ms;      /* when the first refused write had returned */
};

static void *writer_run(void *arg)
{
    struct writer *w = arg;
    for (int i = 0;; i++) {
        char name[64];
        snprintf(name, sizeof(name), "fenced-%d", i);
        uint64_t sent = clock_now_ms();
        int rc = create_configmap(w->c, name);
        if (rc != 0) {
            w->refused_rc = rc;
            w->refused_ms = clock_now_ms();
            return NULL;
        }
        w->ok++;
        w->last_ok_sent_ms = sent;
        clock_sleep_ms(20); /* the controller's pace, not a wait */
    }
}

/* ConfigMap creates the server answered 201, and the highest seq among them. */
static int server_configmap_creates(int *max_seq)
{
    struct test_request_filter f = {.method = "POST", .resource = "configmaps", .code = 201};
    return test_count_requests(&srv, 0, &f, NULL, max_seq);
}

static bool held_by(const cJSON *entry, const void *holder)
{
    const char *h = json_string(cJSON_GetObjectItemCaseSensitive(entry, "body"), "spec.holderIdentity");
    return h && strcmp(h, holder) == 0;
}

/* The seq of the first Lease update the server accepted from holder, or 0. */
static int first_lease_write_by(const char *holder)
{
    struct test_request_filter f = {.method = "PUT", .resource = "leases", .code = 200, .match = held_by, .arg = holder};
    int seq;
    test_count_requests(&srv, 0, &f, &seq, NULL);
    return seq;
}

/* The server holds the leader's renewals far past the renew deadline. As client-go: the renew
 * is cut off when the term ends, leadership ends then (not when the held request comes back),
 * and the leader's controller client refuses writes from that moment, locally; its last write
 * reached the server before the standby could take the Lease.
 *
 * In real time, with durations scaled by the time factor (lease 4 s, renew deadline 3 s, retry
 * 0.5 s at 1): no check measures how long something took. A term is known to start no earlier
 * than the return of the Lease write before the one that began it (an attempt starts after the
 * previous one has ended), so leadership must last at least the renew deadline from there. */
Test(leaderelection, held_renew_ends_leadership_at_the_renew_deadline_and_fences_writes)
{
    if (!srv.is_double)
        cr_skip_test("needs the API-server double (fault injection)");
    const uint64_t renew_deadline = test_ms(3000), hold_s = test_ms(60000) / 1000;
    struct start_opts o = {.real_time = true, .lease_ms = test_ms(4000), .renew_deadline_ms = renew_deadline,
                           .retry_ms = test_ms(500)};
    struct kube_client *ctl_a = new_client(NULL), *ctl_b = new_client(NULL);
    struct candidate a, b;
    o.fenced = ctl_a;
    candidate_start_with(&a, "candidate-a", &o);
    cr_assert(wait_leading(&a), "a did not become leader");
    struct writer w = {.c = ctl_a};
    pthread_t writer;
    pthread_create(&writer, NULL, writer_run, &w);
    o.fenced = ctl_b;
    candidate_start_with(&b, "candidate-b", &o);
    cr_assert(wait_count(&b.new_leader_calls, 1, "b to see a lead"));
    cr_assert(!leader_elector_is_leader(b.le), "b took a lease that is being renewed; %s", lease_text());
    int before_seq, before = server_configmap_creates(&before_seq);
    cr_assert_eq(create_configmap(ctl_b, "from-standby"), KUBE_ENOTLEADER, "a standby's writes are fenced");
    cr_assert_geq(server_configmap_creates(&before_seq), before);

    char fault[128];
    snprintf(fault, sizeof(fault), "{\"delayLeases\":{\"seconds\":%llu,\"holder\":\"candidate-a\"}}",
             (unsigned long long)hold_s);
    uint64_t t_fault = clock_now_ms();
    cr_assert_eq(test_apiserver_fault(&srv, fault), 0);
    /* The held renew comes back hold_s after the fault at the earliest: a must stop well before. */
    struct test_deadline d = test_deadline_in(30000);
    while (atomic_load(&a.stopped) == 0)
        cr_assert(test_deadline_poll(&d), "a never stopped leading while its renew was held (%s); %s",
                  test_deadline_text(&d), lease_text());
    uint64_t stopped_ms = atomic_load(&a.stopped_ms);
    cr_assert_lt(stopped_ms - t_fault, hold_s * 1000, "a stopped leading only when its held renew came back");
    cr_assert(!leader_elector_is_leader(a.le));
    pthread_mutex_lock(&a.mu);
    int a_writes = a.lease_writes_ok;
    uint64_t term_floor = a.lease_write_done_ms[0] + renew_deadline; /* see above */
    pthread_mutex_unlock(&a.mu);
    if (a_writes >= 2)
        cr_assert_geq(stopped_ms, term_floor, "a stopped leading %llu ms before its term could have ended",
                      (unsigned long long)(term_floor - stopped_ms));

    pthread_join(writer, NULL);
    cr_assert_eq(w.refused_rc, KUBE_ENOTLEADER, "the writer ended with %d (%s)", w.refused_rc,
                 error_str(w.refused_rc));
    cr_assert_gt(w.ok, 0);
    cr_assert_leq(w.last_ok_sent_ms, stopped_ms, "a write sent %llu ms after leadership ended succeeded",
                  (unsigned long long)(w.last_ok_sent_ms - stopped_ms));
    if (a_writes >= 2)
        cr_assert_geq(w.refused_ms, term_floor, "writes were refused before the term could have ended");

    /* Refused locally: a write attempted now never reaches the server. */
    int seq_now, sent = server_configmap_creates(&seq_now);
    cr_assert(sent >= w.ok && sent <= w.ok + 1, "server saw %d creates, the writer %d", sent, w.ok);
    cr_assert_eq(create_configmap(ctl_a, "after-the-deadline"), KUBE_ENOTLEADER);
    int seq_later;
    cr_assert_eq(server_configmap_creates(&seq_later), sent, "a fenced write reached the server");

    /* The standby takes over once the lease has run out, after a's last write. */
    cr_assert(wait_leading(&b), "b never took over");
    cr_assert(wait_count(&b.started, 1, "b's on_started_leading"));
    cr_assert_eq(atomic_load(&b.started), 1);
    cr_assert_lt(w.last_ok_sent_ms, atomic_load(&b.started_ms), "a wrote after b started leading");
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
