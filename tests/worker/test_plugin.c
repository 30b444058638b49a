#include <criterion/criterion.h>

#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "worker/plugin.h"

#define WHY_LEN 512

/* A stand-in plugin, compiled by the tests with the system compiler. Macros pick the fault:
 * TABLE_ABI (the abi field), REFUSE_ABI (entry returns NULL), NO_ENTRY, DROP_SYNC (a NULL op),
 * USE_GONE (depends on libgone.so). */
static const char FAKE_SRC[] =
    "#include <stddef.h>\n"
    "#include \"worker/backend.h\"\n"
    "#ifndef TABLE_ABI\n"
    "#define TABLE_ABI WK_BACKEND_ABI\n"
    "#endif\n"
    "#ifdef USE_GONE\n"
    "int gone(void);\n"
    "#define ANSWER gone()\n"
    "#else\n"
    "#define ANSWER 1\n"
    "#endif\n"
    "static int available(char *why, size_t len) { if (len) why[0] = 0; return ANSWER; }\n"
    "static void nop(void) {}\n"
    "#define NOP_OP(f) .f = (__typeof__(((struct wk_ops *)0)->f))nop\n"
    "__attribute__((used)) static const struct wk_ops table = {\n"
    "  .abi = TABLE_ABI, .name = \"fake\", .available = available,\n"
    "  NOP_OP(unique_id), NOP_OP(init), NOP_OP(connect), NOP_OP(fini), NOP_OP(error), NOP_OP(device), NOP_OP(alloc),\n"
    "  NOP_OP(release), NOP_OP(upload), NOP_OP(download), NOP_OP(gemm), NOP_OP(bias_act),\n"
    "  NOP_OP(relu_backward), NOP_OP(bias_grad), NOP_OP(mse), NOP_OP(sgd), NOP_OP(fill),\n"
    "  NOP_OP(bucket_ready), NOP_OP(finish), NOP_OP(allreduce), NOP_OP(pending_bucket), NOP_OP(abort),\n"
    "#ifndef DROP_SYNC\n"
    "  NOP_OP(sync),\n"
    "#endif\n"
    "};\n"
    "#ifndef NO_ENTRY\n"
    "const struct wk_ops *mpijob_worker_backend(int abi) {\n"
    "#ifdef REFUSE_ABI\n"
    "  (void)abi; return NULL;\n"
    "#else\n"
    "  (void)abi; return &table;\n"
    "#endif\n"
    "}\n"
    "#endif\n";

static char tmpdir[64];

static const char *src_dir(void)
{
    const char *d = getenv("MPIJOB_SRC_DIR");
    return d != NULL && d[0] != '\0' ? d : ".";
}

static void make_tmpdir(void)
{
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/mpijob-plugin-test.XXXXXX");
    cr_assert_not_null(mkdtemp(tmpdir));
}

static void remove_tmpdir(void)
{
    if (tmpdir[0] == '\0')
        return;
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
    cr_expect_eq(system(cmd), 0);
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f, "cannot write %s", path);
    fputs(text, f);
    cr_assert_eq(fclose(f), 0);
}

/* Compiles FAKE_SRC with extra flags into tmpdir/<name>.so and returns its path (static). */
static const char *build_fake(const char *name, const char *flags)
{
    static char lib[PATH_MAX];
    char src[PATH_MAX], cmd[3 * PATH_MAX];
    snprintf(src, sizeof(src), "%s/fake.c", tmpdir);
    write_file(src, FAKE_SRC);
    snprintf(lib, sizeof(lib), "%s/%s.so", tmpdir, name);
    /* Flags last: libraries must follow the source for the linker to keep them. */
    snprintf(cmd, sizeof(cmd), "cc -shared -fPIC -I'%s/src' -o '%s' '%s' %s", src_dir(), lib, src,
             flags);
    cr_assert_eq(system(cmd), 0, "failed: %s", cmd);
    return lib;
}

static const struct wk_ops *load_from(const char *path, char *why)
{
    setenv("MPIJOB_WORKER_PLUGIN", path, 1);
    return wk_plugin_load(why, WHY_LEN);
}

TestSuite(plugin, .init = make_tmpdir, .fini = remove_tmpdir, .timeout = 120);

Test(plugin, missing_file_names_the_path)
{
    char why[WHY_LEN];
    cr_expect_null(load_from("/nonexistent/dir/libmpijob-worker-nccl.so", why));
    cr_expect(strstr(why, "/nonexistent/dir/libmpijob-worker-nccl.so") != NULL, "why: %s", why);
    cr_expect(strstr(why, "MPIJOB_WORKER_PLUGIN") != NULL, "why: %s", why);
}

Test(plugin, not_a_shared_library)
{
    char path[PATH_MAX], why[WHY_LEN];
    snprintf(path, sizeof(path), "%s/libmpijob-worker-nccl.so", tmpdir);
    write_file(path, "This is a text file, not an ELF shared object, however its name ends.\n");
    cr_expect_null(load_from(path, why));
    cr_expect(strstr(why, path) != NULL, "why: %s", why);
    cr_expect(strstr(why, "invalid ELF header") != NULL, "why: %s", why);
}

/* A fake plugin built with cflags is refused, and why says each of `says` and, with
 * names_path, the library's path. */
struct refused_plugin {
    const char *fake, *cflags;
    const char *says[2];
    bool names_path;
};

static void expect_refused(const struct refused_plugin *k)
{
    char why[WHY_LEN];
    const char *lib = build_fake(k->fake, k->cflags);
    cr_expect_null(load_from(lib, why));
    for (size_t i = 0; i < sizeof(k->says) / sizeof(k->says[0]) && k->says[i]; i++)
        cr_expect(strstr(why, k->says[i]) != NULL, "why: %s", why);
    if (k->names_path)
        cr_expect(strstr(why, lib) != NULL, "why: %s", why);
}

