/* mpijob-worker probe: the RDMA devices this host offers NCCL, and the settings they suggest.
 * Runs on its own or under mpirun; it never starts MPI.
 *
 * Besides libibverbs' listing it reports what makes RDMA fail in a pod (worker/rdma_host.h):
 * the devices the kernel has in sysfs when libibverbs finds none, /dev/infiniband, and the
 * locked-memory limit.
 *
 * Exit status: 0 when some port is ACTIVE; 1 when none is (or, with --require rdma, when none
 * that NCCL_IB_HCA selects is, or the locked-memory limit is too low for memory registration),
 * with the reason on stderr; 2 for a usage error. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "util/json.h"
#include "worker/commands.h"
#include "worker/diag.h"
#include "worker/rdma.h"
#include "worker/rdma_host.h"
#include "worker/rdma_suggest.h"

#define MAX_DEVICES 32

struct probe_flags {
    int require_rdma;
    int json;
};

static void usage(FILE *out)
{
    fprintf(out,
            "Usage: mpijob-worker probe [options]\n"
            "\n"
            "Lists RDMA devices (rdma-core's libibverbs.so.1): ports, state, link layer, GIDs with\n"
            "their RoCE versions and net devices; suggests NCCL_IB_HCA and NCCL_IB_GID_INDEX.\n"
            "Reports the locked-memory limit (RLIMIT_MEMLOCK) and /dev/infiniband, and the\n"
            "devices the kernel has (sysfs) when libibverbs finds none. Exits 1 when no port is\n"
            "ACTIVE.\n"
            "\n"
            "Options:                 default\n"
            "  --require rdma         off: also fail when no ACTIVE port is selected by\n"
            "                         NCCL_IB_HCA or the locked-memory limit is below 64 MiB\n"
            "                         without CAP_IPC_LOCK, with the message train and bench give\n"
            "  --json                 off: one JSON object on stdout instead of the table\n"
            "  -h, --help             this help\n");
}

/* 0 to run, 1 to exit 0 (help), 2 for a usage error. */
static int parse_flags(int argc, char **argv, struct probe_flags *f)
{
    enum { REQUIRE = 256, JSON };
    static const struct option opts[] = {
        {"require", required_argument, NULL, REQUIRE},
        {"json", no_argument, NULL, JSON},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    memset(f, 0, sizeof(*f));
    optind = 1;
    opterr = 0;
    int opt;
    while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (opt) {
        case REQUIRE:
            if (strcmp(optarg, "rdma") != 0) {
                wk_usage_error("probe", usage, "--require takes 'rdma', got '%s'", optarg);
                return 2;
            }
            f->require_rdma = 1;
            break;
        case JSON: f->json = 1; break;
        case 'h': usage(stdout); return 1;
        default:
            wk_usage_error("probe", usage, "unknown or incomplete option '%s'", argv[optind - 1]);
            return 2;
        }
    }
    if (optind < argc) {
        wk_usage_error("probe", usage, "unexpected argument '%s'", argv[optind]);
        return 2;
    }
    return 0;
}

static void print_table(const struct wk_rdma_device *devs, int n)
{
    printf("%-14s %-4s %-12s %-10s %-5s %-39s %-7s %-15s %s\n", "DEVICE", "PORT", "STATE",
           "LINK LAYER", "GID", "ADDRESS", "TYPE", "IPV4", "NETDEV");
    for (int d = 0; d < n; d++) {
        if (devs[d].port_count == 0)
            printf("%-14s (no port could be queried)\n", devs[d].name);
        for (int i = 0; i < devs[d].port_count; i++) {
            const struct wk_rdma_port *p = &devs[d].ports[i];
            char advice[256];
            printf("%-14s %-4d %-12s %-10s", i == 0 ? devs[d].name : "", p->port, p->state,
                   p->link_layer);
            if (p->gid_count == 0)
                printf(" (no GID)\n");
            for (int g = 0; g < p->gid_count; g++) {
                const struct wk_rdma_gid *gid = &p->gids[g];
                char ip[16] = "";
                wk_rdma_gid_ipv4(gid->gid, ip);
                if (g > 0)
                    printf("%-14s %-4s %-12s %-10s", "", "", "", "");
                printf(" %-5d %-39s %-7s", gid->index, gid->gid, gid->type[0] ? gid->type : "?");
                if (gid->ndev[0])
                    printf(" %-15s %s\n", ip, gid->ndev);
                else
                    printf(" %s\n", ip);
            }
            wk_rdma_port_gid_advice(devs[d].name, p, advice, sizeof(advice));
            if (advice[0])
                printf("%-14s %s\n", "", advice);
        }
    }
}

