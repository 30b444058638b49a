/* Fuzzes the watch stream decoder and the cache-object builder behind it.
 * The first byte picks how the input is split into chunks, as the network would. */
#include <stddef.h>
#include <stdint.h>

#include "kube/object.h"
#include "kube/watch.h"

static int on_event(void *ctx, enum kube_watch_type type, cJSON *object)
{
    (void)ctx;
    if (type != KUBE_WATCH_BOOKMARK && type != KUBE_WATCH_ERROR) {
        struct kube_object *o = kube_object_new(object, 1, NULL);
        if (o) {
            cJSON *back = kube_object_parse(o);
            cJSON_Delete(back);
            kube_object_unref(o);
        }
    }
    cJSON_Delete(object);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    size_t chunk = (size_t)(data[0] % 64) + 1;
    data++;
    size--;
    struct kube_watch_decoder *d = kube_watch_decoder_new(4096, on_event, NULL);
    if (!d)
        return 0;
    int rc = 0;
    for (size_t off = 0; off < size && rc == 0; off += chunk) {
        size_t n = size - off < chunk ? size - off : chunk;
        rc = kube_watch_decoder_feed(d, (const char *)data + off, n);
    }
    if (rc == 0)
        kube_watch_decoder_finish(d);
    kube_watch_decoder_free(d);
    return 0;
}
