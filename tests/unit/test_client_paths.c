#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "kube/client.h"
#include "kube/errors.h"
#include "kube/ratelimit.h"
#include "util/clock.h"

static const struct kube_resource MPIJOBS = {"kubeflow.org", "v2beta1", "mpijobs", "MPIJob", true};

static void expect_path(const struct kube_resource *res, const char *ns, const char *name, const char *sub,
                        const char *want)
{
    char *p = kube_path(res, ns, name, sub);
    cr_assert_str_eq(p, want);
    free(p);
}

static void expect_escape(const char *in, const char *want)
{
    char *q = kube_escape(in);
    cr_assert_str_eq(q, want, "kube_escape(\"%s\")", in ? in : "(null)");
    free(q);
}

Test(paths, core_and_group_resources)
{
    expect_path(&KUBE_PODS, "default", "p1", NULL, "/api/v1/namespaces/default/pods/p1");
    expect_path(&KUBE_PODS, NULL, NULL, NULL, "/api/v1/pods");
    expect_path(&MPIJOBS, "team-a", "job", "status", "/apis/kubeflow.org/v2beta1/namespaces/team-a/mpijobs/job/status");
    expect_path(&KUBE_NAMESPACES, "ignored", "ns1", NULL, "/api/v1/namespaces/ns1");
    expect_path(&KUBE_LEASES, "kube-system", "mpijob-operator", NULL,
                "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/mpijob-operator");
}

Test(paths, segments_and_queries_are_percent_encoded)
{
    expect_path(&KUBE_PODS, "a b", "x/y?z", NULL, "/api/v1/namespaces/a%20b/pods/x%2Fy%3Fz");
    expect_escape("app=demo,tier in (a,b)", "app%3Ddemo%2Ctier%20in%20%28a%2Cb%29");
    expect_escape("unreserved-._~AZaz09", "unreserved-._~AZaz09");
}

/* Every byte but RFC 3986's unreserved ones is encoded, as %XX in upper case: UTF-8 names,
 * reserved characters and control bytes alike. */
Test(paths, every_byte_outside_unreserved_is_encoded)
{
    for (int ch = 1; ch < 256; ch++) {
        char in[2] = {(char)ch, 0}, want[4];
        int plain = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
                    ch == '-' || ch == '.' || ch == '_' || ch == '~';
        if (plain)
            snprintf(want, sizeof(want), "%c", ch);
        else
            snprintf(want, sizeof(want), "%%%02X", ch);
        expect_escape(in, want);
    }
    expect_escape("team=\xc3\xa9t\xc3\xa9", "team%3D%C3%A9t%C3%A9");
    expect_escape("", "");
    expect_escape(NULL, "");
    expect_path(&MPIJOBS, "\xc3\xa9quipe", "job 1", NULL, "/apis/kubeflow.org/v2beta1/namespaces/%C3%A9quipe/mpijobs/job%201");
}

Test(errors, status_reasons_map_to_distinct_codes)
{
    cr_assert_eq(kube_error_from_status(409, "AlreadyExists"), KUBE_EALREADYEXISTS);
    cr_assert_eq(kube_error_from_status(409, "Conflict"), KUBE_ECONFLICT);
    cr_assert_neq(KUBE_EALREADYEXISTS, KUBE_ECONFLICT);
    cr_assert_eq(kube_error_from_status(409, NULL), KUBE_ECONFLICT);
    cr_assert_eq(kube_error_from_status(404, "NotFound"), KUBE_ENOTFOUND);
    cr_assert_eq(kube_error_from_status(422, "Invalid"), KUBE_EINVALID);
    cr_assert_eq(kube_error_from_status(410, "Expired"), KUBE_EGONE);
    cr_assert_eq(kube_error_from_status(410, "Gone"), KUBE_EGONE);
    cr_assert_eq(kube_error_from_status(429, "TooManyRequests"), KUBE_ETOOMANYREQUESTS);
    cr_assert_eq(kube_error_from_status(401, "Unauthorized"), KUBE_EUNAUTHORIZED);
    cr_assert_eq(kube_error_from_status(403, "Forbidden"), KUBE_EFORBIDDEN);
    cr_assert_eq(kube_error_from_status(415, "UnsupportedMediaType"), KUBE_EUNSUPPORTEDMEDIA);
    cr_assert_eq(kube_error_from_status(500, "InternalError"), KUBE_ESERVER);
    cr_assert_eq(kube_error_from_status(502, ""), KUBE_ESERVER);
    cr_assert_eq(kube_error_from_status(418, ""), KUBE_EHTTP);
    cr_assert_str_eq(error_str(KUBE_ECONFLICT), "conflict");
    cr_assert_str_eq(error_str(-77777), "unknown error");
}

/* One convention (util/error.h): errno values and named codes side by side, one describer. */
Test(errors, one_describer_for_errno_values_and_named_codes)
{
    cr_assert_eq(KUBE_ENOMEM, -ENOMEM, "out of memory has one code");
    cr_assert_eq(KUBE_EINVAL, -EINVAL);
    cr_assert_str_eq(error_str(-ENOMEM), "out of memory");
    cr_assert_str_eq(error_str(-ENOENT), "No such file or directory");
    cr_assert_str_eq(error_str(-EIO), "Input/output error");
    cr_assert_str_eq(error_str(MPIJOB_EINVALID), "invalid MPIJob spec");
    cr_assert_str_eq(error_str(MPIJOB_ENOCRD), "the MPIJob CRD is not served");
    cr_assert_str_eq(error_str(0), "success");
    cr_assert(KUBE_ECONFIG < -133 && MPIJOB_EINVALID < -133, "named codes stay clear of errno values");
}

/* The bucket in real time, judged by what the clock shows rather than by how fast the loop runs:
 * no more tokens than the burst and 50 a second since it was made (none more while the tries run
 * on an idle machine), and every token past them paid for with time. */
Test(ratelimit, burst_then_qps)
{
    uint64_t t0 = clock_now_ms();
    struct ratelimit *rl = ratelimit_new(50, 5);
    int taken = 0;
    for (int i = 0; i < 20; i++)
        taken += ratelimit_try(rl);
    uint64_t tried = clock_now_ms() - t0;
    cr_assert_geq(taken, 5, "burst of 5, got %d", taken);
    cr_assert_leq(taken, 5 + (int)(tried * 50 / 1000) + 1, "burst of 5, got %d in %llu ms", taken,
                  (unsigned long long)tried);
    /* 10 more tokens at 50/s: 20 ms each, waited for. */
    for (int i = 0; i < 10; i++)
        ratelimit_wait(rl);
    uint64_t elapsed = clock_now_ms() - t0;
    cr_assert_geq(elapsed + 20, (uint64_t)(taken + 10 - 5) * 20, "%d tokens past the burst in %llu ms", taken + 5,
                  (unsigned long long)elapsed);
    ratelimit_free(rl);
}

Test(ratelimit, disabled_never_waits)
{
    struct ratelimit *rl = ratelimit_new(-1, 1);
    for (int i = 0; i < 1000; i++)
        cr_assert_eq(ratelimit_wait(rl), 0);
    ratelimit_free(rl);
}
