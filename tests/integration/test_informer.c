/* Informer against the API-server double: list+watch, resume after dropped streams without
 * relisting, relist after expiry with DELETED synthesised, and convergence after many drops. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kube/client.h"
#include "kube/config.h"
#include "kube/informer.h"
#include "support/apiserver.h"
#include "support/deadline.h"
#include "support/kube_test.h"
#include "support/sanitizer.h"
#include "util/clock.h"
#include "util/json.h"
#include "util/strmap.h"

static struct test_apiserver srv;

#define REQUIRE_DOUBLE() TEST_REQUIRE_DOUBLE(&srv, "fault injection or request log")

/* How long a wait on the informer may take: generous, for a busy machine (scaled). */
#define WAIT_MS 60000
static struct kube_client *admin; /* writes objects */

/* What the handlers saw, per object name: adds, updates, deletes and the last version. */
struct tally {
    pthread_mutex_t lock;
    struct strmap *adds, *updates, *deletes, *last_rv;
    int total;
};

static void bump(struct strmap *m, const char *key)
{
    intptr_t n = (intptr_t)strmap_get(m, key);
    strmap_put(m, key, (void *)(n + 1));
}

static void on_add(void *ctx, struct kube_object *o)
{
    struct tally *t = ctx;
    pthread_mutex_lock(&t->lock);
    bump(t->adds, o->name);
    strmap_put(t->last_rv, o->name, strdup(o->resource_version));
    t->total++;
    pthread_mutex_unlock(&t->lock);
}

static void on_update(void *ctx, struct kube_object *old_obj, struct kube_object *o)
{
    struct tally *t = ctx;
    pthread_mutex_lock(&t->lock);
    bump(t->updates, o->name);
    strmap_put(t->last_rv, o->name, strdup(o->resource_version));
    t->total++;
    pthread_mutex_unlock(&t->lock);
}

static void on_delete(void *ctx, struct kube_object *o)
{
    struct tally *t = ctx;
    pthread_mutex_lock(&t->lock);
    bump(t->deletes, o->name);
    strmap_remove(t->last_rv, o->name);
    t->total++;
    pthread_mutex_unlock(&t->lock);
}

static struct tally *tally_new(void)
{
    struct tally *t = calloc(1, sizeof(*t));
    pthread_mutex_init(&t->lock, NULL);
    t->adds = strmap_new(NULL);
    t->updates = strmap_new(NULL);
    t->deletes = strmap_new(NULL);
    t->last_rv = strmap_new(free);
    return t;
}

static void tally_free(struct tally *t)
{
    strmap_free(t->adds);
    strmap_free(t->updates);
    strmap_free(t->deletes);
    strmap_free(t->last_rv);
    pthread_mutex_destroy(&t->lock);
    free(t);
}

static int tally_get(struct tally *t, struct strmap *m, const char *name)
{
    pthread_mutex_lock(&t->lock);
    int n = (int)(intptr_t)strmap_get(m, name);
    pthread_mutex_unlock(&t->lock);
    return n;
}

static struct kube_client *new_client(void) { return test_kube_client(&srv, NULL); }

static void setup(void)
{
    cr_assert_eq(test_apiserver_start(&srv), 0);
    admin = new_client();
}

static void teardown(void)
{
    kube_client_free(admin);
    test_apiserver_stop(&srv);
}

static void put_configmap(const char *name, const char *value, const char *label)
{
    char text[512];
    snprintf(text, sizeof(text),
             "{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"%s\",\"labels\":{\"set\":\"%s\"}},"
             "\"data\":{\"v\":\"%s\"}}",
             name, label, value);
    cJSON *cm = cJSON_Parse(text);
    struct kube_status st = {.retry_after_s = -1};
    int rc = kube_create(admin, &KUBE_CONFIGMAPS, "default", cm, NULL, &st);
    if (rc == KUBE_EALREADYEXISTS) {
        char patch[256];
        snprintf(patch, sizeof(patch), "{\"data\":{\"v\":\"%s\"}}", value);
        struct kube_patch_opts po = {.type = KUBE_PATCH_MERGE};
        rc = kube_patch(admin, &KUBE_CONFIGMAPS, "default", name, patch, &po, NULL, &st);
    }
    cr_assert_eq(rc, 0, "put %s: %s", name, error_str(rc));
    kube_status_clear(&st);
    cJSON_Delete(cm);
}

static void delete_configmap(const char *name)
{
    cr_assert_eq(kube_delete(admin, &KUBE_CONFIGMAPS, "default", name, NULL, NULL, NULL), 0);
}

