/* The work queue's guarantees: deduplication, one thread per key, delayed and rate-limited adds,
 * shutdown. Delays and backoff run on a clock the test moves (support/manual_clock.h): a key is
 * checked not to come out a millisecond before its time and to come out at it, whatever the
 * machine's speed. */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "kube/workqueue.h"
#include "support/deadline.h"
#include "support/manual_clock.h"
#include "support/sanitizer.h"
#include "util/clock.h"

/* Takes the next key, asserts it is `want`, marks it done. */
static void expect_next(struct workqueue *q, const char *want)
{
    char *key = NULL;
    cr_assert_eq(workqueue_get(q, &key), 0);
    cr_assert_str_eq(key, want);
    workqueue_done(q, key);
    free(key);
}

/* Polls until *value reaches want; false after 30 s (scaled). */
static bool wait_for_int(atomic_int *value, int want)
{
    struct test_deadline d = test_deadline_in(30000);
    while (atomic_load(value) < want)
        if (!test_deadline_poll_every(&d, 1))
            return atomic_load(value) >= want;
    return true;
}

/* A queue whose delays run on clk. */
static struct workqueue *queue_on(struct manual_clock *clk, uint64_t base_delay_ms, uint64_t max_delay_ms)
{
    manual_clock_init(clk);
    struct workqueue_options opts = {.base_delay_ms = base_delay_ms, .max_delay_ms = max_delay_ms,
                                     .clock = &clk->source};
    struct workqueue *q = workqueue_new(&opts);
    cr_assert_not_null(q);
    return q;
}

#define MARKER "~marker"

/* Moves the clock on by ms (> 0) and waits until the timer thread has acted on the new time: a
 * marker key due exactly then comes out of the heap after every key due at or before it, all in
 * one pass under the queue's lock. Then the keys that came out must be `due` (NULL: none) and
 * the marker, in that order; a key due later stays on the heap, since the clock stands still. */
static void advance(struct workqueue *q, struct manual_clock *clk, uint64_t ms, const char *due)
{
    cr_assert_gt(ms, 0);
    cr_assert_eq(workqueue_add_after(q, MARKER, ms), 0);
    manual_clock_advance(clk, ms);
    struct test_deadline d = test_deadline_in(30000);
    while (workqueue_len(q) == 0)
        cr_assert(test_deadline_poll_every(&d, 1), "nothing came out %llu ms on, after %s",
                  (unsigned long long)ms, test_deadline_text(&d));
    size_t want = due ? 2 : 1;
    cr_assert_eq(workqueue_len(q), want, "%zu keys came out %llu ms on, want %s", workqueue_len(q),
                 (unsigned long long)ms, due ? due : "none");
    if (due)
        expect_next(q, due);
    expect_next(q, MARKER);
}

Test(workqueue, add_deduplicates_until_taken)
{
    struct workqueue *q = workqueue_new(NULL);
    cr_assert_not_null(q);
    for (int i = 0; i < 3; i++)
        cr_assert_eq(workqueue_add(q, "ns/job"), 0);
    cr_assert_eq(workqueue_len(q), 1);
    expect_next(q, "ns/job");
    cr_assert_eq(workqueue_len(q), 0);

    workqueue_shutdown(q);
    char *key = NULL;
    cr_assert_eq(workqueue_get(q, &key), -ESHUTDOWN, "a deduplicated key was handed out twice");
    workqueue_free(q);
}

Test(workqueue, keys_come_out_in_fifo_order)
{
    struct workqueue *q = workqueue_new(NULL);
    const char *keys[] = {"c", "a", "b", "a", "d", "c"};
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
        cr_assert_eq(workqueue_add(q, keys[i]), 0);
    cr_assert_eq(workqueue_len(q), 4);
    expect_next(q, "c");
    expect_next(q, "a");
    expect_next(q, "b");
    expect_next(q, "d");
    workqueue_free(q);
}

