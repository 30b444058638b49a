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
 * MANUAL_CLOCK_POLL_MS of real time, so they see a move soon after it is made. Thread-safe. */
#ifndef TESTS_SUPPORT_MANUAL_CLOCK_H
#define TESTS_SUPPORT_MANUAL_CLOCK_H

#include <stdatomic.h>
#include <stdint.h>

#include "util/clock.h"

#define MANUAL_CLOCK_POLL_MS 2
/* Where a clock starts: far from 0, so that nothing under test meets a time before its start. */
#define MANUAL_CLOCK_START_MS 1000000u

struct manual_clock {
    struct clock_source source; /* what the logic under test is given */
    atomic_uint_fast64_t now_ms;
};

void manual_clock_init(struct manual_clock *c);
void manual_clock_advance(struct manual_clock *c, uint64_t ms);
uint64_t manual_clock_now(struct manual_clock *c);

#endif
