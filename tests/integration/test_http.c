/* The health and metrics endpoint over real HTTP on 127.0.0.1 (a port the kernel picks):
 * /healthz, /readyz in both states, /metrics (content type, text valid per
 * tests/unit/promcheck.py), HEAD, 404, 405, bad listen addresses. */
#include <criterion/criterion.h>

#include "support/deadline.h"
#include "support/promcheck.h"
#include <curl/curl.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "server/http.h"
#include "server/metrics.h"

static struct metrics *reg;
static struct http_server *srv;
static atomic_bool is_ready;

static bool ready_cb(void *ctx, char *why, size_t len)
{
    if (atomic_load(&is_ready))
        return true;
    snprintf(why, len, "%s", (const char *)ctx);
    return false;
}

static char *metrics_cb(void *ctx) { return metrics_render(ctx); }

static void setup(void)
{
    reg = metrics_new();
    cr_assert_not_null(reg);
    const char *const l[] = {"namespace", "team \"a\"", NULL};
    const double b[] = {0.01, 0.1, 1};
    metrics_counter_add(reg, "mpijob_jobs_created_total", "MPIJobs created.", 2, l);
    metrics_gauge_set(reg, "mpijob_is_leader", "1 while this replica leads.", 1, NULL);
    metrics_histogram_observe(reg, "mpijob_reconcile_duration_seconds", "Reconcile time.", b, 3,
                              0.05, NULL);
    struct http_handlers h = {
        .ready = ready_cb,
        .ready_ctx = "caches not synced",
        .metrics = metrics_cb,
        .metrics_ctx = reg,
    };
    char err[256];
    srv = http_server_start("127.0.0.1:0", &h, err, sizeof(err));
    cr_assert_not_null(srv, "%s", err);
    cr_assert_gt(http_server_port(srv), 0);
}

static void teardown(void)
{
    http_server_stop(srv);
    metrics_free(reg);
}

struct resp {
    long code;
    char body[65536];
    size_t len;
    char content_type[128];
    char allow[128];
};

static size_t on_body(char *p, size_t sz, size_t n, void *ud)
{
    struct resp *r = ud;
    size_t k = sz * n;
    if (r->len + k >= sizeof(r->body))
        return 0;
    memcpy(r->body + r->len, p, k);
    r->len += k;
    r->body[r->len] = 0;
    return k;
}

static size_t on_header(char *p, size_t sz, size_t n, void *ud)
{
    struct resp *r = ud;
    size_t k = sz * n;
    if (k > 6 && strncasecmp(p, "Allow:", 6) == 0)
        snprintf(r->allow, sizeof(r->allow), "%.*s", (int)(k - 6), p + 6);
    return k;
}

static void request(const char *method, const char *path, struct resp *r)
{
    memset(r, 0, sizeof(*r));
    char url[256];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d%s", http_server_port(srv), path);
    CURL *c = curl_easy_init();
    cr_assert_not_null(c);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_NOPROXY, "*");
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)test_ms(30000));
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, r);
    if (strcmp(method, "HEAD") == 0)
        curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
    else if (strcmp(method, "POST") == 0)
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, "x=1");
    else if (strcmp(method, "GET") != 0)
        curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    CURLcode rc = curl_easy_perform(c);
    cr_assert_eq(rc, CURLE_OK, "%s %s: %s", method, path, curl_easy_strerror(rc));
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r->code);
    char *ct = NULL;
    curl_easy_getinfo(c, CURLINFO_CONTENT_TYPE, &ct);
    if (ct)
        snprintf(r->content_type, sizeof(r->content_type), "%s", ct);
    curl_easy_cleanup(c);
}

static int promcheck(const char *text) { return promcheck_run(text, true); }

TestSuite(http_server, .init = setup, .fini = teardown, .timeout = 120);

Test(http_server, healthz)
{
    struct resp r;
    request("GET", "/healthz", &r);
    cr_assert_eq(r.code, 200);
    cr_assert_str_eq(r.body, "ok");
    request("HEAD", "/healthz", &r);
    cr_assert_eq(r.code, 200);
    cr_assert_eq(r.len, 0);
}

