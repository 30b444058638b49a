/* The CPU backend's compute ops against plain references, in its single-process context (no
 * MPI_Init in this binary: see the top of src/worker/backend_mpi.c). */
#include <cblas.h> /* OpenBLAS's: openblas_get_num_threads and friends */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
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

/* Uniform in [-1, 1) with every mantissa bit used: sums of products round, in whatever order
 * the library adds them. */
static float real_value(unsigned i, unsigned salt)
{
    uint64_t h = ((uint64_t)i << 32 | salt) * 0x9e3779b97f4a7c15ull;
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 32;
    return (float)((double)(h >> 40) / (double)(1u << 23) - 1.0);
}

static float *filled_with(size_t n, unsigned salt, float (*gen)(unsigned, unsigned))
{
    float *p = ops->alloc(ctx, n);
    cr_assert_not_null(p);
    for (size_t i = 0; i < n; i++)
        p[i] = gen((unsigned)i, salt);
    return p;
}

/* The plain triple loop, in double. bound[] (may be NULL) receives, for each element of C, the
 * float error that any order of summation may make: the standard bound for a dot product of
 * length k, (k + 2) * 2^-24 * (|alpha| * sum |a||b| + |beta * c|), plus a few ulps for C. */
static void gemm_reference(int ta, int tb, int m, int n, int k, float alpha, const float *a,
                           int lda, const float *b, int ldb, float beta, float *c, int ldc,
                           double *bound)
{
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double s = 0.0, abs_sum = 0.0;
            for (int p = 0; p < k; p++) {
                double av = ta ? a[(size_t)p * lda + i] : a[(size_t)i * lda + p];
                double bv = tb ? b[(size_t)j * ldb + p] : b[(size_t)p * ldb + j];
                s += av * bv;
                abs_sum += fabs(av * bv);
            }
            float *cv = &c[(size_t)i * ldc + j];
            double scaled_c = beta == 0.0f ? 0.0 : (double)beta * *cv;
            double exact = alpha * s + scaled_c;
            if (bound != NULL)
                bound[(size_t)i * n + j] =
                    ldexp((double)(k + 2) * (fabs(alpha) * abs_sum + fabs(scaled_c)), -24) +
                    4.0 * ldexp(fabs(exact), -24) + 1e-30;
            *cv = (float)exact;
        }
}

/* gen fills A, B and C; with exact values (value()) the tolerance is a relative 1e-4, with real
 * ones the float error bound of the reference. */
static void check_gemm_with(int ta, int tb, int m, int n, int k, float alpha, float beta,
                            float (*gen)(unsigned, unsigned))
{
    /* leading dimensions wider than the rows, to catch code that assumes packed rows */
    int lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 2, ldc = n + 5;
    size_t arows = (size_t)(ta ? k : m), brows = (size_t)(tb ? n : k);
    float *a = filled_with(arows * lda, 1, gen), *b = filled_with(brows * ldb, 2, gen);
    float *c = filled_with((size_t)m * ldc, 3, gen), *ref = filled_with((size_t)m * ldc, 3, gen);
    double *bound = gen == value ? NULL : calloc((size_t)m * n, sizeof(double));
    cr_assert(gen == value || bound != NULL);
    if (beta == 0.0f) /* beta 0 must overwrite, even NaN */
        for (size_t i = 0; i < (size_t)m * ldc; i++)
            c[i] = NAN;
    cr_assert_eq(ops->gemm(ctx, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc), 0, "%s",
                 ops->error(ctx));
    gemm_reference(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, ref, ldc, bound);
    for (int i = 0; i < m; i++) {
        for (int j = 0; j < ldc; j++) {
            float got = c[(size_t)i * ldc + j], want = ref[(size_t)i * ldc + j];
            if (j >= n) { /* the padding past n columns is never written */
                if (beta != 0.0f)
                    cr_assert_eq(got, want, "ta=%d tb=%d: padding at %d,%d written", ta, tb, i, j);
                continue;
            }
            double tol = bound ? bound[(size_t)i * n + j] : 1e-4 * (1.0 + fabsf(want));
            cr_assert(fabs((double)got - (double)want) <= tol,
                      "ta=%d tb=%d m=%d n=%d k=%d alpha=%g beta=%g: C[%d][%d] = %.9g, want %.9g "
                      "(tolerance %.3g)",
                      ta, tb, m, n, k, alpha, beta, i, j, got, want, tol);
        }
    }
    ops->release(ctx, a);
    ops->release(ctx, b);
    ops->release(ctx, c);
    ops->release(ctx, ref);
    free(bound);
}

