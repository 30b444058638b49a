/* The metrics registry: exact exposition text, label escaping and ordering, histogram
 * buckets, type and argument errors, concurrent updates, and a check of the rendered text by
 * an independent parser of the text format (tests/unit/promcheck.py). */
#include <criterion/criterion.h>

#include "support/promcheck.h"
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "server/metrics.h"

static int promcheck(const char *text) { return promcheck_run(text, true); }

Test(metrics, exact_text_for_a_small_registry)
{
    struct metrics *m = metrics_new();
    cr_assert_not_null(m);
    const char *const created_a[] = {"namespace", "a", NULL};
    const char *const created_b[] = {"namespace", "b", NULL};
    cr_assert_eq(metrics_counter_add(m, "mpijob_jobs_created_total", "MPIJobs created.", 1,
                                     created_b), 0);
    cr_assert_eq(metrics_counter_add(m, "mpijob_jobs_created_total", "ignored later", 2,
                                     created_a), 0);
    cr_assert_eq(metrics_counter_add(m, "mpijob_jobs_created_total", NULL, 1, created_a), 0);
    cr_assert_eq(metrics_gauge_set(m, "mpijob_is_leader", "1 when leading.", 1, NULL), 0);
    cr_assert_eq(metrics_gauge_set(m, "mpijob_workqueue_depth", "Keys waiting.", 7, NULL), 0);
    cr_assert_eq(metrics_gauge_add(m, "mpijob_workqueue_depth", NULL, -2.5, NULL), 0);
    const double b[] = {0.1, 1};
    cr_assert_eq(metrics_histogram_observe(m, "mpijob_reconcile_seconds", "Reconcile time.", b,
                                           2, 0.05, NULL), 0);
    cr_assert_eq(metrics_histogram_observe(m, "mpijob_reconcile_seconds", NULL, b, 2, 3, NULL),
                 0);
    char *text = metrics_render(m);
    cr_assert_not_null(text);
    cr_assert_str_eq(text,
                     "# HELP mpijob_is_leader 1 when leading.\n"
                     "# TYPE mpijob_is_leader gauge\n"
                     "mpijob_is_leader 1\n"
                     "# HELP mpijob_jobs_created_total MPIJobs created.\n"
                     "# TYPE mpijob_jobs_created_total counter\n"
                     "mpijob_jobs_created_total{namespace=\"a\"} 3\n"
                     "mpijob_jobs_created_total{namespace=\"b\"} 1\n"
                     "# HELP mpijob_reconcile_seconds Reconcile time.\n"
                     "# TYPE mpijob_reconcile_seconds histogram\n"
                     "mpijob_reconcile_seconds_bucket{le=\"0.1\"} 1\n"
                     "mpijob_reconcile_seconds_bucket{le=\"1\"} 1\n"
                     "mpijob_reconcile_seconds_bucket{le=\"+Inf\"} 2\n"
                     "mpijob_reconcile_seconds_sum 3.05\n"
                     "mpijob_reconcile_seconds_count 2\n"
                     "# HELP mpijob_workqueue_depth Keys waiting.\n"
                     "# TYPE mpijob_workqueue_depth gauge\n"
                     "mpijob_workqueue_depth 4.5\n");
    cr_assert_eq(promcheck(text), 0);
    free(text);
    metrics_free(m);
}

Test(metrics, empty_registry_renders_empty_text)
{
    struct metrics *m = metrics_new();
    char *text = metrics_render(m);
    cr_assert_str_eq(text, "");
    free(text);
    metrics_free(m);
    metrics_free(NULL);
}

Test(metrics, labels_are_escaped_and_sorted_by_name)
{
    struct metrics *m = metrics_new();
    const char *const l[] = {"verb", "GET", "code", "a\\b\"c\nd", NULL};
    const char *const same[] = {"code", "a\\b\"c\nd", "verb", "GET", NULL};
    cr_assert_eq(metrics_counter_add(m, "api_requests_total", "Help with \\ and\nnewline.", 1,
                                     l), 0);
    cr_assert_eq(metrics_counter_add(m, "api_requests_total", NULL, 1, same), 0);
    char *text = metrics_render(m);
    cr_assert_str_eq(text, "# HELP api_requests_total Help with \\\\ and\\nnewline.\n"
                           "# TYPE api_requests_total counter\n"
                           "api_requests_total{code=\"a\\\\b\\\"c\\nd\",verb=\"GET\"} 2\n");
    cr_assert_eq(promcheck(text), 0);
    free(text);
    metrics_free(m);
}

