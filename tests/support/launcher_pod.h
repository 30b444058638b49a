/* Playing the Job controller and the kubelet for a launcher pod, in integration tests that run
 * without them. */
#ifndef TESTS_SUPPORT_LAUNCHER_POD_H
#define TESTS_SUPPORT_LAUNCHER_POD_H

#include <stddef.h>

#include "kube/client.h"

/* Creates the pod the Job controller would make for the launcher Job "<job>-launcher": named
 * "<job>-launcher-abcde" (written to pod), our labels, controlled by that Job, one container
 * "launcher", bound to node (NULL: none). Fails the running test on error. */
void test_launcher_pod_create(struct kube_client *admin, const char *ns, const char *job, const char *node,
                              char *pod, size_t pod_len);

/* Writes the status a kubelet writes when the pod's only container "launcher" exited 0:
 * Succeeded, with the container terminated (Completed) now. */
void test_pod_succeeded(struct kube_client *admin, const char *ns, const char *pod);

#endif
