/* Deadlines for the C tests, and Criterion's timeouts scaled by the same factor (deadline.h). */
#include "support/deadline.h"

#include <criterion/criterion.h>
#include <criterion/hooks.h>
#include <criterion/internal/ordered-set.h>
#include <errno.h>
#include <time.h>

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void sleep_ms(uint64_t ms)
{
    struct timespec req = {.tv_sec = (time_t)(ms / 1000), .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&req, &req) < 0 && errno == EINTR)
        ;
}

struct test_deadline test_deadline_in(uint64_t ms)
{
    struct test_deadline d = {.start_ms = now_ms()};
    uint64_t scaled = test_ms(ms);
    d.end_ms = d.start_ms + scaled;
    if (scaled % 1000 == 0)
        snprintf(d.text, sizeof(d.text), "%llu s", (unsigned long long)(scaled / 1000));
    else
        snprintf(d.text, sizeof(d.text), "%.1f s", (double)scaled / 1000.0);
    return d;
}

bool test_deadline_passed(const struct test_deadline *d) { return now_ms() >= d->end_ms; }

uint64_t test_deadline_left(const struct test_deadline *d)
{
    uint64_t now = now_ms();
    return now >= d->end_ms ? 0 : d->end_ms - now;
}

const char *test_deadline_text(const struct test_deadline *d) { return d->text; }

bool test_deadline_poll_every(struct test_deadline *d, uint64_t interval_ms)
{
    uint64_t left = test_deadline_left(d);
    if (left == 0)
        return false;
    sleep_ms(interval_ms < left ? interval_ms : left);
    return true;
}

bool test_deadline_poll(struct test_deadline *d) { return test_deadline_poll_every(d, TEST_POLL_MS); }

/* On stderr, which Criterion shows as it comes: its error and warning logs would fail the run
 * by themselves (a wait that is meant to time out, too), and its info log is hidden. */
void test_wait_failed(const char *what, const struct test_deadline *d, const char *last)
{
    fprintf(stderr, "[WAIT] timed out after %s waiting for %s%s%s\n", d->text, what,
            last && *last ? "; last seen:\n" : "", last ? last : "");
}

bool test_wait_until(const char *what, uint64_t timeout_ms, bool (*ready)(void *ctx), void *ctx,
                     void (*describe)(void *ctx, char *buf, size_t len))
{
    struct test_deadline d = test_deadline_in(timeout_ms);
    /* The last poll sleeps up to the deadline, so the last look is at the deadline. */
    do {
        if (ready(ctx))
            return true;
    } while (test_deadline_poll(&d));
    char last[4096] = "";
    if (describe)
        describe(ctx, last, sizeof(last));
    test_wait_failed(what, &d, last);
    return false;
}

/* Criterion's .timeout backstops, times the factor (deadline.h). Runs in the runner, which starts
 * each test's process with the timeout it reads from the test (else its suite) at that moment. */
ReportHook(PRE_ALL)(struct criterion_test_set *set)
{
    double k = test_time_scale(); /* a bad value ends the run here, with the message */
    if (k == 1.0)
        return;
    struct criterion_suite_set *suite;
    FOREACH_SET(suite, set->suites) {
        if (suite->suite.data && suite->suite.data->timeout > 0)
            suite->suite.data->timeout *= k;
        struct criterion_test *test;
        FOREACH_SET(test, suite->tests) {
            if (test->data && test->data->timeout > 0)
                test->data->timeout *= k;
        }
    }
}
