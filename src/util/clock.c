#include "util/clock.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

uint64_t clock_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

double clock_now_ms_precise(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

void clock_sleep_ms(uint64_t ms)
{
    struct timespec req = {.tv_sec = (time_t)(ms / 1000), .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&req, &req) < 0 && errno == EINTR)
        ;
}

static void deadline(clockid_t clock, struct timespec *ts, uint64_t ms_from_now)
{
    clock_gettime(clock, ts);
    ts->tv_sec += (time_t)(ms_from_now / 1000);
    ts->tv_nsec += (long)(ms_from_now % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

void clock_deadline_realtime(struct timespec *ts, uint64_t ms_from_now) { deadline(CLOCK_REALTIME, ts, ms_from_now); }

void clock_deadline_monotonic(struct timespec *ts, uint64_t ms_from_now) { deadline(CLOCK_MONOTONIC, ts, ms_from_now); }

void clock_rfc3339(time_t t, char out[21])
{
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(out, 21, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* Now in RFC 3339 UTC with digits (3 or 6) of fraction; out takes 22 + digits bytes. */
static void rfc3339_now(char *out, int digits)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char base[20];
    strftime(base, sizeof(base), "%Y-%m-%dT%H:%M:%S", &tm);
    unsigned long frac = (unsigned long)ts.tv_nsec / (digits == 3 ? 1000000ul : 1000ul);
    char full[48];
    snprintf(full, sizeof(full), "%.19s.%0*luZ", base, digits, frac);
    memcpy(out, full, (size_t)(21 + digits));
    out[21 + digits] = 0;
}

void clock_rfc3339_micro(char out[28]) { rfc3339_now(out, 6); }

void clock_rfc3339_milli(char out[25]) { rfc3339_now(out, 3); }

int clock_parse_rfc3339(const char *s, time_t *out)
{
    struct tm tm;
    memset(&tm, 0, sizeof(tm));
    const char *p = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm);
    if (!p)
        return -EINVAL;
    if (*p == '.') {
        p++;
        while (*p >= '0' && *p <= '9')
            p++;
    }
    long offset = 0;
    if (*p == 'Z' || *p == 'z') {
        p++;
    } else if (*p == '+' || *p == '-') {
        int hh, mm;
        if (sscanf(p + 1, "%2d:%2d", &hh, &mm) != 2)
            return -EINVAL;
        offset = (hh * 3600L + mm * 60L) * (*p == '-' ? -1 : 1);
        p += 6;
    } else {
        return -EINVAL;
    }
    if (*p)
        return -EINVAL;
    *out = timegm(&tm) - offset;
    return 0;
}

uint64_t clock_jitter(uint64_t n)
{
    static __thread uint64_t state;
    if (n == 0)
        return 0;
    if (!state) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        state = ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)ts.tv_sec ^ (uint64_t)(uintptr_t)&state;
        if (!state)
            state = 0x9e3779b97f4a7c15ull;
    }
    /* xorshift64* */
    state ^= state >> 12;
    state ^= state << 25;
    state ^= state >> 27;
    return (state * 0x2545F4914F6CDD1Dull) % n;
}
