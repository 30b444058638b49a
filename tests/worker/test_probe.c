/* RDMA: the suggestion and usability rules on fabricated devices, the environment rule, the
 * check's message, and `mpijob-worker probe` on this machine (which has no RDMA device). */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "host_rdma.h"
#include "worker/rdma.h"
#include "worker/rdma_suggest.h"

#include "runcmd.h"

#define CHECK_PREFIX "RDMA requested but no usable device: "

static struct wk_rdma_port *add_port(struct wk_rdma_device *d, const char *state, const char *link)
{
    struct wk_rdma_port *p = &d->ports[d->port_count];
    memset(p, 0, sizeof(*p));
    p->port = ++d->port_count;
    snprintf(p->state, sizeof(p->state), "%s", state);
    snprintf(p->link_layer, sizeof(p->link_layer), "%s", link);
    return p;
}

static void add_gid(struct wk_rdma_port *p, int index, const char *gid, const char *type)
{
    struct wk_rdma_gid *g = &p->gids[p->gid_count++];
    g->index = index;
    snprintf(g->gid, sizeof(g->gid), "%s", gid);
    snprintf(g->type, sizeof(g->type), "%s", type);
}

static void device(struct wk_rdma_device *d, const char *name)
{
    memset(d, 0, sizeof(*d));
    snprintf(d->name, sizeof(d->name), "%s", name);
}

#define LINK_LOCAL "fe80:0000:0000:0000:0250:56ff:fe8a:1b2c"
#define MAPPED_10_0_0_7 "0000:0000:0000:0000:0000:ffff:0a00:0007"

/* A ConnectX port in RoCE mode, laid out as mlx5 does: v1 and v2 of the link-local address,
 * then v1 and v2 of the IPv4 address. */
static void roce_mlx5(struct wk_rdma_device *d, const char *name, const char *state)
{
    device(d, name);
    struct wk_rdma_port *p = add_port(d, state, "Ethernet");
    add_gid(p, 0, LINK_LOCAL, "RoCE v1");
    add_gid(p, 1, LINK_LOCAL, "RoCE v2");
    add_gid(p, 2, MAPPED_10_0_0_7, "RoCE v1");
    add_gid(p, 3, MAPPED_10_0_0_7, "RoCE v2");
}

static void infiniband(struct wk_rdma_device *d, const char *name, const char *state)
{
    device(d, name);
    struct wk_rdma_port *p = add_port(d, state, "InfiniBand");
    add_gid(p, 0, "fe80:0000:0000:0000:248a:0703:00b4:1a2e", "IB");
}

Test(rdma_suggest, infiniband_needs_no_gid_index)
{
    struct wk_rdma_device d[2];
    infiniband(&d[0], "mlx5_0", "ACTIVE");
    infiniband(&d[1], "mlx5_1", "ACTIVE");
    struct wk_rdma_suggestion s;
    wk_rdma_suggest(d, 2, &s);
    cr_expect_str_eq(s.hca, "mlx5_0:1,mlx5_1:1");
    cr_expect_eq(s.gid_index, -1);
    cr_expect_eq(s.active_ports, 2);
    cr_expect_not_null(strstr(s.gid_reason, "InfiniBand"), "%s", s.gid_reason);
}

/* The suggestion for one device: its HCA list (NULL: not compared), GID index, and a word of
 * the reason given for the index. */
static void expect_suggestion(const struct wk_rdma_device *d, const char *hca, int gid_index, const char *reason)
{
    struct wk_rdma_suggestion s;
    wk_rdma_suggest(d, 1, &s);
    if (hca)
        cr_expect_str_eq(s.hca, hca);
    cr_expect_eq(s.gid_index, gid_index);
    cr_expect_not_null(strstr(s.gid_reason, reason), "%s", s.gid_reason);
}

struct gid_row {
    int index;
    const char *gid, *type;
};

/* Device name with one ACTIVE RoCE port holding the n GIDs of rows. */
static void roce_port(struct wk_rdma_device *d, const char *name, const struct gid_row *rows, size_t n)
{
    device(d, name);
    struct wk_rdma_port *p = add_port(d, "ACTIVE", "Ethernet");
    for (size_t i = 0; i < n; i++)
        add_gid(p, rows[i].index, rows[i].gid, rows[i].type);
}

