#include "worker/model.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker/data.h"

/* The middle key of the initial weights' hashes: far from any sample index. */
#define INIT_KEY 0x6d6f64656c000000ull

#define CHECK(expr)              \
    do {                         \
        rc = (expr);             \
        if (rc < 0)              \
            goto out;            \
    } while (0)

static int shape_valid(const struct wk_model_shape *s)
{
    return s->input > 0 && s->output > 0 && s->layers >= 0 && (s->layers == 0 || s->hidden > 0);
}

static int layer_in(const struct wk_model_shape *s, int l)
{
    return l == 0 ? s->input : s->hidden;
}

static int layer_out(const struct wk_model_shape *s, int l)
{
    return l == s->layers ? s->output : s->hidden;
}

int wk_model_sizes(const struct wk_model_shape *shape, int batch, uint64_t *parameters,
                   uint64_t *backend_bytes)
{
    if (!shape_valid(shape) || batch <= 0)
        return -EINVAL;
    uint64_t params = 0, act_floats = 0, widest = 0;
    for (int l = 0; l <= shape->layers; l++) {
        uint64_t in = (uint64_t)layer_in(shape, l), out = (uint64_t)layer_out(shape, l), w, a;
        if (__builtin_mul_overflow(in, out, &w) || __builtin_add_overflow(w, out, &w) ||
            __builtin_add_overflow(params, w, &params))
            return -EOVERFLOW;
        if (__builtin_mul_overflow(out, (uint64_t)batch, &a) ||
            __builtin_add_overflow(act_floats, a, &act_floats))
            return -EOVERFLOW;
        if (a > widest)
            widest = a;
    }
    /* parameters + gradients + activations + two scratch buffers + the loss accumulator */
    uint64_t floats, tmp;
    if (__builtin_mul_overflow(params, 2, &floats) ||
        __builtin_add_overflow(floats, act_floats, &floats) ||
        __builtin_mul_overflow(widest, 2, &tmp) || __builtin_add_overflow(floats, tmp, &floats) ||
        __builtin_add_overflow(floats, 1, &floats) ||
        __builtin_mul_overflow(floats, (uint64_t)sizeof(float), &tmp))
        return -EOVERFLOW;
    if (parameters != NULL)
        *parameters = params;
    if (backend_bytes != NULL)
        *backend_bytes = tmp;
    return 0;
}

void wk_layout_free(struct wk_layout *l)
{
    free(l->layer);
    free(l->bucket);
    memset(l, 0, sizeof(*l));
}

int wk_layout_make(struct wk_layout *l, const struct wk_model_shape *shape, double bucket_bytes,
                   char *why, size_t why_len)
{
    memset(l, 0, sizeof(*l));
    uint64_t params = 0;
    int rc = 0;
    if (!shape_valid(shape) || !(bucket_bytes > 0.0)) {
        snprintf(why, why_len,
                 "bad model: input=%d hidden=%d layers=%d output=%d bucket bytes=%g",
                 shape->input, shape->hidden, shape->layers, shape->output, bucket_bytes);
        return -EINVAL;
    }
    rc = wk_model_sizes(shape, 1, &params, NULL);
    if (rc < 0 || params > SIZE_MAX / sizeof(float)) {
        snprintf(why, why_len, "model too large: the parameter count overflows");
        return -EOVERFLOW;
    }
    l->shape = *shape;
    l->layer_count = shape->layers + 1;
    l->parameters = (size_t)params;
    l->layer = calloc((size_t)l->layer_count, sizeof(*l->layer));
    l->bucket = calloc((size_t)l->layer_count, sizeof(*l->bucket)); /* at most one per layer */
    if (l->layer == NULL || l->bucket == NULL) {
        snprintf(why, why_len, "out of memory for %d layers", l->layer_count);
        rc = -ENOMEM;
        goto out;
    }
    size_t offset = 0;
    for (int i = 0; i < l->layer_count; i++) {
        struct wk_layer *y = &l->layer[i];
        y->in = layer_in(shape, i);
        y->out = layer_out(shape, i);
        y->weight_offset = offset;
        y->bias_offset = offset + (size_t)y->in * (size_t)y->out;
        offset = y->bias_offset + (size_t)y->out;
    }

    /* From the last layer backwards, close a bucket once it holds bucket_bytes. */
    struct wk_bucket *b = NULL;
    for (int i = l->layer_count - 1; i >= 0; i--) {
        const struct wk_layer *y = &l->layer[i];
        if (b == NULL) {
            b = &l->bucket[l->bucket_count++];
            b->last_layer = i;
        }
        b->first_layer = i;
        b->offset = y->weight_offset;
        b->count = l->layer[b->last_layer].bias_offset + (size_t)l->layer[b->last_layer].out -
                   b->offset;
        if ((double)b->count * sizeof(float) >= bucket_bytes)
            b = NULL;
    }
out:
    if (rc < 0)
        wk_layout_free(l);
    return rc;
}

