/* What the host gives RDMA, on fakes: sysfs GID tables and /dev/infiniband built in a temporary
 * directory that stands for /, the locked-memory limit passed in; the verdict train, bench and
 * `probe --require rdma` share; and `mpijob-worker probe` pointed at the fakes through
 * MPIJOB_WORKER_HOST_ROOT and MPIJOB_WORKER_MEMLOCK. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "host_rdma.h"
#include "worker/rdma.h"
#include "worker/rdma_host.h"
#include "worker/rdma_suggest.h"

#include "runcmd.h"

static char root[64];

#define expect_prefix(s, prefix) \
    cr_expect(strncmp((s), (prefix), strlen(prefix)) == 0, "want the prefix\n%s\ngot\n%s", \
              (prefix), (s))

static void make_root(void)
{
    snprintf(root, sizeof(root), "/tmp/rdma-host.XXXXXX");
    cr_assert_not_null(mkdtemp(root));
}

static void remove_root(void)
{
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
    cr_expect_eq(system(cmd), 0);
}

/* Criterion runs no .fini for a skipped test. */
#define skip(reason)              \
    do {                          \
        remove_root();            \
        cr_skip_test("%s", reason); \
    } while (0)

/* ROOT/path, its directories made first; the path is printf-formatted. */
static void put(const char *content, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(const char *content, const char *fmt, ...)
{
    char rel[512], path[640], cmd[800];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rel, sizeof(rel), fmt, ap);
    va_end(ap);
    snprintf(path, sizeof(path), "%s/%s", root, rel);
    snprintf(cmd, sizeof(cmd), "mkdir -p \"$(dirname '%s')\"", path);
    cr_assert_eq(system(cmd), 0);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f, "%s: %s", path, strerror(errno));
    fputs(content, f);
    fclose(f);
}

static void make_dir(const char *rel)
{
    char cmd[640];
    snprintf(cmd, sizeof(cmd), "mkdir -p '%s/%s'", root, rel);
    cr_assert_eq(system(cmd), 0);
}

#define PORT "sys/class/infiniband/%s/ports/%d/"
#define LINK_LOCAL "fe80:0000:0000:0000:0250:56ff:fe8a:1b2c"
#define MAPPED_10_0_0_7 "0000:0000:0000:0000:0000:ffff:0a00:0007"
#define ZERO_GID "0000:0000:0000:0000:0000:0000:0000:0000"

static void port(const char *dev, int num, const char *state, const char *link)
{
    put(state, PORT "state", dev, num);
    put(link, PORT "link_layer", dev, num);
}

/* One GID table entry as the kernel shows it; type and ndev NULL for an unused entry (whose
 * attributes cannot be read, so their files are left out). */
static void gid(const char *dev, int num, int index, const char *value, const char *type,
                const char *ndev)
{
    char line[64];
    snprintf(line, sizeof(line), "%s\n", value);
    put(line, PORT "gids/%d", dev, num, index);
    if (type != NULL) {
        snprintf(line, sizeof(line), "%s\n", type);
        put(line, PORT "gid_attrs/types/%d", dev, num, index);
    }
    if (ndev != NULL) {
        snprintf(line, sizeof(line), "%s\n", ndev);
        put(line, PORT "gid_attrs/ndevs/%d", dev, num, index);
    }
}

/* A ConnectX port in RoCE mode as mlx5 lays it out: v1 and v2 of the link-local address, v1 and
 * v2 of the IPv4 address, then unused entries (the table is longer than what is in use). */
static void roce_mlx5(const char *dev, const char *ndev)
{
    port(dev, 1, "4: ACTIVE\n", "Ethernet\n");
    gid(dev, 1, 0, LINK_LOCAL, "IB/RoCE v1", ndev);
    gid(dev, 1, 1, LINK_LOCAL, "RoCE v2", ndev);
    gid(dev, 1, 2, MAPPED_10_0_0_7, "IB/RoCE v1", ndev);
    gid(dev, 1, 3, MAPPED_10_0_0_7, "RoCE v2", ndev);
    for (int i = 4; i < 8; i++)
        gid(dev, 1, i, ZERO_GID, NULL, NULL);
}

/* ---- sysfs ------------------------------------------------------------------------------- */

TestSuite(rdma_sysfs, .init = make_root, .fini = remove_root);

