/* Small helpers over cJSON for reading Kubernetes objects. */
#ifndef UTIL_JSON_H
#define UTIL_JSON_H

#include <cjson/cJSON.h>
#include <stdbool.h>

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
/* Compact serialisation; caller frees. NULL on ENOMEM. */
char *json_print(const cJSON *obj);

#endif
