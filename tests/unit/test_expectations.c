/* What the controller remembers between reconciles (expectations.h): entries expire and are
 * swept, so memory does not grow with the jobs and pods ever seen; refusals stand until their
 * object is written. */
#include <criterion/criterion.h>
#include <stdio.h>

#include "mpijob/expectations.h"
#include "support/manual_clock.h"

/* The TTL runs on a clock the test moves: the entries expire when it says so, however slowly
 * the 2,000 insertions went. */
Test(expectations, counted_failures_and_creations_are_swept_after_the_ttl)
{
    struct manual_clock clk;
    manual_clock_init(&clk);
    struct expectations *e = expectations_new();
    cr_assert_not_null(e);
    expectations_set_clock(e, &clk.source);
    expectations_set_ttl(e, 20);
    char uid[64];
    for (int i = 0; i < 1000; i++) {
        snprintf(uid, sizeof(uid), "uid-%d", i);
        expect_failure_counted(e, uid);
        expect_created(e, &KUBE_PODS, "ns", uid);
    }
    cr_assert(expect_failure_is_counted(e, "uid-7"));
    cr_assert(expect_pending(e, &KUBE_PODS, "ns", "uid-7"));
    cr_assert_eq(expectations_size(e), 2000);
    manual_clock_advance(&clk, 19);
    cr_assert(expect_failure_is_counted(e, "uid-8"), "expired before the TTL");
    cr_assert(expect_pending(e, &KUBE_PODS, "ns", "uid-8"), "expired before the TTL");
    expect_failure_counted(e, "one-more"); /* no sweep yet: the TTL has not passed since the last */
    cr_assert_eq(expectations_size(e), 2001);
    manual_clock_advance(&clk, 1);
    cr_assert_not(expect_failure_is_counted(e, "uid-8"), "expired");
    cr_assert_not(expect_pending(e, &KUBE_PODS, "ns", "uid-8"), "expired");
    expect_failure_counted(e, "two-more"); /* the next write sweeps */
    cr_assert_eq(expectations_size(e), 2, "swept: %zu entries left", expectations_size(e));
    cr_assert(expect_failure_is_counted(e, "one-more"), "one younger than the TTL stays");
    cr_assert(expect_failure_is_counted(e, "two-more"));
    expectations_free(e);
}

/* A deletion the server accepted is remembered by uid for the TTL: a reconcile whose cache still
 * shows the pod as it was does not count it, nor deletes it again; then it is swept. */
Test(expectations, accepted_deletions_are_remembered_by_uid_until_the_ttl)
{
    struct manual_clock clk;
    manual_clock_init(&clk);
    struct expectations *e = expectations_new();
    cr_assert_not_null(e);
    expectations_set_clock(e, &clk.source);
    expectations_set_ttl(e, 20);
    expect_deleted(e, "uid-a");
    expect_deleted(e, NULL); /* a list item without a uid: nothing */
    expect_deleted(e, "");
    cr_assert(expect_deletion_pending(e, "uid-a"));
    cr_assert_not(expect_deletion_pending(e, "uid-b"), "another pod, or the new one under the same name");
    cr_assert_not(expect_deletion_pending(e, NULL));
    cr_assert_eq(expectations_size(e), 1);
    manual_clock_advance(&clk, 19);
    cr_assert(expect_deletion_pending(e, "uid-a"), "expired before the TTL");
    manual_clock_advance(&clk, 1);
    cr_assert_not(expect_deletion_pending(e, "uid-a"), "expired");
    expect_deleted(e, "uid-c"); /* the next write sweeps */
    cr_assert_eq(expectations_size(e), 1, "swept: %zu entries left", expectations_size(e));
    cr_assert_not(expect_deletion_pending(NULL, "uid-c"), "no expectations: nothing remembered");
    expectations_free(e);
}

