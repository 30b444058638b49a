/* A clock a test moves by hand (util/clock.h's struct clock_source), for the time-dependent
 * logic under test: an expectation's TTL, a work queue's delays and backoff, a lease's terms.
 * Nothing it drives depends on how fast the machine runs: the time the logic sees moves only
 * when the test says so.
 *
 *     struct manual_clock clk;
 *     manual_clock_init(&clk);
 *     struct workqueue_options opts = {.clock = &clk.source};
 *     ...
 *     manual_clock_advance(&clk, 499);
 *
 * Threads sleeping on it (a work queue's timer, an elector) look at it again every
 * MANUAL_CLOCK_POLL_MS of real time, so they see a move soon after it is made, and
 * manual_clock_settle tells when the one thread sleeping on a clock has acted on it. Thread-safe. */
#ifndef TESTS_SUPPORT_MANUAL_CLOCK_H
#define TESTS_SUPPORT_MANUAL_CLOCK_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "util/clock.h"

#define MANUAL_CLOCK_POLL_MS 2
/* Where a clock starts: far from 0, so that nothing under test meets a time before its start. */
#define MANUAL_CLOCK_START_MS 1000000u

struct manual_clock {
    struct clock_source source; /* what the logic under test is given */
    atomic_uint_fast64_t now_ms;
    atomic_uint sleeps; /* how many times a thread went to sleep on it */
};

void manual_clock_init(struct manual_clock *c);
void manual_clock_advance(struct manual_clock *c, uint64_t ms);
uint64_t manual_clock_now(struct manual_clock *c);

/* Waits until the thread sleeping on c has read the time after this call and gone back to
 * sleep: whatever the time shown asked of it (an attempt, a renewal) is done. A sleeper reads the
 * time between two sleeps, so two sleeps after the call are enough. For a clock one thread
 * sleeps on. False after 30 s (scaled) without them: the thread is busy or gone. */
bool manual_clock_settle(struct manual_clock *c);

#endif