Test(workqueue, add_during_processing_waits_for_done)
{
    struct workqueue *q = workqueue_new(NULL);
    char *key = NULL;
    workqueue_add(q, "job");
    cr_assert_eq(workqueue_get(q, &key), 0);
    cr_assert_str_eq(key, "job");

    workqueue_add(q, "job");
    workqueue_add(q, "job");
    cr_assert_eq(workqueue_len(q), 0, "a key being processed was queued again before done");
    workqueue_add(q, "other");
    expect_next(q, "other");

    workqueue_done(q, key);
    free(key);
    cr_assert_eq(workqueue_len(q), 1, "a key re-added during processing was lost");
    expect_next(q, "job");
    cr_assert_eq(workqueue_len(q), 0);
    workqueue_free(q);
}

/* ---- one key hammered while it is being processed ----------------------------------------- */

#define HAMMER_WORKERS 4

#define HAMMER_ROUNDS 4 /* drains a hammer test may run */

struct hammer {
    struct workqueue *q;
    atomic_int processed;
    atomic_int in_flight;
    atomic_int max_in_flight;
    atomic_int first_started;
    atomic_int release_first;
    /* See drain: per round, the probes taken and wanted. A round's counts are never reset, so a
     * worker still leaving round 1 (descheduled on a busy machine) is not caught by round 2. */
    atomic_int rounds;
    atomic_int probes_taken[HAMMER_ROUNDS];
    atomic_int probes_wanted[HAMMER_ROUNDS];
    atomic_int errors;
};

/* A worker that takes probe key "probe-<round>-<i>" holds it until every worker wanted in that
 * round has taken one (drain). */
static void take_probe(struct hammer *h, const char *key)
{
    int round = atoi(key + strlen("probe-"));
    if (round < 0 || round >= HAMMER_ROUNDS) {
        atomic_fetch_add(&h->errors, 1);
        return;
    }
    atomic_fetch_add(&h->probes_taken[round], 1);
    struct test_deadline d = test_deadline_in(30000);
    while (atomic_load(&h->probes_taken[round]) < atomic_load(&h->probes_wanted[round]))
        if (!test_deadline_poll_every(&d, 1)) {
            atomic_fetch_add(&h->errors, 1);
            return;
        }
}

static void *hammer_worker(void *arg)
{
    struct hammer *h = arg;
    for (;;) {
        char *key = NULL;
        int rc = workqueue_get(h->q, &key);
        if (rc == -ESHUTDOWN)
            return NULL;
        if (rc == 0 && strncmp(key, "probe-", 6) == 0) {
            take_probe(h, key);
            workqueue_done(h->q, key);
            free(key);
            continue;
        }
        if (rc < 0 || strcmp(key, "job") != 0) {
            atomic_fetch_add(&h->errors, 1);
            free(key);
            return NULL;
        }
        int now = atomic_fetch_add(&h->in_flight, 1) + 1;
        int seen = atomic_load(&h->max_in_flight);
        while (now > seen && !atomic_compare_exchange_weak(&h->max_in_flight, &seen, now))
            ;
        if (atomic_fetch_add(&h->processed, 1) == 0) {
            atomic_store(&h->first_started, 1);
            while (!atomic_load(&h->release_first))
                clock_sleep_ms(1); /* held until the test lets it go */
        }
        atomic_fetch_sub(&h->in_flight, 1);
        workqueue_done(h->q, key);
        free(key);
    }
}

/* Proves that the n idle workers are done with whatever the queue handed them so far, without
 * waiting for time to pass: n probe keys go in behind everything queued, and each worker that
 * takes one holds it until all n are taken, so each of the n takes exactly one, and took (and
 * finished) anything queued before it first. A "job" wrongly handed out has then been counted. */
static void drain(struct hammer *h, int n)
{
    int round = atomic_fetch_add(&h->rounds, 1);
    cr_assert_lt(round, HAMMER_ROUNDS);
    atomic_store(&h->probes_wanted[round], n);
    for (int i = 0; i < n; i++) {
        char key[32];
        snprintf(key, sizeof(key), "probe-%d-%d", round, i);
        cr_assert_eq(workqueue_add(h->q, key), 0);
    }
    cr_assert(wait_for_int(&h->probes_taken[round], n), "%d of %d probes taken",
              atomic_load(&h->probes_taken[round]), n);
}

