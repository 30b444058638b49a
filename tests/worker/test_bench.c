/* bench: the pure pieces (sizes, pattern, check) under the sanitizers, and the command itself
 * under mpirun with the MPI backend. */
#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "worker/bench_check.h"

#include "runcmd.h"

Test(bench_check, sizes_parse)
{
    uint64_t v = 0;
    cr_expect_eq(wk_bench_parse_size("4", &v), 0);
    cr_expect_eq(v, 4);
    cr_expect_eq(wk_bench_parse_size("64K", &v), 0);
    cr_expect_eq(v, 65536);
    cr_expect_eq(wk_bench_parse_size("64M", &v), 0);
    cr_expect_eq(v, UINT64_C(67108864));
    cr_expect_eq(wk_bench_parse_size("1g", &v), 0);
    cr_expect_eq(v, UINT64_C(1) << 30);
    cr_expect_eq(wk_bench_parse_size("0", &v), 0);
    cr_expect_eq(v, 0);
    static const char *bad[] = {"", "-4", "+4", "4KB", "4T", "1.5M", " 4", "4 ", "M", "0x10", NULL};
    for (int i = 0; bad[i]; i++)
        cr_expect_eq(wk_bench_parse_size(bad[i], &v), -EINVAL, "'%s'", bad[i]);
    cr_expect_eq(wk_bench_parse_size(NULL, &v), -EINVAL);
    cr_expect_eq(wk_bench_parse_size("99999999999999999999999", &v), -ERANGE);
    cr_expect_eq(wk_bench_parse_size("9999999999G", &v), -ERANGE);
}

Test(bench_check, sweep_sizes)
{
    uint64_t s[64];
    int n = wk_bench_sizes(4, UINT64_C(64) << 20, 2, s, 64);
    cr_assert_eq(n, 25, "4 B .. 64 MiB doubling");
    cr_expect_eq(s[0], 4);
    cr_expect_eq(s[24], UINT64_C(64) << 20);
    n = wk_bench_sizes(6, 100, 4, s, 64);
    cr_assert_eq(n, 3);
    cr_expect_eq(s[0], 4, "6 bytes round down to one float");
    cr_expect_eq(s[1], 24);
    cr_expect_eq(s[2], 96);
    cr_expect_eq(wk_bench_sizes(8, 8, 2, s, 64), 1);
    cr_expect_eq(wk_bench_sizes(2, 8, 2, s, 64), -EINVAL);
    cr_expect_eq(wk_bench_sizes(16, 8, 2, s, 64), -EINVAL);
    cr_expect_eq(wk_bench_sizes(4, 8, 1, s, 64), -EINVAL);
    /* The largest sweep the flags allow stays small, and never overflows. */
    cr_expect_eq(wk_bench_sizes(4, WK_BENCH_MAX_BYTES, 2, s, 64), 31);
    cr_expect_eq(wk_bench_sizes(4, UINT64_MAX, 2, s, 2), 62, "2^2 .. 2^63: counts past max_out");
}

Test(bench_check, pattern_sums_are_exact_in_any_order)
{
    for (int ranks = 1; ranks <= 64; ranks *= 2) {
        float table[WK_BENCH_PERIOD];
        wk_bench_expected(ranks, table);
        for (size_t i = 0; i < 3 * WK_BENCH_PERIOD; i++) {
            float forward = 0, backward = 0, pairwise[64];
            for (int r = 0; r < ranks; r++) {
                float v = wk_bench_value(i, r);
                cr_assert(v >= -8 && v <= 8 && v == floorf(v));
                forward += v;
                backward += wk_bench_value(i, ranks - 1 - r);
                pairwise[r] = v;
            }
            /* A tree, as recursive halving would add them. */
            for (int width = ranks; width > 1; width /= 2)
                for (int r = 0; r < width / 2; r++)
                    pairwise[r] = pairwise[2 * r] + pairwise[2 * r + 1];
            cr_expect_eq(forward, table[i % WK_BENCH_PERIOD]);
            cr_expect_eq(backward, forward);
            cr_expect_eq(pairwise[0], forward);
        }
    }
    /* Neighbouring elements and ranks differ, so a shifted or misrouted block shows. */
    cr_expect_neq(wk_bench_value(0, 0), wk_bench_value(1, 0));
    cr_expect_neq(wk_bench_value(0, 0), wk_bench_value(0, 1));
}

