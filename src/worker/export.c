#include "worker/export.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "worker/data.h"
#include "worker/model.h"

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the exported arrays are written as little-endian float32 from host memory"
#endif

/* Writes bytes bytes of data to dir/name; -errno with why[] set. */
static int write_file(const char *dir, const char *name, const void *data, size_t bytes,
                      char *why, size_t why_len)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    int e = f == NULL ? errno : 0;
    if (f != NULL) {
        errno = 0;
        if (fwrite(data, 1, bytes, f) != bytes)
            e = errno ? errno : EIO;
        if (fclose(f) != 0 && e == 0)
            e = errno ? errno : EIO;
    }
    if (e != 0) {
        snprintf(why, why_len, "cannot write %s: %s", path, strerror(e));
        return -e;
    }
    return 0;
}

static cJSON *problem_json(const struct wk_train_args *a, const struct wk_shard *s,
                           const struct wk_layout *l)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *layers = cJSON_CreateArray();
    if (o == NULL || layers == NULL) {
        cJSON_Delete(o);
        cJSON_Delete(layers);
        return NULL;
    }
    cJSON_AddStringToObject(o, "format", "mpijob-worker problem 1");
    cJSON_AddStringToObject(o, "dtype", "float32, little-endian, row-major");
    cJSON_AddNumberToObject(o, "input", a->input);
    cJSON_AddNumberToObject(o, "hidden", a->hidden);
    cJSON_AddNumberToObject(o, "layers", a->layers);
    cJSON_AddNumberToObject(o, "output", a->output);
    cJSON_AddNumberToObject(o, "batch", a->batch);
    cJSON_AddNumberToObject(o, "samples", (double)a->samples);
    cJSON_AddNumberToObject(o, "steps", (double)a->steps);
    cJSON_AddNumberToObject(o, "lr", a->lr);
    char seed[24];
    snprintf(seed, sizeof(seed), "%llu", (unsigned long long)a->seed);
    cJSON_AddStringToObject(o, "seed", seed); /* a uint64: a JSON number would lose bits */
    cJSON_AddStringToObject(o, "loss", "1/(batch*output) * sum over the batch of (y - t)^2");
    cJSON_AddNumberToObject(o, "windows", (double)s->slots);
    cJSON_AddNumberToObject(o, "parameters", (double)l->parameters);
    for (int i = 0; i < l->layer_count; i++) {
        cJSON *y = cJSON_CreateObject();
        if (y == NULL)
            break;
        cJSON_AddNumberToObject(y, "in", l->layer[i].in);
        cJSON_AddNumberToObject(y, "out", l->layer[i].out);
        cJSON_AddNumberToObject(y, "weight_offset", (double)l->layer[i].weight_offset);
        cJSON_AddNumberToObject(y, "bias_offset", (double)l->layer[i].bias_offset);
        cJSON_AddBoolToObject(y, "relu", i < l->layer_count - 1);
        cJSON_AddItemToArray(layers, y);
    }
    cJSON_AddItemToObject(o, "layer", layers);
    cJSON *files = cJSON_AddObjectToObject(o, "files");
    if (files != NULL) {
        cJSON_AddStringToObject(files, "params", "params.f32");
        cJSON_AddStringToObject(files, "x", "x.f32");
        cJSON_AddStringToObject(files, "y", "y.f32");
    }
    return o;
}

int wk_export_problem(const struct wk_train_args *a, char *why, size_t why_len)
{
    const char *dir = a->export_dir;
    struct wk_shard shard;
    struct wk_teacher teacher;
    struct wk_layout layout;
    float *x = NULL, *y = NULL, *params = NULL;
    cJSON *doc = NULL;
    char *text = NULL;
    memset(&teacher, 0, sizeof(teacher));
    memset(&layout, 0, sizeof(layout));

    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        int e = errno;
        snprintf(why, why_len, "cannot create %s: %s", dir, strerror(e));
        return -e;
    }
    /* One rank holding the whole global batch: its shard is every distinct global window. */
    int rc = wk_shard_plan(&shard, (uint64_t)a->samples, a->batch, 1, 0, (uint64_t)a->steps, why,
                           why_len);
    if (rc < 0)
        return rc;
    struct wk_model_shape shape = {a->input, a->hidden, a->layers, a->output};
    rc = wk_layout_make(&layout, &shape, a->bucket_mb * 1024.0 * 1024.0, why, why_len);
    if (rc < 0)
        return rc;
    rc = wk_teacher_init(&teacher, a->input, a->output);
    x = malloc(shard.rows * (size_t)a->input * sizeof(float));
    y = malloc(shard.rows * (size_t)a->output * sizeof(float));
    params = malloc(layout.parameters * sizeof(float));
    if (rc < 0 || x == NULL || y == NULL || params == NULL) {
        snprintf(why, why_len, "out of memory for the problem (%llu samples, %zu parameters)",
                 (unsigned long long)shard.rows, layout.parameters);
        rc = -ENOMEM;
        goto out;
    }
    wk_shard_fill(&shard, &teacher, a->seed, x, y);
    wk_model_init_params(&layout, a->seed, params);

    rc = write_file(dir, "params.f32", params, layout.parameters * sizeof(float), why, why_len);
    if (rc == 0)
        rc = write_file(dir, "x.f32", x, shard.rows * (size_t)a->input * sizeof(float), why,
                        why_len);
    if (rc == 0)
        rc = write_file(dir, "y.f32", y, shard.rows * (size_t)a->output * sizeof(float), why,
                        why_len);
    if (rc < 0)
        goto out;

    doc = problem_json(a, &shard, &layout);
    text = doc ? cJSON_Print(doc) : NULL;
    if (text == NULL) {
        snprintf(why, why_len, "out of memory for problem.json");
        rc = -ENOMEM;
        goto out;
    }
    rc = write_file(dir, "problem.json", text, strlen(text), why, why_len);
out:
    free(text);
    cJSON_Delete(doc);
    free(x);
    free(y);
    free(params);
    wk_teacher_free(&teacher);
    wk_layout_free(&layout);
    return rc;
}
