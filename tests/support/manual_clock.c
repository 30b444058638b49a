/* A clock a test moves by hand (manual_clock.h). */
#include "support/manual_clock.h"

#include <stddef.h>

static uint64_t read_now(const struct clock_source *source)
{
    const struct manual_clock *c =
        (const struct manual_clock *)((const char *)source - offsetof(struct manual_clock, source));
    return atomic_load(&c->now_ms);
}

void manual_clock_init(struct manual_clock *c)
{
    c->source.now_ms = read_now;
    c->source.poll_ms = MANUAL_CLOCK_POLL_MS;
    atomic_init(&c->now_ms, MANUAL_CLOCK_START_MS);
}

void manual_clock_advance(struct manual_clock *c, uint64_t ms) { atomic_fetch_add(&c->now_ms, ms); }

uint64_t manual_clock_now(struct manual_clock *c) { return atomic_load(&c->now_ms); }
