/* The launcher's view of the job's hosts (SPEC.md section 2, item 2): the MPI hostfile and the
 * discover_hosts.sh script Horovod elastic polls, both kept in ConfigMap `J-config`.
 *
 * Pure functions: no I/O, no cache. Each returns a malloc'd NUL-terminated string that the
 * caller frees, or NULL when memory runs out. cluster_domain may be NULL or "" (no suffix). */
#ifndef MPIJOB_HOSTFILE_H
#define MPIJOB_HOSTFILE_H

#include <stddef.h>

#include "mpijob/mpijob.h"

/* "<pod>.<J>.<N>.svc", plus ".<cluster_domain>" when one is given. Pods resolve under the
 * job's headless Service `J` because each pod sets hostname and subdomain J. */
char *hostfile_host(const struct mpijob *job, const char *pod_name, const char *cluster_domain);

/* One line per host, each ending in '\n': the launcher (`J-launcher`, the hostname its pod
 * template sets) first when run_launcher_as_worker, then `J-worker-0 .. n-1`.
 * OpenMPI: "<host> slots=<slots>"; Intel and MPICH: "<host>:<slots>". */
char *hostfile_render(const struct mpijob *job, const char *cluster_domain);

/* "#!/bin/sh\n" then "echo <host>\n" for the launcher when it is a worker, then for each pod
 * named in running_workers (n names; may be NULL when n is 0), ordered by worker index
 * numerically (worker-10 after worker-9). Names that are not `J-worker-<index>` come last, in
 * byte order. The input array is not modified. */
char *hostfile_discover_hosts(const struct mpijob *job, const char *cluster_domain,
                              const char *const *running_workers, size_t n);

/* The index in a worker pod's name "J-worker-<digits>" (at most 9 digits), or -1 when pod_name is
 * not one of job J's workers. */
long hostfile_worker_index(const char *job_name, const char *pod_name);

#endif
