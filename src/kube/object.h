/* Cached Kubernetes objects: immutable and reference-counted.
 *
 * An informer keeps each object as its compact JSON text (managedFields removed, as client-go
 * informers commonly do) plus the metadata that caches and controllers index on. A reader
 * takes a reference instead of copying; kube_object_parse gives a private cJSON tree when the
 * whole object is needed. Nothing in a kube_object changes after kube_object_new. */
#ifndef KUBE_OBJECT_H
#define KUBE_OBJECT_H

#include <cjson/cJSON.h>
#include <stdatomic.h>
#include <stddef.h>

struct kube_object {
    atomic_int refs;
    const char *key;              /* "namespace/name", or "name" for cluster-scoped objects */
    const char *namespace;        /* "" for cluster-scoped */
    const char *name;
    const char *uid;
    const char *resource_version;
    const char *owner_uid;        /* the controller ownerReference's uid, or NULL */
    const char *index_label;      /* the value of the label the cache was asked to keep, or NULL */
    long long generation;
    int deleting;                 /* metadata.deletionTimestamp is set */
    const char *json;             /* compact JSON of the object */
    size_t json_len;
};

/* Builds an object from a tree (which the caller keeps). Removes metadata.managedFields from
 * the tree first when strip_managed_fields. Keeps the value of label index_label_key (may be
 * NULL) in index_label, so that event handlers need not parse the JSON again for it. NULL on
 * ENOMEM or when metadata.name is missing. */
struct kube_object *kube_object_new(cJSON *tree, int strip_managed_fields, const char *index_label_key);
struct kube_object *kube_object_ref(struct kube_object *o);
void kube_object_unref(struct kube_object *o);
/* A fresh tree of the object; caller cJSON_Delete's. NULL on ENOMEM. */
cJSON *kube_object_parse(const struct kube_object *o);
/* The value of label `name`, copied into a malloc'd string, or NULL. Parses the object: for a
 * label read on every event, use the informer's index_label instead. */
char *kube_object_label(const struct kube_object *o, const char *name);

/* Frees an array of references as returned by informer_list*. */
void kube_object_list_free(struct kube_object **list, size_t n);

#endif
