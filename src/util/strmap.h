/* A string-keyed hash map (open addressing, linear probing, tombstones).
 *
 * Keys are copied into the map and freed by it. Values are opaque pointers owned by the
 * caller unless a value destructor is given, in which case the map calls it on removal,
 * replacement and strmap_free. Not thread-safe: callers hold their own lock. */
#ifndef UTIL_STRMAP_H
#define UTIL_STRMAP_H

#include <stdbool.h>
#include <stddef.h>

struct strmap;
typedef void (*strmap_free_fn)(void *value);

struct strmap *strmap_new(strmap_free_fn free_value);
void strmap_free(struct strmap *m);

/* Inserts or replaces. Returns 0, or -ENOMEM (map unchanged). */
int strmap_put(struct strmap *m, const char *key, void *value);
/* The value, or NULL when absent. */
void *strmap_get(const struct strmap *m, const char *key);
bool strmap_has(const struct strmap *m, const char *key);
/* Removes the key; returns the value when the map has no destructor (else NULL). */
void *strmap_remove(struct strmap *m, const char *key);
/* Removes the key without calling the destructor, and returns the value. */
void *strmap_take(struct strmap *m, const char *key);
size_t strmap_size(const struct strmap *m);

/* Iteration: for (size_t it = 0; strmap_next(m, &it, &key, &value);) ...
 * The map must not be modified during iteration. */
bool strmap_next(const struct strmap *m, size_t *it, const char **key, void **value);

#endif