#define REFUSED_PLUGIN(name, ...)                                                                     \
    Test(plugin, name)                                                                                \
    {                                                                                                 \
        static const struct refused_plugin k = {__VA_ARGS__};                                         \
        expect_refused(&k);                                                                           \
    }

REFUSED_PLUGIN(abi_mismatch_in_table, "abi99", "-DTABLE_ABI=99", {"ABI mismatch", "ABI 99"}, true)
REFUSED_PLUGIN(abi_refused_by_entry, "refuse", "-DREFUSE_ABI", {"ABI mismatch"}, false)
REFUSED_PLUGIN(missing_entry_symbol, "noentry", "-DNO_ENTRY", {"no entry symbol " WK_PLUGIN_ENTRY}, true)
REFUSED_PLUGIN(incomplete_table, "nosync", "-DDROP_SYNC", {"incomplete backend table (no sync)"}, false)

Test(plugin, loads_a_correct_plugin)
{
    char why[WHY_LEN], why2[WHY_LEN];
    const char *lib = build_fake("good", "");
    const struct wk_ops *ops = load_from(lib, why);
    cr_assert_not_null(ops, "why: %s", why);
    cr_expect_eq(ops->abi, WK_BACKEND_ABI);
    cr_expect_str_eq(ops->name, "fake");
    cr_expect_eq(ops->available(why, sizeof(why)), 1);
    /* Loading again (no cache here) gives the same library and table. */
    cr_expect_eq(wk_plugin_load(why2, sizeof(why2)), ops);
}

/* A plugin that is there but whose own dependency is not (libcudart or libnccl on a machine
 * without CUDA): the reason names the missing library. */
Test(plugin, missing_dependency_is_named)
{
    char src[PATH_MAX], gone[PATH_MAX], cmd[4 * PATH_MAX], why[WHY_LEN];
    snprintf(src, sizeof(src), "%s/gone.c", tmpdir);
    snprintf(gone, sizeof(gone), "%s/libgone.so", tmpdir);
    write_file(src, "int gone(void) { return 1; }\n");
    snprintf(cmd, sizeof(cmd), "cc -shared -fPIC -o '%s' '%s'", gone, src);
    cr_assert_eq(system(cmd), 0, "failed: %s", cmd);
    snprintf(cmd, sizeof(cmd), "-DUSE_GONE -L'%s' -Wl,-rpath,'%s' -lgone", tmpdir, tmpdir);
    const char *lib = build_fake("needsgone", cmd);
    cr_assert_eq(unlink(gone), 0);
    cr_expect_null(load_from(lib, why));
    cr_expect(strstr(why, "libgone.so") != NULL, "why: %s", why);
    cr_expect(strstr(why, lib) != NULL, "why: %s", why);
}

/* Without the variable the loader looks beside the executable, in ../lib, then on the linker's
 * path; the test binary has no plugin in either place. */
Test(plugin, search_says_where_it_looked)
{
    unsetenv("MPIJOB_WORKER_PLUGIN");
    char exe[PATH_MAX], why[WHY_LEN];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    cr_assert_gt(n, 0);
    exe[n] = '\0';
    *strrchr(exe, '/') = '\0';
    const struct wk_ops *ops = wk_plugin_load(why, sizeof(why));
    if (ops != NULL)
        cr_skip_test("a plugin is installed on the linker's path");
    cr_expect(strstr(why, "not found") != NULL, "why: %s", why);
    cr_expect(strstr(why, exe) != NULL, "why: %s", why);
    cr_expect(strstr(why, WK_PLUGIN_FILE) != NULL, "why: %s", why);
}

/* The real plugin, when it was built. It is loaded in a child process: CUDA's runtime keeps
 * state and threads the sanitizers of this process should not have to judge, and a crash in
 * it must fail this test, not the runner. On this machine (no GPU, no driver) either dlopen
 * fails naming a CUDA library, or it loads and available() says there is no CUDA device. */
Test(plugin, real_plugin_never_crashes)
{
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/build/lib/" WK_PLUGIN_FILE, src_dir());
    if (access(path, F_OK) != 0)
        cr_skip_test("%s not built", path);
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        close(fds[0]);
        char why[WHY_LEN] = "", line[WHY_LEN + 64];
        const struct wk_ops *ops = load_from(path, why);
        if (ops == NULL) {
            snprintf(line, sizeof(line), "L%s", why);
        } else {
            int ok = ops->available(why, sizeof(why));
            snprintf(line, sizeof(line), "A%d %s|%s", ok, ops->name, why);
        }
        ssize_t w = write(fds[1], line, strlen(line));
        _exit(w < 0 ? 3 : 0); /* no exit handlers: CUDA's state is not this test's to check */
    }
    close(fds[1]);
    char got[WHY_LEN + 64];
    size_t used = 0;
    ssize_t n;
    while (used < sizeof(got) - 1 && (n = read(fds[0], got + used, sizeof(got) - 1 - used)) > 0)
        used += (size_t)n;
    got[used] = '\0';
    close(fds[0]);
    int status = 0;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child ended with status %#x (%s)",
              status, got);
    cr_log_info("real plugin: %s", got);
    if (got[0] == 'L') {
        cr_expect(strstr(got, "libcu") != NULL || strstr(got, "libnccl") != NULL, "%s", got);
    } else {
        cr_assert_eq(got[0], 'A', "%s", got);
        if (got[1] == '0')
            cr_expect(strstr(got, "nccl|no CUDA device: ") != NULL, "%s", got);
        else
            cr_expect(strncmp(got, "A1 nccl|", 8) == 0, "%s", got);
    }
}