/* Polls until the informer's cache equals the server's list (names and resourceVersions). */
static int converged(struct informer *inf, const char *selector)
{
    struct kube_list_opts lo = {.label_selector = selector};
    cJSON *items = NULL;
    if (kube_list_all(admin, &KUBE_CONFIGMAPS, "default", &lo, &items, NULL, NULL) != 0)
        return 0;
    int ok = (size_t)cJSON_GetArraySize(items) == informer_size(inf);
    cJSON *it;
    cJSON_ArrayForEach(it, items) {
        if (!ok)
            break;
        struct kube_object *o = informer_get(inf, "default", json_string(it, "metadata.name"));
        ok = o && strcmp(o->resource_version, json_string(it, "metadata.resourceVersion")) == 0;
        kube_object_unref(o);
    }
    cJSON_Delete(items);
    return ok;
}

struct convergence {
    struct informer *inf;
    const char *selector;
};

static bool is_converged(void *ctx)
{
    const struct convergence *c = ctx;
    return converged(c->inf, c->selector);
}

static void describe_cache(void *ctx, char *buf, size_t len)
{
    const struct convergence *c = ctx;
    struct kube_list_opts lo = {.label_selector = c->selector};
    cJSON *items = NULL;
    int on_server = kube_list_all(admin, &KUBE_CONFIGMAPS, "default", &lo, &items, NULL, NULL) == 0
                        ? cJSON_GetArraySize(items) : -1;
    cJSON_Delete(items);
    snprintf(buf, len, "%zu objects cached, %d on the server", informer_size(c->inf), on_server);
}

/* Waits until the informer's cache equals the server's list. */
static bool wait_converged(struct informer *inf, const char *selector)
{
    struct convergence c = {inf, selector};
    return test_wait_until("the cache to equal the server", WAIT_MS, is_converged, &c, describe_cache);
}

/* Proves that the handlers have seen every event of the watch until now, without waiting for time
 * to pass: a marker ConfigMap (label set=s) is created, and once its add has come, deleted; the
 * watch, which delivers in order, brings both. The tally counts them under their own name. The
 * add is waited for before the delete: a relist that fell between a create and a delete made
 * at once would never show the marker, and neither event would be owed (see the drops test). */
static void sync_events(struct tally *t)
{
    static int syncs;
    syncs++;
    put_configmap("marker", "0", "s");
    struct test_deadline d = test_deadline_in(WAIT_MS);
    while (tally_get(t, t->adds, "marker") < syncs)
        cr_assert(test_deadline_poll(&d), "the marker's add did not come in %s (adds %d, deletes %d)",
                  test_deadline_text(&d), tally_get(t, t->adds, "marker"), tally_get(t, t->deletes, "marker"));
    delete_configmap("marker");
    d = test_deadline_in(WAIT_MS);
    while (tally_get(t, t->deletes, "marker") < syncs)
        cr_assert(test_deadline_poll(&d), "the marker's delete did not come in %s (adds %d, deletes %d)",
                  test_deadline_text(&d), tally_get(t, t->adds, "marker"), tally_get(t, t->deletes, "marker"));
}

static struct informer *start_informer(struct kube_client *c, struct tally *t, const char *selector, long page)
{
    struct informer_config cfg = {.resource = &KUBE_CONFIGMAPS,
                                  .namespace = "default",
                                  .label_selector = selector,
                                  .page_size = page,
                                  .backoff_base_ms = 20,
                                  .backoff_max_ms = 200,
                                  .handlers = {on_add, on_update, on_delete, t}};
    struct informer *inf = NULL;
    cr_assert_eq(informer_new(c, &cfg, &inf), 0);
    cr_assert_eq(informer_start(inf), 0);
    cr_assert_eq(informer_wait_synced(inf, 10000), 0);
    return inf;
}

TestSuite(informer, .init = setup, .fini = teardown, .timeout = 240);

