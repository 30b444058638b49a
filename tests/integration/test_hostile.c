/* Hostile MPIJobs against the API-server double and a running controller.
 *
 * A few hundred generated bodies that are wrong in every way a user (or a fuzzer) can be wrong:
 * a wrong JSON type at each field, numbers out of range, unknown enum values, strings of
 * megabytes, names that are no DNS names, missing or null templates, containers that are not
 * objects, deep nesting. Each must end either refused by the API server (400, 422, or 413 for a
 * body over its size cap) or, when the schema lets it through, with the MPIJob Failed for
 * InvalidSpec. A valid job created before them and one created after them both get their
 * launcher Job: the operator keeps serving. HOSTILE_VERBOSE=1 prints every case's outcome. */
#include <criterion/criterion.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kube/client.h"
#include "kube/config.h"
#include "mpijob/builders.h"
#include "mpijob/controller.h"
#include "support/apiserver.h"
#include "support/controller_env.h"
#include "support/deadline.h"
#include "support/kube_test.h"
#include "support/kube_wait.h"
#include "util/json.h"

static struct test_controller_env env;

/* How long a wait on the controller may take: generous, for a busy machine (scaled). */
#define WAIT_MS 60000

static void setup(void) { test_controller_env_start(&env); }
static void teardown(void) { test_controller_env_stop(&env); }

static cJSON *valid_job(const char *name) { return test_mpijob(name, NULL); }

/* ---- the generated cases ------------------------------------------------------------------- */

#define MAX_CASES 400
#define LAUNCHER "spec.mpiReplicaSpecs.Launcher"
#define WORKER "spec.mpiReplicaSpecs.Worker"
#define LCONTAINERS LAUNCHER ".template.spec.containers"
#define MB (1024 * 1024)

struct hostile {
    char what[128];
    cJSON *body;
    /* outcome */
    long code;         /* HTTP status of the create; 201 when admitted */
    char *name;        /* the stored name, when admitted */
    /* A field the CRD's structural schema does not know: the API server may prune it (drop it
     * silently), and then the job is valid. Empty for every other case. */
    char prunable[128];
};

static struct hostile cases[MAX_CASES];
static int n_cases, serial;

/* Replaces (or with value NULL removes) the member at a dotted path; numeric parts index arrays.
 * Missing objects on the way are created. Takes ownership of value. */
static void set_at(cJSON *root, const char *path, cJSON *value)
{
    char buf[256];
    snprintf(buf, sizeof(buf), "%s", path);
    cJSON *cur = root;
    char *save = NULL, *part = strtok_r(buf, ".", &save);
    while (part) {
        char *next = strtok_r(NULL, ".", &save);
        bool index = cJSON_IsArray(cur);
        if (!next) {
            if (index) {
                int i = atoi(part);
                if (value)
                    cr_assert(cJSON_ReplaceItemInArray(cur, i, value), "%s", path);
                else
                    cJSON_DeleteItemFromArray(cur, i);
            } else if (value) {
                if (cJSON_GetObjectItemCaseSensitive(cur, part))
                    cJSON_ReplaceItemInObjectCaseSensitive(cur, part, value);
                else
                    cJSON_AddItemToObject(cur, part, value);
            } else {
                cJSON_DeleteItemFromObjectCaseSensitive(cur, part);
            }
            return;
        }
        cJSON *child = index ? cJSON_GetArrayItem(cur, atoi(part)) : cJSON_GetObjectItemCaseSensitive(cur, part);
        if (!child) {
            cr_assert(!index, "%s: no item %s", path, part);
            child = cJSON_AddObjectToObject(cur, part);
        }
        cr_assert(cJSON_IsObject(child) || cJSON_IsArray(child), "%s: %s is not a container", path, part);
        cur = child;
        part = next;
    }
}

