#include "util/log.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "util/clock.h"

static enum log_level current_level = LOG_INFO;
static enum log_format current_format = LOG_TEXT;
static int output_fd = 2;

void log_set_level(enum log_level level) { current_level = level; }
enum log_level log_get_level(void) { return current_level; }
void log_set_format(enum log_format format) { current_format = format; }
void log_set_fd(int fd) { output_fd = fd; }

static const char *level_names[] = {"DEBUG", "INFO", "WARN", "ERROR"};
static const char *level_json[] = {"debug", "info", "warn", "error"};

struct line {
    char data[4096];
    size_t len;
};

static void put(struct line *l, const char *s, size_t n)
{
    size_t room = sizeof(l->data) - 2 - l->len; /* keep space for '\n' */
    if (n > room)
        n = room;
    memcpy(l->data + l->len, s, n);
    l->len += n;
}

static void put_str(struct line *l, const char *s) { put(l, s, strlen(s)); }

static void put_json_string(struct line *l, const char *s, size_t n)
{
    put(l, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char esc[8];
        if (c == '"' || c == '\\') {
            esc[0] = '\\';
            esc[1] = (char)c;
            put(l, esc, 2);
        } else if (c < 0x20) {
            snprintf(esc, sizeof(esc), "\\u%04x", c);
            put_str(l, esc);
        } else {
            put(l, (const char *)&s[i], 1);
        }
    }
    put(l, "\"", 1);
}

const char *log_quote(const char *s)
{
    static _Thread_local char bufs[4][404];
    static _Thread_local unsigned next;
    char *out = bufs[next++ % 4];
    size_t n = 0;
    for (; s && *s && n < 400; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            out[n++] = '\\';
        out[n++] = c < 0x20 || c == 0x7f ? ' ' : (char)c;
    }
    out[n] = 0;
    return out;
}

/* Splits "k=v k2="a b"" into pairs and writes them as JSON members; inside quotes, '\x'
 * stands for x (log_quote). */
static void put_fields_json(struct line *l, const char *fields)
{
    const char *p = fields;
    char val[2048]; /* fields hold at most 2047 bytes */
    while (*p) {
        while (*p == ' ')
            p++;
        if (!*p)
            break;
        const char *key = p;
        while (*p && *p != '=' && *p != ' ')
            p++;
        size_t key_len = (size_t)(p - key);
        size_t val_len = 0;
        if (*p == '=') {
            p++;
            bool quoted = *p == '"';
            for (p += quoted; *p && (quoted ? *p != '"' : *p != ' '); p++) {
                if (quoted && *p == '\\' && p[1])
                    p++;
                val[val_len++] = *p;
            }
            if (quoted && *p == '"')
                p++;
        }
        put(l, ",", 1);
        put_json_string(l, key, key_len);
        put(l, ":", 1);
        put_json_string(l, val, val_len);
    }
}

void log_write(enum log_level level, const char *msg, const char *fields_fmt, ...)
{
    if (level < current_level)
        return;
    if ((int)level < 0 || level > LOG_ERROR)
        level = LOG_ERROR;

    char fields[2048] = "";
    if (fields_fmt && *fields_fmt) {
        va_list ap;
        va_start(ap, fields_fmt);
        vsnprintf(fields, sizeof(fields), fields_fmt, ap);
        va_end(ap);
    }

    char stamp[25];
    clock_rfc3339_milli(stamp);

    struct line l = {.len = 0};
    if (current_format == LOG_JSON) {
        put_str(&l, "{\"ts\":\"");
        put_str(&l, stamp);
        put_str(&l, "\",\"level\":\"");
        put_str(&l, level_json[level]);
        put_str(&l, "\",\"msg\":");
        put_json_string(&l, msg, strlen(msg));
        put_fields_json(&l, fields);
        put(&l, "}", 1);
    } else {
        if (current_format != LOG_PLAIN) {
            put_str(&l, stamp);
            put(&l, " ", 1);
            put_str(&l, level_names[level]);
            put(&l, " ", 1);
        }
        put_str(&l, msg);
        if (fields[0]) {
            put(&l, " ", 1);
            put_str(&l, fields);
        }
    }
    l.data[l.len++] = '\n';
    ssize_t w = write(output_fd, l.data, l.len);
    (void)w;
}
