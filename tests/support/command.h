/* Runs a command of the test suite (a Python check, a script) from the repository root. */
#ifndef TESTS_SUPPORT_COMMAND_H
#define TESTS_SUPPORT_COMMAND_H

#include <stddef.h>

/* The repository root: $MPIJOB_SRC_DIR, else ".". */
const char *test_src_dir(void);

/* python3 from PATH into out, resolved before a fork (the child may only call
 * async-signal-safe functions). 0, or -1 when there is none. */
int test_find_python(char *out, size_t len);

/* In a forked child, before exec: closes every descriptor but stdio, so that a server the tests
 * start holds none of the test runner's pipes. */
void test_close_inherited_fds(void);

/* Runs `command` through sh in the repository root with stderr joined to stdout. The running test
 * fails, with the whole output, unless it exits 0; the last lines are logged either way (they say
 * what ran and what was skipped). */
void test_run_checked(const char *what, const char *command);

#endif
