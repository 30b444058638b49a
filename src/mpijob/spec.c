/* Parsing, defaulting and validation of an MPIJob (SPEC.md sections 1 and 4).
 *
 * One pass over the fields in a fixed order (metadata, then spec in the order of the SPEC.md
 * table, then networking) fills the struct and records every problem on the way, so a user
 * sees all of them at once. Unknown fields are ignored: the CRD schema prunes them upstream.
 *
 * Readers take the parent object, the member key and the field path for messages; each
 * returns FIELD_SET (value valid and stored), FIELD_ABSENT (member missing) or FIELD_BAD (a
 * problem was recorded and the default is kept). */
#include "mpijob/mpijob.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_PROBLEMS 32              /* listed; the rest are counted in one last line */
#define MAX_SLOTS_PER_WORKER 1024
#define DEFAULT_MAX_WORKERS 10000
#define MAX_PATH_LENGTH 4096         /* PATH_MAX: a longer mount path cannot work */
#define MAX_NAME_LENGTH 253          /* DNS-1123 subdomain: queue, priority class, keys */
#define MAX_MANAGED_BY_LENGTH 63     /* as for batch/v1 Job spec.managedBy */
#define MAX_HCA_LENGTH 1024
#define MAX_UID_LENGTH 256
#define MAX_QUANTITY_LENGTH 128
#define MAX_CONTAINER_NAME_LENGTH 253
#define MAX_TEMPLATE_STRING (1024 * 1024) /* etcd refuses objects of ~1.5 MiB anyway */
#define MAX_TEMPLATE_DEPTH 64
#define IFNAME_MAX_LENGTH 15         /* IFNAMSIZ - 1 */
#define DNS_LABEL_MAX 63
#define QUOTE_MAX 100                /* characters of a bad value echoed in a message */

enum { FIELD_BAD = -1, FIELD_ABSENT = 0, FIELD_SET = 1 };

struct check {
    struct mpijob_problems *problems;
    size_t dropped; /* problems past MAX_PROBLEMS */
    int err;        /* -ENOMEM once an allocation failed */
};

struct enum_name {
    const char *name;
    int value;
};

/* ---- problems ---------------------------------------------------------------------------- */

static int add_line(struct mpijob_problems *p, char *line)
{
    char **items = realloc(p->items, (p->count + 1) * sizeof(*items));
    if (!items) {
        free(line);
        return -ENOMEM;
    }
    items[p->count++] = line;
    p->items = items;
    return 0;
}

__attribute__((format(printf, 3, 4))) static void problem(struct check *c, const char *field,
                                                          const char *fmt, ...)
{
    if (c->err)
        return;
    if (c->problems->count >= MAX_PROBLEMS) {
        c->dropped++;
        return;
    }
    char *what = NULL, *line = NULL;
    va_list ap;
    va_start(ap, fmt);
    int n = vasprintf(&what, fmt, ap);
    va_end(ap);
    if (n < 0 || asprintf(&line, "%s: %s", field, what) < 0) {
        if (n >= 0)
            free(what);
        c->err = -ENOMEM;
        return;
    }
    free(what);
    if (add_line(c->problems, line) < 0)
        c->err = -ENOMEM;
}

void mpijob_problems_free(struct mpijob_problems *p)
{
    if (!p)
        return;
    for (size_t i = 0; i < p->count; i++)
        free(p->items[i]);
    free(p->items);
    p->items = NULL;
    p->count = 0;
}

char *mpijob_problems_join(const struct mpijob_problems *p)
{
    size_t len = 1;
    for (size_t i = 0; p && i < p->count; i++)
        len += strlen(p->items[i]) + 2;
    char *s = malloc(len);
    if (!s)
        return NULL;
    char *w = s;
    for (size_t i = 0; p && i < p->count; i++) {
        if (i > 0) {
            memcpy(w, "; ", 2);
            w += 2;
        }
        size_t n = strlen(p->items[i]);
        memcpy(w, p->items[i], n);
        w += n;
    }
    *w = 0;
    return s;
}

/* ---- describing bad values --------------------------------------------------------------- */

static const char *type_name(const cJSON *v)
{
    if (cJSON_IsNull(v))
        return "null";
    if (cJSON_IsBool(v))
        return "boolean";
    if (cJSON_IsNumber(v))
        return "number";
    if (cJSON_IsString(v))
        return "string";
    if (cJSON_IsArray(v))
        return "array";
    if (cJSON_IsObject(v))
        return "object";
    return "invalid JSON";
}

/* A string for a message: quoted, escaped, cut after QUOTE_MAX characters. */
static const char *quote(const char *s, char *buf, size_t size)
{
    size_t w = 0, i = 0;
    buf[w++] = '"';
    for (; s[i] && i < QUOTE_MAX && w + 8 < size; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '"' || ch == '\\') {
            buf[w++] = '\\';
            buf[w++] = (char)ch;
        } else if (ch < 0x20 || ch >= 0x7f) {
            w += (size_t)snprintf(buf + w, size - w, "\\x%02x", ch);
        } else {
            buf[w++] = (char)ch;
        }
    }
    buf[w++] = '"';
    if (s[i] && w + 4 < size) {
        memcpy(buf + w, "...", 3);
        w += 3;
    }
    buf[w] = 0;
    return buf;
}

static const char *number_text(double d, char *buf, size_t size)
{
    if (isfinite(d) && d == floor(d) && fabs(d) < 1e18)
        snprintf(buf, size, "%lld", (long long)d);
    else
        snprintf(buf, size, "%.15g", d);
    return buf;
}

/* "A, B, C" for an enum table. */
static const char *enum_list(const struct enum_name *names, size_t n, char *buf, size_t size)
{
    size_t w = 0;
    buf[0] = 0;
    for (size_t i = 0; i < n && w < size; i++)
        w += (size_t)snprintf(buf + w, size - w, "%s%s", i ? ", " : "", names[i].name);
    return buf;
}

