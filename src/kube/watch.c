#include "kube/watch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/buf.h"
#include "util/json.h"
#include "util/log.h"

struct kube_watch_decoder {
    struct buf line;
    size_t max_line;
    kube_watch_fn fn;
    void *ctx;
    char error[160];
};

static const char *type_names[] = {"ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"};

const char *kube_watch_type_name(enum kube_watch_type t)
{
    return (unsigned)t <= KUBE_WATCH_ERROR ? type_names[t] : "UNKNOWN";
}

struct kube_watch_decoder *kube_watch_decoder_new(size_t max_line, kube_watch_fn fn, void *ctx)
{
    struct kube_watch_decoder *d = calloc(1, sizeof(*d));
    if (!d)
        return NULL;
    d->max_line = max_line ? max_line : (16u << 20);
    buf_init(&d->line, d->max_line);
    d->fn = fn;
    d->ctx = ctx;
    return d;
}

void kube_watch_decoder_free(struct kube_watch_decoder *d)
{
    if (!d)
        return;
    buf_free(&d->line);
    free(d);
}

const char *kube_watch_decoder_error(const struct kube_watch_decoder *d) { return d->error; }

static int decode_line(struct kube_watch_decoder *d, const char *text, size_t len)
{
    while (len && (text[len - 1] == '\r' || text[len - 1] == ' ' || text[len - 1] == '\t'))
        len--;
    while (len && (*text == ' ' || *text == '\t' || *text == '\r')) {
        text++;
        len--;
    }
    if (len == 0)
        return 0; /* blank keep-alive line */
    cJSON *ev = cJSON_ParseWithLength(text, len);
    if (!ev) {
        snprintf(d->error, sizeof(d->error), "watch event is not valid JSON (%zu bytes)", len);
        return KUBE_EDECODE;
    }
    const char *type = json_string(ev, "type");
    int t = -1;
    for (int i = 0; type && i <= KUBE_WATCH_ERROR; i++)
        if (strcmp(type, type_names[i]) == 0)
            t = i;
    cJSON *object = cJSON_DetachItemFromObjectCaseSensitive(ev, "object");
    if (t < 0 || !cJSON_IsObject(object)) {
        snprintf(d->error, sizeof(d->error), "watch event without a known type and an object (type %.40s)",
                 type ? type : "missing");
        cJSON_Delete(object);
        cJSON_Delete(ev);
        return KUBE_EDECODE;
    }
    cJSON_Delete(ev);
    return d->fn(d->ctx, (enum kube_watch_type)t, object);
}

int kube_watch_decoder_feed(struct kube_watch_decoder *d, const char *data, size_t len)
{
    while (len) {
        const char *nl = memchr(data, '\n', len);
        size_t take = nl ? (size_t)(nl - data) : len;
        int rc;
        if (nl && d->line.len == 0) {
            /* The whole line is in this chunk: decode in place, no copy. */
            if (take > d->max_line) {
                snprintf(d->error, sizeof(d->error), "watch event larger than %zu bytes", d->max_line);
                return KUBE_ETOOBIG;
            }
            rc = decode_line(d, data, take);
        } else {
            if (buf_append(&d->line, data, take) < 0) {
                snprintf(d->error, sizeof(d->error), "watch event larger than %zu bytes", d->max_line);
                return KUBE_ETOOBIG;
            }
            if (!nl)
                return 0;
            rc = decode_line(d, d->line.data, d->line.len);
            buf_reset(&d->line);
        }
        if (rc != 0)
            return rc;
        data += take + 1;
        len -= take + 1;
    }
    return 0;
}

int kube_watch_decoder_finish(struct kube_watch_decoder *d)
{
    if (d->line.len == 0)
        return 0;
    /* A last line without its newline may still be complete (some servers omit it). */
    cJSON *probe = cJSON_ParseWithLength(d->line.data, d->line.len);
    if (!probe) {
        snprintf(d->error, sizeof(d->error), "stream ended inside an event (%zu bytes pending)", d->line.len);
        buf_reset(&d->line);
        return KUBE_EDECODE;
    }
    cJSON_Delete(probe);
    int rc = decode_line(d, d->line.data, d->line.len);
    buf_reset(&d->line);
    return rc;
}

