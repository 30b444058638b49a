#include "runcmd.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "support/deadline.h"

const char *runcmd_src_dir(void)
{
    const char *d = getenv("MPIJOB_SRC_DIR");
    return d && d[0] ? d : ".";
}

const char *runcmd_worker_bin(void)
{
    static char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/build/bin/mpijob-worker", runcmd_src_dir());
    cr_assert_eq(access(path, X_OK), 0, "%s is not built (make build/bin/mpijob-worker)", path);
    return path;
}

static char *slurp(FILE *f)
{
    fflush(f);
    long n = ftell(f);
    char *text = calloc(1, n > 0 ? (size_t)n + 1 : 1);
    cr_assert_not_null(text);
    rewind(f);
    if (n > 0 && fread(text, 1, (size_t)n, f) != (size_t)n)
        text[0] = '\0';
    return text;
}

int runcmd(const char *cmd, char **out, char **err)
{
    FILE *fo = tmpfile(), *fe = tmpfile();
    cr_assert(fo && fe, "tmpfile");
    char limit[32];
    snprintf(limit, sizeof(limit), "%llu", (unsigned long long)(test_ms(RUNCMD_LIMIT_MS) / 1000));
    cr_assert_eq(setenv("RUNCMD_LIMIT_S", limit, 1), 0);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    cr_assert_geq(pid, 0, "fork");
    if (pid == 0) {
        /* Never the terminal: mpirun forwards stdin, and under `timeout` (another process
         * group) a read from the terminal would stop it. */
        int devnull = open("/dev/null", O_RDONLY);
        if (devnull >= 0)
            dup2(devnull, STDIN_FILENO);
        dup2(fileno(fo), STDOUT_FILENO);
        dup2(fileno(fe), STDERR_FILENO);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    /* The child wrote through its own descriptors: seek to the end to learn the length. */
    fseek(fo, 0, SEEK_END);
    fseek(fe, 0, SEEK_END);
    if (out)
        *out = slurp(fo);
    if (err)
        *err = slurp(fe);
    fclose(fo);
    fclose(fe);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}