static void *hammer_adder(void *arg)
{
    struct hammer *h = arg;
    for (int i = 0; i < 500; i++)
        if (workqueue_add(h->q, "job") != 0)
            atomic_fetch_add(&h->errors, 1);
    return NULL;
}

Test(workqueue, many_adds_during_processing_run_once_more, .timeout = 60)
{
    struct hammer h = {.q = workqueue_new(NULL)};
    pthread_t workers[HAMMER_WORKERS], adders[2];
    for (int i = 0; i < HAMMER_WORKERS; i++)
        pthread_create(&workers[i], NULL, hammer_worker, &h);

    workqueue_add(h.q, "job");
    cr_assert(wait_for_int(&h.first_started, 1), "no worker took the key");
    for (int i = 0; i < 2; i++)
        pthread_create(&adders[i], NULL, hammer_adder, &h);
    for (int i = 0; i < 2; i++)
        pthread_join(adders[i], NULL);

    /* 1,000 adds while the first processing is in flight: three idle workers, nothing for them. */
    drain(&h, HAMMER_WORKERS - 1);
    cr_assert_eq(atomic_load(&h.processed), 1, "the key was handed out while being processed");
    cr_assert_eq(workqueue_len(h.q), 0);

    atomic_store(&h.release_first, 1);
    cr_assert(wait_for_int(&h.processed, 2), "the adds during processing were lost");
    /* Every worker idle again and past anything queued: a wrong third processing has happened. */
    drain(&h, HAMMER_WORKERS);

    workqueue_shutdown(h.q);
    for (int i = 0; i < HAMMER_WORKERS; i++)
        pthread_join(workers[i], NULL);
    cr_assert_eq(atomic_load(&h.processed), 2, "1,000 adds during one processing gave %d processings",
                 atomic_load(&h.processed) - 1);
    cr_assert_eq(atomic_load(&h.max_in_flight), 1);
    cr_assert_eq(atomic_load(&h.errors), 0);
    workqueue_free(h.q);
}

/* ---- randomized run over many keys -------------------------------------------------------- */

#define STRESS_KEYS 64
#define STRESS_WORKERS 4
#define STRESS_ADDERS 3
#define STRESS_OPS 50000

struct stress {
    struct workqueue *q;
    atomic_int in_flight[STRESS_KEYS];
    atomic_int added_generation[STRESS_KEYS];     /* bumped before every add of the key */
    atomic_int processed_generation[STRESS_KEYS]; /* the generation a processing saw at its start */
    atomic_int processings;
    atomic_int overlaps;
    atomic_int errors;
};

static void *stress_worker(void *arg)
{
    struct stress *s = arg;
    for (;;) {
        char *key = NULL;
        int rc = workqueue_get(s->q, &key);
        if (rc == -ESHUTDOWN)
            return NULL;
        int k = -1;
        if (rc < 0 || sscanf(key, "key-%d", &k) != 1 || k < 0 || k >= STRESS_KEYS) {
            atomic_fetch_add(&s->errors, 1);
            free(key);
            return NULL;
        }
        if (atomic_fetch_add(&s->in_flight[k], 1) != 0)
            atomic_fetch_add(&s->overlaps, 1);
        atomic_store(&s->processed_generation[k], atomic_load(&s->added_generation[k]));
        atomic_fetch_add(&s->processings, 1);
        if (clock_jitter(4) == 0) { /* not a wait: a pause of up to 200 us varies the interleavings */
            struct timespec pause = {0, (long)clock_jitter(200) * 1000};
            nanosleep(&pause, NULL);
        }
        if (clock_jitter(4) == 0)
            workqueue_forget(s->q, key);
        atomic_fetch_sub(&s->in_flight[k], 1);
        workqueue_done(s->q, key);
        free(key);
    }
}

