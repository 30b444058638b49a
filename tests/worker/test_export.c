/* train --export: the files hold exactly what train trains on (initial weights, every window of
 * data) and say how in problem.json; a directory that cannot be written is a clear error. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runcmd.h"
#include "worker/data.h"
#include "worker/export.h"
#include "worker/model.h"
#include "worker/train_args.h"

static char dir[64];

static void make_dir(void)
{
    snprintf(dir, sizeof(dir), "/tmp/export-test-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
}

static void remove_dir(void)
{
    const char *names[] = {"problem.json", "params.f32", "x.f32", "y.f32"};
    char path[128];
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
        unlink(path);
    }
    rmdir(dir);
}

/* The file's floats; *n gets their count. */
static float *read_floats(const char *name, size_t *n)
{
    char path[128];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "%s: %s", path, strerror(errno));
    fseek(f, 0, SEEK_END);
    long bytes = ftell(f);
    fseek(f, 0, SEEK_SET);
    cr_assert_eq(bytes % (long)sizeof(float), 0);
    float *v = malloc((size_t)bytes + 1);
    cr_assert_eq(fread(v, 1, (size_t)bytes, f), (size_t)bytes);
    fclose(f);
    *n = (size_t)bytes / sizeof(float);
    return v;
}

static cJSON *read_problem(void)
{
    char path[128];
    snprintf(path, sizeof(path), "%s/problem.json", dir);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f);
    char text[8192];
    size_t len = fread(text, 1, sizeof(text) - 1, f);
    fclose(f);
    text[len] = '\0';
    cJSON *doc = cJSON_Parse(text);
    cr_assert_not_null(doc, "problem.json is not JSON: %s", text);
    return doc;
}

static double num(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    cr_assert(cJSON_IsNumber(v), "%s missing", key);
    return v->valuedouble;
}

static void parse(struct wk_train_args *a, const char *const *argv, int argc)
{
    char err[256] = "";
    cr_assert_eq(wk_train_args_parse(a, argc, (char **)argv, err, sizeof(err)), 0, "%s", err);
}

/* Every window row is the sample train's shard would give it, even where the windows wrap
 * around the dataset; the weights are train's initial weights. */
static void check_export(const struct wk_train_args *a, uint64_t windows)
{
    char why[256] = "";
    cr_assert_eq(wk_export_problem(a, why, sizeof(why)), 0, "%s", why);

    cJSON *doc = read_problem();
    cr_assert_eq(num(doc, "input"), a->input);
    cr_assert_eq(num(doc, "output"), a->output);
    cr_assert_eq(num(doc, "batch"), a->batch);
    cr_assert_eq(num(doc, "windows"), (double)windows);
    cr_assert_eq(num(doc, "lr"), a->lr);

    struct wk_model_shape shape = {a->input, a->hidden, a->layers, a->output};
    struct wk_layout l;
    cr_assert_eq(wk_layout_make(&l, &shape, 1 << 20, why, sizeof(why)), 0, "%s", why);
    cr_assert_eq(num(doc, "parameters"), (double)l.parameters);
    const cJSON *layers = cJSON_GetObjectItemCaseSensitive(doc, "layer");
    cr_assert_eq(cJSON_GetArraySize(layers), l.layer_count);
    for (int i = 0; i < l.layer_count; i++) {
        const cJSON *y = cJSON_GetArrayItem(layers, i);
        cr_assert_eq(num(y, "in"), l.layer[i].in);
        cr_assert_eq(num(y, "out"), l.layer[i].out);
        cr_assert_eq(num(y, "weight_offset"), (double)l.layer[i].weight_offset);
        cr_assert_eq(num(y, "bias_offset"), (double)l.layer[i].bias_offset);
    }
    cJSON_Delete(doc);

    size_t n;
    float *params = read_floats("params.f32", &n);
    cr_assert_eq(n, l.parameters);
    float *want = malloc(l.parameters * sizeof(float));
    wk_model_init_params(&l, a->seed, want);
    cr_assert_arr_eq(params, want, l.parameters * sizeof(float));
    free(want);
    free(params);
    wk_layout_free(&l);

    size_t nx, ny;
    float *x = read_floats("x.f32", &nx);
    float *y = read_floats("y.f32", &ny);
    cr_assert_eq(nx, windows * (size_t)a->batch * (size_t)a->input);
    cr_assert_eq(ny, windows * (size_t)a->batch * (size_t)a->output);
    struct wk_teacher t;
    cr_assert_eq(wk_teacher_init(&t, a->input, a->output), 0);
    float *sx = malloc(sizeof(float) * (size_t)a->input), *sy = malloc(sizeof(float) * (size_t)a->output);
    for (uint64_t w = 0; w < windows; w++)
        for (int row = 0; row < a->batch; row++) {
            uint64_t index = (w * (uint64_t)a->batch + (uint64_t)row) % (uint64_t)a->samples;
            wk_data_sample(&t, a->seed, index, sx, sy);
            size_t r = w * (size_t)a->batch + (size_t)row;
            cr_assert_arr_eq(x + r * (size_t)a->input, sx, sizeof(float) * (size_t)a->input,
                             "window %llu row %d", (unsigned long long)w, row);
            cr_assert_arr_eq(y + r * (size_t)a->output, sy, sizeof(float) * (size_t)a->output,
                             "window %llu row %d", (unsigned long long)w, row);
        }
    free(sx);
    free(sy);
    wk_teacher_free(&t);
    free(x);
    free(y);
}

