/* The CPU backend's compute ops against plain references, in its single-process context (no
 * MPI_Init in this binary: see the top of src/worker/backend_mpi.c). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "worker/backend.h"

static const struct wk_ops *ops = &wk_backend_mpi;
static struct wk_ctx *ctx;

static void start(void)
{
    struct wk_init in;
    char why[256] = "";
    memset(&in, 0, sizeof(in));
    in.size = 1;
    in.mpi_comm = NULL;
    cr_assert_eq(ops->init(&in, &ctx, why, sizeof(why)), 0, "init: %s", why);
    cr_assert_not_null(ctx);
}

static void stop(void)
{
    ops->fini(ctx);
    ctx = NULL;
}

TestSuite(backend_mpi, .init = start, .fini = stop);

static float value(unsigned i, unsigned salt)
{
    /* small integers over 8: products and sums stay exact-ish, differences are real bugs */
    unsigned h = (i * 2654435761u) ^ (salt * 40503u);
    h ^= h >> 13;
    return (float)((int)(h % 17) - 8) / 8.0f;
}

static float *filled(size_t n, unsigned salt)
{
    float *p = ops->alloc(ctx, n);
    cr_assert_not_null(p);
    for (size_t i = 0; i < n; i++)
        p[i] = value((unsigned)i, salt);
    return p;
}

static void gemm_reference(int ta, int tb, int m, int n, int k, float alpha, const float *a,
                           int lda, const float *b, int ldb, float beta, float *c, int ldc)
{
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double s = 0.0;
            for (int p = 0; p < k; p++) {
                double av = ta ? a[(size_t)p * lda + i] : a[(size_t)i * lda + p];
                double bv = tb ? b[(size_t)j * ldb + p] : b[(size_t)p * ldb + j];
                s += av * bv;
            }
            float *cv = &c[(size_t)i * ldc + j];
            *cv = (float)(alpha * s + (beta == 0.0f ? 0.0 : (double)beta * *cv));
        }
}

static void check_gemm(int ta, int tb, int m, int n, int k, float alpha, float beta)
{
    /* leading dimensions wider than the rows, to catch code that assumes packed rows */
    int lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 2, ldc = n + 5;
    size_t arows = (size_t)(ta ? k : m), brows = (size_t)(tb ? n : k);
    float *a = filled(arows * lda, 1), *b = filled(brows * ldb, 2);
    float *c = filled((size_t)m * ldc, 3), *ref = filled((size_t)m * ldc, 3);
    if (beta == 0.0f) /* beta 0 must overwrite, even NaN */
        for (size_t i = 0; i < (size_t)m * ldc; i++)
            c[i] = NAN;
    cr_assert_eq(ops->gemm(ctx, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc), 0, "%s",
                 ops->error(ctx));
    gemm_reference(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, ref, ldc);
    for (int i = 0; i < m; i++) {
        for (int j = 0; j < ldc; j++) {
            float got = c[(size_t)i * ldc + j], want = ref[(size_t)i * ldc + j];
            if (j >= n) { /* the padding past n columns is never written */
                if (beta != 0.0f)
                    cr_assert_eq(got, want, "ta=%d tb=%d: padding at %d,%d written", ta, tb, i, j);
                continue;
            }
            cr_assert(fabsf(got - want) <= 1e-4f * (1.0f + fabsf(want)),
                      "ta=%d tb=%d m=%d n=%d k=%d: C[%d][%d] = %g, want %g", ta, tb, m, n, k, i,
                      j, got, want);
        }
    }
    ops->release(ctx, a);
    ops->release(ctx, b);
    ops->release(ctx, c);
    ops->release(ctx, ref);
}

Test(backend_mpi, gemm_matches_reference_for_every_transpose_and_odd_sizes)
{
    /* sizes around the blocking (6 x 8 tiles, MC=72, KC=256, NC=512) and far from multiples */
    static const int sizes[][3] = {
        {1, 1, 1}, {3, 5, 7}, {8, 8, 8}, {9, 17, 33}, {65, 9, 300}, {70, 531, 13}, {129, 67, 260},
    };
    for (int t = 0; t < 4; t++)
        for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
            check_gemm(t & 1, t >> 1, sizes[s][0], sizes[s][1], sizes[s][2], 1.0f, 0.0f);
            check_gemm(t & 1, t >> 1, sizes[s][0], sizes[s][1], sizes[s][2], 0.5f, -1.5f);
        }
}

