#include "kube/discovery.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/json.h"

/* A leading decimal number ("36", "33+"), or -1. */
static int leading_number(const char *s)
{
    if (!s || *s < '0' || *s > '9')
        return -1;
    char *end = NULL;
    long n = strtol(s, &end, 10);
    return n >= 0 && n < 100000 ? (int)n : -1;
}

int kube_server_version(struct kube_client *c, struct kube_server_version *out, struct kube_status *st)
{
    memset(out, 0, sizeof(*out));
    out->major = out->minor = -1;
    cJSON *v = NULL;
    int rc = kube_request(c, "GET", "/version", NULL, NULL, NULL, &v, st);
    if (rc == 0) {
        const char *git = json_string(v, "gitVersion");
        snprintf(out->git_version, sizeof(out->git_version), "%s", git ? git : "");
        out->major = leading_number(json_string(v, "major"));
        out->minor = leading_number(json_string(v, "minor"));
        /* a server that leaves major and minor empty still names itself in gitVersion */
        int major, minor;
        if ((out->major < 0 || out->minor < 0) && git && sscanf(git, "v%d.%d", &major, &minor) == 2) {
            out->major = major;
            out->minor = minor;
        }
    }
    cJSON_Delete(v);
    return rc;
}

void kube_group_version(const struct kube_resource *res, char *out, size_t len)
{
    if (res->group && *res->group)
        snprintf(out, len, "%s/%s", res->group, res->version);
    else
        snprintf(out, len, "%s", res->version);
}

int kube_resource_served(struct kube_client *c, const struct kube_resource *res, struct kube_status *st)
{
    char path[300];
    if (res->group && *res->group)
        snprintf(path, sizeof(path), "/apis/%s/%s", res->group, res->version);
    else
        snprintf(path, sizeof(path), "/api/%s", res->version);
    cJSON *list = NULL;
    int rc = kube_request(c, "GET", path, NULL, NULL, NULL, &list, st);
    if (rc == KUBE_ENOTFOUND) {
        cJSON_Delete(list);
        return 0;
    }
    int served = 0;
    const cJSON *resources = rc == 0 ? cJSON_GetObjectItemCaseSensitive(list, "resources") : NULL, *r;
    cJSON_ArrayForEach(r, resources) {
        const char *name = json_string(r, "name");
        if (name && strcmp(name, res->plural) == 0)
            served = 1;
    }
    cJSON_Delete(list);
    return rc < 0 ? rc : served;
}
