/* worker-image/: the Dockerfile read as data (no container engine on these machines), the
 * entrypoint and sshd_config exercised for real through tests/worker/check-worker-image.sh. */
#include <criterion/criterion.h>
#include <ctype.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "worker/plugin.h"

#include "runcmd.h"

#define MAX_ITEMS 64

static const char *src_dir(void)
{
    return runcmd_src_dir();
}

static char *read_text(const char *rel)
{
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/%s", src_dir(), rel);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = calloc(1, (size_t)n + 1);
    cr_assert_not_null(text);
    cr_assert_eq(fread(text, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    return text;
}

/* ---- the Dockerfile as a list of instructions ------------------------------------------------ */

struct copy {
    char from[64];  /* --from stage, "" for the build context */
    int n_src;
    char src[4][256];
    char dest[256];
};

struct stage {
    char image[256];
    char name[64];
    char workdir[256];
    int n_copies;
    struct copy copies[16];
    int n_runs;
    char *runs[32];      /* borrowed from the joined text */
    int n_packages;
    char packages[MAX_ITEMS][64];
    char entrypoint[256];
    int expose;
};

struct dockerfile {
    char *text;          /* instructions joined, one per line */
    int n_stages;
    struct stage stages[4];
    int n_args;          /* ARG NAME=default lines before the first FROM */
    char arg_names[8][64];
    char arg_values[8][256];
};

/* FROM ${NAME}: the default of the ARG NAME declared before the first FROM. */
static void resolve_from(const struct dockerfile *df, char *image, size_t size)
{
    char name[64];
    if (sscanf(image, "${%63[^}]}", name) != 1)
        return;
    for (int i = 0; i < df->n_args; i++)
        if (strcmp(df->arg_names[i], name) == 0) {
            char value[256];
            memcpy(value, df->arg_values[i], sizeof(value));
            snprintf(image, size, "%s", value);
            return;
        }
    cr_assert_fail("FROM ${%s}: no ARG %s with a default before the first FROM", name, name);
}

/* Joins continuation lines and drops comments: one instruction per line. */
static char *join_lines(const char *raw)
{
    char *out = calloc(1, strlen(raw) + 2);
    cr_assert_not_null(out);
    size_t used = 0;
    int continued = 0;
    for (const char *line = raw; *line;) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        const char *p = line;
        while (p < line + len && isspace((unsigned char)*p))
            p++;
        int comment = p < line + len && *p == '#';
        if (!comment && p < line + len) {
            size_t l = len - (size_t)(p - line);
            while (l > 0 && isspace((unsigned char)p[l - 1]))
                l--;
            int more = l > 0 && p[l - 1] == '\\';
            if (more)
                l--;
            if (continued)
                out[used++] = ' ';
            memcpy(out + used, p, l);
            used += l;
            if (!more)
                out[used++] = '\n';
            continued = more;
        }
        line = end ? end + 1 : line + len;
    }
    out[used] = '\0';
    return out;
}

static void parse_copy(struct stage *st, char *args)
{
    cr_assert_lt(st->n_copies, 16);
    struct copy *c = &st->copies[st->n_copies++];
    memset(c, 0, sizeof(*c));
    char *words[8];
    int n = 0;
    char *save = NULL;
    for (char *w = strtok_r(args, " \t", &save); w; w = strtok_r(NULL, " \t", &save)) {
        if (strncmp(w, "--from=", 7) == 0) {
            snprintf(c->from, sizeof(c->from), "%s", w + 7);
            continue;
        }
        if (strncmp(w, "--", 2) == 0)
            continue;
        cr_assert_lt(n, 8);
        words[n++] = w;
    }
    cr_assert_geq(n, 2, "COPY needs a source and a destination");
    cr_assert_leq(n - 1, 4);
    for (int i = 0; i < n - 1; i++)
        snprintf(c->src[c->n_src++], sizeof(c->src[0]), "%s", words[i]);
    snprintf(c->dest, sizeof(c->dest), "%s", words[n - 1]);
}

/* The packages of every `apt-get install` in a RUN line. */
static void parse_packages(struct stage *st, const char *run)
{
    char *copy = strdup(run);
    int installing = 0;
    char *save = NULL;
    for (char *w = strtok_r(copy, " \t", &save); w; w = strtok_r(NULL, " \t", &save)) {
        if (strcmp(w, "&&") == 0 || strcmp(w, ";") == 0 || strcmp(w, "||") == 0) {
            installing = 0;
        } else if (strcmp(w, "install") == 0) {
            installing = 1;
        } else if (installing && w[0] != '-') {
            cr_assert_lt(st->n_packages, MAX_ITEMS);
            snprintf(st->packages[st->n_packages++], sizeof(st->packages[0]), "%s", w);
        }
    }
    free(copy);
}

static void dockerfile_load(struct dockerfile *df)
{
    memset(df, 0, sizeof(*df));
    char *raw = read_text("worker-image/Dockerfile");
    df->text = join_lines(raw);
    free(raw);
    struct stage *st = NULL;
    for (char *line = df->text, *next; *line; line = next) {
        char *nl = strchr(line, '\n');
        if (nl != NULL)
            *nl = '\0';
        next = nl ? nl + 1 : line + strlen(line);
        char *args = line + strcspn(line, " \t");
        if (*args)
            *args++ = '\0';
        if (strcmp(line, "FROM") == 0) {
            cr_assert_lt(df->n_stages, 4);
            st = &df->stages[df->n_stages++];
            char as[8] = "";
            int n = sscanf(args, "%255s %7s %63s", st->image, as, st->name);
            cr_assert(n == 1 || (n == 3 && strcasecmp(as, "AS") == 0), "FROM %s", args);
            resolve_from(df, st->image, sizeof(st->image));
        } else if (st == NULL) {
            cr_assert(strcmp(line, "ARG") == 0, "only ARG may come before FROM, got %s", line);
            cr_assert_lt(df->n_args, 8);
            int n = sscanf(args, "%63[^=]=%255s", df->arg_names[df->n_args], df->arg_values[df->n_args]);
            if (n == 2)
                df->n_args++;
        } else if (strcmp(line, "COPY") == 0 || strcmp(line, "ADD") == 0) {
            char *dup = strdup(args);
            parse_copy(st, dup);
            free(dup);
        } else if (strcmp(line, "RUN") == 0) {
            cr_assert_lt(st->n_runs, 32);
            st->runs[st->n_runs++] = args;
            parse_packages(st, args);
        } else if (strcmp(line, "WORKDIR") == 0) {
            snprintf(st->workdir, sizeof(st->workdir), "%s", args);
        } else if (strcmp(line, "ENTRYPOINT") == 0) {
            cJSON *ep = cJSON_Parse(args);
            cr_assert(cJSON_IsArray(ep) && cJSON_IsString(cJSON_GetArrayItem(ep, 0)),
                      "ENTRYPOINT must be the exec (JSON array) form, got %s", args);
            snprintf(st->entrypoint, sizeof(st->entrypoint), "%s", cJSON_GetArrayItem(ep, 0)->valuestring);
            cJSON_Delete(ep);
        } else if (strcmp(line, "EXPOSE") == 0) {
            st->expose = atoi(args);
        } else {
            static const char *known[] = {"ARG", "ENV", "LABEL", "USER", "CMD", "SHELL", NULL};
            int ok = 0;
            for (int i = 0; known[i]; i++)
                ok = ok || strcmp(line, known[i]) == 0;
            cr_assert(ok, "unexpected Dockerfile instruction %s", line);
        }
    }
    cr_assert_geq(df->n_stages, 2, "a build stage and a runtime stage");
}

static const struct stage *runtime_stage(const struct dockerfile *df)
{
    return &df->stages[df->n_stages - 1];
}

static const struct copy *copy_to(const struct stage *st, const char *dest)
{
    for (int i = 0; i < st->n_copies; i++)
        if (strcmp(st->copies[i].dest, dest) == 0)
            return &st->copies[i];
    return NULL;
}

static int has_package(const struct stage *st, const char *name)
{
    for (int i = 0; i < st->n_packages; i++)
        if (strcmp(st->packages[i], name) == 0)
            return 1;
    return 0;
}

/* The value of `Port` in worker-image/sshd_config. */
static int sshd_port(void)
{
    char *text = read_text("worker-image/sshd_config");
    int port = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n"))
        if (sscanf(line, "Port %d", &port) == 1)
            break;
    free(text);
    return port;
}

Test(worker_image, every_copied_file_exists)
{
    struct dockerfile df;
    dockerfile_load(&df);
    int checked = 0;
    for (int s = 0; s < df.n_stages; s++)
        for (int i = 0; i < df.stages[s].n_copies; i++) {
            const struct copy *c = &df.stages[s].copies[i];
            if (c->from[0] != '\0')
                continue;
            for (int k = 0; k < c->n_src; k++) {
                char path[PATH_MAX];
                struct stat sb;
                snprintf(path, sizeof(path), "%s/%s", src_dir(), c->src[k]);
                cr_expect_eq(stat(path, &sb), 0, "COPY %s: no such file in the tree", c->src[k]);
                checked++;
            }
        }
    cr_expect_geq(checked, 5, "Makefile, cmd/, src/, sshd_config and the entrypoint at least");
    free(df.text);
}

Test(worker_image, stage_copies_come_from_make_targets)
{
    struct dockerfile df;
    dockerfile_load(&df);
    char *makefile = read_text("Makefile");
    int checked = 0;
    for (int s = 0; s < df.n_stages; s++)
        for (int i = 0; i < df.stages[s].n_copies; i++) {
            const struct copy *c = &df.stages[s].copies[i];
            if (c->from[0] == '\0')
                continue;
            const struct stage *from = NULL;
            for (int k = 0; k < s; k++)
                if (strcmp(df.stages[k].name, c->from) == 0)
                    from = &df.stages[k];
            cr_assert_not_null(from, "COPY --from=%s: no earlier stage of that name", c->from);
            for (int k = 0; k < c->n_src; k++) {
                /* /src/build/bin/x under WORKDIR /src is the make target build/bin/x. */
                size_t wl = strlen(from->workdir);
                cr_assert(strncmp(c->src[k], from->workdir, wl) == 0 && c->src[k][wl] == '/',
                          "%s is outside the build stage's WORKDIR %s", c->src[k], from->workdir);
                const char *copied = c->src[k] + wl + 1;
                /* A folder (build/lib/) holds what the stage makes there where it can: the
                 * NCCL plugin, built only where nvcc is. */
                char target[256];
                if (copied[strlen(copied) - 1] == '/')
                    snprintf(target, sizeof(target), "%s%s", copied, WK_PLUGIN_FILE);
                else
                    snprintf(target, sizeof(target), "%s", copied);
                int made = 0;
                for (int r = 0; r < from->n_runs; r++)
                    made = made || (strstr(from->runs[r], "make ") && strstr(from->runs[r], target));
                cr_expect(made, "%s is copied but no `make` in stage %s builds it", target, c->from);
                cr_expect_not_null(strstr(makefile, target), "the Makefile has no target %s", target);
                checked++;
            }
        }
    cr_expect_eq(checked, 2, "the binary and the NCCL plugin");
    free(makefile);
    free(df.text);
}

Test(worker_image, base_images_are_pinned_cuda_tags)
{
    struct dockerfile df;
    dockerfile_load(&df);
    cr_expect_not_null(strstr(df.stages[0].image, "-devel-"), "build stage: %s", df.stages[0].image);
    cr_expect_not_null(strstr(runtime_stage(&df)->image, "-runtime-"), "runtime: %s",
                       runtime_stage(&df)->image);
    for (int s = 0; s < df.n_stages; s++) {
        cr_expect(strncmp(df.stages[s].image, "nvidia/cuda:", 12) == 0, "%s", df.stages[s].image);
        cr_expect_null(strstr(df.stages[s].image, ":latest"), "%s", df.stages[s].image);
    }
    free(df.text);
}

Test(worker_image, runtime_packages)
{
    struct dockerfile df;
    dockerfile_load(&df);
    static const char *wanted[] = {"openssh-server", "openssh-client", "rdma-core",
                                   "ibverbs-providers", "libcjson1", "libopenblas0", NULL};
    for (int i = 0; wanted[i]; i++)
        cr_expect(has_package(runtime_stage(&df), wanted[i]), "runtime stage lacks %s", wanted[i]);
    /* What the Makefile's worker and plugin rules compile against. */
    static const char *build[] = {"gcc", "make", "pkg-config", "libcjson-dev", "libibverbs-dev",
                                  "libopenblas-dev", NULL};
    for (int i = 0; build[i]; i++)
        cr_expect(has_package(&df.stages[0], build[i]), "build stage lacks %s", build[i]);
    /* The flavours' packages, chosen in the RUN line by the MPI build argument and the base. */
    static const char *chosen[][2] = {{"runtime", "openmpi) mpi_run=openmpi-bin"},
                                      {"runtime", "mpich) mpi_run=mpich"},
                                      {"runtime", "nccl=libnccl2"},
                                      {"build", "openmpi) mpi_dev=libopenmpi-dev"},
                                      {"build", "mpich) mpi_dev=libmpich-dev"},
                                      {"build", "nccl_dev=libnccl-dev"}};
    for (size_t i = 0; i < sizeof(chosen) / sizeof(chosen[0]); i++) {
        const struct stage *st = strcmp(chosen[i][0], "build") == 0 ? &df.stages[0] : runtime_stage(&df);
        int found = 0;
        for (int r = 0; r < st->n_runs; r++)
            found = found || strstr(st->runs[r], chosen[i][1]) != NULL;
        cr_expect(found, "%s stage: no `%s`", chosen[i][0], chosen[i][1]);
    }
    free(df.text);
}

Test(worker_image, paths_agree_with_entrypoint_and_plugin_loader)
{
    struct dockerfile df;
    dockerfile_load(&df);
    const struct stage *rt = runtime_stage(&df);

    /* The entrypoint is copied where ENTRYPOINT runs it. */
    const struct copy *ep = copy_to(rt, rt->entrypoint);
    cr_assert_not_null(ep, "ENTRYPOINT %s is not a file the Dockerfile copies", rt->entrypoint);
    cr_expect_str_eq(ep->src[0], "worker-image/entrypoint.sh");

    /* The config the entrypoint starts sshd with is the one copied from worker-image/. */
    char *script = read_text("worker-image/entrypoint.sh");
    const char *def = strstr(script, "MPIJOB_SSHD_CONFIG:-");
    cr_assert_not_null(def, "the entrypoint names no default sshd config");
    char config[256] = "";
    sscanf(def + strlen("MPIJOB_SSHD_CONFIG:-"), "%255[^}]", config);
    const struct copy *cfg = copy_to(rt, config);
    cr_assert_not_null(cfg, "the entrypoint's config %s is not copied into the image", config);
    cr_expect_str_eq(cfg->src[0], "worker-image/sshd_config");
    cr_expect_not_null(strstr(script, "exec /usr/sbin/sshd "), "the entrypoint runs sshd by its path");

    /* mpirun runs `mpijob-worker` by name: it must be on the default PATH ssh sessions get. */
    const struct copy *bin = copy_to(rt, "/usr/local/bin/mpijob-worker");
    cr_assert_not_null(bin, "the binary is not copied to /usr/local/bin/mpijob-worker");

    /* plugin.h: the loader looks in ../lib/ relative to the executable's directory. */
    char dir[256], plugin[PATH_MAX];
    snprintf(dir, sizeof(dir), "%s", bin->dest);
    snprintf(plugin, sizeof(plugin), "%s/../lib/%s", dirname(dir), WK_PLUGIN_FILE);
    char *up = strstr(plugin, "/bin/../lib/");
    cr_assert_not_null(up);
    memmove(up, up + strlen("/bin/.."), strlen(up + strlen("/bin/..")) + 1);
    char plugin_copy[PATH_MAX], plugin_dir[PATH_MAX + 1];
    snprintf(plugin_copy, sizeof(plugin_copy), "%s", plugin);
    snprintf(plugin_dir, sizeof(plugin_dir), "%s/", dirname(plugin_copy));
    cr_expect(copy_to(rt, plugin) != NULL || copy_to(rt, plugin_dir) != NULL,
              "the plugin is not copied to %s", plugin);

    /* The operator's default worker command (/usr/sbin/sshd -De) reads /etc/ssh/sshd_config. */
    int linked = 0;
    for (int r = 0; r < rt->n_runs; r++)
        linked = linked || strstr(rt->runs[r], "ln -sf sshd_config.mpijob /etc/ssh/sshd_config");
    cr_expect(linked, "/etc/ssh/sshd_config is not the image's config");
    free(script);
    free(df.text);
}

Test(worker_image, ssh_port_agrees)
{
    struct dockerfile df;
    dockerfile_load(&df);
    int port = sshd_port();
    cr_assert_eq(port, 2222, "sshd_config listens on %d", port);
    cr_expect_eq(runtime_stage(&df)->expose, port);
    /* The launcher's ssh client must knock on the same port: worker-image/ssh_config, installed
     * as a drop-in of the client's configuration. */
    const struct copy *client = copy_to(runtime_stage(&df), "/etc/ssh/ssh_config.d/mpijob.conf");
    cr_assert_not_null(client, "the runtime stage installs no ssh client configuration");
    cr_assert_str_eq(client->src[0], "worker-image/ssh_config");
    char *text = read_text("worker-image/ssh_config");
    char want[32];
    snprintf(want, sizeof(want), "\n    Port %d\n", port);
    cr_expect_not_null(strstr(text, want), "worker-image/ssh_config does not set Port %d", port);
    cr_expect_not_null(strstr(text, "StrictHostKeyChecking no"), "pods' host keys cannot be known in advance");
    free(text);
    free(df.text);
}

/* ---- the entrypoint and sshd for real ---------------------------------------------------------- */

static void run_check(const char *what)
{
    char cmd[PATH_MAX + 128];
    char *out = NULL, *err = NULL;
    snprintf(cmd, sizeof(cmd), "cd '%s' && " RUNCMD_TIMEOUT " sh tests/worker/check-worker-image.sh %s", src_dir(), what);
    int code = runcmd(cmd, &out, &err);
    char why[1024];
    snprintf(why, sizeof(why), "%s", err);
    cr_expect(code == 0 || code == 77, "check-worker-image.sh %s failed (%d):\n%s%s", what, code, out,
              err);
    free(out);
    free(err);
    if (code == 77)
        cr_skip_test("%s", why);
}

Test(worker_image, entrypoint_is_posix_sh) { run_check("lint"); }
Test(worker_image, sshd_accepts_config_with_promised_settings) { run_check("config"); }
Test(worker_image, entrypoint_sshd_key_login_only) { run_check("login"); }
Test(worker_image, entrypoint_runs_launcher_command) { run_check("launcher"); }