Test(backend_mpi, gemm_with_zero_k_scales_c_and_refuses_bad_shapes)
{
    float c[4] = {1, 2, 3, 4}, a[1] = {0}, b[1] = {0};
    cr_assert_eq(ops->gemm(ctx, 0, 0, 2, 2, 0, 1.0f, a, 1, b, 2, 2.0f, c, 2), 0);
    cr_assert_eq(c[0], 2.0f);
    cr_assert_eq(c[3], 8.0f);
    cr_assert_lt(ops->gemm(ctx, 0, 0, 2, 2, 3, 1.0f, a, 1, b, 2, 0.0f, c, 2), 0);
    cr_assert(strstr(ops->error(ctx), "gemm") != NULL, "error: %s", ops->error(ctx));
}

Test(backend_mpi, bias_act_adds_bias_and_clamps_when_relu)
{
    float y[6] = {-1, 0.5f, 2, -3, 0, 1}, bias[3] = {0.5f, -1, 0};
    cr_assert_eq(ops->bias_act(ctx, y, bias, 2, 3, 0), 0);
    float lin[6] = {-0.5f, -0.5f, 2, -2.5f, -1, 1};
    cr_assert_arr_eq(y, lin, sizeof(lin));
    cr_assert_eq(ops->bias_act(ctx, y, bias, 2, 3, 1), 0);
    float relu[6] = {0, 0, 2, 0, 0, 1};
    cr_assert_arr_eq(y, relu, sizeof(relu));
}

Test(backend_mpi, relu_backward_zeroes_where_output_is_not_positive)
{
    float dy[5] = {1, 2, 3, 4, 5}, y[5] = {0, 0.1f, -2, 7, 0};
    cr_assert_eq(ops->relu_backward(ctx, dy, y, 5), 0);
    float want[5] = {0, 2, 0, 4, 0};
    cr_assert_arr_eq(dy, want, sizeof(want));
}

Test(backend_mpi, bias_grad_sums_rows_and_overwrites)
{
    float db[3] = {100, 100, 100}, dy[6] = {1, 2, 3, 4, 5, 6};
    cr_assert_eq(ops->bias_grad(ctx, db, dy, 2, 3), 0);
    float want[3] = {5, 7, 9};
    cr_assert_arr_eq(db, want, sizeof(want));
}

Test(backend_mpi, mse_writes_scaled_difference_and_accumulates_squares)
{
    float y[3] = {1, 2, 3}, t[3] = {0, 2, 5}, dy[3], loss = 1.0f;
    cr_assert_eq(ops->mse(ctx, y, t, dy, 3, 0.5f, &loss), 0);
    float want[3] = {0.5f, 0, -1};
    cr_assert_arr_eq(dy, want, sizeof(want));
    cr_assert_float_eq(loss, 1.0f + 1.0f + 0.0f + 4.0f, 1e-6);
}

Test(backend_mpi, sgd_and_fill)
{
    float w[3] = {1, 2, 3}, g[3] = {10, -10, 0};
    cr_assert_eq(ops->sgd(ctx, w, g, 3, 0.1f), 0);
    cr_assert_float_eq(w[0], 0.0f, 1e-6);
    cr_assert_float_eq(w[1], 3.0f, 1e-6);
    cr_assert_float_eq(w[2], 3.0f, 1e-6);
    cr_assert_eq(ops->fill(ctx, w, 3, -2.5f), 0);
    float want[3] = {-2.5f, -2.5f, -2.5f};
    cr_assert_arr_eq(w, want, sizeof(want));
}

Test(backend_mpi, memory_is_zeroed_and_copies_both_ways)
{
    float *p = ops->alloc(ctx, 1000);
    cr_assert_not_null(p);
    for (int i = 0; i < 1000; i++)
        cr_assert_eq(p[i], 0.0f);
    float src[4] = {1, 2, 3, 4}, back[4] = {0};
    cr_assert_eq(ops->upload(ctx, p, src, 4), 0);
    cr_assert_eq(ops->download(ctx, back, p, 4), 0);
    cr_assert_arr_eq(back, src, sizeof(src));
    ops->release(ctx, p);
}

Test(backend_mpi, single_process_communication_is_the_identity)
{
    char why[64] = "x";
    cr_assert_eq(ops->available(why, sizeof(why)), 1);
    cr_assert_str_eq(ops->device(ctx), "cpu");
    cr_assert_str_eq(ops->name, "mpi");
    cr_assert_eq(ops->abi, WK_BACKEND_ABI);
    float buf[3] = {1, 2, 3}, want[3] = {1, 2, 3};
    cr_assert_eq(ops->bucket_ready(ctx, 0, buf, 3), 0);
    cr_assert_eq(ops->bucket_ready(ctx, 1, buf, 1), 0);
    double exposed = -1;
    cr_assert_eq(ops->finish(ctx, &exposed), 0);
    cr_assert_eq(exposed, 0.0);
    cr_assert_eq(ops->allreduce(ctx, buf, 3), 0);
    cr_assert_eq(ops->sync(ctx), 0);
    cr_assert_arr_eq(buf, want, sizeof(want));
}
