#include "mpijob/status.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "util/clock.h"
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

static const char *waiting_problem_in(const cJSON *statuses, char *message, size_t message_len)
{
    static const char *const stuck[] = {"ErrImagePull", "ImagePullBackOff", "InvalidImageName",
                                        "CreateContainerConfigError", "CreateContainerError", NULL};
    const cJSON *cs;
    cJSON_ArrayForEach(cs, statuses) {
        const cJSON *waiting = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(cs, "state"),
                                                                "waiting");
        const char *why = json_string(waiting, "reason");
        for (int i = 0; why && stuck[i]; i++) {
            if (strcmp(why, stuck[i]) != 0)
                continue;
            bool pull = i < 2;
            const char *name = json_string(cs, "name"), *said = json_string(waiting, "message");
            const char *image = json_string(cs, "image");
            if (pull && said && strncmp(said, "Back-off pulling image", 22) == 0)
                said = NULL; /* says less than the pull's own error; the image's name will do */
            if (said)
                snprintf(message, message_len, "container %s: %s", name ? name : "?", said);
            else if (pull)
                snprintf(message, message_len, "container %s: image \"%s\" cannot be pulled", name ? name : "?",
                         image ? image : "?");
            else
                snprintf(message, message_len, "container %s: %s", name ? name : "?", why);
            return pull ? "ImagePullBackOff" : stuck[i];
        }
    }
    return NULL;
}

const char *pod_waiting_problem(const cJSON *pod, char *message, size_t message_len)
{
    enum pod_state s = pod_state_of(pod);
    if (s != POD_PENDING && s != POD_RUNNING)
        return NULL;
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(pod, "status");
    const char *why = waiting_problem_in(cJSON_GetObjectItemCaseSensitive(st, "initContainerStatuses"), message,
                                         message_len);
    return why ? why : waiting_problem_in(cJSON_GetObjectItemCaseSensitive(st, "containerStatuses"), message,
                                          message_len);
}

int mpijob_status_remove_condition(cJSON *status, const char *type)
{
    cJSON *list = cJSON_GetObjectItemCaseSensitive(status, "conditions");
    cJSON *c = cJSON_IsArray(list) ? detach_condition(list, type) : NULL;
    cJSON_Delete(c);
    return c != NULL;
}

/* A line of only separators (mpirun frames its reports in dashes) or blanks says nothing. */
static bool blank_line(const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!strchr(" \t\r-=*_#", p[i]))
            return false;
    return true;
}

void status_tidy_message(char *dst, size_t len, const char *src)
{
    if (!len)
        return;
    size_t o = 0;
    dst[0] = '\0';
    while (src && *src) {
        const char *nl = strchr(src, '\n');
        size_t n = nl ? (size_t)(nl - src) : strlen(src);
        size_t keep = n;
        while (keep && strchr(" \t\r", src[keep - 1]))
            keep--;
        if (!blank_line(src, keep)) {
            size_t sep = o ? 1 : 0;
            if (o + sep + keep >= len) {
                /* Cut on a character boundary: never in the middle of a UTF-8 sequence. */
                if (o + sep >= len - 1)
                    break;
                size_t room = len - 1 - o - sep;
                while (room > 0 && ((unsigned char)src[room] & 0xC0) == 0x80)
                    room--;
                if (room == 0)
                    break;
                if (sep)
                    dst[o++] = '\n';
                memcpy(dst + o, src, room);
                o += room;
                break;
            }
            if (o)
                dst[o++] = '\n';
            memcpy(dst + o, src, keep);
            o += keep;
        }
        src = nl ? nl + 1 : NULL;
    }
    dst[o] = '\0';
}

/* When the pod's deletion was asked for (deletionTimestamp less the grace period), 0 when it is
 * not being deleted. */
static time_t deletion_asked_at(const cJSON *pod)
{
    const char *at = json_string(pod, "metadata.deletionTimestamp");
    time_t t;
    if (!at || clock_parse_rfc3339(at, &t) < 0)
        return 0;
    return t - (time_t)json_int(pod, "metadata.deletionGracePeriodSeconds", 0);
}

/* The terminated state that explains a container's failure: the current one, else the last.
 * A run stopped by the pod's deletion says nothing of why the job failed, and the run before it
 * does: a Job controller deletes the pod of a Job out of retries (under restartPolicy OnFailure
 * as soon as the kubelet has started the container again, its restart count reaching
 * backoffLimit), and a launcher's mpirun killed in the middle of its own abort may even crash
 * (Open MPI 4.1's segfault in PMIx_Finalize, exit code 139). Such a run ended after the deletion
 * was asked for, or, once the kubelet has confirmed the deletion (which rewrites the
 * deletionTimestamp to that moment, grace period 0, so the time the deletion was asked is lost),
 * ended by a signal (exit code above 128) or followed a failed run while the pod was being
 * deleted: a container started again after a failure is the one such a deletion stops, and
 * mpirun stopped by SIGTERM exits 1 (seen on real nodes with backoffLimit 0, the first run's
 * words then lost). */
