#include "util/json.h"

#include <errno.h>
#include <string.h>

/* Copies the next member name of a dotted path into part and advances *p past it.
 * false when the name does not fit. */
static bool next_part(const char **p, char *part, size_t size)
{
    const char *dot = strchr(*p, '.');
    size_t n = dot ? (size_t)(dot - *p) : strlen(*p);
    if (n >= size)
        return false;
    memcpy(part, *p, n);
    part[n] = 0;
    *p = dot ? dot + 1 : *p + n;
    return true;
}

cJSON *json_path(const cJSON *root, const char *dotted)
{
    const cJSON *cur = root;
    const char *p = dotted;
    char part[256];
    while (cur && *p) {
        if (!next_part(&p, part, sizeof(part)))
            return NULL;
        if (!cJSON_IsObject(cur))
            return NULL;
        cur = cJSON_GetObjectItemCaseSensitive(cur, part);
    }
    return (cJSON *)cur;
}

const char *json_string(const cJSON *root, const char *dotted)
{
    const cJSON *v = json_path(root, dotted);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

long long json_int(const cJSON *root, const char *dotted, long long def)
{
    const cJSON *v = json_path(root, dotted);
    return cJSON_IsNumber(v) ? (long long)v->valuedouble : def;
}

bool json_bool(const cJSON *root, const char *dotted, bool def)
{
    const cJSON *v = json_path(root, dotted);
    return cJSON_IsBool(v) ? cJSON_IsTrue(v) : def;
}

cJSON *json_ensure_object(cJSON *root, const char *dotted)
{
    cJSON *cur = root;
    const char *p = dotted;
    char part[256];
    while (*p) {
        if (!next_part(&p, part, sizeof(part)))
            return NULL;
        cJSON *next = cJSON_GetObjectItemCaseSensitive(cur, part);
        if (!next) {
            next = cJSON_AddObjectToObject(cur, part);
            if (!next)
                return NULL;
        } else if (!cJSON_IsObject(next)) {
            return NULL;
        }
        cur = next;
    }
    return cur;
}

int json_set_string(cJSON *obj, const char *name, const char *value)
{
    cJSON *have = cJSON_GetObjectItemCaseSensitive(obj, name);
    if (cJSON_IsString(have)) {
        /* In place: on failure the old value stays, unlike cJSON_ReplaceItemInObject, which in
         * cJSON 1.7.15 can leave an item without a key when memory runs out. */
        return cJSON_SetValuestring(have, value) ? 0 : -ENOMEM;
    }
    cJSON *s = cJSON_CreateString(value);
    if (!s)
        return -ENOMEM;
    if (!cJSON_AddItemToObject(obj, name, s)) {
        cJSON_Delete(s);
        return -ENOMEM;
    }
    if (have)
        cJSON_Delete(cJSON_DetachItemViaPointer(obj, have)); /* the new member went in first */
    return 0;
}

char *json_print(const cJSON *obj) { return cJSON_PrintUnformatted(obj); }
