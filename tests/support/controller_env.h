/* What the controller's integration tests run against: an API server, an administrator's client,
 * the operator's own client (held to the deploy manifest's RBAC), an event recorder on it and,
 * once started, the controller; and the MPIJob those tests create most. */
#ifndef TESTS_SUPPORT_CONTROLLER_ENV_H
#define TESTS_SUPPORT_CONTROLLER_ENV_H

#include <cjson/cJSON.h>

#include "kube/client.h"
#include "kube/events.h"
#include "mpijob/controller.h"
#include "support/apiserver.h"

struct test_controller_env {
    struct test_apiserver srv;
    struct kube_client *admin, *operator_client;
    struct event_recorder *recorder;
    struct controller *ctl; /* NULL until test_controller_env_run */
};

/* Starts the server and makes the clients and the recorder; fails the running test on error. */
void test_controller_env_start(struct test_controller_env *env);
/* The same on a real control plane when KUBEBUILDER_ASSETS has one (the Job controller and the
 * scheduler run: env->srv.control_plane), else as test_controller_env_start. */
void test_controller_env_start_control_plane(struct test_controller_env *env);
/* The same with kube-scheduler's Workload API where the server can have it
 * (test_apiserver_start_workload_api). */
void test_controller_env_start_workload_api(struct test_controller_env *env);
/* Starts the controller on the operator's client, with `threads` reconcile threads and gang
 * scheduling by gang_scheduler (NULL: none). */
void test_controller_env_run(struct test_controller_env *env, int threads, const char *gang_scheduler);
/* Stops the controller (when running), frees the rest and stops the server. */
void test_controller_env_stop(struct test_controller_env *env);

/* An MPIJob (kubeflow.org/v2beta1): a launcher running `mpirun -np 2 mpijob-worker train` and 2
 * workers of one slot; extra_spec holds more fields of spec, each ending with a comma (NULL:
 * none). Fails the running test when the text does not parse. Caller frees. */
cJSON *test_mpijob(const char *name, const char *extra_spec);

#endif
