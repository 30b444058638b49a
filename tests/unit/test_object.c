#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "kube/object.h"
#include "util/json.h"

static const char *pod =
    "{\"kind\":\"Pod\",\"apiVersion\":\"v1\",\"metadata\":{\"name\":\"j-worker-0\",\"namespace\":\"ns\","
    "\"uid\":\"u1\",\"resourceVersion\":\"42\",\"generation\":2,\"labels\":{\"role\":\"worker\"},"
    "\"ownerReferences\":[{\"uid\":\"other\"},{\"uid\":\"job-uid\",\"controller\":true}],"
    "\"managedFields\":[{\"manager\":\"x\",\"fieldsV1\":{\"f:spec\":{}}}]},\"spec\":{\"x\":1}}";

Test(object, extracts_metadata_and_strips_managed_fields)
{
    cJSON *tree = cJSON_Parse(pod);
    struct kube_object *o = kube_object_new(tree, 1, "role");
    cJSON_Delete(tree);
    cr_assert_not_null(o);
    cr_assert_str_eq(o->index_label, "worker", "the asked-for label is kept");
    cr_assert_str_eq(o->key, "ns/j-worker-0");
    cr_assert_str_eq(o->namespace, "ns");
    cr_assert_str_eq(o->name, "j-worker-0");
    cr_assert_str_eq(o->uid, "u1");
    cr_assert_str_eq(o->resource_version, "42");
    cr_assert_str_eq(o->owner_uid, "job-uid");
    cr_assert_eq(o->generation, 2);
    cr_assert_eq(o->deleting, 0);
    cr_assert_null(strstr(o->json, "managedFields"));
    cJSON *back = kube_object_parse(o);
    cr_assert_eq(json_int(back, "spec.x", 0), 1);
    cJSON_Delete(back);
    char *role = kube_object_label(o, "role");
    cr_assert_str_eq(role, "worker");
    free(role);
    cr_assert_null(kube_object_label(o, "absent"));

    struct kube_object *r = kube_object_ref(o);
    kube_object_unref(o);
    cr_assert_str_eq(r->name, "j-worker-0"); /* still alive through the second reference */
    kube_object_unref(r);
}

Test(object, cluster_scoped_and_rejects_nameless)
{
    cJSON *tree = cJSON_Parse("{\"metadata\":{\"name\":\"n1\",\"deletionTimestamp\":\"x\"}}");
    struct kube_object *o = kube_object_new(tree, 0, "role");
    cr_assert_str_eq(o->key, "n1");
    cr_assert_null(o->index_label, "no such label: NULL");
    cr_assert_str_eq(o->namespace, "");
    cr_assert_null(o->owner_uid);
    cr_assert_eq(o->deleting, 1);
    kube_object_unref(o);
    cJSON_Delete(tree);
    tree = cJSON_Parse("{\"metadata\":{\"namespace\":\"x\"}}");
    cr_assert_null(kube_object_new(tree, 1, NULL));
    cJSON_Delete(tree);
    tree = cJSON_Parse("[]");
    cr_assert_null(kube_object_new(tree, 1, NULL));
    cJSON_Delete(tree);
}