/* A field path for messages; one too long for buf is cut, which only shortens a message. */
__attribute__((format(printf, 3, 4))) static const char *path_of(char *buf, size_t size,
                                                                 const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, size, fmt, ap);
    va_end(ap);
    return buf;
}

/* ---- readers ----------------------------------------------------------------------------- */

static const cJSON *member(const cJSON *parent, const char *key)
{
    return cJSON_IsObject(parent) ? cJSON_GetObjectItemCaseSensitive(parent, key) : NULL;
}

static int read_int(struct check *c, const cJSON *parent, const char *key, const char *field,
                    long long min, long long max, long long *out)
{
    const cJSON *v = member(parent, key);
    char num[64];
    if (!v)
        return FIELD_ABSENT;
    if (!cJSON_IsNumber(v)) {
        problem(c, field, "must be an integer, got %s", type_name(v));
        return FIELD_BAD;
    }
    double d = v->valuedouble;
    if (!isfinite(d) || d != floor(d)) {
        problem(c, field, "must be an integer, got %s", number_text(d, num, sizeof(num)));
        return FIELD_BAD;
    }
    /* Outside the long long range first: converting such a double is undefined. */
    bool below = d < -0x1p63, above = d >= 0x1p63;
    long long i = below || above ? 0 : (long long)d;
    if (below || (!above && i < min)) {
        problem(c, field, "must be at least %lld, got %s", min, number_text(d, num, sizeof(num)));
        return FIELD_BAD;
    }
    if (above || i > max) {
        problem(c, field, "must be at most %lld, got %s", max, number_text(d, num, sizeof(num)));
        return FIELD_BAD;
    }
    *out = i;
    return FIELD_SET;
}

/* read_int into an int field; the default stays on anything but FIELD_SET. */
static int read_int_into(struct check *c, const cJSON *parent, const char *key, const char *field,
                         long long min, long long max, int *out)
{
    long long v;
    int rc = read_int(c, parent, key, field, min, max, &v);
    if (rc == FIELD_SET)
        *out = (int)v;
    return rc;
}

static int read_bool(struct check *c, const cJSON *parent, const char *key, const char *field,
                     bool *out)
{
    const cJSON *v = member(parent, key);
    if (!v)
        return FIELD_ABSENT;
    if (!cJSON_IsBool(v)) {
        problem(c, field, "must be a boolean, got %s", type_name(v));
        return FIELD_BAD;
    }
    *out = cJSON_IsTrue(v);
    return FIELD_SET;
}

/* A string of at most max_len bytes; *out borrows from the input. */
static int read_string(struct check *c, const cJSON *parent, const char *key, const char *field,
                       size_t max_len, const char **out)
{
    const cJSON *v = member(parent, key);
    if (!v)
        return FIELD_ABSENT;
    if (!cJSON_IsString(v)) {
        problem(c, field, "must be a string, got %s", type_name(v));
        return FIELD_BAD;
    }
    size_t len = strlen(v->valuestring);
    if (len > max_len) {
        problem(c, field, "must be at most %zu characters, got %zu", max_len, len);
        return FIELD_BAD;
    }
    *out = v->valuestring;
    return FIELD_SET;
}

static int read_enum(struct check *c, const cJSON *parent, const char *key, const char *field,
                     const struct enum_name *names, size_t n, int *out)
{
    const cJSON *v = member(parent, key);
    char list[128], q[4 * QUOTE_MAX + 16];
    if (!v)
        return FIELD_ABSENT;
    if (cJSON_IsString(v)) {
        for (size_t i = 0; i < n; i++) {
            if (strcmp(v->valuestring, names[i].name) == 0) {
                *out = names[i].value;
                return FIELD_SET;
            }
        }
    }
    problem(c, field, "must be one of %s, got %s", enum_list(names, n, list, sizeof(list)),
            cJSON_IsString(v) ? quote(v->valuestring, q, sizeof(q)) : type_name(v));
    return FIELD_BAD;
}

#define READ_ENUM(c, parent, key, field, names, out)                                      \
    read_enum(c, parent, key, field, names, sizeof(names) / sizeof((names)[0]), out)

static int read_object(struct check *c, const cJSON *parent, const char *key, const char *field,
                       const cJSON **out)
{
    const cJSON *v = member(parent, key);
    if (!v)
        return FIELD_ABSENT;
    if (!cJSON_IsObject(v)) {
        problem(c, field, "must be an object, got %s", type_name(v));
        return FIELD_BAD;
    }
    *out = v;
    return FIELD_SET;
}

/* Replaces *dst (a default or NULL) with a copy of src. */
static void set_string(struct check *c, char **dst, const char *src)
{
    char *copy = strdup(src);
    if (!copy) {
        c->err = -ENOMEM;
        return;
    }
    free(*dst);
    *dst = copy;
}

/* ---- syntax of names and paths ----------------------------------------------------------- */