static void *stress_adder(void *arg)
{
    struct stress *s = arg;
    for (int i = 0; i < STRESS_OPS; i++) {
        int k = (int)clock_jitter(STRESS_KEYS);
        char key[16];
        snprintf(key, sizeof(key), "key-%d", k);
        atomic_fetch_add(&s->added_generation[k], 1);
        uint64_t op = clock_jitter(10);
        int rc;
        if (op < 7)
            rc = workqueue_add(s->q, key);
        else if (op < 9)
            rc = workqueue_add_after(s->q, key, clock_jitter(5));
        else
            rc = workqueue_add_rate_limited(s->q, key);
        if (rc != 0)
            atomic_fetch_add(&s->errors, 1);
        if (clock_jitter(16) == 0)
            sched_yield();
    }
    return NULL;
}

Test(workqueue, no_key_is_processed_by_two_threads_at_once, .timeout = 60)
{
    static struct stress s; /* large; zeroed */
    struct workqueue_options opts = {.base_delay_ms = 1, .max_delay_ms = 8};
    s.q = workqueue_new(&opts);
    pthread_t workers[STRESS_WORKERS], adders[STRESS_ADDERS];
    for (int i = 0; i < STRESS_WORKERS; i++)
        pthread_create(&workers[i], NULL, stress_worker, &s);
    for (int i = 0; i < STRESS_ADDERS; i++)
        pthread_create(&adders[i], NULL, stress_adder, &s);
    for (int i = 0; i < STRESS_ADDERS; i++)
        pthread_join(adders[i], NULL);

    /* Let the timer hand over every delayed key (real delays of at most 8 ms); the workers drain
     * the rest after shutdown. */
    struct test_deadline d = test_deadline_in(30000);
    while (workqueue_delayed_len(s.q) > 0)
        cr_assert(test_deadline_poll_every(&d, 1), "%zu delayed keys never became ready after %s",
                  workqueue_delayed_len(s.q), test_deadline_text(&d));
    workqueue_shutdown(s.q);
    for (int i = 0; i < STRESS_WORKERS; i++)
        pthread_join(workers[i], NULL);

    cr_assert_eq(atomic_load(&s.errors), 0);
    cr_assert_eq(atomic_load(&s.overlaps), 0, "a key was processed by two threads at once");
    cr_assert_gt(atomic_load(&s.processings), 0);
    for (int k = 0; k < STRESS_KEYS; k++)
        cr_assert_eq(atomic_load(&s.processed_generation[k]), atomic_load(&s.added_generation[k]),
                     "key-%d: its last add was never followed by a processing", k);
    workqueue_free(s.q);
}

/* ---- delays and backoff -------------------------------------------------------------------- */

Test(workqueue, add_after_delivers_after_the_delay, .timeout = 60)
{
    struct manual_clock clk;
    struct workqueue *q = queue_on(&clk, 0, 0);
    cr_assert_eq(workqueue_add_after(q, "later", 500), 0);
    cr_assert_eq(workqueue_len(q), 0);
    cr_assert_eq(workqueue_delayed_len(q), 1);

    advance(q, &clk, 499, NULL);
    cr_assert_eq(workqueue_delayed_len(q), 1, "still waiting 1 ms before its time");
    advance(q, &clk, 1, "later");
    cr_assert_eq(workqueue_delayed_len(q), 0);

    /* A zero delay is a plain add. */
    cr_assert_eq(workqueue_add_after(q, "now", 0), 0);
    cr_assert_eq(workqueue_len(q), 1);
    workqueue_free(q);
}

/* The timer thread is asleep on a day-long deadline when a 100 ms one arrives for another key:
 * it must wake for it. On a clock whose sleepers sleep all the time they have left (poll_ms 0),
 * nothing else would wake it for a day. */
Test(workqueue, the_timer_wakes_for_an_earlier_deadline, .timeout = 60)
{
    struct manual_clock clk;
    struct workqueue *q = queue_on(&clk, 0, 0);
    clk.source.poll_ms = 0;
    workqueue_add_after(q, "slow", 24 * 3600 * 1000);
    /* No event says that the timer thread has gone to sleep on it: a moment for it to get there,
     * which makes the case likelier; the verdict is the same either way. */
    clock_sleep_ms(20);
    workqueue_add_after(q, "fast", 100);
    manual_clock_advance(&clk, 100);
    struct test_deadline d = test_deadline_in(30000);
    while (workqueue_len(q) == 0)
        cr_assert(test_deadline_poll(&d), "the timer did not wake for an earlier deadline (%s)",
                  test_deadline_text(&d));
    expect_next(q, "fast");
    cr_assert_eq(workqueue_delayed_len(q), 1);
    workqueue_free(q);
}

