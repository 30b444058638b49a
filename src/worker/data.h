/* Synthetic, deterministic training data, sharded by rank.
 *
 * Sample i: input feature j is wk_data_unit(seed, i, j), a hash mapped to [-1, 1); the target is
 * the output of a fixed TEACHER network, input -> 64 tanh -> output, whose weights come from a
 * fixed hash (they depend on the shape only, never on the seed), so a student can learn it and
 * the loss really falls.
 *
 * Sharding: step s uses the global samples [s*B, (s+1)*B) modulo the dataset size, B the global
 * batch; rank r of P takes the r-th contiguous slice of B/P of them. A rank generates its shard
 * once: the slices of the distinct steps it will see (the windows repeat every
 * samples / gcd(samples, B) steps), so the data, and therefore the results, do not depend on the
 * number of ranks for a fixed global batch. */
#ifndef WORKER_DATA_H
#define WORKER_DATA_H

#include <stddef.h>
#include <stdint.h>

#define WK_TEACHER_HIDDEN 64

/* A value in [-1, 1) from three keys; also used for the model's initial weights. */
float wk_data_unit(uint64_t a, uint64_t b, uint64_t c);

struct wk_teacher {
    int input, output;
    float *w1; /* WK_TEACHER_HIDDEN x input, row-major */
    float *b1; /* WK_TEACHER_HIDDEN */
    float *w2; /* output x WK_TEACHER_HIDDEN */
    float *b2; /* output */
};

/* Builds the teacher for this shape (allocates; free with wk_teacher_free). 0, -EINVAL, -ENOMEM. */
int wk_teacher_init(struct wk_teacher *t, int input, int output);
void wk_teacher_free(struct wk_teacher *t);

/* Sample `index`: x gets t->input features, y the t->output targets. */
void wk_data_sample(const struct wk_teacher *t, uint64_t seed, uint64_t index, float *x, float *y);

struct wk_shard {
    uint64_t samples;  /* dataset size */
    int global_batch, ranks, rank;
    int local_batch;   /* global_batch / ranks */
    uint64_t slots;    /* distinct steps held: min(steps, period of the windows) */
    uint64_t rows;     /* slots * local_batch samples held by this rank */
};

/* Plans rank `rank`'s shard for a run of `steps` steps. -EINVAL (why[] set) when the numbers do
 * not fit: global batch not divisible by the ranks, zero samples or steps, rows overflow. */
int wk_shard_plan(struct wk_shard *s, uint64_t samples, int global_batch, int ranks, int rank,
                  uint64_t steps, char *why, size_t why_len);
/* The global index of row `row` (0..local_batch-1) of slot `slot`. */
uint64_t wk_shard_index(const struct wk_shard *s, uint64_t slot, int row);
/* The slot step `step` uses. */
uint64_t wk_shard_slot(const struct wk_shard *s, uint64_t step);
/* Fills x (rows x input) and y (rows x output), slot after slot; the caller allocates them. */
void wk_shard_fill(const struct wk_shard *s, const struct wk_teacher *t, uint64_t seed, float *x,
                   float *y);

#endif