Test(rdma_sysfs, roce_gid_table_with_versions_and_netdevs)
{
    roce_mlx5("mlx5_0", "eth0");
    /* An entry in use after unused ones still counts (a VLAN's address, say); the kernel shows
     * every index up to the table's length. */
    gid("mlx5_0", 1, 8, ZERO_GID, NULL, NULL);
    gid("mlx5_0", 1, 9, "fd00:0000:0000:0000:0250:56FF:FE8A:1B2C", "RoCE v2", "eth0.10");
    struct wk_rdma_device d[4];
    cr_assert_eq(wk_rdma_sysfs_list(root, d, 4), 1);
    cr_expect_str_eq(d[0].name, "mlx5_0");
    cr_assert_eq(d[0].port_count, 1);
    const struct wk_rdma_port *p = &d[0].ports[0];
    cr_expect_eq(p->port, 1);
    cr_expect_str_eq(p->state, "ACTIVE");
    cr_expect_str_eq(p->link_layer, "Ethernet");
    cr_assert_eq(p->gid_count, 5, "the zero GIDs are left out");
    static const struct {
        int index;
        const char *gid, *type, *ndev;
    } want[] = {
        {0, LINK_LOCAL, "RoCE v1", "eth0"},
        {1, LINK_LOCAL, "RoCE v2", "eth0"},
        {2, MAPPED_10_0_0_7, "RoCE v1", "eth0"},
        {3, MAPPED_10_0_0_7, "RoCE v2", "eth0"},
        {9, "fd00:0000:0000:0000:0250:56ff:fe8a:1b2c", "RoCE v2", "eth0.10"},
    };
    for (int i = 0; i < 5; i++) {
        cr_expect_eq(p->gids[i].index, want[i].index);
        cr_expect_str_eq(p->gids[i].gid, want[i].gid);
        cr_expect_str_eq(p->gids[i].type, want[i].type);
        cr_expect_str_eq(p->gids[i].ndev, want[i].ndev);
    }
    int mapped = 0;
    cr_expect_eq(wk_rdma_port_gid_index(p, &mapped), 3);
    cr_expect(mapped);
    char advice[256];
    wk_rdma_port_gid_advice("mlx5_0", p, advice, sizeof(advice));
    cr_expect_str_eq(advice, "NCCL_IB_GID_INDEX=3 fits mlx5_0:1: RoCE v2 with IPv4 10.0.0.7 (eth0)");
}

/* PVRDMA puts its IPv4 RoCE v2 GID first; NCCL_IB_GID_INDEX follows the table, not a layout. */
Test(rdma_sysfs, pvrdma_ipv4_v2_first)
{
    port("vmw_pvrdma0", 1, "4: ACTIVE\n", "Ethernet\n");
    gid("vmw_pvrdma0", 1, 0, "0000:0000:0000:0000:0000:ffff:c0a8:0a15", "RoCE v2", "ens192");
    gid("vmw_pvrdma0", 1, 1, LINK_LOCAL, "IB/RoCE v1", "ens192");
    struct wk_rdma_device d;
    cr_assert_eq(wk_rdma_sysfs_list(root, &d, 1), 1);
    char advice[256];
    wk_rdma_port_gid_advice(d.name, &d.ports[0], advice, sizeof(advice));
    cr_expect_str_eq(advice,
                     "NCCL_IB_GID_INDEX=0 fits vmw_pvrdma0:1: RoCE v2 with IPv4 192.168.10.21 "
                     "(ens192)");
}

Test(rdma_sysfs, roce_without_ipv4_or_v2)
{
    port("mlx5_0", 1, "4: ACTIVE\n", "Ethernet\n");
    gid("mlx5_0", 1, 0, LINK_LOCAL, "IB/RoCE v1", "eth0");
    gid("mlx5_0", 1, 1, LINK_LOCAL, "RoCE v2", "eth0");
    port("mlx4_0", 1, "4: ACTIVE\n", "Ethernet\n");
    gid("mlx4_0", 1, 0, LINK_LOCAL, "IB/RoCE v1", "eth1");
    gid("mlx4_0", 1, 1, MAPPED_10_0_0_7, "IB/RoCE v1", "eth1");
    struct wk_rdma_device d[2];
    cr_assert_eq(wk_rdma_sysfs_list(root, d, 2), 2);
    cr_expect_str_eq(d[0].name, "mlx4_0", "sorted by name");
    char advice[256];
    wk_rdma_port_gid_advice(d[1].name, &d[1].ports[0], advice, sizeof(advice));
    cr_expect_str_eq(advice, "NCCL_IB_GID_INDEX=1 fits mlx5_0:1: RoCE v2, but no RoCE v2 GID "
                             "carries an IPv4 address (eth0)");
    wk_rdma_port_gid_advice(d[0].name, &d[0].ports[0], advice, sizeof(advice));
    cr_expect_str_eq(advice, "mlx4_0:1 has no RoCE v2 GID: NCCL's default index 0 (RoCE v1) applies");
    cr_expect_eq(wk_rdma_port_gid_index(&d[0].ports[0], NULL), -1);
}

