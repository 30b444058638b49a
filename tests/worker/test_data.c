/* Synthetic data: deterministic, a fixed teacher, and shards whose union is the 1-rank data. */
#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "worker/data.h"

Test(data, unit_values_are_deterministic_and_spread_over_minus_one_to_one)
{
    cr_assert_eq(wk_data_unit(1, 2, 3), wk_data_unit(1, 2, 3));
    cr_assert_neq(wk_data_unit(1, 2, 3), wk_data_unit(1, 3, 2));
    cr_assert_neq(wk_data_unit(1, 2, 3), wk_data_unit(2, 2, 3));
    double sum = 0, sq = 0;
    int below = 0;
    const int n = 100000;
    for (int i = 0; i < n; i++) {
        float v = wk_data_unit(9, (uint64_t)i, 0);
        cr_assert(v >= -1.0f && v < 1.0f, "%g", v);
        sum += v;
        sq += (double)v * v;
        below += v < 0;
    }
    cr_assert_lt(fabs(sum / n), 0.01);
    cr_assert_lt(fabs(sq / n - 1.0 / 3.0), 0.01); /* uniform: variance 1/3 */
    cr_assert(below > n / 2 - 1000 && below < n / 2 + 1000);
}

Test(data, teacher_is_fixed_and_independent_of_the_seed)
{
    struct wk_teacher a, b;
    cr_assert_eq(wk_teacher_init(&a, 12, 5), 0);
    cr_assert_eq(wk_teacher_init(&b, 12, 5), 0);
    cr_assert_arr_eq(a.w1, b.w1, sizeof(float) * WK_TEACHER_HIDDEN * 12);
    cr_assert_arr_eq(a.b1, b.b1, sizeof(float) * WK_TEACHER_HIDDEN);
    cr_assert_arr_eq(a.w2, b.w2, sizeof(float) * WK_TEACHER_HIDDEN * 5);
    cr_assert_arr_eq(a.b2, b.b2, sizeof(float) * 5);

    /* the same sample twice: identical; another seed: other inputs, same teacher function */
    float x1[12], y1[5], x2[12], y2[5], x3[12], y3[5];
    wk_data_sample(&a, 1, 17, x1, y1);
    wk_data_sample(&b, 1, 17, x2, y2);
    cr_assert_arr_eq(x1, x2, sizeof(x1));
    cr_assert_arr_eq(y1, y2, sizeof(y1));
    wk_data_sample(&a, 2, 17, x3, y3);
    cr_assert(memcmp(x1, x3, sizeof(x1)) != 0);
    for (int j = 0; j < 12; j++)
        cr_assert_eq(x1[j], wk_data_unit(1, 17, (uint64_t)j));

    /* targets vary from sample to sample: something to learn */
    double mean = 0, var = 0;
    const int n = 2000;
    float *ys = malloc(sizeof(float) * n);
    for (int i = 0; i < n; i++) {
        wk_data_sample(&a, 1, (uint64_t)i, x1, y1);
        ys[i] = y1[0];
        mean += y1[0];
    }
    mean /= n;
    for (int i = 0; i < n; i++)
        var += (ys[i] - mean) * (ys[i] - mean);
    var /= n;
    cr_assert_gt(var, 0.01, "target variance %g", var);
    cr_assert_lt(var, 10.0, "target variance %g", var);
    free(ys);
    wk_teacher_free(&a);
    wk_teacher_free(&b);
    cr_assert_eq(wk_teacher_init(&a, 0, 5), -EINVAL);
}

/* For P ranks: slot after slot, rank 0's rows then rank 1's ... equal the 1-rank slot. */
static void check_union(uint64_t samples, int batch, uint64_t steps, int ranks)
{
    struct wk_teacher t;
    char why[256] = "";
    const int in = 3, out = 2;
    cr_assert_eq(wk_teacher_init(&t, in, out), 0);
    struct wk_shard whole;
    cr_assert_eq(wk_shard_plan(&whole, samples, batch, 1, 0, steps, why, sizeof(why)), 0, "%s",
                 why);
    float *wx = malloc(sizeof(float) * whole.rows * in);
    float *wy = malloc(sizeof(float) * whole.rows * out);
    wk_shard_fill(&whole, &t, 5, wx, wy);

    for (int r = 0; r < ranks; r++) {
        struct wk_shard s;
        cr_assert_eq(wk_shard_plan(&s, samples, batch, ranks, r, steps, why, sizeof(why)), 0,
                     "%s", why);
        cr_assert_eq(s.local_batch, batch / ranks);
        cr_assert_eq(s.slots, whole.slots);
        cr_assert_eq(s.rows, s.slots * (uint64_t)s.local_batch);
        float *x = malloc(sizeof(float) * s.rows * in), *y = malloc(sizeof(float) * s.rows * out);
        wk_shard_fill(&s, &t, 5, x, y);
        for (uint64_t slot = 0; slot < s.slots; slot++) {
            size_t mine = slot * (size_t)s.local_batch;
            size_t theirs = slot * (size_t)batch + (size_t)r * s.local_batch;
            cr_assert_arr_eq(x + mine * in, wx + theirs * in, sizeof(float) * s.local_batch * in,
                             "ranks=%d rank=%d slot=%llu", ranks, r, (unsigned long long)slot);
            cr_assert_arr_eq(y + mine * out, wy + theirs * out,
                             sizeof(float) * s.local_batch * out);
        }
        /* every step, even past the slots held, maps to the window it should */
        for (uint64_t step = 0; step < steps; step++)
            for (int row = 0; row < s.local_batch; row++)
                cr_assert_eq(wk_shard_index(&s, wk_shard_slot(&s, step), row),
                             (step * (uint64_t)batch + (uint64_t)r * s.local_batch + row) % samples,
                             "step %llu row %d", (unsigned long long)step, row);
        free(x);
        free(y);
    }
    free(wx);
    free(wy);
    wk_teacher_free(&t);
}

Test(data, shards_of_any_rank_count_make_up_the_one_rank_data)
{
    for (int ranks = 1; ranks <= 8; ranks *= 2) {
        check_union(256, 32, 20, ranks);  /* samples a multiple of the batch: 8 slots */
        check_union(100, 32, 60, ranks);  /* not a multiple: windows repeat every 25 steps */
        check_union(1000, 16, 3, ranks);  /* fewer steps than windows */
    }
}

Test(data, shard_plan_holds_only_what_the_run_uses)
{
    struct wk_shard s;
    char why[256] = "";
    cr_assert_eq(wk_shard_plan(&s, 8192, 128, 4, 1, 100, why, sizeof(why)), 0, "%s", why);
    cr_assert_eq(s.slots, 64u); /* 8192 / 128 windows, each 32 rows on this rank */
    cr_assert_eq(s.rows, 64u * 32u);
    cr_assert_eq(wk_shard_plan(&s, 8192, 128, 4, 1, 10, why, sizeof(why)), 0, "%s", why);
    cr_assert_eq(s.slots, 10u);
}

Test(data, shard_plan_refuses_a_batch_that_does_not_split)
{
    struct wk_shard s;
    char why[256] = "";
    cr_assert_eq(wk_shard_plan(&s, 100, 10, 4, 0, 5, why, sizeof(why)), -EINVAL);
    cr_assert(strstr(why, "cannot be split evenly over 4 ranks") != NULL, "why: %s", why);
    cr_assert_eq(wk_shard_plan(&s, 0, 8, 1, 0, 5, why, sizeof(why)), -EINVAL);
    cr_assert_eq(wk_shard_plan(&s, 100, 8, 2, 2, 5, why, sizeof(why)), -EINVAL);
}
