/* The MLP: parameter layout and count, buckets, initialisation, and its gradients against finite
 * differences, on the CPU backend's single-process context (no MPI in this binary). */
#include <criterion/criterion.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "worker/backend.h"
#include "worker/data.h"
#include "worker/model.h"

static struct wk_ctx *start_backend(const struct wk_ops *ops)
{
    struct wk_init in;
    struct wk_ctx *ctx = NULL;
    char why[256] = "";
    memset(&in, 0, sizeof(in));
    in.size = 1;
    cr_assert_eq(ops->init(&in, &ctx, why, sizeof(why)), 0, "init: %s", why);
    return ctx;
}

Test(model, parameter_count_and_offsets)
{
    struct wk_model_shape shape = {.input = 5, .hidden = 7, .layers = 2, .output = 3};
    struct wk_layout l;
    char why[256] = "";
    cr_assert_eq(wk_layout_make(&l, &shape, 1e9, why, sizeof(why)), 0, "%s", why);
    /* 5->7, 7->7, 7->3: W and b of each */
    cr_assert_eq(l.parameters, (size_t)(5 * 7 + 7 + 7 * 7 + 7 + 7 * 3 + 3));
    cr_assert_eq(l.layer_count, 3);
    size_t offset = 0;
    for (int i = 0; i < l.layer_count; i++) {
        cr_assert_eq(l.layer[i].weight_offset, offset);
        cr_assert_eq(l.layer[i].bias_offset, offset + (size_t)l.layer[i].in * l.layer[i].out);
        offset = l.layer[i].bias_offset + (size_t)l.layer[i].out;
    }
    cr_assert_eq(offset, l.parameters);
    cr_assert_eq(l.layer[0].in, 5);
    cr_assert_eq(l.layer[2].out, 3);

    uint64_t params = 0, bytes = 0;
    cr_assert_eq(wk_model_sizes(&shape, 4, &params, &bytes), 0);
    cr_assert_eq(params, l.parameters);
    /* 2 x parameters + activations (4 x (7+7+3)) + 2 scratch of 4 x 7 + the loss */
    cr_assert_eq(bytes, 4 * (2 * params + 4 * 17 + 2 * 28 + 1));
    wk_layout_free(&l);

    struct wk_model_shape linear = {.input = 3, .hidden = 0, .layers = 0, .output = 2};
    cr_assert_eq(wk_layout_make(&l, &linear, 1e9, why, sizeof(why)), 0, "%s", why);
    cr_assert_eq(l.parameters, 8u);
    wk_layout_free(&l);
}

Test(model, sizes_refuse_overflow_and_nonsense)
{
    struct wk_model_shape huge = {INT_MAX, INT_MAX, 1024, INT_MAX};
    uint64_t params, bytes;
    cr_assert_eq(wk_model_sizes(&huge, INT_MAX, &params, &bytes), -EOVERFLOW);
    struct wk_model_shape zero = {0, 4, 1, 1};
    cr_assert_eq(wk_model_sizes(&zero, 1, &params, &bytes), -EINVAL);
    struct wk_layout l;
    char why[256] = "";
    cr_assert_lt(wk_layout_make(&l, &huge, 1e6, why, sizeof(why)), 0);
    cr_assert(strstr(why, "too large") != NULL, "why: %s", why);
}

/* Every bucket is a run of whole layers; bucket 0 ends with the last layer, each next bucket
 * ends just before the previous one starts, and together they cover the gradient buffer. */
