/* The RDMA/TCP switch (SPEC.md section 4); docs/internals/transport.md explains the Open MPI
 * forwarding cases. */
#include "mpijob/transport.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "util/buf.h"
#include "util/json.h"
#include "util/path.h"

#define DEFAULT_DEVICE_PATH "/dev/infiniband"
#define ENV_LIST "OMPI_MCA_mca_base_env_list"
#define ENV_LIST_DELIMITER "OMPI_MCA_mca_base_env_list_delimiter"
#define MAX_WANTED 10

/* ---- the variables a job wants ----------------------------------------------------------- */

struct wanted {
    const char *name;
    char *value;
    /* A variable that, set by the user, makes ours an error (Open MPI refuses an interface
     * include list together with an exclude list), or NULL. */
    const char *refused_with;
};

struct wanted_set {
    size_t n;
    struct wanted v[MAX_WANTED];
};

static void wanted_free(struct wanted_set *w)
{
    for (size_t i = 0; i < w->n; i++)
        free(w->v[i].value);
    w->n = 0;
}

__attribute__((format(printf, 4, 5)))
static int want(struct wanted_set *w, const char *name, const char *refused_with, const char *fmt, ...)
{
    if (w->n == MAX_WANTED)
        return -EINVAL;
    va_list ap;
    va_start(ap, fmt);
    char *value = NULL;
    int n = vasprintf(&value, fmt, ap);
    va_end(ap);
    if (n < 0)
        return -ENOMEM;
    w->v[w->n++] = (struct wanted){.name = name, .value = value, .refused_with = refused_with};
    return 0;
}

static bool is_set(const char *s)
{
    return s && s[0];
}

static int wanted_build(const struct mpijob *job, struct wanted_set *w)
{
    const struct mpijob_networking *net = &job->networking;
    const struct mpijob_rdma *rdma = &net->rdma;
    int rc = 0;
    w->n = 0;
    if (net->transport == TRANSPORT_TCP) {
        rc = want(w, "NCCL_IB_DISABLE", NULL, "1");
        if (rc == 0)
            rc = want(w, "NCCL_NET", NULL, "Socket");
    } else if (net->transport == TRANSPORT_RDMA) {
        /* NCCL_NET=IB: NCCL fails loudly instead of falling back to sockets. */
        rc = want(w, "NCCL_IB_DISABLE", NULL, "0");
        if (rc == 0)
            rc = want(w, "NCCL_NET", NULL, "IB");
        if (rc == 0 && is_set(rdma->hca))
            rc = want(w, "NCCL_IB_HCA", NULL, "%s", rdma->hca);
        if (rc == 0 && rdma->gid_index >= 0)
            rc = want(w, "NCCL_IB_GID_INDEX", NULL, "%d", rdma->gid_index);
        if (rc == 0 && !rdma->gpu_direct)
            rc = want(w, "NCCL_NET_GDR_LEVEL", NULL, "LOC");
        if (rc == 0 && rdma->traffic_class >= 0)
            rc = want(w, "NCCL_IB_TC", NULL, "%d", rdma->traffic_class);
    } else {
        return 0;
    }
    if (rc == 0 && is_set(net->interface)) {
        rc = want(w, "NCCL_SOCKET_IFNAME", NULL, "%s", net->interface);
        /* MPI's own traffic on the same NIC. */
        if (rc == 0 && job->implementation == MPI_OPENMPI)
            rc = want(w, "OMPI_MCA_btl_tcp_if_include", "OMPI_MCA_btl_tcp_if_exclude", "%s",
                      net->interface);
        else if (rc == 0 && job->implementation == MPI_INTEL)
            rc = want(w, "I_MPI_HYDRA_IFACE", NULL, "%s", net->interface);
        else if (rc == 0 && job->implementation == MPI_MPICH)
            rc = want(w, "HYDRA_IFACE", NULL, "%s", net->interface);
    }
    if (rc < 0)
        wanted_free(w);
    return rc;
}

