/* The Kubernetes client's error codes are the project's (util/error.h: KUBE_E*, described by
 * error_str). Here: how an API server's answer becomes one. */
#ifndef KUBE_ERRORS_H
#define KUBE_ERRORS_H

#include "util/error.h"

/* The code for a Status `reason` string and HTTP status; used by the REST layer. */
int kube_error_from_status(long http_code, const char *reason);

#endif
