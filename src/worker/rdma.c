/* libibverbs through dlopen. verbs.h gives the types only; nothing links -libverbs.
 *
 * ibv_query_port in verbs.h is an inline wrapper around the exported symbol of the same name
 * (IBVERBS_1.1), which takes the older, shorter struct _compat_ibv_port_attr: a prefix of
 * struct ibv_port_attr that holds every field read here (state, gid_tbl_len, link_layer). The
 * exported function is called with a zeroed struct ibv_port_attr, as the inline wrapper does
 * when a provider has no extended query.
 *
 * On success wk_rdma_list leaves a note in why[] when a device could not be opened or queried
 * (that device is listed with no ports); "" otherwise. */
#include "worker/rdma.h"

#include <dlfcn.h>
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <infiniband/verbs.h>

#include "worker/rdma_host.h"
#include "worker/rdma_suggest.h"

#define IBVERBS_LIB "libibverbs.so.1"

struct verbs {
    void *lib;
    struct ibv_device **(*get_device_list)(int *num);
    void (*free_device_list)(struct ibv_device **list);
    const char *(*get_device_name)(struct ibv_device *dev);
    struct ibv_context *(*open_device)(struct ibv_device *dev);
    int (*close_device)(struct ibv_context *ctx);
    int (*query_device)(struct ibv_context *ctx, struct ibv_device_attr *attr);
    int (*query_port)(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr);
    int (*query_gid)(struct ibv_context *ctx, uint8_t port, int index, union ibv_gid *gid);
};

/* The IBVERBS_1.1 versions where the library has them (the 1.0 ones take other structs). */
static void *symbol(void *lib, const char *name)
{
    void *p = dlvsym(lib, name, "IBVERBS_1.1");
    return p ? p : dlsym(lib, name);
}

static int verbs_load(struct verbs *v, char *why, size_t why_len)
{
    memset(v, 0, sizeof(*v));
    v->lib = dlopen(IBVERBS_LIB, RTLD_NOW | RTLD_LOCAL);
    if (v->lib == NULL) {
        const char *err = dlerror();
        snprintf(why, why_len, IBVERBS_LIB " could not be loaded: %s (is rdma-core installed?)",
                 err ? err : "unknown error");
        return -ENOENT;
    }
    static const struct {
        const char *name;
        size_t offset;
    } wanted[] = {
        {"ibv_get_device_list", offsetof(struct verbs, get_device_list)},
        {"ibv_free_device_list", offsetof(struct verbs, free_device_list)},
        {"ibv_get_device_name", offsetof(struct verbs, get_device_name)},
        {"ibv_open_device", offsetof(struct verbs, open_device)},
        {"ibv_close_device", offsetof(struct verbs, close_device)},
        {"ibv_query_device", offsetof(struct verbs, query_device)},
        {"ibv_query_port", offsetof(struct verbs, query_port)},
        {"ibv_query_gid", offsetof(struct verbs, query_gid)},
    };
    for (size_t i = 0; i < sizeof(wanted) / sizeof(wanted[0]); i++) {
        void *p = symbol(v->lib, wanted[i].name);
        if (p == NULL) {
            snprintf(why, why_len, IBVERBS_LIB " has no symbol %s", wanted[i].name);
            dlclose(v->lib);
            v->lib = NULL;
            return -ENOSYS;
        }
        /* Function pointers and void * share a representation on every POSIX system. */
        memcpy((char *)v + wanted[i].offset, &p, sizeof(p));
    }
    return 0;
}

static const char *port_state_name(enum ibv_port_state s)
{
    switch (s) {
    case IBV_PORT_NOP: return "NOP";
    case IBV_PORT_DOWN: return "DOWN";
    case IBV_PORT_INIT: return "INIT";
    case IBV_PORT_ARMED: return "ARMED";
    case IBV_PORT_ACTIVE: return "ACTIVE";
    case IBV_PORT_ACTIVE_DEFER: return "ACTIVE_DEFER";
    }
    return "UNKNOWN";
}

static int gid_is_zero(const union ibv_gid *g)
{
    for (size_t i = 0; i < sizeof(g->raw); i++)
        if (g->raw[i] != 0)
            return 0;
    return 1;
}

/* The GIDs' types and net devices come from sysfs (worker/rdma_host.h), under the same root. */
static void port_read(const struct verbs *v, struct ibv_context *ctx, const char *dev, int num,
                      const struct ibv_port_attr *attr, struct wk_rdma_port *out)
{
    memset(out, 0, sizeof(*out));
    out->port = num;
    snprintf(out->state, sizeof(out->state), "%s", port_state_name(attr->state));
    int ethernet = attr->link_layer == IBV_LINK_LAYER_ETHERNET;
    snprintf(out->link_layer, sizeof(out->link_layer), "%s", ethernet ? "Ethernet" : "InfiniBand");
    for (int i = 0; i < attr->gid_tbl_len && out->gid_count < WK_RDMA_MAX_GIDS; i++) {
        union ibv_gid g;
        if (v->query_gid(ctx, (uint8_t)num, i, &g) != 0 || gid_is_zero(&g))
            continue;
        struct wk_rdma_gid *o = &out->gids[out->gid_count++];
        o->index = i;
        const uint8_t *r = g.raw;
        snprintf(o->gid, sizeof(o->gid),
                 "%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x", r[0], r[1],
                 r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9], r[10], r[11], r[12], r[13], r[14], r[15]);
        wk_rdma_sysfs_gid_attrs(wk_rdma_host_root(), dev, num, ethernet, o);
    }
}

