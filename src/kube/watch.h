/* Watch streams: chunked, newline-delimited JSON events.
 *
 * kube_watch_decoder turns bytes into events and is independent of HTTP (it is fuzzed).
 * kube_watch runs one watch request until the server ends it, the caller stops it, a 410
 * arrives (HTTP 410 or an ERROR event with code 410: KUBE_EGONE), or the connection drops.
 * Resuming and relisting are the informer's job. */
#ifndef KUBE_WATCH_H
#define KUBE_WATCH_H

#include <cjson/cJSON.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include "kube/client.h"

enum kube_watch_type { KUBE_WATCH_ADDED, KUBE_WATCH_MODIFIED, KUBE_WATCH_DELETED,
                       KUBE_WATCH_BOOKMARK, KUBE_WATCH_ERROR };

const char *kube_watch_type_name(enum kube_watch_type t);

/* One event. The callback owns `object` (cJSON_Delete it, or keep it). Returning non-zero
 * stops the stream; that value is returned by feed/kube_watch. */
typedef int (*kube_watch_fn)(void *ctx, enum kube_watch_type type, cJSON *object);

struct kube_watch_decoder;

/* max_line: the cap for one event line (KUBE_ETOOBIG past it). */
struct kube_watch_decoder *kube_watch_decoder_new(size_t max_line, kube_watch_fn fn, void *ctx);
/* Feeds bytes; calls fn for every complete line. Returns 0, the callback's non-zero value,
 * KUBE_ETOOBIG, or KUBE_EDECODE for a line that is not a watch event (message in err). */
int kube_watch_decoder_feed(struct kube_watch_decoder *d, const char *data, size_t len);
/* At end of stream: KUBE_EDECODE when a partial line is left over (a truncated event). */
int kube_watch_decoder_finish(struct kube_watch_decoder *d);
const char *kube_watch_decoder_error(const struct kube_watch_decoder *d);
void kube_watch_decoder_free(struct kube_watch_decoder *d);

struct kube_watch_opts {
    const char *label_selector;
    const char *field_selector;
    const char *resource_version;
    bool allow_bookmarks;
    int timeout_s;          /* server-side timeoutSeconds; 0: server default */
    struct kube_cancel *cancel; /* optional: kube_cancel_fire ends the watch at once */
};

/* Runs one watch. Returns 0 when the server closed the stream cleanly, KUBE_EGONE on 410,
 * KUBE_ECANCELED when stopped, the callback's value, or an error code. ERROR events other than
 * 410 are returned as the matching code with the Status in *st. */
int kube_watch(struct kube_client *c, const struct kube_resource *res, const char *ns,
               const struct kube_watch_opts *opts, kube_watch_fn fn, void *ctx,
               struct kube_status *st);

#endif
