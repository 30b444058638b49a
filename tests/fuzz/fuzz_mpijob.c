/* Fuzzes MPIJob parsing, defaulting and validation on arbitrary JSON. A job that parses must
 * also produce its object names; one that does not must name at least one problem. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "mpijob/mpijob.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cJSON *obj = cJSON_ParseWithLength((const char *)data, size);
    if (!obj)
        return 0;
    /* A small worker limit reaches the "at most" paths with short inputs too. */
    struct mpijob_limits limits = {.max_workers = size % 2 ? 16 : 10000};
    struct mpijob *job = NULL;
    struct mpijob_problems problems;
    int rc = mpijob_parse(obj, &limits, &job, &problems);
    if (rc == 0) {
        char *names[] = {mpijob_worker_name(job, job->worker.replicas - 1),
                         mpijob_launcher_name(job), mpijob_configmap_name(job),
                         mpijob_secret_name(job)};
        for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
            free(names[i]);
        (void)mpi_implementation_name(job->implementation);
        (void)transport_name(job->networking.transport);
        (void)clean_pod_policy_name(job->run_policy.clean_pod_policy);
        mpijob_free(job);
    } else if (rc == MPIJOB_EINVALID) {
        if (problems.count == 0 || job != NULL)
            abort();
        char *joined = mpijob_problems_join(&problems);
        free(joined);
        mpijob_problems_free(&problems);
    }
    cJSON_Delete(obj);
    return 0;
}