Test(informer, lists_in_pages_then_follows_the_watch)
{
    for (int i = 0; i < 7; i++) {
        char n[16];
        snprintf(n, sizeof(n), "cm%d", i);
        put_configmap(n, "0", "a");
    }
    struct kube_client *c = new_client();
    struct tally *t = tally_new();
    struct informer *inf = start_informer(c, t, NULL, 3);
    cr_assert(informer_has_synced(inf));
    cr_assert_eq(informer_size(inf), 7);
    cr_assert_eq(tally_get(t, t->adds, "cm6"), 1);

    /* the initial list came in pages of 3: three requests (the double's request log shows them) */
    if (srv.is_double) {
        cJSON *log = test_apiserver_log(&srv, 0);
        int lists = 0;
        cJSON *e;
        cJSON_ArrayForEach(e, log) {
            const char *verb = json_string(e, "verb");
            if (verb && strcmp(verb, "list") == 0 && strstr(json_string(e, "path"), "configmaps"))
                lists++;
        }
        cJSON_Delete(log);
        cr_assert_eq(lists, 3, "paginated initial list: %d list requests", lists);
    }


    put_configmap("cm1", "1", "a");
    put_configmap("new", "0", "a");
    delete_configmap("cm2");
    cr_assert(wait_converged(inf, NULL));
    sync_events(t);
    cr_assert_eq(tally_get(t, t->updates, "cm1"), 1);
    cr_assert_eq(tally_get(t, t->adds, "new"), 1);
    cr_assert_eq(tally_get(t, t->deletes, "cm2"), 1);

    struct kube_object **list = NULL;
    int n = informer_list(inf, "default", &list);
    cr_assert_eq(n, 7);
    kube_object_list_free(list, (size_t)n);
    n = informer_list(inf, "elsewhere", &list);
    cr_assert_eq(n, 0);
    kube_object_list_free(list, 0);

    informer_free(inf);
    tally_free(t);
    kube_client_free(c);
}

Test(informer, label_selector_and_owner_index)
{
    put_configmap("in", "0", "mine");
    put_configmap("out", "0", "other");
    const char *owned = "{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"owned\",\"labels\":"
                        "{\"set\":\"mine\"},\"ownerReferences\":[{\"apiVersion\":\"kubeflow.org/v2beta1\","
                        "\"kind\":\"MPIJob\",\"name\":\"j\",\"uid\":\"job-uid-1\",\"controller\":true}]}}";
    cJSON *cm = cJSON_Parse(owned);
    cr_assert_eq(kube_create(admin, &KUBE_CONFIGMAPS, "default", cm, NULL, NULL), 0);
    cJSON_Delete(cm);
    struct kube_client *c = new_client();
    struct tally *t = tally_new();
    struct informer *inf = start_informer(c, t, "set=mine", 0);
    cr_assert_eq(informer_size(inf), 2);
    struct kube_object *o = informer_get(inf, "default", "out");
    cr_assert_null(o);
    struct kube_object **list = NULL;
    int n = informer_list_by_owner(inf, "job-uid-1", &list);
    cr_assert_eq(n, 1);
    cr_assert_str_eq(list[0]->name, "owned");
    kube_object_list_free(list, (size_t)n);

    /* an object that stops matching the selector leaves the cache */
    struct kube_patch_opts po = {.type = KUBE_PATCH_MERGE};
    cr_assert_eq(kube_patch(admin, &KUBE_CONFIGMAPS, "default", "in", "{\"metadata\":{\"labels\":{\"set\":\"x\"}}}",
                            &po, NULL, NULL), 0);
    cr_assert(wait_converged(inf, "set=mine"));
    cr_assert_eq(informer_size(inf), 1);
    informer_free(inf);
    tally_free(t);
    kube_client_free(c);
}

static void drop_data(cJSON *object) { cJSON_DeleteItemFromObjectCaseSensitive(object, "data"); }

static bool cached_without_data(struct informer *inf, const char *name)
{
    struct kube_object *o = informer_get(inf, "default", name);
    bool ok = o && strstr(o->json, "\"data\"") == NULL && strstr(o->json, "\"labels\"") != NULL;
    cr_assert(!o || ok, "%s cached with its data or without its labels: %s", name, o->json);
    kube_object_unref(o);
    return ok;
}

/* A transform (client-go's SetTransform) shapes what is cached, from the list and the watch. */
Test(informer, a_transform_applies_to_listed_and_watched_objects)
{
    put_configmap("listed", "0", "s");
    struct kube_client *c = new_client();
    struct tally *t = tally_new();
    struct informer_config cfg = {.resource = &KUBE_CONFIGMAPS,
                                  .namespace = "default",
                                  .transform = drop_data,
                                  .handlers = {on_add, on_update, on_delete, t}};
    struct informer *inf = NULL;
    cr_assert_eq(informer_new(c, &cfg, &inf), 0);
    cr_assert_eq(informer_start(inf), 0);
    cr_assert_eq(informer_wait_synced(inf, 10000), 0);
    cr_assert(cached_without_data(inf, "listed"));
    put_configmap("watched", "0", "s");
    put_configmap("listed", "1", "s");
    cr_assert(wait_converged(inf, NULL));
    cr_assert(cached_without_data(inf, "watched"));
    cr_assert(cached_without_data(inf, "listed"));
    informer_free(inf);
    tally_free(t);
    kube_client_free(c);
}