static void check_gemm(int ta, int tb, int m, int n, int k, float alpha, float beta)
{
    check_gemm_with(ta, tb, m, n, k, alpha, beta, value);
}

/* m, n, k: 1 in each place, small and large primes, and near train's shapes (batch x 256 x 128,
 * 8 outputs), none of them a multiple of a SIMD width or of a blocking. */
static const int odd_sizes[][3] = {
    {1, 1, 1},     {1, 1, 97},   {1, 37, 1},    {41, 1, 1},    {1, 37, 53},  {41, 1, 29},
    {23, 31, 1},   {3, 5, 7},    {9, 17, 33},   {65, 9, 300},  {70, 531, 13}, {129, 67, 260},
    {13, 29, 251}, {257, 7, 131}, {301, 257, 129}, {211, 9, 257},
};

Test(backend_mpi, gemm_matches_reference_for_every_transpose_and_odd_sizes)
{
    for (int t = 0; t < 4; t++)
        for (size_t s = 0; s < sizeof(odd_sizes) / sizeof(odd_sizes[0]); s++) {
            check_gemm(t & 1, t >> 1, odd_sizes[s][0], odd_sizes[s][1], odd_sizes[s][2], 1.0f,
                       0.0f);
            check_gemm(t & 1, t >> 1, odd_sizes[s][0], odd_sizes[s][1], odd_sizes[s][2], 0.5f,
                       -1.5f);
        }
}

