/* What the controller's integration tests run against (controller_env.h). */
#include "support/controller_env.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>

#include "support/kube_test.h"

static void clients(struct test_controller_env *env)
{
    env->admin = test_kube_client(&env->srv, NULL);
    env->operator_client = test_operator_client(&env->srv, NULL);
    cr_assert_eq(event_recorder_new(env->operator_client, "mpijob-operator", NULL, &env->recorder), 0);
}

void test_controller_env_start(struct test_controller_env *env)
{
    cr_assert_eq(test_apiserver_start(&env->srv), 0, "API server did not start");
    clients(env);
}

void test_controller_env_start_control_plane(struct test_controller_env *env)
{
    cr_assert_eq(test_apiserver_start_control_plane(&env->srv), 0, "API server did not start");
    clients(env);
}

void test_controller_env_start_workload_api(struct test_controller_env *env)
{
    cr_assert_eq(test_apiserver_start_workload_api(&env->srv), 0, "API server did not start");
    clients(env);
}

void test_controller_env_run(struct test_controller_env *env, int threads, const char *gang_scheduler)
{
    struct controller_config cfg = {.client = env->operator_client, .threads = threads, .events = env->recorder,
                                    .options = {.gang_scheduler = gang_scheduler}};
    cr_assert_eq(controller_start(&cfg, &env->ctl), 0);
}

void test_controller_env_stop(struct test_controller_env *env)
{
    controller_stop(env->ctl);
    env->ctl = NULL;
    event_recorder_free(env->recorder);
    env->recorder = NULL;
    kube_client_free(env->operator_client);
    kube_client_free(env->admin);
    env->operator_client = env->admin = NULL;
    test_apiserver_stop(&env->srv);
}

static const char JOB[] =
    "{\"apiVersion\":\"kubeflow.org/v2beta1\",\"kind\":\"MPIJob\",\"metadata\":{\"name\":\"%s\"},\"spec\":{"
    "\"slotsPerWorker\":1,%s\"mpiReplicaSpecs\":{"
    "\"Launcher\":{\"replicas\":1,\"template\":{\"spec\":{\"containers\":[{\"name\":\"launcher\",\"image\":\"w\","
    "\"command\":[\"mpirun\",\"-np\",\"2\",\"mpijob-worker\",\"train\"]}]}}},"
    "\"Worker\":{\"replicas\":2,\"template\":{\"spec\":{\"containers\":[{\"name\":\"worker\",\"image\":\"w\"}]}}}}}}";

cJSON *test_mpijob(const char *name, const char *extra_spec)
{
    char *text = NULL;
    cr_assert_geq(asprintf(&text, JOB, name, extra_spec ? extra_spec : ""), 0);
    cJSON *job = cJSON_Parse(text);
    free(text);
    cr_assert_not_null(job, "the MPIJob %s does not parse", name);
    return job;
}
