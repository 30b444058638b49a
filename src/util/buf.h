/* A growable byte buffer with a hard cap, for everything read from the network.
 *
 * The buffer owns `data`; it is always NUL-terminated (data[len] == 0) once anything was
 * appended, so text can be handed to parsers directly. buf_free releases it. */
#ifndef UTIL_BUF_H
#define UTIL_BUF_H

#include <stddef.h>

struct buf {
    char *data;
    size_t len;
    size_t cap;
    size_t max; /* appends that would pass this many bytes fail with -E2BIG; 0 = no cap */
};

void buf_init(struct buf *b, size_t max);
/* 0, -E2BIG past the cap, or -ENOMEM. On failure the buffer is unchanged. */
int buf_append(struct buf *b, const void *data, size_t len);
int buf_append_str(struct buf *b, const char *s);
int buf_printf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Drops the first n bytes, keeping the rest. */
void buf_consume(struct buf *b, size_t n);
void buf_reset(struct buf *b);
/* Hands the data to the caller (free() it) and leaves the buffer empty. */
char *buf_steal(struct buf *b);
void buf_free(struct buf *b);

/* Appends formatted text to a fixed buffer out[0..len) at *used (advanced); text that does not
 * fit is cut at the end, never overflowed, and out stays terminated. For messages built in a
 * caller's array. */
void str_appendf(char *out, size_t len, size_t *used, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

#endif
