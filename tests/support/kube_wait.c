/* Waiting on the API server's objects (kube_wait.h). */
#include "support/kube_wait.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support/deadline.h"
#include "util/json.h"

cJSON *test_kube_get(struct kube_client *c, const struct kube_resource *res, const char *ns, const char *name)
{
    cJSON *out = NULL;
    if (kube_get(c, res, ns, name, &out, NULL) != 0) {
        cJSON_Delete(out);
        return NULL;
    }
    return out;
}

bool test_kube_exists(struct kube_client *c, const struct kube_resource *res, const char *ns, const char *name)
{
    return kube_get(c, res, ns, name, NULL, NULL) == 0;
}

bool test_kube_wait(struct kube_client *c, const struct kube_resource *res, const char *ns, const char *name,
                    const char *what, test_object_check check, const void *arg, uint64_t timeout_ms)
{
    struct test_deadline d = test_deadline_in(timeout_ms);
    cJSON *obj = NULL;
    for (;;) {
        cJSON_Delete(obj);
        obj = test_kube_get(c, res, ns, name);
        if (check(obj, arg)) {
            cJSON_Delete(obj);
            return true;
        }
        if (!test_deadline_poll(&d))
            break;
    }
    char about[512], *text = obj ? cJSON_PrintUnformatted(obj) : NULL;
    snprintf(about, sizeof(about), "%s %s/%s: %s", res->kind, ns ? ns : "", name, what);
    char last[4096];
    snprintf(last, sizeof(last), "%.4000s", text ? text : "(not there)");
    test_wait_failed(about, &d, last);
    free(text);
    cJSON_Delete(obj);
    return false;
}

static bool present(const cJSON *obj, const void *arg) { return obj != NULL; }
static bool absent(const cJSON *obj, const void *arg) { return obj == NULL; }

bool test_kube_wait_exists(struct kube_client *c, const struct kube_resource *res, const char *ns, const char *name,
                           uint64_t timeout_ms)
{
    return test_kube_wait(c, res, ns, name, "to exist", present, NULL, timeout_ms);
}

bool test_kube_wait_gone(struct kube_client *c, const struct kube_resource *res, const char *ns, const char *name,
                         uint64_t timeout_ms)
{
    return test_kube_wait(c, res, ns, name, "to be gone", absent, NULL, timeout_ms);
}

bool test_kube_has_condition(const cJSON *obj, const char *type, const char *status, const char *reason)
{
    const cJSON *cond;
    cJSON_ArrayForEach(cond, json_path(obj, "status.conditions")) {
        const char *t = json_string(cond, "type"), *s = json_string(cond, "status"), *r = json_string(cond, "reason");
        if (t && s && strcmp(t, type) == 0 && strcmp(s, status ? status : "True") == 0 &&
            (!reason || (r && strcmp(r, reason) == 0)))
            return true;
    }
    return false;
}

int test_kube_count_events(struct kube_client *c, const char *ns, const char *field_selector)
{
    struct kube_list_opts lo = {.field_selector = field_selector};
    cJSON *items = NULL;
    if (kube_list_all(c, &KUBE_EVENTS, ns, &lo, &items, NULL, NULL) != 0)
        return -1;
    int n = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, items)
        n += (int)json_int(e, "count", 1);
    cJSON_Delete(items);
    return n;
}

struct want_condition {
    const char *type, *status, *reason;
};

static bool condition_check(const cJSON *obj, const void *arg)
{
    const struct want_condition *w = arg;
    return test_kube_has_condition(obj, w->type, w->status, w->reason);
}

bool test_kube_wait_condition(struct kube_client *c, const struct kube_resource *res, const char *ns, const char *name,
                              const char *type, const char *status, const char *reason, uint64_t timeout_ms)
{
    struct want_condition w = {type, status, reason};
    char what[256];
    snprintf(what, sizeof(what), "condition %s=%s%s%s", type, status ? status : "True", reason ? " reason " : "",
             reason ? reason : "");
    return test_kube_wait(c, res, ns, name, what, condition_check, &w, timeout_ms);
}

struct want_int {
    const char *path;
    long long want;
};

static bool int_check(const cJSON *obj, const void *arg)
{
    const struct want_int *w = arg;
    return obj && json_int(obj, w->path, 0) == w->want;
}

bool test_kube_wait_int(struct kube_client *c, const struct kube_resource *res, const char *ns, const char *name,
                        const char *path, long long want, uint64_t timeout_ms)
{
    struct want_int w = {path, want};
    char what[256];
    snprintf(what, sizeof(what), "%s = %lld", path, want);
    return test_kube_wait(c, res, ns, name, what, int_check, &w, timeout_ms);
}

struct want_string {
    const char *path, *want;
};

static bool string_check(const cJSON *obj, const void *arg)
{
    const struct want_string *w = arg;
    const char *have = json_string(obj, w->path);
    return have && strcmp(have, w->want) == 0;
}

bool test_kube_wait_string(struct kube_client *c, const struct kube_resource *res, const char *ns, const char *name,
                           const char *path, const char *want, uint64_t timeout_ms)
{
    struct want_string w = {path, want};
    char what[256];
    snprintf(what, sizeof(what), "%s = \"%s\"", path, want);
    return test_kube_wait(c, res, ns, name, what, string_check, &w, timeout_ms);
}
