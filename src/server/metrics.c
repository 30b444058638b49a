#include "server/metrics.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/buf.h"
#include "util/strmap.h"

enum kind { KIND_COUNTER, KIND_GAUGE, KIND_HISTOGRAM };

static const char *const kind_names[] = {"counter", "gauge", "histogram"};

struct series {
    char *labels;    /* rendered label text without braces, sorted by name; "" for none */
    double value;    /* counters and gauges */
    uint64_t *counts; /* histograms: per bucket (not cumulative), n_bounds + 1 (+Inf last) */
    double sum;
    uint64_t count;
};

struct family {
    char *name;
    char *help;
    enum kind kind;
    double *bounds;
    size_t n_bounds;
    struct strmap *series; /* labels text -> struct series */
};

struct metrics {
    pthread_mutex_t mu;
    struct strmap *families; /* name -> struct family */
};

static void series_free(void *p)
{
    struct series *s = p;
    if (!s)
        return;
    free(s->labels);
    free(s->counts);
    free(s);
}

static void family_free(void *p)
{
    struct family *f = p;
    if (!f)
        return;
    strmap_free(f->series);
    free(f->name);
    free(f->help);
    free(f->bounds);
    free(f);
}

struct metrics *metrics_new(void)
{
    struct metrics *m = calloc(1, sizeof(*m));
    if (!m)
        return NULL;
    m->families = strmap_new(family_free);
    if (!m->families) {
        free(m);
        return NULL;
    }
    pthread_mutex_init(&m->mu, NULL);
    return m;
}

void metrics_free(struct metrics *m)
{
    if (!m)
        return;
    strmap_free(m->families);
    pthread_mutex_destroy(&m->mu);
    free(m);
}

/* ---- names, labels, numbers ------------------------------------------------------------ */

static bool valid_metric_name(const char *s)
{
    if (!s || !*s)
        return false;
    for (const char *p = s; *p; p++) {
        char c = *p;
        bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
        if (!alpha && !(p > s && c >= '0' && c <= '9'))
            return false;
    }
    return true;
}

static bool valid_label_name(const char *s)
{
    if (!s || !*s || (s[0] == '_' && s[1] == '_'))
        return false;
    for (const char *p = s; *p; p++) {
        char c = *p;
        bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
        if (!alpha && !(p > s && c >= '0' && c <= '9'))
            return false;
    }
    return true;
}

/* A double the way Prometheus reads it: NaN, +Inf, -Inf, integers in full, else the shortest
 * text that reads back to the same value. */
static void format_double(char out[40], double v)
{
    if (isnan(v)) {
        strcpy(out, "NaN");
        return;
    }
    if (isinf(v)) {
        strcpy(out, v > 0 ? "+Inf" : "-Inf");
        return;
    }
    if (v == floor(v) && fabs(v) < 1e15) {
        snprintf(out, 40, "%.0f", v);
        return;
    }
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(out, 40, "%.*g", prec, v);
        if (strtod(out, NULL) == v)
            return;
    }
}

static int append_escaped(struct buf *b, const char *s, bool quote)
{
    int rc = 0;
    for (const char *p = s; *p && rc == 0; p++) {
        if (*p == '\\')
            rc = buf_append_str(b, "\\\\");
        else if (*p == '\n')
            rc = buf_append_str(b, "\\n");
        else if (quote && *p == '"')
            rc = buf_append_str(b, "\\\"");
        else
            rc = buf_append(b, p, 1);
    }
    return rc;
}

/* Validates the pairs and renders them sorted by name: k1="v1",k2="v2". *out is malloc'd. */
static int canonical_labels(const char *const labels[], bool histogram, char **out)
{
    const char *names[METRICS_MAX_LABELS], *values[METRICS_MAX_LABELS];
    size_t n = 0;
    for (size_t i = 0; labels && labels[i]; i += 2) {
        if (n == METRICS_MAX_LABELS || !labels[i + 1] || !valid_label_name(labels[i]))
            return -EINVAL;
        if (histogram && strcmp(labels[i], "le") == 0)
            return -EINVAL;
        /* insertion sort by name, refusing a repeated name */
        size_t j = n;
        while (j > 0 && strcmp(names[j - 1], labels[i]) > 0) {
            names[j] = names[j - 1];
            values[j] = values[j - 1];
            j--;
        }
        if (j > 0 && strcmp(names[j - 1], labels[i]) == 0)
            return -EINVAL;
        names[j] = labels[i];
        values[j] = labels[i + 1];
        n++;
    }
    struct buf b;
    buf_init(&b, 0);
    int rc = buf_append_str(&b, "");
    for (size_t i = 0; i < n && rc == 0; i++) {
        rc = buf_printf(&b, "%s%s=\"", i ? "," : "", names[i]);
        if (rc == 0)
            rc = append_escaped(&b, values[i], true);
        if (rc == 0)
            rc = buf_append_str(&b, "\"");
    }
    if (rc < 0) {
        buf_free(&b);
        return rc;
    }
    *out = buf_steal(&b);
    return 0;
}

/* ---- families and series (callers hold m->mu) ------------------------------------------ */

