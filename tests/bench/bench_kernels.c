/* Where a training step of the CPU backend spends its time: the model's forward pass, backward
 * pass and SGD update (worker/model.h) on train's default model or another shape, with every
 * backend operation timed through a table that wraps wk_backend_mpi's (one process, no MPI: the
 * backend's single-process context, so no communication is counted).
 *
 * Per operation: calls per step, milliseconds per step (median over the timed steps), and for
 * the GEMMs the rate in GFLOP/s (2mnk per call). The data are fixed pseudo-random numbers, the
 * weights those of `mpijob-worker train --seed 1`.
 *
 * Usage: bench_kernels [--batch N] [--steps N] [--threads N] [--hidden N] [--layers N]
 *   --batch   local batch (default 2048: train's benchmark batch on one rank)
 *   --hidden, --layers  the hidden layers (default 256 and 3: train's default model; 1024 and 4
 *             is bench_ddp.py's large one)
 *   --steps   timed steps, after 3 warm-up steps (default 30)
 *   --threads OpenBLAS threads (default 1, as train)
 * Exit status: 0; 1 when the backend fails; 2 for a bad command line. */
#include <cjson/cJSON.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/clock.h"
#include "util/json.h"
#include "worker/backend.h"
#include "worker/model.h"

enum op { OP_GEMM, OP_BIAS_ACT, OP_RELU_BACKWARD, OP_BIAS_GRAD, OP_MSE, OP_SGD, OP_COUNT };

static const char *const op_names[OP_COUNT] = {"gemm", "bias_act", "relu_backward",
                                               "bias_grad", "mse", "sgd"};

static const struct wk_ops *inner = &wk_backend_mpi;
static double spent_ms[OP_COUNT]; /* in the current step */
static double flops;              /* of the GEMMs in the current step */
static long calls[OP_COUNT];

#define TIMED(kind, call)                            \
    do {                                             \
        double t0_ = clock_now_ms_precise();         \
        int rc_ = (call);                            \
        spent_ms[kind] += clock_now_ms_precise() - t0_; \
        calls[kind]++;                               \
        return rc_;                                  \
    } while (0)

static int t_gemm(struct wk_ctx *c, int ta, int tb, int m, int n, int k, float alpha,
                  const float *a, int lda, const float *b, int ldb, float beta, float *y, int ldc)
{
    flops += 2.0 * m * n * k;
    TIMED(OP_GEMM, inner->gemm(c, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, y, ldc));
}

static int t_bias_act(struct wk_ctx *c, float *y, const float *bias, int rows, int cols, int relu)
{
    TIMED(OP_BIAS_ACT, inner->bias_act(c, y, bias, rows, cols, relu));
}

static int t_relu_backward(struct wk_ctx *c, float *dy, const float *y, size_t n)
{
    TIMED(OP_RELU_BACKWARD, inner->relu_backward(c, dy, y, n));
}

static int t_bias_grad(struct wk_ctx *c, float *db, const float *dy, int rows, int cols)
{
    TIMED(OP_BIAS_GRAD, inner->bias_grad(c, db, dy, rows, cols));
}

static int t_mse(struct wk_ctx *c, const float *y, const float *t, float *dy, size_t n,
                 float scale, float *loss_sum)
{
    TIMED(OP_MSE, inner->mse(c, y, t, dy, n, scale, loss_sum));
}

static int t_sgd(struct wk_ctx *c, float *w, const float *g, size_t n, float lr)
{
    TIMED(OP_SGD, inner->sgd(c, w, g, n, lr));
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2.0;
}

static int parse_int(const char *flag, const char *v, int lo, int hi, int *out)
{
    char *end = NULL;
    long x = strtol(v, &end, 10);
    if (end == v || *end != '\0' || x < lo || x > hi) {
        fprintf(stderr, "bench_kernels: %s: '%s' is not an integer in [%d, %d]\n", flag, v, lo,
                hi);
        return -1;
    }
    *out = (int)x;
    return 0;
}