Test(export, writes_train_s_weights_and_every_window, .init = make_dir, .fini = remove_dir)
{
    struct wk_train_args a;
    const char *argv[] = {"train", "--input", "6", "--hidden", "5", "--layers", "2", "--output",
                          "3", "--batch", "8", "--samples", "32", "--steps", "10", "--seed", "7",
                          "--export", dir};
    parse(&a, argv, sizeof(argv) / sizeof(argv[0]));
    cr_assert_str_eq(a.export_dir, dir);
    check_export(&a, 4); /* 32 samples in batches of 8: the windows repeat after 4 steps */
}

Test(export, windows_that_wrap_around_the_dataset, .init = make_dir, .fini = remove_dir)
{
    struct wk_train_args a;
    /* 20 samples, batch 8: window 2 is samples 16..19 then 0..3; 3 steps, so 3 windows */
    const char *argv[] = {"train", "--input", "4", "--hidden", "3", "--layers", "1", "--output",
                          "2", "--batch", "8", "--samples", "20", "--steps", "3", "--export", dir};
    parse(&a, argv, sizeof(argv) / sizeof(argv[0]));
    check_export(&a, 3);
}

Test(export, training_is_the_default)
{
    struct wk_train_args a;
    const char *argv[] = {"train"};
    parse(&a, argv, 1);
    cr_assert_null(a.export_dir);
}

Test(export, a_directory_that_cannot_be_made_is_a_clear_error)
{
    struct wk_train_args a;
    const char *argv[] = {"train", "--export", "/proc/self/status/problem"};
    parse(&a, argv, 3);
    char why[256] = "";
    cr_assert_lt(wk_export_problem(&a, why, sizeof(why)), 0);
    cr_assert_not_null(strstr(why, "/proc/self/status/problem"), "%s", why);
    cr_assert_not_null(strstr(why, "cannot create"), "%s", why);
}

/* The command: no mpirun needed, one JSON line, the files there; an absurd problem is refused
 * before anything is allocated or written. */
Test(export, the_command_writes_the_files_or_says_why_not, .init = make_dir, .fini = remove_dir)
{
    char cmd[512], *out = NULL, *err = NULL;
    snprintf(cmd, sizeof(cmd), "%s train --layers 1 --hidden 8 --batch 16 --samples 64 --export %s",
             runcmd_worker_bin(), dir);
    int status = runcmd(cmd, &out, &err);
    cr_assert_eq(status, 0, "%s\n%s%s", cmd, out, err);
    cr_assert_not_null(strstr(out, "\"event\":\"export\""), "%s", out);
    size_t n;
    free(read_floats("x.f32", &n));
    cr_assert_eq(n, 4u * 16u * 128u); /* 64 samples in batches of 16: 4 windows of 128 inputs */
    free(out);
    free(err);

    snprintf(cmd, sizeof(cmd), "%s train --samples 1000000000000 --steps 1000000000000 --input 4096 "
             "--export %s/big", runcmd_worker_bin(), dir);
    status = runcmd(cmd, &out, &err);
    cr_assert_eq(status, 1, "%s\n%s%s", cmd, out, err);
    cr_assert_not_null(strstr(err, "data shard"), "%s", err);
    cr_assert_not_null(strstr(err, "--export"), "%s", err);
    char big[128];
    snprintf(big, sizeof(big), "%s/big", dir);
    cr_assert_neq(access(big, F_OK), 0, "nothing is written for a refused problem");
    free(out);
    free(err);
}