void wk_model_init_params(const struct wk_layout *l, uint64_t seed, float *host)
{
    for (int i = 0; i < l->layer_count; i++) {
        const struct wk_layer *y = &l->layer[i];
        int relu = i < l->layer_count - 1;
        float limit = sqrtf((relu ? 6.0f : 3.0f) / (float)y->in);
        size_t n = (size_t)y->in * (size_t)y->out;
        /* keyed apart from the data's (seed, sample, feature) triples */
        uint64_t key = INIT_KEY + (uint64_t)i;
        for (size_t k = 0; k < n; k++)
            host[y->weight_offset + k] = limit * wk_data_unit(seed, key, k);
        memset(host + y->bias_offset, 0, (size_t)y->out * sizeof(float));
    }
}

uint64_t wk_weights_hash(const float *host, size_t n)
{
    const unsigned char *p = (const unsigned char *)host;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n * sizeof(float); i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

static void set_why(const struct wk_model *m, char *why, size_t why_len, const char *what)
{
    snprintf(why, why_len, "%s: %s", what, m->ops->error(m->ctx));
}

int wk_model_init(struct wk_model *m, const struct wk_ops *ops, struct wk_ctx *ctx,
                  const struct wk_layout *layout, int batch, char *why, size_t why_len)
{
    memset(m, 0, sizeof(*m));
    m->ops = ops;
    m->ctx = ctx;
    m->layout = layout;
    m->batch = batch;
    size_t act = 0, widest = 0;
    for (int i = 0; i < layout->layer_count; i++) {
        size_t n = (size_t)batch * (size_t)layout->layer[i].out;
        act += n;
        if (n > widest)
            widest = n;
    }
    int rc = 0;
    m->params = ops->alloc(ctx, layout->parameters);
    m->grads = m->params ? ops->alloc(ctx, layout->parameters + 1) : NULL;
    m->acts = m->grads ? ops->alloc(ctx, act) : NULL;
    m->delta[0] = m->acts ? ops->alloc(ctx, widest) : NULL;
    m->delta[1] = m->delta[0] ? ops->alloc(ctx, widest) : NULL;
    m->loss_sum = m->delta[1] ? m->grads + layout->parameters : NULL;
    if (m->loss_sum == NULL) {
        set_why(m, why, why_len, "cannot allocate the model");
        rc = -ENOMEM;
        wk_model_fini(m);
    }
    return rc;
}

void wk_model_fini(struct wk_model *m)
{
    if (m->ops == NULL)
        return;
    float *bufs[] = {m->params, m->grads, m->acts, m->delta[0], m->delta[1]};
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
        if (bufs[i] != NULL)
            m->ops->release(m->ctx, bufs[i]);
    memset(m, 0, sizeof(*m));
}

/* The output of layer i inside m->acts. */
static float *layer_output(const struct wk_model *m, int i)
{
    size_t offset = 0;
    for (int k = 0; k < i; k++)
        offset += (size_t)m->batch * (size_t)m->layout->layer[k].out;
    return m->acts + offset;
}

int wk_model_forward(struct wk_model *m, const float *x, const float *t, float grad_scale)
{
    const struct wk_ops *ops = m->ops;
    const struct wk_layout *l = m->layout;
    int rc = 0;
    m->input = x;
    const float *in = x;
    float *y = NULL;
    for (int i = 0; i < l->layer_count; i++) {
        const struct wk_layer *layer = &l->layer[i];
        y = layer_output(m, i);
        /* y = in * W^T + b: [batch x in] times [in x out] */
        CHECK(ops->gemm(m->ctx, 0, 1, m->batch, layer->out, layer->in, 1.0f, in, layer->in,
                        m->params + layer->weight_offset, layer->in, 0.0f, y, layer->out));
        CHECK(ops->bias_act(m->ctx, y, m->params + layer->bias_offset, m->batch, layer->out,
                            i < l->layer_count - 1));
        in = y;
    }
    CHECK(ops->mse(m->ctx, y, t, m->delta[0], (size_t)m->batch * (size_t)l->shape.output,
                   grad_scale, m->loss_sum));
out:
    return rc;
}

/* Bucket i's floats: bucket 0 ends where grads ends, and loss_sum comes right after it. */
static size_t bucket_floats(const struct wk_layout *l, int i, int with_loss)
{
    return l->bucket[i].count + (i == 0 && with_loss ? 1 : 0);
}

int wk_model_backward(struct wk_model *m, int overlap, int with_loss)
{
    const struct wk_ops *ops = m->ops;
    const struct wk_layout *l = m->layout;
    int rc = 0, cur = 0, next_bucket = 0;
    for (int i = l->layer_count - 1; i >= 0; i--) {
        const struct wk_layer *layer = &l->layer[i];
        const float *x = i == 0 ? m->input : layer_output(m, i - 1);
        const float *dy = m->delta[cur];
        /* dW = dy^T * x: [out x batch] times [batch x in]; db = column sums of dy */
        CHECK(ops->gemm(m->ctx, 1, 0, layer->out, layer->in, m->batch, 1.0f, dy, layer->out, x,
                        layer->in, 0.0f, m->grads + layer->weight_offset, layer->in));
        CHECK(ops->bias_grad(m->ctx, m->grads + layer->bias_offset, dy, m->batch, layer->out));
        if (overlap && next_bucket < l->bucket_count &&
            l->bucket[next_bucket].first_layer == i) {
            const struct wk_bucket *b = &l->bucket[next_bucket];
            CHECK(ops->bucket_ready(m->ctx, next_bucket, m->grads + b->offset,
                                    bucket_floats(l, next_bucket, with_loss)));
            next_bucket++;
        }
        if (i == 0)
            break;
        /* dx = dy * W: [batch x out] times [out x in], then through the ReLU of layer i-1 */
        float *dx = m->delta[1 - cur];
        CHECK(ops->gemm(m->ctx, 0, 0, m->batch, layer->in, layer->out, 1.0f, dy, layer->out,
                        m->params + layer->weight_offset, layer->in, 0.0f, dx, layer->in));
        CHECK(ops->relu_backward(m->ctx, dx, x, (size_t)m->batch * (size_t)layer->in));
        cur = 1 - cur;
    }
    for (; next_bucket < l->bucket_count; next_bucket++) {
        const struct wk_bucket *b = &l->bucket[next_bucket];
        CHECK(ops->bucket_ready(m->ctx, next_bucket, m->grads + b->offset,
                                bucket_floats(l, next_bucket, with_loss)));
    }
out:
    return rc;
}

int wk_model_sgd(struct wk_model *m, float lr)
{
    return m->ops->sgd(m->ctx, m->params, m->grads, m->layout->parameters, lr);
}