Test(expectations, the_first_refusal_stands_until_its_object_is_written)
{
    struct expectations *e = expectations_new();
    struct refusal r;
    cr_assert_not(expect_refusal(e, "ns/j", &r));
    expect_refused(e, "ns/j", "Pod", "j-worker-3", "exceeded quota");
    expect_refused(e, "ns/j", "Pod", "j-worker-2", "exceeded quota"); /* in parallel: does not take over */
    cr_assert(expect_refusal(e, "ns/j", &r));
    cr_assert_str_eq(r.name, "j-worker-3");
    expect_refused(e, "ns/j", "Pod", "j-worker-3", "exceeded quota: used 3");
    cr_assert(expect_refusal(e, "ns/j", &r));
    cr_assert_str_eq(r.message, "exceeded quota: used 3", "the same object's newer message replaces");
    expect_accepted(e, "ns/j", "Pod", "j-worker-2"); /* another object: the refusal stands */
    cr_assert(expect_refusal(e, "ns/j", &r));
    expect_accepted(e, "ns/j", "Pod", "j-worker-3");
    cr_assert_not(expect_refusal(e, "ns/j", &r));
    expect_refused(e, "ns/k", "Pod", "k-worker-0", "denied");
    expect_forget_job(e, "ns/k");
    cr_assert_not(expect_refusal(e, "ns/k", &r), "a deleted job's refusal goes with it");
    cr_assert_eq(expectations_size(e), 0);
    expectations_free(e);
}

Test(expectations, the_launcher_log_read_is_kept_per_job_until_the_job_goes)
{
    struct expectations *e = expectations_new();
    char uid[64];
    cr_assert_not(expect_log_read_uid(e, "ns/j", uid, sizeof(uid)));
    expect_log_read(e, "ns/j", "uid-launcher-1");
    expect_log_read(e, "ns/j", "uid-launcher-2"); /* a later run's pod replaces the earlier one */
    cr_assert(expect_log_read_uid(e, "ns/j", uid, sizeof(uid)));
    cr_assert_str_eq(uid, "uid-launcher-2");
    cr_assert_eq(expectations_size(e), 1, "one entry per job, however many launcher pods");
    expect_forget_job(e, "ns/j");
    cr_assert_not(expect_log_read_uid(e, "ns/j", uid, sizeof(uid)), "a deleted job's entry goes with it");
    cr_assert_eq(expectations_size(e), 0);
    expectations_free(e);
}

Test(expectations, empty_launcher_log_reads_are_counted_per_pod_until_the_log_is_read)
{
    struct expectations *e = expectations_new();
    struct manual_clock clk;
    manual_clock_init(&clk);
    expectations_set_clock(e, &clk.source);
    uint64_t since = 99;
    cr_assert_eq(expect_log_empty_reads(e, "ns/j", "uid-launcher-1", &since), 0);
    cr_assert_eq(since, 0);
    cr_assert_eq(expect_log_empty(e, "ns/j", "uid-launcher-1"), 1);
    manual_clock_advance(&clk, 1500);
    cr_assert_eq(expect_log_empty_reads(e, "ns/j", "uid-launcher-1", &since), 1);
    cr_assert_eq(since, 1500, "the time since the last empty read, on the injected clock");
    cr_assert_eq(expect_log_empty(e, "ns/j", "uid-launcher-1"), 2);
    cr_assert_eq(expect_log_empty_reads(e, "ns/j", "uid-launcher-1", &since), 2);
    cr_assert_eq(since, 0);
    cr_assert_eq(expect_log_empty_reads(e, "ns/j", "uid-other", &since), 0, "another pod has no count");
    cr_assert_eq(expect_log_empty(e, "ns/j", "uid-launcher-2"), 1, "another launcher pod counts from 1");
    cr_assert_eq(expect_log_empty(e, "ns/k", "uid-launcher-3"), 1, "another job has its own count");
    cr_assert_eq(expectations_size(e), 2);
    expect_log_read(e, "ns/j", "uid-launcher-2"); /* read for good: its count goes */
    cr_assert_eq(expectations_size(e), 2, "the read pod, and ns/k's count");
    cr_assert_eq(expect_log_empty(e, "ns/j", "uid-launcher-2"), 1);
    expect_forget_job(e, "ns/j");
    expect_forget_job(e, "ns/k");
    cr_assert_eq(expectations_size(e), 0, "a deleted job's counts go with it");
    cr_assert_eq(expect_log_empty(NULL, "ns/j", "u"), 0);
    expectations_free(e);
}