static const char *transport_label(enum transport t)
{
    return t == TRANSPORT_TCP ? "TCP" : t == TRANSPORT_RDMA ? "RDMA" : "Auto";
}

static const char *role_label(enum pod_role role)
{
    return role == ROLE_LAUNCHER ? "launcher" : "worker";
}

/* ---- report ------------------------------------------------------------------------------ */

static int lines_add(char ***items, size_t *n, char *line)
{
    if (!line)
        return -ENOMEM;
    char **grown = realloc(*items, (*n + 1) * sizeof(*grown));
    if (!grown) {
        free(line);
        return -ENOMEM;
    }
    grown[(*n)++] = line;
    *items = grown;
    return 0;
}

__attribute__((format(printf, 2, 3)))
static int report_conflict(struct transport_report *r, const char *fmt, ...)
{
    if (!r)
        return 0;
    va_list ap;
    va_start(ap, fmt);
    char *line = NULL;
    int n = vasprintf(&line, fmt, ap);
    va_end(ap);
    return lines_add(&r->conflicts, &r->n_conflicts, n < 0 ? NULL : line);
}

static int report_unforwarded(struct transport_report *r, const char *name, const char *reason)
{
    if (!r)
        return 0;
    for (size_t i = 0; i < r->n_unforwarded; i++)
        if (strcmp(r->unforwarded[i], name) == 0)
            return 0;
    r->unforwarded_reason = reason;
    return lines_add(&r->unforwarded, &r->n_unforwarded, strdup(name));
}

void transport_report_free(struct transport_report *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < r->n_conflicts; i++)
        free(r->conflicts[i]);
    for (size_t i = 0; i < r->n_unforwarded; i++)
        free(r->unforwarded[i]);
    free(r->conflicts);
    free(r->unforwarded);
    memset(r, 0, sizeof(*r));
}

char *transport_unforwarded_message(const struct transport_report *r)
{
    if (!r || r->n_unforwarded == 0)
        return NULL;
    struct buf b;
    buf_init(&b, 0);
    int rc = buf_printf(&b, "%s: add", r->unforwarded_reason ? r->unforwarded_reason
                                                             : "the launcher command forwards variables itself");
    for (size_t i = 0; rc == 0 && i < r->n_unforwarded; i++)
        rc = buf_printf(&b, " -x %s", r->unforwarded[i]);
    if (rc == 0)
        rc = buf_append_str(&b, " to it so that the ranks get them");
    if (rc < 0) {
        buf_free(&b);
        return NULL;
    }
    return buf_steal(&b);
}

/* ---- env ------------------------------------------------------------------------------------ */

/* The entry's literal value: "" when it has neither value nor valueFrom (Kubernetes reads an
 * absent value as empty), NULL when it comes from valueFrom. */
static const char *env_literal(const cJSON *entry)
{
    const char *v = json_string(entry, "value");
    if (v)
        return v;
    return cJSON_GetObjectItemCaseSensitive(entry, "valueFrom") ? NULL : "";
}

/* Puts every wanted variable into env unless the user set it; present[i] says whether
 * variable i is in env afterwards (ours or the user's). */
