/* MPIJob status: conditions and replica counts (SPEC.md section 3), as pure functions on the
 * status JSON, plus what the controller reads off pods and the launcher Job.
 *
 * Condition rules, as the Kubeflow reference has them so that existing tooling reads ours:
 *  - one condition per type; setting one with the same status, reason and message changes
 *    nothing (no timestamp moves, so a steady job causes no writes);
 *  - the condition set last is moved to the end of the list, so the last entry is the latest
 *    state (the STATE printer column relies on that);
 *  - Running and Restarting exclude each other: setting one removes the other;
 *  - Succeeded or Failed set True turns Running False;
 *  - lastTransitionTime changes only when the status flips; lastUpdateTime on any change. */
#ifndef MPIJOB_STATUS_H
#define MPIJOB_STATUS_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>

#define MPIJOB_COND_CREATED "Created"
#define MPIJOB_COND_RUNNING "Running"
#define MPIJOB_COND_RESTARTING "Restarting"
#define MPIJOB_COND_SUCCEEDED "Succeeded"
#define MPIJOB_COND_FAILED "Failed"
#define MPIJOB_COND_SUSPENDED "Suspended"
#define MPIJOB_COND_TRANSPORT_MISMATCH "TransportMismatch"

/* Sets a condition in status.conditions (status is the MPIJob's "status" object; created when
 * missing). now is an RFC 3339 time. Returns 1 when anything changed, 0 when not, -ENOMEM. */
int mpijob_status_set_condition(cJSON *status, const char *type, bool value, const char *reason,
                                const char *message, const char *now);
/* The condition object of that type, or NULL. */
const cJSON *mpijob_status_condition(const cJSON *status, const char *type);
bool mpijob_status_is_true(const cJSON *status, const char *type);
/* Succeeded or Failed is True. */
bool mpijob_status_finished(const cJSON *status);

struct replica_counts {
    int active;    /* in phase Running (not Pending), as the reference operator counts */
    int succeeded;
    int failed;
    int ready;     /* Ready condition True */
};
/* Sets status.replicaStatuses.<role> to the counts. Returns 1 when changed, 0, or -ENOMEM. */
int mpijob_status_set_replicas(cJSON *status, const char *role, const struct replica_counts *c);

/* Equality of two status objects ignoring lastReconcileTime: the controller writes status only
 * when this is false. Either may be NULL (treated as {}). */
bool mpijob_status_equal(const cJSON *a, const cJSON *b);

/* ---- reading pods and Jobs ----------------------------------------------------------- */

enum pod_state { POD_PENDING, POD_RUNNING, POD_SUCCEEDED, POD_FAILED, POD_UNKNOWN };
enum pod_state pod_state_of(const cJSON *pod);
bool pod_is_ready(const cJSON *pod);
/* Why a pod failed, for Restarting and Failed messages: the pod's status.reason (Evicted, ...)
 * or the first terminated container's reason (OOMKilled, Error, ...) with its exit code and
 * message. Writes "reason" (e.g. "OOMKilled") and a human message. Returns true when the pod
 * was evicted (status.reason Evicted or a DisruptionTarget condition). */
bool pod_failure(const cJSON *pod, char *reason, size_t reason_len, char *message, size_t message_len);

/* A container of a Pending or Running pod that cannot start and will not without a change:
 * waiting with reason ErrImagePull or ImagePullBackOff (both given as "ImagePullBackOff", the
 * state a pull failure settles in), InvalidImageName, CreateContainerConfigError or
 * CreateContainerError. Returns that reason (a string literal) and writes "container C: <the
 * kubelet's message>" for the first such container (init containers first); NULL when none. */
const char *pod_waiting_problem(const cJSON *pod, char *message, size_t message_len);

/* status.state, the STATE column: the type of the latest condition that is True, other than
 * TransportMismatch (a remark on the run, shown by the USED column and the condition). */
void mpijob_status_set_state(cJSON *status);
/* Removes a condition; returns 1 when there was one, else 0. */
int mpijob_status_remove_condition(cJSON *status, const char *type);

/* A pod's runs as the launcher's retries see them. Under restartPolicy OnFailure the kubelet
 * restarts the container in the same pod, and the Job controller deletes that pod when the Job
 * fails, so the failure has to be read while the pod is there. */
struct pod_run {
    bool failed;            /* the pod Failed, or a container's current or last run exited non-zero */
    bool in_progress;       /* Pending or Running, no container down after a failed run */
    char finished_at[40];   /* when the failed run ended (RFC 3339), for picking the latest */
    char reason[128];       /* as pod_failure writes them */
    char message[2304];
};
void pod_run_of(const cJSON *pod, struct pod_run *out);
/* Records run (a failed run of launcher pod `pod`) as status.lastLauncherFailure, unless the one
 * recorded ended later. Returns 1 when changed, 0, or -ENOMEM. */
int mpijob_status_set_launcher_failure(cJSON *status, const char *pod, const struct pod_run *run);

/* A log tail or termination message made fit for a condition: blank lines and lines of only
 * separators dropped, trailing blanks trimmed, cut to len on a UTF-8 character boundary. */
void status_tidy_message(char *dst, size_t len, const char *src);

enum job_state { JOB_ACTIVE, JOB_COMPLETE, JOB_FAILED, JOB_SUSPENDED };
/* The batch/v1 Job's state from its conditions; on JOB_FAILED, the condition's reason
 * (BackoffLimitExceeded, DeadlineExceeded, ...) and message are written out. */
enum job_state job_state_of(const cJSON *job, char *reason, size_t reason_len, char *message,
                            size_t message_len);

#endif
