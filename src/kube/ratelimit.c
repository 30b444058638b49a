#include "kube/ratelimit.h"

#include <pthread.h>
#include <stdlib.h>

#include "util/clock.h"

struct ratelimit {
    pthread_mutex_t lock;
    double qps;
    double burst;
    double tokens;
    uint64_t last_ms;
};

struct ratelimit *ratelimit_new(double qps, int burst)
{
    struct ratelimit *rl = calloc(1, sizeof(*rl));
    if (!rl)
        return NULL;
    pthread_mutex_init(&rl->lock, NULL);
    rl->qps = qps;
    rl->burst = burst < 1 ? 1 : burst;
    rl->tokens = rl->burst;
    rl->last_ms = clock_now_ms();
    return rl;
}

static void refill(struct ratelimit *rl, uint64_t now)
{
    rl->tokens += (double)(now - rl->last_ms) * rl->qps / 1000.0;
    if (rl->tokens > rl->burst)
        rl->tokens = rl->burst;
    rl->last_ms = now;
}

/* Reserves a token (possibly going negative, as golang.org/x/time/rate does) and returns how
 * long the caller must wait before using it. Reservation keeps waiters in FIFO order. */
static uint64_t reserve(struct ratelimit *rl)
{
    if (rl->qps <= 0)
        return 0;
    pthread_mutex_lock(&rl->lock);
    refill(rl, clock_now_ms());
    rl->tokens -= 1.0;
    uint64_t wait = 0;
    if (rl->tokens < 0)
        wait = (uint64_t)(-rl->tokens * 1000.0 / rl->qps + 0.999);
    pthread_mutex_unlock(&rl->lock);
    return wait;
}

uint64_t ratelimit_wait(struct ratelimit *rl)
{
    uint64_t wait = reserve(rl);
    if (wait)
        clock_sleep_ms(wait);
    return wait;
}

int ratelimit_try(struct ratelimit *rl)
{
    if (rl->qps <= 0)
        return 1;
    pthread_mutex_lock(&rl->lock);
    refill(rl, clock_now_ms());
    int ok = rl->tokens >= 1.0;
    if (ok)
        rl->tokens -= 1.0;
    pthread_mutex_unlock(&rl->lock);
    return ok;
}

void ratelimit_free(struct ratelimit *rl)
{
    if (!rl)
        return;
    pthread_mutex_destroy(&rl->lock);
    free(rl);
}
