/* The cost of the CPU backend's bucketed gradient allreduce, against one plain MPI_Allreduce of
 * the same gradient, measured in the same run (an MPI program: run it under mpirun).
 *
 * For each model (train's default, and a larger one) and bucket size, the gradient buffer and
 * its layer-aligned buckets come from wk_layout_make, as in `mpijob-worker train`. Each
 * iteration times, on the same buffer and in alternating order:
 *   plain:    MPI_Allreduce(MPI_IN_PLACE, whole gradient, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
 *   bucketed: wk_backend_mpi.bucket_ready for every bucket, then finish (no compute between:
 *             the pure communication cost of the path, its thread hand-off included).
 * Every rank fills the buffer with 1 before each operation and checks afterwards that every
 * element is exactly the number of ranks. A case's time is the median over the timed iterations
 * of the slowest rank's time; busbw = bytes * 2(n-1)/n / time; ratio = bucketed busbw / plain
 * busbw (= plain time / bucketed time). Rank 0 prints one line per case and a JSON summary.
 *
 * Usage: mpirun -np N bench_buckets [--iters N] [--warmup N]
 * Exit status: 0; 1 when the backend fails or a sum is wrong; 2 for a bad command line. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <getopt.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/clock.h"
#include "util/json.h"
#include "worker/backend.h"
#include "worker/model.h"

#define MAX_ITERS 10000
#define MAX_WARMUP 1000
#define WHY_LEN 512

#define MAX_BUCKET_SIZES 4

struct model_case {
    const char *name;
    struct wk_model_shape shape;
    /* --bucket-mb values, 0-terminated: train's default (one bucket for both models), then
     * sizes that split the model into several buckets, each giving a different layout. */
    double bucket_mb[MAX_BUCKET_SIZES];
};

/* train's defaults (worker/train_args.c: 166,664 parameters, 0.64 MiB), and 4 hidden layers
 * of 1024 (3,289,096 parameters, 12.5 MiB). */
static const struct model_case MODELS[] = {
    {"default", {.input = 128, .hidden = 256, .layers = 3, .output = 8}, {25.0, 0.25}},
    {"large", {.input = 128, .hidden = 1024, .layers = 4, .output = 8}, {25.0, 8.0, 1.0}},
};

#define N_MODELS (sizeof(MODELS) / sizeof(MODELS[0]))

struct options {
    int iters, warmup;
};

struct bench {
    int rank, size;
    MPI_Comm world;
    const struct wk_ops *ops;
    struct wk_ctx *ctx;
    struct options opt;
    double *plain_ms, *bucketed_ms; /* per timed iteration, slowest rank */
    long long wrong;                /* elements that were not the exact sum */
};

static void usage(FILE *out)
{
    fprintf(out,
            "Usage: mpirun -np N bench_buckets [options]\n"
            "\n"
            "Times one plain MPI_Allreduce of a model's whole gradient against the mpi backend's\n"
            "bucketed path (bucket_ready for every layer-aligned bucket, then finish), for train's\n"
            "default model (25 and 0.25 MiB buckets) and a larger one (25, 8 and 1 MiB).\n"
            "\n"
            "Options:\n"
            "  --iters N    timed iterations per case, 1..%d (default 50)\n"
            "  --warmup N   untimed iterations per case first, 0..%d (default 5)\n"
            "  -h, --help   this text\n",
            MAX_ITERS, MAX_WARMUP);
}

/* The rank the launcher gave this process, read before MPI starts so that a bad command line
 * is reported once. */
static int launcher_rank(void)
{
    const char *v = getenv("OMPI_COMM_WORLD_RANK");
    return v != NULL ? atoi(v) : 0;
}

static int parse_int(const char *flag, const char *v, int min, int max, int *out)
{
    char *end = NULL;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno != 0 || end == v || *end != '\0' || x < min || x > max) {
        if (launcher_rank() == 0)
            fprintf(stderr, "bench_buckets: %s: '%s' is not an integer in [%d, %d]\n", flag, v,
                    min, max);
        return -EINVAL;
    }
    *out = (int)x;
    return 0;
}