/* ---- one watch request ----------------------------------------------------------------- */

struct watch_run {
    struct kube_watch_decoder *decoder;
    kube_watch_fn fn;
    void *ctx;
    struct kube_status *st;
    int result;        /* first non-zero result from the decoder or an ERROR event */
};

static int on_event(void *ctx, enum kube_watch_type type, cJSON *object)
{
    struct watch_run *run = ctx;
    if (type == KUBE_WATCH_ERROR) {
        long code = json_int(object, "code", 0);
        const char *reason = json_string(object, "reason");
        int rc = kube_error_from_status(code, reason);
        if (run->st) {
            kube_status_clear(run->st);
            run->st->http_code = code;
            snprintf(run->st->reason, sizeof(run->st->reason), "%s", reason ? reason : "");
            const char *msg = json_string(object, "message");
            run->st->message = msg ? strdup(msg) : NULL;
        }
        cJSON_Delete(object);
        return rc < 0 ? rc : KUBE_EHTTP;
    }
    return run->fn(run->ctx, type, object);
}

static size_t on_bytes(void *ctx, const char *data, size_t len)
{
    struct watch_run *run = ctx;
    int rc = kube_watch_decoder_feed(run->decoder, data, len);
    if (rc != 0) {
        run->result = rc;
        return 0; /* stops the transfer */
    }
    return len;
}

int kube_watch(struct kube_client *c, const struct kube_resource *res, const char *ns,
               const struct kube_watch_opts *opts, kube_watch_fn fn, void *ctx,
               struct kube_status *st)
{
    struct watch_run run = {.fn = fn, .ctx = ctx, .st = st};
    run.decoder = kube_watch_decoder_new(kube_client_options(c)->max_watch_line, on_event, &run);
    char *path = kube_path(res, ns, NULL, NULL);
    struct buf q;
    buf_init(&q, 0);
    int rc = run.decoder && path ? 0 : KUBE_ENOMEM;
    if (rc == 0)
        rc = buf_append_str(&q, "watch=1");
    if (rc == 0 && opts->allow_bookmarks)
        rc = buf_append_str(&q, "&allowWatchBookmarks=true");
    if (rc == 0 && opts->timeout_s > 0)
        rc = buf_printf(&q, "&timeoutSeconds=%d", opts->timeout_s);
    const struct {
        const char *key, *value;
    } params[] = {{"resourceVersion", opts->resource_version},
                  {"labelSelector", opts->label_selector},
                  {"fieldSelector", opts->field_selector}};
    for (size_t i = 0; rc == 0 && i < sizeof(params) / sizeof(params[0]); i++) {
        if (!params[i].value || !*params[i].value)
            continue;
        char *v = kube_escape(params[i].value);
        rc = v ? buf_printf(&q, "&%s=%s", params[i].key, v) : KUBE_ENOMEM;
        free(v);
    }
    if (rc < 0) {
        rc = KUBE_ENOMEM;
        goto out;
    }

    rc = kube_request_stream(c, path, q.data, on_bytes, &run, opts->cancel, st);
    if (run.result != 0) {
        rc = run.result; /* decoder error, ERROR event or the callback's own value */
        if (rc == KUBE_EDECODE || rc == KUBE_ETOOBIG)
            log_warn("watch stream undecodable", "resource=%s error=\"%s\"", res->plural,
                     kube_watch_decoder_error(run.decoder));
    } else if (rc == 0) {
        rc = kube_watch_decoder_finish(run.decoder);
    }
out:
    buf_free(&q);
    free(path);
    kube_watch_decoder_free(run.decoder);
    return rc;
}