/* InfiniBand: the kernel still writes "IB/RoCE v1" as the type; no net device, no index needed. */
Test(rdma_sysfs, infiniband_ports_sorted)
{
    for (int num = 2; num >= 1; num--) {
        port("mlx5_1", num, num == 1 ? "4: ACTIVE\n" : "1: DOWN\n", "InfiniBand\n");
        gid("mlx5_1", num, 0, "fe80:0000:0000:0000:248a:0703:00b4:1a2e", "IB/RoCE v1", NULL);
    }
    put("", "sys/class/infiniband/mlx5_1/ports/10/state");
    struct wk_rdma_device d;
    cr_assert_eq(wk_rdma_sysfs_list(root, &d, 1), 1);
    cr_assert_eq(d.port_count, 3);
    cr_expect_eq(d.ports[0].port, 1);
    cr_expect_eq(d.ports[1].port, 2);
    cr_expect_eq(d.ports[2].port, 10, "numeric order, not 1, 10, 2");
    cr_expect_str_eq(d.ports[0].state, "ACTIVE");
    cr_expect_str_eq(d.ports[1].state, "DOWN");
    cr_expect_str_eq(d.ports[0].link_layer, "InfiniBand");
    cr_expect_str_eq(d.ports[0].gids[0].type, "IB");
    cr_expect_str_eq(d.ports[0].gids[0].ndev, "");
    char advice[64] = "x";
    wk_rdma_port_gid_advice(d.name, &d.ports[0], advice, sizeof(advice));
    cr_expect_str_eq(advice, "");
    struct wk_rdma_suggestion s;
    wk_rdma_suggest(&d, 1, &s);
    cr_expect_str_eq(s.hca, "mlx5_1:1");
}

Test(rdma_sysfs, unreadable_attributes_and_no_tree)
{
    struct wk_rdma_device d[2];
    cr_expect_eq(wk_rdma_sysfs_list(root, d, 2), 0, "no /sys/class/infiniband");
    port("mlx5_0", 1, "4: ACTIVE\n", "Ethernet\n");
    gid("mlx5_0", 1, 0, LINK_LOCAL, NULL, NULL);
    gid("mlx5_0", 1, 1, "not a gid", "RoCE v2", "eth0");
    cr_assert_eq(wk_rdma_sysfs_list(root, d, 2), 1);
    cr_assert_eq(d[0].ports[0].gid_count, 1);
    cr_expect_str_eq(d[0].ports[0].gids[0].type, "", "unknown, not guessed");
    char advice[256];
    wk_rdma_port_gid_advice("mlx5_0", &d[0].ports[0], advice, sizeof(advice));
    cr_expect_not_null(strstr(advice, "has no RoCE v2 GID"), "%s", advice);
}

/* ---- /dev/infiniband --------------------------------------------------------------------- */

TestSuite(rdma_devdir, .init = make_root, .fini = remove_root);

Test(rdma_devdir, missing)
{
    struct wk_rdma_devdir d;
    wk_rdma_devdir_check(root, &d);
    cr_expect_eq(d.status, WK_RDMA_DEVDIR_MISSING);
    expect_prefix(d.detail, "/dev/infiniband does not exist here: ");
    cr_expect_not_null(strstr(d.detail, "spec.networking.rdma.devicePath"), "%s", d.detail);
    cr_expect_not_null(strstr(d.detail, "device plugin's resource"), "%s", d.detail);
}

Test(rdma_devdir, present_without_uverbs)
{
    make_dir("dev/infiniband");
    struct wk_rdma_devdir d;
    wk_rdma_devdir_check(root, &d);
    cr_expect_eq(d.status, WK_RDMA_DEVDIR_NO_UVERBS);
    put("", "dev/infiniband/rdma_cm");
    wk_rdma_devdir_check(root, &d);
    cr_expect_eq(d.status, WK_RDMA_DEVDIR_NO_UVERBS, "rdma_cm alone is not enough");
    cr_expect_eq(d.uverbs, 0);
    expect_prefix(d.detail, "/dev/infiniband exists but holds no uverbs device: ");
    cr_expect_not_null(strstr(d.detail, "ib_uverbs"), "%s", d.detail);
}

