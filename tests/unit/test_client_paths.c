#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "kube/client.h"
#include "kube/errors.h"
#include "kube/ratelimit.h"
#include "util/clock.h"

static const struct kube_resource MPIJOBS = {"kubeflow.org", "v2beta1", "mpijobs", "MPIJob", true};

Test(paths, core_and_group_resources)
{
    char *p = kube_path(&KUBE_PODS, "default", "p1", NULL);
    cr_assert_str_eq(p, "/api/v1/namespaces/default/pods/p1");
    free(p);
    p = kube_path(&KUBE_PODS, NULL, NULL, NULL);
    cr_assert_str_eq(p, "/api/v1/pods");
    free(p);
    p = kube_path(&MPIJOBS, "team-a", "job", "status");
    cr_assert_str_eq(p, "/apis/kubeflow.org/v2beta1/namespaces/team-a/mpijobs/job/status");
    free(p);
    p = kube_path(&KUBE_NAMESPACES, "ignored", "ns1", NULL);
    cr_assert_str_eq(p, "/api/v1/namespaces/ns1");
    free(p);
    p = kube_path(&KUBE_LEASES, "kube-system", "mpijob-operator", NULL);
    cr_assert_str_eq(p, "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/mpijob-operator");
    free(p);
}

Test(paths, segments_and_queries_are_percent_encoded)
{
    char *p = kube_path(&KUBE_PODS, "a b", "x/y?z", NULL);
    cr_assert_str_eq(p, "/api/v1/namespaces/a%20b/pods/x%2Fy%3Fz");
    free(p);
    char *q = kube_escape("app=demo,tier in (a,b)");
    cr_assert_str_eq(q, "app%3Ddemo%2Ctier%20in%20%28a%2Cb%29");
    free(q);
    q = kube_escape("unreserved-._~AZaz09");
    cr_assert_str_eq(q, "unreserved-._~AZaz09");
    free(q);
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
        char *q = kube_escape(in);
        cr_assert_str_eq(q, want, "byte 0x%02x", ch);
        free(q);
    }
    char *q = kube_escape("team=\xc3\xa9t\xc3\xa9");
    cr_assert_str_eq(q, "team%3D%C3%A9t%C3%A9");
    free(q);
    q = kube_escape("");
    cr_assert_str_eq(q, "");
    free(q);
    q = kube_escape(NULL);
    cr_assert_str_eq(q, "");
    free(q);
    char *p = kube_path(&MPIJOBS, "\xc3\xa9quipe", "job 1", NULL);
    cr_assert_str_eq(p, "/apis/kubeflow.org/v2beta1/namespaces/%C3%A9quipe/mpijobs/job%201");
    free(p);
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

Test(ratelimit, burst_then_qps)
{
    struct ratelimit *rl = ratelimit_new(50, 5);
    int taken = 0;
    for (int i = 0; i < 20; i++)
        taken += ratelimit_try(rl);
    cr_assert_eq(taken, 5, "burst of 5, got %d", taken);
    /* 10 more tokens at 50/s need about 200 ms of waiting in total */
    uint64_t waited = 0;
    for (int i = 0; i < 10; i++)
        waited += ratelimit_wait(rl);
    cr_assert_geq(waited, 150, "waited %llu ms", (unsigned long long)waited);
    ratelimit_free(rl);
}

Test(ratelimit, disabled_never_waits)
{
    struct ratelimit *rl = ratelimit_new(-1, 1);
    for (int i = 0; i < 1000; i++)
        cr_assert_eq(ratelimit_wait(rl), 0);
    ratelimit_free(rl);
}
