/* The API-server double's request log (support/apiserver.h's test_apiserver_log), counted:
 * which requests a test's code sent, and in what order the server took them. */
#ifndef TESTS_SUPPORT_REQUEST_LOG_H
#define TESTS_SUPPORT_REQUEST_LOG_H

#include <stdbool.h>

#include <cjson/cJSON.h>

#include "support/apiserver.h"

enum test_path_match {
    TEST_PATH_EXACT,  /* the path is path */
    TEST_PATH_SUFFIX, /* the path ends with path */
    TEST_PATH_UNDER,  /* the path is path followed by '/' and more */
};

/* Which entries count; every field left 0 or NULL matches anything. */
struct test_request_filter {
    const char *method;   /* "GET", "POST"... */
    const char *verb;     /* "create", "update", "list"... */
    const char *resource; /* "leases", "configmaps"... */
    const char *path;
    enum test_path_match path_match;
    int code;
    /* Any other test of the entry (its fields: seq, method, path, query, verb, resource,
     * subresource, namespace, name, contentType, code, body). */
    bool (*match)(const cJSON *entry, const void *arg);
    const void *arg;
};

/* The entries with seq >= since that pass the filter: their number, and (each may be NULL) the
 * seq of the first and of the last of them (0 when none). -1 when the log cannot be read. */
int test_count_requests(struct test_apiserver *s, int since, const struct test_request_filter *f, int *first_seq,
                        int *last_seq);

/* The seq of the newest entry of the log, 0 when it is empty. */
int test_last_seq(struct test_apiserver *s);

#endif
