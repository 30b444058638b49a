#include "mpijob/trim.h"

#include <stddef.h>
#include <string.h>

/* The pod spec fields of a launcher Job's template that the resume sync compares
 * (scheduling_directives_patch in plan.c). */
static const char *const kept_pod_spec_fields[] = {"nodeSelector", "tolerations", "affinity", "schedulingGates"};

static int kept(const char *name)
{
    for (size_t i = 0; name && i < sizeof(kept_pod_spec_fields) / sizeof(kept_pod_spec_fields[0]); i++)
        if (strcmp(name, kept_pod_spec_fields[i]) == 0)
            return 1;
    return 0;
}

void trim_launcher_job(cJSON *job)
{
    cJSON *template = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(job, "spec"), "template");
    cJSON *spec = cJSON_GetObjectItemCaseSensitive(template, "spec");
    if (!cJSON_IsObject(spec))
        return;
    cJSON *field = spec->child;
    while (field) {
        cJSON *next = field->next;
        if (!kept(field->string))
            cJSON_Delete(cJSON_DetachItemViaPointer(spec, field));
        field = next;
    }
}

void trim_secret(cJSON *secret)
{
    cJSON_DeleteItemFromObjectCaseSensitive(secret, "data");
    cJSON_DeleteItemFromObjectCaseSensitive(secret, "stringData");
}
