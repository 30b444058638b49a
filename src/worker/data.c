#include "worker/data.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The teacher's weights come from this key, not from --seed: the task stays the same when the
 * seed (data order and student initialisation) changes. */
#define TEACHER_KEY 0x7465616368657221ull

static uint64_t mix64(uint64_t z)
{
    /* splitmix64's finaliser: every input bit reaches every output bit. */
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

float wk_data_unit(uint64_t a, uint64_t b, uint64_t c)
{
    uint64_t h = mix64(mix64(mix64(a) + b) + c);
    /* 24 bits: exact in a float, spread evenly over [-1, 1). */
    return (float)(h >> 40) * (1.0f / 8388608.0f) - 1.0f;
}

int wk_teacher_init(struct wk_teacher *t, int input, int output)
{
    memset(t, 0, sizeof(*t));
    if (input <= 0 || output <= 0)
        return -EINVAL;
    t->input = input;
    t->output = output;
    t->w1 = malloc(sizeof(float) * WK_TEACHER_HIDDEN * (size_t)input);
    t->b1 = malloc(sizeof(float) * WK_TEACHER_HIDDEN);
    t->w2 = malloc(sizeof(float) * WK_TEACHER_HIDDEN * (size_t)output);
    t->b2 = malloc(sizeof(float) * (size_t)output);
    if (t->w1 == NULL || t->b1 == NULL || t->w2 == NULL || t->b2 == NULL) {
        wk_teacher_free(t);
        return -ENOMEM;
    }
    /* Scaled so that pre-activations and targets are of order one whatever the widths. */
    float s1 = sqrtf(3.0f / (float)input), s2 = sqrtf(3.0f / WK_TEACHER_HIDDEN);
    for (size_t i = 0; i < WK_TEACHER_HIDDEN * (size_t)input; i++)
        t->w1[i] = s1 * wk_data_unit(TEACHER_KEY, 1, i);
    for (size_t i = 0; i < WK_TEACHER_HIDDEN; i++)
        t->b1[i] = 0.1f * wk_data_unit(TEACHER_KEY, 2, i);
    for (size_t i = 0; i < WK_TEACHER_HIDDEN * (size_t)output; i++)
        t->w2[i] = s2 * wk_data_unit(TEACHER_KEY, 3, i);
    for (size_t i = 0; i < (size_t)output; i++)
        t->b2[i] = 0.1f * wk_data_unit(TEACHER_KEY, 4, i);
    return 0;
}

void wk_teacher_free(struct wk_teacher *t)
{
    free(t->w1);
    free(t->b1);
    free(t->w2);
    free(t->b2);
    memset(t, 0, sizeof(*t));
}

void wk_data_sample(const struct wk_teacher *t, uint64_t seed, uint64_t index, float *x, float *y)
{
    for (int j = 0; j < t->input; j++)
        x[j] = wk_data_unit(seed, index, (uint64_t)j);
    double h[WK_TEACHER_HIDDEN];
    for (int k = 0; k < WK_TEACHER_HIDDEN; k++) {
        const float *w = t->w1 + (size_t)k * t->input;
        double s = t->b1[k];
        for (int j = 0; j < t->input; j++)
            s += (double)w[j] * x[j];
        h[k] = tanh(s);
    }
    for (int o = 0; o < t->output; o++) {
        const float *w = t->w2 + (size_t)o * WK_TEACHER_HIDDEN;
        double s = t->b2[o];
        for (int k = 0; k < WK_TEACHER_HIDDEN; k++)
            s += (double)w[k] * h[k];
        y[o] = (float)s;
    }
}

static uint64_t gcd64(uint64_t a, uint64_t b)
{
    while (b != 0) {
        uint64_t r = a % b;
        a = b;
        b = r;
    }
    return a;
}

int wk_shard_plan(struct wk_shard *s, uint64_t samples, int global_batch, int ranks, int rank,
                  uint64_t steps, char *why, size_t why_len)
{
    memset(s, 0, sizeof(*s));
    if (samples == 0 || steps == 0 || global_batch <= 0 || ranks <= 0 || rank < 0 ||
        rank >= ranks) {
        snprintf(why, why_len,
                 "bad shard: samples=%llu steps=%llu global batch=%d ranks=%d rank=%d",
                 (unsigned long long)samples, (unsigned long long)steps, global_batch, ranks,
                 rank);
        return -EINVAL;
    }
    if (global_batch % ranks != 0) {
        snprintf(why, why_len,
                 "the global batch %d cannot be split evenly over %d ranks (it must be a "
                 "multiple of the number of ranks)",
                 global_batch, ranks);
        return -EINVAL;
    }
    s->samples = samples;
    s->global_batch = global_batch;
    s->ranks = ranks;
    s->rank = rank;
    s->local_batch = global_batch / ranks;
    uint64_t period = samples / gcd64(samples, (uint64_t)global_batch);
    s->slots = steps < period ? steps : period;
    if (__builtin_mul_overflow(s->slots, (uint64_t)s->local_batch, &s->rows)) {
        snprintf(why, why_len, "shard too large: %llu steps of %d samples",
                 (unsigned long long)s->slots, s->local_batch);
        return -EINVAL;
    }
    return 0;
}

uint64_t wk_shard_index(const struct wk_shard *s, uint64_t slot, int row)
{
    unsigned __int128 i = (unsigned __int128)slot * (uint64_t)s->global_batch +
                          (uint64_t)s->rank * (uint64_t)s->local_batch + (uint64_t)row;
    return (uint64_t)(i % s->samples);
}

uint64_t wk_shard_slot(const struct wk_shard *s, uint64_t step)
{
    return step % s->slots;
}

void wk_shard_fill(const struct wk_shard *s, const struct wk_teacher *t, uint64_t seed, float *x,
                   float *y)
{
    size_t r = 0;
    for (uint64_t slot = 0; slot < s->slots; slot++)
        for (int row = 0; row < s->local_batch; row++, r++)
            wk_data_sample(t, seed, wk_shard_index(s, slot, row), x + r * (size_t)t->input,
                           y + r * (size_t)t->output);
}
