/* The multi-layer perceptron trained by `mpijob-worker train`, on any backend (worker/backend.h).
 *
 * Shape: input -> `layers` hidden layers of `hidden` units (ReLU) -> output (linear); loss is
 * the mean squared error over the global batch B and the outputs:
 *     loss = 1/(B*output) * sum (y - t)^2.
 *
 * Memory: parameters in ONE flat buffer, layer after layer, each layer's W (out x in, row-major)
 * then its b; gradients in a second flat buffer of the same layout. Gradients are grouped into
 * buckets of whole layers, filled from the last layer backwards (bucket 0 holds the output
 * layer), each closed once it holds at least the bucket size, so each bucket is a contiguous
 * range of the gradient buffer and is complete as soon as the backward pass has passed its
 * first layer. */
#ifndef WORKER_MODEL_H
#define WORKER_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "worker/backend.h"

struct wk_model_shape {
    int input, hidden, layers, output; /* layers: number of hidden layers, may be 0 */
};

struct wk_layer {
    int in, out;
    size_t weight_offset; /* floats from the start of the flat buffer */
    size_t bias_offset;
};

struct wk_bucket {
    int first_layer, last_layer; /* the layers it holds, first <= last */
    size_t offset, count;        /* floats [offset, offset + count) of the gradient buffer */
};

struct wk_layout {
    struct wk_model_shape shape;
    int layer_count;          /* shape.layers + 1 */
    struct wk_layer *layer;   /* owned */
    size_t parameters;
    int bucket_count;
    struct wk_bucket *bucket; /* owned; bucket 0 ends with the last layer */
};

/* Parameter count and the backend memory a model with this local batch needs (parameters,
 * gradients, activations, two gradient scratch buffers), with overflow checks: -EOVERFLOW when
 * a count does not fit, -EINVAL for a non-positive size. */
int wk_model_sizes(const struct wk_model_shape *shape, int batch, uint64_t *parameters,
                   uint64_t *backend_bytes);

/* Builds the layout with buckets of about bucket_bytes (> 0). Free with wk_layout_free.
 * 0, or -EINVAL / -EOVERFLOW / -ENOMEM with why[] set. */
int wk_layout_make(struct wk_layout *l, const struct wk_model_shape *shape, double bucket_bytes,
                   char *why, size_t why_len);
void wk_layout_free(struct wk_layout *l);

/* Deterministic initial parameters from the seed, identical on every rank: W uniform in
 * +-sqrt(6/in) (He) for the ReLU layers and +-sqrt(3/in) for the output layer, b = 0.
 * host holds l->parameters floats. */
void wk_model_init_params(const struct wk_layout *l, uint64_t seed, float *host);

/* FNV-1a (64 bit) over the bytes of n floats: equal weights hash equal on every rank. */
uint64_t wk_weights_hash(const float *host, size_t n);

/* A model living in a backend's memory. Borrows ops, ctx and layout (they must outlive it). */
struct wk_model {
    const struct wk_ops *ops;
    struct wk_ctx *ctx;
    const struct wk_layout *layout;
    int batch;          /* local rows per step */
    float *params;      /* layout->parameters floats */
    float *grads;       /* same layout, and one float more: loss_sum */
    float *acts;        /* the outputs of every layer, batch x out each, one after the other */
    float *delta[2];    /* batch x widest layer: the gradient flowing backwards */
    float *loss_sum;    /* grads + parameters: sum of squared errors since the last reset */
    const float *input; /* the batch of the last forward pass (caller's memory) */
};

/* Allocates the buffers (zeroed). 0 or a negative code with why[] set. */
int wk_model_init(struct wk_model *m, const struct wk_ops *ops, struct wk_ctx *ctx,
                  const struct wk_layout *layout, int batch, char *why, size_t why_len);
void wk_model_fini(struct wk_model *m);

/* Forward pass on x (batch x input, backend memory; must stay valid until backward), adds the
 * batch's squared error to loss_sum and leaves d(loss)/dy = grad_scale * (y - t) for backward.
 * grad_scale is 2 / (global batch * output): the local gradients then sum over the ranks to
 * the gradient of the global mean. */
int wk_model_forward(struct wk_model *m, const float *x, const float *t, float grad_scale);

/* Backward pass into grads. With overlap, each bucket is handed to ops->bucket_ready as soon as
 * its layers have their gradients; without, all of them after the whole pass. The caller then
 * calls ops->finish. With with_loss, bucket 0 (the output layer, at the end of grads) takes
 * loss_sum along, so that after finish it holds the sum over every rank: a step that reports
 * its loss needs no collective of its own. */
int wk_model_backward(struct wk_model *m, int overlap, int with_loss);

/* params -= lr * grads. */
int wk_model_sgd(struct wk_model *m, float lr);

#endif