/* 0, 1 for --help, or -EINVAL with the reason and the usage on stderr (rank 0 only). */
static int parse_options(int argc, char **argv, struct options *o)
{
    static const struct option longopts[] = {
        {"iters", required_argument, NULL, 'i'},
        {"warmup", required_argument, NULL, 'w'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    *o = (struct options){.iters = 50, .warmup = 5};
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        int rc = 0;
        switch (c) {
        case 'i':
            rc = parse_int("--iters", optarg, 1, MAX_ITERS, &o->iters);
            break;
        case 'w':
            rc = parse_int("--warmup", optarg, 0, MAX_WARMUP, &o->warmup);
            break;
        case 'h':
            usage(stdout);
            return 1;
        case ':':
            if (launcher_rank() == 0)
                fprintf(stderr, "bench_buckets: %s needs a value\n", argv[optind - 1]);
            rc = -EINVAL;
            break;
        default:
            if (launcher_rank() == 0)
                fprintf(stderr, "bench_buckets: unknown option '%s'\n", argv[optind - 1]);
            rc = -EINVAL;
            break;
        }
        if (rc < 0)
            goto bad;
    }
    if (optind < argc) {
        if (launcher_rank() == 0)
            fprintf(stderr, "bench_buckets: unexpected argument '%s'\n", argv[optind]);
        goto bad;
    }
    return 0;
bad:
    if (launcher_rank() == 0) {
        fputc('\n', stderr);
        usage(stderr);
    }
    return -EINVAL;
}

static int compare_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), compare_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static long long count_wrong(const float *buf, size_t n, float expected)
{
    long long wrong = 0;
    for (size_t i = 0; i < n; i++)
        wrong += buf[i] != expected;
    return wrong;
}

static int run_plain(struct bench *b, float *grads, size_t n)
{
    if (MPI_Allreduce(MPI_IN_PLACE, grads, (int)n, MPI_FLOAT, MPI_SUM, b->world) != MPI_SUCCESS) {
        fprintf(stderr, "bench_buckets: rank %d: MPI_Allreduce failed\n", b->rank);
        return -EIO;
    }
    return 0;
}

static int run_bucketed(struct bench *b, const struct wk_layout *l, float *grads)
{
    double exposed_ms = 0.0;
    for (int i = 0; i < l->bucket_count; i++) {
        const struct wk_bucket *k = &l->bucket[i];
        if (b->ops->bucket_ready(b->ctx, i, grads + k->offset, k->count) < 0)
            goto fail;
    }
    if (b->ops->finish(b->ctx, &exposed_ms) < 0)
        goto fail;
    return 0;
fail:
    fprintf(stderr, "bench_buckets: rank %d: %s\n", b->rank, b->ops->error(b->ctx));
    return -EIO;
}

/* One operation of either path, timed on this rank between a barrier and its return; the
 * buffer is refilled before and checked after, both outside the timed span. */
static int timed_op(struct bench *b, const struct wk_layout *l, float *grads, int bucketed,
                    double *ms)
{
    size_t n = l->parameters;
    int rc = b->ops->fill(b->ctx, grads, n, 1.0f);
    if (rc < 0)
        return rc;
    MPI_Barrier(b->world);
    double start = clock_now_ms_precise();
    rc = bucketed ? run_bucketed(b, l, grads) : run_plain(b, grads, n);
    *ms = clock_now_ms_precise() - start;
    if (rc < 0)
        return rc;
    b->wrong += count_wrong(grads, n, (float)b->size);
    return 0;
}

/* Both paths, warm-up then timed iterations; plain goes first on even iterations and bucketed
 * on odd ones, so that drift in the machine's load falls on both alike. */
static int run_case(struct bench *b, const struct wk_layout *l, float *grads, double *plain_ms,
                    double *bucketed_ms)
{
    for (int it = 0; it < b->opt.warmup + b->opt.iters; it++) {
        double t[2]; /* [0] plain, [1] bucketed */
        for (int j = 0; j < 2; j++) {
            int bucketed = (it + j) % 2;
            int local = timed_op(b, l, grads, bucketed, &t[bucketed]), failed = 0;
            /* Every rank learns of a failure on any rank before the next collective. */
            MPI_Allreduce(&local, &failed, 1, MPI_INT, MPI_MIN, b->world);
            if (failed < 0)
                return -EIO;
        }
        double slowest[2];
        MPI_Allreduce(t, slowest, 2, MPI_DOUBLE, MPI_MAX, b->world);
        if (it >= b->opt.warmup) {
            b->plain_ms[it - b->opt.warmup] = slowest[0];
            b->bucketed_ms[it - b->opt.warmup] = slowest[1];
        }
    }
    *plain_ms = median(b->plain_ms, b->opt.iters);
    *bucketed_ms = median(b->bucketed_ms, b->opt.iters);
    return 0;
}