static const char *const hist_suffixes[] = {"_bucket", "_sum", "_count"};

/* Whether a new family `name` of kind `kind` would render sample names that another family
 * already renders (a histogram "x" owns x_bucket, x_sum and x_count). */
static bool name_clash(struct metrics *m, const char *name, enum kind kind)
{
    size_t len = strlen(name);
    for (size_t i = 0; i < 3; i++) {
        size_t sl = strlen(hist_suffixes[i]);
        if (len > sl && strcmp(name + len - sl, hist_suffixes[i]) == 0) {
            char base[len - sl + 1];
            memcpy(base, name, len - sl);
            base[len - sl] = 0;
            struct family *f = strmap_get(m->families, base);
            if (f && f->kind == KIND_HISTOGRAM)
                return true;
        }
        if (kind == KIND_HISTOGRAM) {
            char longer[len + sl + 1];
            memcpy(longer, name, len);
            memcpy(longer + len, hist_suffixes[i], sl + 1);
            if (strmap_has(m->families, longer))
                return true;
        }
    }
    return false;
}

static int get_family(struct metrics *m, const char *name, const char *help, enum kind kind,
                      const double *bounds, size_t n_bounds, struct family **out)
{
    struct family *f = strmap_get(m->families, name);
    if (f) {
        if (f->kind != kind)
            return -EINVAL;
        if (kind == KIND_HISTOGRAM &&
            (f->n_bounds != n_bounds ||
             (n_bounds && memcmp(f->bounds, bounds, n_bounds * sizeof(double)) != 0)))
            return -EINVAL;
        *out = f;
        return 0;
    }
    if (name_clash(m, name, kind))
        return -EINVAL;
    f = calloc(1, sizeof(*f));
    if (!f)
        return -ENOMEM;
    f->kind = kind;
    f->name = strdup(name);
    f->help = strdup(help ? help : "");
    f->series = strmap_new(series_free);
    if (n_bounds) {
        f->bounds = malloc(n_bounds * sizeof(double));
        if (f->bounds)
            memcpy(f->bounds, bounds, n_bounds * sizeof(double));
    }
    f->n_bounds = n_bounds;
    if (!f->name || !f->help || !f->series || (n_bounds && !f->bounds) ||
        strmap_put(m->families, name, f) < 0) {
        family_free(f);
        return -ENOMEM;
    }
    *out = f;
    return 0;
}

static int get_series(struct family *f, char *labels /* taken */, struct series **out)
{
    struct series *s = strmap_get(f->series, labels);
    if (s) {
        free(labels);
        *out = s;
        return 0;
    }
    s = calloc(1, sizeof(*s));
    if (!s) {
        free(labels);
        return -ENOMEM;
    }
    s->labels = labels;
    if (f->kind == KIND_HISTOGRAM) {
        s->counts = calloc(f->n_bounds + 1, sizeof(uint64_t));
        if (!s->counts) {
            series_free(s);
            return -ENOMEM;
        }
    }
    if (strmap_put(f->series, labels, s) < 0) {
        series_free(s);
        return -ENOMEM;
    }
    *out = s;
    return 0;
}

/* Finds or creates the series; on success returns 0 with m->mu held. */
static int lookup(struct metrics *m, const char *name, const char *help, enum kind kind,
                  const double *bounds, size_t n_bounds, const char *const labels[],
                  struct family **fam, struct series **out)
{
    if (!m || !valid_metric_name(name))
        return -EINVAL;
    char *text;
    int rc = canonical_labels(labels, kind == KIND_HISTOGRAM, &text);
    if (rc < 0)
        return rc;
    pthread_mutex_lock(&m->mu);
    struct family *f;
    rc = get_family(m, name, help, kind, bounds, n_bounds, &f);
    if (rc < 0) {
        free(text);
    } else {
        rc = get_series(f, text, out);
        *fam = f;
    }
    if (rc < 0)
        pthread_mutex_unlock(&m->mu);
    return rc;
}

int metrics_counter_add(struct metrics *m, const char *name, const char *help, double v,
                        const char *const labels[])
{
    if (!(v >= 0) || isinf(v))
        return -EINVAL;
    struct family *f;
    struct series *s;
    int rc = lookup(m, name, help, KIND_COUNTER, NULL, 0, labels, &f, &s);
    if (rc < 0)
        return rc;
    s->value += v;
    pthread_mutex_unlock(&m->mu);
    return 0;
}

static int gauge_update(struct metrics *m, const char *name, const char *help, double v,
                        const char *const labels[], bool add)
{
    struct family *f;
    struct series *s;
    int rc = lookup(m, name, help, KIND_GAUGE, NULL, 0, labels, &f, &s);
    if (rc < 0)
        return rc;
    s->value = add ? s->value + v : v;
    pthread_mutex_unlock(&m->mu);
    return 0;
}

int metrics_gauge_set(struct metrics *m, const char *name, const char *help, double v,
                      const char *const labels[])
{
    return gauge_update(m, name, help, v, labels, false);
}

int metrics_gauge_add(struct metrics *m, const char *name, const char *help, double v,
                      const char *const labels[])
{
    return gauge_update(m, name, help, v, labels, true);
}

