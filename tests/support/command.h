/* Runs a command of the test suite (a Python check, a script) from the repository root. */
#ifndef TESTS_SUPPORT_COMMAND_H
#define TESTS_SUPPORT_COMMAND_H

/* The repository root: $MPIJOB_SRC_DIR, else ".". */
const char *test_src_dir(void);

/* Runs `command` through sh in the repository root with stderr joined to stdout. The running test
 * fails, with the whole output, unless it exits 0; the last lines are logged either way (they say
 * what ran and what was skipped). */
void test_run_checked(const char *what, const char *command);

#endif
