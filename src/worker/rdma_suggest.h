/* What a list of RDMA devices means for NCCL: which ports it can use, and the NCCL_IB_HCA and
 * NCCL_IB_GID_INDEX values to suggest. Pure functions over struct wk_rdma_device (worker/rdma.h),
 * so they are tested with fabricated devices; worker/rdma.c and `mpijob-worker probe` use them
 * on the real listing. */
#ifndef WORKER_RDMA_SUGGEST_H
#define WORKER_RDMA_SUGGEST_H

#include <stddef.h>

#include "worker/rdma.h"

struct wk_rdma_suggestion {
    /* NCCL_IB_HCA: the ACTIVE ports as "dev:port" joined by commas ("mlx5_0:1,mlx5_1:1");
     * "" when no port is ACTIVE. */
    char hca[512];
    /* NCCL_IB_GID_INDEX for RoCE ports, or -1 when none applies: InfiniBand only, or RoCE ports
     * with no RoCE v2 GID (NCCL's default, index 0, is then right). */
    int gid_index;
    /* How gid_index was chosen, one line for a person. */
    char gid_reason[256];
    int active_ports;
};

/* Whether NCCL would use port `port` of device `dev` under the NCCL_IB_HCA value `filter`
 * (NULL or "" selects everything). NCCL's syntax: entries "name[:port]" joined by commas, a name
 * matching as a prefix ("mlx5" selects mlx5_0 and mlx5_1) unless the list starts with '=' (exact
 * names); a leading '^' (before any '=') turns the list into an exclusion list. */
int wk_rdma_hca_selected(const char *filter, const char *dev, int port);

/* Fills out from devs[0..n). */
void wk_rdma_suggest(const struct wk_rdma_device *devs, int n, struct wk_rdma_suggestion *out);

/* The number of ACTIVE ports that filter (NCCL_IB_HCA, may be NULL) selects. When there is none,
 * msg[] says what was found instead, e.g. "mlx5_0 port 1 is DOWN; mlx5_1 port 1 is ACTIVE but
 * NCCL_IB_HCA=mlx5_0 leaves it out"; otherwise it lists the usable ports ("mlx5_0:1"). */
int wk_rdma_usable(const struct wk_rdma_device *devs, int n, const char *filter, char *msg,
                   size_t msg_len);

/* The NCCL_IB_GID_INDEX that fits one RoCE port: the lowest RoCE v2 GID with an IPv4-mapped
 * address (::ffff:a.b.c.d), else the lowest RoCE v2 GID; all-zero GIDs are skipped. -1 when
 * there is none. *mapped (may be NULL) is 1 when an IPv4 address decided. */
int wk_rdma_port_gid_index(const struct wk_rdma_port *p, int *mapped);

/* One line for a person on port p of device dev: "NCCL_IB_GID_INDEX=3 fits mlx5_0:1: RoCE v2
 * with IPv4 10.0.0.7 (eth0)", or why no index fits; "" for a port that is not RoCE. */
void wk_rdma_port_gid_advice(const char *dev, const struct wk_rdma_port *p, char *out, size_t len);

/* 1 when gid ("0000:...:ffff:0a00:0001") is an IPv4-mapped address; then ipv4[] (16 bytes)
 * holds its dotted form. */
int wk_rdma_gid_ipv4(const char *gid, char ipv4[16]);

#endif
