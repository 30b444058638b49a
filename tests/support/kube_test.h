/* A client of the project's own (src/kube) for the API server a test started. */
#ifndef TESTS_SUPPORT_KUBE_TEST_H
#define TESTS_SUPPORT_KUBE_TEST_H

#include "kube/client.h"
#include "support/apiserver.h"

/* Skips the running test unless s is the API-server double; why says what the test needs of it
 * (fault injection, the request log). */
#define TEST_REQUIRE_DOUBLE(s, why)                                                                   \
    do {                                                                                              \
        if (!(s)->is_double)                                                                          \
            cr_skip_test("needs the API-server double (%s)", why);                                    \
    } while (0)

/* Loads the server's kubeconfig and builds a client; fails the running test on any error.
 * opts NULL: what tests want: no client-side rate limit, backoffs of 20 to 200 ms. */
struct kube_client *test_kube_client(const struct test_apiserver *s, const struct kube_client_options *opts);

/* The same with the operator's ServiceAccount token, held to RBAC (support/apiserver.h). */
struct kube_client *test_operator_client(const struct test_apiserver *s, const struct kube_client_options *opts);

/* Plays the Job controller finishing a Job: writes through /status what kube-controller-manager
 * writes, which a real kube-apiserver requires: for type "Complete", SuccessCriteriaMet then
 * Complete with startTime, completionTime and succeeded 1; for "Failed", FailureTarget then
 * Failed with startTime and failed 1; no active pod either way. Fails the running test when the
 * server refuses. */
void test_finish_job(struct kube_client *admin, const char *ns, const char *job, const char *type,
                     const char *reason);

#endif