static const cJSON *failed_run(const cJSON *cs, time_t deleted_at)
{
    const cJSON *term = json_path(cs, "state.terminated");
    const char *finished = json_string(term, "finishedAt");
    time_t t;
    bool failed_before = json_int(json_path(cs, "lastState.terminated"), "exitCode", 0) != 0;
    bool stopped_by_deletion = deleted_at && ((finished && clock_parse_rfc3339(finished, &t) == 0 && t >= deleted_at) ||
                                              json_int(term, "exitCode", 0) > 128 || failed_before);
    if (term && json_int(term, "exitCode", 0) != 0 && !stopped_by_deletion)
        return term;
    term = json_path(cs, "lastState.terminated");
    if (term && json_int(term, "exitCode", 0) != 0)
        return term;
    return NULL;
}

static bool failure_of(const cJSON *pod, char *reason, size_t reason_len, char *message, size_t message_len,
                       char *finished, size_t finished_len)
{
    const char *pod_reason = json_string(pod, "status.reason");
    const char *pod_message = json_string(pod, "status.message");
    bool evicted = (pod_reason && strcmp(pod_reason, "Evicted") == 0) ||
                   condition_true(pod, "status.conditions", "DisruptionTarget");
    if (finished_len)
        finished[0] = '\0';
    if (pod_reason && *pod_reason) {
        snprintf(reason, reason_len, "%s", pod_reason);
        status_tidy_message(message, message_len, pod_message ? pod_message : pod_reason);
        return evicted;
    }
    const cJSON *cs;
    time_t deleted_at = deletion_asked_at(pod);
    cJSON_ArrayForEach(cs, json_path(pod, "status.containerStatuses")) {
        const cJSON *term = failed_run(cs, deleted_at);
        if (!term)
            continue;
        long long code = json_int(term, "exitCode", 0);
        const char *r = json_string(term, "reason");
        const char *m = json_string(term, "message");
        const char *name = json_string(cs, "name");
        const char *at = json_string(term, "finishedAt");
        snprintf(reason, reason_len, "%s", r && *r ? r : "Error");
        int n = snprintf(message, message_len, "container %s exited with code %lld%s", name ? name : "?", code,
                         m && *m ? ": " : "");
        if (m && *m && n > 0 && (size_t)n < message_len)
            status_tidy_message(message + n, message_len - (size_t)n, m);
        if (finished_len && at)
            snprintf(finished, finished_len, "%s", at);
        return evicted;
    }
    snprintf(reason, reason_len, "%s", evicted ? "Evicted" : "Failed");
    status_tidy_message(message, message_len, pod_message ? pod_message : "pod failed");
    return evicted;
}

bool pod_failure(const cJSON *pod, char *reason, size_t reason_len, char *message, size_t message_len)
{
    return failure_of(pod, reason, reason_len, message, message_len, NULL, 0);
}

void pod_run_of(const cJSON *pod, struct pod_run *out)
{
    memset(out, 0, sizeof(*out));
    enum pod_state st = pod_state_of(pod);
    bool stopped = false; /* a container is down after a failed run: terminated, or waiting to restart */
    const cJSON *cs;
    time_t deleted_at = deletion_asked_at(pod);
    cJSON_ArrayForEach(cs, json_path(pod, "status.containerStatuses")) {
        if (!failed_run(cs, deleted_at))
            continue;
        out->failed = true;
        if (!json_path(cs, "state.running"))
            stopped = true;
    }
    if (st == POD_FAILED)
        out->failed = true;
    out->in_progress = (st == POD_PENDING || st == POD_RUNNING) && !stopped;
    if (out->failed) {
        failure_of(pod, out->reason, sizeof(out->reason), out->message, sizeof(out->message), out->finished_at,
                   sizeof(out->finished_at));
        if (!out->finished_at[0]) {
            const char *t = json_string(pod, "metadata.creationTimestamp");
            snprintf(out->finished_at, sizeof(out->finished_at), "%s", t ? t : "");
        }
    }
}

int mpijob_status_set_launcher_failure(cJSON *status, const char *pod, const struct pod_run *run)
{
    const cJSON *have = cJSON_GetObjectItemCaseSensitive(status, "lastLauncherFailure");
    const char *at = json_string(have, "finishedAt");
    if (at && strcmp(at, run->finished_at) > 0)
        return 0;
    if (have && same_string(have, "pod", pod) && same_string(have, "reason", run->reason) &&
        same_string(have, "message", run->message) && same_string(have, "finishedAt", run->finished_at))
        return 0;
    cJSON *f = cJSON_CreateObject();
    if (!f || set_field(f, "pod", pod) < 0 || set_field(f, "reason", run->reason) < 0 ||
        set_field(f, "message", run->message) < 0 || set_field(f, "finishedAt", run->finished_at) < 0) {
        cJSON_Delete(f);
        return -ENOMEM;
    }
    cJSON_DeleteItemFromObjectCaseSensitive(status, "lastLauncherFailure");
    cJSON_AddItemToObject(status, "lastLauncherFailure", f);
    return 1;
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

/* status.state, the STATE column: the type of the latest condition that is True. A transport
 * mismatch is a remark on the run, not a state: the USED column and the condition show it. */
void mpijob_status_set_state(cJSON *status)
{
    const char *state = NULL;
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(status, "conditions")) {
        const char *t = json_string(c, "type"), *v = json_string(c, "status");
        if (t && v && strcmp(v, "True") == 0 && strcmp(t, MPIJOB_COND_TRANSPORT_MISMATCH) != 0)
            state = t;
    }
    if (state)
        json_set_string(status, "state", state);
}
