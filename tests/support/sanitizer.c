/* Leak checking for the test binary.
 *
 * Criterion runs each test in a worker process (it sets BXFI_MAP there) and collects results in
 * the runner. LeakSanitizer checks every process at exit; the runner leaks a few bytes of its
 * own bookkeeping (inside libcriterion), which would fail every run. So leak checking stays on
 * in every worker, where project code runs, and is off in the runner alone. */
#include <stdlib.h>

int __lsan_is_turned_off(void);

int __lsan_is_turned_off(void) { return getenv("BXFI_MAP") == NULL; }
