#include "mpijob/status.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "util/json.h"

static cJSON *conditions_of(cJSON *status)
{
    cJSON *list = cJSON_GetObjectItemCaseSensitive(status, "conditions");
    if (!cJSON_IsArray(list)) {
        cJSON_DeleteItemFromObjectCaseSensitive(status, "conditions");
        list = cJSON_AddArrayToObject(status, "conditions");
    }
    return list;
}

const cJSON *mpijob_status_condition(const cJSON *status, const char *type)
{
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(status, "conditions");
    const cJSON *c;
    cJSON_ArrayForEach(c, list) {
        const char *t = json_string(c, "type");
        if (t && strcmp(t, type) == 0)
            return c;
    }
    return NULL;
}

bool mpijob_status_is_true(const cJSON *status, const char *type)
{
    const char *s = json_string(mpijob_status_condition(status, type), "status");
    return s && strcmp(s, "True") == 0;
}

bool mpijob_status_finished(const cJSON *status)
{
    return mpijob_status_is_true(status, MPIJOB_COND_SUCCEEDED) ||
           mpijob_status_is_true(status, MPIJOB_COND_FAILED);
}

static bool same_string(const cJSON *obj, const char *name, const char *want)
{
    const char *have = json_string(obj, name);
    return (!have && (!want || !*want)) || (have && want && strcmp(have, want) == 0);
}

/* Removes the condition of `type` from the list and returns it detached (or NULL). */
static cJSON *detach_condition(cJSON *list, const char *type)
{
    int i = 0;
    cJSON *c;
    cJSON_ArrayForEach(c, list) {
        const char *t = json_string(c, "type");
        if (t && strcmp(t, type) == 0)
            return cJSON_DetachItemFromArray(list, i);
        i++;
    }
    return NULL;
}

static int set_field(cJSON *obj, const char *name, const char *value)
{
    if (!value || !*value) {
        cJSON_DeleteItemFromObjectCaseSensitive(obj, name);
        return 0;
    }
    return json_set_string(obj, name, value);
}

int mpijob_status_set_condition(cJSON *status, const char *type, bool value, const char *reason,
                                const char *message, const char *now)
{
    const char *want = value ? "True" : "False";
    const cJSON *existing = mpijob_status_condition(status, type);
    if (existing && same_string(existing, "status", want) && same_string(existing, "reason", reason) &&
        same_string(existing, "message", message))
        return 0;

    cJSON *list = conditions_of(status);
    if (!list)
        return -ENOMEM;
    int changed = 1;

    /* Exclusive pairs and the end of Running, as the reference's filterOutCondition does. */
    if (strcmp(type, MPIJOB_COND_RUNNING) == 0)
        cJSON_Delete(detach_condition(list, MPIJOB_COND_RESTARTING));
    else if (strcmp(type, MPIJOB_COND_RESTARTING) == 0)
        cJSON_Delete(detach_condition(list, MPIJOB_COND_RUNNING));
    if (value && (strcmp(type, MPIJOB_COND_SUCCEEDED) == 0 || strcmp(type, MPIJOB_COND_FAILED) == 0)) {
        cJSON *running = (cJSON *)mpijob_status_condition(status, MPIJOB_COND_RUNNING);
        if (running && !same_string(running, "status", "False")) {
            if (set_field(running, "status", "False") < 0 || set_field(running, "lastTransitionTime", now) < 0 ||
                set_field(running, "lastUpdateTime", now) < 0)
                return -ENOMEM;
        }
    }

    cJSON *cond = detach_condition(list, type);
    const char *old_status = cond ? json_string(cond, "status") : NULL;
    bool flipped = !old_status || strcmp(old_status, want) != 0;
    if (!cond) {
        cond = cJSON_CreateObject();
        if (!cond)
            return -ENOMEM;
    }
    if (set_field(cond, "type", type) < 0 || set_field(cond, "status", want) < 0 ||
        set_field(cond, "reason", reason) < 0 || set_field(cond, "message", message) < 0 ||
        set_field(cond, "lastUpdateTime", now) < 0 ||
        (flipped && set_field(cond, "lastTransitionTime", now) < 0)) {
        cJSON_Delete(cond);
        return -ENOMEM;
    }
    cJSON_AddItemToArray(list, cond); /* the latest condition goes last */
    return changed;
}