Test(rdma_devdir, not_a_character_device)
{
    put("", "dev/infiniband/uverbs0");
    make_dir("dev/infiniband/uverbs1");
    struct wk_rdma_devdir d;
    wk_rdma_devdir_check(root, &d);
    cr_expect_eq(d.status, WK_RDMA_DEVDIR_UNUSABLE);
    cr_expect_eq(d.uverbs, 2);
    cr_expect_eq(d.usable, 0);
    expect_prefix(d.detail, "/dev/infiniband is there but none of its uverbs devices can be used: "
                            "uverbs0 is a regular file, not a character device");
    cr_expect_not_null(strstr(d.detail, "; uverbs1 is a directory, not a character device"), "%s",
                       d.detail);
}

/* A character device that opens stands for a working uverbs node. */
Test(rdma_devdir, usable_beside_a_broken_one)
{
    char target[640];
    make_dir("dev/infiniband");
    snprintf(target, sizeof(target), "%s/dev/infiniband/uverbs0", root);
    cr_assert_eq(symlink("/dev/null", target), 0);
    snprintf(target, sizeof(target), "%s/dev/infiniband/uverbs1", root);
    cr_assert_eq(symlink("/nonexistent/uverbs1", target), 0);
    struct wk_rdma_devdir d;
    wk_rdma_devdir_check(root, &d);
    cr_expect_eq(d.status, WK_RDMA_DEVDIR_OK);
    cr_expect_eq(d.usable, 1);
    cr_expect_str_eq(d.detail, "/dev/infiniband: uverbs0 opens read-write; uverbs1: No such file or "
                               "directory");
}

/* Opening is refused two ways with two fixes: the cgroup's device access (EPERM) and the node's
 * mode (EACCES). Root opens any mode, so these are judged from the errno. */
Test(rdma_devdir, open_refusals_name_their_fix)
{
    char out[512];
    wk_rdma_uverbs_fault("uverbs0", NULL, EPERM, out, sizeof(out));
    expect_prefix(out, "uverbs0: open: Operation not permitted: the container's cgroup does not "
                       "allow the device");
    cr_expect_not_null(strstr(out, "spec.networking.rdma.resourceName"), "%s", out);
    wk_rdma_uverbs_fault("uverbs0", NULL, EACCES, out, sizeof(out));
    expect_prefix(out, "uverbs0: open: Permission denied: the device node's mode or group");
    cr_expect_not_null(strstr(out, "supplementalGroups"), "%s", out);
    wk_rdma_uverbs_fault("uverbs0", NULL, ENXIO, out, sizeof(out));
    cr_expect_str_eq(out, "uverbs0: open: No such device or address");
}

Test(rdma_devdir, unreadable_mode_when_not_root)
{
    if (geteuid() == 0)
        skip("root opens a file whatever its mode");
    put("", "dev/infiniband/uverbs0");
    char path[640];
    snprintf(path, sizeof(path), "%s/dev/infiniband", root);
    cr_assert_eq(chmod(path, 0), 0);
    struct wk_rdma_devdir d;
    wk_rdma_devdir_check(root, &d);
    chmod(path, 0755);
    cr_expect_eq(d.status, WK_RDMA_DEVDIR_UNUSABLE);
    cr_expect_str_eq(d.detail, "/dev/infiniband cannot be read: Permission denied");
}

/* ---- locked memory ----------------------------------------------------------------------- */

static struct wk_rdma_memlock assess(rlim_t soft, rlim_t hard, int ipc_lock)
{
    struct rlimit limit = {.rlim_cur = soft, .rlim_max = hard};
    struct wk_rdma_memlock m;
    wk_rdma_memlock_assess(&limit, ipc_lock, &m);
    return m;
}

