/* The planner: what one reconcile of a valid MPIJob should do, decided without a request.
 *
 * plan_job takes the parsed job, its status as cached, the objects the caches show under the
 * job's names (and what the controller remembers about them: creations on their way, counted
 * failures, a standing refusal) and the time, and returns the new status and an ordered list of
 * actions. The executor (reconcile.c) applies the list through the client and stops at the first
 * failure. Nothing here sends a request, reads a cache or a clock, so every SPEC behaviour is a
 * table test (tests/unit/test_plan.c) of (input) -> (status, actions).
 *
 * The order of a plan:
 *   1. the status write, when the status changed (it was decided from the caches alone);
 *   2. the events that announce what that status says (MPIJobCreated, MPIJobRunning, ...): after
 *      the write, so a write lost to a Conflict announces nothing twice;
 *   3. what that status decided: deleting failed workers (counted in status.workerRestarts), the
 *      launcher after a deadline, the pods under cleanPodPolicy, the MPIJob after its TTL;
 *   4. the objects the spec wants: Service, ConfigMap, Secret, PodGroup, workers (deleting those
 *      at indexes >= replicas, creating the missing ones), then the launcher Job.
 * A step 4 that the server refuses becomes a FailedCreate event (executor) and, on the next
 * reconcile, a ReplicaFailure condition naming it (planner), written before the retry. */
#ifndef MPIJOB_PLAN_H
#define MPIJOB_PLAN_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "kube/client.h"
#include "kube/object.h"
#include "mpijob/builders.h"
#include "mpijob/expectations.h"
#include "mpijob/mpijob.h"
#include "mpijob/summary.h"

#define MPIJOB_COND_REPLICA_FAILURE "ReplicaFailure"

/* One object the job wants, as the cache shows it. */
struct plan_object {
    struct kube_object *obj; /* under the job's name, or NULL (borrowed) */
    bool pending;            /* missing, but our creation of it is on its way into the cache */
    bool going;              /* obj is there, but the server accepted our deletion of it (by uid)
                                and the cache does not show that yet */
};

/* What reading an ended launcher pod's log gave (reconcile.c; plan_summary_source says which
 * pod). */
struct summary_read {
    const char *pod;      /* the launcher pod whose log was read */
    bool unreadable;      /* the server did not give the log: message has its answer */
    enum summary_found found;
    struct launcher_summary summary; /* SUMMARY_FOUND */
    char message[512];    /* unreadable: the server's message; SUMMARY_BROKEN: what is wrong */
    unsigned retry_after_ms; /* the log was empty: read it again after this (the planner says nothing) */
};

struct plan_input {
    const struct mpijob *job;
    const cJSON *status;  /* as cached; may be NULL */
    long long generation; /* metadata.generation */
    const struct mpijob_options *options;
    time_t now;
    struct plan_object service, configmap, secret, podgroup, workload, launcher;
    bool gang;                   /* PodGroups are watched (gang scheduling configured) */
    bool workloads;              /* Workloads are watched too (--gang-scheduling workload) */
    struct plan_object *workers; /* [job->worker.replicas], by index */
    bool *worker_counted;        /* [replicas]: a Failed worker already counted in status */
    struct kube_object **owned_pods; /* every pod the MPIJob controls (workers at any index) */
    size_t n_owned_pods;
    const bool *owned_going;         /* [n_owned_pods] or NULL: as plan_object.going */
    struct kube_object **launcher_pods; /* the pods the launcher Job controls */
    size_t n_launcher_pods;
    const struct refusal *refusal; /* the standing refusal of this job, or NULL */
    const struct summary_read *summary; /* a launcher log read for this reconcile, or NULL */
};

enum action_type {
    ACTION_WRITE_STATUS, /* PUT .../status of the MPIJob with the plan's status */
    ACTION_EVENT,        /* an event on the MPIJob */
    ACTION_CREATE,
    ACTION_REPLACE,
    ACTION_PATCH,
    ACTION_DELETE,
    ACTION_DELETE_COLLECTION, /* the objects of resource that selector (and field_selector) select */
};

struct action {
    enum action_type type;
    const struct kube_resource *resource; /* all but WRITE_STATUS and EVENT */
    char *name;
    cJSON *object;                  /* CREATE, REPLACE */
    char *patch;                    /* PATCH */
    enum kube_patch_type patch_type;
    const char *subresource;        /* PATCH: NULL or "status" */
    char *uid;                      /* DELETE: precondition, or NULL */
    const char *propagation;        /* DELETE: "Background" or NULL */
    bool count_failure;             /* DELETE of a failed worker: counted in status (uid) */
    char *selector;                 /* DELETE_COLLECTION: a label selector, never empty */
    const char *field_selector;     /* DELETE_COLLECTION: a string literal, or NULL */
    bool alone;                     /* CREATE that must follow everything before it and precede
                                       everything after it (the PodGroup, the launcher); other
                                       consecutive creates have no order among them */
    const char *event_type, *reason; /* EVENT: string literals */
    char *message;                  /* EVENT */
};

struct plan {
    cJSON *status; /* the new status (owned) */
    struct action *actions;
    size_t n, cap;
    uint64_t requeue_after_ms; /* > 0: look again after this long even if nothing changes */
    bool nomem;                /* building the plan ran out of memory: apply nothing */
};

/* The launcher pod whose log should be read before planning: of the launcher pods that ended
 * (Succeeded or Failed), the one that ended last, unless status.launcherSummary came from it or
 * this controller read it already (read_uid, the last pod it read for the job; may be NULL), or
 * it ended more than LAUNCHER_LOG_MAX_AGE_S before in->now. NULL when there is none. The summary is read once per pod: what the log holds does not change
 * once its container has ended (an empty log excepted: reconcile.c reads it again, summary.h). */
const struct kube_object *plan_summary_source(const struct plan_input *in, const char *read_uid);

/* 0, or KUBE_ENOMEM (out is then freed). */
int plan_job(const struct plan_input *in, struct plan *out);
/* The plan for a job whose spec cannot run (mpijob_parse said MPIJOB_EINVALID): Failed with
 * reason InvalidSpec and message naming every problem, and its Warning event, once. status and
 * generation are the MPIJob's as cached. 0, or KUBE_ENOMEM. */
int plan_invalid(const cJSON *status, long long generation, time_t now, const char *message, struct plan *out);
void plan_free(struct plan *p);

/* Whether the plan creates or updates that object. */
bool plan_writes(const struct plan *p, const char *kind, const char *name);

/* One line per action, for logs and table tests: "write status", "event Normal MPIJobCreated",
 * "create Service j", "create Job j-launcher alone", "replace ConfigMap j-config",
 * "patch Job j-launcher spec", "patch Job j-launcher status", "delete Pod j-worker-2",
 * "delete Pods -l SELECTOR [--field-selector FIELDS]". */
void action_describe(const struct action *a, char *buf, size_t len);

#endif