int mpijob_status_set_replicas(cJSON *status, const char *role, const struct replica_counts *c)
{
    cJSON *all = json_ensure_object(status, "replicaStatuses");
    if (!all)
        return -ENOMEM;
    cJSON *want = cJSON_CreateObject();
    if (!want)
        return -ENOMEM;
    /* Zero counts are omitted, as Go's omitempty writes them. */
    const struct {
        const char *name;
        int value;
    } fields[] = {{"active", c->active}, {"succeeded", c->succeeded}, {"failed", c->failed}, {"ready", c->ready}};
    for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++)
        if (fields[i].value && !cJSON_AddNumberToObject(want, fields[i].name, fields[i].value)) {
            cJSON_Delete(want);
            return -ENOMEM;
        }
    cJSON *have = cJSON_GetObjectItemCaseSensitive(all, role);
    if (have && cJSON_Compare(have, want, true)) {
        cJSON_Delete(want);
        return 0;
    }
    if (have)
        cJSON_ReplaceItemInObjectCaseSensitive(all, role, want);
    else
        cJSON_AddItemToObject(all, role, want);
    return 1;
}

bool mpijob_status_equal(const cJSON *a, const cJSON *b)
{
    cJSON *ca = a ? cJSON_Duplicate(a, true) : cJSON_CreateObject();
    cJSON *cb = b ? cJSON_Duplicate(b, true) : cJSON_CreateObject();
    bool equal = false;
    if (ca && cb) {
        cJSON_DeleteItemFromObjectCaseSensitive(ca, "lastReconcileTime");
        cJSON_DeleteItemFromObjectCaseSensitive(cb, "lastReconcileTime");
        equal = cJSON_Compare(ca, cb, true);
    }
    cJSON_Delete(ca);
    cJSON_Delete(cb);
    return equal;
}

/* ---- pods and Jobs ------------------------------------------------------------------ */

enum pod_state pod_state_of(const cJSON *pod)
{
    const char *phase = json_string(pod, "status.phase");
    if (!phase || strcmp(phase, "Pending") == 0)
        return POD_PENDING;
    if (strcmp(phase, "Running") == 0)
        return POD_RUNNING;
    if (strcmp(phase, "Succeeded") == 0)
        return POD_SUCCEEDED;
    if (strcmp(phase, "Failed") == 0)
        return POD_FAILED;
    return POD_UNKNOWN;
}

static bool condition_true(const cJSON *obj, const char *list_path, const char *type)
{
    const cJSON *c;
    cJSON_ArrayForEach(c, json_path(obj, list_path)) {
        const char *t = json_string(c, "type"), *s = json_string(c, "status");
        if (t && s && strcmp(t, type) == 0 && strcmp(s, "True") == 0)
            return true;
    }
    return false;
}

bool pod_is_ready(const cJSON *pod)
{
    return pod_state_of(pod) == POD_RUNNING && condition_true(pod, "status.conditions", "Ready");
}

bool pod_failure(const cJSON *pod, char *reason, size_t reason_len, char *message, size_t message_len)
{
    const char *pod_reason = json_string(pod, "status.reason");
    const char *pod_message = json_string(pod, "status.message");
    bool evicted = (pod_reason && strcmp(pod_reason, "Evicted") == 0) ||
                   condition_true(pod, "status.conditions", "DisruptionTarget");
    if (pod_reason && *pod_reason) {
        snprintf(reason, reason_len, "%s", pod_reason);
        snprintf(message, message_len, "%s", pod_message ? pod_message : pod_reason);
        return evicted;
    }
    const cJSON *cs;
    cJSON_ArrayForEach(cs, json_path(pod, "status.containerStatuses")) {
        const cJSON *term = json_path(cs, "state.terminated");
        if (!term)
            term = json_path(cs, "lastState.terminated");
        long long code = json_int(term, "exitCode", 0);
        if (!term || code == 0)
            continue;
        const char *r = json_string(term, "reason");
        const char *m = json_string(term, "message");
        const char *name = json_string(cs, "name");
        snprintf(reason, reason_len, "%s", r && *r ? r : "Error");
        snprintf(message, message_len, "container %s exited with code %lld%s%s", name ? name : "?", code,
                 m && *m ? ": " : "", m && *m ? m : "");
        return evicted;
    }
    snprintf(reason, reason_len, "%s", evicted ? "Evicted" : "Failed");
    snprintf(message, message_len, "%s", pod_message ? pod_message : "pod failed");
    return evicted;
}

enum job_state job_state_of(const cJSON *job, char *reason, size_t reason_len, char *message, size_t message_len)
{
    const cJSON *c;
    cJSON_ArrayForEach(c, json_path(job, "status.conditions")) {
        const char *t = json_string(c, "type"), *s = json_string(c, "status");
        if (!t || !s || strcmp(s, "True") != 0)
            continue;
        if (strcmp(t, "Complete") == 0)
            return JOB_COMPLETE;
        if (strcmp(t, "Failed") == 0) {
            const char *r = json_string(c, "reason"), *m = json_string(c, "message");
            snprintf(reason, reason_len, "%s", r ? r : "Failed");
            snprintf(message, message_len, "%s", m ? m : "launcher Job failed");
            return JOB_FAILED;
        }
    }
    if (json_bool(job, "spec.suspend", false))
        return JOB_SUSPENDED;
    return JOB_ACTIVE;
}
