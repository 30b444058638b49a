/* Deadlines for the C tests: every wait in a test is a deadline on a condition, scaled by one
 * factor the runner can raise (the same one as the Python tests', tests/support/deadline.py).
 *
 *     struct test_deadline d = test_deadline_in(30000);   (30 s times the factor)
 *     while (!pod_running(name))
 *         cr_assert(test_deadline_poll(&d), "pod %s not Running after %s: %s", name,
 *                   test_deadline_text(&d), describe_pod(name));
 *
 * or, for a condition in a function, test_wait_until. A test never asserts how long something
 * took: it waits, with a generous deadline, for the state it needs, and when the deadline passes
 * it fails with the last state it saw. Deadlines are written for a busy 2-core machine running
 * the sanitizer build; on a slower one the runner raises them all at once with
 *
 *     MPIJOB_TEST_TIME_SCALE=3 make test
 *
 * The factor is a number from 1 to 1000 (default 1, also when the variable is empty); any other
 * value is an error, never silently ignored.
 *
 * Criterion's own backstops scale too. A Test's or TestSuite's .timeout is a static initializer,
 * so deadline.c holds a report hook (PRE_ALL) that multiplies every test's and every suite's
 * .timeout by the factor in the runner process, which enforces them, before the first test is
 * started; with a bad value the hook prints the error and the runner exits with status 2 before
 * any test runs. (Criterion 2.4 as Debian 12 packages it: the runner takes a test's timeout from
 * its test, else from its suite, when it starts the test's process.) A test without a .timeout
 * has none to scale. */
#ifndef TESTS_SUPPORT_DEADLINE_H
#define TESTS_SUPPORT_DEADLINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TEST_TIME_SCALE_ENV "MPIJOB_TEST_TIME_SCALE"

/* How often the waits below look again, unless told otherwise. */
#define TEST_POLL_MS 20

/* Parses a factor as the variable holds it: NULL, empty or blank is 1. Returns 0 with *out
 * set, or -1 with the reason in err. The functions up to test_ms are inline: anything under
 * tests/ may scale a deadline without linking this module (the benchmarks link
 * tests/support/apiserver.c alone). */
static inline int test_time_scale_parse(const char *raw, double *out, char *err, size_t errlen)
{
    while (raw && (*raw == ' ' || *raw == '\t' || *raw == '\n'))
        raw++;
    if (!raw || !*raw) {
        *out = 1.0;
        return 0;
    }
    char *end = NULL;
    double value = strtod(raw, &end);
    while (end && (*end == ' ' || *end == '\t' || *end == '\n'))
        end++;
    if (end == raw || !end || *end) {
        snprintf(err, errlen, "%s='%s' is not a number", TEST_TIME_SCALE_ENV, raw);
        return -1;
    }
    if (!(value >= 1.0) || value > 1000.0) {
        snprintf(err, errlen, "%s='%s': want a factor from 1 to 1000", TEST_TIME_SCALE_ENV, raw);
        return -1;
    }
    *out = value;
    return 0;
}

/* The factor from $MPIJOB_TEST_TIME_SCALE. A bad value ends the process with the message and
 * status 2 (the report hook has stopped the run before any test, so a test never gets here). */
static inline double test_time_scale(void)
{
    double value;
    char err[256];
    if (test_time_scale_parse(getenv(TEST_TIME_SCALE_ENV), &value, err, sizeof(err)) < 0) {
        fprintf(stderr, "%s\n", err);
        exit(2);
    }
    return value;
}

/* ms times the factor. */
static inline uint64_t test_ms(uint64_t ms) { return (uint64_t)((double)ms * test_time_scale() + 0.5); }

/* A point in time test_ms(ms) from now, on CLOCK_MONOTONIC. */
struct test_deadline {
    uint64_t start_ms;
    uint64_t end_ms;
    char text[32]; /* "30 s", for messages */
};

struct test_deadline test_deadline_in(uint64_t ms);
bool test_deadline_passed(const struct test_deadline *d);
/* Milliseconds left (0 once passed). */
uint64_t test_deadline_left(const struct test_deadline *d);
/* The scaled length of the deadline, as "30 s" or "1.5 s". */
const char *test_deadline_text(const struct test_deadline *d);
/* Sleeps TEST_POLL_MS (never past the deadline) and returns true, or returns false at once when
 * the deadline has passed: the step of a wait loop. */
bool test_deadline_poll(struct test_deadline *d);
/* The same with another interval. */
bool test_deadline_poll_every(struct test_deadline *d, uint64_t interval_ms);

/* Polls ready(ctx) every TEST_POLL_MS until it returns true or test_ms(timeout_ms) has passed;
 * true when it held. It is looked at once more at the deadline, so a wait never fails without a
 * last look. On a timeout, describe(ctx, buf, len), when not NULL, writes the state the test would
 * want to see; it is printed with what on stderr, and the caller's assertion then fails the
 * test. */
bool test_wait_until(const char *what, uint64_t timeout_ms, bool (*ready)(void *ctx), void *ctx,
                     void (*describe)(void *ctx, char *buf, size_t len));

/* Prints on stderr that a wait for what timed out after d, and the last state (may be NULL):
 * for a wait loop written out in place. */
void test_wait_failed(const char *what, const struct test_deadline *d, const char *last);

#endif