/* selected: the ports NCCL_IB_HCA selects when n_selected > 0, else what it leaves out. */
static void print_suggestion(const struct wk_rdma_suggestion *s, const char *hca_env,
                             int n_selected, const char *selected)
{
    if (s->active_ports == 0)
        return;
    printf("\nSuggested settings:\n  NCCL_IB_HCA=%s\n", s->hca);
    if (s->gid_index >= 0)
        printf("  NCCL_IB_GID_INDEX=%d    # %s\n", s->gid_index, s->gid_reason);
    else
        printf("  (no NCCL_IB_GID_INDEX: %s)\n", s->gid_reason);
    if (hca_env != NULL && n_selected > 0)
        printf("NCCL_IB_HCA is set here to '%s': it selects %s\n", hca_env, selected);
    else if (hca_env != NULL)
        printf("NCCL_IB_HCA is set here to '%s': it selects no ACTIVE port (%s)\n", hca_env, selected);
}

static void add_devices(cJSON *list, const struct wk_rdma_device *devs, int n)
{
    for (int d = 0; list && d < n; d++) {
        cJSON *dev = cJSON_CreateObject();
        cJSON_AddItemToArray(list, dev);
        cJSON_AddStringToObject(dev, "name", devs[d].name);
        cJSON *ports = cJSON_AddArrayToObject(dev, "ports");
        for (int i = 0; ports && i < devs[d].port_count; i++) {
            const struct wk_rdma_port *p = &devs[d].ports[i];
            cJSON *port = cJSON_CreateObject();
            cJSON_AddItemToArray(ports, port);
            cJSON_AddNumberToObject(port, "port", p->port);
            cJSON_AddStringToObject(port, "state", p->state);
            cJSON_AddStringToObject(port, "link_layer", p->link_layer);
            cJSON *gids = cJSON_AddArrayToObject(port, "gids");
            for (int g = 0; gids && g < p->gid_count; g++) {
                cJSON *gid = cJSON_CreateObject();
                char ip[16];
                cJSON_AddItemToArray(gids, gid);
                cJSON_AddNumberToObject(gid, "index", p->gids[g].index);
                cJSON_AddStringToObject(gid, "gid", p->gids[g].gid);
                cJSON_AddStringToObject(gid, "type", p->gids[g].type);
                if (wk_rdma_gid_ipv4(p->gids[g].gid, ip))
                    cJSON_AddStringToObject(gid, "ipv4", ip);
                if (p->gids[g].ndev[0])
                    cJSON_AddStringToObject(gid, "ndev", p->gids[g].ndev);
            }
            /* What NCCL_IB_GID_INDEX fits this port alone; null where none does or none is
             * needed (InfiniBand). */
            int roce = strcmp(p->link_layer, "Ethernet") == 0;
            int index = roce ? wk_rdma_port_gid_index(p, NULL) : -1;
            if (index >= 0)
                cJSON_AddNumberToObject(port, "gid_index", index);
            else
                cJSON_AddNullToObject(port, "gid_index");
        }
    }
}

static void add_limit(cJSON *obj, const char *name, rlim_t v)
{
    if (v == RLIM_INFINITY)
        cJSON_AddStringToObject(obj, name, "unlimited");
    else
        cJSON_AddNumberToObject(obj, name, (double)v);
}

struct host_view {
    const struct wk_rdma_device *sysfs;
    int n_sysfs;
    struct wk_rdma_devdir devdir;
    struct wk_rdma_memlock memlock;
};