Test(rdma_memlock, too_low_names_the_fixes)
{
    /* The kernel's default, which containers often inherit: 8 MiB since Linux 5.16, 64 KiB
     * before. */
    struct wk_rdma_memlock m = assess(8 << 20, 8 << 20, 0);
    cr_expect_not(m.ok);
    expect_prefix(m.detail, "RLIMIT_MEMLOCK soft 8 MiB, hard 8 MiB: too low for RDMA memory "
                            "registration (below 64 MiB");
    cr_expect_not_null(strstr(m.detail, "capability IPC_LOCK to the container's securityContext"),
                       "%s", m.detail);
    cr_expect_not_null(strstr(m.detail, "LimitMEMLOCK=infinity"), "%s", m.detail);
    cr_expect_null(strstr(m.detail, "hard limit allows"), "the hard limit does not: %s", m.detail);

    m = assess(64 << 10, 64 << 10, 0);
    cr_expect_not(m.ok);
    expect_prefix(m.detail, "RLIMIT_MEMLOCK soft 64 KiB, hard 64 KiB: too low");

    m = assess((64 << 20) - 4096, RLIM_INFINITY, 0);
    cr_expect_not(m.ok, "just below 64 MiB");
    cr_expect_not_null(strstr(m.detail, "soft 65532 KiB, hard unlimited"), "%s", m.detail);
    cr_expect_not_null(strstr(m.detail, "`ulimit -l unlimited` before the ranks' parent starts"), "%s",
                       m.detail);
    cr_expect_not_null(strstr(m.detail, "the hard limit allows it"), "%s", m.detail);

    m = assess(8 << 20, 1ULL << 30, 0);
    cr_expect_not_null(strstr(m.detail, "`ulimit -l 1048576`"), "KiB, ulimit's unit: %s", m.detail);
    m = assess(1000, 1000, 0);
    cr_expect_not_null(strstr(m.detail, "soft 1000 bytes"), "%s", m.detail);
}

Test(rdma_memlock, enough_and_unlimited)
{
    struct wk_rdma_memlock m = assess(64 << 20, 64 << 20, 0);
    cr_expect(m.ok, "%s", m.detail);
    cr_expect_str_eq(m.detail,
                     "RLIMIT_MEMLOCK soft 64 MiB, hard 64 MiB: enough for memory registration");
    m = assess(64ULL << 30, RLIM_INFINITY, 0);
    cr_expect(m.ok);
    cr_expect_str_eq(m.detail, "RLIMIT_MEMLOCK soft 64 GiB, hard unlimited: enough for memory "
                               "registration");
    m = assess(RLIM_INFINITY, RLIM_INFINITY, 0);
    cr_expect(m.ok);
    cr_expect_str_eq(m.detail, "RLIMIT_MEMLOCK soft unlimited, hard unlimited: enough for memory "
                               "registration");
}

/* The kernel does not hold a CAP_IPC_LOCK process to the limit when it registers memory. */
Test(rdma_memlock, low_but_ipc_lock)
{
    struct wk_rdma_memlock m = assess(64 << 10, 64 << 10, 1);
    cr_expect(m.ok);
    cr_expect(m.ipc_lock);
    cr_expect_not_null(strstr(m.detail, "CAP_IPC_LOCK is effective"), "%s", m.detail);
}

Test(rdma_memlock, read_from_the_environment)
{
    struct wk_rdma_memlock m;
    setenv(WK_RDMA_MEMLOCK_ENV, "65536:unlimited", 1);
    cr_assert_eq(wk_rdma_memlock_read(&m), 0);
    cr_expect_eq(m.limit.rlim_cur, 65536);
    cr_expect_eq(m.limit.rlim_max, RLIM_INFINITY);
    cr_expect_not(m.ipc_lock, "only when the variable says so, whatever this process has");
    cr_expect_not(m.ok);
    setenv(WK_RDMA_MEMLOCK_ENV, "8388608:8388608:IPC_LOCK", 1);
    cr_assert_eq(wk_rdma_memlock_read(&m), 0);
    cr_expect(m.ipc_lock);
    cr_expect(m.ok);
    static const char *bad[] = {"8M:8M", "1", "1:", ":1", "1:2:CAP_SYS_ADMIN", "-1:1",
                                "unlimitedx:1", NULL};
    for (int i = 0; bad[i]; i++) {
        setenv(WK_RDMA_MEMLOCK_ENV, bad[i], 1);
        cr_expect_eq(wk_rdma_memlock_read(&m), -EINVAL, "%s", bad[i]);
        cr_expect_not(m.ok);
        cr_expect_not_null(strstr(m.detail, "want SOFT:HARD[:IPC_LOCK]"), "%s", m.detail);
    }
    unsetenv(WK_RDMA_MEMLOCK_ENV);
    struct rlimit own;
    cr_assert_eq(getrlimit(RLIMIT_MEMLOCK, &own), 0);
    cr_assert_eq(wk_rdma_memlock_read(&m), 0);
    cr_expect_eq(m.limit.rlim_cur, own.rlim_cur);
    cr_expect_eq(m.limit.rlim_max, own.rlim_max);
}