Test(http_server, readyz_follows_the_callback)
{
    struct resp r;
    atomic_store(&is_ready, false);
    request("GET", "/readyz", &r);
    cr_assert_eq(r.code, 503);
    cr_assert(strstr(r.body, "caches not synced"), "%s", r.body);
    atomic_store(&is_ready, true);
    request("GET", "/readyz", &r);
    cr_assert_eq(r.code, 200);
    cr_assert_str_eq(r.body, "ok");
    /* the query string does not change the path */
    request("GET", "/readyz?verbose=1", &r);
    cr_assert_eq(r.code, 200);
}

Test(http_server, metrics_text_and_content_type)
{
    struct resp r;
    request("GET", "/metrics", &r);
    cr_assert_eq(r.code, 200);
    cr_assert_str_eq(r.content_type, "text/plain; version=0.0.4; charset=utf-8");
    cr_assert(strstr(r.body, "# TYPE mpijob_jobs_created_total counter\n"
                             "mpijob_jobs_created_total{namespace=\"team \\\"a\\\"\"} 2\n"),
              "%s", r.body);
    cr_assert(strstr(r.body, "mpijob_reconcile_duration_seconds_bucket{le=\"+Inf\"} 1\n"));
    cr_assert_eq(promcheck(r.body), 0, "%s", r.body);
    /* updates show on the next scrape */
    metrics_gauge_set(reg, "mpijob_is_leader", NULL, 0, NULL);
    request("GET", "/metrics", &r);
    cr_assert(strstr(r.body, "\nmpijob_is_leader 0\n"), "%s", r.body);
}

Test(http_server, unknown_path_is_404)
{
    struct resp r;
    request("GET", "/nothing", &r);
    cr_assert_eq(r.code, 404);
    request("GET", "/metrics/", &r);
    cr_assert_eq(r.code, 404);
}

Test(http_server, other_methods_are_405)
{
    static const char *const methods[] = {"POST", "PUT", "DELETE", "PATCH"};
    for (size_t i = 0; i < 4; i++) {
        struct resp r;
        request(methods[i], "/healthz", &r);
        cr_assert_eq(r.code, 405, "%s", methods[i]);
        cr_assert(strstr(r.allow, "GET"), "%s", r.allow);
    }
}

Test(http_server, many_sequential_scrapes)
{
    for (int i = 0; i < 50; i++) {
        struct resp r;
        metrics_counter_add(reg, "scrapes_total", "Scrapes.", 1, NULL);
        request("GET", "/metrics", &r);
        cr_assert_eq(r.code, 200);
    }
    char *text = metrics_render(reg);
    cr_assert(strstr(text, "scrapes_total 50\n"));
    free(text);
}

Test(http_server, no_metrics_callback_means_no_metrics_path)
{
    char err[256];
    struct http_handlers h = {0};
    struct http_server *s2 = http_server_start("127.0.0.1:0", &h, err, sizeof(err));
    cr_assert_not_null(s2, "%s", err);
    struct http_server *keep = srv;
    srv = s2;
    struct resp r;
    request("GET", "/metrics", &r);
    cr_assert_eq(r.code, 404);
    request("GET", "/readyz", &r);
    cr_assert_eq(r.code, 200);
    srv = keep;
    http_server_stop(s2);
}

Test(http_server, bad_and_busy_addresses_fail_with_a_message)
{
    char err[256];
    struct http_handlers h = {0};
    static const char *const bad[] = {"", "8080", "127.0.0.1:", "127.0.0.1:99999",
                                      "127.0.0.1:80x", "not-an-ip:80", "[::1:80", NULL};
    for (size_t i = 0; bad[i]; i++) {
        err[0] = 0;
        cr_assert_null(http_server_start(bad[i], &h, err, sizeof(err)), "%s", bad[i]);
        cr_assert(strstr(err, "bad listen address"), "%s: %s", bad[i], err);
    }
    cr_assert_null(http_server_start(NULL, &h, err, sizeof(err)));
    char busy[64];
    snprintf(busy, sizeof(busy), "127.0.0.1:%d", http_server_port(srv));
    err[0] = 0;
    cr_assert_null(http_server_start(busy, &h, err, sizeof(err)));
    cr_assert(strstr(err, "cannot listen on"), "%s", err);
    http_server_stop(NULL);
}