static void check_buckets(const struct wk_layout *l, double bucket_bytes)
{
    cr_assert_gt(l->bucket_count, 0);
    int expect_last = l->layer_count - 1;
    size_t covered = 0;
    for (int i = 0; i < l->bucket_count; i++) {
        const struct wk_bucket *b = &l->bucket[i];
        cr_assert_eq(b->last_layer, expect_last, "bucket %d", i);
        cr_assert_leq(b->first_layer, b->last_layer);
        cr_assert_eq(b->offset, l->layer[b->first_layer].weight_offset);
        cr_assert_eq(b->offset + b->count,
                     l->layer[b->last_layer].bias_offset + (size_t)l->layer[b->last_layer].out);
        double bytes = (double)b->count * sizeof(float);
        if (i < l->bucket_count - 1) {
            /* closed once full, and not before: without its first layer it was too small */
            cr_assert_geq(bytes, bucket_bytes, "bucket %d", i);
            size_t first_layer_floats =
                l->layer[b->first_layer].bias_offset + l->layer[b->first_layer].out - b->offset;
            cr_assert_lt((double)(b->count - first_layer_floats) * sizeof(float), bucket_bytes);
        }
        covered += b->count;
        expect_last = b->first_layer - 1;
    }
    cr_assert_eq(expect_last, -1, "the first layer is in no bucket");
    cr_assert_eq(covered, l->parameters);
}

Test(model, buckets_are_layer_aligned_from_the_last_layer)
{
    /* layers: 10->100 (1100 floats), 3 x 100->100 (10100), 100->4 (404) */
    struct wk_model_shape shape = {.input = 10, .hidden = 100, .layers = 4, .output = 4};
    struct wk_layout l;
    char why[256] = "";

    cr_assert_eq(wk_layout_make(&l, &shape, 42000.0, why, sizeof(why)), 0, "%s", why);
    check_buckets(&l, 42000.0);
    /* 404 + 10100 = 10504 floats = 42016 bytes >= 42000: the output layer and the last hidden;
     * then 10100 floats (40400 bytes) is not enough alone: two hidden layers; then the first */
    cr_assert_eq(l.bucket_count, 3);
    cr_assert_eq(l.bucket[0].first_layer, 3);
    cr_assert_eq(l.bucket[0].count, 10504u);
    cr_assert_eq(l.bucket[1].first_layer, 1);
    cr_assert_eq(l.bucket[1].count, 20200u);
    cr_assert_eq(l.bucket[2].first_layer, 0);
    cr_assert_eq(l.bucket[2].count, 1100u);
    wk_layout_free(&l);

    /* tiny buckets: one per layer, last layer first */
    cr_assert_eq(wk_layout_make(&l, &shape, 1.0, why, sizeof(why)), 0, "%s", why);
    check_buckets(&l, 1.0);
    cr_assert_eq(l.bucket_count, 5);
    for (int i = 0; i < 5; i++)
        cr_assert_eq(l.bucket[i].first_layer, 4 - i);
    wk_layout_free(&l);

    /* the default 25 MiB: one bucket */
    cr_assert_eq(wk_layout_make(&l, &shape, 25.0 * 1024 * 1024, why, sizeof(why)), 0, "%s", why);
    check_buckets(&l, 25.0 * 1024 * 1024);
    cr_assert_eq(l.bucket_count, 1);
    wk_layout_free(&l);

    cr_assert_eq(wk_layout_make(&l, &shape, 0.0, why, sizeof(why)), -EINVAL);
}

Test(model, initial_weights_are_deterministic_and_scaled)
{
    struct wk_model_shape shape = {.input = 16, .hidden = 32, .layers = 2, .output = 4};
    struct wk_layout l;
    char why[256] = "";
    cr_assert_eq(wk_layout_make(&l, &shape, 1e9, why, sizeof(why)), 0, "%s", why);
    float *a = malloc(l.parameters * sizeof(float)), *b = malloc(l.parameters * sizeof(float));
    float *c = malloc(l.parameters * sizeof(float));
    wk_model_init_params(&l, 42, a);
    wk_model_init_params(&l, 42, b);
    wk_model_init_params(&l, 43, c);
    cr_assert_arr_eq(a, b, l.parameters * sizeof(float));
    cr_assert_eq(wk_weights_hash(a, l.parameters), wk_weights_hash(b, l.parameters));
    cr_assert_neq(wk_weights_hash(a, l.parameters), wk_weights_hash(c, l.parameters));
    for (int i = 0; i < l.layer_count; i++) {
        const struct wk_layer *y = &l.layer[i];
        float limit = sqrtf((i < l.layer_count - 1 ? 6.0f : 3.0f) / y->in);
        double sq = 0;
        for (int k = 0; k < y->in * y->out; k++) {
            float w = a[y->weight_offset + k];
            cr_assert_leq(fabsf(w), limit);
            sq += (double)w * w;
        }
        /* uniform in +-limit: mean square limit^2 / 3 */
        double ms = sq / (y->in * y->out);
        cr_assert(fabs(ms - limit * limit / 3.0) < 0.25 * limit * limit / 3.0, "layer %d", i);
        for (int k = 0; k < y->out; k++)
            cr_assert_eq(a[y->bias_offset + k], 0.0f);
    }
    /* one flipped bit changes the hash */
    b[7] = nextafterf(b[7], 10.0f);
    cr_assert_neq(wk_weights_hash(a, l.parameters), wk_weights_hash(b, l.parameters));
    free(a);
    free(b);
    free(c);
    wk_layout_free(&l);
}

