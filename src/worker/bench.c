/* mpijob-worker bench: an allreduce bandwidth sweep in the manner of nccl-tests' all_reduce_perf.
 *
 * For each message size: warm-up operations, then --iters timed in-place sum-allreduces of
 * floats; the time of a size is the slowest rank's mean per operation. algbw = bytes / time,
 * busbw = algbw * 2(n-1)/n (what each rank's link carries in a ring). With --check (the
 * default), one more allreduce on freshly written input is compared element by element with
 * the exact expected sum (worker/bench_check.h); any wrong element fails the run after the
 * table is printed. Rank 0 prints the table and a final JSON summary line. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "util/clock.h"
#include "util/json.h"
#include "worker/bench_check.h"
#include "worker/commands.h"
#include "worker/diag.h"
#include "worker/rdma.h"
#include "worker/session.h"

#define MAX_SIZES 64
#define MAX_ITERS 100000
#define MAX_FACTOR 1024

struct bench_config {
    enum wk_backend_choice backend;
    uint64_t min_bytes, max_bytes;
    unsigned factor;
    int iters, warmup;
    int check;
    int require_rdma;
};

enum flag_id { F_BACKEND = 256, F_MIN_BYTES, F_MAX_BYTES, F_FACTOR, F_ITERS, F_WARMUP, F_CHECK,
               F_NO_CHECK, F_REQUIRE, F_HELP };

/* Every flag once: getopt's table, the defaults (parsed like the command line) and --help. */
static const struct flag_def {
    const char *name;
    int has_arg;
    enum flag_id id;
    const char *usage;  /* the flag as --help shows it */
    const char *def;    /* default, parsed like a value given on the command line; NULL: none */
    const char *help;
} FLAGS[] = {
    {"backend", required_argument, F_BACKEND, "--backend auto|nccl|mpi", "auto",
     "nccl when every rank has a GPU and the plugin loads, else mpi"},
    {"min-bytes", required_argument, F_MIN_BYTES, "--min-bytes N", "4",
     "smallest message; K, M, G suffixes are powers of 1024"},
    {"max-bytes", required_argument, F_MAX_BYTES, "--max-bytes N", "64M", "largest message, at most 4G"},
    {"factor", required_argument, F_FACTOR, "--factor F", "2",
     "each size is the previous one times F (2..1024)"},
    {"iters", required_argument, F_ITERS, "--iters N", "20", "timed allreduces per size (1..100000)"},
    {"warmup", required_argument, F_WARMUP, "--warmup N", "5",
     "untimed allreduces per size before the timed ones (0..100000)"},
    {"check", no_argument, F_CHECK, "--check", "on",
     "check every element of one more allreduce per size"},
    {"no-check", no_argument, F_NO_CHECK, "--no-check", NULL, "skip the check"},
    {"require", required_argument, F_REQUIRE, "--require rdma", "off",
     "fail unless an RDMA port is usable (also when MPIJOB_TRANSPORT=RDMA or NCCL_NET=IB)"},
    {"help", no_argument, F_HELP, "-h, --help", NULL, "this help"},
};
#define N_FLAGS (sizeof(FLAGS) / sizeof(FLAGS[0]))

static void usage(FILE *out)
{
    fprintf(out,
            "Usage: mpirun ... mpijob-worker bench [options]\n"
            "\n"
            "Allreduce bandwidth sweep (float, sum, in place) with an exact correctness check.\n"
            "Rank 0 prints size, count, time (us, slowest rank's mean), algbw and busbw (GB/s)\n"
            "and wrong elements per size, then one JSON summary line. Exits 1 on any wrong\n"
            "element.\n"
            "\n"
            "Options:\n");
    for (size_t i = 0; i < N_FLAGS; i++)
        fprintf(out, "  %-26s %-6s %s\n", FLAGS[i].usage, FLAGS[i].def ? FLAGS[i].def : "",
                FLAGS[i].help);
}

static int bad_value(const char *flag, const char *value, const char *what)
{
    if (wk_launcher_rank() == 0)
        wk_usage_error("bench", usage, "--%s %s, got '%s'", flag, what, value);
    return -EINVAL;
}

static int parse_count(const char *flag, const char *value, long min, long max, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(value, &end, 10);
    if (value[0] == '\0' || *end != '\0' || errno != 0 || v < min || v > max) {
        char what[64];
        snprintf(what, sizeof(what), "takes an integer from %ld to %ld", min, max);
        return bad_value(flag, value, what);
    }
    *out = (int)v;
    return 0;
}

