/* mpijob-worker probe: the RDMA devices this host offers NCCL, and the settings they suggest.
 * Runs on its own or under mpirun; it never starts MPI.
 *
 * Exit status: 0 when some port is ACTIVE; 1 when none is (or, with --require rdma, when none
 * that NCCL_IB_HCA selects is), with the reason on stderr; 2 for a usage error. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "worker/commands.h"
#include "worker/diag.h"
#include "worker/rdma.h"
#include "worker/rdma_suggest.h"

#define MAX_DEVICES 32
#define CHECK_PREFIX "RDMA requested but no usable device: "

struct probe_flags {
    int require_rdma;
    int json;
};

static void usage(FILE *out)
{
    fprintf(out,
            "Usage: mpijob-worker probe [options]\n"
            "\n"
            "Lists RDMA devices (rdma-core's libibverbs.so.1): ports, state, link layer, GIDs and\n"
            "their RoCE versions; suggests NCCL_IB_HCA and NCCL_IB_GID_INDEX. Exits 1 when no\n"
            "port is ACTIVE.\n"
            "\n"
            "Options:                 default\n"
            "  --require rdma         off: also fail when no ACTIVE port is selected by\n"
            "                         NCCL_IB_HCA, with the message train and bench give\n"
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
    if (n == 0) {
        printf("RDMA devices: none\n");
        return;
    }
    printf("%-14s %-4s %-12s %-10s %-5s %-39s %-7s %s\n", "DEVICE", "PORT", "STATE", "LINK LAYER",
           "GID", "ADDRESS", "TYPE", "IPV4");
    for (int d = 0; d < n; d++) {
        if (devs[d].port_count == 0)
            printf("%-14s (no port could be queried)\n", devs[d].name);
        for (int i = 0; i < devs[d].port_count; i++) {
            const struct wk_rdma_port *p = &devs[d].ports[i];
            printf("%-14s %-4d %-12s %-10s", i == 0 ? devs[d].name : "", p->port, p->state,
                   p->link_layer);
            if (p->gid_count == 0)
                printf(" (no GID)\n");
            for (int g = 0; g < p->gid_count; g++) {
                char ip[16] = "";
                wk_rdma_gid_ipv4(p->gids[g].gid, ip);
                if (g > 0)
                    printf("%-14s %-4s %-12s %-10s", "", "", "", "");
                printf(" %-5d %-39s %-7s %s\n", p->gids[g].index, p->gids[g].gid,
                       p->gids[g].type[0] ? p->gids[g].type : "?", ip);
            }
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

/* The listing, the suggestion and the verdict as one object; NULL on ENOMEM. */
static cJSON *to_json(const struct wk_rdma_device *devs, int n, const struct wk_rdma_suggestion *s,
                      const char *error)
{
    cJSON *root = cJSON_CreateObject();
    cJSON *list = cJSON_AddArrayToObject(root, "devices");
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
            }
        }
    }
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
    if (error != NULL)
        cJSON_AddStringToObject(root, "error", error);
    else
        cJSON_AddNullToObject(root, "error");
    /* cJSON's Add* calls fail quietly on ENOMEM: one check that the last ones landed. */
    if (list == NULL || suggest == NULL || cJSON_GetObjectItem(root, "error") == NULL) {
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

    struct wk_rdma_device *devs = calloc(MAX_DEVICES, sizeof(*devs));
    char why[512] = "", check[1024] = "", selected[512] = "", error[1200] = "";
    struct wk_rdma_suggestion s;
    int status = 1;
    if (devs == NULL) {
        wk_error("probe", "out of memory");
        return 1;
    }
    int n = wk_rdma_list(devs, MAX_DEVICES, why, sizeof(why));
    wk_rdma_suggest(devs, n > 0 ? n : 0, &s);
    const char *hca_env = getenv("NCCL_IB_HCA");
    int n_selected = wk_rdma_usable(devs, n > 0 ? n : 0, hca_env, selected, sizeof(selected));

    int ok = n > 0 && s.active_ports > 0;
    if (ok && f.require_rdma && wk_rdma_check(check, sizeof(check)) < 0) {
        ok = 0;
        snprintf(error, sizeof(error), "%s", check);
    } else if (!ok) {
        /* The check's own account of what was looked for and found, said as probe says it. */
        if (wk_rdma_check(check, sizeof(check)) == 0)
            snprintf(check, sizeof(check), CHECK_PREFIX "%s", why[0] ? why : "no ACTIVE port");
        const char *detail = check + (strncmp(check, CHECK_PREFIX, strlen(CHECK_PREFIX)) == 0
                                          ? strlen(CHECK_PREFIX) : 0);
        snprintf(error, sizeof(error), "%s%s", f.require_rdma ? CHECK_PREFIX : "no RDMA device: ",
                 detail);
    }
    status = ok ? 0 : 1;

    if (f.json) {
        cJSON *obj = to_json(devs, n > 0 ? n : 0, &s, ok ? NULL : error);
        char *text = obj ? cJSON_PrintUnformatted(obj) : NULL;
        if (text == NULL) {
            wk_error("probe", "out of memory");
            status = 1;
        } else {
            printf("%s\n", text);
        }
        free(text);
        cJSON_Delete(obj);
    } else {
        print_table(devs, n > 0 ? n : 0);
        print_suggestion(&s, hca_env, n_selected, selected);
    }
    if (n >= 0 && why[0] != '\0')
        wk_info("probe", "note: %s", why);
    if (!ok)
        wk_error("probe", "%s", error);
    fflush(stdout);
    free(devs);
    return status;
}