/* Same key: a later request keeps the earlier deadline, an earlier one replaces it. */
Test(workqueue, earlier_deadline_wins, .timeout = 60)
{
    struct manual_clock clk;
    struct workqueue *q = queue_on(&clk, 0, 0);
    workqueue_add_after(q, "slow", 60000);
    workqueue_add_after(q, "a", 200);
    workqueue_add_after(q, "a", 60000);
    workqueue_add_after(q, "b", 60000);
    workqueue_add_after(q, "b", 300);
    cr_assert_eq(workqueue_delayed_len(q), 3); /* slow, a, b: one heap entry per key */
    advance(q, &clk, 199, NULL);
    advance(q, &clk, 1, "a"); /* a later deadline did not replace an earlier one */
    advance(q, &clk, 99, NULL);
    advance(q, &clk, 1, "b"); /* an earlier deadline replaced a later one */
    cr_assert_eq(workqueue_delayed_len(q), 1);
    workqueue_free(q);
}

Test(workqueue, rate_limited_backoff_grows_and_forget_resets, .timeout = 60)
{
    struct manual_clock clk;
    struct workqueue *q = queue_on(&clk, 100, 1000 * 1000);
    cr_assert_eq(workqueue_num_requeues(q, "job"), 0);

    uint64_t want = 100;
    for (unsigned n = 1; n <= 3; n++, want *= 2) {
        cr_assert_eq(workqueue_add_rate_limited(q, "job"), 0);
        cr_assert_eq(workqueue_num_requeues(q, "job"), n);
        advance(q, &clk, want - 1, NULL); /* requeue n not before want ms */
        advance(q, &clk, 1, "job");
    }

    /* Three more failures while the key waits: they count, the first one's deadline (800 ms)
     * stands, and the next delay would be 6.4 s. */
    for (int i = 0; i < 3; i++)
        workqueue_add_rate_limited(q, "job");
    cr_assert_eq(workqueue_num_requeues(q, "job"), 6);
    advance(q, &clk, 799, NULL);
    advance(q, &clk, 1, "job");

    workqueue_forget(q, "job");
    cr_assert_eq(workqueue_num_requeues(q, "job"), 0);
    workqueue_add_rate_limited(q, "job");
    advance(q, &clk, 99, NULL);
    advance(q, &clk, 1, "job"); /* 100 ms again: forget reset the backoff */
    cr_assert_eq(workqueue_num_requeues(q, "job"), 1);
    workqueue_free(q);
}

Test(workqueue, backoff_is_capped_without_overflow, .timeout = 60)
{
    struct manual_clock clk;
    struct workqueue *q = queue_on(&clk, 3, 150);
    for (int i = 0; i < 100; i++) /* 3 << 99 would overflow; the first deadline (3 ms) stands */
        workqueue_add_rate_limited(q, "job");
    cr_assert_eq(workqueue_num_requeues(q, "job"), 100);
    advance(q, &clk, 2, NULL);
    advance(q, &clk, 1, "job");

    workqueue_add_rate_limited(q, "job");
    advance(q, &clk, 149, NULL); /* the delay after 100 failures is the cap, not less */
    advance(q, &clk, 1, "job");
    workqueue_free(q);
}

/* ---- shutdown ------------------------------------------------------------------------------ */

struct blocked_getter {
    struct workqueue *q;
    atomic_int tid;
    int rc;
};

static void *blocked_get(void *arg)
{
    struct blocked_getter *g = arg;
    char *key = NULL;
    atomic_store(&g->tid, (int)syscall(SYS_gettid));
    g->rc = workqueue_get(g->q, &key);
    free(key);
    return NULL;
}

