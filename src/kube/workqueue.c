/* The work queue: one record per known key in a string map, a FIFO ring of ready records, and a
 * min-heap of delayed records served by one timer thread. See docs/internals/workqueue.md.
 *
 * A key's record lives while the key is ready, being processed, waiting on the heap, or has
 * failures to remember; it is freed as soon as it is none of these. The FIFO and the heap hold
 * distinct records, so neither can hold more entries than the map has keys: both arrays are
 * grown when a record is created, and moving a key between states never allocates. That keeps
 * workqueue_done, workqueue_forget and the timer thread free of failure paths. */
#include "kube/workqueue.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "util/clock.h"
#include "util/strmap.h"

#define DEFAULT_BASE_DELAY_MS 5u
#define DEFAULT_MAX_DELAY_MS (1000u * 1000u)
#define NOT_ON_HEAP SIZE_MAX

enum item_flags {
    ITEM_DIRTY = 1u << 0,      /* added and not yet handed out (in the FIFO unless processing) */
    ITEM_PROCESSING = 1u << 1, /* handed out by workqueue_get, not yet workqueue_done */
};

struct item {
    unsigned flags;
    unsigned failures;  /* rate-limited adds since the last forget */
    size_t heap_index;  /* position in the delay heap, or NOT_ON_HEAP */
    uint64_t deadline;  /* ms on the queue's clock, while on the heap */
    uint64_t seq;       /* order of arrival on the heap, to keep equal deadlines FIFO */
    char key[];
};

struct workqueue {
    pthread_mutex_t lock;
    pthread_cond_t ready;      /* getters wait here for the FIFO */
    pthread_cond_t timer_wake; /* the timer thread waits here, on CLOCK_MONOTONIC */
    pthread_t timer;

    struct strmap *items; /* key -> struct item *, owned */

    struct item **fifo; /* ring buffer; capacity >= number of items */
    size_t fifo_head, fifo_len, fifo_cap;

    struct item **heap; /* min-heap by (deadline, seq); capacity >= number of items */
    size_t heap_len, heap_cap;
    uint64_t heap_seq;

    uint64_t base_delay_ms, max_delay_ms;
    const struct clock_source *clock; /* NULL: CLOCK_MONOTONIC */
    bool shutting_down;
};

/* ---- records ---------------------------------------------------------------------------- */

static int reserve(struct workqueue *q, size_t n)
{
    if (n > q->fifo_cap) {
        size_t cap = q->fifo_cap ? q->fifo_cap * 2 : 16;
        while (cap < n)
            cap *= 2;
        struct item **ring = malloc(cap * sizeof(*ring));
        if (!ring)
            return -ENOMEM;
        for (size_t i = 0; i < q->fifo_len; i++)
            ring[i] = q->fifo[(q->fifo_head + i) % q->fifo_cap];
        free(q->fifo);
        q->fifo = ring;
        q->fifo_head = 0;
        q->fifo_cap = cap;
    }
    if (n > q->heap_cap) {
        size_t cap = q->heap_cap ? q->heap_cap * 2 : 16;
        while (cap < n)
            cap *= 2;
        struct item **heap = realloc(q->heap, cap * sizeof(*heap));
        if (!heap)
            return -ENOMEM;
        q->heap = heap;
        q->heap_cap = cap;
    }
    return 0;
}

/* The key's record, created when absent; NULL on ENOMEM. */
static struct item *item_get_or_create(struct workqueue *q, const char *key)
{
    struct item *it = strmap_get(q->items, key);
    if (it)
        return it;
    if (reserve(q, strmap_size(q->items) + 1) < 0)
        return NULL;
    size_t len = strlen(key);
    it = malloc(sizeof(*it) + len + 1);
    if (!it)
        return NULL;
    it->flags = 0;
    it->failures = 0;
    it->heap_index = NOT_ON_HEAP;
    it->deadline = 0;
    it->seq = 0;
    memcpy(it->key, key, len + 1);
    if (strmap_put(q->items, key, it) < 0) {
        free(it);
        return NULL;
    }
    return it;
}

/* Frees the record once nothing refers to it and nothing is remembered about it. */
static void item_release_if_idle(struct workqueue *q, struct item *it)
{
    if (it->flags == 0 && it->failures == 0 && it->heap_index == NOT_ON_HEAP)
        strmap_remove(q->items, it->key); /* the map's destructor frees it */
}

static void fifo_push(struct workqueue *q, struct item *it)
{
    q->fifo[(q->fifo_head + q->fifo_len) % q->fifo_cap] = it; /* capacity reserved at creation */
    q->fifo_len++;
    pthread_cond_signal(&q->ready);
}

static struct item *fifo_pop(struct workqueue *q)
{
    struct item *it = q->fifo[q->fifo_head];
    q->fifo_head = (q->fifo_head + 1) % q->fifo_cap;
    q->fifo_len--;
    return it;
}

/* client-go's Add on an existing record: dirty keys are not queued twice, and a key being
 * processed waits for workqueue_done. */
