/* mpijob-worker train: its flag table in-process, and whole runs of the release binary under
 * mpirun (the test binary itself never starts MPI). */
#include <cblas.h> /* OpenBLAS's: openblas_get_config, to find the library this binary loaded */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runcmd.h"
#include "worker/session.h"
#include "worker/train_args.h"

/* ---- flags, in-process ---------------------------------------------------- */

static int parse(struct wk_train_args *a, char *err, size_t err_len, ...)
{
    char *argv[32] = {"train"};
    int argc = 1;
    va_list ap;
    va_start(ap, err_len);
    for (char *s; (s = va_arg(ap, char *)) != NULL && argc < 31;)
        argv[argc++] = s;
    va_end(ap);
    return wk_train_args_parse(a, argc, argv, err, err_len);
}

Test(train_args, defaults_come_from_the_table)
{
    struct wk_train_args a;
    char err[256] = "";
    cr_assert_eq(parse(&a, err, sizeof(err), NULL), 0, "%s", err);
    cr_assert_eq(a.backend, WK_BACKEND_AUTO);
    cr_assert_eq(a.layers, 3);
    cr_assert_eq(a.hidden, 256);
    cr_assert_eq(a.batch, 128);
    cr_assert_eq(a.steps, 100);
    cr_assert_float_eq(a.bucket_mb, 25.0, 1e-12);
    cr_assert_eq(a.overlap, 1);
    cr_assert_eq(a.require_rdma, 0);
    cr_assert_eq(a.seed, 1u);
    cr_assert_eq(a.threads, 1);
    /* the defaults fit the cap on any number of ranks that splits the batch */
    cr_assert_eq(wk_train_args_check_size(&a, 0, NULL, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(wk_train_args_check_size(&a, 4, NULL, err, sizeof(err)), 0, "%s", err);
}

Test(train_args, both_flag_forms_and_switches)
{
    struct wk_train_args a;
    char err[256] = "";
    cr_assert_eq(parse(&a, err, sizeof(err), "--backend", "mpi", "--hidden=64", "--lr", "0.5",
                       "--no-overlap", "--require", "rdma", "--seed", "18446744073709551615",
                       "--log-every=0", "--threads", "3", NULL),
                 0, "%s", err);
    cr_assert_eq(a.threads, 3);
    cr_assert_eq(a.backend, WK_BACKEND_MPI);
    cr_assert_eq(a.hidden, 64);
    cr_assert_float_eq(a.lr, 0.5, 1e-12);
    cr_assert_eq(a.overlap, 0);
    cr_assert_eq(a.require_rdma, 1);
    cr_assert_eq(a.seed, UINT64_MAX);
    cr_assert_eq(a.log_every, 0);
    cr_assert_eq(parse(&a, err, sizeof(err), "--help", NULL), 1);
}

Test(train_args, bad_flags_and_values_say_which)
{
    struct wk_train_args a;
    char err[256] = "";
    static const struct {
        const char *args[3];
        const char *needle;
    } cases[] = {
        {{"--bogus"}, "unknown flag '--bogus'"},
        {{"--bogus=1"}, "unknown flag '--bogus'"},
        {{"--hidden", "12x"}, "--hidden: '12x' is not an integer"},
        {{"--hidden", "0"}, "--hidden"},
        {{"--hidden", "99999999999"}, "--hidden"},
        {{"--layers", "-1"}, "--layers"},
        {{"--batch"}, "--batch needs a value"},
        {{"--lr", "nan"}, "--lr"},
        {{"--lr", "0"}, "--lr"},
        {{"--bucket-mb", "-3"}, "--bucket-mb"},
        {{"--backend", "gpu"}, "not one of auto, nccl, mpi"},
        {{"--require", "ib"}, "not 'rdma'"},
        {{"--no-overlap=1"}, "takes no value"},
        {{"--seed", "-1"}, "--seed"},
        {{"--threads", "0"}, "--threads: '0' is not an integer in [1, 1024]"},
        {{"--threads", "two"}, "--threads"},
        {{"--steps", ""}, "empty value"},
        {{"--steps", "1"}, "--steps: '1' is not an integer in [2, "},
        {{"stray"}, "unexpected argument 'stray'"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        err[0] = '\0';
        cr_assert_eq(parse(&a, err, sizeof(err), cases[i].args[0], cases[i].args[1],
                           cases[i].args[2], NULL),
                     -EINVAL, "case %zu accepted", i);
        cr_assert(strstr(err, cases[i].needle) != NULL, "case %zu: '%s' lacks '%s'", i, err,
                  cases[i].needle);
    }
}

Test(train_args, absurd_sizes_are_refused_with_the_cap_named)
{
    struct wk_train_args a;
    char err[512] = "";
    cr_assert_eq(parse(&a, err, sizeof(err), "--hidden", "1000000000", NULL), 0);
    cr_assert_eq(wk_train_args_check_size(&a, 0, NULL, err, sizeof(err)), -E2BIG);
    cr_assert(strstr(err, "cap of 16 GiB per rank") != NULL, "%s", err);
    /* every dimension at its maximum: the sums overflow 64 bits, still a clean refusal */
    cr_assert_eq(parse(&a, err, sizeof(err), "--hidden", "2147483647", "--input", "2147483647",
                       "--layers", "1024", "--batch", "2147483647", NULL),
                 0);
    cr_assert_eq(wk_train_args_check_size(&a, 1, NULL, err, sizeof(err)), -E2BIG);
    /* a fine model with a huge dataset shard */
    cr_assert_eq(parse(&a, err, sizeof(err), "--samples", "1000000000000", "--steps",
                       "1000000000000", "--input", "4096", NULL),
                 0);
    cr_assert_eq(wk_train_args_check_size(&a, 0, NULL, err, sizeof(err)), 0);
    cr_assert_eq(wk_train_args_check_size(&a, 2, NULL, err, sizeof(err)), -E2BIG);
    cr_assert(strstr(err, "data shard") != NULL, "%s", err);
    /* the batch must split over the ranks */
    cr_assert_eq(parse(&a, err, sizeof(err), "--batch", "10", NULL), 0);
    cr_assert_eq(wk_train_args_check_size(&a, 4, NULL, err, sizeof(err)), -EINVAL);
    cr_assert(strstr(err, "cannot be split evenly over 4 ranks") != NULL, "%s", err);
}

/* ---- runs under mpirun ---------------------------------------------------- */

struct run_result {
    int status;
    char *out, *err;
};

/* mpirun -np N [mpirun options] mpijob-worker train ARGS, output captured. */
static void run_train(struct run_result *r, int ranks, const char *mpirun_opts, const char *args)
{
    char cmd[4096];
    snprintf(cmd, sizeof(cmd), RUNCMD_MPIRUN " -np %d %s %s train %s </dev/null", ranks,
             mpirun_opts ? mpirun_opts : "", runcmd_worker_bin(), args);
    r->status = runcmd(cmd, &r->out, &r->err);
    cr_log_info("$ %s\nexit %d\n%s%s", cmd, r->status, r->out, r->err);
}

static void run_free(struct run_result *r)
{
    free(r->out);
    free(r->err);
}

/* The line of stdout whose "event" is `event`, parsed; NULL when there is none. */
static cJSON *event_line(const char *out, const char *event)
{
    const char *line = out;
    while (line != NULL && *line != '\0') {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        cJSON *o = cJSON_ParseWithLength(line, len);
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(o, "event");
        if (cJSON_IsString(e) && strcmp(e->valuestring, event) == 0)
            return o;
        cJSON_Delete(o);
        line = end ? end + 1 : NULL;
    }
    return NULL;
}

static double number(const cJSON *o, const char *name)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    cr_assert(cJSON_IsNumber(v), "no number '%s'", name);
    return v->valuedouble;
}

static int boolean(const cJSON *o, const char *name)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    cr_assert(cJSON_IsBool(v), "no boolean '%s'", name);
    return cJSON_IsTrue(v);
}

static const char *string(const cJSON *o, const char *name)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    cr_assert(cJSON_IsString(v), "no string '%s'", name);
    return v->valuestring;
}

