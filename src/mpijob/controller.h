/* The MPIJob controller: informers (MPIJobs, and the pods, services, configmaps, secrets and
 * jobs that carry the operator's label), a workqueue of job keys, and worker threads that run
 * reconcile_job. Events on a dependent map to its job through the job-name label. */
#ifndef MPIJOB_CONTROLLER_H
#define MPIJOB_CONTROLLER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kube/client.h"
#include "kube/events.h"
#include "mpijob/builders.h"
#include "mpijob/mpijob.h"
#include "util/clock.h"
#include "server/metrics.h"

struct controller_config {
    struct kube_client *client;        /* borrowed */
    const char *const *namespaces;     /* watched namespaces; n_namespaces 0: all */
    size_t n_namespaces;
    int threads;                       /* reconcile threads; default 2 */
    struct mpijob_options options;
    struct mpijob_limits limits;
    struct event_recorder *events;     /* borrowed; may be NULL */
    uint64_t sync_timeout_ms;          /* wait for the caches; default 60000 */
    struct metrics *metrics;           /* borrowed; may be NULL */
    /* The work queue's clock (its delays, the holds below and backoff); NULL: CLOCK_MONOTONIC.
     * Borrowed. For tests, which move it by hand. */
    const struct clock_source *clock;
};

struct controller;

/* The Kubernetes versions this operator is tested on, both tiers (README, "Compatibility"). */
#define MPIJOB_OLDEST_TESTED_MINOR 32
#define MPIJOB_NEWEST_TESTED_MINOR 36

/* Where a server's version stands against the tested range; words for a log line in msg. */
enum server_support { SERVER_TESTED, SERVER_OLDER, SERVER_NEWER, SERVER_UNKNOWN };
enum server_support controller_server_support(int major, int minor, char *msg, size_t msg_len);

/* What the server must serve before the controller starts, besides the MPIJob CRD: pods,
 * services, configmaps, secrets, events (v1), jobs (batch/v1), leases (coordination.k8s.io/v1)
 * when `leases`, and the PodGroups of options->gang_scheduler. */
struct server_needs {
    const struct mpijob_options *options;
    bool leases;
};

/* At start: logs the server's version (a warning below the oldest tested, naming it), then
 * checks that it serves every API in needs and the MPIJob CRD. 0; MPIJOB_ENOCRD or MPIJOB_ENOAPI
 * with err naming the API and what it is for; another negative code (transport, Unauthorized...)
 * when the questions could not be asked (err says so: the caller may retry). */
int controller_check_server(struct kube_client *client, const struct server_needs *needs, char *err,
                            size_t err_len);

/* Checks that the API server serves kubeflow.org/v2beta1 mpijobs (the CRD is installed).
 * 0; MPIJOB_ENOCRD with a message in err when it does not; another negative code (transport,
 * Unauthorized...) when the question could not be asked. */
int controller_check_crd(struct kube_client *client, char *err, size_t err_len);

/* Starts the informers, waits until their caches are synced, then the reconcile threads.
 * 0, KUBE_ETIMEOUT when the caches did not sync in time, or another negative code. */
int controller_start(const struct controller_config *cfg, struct controller **out);
/* Stops taking work, lets in-flight reconciles finish, stops the informers, frees. */
void controller_stop(struct controller *c);
/* Number of reconciles run so far (for tests and metrics). */
uint64_t controller_reconciles(struct controller *c);
/* Pod reports (a worker starting, turning Running or Ready) whose reconcile was held to answer
 * a burst of them at once, so far; counted once the hold is on the queue (for tests). */
uint64_t controller_pod_reports_held(struct controller *c);
/* Before a scrape: copies the gauges and totals kept elsewhere (workqueue depth, watch
 * restarts of every informer) into the metrics registry. */
void controller_update_metrics(struct controller *c);

#endif