Test(rdma_suggest, roce_prefers_v2_with_ipv4)
{
    struct wk_rdma_device d;
    roce_mlx5(&d, "mlx5_0", "ACTIVE");
    expect_suggestion(&d, "mlx5_0:1", 3, "IPv4");
}

Test(rdma_suggest, roce_v2_without_ipv4_takes_lowest_v2)
{
    static const struct gid_row gids[] = {{0, LINK_LOCAL, "RoCE v1"}, {1, LINK_LOCAL, "RoCE v2"},
                                          {4, "fd00:0000:0000:0000:0250:56ff:fe8a:1b2c", "RoCE v2"}};
    struct wk_rdma_device d;
    roce_port(&d, "mlx5_0", gids, 3);
    expect_suggestion(&d, NULL, 1, "lowest RoCE v2");
}

Test(rdma_suggest, roce_v1_only_leaves_the_default)
{
    static const struct gid_row gids[] = {{0, LINK_LOCAL, "RoCE v1"}, {1, MAPPED_10_0_0_7, "RoCE v1"}};
    struct wk_rdma_device d;
    roce_port(&d, "mlx4_0", gids, 2);
    expect_suggestion(&d, "mlx4_0:1", -1, "RoCE v1");
}

/* VMware PVRDMA: a RoCE device whose IPv4 RoCE v2 GID comes first; and a DOWN port elsewhere. */
Test(rdma_suggest, pvrdma_and_a_down_port)
{
    struct wk_rdma_device d[2];
    device(&d[0], "vmw_pvrdma0");
    struct wk_rdma_port *p = add_port(&d[0], "ACTIVE", "Ethernet");
    add_gid(p, 0, LINK_LOCAL, "RoCE v1");
    add_gid(p, 1, "0000:0000:0000:0000:0000:ffff:c0a8:0a15", "RoCE v2");
    add_gid(p, 2, LINK_LOCAL, "RoCE v2");
    roce_mlx5(&d[1], "mlx5_1", "DOWN");
    struct wk_rdma_suggestion s;
    wk_rdma_suggest(d, 2, &s);
    cr_expect_str_eq(s.hca, "vmw_pvrdma0:1");
    cr_expect_eq(s.gid_index, 1);
    cr_expect_eq(s.active_ports, 1);
    char ip[16];
    cr_expect(wk_rdma_gid_ipv4(p->gids[1].gid, ip));
    cr_expect_str_eq(ip, "192.168.10.21");
}

Test(rdma_suggest, nothing_active)
{
    struct wk_rdma_device d;
    roce_mlx5(&d, "mlx5_0", "DOWN");
    struct wk_rdma_suggestion s;
    wk_rdma_suggest(&d, 1, &s);
    cr_expect_str_eq(s.hca, "");
    cr_expect_eq(s.gid_index, -1);
    cr_expect_eq(s.active_ports, 0);
    wk_rdma_suggest(NULL, 0, &s);
    cr_expect_eq(s.active_ports, 0);
}

Test(rdma_suggest, ports_that_disagree_are_named)
{
    struct wk_rdma_device d[2];
    roce_mlx5(&d[0], "mlx5_0", "ACTIVE");
    device(&d[1], "mlx5_1");
    struct wk_rdma_port *p = add_port(&d[1], "ACTIVE", "Ethernet");
    add_gid(p, 0, LINK_LOCAL, "RoCE v1");
    add_gid(p, 1, MAPPED_10_0_0_7, "RoCE v2");
    struct wk_rdma_suggestion s;
    wk_rdma_suggest(d, 2, &s);
    cr_expect_str_eq(s.hca, "mlx5_0:1,mlx5_1:1");
    cr_expect_eq(s.gid_index, 3);
    cr_expect_not_null(strstr(s.gid_reason, "mlx5_0:1"), "%s", s.gid_reason);
}

Test(rdma_suggest, gid_ipv4)
{
    char ip[16];
    cr_expect(wk_rdma_gid_ipv4(MAPPED_10_0_0_7, ip));
    cr_expect_str_eq(ip, "10.0.0.7");
    cr_expect_not(wk_rdma_gid_ipv4(LINK_LOCAL, ip));
    cr_expect_not(wk_rdma_gid_ipv4("0000:0000:0000:0000:0000:ffff:0a00", ip));
    cr_expect_not(wk_rdma_gid_ipv4("", ip));
}