/* ---- the verdict ------------------------------------------------------------------------- */

static void active_roce(struct wk_rdma_device *d, const char *name)
{
    memset(d, 0, sizeof(*d));
    snprintf(d->name, sizeof(d->name), "%s", name);
    struct wk_rdma_port *p = &d->ports[d->port_count++];
    p->port = 1;
    snprintf(p->state, sizeof(p->state), "ACTIVE");
    snprintf(p->link_layer, sizeof(p->link_layer), "Ethernet");
}

static struct wk_rdma_devdir devdir(enum wk_rdma_devdir_status status, const char *detail)
{
    struct wk_rdma_devdir d = {.status = status};
    snprintf(d.detail, sizeof(d.detail), "%s", detail);
    return d;
}

Test(rdma_verdict, usable_ports_and_the_locked_memory_limit)
{
    struct wk_rdma_device d;
    active_roce(&d, "mlx5_0");
    struct wk_rdma_devdir ok = devdir(WK_RDMA_DEVDIR_OK, "/dev/infiniband: uverbs0 opens read-write");
    char msg[1024];

    struct wk_rdma_memlock m = assess(8 << 20, 8 << 20, 0);
    cr_expect_eq(wk_rdma_verdict(&d, 1, "", NULL, &d, 1, &ok, &m, msg, sizeof(msg)), -EPERM);
    expect_prefix(msg, WK_RDMA_NO_MEMLOCK "RLIMIT_MEMLOCK soft 8 MiB, hard 8 MiB: too low");
    cr_expect_not_null(strstr(msg, "IPC_LOCK"), "%s", msg);

    m = assess(64 << 20, 64 << 20, 0);
    cr_expect_eq(wk_rdma_verdict(&d, 1, "", NULL, &d, 1, &ok, &m, msg, sizeof(msg)), 0, "%s", msg);
    cr_expect_str_eq(msg, "RDMA ports usable by NCCL: mlx5_0:1");
    m = assess(RLIM_INFINITY, RLIM_INFINITY, 0);
    cr_expect_eq(wk_rdma_verdict(&d, 1, "", NULL, &d, 1, &ok, &m, msg, sizeof(msg)), 0, "%s", msg);
    m = assess(64 << 10, 64 << 10, 1);
    cr_expect_eq(wk_rdma_verdict(&d, 1, "", NULL, &d, 1, &ok, &m, msg, sizeof(msg)), 0, "%s", msg);

    /* No usable port comes first: it is what there is to fix first. */
    m = assess(8 << 20, 8 << 20, 0);
    cr_expect_eq(wk_rdma_verdict(&d, 1, "", "mlx5_1", &d, 1, &ok, &m, msg, sizeof(msg)), -ENODEV);
    cr_expect_not_null(strstr(msg, "NCCL_IB_HCA=mlx5_1 leaves it out"), "%s", msg);
}

/* libibverbs lists nothing: the kernel's devices and /dev/infiniband say why. */
Test(rdma_verdict, no_devices_says_why)
{
    struct wk_rdma_device sysfs[2];
    active_roce(&sysfs[0], "mlx5_0");
    active_roce(&sysfs[1], "mlx5_1");
    struct wk_rdma_memlock m = assess(RLIM_INFINITY, RLIM_INFINITY, 0);
    struct wk_rdma_devdir dir;
    char msg[1024];

    wk_rdma_devdir_check("/nonexistent-root", &dir);
    cr_expect_eq(wk_rdma_verdict(NULL, 0, "", NULL, sysfs, 2, &dir, &m, msg, sizeof(msg)), -ENODEV);
    expect_prefix(msg, WK_RDMA_NO_DEVICE "looked for InfiniBand/RoCE devices through "
                       "libibverbs.so.1: no devices found (the kernel has mlx5_0, mlx5_1 in "
                       "/sys/class/infiniband; /dev/infiniband does not exist here: ");
    cr_expect_not_null(strstr(msg, "; NCCL_IB_HCA=unset)"), "%s", msg);

    dir = devdir(WK_RDMA_DEVDIR_NO_UVERBS, "/dev/infiniband exists but holds no uverbs device: x");
    wk_rdma_verdict(NULL, 0, "", "mlx5_0", NULL, 0, &dir, &m, msg, sizeof(msg));
    cr_expect_not_null(strstr(msg, "no devices found (the kernel lists none in /sys/class/infiniband; "
                                   "/dev/infiniband exists but holds no uverbs device: x; "
                                   "NCCL_IB_HCA=mlx5_0)"), "%s", msg);

    dir = devdir(WK_RDMA_DEVDIR_OK, "/dev/infiniband: uverbs0 opens read-write");
    wk_rdma_verdict(NULL, 0, "", NULL, sysfs, 1, &dir, &m, msg, sizeof(msg));
    cr_expect_not_null(strstr(msg, "uverbs0 opens read-write; is the device's libibverbs provider "
                                   "installed"), "%s", msg);

    wk_rdma_verdict(NULL, -2, "libibverbs.so.1 could not be loaded: gone", NULL, NULL, 0, &dir, &m,
                    msg, sizeof(msg));
    cr_expect_str_eq(msg, WK_RDMA_NO_DEVICE "libibverbs.so.1 could not be loaded: gone");
}