static void item_mark_ready(struct workqueue *q, struct item *it)
{
    if (it->flags & ITEM_DIRTY)
        return;
    it->flags |= ITEM_DIRTY;
    if (!(it->flags & ITEM_PROCESSING))
        fifo_push(q, it);
}

/* ---- delay heap ------------------------------------------------------------------------- */

static bool heap_before(const struct item *a, const struct item *b)
{
    if (a->deadline != b->deadline)
        return a->deadline < b->deadline;
    return a->seq < b->seq;
}

static void heap_set(struct workqueue *q, size_t i, struct item *it)
{
    q->heap[i] = it;
    it->heap_index = i;
}

static void heap_sift_up(struct workqueue *q, size_t i)
{
    struct item *it = q->heap[i];
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!heap_before(it, q->heap[parent]))
            break;
        heap_set(q, i, q->heap[parent]);
        i = parent;
    }
    heap_set(q, i, it);
}

static void heap_sift_down(struct workqueue *q, size_t i)
{
    struct item *it = q->heap[i];
    for (;;) {
        size_t child = 2 * i + 1;
        if (child >= q->heap_len)
            break;
        if (child + 1 < q->heap_len && heap_before(q->heap[child + 1], q->heap[child]))
            child++;
        if (!heap_before(q->heap[child], it))
            break;
        heap_set(q, i, q->heap[child]);
        i = child;
    }
    heap_set(q, i, it);
}

static struct item *heap_pop(struct workqueue *q)
{
    struct item *top = q->heap[0];
    q->heap_len--;
    if (q->heap_len > 0) {
        heap_set(q, 0, q->heap[q->heap_len]);
        heap_sift_down(q, 0);
    }
    top->heap_index = NOT_ON_HEAP;
    return top;
}

/* Puts the record on the heap, or moves it earlier; a later deadline never replaces an earlier
 * one. Wakes the timer thread when the earliest deadline changed. */
static void heap_schedule(struct workqueue *q, struct item *it, uint64_t deadline)
{
    if (it->heap_index == NOT_ON_HEAP) {
        it->deadline = deadline;
        it->seq = q->heap_seq++;
        heap_set(q, q->heap_len++, it); /* capacity reserved at creation */
    } else if (deadline < it->deadline) {
        it->deadline = deadline;
    } else {
        return;
    }
    heap_sift_up(q, it->heap_index);
    if (it->heap_index == 0)
        pthread_cond_signal(&q->timer_wake);
}

static void *timer_main(void *arg)
{
    struct workqueue *q = arg;
    pthread_mutex_lock(&q->lock);
    while (!q->shutting_down) {
        if (q->heap_len == 0) {
            pthread_cond_wait(&q->timer_wake, &q->lock);
            continue;
        }
        uint64_t deadline = q->heap[0]->deadline, now = clock_source_now(q->clock);
        if (deadline <= now) {
            item_mark_ready(q, heap_pop(q));
            continue;
        }
        /* now truncates, so waking deadline - now ms from this instant makes it read >= deadline. */
        struct timespec until;
        clock_deadline_monotonic(&until, clock_source_sleep_ms(q->clock, deadline - now));
        pthread_cond_timedwait(&q->timer_wake, &q->lock, &until);
    }
    pthread_mutex_unlock(&q->lock);
    return NULL;
}

/* ---- public surface --------------------------------------------------------------------- */

struct workqueue *workqueue_new(const struct workqueue_options *opts)
{
    struct workqueue *q = calloc(1, sizeof(*q));
    if (!q)
        return NULL;
    q->base_delay_ms = opts && opts->base_delay_ms ? opts->base_delay_ms : DEFAULT_BASE_DELAY_MS;
    q->max_delay_ms = opts && opts->max_delay_ms ? opts->max_delay_ms : DEFAULT_MAX_DELAY_MS;
    q->clock = opts ? opts->clock : NULL;
    q->items = strmap_new(free);
    if (!q->items)
        goto fail_map;
    if (reserve(q, 16) < 0)
        goto fail_arrays;

    pthread_condattr_t attr;
    if (pthread_condattr_init(&attr) != 0)
        goto fail_arrays;
    int rc = pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    if (rc == 0)
        rc = pthread_cond_init(&q->timer_wake, &attr);
    pthread_condattr_destroy(&attr);
    if (rc != 0)
        goto fail_arrays;
    if (pthread_cond_init(&q->ready, NULL) != 0)
        goto fail_ready;
    if (pthread_mutex_init(&q->lock, NULL) != 0)
        goto fail_lock;
    if (pthread_create(&q->timer, NULL, timer_main, q) != 0)
        goto fail_thread;
    return q;

fail_thread:
    pthread_mutex_destroy(&q->lock);
fail_lock:
    pthread_cond_destroy(&q->ready);
fail_ready:
    pthread_cond_destroy(&q->timer_wake);
fail_arrays:
    free(q->fifo);
    free(q->heap);
    strmap_free(q->items);
fail_map:
    free(q);
    return NULL;
}