Test(rdma_suggest, nccl_ib_hca_syntax)
{
    cr_expect(wk_rdma_hca_selected(NULL, "mlx5_0", 1));
    cr_expect(wk_rdma_hca_selected("", "mlx5_0", 1));
    cr_expect(wk_rdma_hca_selected("mlx5_0", "mlx5_0", 1));
    cr_expect(wk_rdma_hca_selected("mlx5", "mlx5_1", 2), "a name matches as a prefix");
    cr_expect_not(wk_rdma_hca_selected("=mlx5", "mlx5_1", 1), "'=' asks for exact names");
    cr_expect(wk_rdma_hca_selected("=mlx5_1", "mlx5_1", 1));
    cr_expect(wk_rdma_hca_selected("mlx5_0:1", "mlx5_0", 1));
    cr_expect_not(wk_rdma_hca_selected("mlx5_0:2", "mlx5_0", 1));
    cr_expect(wk_rdma_hca_selected("mlx5_2,mlx5_0:1", "mlx5_0", 1));
    cr_expect_not(wk_rdma_hca_selected("^mlx5_1", "mlx5_1", 1));
    cr_expect(wk_rdma_hca_selected("^mlx5_1", "mlx5_0", 1));
    cr_expect(wk_rdma_hca_selected("^=mlx5", "mlx5_0", 1), "exclusion of the exact name mlx5 only");
    cr_expect_not(wk_rdma_hca_selected("mlx5_0:x", "mlx5_0", 1));
    cr_expect_not(wk_rdma_hca_selected(",", "mlx5_0", 1));
}

Test(rdma_suggest, usable_says_what_was_found)
{
    struct wk_rdma_device d[3];
    char msg[512];
    roce_mlx5(&d[0], "mlx5_0", "DOWN");
    infiniband(&d[1], "mlx5_1", "INIT");
    device(&d[2], "vmw_pvrdma0");
    cr_expect_eq(wk_rdma_usable(d, 3, NULL, msg, sizeof(msg)), 0);
    cr_expect_str_eq(msg, "mlx5_0 port 1 is DOWN; mlx5_1 port 1 is INIT; vmw_pvrdma0 has no port "
                          "that could be queried");

    infiniband(&d[1], "mlx5_1", "ACTIVE");
    cr_expect_eq(wk_rdma_usable(d, 2, NULL, msg, sizeof(msg)), 1);
    cr_expect_str_eq(msg, "mlx5_1:1");
    cr_expect_eq(wk_rdma_usable(d, 2, "mlx5_0", msg, sizeof(msg)), 0);
    cr_expect_str_eq(msg, "mlx5_0 port 1 is DOWN; mlx5_1 port 1 is ACTIVE but NCCL_IB_HCA=mlx5_0 "
                          "leaves it out");
    /* A short buffer is cut, never overrun. */
    char tiny[8];
    cr_expect_eq(wk_rdma_usable(d, 2, "mlx5_0", tiny, sizeof(tiny)), 0);
    cr_expect_eq(strlen(tiny), 7);
}

Test(rdma, required_from_environment)
{
    unsetenv("MPIJOB_TRANSPORT");
    unsetenv("NCCL_NET");
    cr_expect_not(wk_rdma_required());
    setenv("MPIJOB_TRANSPORT", "TCP", 1);
    cr_expect_not(wk_rdma_required());
    setenv("MPIJOB_TRANSPORT", "rdma", 1);
    cr_expect(wk_rdma_required(), "case does not matter");
    setenv("MPIJOB_TRANSPORT", "RDMA", 1);
    cr_expect(wk_rdma_required());
    unsetenv("MPIJOB_TRANSPORT");
    setenv("NCCL_NET", "Socket", 1);
    cr_expect_not(wk_rdma_required());
    setenv("NCCL_NET", "IB", 1);
    cr_expect(wk_rdma_required());
    setenv("NCCL_NET", "IBext", 1);
    cr_expect_not(wk_rdma_required(), "only NCCL's own IB transport");
    unsetenv("NCCL_NET");
}

