/* The desired objects of one MPIJob (SPEC.md section 2): headless Service, ConfigMap with the
 * hostfile, ssh Secret, worker Pods, launcher batch/v1 Job and, with gang scheduling, a
 * PodGroup. Reconcile compares these with what the caches hold and creates what is missing.
 *
 * Pure functions: no I/O, no clock, no randomness (the ssh keys come in as an argument). Each
 * returns a new cJSON tree that the caller cJSON_Delete's, or NULL when memory runs out or the
 * job's pod template cannot be edited (a field the builder or the transport edits has the wrong
 * JSON type). The job is never modified.
 *
 * Every object carries one controller ownerReference to the MPIJob and the labels of
 * build_labels. Pods start from the user's template: its labels are kept (ours win on our
 * keys), and every field the operator does not set passes through untouched. An environment
 * variable or volume mount the template already has is never overwritten. builders.c says
 * why each field is set the way it is. */
#ifndef MPIJOB_BUILDERS_H
#define MPIJOB_BUILDERS_H

#include <cjson/cJSON.h>
#include <stddef.h>

#include "kube/client.h"
#include "mpijob/mpijob.h"
#include "mpijob/sshkeys.h"
#include "mpijob/transport.h"

/* Label keys and values shared with the informers' selectors and the reconciler. */
#define LABEL_OPERATOR_NAME "training.kubeflow.org/operator-name"
#define LABEL_JOB_NAME "training.kubeflow.org/job-name"
#define LABEL_JOB_ROLE "training.kubeflow.org/job-role"
#define LABEL_REPLICA_INDEX "training.kubeflow.org/replica-index"
#define DEFAULT_OPERATOR_NAME "mpijob-operator"
#define ROLE_NAME_LAUNCHER "launcher"
#define ROLE_NAME_WORKER "worker"

/* A host-network job's sshd port (SPEC.md section 4), on its ConfigMap and pods, and the
 * variable that hands it to the image's sshd and to the user's scripts. */
#define ANNOTATION_SSH_PORT "training.kubeflow.org/ssh-port"
#define ENV_SSH_PORT "MPIJOB_SSH_PORT"

/* Where the launcher finds the ConfigMap's files. */
#define MPI_CONFIG_MOUNT_PATH "/etc/mpi"
#define MPI_HOSTFILE_PATH MPI_CONFIG_MOUNT_PATH "/hostfile"

/* Gang scheduling: the group annotation (Volcano) and label (scheduler-plugins) on pods. */
#define GANG_SCHEDULER_VOLCANO "volcano"
/* kube-scheduler's own (Kubernetes 1.36, scheduling.k8s.io/v1alpha2): a Workload with one
 * PodGroupTemplate, a PodGroup made from it, and pods naming the PodGroup in
 * spec.schedulingGroup.podGroupName. */
#define GANG_SCHEDULER_WORKLOAD "workload"
#define WORKLOAD_GANG_TEMPLATE "gang"
#define VOLCANO_GROUP_ANNOTATION "scheduling.k8s.io/group-name"
#define SCHED_PLUGINS_GROUP_LABEL "scheduling.x-k8s.io/pod-group"

/* Operator flags that shape the objects. The strings are borrowed. */
struct mpijob_options {
    const char *cluster_domain; /* NULL or "": host names end in ".svc" */
    /* NULL or "": no gang scheduling; "volcano": Volcano; "workload": kube-scheduler's Workload
     * API; any other name: scheduler-plugins with that schedulerName. */
    const char *gang_scheduler;
    const char *operator_name; /* label training.kubeflow.org/operator-name; NULL: default */
};

extern const struct kube_resource MPIJOB_RESOURCE_V2BETA1; /* kubeflow.org/v2beta1 mpijobs */
extern const struct kube_resource PODGROUP_VOLCANO;        /* scheduling.volcano.sh/v1beta1 */
extern const struct kube_resource PODGROUP_SCHED_PLUGINS;  /* scheduling.x-k8s.io/v1alpha1 */
extern const struct kube_resource PODGROUP_WORKLOAD_API;   /* scheduling.k8s.io/v1alpha2 podgroups */
extern const struct kube_resource WORKLOADS;               /* scheduling.k8s.io/v1alpha2 workloads */

