/* Leak checking for the test binary (see sanitizer.c). */
#ifndef MPIJOB_TESTS_SUPPORT_SANITIZER_H
#define MPIJOB_TESTS_SUPPORT_SANITIZER_H

/* Turns the leak check at exit off in the calling process: for a child forked from a test's
 * process (which has other threads) that exits through its exit handlers on purpose. The check
 * would only warn that it cannot stop the threads the child does not have. */
void test_no_leak_check_at_exit(void);

#endif
