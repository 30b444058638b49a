/* What the caches keep of launcher Jobs and Secrets (src/mpijob/trim.h): everything the
 * operator reads, and nothing of the pod template's containers or the key pair. The plan
 * table (test_plan.c) runs every case on objects trimmed the same way. */
#include <criterion/criterion.h>
#include <string.h>

#include "mpijob/builders.h"
#include "mpijob/sshkeys.h"
#include "mpijob/trim.h"
#include "util/json.h"

static struct mpijob *parse(const char *text)
{
    cJSON *tree = cJSON_Parse(text);
    cr_assert_not_null(tree);
    struct mpijob *job = NULL;
    struct mpijob_problems problems = {0};
    cr_assert_eq(mpijob_parse(tree, NULL, &job, &problems), 0);
    mpijob_problems_free(&problems);
    cJSON_Delete(tree);
    return job;
}

static const char JOB[] =
    "{\"apiVersion\":\"kubeflow.org/v2beta1\",\"kind\":\"MPIJob\",\"metadata\":{\"name\":\"pi\",\"namespace\":"
    "\"default\",\"uid\":\"uid-pi\"},\"spec\":{\"slotsPerWorker\":1,\"runPolicy\":{\"suspend\":true},"
    "\"mpiReplicaSpecs\":{\"Launcher\":{\"replicas\":1,\"template\":{\"metadata\":{\"labels\":{\"queue\":\"a\"}},"
    "\"spec\":{\"nodeSelector\":{\"zone\":\"z1\"},\"tolerations\":[{\"key\":\"gpu\",\"operator\":\"Exists\"}],"
    "\"affinity\":{\"nodeAffinity\":{}},\"schedulingGates\":[{\"name\":\"kueue\"}],"
    "\"containers\":[{\"name\":\"l\",\"image\":\"w\",\"command\":[\"mpirun\",\"pi\"]}]}}},"
    "\"Worker\":{\"replicas\":8,\"template\":{\"spec\":{\"containers\":[{\"name\":\"w\",\"image\":\"w\"}]}}}}}}";

Test(trim, a_launcher_job_keeps_what_the_operator_reads_and_loses_its_containers)
{
    struct mpijob *job = parse(JOB);
    struct mpijob_options options = {0};
    cJSON *lj = NULL;
    cr_assert_eq(build_launcher_job(job, &options, NULL, &lj), 0);
    cJSON_AddItemToObject(lj, "status", cJSON_Parse("{\"conditions\":[{\"type\":\"Suspended\",\"status\":\"True\"}],"
                                                    "\"startTime\":\"2027-01-15T07:59:00Z\",\"failed\":1}"));
    cJSON *before = cJSON_Duplicate(lj, true);
    char *whole = cJSON_PrintUnformatted(lj);
    trim_launcher_job(lj);
    char *trimmed = cJSON_PrintUnformatted(lj);
    cr_assert_lt(strlen(trimmed), strlen(whole));

    /* metadata, the Job's own spec and status: untouched */
    cr_assert(cJSON_Compare(json_path(lj, "metadata"), json_path(before, "metadata"), true));
    cr_assert(cJSON_Compare(json_path(lj, "status"), json_path(before, "status"), true));
    cr_assert(json_bool(lj, "spec.suspend", false));
    cr_assert(cJSON_Compare(json_path(lj, "spec.template.metadata"), json_path(before, "spec.template.metadata"), true));
    const char *kept[] = {"nodeSelector", "tolerations", "affinity", "schedulingGates"};
    for (size_t i = 0; i < sizeof(kept) / sizeof(kept[0]); i++) {
        const cJSON *have = cJSON_GetObjectItemCaseSensitive(json_path(lj, "spec.template.spec"), kept[i]);
        cr_assert_not_null(have, "%s is gone", kept[i]);
        cr_assert(cJSON_Compare(have, cJSON_GetObjectItemCaseSensitive(json_path(before, "spec.template.spec"), kept[i]),
                                true));
    }
    cr_assert_eq(cJSON_GetArraySize(json_path(lj, "spec.template.spec")), 4, "%s", trimmed);
    cr_assert_null(json_path(lj, "spec.template.spec.containers"));

    /* the Job's other spec fields, the selector and backoffLimit among them */
    cJSON *f;
    cJSON_ArrayForEach(f, json_path(before, "spec"))
        cr_assert_not_null(cJSON_GetObjectItemCaseSensitive(json_path(lj, "spec"), f->string), "spec.%s is gone",
                           f->string);

    /* trimming twice changes nothing; an object without a template is left alone */
    trim_launcher_job(lj);
    char *again = cJSON_PrintUnformatted(lj);
    cr_assert_str_eq(again, trimmed);
    cJSON *bare = cJSON_Parse("{\"metadata\":{\"name\":\"x\"},\"spec\":{\"template\":\"odd\"}}");
    trim_launcher_job(bare);
    cr_assert_str_eq(json_string(bare, "spec.template"), "odd");
    cJSON_Delete(bare);
    free(again);
    free(whole);
    free(trimmed);
    cJSON_Delete(before);
    cJSON_Delete(lj);
    mpijob_free(job);
}

Test(trim, a_secret_keeps_its_metadata_and_type_and_loses_the_key_pair)
{
    struct mpijob *job = parse(JOB);
    struct mpijob_options options = {0};
    struct ssh_keypair keys = {0};
    cr_assert_eq(ssh_keypair_generate(&keys), 0);
    cJSON *secret = build_secret(job, &options, &keys);
    cr_assert_not_null(secret);
    cJSON *meta = cJSON_Duplicate(json_path(secret, "metadata"), true);
    const char *type = json_string(secret, "type");
    cr_assert_not_null(type);
    char *type_copy = strdup(type);
    cr_assert_not_null(json_path(secret, "data"));
    trim_secret(secret);
    cr_assert_null(json_path(secret, "data"));
    cr_assert_null(json_path(secret, "stringData"));
    cr_assert(cJSON_Compare(json_path(secret, "metadata"), meta, true));
    cr_assert_str_eq(json_string(secret, "type"), type_copy);
    free(type_copy);
    cJSON_Delete(meta);
    cJSON_Delete(secret);
    ssh_keypair_free(&keys);
    mpijob_free(job);
}