static bool is_lower_alnum(char ch) { return (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9'); }
static bool is_alnum(char ch) { return is_lower_alnum(ch) || (ch >= 'A' && ch <= 'Z'); }

/* DNS-1123 label of n bytes: [a-z0-9]([-a-z0-9]*[a-z0-9])?, at most 63. */
static bool is_dns1123_label_n(const char *s, size_t n)
{
    if (n == 0 || n > DNS_LABEL_MAX || !is_lower_alnum(s[0]) || !is_lower_alnum(s[n - 1]))
        return false;
    for (size_t i = 0; i < n; i++)
        if (!is_lower_alnum(s[i]) && s[i] != '-')
            return false;
    return true;
}

static bool is_dns1123_label(const char *s) { return is_dns1123_label_n(s, strlen(s)); }

/* DNS-1035 label: a DNS-1123 label that starts with a letter. */
static bool is_dns1035_label(const char *s)
{
    return is_dns1123_label(s) && s[0] >= 'a' && s[0] <= 'z';
}

static bool is_dns1123_subdomain_n(const char *s, size_t n)
{
    if (n == 0 || n > 253)
        return false;
    size_t start = 0;
    for (size_t i = 0; i <= n; i++) {
        if (i == n || s[i] == '.') {
            if (!is_dns1123_label_n(s + start, i - start))
                return false;
            start = i + 1;
        }
    }
    return true;
}

/* The name part of a qualified name: ([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9], at most 63. */
static bool is_qualified_name_part(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > DNS_LABEL_MAX || !is_alnum(s[0]) || !is_alnum(s[n - 1]))
        return false;
    for (size_t i = 0; i < n; i++)
        if (!is_alnum(s[i]) && s[i] != '-' && s[i] != '_' && s[i] != '.')
            return false;
    return true;
}

/* An extended resource: "domain/name" outside the kubernetes.io domain (Kubernetes'
 * IsExtendedResourceName). */
static bool is_extended_resource_name(const char *s)
{
    const char *slash = strchr(s, '/');
    if (!slash || !is_dns1123_subdomain_n(s, (size_t)(slash - s)))
        return false;
    if (strstr(s, "kubernetes.io/") || strncmp(s, "requests.", 9) == 0)
        return false;
    return is_qualified_name_part(slash + 1);
}

/* A resource name as a qualified name: "cpu", "nvidia.com/gpu". */
static bool is_resource_name(const char *s)
{
    const char *slash = strchr(s, '/');
    if (slash && !is_dns1123_subdomain_n(s, (size_t)(slash - s)))
        return false;
    return is_qualified_name_part(slash ? slash + 1 : s);
}

/* Why path is not a usable absolute mount path, or NULL when it is. */
static const char *path_problem(const char *path)
{
    if (path[0] != '/')
        return "must be an absolute path";
    if (path[1] == 0)
        return "must not be the root directory";
    for (const char *p = path; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f)
            return "must not contain control characters";
    for (const char *p = path; (p = strstr(p, "..")) != NULL; p += 2)
        if (p[-1] == '/' && (p[2] == '/' || p[2] == 0))
            return "must not contain a \"..\" component";
    return NULL;
}

/* Linux dev_valid_name, kept to printable ASCII since the name lands in environment values. */
static bool is_interface_name(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > IFNAME_MAX_LENGTH || strcmp(s, ".") == 0 || strcmp(s, "..") == 0)
        return false;
    for (size_t i = 0; i < n; i++)
        if (s[i] <= ' ' || s[i] >= 0x7f || s[i] == '/' || s[i] == ':')
            return false;
    return true;
}

/* NCCL_IB_HCA: "mlx5_0:1,mlx5_1", "^mlx5_2", "=mlx5_0". */
static bool is_hca_list(const char *s)
{
    if (!*s)
        return false;
    for (; *s; s++)
        if (!is_alnum(*s) && !strchr("_:.,^=-", *s))
            return false;
    return true;
}

/* ---- metadata ---------------------------------------------------------------------------- */

static const char *const served_versions[] = {"kubeflow.org/v2beta1", "kubeflow.org/v1alpha2"};

static void parse_type(struct check *c, const cJSON *obj, struct mpijob *job)
{
    const char *s = NULL;
    char q[4 * QUOTE_MAX + 16];
    int rc = read_string(c, obj, "apiVersion", "apiVersion", MAX_NAME_LENGTH, &s);
    if (rc == FIELD_ABSENT) {
        problem(c, "apiVersion", "is required");
    } else if (rc == FIELD_SET) {
        if (strcmp(s, served_versions[0]) != 0 && strcmp(s, served_versions[1]) != 0)
            problem(c, "apiVersion", "must be one of %s, %s, got %s", served_versions[0],
                    served_versions[1], quote(s, q, sizeof(q)));
        else
            set_string(c, &job->api_version, s);
    }
    rc = read_string(c, obj, "kind", "kind", MAX_NAME_LENGTH, &s);
    if (rc == FIELD_ABSENT)
        problem(c, "kind", "is required");
    else if (rc == FIELD_SET && strcmp(s, MPIJOB_KIND) != 0)
        problem(c, "kind", "must be %s, got %s", MPIJOB_KIND, quote(s, q, sizeof(q)));
}

/* The number of workers the spec asks for when that number is valid, else 1: the worker pod
 * names are checked with the name, before the spec is read. 0 when there is no Worker. */
static int worker_count_hint(const cJSON *spec, const struct mpijob_limits *limits)
{
    const cJSON *worker = member(member(spec, "mpiReplicaSpecs"), "Worker");
    if (!worker)
        return 0;
    const cJSON *r = member(worker, "replicas");
    if (!cJSON_IsNumber(r))
        return 1;
    double d = r->valuedouble;
    if (!(d >= 1 && d <= limits->max_workers) || d != floor(d))
        return 1;
    return (int)d;
}

static void check_name_length(struct check *c, const char *name, int workers)
{
    char *longest = NULL;
    int n = workers > 0 ? asprintf(&longest, "%s-worker-%d", name, workers - 1)
                        : asprintf(&longest, "%s-launcher", name);
    if (n < 0) {
        c->err = -ENOMEM;
        return;
    }
    if (n > DNS_LABEL_MAX) {
        char q[4 * QUOTE_MAX + 16];
        problem(c, "metadata.name", "too long: the %s name %s would have %d characters, more "
                "than the %d of a DNS-1035 label", workers > 0 ? "last worker pod" : "launcher Job",
                quote(longest, q, sizeof(q)), n, DNS_LABEL_MAX);
    }
    free(longest);
}