/* The listing and the check agree: whatever the host has, a failure says so with the prefix. */
Test(rdma, check_message)
{
    struct wk_rdma_device devs[8];
    char why[512], msg[1024];
    int n = wk_rdma_list(devs, 8, why, sizeof(why));
    unsetenv("NCCL_IB_HCA");
    int rc = wk_rdma_check(msg, sizeof(msg));
    struct wk_rdma_suggestion s;
    wk_rdma_suggest(devs, n > 0 ? n : 0, &s);
    if (n > 0 && s.active_ports > 0) {
        cr_expect_eq(rc, 0, "%s", msg);
        return;
    }
    cr_expect_eq(rc, -ENODEV);
    cr_expect(strncmp(msg, CHECK_PREFIX, strlen(CHECK_PREFIX)) == 0, "%s", msg);
    if (n == 0) {
        cr_expect_not_null(strstr(msg, "libibverbs.so.1: no devices found"), "%s", msg);
        cr_expect_not_null(strstr(msg, "NCCL_IB_HCA=unset"), "%s", msg);
    }
    setenv("NCCL_IB_HCA", "mlx5_0", 1);
    wk_rdma_check(msg, sizeof(msg));
    if (n == 0)
        cr_expect_not_null(strstr(msg, "NCCL_IB_HCA=mlx5_0"), "%s", msg);
    unsetenv("NCCL_IB_HCA");
}

/* ---- the probe command ------------------------------------------------------------------------ */

static int probe(const char *args, char **out, char **err)
{
    char cmd[4096];
    snprintf(cmd, sizeof(cmd), "env -u NCCL_IB_HCA '%s' probe %s", runcmd_worker_bin(), args);
    return runcmd(cmd, out, err);
}

Test(probe, no_device_exits_nonzero_with_message)
{
    if (test_host_has_rdma())
        cr_skip_test("this host has an ACTIVE RDMA port");
    char *out, *err;
    int code = probe("", &out, &err);
    cr_expect_eq(code, 1, "stdout:\n%s\nstderr:\n%s", out, err);
    cr_expect_not_null(strstr(err, "mpijob-worker probe: no RDMA device: "), "%s", err);
    cr_expect_not_null(strstr(err, "libibverbs.so.1"), "says what it looked through: %s", err);
    free(out);
    free(err);
}

Test(probe, require_rdma_gives_the_check_message)
{
    if (test_host_has_rdma())
        cr_skip_test("this host has an ACTIVE RDMA port");
    char *out, *err;
    int code = probe("--require rdma", &out, &err);
    cr_expect_eq(code, 1);
    cr_expect_not_null(strstr(err, "mpijob-worker probe: " CHECK_PREFIX), "%s", err);
    free(out);
    free(err);
}

Test(probe, json_is_one_object)
{
    char *out, *err;
    int code = probe("--json", &out, &err);
    cJSON *obj = cJSON_Parse(out);
    cr_assert_not_null(obj, "not JSON: %s", out);
    cr_expect(cJSON_IsArray(cJSON_GetObjectItem(obj, "devices")));
    cr_expect(cJSON_IsObject(cJSON_GetObjectItem(obj, "suggest")));
    int active = cJSON_GetObjectItem(obj, "active_ports")->valueint;
    cr_expect_eq(code, active > 0 ? 0 : 1);
    const cJSON *error = cJSON_GetObjectItem(obj, "error");
    if (active == 0)
        cr_expect(cJSON_IsString(error) && strncmp(error->valuestring, "no RDMA device: ", 16) == 0);
    else
        cr_expect(cJSON_IsNull(error));
    cJSON_Delete(obj);
    free(out);
    free(err);
}

Test(probe, usage_errors_exit_2)
{
    static const char *bad[] = {"--bogus", "--require gpu", "--require", "extra", NULL};
    for (int i = 0; bad[i]; i++) {
        char *out, *err;
        cr_expect_eq(probe(bad[i], &out, &err), 2, "probe %s", bad[i]);
        cr_expect_not_null(strstr(err, "Usage: mpijob-worker probe"), "probe %s: %s", bad[i], err);
        free(out);
        free(err);
    }
    char *out, *err;
    cr_expect_eq(probe("--help", &out, &err), 0);
    cr_expect_not_null(strstr(out, "--require rdma"));
    free(out);
    free(err);
}
