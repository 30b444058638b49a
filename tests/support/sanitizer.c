/* Leak checking for the test binary.
 *
 * Criterion runs each test in a worker process (it sets BXFI_MAP there) and collects results in
 * the runner. LeakSanitizer checks every process at exit; the runner leaks a few bytes of its
 * own bookkeeping (inside libcriterion), which would fail every run. So leak checking stays on
 * in every worker, where project code runs, and is off in the runner alone (and in a process
 * that asks, test_no_leak_check_at_exit). */
#include "support/sanitizer.h"

#include <stdlib.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
int test_leak_check(void) { return __lsan_do_recoverable_leak_check(); }
#else
int test_leak_check(void) { return 0; }
#endif

static volatile int turned_off;

void test_no_leak_check_at_exit(void) { turned_off = 1; }

int __lsan_is_turned_off(void);

int __lsan_is_turned_off(void) { return turned_off || getenv("BXFI_MAP") == NULL; }