/* A small model with its data, on the single-process CPU backend. */
struct fixture {
    const struct wk_ops *ops;
    struct wk_ctx *ctx;
    struct wk_layout layout;
    struct wk_model model;
    float *x, *t;
    int batch;
};

static void fixture_start(struct fixture *f, const struct wk_ops *ops, double bucket_bytes)
{
    struct wk_model_shape shape = {.input = 4, .hidden = 6, .layers = 2, .output = 3};
    char why[256] = "";
    memset(f, 0, sizeof(*f));
    f->ops = ops;
    f->ctx = start_backend(ops);
    f->batch = 5;
    cr_assert_eq(wk_layout_make(&f->layout, &shape, bucket_bytes, why, sizeof(why)), 0, "%s",
                 why);
    cr_assert_eq(wk_model_init(&f->model, ops, f->ctx, &f->layout, f->batch, why, sizeof(why)),
                 0, "%s", why);
    wk_model_init_params(&f->layout, 7, f->model.params);
    /* non-zero biases, so their gradients matter too */
    for (int i = 0; i < f->layout.layer_count; i++)
        for (int k = 0; k < f->layout.layer[i].out; k++)
            f->model.params[f->layout.layer[i].bias_offset + k] = 0.05f * (float)(k % 3);
    struct wk_teacher teacher;
    cr_assert_eq(wk_teacher_init(&teacher, shape.input, shape.output), 0);
    f->x = ops->alloc(f->ctx, (size_t)f->batch * shape.input);
    f->t = ops->alloc(f->ctx, (size_t)f->batch * shape.output);
    for (int r = 0; r < f->batch; r++)
        wk_data_sample(&teacher, 3, (uint64_t)r, f->x + r * shape.input, f->t + r * shape.output);
    wk_teacher_free(&teacher);
}

static void fixture_stop(struct fixture *f)
{
    f->ops->release(f->ctx, f->x);
    f->ops->release(f->ctx, f->t);
    wk_model_fini(&f->model);
    wk_layout_free(&f->layout);
    f->ops->fini(f->ctx);
}

static double loss_of(struct fixture *f)
{
    const float scale = 2.0f / (float)(f->batch * f->layout.shape.output);
    f->model.loss_sum[0] = 0.0f;
    cr_assert_eq(wk_model_forward(&f->model, f->x, f->t, scale), 0);
    return f->model.loss_sum[0] / (double)(f->batch * f->layout.shape.output);
}

