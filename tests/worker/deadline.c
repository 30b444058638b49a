/* The worker's test binary is built from tests/worker alone: it gets the tests' shared deadline
 * module (support/deadline.h), and with it Criterion's timeouts scaled by the same factor, by
 * compiling the module here. */
#include "support/deadline.c"
