/* The collective watchdog of `mpijob-worker train`: a rank that stops answering must not leave
 * every other rank waiting in its allreduce for ever, holding every GPU of the job.
 *
 *   wk_watchdog_start(timeout_s, &world, rank, size);   after MPI starts, on every rank
 *   wk_watchdog_backend(ops, ctx);                       once the backend runs (NULL before fini)
 *   wk_watchdog_enter("gradient allreduce", step);       before each wait in a collective
 *   wk_watchdog_leave();                                 after it
 *   wk_watchdog_stop();                                  on every rank, before MPI_Finalize
 *
 * A thread of its own watches the training thread. Once a wait has lasted timeout_s, the rank:
 *   1. calls the roll: a message to every other rank on a communicator of the watchdog's own,
 *      which the other ranks' watchdog threads answer (their training threads may be blocked in
 *      the same collective). Ranks that have not answered within the grace (a tenth of the
 *      timeout, 1 to 5 s) are the ranks not heard from: stopped, dead or cut off;
 *   2. prints one JSON line on stdout and one line for people on stderr, both naming the step,
 *      what it waited for (the bucket still outstanding, from the backend), the backend, the time
 *      waited and the ranks not heard from:
 *        {"event":"collective_timeout","rank":0,"step":12,"what":"gradient allreduce",
 *         "bucket":0,"backend":"mpi","waited_s":30.0,"timeout_s":30,"not_heard_from":[1]}
 *        mpijob-worker train: rank 0: collective timed out at step 12: the gradient allreduce
 *        (bucket 0, mpi backend) has not completed after 30.0 s (collective timeout 30 s); ranks
 *        not heard from: 1; aborting the job
 *   3. aborts the backend's communicator (NCCL: ncclCommAbort, as PyTorch's watchdog does), then
 *      the whole job with MPI_Abort (exit status 1), not only itself.
 * Every rank waiting in the collective fires at about the same time and says what it saw; the
 * first MPI_Abort ends the job.
 *
 * The timeout: --collective-timeout SECONDS, else $MPIJOB_WORKER_COLLECTIVE_TIMEOUT, else 600 s
 * (PyTorch's default for its process groups); 0 turns the watchdog off. Rank 0's value is used
 * on every rank (wk_watchdog_start agrees on it), so that no rank waits on a roll call that a
 * rank without a watchdog would never answer. */
#ifndef WORKER_WATCHDOG_H
#define WORKER_WATCHDOG_H

#include <stddef.h>

#include "worker/backend.h"

#define WK_COLLECTIVE_TIMEOUT_ENV "MPIJOB_WORKER_COLLECTIVE_TIMEOUT"
#define WK_COLLECTIVE_TIMEOUT_DEFAULT_S 600.0
#define WK_COLLECTIVE_TIMEOUT_MAX_S 604800.0 /* a week */

/* Parses a timeout in seconds: a decimal number in [0, WK_COLLECTIVE_TIMEOUT_MAX_S]; 0 is off.
 * Returns 0, or -EINVAL with err[] saying why (the caller names the flag or variable). */
int wk_watchdog_parse_timeout(const char *s, double *out, char *err, size_t err_len);

/* The step of a wait outside the training steps. */
#define WK_WATCHDOG_START -1LL
#define WK_WATCHDOG_END -2LL

/* What a rank that timed out reports. */
struct wk_watchdog_report {
    int rank;
    const char *what;
    long long step;       /* or WK_WATCHDOG_START, WK_WATCHDOG_END */
    int bucket;           /* -1: none outstanding, or not a bucket */
    const char *backend;  /* "mpi", "nccl"; NULL before the backend runs */
    double waited_s, timeout_s;
    const int *not_heard; /* ranks that did not answer the roll call */
    int not_heard_count;
    int roll_called;      /* 0: no roll call was made (one rank, or it could not be sent) */
};

/* The JSON line's object (caller deletes) and the line for people, without the prefix
 * "mpijob-worker train: " that wk_error adds. Pure: the tests check them in-process. */
struct cJSON *wk_watchdog_report_json(const struct wk_watchdog_report *r);
void wk_watchdog_report_text(const struct wk_watchdog_report *r, char *out, size_t out_len);

/* Collective: agrees on rank 0's timeout (written back to *timeout_s), duplicates the
 * communicator for the roll call and starts the thread. mpi_comm is an MPI_Comm by address.
 * With a timeout of 0 nothing starts and every call below does nothing. 0, or -errno with the
 * reason on stderr (the run then goes on without a watchdog). */
int wk_watchdog_start(double *timeout_s, const void *mpi_comm, int rank, int size);
void wk_watchdog_backend(const struct wk_ops *ops, struct wk_ctx *ctx);
/* what: a string that lives as long as the process. */
void wk_watchdog_enter(const char *what, long long step);
void wk_watchdog_leave(void);
void wk_watchdog_stop(void);

/* One MPI_Abort per process: Open MPI's is not safe to call from two threads at once (it crashed
 * in its help-message code when the training thread failed on the communicator the watchdog had
 * just aborted). Whoever is about to call MPI_Abort claims it first: 1 for the first caller, 0
 * for any later one, which must call wk_watchdog_park (sleeps until the process ends) instead. */
int wk_watchdog_claim_abort(void);
void wk_watchdog_park(void) __attribute__((noreturn));

#endif
