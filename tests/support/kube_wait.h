/* Waiting on the API server's objects in the integration tests, with deadlines scaled by the
 * tests' time factor (support/deadline.h).
 *
 *     cr_assert(test_kube_wait_condition(admin, &MPIJOB_RESOURCE_V2BETA1, "default", "pi", "Running",
 *                                        NULL, "MPIJobRunning", WAIT_MS));
 *
 * A wait polls the server through the given client until the object is as wanted and returns
 * true; at its deadline it prints on stderr what it waited for and the object as it saw it last
 * (or that there was none), and returns false for the caller's assertion to fail on. */
#ifndef TESTS_SUPPORT_KUBE_WAIT_H
#define TESTS_SUPPORT_KUBE_WAIT_H

#include <stdbool.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "kube/client.h"

/* The object as the server has it, or NULL when it cannot be read (caller frees). */
cJSON *test_kube_get(struct kube_client *c, const struct kube_resource *res, const char *ns, const char *name);
bool test_kube_exists(struct kube_client *c, const struct kube_resource *res, const char *ns, const char *name);

/* Whether check(obj, arg) holds for the object; obj is NULL while it cannot be read. */
typedef bool (*test_object_check)(const cJSON *obj, const void *arg);

/* Waits up to timeout_ms (scaled) until check holds for the object; what names the wait in the
 * message of a timeout. */
bool test_kube_wait(struct kube_client *c, const struct kube_resource *res, const char *ns, const char *name,
                    const char *what, test_object_check check, const void *arg, uint64_t timeout_ms);
bool test_kube_wait_exists(struct kube_client *c, const struct kube_resource *res, const char *ns, const char *name,
                           uint64_t timeout_ms);
bool test_kube_wait_gone(struct kube_client *c, const struct kube_resource *res, const char *ns, const char *name,
                         uint64_t timeout_ms);

/* Whether obj's status.conditions has one of type with status (NULL: "True") and, when reason is
 * not NULL, that reason. */
bool test_kube_has_condition(const cJSON *obj, const char *type, const char *status, const char *reason);
bool test_kube_wait_condition(struct kube_client *c, const struct kube_resource *res, const char *ns, const char *name,
                              const char *type, const char *status, const char *reason, uint64_t timeout_ms);

/* The Events in ns that field_selector picks, counted with their repeats (an Event's count);
 * -1 when they cannot be listed. */
int test_kube_count_events(struct kube_client *c, const char *ns, const char *field_selector);

/* Waits until the integer at path (util/json.h's json_int, 0 when absent) is want. */
bool test_kube_wait_int(struct kube_client *c, const struct kube_resource *res, const char *ns, const char *name,
                        const char *path, long long want, uint64_t timeout_ms);
/* Waits until the string at path is want. */
bool test_kube_wait_string(struct kube_client *c, const struct kube_resource *res, const char *ns, const char *name,
                           const char *path, const char *want, uint64_t timeout_ms);

#endif
