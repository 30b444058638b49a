/* The elector refuses a configuration it could not honour, before it starts a thread or sends a
 * request: no API server is needed, so none is started (a real one takes a while on a busy
 * machine). */
#include <criterion/criterion.h>
#include <string.h>

#include "kube/client.h"
#include "kube/config.h"
#include "kube/leaderelection.h"

/* A client of a server that is never asked anything. */
static struct kube_client *idle_client(void)
{
    static const char yaml[] = "clusters:\n- name: c\n  cluster: {server: 'https://127.0.0.1:1'}\n"
                               "contexts:\n- name: x\n  context: {cluster: c}\ncurrent-context: x\n";
    struct kube_config *cfg = NULL;
    char err[256];
    cr_assert_eq(kube_config_parse(yaml, strlen(yaml), NULL, NULL, &cfg, err, sizeof(err)), 0, "%s", err);
    struct kube_client *c = NULL;
    cr_assert_eq(kube_client_new(cfg, NULL, &c), 0);
    return c;
}

Test(leaderelection_config, bad_config_is_refused)
{
    struct kube_client *c = idle_client();
    struct leader_elector *le = NULL;
    struct leader_election_config cfg = {.lease_namespace = "default", .lease_name = "mpijob-operator-lock",
                                         .identity = "x", .lease_duration_ms = 1000,
                                         .renew_deadline_ms = 1000, .retry_period_ms = 100};
    cr_assert_eq(leader_elector_start(c, &cfg, &le), KUBE_EINVAL, "renew deadline >= lease");
    cfg.renew_deadline_ms = 500;
    cfg.identity = "";
    cr_assert_eq(leader_elector_start(c, &cfg, &le), KUBE_EINVAL, "empty identity");
    cr_assert_null(le);
    kube_client_free(c);
}

Test(leaderelection_config, an_elector_cannot_fence_its_own_client)
{
    struct kube_client *c = idle_client();
    struct leader_elector *le = NULL;
    struct leader_election_config cfg = {.lease_namespace = "default", .lease_name = "mpijob-operator-lock",
                                         .identity = "x", .fenced_client = c};
    cr_assert_eq(leader_elector_start(c, &cfg, &le), KUBE_EINVAL);
    cr_assert_null(le);
    kube_client_free(c);
}
