/* The MPIJob resource as the controller sees it: parsed, defaulted and validated
 * (SPEC.md sections 1 and 4). Everything in src/mpijob works from a struct mpijob, never from
 * the raw JSON, except the pod templates, which are kept as JSON and copied into the pods.
 *
 * Ownership: mpijob_parse allocates the struct and every string and tree in it; mpijob_free
 * releases them all. Nothing in it points into the object it was parsed from. */
#ifndef MPIJOB_MPIJOB_H
#define MPIJOB_MPIJOB_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>

#include "util/error.h"

#define MPIJOB_GROUP "kubeflow.org"
#define MPIJOB_KIND "MPIJob"
#define MPIJOB_CONTROLLER_NAME "kubeflow.org/mpi-operator" /* the managedBy value we own */

enum mpi_implementation { MPI_OPENMPI, MPI_INTEL, MPI_MPICH };
enum launcher_creation_policy { LAUNCHER_AT_STARTUP, LAUNCHER_WAIT_FOR_WORKERS_READY };
enum clean_pod_policy { CLEAN_POD_NONE, CLEAN_POD_RUNNING, CLEAN_POD_ALL };
enum transport { TRANSPORT_AUTO, TRANSPORT_TCP, TRANSPORT_RDMA };
enum restart_policy { RESTART_NEVER, RESTART_ON_FAILURE, RESTART_ALWAYS, RESTART_EXIT_CODE };

struct mpijob_rdma {
    char *device_path;   /* default "/dev/infiniband" */
    char *resource_name; /* NULL: none requested */
    char *hca;           /* NULL: NCCL_IB_HCA not set */
    int gid_index;       /* -1: unset */
    bool gpu_direct;     /* false: NCCL_NET_GDR_LEVEL=LOC */
    int traffic_class;   /* -1: unset */
};

/* The ports the operator picks a host-network job's sshd port from (SPEC.md section 4): above
 * the well-known and registered services nodes tend to run, below the NodePort range
 * (30000-32767) and Linux's ephemeral ports (32768-60999). */
#define MPIJOB_SSH_PORT_MIN 20000
#define MPIJOB_SSH_PORT_COUNT 10000

struct mpijob_networking {
    enum transport transport; /* default Auto */
    char *interface;          /* NULL: unset */
    /* spec.networking.hostNetwork, or a launcher or worker template saying hostNetwork: true:
     * every pod of the job on its node's network. */
    bool host_network;
    /* The sshd port of a host-network job: not in the spec; the reconciler sets it (from the
     * job's ConfigMap once it exists) before anything is built. 0: not chosen. */
    int ssh_port;
    struct mpijob_rdma rdma;
};

struct mpijob_scheduling {
    bool present;
    int min_available;        /* -1: unset (default workers + 1 when building a PodGroup) */
    char *queue;
    cJSON *min_resources;     /* object of resource name -> quantity, or NULL */
    char *priority_class;
    int schedule_timeout_s;   /* -1: unset */
};

/* spec.placement, our extension: where the gang may be placed. */
struct mpijob_placement {
    /* A node label key (topology.kubernetes.io/zone, a rack or switch label): every pod of the
     * gang in one domain of it, passed to the PodGroup's schedulingConstraints.topology under
     * --gang-scheduling workload. NULL: anywhere. */
    char *topology_key;
};

struct mpijob_run_policy {
    enum clean_pod_policy clean_pod_policy; /* default Running; legacy spec.cleanPodPolicy honoured */
    int backoff_limit;                      /* default 6 */
    long long active_deadline_s;            /* -1: unset */
    long long ttl_after_finished_s;         /* -1: unset */
    bool suspend;
    char *managed_by;                       /* NULL: ours */
    struct mpijob_scheduling scheduling;
};

struct mpijob_replica {
    int replicas;
    enum restart_policy restart_policy;
    cJSON *template; /* the pod template (metadata + spec), owned copy */
};

struct mpijob {
    char *api_version; /* "kubeflow.org/v2beta1" or "kubeflow.org/v1alpha2" */
    char *namespace;
    char *name;
    char *uid;
    long long generation;

    int slots_per_worker;          /* default 1 */
    bool run_launcher_as_worker;   /* default false */
    enum mpi_implementation implementation; /* default OpenMPI */
    char *ssh_auth_mount_path;     /* default "/root/.ssh" */
    enum launcher_creation_policy launcher_creation_policy; /* default AtStartup */
    struct mpijob_run_policy run_policy;
    struct mpijob_replica launcher;
    struct mpijob_replica worker;  /* worker.replicas == 0 when there is no Worker spec */
    struct mpijob_networking networking;
    struct mpijob_placement placement;
};

/* Every problem found in a job, one "field: what is wrong" line each, in field order. */
struct mpijob_problems {
    size_t count;
    char **items;
};
void mpijob_problems_free(struct mpijob_problems *p);
/* All problems joined with "; " (caller frees), for the InvalidSpec condition message. */
char *mpijob_problems_join(const struct mpijob_problems *p);

/* Limits that validation enforces beyond the schema (operator flags). */
struct mpijob_limits {
    int max_workers;      /* default 10000 */
};

/* Parses an MPIJob object (either served version), applies the defaults and validates every
 * field. Returns 0 with *out set and no problems; KUBE-style negative code on ENOMEM; or
 * MPIJOB_EINVALID with *out NULL and every problem listed in *problems (the caller frees them).
 * limits may be NULL (defaults). */
int mpijob_parse(const cJSON *obj, const struct mpijob_limits *limits, struct mpijob **out,
                 struct mpijob_problems *problems);
void mpijob_free(struct mpijob *job);

/* A non-negative Kubernetes quantity, as resource.ParseQuantity reads one: digits with at most
 * one '.', then nothing, a decimal SI suffix (n u m k M G T P E), a binary one (Ki .. Ei) or an
 * exponent (e3, E-2). "4", "0.5", "500m", "8Gi", "1e3", "1Ei". */
bool mpijob_quantity_valid(const char *s);

const char *mpi_implementation_name(enum mpi_implementation impl); /* "OpenMPI", "Intel", "MPICH" */
const char *transport_name(enum transport t);                      /* "Auto", "TCP", "RDMA" */
const char *clean_pod_policy_name(enum clean_pod_policy p);        /* "None", "Running", "All" */

/* Names of the objects of job J (SPEC.md section 2). Caller frees. */
char *mpijob_worker_name(const struct mpijob *job, int index); /* "J-worker-<index>" */
char *mpijob_launcher_name(const struct mpijob *job);          /* "J-launcher" */
char *mpijob_configmap_name(const struct mpijob *job);         /* "J-config" */
char *mpijob_secret_name(const struct mpijob *job);            /* "J-ssh" */

#endif
