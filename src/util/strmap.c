#include "util/strmap.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define TOMBSTONE ((char *)(uintptr_t)1)

struct slot {
    char *key; /* NULL: empty; TOMBSTONE: removed */
    void *value;
    uint64_t hash;
};

struct strmap {
    struct slot *slots;
    size_t cap;  /* power of two */
    size_t size; /* live keys */
    size_t used; /* live + tombstones */
    strmap_free_fn free_value;
};

static uint64_t hash_str(const char *s)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 1099511628211ull;
    }
    return h ? h : 1;
}

struct strmap *strmap_new(strmap_free_fn free_value)
{
    struct strmap *m = calloc(1, sizeof(*m));
    if (!m)
        return NULL;
    m->cap = 16;
    m->slots = calloc(m->cap, sizeof(struct slot));
    if (!m->slots) {
        free(m);
        return NULL;
    }
    m->free_value = free_value;
    return m;
}

void strmap_free(struct strmap *m)
{
    if (!m)
        return;
    for (size_t i = 0; i < m->cap; i++) {
        struct slot *s = &m->slots[i];
        if (s->key && s->key != TOMBSTONE) {
            if (m->free_value)
                m->free_value(s->value);
            free(s->key);
        }
    }
    free(m->slots);
    free(m);
}

static struct slot *find(const struct strmap *m, const char *key, uint64_t h)
{
    size_t mask = m->cap - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
        struct slot *s = &m->slots[i];
        if (!s->key)
            return NULL;
        if (s->key != TOMBSTONE && s->hash == h && strcmp(s->key, key) == 0)
            return s;
    }
}

static int grow(struct strmap *m)
{
    size_t cap = m->size * 4 >= m->cap ? m->cap * 2 : m->cap; /* rehash in place if mostly tombstones */
    struct slot *slots = calloc(cap, sizeof(struct slot));
    if (!slots)
        return -ENOMEM;
    for (size_t i = 0; i < m->cap; i++) {
        struct slot *s = &m->slots[i];
        if (!s->key || s->key == TOMBSTONE)
            continue;
        size_t j = s->hash & (cap - 1);
        while (slots[j].key)
            j = (j + 1) & (cap - 1);
        slots[j] = *s;
    }
    free(m->slots);
    m->slots = slots;
    m->cap = cap;
    m->used = m->size;
    return 0;
}

int strmap_put(struct strmap *m, const char *key, void *value)
{
    uint64_t h = hash_str(key);
    struct slot *s = find(m, key, h);
    if (s) {
        if (m->free_value && s->value != value)
            m->free_value(s->value);
        s->value = value;
        return 0;
    }
    if ((m->used + 1) * 4 >= m->cap * 3) {
        int rc = grow(m);
        if (rc < 0)
            return rc;
    }
    char *k = strdup(key);
    if (!k)
        return -ENOMEM;
    size_t mask = m->cap - 1;
    size_t i = h & mask;
    while (m->slots[i].key && m->slots[i].key != TOMBSTONE)
        i = (i + 1) & mask;
    if (!m->slots[i].key)
        m->used++;
    m->slots[i].key = k;
    m->slots[i].value = value;
    m->slots[i].hash = h;
    m->size++;
    return 0;
}

void *strmap_get(const struct strmap *m, const char *key)
{
    struct slot *s = find(m, key, hash_str(key));
    return s ? s->value : NULL;
}

bool strmap_has(const struct strmap *m, const char *key) { return find(m, key, hash_str(key)) != NULL; }

void *strmap_take(struct strmap *m, const char *key)
{
    struct slot *s = find(m, key, hash_str(key));
    if (!s)
        return NULL;
    void *v = s->value;
    free(s->key);
    s->key = TOMBSTONE;
    s->value = NULL;
    m->size--;
    return v;
}

void *strmap_remove(struct strmap *m, const char *key)
{
    void *v = strmap_take(m, key);
    if (v && m->free_value) {
        m->free_value(v);
        return NULL;
    }
    return v;
}

size_t strmap_size(const struct strmap *m) { return m->size; }

bool strmap_next(const struct strmap *m, size_t *it, const char **key, void **value)
{
    for (; *it < m->cap; (*it)++) {
        struct slot *s = &m->slots[*it];
        if (s->key && s->key != TOMBSTONE) {
            if (key)
                *key = s->key;
            if (value)
                *value = s->value;
            (*it)++;
            return true;
        }
    }
    return false;
}
