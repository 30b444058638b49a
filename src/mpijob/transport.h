/* The RDMA/TCP switch (SPEC.md section 4): edits a launcher or worker pod template so that NCCL
 * takes the transport the job's `networking` asks for, and so that the ranks, which sshd starts
 * on the workers, get the same variables as the launcher. docs/internals/transport.md says why
 * each Open MPI launcher command is handled the way it is.
 *
 * Pure functions: no I/O. The template is `{"metadata":{...},"spec":{...}}`; only spec.volumes
 * and container 0 (env, command, args, volumeMounts, securityContext, resources) change. A value
 * the user wrote in the template is never overwritten: where it differs from what the transport
 * wants, the report says so and the template's value stays. */
#ifndef MPIJOB_TRANSPORT_H
#define MPIJOB_TRANSPORT_H

#include <cjson/cJSON.h>
#include <stddef.h>

#include "mpijob/mpijob.h"

enum pod_role { ROLE_LAUNCHER, ROLE_WORKER };

/* Name of the hostPath volume that carries networking.rdma.devicePath (type Directory). */
#define TRANSPORT_RDMA_VOLUME "rdma-devices"

/* What the controller turns into Warning events. The caller zero-initialises it, may pass it
 * to several transport_apply calls (lines accumulate) and frees it with transport_report_free.
 * Every string is malloc'd and owned by the report. */
struct transport_report {
    /* One sentence each, e.g. "NCCL_IB_DISABLE: the launcher template sets 0, transport TCP
     * wants 1; the template's value is kept". */
    char **conflicts;
    size_t n_conflicts;
    /* Variables in the launcher's env that Open MPI will not forward to the ranks, because the
     * launcher command forwards variables itself in a way the operator does not rewrite (a
     * shell line using -x, or its own mca_base_env_list). The user must add `-x NAME`. */
    char **unforwarded;
    size_t n_unforwarded;
    const char *unforwarded_reason; /* static text naming the cause; NULL when none */
};

/* Applies job->networking to pod_template for role, in place:
 *   Auto  nothing.
 *   TCP   NCCL_IB_DISABLE=1, NCCL_NET=Socket, NCCL_SOCKET_IFNAME when an interface is set.
 *   RDMA  NCCL_IB_DISABLE=0, NCCL_NET=IB, NCCL_IB_HCA, NCCL_IB_GID_INDEX, NCCL_NET_GDR_LEVEL=LOC
 *         (gpuDirect false), NCCL_IB_TC, NCCL_SOCKET_IFNAME, each when its field asks for it;
 *         devicePath mounted from the host, capability IPC_LOCK (never privileged), and one
 *         resourceName in limits and requests when set.
 * With an interface, TCP and RDMA also point MPI's own traffic at it (transport_env).
 * The variables go into container 0's env. For an Open MPI launcher they are also forwarded to
 * the ranks: by OMPI_MCA_mca_base_env_list, or by `-x NAME` after argv[0] when the command is
 * mpirun using -x; a shell line that uses -x is left alone and its variables are reported.
 * report may be NULL. Returns 0, -EINVAL when the template has no spec.containers[0] or a
 * field it edits has the wrong JSON type, or -ENOMEM; after an error the template may be
 * partly edited and should be discarded. */
int transport_apply(const struct mpijob *job, enum pod_role role, cJSON *pod_template,
                    struct transport_report *report);

void transport_report_free(struct transport_report *r);

/* "<reason>: add -x NAME -x NAME to it so that the ranks get them" for the unforwarded
 * variables, or NULL when there are none (or on ENOMEM). Caller frees. */
char *transport_unforwarded_message(const struct transport_report *r);

/* The variables transport_apply injects for job, in order, as a new Kubernetes env array
 * ([{"name":..,"value":..}], empty for Auto); NULL on ENOMEM. Caller deletes. The MPI interface
 * variables come last, when networking.interface is set: Open MPI
 * OMPI_MCA_btl_tcp_if_include, Intel I_MPI_HYDRA_IFACE, MPICH HYDRA_IFACE. */
cJSON *transport_env(const struct mpijob *job);

#endif
