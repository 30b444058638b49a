/* What an API server is and what it serves: its version (GET /version, which every client may
 * read) and, through discovery, whether it serves a resource (GET /api/v1 or /apis/GROUP/VERSION:
 * the group-version's resource list). Knows nothing about MPI. */
#ifndef KUBE_DISCOVERY_H
#define KUBE_DISCOVERY_H

#include "kube/client.h"

struct kube_server_version {
    char git_version[64]; /* "v1.36.3", "v1.33.5-eks-1234", as the server says it */
    int major, minor;     /* 1 and 36; -1 when the server's fields do not read as numbers. A
                             minor of "33+" (some managed clusters) reads as 33. */
};

/* 0, or the client's error (st has the server's answer). */
int kube_server_version(struct kube_client *c, struct kube_server_version *out, struct kube_status *st);

/* Whether the server serves res (its group-version lists res->plural): 1 it does, 0 it does not
 * (the group-version is unknown to the server, 404, or has no such resource), or the client's
 * error. */
int kube_resource_served(struct kube_client *c, const struct kube_resource *res, struct kube_status *st);

/* "v1", "batch/v1", as an object's apiVersion names the resource's group-version. */
void kube_group_version(const struct kube_resource *res, char *out, size_t len);

#endif
