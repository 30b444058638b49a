#include "worker/bench_check.h"

#include <ctype.h>
#include <errno.h>
#include <string.h>

int wk_bench_parse_size(const char *s, uint64_t *out)
{
    if (s == NULL || !isdigit((unsigned char)s[0]))
        return -EINVAL;
    uint64_t v = 0;
    const char *p = s;
    for (; isdigit((unsigned char)*p); p++) {
        unsigned digit = (unsigned)(*p - '0');
        if (v > (UINT64_C(1) << 63) / 10)
            return -ERANGE;
        v = v * 10 + digit;
    }
    unsigned shift = 0;
    switch (*p) {
    case '\0': break;
    case 'k': case 'K': shift = 10; p++; break;
    case 'm': case 'M': shift = 20; p++; break;
    case 'g': case 'G': shift = 30; p++; break;
    default: return -EINVAL;
    }
    if (*p != '\0')
        return -EINVAL;
    if (v > ((UINT64_C(1) << 63) >> shift))
        return -ERANGE;
    *out = v << shift;
    return 0;
}

int wk_bench_sizes(uint64_t min, uint64_t max, unsigned factor, uint64_t *out, int max_out)
{
    if (min < sizeof(float) || min > max || factor < 2)
        return -EINVAL;
    int count = 0;
    for (uint64_t size = min; size <= max; size *= factor) {
        if (count < max_out)
            out[count] = size / sizeof(float) * sizeof(float);
        count++;
        if (size > max / factor)
            break;
    }
    return count;
}

float wk_bench_value(size_t i, int rank)
{
    unsigned k = (unsigned)(i % WK_BENCH_PERIOD);
    unsigned r = (unsigned)rank % WK_BENCH_PERIOD;
    return (float)((int)((k * 7 + r * 13) % WK_BENCH_PERIOD) - 8);
}

void wk_bench_fill(float *x, size_t n, int rank)
{
    float period[WK_BENCH_PERIOD];
    for (size_t k = 0; k < WK_BENCH_PERIOD; k++)
        period[k] = wk_bench_value(k, rank);
    for (size_t i = 0, k = 0; i < n; i++, k = k + 1 == WK_BENCH_PERIOD ? 0 : k + 1)
        x[i] = period[k];
}

void wk_bench_expected(int ranks, float table[WK_BENCH_PERIOD])
{
    for (size_t k = 0; k < WK_BENCH_PERIOD; k++) {
        long sum = 0;
        for (int r = 0; r < ranks; r++)
            sum += (long)wk_bench_value(k, r);
        table[k] = (float)sum;
    }
}

size_t wk_bench_count_wrong(const float *got, size_t n, int ranks, size_t *first_bad)
{
    float table[WK_BENCH_PERIOD];
    wk_bench_expected(ranks, table);
    size_t wrong = 0;
    *first_bad = n;
    for (size_t i = 0, k = 0; i < n; i++, k = k + 1 == WK_BENCH_PERIOD ? 0 : k + 1) {
        /* != is true for NaN, so a NaN counts as wrong. */
        if (got[i] != table[k]) {
            if (wrong++ == 0)
                *first_bad = i;
        }
    }
    return wrong;
}

double wk_bench_busbw(double algbw, int ranks)
{
    if (ranks < 2)
        return 0.0;
    return algbw * 2.0 * (double)(ranks - 1) / (double)ranks;
}