/* The sum over `ranks` ranks, made the slow way: what a correct allreduce returns. */
static float *reduced(size_t n, int ranks)
{
    float *sum = calloc(n, sizeof(float)), *one = malloc(n * sizeof(float));
    cr_assert(sum && one);
    for (int r = 0; r < ranks; r++) {
        wk_bench_fill(one, n, r);
        for (size_t i = 0; i < n; i++)
            sum[i] += one[i];
    }
    free(one);
    return sum;
}

Test(bench_check, a_correct_result_passes)
{
    size_t first = 0;
    float *buf = reduced(1000, 4);
    cr_expect_eq(wk_bench_count_wrong(buf, 1000, 4, &first), 0);
    cr_expect_eq(first, 1000);
    free(buf);
    buf = reduced(1, 1);
    cr_expect_eq(wk_bench_count_wrong(buf, 1, 1, &first), 0);
    free(buf);
}

Test(bench_check, the_checker_catches_corruption)
{
    size_t first = 0, n = 4099;
    float *buf = reduced(n, 4);
    buf[1234] += 1.0f;
    cr_expect_eq(wk_bench_count_wrong(buf, n, 4, &first), 1);
    cr_expect_eq(first, 1234);

    buf[1234] -= 1.0f;
    buf[n - 1] = NAN;
    cr_expect_eq(wk_bench_count_wrong(buf, n, 4, &first), 1, "NaN is wrong");
    cr_expect_eq(first, n - 1);

    /* The sum over the wrong number of ranks (a rank left out) is caught nearly everywhere. */
    free(buf);
    buf = reduced(n, 3);
    cr_expect_gt(wk_bench_count_wrong(buf, n, 4, &first), n / 2);
    cr_expect_eq(first, 0);

    /* Input that was never reduced is wrong too. */
    wk_bench_fill(buf, n, 0);
    cr_expect_gt(wk_bench_count_wrong(buf, n, 2, &first), n / 2);
    free(buf);
}

Test(bench_check, busbw)
{
    cr_expect_float_eq(wk_bench_busbw(10.0, 2), 10.0, 1e-12);
    cr_expect_float_eq(wk_bench_busbw(10.0, 4), 15.0, 1e-12);
    cr_expect_float_eq(wk_bench_busbw(10.0, 8), 17.5, 1e-12);
    cr_expect_float_eq(wk_bench_busbw(10.0, 1), 0.0, 1e-12);
}

/* ---- the command --------------------------------------------------------------------------- */

/* The summary line of rank 0's output, parsed; NULL when there is none. */
static cJSON *summary(const char *out)
{
    const char *line = strstr(out, "{\"event\":\"summary\"");
    if (line == NULL)
        return NULL;
    size_t len = strcspn(line, "\n");
    char *copy = strndup(line, len);
    cJSON *obj = cJSON_Parse(copy);
    free(copy);
    return obj;
}