static int parse_bytes(const char *flag, const char *value, uint64_t *out)
{
    uint64_t v = 0;
    int rc = wk_bench_parse_size(value, &v);
    if (rc == -EINVAL)
        return bad_value(flag, value, "takes a byte count such as 4096, 64K, 64M or 1G");
    if (rc < 0 || v > WK_BENCH_MAX_BYTES)
        return bad_value(flag, value, "is at most 4G (4294967296 bytes) per message");
    if (v < sizeof(float))
        return bad_value(flag, value, "is at least 4 (one float)");
    *out = v;
    return 0;
}

static int set_flag(struct bench_config *c, const struct flag_def *f, const char *value)
{
    int n = 0;
    switch (f->id) {
    case F_BACKEND: {
        int b = wk_backend_parse(value);
        if (b < 0)
            return bad_value(f->name, value, "takes auto, nccl or mpi");
        c->backend = (enum wk_backend_choice)b;
        return 0;
    }
    case F_MIN_BYTES: return parse_bytes(f->name, value, &c->min_bytes);
    case F_MAX_BYTES: return parse_bytes(f->name, value, &c->max_bytes);
    case F_FACTOR:
        if (parse_count(f->name, value, 2, MAX_FACTOR, &n) < 0)
            return -EINVAL;
        c->factor = (unsigned)n;
        return 0;
    case F_ITERS: return parse_count(f->name, value, 1, MAX_ITERS, &c->iters);
    case F_WARMUP: return parse_count(f->name, value, 0, MAX_ITERS, &c->warmup);
    case F_CHECK: c->check = 1; return 0;
    case F_NO_CHECK: c->check = 0; return 0;
    case F_REQUIRE:
        if (strcmp(value, "off") == 0)
            c->require_rdma = 0;
        else if (strcmp(value, "rdma") == 0)
            c->require_rdma = 1;
        else
            return bad_value(f->name, value, "takes 'rdma'");
        return 0;
    case F_HELP: return 0;
    }
    return -EINVAL;
}

/* 0 to run, 1 to exit 0 (help), 2 for a usage error. Nothing is allocated before this passes. */
static int parse_flags(int argc, char **argv, struct bench_config *c)
{
    struct option opts[N_FLAGS + 1];
    memset(c, 0, sizeof(*c));
    memset(opts, 0, sizeof(opts));
    for (size_t i = 0; i < N_FLAGS; i++) {
        opts[i] = (struct option){FLAGS[i].name, FLAGS[i].has_arg, NULL, (int)FLAGS[i].id};
        if (FLAGS[i].def != NULL && set_flag(c, &FLAGS[i], FLAGS[i].def) < 0)
            return 2;
    }
    optind = 1;
    opterr = 0;
    int opt;
    while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if (opt == 'h' || opt == F_HELP) {
            usage(stdout);
            return 1;
        }
        const struct flag_def *f = NULL;
        for (size_t i = 0; i < N_FLAGS; i++)
            if ((int)FLAGS[i].id == opt)
                f = &FLAGS[i];
        if (f == NULL) {
            if (wk_launcher_rank() == 0)
                wk_usage_error("bench", usage, "unknown or incomplete option '%s'", argv[optind - 1]);
            return 2;
        }
        if (set_flag(c, f, optarg) < 0)
            return 2;
    }
    if (optind < argc) {
        if (wk_launcher_rank() == 0)
            wk_usage_error("bench", usage, "unexpected argument '%s'", argv[optind]);
        return 2;
    }
    if (c->min_bytes > c->max_bytes) {
        if (wk_launcher_rank() == 0)
            wk_usage_error("bench", usage, "--min-bytes (%llu) is above --max-bytes (%llu)",
                           (unsigned long long)c->min_bytes, (unsigned long long)c->max_bytes);
        return 2;
    }
    return 0;
}

/* A backend call failed in the middle of collective work: the other ranks may already wait in
 * the same collective, so the whole job stops. */
static void op_failed(struct wk_session *s, const char *what, size_t bytes)
{
    char msg[512];
    const char *err = s->ops->error ? s->ops->error(s->ctx) : NULL;
    snprintf(msg, sizeof(msg), "bench: %s failed at %zu bytes: %s", what, bytes,
             err && err[0] ? err : "no reason given");
    wk_session_abort(s, 1, msg);
}

#define OP(s, call, what, bytes)                                                                  \
    do {                                                                                          \
        if ((call) < 0)                                                                           \
            op_failed(s, what, bytes);                                                            \
    } while (0)

struct size_result {
    uint64_t bytes;
    double time_us, algbw, busbw;
    unsigned long long wrong;
};