int workqueue_add(struct workqueue *q, const char *key)
{
    int rc = 0;
    pthread_mutex_lock(&q->lock);
    if (q->shutting_down)
        goto out;
    struct item *it = item_get_or_create(q, key);
    if (!it) {
        rc = -ENOMEM;
        goto out;
    }
    item_mark_ready(q, it);
out:
    pthread_mutex_unlock(&q->lock);
    return rc;
}

/* Caller holds the lock. */
static int add_after_locked(struct workqueue *q, const char *key, uint64_t delay_ms, bool count_failure)
{
    if (q->shutting_down)
        return 0;
    struct item *it = item_get_or_create(q, key);
    if (!it)
        return -ENOMEM;
    if (count_failure) {
        unsigned failures = it->failures;
        /* base * 2^failures, capped; base > max >> n is the overflow-free form of base << n > max */
        if (failures >= 64 || q->base_delay_ms > (q->max_delay_ms >> failures))
            delay_ms = q->max_delay_ms;
        else
            delay_ms = q->base_delay_ms << failures;
        if (it->failures < UINT_MAX)
            it->failures++;
    }
    if (delay_ms == 0) {
        item_mark_ready(q, it);
        return 0;
    }
    uint64_t now = clock_source_now(q->clock);
    uint64_t deadline = delay_ms > UINT64_MAX - now ? UINT64_MAX : now + delay_ms;
    heap_schedule(q, it, deadline);
    return 0;
}

int workqueue_add_after(struct workqueue *q, const char *key, uint64_t delay_ms)
{
    pthread_mutex_lock(&q->lock);
    int rc = add_after_locked(q, key, delay_ms, false);
    pthread_mutex_unlock(&q->lock);
    return rc;
}

int workqueue_add_rate_limited(struct workqueue *q, const char *key)
{
    pthread_mutex_lock(&q->lock);
    int rc = add_after_locked(q, key, 0, true);
    pthread_mutex_unlock(&q->lock);
    return rc;
}

void workqueue_forget(struct workqueue *q, const char *key)
{
    pthread_mutex_lock(&q->lock);
    struct item *it = strmap_get(q->items, key);
    if (it) {
        it->failures = 0;
        item_release_if_idle(q, it);
    }
    pthread_mutex_unlock(&q->lock);
}

unsigned workqueue_num_requeues(struct workqueue *q, const char *key)
{
    pthread_mutex_lock(&q->lock);
    struct item *it = strmap_get(q->items, key);
    unsigned n = it ? it->failures : 0;
    pthread_mutex_unlock(&q->lock);
    return n;
}

int workqueue_get(struct workqueue *q, char **key)
{
    int rc = 0;
    pthread_mutex_lock(&q->lock);
    while (q->fifo_len == 0 && !q->shutting_down)
        pthread_cond_wait(&q->ready, &q->lock);
    if (q->fifo_len == 0) {
        rc = -ESHUTDOWN;
        goto out;
    }
    /* Copy before taking the key off the FIFO, so ENOMEM leaves the queue as it was. */
    char *copy = strdup(q->fifo[q->fifo_head]->key);
    if (!copy) {
        rc = -ENOMEM;
        goto out;
    }
    struct item *it = fifo_pop(q);
    it->flags = (it->flags & ~ITEM_DIRTY) | ITEM_PROCESSING;
    *key = copy;
out:
    pthread_mutex_unlock(&q->lock);
    return rc;
}

void workqueue_done(struct workqueue *q, const char *key)
{
    pthread_mutex_lock(&q->lock);
    struct item *it = strmap_get(q->items, key);
    if (it && (it->flags & ITEM_PROCESSING)) {
        it->flags &= ~ITEM_PROCESSING;
        if (it->flags & ITEM_DIRTY)
            fifo_push(q, it);
        else
            item_release_if_idle(q, it);
    }
    pthread_mutex_unlock(&q->lock);
}

size_t workqueue_len(struct workqueue *q)
{
    pthread_mutex_lock(&q->lock);
    size_t n = q->fifo_len;
    pthread_mutex_unlock(&q->lock);
    return n;
}

size_t workqueue_delayed_len(struct workqueue *q)
{
    pthread_mutex_lock(&q->lock);
    size_t n = q->heap_len;
    pthread_mutex_unlock(&q->lock);
    return n;
}

void workqueue_shutdown(struct workqueue *q)
{
    pthread_mutex_lock(&q->lock);
    q->shutting_down = true;
    pthread_cond_broadcast(&q->ready);
    pthread_cond_broadcast(&q->timer_wake);
    pthread_mutex_unlock(&q->lock);
}

bool workqueue_shutting_down(struct workqueue *q)
{
    pthread_mutex_lock(&q->lock);
    bool down = q->shutting_down;
    pthread_mutex_unlock(&q->lock);
    return down;
}

void workqueue_free(struct workqueue *q)
{
    if (!q)
        return;
    workqueue_shutdown(q);
    pthread_join(q->timer, NULL);
    strmap_free(q->items); /* every record, whatever state it was left in */
    free(q->fifo);
    free(q->heap);
    pthread_cond_destroy(&q->ready);
    pthread_cond_destroy(&q->timer_wake);
    pthread_mutex_destroy(&q->lock);
    free(q);
}