Test(metrics, histogram_buckets_are_cumulative_with_inf_sum_and_count)
{
    struct metrics *m = metrics_new();
    const double b[] = {0.005, 0.25, 1, 10};
    const char *const l[] = {"controller", "mpijob", NULL};
    const double obs[] = {0.001, 0.005, 0.2, 0.5, 0.75, 2, 100, -1};
    double sum = 0;
    for (size_t i = 0; i < sizeof(obs) / sizeof(obs[0]); i++) {
        cr_assert_eq(metrics_histogram_observe(m, "lat_seconds", "Latency.", b, 4, obs[i], l), 0);
        sum += obs[i];
    }
    char *text = metrics_render(m);
    char want[2048];
    snprintf(want, sizeof(want),
             "# HELP lat_seconds Latency.\n"
             "# TYPE lat_seconds histogram\n"
             "lat_seconds_bucket{controller=\"mpijob\",le=\"0.005\"} 3\n"
             "lat_seconds_bucket{controller=\"mpijob\",le=\"0.25\"} 4\n"
             "lat_seconds_bucket{controller=\"mpijob\",le=\"1\"} 6\n"
             "lat_seconds_bucket{controller=\"mpijob\",le=\"10\"} 7\n"
             "lat_seconds_bucket{controller=\"mpijob\",le=\"+Inf\"} 8\n"
             "lat_seconds_sum{controller=\"mpijob\"} %.17g\n"
             "lat_seconds_count{controller=\"mpijob\"} 8\n", sum);
    /* the sum is printed in its shortest exact form; compare the value, then the rest */
    char *sum_line = strstr(text, "lat_seconds_sum{controller=\"mpijob\"} ");
    cr_assert_not_null(sum_line);
    cr_assert_eq(strtod(sum_line + strlen("lat_seconds_sum{controller=\"mpijob\"} "), NULL), sum);
    char *want_sum = strstr(want, "lat_seconds_sum");
    cr_assert_eq(strncmp(text, want, (size_t)(want_sum - want)), 0, "%s", text);
    cr_assert_str_eq(strstr(text, "lat_seconds_count"), strstr(want, "lat_seconds_count"));
    cr_assert_eq(promcheck(text), 0);
    free(text);
    metrics_free(m);
}

/* Declared before any observation: scraped with zero counts, and an observation then counts as
 * usual; other bounds than the declared ones are refused. */
Test(metrics, a_declared_histogram_renders_zero_counts)
{
    struct metrics *m = metrics_new();
    const double b[] = {0.1, 1};
    cr_assert_eq(metrics_histogram_declare(m, "rec_seconds", "Reconcile time.", b, 2, NULL), 0);
    cr_assert_eq(metrics_histogram_declare(m, "rec_seconds", "Reconcile time.", b, 2, NULL), 0, "twice is fine");
    char *text = metrics_render(m);
    cr_assert_str_eq(text, "# HELP rec_seconds Reconcile time.\n"
                           "# TYPE rec_seconds histogram\n"
                           "rec_seconds_bucket{le=\"0.1\"} 0\n"
                           "rec_seconds_bucket{le=\"1\"} 0\n"
                           "rec_seconds_bucket{le=\"+Inf\"} 0\n"
                           "rec_seconds_sum 0\n"
                           "rec_seconds_count 0\n");
    cr_assert_eq(promcheck(text), 0);
    free(text);
    cr_assert_eq(metrics_histogram_observe(m, "rec_seconds", NULL, b, 2, 0.5, NULL), 0);
    text = metrics_render(m);
    cr_assert_not_null(strstr(text, "rec_seconds_bucket{le=\"1\"} 1\nrec_seconds_bucket{le=\"+Inf\"} 1\n"), "%s", text);
    free(text);
    const double other[] = {0.5};
    cr_assert_eq(metrics_histogram_declare(m, "rec_seconds", NULL, other, 1, NULL), -EINVAL);
    const double bad[] = {1, 0.5};
    cr_assert_eq(metrics_histogram_declare(m, "bad_seconds", NULL, bad, 2, NULL), -EINVAL);
    metrics_free(m);
}

