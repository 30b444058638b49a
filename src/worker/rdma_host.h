/* What the host gives RDMA besides libibverbs, and the ways it falls short:
 *   - the kernel's view of the devices in sysfs (/sys/class/infiniband): ports, states, link
 *     layers and each port's GID table with the RoCE version and net device of every entry,
 *     readable even where libibverbs finds nothing;
 *   - /dev/infiniband: missing, present without a uverbs device, or with uverbs devices that
 *     cannot be opened (not character devices, file permissions, the cgroup's device access);
 *   - the locked-memory limit (RLIMIT_MEMLOCK) that memory registration is held to.
 * Each is read from a root that tests point at fakes, and judged by a function that takes what
 * was read, so every verdict is tested without the hardware. */
#ifndef WORKER_RDMA_HOST_H
#define WORKER_RDMA_HOST_H

#include <stddef.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include "worker/rdma.h"

/* A directory that stands for / where the worker reads /sys/class/infiniband and
 * /dev/infiniband; unset or empty: the real ones. For tests. */
#define WK_RDMA_ROOT_ENV "MPIJOB_WORKER_HOST_ROOT"
/* "SOFT:HARD[:IPC_LOCK]", each limit in bytes or "unlimited": the locked-memory limit and
 * capability the worker reports instead of its own. For tests. */
#define WK_RDMA_MEMLOCK_ENV "MPIJOB_WORKER_MEMLOCK"

/* $MPIJOB_WORKER_HOST_ROOT, or "" for the real /. */
const char *wk_rdma_host_root(void);

/* ---- sysfs ------------------------------------------------------------------------------- */

/* The devices under ROOT/sys/class/infiniband, sorted by name, each port with its state and
 * link layer and its GID table without the all-zero (unused) entries, at most WK_RDMA_MAX_GIDS
 * of them. Returns how many devices were filled (0..max); 0 also when the directory is missing. */
int wk_rdma_sysfs_list(const char *root, struct wk_rdma_device *devs, int max);

/* Sets g->type ("IB" on an InfiniBand port, else "RoCE v1" or "RoCE v2" from
 * gid_attrs/types/INDEX, "" when unreadable) and g->ndev (gid_attrs/ndevs/INDEX, "" when
 * none) for GID index g->index of DEV's port PORT. */
void wk_rdma_sysfs_gid_attrs(const char *root, const char *dev, int port, int ethernet,
                             struct wk_rdma_gid *g);

/* ---- /dev/infiniband --------------------------------------------------------------------- */

enum wk_rdma_devdir_status {
    WK_RDMA_DEVDIR_OK,        /* at least one uverbs device opens read-write */
    WK_RDMA_DEVDIR_MISSING,   /* no /dev/infiniband: nothing was mounted or passed in */
    WK_RDMA_DEVDIR_NO_UVERBS, /* /dev/infiniband without any uverbsN in it */
    WK_RDMA_DEVDIR_UNUSABLE,  /* uverbsN there, none of them opens */
};

struct wk_rdma_devdir {
    enum wk_rdma_devdir_status status;
    int uverbs;        /* uverbsN entries found */
    int usable;        /* of those, how many opened read-write */
    /* One line that starts with "/dev/infiniband", says what was found and, unless OK, the
     * likely fix. */
    char detail[640];
};

/* Why the uverbs node NAME cannot be used, with the likely fix, in out[0..len): st (when not
 * NULL) is its stat and it is not a character device; else open_errno is why open failed
 * (EPERM: the cgroup's device access; EACCES: the node's mode or group). */
void wk_rdma_uverbs_fault(const char *name, const struct stat *st, int open_errno, char *out,
                          size_t len);

/* Looks at ROOT/dev/infiniband as libibverbs would: each uverbsN must be a character device
 * that opens read-write (it is closed again at once). */
void wk_rdma_devdir_check(const char *root, struct wk_rdma_devdir *out);

/* ---- locked memory ----------------------------------------------------------------------- */

/* Below this soft limit memory registration is too constrained for NCCL (rdma_host.c says
 * why): 64 MiB, eight times the largest common default a container inherits (8 MiB, the
 * kernel's since Linux 5.16; 64 KiB before). */
#define WK_RDMA_MEMLOCK_MIN (64ULL << 20)

struct wk_rdma_memlock {
    struct rlimit limit;  /* RLIM_INFINITY: unlimited */
    int ipc_lock;         /* CAP_IPC_LOCK effective: the kernel does not hold registration to it */
    int ok;
    /* One line: "RLIMIT_MEMLOCK soft 8 MiB, hard 8 MiB: ..." with the verdict and, when too
     * low, the fixes. */
    char detail[640];
};

/* Judges limit (and whether CAP_IPC_LOCK is effective) for memory registration. */
void wk_rdma_memlock_assess(const struct rlimit *limit, int ipc_lock, struct wk_rdma_memlock *out);

/* This process's limit and capability ($MPIJOB_WORKER_MEMLOCK instead when set), judged.
 * Returns 0, or -EINVAL when the variable does not parse (out then says so, not ok). */
int wk_rdma_memlock_read(struct wk_rdma_memlock *out);

/* ---- the verdict ------------------------------------------------------------------------- */

/* Whether RDMA can be used, from what was read: devs[0..n) as libibverbs listed them (n < 0:
 * the listing failed and why says how), why (notes on devices that could not be opened, may be
 * ""), hca (NCCL_IB_HCA, may be NULL), the kernel's devices sysfs[0..n_sysfs), /dev/infiniband
 * and the locked-memory limit. Returns 0 with msg "RDMA ports usable by NCCL: mlx5_0:1";
 * -ENODEV with msg "RDMA requested but no usable device: ..." (what was looked for and found,
 * and the fix for /dev/infiniband when it is at fault); -EPERM with msg "RDMA requested but
 * memory registration would fail: ..." when ports are usable but the locked-memory limit is
 * too low. */
int wk_rdma_verdict(const struct wk_rdma_device *devs, int n, const char *why, const char *hca,
                    const struct wk_rdma_device *sysfs, int n_sysfs,
                    const struct wk_rdma_devdir *devdir, const struct wk_rdma_memlock *memlock,
                    char *msg, size_t msg_len);

#define WK_RDMA_NO_DEVICE "RDMA requested but no usable device: "
#define WK_RDMA_NO_MEMLOCK "RDMA requested but memory registration would fail: "

#endif
