#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kube/errors.h"
#include "kube/watch.h"
#include "util/json.h"

struct seen {
    int n;
    char types[16][12];
    char names[16][32];
    int stop_after; /* >0: return 7 on that event */
};

static int collect(void *ctx, enum kube_watch_type type, cJSON *object)
{
    struct seen *s = ctx;
    if (s->n < 16) {
        snprintf(s->types[s->n], sizeof(s->types[0]), "%s", kube_watch_type_name(type));
        const char *name = json_string(object, "metadata.name");
        snprintf(s->names[s->n], sizeof(s->names[0]), "%s", name ? name : "");
    }
    s->n++;
    cJSON_Delete(object);
    return s->stop_after && s->n == s->stop_after ? 7 : 0;
}

static const char *events =
    "{\"type\":\"ADDED\",\"object\":{\"kind\":\"Pod\",\"metadata\":{\"name\":\"p1\",\"resourceVersion\":\"5\"}}}\n"
    "{\"type\":\"MODIFIED\",\"object\":{\"kind\":\"Pod\",\"metadata\":{\"name\":\"p1\",\"resourceVersion\":\"6\"}}}\n"
    "\n"
    "{\"type\":\"DELETED\",\"object\":{\"kind\":\"Pod\",\"metadata\":{\"name\":\"p1\",\"resourceVersion\":\"7\"}}}\r\n"
    "{\"type\":\"BOOKMARK\",\"object\":{\"kind\":\"Pod\",\"metadata\":{\"resourceVersion\":\"8\"}}}\n";

Test(watch_decoder, whole_stream_in_one_chunk)
{
    struct seen s = {0};
    struct kube_watch_decoder *d = kube_watch_decoder_new(0, collect, &s);
    cr_assert_eq(kube_watch_decoder_feed(d, events, strlen(events)), 0);
    cr_assert_eq(kube_watch_decoder_finish(d), 0);
    cr_assert_eq(s.n, 4);
    cr_assert_str_eq(s.types[0], "ADDED");
    cr_assert_str_eq(s.types[2], "DELETED");
    cr_assert_str_eq(s.types[3], "BOOKMARK");
    cr_assert_str_eq(s.names[1], "p1");
    kube_watch_decoder_free(d);
}

Test(watch_decoder, byte_by_byte_gives_the_same_events)
{
    struct seen s = {0};
    struct kube_watch_decoder *d = kube_watch_decoder_new(0, collect, &s);
    for (size_t i = 0; events[i]; i++)
        cr_assert_eq(kube_watch_decoder_feed(d, events + i, 1), 0);
    cr_assert_eq(kube_watch_decoder_finish(d), 0);
    cr_assert_eq(s.n, 4);
    cr_assert_str_eq(s.types[1], "MODIFIED");
    kube_watch_decoder_free(d);
}

Test(watch_decoder, truncated_last_event_is_an_error_at_finish)
{
    struct seen s = {0};
    struct kube_watch_decoder *d = kube_watch_decoder_new(0, collect, &s);
    const char *partial = "{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"a\"}}}\n{\"type\":\"MODIF";
    cr_assert_eq(kube_watch_decoder_feed(d, partial, strlen(partial)), 0);
    cr_assert_eq(s.n, 1);
    cr_assert_eq(kube_watch_decoder_finish(d), KUBE_EDECODE);
    cr_assert_not_null(strstr(kube_watch_decoder_error(d), "inside an event"));
    kube_watch_decoder_free(d);
}

Test(watch_decoder, garbage_and_wrong_shapes_are_decode_errors)
{
    const char *bad[] = {
        "not json at all\n",
        "{\"type\":\"ADDED\"}\n",                       /* no object */
        "{\"type\":\"EXPLODED\",\"object\":{}}\n",      /* unknown type */
        "{\"type\":\"ADDED\",\"object\":\"string\"}\n", /* object not an object */
        "[1,2,3]\n",
        "{\"type\":\"ADDED\",\"object\":{\"a\":1}\n",   /* unbalanced */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct seen s = {0};
        struct kube_watch_decoder *d = kube_watch_decoder_new(0, collect, &s);
        cr_assert_eq(kube_watch_decoder_feed(d, bad[i], strlen(bad[i])), KUBE_EDECODE, "case %zu", i);
        cr_assert_eq(s.n, 0);
        cr_assert_neq(kube_watch_decoder_error(d)[0], 0);
        kube_watch_decoder_free(d);
    }
}

Test(watch_decoder, oversized_line_is_refused_without_buffering_it_all)
{
    struct seen s = {0};
    struct kube_watch_decoder *d = kube_watch_decoder_new(1024, collect, &s);
    char chunk[512];
    memset(chunk, 'x', sizeof(chunk));
    int rc = 0;
    for (int i = 0; i < 10 && rc == 0; i++)
        rc = kube_watch_decoder_feed(d, chunk, sizeof(chunk));
    cr_assert_eq(rc, KUBE_ETOOBIG);
    kube_watch_decoder_free(d);

    /* a complete line over the cap in one chunk, too */
    d = kube_watch_decoder_new(16, collect, &s);
    const char *line = "{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"a\"}}}\n";
    cr_assert_eq(kube_watch_decoder_feed(d, line, strlen(line)), KUBE_ETOOBIG);
    kube_watch_decoder_free(d);
}

Test(watch_decoder, callback_value_stops_the_stream)
{
    struct seen s = {.stop_after = 2};
    struct kube_watch_decoder *d = kube_watch_decoder_new(0, collect, &s);
    cr_assert_eq(kube_watch_decoder_feed(d, events, strlen(events)), 7);
    cr_assert_eq(s.n, 2);
    kube_watch_decoder_free(d);
}

Test(watch_decoder, error_event_is_delivered_as_error_type)
{
    struct seen s = {0};
    struct kube_watch_decoder *d = kube_watch_decoder_new(0, collect, &s);
    const char *e = "{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},"
                    "\"status\":\"Failure\",\"message\":\"The resourceVersion for the provided watch is too old.\","
                    "\"reason\":\"Expired\",\"code\":410}}\n";
    cr_assert_eq(kube_watch_decoder_feed(d, e, strlen(e)), 0);
    cr_assert_eq(s.n, 1);
    cr_assert_str_eq(s.types[0], "ERROR");
    cr_assert_eq(kube_error_from_status(410, "Expired"), KUBE_EGONE);
    kube_watch_decoder_free(d);
}