static void sweep(int ranks)
{
    char cmd[4096], *out, *err;
    snprintf(cmd, sizeof(cmd),
             "env -u MPIJOB_TRANSPORT -u NCCL_NET " RUNCMD_MPIRUN " -np %d '%s' bench --backend mpi "
             "--min-bytes 4 --max-bytes 64M --iters 2 --warmup 1",
             ranks, runcmd_worker_bin());
    int code = runcmd(cmd, &out, &err);
    cr_assert_eq(code, 0, "exit %d\nstdout:\n%s\nstderr:\n%s", code, out, err);
    cJSON *s = summary(out);
    cr_assert_not_null(s, "no summary line in:\n%s", out);
    cr_expect_eq(cJSON_GetObjectItem(s, "ranks")->valueint, ranks);
    cr_expect_str_eq(cJSON_GetObjectItem(s, "backend")->valuestring, "mpi");
    cr_expect_str_eq(cJSON_GetObjectItem(s, "transport")->valuestring, "mpi");
    cr_expect_eq(cJSON_GetObjectItem(s, "wrong_total")->valuedouble, 0);
    cJSON *sizes = cJSON_GetObjectItem(s, "sizes");
    cr_assert_eq(cJSON_GetArraySize(sizes), 25, "4 B .. 64 MiB");
    double expect_bytes = 4, busbw_sum = 0;
    cJSON *e;
    cJSON_ArrayForEach(e, sizes) {
        double bytes = cJSON_GetObjectItem(e, "bytes")->valuedouble;
        double time_us = cJSON_GetObjectItem(e, "time_us")->valuedouble;
        double algbw = cJSON_GetObjectItem(e, "algbw_gbs")->valuedouble;
        double busbw = cJSON_GetObjectItem(e, "busbw_gbs")->valuedouble;
        cr_expect_eq(bytes, expect_bytes);
        cr_expect_eq(cJSON_GetObjectItem(e, "wrong")->valuedouble, 0, "at %.0f bytes", bytes);
        cr_expect_gt(time_us, 0);
        cr_expect_gt(algbw, 0);
        /* Each rounded to 5 significant digits in the summary: compare with that slack. */
        double want = algbw * 2.0 * (ranks - 1) / ranks;
        cr_expect_leq(fabs(busbw - want), 1e-4 * want, "at %.0f bytes: busbw %g, algbw %g", bytes,
                      busbw, algbw);
        busbw_sum += busbw;
        expect_bytes *= 2;
    }
    double avg = cJSON_GetObjectItem(s, "avg_busbw_gbs")->valuedouble;
    cr_expect_leq(fabs(avg - busbw_sum / 25), 1e-4 * avg, "average %g of sum %g", avg, busbw_sum);
    /* The table is there for a person: one row per size, with the header first. */
    cr_expect_not_null(strstr(out, "#wrong"), "%s", out);
    cr_expect_not_null(strstr(out, "    67108864     16777216  float    sum"), "%s", out);
    cJSON_Delete(s);
    free(out);
    free(err);
}

Test(bench, two_ranks_4B_to_64MiB_exact) { sweep(2); }
Test(bench, four_ranks_4B_to_64MiB_exact) { sweep(4); }

static int bench_direct(const char *args, char **err)
{
    char cmd[4096];
    snprintf(cmd, sizeof(cmd), "env -u MPIJOB_TRANSPORT -u NCCL_NET '%s' bench %s", runcmd_worker_bin(), args);
    return runcmd(cmd, NULL, err);
}