static int apply_env(const struct mpijob *job, enum pod_role role, cJSON *env,
                     const struct wanted_set *w, bool *present, struct transport_report *r)
{
    const char *transport = transport_label(job->networking.transport);
    for (size_t i = 0; i < w->n; i++) {
        const struct wanted *v = &w->v[i];
        int rc = 0;
        present[i] = true;
        cJSON *user = json_env_find(env, v->name);
        if (user) {
            const char *literal = env_literal(user);
            if (!literal)
                rc = report_conflict(r, "%s: the %s template takes it from valueFrom, transport %s wants %s; "
                                        "the template's value is kept",
                                     v->name, role_label(role), transport, v->value);
            else if (strcmp(literal, v->value) != 0)
                rc = report_conflict(r, "%s: the %s template sets %s, transport %s wants %s; "
                                        "the template's value is kept",
                                     v->name, role_label(role), literal[0] ? literal : "\"\"", transport,
                                     v->value);
        } else if (v->refused_with && json_env_find(env, v->refused_with)) {
            present[i] = false;
            rc = report_conflict(r, "%s: the %s template sets %s, which cannot be combined with it; "
                                    "networking.interface %s is not applied to it",
                                 v->name, role_label(role), v->refused_with, v->value);
        } else {
            rc = json_env_append(env, v->name, v->value);
        }
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* ---- Open MPI forwarding ------------------------------------------------------------------ */

static const char *base_name(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

static bool name_is(const char *word, const char *const *names)
{
    const char *base = base_name(word);
    for (; *names; names++) {
        size_t n = strlen(*names);
        /* Debian also installs mpirun.openmpi and friends. */
        if (strncmp(base, *names, n) == 0 && (base[n] == 0 || strcmp(base + n, ".openmpi") == 0))
            return true;
    }
    return false;
}

static bool is_mpirun(const char *word)
{
    static const char *const names[] = {"mpirun", "mpiexec", "orterun", NULL};
    return name_is(word, names);
}

/* Words whose own -x is not mpirun's: the shell's trace option, `set -x`. */
static bool owns_its_x(const char *word)
{
    static const char *const names[] = {"sh", "bash", "dash", "ash", "zsh", "ksh", "set", NULL};
    return name_is(word, names);
}

static bool is_x_option(const char *word)
{
    return strcmp(word, "-x") == 0 || strcmp(word, "--x") == 0;
}

static bool is_mca_option(const char *word)
{
    return strcmp(word, "-mca") == 0 || strcmp(word, "--mca") == 0 || strcmp(word, "-gmca") == 0 ||
           strcmp(word, "--gmca") == 0;
}

/* Words of the launcher command: argv elements, each split the way a shell would roughly split
 * it, so that `sh -c "mpirun -x A ..."` yields its words too. NULL marks a command separator. */
struct words {
    char **w;
    size_t n, cap;
};

static void words_free(struct words *ws)
{
    for (size_t i = 0; i < ws->n; i++)
        free(ws->w[i]);
    free(ws->w);
    memset(ws, 0, sizeof(*ws));
}

static int words_push(struct words *ws, char *word)
{
    if (ws->n == ws->cap) {
        size_t cap = ws->cap ? ws->cap * 2 : 16;
        char **grown = realloc(ws->w, cap * sizeof(*grown));
        if (!grown) {
            free(word);
            return -ENOMEM;
        }
        ws->w = grown;
        ws->cap = cap;
    }
    ws->w[ws->n++] = word;
    return 0;
}

/* Quotes are dropped rather than honoured: a quoted "-x" still reads as -x, which errs on the
 * side of reporting instead of editing. */
static int words_split(struct words *ws, const char *text)
{
    struct buf b;
    buf_init(&b, 0);
    int rc = 0;
    for (const char *p = text; rc == 0; p++) {
        char c = *p;
        bool space = c == ' ' || c == '\t' || c == '\r';
        bool separator = c == '\n' || c == ';' || c == '&' || c == '|' || c == '(' || c == ')' || c == '`';
        if (c == 0 || space || separator) {
            if (b.len > 0)
                rc = words_push(ws, buf_steal(&b));
            if (rc == 0 && separator)
                rc = words_push(ws, NULL);
            if (c == 0)
                break;
        } else if (c != '"' && c != '\'' && c != '\\') {
            rc = buf_append(&b, &c, 1);
        }
    }
    buf_free(&b);
    return rc;
}

/* The launcher's argv as Kubernetes runs it: command then args (argv[0] is args[0] when the
 * template keeps the image's entrypoint). Non-string elements read as "". */
struct launcher_argv {
    cJSON *command, *args; /* arrays or NULL */
    const char **v;
    size_t n;
};

static int argv_collect(cJSON *container, struct launcher_argv *a)
{
    memset(a, 0, sizeof(*a));
    cJSON *command = cJSON_GetObjectItemCaseSensitive(container, "command");
    cJSON *args = cJSON_GetObjectItemCaseSensitive(container, "args");
    if ((command && !cJSON_IsArray(command) && !cJSON_IsNull(command)) ||
        (args && !cJSON_IsArray(args) && !cJSON_IsNull(args)))
        return -EINVAL;
    a->command = cJSON_IsArray(command) ? command : NULL;
    a->args = cJSON_IsArray(args) ? args : NULL;
    size_t total = (size_t)cJSON_GetArraySize(a->command) + (size_t)cJSON_GetArraySize(a->args);
    a->v = calloc(total + 1, sizeof(*a->v));
    if (!a->v)
        return -ENOMEM;
    cJSON *parts[2] = {a->command, a->args}, *e;
    for (int i = 0; i < 2; i++)
        cJSON_ArrayForEach(e, parts[i]) a->v[a->n++] = cJSON_IsString(e) ? e->valuestring : "";
    return 0;
}

/* The value part of an entry "NAME" or "NAME=value" (of -x or an env list) when it names name:
 * *value is NULL for a bare NAME. */
static bool entry_names(const char *entry, size_t len, const char *name, const char **value, size_t *vlen)
{
    size_t n = strlen(name);
    if (len < n || strncmp(entry, name, n) != 0 || (len > n && entry[n] != '='))
        return false;
    *value = len > n ? entry + n + 1 : NULL;
    *vlen = len > n ? len - n - 1 : 0;
    return true;
}

/* A forwarded NAME=value that differs from what the transport wants is the user's choice:
 * it stays and is reported. */
static int check_forwarded_value(const struct mpijob *job, const struct wanted *v, const char *value,
                                 size_t vlen, const char *where, struct transport_report *r)
{
    if (!value || (vlen == strlen(v->value) && strncmp(value, v->value, vlen) == 0))
        return 0;
    return report_conflict(r, "%s: %s forwards %s=%.*s, transport %s wants %s; that value is kept", v->name,
                           where, v->name, (int)vlen, value, transport_label(job->networking.transport),
                           v->value);
}

/* Which wanted variables Open MPI must be told to forward: those in env, minus OMPI_MCA_*,
 * which reach the ranks by themselves. */
static bool needs_forwarding(const struct wanted *v, bool present)
{
    return present && strncmp(v->name, "OMPI_MCA_", 9) != 0;
}

/* An env list with the user's entries kept and the missing names appended. */
static int env_list_merge(const struct mpijob *job, const char *current, char delimiter,
                          const struct wanted_set *w, const bool *present, const char *where,
                          char **merged, struct transport_report *r)
{
    struct buf b;
    buf_init(&b, 0);
    int rc = buf_append_str(&b, current);
    for (size_t i = 0; rc == 0 && i < w->n; i++) {
        if (!needs_forwarding(&w->v[i], present[i]))
            continue;
        bool listed = false;
        for (const char *p = current; rc == 0 && *p;) {
            const char *end = strchr(p, delimiter);
            size_t len = end ? (size_t)(end - p) : strlen(p);
            const char *value;
            size_t vlen;
            if (entry_names(p, len, w->v[i].name, &value, &vlen)) {
                listed = true;
                rc = check_forwarded_value(job, &w->v[i], value, vlen, where, r);
            }
            p += len + (end ? 1 : 0);
        }
        if (rc == 0 && !listed) {
            if (b.len > 0 && b.data[b.len - 1] != delimiter)
                rc = buf_append(&b, &delimiter, 1);
            if (rc == 0)
                rc = buf_append_str(&b, w->v[i].name);
        }
    }
    if (rc < 0) {
        buf_free(&b);
        return rc;
    }
    *merged = buf_steal(&b);
    return *merged ? 0 : -ENOMEM;
}

/* Case (a): OMPI_MCA_mca_base_env_list in the launcher's env, merged with the user's. */
static int forward_by_env_list(const struct mpijob *job, cJSON *env, const struct wanted_set *w,
                               const bool *present, struct transport_report *r)
{
    cJSON *entry = json_env_find(env, ENV_LIST);
    const char *current = entry ? env_literal(entry) : "";
    int rc = 0;
    if (!current) {
        for (size_t i = 0; rc == 0 && i < w->n; i++)
            if (needs_forwarding(&w->v[i], present[i]))
                rc = report_unforwarded(r, w->v[i].name,
                                        "the launcher template takes " ENV_LIST " from valueFrom, "
                                        "which the operator cannot extend");
        return rc;
    }
    /* Open MPI takes a one-character delimiter and ignores the list otherwise. */
    const cJSON *d = json_env_find(env, ENV_LIST_DELIMITER);
    const char *ds = d ? env_literal(d) : NULL;
    char delimiter = ds && strlen(ds) == 1 ? ds[0] : ';';
    char *merged = NULL;
    rc = env_list_merge(job, current, delimiter, w, present, ENV_LIST " in the launcher template", &merged, r);
    if (rc == 0 && strcmp(merged, current) != 0)
        rc = entry ? json_set_string(entry, "value", merged) : json_env_append(env, ENV_LIST, merged);
    free(merged);
    return rc;
}

/* Case (b): `-x NAME` pairs right after argv[0], built as a new array: Debian's cJSON 1.7.15
 * (1.7.15-1+deb12u4) fails cJSON_InsertItemInArray at any index but 0. */
static int forward_by_x(const struct mpijob *job, struct launcher_argv *a, const struct wanted_set *w,
                        const bool *present, struct transport_report *r)
{
    cJSON *target = cJSON_GetArraySize(a->command) > 0 ? a->command : a->args;
    cJSON *pairs = cJSON_CreateArray();
    int rc = pairs ? 0 : -ENOMEM;
    for (size_t i = 0; rc == 0 && i < w->n; i++) {
        if (!needs_forwarding(&w->v[i], present[i]))
            continue;
        bool listed = false;
        for (size_t k = 1; rc == 0 && k + 1 < a->n; k++) {
            const char *value;
            size_t vlen;
            if (is_x_option(a->v[k]) &&
                entry_names(a->v[k + 1], strlen(a->v[k + 1]), w->v[i].name, &value, &vlen)) {
                listed = true;
                rc = check_forwarded_value(job, &w->v[i], value, vlen, "the launcher command", r);
            }
        }
        if (rc == 0 && !listed) {
            rc = json_append_string(pairs, "-x");
            if (rc == 0)
                rc = json_append_string(pairs, w->v[i].name);
        }
    }
    /* target = argv[0], pairs, the rest: the rest moves behind the pairs */
    while (rc == 0 && cJSON_GetArraySize(target) > 1)
        cJSON_AddItemToArray(pairs, cJSON_DetachItemFromArray(target, 1));
    while (rc == 0 && cJSON_GetArraySize(pairs) > 0)
        cJSON_AddItemToArray(target, cJSON_DetachItemFromArray(pairs, 0));
    cJSON_Delete(pairs);
    return rc;
}

/* mpirun's own `--mca mca_base_env_list VALUE`: it overrides the environment, so the names are
 * merged into VALUE. Returns the string element holding VALUE and its array, or NULL. */
static cJSON *argv_env_list(const struct launcher_argv *a, cJSON **parent)
{
    for (size_t k = 1; k + 2 < a->n; k++) {
        if (!is_mca_option(a->v[k]) || strcmp(a->v[k + 1], "mca_base_env_list") != 0)
            continue;
        size_t at = k + 2, n_command = (size_t)cJSON_GetArraySize(a->command);
        *parent = at < n_command ? a->command : a->args;
        cJSON *e = cJSON_GetArrayItem(*parent, (int)(at < n_command ? at : at - n_command));
        return cJSON_IsString(e) ? e : NULL;
    }
    return NULL;
}

static int forward_by_argv_env_list(const struct mpijob *job, cJSON *parent, cJSON *list,
                                    const struct wanted_set *w, const bool *present,
                                    struct transport_report *r)
{
    char *merged = NULL;
    int rc = env_list_merge(job, list->valuestring, ';', w, present, "the launcher command", &merged, r);
    if (rc == 0 && strcmp(merged, list->valuestring) != 0) {
        cJSON *s = cJSON_CreateString(merged);
        if (!s || !cJSON_ReplaceItemViaPointer(parent, list, s)) {
            cJSON_Delete(s);
            rc = -ENOMEM;
        }
    }
    free(merged);
    return rc;
}

static int forward_openmpi(const struct mpijob *job, cJSON *container, cJSON *env,
                           const struct wanted_set *w, const bool *present, struct transport_report *r)
{
    bool any = false;
    for (size_t i = 0; i < w->n; i++)
        any = any || needs_forwarding(&w->v[i], present[i]);
    if (!any)
        return 0;

    struct launcher_argv a;
    struct words ws = {0};
    int rc = argv_collect(container, &a);
    if (rc < 0)
        goto out;

    if (a.n > 0 && is_mpirun(a.v[0])) {
        bool uses_x = false;
        for (size_t k = 1; k < a.n; k++)
            uses_x = uses_x || is_x_option(a.v[k]);
        cJSON *parent = NULL, *list = uses_x ? NULL : argv_env_list(&a, &parent);
        if (uses_x)
            rc = forward_by_x(job, &a, w, present, r);
        else if (list)
            rc = forward_by_argv_env_list(job, parent, list, w, present, r);
        else
            rc = forward_by_env_list(job, env, w, present, r);
        goto out;
    }

    /* A wrapper (a shell line, a script, a launcher program). It is left as written; what
     * matters is whether something in it forwards variables on its own. */
    for (size_t k = 0; rc == 0 && k < a.n; k++)
        rc = words_split(&ws, a.v[k]);
    if (rc < 0)
        goto out;
    bool uses_x = false, own_list = false, in_shell = false, in_mpirun = false;
    for (size_t k = 0; k < ws.n; k++) {
        const char *word = ws.w[k];
        if (!word) {
            in_shell = in_mpirun = false;
            continue;
        }
        if (strstr(word, "mca_base_env_list"))
            own_list = true;
        if (is_mpirun(word)) {
            in_mpirun = true;
            in_shell = false;
        } else if (!in_mpirun && owns_its_x(word)) {
            in_shell = true;
        } else if (is_x_option(word) && !in_shell) {
            uses_x = true;
        }
    }
    if (!uses_x && !own_list) {
        rc = forward_by_env_list(job, env, w, present, r);
        goto out;
    }
    const char *reason = uses_x ? "the launcher command is a shell line or wrapper that forwards variables "
                                  "with -x, which the operator does not rewrite"
                                : "the launcher command sets mca_base_env_list itself, which the operator "
                                  "does not rewrite";
    for (size_t i = 0; rc == 0 && i < w->n; i++) {
        if (!needs_forwarding(&w->v[i], present[i]))
            continue;
        bool listed = false;
        for (size_t k = 0; rc == 0 && k + 1 < ws.n; k++) {
            const char *value;
            size_t vlen;
            if (ws.w[k] && ws.w[k + 1] && is_x_option(ws.w[k]) &&
                entry_names(ws.w[k + 1], strlen(ws.w[k + 1]), w->v[i].name, &value, &vlen)) {
                listed = true;
                rc = check_forwarded_value(job, &w->v[i], value, vlen, "the launcher command", r);
            }
        }
        if (rc == 0 && !listed)
            rc = report_unforwarded(r, w->v[i].name, reason);
    }
out:
    words_free(&ws);
    free(a.v);
    return rc;
}

/* ---- RDMA device, capability, resource ---------------------------------------------------- */

/* No hostPath type, the way RDMA device plugins' own examples mount it. With type Directory a
 * node without the device keeps the pod in ContainerCreating for ever (the reason shows only in
 * an event) and the job hangs. Unchecked, the pod starts; the container runtime makes an empty
 * directory where none was; and the first process that looks for a device fails with a message
 * that names it (mpijob-worker's probe, or NCCL with NCCL_NET=IB), which ends the job Failed. */
static int mount_device_path(const char *path, cJSON *spec, cJSON *container)
{
    cJSON *mounts, *volumes, *e;
    int rc = json_child(container, "volumeMounts", true, &mounts);
    if (rc < 0)
        return rc;
    cJSON_ArrayForEach(e, mounts) {
        const char *at = json_string(e, "mountPath");
        if (at && path_equal(at, path))
            return 0; /* the template's own mount wins */
    }
    if ((rc = json_child(spec, "volumes", true, &volumes)) < 0)
        return rc;

    char name[64];
    bool reuse = false;
    for (int i = 0;; i++) {
        if (i == 0)
            snprintf(name, sizeof(name), "%s", TRANSPORT_RDMA_VOLUME);
        else
            snprintf(name, sizeof(name), "%s-%d", TRANSPORT_RDMA_VOLUME, i);
        cJSON *taken = NULL;
        cJSON_ArrayForEach(e, volumes) {
            const char *n = json_string(e, "name");
            if (n && strcmp(n, name) == 0)
                taken = e;
        }
        if (!taken)
            break;
        const char *host = json_string(taken, "hostPath.path");
        if (host && path_equal(host, path)) {
            reuse = true;
            break;
        }
    }

    if (!reuse) {
        cJSON *v = cJSON_CreateObject(), *hp = cJSON_CreateObject();
        bool ok = v && hp && cJSON_AddStringToObject(v, "name", name) &&
                  cJSON_AddStringToObject(hp, "path", path);
        if (ok && cJSON_AddItemToObject(v, "hostPath", hp)) {
            hp = NULL;
            ok = cJSON_AddItemToArray(volumes, v);
        } else {
            ok = false;
        }
        if (!ok) {
            cJSON_Delete(hp);
            cJSON_Delete(v);
            return -ENOMEM;
        }
    }
    cJSON *m = cJSON_CreateObject();
    if (!m || !cJSON_AddStringToObject(m, "name", name) || !cJSON_AddStringToObject(m, "mountPath", path) ||
        !cJSON_AddItemToArray(mounts, m)) {
        cJSON_Delete(m);
        return -ENOMEM;
    }
    return 0;
}

/* "IPC_LOCK", "CAP_IPC_LOCK", any case: container runtimes accept all of them. */
static bool is_ipc_lock(const cJSON *item)
{
    if (!cJSON_IsString(item))
        return false;
    const char *s = item->valuestring;
    if (strncasecmp(s, "CAP_", 4) == 0)
        s += 4;
    return strcasecmp(s, "IPC_LOCK") == 0;
}

/* IPC_LOCK lets the verbs library pin (register) memory. A privileged container has it
 * already, and a legacy template that asks for privileged stays exactly as written. */
static int add_ipc_lock(enum pod_role role, cJSON *container, struct transport_report *r)
{
    cJSON *sc, *caps, *add, *e;
    const cJSON *privileged = json_path(container, "securityContext.privileged");
    if (cJSON_IsTrue(privileged))
        return 0;
    int rc = json_child(container, "securityContext", false, &sc);
    if (rc == 0)
        rc = json_child(sc, "capabilities", false, &caps);
    if (rc == 0)
        rc = json_child(caps, "add", true, &add);
    if (rc < 0)
        return rc;
    bool listed = false;
    cJSON_ArrayForEach(e, add) listed = listed || is_ipc_lock(e);
    if (!listed && (rc = json_append_string(add, "IPC_LOCK")) < 0)
        return rc;
    /* Runtimes apply an explicit drop after add (only drop ALL gives way to add). */
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(caps, "drop")) {
        if (is_ipc_lock(e))
            return report_conflict(r, "IPC_LOCK: the %s template drops this capability, transport RDMA "
                                      "needs it to register memory; the template's drop is kept",
                                   role_label(role));
    }
    return 0;
}

/* One unit of the device plugin's resource. Extended resources need requests equal to limits,
 * so a value the user gave for either is copied to the other. */
static int request_resource(const char *resource, cJSON *container)
{
    cJSON *resources, *limits, *requests;
    int rc = json_child(container, "resources", false, &resources);
    if (rc == 0)
        rc = json_child(resources, "limits", false, &limits);
    if (rc == 0)
        rc = json_child(resources, "requests", false, &requests);
    if (rc < 0)
        return rc;
    cJSON *lim = cJSON_GetObjectItemCaseSensitive(limits, resource);
    cJSON *req = cJSON_GetObjectItemCaseSensitive(requests, resource);
    if (cJSON_IsNull(lim)) {
        cJSON_DeleteItemFromObjectCaseSensitive(limits, resource);
        lim = NULL;
    }
    if (cJSON_IsNull(req)) {
        cJSON_DeleteItemFromObjectCaseSensitive(requests, resource);
        req = NULL;
    }
    const cJSON *user = lim ? lim : req;
    cJSON *targets[2] = {lim ? NULL : limits, req ? NULL : requests};
    for (int i = 0; i < 2; i++) {
        if (!targets[i])
            continue;
        cJSON *v = user ? cJSON_Duplicate(user, true) : cJSON_CreateString("1");
        if (!v || !cJSON_AddItemToObject(targets[i], resource, v)) {
            cJSON_Delete(v);
            return -ENOMEM;
        }
    }
    return 0;
}

/* ---- entry points ------------------------------------------------------------------------- */

cJSON *transport_env(const struct mpijob *job)
{
    struct wanted_set w;
    if (wanted_build(job, &w) < 0)
        return NULL;
    cJSON *env = cJSON_CreateArray();
    for (size_t i = 0; env && i < w.n; i++) {
        if (json_env_append(env, w.v[i].name, w.v[i].value) < 0) {
            cJSON_Delete(env);
            env = NULL;
        }
    }
    wanted_free(&w);
    return env;
}

int transport_apply(const struct mpijob *job, enum pod_role role, cJSON *pod_template,
                    struct transport_report *report)
{
    cJSON *spec = cJSON_GetObjectItemCaseSensitive(pod_template, "spec");
    cJSON *containers = cJSON_GetObjectItemCaseSensitive(spec, "containers");
    cJSON *container = cJSON_GetArrayItem(containers, 0);
    if (!cJSON_IsObject(spec) || !cJSON_IsArray(containers) || !cJSON_IsObject(container))
        return -EINVAL;
    if (job->networking.transport == TRANSPORT_AUTO)
        return 0;

    struct wanted_set w;
    bool present[MAX_WANTED] = {0};
    cJSON *env;
    int rc = wanted_build(job, &w);
    if (rc < 0)
        return rc;
    rc = json_child(container, "env", true, &env);
    if (rc == 0)
        rc = apply_env(job, role, env, &w, present, report);
    if (rc == 0 && role == ROLE_LAUNCHER && job->implementation == MPI_OPENMPI)
        rc = forward_openmpi(job, container, env, &w, present, report);
    if (rc == 0 && job->networking.transport == TRANSPORT_RDMA) {
        const struct mpijob_rdma *rdma = &job->networking.rdma;
        rc = mount_device_path(is_set(rdma->device_path) ? rdma->device_path : DEFAULT_DEVICE_PATH, spec,
                               container);
        if (rc == 0)
            rc = add_ipc_lock(role, container, report);
        if (rc == 0 && is_set(rdma->resource_name))
            rc = request_resource(rdma->resource_name, container);
    }
    wanted_free(&w);
    return rc;
}