/* The operator's labels: operator-name, job-name, then job-role when role is given ("launcher"
 * or "worker") and replica-index when replica_index >= 0. o may be NULL. */
cJSON *build_labels(const struct mpijob *job, const struct mpijob_options *o, const char *role,
                    int replica_index);

/* One ownerReferences item: apiVersion kubeflow.org/v2beta1 (the storage version, whichever
 * version the job was written in), kind MPIJob, name, uid, controller and blockOwnerDeletion. */
cJSON *build_owner_reference(const struct mpijob *job);

/* Headless Service J selecting the job's pods (operator-name and job-name), with
 * publishNotReadyAddresses when the launcher is a worker: mpirun on the launcher must resolve
 * its own name before the pod is Ready. */
cJSON *build_service(const struct mpijob *job, const struct mpijob_options *o);

/* ConfigMap J-config with `hostfile` and `discover_hosts.sh` (hostfile.h); running_workers
 * are the names of the worker pods now Running (n of them; NULL when n is 0). */
cJSON *build_configmap(const struct mpijob *job, const struct mpijob_options *o,
                       const char *const *running_workers, size_t n);

/* The port in obj's ssh-port annotation (a ConfigMap or pod built for a host-network job), or 0
 * when it has none or it is not a port. */
int mpijob_ssh_port_of(const cJSON *obj);

/* Secret J-ssh of type kubernetes.io/ssh-auth: `ssh-privatekey` and `ssh-publickey`,
 * base64-encoded in data. */
cJSON *build_secret(const struct mpijob *job, const struct mpijob_options *o,
                    const struct ssh_keypair *keys);

/* Worker Pod J-worker-<index> from the Worker template, in *out. report (may be NULL) collects
 * the transport's conflicts; see transport.h. 0; MPIJOB_EINVALID when the template cannot be
 * made into a pod (no Worker template, a field of a type the operator cannot edit: env that is
 * not a list, say), which no retry will change; KUBE_ENOMEM. */
int build_worker_pod(const struct mpijob *job, const struct mpijob_options *o, int index,
                     struct transport_report *report, cJSON **out);

/* batch/v1 Job J-launcher from the Launcher template, in *out; report and codes as for workers. */
int build_launcher_job(const struct mpijob *job, const struct mpijob_options *o,
                       struct transport_report *report, cJSON **out);

/* PodGroup J for the gang scheduler of o, or NULL when there is none (and on ENOMEM: call
 * podgroup_resource first to tell the two apart). */
cJSON *build_podgroup(const struct mpijob *job, const struct mpijob_options *o);

/* The PodGroup resource of o's gang scheduler, or NULL when there is none. */
const struct kube_resource *podgroup_resource(const struct mpijob_options *o);

/* Under --gang-scheduling workload: Workload J (controllerRef the MPIJob, one PodGroupTemplate
 * "gang" with the gang's minCount, topology and priority class), the object the PodGroup's
 * podGroupTemplateRef names. NULL under any other gang scheduler, and on ENOMEM. */
cJSON *build_workload(const struct mpijob *job, const struct mpijob_options *o);
/* WORKLOADS under --gang-scheduling workload, else NULL. */
const struct kube_resource *workload_resource(const struct mpijob_options *o);

/* The gang's size: schedulingPolicy.minAvailable when set, else every worker and the
 * launcher. Under --gang-scheduling workload with launcherCreationPolicy WaitForWorkersReady the
 * launcher cannot be in the gang (it is created once the workers run, and kube-scheduler holds a
 * gang until minCount of its pods exist): the gang is the workers, and minAvailable is capped at
 * their number. */
int mpijob_gang_size(const struct mpijob *job, const struct mpijob_options *o);
/* Whether the launcher's pod joins the gang: always under Volcano and scheduler-plugins; under
 * the Workload API only when the launcher is created with the workers (AtStartup). */
bool mpijob_launcher_in_gang(const struct mpijob *job, const struct mpijob_options *o);

#endif