/* Small enough that 4 ranks on 2 busy cores finish in a few seconds. */
#define SMALL "--backend mpi --layers 2 --hidden 96 --input 48 --output 4 --steps 60 --batch 64"

/* The transport settings that reached the ranks are counted by value, from the ranks. (Ranks
 * mpirun forks on its own host inherit its whole environment; over ssh only what it forwards
 * arrives, which the end-to-end tests read the same way.) */
Test(train_run, the_start_line_counts_the_transport_settings_each_rank_got)
{
    struct run_result r;
    setenv("NCCL_NET", "Socket", 1);
    run_train(&r, 2, "-x NCCL_NET", SMALL);
    unsetenv("NCCL_NET");
    cr_assert_eq(r.status, 0, "exit %d: %s", r.status, r.err);
    cJSON *start = event_line(r.out, "start");
    cr_assert_not_null(start, "no start line in: %s", r.out);
    const cJSON *env = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(start, "placement"), "env");
    const cJSON *net = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(env, "NCCL_NET"), "Socket");
    cr_assert(cJSON_IsNumber(net) && net->valueint == 2, "NCCL_NET Socket on both ranks: %s", r.out);
    cJSON_Delete(start);
    run_free(&r);
}

Test(train_run, four_ranks_train_with_identical_weights_and_a_falling_loss)
{
    struct run_result r;
    run_train(&r, 4, NULL, SMALL " --log-every 20 --check-every 25 --bucket-mb 0.02");
    cr_assert_eq(r.status, 0, "exit %d: %s", r.status, r.err);

    cJSON *start = event_line(r.out, "start");
    cr_assert_not_null(start, "no start line in: %s", r.out);
    cr_assert_eq(number(start, "ranks"), 4);
    cr_assert_str_eq(string(start, "backend"), "mpi");
    cr_assert(strncmp(string(start, "device"), "cpu (OpenBLAS ", 14) == 0, "%s",
              string(start, "device"));
    cr_assert(strstr(string(start, "device"), " build, 1 thread)") != NULL, "%s",
              string(start, "device"));
    cr_assert_eq(number(start, "threads"), 1);
    cr_assert_eq(number(start, "local_batch"), 16);
    cJSON *buckets = cJSON_GetObjectItemCaseSensitive(start, "buckets");
    cr_assert(cJSON_IsArray(buckets));
    cr_assert_gt(cJSON_GetArraySize(buckets), 1, "--bucket-mb 0.02 should split the gradients");
    /* The ranks say where they run: all four on this host, 0 to 3 in order. */
    char host[256] = "";
    cr_assert_eq(gethostname(host, sizeof(host) - 1), 0);
    const cJSON *on_host = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(start, "placement"), "hosts"), host);
    cr_assert(cJSON_IsArray(on_host), "placement.hosts[%s] in the start line", host);
    cr_assert_eq(cJSON_GetArraySize(on_host), 4);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(cJSON_GetArrayItem(on_host, i)->valueint, i);
    cJSON_Delete(start);

    int steps = 0;
    for (const char *p = r.out; (p = strstr(p, "\"event\":\"step\"")) != NULL; p++)
        steps++;
    cr_assert_eq(steps, 4, "step lines at 0, 20, 40 and 59");
    cJSON *step = event_line(r.out, "step");
    cr_assert_not_null(step);
    cr_assert_gt(number(step, "samples_per_sec"), 0);
    cr_assert_geq(number(step, "exposed_comm_ms"), 0);
    cr_assert_gt(number(step, "allreduce_bytes"), 0);
    cJSON_Delete(step);

    cJSON *sum = event_line(r.out, "summary");
    cr_assert_not_null(sum, "no summary in: %s", r.out);
    cr_assert_eq(number(sum, "ranks"), 4);
    cr_assert_str_eq(string(sum, "backend"), "mpi");
    cr_assert_str_eq(string(sum, "transport"), "mpi");
    cr_assert(boolean(sum, "weights_identical"));
    cr_assert(boolean(sum, "overlap"));
    cr_assert_lt(number(sum, "loss_last"), number(sum, "loss_first"));
    cr_assert_eq(number(sum, "steps"), 60);
    cr_assert_eq(number(sum, "global_batch"), 64);
    /* 48->96, 96->96, 96->4 */
    cr_assert_eq(number(sum, "parameters"), 48 * 96 + 96 + 96 * 96 + 96 + 96 * 4 + 4);
    cr_assert_gt(number(sum, "buckets"), 1);
    cr_assert_gt(number(sum, "step_ms"), 0);
    cJSON_Delete(sum);
    run_free(&r);
}