static void parse_metadata(struct check *c, const cJSON *obj, struct mpijob *job, int workers)
{
    const cJSON *meta = NULL;
    const char *s = NULL;
    char q[4 * QUOTE_MAX + 16];
    int rc = read_object(c, obj, "metadata", "metadata", &meta);
    if (rc == FIELD_ABSENT)
        problem(c, "metadata", "is required");
    if (rc != FIELD_SET)
        return;

    rc = read_string(c, meta, "name", "metadata.name", MAX_NAME_LENGTH, &s);
    if (rc == FIELD_ABSENT) {
        problem(c, "metadata.name", "is required");
    } else if (rc == FIELD_SET && !is_dns1035_label(s)) {
        problem(c, "metadata.name", "must be a DNS-1035 label (at most %d lowercase letters, "
                "digits and '-', starting with a letter and ending with a letter or digit), "
                "got %s", DNS_LABEL_MAX, quote(s, q, sizeof(q)));
    } else if (rc == FIELD_SET) {
        check_name_length(c, s, workers);
        set_string(c, &job->name, s);
    }

    rc = read_string(c, meta, "namespace", "metadata.namespace", MAX_NAME_LENGTH, &s);
    if (rc == FIELD_ABSENT)
        problem(c, "metadata.namespace", "is required");
    else if (rc == FIELD_SET && !is_dns1123_label(s))
        problem(c, "metadata.namespace", "must be a DNS-1123 label, got %s",
                quote(s, q, sizeof(q)));
    else if (rc == FIELD_SET)
        set_string(c, &job->namespace, s);

    if (read_string(c, meta, "uid", "metadata.uid", MAX_UID_LENGTH, &s) == FIELD_SET)
        set_string(c, &job->uid, s);
    read_int(c, meta, "generation", "metadata.generation", 0, INT64_MAX, &job->generation);
}

/* ---- spec: top-level fields -------------------------------------------------------------- */

static const struct enum_name implementations[] = {
    {"OpenMPI", MPI_OPENMPI}, {"Intel", MPI_INTEL}, {"MPICH", MPI_MPICH}};
static const struct enum_name creation_policies[] = {
    {"AtStartup", LAUNCHER_AT_STARTUP}, {"WaitForWorkersReady", LAUNCHER_WAIT_FOR_WORKERS_READY}};
static const struct enum_name clean_pod_policies[] = {
    {"None", CLEAN_POD_NONE}, {"Running", CLEAN_POD_RUNNING}, {"All", CLEAN_POD_ALL}};
static const struct enum_name transports[] = {
    {"Auto", TRANSPORT_AUTO}, {"TCP", TRANSPORT_TCP}, {"RDMA", TRANSPORT_RDMA}};
static const struct enum_name launcher_restart_policies[] = {
    {"OnFailure", RESTART_ON_FAILURE}, {"Never", RESTART_NEVER}};
static const struct enum_name worker_restart_policies[] = {
    {"Never", RESTART_NEVER}, {"OnFailure", RESTART_ON_FAILURE}};

/* An absolute path field; *dst keeps its default unless the value is valid. */
static void read_path(struct check *c, const cJSON *parent, const char *key, const char *field,
                      char **dst)
{
    const char *s = NULL;
    if (read_string(c, parent, key, field, MAX_PATH_LENGTH, &s) != FIELD_SET)
        return;
    const char *why = path_problem(s);
    char q[4 * QUOTE_MAX + 16];
    if (why)
        problem(c, field, "%s, got %s", why, quote(s, q, sizeof(q)));
    else
        set_string(c, dst, s);
}

static void parse_spec_top(struct check *c, const cJSON *spec, struct mpijob *job)
{
    int v;
    read_int_into(c, spec, "slotsPerWorker", "spec.slotsPerWorker", 1, MAX_SLOTS_PER_WORKER,
                  &job->slots_per_worker);
    read_bool(c, spec, "runLauncherAsWorker", "spec.runLauncherAsWorker",
              &job->run_launcher_as_worker);
    if (READ_ENUM(c, spec, "mpiImplementation", "spec.mpiImplementation", implementations, &v) ==
        FIELD_SET)
        job->implementation = (enum mpi_implementation)v;
    read_path(c, spec, "sshAuthMountPath", "spec.sshAuthMountPath", &job->ssh_auth_mount_path);
    if (READ_ENUM(c, spec, "launcherCreationPolicy", "spec.launcherCreationPolicy",
                  creation_policies, &v) == FIELD_SET)
        job->launcher_creation_policy = (enum launcher_creation_policy)v;
}

/* ---- spec.runPolicy ---------------------------------------------------------------------- */

bool mpijob_quantity_valid(const char *s)
{
    static const char *const suffixes[] = {"", "n", "u", "m", "k", "M", "G", "T", "P", "E",
                                           "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"};
    size_t digits = 0;
    if (*s == '+')
        s++;
    for (bool dot = false; (*s >= '0' && *s <= '9') || (*s == '.' && !dot); s++) {
        dot |= *s == '.';
        digits += *s != '.';
    }
    if (digits == 0)
        return false;
    /* A suffix first: "Ei" is exbi, not an exponent. */
    for (size_t i = 0; i < sizeof(suffixes) / sizeof(suffixes[0]); i++)
        if (strcmp(s, suffixes[i]) == 0)
            return true;
    if (*s != 'e' && *s != 'E')
        return false;
    const char *e = s + 1 + (s[1] == '+' || s[1] == '-');
    if (!*e)
        return false;
    for (; *e; e++)
        if (*e < '0' || *e > '9')
            return false;
    return true;
}

static bool check_quantity(struct check *c, const cJSON *item, const char *field)
{
    char q[4 * QUOTE_MAX + 16];
    const char *want = "must be a non-negative quantity like 4, 500m or 8Gi";
    if (cJSON_IsString(item)) {
        size_t len = strlen(item->valuestring);
        if (len > MAX_QUANTITY_LENGTH)
            problem(c, field, "%s, got a string of %zu characters", want, len);
        else if (!mpijob_quantity_valid(item->valuestring))
            problem(c, field, "%s, got %s", want, quote(item->valuestring, q, sizeof(q)));
        return len <= MAX_QUANTITY_LENGTH && mpijob_quantity_valid(item->valuestring);
    }
    if (!cJSON_IsNumber(item)) {
        problem(c, field, "must be a quantity (a string or a number), got %s", type_name(item));
        return false;
    }
    if (!(item->valuedouble >= 0) || !isfinite(item->valuedouble)) {
        problem(c, field, "%s, got %s", want, number_text(item->valuedouble, q, sizeof(q)));
        return false;
    }
    return true;
}

