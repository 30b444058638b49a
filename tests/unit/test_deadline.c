/* The tests' one time factor (support/deadline.h): $MPIJOB_TEST_TIME_SCALE scales every wait and
 * every Criterion .timeout, and a bad value is an error, not ignored. */
#include <criterion/criterion.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "support/deadline.h"
#include "util/clock.h"

Test(deadline, the_factor_is_a_number_from_1_to_1000)
{
    static const struct {
        const char *raw;
        double want; /* 0: refused */
        const char *error;
    } cases[] = {
        {NULL, 1.0, NULL},
        {"", 1.0, NULL},
        {"  ", 1.0, NULL},
        {"1", 1.0, NULL},
        {" 2.5\n", 2.5, NULL},
        {"1000", 1000.0, NULL},
        {"abc", 0, "MPIJOB_TEST_TIME_SCALE='abc' is not a number"},
        {"2x", 0, "MPIJOB_TEST_TIME_SCALE='2x' is not a number"},
        {"0.5", 0, "MPIJOB_TEST_TIME_SCALE='0.5': want a factor from 1 to 1000"},
        {"-3", 0, "want a factor from 1 to 1000"},
        {"1001", 0, "want a factor from 1 to 1000"},
        {"nan", 0, "want a factor from 1 to 1000"},
        {"inf", 0, "want a factor from 1 to 1000"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        double got = -1;
        char err[256] = "";
        int rc = test_time_scale_parse(cases[i].raw, &got, err, sizeof(err));
        if (cases[i].want > 0) {
            cr_expect_eq(rc, 0, "'%s': %s", cases[i].raw ? cases[i].raw : "(unset)", err);
            cr_expect_eq(got, cases[i].want, "'%s' gave %g", cases[i].raw ? cases[i].raw : "(unset)", got);
        } else {
            cr_expect_eq(rc, -1, "'%s' was accepted as %g", cases[i].raw, got);
            cr_expect(strstr(err, cases[i].error) != NULL, "'%s': %s", cases[i].raw, err);
        }
    }
}

Test(deadline, a_factor_of_2_doubles_every_deadline)
{
    cr_assert_eq(setenv(TEST_TIME_SCALE_ENV, "2", 1), 0);
    cr_assert_eq(test_time_scale(), 2.0);
    cr_assert_eq(test_ms(1500), 3000);
    struct test_deadline d = test_deadline_in(30000);
    cr_assert_eq(d.end_ms - d.start_ms, 60000);
    cr_assert_str_eq(test_deadline_text(&d), "60 s");
    cr_assert_eq(setenv(TEST_TIME_SCALE_ENV, "", 1), 0);
    cr_assert_eq(test_ms(1500), 1500, "empty is the default, 1");
    d = test_deadline_in(1500);
    cr_assert_str_eq(test_deadline_text(&d), "1.5 s");
}

struct counter {
    int calls;
    int ready_at;
    int described;
};

static bool count_ready(void *ctx)
{
    struct counter *c = ctx;
    return ++c->calls >= c->ready_at;
}

static void count_describe(void *ctx, char *buf, size_t len)
{
    struct counter *c = ctx;
    c->described++;
    snprintf(buf, len, "%d calls", c->calls);
}

Test(deadline, a_wait_polls_until_ready_and_describes_the_last_state_on_a_timeout)
{
    struct counter c = {.ready_at = 3};
    cr_assert(test_wait_until("the third call", 60000, count_ready, &c, count_describe));
    cr_assert_eq(c.calls, 3);
    cr_assert_eq(c.described, 0);

    struct counter never = {.ready_at = 1 << 30};
    uint64_t t0 = clock_now_ms();
    cr_assert_not(test_wait_until("never", 60, count_ready, &never, count_describe));
    cr_assert_geq(clock_now_ms() - t0, 60, "gave up before its deadline");
    cr_assert_geq(never.calls, 2, "looked once at the start and once at the deadline at least");
    cr_assert_eq(never.described, 1);
}

/* ---- Criterion's timeouts, scaled in the runner -------------------------------------------- */

/* Sleeps past its own .timeout of 1 s, and only when a run of the probe asks (the test below). */
Test(deadline_probe, sleeps_one_and_a_half_seconds_with_a_timeout_of_one, .timeout = 1)
{
    if (!getenv("MPIJOB_DEADLINE_PROBE"))
        return;
    clock_sleep_ms(1500);
}

/* Runs this binary's probe with the factor; the runner's exit status and output. */
static int run_probe(const char *factor, char *out, size_t len)
{
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    cr_assert_gt(n, 0);
    exe[n] = 0;
    char cmd[8192];
    /* BXFI_MAP makes a process of this binary a test's worker: the probe's runner must not have it. */
    snprintf(cmd, sizeof(cmd),
             "env -u BXFI_MAP MPIJOB_DEADLINE_PROBE=1 %s='%s' '%s' --filter 'deadline_probe/*' 2>&1",
             TEST_TIME_SCALE_ENV, factor, exe);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    size_t got = fread(out, 1, len - 1, p);
    out[got] = 0;
    int status = pclose(p);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

Test(deadline, criterion_timeouts_are_scaled_in_the_runner, .timeout = 120)
{
    char out[8192];
    cr_assert_neq(run_probe("1", out, sizeof(out)), 0, "a 1.5 s test passed its 1 s timeout:\n%s", out);
    cr_assert(strstr(out, "Timed out"), "%s", out);
    /* 30: far more than the sleep needs, however slow the machine is at starting processes. */
    cr_assert_eq(run_probe("30", out, sizeof(out)), 0, "with the factor 30 its timeout is 30 s:\n%s", out);
    cr_assert_eq(run_probe("abc", out, sizeof(out)), 2, "a bad factor stops the run:\n%s", out);
    cr_assert(strstr(out, "MPIJOB_TEST_TIME_SCALE='abc' is not a number"), "%s", out);
    cr_assert_null(strstr(out, "Synthesis"), "no test ran:\n%s", out);
}