static double busbw_gbs(double bytes, int ranks, double ms)
{
    return ms > 0 ? bytes * 2.0 * (ranks - 1) / ranks / (ms * 1e-3) / 1e9 : 0.0;
}

static int run_all(struct bench *b, cJSON *cases)
{
    int rc = 0;
    float *grads = NULL;
    struct wk_layout l;
    memset(&l, 0, sizeof(l));
    char why[WHY_LEN];
    for (size_t m = 0; m < N_MODELS && rc == 0; m++) {
        for (size_t s = 0; s < MAX_BUCKET_SIZES && rc == 0; s++) {
            double bucket_mb = MODELS[m].bucket_mb[s];
            if (!(bucket_mb > 0))
                break;
            rc = wk_layout_make(&l, &MODELS[m].shape, bucket_mb * 1024.0 * 1024.0, why,
                                sizeof(why));
            if (rc < 0) {
                fprintf(stderr, "bench_buckets: %s\n", why);
                goto out;
            }
            grads = b->ops->alloc(b->ctx, l.parameters);
            int local = 0, failed = 0;
            if (grads == NULL) {
                fprintf(stderr, "bench_buckets: rank %d: %s\n", b->rank, b->ops->error(b->ctx));
                local = -ENOMEM;
            }
            /* All ranks stop together, none left waiting in a collective. */
            MPI_Allreduce(&local, &failed, 1, MPI_INT, MPI_MIN, b->world);
            if (failed < 0) {
                rc = failed;
                goto out;
            }
            double plain_ms = 0, bucketed_ms = 0;
            rc = run_case(b, &l, grads, &plain_ms, &bucketed_ms);
            if (rc < 0)
                goto out;
            double bytes = (double)l.parameters * sizeof(float);
            double plain_bw = busbw_gbs(bytes, b->size, plain_ms);
            double bucketed_bw = busbw_gbs(bytes, b->size, bucketed_ms);
            double ratio = bucketed_ms > 0 ? plain_ms / bucketed_ms : 0.0;
            if (b->rank == 0) {
                printf("%-8s %9zu %10.0f %9g %7d %10.1f %9.3f %11.1f %9.3f %7.3f\n",
                       MODELS[m].name, l.parameters, bytes, bucket_mb, l.bucket_count,
                       plain_ms * 1e3, plain_bw, bucketed_ms * 1e3, bucketed_bw, ratio);
                fflush(stdout);
                cJSON *c = cJSON_CreateObject();
                cJSON_AddStringToObject(c, "model", MODELS[m].name);
                cJSON_AddNumberToObject(c, "parameters", (double)l.parameters);
                cJSON_AddNumberToObject(c, "bytes", bytes);
                cJSON_AddNumberToObject(c, "bucket_mb", bucket_mb);
                cJSON_AddNumberToObject(c, "buckets", l.bucket_count);
                cJSON_AddNumberToObject(c, "plain_us", plain_ms * 1e3);
                cJSON_AddNumberToObject(c, "plain_busbw_gbs", plain_bw);
                cJSON_AddNumberToObject(c, "bucketed_us", bucketed_ms * 1e3);
                cJSON_AddNumberToObject(c, "bucketed_busbw_gbs", bucketed_bw);
                cJSON_AddNumberToObject(c, "ratio", ratio);
                cJSON_AddItemToArray(cases, c);
            }
            b->ops->release(b->ctx, grads);
            grads = NULL;
            wk_layout_free(&l);
        }
    }
out:
    if (grads != NULL)
        b->ops->release(b->ctx, grads);
    wk_layout_free(&l);
    return rc;
}

