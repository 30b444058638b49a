/* Client-side token-bucket rate limiter (client-go's QPS and burst). Thread-safe. */
#ifndef KUBE_RATELIMIT_H
#define KUBE_RATELIMIT_H

#include <stdint.h>

struct ratelimit;

/* qps <= 0 disables limiting. burst < 1 is taken as 1. */
struct ratelimit *ratelimit_new(double qps, int burst);
/* Blocks until a token is available; returns the milliseconds waited. */
uint64_t ratelimit_wait(struct ratelimit *rl);
/* Takes a token if one is available now; 1 when taken, 0 otherwise. */
int ratelimit_try(struct ratelimit *rl);
void ratelimit_free(struct ratelimit *rl);

#endif