Test(train_run, the_loss_does_not_depend_on_the_number_of_ranks)
{
    double last[3], first[3];
    const int ranks[3] = {1, 2, 4};
    for (int i = 0; i < 3; i++) {
        struct run_result r;
        run_train(&r, ranks[i], NULL, SMALL " --log-every 0 --bucket-mb 0.03");
        cr_assert_eq(r.status, 0, "%d ranks: exit %d: %s", ranks[i], r.status, r.err);
        cJSON *sum = event_line(r.out, "summary");
        cr_assert_not_null(sum);
        first[i] = number(sum, "loss_first");
        last[i] = number(sum, "loss_last");
        cJSON_Delete(sum);
        run_free(&r);
    }
    for (int i = 1; i < 3; i++) {
        cr_assert_leq(fabs(first[i] - first[0]), 1e-4 * fabs(first[0]), "%d ranks: %.9g vs %.9g",
                      ranks[i], first[i], first[0]);
        cr_assert_leq(fabs(last[i] - last[0]), 1e-4 * fabs(last[0]), "%d ranks: %.9g vs %.9g",
                      ranks[i], last[i], last[0]);
    }
    cr_log_info("loss_last with 1, 2, 4 ranks: %.9g %.9g %.9g", last[0], last[1], last[2]);
}

