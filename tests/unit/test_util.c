#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/buf.h"
#include "util/clock.h"
#include "util/json.h"
#include "util/log.h"
#include "util/strmap.h"

Test(buf, appends_and_stays_terminated)
{
    struct buf b;
    buf_init(&b, 0);
    cr_assert_eq(buf_append_str(&b, "abc"), 0);
    cr_assert_eq(buf_printf(&b, "-%d", 42), 0);
    cr_assert_str_eq(b.data, "abc-42");
    buf_consume(&b, 2);
    cr_assert_str_eq(b.data, "c-42");
    char *s = buf_steal(&b);
    cr_assert_str_eq(s, "c-42");
    cr_assert_null(b.data);
    free(s);
}

Test(buf, refuses_to_pass_its_cap_and_keeps_content)
{
    struct buf b;
    buf_init(&b, 8);
    cr_assert_eq(buf_append(&b, "12345678", 8), 0);
    cr_assert_eq(buf_append(&b, "9", 1), -E2BIG);
    cr_assert_eq(b.len, 8);
    cr_assert_str_eq(b.data, "12345678");
    cr_assert_eq(buf_printf(&b, "%s", "x"), -E2BIG);
    buf_free(&b);
    buf_init(&b, 4);
    cr_assert_eq(buf_append(&b, "123456", 6), -E2BIG);
    cr_assert_eq(b.len, 0);
    buf_free(&b);
}

Test(strmap, put_get_replace_remove_and_grow)
{
    struct strmap *m = strmap_new(free);
    char key[32];
    for (int i = 0; i < 5000; i++) {
        snprintf(key, sizeof(key), "k%d", i);
        char *v = malloc(16);
        snprintf(v, 16, "v%d", i);
        cr_assert_eq(strmap_put(m, key, v), 0);
    }
    cr_assert_eq(strmap_size(m), 5000);
    cr_assert_str_eq(strmap_get(m, "k4321"), "v4321");
    cr_assert_eq(strmap_put(m, "k1", strdup("new")), 0);
    cr_assert_str_eq(strmap_get(m, "k1"), "new");
    cr_assert_eq(strmap_size(m), 5000);
    for (int i = 0; i < 5000; i += 2) {
        snprintf(key, sizeof(key), "k%d", i);
        strmap_remove(m, key);
    }
    cr_assert_eq(strmap_size(m), 2500);
    cr_assert_null(strmap_get(m, "k2"));
    cr_assert_str_eq(strmap_get(m, "k3"), "v3");
    size_t it = 0, n = 0;
    const char *k;
    while (strmap_next(m, &it, &k, NULL))
        n++;
    cr_assert_eq(n, 2500);
    /* remove + re-add churn must not grow without bound nor lose keys */
    for (int round = 0; round < 20; round++)
        for (int i = 1; i < 5000; i += 2) {
            snprintf(key, sizeof(key), "k%d", i);
            char *v = strmap_take(m, key);
            cr_assert_not_null(v);
            cr_assert_eq(strmap_put(m, key, v), 0);
        }
    cr_assert_eq(strmap_size(m), 2500);
    strmap_free(m);
}

Test(json, paths_and_defaults)
{
    cJSON *o = cJSON_Parse("{\"metadata\":{\"name\":\"p\",\"generation\":3,\"x\":true},\"a\":[1]}");
    cr_assert_str_eq(json_string(o, "metadata.name"), "p");
    cr_assert_null(json_string(o, "metadata.generation"));
    cr_assert_eq(json_int(o, "metadata.generation", -1), 3);
    cr_assert_eq(json_int(o, "metadata.missing", -1), -1);
    cr_assert(json_bool(o, "metadata.x", false));
    cr_assert_null(json_path(o, "a.b"));
    cJSON *s = json_ensure_object(o, "status.replicaStatuses");
    cr_assert_not_null(s);
    cr_assert_null(json_ensure_object(o, "metadata.name.x"));
    cr_assert_eq(json_set_string(s, "k", "v1"), 0);
    cr_assert_eq(json_set_string(s, "k", "v2"), 0);
    cr_assert_str_eq(json_string(o, "status.replicaStatuses.k"), "v2");
    cJSON_Delete(o);
}

Test(json, building_objects_and_env_lists)
{
    cJSON *o = cJSON_Parse("{\"a\":1,\"b\":null,\"c\":\"x\",\"d\":[]}");
    cJSON *child = NULL;
    cr_assert_eq(json_put_string(o, "a", "one"), 0); /* replaced where it stood */
    cr_assert_eq(json_put_bool(o, "e", true), 0);
    cr_assert_eq(json_put_number(o, "f", 2), 0);
    cr_assert_eq(json_put(o, "g", NULL), -ENOMEM);
    cr_assert_eq(json_child(o, "b", true, &child), 0); /* null becomes the array */
    cr_assert_eq(json_append_string(child, "s"), 0);
    cr_assert_eq(json_child(o, "c", false, &child), -EINVAL);
    bool empty = false;
    cr_assert_eq(json_array_is_empty(o, "d", &empty), 0);
    cr_assert(empty);
    cr_assert_eq(json_array_is_empty(o, "b", &empty), 0);
    cr_assert_not(empty);
    cr_assert_eq(json_array_is_empty(o, "c", &empty), -EINVAL);
    char *text = json_print(o);
    cr_assert_str_eq(text, "{\"a\":\"one\",\"b\":[\"s\"],\"c\":\"x\",\"d\":[],\"e\":true,\"f\":2}");
    free(text);
    cJSON_Delete(o);

    cJSON *env = cJSON_CreateArray();
    cr_assert_eq(json_env_append(env, "A", "1"), 0);
    cr_assert_eq(json_env_append(env, "A", "2"), 0);
    cr_assert_str_eq(json_string(json_env_find(env, "A"), "value"), "2", "the last one counts");
    cr_assert_null(json_env_find(env, "B"));
    cJSON_Delete(env);
}

