/* A rate-limited work queue of string keys, with client-go's guarantees:
 *  - deduplicating: a key added many times before it is taken is processed once;
 *  - a key is never handed to two threads at once: a key added while it is being processed is
 *    marked dirty and handed out again only after workqueue_done;
 *  - per-key exponential backoff (workqueue_add_rate_limited; workqueue_forget resets it);
 *  - delayed adds on a timer min-heap (workqueue_add_after);
 *  - clean shutdown: workqueue_shutdown wakes every waiting getter; keys being processed may
 *    still call workqueue_done. Thread-safe throughout. */
#ifndef KUBE_WORKQUEUE_H
#define KUBE_WORKQUEUE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/clock.h"

struct workqueue_options {
    uint64_t base_delay_ms; /* first backoff; default 5 */
    uint64_t max_delay_ms;  /* backoff cap; default 1000 * 1000 (client-go's 1000 s) */
    /* The clock delays and backoff run on; NULL (default): CLOCK_MONOTONIC. Borrowed; must
     * outlive the queue. For tests, which move it by hand (util/clock.h). */
    const struct clock_source *clock;
};

struct workqueue;

/* opts may be NULL. NULL on ENOMEM. */
struct workqueue *workqueue_new(const struct workqueue_options *opts);
/* Adds a key (copied). No-op after shutdown. 0 or -ENOMEM. */
int workqueue_add(struct workqueue *q, const char *key);
/* Adds the key once delay_ms has passed (0: now). A later earlier deadline wins. */
int workqueue_add_after(struct workqueue *q, const char *key, uint64_t delay_ms);
/* Adds after this key's next backoff: base * 2^failures, capped. */
int workqueue_add_rate_limited(struct workqueue *q, const char *key);
/* Resets the key's failure count. */
void workqueue_forget(struct workqueue *q, const char *key);
/* How many times the key was rate-limited since its last forget. */
unsigned workqueue_num_requeues(struct workqueue *q, const char *key);
/* Blocks for the next key. Returns 0 and a key the caller frees (after workqueue_done), or
 * -ESHUTDOWN once the queue is shut down and empty of ready keys. */
int workqueue_get(struct workqueue *q, char **key);
/* Marks the key processed; if it was re-added meanwhile it goes back on the queue. */
void workqueue_done(struct workqueue *q, const char *key);
/* Keys waiting to be handed out (excluding delayed and in-process keys). */
size_t workqueue_len(struct workqueue *q);
/* Keys waiting on the timer heap. */
size_t workqueue_delayed_len(struct workqueue *q);
void workqueue_shutdown(struct workqueue *q);
bool workqueue_shutting_down(struct workqueue *q);
/* Shuts down if needed, joins the timer thread and frees. No getter may still be inside. */
void workqueue_free(struct workqueue *q);

#endif
