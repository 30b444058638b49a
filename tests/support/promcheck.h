/* Checks Prometheus text exposition with tests/unit/promcheck.py, an independent parser. */
#ifndef TESTS_SUPPORT_PROMCHECK_H
#define TESTS_SUPPORT_PROMCHECK_H

#include <stdbool.h>

/* Runs promcheck.py on text: its exit status (0 = valid), or -1 when it cannot run. Its
 * complaints go to the test log when verbose. The script is found under $MPIJOB_SRC_DIR or the
 * current directory. */
int promcheck_run(const char *text, bool verbose);

#endif
