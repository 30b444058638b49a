/* Running programs from the worker's tests: a shell command with its stdout and stderr captured
 * apart, and where the release binary and the source tree are. */
#ifndef TESTS_WORKER_RUNCMD_H
#define TESTS_WORKER_RUNCMD_H

/* The source tree: $MPIJOB_SRC_DIR (scripts/run-tests.sh sets it), else ".". */
const char *runcmd_src_dir(void);
/* $MPIJOB_SRC_DIR/build/bin/mpijob-worker; the calling test fails when it is not built. */
const char *runcmd_worker_bin(void);
/* The limit of a command run by runcmd: killed after 100 s times the tests' time factor
 * (support/deadline.h), which runcmd puts in $RUNCMD_LIMIT_S for the shell to expand. The limit
 * is the command's own: with Criterion's .timeout on these tests, its runner leaked under
 * --jobs 2 and LeakSanitizer aborted it at exit. */
#define RUNCMD_LIMIT_MS 100000
#define RUNCMD_TIMEOUT "timeout -k 5 \"$RUNCMD_LIMIT_S\""
/* The mpirun prefix every test uses: works as root and as a user, more ranks than cores, and a
 * hung job is killed at the limit. */
#define RUNCMD_MPIRUN RUNCMD_TIMEOUT " mpirun --allow-run-as-root --oversubscribe"

/* Runs cmd with /bin/sh -c, stdin from /dev/null. Returns the exit status (128 + signal when killed); *out and *err
 * (each may be NULL) receive what it wrote, NUL-terminated, freed by the caller. */
int runcmd(const char *cmd, char **out, char **err);

#endif
