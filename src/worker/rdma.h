/* RDMA devices seen through rdma-core's libibverbs, loaded with dlopen (libibverbs.so.1), so the
 * worker runs where rdma-core is absent and says so.
 *
 * Used by `mpijob-worker probe` (the listing) and by train and bench before they start, when
 * the job requires RDMA: wk_rdma_required() is true when MPIJOB_TRANSPORT=RDMA or NCCL_NET=IB
 * (what the operator sets for spec.networking.transport: RDMA), or when the caller passes
 * --require rdma. */
#ifndef WORKER_RDMA_H
#define WORKER_RDMA_H

#include <stddef.h>

#define WK_RDMA_MAX_GIDS 16

struct wk_rdma_gid {
    int index;
    char gid[40];       /* "fe80:0000:...": the 16 bytes in 8 groups */
    char type[16];      /* "IB", "RoCE v1", "RoCE v2" or "" when unknown */
};

struct wk_rdma_port {
    int port;                 /* 1-based */
    char state[16];           /* "ACTIVE", "DOWN", "INIT", ... */
    char link_layer[16];      /* "InfiniBand" or "Ethernet" */
    int gid_count;
    struct wk_rdma_gid gids[WK_RDMA_MAX_GIDS];
};

struct wk_rdma_device {
    char name[64];            /* "mlx5_0", "vmw_pvrdma0" */
    int port_count;
    struct wk_rdma_port ports[8];
};

/* Lists the devices. Returns the number found (0..max) or a negative code with why[] set
 * ("libibverbs.so.1 could not be loaded: ..."). */
int wk_rdma_list(struct wk_rdma_device *devs, int max, char *why, size_t why_len);

/* Whether the environment says RDMA is required (MPIJOB_TRANSPORT=RDMA or NCCL_NET=IB). */
int wk_rdma_required(void);

/* 0 when at least one device has an ACTIVE port; else -ENODEV (-ENOMEM) and msg[] starts with
 * "RDMA requested but no usable device: " and says what was looked for and what was found
 * (library missing, no devices, devices with no active port). */
int wk_rdma_check(char *msg, size_t msg_len);

#endif