static void parse_min_resources(struct check *c, const cJSON *sched, struct mpijob_scheduling *s)
{
    const char *field = "spec.runPolicy.schedulingPolicy.minResources";
    const cJSON *res = NULL;
    if (read_object(c, sched, "minResources", field, &res) != FIELD_SET)
        return;
    bool ok = true;
    char f[MAX_NAME_LENGTH + 64], q[4 * QUOTE_MAX + 16];
    const cJSON *item;
    cJSON_ArrayForEach(item, res) {
        if (!is_resource_name(item->string)) {
            problem(c, field, "%s is not a resource name (like cpu or nvidia.com/gpu)",
                    quote(item->string, q, sizeof(q)));
            ok = false;
            continue;
        }
        ok &= check_quantity(c, item, path_of(f, sizeof(f), "%s[%s]", field, item->string));
    }
    if (ok && !(s->min_resources = cJSON_Duplicate(res, true)))
        c->err = -ENOMEM;
}

static void parse_scheduling(struct check *c, const cJSON *run, struct mpijob_scheduling *s)
{
    const cJSON *sched = NULL;
    const char *str = NULL;
    if (read_object(c, run, "schedulingPolicy", "spec.runPolicy.schedulingPolicy", &sched) !=
        FIELD_SET)
        return;
    s->present = true;
    read_int_into(c, sched, "minAvailable", "spec.runPolicy.schedulingPolicy.minAvailable", 1,
                  INT32_MAX, &s->min_available);
    if (read_string(c, sched, "queue", "spec.runPolicy.schedulingPolicy.queue", MAX_NAME_LENGTH,
                    &str) == FIELD_SET && *str)
        set_string(c, &s->queue, str);
    parse_min_resources(c, sched, s);
    if (read_string(c, sched, "priorityClass", "spec.runPolicy.schedulingPolicy.priorityClass",
                    MAX_NAME_LENGTH, &str) == FIELD_SET && *str)
        set_string(c, &s->priority_class, str);
    read_int_into(c, sched, "scheduleTimeoutSeconds",
                  "spec.runPolicy.schedulingPolicy.scheduleTimeoutSeconds", 0, INT32_MAX,
                  &s->schedule_timeout_s);
}

static void parse_run_policy(struct check *c, const cJSON *spec, struct mpijob_run_policy *rp)
{
    int legacy = -1, v;
    /* v1alpha2's top-level field; also seen through v2beta1 for objects stored as v1alpha2,
     * since the versions convert with strategy None. */
    if (READ_ENUM(c, spec, "cleanPodPolicy", "spec.cleanPodPolicy", clean_pod_policies, &v) ==
        FIELD_SET)
        legacy = v;

    const cJSON *run = NULL;
    const char *s = NULL;
    read_object(c, spec, "runPolicy", "spec.runPolicy", &run);
    if (READ_ENUM(c, run, "cleanPodPolicy", "spec.runPolicy.cleanPodPolicy", clean_pod_policies,
                  &v) == FIELD_SET)
        rp->clean_pod_policy = (enum clean_pod_policy)v;
    else if (legacy >= 0 && !member(run, "cleanPodPolicy"))
        rp->clean_pod_policy = (enum clean_pod_policy)legacy;
    read_int_into(c, run, "backoffLimit", "spec.runPolicy.backoffLimit", 0, INT32_MAX,
                  &rp->backoff_limit);
    read_int(c, run, "activeDeadlineSeconds", "spec.runPolicy.activeDeadlineSeconds", 1,
             INT64_MAX, &rp->active_deadline_s);
    read_int(c, run, "ttlSecondsAfterFinished", "spec.runPolicy.ttlSecondsAfterFinished", 0,
             INT32_MAX, &rp->ttl_after_finished_s);
    read_bool(c, run, "suspend", "spec.runPolicy.suspend", &rp->suspend);
    if (read_string(c, run, "managedBy", "spec.runPolicy.managedBy", MAX_MANAGED_BY_LENGTH, &s) ==
        FIELD_SET) {
        if (*s)
            set_string(c, &rp->managed_by, s);
        else
            problem(c, "spec.runPolicy.managedBy", "must not be empty");
    }
    parse_scheduling(c, run, &rp->scheduling);
}

/* ---- spec.mpiReplicaSpecs ---------------------------------------------------------------- */

/* Refuses templates no real object could carry: huge strings or absurd nesting. */
static bool template_sane(struct check *c, const cJSON *v, const char *field, int depth)
{
    if (depth > MAX_TEMPLATE_DEPTH) {
        problem(c, field, "nested more than %d levels deep", MAX_TEMPLATE_DEPTH);
        return false;
    }
    if (cJSON_IsString(v) && strlen(v->valuestring) > MAX_TEMPLATE_STRING) {
        problem(c, field, "holds a string of %zu bytes, more than the %d allowed",
                strlen(v->valuestring), MAX_TEMPLATE_STRING);
        return false;
    }
    if (v->string && strlen(v->string) > MAX_TEMPLATE_STRING) {
        problem(c, field, "holds a key of %zu bytes, more than the %d allowed",
                strlen(v->string), MAX_TEMPLATE_STRING);
        return false;
    }
    const cJSON *child;
    cJSON_ArrayForEach(child, v)
        if (!template_sane(c, child, field, depth + 1))
            return false;
    return true;
}

