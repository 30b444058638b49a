/* The reconcile of one MPIJob: read it and everything it owns from the informer caches (with
 * what this controller remembers, expectations.h), plan the new status and the requests
 * (plan.h), and execute the plan through the client, stopping at the first failure (SPEC.md
 * sections 2 and 3). Level-triggered: running it again at any moment, or after a restart,
 * converges on the same objects without duplicates.
 *
 * Handled now: creation in the order Service, ConfigMap, Secret, PodGroup, workers, launcher
 * (the launcher waits for Ready workers under WaitForWorkersReady); Created, Running,
 * Succeeded and Failed from the launcher Job; completionTime and cleanPodPolicy on finish;
 * InvalidSpec; foreign managedBy (no request at all); objects with our names that the job
 * does not control (untouched, ErrResourceExists). */
#ifndef MPIJOB_RECONCILE_H
#define MPIJOB_RECONCILE_H

#include <stdint.h>
#include <time.h>

#include "kube/client.h"
#include "kube/events.h"
#include "kube/informer.h"
#include "mpijob/builders.h"
#include "mpijob/expectations.h"
#include "mpijob/mpijob.h"
#include "server/metrics.h"

/* The informers of one resource: one per watched namespace, or one for all (namespace NULL). */
struct cache_set {
    struct informer **informers;
    const char **namespaces; /* NULL entry: every namespace */
    size_t count;
};
/* A new reference to ns/name, or NULL. */
struct kube_object *cache_get(const struct cache_set *set, const char *ns, const char *name);

struct reconcile_ctx {
    struct kube_client *client;
    struct cache_set mpijobs, pods, services, configmaps, secrets, jobs;
    struct cache_set podgroups; /* empty (count 0) without gang scheduling */
    struct cache_set workloads; /* empty unless --gang-scheduling workload */
    struct event_recorder *events; /* may be NULL */
    struct mpijob_options options;
    struct mpijob_limits limits;
    int create_parallelism;        /* worker pods created at once within one job; default 1 */
    struct expectations *expect;   /* may be NULL: then nothing is remembered */
    struct metrics *metrics;       /* may be NULL: jobs created/succeeded/failed by namespace */
    time_t (*now)(void);           /* NULL: time() */
};

struct reconcile_result {
    uint64_t requeue_after_ms; /* > 0: look again after this long even if nothing changes */
};

/* 0 when done (or nothing to do), a negative code when the key should be retried with backoff. */
int reconcile_job(struct reconcile_ctx *ctx, const char *key, struct reconcile_result *result);

#endif