Test(clock, rfc3339_round_trip)
{
    char s[21];
    clock_rfc3339(1795000000, s);
    cr_assert_str_eq(s, "2026-11-18T11:06:40Z");
    time_t t;
    cr_assert_eq(clock_parse_rfc3339(s, &t), 0);
    cr_assert_eq(t, 1795000000);
    cr_assert_eq(clock_parse_rfc3339("2026-11-18T12:06:40.123+01:00", &t), 0);
    cr_assert_eq(t, 1795000000);
    cr_assert_eq(clock_parse_rfc3339("yesterday", &t), -EINVAL);
    cr_assert_eq(clock_parse_rfc3339("2026-11-19T09:46:40", &t), -EINVAL);
    char m[28];
    clock_rfc3339_micro(m);
    cr_assert_eq(strlen(m), 27);
    cr_assert_eq(m[26], 'Z');
    cr_assert_eq(m[19], '.');
    char ms[25];
    clock_rfc3339_milli(ms);
    cr_assert_eq(strlen(ms), 24);
    cr_assert_eq(ms[23], 'Z');
    cr_assert_eq(ms[19], '.');
    cr_assert_eq(clock_parse_rfc3339(ms, &t), 0);
}

Test(clock, precise_ms_is_monotonic_and_agrees_with_ms)
{
    uint64_t before = clock_now_ms();
    double a = clock_now_ms_precise();
    clock_sleep_ms(2); /* the clocks under test: at least 2 ms pass, which they must show */
    double b = clock_now_ms_precise();
    uint64_t after = clock_now_ms();
    cr_assert_geq(b - a, 2.0, "%f", b - a);
    cr_assert_geq(a, (double)before);
    cr_assert_lt(b, (double)after + 1.0);
}

Test(clock, jitter_stays_in_range)
{
    for (int i = 0; i < 1000; i++)
        cr_assert_lt(clock_jitter(7), 7);
    cr_assert_eq(clock_jitter(0), 0);
}

static char *capture_log(void (*fn)(void))
{
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    log_set_fd(fds[1]);
    fn();
    log_set_fd(2);
    close(fds[1]);
    static char out[4096];
    ssize_t n = read(fds[0], out, sizeof(out) - 1);
    close(fds[0]);
    out[n > 0 ? n : 0] = 0;
    return out;
}

static void write_two(void)
{
    log_set_format(LOG_TEXT);
    log_info("watch restarted", "resource=%s rv=%d", "pods", 42);
    log_set_format(LOG_JSON);
    log_warn("quoted \"msg\"", "error=\"connection refused\" n=1");
    log_set_format(LOG_PLAIN);
    log_error("mpijob-worker: rank 1: 100% done", "%s", "");
    log_info("plain", "k=%d", 7);
    log_set_format(LOG_TEXT);
    log_debug("hidden", "x=%d", 1);
}

Test(log, text_and_json_records)
{
    char *out = capture_log(write_two);
    cr_assert_not_null(strstr(out, " INFO watch restarted resource=pods rv=42\n"), "%s", out);
    cr_assert_not_null(strstr(out, "\"level\":\"warn\",\"msg\":\"quoted \\\"msg\\\"\","
                                   "\"error\":\"connection refused\",\"n\":\"1\"}\n"), "%s", out);
    cr_assert_not_null(strstr(out, "}\nmpijob-worker: rank 1: 100% done\nplain k=7\n"), "%s", out);
    cr_assert_null(strstr(out, "hidden"));
}

static void write_quoted(void)
{
    const char *status = "pods \"p1\" not found\n(a \\ b)";
    log_set_format(LOG_TEXT);
    log_warn("get failed", "message=\"%s\" n=1", log_quote(status));
    log_set_format(LOG_JSON);
    log_warn("get failed", "message=\"%s\" n=1", log_quote(status));
    log_set_format(LOG_TEXT);
}

/* A server's message with quotes keeps a record whole: escaped in text, itself in JSON. */
Test(log, quoted_values_stay_one_field)
{
    char *out = capture_log(write_quoted);
    cr_assert_not_null(strstr(out, " WARN get failed message=\"pods \\\"p1\\\" not found (a \\\\ b)\" n=1\n"), "%s",
                       out);
    cr_assert_not_null(strstr(out, "\"msg\":\"get failed\",\"message\":\"pods \\\"p1\\\" not found (a \\\\ b)\","
                                   "\"n\":\"1\"}\n"),
                       "%s", out);
    cr_assert_str_eq(log_quote(NULL), "");
    char long_text[1000];
    memset(long_text, 'x', sizeof(long_text) - 1);
    long_text[sizeof(long_text) - 1] = 0;
    cr_assert_eq(strlen(log_quote(long_text)), 400);
}