/* Whether thread tid of this process is asleep (state S in /proc). */
static bool thread_sleeping(int tid)
{
    char path[64], stat[512];
    snprintf(path, sizeof(path), "/proc/self/task/%d/stat", tid);
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    size_t n = fread(stat, 1, sizeof(stat) - 1, f);
    fclose(f);
    stat[n] = 0;
    const char *end = strrchr(stat, ')'); /* "tid (comm) S ..." */
    return end && end[1] == ' ' && end[2] == 'S';
}

Test(workqueue, shutdown_wakes_a_blocked_getter, .timeout = 60)
{
    struct blocked_getter g = {.q = workqueue_new(NULL), .rc = 1};
    pthread_t t;
    pthread_create(&t, NULL, blocked_get, &g);
    cr_assert(wait_for_int(&g.tid, 1));
    /* The getter reaches the wait: the only place it can sleep after noting its id. */
    struct test_deadline d = test_deadline_in(30000);
    while (!thread_sleeping(atomic_load(&g.tid)))
        cr_assert(test_deadline_poll_every(&d, 1), "the getter never blocked (%s)", test_deadline_text(&d));
    cr_assert_not(workqueue_shutting_down(g.q));
    workqueue_shutdown(g.q);
    pthread_join(t, NULL);
    cr_assert_eq(g.rc, -ESHUTDOWN);
    cr_assert(workqueue_shutting_down(g.q));

    cr_assert_eq(workqueue_add(g.q, "late"), 0);
    cr_assert_eq(workqueue_add_after(g.q, "late", 10), 0);
    cr_assert_eq(workqueue_len(g.q), 0, "an add after shutdown was queued");
    cr_assert_eq(workqueue_delayed_len(g.q), 0);
    workqueue_free(g.q);
}

Test(workqueue, get_after_shutdown_drains_ready_keys_first)
{
    struct workqueue *q = workqueue_new(NULL);
    workqueue_add(q, "a");
    workqueue_add(q, "b");
    workqueue_shutdown(q);
    expect_next(q, "a");
    expect_next(q, "b");
    char *key = NULL;
    cr_assert_eq(workqueue_get(q, &key), -ESHUTDOWN);
    cr_assert_null(key);
    workqueue_free(q);
}

Test(workqueue, done_after_shutdown_still_hands_back_a_dirty_key)
{
    struct workqueue *q = workqueue_new(NULL);
    char *key = NULL;
    workqueue_add(q, "a");
    cr_assert_eq(workqueue_get(q, &key), 0);
    workqueue_add(q, "a");
    workqueue_shutdown(q);
    workqueue_done(q, key);
    free(key);
    expect_next(q, "a");
    cr_assert_eq(workqueue_get(q, &key), -ESHUTDOWN);
    workqueue_free(q);
}

Test(workqueue, free_with_pending_work_releases_everything, .timeout = 60)
{
    struct workqueue *q = workqueue_new(NULL);
    char name[32];
    for (int i = 0; i < 100; i++) { /* enough to grow the map and both arrays */
        snprintf(name, sizeof(name), "ns/delayed-%d", i);
        cr_assert_eq(workqueue_add_after(q, name, 60000 + (uint64_t)i), 0);
    }
    for (int i = 0; i < 50; i++) {
        snprintf(name, sizeof(name), "ns/ready-%d", i);
        cr_assert_eq(workqueue_add(q, name), 0);
    }
    workqueue_add_rate_limited(q, "ns/failing");
    workqueue_add_rate_limited(q, "ns/failing");

    char *key = NULL; /* one left in processing, never done */
    cr_assert_eq(workqueue_get(q, &key), 0);
    workqueue_add(q, key);
    free(key);

    cr_assert_eq(workqueue_delayed_len(q), 101);
    cr_assert_eq(workqueue_len(q), 49);
    workqueue_free(q);
    cr_assert_eq(test_leak_check(), 0, "workqueue_free left memory behind");
}

Test(workqueue, free_null_is_a_no_op) { workqueue_free(NULL); }
