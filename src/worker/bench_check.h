/* The pure parts of `mpijob-worker bench`: message sizes from flags, the input pattern and the
 * check of an allreduce's result.
 *
 * The pattern: element i on rank r holds ((i*7 + r*13) mod 17) - 8, a small integer in [-8, 8].
 * Every partial sum of such values over at most WK_BENCH_MAX_RANKS ranks is an integer below
 * 2^24 in magnitude, so float addition is exact in any order and the reduced buffer must equal
 * the expected sum bit for bit, whatever algorithm (ring, tree, ...) the backend runs. The value
 * depends on i only through i mod 17, so the expected sums form a table of 17 floats. */
#ifndef WORKER_BENCH_CHECK_H
#define WORKER_BENCH_CHECK_H

#include <stddef.h>
#include <stdint.h>

#define WK_BENCH_PERIOD 17
/* 8 * ranks stays far below 2^24, where floats stop holding every integer. */
#define WK_BENCH_MAX_RANKS (1 << 20)
/* The largest message: 4 GiB, 2^30 floats, which keeps element counts within an MPI int. */
#define WK_BENCH_MAX_BYTES (UINT64_C(4) << 30)

/* Parses a byte count: digits with an optional K, M or G suffix (powers of 1024, either case),
 * "64M" = 67108864. 0, or -EINVAL for anything else (empty, sign, other suffix, trailing text),
 * -ERANGE beyond 2^63. */
int wk_bench_parse_size(const char *s, uint64_t *out);

/* The sizes of a sweep: min, min*factor, ... while <= max, each rounded down to whole floats
 * (at least one). Writes up to max_out sizes and returns how many the sweep has (which may be
 * more than max_out), or -EINVAL when min < 4, min > max or factor < 2. */
int wk_bench_sizes(uint64_t min, uint64_t max, unsigned factor, uint64_t *out, int max_out);

/* Element i of rank r's input. */
float wk_bench_value(size_t i, int rank);
/* x[0..n) = rank's input. */
void wk_bench_fill(float *x, size_t n, int rank);
/* table[k] = sum over ranks 0..ranks-1 of wk_bench_value(k, r): the expected result at every
 * index i with i mod WK_BENCH_PERIOD == k. */
void wk_bench_expected(int ranks, float table[WK_BENCH_PERIOD]);
/* The number of elements of got[0..n) that differ from the expected sum over `ranks` ranks
 * (NaN counts as wrong); *first_bad is the first such index (n when none). */
size_t wk_bench_count_wrong(const float *got, size_t n, int ranks, size_t *first_bad);

/* Bus bandwidth from algorithm bandwidth for a ring allreduce over n ranks: algbw * 2(n-1)/n. */
double wk_bench_busbw(double algbw, int ranks);

#endif
