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
    char ndev[16];      /* the net device a RoCE GID belongs to ("eth0"), "" when none or unknown */
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

/* 0 when at least one device has an ACTIVE port that NCCL_IB_HCA selects and memory
 * registration is not held to a too-low locked-memory limit. Else -ENODEV (-ENOMEM) with msg[]
 * starting "RDMA requested but no usable device: " and saying what was looked for and found
 * (library missing, no devices and why: /dev/infiniband missing or unusable; devices with no
 * active port), or -EPERM with msg[] starting "RDMA requested but memory registration would
 * fail: " (RLIMIT_MEMLOCK, and the fixes). wk_rdma_verdict (worker/rdma_host.h) decides. */
int wk_rdma_check(char *msg, size_t msg_len);

#endif