/* One size of the sweep on every rank; the result is the same on every rank. */
static void run_size(struct wk_session *s, const struct bench_config *c, float *dev, float *host,
                     uint64_t bytes, struct size_result *out)
{
    const struct wk_ops *ops = s->ops;
    size_t count = (size_t)(bytes / sizeof(float));
    memset(out, 0, sizeof(*out));
    out->bytes = bytes;

    wk_bench_fill(host, count, s->rank);
    OP(s, ops->upload(s->ctx, dev, host, count), "upload", (size_t)bytes);
    for (int i = 0; i < c->warmup; i++)
        OP(s, ops->allreduce(s->ctx, dev, count), "allreduce", (size_t)bytes);
    OP(s, ops->sync(s->ctx), "sync", (size_t)bytes);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = clock_now_ms_precise();
    for (int i = 0; i < c->iters; i++)
        OP(s, ops->allreduce(s->ctx, dev, count), "allreduce", (size_t)bytes);
    OP(s, ops->sync(s->ctx), "sync", (size_t)bytes);
    double per_op = (clock_now_ms_precise() - t0) / 1e3 / c->iters;
    MPI_Allreduce(MPI_IN_PLACE, &per_op, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    out->time_us = per_op * 1e6;
    out->algbw = per_op > 0 ? (double)bytes / per_op / 1e9 : 0.0;
    out->busbw = wk_bench_busbw(out->algbw, s->size);

    if (!c->check)
        return;
    /* The timed operations summed the buffer into itself many times over: start afresh. */
    wk_bench_fill(host, count, s->rank);
    OP(s, ops->upload(s->ctx, dev, host, count), "upload", (size_t)bytes);
    OP(s, ops->allreduce(s->ctx, dev, count), "allreduce", (size_t)bytes);
    OP(s, ops->download(s->ctx, host, dev, count), "download", (size_t)bytes);
    size_t first = 0;
    unsigned long long wrong = wk_bench_count_wrong(host, count, s->size, &first);
    if (wrong > 0) {
        float expected[WK_BENCH_PERIOD];
        wk_bench_expected(s->size, expected);
        wk_error("bench",
                 "rank %d: %llu of %zu elements wrong at %llu bytes; first at index %zu: got %g, "
                 "expected %g",
                 s->rank, wrong, count, (unsigned long long)bytes, first, (double)host[first],
                 (double)expected[first % WK_BENCH_PERIOD]);
    }
    MPI_Allreduce(&wrong, &out->wrong, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
}

static void print_header(const struct wk_session *s, const struct bench_config *c)
{
    printf("# mpijob-worker bench: allreduce, float, sum, in place\n");
    printf("# ranks %d, backend %s (%s)%s%s\n", s->size, s->ops->name,
           s->ops->device ? s->ops->device(s->ctx) : "?", s->fallback[0] ? ", auto fell back: " : "",
           s->fallback);
    printf("# iters %d, warmup %d, check %s; time is the slowest rank's mean per operation\n",
           c->iters, c->warmup, c->check ? "on" : "off");
    printf("#\n");
    printf("# %10s %12s %6s %6s %10s %8s %8s %7s\n", "size", "count", "type", "redop", "time",
           "algbw", "busbw", "#wrong");
    printf("# %10s %12s %6s %6s %10s %8s %8s %7s\n", "(B)", "(elements)", "", "", "(us)", "(GB/s)",
           "(GB/s)", "");
    fflush(stdout);
}

static void print_row(const struct size_result *r, int check)
{
    char wrong[24];
    if (check)
        snprintf(wrong, sizeof(wrong), "%llu", r->wrong);
    else
        snprintf(wrong, sizeof(wrong), "N/A");
    printf("  %10llu %12llu %6s %6s %10.2f %8.3f %8.3f %7s\n", (unsigned long long)r->bytes,
           (unsigned long long)(r->bytes / sizeof(float)), "float", "sum", r->time_us, r->algbw,
           r->busbw, wrong);
    fflush(stdout);
}

/* v to 5 significant digits, so the JSON holds 0.000041 and 23.456 alike without noise digits. */
static double rounded(double v)
{
    if (v == 0 || !isfinite(v))
        return v;
    double scale = pow(10.0, 5 - ceil(log10(fabs(v))));
    return round(v * scale) / scale;
}

/* The summary line: {"event":"summary","ranks":..,"backend":..,"transport":..,"sizes":[..],
 * "wrong_total":..,"avg_busbw_gbs":..}. */
static void print_summary(const struct wk_session *s, const struct bench_config *c,
                          const struct size_result *r, int n, unsigned long long wrong_total)
{
    char transport[64];
    wk_session_transport(s, transport, sizeof(transport));
    double busbw_sum = 0;
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "event", "summary");
    cJSON_AddNumberToObject(root, "ranks", s->size);
    cJSON_AddStringToObject(root, "backend", s->ops->name);
    cJSON_AddStringToObject(root, "transport", transport);
    cJSON_AddNumberToObject(root, "iters", c->iters);
    cJSON_AddBoolToObject(root, "check", c->check);
    cJSON *sizes = cJSON_AddArrayToObject(root, "sizes");
    for (int i = 0; sizes && i < n; i++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddItemToArray(sizes, e);
        cJSON_AddNumberToObject(e, "bytes", (double)r[i].bytes);
        cJSON_AddNumberToObject(e, "time_us", rounded(r[i].time_us));
        cJSON_AddNumberToObject(e, "algbw_gbs", rounded(r[i].algbw));
        cJSON_AddNumberToObject(e, "busbw_gbs", rounded(r[i].busbw));
        cJSON_AddNumberToObject(e, "wrong", (double)r[i].wrong);
        busbw_sum += r[i].busbw;
    }
    cJSON_AddNumberToObject(root, "wrong_total", (double)wrong_total);
    cJSON_AddNumberToObject(root, "avg_busbw_gbs", rounded(n ? busbw_sum / n : 0.0));
    printf("# wrong elements: %llu\n# average bus bandwidth: %.3f GB/s\n", wrong_total,
           n ? busbw_sum / n : 0.0);
    if (json_print_line(stdout, root) < 0)
        wk_error("bench", "out of memory writing the summary");
    cJSON_Delete(root);
}

/* The sweep on a started session: 0, or 1 when a check failed or the run could not start. */
static int run(struct wk_session *s, const struct bench_config *c)
{
    if (c->require_rdma || wk_rdma_required()) {
        char msg[1024];
        int rc = wk_rdma_check(msg, sizeof(msg));
        /* Ranks on one host see the same devices: one report per host. */
        if (rc < 0 && s->local_rank == 0)
            wk_error("bench", "rank %d: %s", s->rank, msg);
        if (wk_session_agree(s, rc) < 0)
            return 1;
    }
    if (s->size > WK_BENCH_MAX_RANKS) {
        if (s->rank == 0)
            wk_error("bench", "at most %d ranks (the check's sums must stay exact in float), got %d",
                     WK_BENCH_MAX_RANKS, s->size);
        return 1;
    }
    /* bench only moves data: its compute is a fill and a check, no GEMM */
    if (wk_session_backend(s, c->backend, 1) < 0)
        return 1;
    if (s->rank == 0 && s->fallback[0])
        wk_warn("bench", "using the mpi backend: %s", s->fallback);

    uint64_t sizes[MAX_SIZES];
    /* parse_flags admitted only sweeps of 1 to 31 sizes (4 B .. 4 GiB, factor >= 2). */
    int n = wk_bench_sizes(c->min_bytes, c->max_bytes, c->factor, sizes, MAX_SIZES);
    if (n <= 0)
        return 1;
    if (n > MAX_SIZES)
        n = MAX_SIZES;
    size_t max_count = (size_t)(sizes[n - 1] / sizeof(float));
    float *host = malloc(max_count * sizeof(float));
    float *dev = s->ops->alloc(s->ctx, max_count);
    struct size_result *results = calloc((size_t)n, sizeof(*results));
    int ok = host != NULL && dev != NULL && results != NULL;
    if (!ok)
        wk_error("bench", "rank %d: cannot allocate 2 x %llu bytes: %s", s->rank,
                 (unsigned long long)sizes[n - 1],
                 dev == NULL && s->ops->error ? s->ops->error(s->ctx) : "out of host memory");
    int status = 1;
    if (wk_session_agree(s, ok ? 0 : -EIO) < 0)
        goto out;

    if (s->rank == 0)
        print_header(s, c);
    unsigned long long wrong_total = 0;
    for (int i = 0; i < n; i++) {
        run_size(s, c, dev, host, sizes[i], &results[i]);
        wrong_total += results[i].wrong;
        if (s->rank == 0)
            print_row(&results[i], c->check);
    }
    if (s->rank == 0) {
        print_summary(s, c, results, n, wrong_total);
        if (wrong_total > 0)
            wk_error("bench", "%llu wrong elements: the allreduce results are not the exact sums",
                     wrong_total);
    }
    status = wrong_total > 0 ? 1 : 0;
out:
    if (dev != NULL)
        s->ops->release(s->ctx, dev);
    free(host);
    free(results);
    return status;
}

int wk_bench_main(int argc, char **argv)
{
    struct bench_config c;
    int rc = parse_flags(argc, argv, &c);
    if (rc != 0)
        return rc == 1 ? 0 : 2;
    struct wk_session s;
    int status = 1;
    if (wk_session_start(&s, &argc, &argv) == 0)
        status = run(&s, &c);
    wk_session_end(&s, status);
    return status;
}
