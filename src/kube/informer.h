/* Informer: list+watch of one resource (optionally one namespace and label/field selector)
 * into an in-memory cache, with add/update/delete handlers.
 *
 * Its thread lists (paginated), then watches from the list's resourceVersion with bookmarks.
 * After a dropped stream it resumes from the last resourceVersion seen (no relist); on 410
 * (HTTP or ERROR event) it relists and delivers DELETED for objects that vanished meanwhile,
 * so the cache and the handlers converge. Errors back off exponentially with jitter.
 *
 * The cache holds immutable, reference-counted kube_objects indexed by key ("ns/name"),
 * namespace and controller-owner UID. Handlers run on the informer thread, in event order;
 * the objects passed are borrowed for the call (take a reference to keep one). */
#ifndef KUBE_INFORMER_H
#define KUBE_INFORMER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kube/client.h"
#include "kube/object.h"

struct informer_handlers {
    void (*on_add)(void *ctx, struct kube_object *obj);
    void (*on_update)(void *ctx, struct kube_object *old_obj, struct kube_object *new_obj);
    void (*on_delete)(void *ctx, struct kube_object *obj);
    void *ctx;
};

struct informer_config {
    const struct kube_resource *resource;
    const char *namespace;       /* NULL or "": every namespace */
    const char *label_selector;  /* optional */
    const char *field_selector;  /* optional */
    long page_size;              /* list limit; default 500 */
    int watch_timeout_s;         /* server-side watch timeout; default 300 (jittered) */
    uint64_t backoff_base_ms;    /* after errors; default 200 */
    uint64_t backoff_max_ms;     /* default 10000 */
    bool keep_managed_fields;    /* default false: managedFields are dropped from the cache */
    const char *index_label;     /* optional: a label whose value every cached object keeps in
                                    kube_object.index_label, read by handlers without parsing */
    void (*transform)(cJSON *object); /* optional, as client-go's SetTransform: called on every
                                    listed or watched object before it is cached, to remove the
                                    parts that no handler or reader needs (metadata must stay) */
    struct informer_handlers handlers;
};

struct informer_stats {
    uint64_t lists;           /* complete lists (initial + relists) */
    uint64_t relists;         /* lists after the first */
    uint64_t watches;         /* watch requests started */
    uint64_t watch_restarts;  /* watches resumed after a stream ended or failed */
    uint64_t events;          /* watch events applied (bookmarks excluded) */
    uint64_t bookmarks;
    uint64_t errors;
};

struct informer;

/* Copies the config's strings. The client is borrowed and must outlive the informer. */
int informer_new(struct kube_client *c, const struct informer_config *cfg, struct informer **out);
/* Starts the list/watch thread. */
int informer_start(struct informer *inf);
bool informer_has_synced(struct informer *inf);
/* Waits until the first list is in the cache: 0, or KUBE_ETIMEOUT. */
int informer_wait_synced(struct informer *inf, uint64_t timeout_ms);
/* A new reference, or NULL. ns may be NULL for cluster-scoped resources. */
struct kube_object *informer_get(struct informer *inf, const char *ns, const char *name);
/* References to every cached object (ns NULL) or those of one namespace; the caller frees the
 * array with kube_object_list_free. Returns the count, or KUBE_ENOMEM. */
int informer_list(struct informer *inf, const char *ns, struct kube_object ***out);
/* References to the objects whose controller owner has this uid. */
int informer_list_by_owner(struct informer *inf, const char *owner_uid, struct kube_object ***out);
size_t informer_size(struct informer *inf);
/* The last resourceVersion the informer has seen (list, event or bookmark); caller frees. */
char *informer_last_resource_version(struct informer *inf);
void informer_stats(struct informer *inf, struct informer_stats *out);
/* Stops the thread (interrupting a watch) and waits for it. Safe to call twice. */
void informer_stop(struct informer *inf);
/* Stops if needed and frees the cache. */
void informer_free(struct informer *inf);

/* The event-application core, exposed for the watch-decode benchmark and unit tests: applies
 * one watch event to the cache without any HTTP (the informer's thread uses the same path). */
int informer_apply_event(struct informer *inf, int watch_type, cJSON *object);

#endif
