#include "support/launcher_pod.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <time.h>

#include "util/json.h"

void test_launcher_pod_create(struct kube_client *admin, const char *ns, const char *job, const char *node,
                              char *pod, size_t pod_len)
{
    char lname[128];
    snprintf(lname, sizeof(lname), "%s-launcher", job);
    cJSON *lj = NULL;
    cr_assert_eq(kube_get(admin, &KUBE_JOBS, ns, lname, &lj, NULL), 0, "launcher Job %s", lname);
    snprintf(pod, pod_len, "%s-abcde", lname);
    char text[2048], bound[160] = "";
    if (node)
        snprintf(bound, sizeof(bound), "\"nodeName\":\"%s\",", node);
    snprintf(text, sizeof(text),
             "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"%s\",\"labels\":{"
             "\"training.kubeflow.org/operator-name\":\"mpijob-operator\",\"training.kubeflow.org/job-name\":\"%s\","
             "\"training.kubeflow.org/job-role\":\"launcher\"},\"ownerReferences\":[{\"apiVersion\":\"batch/v1\","
             "\"kind\":\"Job\",\"name\":\"%s\",\"uid\":\"%s\",\"controller\":true}]},"
             "\"spec\":{%s\"restartPolicy\":\"Never\",\"containers\":[{\"name\":\"launcher\",\"image\":\"w\"}]}}",
             pod, job, lname, json_string(lj, "metadata.uid"), bound);
    cJSON_Delete(lj);
    cJSON *p = cJSON_Parse(text);
    cr_assert_not_null(p);
    cr_assert_eq(kube_create(admin, &KUBE_PODS, ns, p, NULL, NULL), 0, "pod %s", pod);
    cJSON_Delete(p);
}

void test_pod_succeeded(struct kube_client *admin, const char *ns, const char *pod)
{
    /* now: the operator reads the log of a launcher that ended lately */
    char now[32], patch[1024];
    time_t t = time(NULL);
    strftime(now, sizeof(now), "%Y-%m-%dT%H:%M:%SZ", gmtime(&t));
    snprintf(patch, sizeof(patch),
             "{\"status\":{\"phase\":\"Succeeded\",\"startTime\":\"%s\","
             "\"conditions\":[{\"type\":\"Ready\",\"status\":\"False\",\"reason\":\"PodCompleted\"}],"
             "\"containerStatuses\":[{\"name\":\"launcher\",\"image\":\"w\",\"imageID\":\"\","
             "\"ready\":false,\"restartCount\":0,\"started\":false,\"state\":{\"terminated\":{"
             "\"exitCode\":0,\"reason\":\"Completed\",\"startedAt\":\"%s\",\"finishedAt\":\"%s\"}}}]}}",
             now, now, now);
    struct kube_patch_opts po = {.type = KUBE_PATCH_MERGE, .subresource = "status"};
    cr_assert_eq(kube_patch(admin, &KUBE_PODS, ns, pod, patch, &po, NULL, NULL), 0, "pod %s", pod);
}
