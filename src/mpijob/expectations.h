/* What one controller remembers between reconciles that its caches cannot tell it yet.
 *
 *  - Creations it made that its informers have not shown (client-go's "expectations"): until
 *    the cache catches up, a missing object is not one that still needs creating.
 *  - The resourceVersion an MPIJob had when the controller wrote its status: while the cache
 *    still shows that version, a reconcile would work from the old status and its write would be
 *    refused with a Conflict; the write's own watch event brings the key back.
 *  - Pods whose deletion the API server accepted (by uid) while the cache may still show them
 *    as they were: until it shows them being deleted or gone, they are not counted as workers
 *    of the job (a resume right after a suspend must not find the old workers Ready).
 *  - Failed workers whose replacement is already counted in status (by uid), so that a deletion
 *    retried after an error does not count them twice.
 *  - The latest refusal of a create or update by the API server, per job, so that the next
 *    reconcile can say in status which object cannot be created and why.
 *  - The launcher pod whose log was read last, per job, so that a log without a summary (or
 *    one that could not be read) is read once, not at every reconcile.
 *
 * Entries other than refusals and logs read expire after EXPECTATION_TTL_MS and are swept, so nothing grows
 * with the number of jobs ever seen. Thread-safe. */
#ifndef MPIJOB_EXPECTATIONS_H
#define MPIJOB_EXPECTATIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kube/client.h"
#include "util/clock.h"

#define EXPECTATION_TTL_MS 30000 /* after this, a creation the cache never showed is retried */

struct expectations;
struct expectations *expectations_new(void);
void expectations_free(struct expectations *e);

/* Every function below accepts e == NULL: then nothing is remembered. */
void expect_created(struct expectations *e, const struct kube_resource *res, const char *ns, const char *name);
/* True while a creation of ours is on its way into the cache. */
bool expect_pending(struct expectations *e, const struct kube_resource *res, const char *ns, const char *name);
/* The cache shows the object: the expectation is met. */
void expect_seen(struct expectations *e, const struct kube_resource *res, const char *ns, const char *name);

/* Our status write replaced resourceVersion old_rv of MPIJob key ("ns/name"). */
void expect_status_written(struct expectations *e, const char *key, const char *old_rv);
/* True while the cache shows the MPIJob as it was before our last status write. */
bool expect_status_behind(struct expectations *e, const char *key, const char *rv);

/* The server accepted the deletion of the object with this uid. */
void expect_deleted(struct expectations *e, const char *uid);
/* True for EXPECTATION_TTL_MS after expect_deleted(uid): the cache's copy may predate it. */
bool expect_deletion_pending(struct expectations *e, const char *uid);

void expect_failure_counted(struct expectations *e, const char *uid);
bool expect_failure_is_counted(struct expectations *e, const char *uid);

/* A refusal: the object's kind and name and the server's message. */
struct refusal {
    char kind[64];
    char name[256];
    char message[1024];
};
/* Records a refusal, unless one for another object of the job stands: the first refusal is the
 * one status shows until that object is made (creations in parallel would otherwise take turns). */
void expect_refused(struct expectations *e, const char *job_key, const char *kind, const char *name,
                    const char *message);
/* The refusal is over when the same object was written since. */
void expect_accepted(struct expectations *e, const char *job_key, const char *kind, const char *name);
/* Copies the job's standing refusal into out; false when there is none. */
bool expect_refusal(struct expectations *e, const char *job_key, struct refusal *out);
/* The log of launcher pod pod_uid of the job was read (whatever it held). */
void expect_log_read(struct expectations *e, const char *job_key, const char *pod_uid);
/* The log of launcher pod pod_uid of the job was read and was empty: the number of empty reads
 * of that pod so far, this one included (1 the first time; 0 without memory). */
int expect_log_empty(struct expectations *e, const char *job_key, const char *pod_uid);
/* The number of empty reads of launcher pod pod_uid's log recorded for the job (0: none), and in
 * *since_ms how long ago the last one was (on the expectations' clock). */
int expect_log_empty_reads(struct expectations *e, const char *job_key, const char *pod_uid, uint64_t *since_ms);
/* Copies the uid of the launcher pod whose log was read last into out; false when none. */
bool expect_log_read_uid(struct expectations *e, const char *job_key, char *out, size_t len);
/* The job is gone: forget everything about it. */
void expect_forget_job(struct expectations *e, const char *job_key);

/* For tests of the sweep: a shorter TTL, the clock the TTL runs on (NULL: CLOCK_MONOTONIC; set
 * before the first entry, and the sweep's period starts again from it), and the number of
 * entries held. */
void expectations_set_ttl(struct expectations *e, uint64_t ttl_ms);
void expectations_set_clock(struct expectations *e, const struct clock_source *clock);
size_t expectations_size(struct expectations *e);

#endif
