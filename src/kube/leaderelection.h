/* Leader election on a coordination.k8s.io/v1 Lease, as client-go's leaderelection does it.
 *
 * A candidate tries to acquire the Lease every retry_period: it creates it when missing, or
 * takes it over when the holder's renewTime + leaseDurationSeconds has passed (by the local
 * clock, measured from when this candidate last saw the record change, so clock skew between
 * candidates does not matter). The leader renews every retry_period; when it cannot renew
 * within renew_deadline it gives up leadership at once (on_stopped_leading). Writes use the
 * Lease's resourceVersion, so two candidates never both win. On stop, a leader releases the
 * Lease (holderIdentity cleared, leaseDurationSeconds 1) so a standby takes over at once.
 *
 * As in client-go, every Lease request runs under a deadline: an acquire attempt must finish
 * within renew_deadline of its start, and a renew by the time leadership lapses (renew_deadline
 * after the start of the last successful renew). A request is cut off there, never retried
 * past it, so leadership ends at that moment even when the server holds the request.
 *
 * Fencing: a standby's clock starts when it sees the leader's last renew, which the leader
 * started earlier, so the leader's term (renew_deadline from that start) always ends before a
 * standby can take over (lease_duration from a later moment). With fenced_client set, the
 * elector keeps that client's write deadline (kube_client_set_write_deadline) at the end of
 * its term: no write of that client is sent, or still in flight, once leadership has lapsed,
 * whether or not on_stopped_leading has run yet. The client is fenced while not leading. */
#ifndef KUBE_LEADERELECTION_H
#define KUBE_LEADERELECTION_H

#include <stdbool.h>
#include <stdint.h>

#include "kube/client.h"
#include "util/clock.h"

struct leader_election_config {
    const char *lease_namespace;
    const char *lease_name;
    const char *identity;          /* unique per candidate, e.g. hostname_pid */
    uint64_t lease_duration_ms;    /* default 15000 */
    uint64_t renew_deadline_ms;    /* default 10000; must be < lease_duration */
    uint64_t retry_period_ms;      /* default 2000 */
    bool keep_lease_on_stop;       /* false (default): a stopping leader releases the Lease */
    /* Optional: the client of the work done while leading (not the elector's own client); its
     * writes are fenced except during a term (see above). Borrowed; must outlive the elector. */
    struct kube_client *fenced_client;
    /* Callbacks run on the elector's thread. */
    void (*on_started_leading)(void *ctx);
    void (*on_stopped_leading)(void *ctx);
    void (*on_new_leader)(void *ctx, const char *identity); /* optional */
    void *ctx;
    /* Optional: the clock the lease's timing runs on (terms, expiry, retries); NULL (default):
     * CLOCK_MONOTONIC. For tests, which move it by hand (util/clock.h). The deadlines handed to
     * the clients (a request's cut-off, fenced_client's write deadline) stay on CLOCK_MONOTONIC:
     * the time this clock says is left, from the moment they are set. Borrowed. */
    const struct clock_source *clock;
};

struct leader_elector;

/* Copies the config; the client is borrowed. Starts the elector thread. */
int leader_elector_start(struct kube_client *c, const struct leader_election_config *cfg,
                         struct leader_elector **out);
bool leader_elector_is_leader(struct leader_elector *le);
/* The current holder as last observed (caller frees), or NULL. */
char *leader_elector_holder(struct leader_elector *le);
/* Stops; releases the Lease if leading (unless keep_lease_on_stop); calls on_stopped_leading if it was
 * leading. Joins the thread and frees. */
void leader_elector_stop(struct leader_elector *le);

#endif