/* Listed but not opened (ibv_open_device failed): /dev/infiniband's fault is added. */
Test(rdma_verdict, listed_but_not_opened)
{
    struct wk_rdma_device d;
    memset(&d, 0, sizeof(d));
    snprintf(d.name, sizeof(d.name), "mlx5_0");
    struct wk_rdma_memlock m = assess(RLIM_INFINITY, RLIM_INFINITY, 0);
    char fault[512], msg[1024];
    wk_rdma_uverbs_fault("uverbs0", NULL, EPERM, fault, sizeof(fault));
    struct wk_rdma_devdir dir = devdir(WK_RDMA_DEVDIR_UNUSABLE, fault);
    cr_expect_eq(wk_rdma_verdict(&d, 1, "mlx5_0: ibv_open_device: Operation not permitted", NULL, &d,
                                 1, &dir, &m, msg, sizeof(msg)), -ENODEV);
    cr_expect_not_null(strstr(msg, "mlx5_0 has no port that could be queried; mlx5_0: "
                                   "ibv_open_device: Operation not permitted; uverbs0: open: "
                                   "Operation not permitted: the container's cgroup"), "%s", msg);
}

/* ---- the probe command on the fakes ------------------------------------------------------- */

static int probe(const char *memlock, const char *args, char **out, char **err)
{
    char cmd[4096];
    snprintf(cmd, sizeof(cmd), "env -u NCCL_IB_HCA " WK_RDMA_ROOT_ENV "='%s' " WK_RDMA_MEMLOCK_ENV
             "='%s' '%s' probe %s", root, memlock, runcmd_worker_bin(), args);
    return runcmd(cmd, out, err);
}

TestSuite(probe_host, .init = make_root, .fini = remove_root);

/* The kernel has a RoCE device but nothing passed /dev/infiniband in: the GID table and the
 * index that fits it are still shown, and the failure names the missing directory. */
Test(probe_host, kernel_device_without_dev_infiniband)
{
    if (test_host_has_rdma())
        skip("this host has an ACTIVE RDMA port");
    roce_mlx5("mlx5_0", "eth0");
    char *out, *err;
    int code = probe("unlimited:unlimited", "--require rdma", &out, &err);
    cr_expect_eq(code, 1, "stdout:\n%s\nstderr:\n%s", out, err);
    cr_expect_not_null(strstr(out, "RDMA devices: none\nThe kernel has these (/sys/class/infiniband), "
                                   "unusable through libibverbs here:\n"), "%s", out);
    cr_expect_not_null(strstr(out, "3     " MAPPED_10_0_0_7 " RoCE v2 10.0.0.7        eth0\n"),
                       "%s", out);
    cr_expect_not_null(strstr(out, "NCCL_IB_GID_INDEX=3 fits mlx5_0:1: RoCE v2 with IPv4 10.0.0.7 "
                                   "(eth0)\n"), "%s", out);
    cr_expect_null(strstr(out, ZERO_GID), "%s", out);
    cr_expect_not_null(strstr(out, "\n/dev/infiniband does not exist here: "), "%s", out);
    cr_expect_not_null(strstr(err, "mpijob-worker probe: " WK_RDMA_NO_DEVICE), "%s", err);
    cr_expect_not_null(strstr(err, "the kernel has mlx5_0 in /sys/class/infiniband; /dev/infiniband "
                                   "does not exist here"), "%s", err);
    free(out);
    free(err);
}

