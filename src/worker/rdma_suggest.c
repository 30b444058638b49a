#include "worker/rdma_suggest.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/buf.h"

#define IPV4_MAPPED_PREFIX "0000:0000:0000:0000:0000:ffff:"


static int port_active(const struct wk_rdma_port *p)
{
    return strcmp(p->state, "ACTIVE") == 0;
}

static int port_roce(const struct wk_rdma_port *p)
{
    return strcmp(p->link_layer, "Ethernet") == 0;
}

/* One entry of an NCCL_IB_HCA list, "name[:port]" of length len, against dev and port. */
static int entry_matches(const char *entry, size_t len, int exact, const char *dev, int port)
{
    const char *colon = memchr(entry, ':', len);
    size_t name_len = colon ? (size_t)(colon - entry) : len;
    if (name_len == 0)
        return 0;
    if (colon) {
        char digits[16];
        size_t dl = len - name_len - 1;
        if (dl == 0 || dl >= sizeof(digits))
            return 0;
        memcpy(digits, colon + 1, dl);
        digits[dl] = '\0';
        char *end;
        long want = strtol(digits, &end, 10);
        if (*end != '\0' || want != port)
            return 0;
    }
    if (exact)
        return strlen(dev) == name_len && strncmp(dev, entry, name_len) == 0;
    return strncmp(dev, entry, name_len) == 0;
}

int wk_rdma_hca_selected(const char *filter, const char *dev, int port)
{
    if (filter == NULL || filter[0] == '\0')
        return 1;
    int exclude = 0, exact = 0;
    if (*filter == '^') {
        exclude = 1;
        filter++;
    }
    if (*filter == '=') {
        exact = 1;
        filter++;
    }
    int matched = 0;
    for (const char *p = filter; *p != '\0' && !matched;) {
        size_t len = strcspn(p, ",");
        matched = entry_matches(p, len, exact, dev, port);
        p += len;
        if (*p == ',')
            p++;
    }
    return exclude ? !matched : matched;
}

int wk_rdma_gid_ipv4(const char *gid, char ipv4[16])
{
    size_t plen = strlen(IPV4_MAPPED_PREFIX);
    if (strncmp(gid, IPV4_MAPPED_PREFIX, plen) != 0 || strlen(gid) != plen + 9 || gid[plen + 4] != ':')
        return 0;
    unsigned a, b, c, d;
    if (sscanf(gid + plen, "%2x%2x:%2x%2x", &a, &b, &c, &d) != 4)
        return 0;
    snprintf(ipv4, 16, "%u.%u.%u.%u", a, b, c, d);
    return 1;
}

static int gid_zero(const char *gid)
{
    return strspn(gid, "0:") == strlen(gid);
}

/* The lowest RoCE v2 GID carrying an IPv4 address is what NCCL's own selection prefers (RoCE
 * version 2 and address family AF_INET by default). */
int wk_rdma_port_gid_index(const struct wk_rdma_port *p, int *mapped)
{
    int v2 = -1, v2_mapped = -1;
    char ip[16];
    for (int i = 0; i < p->gid_count && i < WK_RDMA_MAX_GIDS; i++) {
        const struct wk_rdma_gid *g = &p->gids[i];
        if (strcmp(g->type, "RoCE v2") != 0 || gid_zero(g->gid))
            continue;
        if (wk_rdma_gid_ipv4(g->gid, ip) && (v2_mapped < 0 || g->index < v2_mapped))
            v2_mapped = g->index;
        if (v2 < 0 || g->index < v2)
            v2 = g->index;
    }
    if (mapped != NULL)
        *mapped = v2_mapped >= 0;
    return v2_mapped >= 0 ? v2_mapped : v2;
}

void wk_rdma_port_gid_advice(const char *dev, const struct wk_rdma_port *p, char *out, size_t len)
{
    size_t used = 0;
    if (len)
        out[0] = '\0';
    if (!port_roce(p))
        return;
    int mapped = 0, index = wk_rdma_port_gid_index(p, &mapped);
    const struct wk_rdma_gid *g = NULL;
    for (int i = 0; i < p->gid_count && i < WK_RDMA_MAX_GIDS; i++)
        if (p->gids[i].index == index)
            g = &p->gids[i];
    if (g == NULL) {
        str_appendf(out, len, &used, "%s:%d has no RoCE v2 GID: %s", dev, p->port,
               p->gid_count ? "NCCL's default index 0 (RoCE v1) applies"
                            : "no GID is in use (has its net device an address?)");
        return;
    }
    char ip[16] = "";
    wk_rdma_gid_ipv4(g->gid, ip);
    str_appendf(out, len, &used, "NCCL_IB_GID_INDEX=%d fits %s:%d: RoCE v2", index, dev, p->port);
    if (mapped)
        str_appendf(out, len, &used, " with IPv4 %s", ip);
    else
        str_appendf(out, len, &used, ", but no RoCE v2 GID carries an IPv4 address");
    if (g->ndev[0])
        str_appendf(out, len, &used, " (%s)", g->ndev);
}