Test(train_run, no_overlap_gives_the_same_training)
{
    struct run_result a, b;
    run_train(&a, 2, NULL, SMALL " --log-every 0 --bucket-mb 0.01");
    run_train(&b, 2, NULL, SMALL " --log-every 0 --bucket-mb 0.01 --no-overlap");
    cr_assert_eq(a.status, 0, "%s", a.err);
    cr_assert_eq(b.status, 0, "%s", b.err);
    cJSON *sa = event_line(a.out, "summary"), *sb = event_line(b.out, "summary");
    cr_assert_not_null(sa);
    cr_assert_not_null(sb);
    cr_assert(boolean(sa, "overlap"));
    cr_assert_not(boolean(sb, "overlap"));
    cr_assert(boolean(sb, "weights_identical"));
    /* the same sums in the same order: bit-identical training */
    cr_assert_eq(number(sa, "loss_last"), number(sb, "loss_last"));
    cJSON_Delete(sa);
    cJSON_Delete(sb);
    run_free(&a);
    run_free(&b);
}

Test(train_run, weights_that_differ_across_ranks_fail_the_job)
{
    /* Two seeds, so two different initial models: the very first check must catch it. */
    char cmd[4096], *out = NULL, *err = NULL;
    const char *bin = runcmd_worker_bin();
    snprintf(cmd, sizeof(cmd),
             RUNCMD_MPIRUN " -np 1 %s train " SMALL " --seed 1 : -np 1 %s train " SMALL
                           " --seed 2 </dev/null",
             bin, bin);
    int status = runcmd(cmd, &out, &err);
    cr_assert_eq(status, 1, "exit %d: %s", status, err);
    cr_assert(strstr(err, "the initial weights differ across ranks") != NULL, "%s", err);
    cr_assert_null(strstr(out, "\"summary\""), "it must not train: %s", out);
    free(out);
    free(err);
}

Test(train_run, a_loss_that_does_not_fall_fails_the_job)
{
    struct run_result r;
    run_train(&r, 2, NULL, SMALL " --lr 1000 --steps 5");
    cr_assert_eq(r.status, 1, "exit %d: %s", r.status, r.err);
    cr_assert(strstr(r.err, "the loss did not fall") != NULL, "%s", r.err);
    cJSON *sum = event_line(r.out, "summary");
    cr_assert_not_null(sum, "the summary still comes: %s", r.out);
    cJSON_Delete(sum);
    run_free(&r);
}