Test(probe_host, dev_infiniband_present_but_unusable)
{
    if (test_host_has_rdma())
        skip("this host has an ACTIVE RDMA port");
    make_dir("dev/infiniband");
    char *out, *err;
    cr_expect_eq(probe("unlimited:unlimited", "", &out, &err), 1);
    cr_expect_not_null(strstr(out, "\n/dev/infiniband exists but holds no uverbs device: "),
                       "%s", out);
    cr_expect_not_null(strstr(err, "no RDMA device: "), "%s", err);
    cr_expect_not_null(strstr(err, "holds no uverbs device"), "%s", err);
    free(out);
    free(err);

    put("", "dev/infiniband/uverbs0");
    cr_expect_eq(probe("unlimited:unlimited", "--require rdma", &out, &err), 1);
    cr_expect_not_null(strstr(out, "\n/dev/infiniband is there but none of its uverbs "
                                   "devices can be used: uverbs0 is a regular file, not a character "
                                   "device"), "%s", out);
    cr_expect_not_null(strstr(err, "uverbs0 is a regular file, not a character device"), "%s", err);
    free(out);
    free(err);
}

Test(probe_host, locked_memory_line)
{
    static const struct {
        const char *env, *line;
    } cases[] = {
        {"8388608:8388608", "\nLocked memory: RLIMIT_MEMLOCK soft 8 MiB, hard 8 MiB: too low for RDMA "
                            "memory registration"},
        {"68719476736:68719476736", "\nLocked memory: RLIMIT_MEMLOCK soft 64 GiB, hard 64 GiB: enough "
                                    "for memory registration\n"},
        {"unlimited:unlimited", "\nLocked memory: RLIMIT_MEMLOCK soft unlimited, hard unlimited: "
                                "enough for memory registration\n"},
        {"65536:65536:IPC_LOCK", "\nLocked memory: RLIMIT_MEMLOCK soft 64 KiB, hard 64 KiB: below "
                                 "64 MiB, but CAP_IPC_LOCK is effective"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char *out, *err;
        probe(cases[i].env, "", &out, &err);
        cr_expect_not_null(strstr(out, cases[i].line), "%s:\n%s", cases[i].env, out);
        free(out);
        free(err);
    }
    char *out, *err;
    probe("lots", "", &out, &err);
    cr_expect_not_null(strstr(err, "mpijob-worker probe: " WK_RDMA_MEMLOCK_ENV "='lots': want "), "%s",
                       err);
    free(out);
    free(err);
}

Test(probe_host, json_has_the_host)
{
    roce_mlx5("mlx5_0", "eth0");
    char *out, *err;
    probe("8388608:unlimited", "--json", &out, &err);
    cJSON *obj = cJSON_Parse(out);
    cr_assert_not_null(obj, "not JSON: %s", out);
    const cJSON *memlock = cJSON_GetObjectItem(obj, "memlock");
    cr_expect_eq(cJSON_GetObjectItem(memlock, "soft")->valuedouble, 8388608);
    cr_expect_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(memlock, "hard")), "unlimited");
    cr_expect(cJSON_IsFalse(cJSON_GetObjectItem(memlock, "ok")));
    cr_expect(cJSON_IsFalse(cJSON_GetObjectItem(memlock, "ipc_lock")));
    const cJSON *dir = cJSON_GetObjectItem(obj, "dev_infiniband");
    cr_expect_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(dir, "status")), "missing");
    const cJSON *sysfs = cJSON_GetObjectItem(obj, "sysfs_devices");
    cr_assert_eq(cJSON_GetArraySize(sysfs), 1);
    const cJSON *dev0 = cJSON_GetArrayItem(sysfs, 0);
    const cJSON *port0 = cJSON_GetArrayItem(cJSON_GetObjectItem(dev0, "ports"), 0);
    cr_expect_eq(cJSON_GetObjectItem(port0, "gid_index")->valueint, 3);
    const cJSON *gids = cJSON_GetObjectItem(port0, "gids");
    cr_assert_eq(cJSON_GetArraySize(gids), 4);
    const cJSON *g3 = cJSON_GetArrayItem(gids, 3);
    cr_expect_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(g3, "type")), "RoCE v2");
    cr_expect_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(g3, "ipv4")), "10.0.0.7");
    cr_expect_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(g3, "ndev")), "eth0");
    cJSON_Delete(obj);
    free(out);
    free(err);
}