Test(metrics, special_values)
{
    struct metrics *m = metrics_new();
    const char *const a[] = {"k", "a", NULL}, *const b[] = {"k", "b", NULL},
                      *const c[] = {"k", "c", NULL}, *const d[] = {"k", "d", NULL};
    metrics_gauge_set(m, "g", "", INFINITY, a);
    metrics_gauge_set(m, "g", "", -INFINITY, b);
    metrics_gauge_set(m, "g", "", NAN, c);
    metrics_gauge_set(m, "g", "", 1e-7, d);
    char *text = metrics_render(m);
    cr_assert_str_eq(text, "# HELP g \n# TYPE g gauge\ng{k=\"a\"} +Inf\ng{k=\"b\"} -Inf\n"
                           "g{k=\"c\"} NaN\ng{k=\"d\"} 1e-07\n");
    cr_assert_eq(promcheck(text), 0);
    free(text);
    metrics_free(m);
}

Test(metrics, bad_arguments_are_refused)
{
    struct metrics *m = metrics_new();
    const double b[] = {1, 2}, b2[] = {1, 3}, bad[] = {2, 1};
    const char *const four[] = {"a", "1", "b", "2", "c", "3", "d", "4", NULL};
    const char *const dup[] = {"a", "1", "a", "2", NULL};
    const char *const reserved[] = {"__name", "1", NULL};
    const char *const le[] = {"le", "1", NULL};
    const char *const odd[] = {"a", NULL};
    const char *const badname[] = {"1a", "x", NULL};
    cr_assert_eq(metrics_counter_add(m, "9bad", "", 1, NULL), -EINVAL);
    cr_assert_eq(metrics_counter_add(m, "bad-name", "", 1, NULL), -EINVAL);
    cr_assert_eq(metrics_counter_add(m, "", "", 1, NULL), -EINVAL);
    cr_assert_eq(metrics_counter_add(m, NULL, "", 1, NULL), -EINVAL);
    cr_assert_eq(metrics_counter_add(m, "c", "", -1, NULL), -EINVAL);
    cr_assert_eq(metrics_counter_add(m, "c", "", NAN, NULL), -EINVAL);
    cr_assert_eq(metrics_counter_add(m, "c", "", 1, four), -EINVAL);
    cr_assert_eq(metrics_counter_add(m, "c", "", 1, dup), -EINVAL);
    cr_assert_eq(metrics_counter_add(m, "c", "", 1, reserved), -EINVAL);
    cr_assert_eq(metrics_counter_add(m, "c", "", 1, odd), -EINVAL);
    cr_assert_eq(metrics_counter_add(m, "c", "", 1, badname), -EINVAL);
    cr_assert_eq(metrics_counter_add(m, "ns:c_total", "", 1, NULL), 0);
    cr_assert_eq(metrics_gauge_set(m, "ns:c_total", "", 1, NULL), -EINVAL);
    cr_assert_eq(metrics_histogram_observe(m, "h", "", bad, 2, 1, NULL), -EINVAL);
    cr_assert_eq(metrics_histogram_observe(m, "h", "", b, 2, NAN, NULL), -EINVAL);
    cr_assert_eq(metrics_histogram_observe(m, "h", "", b, 2, 1, le), -EINVAL);
    cr_assert_eq(metrics_histogram_observe(m, "h", "", b, 2, 1, NULL), 0);
    cr_assert_eq(metrics_histogram_observe(m, "h", "", b2, 2, 1, NULL), -EINVAL);
    cr_assert_eq(metrics_histogram_observe(m, "h", "", b, 1, 1, NULL), -EINVAL);
    cr_assert_eq(metrics_counter_add(m, "h", "", 1, NULL), -EINVAL);
    /* names a histogram renders belong to it */
    cr_assert_eq(metrics_gauge_set(m, "h_count", "", 1, NULL), -EINVAL);
    cr_assert_eq(metrics_gauge_set(m, "h_bucket", "", 1, NULL), -EINVAL);
    cr_assert_eq(metrics_gauge_set(m, "x_sum", "", 1, NULL), 0);
    cr_assert_eq(metrics_histogram_observe(m, "x", "", b, 2, 1, NULL), -EINVAL);
    /* a gauge may use le */
    cr_assert_eq(metrics_gauge_set(m, "g", "", 1, le), 0);
    char *text = metrics_render(m);
    cr_assert_eq(promcheck(text), 0);
    free(text);
    metrics_free(m);
}