/* MPI_Finalize runs under a watchdog (its time from MPIJOB_WORKER_FINALIZE_TIMEOUT); a value
 * that is not a number of seconds is named, the default is used, and the run ends as usual. */
Test(train_run, a_bad_finalize_timeout_is_named_and_the_default_used)
{
    struct run_result r;
    run_train(&r, 2, "-x MPIJOB_WORKER_FINALIZE_TIMEOUT=soon", SMALL " --steps 4 --log-every 0");
    cr_assert_eq(r.status, 0, "exit %d: %s", r.status, r.err);
    cr_assert_not_null(strstr(r.err, "MPIJOB_WORKER_FINALIZE_TIMEOUT=soon is not a number of seconds"),
                       "%s", r.err);
    cr_assert_null(strstr(r.err, "has not returned"), "%s", r.err);
    run_free(&r);
}

Test(train_run, unknown_flag_exits_2_with_usage)
{
    struct run_result r;
    run_train(&r, 2, NULL, "--bogus");
    cr_assert_eq(r.status, 2);
    cr_assert(strstr(r.err, "unknown flag '--bogus'") != NULL, "%s", r.err);
    cr_assert(strstr(r.err, "Usage: mpijob-worker train") != NULL, "%s", r.err);
    cr_assert(strstr(r.err, "--bucket-mb F") != NULL, "the flag table: %s", r.err);
    run_free(&r);
}

Test(train_run, absurd_hidden_size_exits_2_before_allocating)
{
    struct run_result r;
    run_train(&r, 2, NULL, "--hidden 1000000000");
    cr_assert_eq(r.status, 2);
    cr_assert(strstr(r.err, "cap of 16 GiB per rank") != NULL, "%s", r.err);
    cr_assert_null(strstr(r.out, "\"event\""), "no training output: %s", r.out);
    run_free(&r);
}

Test(train_run, batch_not_divisible_by_ranks_is_a_clear_error)
{
    struct run_result r;
    run_train(&r, 4, NULL, "--backend mpi --batch 10");
    cr_assert_eq(r.status, 2);
    cr_assert(strstr(r.err, "--batch 10 cannot be split evenly over 4 ranks") != NULL, "%s",
              r.err);
    run_free(&r);
}

Test(train_run, rdma_required_without_a_device_fails_on_every_rank)
{
    struct run_result r;
    run_train(&r, 2, "-x MPIJOB_TRANSPORT=RDMA", SMALL);
    cr_assert_neq(r.status, 0);
    cr_assert(strstr(r.err, "RDMA requested but no usable device:") != NULL, "%s", r.err);
    cr_assert_null(strstr(r.out, "\"summary\""), "it must not train: %s", r.out);
    run_free(&r);

    run_train(&r, 2, NULL, SMALL " --require rdma");
    cr_assert_neq(r.status, 0);
    cr_assert(strstr(r.err, "RDMA requested but no usable device:") != NULL, "%s", r.err);
    run_free(&r);
}

Test(train_run, help_lists_every_flag_with_its_default)
{
    char cmd[PATH_MAX + 32], *out = NULL;
    snprintf(cmd, sizeof(cmd), "%s train --help", runcmd_worker_bin());
    cr_assert_eq(runcmd(cmd, &out, NULL), 0);
    static const char *const want[] = {
        "--backend auto|nccl|mpi", "--layers N", "--hidden N", "--input N", "--output N",
        "--batch N", "--steps N", "--lr F", "--bucket-mb F", "(default 25)", "--no-overlap",
        "--log-every N", "--check-every K", "--samples N", "--seed N", "--require rdma",
        "--threads N", "OPENBLAS_NUM_THREADS",
    };
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
        cr_assert(strstr(out, want[i]) != NULL, "'%s' missing from:\n%s", want[i], out);
    free(out);
}

/* ---- OpenBLAS threads and builds ------------------------------------------ */