Test(backend_mpi, gemm_with_real_values_is_within_float_error_of_the_reference)
{
    for (int t = 0; t < 4; t++)
        for (size_t s = 0; s < sizeof(odd_sizes) / sizeof(odd_sizes[0]); s++) {
            check_gemm_with(t & 1, t >> 1, odd_sizes[s][0], odd_sizes[s][1], odd_sizes[s][2],
                            1.0f, 0.0f, real_value);
            check_gemm_with(t & 1, t >> 1, odd_sizes[s][0], odd_sizes[s][1], odd_sizes[s][2],
                            -0.7f, 0.3f, real_value);
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

/* The element-wise ops on lengths that leave a remainder after any vector width, against the
 * scalar definitions in backend.h. */
Test(backend_mpi, elementwise_ops_match_their_definitions_on_odd_lengths)
{
    static const int shapes[][2] = {{1, 1}, {3, 37}, {17, 1}, {5, 259}, {33, 8}};
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
        int rows = shapes[s][0], cols = shapes[s][1];
        size_t n = (size_t)rows * cols;
        float *y = filled_with(n, 10, real_value), *bias = filled_with((size_t)cols, 11, value);
        float *dy = filled_with(n, 12, real_value), *t = filled_with(n, 13, real_value);
        float *want = calloc(n, sizeof(float)), *out = filled_with(n, 14, value);
        cr_assert_not_null(want);
        for (int relu = 0; relu < 2; relu++) {
            float *x = filled_with(n, 10, real_value);
            for (size_t i = 0; i < n; i++) {
                float v = x[i] + bias[i % (size_t)cols];
                want[i] = relu && !(v > 0.0f) ? 0.0f : v;
            }
            cr_assert_eq(ops->bias_act(ctx, x, bias, rows, cols, relu), 0);
            cr_assert_arr_eq(x, want, n * sizeof(float), "bias_act relu=%d %dx%d", relu, rows,
                             cols);
            ops->release(ctx, x);
        }

        for (size_t i = 0; i < n; i++)
            want[i] = y[i] > 0.0f ? dy[i] : 0.0f;
        float *g = filled_with(n, 12, real_value);
        cr_assert_eq(ops->relu_backward(ctx, g, y, n), 0);
        cr_assert_arr_eq(g, want, n * sizeof(float), "relu_backward %zu", n);

        float *db = filled_with((size_t)cols, 15, value);
        cr_assert_eq(ops->bias_grad(ctx, db, dy, rows, cols), 0);
        for (int c = 0; c < cols; c++) {
            float sum = 0.0f;
            for (int r = 0; r < rows; r++)
                sum += dy[(size_t)r * cols + c];
            cr_assert_eq(db[c], sum, "bias_grad column %d", c);
        }

        float loss = 0.5f;
        double sq = 0.0;
        for (size_t i = 0; i < n; i++) {
            float d = y[i] - t[i];
            want[i] = 0.25f * d;
            sq += (double)d * d;
        }
        cr_assert_eq(ops->mse(ctx, y, t, out, n, 0.25f, &loss), 0);
        cr_assert_arr_eq(out, want, n * sizeof(float), "mse %zu", n);
        cr_assert_float_eq(loss, 0.5f + (float)sq, 1e-5 * (1.0 + sq));

        for (size_t i = 0; i < n; i++)
            want[i] = y[i] - 0.3f * dy[i];
        cr_assert_eq(ops->sgd(ctx, y, dy, n, 0.3f), 0);
        cr_assert_arr_eq(y, want, n * sizeof(float), "sgd %zu", n);

        float *bufs[] = {y, bias, dy, t, out, g, db};
        for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
            ops->release(ctx, bufs[i]);
        free(want);
    }
}

/* ---- OpenBLAS threads ------------------------------------------------------ */

static struct wk_ctx *start_with_threads(int threads, char *why, size_t why_len)
{
    struct wk_init in;
    struct wk_ctx *c = NULL;
    memset(&in, 0, sizeof(in));
    in.size = 1;
    in.threads = threads;
    if (ops->init(&in, &c, why, why_len) != 0)
        return NULL;
    return c;
}

Test(backend_mpi, one_blas_thread_by_default_whatever_the_library_started_with)
{
    /* OpenBLAS sized its pool when it loaded (from OPENBLAS_NUM_THREADS, OMP_NUM_THREADS or the
     * CPUs); the backend's init (start(), threads 0) must have set one. */
    cr_assert_eq(openblas_get_num_threads(), 1);
    cr_assert(strncmp(ops->device(ctx), "cpu (OpenBLAS ", 14) == 0, "%s", ops->device(ctx));
    cr_assert(strstr(ops->device(ctx), " build, 1 thread)") != NULL, "%s", ops->device(ctx));

    /* threads 0 is the default too, even after something else set more */
    openblas_set_num_threads(openblas_get_parallel() ? 2 : 1);
    char why[256] = "";
    struct wk_ctx *c = start_with_threads(0, why, sizeof(why));
    cr_assert_not_null(c, "%s", why);
    cr_assert_eq(openblas_get_num_threads(), 1);
    ops->fini(c);
}

Test(backend_mpi, more_threads_when_asked_or_a_refusal_that_says_why)
{
    char why[256] = "";
    struct wk_ctx *c = start_with_threads(2, why, sizeof(why));
    if (openblas_get_parallel() == 0) { /* the serial build runs one thread */
        cr_assert_null(c);
        cr_assert(strstr(why, "2 threads asked, but this OpenBLAS runs 1") != NULL, "%s", why);
        cr_assert(strstr(why, "SINGLE_THREADED") != NULL, "%s", why);
    } else {
        cr_assert_not_null(c, "%s", why);
        cr_assert_eq(openblas_get_num_threads(), 2);
        cr_assert(strstr(ops->device(c), ", 2 threads)") != NULL, "%s", ops->device(c));
        /* the GEMM is right on two threads (the count is the process's, whichever context) */
        check_gemm_with(1, 0, 301, 257, 129, 1.0f, 0.0f, real_value);
        ops->fini(c);
    }
    /* beyond the library's MAX_THREADS (64 in Debian's builds) */
    c = start_with_threads(100000, why, sizeof(why));
    cr_assert_null(c);
    cr_assert(strstr(why, "100000 threads asked, but this OpenBLAS runs") != NULL, "%s", why);
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
    cr_assert(strncmp(ops->device(ctx), "cpu", 3) == 0, "%s", ops->device(ctx));
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
