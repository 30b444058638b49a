#include "support/kube_test.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "kube/config.h"

static struct kube_client *client_from(const char *kubeconfig, const struct kube_client_options *opts)
{
    static const struct kube_client_options fast = {.qps = -1, .backoff_base_ms = 20, .backoff_max_ms = 200};
    struct kube_config *cfg = NULL;
    char err[256];
    cr_assert_eq(kube_config_load_kubeconfig(kubeconfig, NULL, &cfg, err, sizeof(err)), 0, "%s", err);
    struct kube_client *c = NULL;
    cr_assert_eq(kube_client_new(cfg, opts ? opts : &fast, &c), 0);
    return c;
}

struct kube_client *test_kube_client(const struct test_apiserver *s, const struct kube_client_options *opts)
{
    return client_from(s->kubeconfig, opts);
}

struct kube_client *test_operator_client(const struct test_apiserver *s, const struct kube_client_options *opts)
{
    return client_from(s->operator_kubeconfig, opts);
}

void test_finish_job(struct kube_client *admin, const char *ns, const char *job, const char *type,
                     const char *reason)
{
    char now[32], c1[256], c2[256], patch[1024];
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(now, sizeof(now), "%Y-%m-%dT%H:%M:%SZ", &tm);
    static const char cond[] =
        "{\"type\":\"%s\",\"status\":\"True\",\"reason\":\"%s\",\"message\":\"from the test\"}";
    bool complete = strcmp(type, "Complete") == 0;
    snprintf(c1, sizeof(c1), cond, complete ? "SuccessCriteriaMet" : "FailureTarget", reason);
    snprintf(c2, sizeof(c2), cond, type, reason);
    if (complete)
        snprintf(patch, sizeof(patch),
                 "{\"status\":{\"startTime\":\"%s\",\"completionTime\":\"%s\",\"active\":0,\"succeeded\":1,"
                 "\"conditions\":[%s,%s]}}", now, now, c1, c2);
    else
        snprintf(patch, sizeof(patch),
                 "{\"status\":{\"startTime\":\"%s\",\"active\":0,\"failed\":1,\"conditions\":[%s,%s]}}", now,
                 c1, c2);
    struct kube_patch_opts po = {.type = KUBE_PATCH_MERGE, .subresource = "status"};
    struct kube_status st = {.retry_after_s = -1};
    int rc = kube_patch(admin, &KUBE_JOBS, ns, job, patch, &po, NULL, &st);
    char why[512];
    snprintf(why, sizeof(why), "%s", st.message ? st.message : "");
    kube_status_clear(&st);
    cr_assert_eq(rc, 0, "finishing Job %s/%s: %s", ns, job, why);
}