/* The "device" of the start line and loss_last of a run; the run must succeed. */
static double run_device(const char *mpirun_opts, const char *args, char *device,
                         size_t device_len)
{
    struct run_result r;
    run_train(&r, 2, mpirun_opts, args);
    cr_assert_eq(r.status, 0, "%s %s: exit %d: %s", mpirun_opts ? mpirun_opts : "", args,
                 r.status, r.err);
    cJSON *start = event_line(r.out, "start"), *sum = event_line(r.out, "summary");
    cr_assert_not_null(start);
    cr_assert_not_null(sum);
    snprintf(device, device_len, "%s", string(start, "device"));
    double loss = number(sum, "loss_last");
    cr_assert(boolean(sum, "weights_identical"));
    cJSON_Delete(start);
    cJSON_Delete(sum);
    run_free(&r);
    return loss;
}

Test(train_run, one_blas_thread_per_rank_unless_threads_says_otherwise)
{
    char device[256];
    /* what the image or the launcher may set does not multiply the threads */
    double base = run_device("-x OPENBLAS_NUM_THREADS=2 -x OMP_NUM_THREADS=2",
                             SMALL " --log-every 0", device, sizeof(device));
    cr_assert(strstr(device, " build, 1 thread)") != NULL, "%s", device);
    double two = run_device(NULL, SMALL " --log-every 0 --threads 2", device, sizeof(device));
    if (strstr(device, "serial build") == NULL) /* that one refuses, below */
        cr_assert(strstr(device, " build, 2 threads)") != NULL, "%s", device);
    cr_assert_leq(fabs(two - base), 1e-4 * fabs(base), "%.9g vs %.9g", two, base);
}

/* The directory of the libopenblas.so.0 this binary loaded, resolved: Debian's
 * /usr/lib/<multiarch>/openblas-pthread (or -openmp, -serial), chosen by its alternatives. */
static void loaded_openblas_dir(char *out, size_t out_len)
{
    Dl_info info;
    cr_assert_neq(dladdr((void *)openblas_get_config, &info), 0);
    char *real = realpath(info.dli_fname, NULL);
    cr_assert_not_null(real, "%s", info.dli_fname);
    char *slash = strrchr(real, '/');
    cr_assert_not_null(slash);
    *slash = '\0';
    snprintf(out, out_len, "%s", real);
    free(real);
}

Test(train_run, every_debian_openblas_build_trains_on_one_thread)
{
    char dir[PATH_MAX], base[PATH_MAX], path[PATH_MAX + 64], device[256], opts[PATH_MAX + 64];
    loaded_openblas_dir(dir, sizeof(dir));
    char *leaf = strrchr(dir, '/');
    cr_assert(leaf != NULL && strncmp(leaf, "/openblas-", 10) == 0,
              "libopenblas.so.0 resolves to %s, not a Debian openblas-<build> directory", dir);
    *leaf = '\0';
    snprintf(base, sizeof(base), "%s", dir);
    static const char *const builds[] = {"pthread", "openmp", "serial"};
    double loss[3];
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof(path), "%s/openblas-%s/libopenblas.so.0", base, builds[i]);
        cr_assert_eq(access(path, R_OK), 0,
                     "%s is missing: scripts/install-deps.sh installs libopenblas0-%s", path,
                     builds[i]);
        snprintf(opts, sizeof(opts), "-x LD_LIBRARY_PATH=%s/openblas-%s", base, builds[i]);
        loss[i] = run_device(opts, SMALL " --log-every 0", device, sizeof(device));
        char want[64];
        snprintf(want, sizeof(want), ", %s build, 1 thread)", builds[i]);
        cr_assert(strstr(device, want) != NULL, "%s: %s", builds[i], device);
    }
    for (int i = 1; i < 3; i++)
        cr_assert_leq(fabs(loss[i] - loss[0]), 1e-4 * fabs(loss[0]), "%s: %.9g vs %.9g",
                      builds[i], loss[i], loss[0]);

    /* the serial build cannot run two threads: the job says so instead of running one */
    struct run_result r;
    snprintf(opts, sizeof(opts), "-x LD_LIBRARY_PATH=%s/openblas-serial", base);
    run_train(&r, 2, opts, SMALL " --threads 2");
    cr_assert_eq(r.status, 1, "exit %d: %s", r.status, r.err);
    cr_assert(strstr(r.err, "2 threads asked, but this OpenBLAS runs 1") != NULL, "%s", r.err);
    run_free(&r);
}
