/* Kubeconfig and in-cluster configuration.
 *
 * A kubeconfig is loaded with libyaml's yaml_parser_load into a yaml_document_t, checked once
 * (depth, size with aliases counted in full, no cycles), then walked for the few fields we
 * use. Several files ($KUBECONFIG) stay parsed side by side and every name
 * is looked up in file order, which is kubectl's "first file to define a name wins". */
#include "kube/config.h"

#include "kube/errors.h"
#include "util/buf.h"
#include "util/clock.h"
#include "util/log.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <yaml.h>

#define KUBECONFIG_MAX_BYTES ((size_t)16 << 20)
#define CREDENTIAL_FILE_MAX_BYTES ((size_t)16 << 20) /* CA bundles can be large */
#define TOKEN_FILE_MAX_BYTES ((size_t)1 << 20)
#define YAML_MAX_DEPTH 64
#define YAML_MAX_NODES ((size_t)1 << 20) /* nodes, counting an alias as the nodes it stands for */
#define NAME_MAX_SHOWN 200 /* longest name quoted in an error message */

/* ---- errors ------------------------------------------------------------------------------ */

static int fail(char *err, size_t err_len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static int fail(char *err, size_t err_len, const char *fmt, ...)
{
    if (err && err_len > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, err_len, fmt, ap);
        va_end(ap);
    }
    return KUBE_ECONFIG;
}

static int fail_nomem(char *err, size_t err_len)
{
    if (err && err_len > 0)
        snprintf(err, err_len, "out of memory while loading the Kubernetes configuration");
    return KUBE_ENOMEM;
}

static const char *errno_text(int code, char *buf, size_t len)
{
    switch (code) {
    case EFBIG:
    case E2BIG:
        return "file too large";
    case EISDIR:
        return "not a regular file";
    default:
        return strerror_r(code, buf, len);
    }
}

/* ---- files ------------------------------------------------------------------------------- */

/* Reads a whole regular file of at most max bytes into a NUL-terminated buffer.
 * Returns 0 or a negative errno (-EFBIG when too large, -EISDIR when not a regular file). */
static int read_file(const char *path, size_t max, char **out, size_t *out_len)
{
    *out = NULL;
    *out_len = 0;
    /* O_NONBLOCK: a FIFO given by mistake must not hang the loader; it is refused below. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return -errno;
    struct stat st;
    if (fstat(fd, &st) < 0) {
        int e = errno;
        close(fd);
        return -e;
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return -EISDIR;
    }
    if ((uint64_t)st.st_size > max) {
        close(fd);
        return -EFBIG;
    }
    struct buf b;
    buf_init(&b, max);
    int rc = 0;
    for (;;) {
        char chunk[16384];
        ssize_t n = read(fd, chunk, sizeof(chunk));
        if (n < 0) {
            if (errno == EINTR)
                continue;
            rc = -errno;
            break;
        }
        if (n == 0)
            break;
        rc = buf_append(&b, chunk, (size_t)n);
        if (rc == -E2BIG)
            rc = -EFBIG;
        if (rc < 0)
            break;
    }
    close(fd);
    if (rc == 0 && !b.data)
        rc = buf_append(&b, "", 0); /* an empty file still gets its terminator */
    if (rc < 0) {
        buf_free(&b);
        return rc;
    }
    *out_len = b.len;
    *out = buf_steal(&b);
    return 0;
}

/* path when absolute or when there is no base directory, else base_dir/path. */
static char *resolve_path(const char *base_dir, const char *path)
{
    char *full;
    if (path[0] == '/' || !base_dir || !base_dir[0])
        return strdup(path);
    if (asprintf(&full, "%s/%s", base_dir, path) < 0)
        return NULL;
    return full;
}

/* The directory of a file, made absolute so that a later chdir cannot change what a
 * tokenFile path means. */
static char *directory_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    char *dir;
    if (!slash)
        dir = strdup(".");
    else if (slash == path)
        dir = strdup("/");
    else
        dir = strndup(path, (size_t)(slash - path));
    if (!dir || dir[0] == '/')
        return dir;
    char cwd[PATH_MAX];
    if (!getcwd(cwd, sizeof(cwd)))
        return dir;
    char *abs;
    int n = strcmp(dir, ".") == 0 ? asprintf(&abs, "%s", cwd) : asprintf(&abs, "%s/%s", cwd, dir);
    free(dir);
    return n < 0 ? NULL : abs;
}

static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

static bool has_control_chars(const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == 0x7f)
            return true;
    }
    return false;
}

/* Reads a token file: surrounding whitespace (the usual trailing newline) trimmed, and
 * refused when empty or when it holds control characters, which would corrupt the
 * Authorization header. On failure writes the reason and returns -1. */
static int read_token_file(const char *path, char **out, char *reason, size_t reason_len)
{
    char *data;
    size_t len;
    char ebuf[128];
    *out = NULL;
    int rc = read_file(path, TOKEN_FILE_MAX_BYTES, &data, &len);
    if (rc < 0) {
        snprintf(reason, reason_len, "%s", errno_text(-rc, ebuf, sizeof(ebuf)));
        return rc;
    }
    size_t start = 0;
    while (start < len && is_space(data[start]))
        start++;
    while (len > start && is_space(data[len - 1]))
        len--;
    if (len == start) {
        snprintf(reason, reason_len, "the file is empty");
        OPENSSL_cleanse(data, len);
        free(data);
        return -EINVAL;
    }
    if (has_control_chars(data + start, len - start)) {
        snprintf(reason, reason_len, "the token holds control characters");
        OPENSSL_cleanse(data, len);
        free(data);
        return -EINVAL;
    }
    *out = strndup(data + start, len - start);
    OPENSSL_cleanse(data, len);
    free(data);
    if (!*out) {
        snprintf(reason, reason_len, "out of memory");
        return -ENOMEM;
    }
    return 0;
}

/* ---- base64 ------------------------------------------------------------------------------ */

static bool is_base64_char(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '+' ||
           c == '/';
}

/* Standard base64 as Go's encoding/base64 writes it; whitespace (line breaks of a folded
 * YAML scalar) is skipped and missing padding is tolerated. Returns 0, -EINVAL or -ENOMEM.
 * The output is NUL-terminated; out_len excludes the terminator. */
