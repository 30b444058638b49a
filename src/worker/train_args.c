#include "worker/train_args.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "worker/data.h"
#include "worker/model.h"
#include "worker/session.h"
#include "worker/watchdog.h"

enum flag_kind {
    FLAG_INT,       /* int in [min, max] */
    FLAG_LONG,      /* long long in [min, max] */
    FLAG_REAL,      /* double, finite, in (min, max] */
    FLAG_SEED,      /* any uint64 */
    FLAG_CLEAR,     /* no value: sets the int to 0 */
    FLAG_BACKEND,   /* auto | nccl | mpi */
    FLAG_REQUIRE,   /* rdma */
    FLAG_PATH,      /* a path, kept as the argument's own string; the "" default: NULL */
    FLAG_TIMEOUT,   /* seconds in [0, WK_COLLECTIVE_TIMEOUT_MAX_S], 0: off */
};

struct flag {
    const char *name;
    const char *meta;  /* the value's placeholder in --help, NULL for a switch */
    const char *def;   /* the default, parsed like a command-line value; NULL for a switch */
    const char *help;
    enum flag_kind kind;
    size_t offset;
    double min, max;
};

#define AT(field) offsetof(struct wk_train_args, field)

/* Every tunable of train, with its default. The defaults make a CPU run of 1 to 4 ranks take a
 * few seconds. */
static const struct flag flags[] = {
    {"backend", "auto|nccl|mpi", "auto", "nccl (GPU), mpi (CPU), or auto: nccl when every rank "
     "can run it", FLAG_BACKEND, AT(backend), 0, 0},
    {"layers", "N", "3", "hidden layers", FLAG_INT, AT(layers), 0, WK_TRAIN_MAX_LAYERS},
    {"hidden", "N", "256", "units per hidden layer", FLAG_INT, AT(hidden), 1, INT_MAX},
    {"input", "N", "128", "input features", FLAG_INT, AT(input), 1, INT_MAX},
    {"output", "N", "8", "outputs", FLAG_INT, AT(output), 1, INT_MAX},
    {"batch", "N", "128", "GLOBAL batch, split evenly over the ranks", FLAG_INT, AT(batch), 1,
     INT_MAX},
    /* Two at least: the loss of the last step is compared with the first's. */
    {"steps", "N", "100", "training steps (at least 2)", FLAG_LONG, AT(steps), 2, 1e12},
    {"lr", "F", "0.05", "learning rate", FLAG_REAL, AT(lr), 0, 1e6},
    {"bucket-mb", "F", "25", "gradient bucket size in MiB", FLAG_REAL, AT(bucket_mb), 0, 1 << 20},
    {"no-overlap", NULL, NULL, "allreduce the buckets only after the whole backward pass",
     FLAG_CLEAR, AT(overlap), 0, 0},
    {"log-every", "N", "10", "a step line every N steps (0: first and last only)", FLAG_LONG,
     AT(log_every), 0, 1e12},
    {"check-every", "K", "50", "compare the weights' hash across ranks every K steps (0: at "
     "start and end only)", FLAG_LONG, AT(check_every), 0, 1e12},
    {"samples", "N", "8192", "dataset size", FLAG_LONG, AT(samples), 1, 1e12},
    {"seed", "N", "1", "seed of the data and of the initial weights", FLAG_SEED, AT(seed), 0, 0},
    {"threads", "N", "1", "compute threads per rank of the mpi backend (OpenBLAS); "
     "OPENBLAS_NUM_THREADS and OMP_NUM_THREADS are not read", FLAG_INT, AT(threads), 1,
     WK_TRAIN_MAX_THREADS},
    {"require", "rdma", "", "fail unless an RDMA device is usable (also when "
     "MPIJOB_TRANSPORT=RDMA or NCCL_NET=IB)", FLAG_REQUIRE, AT(require_rdma), 0, 0},
    {"collective-timeout", "SECONDS", "600", "end the whole job when one allreduce (a gradient "
     "bucket, or an agreement between the ranks) has not completed in this time, naming the "
     "step and the ranks not heard from; 0: wait for ever. Also " WK_COLLECTIVE_TIMEOUT_ENV,
     FLAG_TIMEOUT, AT(collective_timeout), 0, WK_COLLECTIVE_TIMEOUT_MAX_S},
    {"export", "DIR", "", "do not train: write the initial weights and the data of every step "
     "to DIR as float32 files with problem.json describing them (no MPI; for training the same "
     "problem elsewhere)", FLAG_PATH, AT(export_dir), 0, 0},
};

#define FLAG_COUNT (sizeof(flags) / sizeof(flags[0]))

/* Writes text in a column starting at `indent`, wrapped at word boundaries before `width`. */
static void write_wrapped(FILE *out, const char *text, int indent, int width)
{
    int col = indent;
    const char *p = text;
    while (*p != '\0') {
        size_t word = strcspn(p, " ");
        if (col > indent && col + 1 + (int)word > width) {
            fprintf(out, "\n%*s", indent, "");
            col = indent;
        } else if (col > indent) {
            fputc(' ', out);
            col++;
        }
        fprintf(out, "%.*s", (int)word, p);
        col += (int)word;
        p += word;
        while (*p == ' ')
            p++;
    }
    fputc('\n', out);
}

