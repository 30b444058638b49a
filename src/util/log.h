/* One logging call for the whole project: a level, a message, and key=value fields.
 *
 *   log_info("watch restarted", "resource=%s rv=%s", "pods", rv);
 *
 * Text output:  2026-11-21T13:05:33.123Z INFO watch restarted resource=pods rv=42
 * JSON output:  {"ts":"...","level":"info","msg":"watch restarted","resource":"pods","rv":"42"}
 * Plain output: watch restarted resource=pods rv=42
 * Fields are whitespace-separated key=value pairs; a value containing spaces is written as
 * key="a b". Plain output is for a command-line program whose diagnostics are read as written
 * (the worker's stderr becomes its pod's termination message). Thread-safe: each record is
 * written with a single write(2). */
#ifndef UTIL_LOG_H
#define UTIL_LOG_H

enum log_level { LOG_DEBUG = 0, LOG_INFO = 1, LOG_WARN = 2, LOG_ERROR = 3 };
enum log_format { LOG_TEXT = 0, LOG_JSON = 1, LOG_PLAIN = 2 };

void log_set_level(enum log_level level);
enum log_level log_get_level(void);
void log_set_format(enum log_format format);
/* Where records go; default stderr (fd 2). */
void log_set_fd(int fd);

void log_write(enum log_level level, const char *msg, const char *fields_fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* s (NULL: "") made fit for a quoted value, key="%s": '"' and '\' escaped with '\', control
 * characters as spaces, at most 400 bytes. The text is in a buffer of the calling thread that
 * the fourth next call reuses, so a few can be used as arguments of one log call. */
const char *log_quote(const char *s);

#define log_debug(msg, ...) do { if (log_get_level() <= LOG_DEBUG) log_write(LOG_DEBUG, msg, __VA_ARGS__); } while (0)
#define log_info(msg, ...)  log_write(LOG_INFO, msg, __VA_ARGS__)
#define log_warn(msg, ...)  log_write(LOG_WARN, msg, __VA_ARGS__)
#define log_error(msg, ...) log_write(LOG_ERROR, msg, __VA_ARGS__)

#endif