/* The members of a container the operator reads or edits, by expected type. */
static void check_container(struct check *c, const cJSON *ct, const char *field)
{
    char f[256];
    const char *name = NULL;
    path_of(f, sizeof(f), "%s.name", field);
    int rc = read_string(c, ct, "name", f, MAX_CONTAINER_NAME_LENGTH, &name);
    if (rc == FIELD_ABSENT || (rc == FIELD_SET && !*name))
        problem(c, f, "must be a non-empty string");

    static const char *const arrays[] = {"command", "args", "env", "volumeMounts"};
    for (size_t i = 0; i < sizeof(arrays) / sizeof(arrays[0]); i++) {
        const cJSON *v = member(ct, arrays[i]);
        path_of(f, sizeof(f), "%s.%s", field, arrays[i]);
        if (v && !cJSON_IsArray(v))
            problem(c, f, "must be an array, got %s", type_name(v));
    }
    const cJSON *item;
    const cJSON *env = cJSON_IsArray(member(ct, "env")) ? member(ct, "env") : NULL;
    cJSON_ArrayForEach(item, env) {
        if (!cJSON_IsObject(item) || !cJSON_IsString(member(item, "name"))) {
            path_of(f, sizeof(f), "%s.env", field);
            problem(c, f, "every item must be an object with a string name");
            break;
        }
    }
    const cJSON *obj;
    path_of(f, sizeof(f), "%s.resources", field);
    read_object(c, ct, "resources", f, &obj);
    path_of(f, sizeof(f), "%s.securityContext", field);
    read_object(c, ct, "securityContext", f, &obj);
}

static void check_template(struct check *c, const cJSON *tmpl, const char *field)
{
    char f[256];
    const cJSON *obj, *pod = NULL;
    path_of(f, sizeof(f), "%s.metadata", field);
    read_object(c, tmpl, "metadata", f, &obj);
    path_of(f, sizeof(f), "%s.spec", field);
    int rc = read_object(c, tmpl, "spec", f, &pod);
    if (rc == FIELD_ABSENT)
        problem(c, f, "is required");
    if (rc != FIELD_SET)
        return;

    path_of(f, sizeof(f), "%s.spec.containers", field);
    const cJSON *containers = member(pod, "containers");
    if (!containers)
        problem(c, f, "is required");
    else if (!cJSON_IsArray(containers))
        problem(c, f, "must be an array, got %s", type_name(containers));
    else if (cJSON_GetArraySize(containers) == 0)
        problem(c, f, "must not be empty");
    size_t i = 0;
    const cJSON *ct;
    const cJSON *list = cJSON_IsArray(containers) ? containers : NULL;
    cJSON_ArrayForEach(ct, list) {
        path_of(f, sizeof(f), "%s.spec.containers[%zu]", field, i++);
        if (!cJSON_IsObject(ct))
            problem(c, f, "must be an object, got %s", type_name(ct));
        else
            check_container(c, ct, f);
    }
    const cJSON *volumes = member(pod, "volumes");
    path_of(f, sizeof(f), "%s.spec.volumes", field);
    if (volumes && !cJSON_IsArray(volumes))
        problem(c, f, "must be an array, got %s", type_name(volumes));
}

struct replica_rule {
    const char *type;     /* "Launcher" or "Worker" */
    long long min, max;   /* replicas */
    const struct enum_name *restart;
    size_t restart_count;
};

static void parse_replica(struct check *c, const cJSON *specs, const struct replica_rule *rule,
                          struct mpijob_replica *r)
{
    char field[128], f[160];
    const cJSON *rs = NULL;
    snprintf(field, sizeof(field), "spec.mpiReplicaSpecs.%s", rule->type);
    if (read_object(c, specs, rule->type, field, &rs) != FIELD_SET)
        return;

    path_of(f, sizeof(f), "%s.replicas", field);
    const cJSON *n = member(rs, "replicas");
    if (rule->min == rule->max && cJSON_IsNumber(n) && n->valuedouble != rule->min) {
        char num[64];
        problem(c, f, "must be %lld, got %s", rule->min,
                number_text(n->valuedouble, num, sizeof(num)));
    } else {
        read_int_into(c, rs, "replicas", f, rule->min, rule->max, &r->replicas);
    }
    path_of(f, sizeof(f), "%s.restartPolicy", field);
    int v;
    if (read_enum(c, rs, "restartPolicy", f, rule->restart, rule->restart_count, &v) == FIELD_SET)
        r->restart_policy = (enum restart_policy)v;

    path_of(f, sizeof(f), "%s.template", field);
    const cJSON *tmpl = NULL;
    int rc = read_object(c, rs, "template", f, &tmpl);
    if (rc == FIELD_ABSENT)
        problem(c, f, "is required");
    if (rc != FIELD_SET || !template_sane(c, tmpl, f, 0))
        return;
    size_t before = c->problems->count + c->dropped;
    check_template(c, tmpl, f);
    if (c->problems->count + c->dropped == before && !(r->template = cJSON_Duplicate(tmpl, true)))
        c->err = -ENOMEM;
}

static void parse_replicas(struct check *c, const cJSON *spec, struct mpijob *job,
                           const struct mpijob_limits *limits)
{
    const cJSON *specs = NULL;
    int rc = read_object(c, spec, "mpiReplicaSpecs", "spec.mpiReplicaSpecs", &specs);
    if (rc == FIELD_ABSENT)
        problem(c, "spec.mpiReplicaSpecs", "is required");
    if (rc != FIELD_SET)
        return;

    const struct replica_rule launcher = {"Launcher", 1, 1, launcher_restart_policies, 2};
    const struct replica_rule worker = {"Worker", 1, limits->max_workers,
                                        worker_restart_policies, 2};
    if (!member(specs, "Launcher"))
        problem(c, "spec.mpiReplicaSpecs.Launcher", "is required");
    parse_replica(c, specs, &launcher, &job->launcher);
    if (member(specs, "Worker")) {
        job->worker.replicas = 1;
        parse_replica(c, specs, &worker, &job->worker);
    }
}

/* ---- spec.networking --------------------------------------------------------------------- */

