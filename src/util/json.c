#include "util/json.h"

#include <errno.h>
#include <stdlib.h>
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

/* The key is copied here because Debian's cJSON 1.7.15 cJSON_ReplaceItemInObject inserts the
 * item with a NULL key, and reports success, when its own copy of the key fails. */
int json_put(cJSON *obj, const char *name, cJSON *item)
{
    if (!item)
        return -ENOMEM;
    cJSON *old = cJSON_GetObjectItemCaseSensitive(obj, name);
    if (!old) {
        if (!cJSON_AddItemToObject(obj, name, item)) {
            cJSON_Delete(item);
            return -ENOMEM;
        }
        return 0;
    }
    size_t len = strlen(name) + 1;
    char *key = cJSON_malloc(len);
    if (!key) {
        cJSON_Delete(item);
        return -ENOMEM;
    }
    memcpy(key, name, len);
    if (item->string && !(item->type & cJSON_StringIsConst))
        cJSON_free(item->string);
    item->string = key;
    item->type &= ~cJSON_StringIsConst;
    cJSON_ReplaceItemViaPointer(obj, old, item); /* allocates nothing; cannot fail here */
    return 0;
}

int json_put_string(cJSON *obj, const char *name, const char *value)
{
    return json_put(obj, name, cJSON_CreateString(value));
}

int json_put_number(cJSON *obj, const char *name, double value)
{
    return json_put(obj, name, cJSON_CreateNumber(value));
}

int json_put_bool(cJSON *obj, const char *name, bool value)
{
    return json_put(obj, name, cJSON_CreateBool(value));
}

int json_append(cJSON *array, cJSON *item)
{
    if (!item)
        return -ENOMEM;
    if (!cJSON_AddItemToArray(array, item)) {
        cJSON_Delete(item);
        return -ENOMEM;
    }
    return 0;
}

int json_append_string(cJSON *array, const char *value)
{
    return json_append(array, cJSON_CreateString(value));
}

int json_child(cJSON *obj, const char *name, bool want_array, cJSON **out)
{
    cJSON *cur = cJSON_GetObjectItemCaseSensitive(obj, name);
    if (cur && !cJSON_IsNull(cur)) {
        *out = cur;
        return (want_array ? cJSON_IsArray(cur) : cJSON_IsObject(cur)) ? 0 : -EINVAL;
    }
    cJSON *made = want_array ? cJSON_CreateArray() : cJSON_CreateObject();
    int rc = json_put(obj, name, made);
    *out = rc == 0 ? made : NULL;
    return rc;
}

int json_array_is_empty(const cJSON *obj, const char *name, bool *empty)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);
    if (v && !cJSON_IsNull(v) && !cJSON_IsArray(v))
        return -EINVAL;
    *empty = cJSON_GetArraySize(v) == 0;
    return 0;
}

cJSON *json_env_find(const cJSON *env, const char *name)
{
    cJSON *found = NULL, *e;
    cJSON_ArrayForEach(e, env) {
        const char *n = json_string(e, "name");
        if (n && strcmp(n, name) == 0)
            found = e;
    }
    return found;
}

int json_env_append(cJSON *env, const char *name, const char *value)
{
    cJSON *e = cJSON_CreateObject();
    int rc = e ? json_put_string(e, "name", name) : -ENOMEM;
    if (rc == 0)
        rc = json_put_string(e, "value", value);
    if (rc < 0) {
        cJSON_Delete(e);
        return rc;
    }
    return json_append(env, e);
}

int json_print_line(FILE *f, const cJSON *obj)
{
    char *text = obj != NULL ? cJSON_PrintUnformatted(obj) : NULL;
    if (text == NULL)
        return -ENOMEM;
    fputs(text, f);
    fputc('\n', f);
    fflush(f);
    free(text);
    return 0;
}