static struct hostile *new_case(cJSON *body, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static struct hostile *new_case(cJSON *body, const char *fmt, ...)
{
    cr_assert_lt(n_cases, MAX_CASES);
    struct hostile *h = &cases[n_cases++];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(h->what, sizeof(h->what), fmt, ap);
    va_end(ap);
    h->body = body;
    return h;
}

/* A valid job named h-<n> with one field set to value (taken), or removed when value is NULL. */
static void with(const char *path, cJSON *value, const char *what)
{
    char name[32];
    snprintf(name, sizeof(name), "h-%d", serial++);
    cJSON *job = valid_job(name);
    set_at(job, path, value);
    new_case(job, "%s: %s", path, what);
}

/* Same, with the value given as JSON text. */
static void with_json(const char *path, const char *json)
{
    cJSON *v = cJSON_Parse(json);
    cr_assert_not_null(v, "%s", json);
    with(path, v, json);
}

static void named(const char *name, const char *what)
{
    new_case(valid_job(name), "metadata.name: %s", what);
}

/* ---- wrong JSON types at every field the operator reads ------------------------------------- */

struct typed_field {
    const char *path;
    const char *type; /* the type the schema wants */
};

static const struct typed_field FIELDS[] = {
    {"apiVersion", "string"},
    {"kind", "string"},
    {"metadata", "object"},
    {"metadata.labels", "object"},
    {"metadata.annotations", "object"},
    {"spec", "object"},
    {"spec.slotsPerWorker", "integer"},
    {"spec.runLauncherAsWorker", "boolean"},
    {"spec.mpiImplementation", "string"},
    {"spec.sshAuthMountPath", "string"},
    {"spec.launcherCreationPolicy", "string"},
    {"spec.cleanPodPolicy", "string"},
    {"spec.runPolicy", "object"},
    {"spec.runPolicy.backoffLimit", "integer"},
    {"spec.runPolicy.activeDeadlineSeconds", "integer"},
    {"spec.runPolicy.ttlSecondsAfterFinished", "integer"},
    {"spec.runPolicy.suspend", "boolean"},
    {"spec.runPolicy.cleanPodPolicy", "string"},
    {"spec.runPolicy.managedBy", "string"},
    {"spec.runPolicy.schedulingPolicy", "object"},
    {"spec.runPolicy.schedulingPolicy.minAvailable", "integer"},
    {"spec.runPolicy.schedulingPolicy.queue", "string"},
    {"spec.runPolicy.schedulingPolicy.minResources", "object"},
    {"spec.networking", "object"},
    {"spec.networking.transport", "string"},
    {"spec.networking.interface", "string"},
    {"spec.networking.rdma", "object"},
    {"spec.networking.rdma.gidIndex", "integer"},
    {"spec.networking.rdma.gpuDirect", "boolean"},
    {"spec.networking.rdma.devicePath", "string"},
    {"spec.mpiReplicaSpecs", "object"},
    {LAUNCHER, "object"},
    {LAUNCHER ".replicas", "integer"},
    {LAUNCHER ".restartPolicy", "string"},
    {LAUNCHER ".template", "object"},
    {LAUNCHER ".template.metadata", "object"},
    {LAUNCHER ".template.spec", "object"},
    {LCONTAINERS, "array"},
    {LCONTAINERS ".0", "object"},
    {LCONTAINERS ".0.name", "string"},
    {LCONTAINERS ".0.image", "string"},
    {LCONTAINERS ".0.command", "array"},
    {LCONTAINERS ".0.env", "array"},
    {LCONTAINERS ".0.resources", "object"},
    {WORKER, "object"},
    {WORKER ".replicas", "integer"},
    {WORKER ".restartPolicy", "string"},
    {WORKER ".template.spec.containers", "array"},
    {WORKER ".template.spec.volumes", "array"},
};

static const char *const TYPES[] = {"string", "integer", "number", "boolean", "array", "object"};

static cJSON *value_of(const char *type)
{
    if (strcmp(type, "string") == 0)
        return cJSON_CreateString("seven");
    if (strcmp(type, "integer") == 0)
        return cJSON_CreateNumber(7);
    if (strcmp(type, "number") == 0)
        return cJSON_CreateNumber(3.5);
    if (strcmp(type, "boolean") == 0)
        return cJSON_CreateTrue();
    if (strcmp(type, "array") == 0)
        return cJSON_Parse("[7,\"seven\"]");
    return cJSON_Parse("{\"seven\":7}");
}

static void wrong_types(void)
{
    for (size_t f = 0; f < sizeof(FIELDS) / sizeof(FIELDS[0]); f++)
        for (size_t t = 0; t < sizeof(TYPES) / sizeof(TYPES[0]); t++) {
            const char *want = FIELDS[f].type, *give = TYPES[t];
            /* the four other types; a fraction only where an integer belongs */
            if (strcmp(want, give) == 0 || (strcmp(give, "number") == 0 && strcmp(want, "integer") != 0))
                continue;
            char what[64];
            snprintf(what, sizeof(what), "a %s where a %s belongs", give, want);
            with(FIELDS[f].path, value_of(give), what);
        }
}

/* ---- values of the right type that are still wrong ------------------------------------------ */

static void bad_values(void)
{
    static const struct {
        const char *path, *json;
    } values[] = {
        {"spec.slotsPerWorker", "0"},
        {"spec.slotsPerWorker", "-1"},
        {"spec.slotsPerWorker", "-2147483648"},
        {"spec.slotsPerWorker", "1000000000"},
        {"spec.slotsPerWorker", "1e20"},
        {WORKER ".replicas", "0"},
        {WORKER ".replicas", "-3"},
        {WORKER ".replicas", "1000000000"},
        {WORKER ".replicas", "2147483648"},
        {LAUNCHER ".replicas", "0"},
        {LAUNCHER ".replicas", "2"},
        {LAUNCHER ".replicas", "1000000000"},
        {"spec.runPolicy.backoffLimit", "-1"},
        {"spec.runPolicy.activeDeadlineSeconds", "0"},
        {"spec.runPolicy.activeDeadlineSeconds", "-5"},
        {"spec.runPolicy.ttlSecondsAfterFinished", "-1"},
        {"spec.runPolicy.schedulingPolicy.minAvailable", "0"},
        {"spec.runPolicy.schedulingPolicy.scheduleTimeoutSeconds", "-1"},
        {"spec.mpiImplementation", "\"LAM\""},
        {"spec.mpiImplementation", "\"openmpi\""},
        {"spec.mpiImplementation", "\"\""},
        {"spec.launcherCreationPolicy", "\"Later\""},
        {"spec.cleanPodPolicy", "\"Sometimes\""},
        {"spec.runPolicy.cleanPodPolicy", "\"none\""},
        {LAUNCHER ".restartPolicy", "\"Always\""},
        {WORKER ".restartPolicy", "\"ExitCode\""},
        {"spec.networking.transport", "\"InfiniBand\""},
        {"spec.networking.transport", "\"rdma\""},
        {"spec.sshAuthMountPath", "\"relative/.ssh\""},
        {"spec.sshAuthMountPath", "\"\""},
        {"spec.sshAuthMountPath", "\"/\""},
        {"spec.sshAuthMountPath", "\"/root/../etc\""},
        {"spec.sshAuthMountPath", "\"/root/\\u0001ssh\""},
        {"spec.networking.interface", "\"eth0:1\""},
        {"spec.networking.interface", "\"a b\""},
        {"spec.networking.interface", "\"sixteen-chars-xx\""},
        {"spec.networking.interface", "\"eth\\u00e9\""},
        {"spec.networking.rdma.hca", "\"mlx5 0\""},
        {"spec.networking.rdma.hca", "\"mlx5_0;reboot\""},
        {"spec.networking.rdma.resourceName", "\"kubernetes.io/hca\""},
        {"spec.networking.rdma.resourceName", "\"no slash\""},
        {"spec.networking.rdma.gidIndex", "256"},
        {"spec.networking.rdma.gidIndex", "-1"},
        {"spec.networking.rdma.trafficClass", "300"},
        {"spec.networking.rdma.devicePath", "\"dev/infiniband\""},
        {"spec.runPolicy.schedulingPolicy.minResources", "{\"cpu\":\"-1\"}"},
        {"spec.runPolicy.schedulingPolicy.minResources", "{\"cpu\":\"lots\"}"},
        {"spec.runPolicy.schedulingPolicy.minResources", "{\"bad key\":\"1\"}"},
        {"spec.runPolicy.schedulingPolicy.minResources", "{\"\\u00e7pu\":\"1\"}"},
        {"spec.runPolicy.schedulingPolicy.minResources", "{\"cpu\":true}"},
        {"spec.runPolicy.managedBy", "\"\""},
        {"spec.runPolicy.managedBy", "\"0123456789012345678901234567890123456789012345678901234567890123\""},
        /* containers that are not what a pod needs */
        {LCONTAINERS, "[]"},
        {LCONTAINERS, "[{}]"},
        {LCONTAINERS, "[{\"name\":\"\"}]"},
        {LCONTAINERS, "[{\"name\":\"a\"},{\"name\":\"a\"}]"},
        {LCONTAINERS, "[null]"},
        {LCONTAINERS, "[\"launcher\"]"},
        {LCONTAINERS, "[[]]"},
        {LCONTAINERS, "[{\"name\":\"a\",\"env\":[{\"value\":\"no name\"}]}]"},
        {LCONTAINERS, "[{\"name\":\"a\",\"env\":[{\"name\":7}]}]"},
        {LCONTAINERS, "[{\"name\":\"a\",\"ports\":[{\"containerPort\":\"http\"}]}]"},
        {WORKER ".template.spec.containers", "[]"},
        /* templates */
        {LAUNCHER ".template", "{}"},
        {LAUNCHER ".template", "{\"spec\":{}}"},
        {WORKER ".template", "{\"metadata\":{}}"},
        {WORKER ".template.spec.volumes", "[{\"name\":\"v\",\"hostPath\":{}}]"},
        /* nulls where something is required */
        {"spec", "null"},
        {"spec.mpiReplicaSpecs", "null"},
        {LAUNCHER, "null"},
        {LAUNCHER ".template", "null"},
        {LAUNCHER ".template.spec", "null"},
        {WORKER ".template", "null"},
        {WORKER ".template.spec", "null"},
        {LCONTAINERS, "null"},
        {"metadata", "null"},
        {"metadata.name", "null"},
        /* unknown fields next to a bad one */
        {"spec.mpiReplicaSpecs.Launcher.template.spec.containers.0.bogus", "{\"deep\":[1,2,3]}"},
    };
    for (size_t i = 0; i < sizeof(values) / sizeof(values[0]); i++)
        with_json(values[i].path, values[i].json);
    /* the last one alone would be pruned and valid: make it hostile too */
    set_at(cases[n_cases - 1].body, "spec.slotsPerWorker", cJSON_CreateNumber(-1));

    static const char *const gone[] = {"spec", "spec.mpiReplicaSpecs", LAUNCHER, LAUNCHER ".template",
                                       WORKER ".template", LAUNCHER ".template.spec", LCONTAINERS};
    for (size_t i = 0; i < sizeof(gone) / sizeof(gone[0]); i++)
        with(gone[i], NULL, "missing");
}

/* ---- names ------------------------------------------------------------------------------------ */

static void bad_names(void)
{
    char name[300];
    named("Upper", "upper case");
    named("j\xc3\xb6" "b", "non-ASCII (o umlaut)");
    named("\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e", "non-ASCII (Japanese)");
    named("rocket-\xf0\x9f\x9a\x80", "non-ASCII (emoji)");
    named("with space", "a space");
    named("under_score", "an underscore");
    named("-lead", "a leading dash");
    named("trail-", "a trailing dash");
    named("1starts-with-a-digit", "not a DNS-1035 label");
    named("dotted.name", "a dot: a subdomain but no label");
    named(".", "a dot");
    named("..", "two dots");
    named("slash/name", "a slash");
    named("percent%2Fname", "a percent sign");
    named("", "empty");
    memset(name, 'a', 60);
    name[60] = 0;
    named(name, "60 characters: the worker pod names would be too long");
    memset(name, 'b', 254);
    name[254] = 0;
    named(name, "254 characters");
    cJSON *job = valid_job("x");
    set_at(job, "metadata.name", NULL);
    new_case(job, "metadata.name: absent");
}

/* ---- size and depth ------------------------------------------------------------------------- */

static cJSON *big_string(size_t n, char c)
{
    char *s = malloc(n + 1);
    cr_assert_not_null(s);
    memset(s, c, n);
    s[n] = 0;
    cJSON *v = cJSON_CreateString(s);
    free(s);
    return v;
}

/* {"d":{"d":...{"d":leaf}}}, depth objects deep */
static cJSON *nested_objects(int depth, cJSON *leaf)
{
    cJSON *v = leaf;
    for (int i = 0; i < depth; i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddItemToObject(o, "d", v);
        v = o;
    }
    return v;
}

static cJSON *nested_arrays(int depth)
{
    cJSON *v = cJSON_CreateString("x");
    for (int i = 0; i < depth; i++) {
        cJSON *a = cJSON_CreateArray();
        cJSON_AddItemToArray(a, v);
        v = a;
    }
    return v;
}

static void big_and_deep(void)
{
    with(LCONTAINERS ".0.image", big_string(10 * MB, 'i'), "a 10 MB string");
    with(LAUNCHER ".template.metadata.annotations.huge", big_string(10 * MB, 'a'), "a 10 MB string");
    with("spec.runPolicy.managedBy", big_string(2 * MB, 'm'), "a 2 MB string");
    with("spec.networking.interface", big_string(2 * MB, 'e'), "a 2 MB string");
    with(LAUNCHER ".template.metadata.annotations.big", big_string(2 * MB, 'a'), "a 2 MB string");
    with(LCONTAINERS ".0.args", cJSON_Parse("[]"), "a string over 1 MiB");
    cJSON *args = cJSON_CreateArray();
    cJSON_AddItemToArray(args, big_string(MB + 1, 'x'));
    set_at(cases[n_cases - 1].body, LCONTAINERS ".0.args", args);
    snprintf(cases[n_cases - 1].what, sizeof(cases[0].what), "%s", LCONTAINERS ".0.args: a string over 1 MiB");

    char name[32];
    snprintf(name, sizeof(name), "h-%d", serial++);
    cJSON *job = valid_job(name);
    cJSON_AddItemToObject(job, "padding", big_string(10 * MB, 'p'));
    new_case(job, "padding: a 10 MB unknown field");

    /* deep nesting inside a volume source the schema keeps open, and where it does not */
    with(WORKER ".template.spec.volumes",
         cJSON_Parse("[{\"name\":\"deep\",\"awsElasticBlockStore\":{}}]"), "70 objects deep");
    set_at(cases[n_cases - 1].body, WORKER ".template.spec.volumes.0.awsElasticBlockStore",
           nested_objects(70, cJSON_CreateString("leaf")));
    snprintf(cases[n_cases - 1].what, sizeof(cases[0].what), "a volume source 70 objects deep");
    with(WORKER ".template.spec.volumes",
         cJSON_Parse("[{\"name\":\"deeper\",\"awsElasticBlockStore\":{}}]"), "150 objects deep");
    set_at(cases[n_cases - 1].body, WORKER ".template.spec.volumes.0.awsElasticBlockStore",
           nested_objects(150, cJSON_CreateString("leaf")));
    snprintf(cases[n_cases - 1].what, sizeof(cases[0].what), "a volume source 150 objects deep");
    with("spec.slotsPerWorker", nested_objects(50, cJSON_CreateNumber(1)), "50 objects deep");
    with(LCONTAINERS ".0.command", nested_arrays(30), "30 arrays deep");
    with("spec.runPolicy", nested_objects(800, cJSON_CreateNull()), "800 objects deep");
    snprintf(cases[n_cases - 1].prunable, sizeof(cases[0].prunable), "spec.runPolicy.d");
    with("spec.networking", nested_arrays(900), "900 arrays deep");
}

/* ---- not an MPIJob at all ------------------------------------------------------------------- */

static void not_a_job(void)
{
    with_json("apiVersion", "\"kubeflow.org/v1\"");
    with_json("apiVersion", "\"v1\"");
    with_json("kind", "\"Pod\"");
    with_json("kind", "\"\"");
    with_json("metadata.namespace", "\"elsewhere\"");
    with_json("metadata.labels", "{\"a\":1}");
    with_json("metadata.generation", "\"one\"");
    with_json("metadata.ownerReferences", "[{\"apiVersion\":1}]");
    new_case(cJSON_Parse("[{\"kind\":\"MPIJob\"}]"), "an array body");
    new_case(cJSON_CreateString("MPIJob"), "a string body");
    new_case(cJSON_CreateObject(), "an empty object");
}

/* ---- the controller's view -------------------------------------------------------------------- */

static void create_valid(const char *name)
{
    cJSON *job = valid_job(name);
    struct kube_status st = {.retry_after_s = -1};
    int rc = kube_create(env.admin, &MPIJOB_RESOURCE_V2BETA1, "default", job, NULL, &st);
    cr_assert_eq(rc, 0, "%s: %s", name, st.message ? st.message : error_str(rc));
    kube_status_clear(&st);
    cJSON_Delete(job);
}

static bool launcher_exists(const char *job_name)
{
    char lname[128];
    snprintf(lname, sizeof(lname), "%s-launcher", job_name);
    return test_kube_wait_exists(env.admin, &KUBE_JOBS, "default", lname, WAIT_MS);
}

/* 1: Failed True with reason InvalidSpec; 0: not yet; -1: the job is gone or has another end. */
static int invalid_spec(const char *name, char *why, size_t why_size)
{
    cJSON *job = NULL;
    if (kube_get(env.admin, &MPIJOB_RESOURCE_V2BETA1, "default", name, &job, NULL) != 0) {
        snprintf(why, why_size, "the MPIJob is gone");
        return -1;
    }
    int verdict = 0;
    const cJSON *c;
    snprintf(why, why_size, "no condition yet");
    cJSON_ArrayForEach(c, json_path(job, "status.conditions")) {
        const char *t = json_string(c, "type"), *s = json_string(c, "status"), *r = json_string(c, "reason");
        if (!t || !s || strcmp(s, "True") != 0)
            continue;
        snprintf(why, why_size, "%s (%s): %.200s", t, r ? r : "", json_string(c, "message") ?: "");
        if (strcmp(t, "Failed") == 0 && r && strcmp(r, "InvalidSpec") == 0) {
            verdict = 1;
            break;
        }
        if (strcmp(t, "Created") == 0 || strcmp(t, "Failed") == 0 || strcmp(t, "Succeeded") == 0)
            verdict = -1;
    }
    cJSON_Delete(job);
    return verdict;
}

TestSuite(hostile, .init = setup, .fini = teardown, .timeout = 240);

Test(hostile, every_hostile_mpijob_is_refused_or_fails_invalid_and_the_operator_keeps_serving)
{
    test_controller_env_run(&env, 2, NULL);
    create_valid("valid-before");
    cr_assert(launcher_exists("valid-before"), "the launcher Job of the job created first");

    wrong_types();
    bad_values();
    bad_names();
    big_and_deep();
    not_a_job();
    cr_assert_geq(n_cases, 200, "only %d cases", n_cases);

    bool verbose = getenv("HOSTILE_VERBOSE") != NULL;
    int refused = 0, by_code[600] = {0};
    for (int i = 0; i < n_cases; i++) {
        struct hostile *h = &cases[i];
        struct kube_status st = {.retry_after_s = -1};
        cJSON *out = NULL;
        int rc = kube_create(env.admin, &MPIJOB_RESOURCE_V2BETA1, "default", h->body, &out, &st);
        if (rc == 0) {
            h->code = 201;
            const char *name = json_string(out, "metadata.name");
            cr_assert_not_null(name, "%s: admitted without a name", h->what);
            h->name = strdup(name);
        } else {
            h->code = st.http_code;
            /* 400, 422 and 413 are the API server's refusals; an object under the 3 MiB body
             * limit but over etcd's request limit is etcd's refusal, which kube-apiserver
             * passes on as a 500 */
            const char *msg = st.message ? st.message : "";
            bool storage_refused = st.http_code == 500 &&
                                   (strstr(msg, "request is too large") || strstr(msg, "larger than max"));
            char why[300];
            snprintf(why, sizeof(why), "%s", msg);
            bool ok = st.http_code == 400 || st.http_code == 422 || st.http_code == 413 || storage_refused;
            long code = st.http_code;
            if (!ok)
                kube_status_clear(&st);
            cr_assert(ok, "%s: create answered %ld (%s): %s", h->what, code, error_str(rc), why);
            refused++;
            by_code[st.http_code]++;
            if (verbose)
                printf("refused %ld %s: %.160s\n", st.http_code, h->what, st.message ? st.message : "");
        }
        kube_status_clear(&st);
        cJSON_Delete(out);
        cJSON_Delete(h->body);
        h->body = NULL;
    }

    create_valid("valid-after");
    cr_assert(launcher_exists("valid-after"), "the launcher Job of the job created after them");

    /* every admitted one fails for InvalidSpec */
    int admitted = 0, failed_invalid = 0, pruned = 0;
    for (int i = 0; i < n_cases; i++)
        admitted += cases[i].name != NULL;
    struct test_deadline d = test_deadline_in(WAIT_MS); /* for them all */
    char why[320];
    for (int i = 0; i < n_cases; i++) {
        struct hostile *h = &cases[i];
        if (!h->name)
            continue;
        if (h->prunable[0]) {
            cJSON *stored = NULL;
            cr_assert_eq(kube_get(env.admin, &MPIJOB_RESOURCE_V2BETA1, "default", h->name, &stored, NULL), 0);
            bool gone = json_path(stored, h->prunable) == NULL;
            cJSON_Delete(stored);
            if (gone) {
                pruned++;
                if (verbose)
                    printf("admitted %s: %s pruned by the schema\n", h->what, h->prunable);
                continue;
            }
        }
        int v;
        while ((v = invalid_spec(h->name, why, sizeof(why))) == 0 && test_deadline_poll(&d))
            ;
        cr_expect_eq(v, 1, "%s: admitted as %s, then %s", h->what, h->name, why);
        failed_invalid += v == 1;
        if (verbose)
            printf("admitted %s: %s\n", h->what, why);
    }
    printf("hostile MPIJobs: %d bodies: %d refused by the API server (400: %d, 413: %d, 422: %d, 500: %d), "
           "%d admitted, of which %d failed with InvalidSpec and %d had the hostile part pruned\n",
           n_cases, refused, by_code[400], by_code[413], by_code[422], by_code[500], admitted, failed_invalid, pruned);
    fflush(stdout);
    cr_assert_eq(refused + failed_invalid + pruned, n_cases);
    cr_assert(test_kube_exists(env.admin, &KUBE_JOBS, "default", "valid-before-launcher"),
              "the first job's launcher is still there");
    for (int i = 0; i < n_cases; i++)
        free(cases[i].name);
}
