/* The training summary a launcher's log holds, and what the operator makes of it.
 *
 * `mpijob-worker train` ends with one JSON line on rank 0's stdout, which mpirun passes to the
 * launcher's log (docs/internals/worker.md):
 *   {"event":"summary","ranks":4,"backend":"nccl","device":"...","transport":"IB",
 *    "samples_per_sec":...,"step_ms":...,"exposed_comm_ms":...,"weights_identical":true,...}
 * When a launcher pod ends, the reconciler reads the end of its log once (LAUNCHER_LOG_TAIL_LINES
 * lines, at most LAUNCHER_LOG_LIMIT_BYTES) and hands the text to summary_parse; the planner puts
 * what it found in status.launcherSummary (summary_to_status) and compares the transport used
 * with the one asked for (summary_mismatch). Everything here is pure. */
#ifndef MPIJOB_SUMMARY_H
#define MPIJOB_SUMMARY_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>

#include "mpijob/mpijob.h"

#define LAUNCHER_LOG_TAIL_LINES 200
#define LAUNCHER_LOG_LIMIT_BYTES 65536
/* When the first read came back cut at the byte limit without a summary (long lines), one more
 * read of this many lines, for a summary that is the log's last line or nearly. */
#define LAUNCHER_LOG_RETRY_TAIL_LINES 5

/* An empty log of a launcher that has ended is read again, LAUNCHER_LOG_EMPTY_RETRY_MS times the
 * number of empty reads later, until it has been read LAUNCHER_LOG_EMPTY_READS times: the pod's
 * status can reach the operator before its node serves the last of the container's output (mpirun
 * always prints something; a launcher that prints nothing costs two more reads). */
#define LAUNCHER_LOG_EMPTY_READS 3
#define LAUNCHER_LOG_EMPTY_RETRY_MS 2000

/* A launcher pod that ended longer ago than this when the operator first sees it is not read. */
#define LAUNCHER_LOG_MAX_AGE_S 3600

/* The transport a one-rank NCCL run reports: it connected to nobody. */
#define SUMMARY_TRANSPORT_ONE_RANK "none (one rank)"

struct launcher_summary {
    char transport[64]; /* NCCL's network (IB, Socket, ...), P2P, SHM, unknown, or mpi */
    char backend[16];   /* nccl or mpi */
    char device[96];
    int ranks;
    double samples_per_sec, step_ms, exposed_comm_ms, loss_first, loss_last;
    bool weights_identical;
};

enum summary_found {
    SUMMARY_NONE,   /* no summary line: the launcher does not run mpijob-worker train */
    SUMMARY_FOUND,
    SUMMARY_BROKEN, /* a line that looks like the summary but does not parse, or lacks a field */
};

/* The last summary line in text[0..len) (lines may carry a prefix such as mpirun's
 * --tag-output; the JSON starts at the first '{'). On SUMMARY_BROKEN, why says what is wrong. */
enum summary_found summary_parse(const char *text, size_t len, struct launcher_summary *out, char *why,
                                 size_t why_len);

/* status.launcherSummary for the summary read from `pod`'s log: a new object, or NULL (memory). */
cJSON *summary_to_status(const struct launcher_summary *s, const char *pod);

/* Whether the transport used contradicts the one asked for: RDMA asked and anything but NCCL's
 * IB network used (a one-rank run, which used no network, excepted), or TCP asked and IB used.
 * Auto accepts anything. On true, message (quoting both) is written. */
bool summary_mismatch(enum transport asked, const char *used, const char *pod, char *message, size_t message_len);

/* One line for the Normal event that announces the summary. */
void summary_describe(const struct launcher_summary *s, const char *pod, char *out, size_t len);

#endif
