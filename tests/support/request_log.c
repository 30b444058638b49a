/* The API-server double's request log, counted (request_log.h). */
#include "support/request_log.h"

#include <string.h>

#include "util/json.h"

static bool path_matches(const char *p, const char *want, enum test_path_match how)
{
    size_t lp = strlen(p), lw = strlen(want);
    switch (how) {
    case TEST_PATH_SUFFIX:
        return lp >= lw && strcmp(p + lp - lw, want) == 0;
    case TEST_PATH_UNDER:
        return strncmp(p, want, lw) == 0 && p[lw] == '/';
    case TEST_PATH_EXACT:
    default:
        return strcmp(p, want) == 0;
    }
}

static bool field_is(const cJSON *entry, const char *field, const char *want)
{
    const char *v = json_string(entry, field);
    return !want || (v && strcmp(v, want) == 0);
}

static bool passes(const cJSON *e, const struct test_request_filter *f)
{
    if (!field_is(e, "method", f->method) || !field_is(e, "verb", f->verb) || !field_is(e, "resource", f->resource))
        return false;
    const char *p = json_string(e, "path");
    if (f->path && !(p && path_matches(p, f->path, f->path_match)))
        return false;
    if (f->code && json_int(e, "code", 0) != f->code)
        return false;
    return !f->match || f->match(e, f->arg);
}

int test_count_requests(struct test_apiserver *s, int since, const struct test_request_filter *f, int *first_seq,
                        int *last_seq)
{
    if (first_seq)
        *first_seq = 0;
    if (last_seq)
        *last_seq = 0;
    cJSON *log = test_apiserver_log(s, since);
    if (!log)
        return -1;
    int n = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, log) {
        if (!passes(e, f))
            continue;
        int seq = (int)json_int(e, "seq", 0);
        if (n++ == 0 && first_seq)
            *first_seq = seq;
        if (last_seq)
            *last_seq = seq;
    }
    cJSON_Delete(log);
    return n;
}

int test_last_seq(struct test_apiserver *s)
{
    cJSON *log = test_apiserver_log(s, 0);
    int n = cJSON_GetArraySize(log);
    int seq = n > 0 ? (int)json_int(cJSON_GetArrayItem(log, n - 1), "seq", 0) : 0;
    cJSON_Delete(log);
    return seq;
}