int main(int argc, char **argv)
{
    int batch = 2048, steps = 30, threads = 1, hidden = 256, layers = 3;
    static const struct option opts[] = {{"batch", required_argument, NULL, 'b'},
                                         {"hidden", required_argument, NULL, 'H'},
                                         {"layers", required_argument, NULL, 'L'},
                                         {"steps", required_argument, NULL, 's'},
                                         {"threads", required_argument, NULL, 't'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    for (int o; (o = getopt_long(argc, argv, "h", opts, NULL)) != -1;) {
        int bad = 0;
        switch (o) {
        case 'b': bad = parse_int("--batch", optarg, 1, 1 << 20, &batch); break;
        case 's': bad = parse_int("--steps", optarg, 1, 100000, &steps); break;
        case 't': bad = parse_int("--threads", optarg, 1, 1024, &threads); break;
        case 'H': bad = parse_int("--hidden", optarg, 1, 8192, &hidden); break;
        case 'L': bad = parse_int("--layers", optarg, 1, 64, &layers); break;
        case 'h':
            printf("Usage: bench_kernels [--batch N] [--steps N] [--threads N] [--hidden N] "
                   "[--layers N]\n");
            return 0;
        default: return 2;
        }
        if (bad)
            return 2;
    }
    if (optind < argc) {
        fprintf(stderr, "bench_kernels: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }

    struct wk_ops ops = *inner;
    ops.gemm = t_gemm;
    ops.bias_act = t_bias_act;
    ops.relu_backward = t_relu_backward;
    ops.bias_grad = t_bias_grad;
    ops.mse = t_mse;
    ops.sgd = t_sgd;

    char why[512] = "";
    struct wk_init in;
    memset(&in, 0, sizeof(in));
    in.size = 1;
    in.threads = threads;
    struct wk_ctx *ctx = NULL;
    if (inner->init(&in, &ctx, why, sizeof(why)) != 0) {
        fprintf(stderr, "bench_kernels: backend init: %s\n", why);
        return 1;
    }
    struct wk_model_shape shape = {.input = 128, .hidden = hidden, .layers = layers, .output = 8};
    struct wk_layout layout;
    struct wk_model model;
    int status = 1;
    float *x = NULL, *t = NULL, *host = NULL;
    double *per_step = calloc((size_t)steps * (OP_COUNT + 2), sizeof(double));
    if (per_step == NULL || wk_layout_make(&layout, &shape, 25.0 * 1024 * 1024, why,
                                           sizeof(why)) < 0) {
        fprintf(stderr, "bench_kernels: %s\n", per_step ? why : "out of memory");
        inner->fini(ctx);
        free(per_step);
        return 1;
    }
    if (wk_model_init(&model, &ops, ctx, &layout, batch, why, sizeof(why)) < 0) {
        fprintf(stderr, "bench_kernels: %s\n", why);
        goto out;
    }
    x = ops.alloc(ctx, (size_t)batch * shape.input);
    t = ops.alloc(ctx, (size_t)batch * shape.output);
    host = malloc(layout.parameters * sizeof(float));
    if (x == NULL || t == NULL || host == NULL) {
        fprintf(stderr, "bench_kernels: out of memory\n");
        goto out;
    }
    uint64_t h = 0x2545f4914f6cdd1dull;
    for (size_t i = 0; i < (size_t)batch * shape.input; i++) {
        h = h * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((double)(h >> 40) / (double)(1u << 23) - 1.0);
    }
    for (size_t i = 0; i < (size_t)batch * shape.output; i++)
        t[i] = x[i] * 0.5f;
    wk_model_init_params(&layout, 1, host);
    ops.upload(ctx, model.params, host, layout.parameters);

    const float scale = (float)(2.0 / ((double)batch * shape.output));
    double step_flops = 0.0;
    for (int s = -3; s < steps; s++) {
        memset(spent_ms, 0, sizeof(spent_ms));
        memset(calls, 0, sizeof(calls));
        flops = 0.0;
        double t0 = clock_now_ms_precise();
        if (wk_model_forward(&model, x, t, scale) < 0 || wk_model_backward(&model, 1, 0) < 0 ||
            ops.finish(ctx, NULL) < 0 || wk_model_sgd(&model, 0.01f) < 0) {
            fprintf(stderr, "bench_kernels: %s\n", ops.error(ctx));
            goto out;
        }
        double total = clock_now_ms_precise() - t0;
        if (s < 0)
            continue;
        for (int k = 0; k < OP_COUNT; k++)
            per_step[(size_t)k * steps + s] = spent_ms[k];
        per_step[(size_t)OP_COUNT * steps + s] = total;
        step_flops = flops;
    }

    printf("bench_kernels: model 128-%dx%d-8, local batch %d, %s, %d timed steps\n", hidden, layers,
           batch, ops.device(ctx), steps);
    printf("%-14s %6s %10s %8s\n", "op", "calls", "ms/step", "GFLOP/s");
    cJSON *sum = cJSON_CreateObject(), *list = cJSON_AddArrayToObject(sum, "ops");
    cJSON_AddStringToObject(sum, "event", "summary");
    cJSON_AddStringToObject(sum, "bench", "kernels");
    cJSON_AddStringToObject(sum, "device", ops.device(ctx));
    cJSON_AddNumberToObject(sum, "batch", batch);
    for (int k = 0; k < OP_COUNT; k++) {
        double ms = median(per_step + (size_t)k * steps, steps);
        double rate = k == OP_GEMM && ms > 0 ? step_flops / (ms * 1e6) : 0.0;
        printf("%-14s %6ld %10.3f", op_names[k], calls[k], ms);
        if (k == OP_GEMM)
            printf(" %8.1f", rate);
        printf("\n");
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "op", op_names[k]);
        cJSON_AddNumberToObject(o, "calls", (double)calls[k]);
        cJSON_AddNumberToObject(o, "ms_per_step", ms);
        cJSON_AddItemToArray(list, o);
    }
    double step_ms = median(per_step + (size_t)OP_COUNT * steps, steps);
    printf("%-14s %6s %10.3f  (%.0f samples/s)\n", "step", "", step_ms,
           step_ms > 0 ? batch / (step_ms / 1e3) : 0.0);
    cJSON_AddNumberToObject(sum, "step_ms", step_ms);
    json_print_line(stdout, sum);
    cJSON_Delete(sum);
    status = 0;
out:
    if (x != NULL)
        ops.release(ctx, x);
    if (t != NULL)
        ops.release(ctx, t);
    wk_model_fini(&model);
    wk_layout_free(&layout);
    free(host);
    free(per_step);
    inner->fini(ctx);
    return status;
}
