#include "support/kube_test.h"

#include <criterion/criterion.h>

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