Test(informer, stream_dropped_mid_event_resumes_without_relist_loss_or_duplicate)
{
    REQUIRE_DOUBLE();
    put_configmap("a", "0", "s");
    struct kube_client *c = new_client();
    struct tally *t = tally_new();
    struct informer *inf = start_informer(c, t, NULL, 0);
    put_configmap("a", "1", "s");
    cr_assert(wait_converged(inf, NULL));

    cr_assert_eq(test_apiserver_fault(&srv, "{\"dropWatches\":\"midEvent\"}"), 0);
    put_configmap("b", "0", "s"); /* this event is cut in half on the wire */
    put_configmap("a", "2", "s");
    cr_assert(wait_converged(inf, NULL));
    sync_events(t); /* a duplicate of the event cut on the wire would have come before */

    cr_assert_eq(tally_get(t, t->adds, "b"), 1, "the event cut on the wire arrives exactly once");
    cr_assert_eq(tally_get(t, t->adds, "a"), 1);
    cr_assert_eq(tally_get(t, t->updates, "a"), 2);
    struct informer_stats st;
    informer_stats(inf, &st);
    cr_assert_eq(st.lists, 1, "resume from the last resourceVersion, no relist (lists=%llu)",
                 (unsigned long long)st.lists);
    cr_assert_geq(st.watch_restarts, 1);
    informer_free(inf);
    tally_free(t);
    kube_client_free(c);
}

Test(informer, expired_version_relists_and_synthesises_deleted)
{
    REQUIRE_DOUBLE();
    put_configmap("keep", "0", "s");
    put_configmap("gone1", "0", "s");
    put_configmap("gone2", "0", "s");
    put_configmap("changed", "0", "s");
    struct kube_client *c = new_client();
    struct tally *t = tally_new();
    struct informer *inf = start_informer(c, t, NULL, 0);
    cr_assert_eq(informer_size(inf), 4);

    /* Disconnect the informer, change things behind its back, then compact history. */
    cr_assert_eq(test_apiserver_fault(&srv, "{\"blockWatches\":true}"), 0);
    cr_assert_eq(test_apiserver_fault(&srv, "{\"dropWatches\":true}"), 0);
    delete_configmap("gone1");
    delete_configmap("gone2");
    put_configmap("changed", "1", "s");
    put_configmap("fresh", "0", "s");
    cr_assert_eq(test_apiserver_fault(&srv, "{\"compact\":true}"), 0);
    cr_assert_eq(test_apiserver_fault(&srv, "{\"blockWatches\":false}"), 0);

    cr_assert(wait_converged(inf, NULL), "cache converges after the relist");
    sync_events(t); /* every event of the relist, a wrong one too, has come */
    cr_assert_eq(tally_get(t, t->deletes, "gone1"), 1, "DELETED synthesised for a vanished object");
    cr_assert_eq(tally_get(t, t->deletes, "gone2"), 1);
    cr_assert_eq(tally_get(t, t->updates, "changed"), 1);
    cr_assert_eq(tally_get(t, t->adds, "fresh"), 1);
    cr_assert_eq(tally_get(t, t->updates, "keep"), 0, "unchanged objects are not re-delivered");
    struct informer_stats st;
    informer_stats(inf, &st);
    cr_assert_eq(st.relists, 1);
    informer_free(inf);
    tally_free(t);
    kube_client_free(c);
}

