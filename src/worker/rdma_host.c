/* sysfs, /dev/infiniband and RLIMIT_MEMLOCK, read under a root that tests replace.
 *
 * Why the three. libibverbs lists a device only when the kernel has it (sysfs) and its
 * /dev/infiniband/uverbsN exists; it opens that node when the device is opened; and every buffer
 * NCCL registers (ibv_reg_mr) is pinned and counted against RLIMIT_MEMLOCK unless the process
 * has CAP_IPC_LOCK (the kernel's ib_umem_get). A pod gets each wrong in its own way, and
 * libibverbs reports all of them as "no devices", an open that fails, or an ENOMEM deep inside
 * NCCL; here each is named with its fix. */
#include "worker/rdma_host.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/buf.h"
#include "worker/rdma_suggest.h"

#define SYSFS_IB "/sys/class/infiniband"
#define DEV_IB "/dev/infiniband"
#define LOOKED_FOR "looked for InfiniBand/RoCE devices through libibverbs.so.1: "
#define MAX_PORTS ((int)(sizeof(((struct wk_rdma_device *)0)->ports) / sizeof(struct wk_rdma_port)))
/* GID tables hold 128 to 256 entries on the usual adapters; reading stops at the first index
 * whose file is missing, and never goes past this. */
#define MAX_GID_TABLE 4096
#define CAP_IPC_LOCK_BIT 14


const char *wk_rdma_host_root(void)
{
    const char *root = getenv(WK_RDMA_ROOT_ENV);
    return root != NULL ? root : "";
}

/* ---- sysfs ------------------------------------------------------------------------------- */

/* The first line of the file at the printf-formatted path, without its newline: 0, or -errno
 * (sysfs answers EINVAL for the attributes of an unused GID). */