Test(model, gradients_match_finite_differences)
{
    struct fixture f;
    fixture_start(&f, &wk_backend_mpi, 64.0);
    loss_of(&f);
    cr_assert_eq(wk_model_backward(&f.model, 1, 0), 0);
    double exposed;
    cr_assert_eq(f.ops->finish(f.ctx, &exposed), 0);
    size_t n = f.layout.parameters;
    float *grad = malloc(n * sizeof(float));
    memcpy(grad, f.model.grads, n * sizeof(float));

    /* The loss is piecewise quadratic in each parameter (ReLU network, squared error), so a
     * central difference is exact unless a ReLU kink lies within eps. A parameter passes when
     * one of three step sizes agrees: a kink cannot sit within all three, a wrong gradient
     * disagrees at every one. */
    static const float steps[] = {1e-2f, 3e-3f, 1e-3f};
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        float keep = f.model.params[i];
        double best = INFINITY, best_fd = 0;
        for (size_t e = 0; e < sizeof(steps) / sizeof(steps[0]); e++) {
            f.model.params[i] = keep + steps[e];
            double up = loss_of(&f);
            f.model.params[i] = keep - steps[e];
            double down = loss_of(&f);
            f.model.params[i] = keep;
            double fd = (up - down) / (2.0 * steps[e]);
            double err = fabs(fd - grad[i]) / (2e-4 + 2e-2 * fabs(fd));
            if (err < best) {
                best = err;
                best_fd = fd;
            }
        }
        if (best > worst)
            worst = best;
        cr_assert_leq(best, 1.0, "parameter %zu: backward %g, finite difference %g", i, grad[i],
                      best_fd);
    }
    cr_log_info("worst gradient error %.2f of the tolerance over %zu parameters", worst, n);

    /* the same gradients without overlap */
    loss_of(&f);
    cr_assert_eq(wk_model_backward(&f.model, 0, 0), 0);
    cr_assert_eq(f.ops->finish(f.ctx, &exposed), 0);
    cr_assert_arr_eq(f.model.grads, grad, n * sizeof(float));

    /* one sgd step along the gradient lowers the loss */
    double before = loss_of(&f);
    cr_assert_eq(wk_model_sgd(&f.model, 0.05f), 0);
    cr_assert_lt(loss_of(&f), before);
    free(grad);
    fixture_stop(&f);
}

/* A backend that records when buckets are handed over: after how many GEMMs, and what. */
static struct wk_ops recording;
static int gemms, calls, call_bucket[8], call_gemms[8];
static size_t call_count[8];

static int recording_gemm(struct wk_ctx *ctx, int ta, int tb, int m, int n, int k, float alpha,
                          const float *a, int lda, const float *b, int ldb, float beta, float *c,
                          int ldc)
{
    gemms++;
    return wk_backend_mpi.gemm(ctx, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

static int recording_bucket_ready(struct wk_ctx *ctx, int bucket, float *buf, size_t n)
{
    cr_assert_lt(calls, 8);
    call_bucket[calls] = bucket;
    call_gemms[calls] = gemms;
    call_count[calls] = n;
    calls++;
    return wk_backend_mpi.bucket_ready(ctx, bucket, buf, n);
}

Test(model, overlap_hands_each_bucket_over_as_soon_as_its_layers_are_done)
{
    recording = wk_backend_mpi;
    recording.gemm = recording_gemm;
    recording.bucket_ready = recording_bucket_ready;
    struct fixture f;
    /* 4->6 (30 floats), 6->6 (42), 6->3 (21): buckets of >= 60 bytes: {2}, {1}, {0} */
    fixture_start(&f, &recording, 60.0);
    cr_assert_eq(f.layout.bucket_count, 3);

    for (int run = 0; run < 4; run++) {
        int overlap = run < 2, with_loss = run % 2;
        loss_of(&f);
        gemms = calls = 0;
        cr_assert_eq(wk_model_backward(&f.model, overlap, with_loss), 0);
        cr_assert_eq(calls, 3);
        /* backward: per layer dW (1 GEMM) then dx (1 GEMM, not for the first layer) */
        int want_gemms[3] = {1, 3, 5};
        for (int i = 0; i < 3; i++) {
            cr_assert_eq(call_bucket[i], i);
            /* a step that reports its loss sends loss_sum along with the output layer */
            cr_assert_eq(call_count[i], f.layout.bucket[i].count + (i == 0 ? with_loss : 0));
            cr_assert_eq(call_gemms[i], overlap ? want_gemms[i] : 5, "overlap=%d bucket %d",
                         overlap, i);
        }
        cr_assert_eq(f.ops->finish(f.ctx, NULL), 0);
    }
    fixture_stop(&f);
}