static void print_summary(const struct bench *b, cJSON *cases, int ok)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "event", "summary");
    cJSON_AddStringToObject(o, "bench", "buckets");
    cJSON_AddNumberToObject(o, "ranks", b->size);
    cJSON_AddNumberToObject(o, "iters", b->opt.iters);
    cJSON_AddNumberToObject(o, "warmup", b->opt.warmup);
    cJSON_AddNumberToObject(o, "wrong_elements", (double)b->wrong);
    cJSON_AddBoolToObject(o, "ok", ok);
    cJSON_AddItemToObject(o, "cases", cases);
    json_print_line(stdout, o);
    cJSON_Delete(o);
}

int main(int argc, char **argv)
{
    struct bench b;
    memset(&b, 0, sizeof(b));
    int rc = parse_options(argc, argv, &b.opt);
    if (rc != 0)
        return rc > 0 ? 0 : 2;

    int provided = 0;
    if (MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
        fprintf(stderr, "bench_buckets: MPI_Init_thread failed\n");
        return 1;
    }
    int status = 1;
    cJSON *cases = NULL;
    b.world = MPI_COMM_WORLD;
    MPI_Comm_rank(b.world, &b.rank);
    MPI_Comm_size(b.world, &b.size);
    if (provided < MPI_THREAD_MULTIPLE) {
        if (b.rank == 0)
            fprintf(stderr, "bench_buckets: this MPI library does not provide "
                            "MPI_THREAD_MULTIPLE, which the backend's thread needs\n");
        goto out;
    }
    b.plain_ms = calloc((size_t)b.opt.iters, sizeof(double));
    b.bucketed_ms = calloc((size_t)b.opt.iters, sizeof(double));
    cases = cJSON_CreateArray();
    if (b.plain_ms == NULL || b.bucketed_ms == NULL || cases == NULL) {
        fprintf(stderr, "bench_buckets: out of memory\n");
        goto out;
    }

    /* Shared-memory peers on this host: the local rank, as the session computes it. */
    MPI_Comm local;
    int local_rank = 0;
    MPI_Comm_split_type(b.world, MPI_COMM_TYPE_SHARED, b.rank, MPI_INFO_NULL, &local);
    MPI_Comm_rank(local, &local_rank);
    MPI_Comm_free(&local);

    char why[WHY_LEN];
    struct wk_init in = {.rank = b.rank, .size = b.size, .local_rank = local_rank,
                         .mpi_comm = &b.world};
    b.ops = &wk_backend_mpi;
    int init_rc = b.ops->init(&in, &b.ctx, why, sizeof(why));
    if (init_rc < 0)
        fprintf(stderr, "bench_buckets: rank %d: backend init: %s\n", b.rank, why);
    int init_failed = 0;
    MPI_Allreduce(&init_rc, &init_failed, 1, MPI_INT, MPI_MIN, b.world);
    if (init_failed < 0)
        goto out;

    if (b.rank == 0) {
        printf("bench_buckets: %d ranks; plain MPI_Allreduce (float, sum, in place) vs the mpi "
               "backend's buckets; %d warm-up + %d timed iterations, median of the slowest "
               "rank; busbw in GB/s\n",
               b.size, b.opt.warmup, b.opt.iters);
        printf("%-8s %9s %10s %9s %7s %10s %9s %11s %9s %7s\n", "model", "params", "bytes",
               "bucket_mb", "buckets", "plain_us", "plain_bw", "bucketed_us", "bucket_bw",
               "ratio");
        fflush(stdout);
    }
    rc = run_all(&b, cases);
    long long wrong = 0;
    MPI_Allreduce(&b.wrong, &wrong, 1, MPI_LONG_LONG, MPI_SUM, b.world);
    b.wrong = wrong;
    int ok = rc == 0 && wrong == 0;
    if (b.rank == 0) {
        if (wrong > 0)
            fprintf(stderr, "bench_buckets: %lld elements were not the exact sum\n", wrong);
        print_summary(&b, cases, ok);
        cases = NULL; /* owned by the summary, freed with it */
    }
    status = ok ? 0 : 1;
out:
    cJSON_Delete(cases);
    if (b.ctx != NULL)
        b.ops->fini(b.ctx);
    free(b.plain_ms);
    free(b.bucketed_ms);
    MPI_Finalize();
    return status;
}
