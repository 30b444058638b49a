/* Hostfile and discover_hosts.sh for the launcher (SPEC.md section 2, item 2). */
#include "mpijob/hostfile.h"

#include <stdlib.h>
#include <string.h>

#include "util/buf.h"

/* The part every host name shares after the pod's own name: ".J.N.svc[.domain]". */
static int append_host_suffix(struct buf *b, const struct mpijob *job, const char *cluster_domain)
{
    int rc = buf_printf(b, ".%s.%s.svc", job->name, job->namespace);
    if (rc == 0 && cluster_domain && cluster_domain[0])
        rc = buf_printf(b, ".%s", cluster_domain);
    return rc;
}

/* The launcher is a batch Job's pod with a random name; its template sets hostname J-launcher
 * and subdomain J, so this is the name that resolves. */
static int append_launcher_host(struct buf *b, const struct mpijob *job, const char *cluster_domain)
{
    int rc = buf_printf(b, "%s-launcher", job->name);
    return rc < 0 ? rc : append_host_suffix(b, job, cluster_domain);
}

static int append_slots(struct buf *b, const struct mpijob *job)
{
    if (job->implementation == MPI_OPENMPI)
        return buf_printf(b, " slots=%d\n", job->slots_per_worker);
    return buf_printf(b, ":%d\n", job->slots_per_worker);
}

char *hostfile_host(const struct mpijob *job, const char *pod_name, const char *cluster_domain)
{
    struct buf b;
    buf_init(&b, 0);
    if (buf_append_str(&b, pod_name) < 0 || append_host_suffix(&b, job, cluster_domain) < 0) {
        buf_free(&b);
        return NULL;
    }
    return buf_steal(&b);
}

char *hostfile_render(const struct mpijob *job, const char *cluster_domain)
{
    struct buf b;
    int rc = 0;
    buf_init(&b, 0);
    if (job->run_launcher_as_worker) {
        rc = append_launcher_host(&b, job, cluster_domain);
        if (rc == 0)
            rc = append_slots(&b, job);
    }
    for (int i = 0; rc == 0 && i < job->worker.replicas; i++) {
        rc = buf_printf(&b, "%s-worker-%d", job->name, i);
        if (rc == 0)
            rc = append_host_suffix(&b, job, cluster_domain);
        if (rc == 0)
            rc = append_slots(&b, job);
    }
    if (rc < 0) {
        buf_free(&b);
        return NULL;
    }
    return buf_steal(&b);
}

struct ranked_pod {
    const char *name;
    long index; /* -1: not named J-worker-<index> */
};

long hostfile_worker_index(const char *job_name, const char *pod_name)
{
    static const char infix[] = "-worker-";
    size_t jl = strlen(job_name);
    if (strncmp(pod_name, job_name, jl) != 0 || strncmp(pod_name + jl, infix, sizeof(infix) - 1) != 0)
        return -1;
    const char *digits = pod_name + jl + sizeof(infix) - 1;
    size_t nd = strspn(digits, "0123456789");
    if (nd == 0 || nd > 9 || digits[nd] != '\0') /* 9 digits: no overflow in a long */
        return -1;
    return strtol(digits, NULL, 10);
}

static int compare_ranked(const void *a, const void *b)
{
    const struct ranked_pod *x = a, *y = b;
    if (x->index >= 0 && y->index >= 0 && x->index != y->index)
        return x->index < y->index ? -1 : 1;
    if ((x->index < 0) != (y->index < 0))
        return x->index < 0 ? 1 : -1;
    return strcmp(x->name, y->name);
}

char *hostfile_discover_hosts(const struct mpijob *job, const char *cluster_domain,
                              const char *const *running_workers, size_t n)
{
    struct buf b;
    char *out = NULL;
    struct ranked_pod *pods = calloc(n ? n : 1, sizeof(*pods));
    if (!pods)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        pods[i].name = running_workers[i];
        pods[i].index = hostfile_worker_index(job->name, running_workers[i]);
    }
    qsort(pods, n, sizeof(*pods), compare_ranked);

    buf_init(&b, 0);
    int rc = buf_append_str(&b, "#!/bin/sh\n");
    if (rc == 0 && job->run_launcher_as_worker) {
        rc = buf_append_str(&b, "echo ");
        if (rc == 0)
            rc = append_launcher_host(&b, job, cluster_domain);
        if (rc == 0)
            rc = buf_append_str(&b, "\n");
    }
    for (size_t i = 0; rc == 0 && i < n; i++) {
        rc = buf_printf(&b, "echo %s", pods[i].name);
        if (rc == 0)
            rc = append_host_suffix(&b, job, cluster_domain);
        if (rc == 0)
            rc = buf_append_str(&b, "\n");
    }
    if (rc == 0)
        out = buf_steal(&b);
    buf_free(&b);
    free(pods);
    return out;
}