static int base64_decode(const char *in, size_t in_len, char **out, size_t *out_len)
{
    *out = NULL;
    *out_len = 0;
    unsigned char *clean = malloc(in_len + 4);
    if (!clean)
        return -ENOMEM;
    size_t n = 0, pad = 0;
    for (size_t i = 0; i < in_len; i++) {
        unsigned char c = (unsigned char)in[i];
        if (is_space((char)c))
            continue;
        if (c == '=') {
            pad++;
        } else if (is_base64_char(c) && pad == 0) {
            clean[n++] = c;
        } else {
            free(clean);
            return -EINVAL; /* a foreign byte, or data after the padding */
        }
    }
    /* n data characters: a final group of 1 is impossible, and padding must complete the
     * last group exactly when present. */
    if (n == 0 || n % 4 == 1 || pad > 2 || (pad > 0 && (n + pad) % 4 != 0)) {
        free(clean);
        return -EINVAL;
    }
    size_t missing = (4 - n % 4) % 4;
    for (size_t i = 0; i < missing; i++)
        clean[n + i] = '=';
    size_t total = n + missing;
    unsigned char *decoded = malloc(total / 4 * 3 + 1);
    if (!decoded) {
        free(clean);
        return -ENOMEM;
    }
    int got = total > INT_MAX ? -1 : EVP_DecodeBlock(decoded, clean, (int)total);
    free(clean);
    if (got < 0 || (size_t)got < missing) {
        free(decoded);
        return -EINVAL;
    }
    *out_len = (size_t)got - missing;
    decoded[*out_len] = '\0';
    *out = (char *)decoded;
    return 0;
}

/* ---- the YAML document ------------------------------------------------------------------- */

/* libyaml's loader (yaml_parser_load) builds the document: nodes in one array, children named
 * by their 1-based index, an alias being one more reference to its anchor's node. So aliases
 * cost no memory, but a document may be a graph with shared nodes or even cycles (an alias
 * inside the collection it names). ydoc_check, run once after loading, bounds what walking it
 * can cost: no cycles, collections nested at most YAML_MAX_DEPTH deep, and at most
 * YAML_MAX_NODES nodes once every alias is counted as the nodes it stands for ("billion
 * laughs"). Memory while loading is linear in the input, which is capped. */

static const yaml_node_t *ynode_at(const yaml_document_t *d, int index)
{
    if (index < 1 || index > d->nodes.top - d->nodes.start)
        return NULL;
    return d->nodes.start + (index - 1);
}

static size_t yline(const yaml_node_t *n) { return n->start_mark.line + 1; }
static size_t ycolumn(const yaml_node_t *n) { return n->start_mark.column + 1; }
static const char *ytext(const yaml_node_t *n) { return (const char *)n->data.scalar.value; }

static const char *ynode_kind_name(const yaml_node_t *n)
{
    switch (n->type) {
    case YAML_SCALAR_NODE:
        return "a string";
    case YAML_SEQUENCE_NODE:
        return "a list";
    default:
        return "a mapping";
    }
}

static size_t seq_len(const yaml_node_t *seq)
{
    return (size_t)(seq->data.sequence.items.top - seq->data.sequence.items.start);
}

static const yaml_node_t *seq_item(const yaml_document_t *d, const yaml_node_t *seq, size_t i)
{
    return ynode_at(d, seq->data.sequence.items.start[i]);
}

static void yaml_problem(const yaml_parser_t *p, char *msg, size_t len)
{
    const char *problem = p->problem ? p->problem : "invalid YAML";
    if (p->error == YAML_MEMORY_ERROR) {
        snprintf(msg, len, "out of memory while parsing YAML");
    } else if (p->error == YAML_READER_ERROR) {
        if (p->problem_value != -1)
            snprintf(msg, len, "byte offset %zu: %s (byte 0x%02X)", p->problem_offset, problem,
                     (unsigned)p->problem_value & 0xffu);
        else
            snprintf(msg, len, "byte offset %zu: %s", p->problem_offset, problem);
    } else if (p->context) {
        snprintf(msg, len, "line %zu column %zu: %s (%s at line %zu column %zu)", p->problem_mark.line + 1,
                 p->problem_mark.column + 1, problem, p->context, p->context_mark.line + 1,
                 p->context_mark.column + 1);
    } else {
        snprintf(msg, len, "line %zu column %zu: %s", p->problem_mark.line + 1, p->problem_mark.column + 1,
                 problem);
    }
}

enum { YCHECK_NEW = 0, YCHECK_OPEN, YCHECK_DONE };

struct ycheck {
    const yaml_document_t *doc;
    unsigned char *state; /* per node */
    size_t *weight;       /* per node: nodes in its subtree, aliases counted in full */
    unsigned char *height;/* per node: collections nested in it, itself included */
    char *msg;
    size_t msg_len;
};

/* Checks the subtree of node index under `depth` enclosing collections. Returns 0 or -EINVAL
 * with msg written. Recursion stops at YAML_MAX_DEPTH + 1 levels. */
static int ycheck_node(struct ycheck *k, int index, size_t depth)
{
    const yaml_node_t *n = ynode_at(k->doc, index);
    if (!n) {
        snprintf(k->msg, k->msg_len, "a YAML node refers to node %d, which does not exist", index);
        return -EINVAL;
    }
    size_t i = (size_t)(index - 1);
    if (k->state[i] == YCHECK_OPEN) {
        snprintf(k->msg, k->msg_len,
                 "line %zu column %zu: an alias inside this collection refers back to it (a cycle)", yline(n),
                 ycolumn(n));
        return -EINVAL;
    }
    if (k->state[i] == YCHECK_NEW) {
        if (n->type != YAML_SCALAR_NODE && depth + 1 > YAML_MAX_DEPTH) {
            snprintf(k->msg, k->msg_len, "line %zu column %zu: nested deeper than %d levels", yline(n), ycolumn(n),
                     YAML_MAX_DEPTH);
            return -EINVAL;
        }
        k->state[i] = YCHECK_OPEN;
        size_t weight = 1, height = 0;
        size_t count = n->type == YAML_SEQUENCE_NODE ? seq_len(n)
                       : n->type == YAML_MAPPING_NODE
                           ? 2 * (size_t)(n->data.mapping.pairs.top - n->data.mapping.pairs.start)
                           : 0;
        for (size_t c = 0; c < count; c++) {
            int child = n->type == YAML_SEQUENCE_NODE ? n->data.sequence.items.start[c]
                        : c % 2 == 0                 ? n->data.mapping.pairs.start[c / 2].key
                                                     : n->data.mapping.pairs.start[c / 2].value;
            int rc = ycheck_node(k, child, depth + 1);
            if (rc < 0)
                return rc;
            weight += k->weight[child - 1];
            if (weight > YAML_MAX_NODES) {
                snprintf(k->msg, k->msg_len, "line %zu column %zu: aliases expand to more than %zu YAML nodes",
                         yline(n), ycolumn(n), YAML_MAX_NODES);
                return -EINVAL;
            }
            if (k->height[child - 1] > height)
                height = k->height[child - 1];
        }
        k->weight[i] = weight;
        k->height[i] = (unsigned char)(n->type == YAML_SCALAR_NODE ? 0 : height + 1);
        k->state[i] = YCHECK_DONE;
    }
    /* A node checked before, reached again through an alias deeper down. */
    if (depth + k->height[i] > YAML_MAX_DEPTH) {
        snprintf(k->msg, k->msg_len, "line %zu column %zu: nested deeper than %d levels", yline(n), ycolumn(n),
                 YAML_MAX_DEPTH);
        return -EINVAL;
    }
    return 0;
}