static void parse_rdma(struct check *c, const cJSON *net, struct mpijob_rdma *rdma)
{
    const cJSON *r = NULL;
    const char *s = NULL;
    char q[4 * QUOTE_MAX + 16];
    if (read_object(c, net, "rdma", "spec.networking.rdma", &r) != FIELD_SET)
        return;
    read_path(c, r, "devicePath", "spec.networking.rdma.devicePath", &rdma->device_path);
    if (read_string(c, r, "resourceName", "spec.networking.rdma.resourceName", MAX_NAME_LENGTH,
                    &s) == FIELD_SET && *s) {
        if (is_extended_resource_name(s))
            set_string(c, &rdma->resource_name, s);
        else
            problem(c, "spec.networking.rdma.resourceName", "must be an extended resource name "
                    "like rdma/hca (a DNS subdomain outside kubernetes.io, '/', a name), got %s",
                    quote(s, q, sizeof(q)));
    }
    if (read_string(c, r, "hca", "spec.networking.rdma.hca", MAX_HCA_LENGTH, &s) == FIELD_SET &&
        *s) {
        if (is_hca_list(s))
            set_string(c, &rdma->hca, s);
        else
            problem(c, "spec.networking.rdma.hca", "must be an NCCL_IB_HCA list (letters, digits "
                    "and _:.,^=-), got %s", quote(s, q, sizeof(q)));
    }
    if (!cJSON_IsNull(member(r, "gidIndex")))
        read_int_into(c, r, "gidIndex", "spec.networking.rdma.gidIndex", 0, 255, &rdma->gid_index);
    read_bool(c, r, "gpuDirect", "spec.networking.rdma.gpuDirect", &rdma->gpu_direct);
    if (!cJSON_IsNull(member(r, "trafficClass")))
        read_int_into(c, r, "trafficClass", "spec.networking.rdma.trafficClass", 0, 255,
                      &rdma->traffic_class);
}

static void parse_networking(struct check *c, const cJSON *spec, struct mpijob_networking *net)
{
    const cJSON *n = NULL;
    const char *s = NULL;
    int v;
    char q[4 * QUOTE_MAX + 16];
    if (read_object(c, spec, "networking", "spec.networking", &n) != FIELD_SET)
        return;
    if (READ_ENUM(c, n, "transport", "spec.networking.transport", transports, &v) == FIELD_SET)
        net->transport = (enum transport)v;
    if (read_string(c, n, "interface", "spec.networking.interface", MAX_NAME_LENGTH, &s) ==
        FIELD_SET && *s) {
        if (is_interface_name(s))
            set_string(c, &net->interface, s);
        else
            problem(c, "spec.networking.interface", "must be a Linux interface name (1 to %d "
                    "printable characters, no '/', ':' or whitespace), got %s",
                    IFNAME_MAX_LENGTH, quote(s, q, sizeof(q)));
    }
    read_bool(c, n, "hostNetwork", "spec.networking.hostNetwork", &net->host_network);
    parse_rdma(c, n, &net->rdma);
}

/* ---- spec.placement ---------------------------------------------------------------------- */

/* A label key is a qualified name, as a resource name is: "rack", "topology.kubernetes.io/zone". */
#define MAX_LABEL_KEY_LENGTH (MAX_NAME_LENGTH + 1 + DNS_LABEL_MAX)

static void parse_placement(struct check *c, const cJSON *spec, struct mpijob_placement *pl)
{
    const cJSON *p = NULL;
    const char *s = NULL;
    char q[4 * QUOTE_MAX + 16];
    if (read_object(c, spec, "placement", "spec.placement", &p) != FIELD_SET)
        return;
    if (read_string(c, p, "topologyKey", "spec.placement.topologyKey", MAX_LABEL_KEY_LENGTH, &s) != FIELD_SET ||
        !*s)
        return;
    if (is_resource_name(s))
        set_string(c, &pl->topology_key, s);
    else
        problem(c, "spec.placement.topologyKey", "must be a node label key (a qualified name such as "
                "topology.kubernetes.io/zone), got %s", quote(s, q, sizeof(q)));
}

/* A template's spec.hostNetwork: 1 true, 0 false, -1 not said. */
static int template_host_network(const cJSON *tmpl)
{
    const cJSON *v = member(member(tmpl, "spec"), "hostNetwork");
    return cJSON_IsTrue(v) ? 1 : cJSON_IsFalse(v) ? 0 : -1;
}

/* Host network is one mode for the whole job: spec.networking.hostNetwork, or a template that
 * says hostNetwork: true, puts every pod on its node's network. What cannot work then is
 * refused, naming the field: a template that says false, and a DNS policy under which the pods
 * would ask the node's resolver, which knows none of the workers' names. */
static void check_host_network(struct check *c, struct mpijob *job)
{
    const char *const types[] = {"Launcher", "Worker"};
    const struct mpijob_replica *const rs[] = {&job->launcher, &job->worker};
    char asked_by[96] = "";
    if (job->networking.host_network)
        snprintf(asked_by, sizeof(asked_by), "spec.networking.hostNetwork");
    for (size_t i = 0; i < 2 && !asked_by[0]; i++)
        if (template_host_network(rs[i]->template) == 1)
            snprintf(asked_by, sizeof(asked_by), "spec.mpiReplicaSpecs.%s.template.spec.hostNetwork",
                     types[i]);
    if (!asked_by[0])
        return;
    job->networking.host_network = true;
    for (size_t i = 0; i < 2; i++) {
        char f[128], q[4 * QUOTE_MAX + 16];
        if (template_host_network(rs[i]->template) == 0) {
            snprintf(f, sizeof(f), "spec.mpiReplicaSpecs.%s.template.spec.hostNetwork", types[i]);
            problem(c, f, "is false, but %s is true: the launcher and the workers must share "
                    "one network mode", asked_by);
        }
        const cJSON *dns = member(member(rs[i]->template, "spec"), "dnsPolicy");
        if (cJSON_IsString(dns) && strcmp(dns->valuestring, "ClusterFirstWithHostNet") != 0 &&
            strcmp(dns->valuestring, "None") != 0) {
            snprintf(f, sizeof(f), "spec.mpiReplicaSpecs.%s.template.spec.dnsPolicy", types[i]);
            problem(c, f, "must be ClusterFirstWithHostNet (or None, with a dnsConfig of your "
                    "own) for a job on the host network (%s), got %s: a host-network pod under "
                    "any other policy asks the node's resolver, which does not know the "
                    "workers' names", asked_by, quote(dns->valuestring, q, sizeof(q)));
        }
    }
}