/* Refused before MPI starts or anything is allocated: exit 2, the reason, the usage. */
Test(bench, usage_errors_exit_2)
{
    static const struct {
        const char *args, *says;
    } bad[] = {
        {"--bogus", "unknown or incomplete option '--bogus'"},
        {"--backend gpu", "--backend takes auto, nccl or mpi"},
        {"--iters 0", "--iters takes an integer from 1 to 100000"},
        {"--iters 10x", "--iters takes an integer"},
        {"--warmup -1", "--warmup takes an integer from 0"},
        {"--factor 1", "--factor takes an integer from 2 to 1024"},
        {"--min-bytes 2", "--min-bytes is at least 4"},
        {"--min-bytes 1M --max-bytes 64K", "--min-bytes (1048576) is above --max-bytes (65536)"},
        {"--max-bytes 4Q", "--max-bytes takes a byte count"},
        {"--require gpu", "--require takes 'rdma'"},
        {"--iters", "unknown or incomplete option '--iters'"},
        {"stray", "unexpected argument 'stray'"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char *err;
        int code = bench_direct(bad[i].args, &err);
        cr_expect_eq(code, 2, "bench %s: exit %d\n%s", bad[i].args, code, err);
        cr_expect_not_null(strstr(err, bad[i].says), "bench %s:\n%s", bad[i].args, err);
        cr_expect_not_null(strstr(err, "Usage: mpirun ... mpijob-worker bench"), "bench %s", bad[i].args);
        free(err);
    }
}

Test(bench, absurd_sizes_refused_before_allocating)
{
    static const char *absurd[] = {"--max-bytes 5G", "--max-bytes 1000000G",
                                   "--max-bytes 99999999999999999999999", "--min-bytes 8G"};
    for (size_t i = 0; i < sizeof(absurd) / sizeof(absurd[0]); i++) {
        char *err;
        int code = bench_direct(absurd[i], &err);
        cr_expect_eq(code, 2, "bench %s: exit %d\n%s", absurd[i], code, err);
        cr_expect_not_null(strstr(err, "is at most 4G"), "bench %s:\n%s", absurd[i], err);
        free(err);
    }
}

Test(bench, help_lists_every_flag_with_its_default)
{
    char cmd[4096], *out;
    snprintf(cmd, sizeof(cmd), "'%s' bench --help", runcmd_worker_bin());
    cr_assert_eq(runcmd(cmd, &out, NULL), 0);
    static const char *flags[] = {"--backend auto|nccl|mpi", "--min-bytes N", "--max-bytes N",
                                  "--factor F", "--iters N", "--warmup N", "--check", "--no-check",
                                  "--require rdma", NULL};
    for (int i = 0; flags[i]; i++)
        cr_expect_not_null(strstr(out, flags[i]), "%s missing from:\n%s", flags[i], out);
    cr_expect_not_null(strstr(out, "64M"));
    free(out);
}

/* Under mpirun the exit status of a usage error still reaches the caller, and one rank speaks. */
Test(bench, usage_error_under_mpirun)
{
    char cmd[4096], *out, *err;
    snprintf(cmd, sizeof(cmd), RUNCMD_MPIRUN " -np 2 '%s' bench --iters 0", runcmd_worker_bin());
    int code = runcmd(cmd, &out, &err);
    cr_expect_eq(code, 2, "exit %d\n%s", code, err);
    const char *first = strstr(err, "--iters takes");
    cr_expect_not_null(first, "%s", err);
    cr_expect_null(first ? strstr(first + 1, "--iters takes") : NULL, "said once:\n%s", err);
    free(out);
    free(err);
}

/* The operator's RDMA transport reaches the ranks as NCCL_NET=IB: with no usable device every
 * rank stops before any allreduce, with the check's message, and the job fails. */
Test(bench, rdma_required_without_device_fails)
{
    char cmd[4096], *out, *err;
    snprintf(cmd, sizeof(cmd), "NCCL_NET=IB " RUNCMD_MPIRUN " -np 2 -x NCCL_NET '%s' bench --backend mpi "
             "--max-bytes 64", runcmd_worker_bin());
    int code = runcmd(cmd, &out, &err);
    if (code == 0 && strstr(out, "\"wrong_total\":0"))
        cr_skip_test("this host has a usable RDMA port");
    cr_expect_eq(code, 1, "exit %d\n%s", code, err);
    cr_expect_not_null(strstr(err, "RDMA requested but no usable device: "), "%s", err);
    cr_expect_null(strstr(out, "\"event\":\"summary\""), "no sweep ran:\n%s", out);
    free(out);
    free(err);

    snprintf(cmd, sizeof(cmd), "env -u NCCL_NET -u MPIJOB_TRANSPORT " RUNCMD_MPIRUN " -np 2 '%s' bench "
             "--backend mpi --max-bytes 64 --require rdma", runcmd_worker_bin());
    code = runcmd(cmd, &out, &err);
    cr_expect_eq(code, 1, "exit %d\n%s", code, err);
    cr_expect_not_null(strstr(err, "RDMA requested but no usable device: "), "%s", err);
    free(out);
    free(err);
}
