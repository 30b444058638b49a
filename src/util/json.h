/* Small helpers over cJSON for reading Kubernetes objects. */
#ifndef UTIL_JSON_H
#define UTIL_JSON_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdio.h>

/* Follows a dotted path of object members ("metadata.name"); NULL when any step is missing. */
cJSON *json_path(const cJSON *root, const char *dotted);
/* The string at the path, or NULL when missing or not a string. Borrowed from root. */
const char *json_string(const cJSON *root, const char *dotted);
/* The number at the path as a long long, or def. */
long long json_int(const cJSON *root, const char *dotted, long long def);
bool json_bool(const cJSON *root, const char *dotted, bool def);
/* Creates every missing object on the path and returns the last one (NULL on ENOMEM or when a
 * step exists but is not an object). */
cJSON *json_ensure_object(cJSON *root, const char *dotted);
/* Replaces (or adds) member name of obj with a string. 0 or -ENOMEM. */
int json_set_string(cJSON *obj, const char *name, const char *value);

/* Building objects. Each returns 0 or -ENOMEM (-EINVAL where said) and leaves obj as it was on
 * failure. */

/* obj[name] = item, in the place of a member of that name or at the end. Takes item, which is
 * deleted on failure (NULL reads as a failed allocation). */
int json_put(cJSON *obj, const char *name, cJSON *item);
int json_put_string(cJSON *obj, const char *name, const char *value);
int json_put_number(cJSON *obj, const char *name, double value);
int json_put_bool(cJSON *obj, const char *name, bool value);
/* Appends item to array; takes item as json_put does. */
int json_append(cJSON *array, cJSON *item);
int json_append_string(cJSON *array, const char *value);
/* obj[name] as an object (an array when want_array) in *out, created when absent or null;
 * -EINVAL when it holds another type. Borrowed from obj. */
int json_child(cJSON *obj, const char *name, bool want_array, cJSON **out);
/* *empty: obj[name] is absent, null or an empty array; -EINVAL when it is anything else. */
int json_array_is_empty(const cJSON *obj, const char *name, bool *empty);

/* Writes obj as one line of JSON to f and flushes f: the JSON-lines output of the worker and the
 * benchmarks. 0, or -ENOMEM when it cannot be printed (nothing is written then). */
int json_print_line(FILE *f, const cJSON *obj);

/* Kubernetes EnvVar lists ([{"name": ..., "value": ...}, ...]). */

/* The entry Kubernetes uses for name (the last one), or NULL. Borrowed from env. */
cJSON *json_env_find(const cJSON *env, const char *name);
/* Appends {"name": name, "value": value}. */
int json_env_append(cJSON *env, const char *name, const char *value);
/* Compact serialisation; caller frees. NULL on ENOMEM. */
char *json_print(const cJSON *obj);

#endif