void wk_rdma_suggest(const struct wk_rdma_device *devs, int n, struct wk_rdma_suggestion *out)
{
    memset(out, 0, sizeof(*out));
    out->gid_index = -1;
    size_t hca_used = 0, reason_used = 0;
    int roce_ports = 0, disagree = 0, chosen_mapped = 0;
    char first_port[80] = "";
    for (int d = 0; d < n; d++) {
        for (int i = 0; i < devs[d].port_count && i < 8; i++) {
            const struct wk_rdma_port *p = &devs[d].ports[i];
            if (!port_active(p))
                continue;
            str_appendf(out->hca, sizeof(out->hca), &hca_used, "%s%s:%d", out->active_ports ? "," : "",
                   devs[d].name, p->port);
            out->active_ports++;
            if (!port_roce(p))
                continue;
            int mapped = 0, index = wk_rdma_port_gid_index(p, &mapped);
            if (roce_ports++ == 0) {
                out->gid_index = index;
                chosen_mapped = mapped;
                snprintf(first_port, sizeof(first_port), "%s:%d", devs[d].name, p->port);
            } else if (index != out->gid_index) {
                disagree = 1;
            }
        }
    }
    if (roce_ports == 0) {
        str_appendf(out->gid_reason, sizeof(out->gid_reason), &reason_used, "%s",
               out->active_ports ? "InfiniBand: no GID index needed"
                                 : "no ACTIVE port");
        return;
    }
    if (out->gid_index < 0)
        str_appendf(out->gid_reason, sizeof(out->gid_reason), &reason_used,
               "RoCE without a RoCE v2 GID: NCCL's default (index 0, RoCE v1) applies");
    else
        str_appendf(out->gid_reason, sizeof(out->gid_reason), &reason_used, "%s",
               chosen_mapped ? "the lowest RoCE v2 GID with an IPv4 address"
                             : "the lowest RoCE v2 GID (none carries an IPv4 address)");
    if (disagree)
        str_appendf(out->gid_reason, sizeof(out->gid_reason), &reason_used,
               "; taken from %s, other RoCE ports would choose another index and "
               "NCCL_IB_GID_INDEX is one value for all",
               first_port);
}

int wk_rdma_usable(const struct wk_rdma_device *devs, int n, const char *filter, char *msg,
                   size_t msg_len)
{
    size_t used = 0;
    int usable = 0;
    if (msg_len)
        msg[0] = '\0';
    /* The usable ports first; the description of the rest is only wanted when there are none. */
    for (int d = 0; d < n; d++)
        for (int i = 0; i < devs[d].port_count && i < 8; i++) {
            const struct wk_rdma_port *p = &devs[d].ports[i];
            if (port_active(p) && wk_rdma_hca_selected(filter, devs[d].name, p->port))
                str_appendf(msg, msg_len, &used, "%s%s:%d", usable++ ? "," : "", devs[d].name, p->port);
        }
    if (usable)
        return usable;
    int parts = 0;
    for (int d = 0; d < n; d++) {
        if (devs[d].port_count == 0) {
            str_appendf(msg, msg_len, &used, "%s%s has no port that could be queried", parts++ ? "; " : "",
                   devs[d].name);
            continue;
        }
        for (int i = 0; i < devs[d].port_count && i < 8; i++) {
            const struct wk_rdma_port *p = &devs[d].ports[i];
            if (port_active(p))
                str_appendf(msg, msg_len, &used, "%s%s port %d is ACTIVE but NCCL_IB_HCA=%s leaves it out",
                       parts++ ? "; " : "", devs[d].name, p->port, filter ? filter : "");
            else
                str_appendf(msg, msg_len, &used, "%s%s port %d is %s", parts++ ? "; " : "", devs[d].name,
                       p->port, p->state[0] ? p->state : "in an unknown state");
        }
    }
    return 0;
}