/* The histogram series, locked (lookup's contract), after checking the bounds. */
static int histogram_series(struct metrics *m, const char *name, const char *help, const double *buckets,
                            size_t n_buckets, const char *const labels[], struct family **f, struct series **s)
{
    if (n_buckets && !buckets)
        return -EINVAL;
    for (size_t i = 0; i < n_buckets; i++)
        if (!isfinite(buckets[i]) || (i > 0 && !(buckets[i] > buckets[i - 1])))
            return -EINVAL;
    return lookup(m, name, help, KIND_HISTOGRAM, buckets, n_buckets, labels, f, s);
}

int metrics_histogram_declare(struct metrics *m, const char *name, const char *help, const double *buckets,
                              size_t n_buckets, const char *const labels[])
{
    struct family *f;
    struct series *s;
    int rc = histogram_series(m, name, help, buckets, n_buckets, labels, &f, &s);
    if (rc < 0)
        return rc;
    pthread_mutex_unlock(&m->mu);
    return 0;
}

int metrics_histogram_observe(struct metrics *m, const char *name, const char *help,
                              const double *buckets, size_t n_buckets, double v,
                              const char *const labels[])
{
    if (isnan(v))
        return -EINVAL;
    struct family *f;
    struct series *s;
    int rc = histogram_series(m, name, help, buckets, n_buckets, labels, &f, &s);
    if (rc < 0)
        return rc;
    size_t i = 0;
    while (i < f->n_bounds && v > f->bounds[i])
        i++;
    s->counts[i]++;
    s->sum += v;
    s->count++;
    pthread_mutex_unlock(&m->mu);
    return 0;
}

/* ---- rendering ------------------------------------------------------------------------- */

static int cmp_family(const void *a, const void *b)
{
    return strcmp((*(struct family *const *)a)->name, (*(struct family *const *)b)->name);
}

static int cmp_series(const void *a, const void *b)
{
    return strcmp((*(struct series *const *)a)->labels, (*(struct series *const *)b)->labels);
}

/* name{labels[,extra]} value */
static int sample(struct buf *b, const char *name, const char *suffix, const char *labels,
                  const char *extra, double v)
{
    char num[40];
    format_double(num, v);
    bool any = labels[0] || extra;
    return buf_printf(b, "%s%s%s%s%s%s%s %s\n", name, suffix, any ? "{" : "", labels,
                      labels[0] && extra ? "," : "", extra ? extra : "", any ? "}" : "", num);
}

static int render_family(struct buf *b, const struct family *f)
{
    int rc = buf_printf(b, "# HELP %s ", f->name);
    if (rc == 0)
        rc = append_escaped(b, f->help, false);
    if (rc == 0)
        rc = buf_printf(b, "\n# TYPE %s %s\n", f->name, kind_names[f->kind]);
    size_t n = strmap_size(f->series), k = 0;
    struct series **all = calloc(n ? n : 1, sizeof(*all));
    if (!all)
        return -ENOMEM;
    const char *key;
    void *val;
    for (size_t it = 0; strmap_next(f->series, &it, &key, &val);)
        all[k++] = val;
    qsort(all, n, sizeof(*all), cmp_series);
    for (size_t i = 0; i < n && rc == 0; i++) {
        const struct series *s = all[i];
        if (f->kind != KIND_HISTOGRAM) {
            rc = sample(b, f->name, "", s->labels, NULL, s->value);
            continue;
        }
        uint64_t cum = 0;
        for (size_t j = 0; j <= f->n_bounds && rc == 0; j++) {
            char le[60], num[40];
            if (j < f->n_bounds)
                format_double(num, f->bounds[j]);
            else
                strcpy(num, "+Inf");
            snprintf(le, sizeof(le), "le=\"%s\"", num);
            cum += s->counts[j];
            rc = sample(b, f->name, "_bucket", s->labels, le, (double)cum);
        }
        if (rc == 0)
            rc = sample(b, f->name, "_sum", s->labels, NULL, s->sum);
        if (rc == 0)
            rc = sample(b, f->name, "_count", s->labels, NULL, (double)s->count);
    }
    free(all);
    return rc;
}

char *metrics_render(struct metrics *m)
{
    if (!m)
        return NULL;
    struct buf b;
    buf_init(&b, 0);
    int rc = buf_append_str(&b, "");
    pthread_mutex_lock(&m->mu);
    size_t n = strmap_size(m->families), k = 0;
    struct family **all = calloc(n ? n : 1, sizeof(*all));
    if (!all)
        rc = -ENOMEM;
    const char *key;
    void *val;
    for (size_t it = 0; all && strmap_next(m->families, &it, &key, &val);)
        all[k++] = val;
    if (all)
        qsort(all, n, sizeof(*all), cmp_family);
    for (size_t i = 0; i < n && rc == 0; i++)
        rc = render_family(&b, all[i]);
    pthread_mutex_unlock(&m->mu);
    free(all);
    if (rc < 0) {
        buf_free(&b);
        return NULL;
    }
    return buf_steal(&b);
}