void wk_train_usage(FILE *out)
{
    fprintf(out,
            "Usage: mpijob-worker train [options]\n"
            "\n"
            "Data-parallel SGD on a multi-layer perceptron (ReLU hidden layers, linear output,\n"
            "mean squared error) learning a fixed teacher network from synthetic data. Rank 0\n"
            "prints JSON lines: start, a step line every --log-every steps, a summary. Exits 1\n"
            "when the weights differ across ranks or the loss does not fall.\n"
            "\n"
            "Options:\n");
    for (size_t i = 0; i < FLAG_COUNT; i++) {
        const struct flag *f = &flags[i];
        char left[64], help[512];
        snprintf(left, sizeof(left), "--%s%s%s", f->name, f->meta ? " " : "",
                 f->meta ? f->meta : "");
        if (f->def != NULL && f->def[0] != '\0')
            snprintf(help, sizeof(help), "%s (default %s)", f->help, f->def);
        else
            snprintf(help, sizeof(help), "%s", f->help);
        fprintf(out, "  %-26s ", left);
        write_wrapped(out, help, 29, 96);
    }
    fprintf(out, "  %-26s %s\n", "-h, --help", "this text");
}

static int parse_value(const struct flag *f, const char *v, struct wk_train_args *a, char *err,
                       size_t err_len)
{
    char *end = NULL;
    void *dst = (char *)a + f->offset;
    errno = 0;
    switch (f->kind) {
    case FLAG_INT:
    case FLAG_LONG: {
        long long x = strtoll(v, &end, 10);
        if (errno != 0 || end == v || *end != '\0' || x < (long long)f->min ||
            (double)x > f->max) {
            snprintf(err, err_len, "--%s: '%s' is not an integer in [%.0f, %.0f]", f->name, v,
                     f->min, f->max);
            return -EINVAL;
        }
        if (f->kind == FLAG_INT)
            *(int *)dst = (int)x;
        else
            *(long long *)dst = x;
        return 0;
    }
    case FLAG_REAL: {
        double x = strtod(v, &end);
        if (errno != 0 || end == v || *end != '\0' || !isfinite(x) || !(x > f->min) ||
            x > f->max) {
            snprintf(err, err_len, "--%s: '%s' is not a number in (%g, %g]", f->name, v, f->min,
                     f->max);
            return -EINVAL;
        }
        *(double *)dst = x;
        return 0;
    }
    case FLAG_SEED: {
        unsigned long long x = strtoull(v, &end, 10);
        if (errno != 0 || end == v || *end != '\0' || v[0] == '-') {
            snprintf(err, err_len, "--%s: '%s' is not an unsigned 64-bit integer", f->name, v);
            return -EINVAL;
        }
        *(uint64_t *)dst = x;
        return 0;
    }
    case FLAG_BACKEND: {
        int b = wk_backend_parse(v);
        if (b < 0) {
            snprintf(err, err_len, "--%s: '%s' is not one of auto, nccl, mpi", f->name, v);
            return -EINVAL;
        }
        *(int *)dst = b;
        return 0;
    }
    case FLAG_REQUIRE:
        if (v[0] == '\0') { /* the default: nothing required */
            *(int *)dst = 0;
            return 0;
        }
        if (strcmp(v, "rdma") != 0) {
            snprintf(err, err_len, "--%s: '%s' is not 'rdma'", f->name, v);
            return -EINVAL;
        }
        *(int *)dst = 1;
        return 0;
    case FLAG_CLEAR:
        *(int *)dst = 0;
        return 0;
    case FLAG_TIMEOUT: {
        char why[160];
        if (wk_watchdog_parse_timeout(v, (double *)dst, why, sizeof(why)) < 0) {
            snprintf(err, err_len, "--%s: %s", f->name, why);
            return -EINVAL;
        }
        return 0;
    }
    case FLAG_PATH: /* empty only as the default: the parser refuses empty values */
        *(const char **)dst = v[0] == '\0' ? NULL : v;
        return 0;
    }
    return -EINVAL;
}