/* The listing, the suggestion and the verdict as one object; NULL on ENOMEM. */
static cJSON *to_json(const struct wk_rdma_device *devs, int n, const struct wk_rdma_suggestion *s,
                      const struct host_view *host, const char *error)
{
    static const char *const devdir_status[] = {
        [WK_RDMA_DEVDIR_OK] = "ok",
        [WK_RDMA_DEVDIR_MISSING] = "missing",
        [WK_RDMA_DEVDIR_NO_UVERBS] = "no_uverbs",
        [WK_RDMA_DEVDIR_UNUSABLE] = "unusable",
    };
    cJSON *root = cJSON_CreateObject();
    cJSON *list = cJSON_AddArrayToObject(root, "devices");
    add_devices(list, devs, n);
    cJSON_AddNumberToObject(root, "active_ports", s->active_ports);
    cJSON *suggest = cJSON_AddObjectToObject(root, "suggest");
    if (suggest != NULL) {
        if (s->active_ports)
            cJSON_AddStringToObject(suggest, "NCCL_IB_HCA", s->hca);
        else
            cJSON_AddNullToObject(suggest, "NCCL_IB_HCA");
        if (s->gid_index >= 0)
            cJSON_AddNumberToObject(suggest, "NCCL_IB_GID_INDEX", s->gid_index);
        else
            cJSON_AddNullToObject(suggest, "NCCL_IB_GID_INDEX");
        cJSON_AddStringToObject(suggest, "gid_reason", s->gid_reason);
    }
    cJSON *sysfs = cJSON_AddArrayToObject(root, "sysfs_devices");
    add_devices(sysfs, host->sysfs, host->n_sysfs);
    cJSON *memlock = cJSON_AddObjectToObject(root, "memlock");
    if (memlock != NULL) {
        add_limit(memlock, "soft", host->memlock.limit.rlim_cur);
        add_limit(memlock, "hard", host->memlock.limit.rlim_max);
        cJSON_AddBoolToObject(memlock, "ipc_lock", host->memlock.ipc_lock);
        cJSON_AddBoolToObject(memlock, "ok", host->memlock.ok);
        cJSON_AddStringToObject(memlock, "detail", host->memlock.detail);
    }
    cJSON *devdir = cJSON_AddObjectToObject(root, "dev_infiniband");
    if (devdir != NULL) {
        cJSON_AddStringToObject(devdir, "status", devdir_status[host->devdir.status]);
        cJSON_AddNumberToObject(devdir, "uverbs", host->devdir.uverbs);
        cJSON_AddNumberToObject(devdir, "usable", host->devdir.usable);
        cJSON_AddStringToObject(devdir, "detail", host->devdir.detail);
    }
    if (error != NULL)
        cJSON_AddStringToObject(root, "error", error);
    else
        cJSON_AddNullToObject(root, "error");
    /* cJSON's Add* calls fail quietly on ENOMEM: one check that the last ones landed. */
    if (list == NULL || suggest == NULL || sysfs == NULL || memlock == NULL || devdir == NULL ||
        cJSON_GetObjectItem(root, "error") == NULL) {
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

int wk_probe_main(int argc, char **argv)
{
    struct probe_flags f;
    int rc = parse_flags(argc, argv, &f);
    if (rc != 0)
        return rc == 1 ? 0 : 2;

    struct wk_rdma_device *devs = calloc(2 * MAX_DEVICES, sizeof(*devs));
    char why[512] = "", check[1024] = "", selected[512] = "", error[1200] = "";
    struct wk_rdma_suggestion s;
    struct host_view host;
    int status = 1;
    if (devs == NULL) {
        wk_error("probe", "out of memory");
        return 1;
    }
    const char *root = wk_rdma_host_root();
    int n = wk_rdma_list(devs, MAX_DEVICES, why, sizeof(why));
    host.sysfs = devs + MAX_DEVICES;
    host.n_sysfs = wk_rdma_sysfs_list(root, devs + MAX_DEVICES, MAX_DEVICES);
    wk_rdma_devdir_check(root, &host.devdir);
    if (wk_rdma_memlock_read(&host.memlock) < 0)
        wk_warn("probe", "%s", host.memlock.detail);
    wk_rdma_suggest(devs, n > 0 ? n : 0, &s);
    const char *hca_env = getenv("NCCL_IB_HCA");
    int n_selected = wk_rdma_usable(devs, n > 0 ? n : 0, hca_env, selected, sizeof(selected));
    /* The same verdict as train's and bench's check (wk_rdma_check), on this listing. */
    int verdict = wk_rdma_verdict(devs, n, why, hca_env, host.sysfs, host.n_sysfs, &host.devdir,
                                  &host.memlock, check, sizeof(check));

    int ok = n > 0 && s.active_ports > 0;
    if (ok && f.require_rdma && verdict < 0) {
        ok = 0;
        snprintf(error, sizeof(error), "%s", check);
    } else if (!ok) {
        /* The check's own account of what was looked for and found, said as probe says it. */
        if (verdict == 0 || strncmp(check, WK_RDMA_NO_DEVICE, strlen(WK_RDMA_NO_DEVICE)) != 0)
            snprintf(check, sizeof(check), WK_RDMA_NO_DEVICE "%s", why[0] ? why : "no ACTIVE port");
        snprintf(error, sizeof(error), "%s%s",
                 f.require_rdma ? WK_RDMA_NO_DEVICE : "no RDMA device: ",
                 check + strlen(WK_RDMA_NO_DEVICE));
    }
    status = ok ? 0 : 1;

    if (f.json) {
        cJSON *obj = to_json(devs, n > 0 ? n : 0, &s, &host, ok ? NULL : error);
        if (json_print_line(stdout, obj) < 0) {
            wk_error("probe", "out of memory");
            status = 1;
        }
        cJSON_Delete(obj);
    } else {
        if (n > 0) {
            print_table(devs, n);
        } else {
            printf("RDMA devices: none\n");
            if (host.n_sysfs > 0) {
                printf("The kernel has these (/sys/class/infiniband), unusable through "
                       "libibverbs here:\n");
                print_table(host.sysfs, host.n_sysfs);
            }
        }
        print_suggestion(&s, hca_env, n_selected, selected);
        printf("\nLocked memory: %s\n", host.memlock.detail);
        printf("%s\n", host.devdir.detail); /* starts with "/dev/infiniband" */
    }
    if (n >= 0 && why[0] != '\0')
        wk_info("probe", "note: %s", why);
    if (!ok)
        wk_error("probe", "%s", error);
    fflush(stdout);
    free(devs);
    return status;
}
