/* One worker process in an MPI job: MPI start-up and shut-down, rank / size / local rank, and
 * the choice of backend agreed by every rank.
 *
 *   struct wk_session s;
 *   if (wk_session_start(&s, &argc, &argv) < 0) return 1;
 *   if (wk_session_backend(&s, WK_BACKEND_AUTO, 1) < 0) { wk_session_end(&s, 1); return 1; }
 *   ... s.ops, s.ctx ...
 *   wk_session_end(&s, status);
 *
 * Backend choice (--backend auto|nccl|mpi):
 *   - nccl: load the plugin and init NCCL; any rank that cannot -> every rank fails, and rank 0
 *     prints each failing rank's reason.
 *   - mpi: the CPU backend, its GEMMs on `threads` OpenBLAS threads per rank (0: one).
 *   - auto: nccl when every rank can load the plugin and sees a GPU, else mpi on every rank;
 *     rank 0 says why it fell back. The ranks agree before any of them starts, so a job never
 *     runs half on NCCL and half on MPI.
 * For nccl, rank 0 makes the unique id and broadcasts it with MPI_Bcast; NCCL's own debug log
 * goes to a file of ours (wk_session.nccl_log) so the transport it used can be read back
 * (worker/nccl_log.h). */
#ifndef WORKER_SESSION_H
#define WORKER_SESSION_H

#include <stddef.h>

#include "worker/backend.h"

enum wk_backend_choice { WK_BACKEND_AUTO = 0, WK_BACKEND_NCCL, WK_BACKEND_MPI };

struct wk_session {
    int rank, size, local_rank, local_size;
    const struct wk_ops *ops;  /* after wk_session_backend */
    struct wk_ctx *ctx;
    char nccl_log[256];        /* NCCL debug file of this rank, "" for mpi */
    char fallback[1024];       /* why auto chose mpi, "" otherwise (rank 0's view of all ranks) */
    int mpi_started;
};

/* Parses "auto" | "nccl" | "mpi"; -EINVAL for anything else. */
int wk_backend_parse(const char *s);

/* The rank the launcher gave this process, read from its environment before MPI starts, so
 * that a bad command line is reported by one rank, not by all. 0 when not started by a known
 * launcher. */
int wk_launcher_rank(void);

/* MPI_Init_thread (MPI_THREAD_MULTIPLE when the backend's communication thread needs it),
 * ranks and local ranks. Fails (-EIO) with a message on stderr. */
int wk_session_start(struct wk_session *s, int *argc, char ***argv);
int wk_session_backend(struct wk_session *s, enum wk_backend_choice choice, int threads);
/* fini of the backend, a barrier, MPI_Finalize. Safe on a half-started session. status is the
 * exit status the process is about to return: should MPI_Finalize not return within
 * WK_FINALIZE_TIMEOUT_S seconds (MPIJOB_WORKER_FINALIZE_TIMEOUT overrides; 0: wait for ever),
 * the process says so on stderr and exits with it. By then every rank has finished its work,
 * and a launcher waiting for ever on the MPI library's own teardown would hold the job
 * Running for ever (Debian 12's MPICH over UCX's TCP transport hangs so now and then). */
#define WK_FINALIZE_TIMEOUT_S 30
void wk_session_end(struct wk_session *s, int status);
/* The transport the session's backend used: "mpi" for the MPI backend, else what NCCL's log
 * says (worker/nccl_log.h). Writes into out. */
const char *wk_session_transport(const struct wk_session *s, char *out, size_t out_len);
/* Where the ranks run and what transport settings reached them, as the ranks themselves see it
 * (collective: every rank calls it). On rank 0 an object
 *   {"hosts": {"<host name>": [ranks...], ...},
 *    "env": {"NCCL_NET": {"Socket": 4}, "NCCL_IB_DISABLE": {"1": 3, "(unset)": 1}, ...}}
 * with a variable of WK_PLACEMENT_ENV listed when one rank or more has it; NULL on the other
 * ranks and on failure. Ranks start under the workers' sshd, so these are what mpirun
 * forwarded, not the launcher's environment. Caller frees. */
#define WK_PLACEMENT_ENV                                                                           \
    "NCCL_NET", "NCCL_IB_DISABLE", "NCCL_SOCKET_IFNAME", "NCCL_IB_HCA", "NCCL_IB_GID_INDEX",        \
        "NCCL_NET_GDR_LEVEL", "NCCL_IB_TC", "MPIJOB_TRANSPORT"
struct cJSON;
struct cJSON *wk_session_placement(const struct wk_session *s);
/* Every rank calls it with its own status: returns 0 when all ranks passed 0, -ECANCELED when
 * one did not, -EIO when MPI fails. Used so that a failure on one rank (bad device, wrong weights) fails the job on all ranks. */
int wk_session_agree(struct wk_session *s, int status);
/* MPI_Abort with the given code after printing msg on stderr (rank-prefixed). */
void wk_session_abort(struct wk_session *s, int code, const char *msg) __attribute__((noreturn));

#endif