int wk_train_args_parse(struct wk_train_args *a, int argc, char **argv, char *err,
                        size_t err_len)
{
    memset(a, 0, sizeof(*a));
    a->overlap = 1;
    for (size_t i = 0; i < FLAG_COUNT; i++)
        if (flags[i].def != NULL && parse_value(&flags[i], flags[i].def, a, err, err_len) < 0)
            return -EINVAL; /* a bad default: caught by the tests */
    int timeout_given = 0;

    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0)
            return 1;
        if (strncmp(arg, "--", 2) != 0) {
            snprintf(err, err_len, "unexpected argument '%s'", arg);
            return -EINVAL;
        }
        const char *name = arg + 2, *eq = strchr(name, '=');
        size_t name_len = eq ? (size_t)(eq - name) : strlen(name);
        const struct flag *f = NULL;
        for (size_t k = 0; k < FLAG_COUNT; k++)
            if (strlen(flags[k].name) == name_len && strncmp(flags[k].name, name, name_len) == 0)
                f = &flags[k];
        if (f == NULL) {
            snprintf(err, err_len, "unknown flag '%.*s'", (int)(name_len + 2), arg);
            return -EINVAL;
        }
        const char *value = NULL;
        if (f->meta == NULL) {
            if (eq != NULL) {
                snprintf(err, err_len, "--%s takes no value", f->name);
                return -EINVAL;
            }
        } else if (eq != NULL) {
            value = eq + 1;
        } else if (i + 1 < argc) {
            value = argv[++i];
        } else {
            snprintf(err, err_len, "--%s needs a value (%s)", f->name, f->meta);
            return -EINVAL;
        }
        if (value != NULL && value[0] == '\0') {
            snprintf(err, err_len, "--%s: empty value", f->name);
            return -EINVAL;
        }
        if (parse_value(f, value, a, err, err_len) < 0)
            return -EINVAL;
        timeout_given |= f->kind == FLAG_TIMEOUT;
    }
    const char *env = getenv(WK_COLLECTIVE_TIMEOUT_ENV);
    if (!timeout_given && env != NULL) {
        char why[160];
        if (wk_watchdog_parse_timeout(env, &a->collective_timeout, why, sizeof(why)) < 0) {
            snprintf(err, err_len, "%s=%s: %s", WK_COLLECTIVE_TIMEOUT_ENV, env, why);
            return -EINVAL;
        }
    }
    return 0;
}

static double gib(uint64_t bytes)
{
    return (double)bytes / (double)(1ull << 30);
}

static int too_big(char *msg, size_t msg_len, const char *what)
{
    snprintf(msg, msg_len,
             "%s: more than the cap of %.0f GiB per rank; use smaller --hidden, --layers, "
             "--input, --output, --batch or --samples",
             what, gib(WK_TRAIN_MAX_BYTES));
    return -E2BIG;
}

int wk_train_args_check_size(const struct wk_train_args *a, int ranks, uint64_t *bytes,
                             char *msg, size_t msg_len)
{
    struct wk_model_shape shape = {a->input, a->hidden, a->layers, a->output};
    uint64_t params = 0, model_bytes = 0, total = 0;
    char what[256];
    if (bytes != NULL)
        *bytes = 0;
    int batch = ranks > 0 ? a->batch / ranks : 1;
    if (ranks > 0 && a->batch % ranks != 0) {
        snprintf(msg, msg_len,
                 "--batch %d cannot be split evenly over %d ranks: the global batch must be a "
                 "multiple of the number of ranks",
                 a->batch, ranks);
        return -EINVAL;
    }
    if (wk_model_sizes(&shape, batch, &params, &model_bytes) < 0)
        return too_big(msg, msg_len, "the model's size overflows 64 bits");
    /* The host keeps one copy of the parameters (initialisation, weight hashes). */
    uint64_t host = params * sizeof(float);
    /* Parameters, gradients and the host copy, whatever the number of ranks. */
    if (params > WK_TRAIN_MAX_BYTES / (3 * sizeof(float))) {
        snprintf(what, sizeof(what), "%llu parameters need %.1f GiB for weights and gradients",
                 (unsigned long long)params, 3.0 * gib(host));
        return too_big(msg, msg_len, what);
    }
    if (ranks <= 0)
        goto fits;

    /* The shard lives on the backend and, while it is generated, on the host. */
    struct wk_shard shard;
    char why[256];
    if (wk_shard_plan(&shard, (uint64_t)a->samples, a->batch, ranks, 0, (uint64_t)a->steps, why,
                      sizeof(why)) < 0) {
        snprintf(msg, msg_len, "%s", why);
        return -EINVAL;
    }
    uint64_t width = (uint64_t)a->input + (uint64_t)a->output, shard_bytes, teacher;
    if (__builtin_mul_overflow(shard.rows, width, &shard_bytes) ||
        __builtin_mul_overflow(shard_bytes, 2 * sizeof(float), &shard_bytes))
        return too_big(msg, msg_len, "the data shard's size overflows 64 bits");
    teacher = (WK_TEACHER_HIDDEN + 1) * (width + 1) * sizeof(float);
    if (__builtin_add_overflow(model_bytes, host, &total) ||
        __builtin_add_overflow(total, shard_bytes, &total) ||
        __builtin_add_overflow(total, teacher, &total) || total > WK_TRAIN_MAX_BYTES) {
        snprintf(what, sizeof(what),
                 "the model (%llu parameters, local batch %d) and the data shard (%llu samples) "
                 "need %.1f GiB",
                 (unsigned long long)params, batch, (unsigned long long)shard.rows,
                 gib(model_bytes) + gib(host) + gib(shard_bytes));
        return too_big(msg, msg_len, what);
    }
fits:
    if (bytes != NULL)
        *bytes = ranks > 0 ? total : 3 * host;
    return 0;
}
