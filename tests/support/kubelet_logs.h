/* Test support: a kubelet that serves container logs only (tests/cluster/kubeletapi.py), for
 * integration tests that run no kubelet but need `pods/NAME/log` to work, through the API-server
 * double or a real kube-apiserver, which both fetch a log from the pod's node's kubelet.
 *
 * test_kubelet_start runs the server on 127.0.0.1 (a free port, logs in a fresh folder) and
 * creates (as an administrator) a Node of the given name whose InternalIP is 127.0.0.1 and whose
 * kubeletEndpoint is that port, Ready, with room for pods; the server keeps its Lease renewed,
 * so a real node lifecycle controller leaves it alone. Pods bound to that node (spec.nodeName)
 * then have the logs test_kubelet_write_log gives them. */
#ifndef TESTS_SUPPORT_KUBELET_LOGS_H
#define TESTS_SUPPORT_KUBELET_LOGS_H

#include <stddef.h>

#include "support/apiserver.h"

struct test_kubelet {
    char dir[256];  /* the logs: <dir>/<namespace>_<pod>_<container>.log */
    int port;
    int pid;
    char node[64];
};

/* 0, or -1 with a message on stderr (nothing left running then). */
int test_kubelet_start(struct test_kubelet *k, struct test_apiserver *s, const char *node);
/* The same with more capacity (`capacity`: JSON members added to status.capacity and
 * allocatable, e.g. an extended resource "\"example.com/gpu\":\"1\"", which the scheduler counts)
 * and more labels (JSON members, e.g. "\"example.com/rack\":\"a\""); either may be NULL. */
int test_kubelet_start_shaped(struct test_kubelet *k, struct test_apiserver *s, const char *node,
                              const char *capacity, const char *labels);
/* Creates a Node whose kubelet is gone: 127.0.0.1 at a port nothing listens on, so that reading a
 * log of a pod bound to it fails as it does when a node is lost (dial tcp ...: connection
 * refused). 0 or -1. Deleted by the caller (or with the server). */
int test_kubelet_gone_node(struct test_apiserver *s, const char *node);
/* Writes (replaces) the log of ns/pod/container. 0 or -1. */
int test_kubelet_write_log(struct test_kubelet *k, const char *ns, const char *pod, const char *container,
                           const char *text, size_t len);
/* The next `reads` reads of the log of ns/pod/container answer an empty log (whatever the log
 * holds), as from a node whose runtime has not yet written the container's output. 0 or -1. */
int test_kubelet_hold_log(struct test_kubelet *k, const char *ns, const char *pod, const char *container, int reads);
/* Stops the server, deletes the Node and removes the folder. Safe after a failed start. */
void test_kubelet_stop(struct test_kubelet *k, struct test_apiserver *s);

#endif
