/* File system path helpers (string level: nothing touches the disk). */
#ifndef UTIL_PATH_H
#define UTIL_PATH_H

#include <stdbool.h>

/* Whether two paths name the same place, ignoring trailing slashes ("/dev/infiniband/" equals
 * "/dev/infiniband"; "/" stays "/"). */
bool path_equal(const char *a, const char *b);

#endif