Test(informer, twenty_drops_in_a_row_still_converge)
{
    REQUIRE_DOUBLE();
    struct kube_client *c = new_client();
    struct tally *t = tally_new();
    put_configmap("x", "0", "s");
    struct informer *inf = start_informer(c, t, NULL, 0);
    char name[32], value[16];
    for (int i = 0; i < 20; i++) {
        snprintf(name, sizeof(name), "n%d", i);
        snprintf(value, sizeof(value), "%d", i + 1);
        put_configmap(name, "0", "s");
        put_configmap("x", value, "s");
        if (i % 3 == 2)
            delete_configmap(name);
        cr_assert_eq(test_apiserver_fault(&srv, i % 2 ? "{\"dropWatches\":true}" : "{\"dropWatches\":\"midEvent\"}"), 0);
        if (i % 5 == 4) {
            /* now and then the history is compacted too, forcing a relist */
            cr_assert_eq(test_apiserver_fault(&srv, "{\"compact\":true}"), 0);
            cr_assert_eq(test_apiserver_fault(&srv, "{\"dropWatches\":true}"), 0);
        }
        /* Not a wait: a pause that lets the drops fall between writes, and the informer resume
         * between them. The verdict does not depend on where they fall. */
        clock_sleep_ms(30);
    }
    cr_assert(wait_converged(inf, NULL), "cache equals the server after 20 drops");
    sync_events(t);
    for (int i = 0; i < 20; i++) {
        snprintf(name, sizeof(name), "n%d", i);
        int adds = tally_get(t, t->adds, name), deletes = tally_get(t, t->deletes, name);
        if (i % 3 == 2) {
            /* Created and deleted while the watch may be down: when the relist after a
             * compaction comes later, the object never existed as far as the cache can
             * know, and neither event is owed. Seen, it is seen once and deleted once. */
            cr_assert_leq(adds, 1, "%s added at most once (adds=%d)", name, adds);
            cr_assert_eq(deletes, adds, "%s deleted once if it was added (adds=%d deletes=%d)",
                         name, adds, deletes);
        } else {
            cr_assert_eq(adds, 1, "%s added once (adds=%d)", name, adds);
            cr_assert_eq(deletes, 0, "%s never deleted (deletes=%d)", name, deletes);
        }
    }
    struct kube_object *x = informer_get(inf, "default", "x");
    cJSON *tree = kube_object_parse(x);
    cr_assert_str_eq(json_string(tree, "data.v"), "20");
    cJSON_Delete(tree);
    kube_object_unref(x);
    informer_free(inf);
    tally_free(t);
    kube_client_free(c);
}

/* An informer stopped while its watch waits out a 429's Retry-After stops at once and keeps
 * nothing of that answer. The Status the 429 carried (its message and details) was once left
 * behind: found on a real control plane, where API Priority and Fairness throttled a test's
 * watch just as the test stopped its controller. */
Test(informer, stopped_while_its_watch_waits_on_a_429_leaves_nothing)
{
    REQUIRE_DOUBLE();
    struct kube_client *c = new_client();
    struct tally *t = tally_new();
    struct informer *inf = start_informer(c, t, NULL, 0);
    cr_assert_eq(test_apiserver_fault(&srv, "{\"failNext\":{\"count\":1,\"code\":429,\"retryAfter\":60,"
                                            "\"verb\":\"watch\"}}"), 0);
    cr_assert_eq(test_apiserver_fault(&srv, "{\"dropWatches\":true}"), 0);
    /* the watch is made again and meets the 429: it waits out the Retry-After */
    struct kube_client_stats stats = {0};
    struct test_deadline d = test_deadline_in(WAIT_MS);
    for (kube_client_stats(c, &stats); stats.server_throttles == 0; kube_client_stats(c, &stats))
        cr_assert(test_deadline_poll(&d), "the watch met no 429 after %s", test_deadline_text(&d));
    informer_free(inf);
    tally_free(t);
    kube_client_free(c);
    cr_assert_eq(test_leak_check(), 0, "the informer left memory behind (LeakSanitizer's report above)");
}

Test(informer, survives_an_apiserver_restart)
{
    REQUIRE_DOUBLE();
    put_configmap("r", "0", "s");
    struct kube_client *c = new_client();
    struct tally *t = tally_new();
    struct informer *inf = start_informer(c, t, NULL, 0);
    cr_assert_eq(test_apiserver_fault(&srv, "{\"restart\":{\"downMs\":700}}"), 0);
    /* The server went down: the informer's watch ended. It is back when a request goes through. */
    struct test_deadline d = test_deadline_in(WAIT_MS);
    for (struct informer_stats st = {0}; st.watch_restarts == 0; informer_stats(inf, &st))
        cr_assert(test_deadline_poll(&d), "the watch never ended after %s", test_deadline_text(&d));
    while (test_apiserver_request(&srv, "GET", "/api/v1/namespaces/default/configmaps/r", NULL, NULL, NULL) != 200)
        cr_assert(test_deadline_poll(&d), "the server did not come back after %s", test_deadline_text(&d));
    put_configmap("r", "1", "s");
    put_configmap("after", "0", "s");
    cr_assert(wait_converged(inf, NULL));
    cr_assert_eq(tally_get(t, t->adds, "after"), 1);
    informer_free(inf);
    tally_free(t);
    kube_client_free(c);
}