/* Returns 0, -ENOMEM, or -EINVAL with msg written. */
static int ydoc_check(const yaml_document_t *d, char *msg, size_t msg_len)
{
    size_t count = (size_t)(d->nodes.top - d->nodes.start);
    if (count == 0)
        return 0;
    if (count > YAML_MAX_NODES) {
        const yaml_node_t *n = d->nodes.start + YAML_MAX_NODES;
        snprintf(msg, msg_len, "line %zu column %zu: more than %zu YAML nodes", yline(n), ycolumn(n),
                 YAML_MAX_NODES);
        return -EINVAL;
    }
    struct ycheck k = {.doc = d, .msg = msg, .msg_len = msg_len};
    k.state = calloc(count, 1);
    k.weight = calloc(count, sizeof(*k.weight));
    k.height = calloc(count, 1);
    int rc = k.state && k.weight && k.height ? ycheck_node(&k, 1, 0) : -ENOMEM;
    free(k.state);
    free(k.weight);
    free(k.height);
    return rc;
}

/* Loads the first YAML document of text into d (a stream without one gives a document
 * without nodes) and checks it. Returns 0, KUBE_ECONFIG with "<name>: <problem>" in err, or
 * KUBE_ENOMEM; d is to be freed with yaml_document_delete only on success. */
static int ydoc_load(const char *name, const char *text, size_t len, yaml_document_t *d, char *err, size_t err_len)
{
    yaml_parser_t parser;
    char msg[512] = "";
    int rc = 0;
    if (!yaml_parser_initialize(&parser))
        return fail_nomem(err, err_len);
    yaml_parser_set_input_string(&parser, (const unsigned char *)(text ? text : ""), text ? len : 0);
    /* A kubeconfig is one document; like kubectl, read the first and ignore the rest. */
    if (!yaml_parser_load(&parser, d)) {
        if (parser.error == YAML_MEMORY_ERROR) {
            rc = fail_nomem(err, err_len);
        } else {
            yaml_problem(&parser, msg, sizeof(msg));
            rc = fail(err, err_len, "%s: %s", name, msg);
        }
        yaml_parser_delete(&parser);
        return rc; /* libyaml freed d */
    }
    yaml_parser_delete(&parser);
    rc = ydoc_check(d, msg, sizeof(msg));
    if (rc == -ENOMEM)
        rc = fail_nomem(err, err_len);
    else if (rc < 0)
        rc = fail(err, err_len, "%s: %s", name, msg);
    if (rc < 0)
        yaml_document_delete(d);
    return rc;
}

/* ---- reading the document ---------------------------------------------------------------- */

