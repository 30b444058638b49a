#include "support/command.h"

#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

const char *test_src_dir(void)
{
    const char *root = getenv("MPIJOB_SRC_DIR");
    return root && root[0] ? root : ".";
}

int test_find_python(char *out, size_t len)
{
    const char *path = getenv("PATH");
    if (!path || !*path)
        path = "/usr/local/bin:/usr/bin:/bin";
    while (*path) {
        const char *end = strchr(path, ':');
        size_t n = end ? (size_t)(end - path) : strlen(path);
        if (n > 0 && n + sizeof("/python3") < len) {
            memcpy(out, path, n);
            memcpy(out + n, "/python3", sizeof("/python3"));
            if (access(out, X_OK) == 0)
                return 0;
        }
        path += n;
        if (*path == ':')
            path++;
    }
    return -1;
}

void test_close_inherited_fds(void)
{
#ifdef SYS_close_range
    if (syscall(SYS_close_range, 3U, ~0U, 0U) == 0)
        return;
#endif
    long max = sysconf(_SC_OPEN_MAX);
    if (max < 0 || max > 65536)
        max = 65536;
    for (int fd = 3; fd < max; fd++)
        close(fd);
}

void test_run_checked(const char *what, const char *command)
{
    size_t cmd_len = strlen(test_src_dir()) + strlen(command) + 32;
    char *cmd = malloc(cmd_len);
    cr_assert_not_null(cmd);
    snprintf(cmd, cmd_len, "cd '%s' && %s 2>&1", test_src_dir(), command);
    FILE *p = popen(cmd, "r");
    free(cmd);
    cr_assert_not_null(p, "popen: %s", strerror(errno));
    size_t cap = 1 << 16, len = 0, n;
    char *out = malloc(cap);
    cr_assert_not_null(out);
    while ((n = fread(out + len, 1, cap - len - 1, p)) > 0) {
        len += n;
        if (cap - len - 1 == 0) {
            char *bigger = realloc(out, cap * 2);
            cr_assert_not_null(bigger);
            out = bigger;
            cap *= 2;
        }
    }
    out[len] = 0;
    int status = pclose(p);
    bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (ok)
        cr_log_info("%s:\n%s", what, len > 600 ? out + len - 600 : out);
    else
        cr_log_error("%s failed (status %d):\n%s", what, status, out);
    free(out);
    cr_assert(ok, "%s failed (status %d); its output is above", what, status);
}
