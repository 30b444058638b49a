/* Leak checking for the test binary (see sanitizer.c). */
#ifndef MPIJOB_TESTS_SUPPORT_SANITIZER_H
#define MPIJOB_TESTS_SUPPORT_SANITIZER_H

/* Turns the leak check at exit off in the calling process: for a child forked from a test's
 * process (which has other threads) that exits through its exit handlers on purpose. The check
 * would only warn that it cannot stop the threads the child does not have. */
void test_no_leak_check_at_exit(void);

/* For a test that is about leaks: Criterion ends a test's process without LeakSanitizer's exit
 * report, so the test asks for the check itself. Nonzero when something allocated is no longer
 * reachable (the report is printed); 0 without LeakSanitizer. */
int test_leak_check(void);

#endif
