/* Runs build/bin/mpijob-operator as a child of the test, each run with a log file of its own:
 * start it, read the ports its servers report and what it logged, ask its servers, wait for it
 * to exit, stop it. Waits take unscaled milliseconds and scale them (support/deadline.h). */
#ifndef TESTS_SUPPORT_OPERATOR_H
#define TESTS_SUPPORT_OPERATOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct test_operator {
    pid_t pid; /* 0 once it has been waited for */
    char log_path[128];
};

/* The binary: $MPIJOB_SRC_DIR/build/bin/mpijob-operator (fails the test when it is missing). */
const char *test_operator_binary(void);

/* Starts the binary with args (argv[0] first, NULL-terminated); stdout and stderr go to
 * op->log_path. in_child, when not NULL, runs in the child before exec (e.g. to enter a mount
 * namespace); the child exits 126 when it returns non-zero. The child dies with the test's
 * process, and test_operator_stop_all stops whatever is left. */
void test_operator_start(struct test_operator *op, char *const args[], int (*in_child)(void *), void *arg);

/* Exit status (128+N for signal N) once it exits within test_ms(ms); -1 while it still runs
 * (with ms > 0, the wait's failure is reported with the end of the log). */
int test_operator_wait_exit(struct test_operator *op, uint64_t ms);

/* The port its server `what` ("metrics" or "health") reported in the log, or 0 when not yet. */
int test_operator_port(const struct test_operator *op, const char *what);

/* How many times text stands in the log. */
int test_operator_log_count(const struct test_operator *op, const char *text);
bool test_operator_log_has(const struct test_operator *op, const char *text);

/* Waits up to test_ms(ms) until text stands in the log `times` times; on a timeout reports the
 * end of the log and returns false. */
bool test_operator_wait_log(const struct test_operator *op, const char *text, int times, uint64_t ms);

/* The last `max` bytes of the log, for failure messages (static storage). */
const char *test_operator_log_tail(const struct test_operator *op, size_t max);

/* SIGKILL unless it has exited, and the log removed. */
void test_operator_stop(struct test_operator *op);

/* Stops every operator this process started and has not stopped: a suite's .fini. */
void test_operator_stop_all(void);

/* GET http://127.0.0.1:port/path: the status code (0 when no answer), the body into body. */
long test_http_get(int port, const char *path, char *body, size_t len);

#endif
