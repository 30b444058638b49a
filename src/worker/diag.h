/* The worker's diagnostics on stderr: what went wrong and what it chose instead, one record per
 * call through util/log, reading
 *
 *   mpijob-worker[ COMMAND]: MESSAGE
 *
 * cmd/mpijob-worker sets util/log's plain format, so each record is exactly that line: the pod's
 * termination message, and from there the MPIJob's condition, carries it as written, and users
 * and tests read it by its words. Results (JSON lines, the bench table, the probe listing) go to
 * stdout, never here. */
#ifndef WORKER_DIAG_H
#define WORKER_DIAG_H

#include <stdio.h>

#include "util/log.h"

/* command: "train", "bench", "probe", or NULL for the worker as a whole. A message longer than
 * about 3 KiB is cut. */
void wk_log(enum log_level level, const char *command, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
#define wk_error(command, ...) wk_log(LOG_ERROR, command, __VA_ARGS__)
#define wk_warn(command, ...) wk_log(LOG_WARN, command, __VA_ARGS__)
#define wk_info(command, ...) wk_log(LOG_INFO, command, __VA_ARGS__)

/* A bad command line: the error, a blank line, then usage(stderr). */
void wk_usage_error(const char *command, void (*usage)(FILE *), const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
