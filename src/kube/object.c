#include "kube/object.h"

#include <stdlib.h>
#include <string.h>

#include "util/json.h"

/* One allocation holds the struct, its strings and the JSON text, so a cached object costs its
 * JSON plus a little over a hundred bytes. */
struct kube_object *kube_object_new(cJSON *tree, int strip_managed_fields, const char *index_label_key)
{
    cJSON *meta = cJSON_GetObjectItemCaseSensitive(tree, "metadata");
    if (!cJSON_IsObject(meta))
        return NULL;
    if (strip_managed_fields)
        cJSON_DeleteItemFromObjectCaseSensitive(meta, "managedFields");
    const char *name = json_string(meta, "name");
    if (!name || !*name)
        return NULL;
    const char *ns = json_string(meta, "namespace");
    const char *uid = json_string(meta, "uid");
    const char *rv = json_string(meta, "resourceVersion");
    const char *owner = NULL;
    cJSON *refs = cJSON_GetObjectItemCaseSensitive(meta, "ownerReferences");
    cJSON *ref;
    cJSON_ArrayForEach(ref, refs) {
        if (json_bool(ref, "controller", false)) {
            owner = json_string(ref, "uid");
            break;
        }
    }
    const char *label = NULL;
    if (index_label_key) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(meta, "labels"),
                                                          index_label_key);
        label = cJSON_IsString(v) ? v->valuestring : NULL;
    }
    if (!ns)
        ns = "";
    if (!uid)
        uid = "";
    if (!rv)
        rv = "";

    /* One print buffer of a typical object size: cJSON otherwise starts at 256 bytes and grows. */
    char *json = cJSON_PrintBuffered(tree, 4096, 0);
    if (!json)
        return NULL;
    size_t json_len = strlen(json);
    size_t ns_len = strlen(ns), name_len = strlen(name), uid_len = strlen(uid), rv_len = strlen(rv);
    size_t owner_len = owner ? strlen(owner) : 0;
    size_t label_len = label ? strlen(label) : 0;
    size_t key_len = ns_len ? ns_len + 1 + name_len : name_len;
    size_t total = sizeof(struct kube_object) + key_len + 1 + ns_len + 1 + name_len + 1 + uid_len + 1 +
                   rv_len + 1 + (owner ? owner_len + 1 : 0) + (label ? label_len + 1 : 0) + json_len + 1;
    struct kube_object *o = malloc(total);
    if (!o) {
        free(json);
        return NULL;
    }
    char *p = (char *)(o + 1);
#define PUT(field, src, n)            \
    do {                              \
        memcpy(p, (src), (n));        \
        p[(n)] = 0;                   \
        (field) = p;                  \
        p += (n) + 1;                 \
    } while (0)
    char *key = p;
    if (ns_len) {
        memcpy(p, ns, ns_len);
        p[ns_len] = '/';
        memcpy(p + ns_len + 1, name, name_len);
    } else {
        memcpy(p, name, name_len);
    }
    p[key_len] = 0;
    p += key_len + 1;
    o->key = key;
    PUT(o->namespace, ns, ns_len);
    PUT(o->name, name, name_len);
    PUT(o->uid, uid, uid_len);
    PUT(o->resource_version, rv, rv_len);
    o->owner_uid = NULL;
    if (owner)
        PUT(o->owner_uid, owner, owner_len);
    o->index_label = NULL;
    if (label)
        PUT(o->index_label, label, label_len);
    PUT(o->json, json, json_len);
#undef PUT
    o->json_len = json_len;
    o->generation = json_int(meta, "generation", 0);
    o->deleting = cJSON_GetObjectItemCaseSensitive(meta, "deletionTimestamp") != NULL;
    atomic_init(&o->refs, 1);
    free(json);
    return o;
}

struct kube_object *kube_object_ref(struct kube_object *o)
{
    if (o)
        atomic_fetch_add_explicit(&o->refs, 1, memory_order_relaxed);
    return o;
}

void kube_object_unref(struct kube_object *o)
{
    if (o && atomic_fetch_sub_explicit(&o->refs, 1, memory_order_acq_rel) == 1)
        free(o);
}

cJSON *kube_object_parse(const struct kube_object *o)
{
    return cJSON_ParseWithLength(o->json, o->json_len);
}

char *kube_object_label(const struct kube_object *o, const char *name)
{
    cJSON *tree = kube_object_parse(o);
    if (!tree)
        return NULL;
    cJSON *labels = json_path(tree, "metadata.labels");
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(labels, name);
    char *out = cJSON_IsString(v) ? strdup(v->valuestring) : NULL;
    cJSON_Delete(tree);
    return out;
}

void kube_object_list_free(struct kube_object **list, size_t n)
{
    if (!list)
        return;
    for (size_t i = 0; i < n; i++)
        kube_object_unref(list[i]);
    free(list);
}