/* Fills one device's ports; a note goes to why[] when the device cannot be opened. */
static void device_read(const struct verbs *v, struct ibv_device *d, struct wk_rdma_device *out,
                        char *why, size_t why_len, size_t *why_used)
{
    memset(out, 0, sizeof(*out));
    const char *name = v->get_device_name(d);
    snprintf(out->name, sizeof(out->name), "%s", name ? name : "?");
    const char *failed = NULL;
    struct ibv_context *ctx = v->open_device(d);
    struct ibv_device_attr dattr;
    int err = errno;
    if (ctx == NULL) {
        failed = "ibv_open_device";
    } else if ((err = v->query_device(ctx, &dattr)) != 0) {
        failed = "ibv_query_device";
    } else {
        int ports = dattr.phys_port_cnt;
        if (ports > (int)(sizeof(out->ports) / sizeof(out->ports[0])))
            ports = (int)(sizeof(out->ports) / sizeof(out->ports[0]));
        for (int p = 1; p <= ports; p++) {
            struct ibv_port_attr pattr;
            memset(&pattr, 0, sizeof(pattr));
            if ((err = v->query_port(ctx, (uint8_t)p, &pattr)) != 0) {
                failed = "ibv_query_port";
                break;
            }
            port_read(v, ctx, out->name, p, &pattr, &out->ports[out->port_count++]);
        }
    }
    if (ctx != NULL)
        v->close_device(ctx);
    if (failed != NULL && *why_used < why_len) {
        int n = snprintf(why + *why_used, why_len - *why_used, "%s%s: %s: %s", *why_used ? "; " : "",
                         out->name, failed, strerror(err > 0 ? err : EIO));
        if (n > 0)
            *why_used = *why_used + (size_t)n < why_len ? *why_used + (size_t)n : why_len - 1;
    }
}

int wk_rdma_list(struct wk_rdma_device *devs, int max, char *why, size_t why_len)
{
    struct verbs v;
    if (why_len)
        why[0] = '\0';
    int rc = verbs_load(&v, why, why_len);
    if (rc < 0)
        return rc;
    int num = 0;
    errno = 0;
    struct ibv_device **list = v.get_device_list(&num);
    if (list == NULL) {
        /* No kernel support (no /sys/class/infiniband_verbs) reads as ENOSYS: no devices. */
        int err = errno;
        if (err != 0 && err != ENOSYS && err != ENOENT) {
            snprintf(why, why_len, "ibv_get_device_list: %s", strerror(err));
            dlclose(v.lib);
            return -err;
        }
        num = 0;
    }
    size_t why_used = 0;
    int found = 0;
    for (int i = 0; i < num && found < max; i++)
        device_read(&v, list[i], &devs[found++], why, why_len, &why_used);
    if (list != NULL)
        v.free_device_list(list);
    dlclose(v.lib);
    return found;
}

int wk_rdma_required(void)
{
    const char *transport = getenv("MPIJOB_TRANSPORT");
    const char *net = getenv("NCCL_NET");
    return (transport != NULL && strcasecmp(transport, "RDMA") == 0) ||
           (net != NULL && strcasecmp(net, "IB") == 0);
}

#define MAX_DEVICES 32

int wk_rdma_check(char *msg, size_t msg_len)
{
    struct wk_rdma_device *devs = calloc(2 * MAX_DEVICES, sizeof(*devs));
    char why[512] = "";
    if (devs == NULL) {
        snprintf(msg, msg_len, WK_RDMA_NO_DEVICE "out of memory listing devices");
        return -ENOMEM;
    }
    struct wk_rdma_device *sysfs = devs + MAX_DEVICES;
    struct wk_rdma_devdir devdir;
    struct wk_rdma_memlock memlock;
    const char *root = wk_rdma_host_root();
    int n = wk_rdma_list(devs, MAX_DEVICES, why, sizeof(why));
    int n_sysfs = wk_rdma_sysfs_list(root, sysfs, MAX_DEVICES);
    wk_rdma_devdir_check(root, &devdir);
    wk_rdma_memlock_read(&memlock);
    int rc = wk_rdma_verdict(devs, n, why, getenv("NCCL_IB_HCA"), sysfs, n_sysfs, &devdir, &memlock,
                             msg, msg_len);
    free(devs);
    return rc;
}