struct worker_arg {
    struct metrics *m;
    int id;
    int failures;
};

#define ROUNDS 2000

static void *worker(void *p)
{
    struct worker_arg *a = p;
    const double b[] = {0.5, 1.5};
    char id[8];
    snprintf(id, sizeof(id), "%d", a->id);
    const char *const mine[] = {"thread", id, NULL};
    const char *const shared[] = {"kind", "shared", NULL};
    for (int i = 0; i < ROUNDS; i++) {
        a->failures += metrics_counter_add(a->m, "ops_total", "Operations.", 1, shared) != 0;
        a->failures += metrics_counter_add(a->m, "ops_total", "Operations.", 0.5, mine) != 0;
        a->failures += metrics_gauge_add(a->m, "level", "Level.", 1, NULL) != 0;
        a->failures += metrics_histogram_observe(a->m, "obs", "Observed.", b, 2, i % 3, NULL) != 0;
        if (i % 200 == 0)
            free(metrics_render(a->m));
    }
    return NULL;
}

Test(metrics, concurrent_updates_from_four_threads_add_up)
{
    struct metrics *m = metrics_new();
    pthread_t t[4];
    struct worker_arg args[4];
    for (int i = 0; i < 4; i++) {
        args[i] = (struct worker_arg){m, i, 0};
        cr_assert_eq(pthread_create(&t[i], NULL, worker, &args[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        cr_assert_eq(args[i].failures, 0);
    }
    char *text = metrics_render(m);
    cr_assert(strstr(text, "ops_total{kind=\"shared\"} 8000\n"), "%s", text);
    for (int i = 0; i < 4; i++) {
        char line[64];
        snprintf(line, sizeof(line), "ops_total{thread=\"%d\"} 1000\n", i);
        cr_assert(strstr(text, line), "%s", line);
    }
    cr_assert(strstr(text, "\nlevel 8000\n"));
    /* i % 3 over 2000 rounds: 667 zeros, 667 ones, 666 twos, per thread */
    cr_assert(strstr(text, "obs_bucket{le=\"0.5\"} 2668\n"), "%s", text);
    cr_assert(strstr(text, "obs_bucket{le=\"1.5\"} 5336\n"));
    cr_assert(strstr(text, "obs_bucket{le=\"+Inf\"} 8000\n"));
    cr_assert(strstr(text, "obs_sum 7996\n"));
    cr_assert(strstr(text, "obs_count 8000\n"));
    cr_assert_eq(promcheck(text), 0);
    free(text);
    metrics_free(m);
}

/* The checker itself must catch broken text, or passing it proves nothing. */
Test(metrics, promcheck_rejects_invalid_text)
{
    cr_assert_eq(promcheck("# TYPE a counter\na 1\n"), 0);
    static const char *const bad[] = {
        "# TYPE a counter\na 1",                                       /* no final newline */
        "1a 1\n",                                                     /* bad metric name */
        "a{b=\"x\\t\"} 1\n",                                          /* bad escape */
        "a{b=\"x\"} one\n",                                           /* bad value */
        "a 1\n# TYPE a gauge\n",                                      /* TYPE after samples */
        "# TYPE a gauge\n# TYPE a gauge\na 1\n",                      /* second TYPE */
        "# TYPE a counter\na -1\n",                                   /* negative counter */
        "a{x=\"1\"} 1\nb 1\na{x=\"2\"} 1\n",                          /* not contiguous */
        "a 1\na 2\n",                                                 /* repeated sample */
        "a{x=\"1\",x=\"2\"} 1\n",                                     /* repeated label */
        "# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\n"
        "h_sum 1\nh_count 1\n",                                       /* not cumulative */
        "# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_sum 1\nh_count 1\n", /* no +Inf */
        "# TYPE h histogram\nh_bucket{le=\"+Inf\"} 2\nh_sum 1\nh_count 1\n", /* +Inf != count */
        "# TYPE h histogram\nh_bucket{le=\"+Inf\"} 1\nh_count 1\n",   /* no _sum */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        cr_assert_eq(promcheck_run(bad[i], false), 1, "accepted: %s", bad[i]);
}
