/* Time helpers: a monotonic clock for timeouts and backoff, wall time for API timestamps. */
#ifndef UTIL_CLOCK_H
#define UTIL_CLOCK_H

#include <stdint.h>
#include <time.h>

/* Milliseconds on CLOCK_MONOTONIC. */
uint64_t clock_now_ms(void);
/* Milliseconds on CLOCK_MONOTONIC to the nanosecond, for timing work. */
double clock_now_ms_precise(void);
/* Sleeps for ms milliseconds (restarts after signals). */
void clock_sleep_ms(uint64_t ms);
/* Fills ts with the absolute time ms from now on CLOCK_REALTIME or CLOCK_MONOTONIC, for
 * pthread_cond_timedwait (monotonic for condvars set up with pthread_condattr_setclock). */
void clock_deadline_realtime(struct timespec *ts, uint64_t ms_from_now);
void clock_deadline_monotonic(struct timespec *ts, uint64_t ms_from_now);
/* RFC 3339 UTC "2026-11-21T13:05:33Z" (Kubernetes metav1.Time); out needs 21 bytes. */
void clock_rfc3339(time_t t, char out[21]);
/* RFC 3339 with microseconds "2026-11-21T13:05:33.123456Z" (metav1.MicroTime); out needs 28. */
void clock_rfc3339_micro(char out[28]);
/* The same with milliseconds "2026-11-21T13:05:33.123Z"; out needs 25. */
void clock_rfc3339_milli(char out[25]);
/* Parses RFC 3339 (with optional fraction, 'Z' or +hh:mm offset). 0 on success, -EINVAL. */
int clock_parse_rfc3339(const char *s, time_t *out);
/* A pseudo-random integer in [0, n) from a thread-local generator, for jitter. */
uint64_t clock_jitter(uint64_t n);

/* Where an object whose behaviour depends on elapsed time (a TTL, a backoff, a lease) reads the
 * time. NULL, the default everywhere, is CLOCK_MONOTONIC: clock_now_ms. A test passes a clock of
 * its own and moves it by hand, so that nothing the test checks depends on how fast the machine
 * is (tests/support/manual_clock.h).
 *
 * A thread that sleeps until a deadline on such a clock still sleeps on a real condition
 * variable: clock_source_sleep_ms, called just before each such sleep, says for how long (real
 * milliseconds) before it reads the clock again. For CLOCK_MONOTONIC that is the time left; a
 * clock moved by hand sets poll_ms, and its sleepers look again at least that often. Its
 * `sleeping` hook, when set, learns of each sleep: a test knows from it that a thread has acted
 * on the time it was shown and is idle again. */
struct clock_source {
    uint64_t (*now_ms)(const struct clock_source *c);
    uint64_t poll_ms;                                 /* 0: sleepers sleep until their deadline */
    void (*sleeping)(const struct clock_source *c); /* optional */
};

static inline uint64_t clock_source_now(const struct clock_source *c)
{
    return c ? c->now_ms(c) : clock_now_ms();
}

/* How long, in real milliseconds, to sleep for a deadline left_ms away on c. */
static inline uint64_t clock_source_sleep_ms(const struct clock_source *c, uint64_t left_ms)
{
    if (!c)
        return left_ms;
    if (c->sleeping)
        c->sleeping(c);
    return c->poll_ms && c->poll_ms < left_ms ? c->poll_ms : left_ms;
}

#endif