/* ---- the job ----------------------------------------------------------------------------- */

static void set_defaults(struct check *c, struct mpijob *job)
{
    job->slots_per_worker = 1;
    job->implementation = MPI_OPENMPI;
    job->launcher_creation_policy = LAUNCHER_AT_STARTUP;
    set_string(c, &job->ssh_auth_mount_path, "/root/.ssh");
    job->run_policy.clean_pod_policy = CLEAN_POD_RUNNING;
    job->run_policy.backoff_limit = 6;
    job->run_policy.active_deadline_s = -1;
    job->run_policy.ttl_after_finished_s = -1;
    job->run_policy.scheduling.min_available = -1;
    job->run_policy.scheduling.schedule_timeout_s = -1;
    job->launcher.replicas = 1;
    job->launcher.restart_policy = RESTART_ON_FAILURE;
    job->worker.replicas = 0;
    job->worker.restart_policy = RESTART_NEVER;
    job->networking.transport = TRANSPORT_AUTO;
    set_string(c, &job->networking.rdma.device_path, "/dev/infiniband");
    job->networking.rdma.gid_index = -1;
    job->networking.rdma.traffic_class = -1;
}

int mpijob_parse(const cJSON *obj, const struct mpijob_limits *limits, struct mpijob **out,
                 struct mpijob_problems *problems)
{
    struct mpijob_problems local = {0};
    struct mpijob_limits lim = {.max_workers = DEFAULT_MAX_WORKERS};
    if (limits && limits->max_workers > 0)
        lim = *limits;
    if (!problems)
        problems = &local;
    problems->count = 0;
    problems->items = NULL;
    *out = NULL;

    struct check c = {.problems = problems};
    struct mpijob *job = calloc(1, sizeof(*job));
    if (!job)
        return -ENOMEM;
    set_defaults(&c, job);

    const cJSON *spec = NULL;
    if (!cJSON_IsObject(obj)) {
        problem(&c, "MPIJob", "must be an object, got %s", obj ? type_name(obj) : "nothing");
    } else {
        parse_type(&c, obj, job);
        int rc = read_object(&c, obj, "spec", "spec", &spec);
        parse_metadata(&c, obj, job, rc == FIELD_SET ? worker_count_hint(spec, &lim) : 1);
        if (rc == FIELD_ABSENT)
            problem(&c, "spec", "is required");
    }
    if (spec) {
        parse_spec_top(&c, spec, job);
        parse_run_policy(&c, spec, &job->run_policy);
        parse_replicas(&c, spec, job, &lim);
        parse_networking(&c, spec, &job->networking);
        parse_placement(&c, spec, &job->placement);
        check_host_network(&c, job);
    }
    if (c.dropped && !c.err) {
        char *line = NULL;
        if (asprintf(&line, "spec: %zu more problems not listed", c.dropped) < 0 ||
            add_line(problems, line) < 0)
            c.err = -ENOMEM;
    }

    if (c.err || problems->count) {
        mpijob_free(job);
        if (c.err || problems == &local)
            mpijob_problems_free(problems);
        return c.err ? c.err : MPIJOB_EINVALID;
    }
    *out = job;
    return 0;
}

void mpijob_free(struct mpijob *job)
{
    if (!job)
        return;
    free(job->api_version);
    free(job->namespace);
    free(job->name);
    free(job->uid);
    free(job->ssh_auth_mount_path);
    free(job->run_policy.managed_by);
    free(job->run_policy.scheduling.queue);
    cJSON_Delete(job->run_policy.scheduling.min_resources);
    free(job->run_policy.scheduling.priority_class);
    cJSON_Delete(job->launcher.template);
    cJSON_Delete(job->worker.template);
    free(job->placement.topology_key);
    free(job->networking.interface);
    free(job->networking.rdma.device_path);
    free(job->networking.rdma.resource_name);
    free(job->networking.rdma.hca);
    free(job);
}

/* ---- names ------------------------------------------------------------------------------- */

const char *mpi_implementation_name(enum mpi_implementation impl)
{
    switch (impl) {
    case MPI_OPENMPI: return "OpenMPI";
    case MPI_INTEL: return "Intel";
    case MPI_MPICH: return "MPICH";
    }
    return "unknown";
}

const char *transport_name(enum transport t)
{
    switch (t) {
    case TRANSPORT_AUTO: return "Auto";
    case TRANSPORT_TCP: return "TCP";
    case TRANSPORT_RDMA: return "RDMA";
    }
    return "unknown";
}

const char *clean_pod_policy_name(enum clean_pod_policy p)
{
    switch (p) {
    case CLEAN_POD_NONE: return "None";
    case CLEAN_POD_RUNNING: return "Running";
    case CLEAN_POD_ALL: return "All";
    }
    return "unknown";
}

static char *name_with(const struct mpijob *job, const char *suffix)
{
    char *s = NULL;
    return asprintf(&s, "%s%s", job->name, suffix) < 0 ? NULL : s;
}

char *mpijob_worker_name(const struct mpijob *job, int index)
{
    char *s = NULL;
    return asprintf(&s, "%s-worker-%d", job->name, index) < 0 ? NULL : s;
}

char *mpijob_launcher_name(const struct mpijob *job) { return name_with(job, "-launcher"); }
char *mpijob_configmap_name(const struct mpijob *job) { return name_with(job, "-config"); }
char *mpijob_secret_name(const struct mpijob *job) { return name_with(job, "-ssh"); }
