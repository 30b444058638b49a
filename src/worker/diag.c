#include "worker/diag.h"

#include <stdarg.h>

static void vlog(enum log_level level, const char *command, const char *fmt, va_list ap)
{
    char msg[3072];
    int n = snprintf(msg, sizeof(msg), "mpijob-worker%s%s: ", command ? " " : "", command ? command : "");
    if (n < 0)
        return;
    vsnprintf(msg + n, sizeof(msg) - (size_t)n, fmt, ap);
    log_write(level, msg, "%s", "");
}

void wk_log(enum log_level level, const char *command, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vlog(level, command, fmt, ap);
    va_end(ap);
}

void wk_usage_error(const char *command, void (*usage)(FILE *), const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vlog(LOG_ERROR, command, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    usage(stderr);
}
