/* A clock a test moves by hand (manual_clock.h). */
#include "support/manual_clock.h"

#include <stddef.h>

#include "support/deadline.h"

static struct manual_clock *of(const struct clock_source *source)
{
    return (struct manual_clock *)((char *)(uintptr_t)source - offsetof(struct manual_clock, source));
}

static uint64_t read_now(const struct clock_source *source) { return atomic_load(&of(source)->now_ms); }

static void count_sleep(const struct clock_source *source) { atomic_fetch_add(&of(source)->sleeps, 1); }

void manual_clock_init(struct manual_clock *c)
{
    c->source.now_ms = read_now;
    c->source.poll_ms = MANUAL_CLOCK_POLL_MS;
    c->source.sleeping = count_sleep;
    atomic_init(&c->now_ms, MANUAL_CLOCK_START_MS);
    atomic_init(&c->sleeps, 0);
}

void manual_clock_advance(struct manual_clock *c, uint64_t ms) { atomic_fetch_add(&c->now_ms, ms); }

uint64_t manual_clock_now(struct manual_clock *c) { return atomic_load(&c->now_ms); }

bool manual_clock_settle(struct manual_clock *c)
{
    unsigned want = atomic_load(&c->sleeps) + 2;
    struct test_deadline d = test_deadline_in(30000);
    while (atomic_load(&c->sleeps) < want)
        if (!test_deadline_poll_every(&d, 1))
            return atomic_load(&c->sleeps) >= want;
    return true;
}