static int read_line(char *out, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int read_line(char *out, size_t len, const char *fmt, ...)
{
    char path[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(path, sizeof(path), fmt, ap);
    va_end(ap);
    out[0] = '\0';
    if (n < 0 || (size_t)n >= sizeof(path))
        return -ENAMETOOLONG;
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -errno;
    errno = 0;
    int rc = fgets(out, (int)len, f) == NULL && ferror(f) ? -(errno ? errno : EIO) : 0;
    fclose(f);
    if (rc < 0) {
        out[0] = '\0';
        return rc;
    }
    out[strcspn(out, "\n")] = '\0';
    return 0;
}

static int skip_dots(const struct dirent *e)
{
    return e->d_name[0] != '.';
}

static int compare_ints(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

void wk_rdma_sysfs_gid_attrs(const char *root, const char *dev, int port, int ethernet,
                             struct wk_rdma_gid *g)
{
    char line[64];
    g->type[0] = '\0';
    g->ndev[0] = '\0';
    if (!ethernet) {
        snprintf(g->type, sizeof(g->type), "IB");
        return;
    }
    /* The kernel writes "IB/RoCE v1" or "RoCE v2". */
    if (read_line(line, sizeof(line), "%s" SYSFS_IB "/%s/ports/%d/gid_attrs/types/%d", root, dev,
                  port, g->index) == 0) {
        if (strstr(line, "RoCE v2") != NULL)
            snprintf(g->type, sizeof(g->type), "RoCE v2");
        else if (strstr(line, "RoCE v1") != NULL)
            snprintf(g->type, sizeof(g->type), "RoCE v1");
    }
    if (read_line(line, sizeof(line), "%s" SYSFS_IB "/%s/ports/%d/gid_attrs/ndevs/%d", root, dev,
                  port, g->index) == 0)
        snprintf(g->ndev, sizeof(g->ndev), "%.*s", (int)sizeof(g->ndev) - 1, line);
}

/* "fe80:0000:0000:0000:0250:56ff:fe8a:1b2c" as sysfs writes it: 8 groups of 4 hex digits. Zero
 * when it is not one, or is all zeros (an unused entry). */
static int gid_in_use(const char *gid)
{
    if (strlen(gid) != 39)
        return 0;
    int nonzero = 0;
    for (int i = 0; i < 39; i++) {
        char c = gid[i];
        if (i % 5 == 4) {
            if (c != ':')
                return 0;
        } else if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')) {
            nonzero |= c != '0';
        } else {
            return 0;
        }
    }
    return nonzero;
}

static void sysfs_port(const char *root, const char *dev, int num, struct wk_rdma_port *p)
{
    char line[64];
    memset(p, 0, sizeof(*p));
    p->port = num;
    /* "4: ACTIVE" */
    if (read_line(line, sizeof(line), "%s" SYSFS_IB "/%s/ports/%d/state", root, dev, num) == 0) {
        const char *colon = strchr(line, ':');
        const char *name = colon ? colon + 1 : line;
        name += strspn(name, " ");
        snprintf(p->state, sizeof(p->state), "%.*s", (int)sizeof(p->state) - 1, name);
    }
    if (read_line(line, sizeof(line), "%s" SYSFS_IB "/%s/ports/%d/link_layer", root, dev, num) == 0)
        snprintf(p->link_layer, sizeof(p->link_layer), "%.*s", (int)sizeof(p->link_layer) - 1, line);
    int ethernet = strcmp(p->link_layer, "Ethernet") == 0;
    for (int i = 0; i < MAX_GID_TABLE && p->gid_count < WK_RDMA_MAX_GIDS; i++) {
        int rc = read_line(line, sizeof(line), "%s" SYSFS_IB "/%s/ports/%d/gids/%d", root, dev,
                           num, i);
        if (rc == -ENOENT)
            break;
        if (rc < 0 || !gid_in_use(line))
            continue;
        struct wk_rdma_gid *g = &p->gids[p->gid_count++];
        g->index = i;
        for (int c = 0; c < 39; c++)
            g->gid[c] = (char)(line[c] >= 'A' && line[c] <= 'F' ? line[c] - 'A' + 'a' : line[c]);
        g->gid[39] = '\0';
        wk_rdma_sysfs_gid_attrs(root, dev, num, ethernet, g);
    }
}

static void sysfs_device(const char *root, const char *name, struct wk_rdma_device *d)
{
    memset(d, 0, sizeof(*d));
    snprintf(d->name, sizeof(d->name), "%.*s", (int)sizeof(d->name) - 1, name);
    char path[1024];
    snprintf(path, sizeof(path), "%s" SYSFS_IB "/%s/ports", root, name);
    struct dirent **entries = NULL;
    int n = scandir(path, &entries, skip_dots, NULL);
    if (n < 0)
        return;
    int ports[64], count = 0;
    for (int i = 0; i < n; i++) {
        char *end;
        long num = strtol(entries[i]->d_name, &end, 10);
        if (*end == '\0' && num > 0 && num < 256 && count < 64)
            ports[count++] = (int)num;
        free(entries[i]);
    }
    free(entries);
    qsort(ports, (size_t)count, sizeof(int), compare_ints);
    for (int i = 0; i < count && d->port_count < MAX_PORTS; i++)
        sysfs_port(root, name, ports[i], &d->ports[d->port_count++]);
}

int wk_rdma_sysfs_list(const char *root, struct wk_rdma_device *devs, int max)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s" SYSFS_IB, root);
    struct dirent **entries = NULL;
    int n = scandir(path, &entries, skip_dots, alphasort);
    if (n < 0)
        return 0;
    int found = 0;
    for (int i = 0; i < n; i++) {
        if (found < max)
            sysfs_device(root, entries[i]->d_name, &devs[found++]);
        free(entries[i]);
    }
    free(entries);
    return found;
}

/* ---- /dev/infiniband --------------------------------------------------------------------- */

static int is_uverbs(const struct dirent *e)
{
    return strncmp(e->d_name, "uverbs", 6) == 0;
}

static const char *file_kind(mode_t mode)
{
    if (S_ISREG(mode))
        return "a regular file";
    if (S_ISDIR(mode))
        return "a directory";
    if (S_ISBLK(mode))
        return "a block device";
    if (S_ISFIFO(mode))
        return "a FIFO";
    if (S_ISSOCK(mode))
        return "a socket";
    return "not a device";
}

/* The causes are told apart because their fixes differ. */
void wk_rdma_uverbs_fault(const char *name, const struct stat *st, int open_errno, char *out,
                          size_t len)
{
    if (st != NULL) {
        snprintf(out, len,
                 "%.32s is %s, not a character device: something was made in place of the device "
                 "(a hostPath on a node without it makes an empty directory); run on a node that "
                 "has it, or let the RDMA device plugin's resource "
                 "(spec.networking.rdma.resourceName) pass the devices in",
                 name, file_kind(st->st_mode));
    } else if (open_errno == EPERM) {
        /* The device cgroup (v1 devices.allow, v2 BPF program) refuses with EPERM. */
        snprintf(out, len,
                 "%.32s: open: %s: the container's cgroup does not allow the device (a hostPath "
                 "mount of /dev/infiniband does not grant device access): request the RDMA "
                 "device plugin's resource (spec.networking.rdma.resourceName), which does",
                 name, strerror(open_errno));
    } else if (open_errno == EACCES) {
        snprintf(out, len,
                 "%.32s: open: %s: the device node's mode or group keeps this user out: run the "
                 "ranks as root or in the device's group (the pod's "
                 "securityContext.supplementalGroups), or have the node's udev rules make it 0666",
                 name, strerror(open_errno));
    } else {
        snprintf(out, len, "%.32s: open: %s", name, strerror(open_errno));
    }
}

void wk_rdma_devdir_check(const char *root, struct wk_rdma_devdir *out)
{
    char dir[1024];
    size_t used = 0;
    struct stat st;
    memset(out, 0, sizeof(*out));
    snprintf(dir, sizeof(dir), "%s" DEV_IB, root);
    if (stat(dir, &st) != 0 && errno == ENOENT) {
        out->status = WK_RDMA_DEVDIR_MISSING;
        snprintf(out->detail, sizeof(out->detail),
                 DEV_IB " does not exist here: nothing passed the RDMA devices in; mount the "
                 "host's " DEV_IB " (transport RDMA's spec.networking.rdma.devicePath, a hostPath "
                 "the operator adds) or request the RDMA device plugin's resource "
                 "(spec.networking.rdma.resourceName)");
        return;
    }
    struct dirent **entries = NULL;
    int n = scandir(dir, &entries, is_uverbs, alphasort);
    if (n < 0) {
        out->status = WK_RDMA_DEVDIR_UNUSABLE;
        snprintf(out->detail, sizeof(out->detail), DEV_IB " cannot be read: %s", strerror(errno));
        return;
    }
    if (n == 0) {
        out->status = WK_RDMA_DEVDIR_NO_UVERBS;
        snprintf(out->detail, sizeof(out->detail),
                 DEV_IB " exists but holds no uverbs device: this node has no RDMA device or its "
                 "ib_uverbs module is not loaded (a hostPath mount makes an empty directory where "
                 "the host has none); run on a node with RDMA, e.g. by requesting the RDMA device "
                 "plugin's resource (spec.networking.rdma.resourceName)");
        free(entries);
        return;
    }
    /* The usable ones first, then what is wrong with the others. */
    char faults[512] = "";
    size_t faults_used = 0;
    str_appendf(out->detail, sizeof(out->detail), &used, DEV_IB ":");
    for (int i = 0; i < n; i++) {
        const char *name = entries[i]->d_name;
        char path[1300], fault[512];
        snprintf(path, sizeof(path), "%s/%s", dir, name);
        out->uverbs++;
        if (stat(path, &st) != 0) {
            snprintf(fault, sizeof(fault), "%.32s: %s", name, strerror(errno));
        } else if (!S_ISCHR(st.st_mode)) {
            wk_rdma_uverbs_fault(name, &st, 0, fault, sizeof(fault));
        } else {
            int fd = open(path, O_RDWR | O_CLOEXEC);
            if (fd >= 0) {
                close(fd);
                str_appendf(out->detail, sizeof(out->detail), &used, "%s %s", out->usable++ ? "," : "",
                       name);
                continue;
            }
            wk_rdma_uverbs_fault(name, NULL, errno, fault, sizeof(fault));
        }
        str_appendf(faults, sizeof(faults), &faults_used, "%s%s", faults_used ? "; " : "", fault);
    }
    for (int i = 0; i < n; i++)
        free(entries[i]);
    free(entries);
    if (out->usable > 0) {
        out->status = WK_RDMA_DEVDIR_OK;
        str_appendf(out->detail, sizeof(out->detail), &used, " open%s read-write%s%s",
               out->usable == 1 ? "s" : "", faults_used ? "; " : "", faults);
        return;
    }
    out->status = WK_RDMA_DEVDIR_UNUSABLE;
    used = 0;
    str_appendf(out->detail, sizeof(out->detail), &used,
           DEV_IB " is there but none of its uverbs devices can be used: %s", faults);
}

/* ---- locked memory ----------------------------------------------------------------------- */

/* Why 64 MiB. NCCL's network transport registers its staging buffers with ibv_reg_mr: for each
 * channel and peer, the SIMPLE protocol's NCCL_BUFFSIZE (4 MiB by default) plus the LL and LL128
 * buffers, on the send and on the receive side. Without GPUDirect RDMA they live in host memory
 * and all of it is pinned against RLIMIT_MEMLOCK, so two channels to a ring's two neighbours
 * come to tens of MiB. Containers inherit their runtime's limit, often the kernel's default:
 * 64 KiB before Linux 5.16, 8 MiB since; both fail at the first connections. 64 MiB is the
 * least that holds a small ring; more channels and peers need more, which is why the usual
 * advice (rdma-core, the adapter vendors) is unlimited. */

static void format_limit(rlim_t v, char *out, size_t len)
{
    if (v == RLIM_INFINITY)
        snprintf(out, len, "unlimited");
    else if (v != 0 && v % (1ULL << 30) == 0)
        snprintf(out, len, "%llu GiB", (unsigned long long)(v >> 30));
    else if (v != 0 && v % (1ULL << 20) == 0)
        snprintf(out, len, "%llu MiB", (unsigned long long)(v >> 20));
    else if (v != 0 && v % 1024 == 0)
        snprintf(out, len, "%llu KiB", (unsigned long long)(v >> 10));
    else
        snprintf(out, len, "%llu bytes", (unsigned long long)v);
}

static int limit_enough(rlim_t v)
{
    return v == RLIM_INFINITY || (unsigned long long)v >= WK_RDMA_MEMLOCK_MIN;
}

void wk_rdma_memlock_assess(const struct rlimit *limit, int ipc_lock, struct wk_rdma_memlock *out)
{
    char soft[32], hard[32];
    size_t used = 0;
    memset(out, 0, sizeof(*out));
    out->limit = *limit;
    out->ipc_lock = ipc_lock != 0;
    format_limit(limit->rlim_cur, soft, sizeof(soft));
    format_limit(limit->rlim_max, hard, sizeof(hard));
    str_appendf(out->detail, sizeof(out->detail), &used, "RLIMIT_MEMLOCK soft %s, hard %s", soft, hard);
    if (limit_enough(limit->rlim_cur)) {
        out->ok = 1;
        str_appendf(out->detail, sizeof(out->detail), &used, ": enough for memory registration");
        return;
    }
    if (out->ipc_lock) {
        out->ok = 1;
        str_appendf(out->detail, sizeof(out->detail), &used,
               ": below 64 MiB, but CAP_IPC_LOCK is effective, so memory registration is not held "
               "to it");
        return;
    }
    str_appendf(out->detail, sizeof(out->detail), &used,
           ": too low for RDMA memory registration (below 64 MiB; NCCL pins tens of MiB per "
           "rank, unlimited is usual) and CAP_IPC_LOCK is not effective. Fix: add the capability "
           "IPC_LOCK to the container's securityContext (the operator adds it for transport RDMA; "
           "it only helps ranks that run as root)");
    if (limit_enough(limit->rlim_max)) {
        char raise[32] = "unlimited";
        if (limit->rlim_max != RLIM_INFINITY) /* ulimit -l counts KiB */
            snprintf(raise, sizeof(raise), "%llu", (unsigned long long)(limit->rlim_max >> 10));
        str_appendf(out->detail, sizeof(out->detail), &used,
               ", or run `ulimit -l %s` before the ranks' parent starts (in the workers' "
               "command, before sshd; the hard limit allows it)", raise);
    } else {
        str_appendf(out->detail, sizeof(out->detail), &used,
               ", or raise the container runtime's memlock default (`ulimit -l unlimited` "
               "needs a higher hard limit: LimitMEMLOCK=infinity in containerd's systemd unit, "
               "default_ulimits memlock=-1:-1 in CRI-O, --default-ulimit memlock=-1 for Docker)");
    }
}

/* Whether CAP_IPC_LOCK is in this process's effective set (/proc/self/status, CapEff). */
static int ipc_lock_effective(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    int found = 0;
    if (f == NULL)
        return 0;
    while (fgets(line, sizeof(line), f) != NULL) {
        unsigned long long caps;
        if (sscanf(line, "CapEff: %llx", &caps) == 1) {
            found = (caps >> CAP_IPC_LOCK_BIT) & 1;
            break;
        }
    }
    fclose(f);
    return found;
}

/* One limit of $MPIJOB_WORKER_MEMLOCK: bytes or "unlimited". */
static int parse_limit(const char *s, size_t len, rlim_t *out)
{
    if (len == strlen("unlimited") && strncmp(s, "unlimited", len) == 0) {
        *out = RLIM_INFINITY;
        return 0;
    }
    if (len == 0 || len > 20)
        return -EINVAL;
    char digits[24], *end;
    memcpy(digits, s, len);
    digits[len] = '\0';
    if (digits[0] < '0' || digits[0] > '9')
        return -EINVAL;
    errno = 0;
    unsigned long long v = strtoull(digits, &end, 10);
    if (*end != '\0' || errno != 0)
        return -EINVAL;
    *out = (rlim_t)v;
    return 0;
}

int wk_rdma_memlock_read(struct wk_rdma_memlock *out)
{
    const char *env = getenv(WK_RDMA_MEMLOCK_ENV);
    struct rlimit limit;
    if (env == NULL || env[0] == '\0') {
        if (getrlimit(RLIMIT_MEMLOCK, &limit) != 0) {
            int err = errno;
            memset(out, 0, sizeof(*out));
            snprintf(out->detail, sizeof(out->detail), "RLIMIT_MEMLOCK: getrlimit: %s",
                     strerror(err));
            return -err;
        }
        wk_rdma_memlock_assess(&limit, ipc_lock_effective(), out);
        return 0;
    }
    const char *colon = strchr(env, ':');
    const char *hard = colon ? colon + 1 : NULL;
    const char *cap = hard ? strchr(hard, ':') : NULL;
    size_t hard_len = hard ? (cap ? (size_t)(cap - hard) : strlen(hard)) : 0;
    int ipc_lock = 0;
    if (colon == NULL || parse_limit(env, (size_t)(colon - env), &limit.rlim_cur) < 0 ||
        parse_limit(hard, hard_len, &limit.rlim_max) < 0 ||
        (cap != NULL && !(ipc_lock = strcmp(cap + 1, "IPC_LOCK") == 0))) {
        memset(out, 0, sizeof(*out));
        snprintf(out->detail, sizeof(out->detail),
                 WK_RDMA_MEMLOCK_ENV "='%.200s': want SOFT:HARD[:IPC_LOCK], limits in bytes or "
                 "'unlimited'", env);
        return -EINVAL;
    }
    wk_rdma_memlock_assess(&limit, ipc_lock, out);
    return 0;
}

/* ---- the verdict ------------------------------------------------------------------------- */

int wk_rdma_verdict(const struct wk_rdma_device *devs, int n, const char *why, const char *hca,
                    const struct wk_rdma_device *sysfs, int n_sysfs,
                    const struct wk_rdma_devdir *devdir, const struct wk_rdma_memlock *memlock,
                    char *msg, size_t msg_len)
{
    size_t used = 0;
    if (msg_len)
        msg[0] = '\0';
    why = why ? why : "";
    if (n < 0) {
        str_appendf(msg, msg_len, &used, WK_RDMA_NO_DEVICE "%s", why);
        return -ENODEV;
    }
    if (n == 0) {
        str_appendf(msg, msg_len, &used, WK_RDMA_NO_DEVICE LOOKED_FOR "no devices found (");
        if (n_sysfs > 0) {
            str_appendf(msg, msg_len, &used, "the kernel has");
            for (int i = 0; i < n_sysfs; i++)
                str_appendf(msg, msg_len, &used, "%s %s", i ? "," : "", sysfs[i].name);
            str_appendf(msg, msg_len, &used, " in " SYSFS_IB "; ");
        } else {
            str_appendf(msg, msg_len, &used, "the kernel lists none in " SYSFS_IB "; ");
        }
        if (devdir->status != WK_RDMA_DEVDIR_OK)
            str_appendf(msg, msg_len, &used, "%s", devdir->detail);
        else
            str_appendf(msg, msg_len, &used, "%s; is the device's libibverbs provider installed "
                   "(ibverbs-providers)?", devdir->detail);
        str_appendf(msg, msg_len, &used, "; NCCL_IB_HCA=%s)", hca ? hca : "unset");
        return -ENODEV;
    }
    char found[768];
    if (wk_rdma_usable(devs, n, hca, found, sizeof(found)) == 0) {
        str_appendf(msg, msg_len, &used, WK_RDMA_NO_DEVICE LOOKED_FOR "%s%s%s", found, why[0] ? "; " : "",
               why);
        if (devdir->status != WK_RDMA_DEVDIR_OK)
            str_appendf(msg, msg_len, &used, "; %s", devdir->detail);
        return -ENODEV;
    }
    if (!memlock->ok) {
        str_appendf(msg, msg_len, &used, WK_RDMA_NO_MEMLOCK "%s", memlock->detail);
        return -EPERM;
    }
    str_appendf(msg, msg_len, &used, "RDMA ports usable by NCCL: %s", found);
    return 0;
}
