/* Finds and loads the GPU backend plugin (see plugin.h for the search order).
 *
 * A candidate that does not exist is skipped silently; any other failure (dlopen error, missing
 * entry symbol, ABI mismatch) is kept as the reason when it is the first one, so a library that
 * is there but cannot load because libcudart or libnccl is missing says exactly that. When
 * $MPIJOB_WORKER_PLUGIN is set it is the only candidate: an explicit path is never replaced by
 * another library found elsewhere.
 *
 * Nothing is cached here: a library that loaded is never closed, and loading the same file
 * again gets the same handle from the dynamic linker and the same table. */
#include "worker/plugin.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define PLUGIN_ENV "MPIJOB_WORKER_PLUGIN"
#define PATH_LEN (PATH_MAX + sizeof(WK_PLUGIN_FILE) + 16)

struct search {
    char *why;
    size_t why_len;
    int have_reason; /* why[] holds the first failure that was not "file not found" */
};

static void keep_reason(struct search *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void keep_reason(struct search *s, const char *fmt, ...)
{
    if (s->have_reason || s->why == NULL || s->why_len == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->why, s->why_len, fmt, ap);
    va_end(ap);
    s->have_reason = 1;
}

/* Every function of the table, by name, so an incomplete table is refused before use. */
static const char *missing_op(const struct wk_ops *t)
{
    if (t->name == NULL)
        return "name";
#define NEED(f)                                                                                    \
    if (t->f == NULL)                                                                              \
        return #f;
    NEED(available) NEED(unique_id) NEED(init) NEED(connect) NEED(fini) NEED(error) NEED(device)
    NEED(alloc) NEED(release) NEED(upload) NEED(download) NEED(gemm) NEED(bias_act)
    NEED(relu_backward) NEED(bias_grad) NEED(mse) NEED(sgd) NEED(fill) NEED(bucket_ready)
    NEED(finish) NEED(allreduce) NEED(sync) NEED(pending_bucket) NEED(abort)
#undef NEED
    return NULL;
}

/* dlopen's message when the file itself is not on the linker's path (as opposed to a library
 * it depends on): "<file>: cannot open shared object file: ...". */
static int linker_not_found(const char *err)
{
    size_t n = strlen(WK_PLUGIN_FILE);
    return err != NULL && strncmp(err, WK_PLUGIN_FILE, n) == 0 &&
           strncmp(err + n, ": cannot open shared object file", 32) == 0;
}

/* Loads one candidate: a path, or a bare file name for the linker's search. Returns the table,
 * or NULL (with a reason kept unless the file was simply not there). */
static const struct wk_ops *try_load(const char *file, int is_path, struct search *s)
{
    struct stat st;
    if (is_path && stat(file, &st) != 0) {
        if (errno != ENOENT && errno != ENOTDIR)
            keep_reason(s, "%s: %s", file, strerror(errno));
        return NULL;
    }
    void *lib = dlopen(file, RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        const char *err = dlerror();
        if (!is_path && linker_not_found(err))
            return NULL;
        if (err == NULL)
            err = "unknown error";
        /* dlerror names the file when the file itself is bad, a dependency when that is. */
        if (strncmp(err, file, strlen(file)) == 0)
            keep_reason(s, "dlopen: %s", err);
        else
            keep_reason(s, "dlopen %s: %s", file, err);
        return NULL;
    }
    (void)dlerror();
    void *sym = dlsym(lib, WK_PLUGIN_ENTRY);
    if (sym == NULL) {
        const char *err = dlerror();
        keep_reason(s, "%s: no entry symbol %s (%s)", file, WK_PLUGIN_ENTRY,
                    err != NULL ? err : "null");
        dlclose(lib);
        return NULL;
    }
    wk_plugin_entry_fn entry;
    memcpy(&entry, &sym, sizeof(entry));
    const struct wk_ops *ops = entry(WK_BACKEND_ABI);
    const char *missing = NULL;
    if (ops == NULL)
        keep_reason(s, "%s: ABI mismatch: the plugin does not provide backend ABI %d", file,
                    WK_BACKEND_ABI);
    else if (ops->abi != WK_BACKEND_ABI)
        keep_reason(s, "%s: ABI mismatch: the plugin's table has ABI %d, this worker needs %d",
                    file, ops->abi, WK_BACKEND_ABI);
    else if ((missing = missing_op(ops)) != NULL)
        keep_reason(s, "%s: incomplete backend table (no %s)", file, missing);
    else
        return ops; /* stays loaded for the life of the process */
    dlclose(lib);
    return NULL;
}

/* The directory of the running executable into dir (no trailing slash); 0 or -errno. */
static int exe_dir(char *dir, size_t len)
{
    ssize_t n = readlink("/proc/self/exe", dir, len - 1);
    if (n < 0)
        return -errno;
    if ((size_t)n >= len - 1)
        return -ENAMETOOLONG;
    dir[n] = '\0';
    char *slash = strrchr(dir, '/');
    if (slash == NULL)
        return -ENOENT;
    *slash = '\0';
    return 0;
}

const struct wk_ops *wk_plugin_load(char *why, size_t why_len)
{
    struct search s = { .why = why, .why_len = why_len, .have_reason = 0 };
    if (why != NULL && why_len > 0)
        why[0] = '\0';

    const char *env = getenv(PLUGIN_ENV);
    if (env != NULL && env[0] != '\0') {
        const struct wk_ops *ops = try_load(env, 1, &s);
        if (ops == NULL)
            keep_reason(&s, "%s=%s: no such file", PLUGIN_ENV, env);
        return ops;
    }

    char dir[PATH_MAX];
    char path[PATH_LEN];
    int have_dir = exe_dir(dir, sizeof(dir)) == 0;
    if (have_dir) {
        static const char *const rel[] = { "", "/../lib" };
        for (size_t i = 0; i < sizeof(rel) / sizeof(rel[0]); i++) {
            int n = snprintf(path, sizeof(path), "%s%s/%s", dir, rel[i], WK_PLUGIN_FILE);
            if (n < 0 || (size_t)n >= sizeof(path))
                continue;
            const struct wk_ops *ops = try_load(path, 1, &s);
            if (ops != NULL)
                return ops;
        }
    }
    const struct wk_ops *ops = try_load(WK_PLUGIN_FILE, 0, &s);
    if (ops != NULL)
        return ops;
    if (have_dir)
        keep_reason(&s, "%s not found in %s, %s/../lib or the dynamic linker's path (set %s)",
                    WK_PLUGIN_FILE, dir, dir, PLUGIN_ENV);
    else
        keep_reason(&s, "%s not found on the dynamic linker's path (set %s)", WK_PLUGIN_FILE,
                    PLUGIN_ENV);
    return NULL;
}