static bool ynode_is_null(const yaml_node_t *n)
{
    if (!n)
        return true;
    if (n->type != YAML_SCALAR_NODE || n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
        return false;
    const char *v = ytext(n);
    return n->data.scalar.length == 0 || strcmp(v, "~") == 0 || strcmp(v, "null") == 0 || strcmp(v, "Null") == 0 ||
           strcmp(v, "NULL") == 0;
}

static bool ynode_equals(const yaml_node_t *n, const char *s)
{
    size_t len = strlen(s);
    return n && n->type == YAML_SCALAR_NODE && n->data.scalar.length == len && memcmp(ytext(n), s, len) == 0;
}

/* The value of key in a mapping (the first, if the key repeats), or NULL. */
static const yaml_node_t *map_get(const yaml_document_t *d, const yaml_node_t *map, const char *key)
{
    if (!map || map->type != YAML_MAPPING_NODE)
        return NULL;
    for (const yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++)
        if (ynode_equals(ynode_at(d, p->key), key))
            return ynode_at(d, p->value);
    return NULL;
}

/* One parsed kubeconfig file. */
struct kc_file {
    char *name;        /* for messages: the path, or "kubeconfig" for text given in memory */
    char *dir;         /* where relative paths start; NULL for the current directory */
    yaml_document_t doc;
    bool loaded;              /* doc is to be deleted */
    const yaml_node_t *root;  /* a mapping, or NULL for an empty file */
};

/* Names what an error is about, e.g. `user "u" (context "c")`. */
struct subject {
    const struct kc_file *file;
    char what[2 * NAME_MAX_SHOWN + 64];
};

/* A string field: *out is NULL when the field is absent, null or empty. */
static int field_string(const struct subject *s, const yaml_node_t *map, const char *key, const char **out,
                        char *err, size_t err_len)
{
    const yaml_node_t *n = map_get(&s->file->doc, map, key);
    *out = NULL;
    if (ynode_is_null(n))
        return 0;
    if (n->type != YAML_SCALAR_NODE)
        return fail(err, err_len, "%s: line %zu column %zu: %s: %s must be a string, found %s", s->file->name,
                    yline(n), ycolumn(n), s->what, key, ynode_kind_name(n));
    if (memchr(ytext(n), '\0', n->data.scalar.length))
        return fail(err, err_len, "%s: line %zu column %zu: %s: %s contains a NUL byte", s->file->name, yline(n),
                    ycolumn(n), s->what, key);
    if (n->data.scalar.length > 0)
        *out = ytext(n);
    return 0;
}

/* `true` only when written as a YAML boolean true; an absent field is false. */
static int field_bool(const struct subject *s, const yaml_node_t *map, const char *key, bool *out, char *err,
                      size_t err_len)
{
    const yaml_node_t *n = map_get(&s->file->doc, map, key);
    *out = false;
    if (ynode_is_null(n))
        return 0;
    if (n->type == YAML_SCALAR_NODE && n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE) {
        const char *v = ytext(n);
        if (!strcmp(v, "true") || !strcmp(v, "True") || !strcmp(v, "TRUE")) {
            *out = true;
            return 0;
        }
        if (!strcmp(v, "false") || !strcmp(v, "False") || !strcmp(v, "FALSE"))
            return 0;
    }
    return fail(err, err_len, "%s: line %zu column %zu: %s: %s must be true or false", s->file->name, yline(n),
                ycolumn(n), s->what, key);
}

static void blob_free(struct kube_blob *b)
{
    if (b->data) {
        OPENSSL_cleanse(b->data, b->len);
        free(b->data);
    }
    b->data = NULL;
    b->len = 0;
}

/* A credential from data_key (base64) or, when that is unset, from the file path_key. */
static int field_blob(const struct subject *s, const yaml_node_t *map, const char *data_key, const char *path_key,
                      struct kube_blob *out, char *err, size_t err_len)
{
    const char *data, *path;
    char ebuf[128];
    int rc = field_string(s, map, data_key, &data, err, err_len);
    if (rc < 0)
        return rc;
    if (data) {
        rc = base64_decode(data, strlen(data), &out->data, &out->len);
        if (rc == -ENOMEM)
            return fail_nomem(err, err_len);
        if (rc < 0)
            return fail(err, err_len, "%s: %s: %s is not valid base64", s->file->name, s->what, data_key);
        return 0;
    }
    rc = field_string(s, map, path_key, &path, err, err_len);
    if (rc < 0 || !path)
        return rc;
    char *full = resolve_path(s->file->dir, path);
    if (!full)
        return fail_nomem(err, err_len);
    rc = read_file(full, CREDENTIAL_FILE_MAX_BYTES, &out->data, &out->len);
    if (rc == -ENOMEM) {
        rc = fail_nomem(err, err_len);
    } else if (rc < 0) {
        rc = fail(err, err_len, "%s: %s: cannot read %s %s: %s", s->file->name, s->what, path_key, full,
                  errno_text(-rc, ebuf, sizeof(ebuf)));
    } else if (out->len == 0) {
        blob_free(out);
        rc = fail(err, err_len, "%s: %s: %s %s is empty", s->file->name, s->what, path_key, full);
    }
    free(full);
    return rc;
}

/* ---- token state ------------------------------------------------------------------------- */

struct kube_config_token {
    pthread_mutex_t mutex;
    char *token;         /* the last good token */
    char *file;          /* re-read from here; NULL for a static token */
    uint64_t read_at_ms; /* monotonic time of the last read attempt */
    uint64_t max_age_ms;
    bool stale;          /* invalidated: re-read on next use */
};

static void token_state_free(struct kube_config_token *t)
{
    if (!t)
        return;
    pthread_mutex_destroy(&t->mutex);
    if (t->token) {
        OPENSSL_cleanse(t->token, strlen(t->token));
        free(t->token);
    }
    free(t->file);
    free(t);
}

/* Takes ownership of token and file. */
static struct kube_config_token *token_state_new(char *token, char *file)
{
    struct kube_config_token *t = calloc(1, sizeof(*t));
    if (!t || pthread_mutex_init(&t->mutex, NULL) != 0) {
        free(t);
        if (token) {
            OPENSSL_cleanse(token, strlen(token));
            free(token);
        }
        free(file);
        return NULL;
    }
    t->token = token;
    t->file = file;
    t->read_at_ms = clock_now_ms();
    t->max_age_ms = KUBE_TOKEN_MAX_AGE_MS;
    return t;
}

/* A token state that reads path now; on failure writes "<prefix>: cannot read <label> ..." */
static int token_state_from_file(const char *path, const char *prefix, const char *label,
                                 struct kube_config_token **out, char *err, size_t err_len)
{
    char reason[256];
    char *token;
    if (read_token_file(path, &token, reason, sizeof(reason)) < 0)
        return fail(err, err_len, "%s: cannot read %s %s: %s", prefix, label, path, reason);
    char *file = strdup(path);
    if (!file) {
        OPENSSL_cleanse(token, strlen(token));
        free(token);
        return fail_nomem(err, err_len);
    }
    *out = token_state_new(token, file);
    return *out ? 0 : fail_nomem(err, err_len);
}

char *kube_config_token(struct kube_config *cfg)
{
    if (!cfg || !cfg->token_state)
        return NULL;
    struct kube_config_token *t = cfg->token_state;
    pthread_mutex_lock(&t->mutex);
    if (t->file) {
        uint64_t now = clock_now_ms();
        if (t->stale || now - t->read_at_ms >= t->max_age_ms) {
            char reason[256];
            char *fresh;
            if (read_token_file(t->file, &fresh, reason, sizeof(reason)) == 0) {
                if (t->token) {
                    OPENSSL_cleanse(t->token, strlen(t->token));
                    free(t->token);
                }
                t->token = fresh;
            } else {
                log_warn("cannot re-read the token file, keeping the previous token", "file=\"%s\" error=\"%s\"",
                         t->file, reason);
            }
            /* Also after a failure: the next attempt waits for the next expiry or 401. */
            t->read_at_ms = now;
            t->stale = false;
        }
    }
    char *copy = t->token ? strdup(t->token) : NULL;
    pthread_mutex_unlock(&t->mutex);
    return copy;
}

bool kube_config_invalidate_token(struct kube_config *cfg)
{
    if (!cfg || !cfg->token_state)
        return false;
    struct kube_config_token *t = cfg->token_state;
    pthread_mutex_lock(&t->mutex);
    bool has_file = t->file != NULL;
    if (has_file)
        t->stale = true;
    pthread_mutex_unlock(&t->mutex);
    return has_file;
}

void kube_config_set_token_max_age_ms(struct kube_config *cfg, uint64_t ms)
{
    if (!cfg || !cfg->token_state)
        return;
    pthread_mutex_lock(&cfg->token_state->mutex);
    cfg->token_state->max_age_ms = ms;
    pthread_mutex_unlock(&cfg->token_state->mutex);
}

/* ---- the in-cluster CA file -------------------------------------------------------------- */

struct kube_config_ca_file {
    pthread_mutex_t mutex;
    char *path;
    char *pem; /* the last good bundle; NULL until one was read */
    size_t len;
    struct stat seen;     /* the file as it was when pem was read (device, inode, size, mtime) */
    uint64_t checked_at_ms;
    uint64_t check_ms;
    bool stale;           /* invalidated: read again at the next call */
    bool complained;      /* the current failure was logged */
};

static bool same_file(const struct stat *a, const struct stat *b)
{
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_size == b->st_size &&
           a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec;
}

/* The number of X.509 certificates in a PEM bundle (OpenSSL parses it as curl will). */
static int pem_certificates(const char *pem, size_t len)
{
    BIO *bio = BIO_new_mem_buf(pem, (int)len);
    if (!bio)
        return 0;
    STACK_OF(X509_INFO) *infos = PEM_X509_INFO_read_bio(bio, NULL, NULL, NULL);
    BIO_free(bio);
    int n = 0;
    for (int i = 0; infos && i < sk_X509_INFO_num(infos); i++)
        if (sk_X509_INFO_value(infos, i)->x509)
            n++;
    sk_X509_INFO_pop_free(infos, X509_INFO_free);
    ERR_clear_error();
    return n;
}

/* Reads the CA file into f. 0, or -1 with the reason in why. Called with f->mutex held. */
static int ca_file_read(struct kube_config_ca_file *f, const struct stat *st, char *why, size_t why_len)
{
    char *data;
    size_t len;
    char ebuf[128];
    int rc = read_file(f->path, CREDENTIAL_FILE_MAX_BYTES, &data, &len);
    if (rc < 0) {
        snprintf(why, why_len, "%s", errno_text(-rc, ebuf, sizeof(ebuf)));
        return -1;
    }
    if (len == 0 || pem_certificates(data, len) == 0) {
        snprintf(why, why_len, "%s", len == 0 ? "the file is empty" : "the file holds no PEM certificate");
        free(data);
        return -1;
    }
    bool changed = f->pem && (f->len != len || memcmp(f->pem, data, len) != 0);
    free(f->pem);
    f->pem = data;
    f->len = len;
    f->seen = *st;
    if (changed)
        log_info("the in-cluster CA changed; verifying the API server with the new one", "file=\"%s\"", f->path);
    else if (f->complained)
        log_info("the in-cluster CA is there now; verifying the API server with it", "file=\"%s\"", f->path);
    f->complained = false;
    return 0;
}

static void ca_file_free(struct kube_config_ca_file *f)
{
    if (!f)
        return;
    pthread_mutex_destroy(&f->mutex);
    free(f->path);
    free(f->pem);
    free(f);
}

/* Takes ownership of path. The file is read at the first kube_config_ca. */
static struct kube_config_ca_file *ca_file_new(char *path)
{
    struct kube_config_ca_file *f = calloc(1, sizeof(*f));
    if (!f || pthread_mutex_init(&f->mutex, NULL) != 0) {
        free(f);
        free(path);
        return NULL;
    }
    f->path = path;
    f->check_ms = KUBE_CA_CHECK_MS;
    f->stale = true;
    return f;
}

int kube_config_ca(struct kube_config *cfg, char **pem, size_t *len, char *err, size_t err_len)
{
    *pem = NULL;
    *len = 0;
    if (!cfg)
        return KUBE_EINVAL;
    if (!cfg->ca_file) {
        if (!cfg->ca.data)
            return 0;
        if (!(*pem = malloc(cfg->ca.len + 1)))
            return KUBE_ENOMEM;
        memcpy(*pem, cfg->ca.data, cfg->ca.len);
        (*pem)[cfg->ca.len] = '\0';
        *len = cfg->ca.len;
        return 0;
    }
    struct kube_config_ca_file *f = cfg->ca_file;
    int rc = 0;
    pthread_mutex_lock(&f->mutex);
    uint64_t now = clock_now_ms();
    if (f->stale || !f->pem || now - f->checked_at_ms >= f->check_ms) {
        char why[256] = "";
        struct stat st;
        bool changed = true;
        if (stat(f->path, &st) < 0) {
            char ebuf[128];
            snprintf(why, sizeof(why), "%s", errno_text(errno, ebuf, sizeof(ebuf)));
        } else if (f->pem && !f->stale && same_file(&st, &f->seen)) {
            changed = false;
        }
        if (changed && (why[0] || ca_file_read(f, &st, why, sizeof(why)) < 0)) {
            if (!f->complained)
                log_warn(f->pem ? "cannot read the in-cluster CA, keeping the previous one"
                                : "cannot read the in-cluster CA; requests wait for it",
                         "file=\"%s\" error=\"%s\"", f->path, why);
            f->complained = true;
            if (!f->pem) {
                snprintf(err, err_len, "in-cluster CA %s: %s", f->path, why);
                rc = KUBE_ECONFIG;
            }
        }
        f->checked_at_ms = now;
        f->stale = false;
    }
    if (rc == 0) {
        if ((*pem = malloc(f->len + 1))) {
            memcpy(*pem, f->pem, f->len);
            (*pem)[f->len] = '\0';
            *len = f->len;
        } else {
            rc = KUBE_ENOMEM;
        }
    }
    pthread_mutex_unlock(&f->mutex);
    return rc;
}

bool kube_config_invalidate_ca(struct kube_config *cfg)
{
    if (!cfg || !cfg->ca_file)
        return false;
    pthread_mutex_lock(&cfg->ca_file->mutex);
    cfg->ca_file->stale = true;
    pthread_mutex_unlock(&cfg->ca_file->mutex);
    return true;
}

void kube_config_set_ca_check_ms(struct kube_config *cfg, uint64_t ms)
{
    if (!cfg || !cfg->ca_file)
        return;
    pthread_mutex_lock(&cfg->ca_file->mutex);
    cfg->ca_file->check_ms = ms;
    pthread_mutex_unlock(&cfg->ca_file->mutex);
}

void kube_config_free(struct kube_config *cfg)
{
    if (!cfg)
        return;
    free(cfg->server);
    free(cfg->namespace);
    free(cfg->context_name);
    free(cfg->tls_server_name);
    blob_free(&cfg->ca);
    blob_free(&cfg->client_cert);
    blob_free(&cfg->client_key);
    token_state_free(cfg->token_state);
    ca_file_free(cfg->ca_file);
    free(cfg);
}

/* ---- kubeconfig -------------------------------------------------------------------------- */

static void kc_file_free(struct kc_file *f)
{
    free(f->name);
    free(f->dir);
    if (f->loaded)
        yaml_document_delete(&f->doc);
    memset(f, 0, sizeof(*f));
}

/* `clusters[i]` described by its name when it has a usable one. */
static void describe_item(const struct kc_file *f, char *out, size_t len, const char *list, const char *singular,
                          size_t index, const yaml_node_t *item)
{
    const yaml_node_t *name = map_get(&f->doc, item, "name");
    if (name && name->type == YAML_SCALAR_NODE && !ynode_is_null(name))
        snprintf(out, len, "%s \"%.*s\"", singular, NAME_MAX_SHOWN, ytext(name));
    else
        snprintf(out, len, "%s[%zu]", list, index);
}

/* Checks the shape of one of the named lists: a list of mappings, each with a string name
 * and a mapping under body_key. Wrong shapes are errors wherever they are, as in kubectl. */
static int check_named_list(const struct kc_file *f, const char *list, const char *singular, const char *body_key,
                            char *err, size_t err_len)
{
    const yaml_node_t *seq = map_get(&f->doc, f->root, list);
    if (ynode_is_null(seq))
        return 0;
    if (seq->type != YAML_SEQUENCE_NODE)
        return fail(err, err_len, "%s: line %zu column %zu: %s must be a list, found %s", f->name, yline(seq),
                    ycolumn(seq), list, ynode_kind_name(seq));
    for (size_t i = 0; i < seq_len(seq); i++) {
        const yaml_node_t *item = seq_item(&f->doc, seq, i);
        char what[NAME_MAX_SHOWN + 64];
        if (item->type != YAML_MAPPING_NODE)
            return fail(err, err_len, "%s: line %zu column %zu: %s[%zu] must be a mapping, found %s", f->name,
                        yline(item), ycolumn(item), list, i, ynode_kind_name(item));
        const yaml_node_t *name = map_get(&f->doc, item, "name");
        if (!ynode_is_null(name) && name->type != YAML_SCALAR_NODE)
            return fail(err, err_len, "%s: line %zu column %zu: %s[%zu].name must be a string, found %s", f->name,
                        yline(name), ycolumn(name), list, i, ynode_kind_name(name));
        describe_item(f, what, sizeof(what), list, singular, i, item);
        const yaml_node_t *body = map_get(&f->doc, item, body_key);
        if (!ynode_is_null(body) && body->type != YAML_MAPPING_NODE)
            return fail(err, err_len, "%s: line %zu column %zu: %s: %s must be a mapping, found %s", f->name,
                        yline(body), ycolumn(body), what, body_key, ynode_kind_name(body));
    }
    return 0;
}

/* Parses one file's text into f (which takes name and dir) and checks its overall shape. */
static int kc_file_parse(struct kc_file *f, char *name, char *dir, const char *text, size_t len, char *err,
                         size_t err_len)
{
    memset(f, 0, sizeof(*f));
    f->name = name;
    f->dir = dir;
    if (!name)
        return fail_nomem(err, err_len);
    if (len > KUBECONFIG_MAX_BYTES)
        return fail(err, err_len, "%s: larger than %zu bytes", name, KUBECONFIG_MAX_BYTES);
    int rc = ydoc_load(name, text, len, &f->doc, err, err_len);
    if (rc < 0)
        return rc;
    f->loaded = true;
    const yaml_node_t *root = ynode_at(&f->doc, 1);
    if (ynode_is_null(root))
        return 0; /* an empty file: contributes nothing, as with kubectl */
    if (root->type != YAML_MAPPING_NODE)
        return fail(err, err_len, "%s: line %zu column %zu: the top level must be a mapping, found %s", name,
                    yline(root), ycolumn(root), ynode_kind_name(root));
    f->root = root;
    const yaml_node_t *cc = map_get(&f->doc, root, "current-context");
    if (!ynode_is_null(cc) && cc->type != YAML_SCALAR_NODE)
        return fail(err, err_len, "%s: line %zu column %zu: current-context must be a string, found %s", name,
                    yline(cc), ycolumn(cc), ynode_kind_name(cc));
    if ((rc = check_named_list(f, "clusters", "cluster", "cluster", err, err_len)) < 0 ||
        (rc = check_named_list(f, "users", "user", "user", err, err_len)) < 0 ||
        (rc = check_named_list(f, "contexts", "context", "context", err, err_len)) < 0)
        return rc;
    return 0;
}

struct entry {
    const struct kc_file *file;
    const yaml_node_t *body; /* the entry's cluster/user/context mapping; NULL when absent */
};

/* Finds the entry called name in the first file that defines it. */
static bool find_entry(const struct kc_file *files, size_t nfiles, const char *list, const char *body_key,
                       const char *name, struct entry *out)
{
    for (size_t f = 0; f < nfiles; f++) {
        const yaml_document_t *d = &files[f].doc;
        const yaml_node_t *seq = map_get(d, files[f].root, list);
        if (!seq || seq->type != YAML_SEQUENCE_NODE)
            continue;
        for (size_t i = 0; i < seq_len(seq); i++) {
            const yaml_node_t *n = map_get(d, seq_item(d, seq, i), "name");
            if (n && !ynode_is_null(n) && ynode_equals(n, name)) {
                const yaml_node_t *body = map_get(d, seq_item(d, seq, i), body_key);
                out->file = &files[f];
                out->body = ynode_is_null(body) ? NULL : body;
                return true;
            }
        }
    }
    return false;
}

static int load_cluster(const struct entry *e, const char *cluster, const char *context, struct kube_config *cfg,
                        char *err, size_t err_len)
{
    struct subject s = {.file = e->file};
    const char *server, *tls_name;
    int rc;
    snprintf(s.what, sizeof(s.what), "cluster \"%.*s\"", NAME_MAX_SHOWN, cluster);

    if ((rc = field_string(&s, e->body, "server", &server, err, err_len)) < 0)
        return rc;
    if (!server)
        return fail(err, err_len, "%s: cluster \"%.*s\" (context \"%.*s\") has no server", e->file->name,
                    NAME_MAX_SHOWN, cluster, NAME_MAX_SHOWN, context);
    size_t len = strlen(server);
    while (len > 0 && server[len - 1] == '/')
        len--;
    size_t scheme = strncasecmp(server, "https://", 8) == 0 ? 8 : strncasecmp(server, "http://", 7) == 0 ? 7 : 0;
    if (scheme == 0)
        return fail(err, err_len, "%s: %s: server \"%.*s\" must start with https:// or http://", e->file->name,
                    s.what, NAME_MAX_SHOWN, server);
    if (len <= scheme)
        return fail(err, err_len, "%s: %s: server \"%.*s\" has no host", e->file->name, s.what, NAME_MAX_SHOWN,
                    server);
    if (has_control_chars(server, len))
        return fail(err, err_len, "%s: %s: server holds control characters", e->file->name, s.what);
    if (!(cfg->server = strndup(server, len)))
        return fail_nomem(err, err_len);

    if ((rc = field_bool(&s, e->body, "insecure-skip-tls-verify", &cfg->insecure_skip_tls_verify, err, err_len)) < 0)
        return rc;
    if ((rc = field_string(&s, e->body, "tls-server-name", &tls_name, err, err_len)) < 0)
        return rc;
    if (tls_name && !(cfg->tls_server_name = strdup(tls_name)))
        return fail_nomem(err, err_len);
    return field_blob(&s, e->body, "certificate-authority-data", "certificate-authority", &cfg->ca, err, err_len);
}

static int load_user(const struct entry *e, const char *user, const char *context, struct kube_config *cfg,
                     char *err, size_t err_len)
{
    struct subject s = {.file = e->file};
    const char *token, *token_file;
    int rc;
    snprintf(s.what, sizeof(s.what), "user \"%.*s\" (context \"%.*s\")", NAME_MAX_SHOWN, user, NAME_MAX_SHOWN,
             context);

    if ((rc = field_string(&s, e->body, "token", &token, err, err_len)) < 0 ||
        (rc = field_string(&s, e->body, "tokenFile", &token_file, err, err_len)) < 0)
        return rc;
    if ((rc = field_blob(&s, e->body, "client-certificate-data", "client-certificate", &cfg->client_cert, err,
                         err_len)) < 0 ||
        (rc = field_blob(&s, e->body, "client-key-data", "client-key", &cfg->client_key, err, err_len)) < 0)
        return rc;
    if (cfg->client_cert.data && !cfg->client_key.data)
        return fail(err, err_len, "%s: %s: client-certificate given without client-key or client-key-data",
                    e->file->name, s.what);
    if (cfg->client_key.data && !cfg->client_cert.data)
        return fail(err, err_len,
                    "%s: %s: client-key given without client-certificate or client-certificate-data",
                    e->file->name, s.what);

    if (!token && !token_file && !cfg->client_cert.data) {
        const yaml_document_t *d = &e->file->doc;
        const char *plugin = !ynode_is_null(map_get(d, e->body, "exec"))            ? "exec"
                             : !ynode_is_null(map_get(d, e->body, "auth-provider")) ? "auth-provider"
                                                                                      : NULL;
        if (plugin)
            return fail(err, err_len,
                        "%s: %s: credential plugins (%s) are not supported; give the user a token, "
                        "tokenFile or client certificate",
                        e->file->name, s.what, plugin);
    }

    if (token_file) {
        /* A tokenFile takes precedence over a static token, as in client-go. */
        char *full = resolve_path(e->file->dir, token_file);
        if (!full)
            return fail_nomem(err, err_len);
        char prefix[sizeof(s.what) + PATH_MAX];
        snprintf(prefix, sizeof(prefix), "%s: %s", e->file->name, s.what);
        rc = token_state_from_file(full, prefix, "tokenFile", &cfg->token_state, err, err_len);
        free(full);
        return rc;
    }
    if (token) {
        if (has_control_chars(token, strlen(token)))
            return fail(err, err_len, "%s: %s: token holds control characters (a line break?)", e->file->name,
                        s.what);
        char *copy = strdup(token);
        if (!copy || !(cfg->token_state = token_state_new(copy, NULL)))
            return fail_nomem(err, err_len);
    }
    return 0;
}

/* Builds the config of one context out of the parsed files. sources names them all. */
static int kc_resolve(const struct kc_file *files, size_t nfiles, const char *sources, const char *context,
                      struct kube_config **out, char *err, size_t err_len)
{
    const char *ctx_name = context && context[0] ? context : NULL;
    bool all_empty = true;
    int rc;

    for (size_t i = 0; i < nfiles; i++) {
        if (files[i].root)
            all_empty = false;
        if (ctx_name)
            continue;
        const yaml_node_t *cc = map_get(&files[i].doc, files[i].root, "current-context");
        if (ynode_is_null(cc) || cc->data.scalar.length == 0)
            continue;
        if (memchr(ytext(cc), '\0', cc->data.scalar.length))
            return fail(err, err_len, "%s: current-context contains a NUL byte", files[i].name);
        ctx_name = ytext(cc);
    }
    if (!ctx_name) {
        if (all_empty)
            return fail(err, err_len, "%s: the kubeconfig is empty", sources);
        return fail(err, err_len, "%s: no context given and current-context is not set", sources);
    }

    struct entry ctx, cluster, user;
    if (!find_entry(files, nfiles, "contexts", "context", ctx_name, &ctx))
        return fail(err, err_len, "%s: context \"%.*s\" not found", sources, NAME_MAX_SHOWN, ctx_name);
    struct subject s = {.file = ctx.file};
    snprintf(s.what, sizeof(s.what), "context \"%.*s\"", NAME_MAX_SHOWN, ctx_name);
    const char *cluster_name, *user_name, *ns;
    if ((rc = field_string(&s, ctx.body, "cluster", &cluster_name, err, err_len)) < 0 ||
        (rc = field_string(&s, ctx.body, "user", &user_name, err, err_len)) < 0 ||
        (rc = field_string(&s, ctx.body, "namespace", &ns, err, err_len)) < 0)
        return rc;
    if (!cluster_name)
        return fail(err, err_len, "%s: context \"%.*s\" names no cluster", ctx.file->name, NAME_MAX_SHOWN, ctx_name);
    if (!find_entry(files, nfiles, "clusters", "cluster", cluster_name, &cluster))
        return fail(err, err_len, "%s: cluster \"%.*s\" (context \"%.*s\") not found", sources, NAME_MAX_SHOWN,
                    cluster_name, NAME_MAX_SHOWN, ctx_name);
    if (user_name && !find_entry(files, nfiles, "users", "user", user_name, &user))
        return fail(err, err_len, "%s: user \"%.*s\" (context \"%.*s\") not found", sources, NAME_MAX_SHOWN,
                    user_name, NAME_MAX_SHOWN, ctx_name);

    struct kube_config *cfg = calloc(1, sizeof(*cfg));
    if (!cfg)
        return fail_nomem(err, err_len);
    if (!(cfg->context_name = strdup(ctx_name)) || !(cfg->namespace = strdup(ns ? ns : "default"))) {
        rc = fail_nomem(err, err_len);
        goto out;
    }
    if ((rc = load_cluster(&cluster, cluster_name, ctx_name, cfg, err, err_len)) < 0)
        goto out;
    if (user_name && (rc = load_user(&user, user_name, ctx_name, cfg, err, err_len)) < 0)
        goto out;
    *out = cfg;
    cfg = NULL;
out:
    kube_config_free(cfg);
    return rc;
}

int kube_config_parse(const char *text, size_t len, const char *base_dir, const char *context,
                      struct kube_config **out, char *err, size_t err_len)
{
    if (!out)
        return KUBE_EINVAL;
    *out = NULL;
    struct kc_file f;
    char *dir = base_dir ? strdup(base_dir) : NULL;
    if (base_dir && !dir)
        return fail_nomem(err, err_len);
    int rc = kc_file_parse(&f, strdup("kubeconfig"), dir, text, len, err, err_len);
    if (rc == 0)
        rc = kc_resolve(&f, 1, f.name, context, out, err, err_len);
    kc_file_free(&f);
    return rc;
}

/* Reads and parses path into f. When optional, a missing file is not an error: returns 1. */
static int kc_file_load(struct kc_file *f, const char *path, bool optional, char *err, size_t err_len)
{
    char *text;
    size_t len;
    char ebuf[128];
    memset(f, 0, sizeof(*f));
    int rc = read_file(path, KUBECONFIG_MAX_BYTES, &text, &len);
    if (rc == -ENOENT && optional)
        return 1;
    if (rc == -ENOMEM)
        return fail_nomem(err, err_len);
    if (rc < 0)
        return fail(err, err_len, "%s: cannot read the kubeconfig: %s", path, errno_text(-rc, ebuf, sizeof(ebuf)));
    char *name = strdup(path);
    char *dir = directory_of(path);
    if (!dir) {
        free(name);
        free(text);
        return fail_nomem(err, err_len);
    }
    rc = kc_file_parse(f, name, dir, text, len, err, err_len);
    OPENSSL_cleanse(text, len);
    free(text);
    if (rc < 0)
        kc_file_free(f);
    return rc;
}

int kube_config_load_kubeconfig(const char *path, const char *context, struct kube_config **out, char *err,
                                size_t err_len)
{
    if (!out)
        return KUBE_EINVAL;
    *out = NULL;

    char *list = NULL; /* ':'-separated paths, split in place */
    bool optional = false;
    const char *env = getenv("KUBECONFIG");
    if (path && path[0]) {
        list = strdup(path);
    } else if (env && env[0]) {
        list = strdup(env);
        optional = true; /* kubectl skips missing files of $KUBECONFIG */
    } else {
        const char *home = getenv("HOME");
        if (!home || !home[0])
            return fail(err, err_len, "no kubeconfig: $KUBECONFIG and $HOME are not set");
        if (asprintf(&list, "%s/.kube/config", home) < 0)
            list = NULL;
    }
    if (!list)
        return fail_nomem(err, err_len);

    /* With a path given, the whole string is one file name, colons included. */
    size_t max_files = 1;
    if (optional)
        for (const char *p = list; *p; p++)
            max_files += *p == ':';
    struct kc_file *files = calloc(max_files, sizeof(*files));
    struct buf sources;
    buf_init(&sources, 0);
    size_t nfiles = 0;
    int rc = 0;
    if (!files) {
        rc = fail_nomem(err, err_len);
        goto out;
    }

    char *save = NULL;
    for (char *p = optional ? strtok_r(list, ":", &save) : list; p; p = optional ? strtok_r(NULL, ":", &save) : NULL) {
        bool seen = false;
        for (size_t i = 0; i < nfiles; i++)
            seen = seen || strcmp(files[i].name, p) == 0;
        if (seen)
            continue;
        rc = kc_file_load(&files[nfiles], p, optional, err, err_len);
        if (rc < 0)
            goto out;
        if (rc == 1) {
            rc = 0;
            continue;
        }
        if ((nfiles > 0 && buf_append_str(&sources, ":") < 0) || buf_append_str(&sources, p) < 0) {
            nfiles++;
            rc = fail_nomem(err, err_len);
            goto out;
        }
        nfiles++;
    }
    if (nfiles == 0) {
        rc = fail(err, err_len, "$KUBECONFIG=%s: none of the files exists", env);
        goto out;
    }
    rc = kc_resolve(files, nfiles, sources.data, context, out, err, err_len);
out:
    for (size_t i = 0; files && i < nfiles; i++)
        kc_file_free(&files[i]);
    free(files);
    buf_free(&sources);
    free(list);
    return rc;
}

/* ---- in-cluster -------------------------------------------------------------------------- */

int kube_config_load_in_cluster(const char *dir, struct kube_config **out, char *err, size_t err_len)
{
    if (!out)
        return KUBE_EINVAL;
    *out = NULL;
    if (!dir)
        dir = KUBE_IN_CLUSTER_DIR;
    const char *host = getenv("KUBERNETES_SERVICE_HOST");
    const char *port = getenv("KUBERNETES_SERVICE_PORT");
    if (!host || !host[0] || !port || !port[0])
        return fail(err, err_len,
                    "in-cluster config: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must be set "
                    "(not running in a pod?)");
    char *end;
    errno = 0;
    unsigned long port_number = strtoul(port, &end, 10);
    if (port[0] < '0' || port[0] > '9' || *end || errno || port_number == 0 || port_number > 65535)
        return fail(err, err_len, "in-cluster config: KUBERNETES_SERVICE_PORT=%.*s is not a port number",
                    NAME_MAX_SHOWN, port);
    if (has_control_chars(host, strlen(host)) || strchr(host, '/') || strchr(host, ' '))
        return fail(err, err_len, "in-cluster config: KUBERNETES_SERVICE_HOST=%.*s is not a host", NAME_MAX_SHOWN,
                    host);

    struct kube_config *cfg = calloc(1, sizeof(*cfg));
    char *path = NULL, *data = NULL;
    size_t len;
    int rc = 0;
    if (!cfg)
        return fail_nomem(err, err_len);
    bool ipv6 = strchr(host, ':') && host[0] != '[';
    if (asprintf(&cfg->server, ipv6 ? "https://[%s]:%lu" : "https://%s:%lu", host, port_number) < 0) {
        cfg->server = NULL;
        rc = fail_nomem(err, err_len);
        goto out;
    }

    if (asprintf(&path, "%s/token", dir) < 0) {
        path = NULL;
        rc = fail_nomem(err, err_len);
        goto out;
    }
    if ((rc = token_state_from_file(path, "in-cluster config", "token file", &cfg->token_state, err, err_len)) < 0)
        goto out;
    free(path);

    /* ca.crt is read at the first request and whenever it changes (kube_config_ca): a CA the
     * kubelet writes late, or rotates, is picked up; without one nothing is sent. */
    if (asprintf(&path, "%s/ca.crt", dir) < 0) {
        path = NULL;
        rc = fail_nomem(err, err_len);
        goto out;
    }
    cfg->ca_file = ca_file_new(path);
    path = NULL;
    if (!cfg->ca_file) {
        rc = fail_nomem(err, err_len);
        goto out;
    }
    char *ca = NULL;
    size_t ca_len;
    char ca_err[512];
    if (kube_config_ca(cfg, &ca, &ca_len, ca_err, sizeof(ca_err)) == KUBE_ENOMEM) {
        rc = fail_nomem(err, err_len);
        goto out;
    }
    free(ca);

    if (asprintf(&path, "%s/namespace", dir) < 0) {
        path = NULL;
        rc = fail_nomem(err, err_len);
        goto out;
    }
    if (read_file(path, TOKEN_FILE_MAX_BYTES, &data, &len) == 0) {
        size_t start = 0;
        while (start < len && is_space(data[start]))
            start++;
        while (len > start && is_space(data[len - 1]))
            len--;
        if (len > start && !has_control_chars(data + start, len - start))
            cfg->namespace = strndup(data + start, len - start);
    }
    if (!cfg->namespace)
        cfg->namespace = strdup("default");
    if (!cfg->namespace) {
        rc = fail_nomem(err, err_len);
        goto out;
    }
    *out = cfg;
    cfg = NULL;
out:
    free(data);
    free(path);
    kube_config_free(cfg);
    return rc;
}

/* ---- the cluster domain ------------------------------------------------------------------- */

#define RESOLV_CONF_MAX_BYTES 65536

int kube_config_cluster_domain(const char *path, const char *namespace, char **domain)
{
    if (!namespace || !namespace[0] || !domain)
        return KUBE_EINVAL;
    *domain = NULL;
    char *text = NULL;
    size_t len = 0;
    if (read_file(path ? path : "/etc/resolv.conf", RESOLV_CONF_MAX_BYTES, &text, &len) < 0)
        return KUBE_ECONFIG;
    size_t ns_len = strlen(namespace);
    int rc = KUBE_ENOTFOUND;
    char *save_line = NULL;
    for (char *line = strtok_r(text, "\n", &save_line); line && rc == KUBE_ENOTFOUND;
         line = strtok_r(NULL, "\n", &save_line)) {
        char *save_word = NULL;
        char *word = strtok_r(line, " \t\r", &save_word);
        if (!word || strcmp(word, "search") != 0)
            continue;
        /* the kubelet's own entries come first: <ns>.svc.<domain>, svc.<domain>, <domain> */
        while ((word = strtok_r(NULL, " \t\r", &save_word)) != NULL) {
            size_t n = strlen(word);
            while (n > 0 && word[n - 1] == '.')
                word[--n] = '\0';
            if (n > ns_len + 5 && strncmp(word, namespace, ns_len) == 0 &&
                strncmp(word + ns_len, ".svc.", 5) == 0) {
                *domain = strdup(word + ns_len + 5);
                rc = *domain ? 0 : KUBE_ENOMEM;
                break;
            }
        }
    }
    free(text);
    return rc;
}

