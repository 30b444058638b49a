/* The cluster simulation's own tests (tests/cluster) and the end-to-end scenarios (tests/e2e):
 * Python suites that need root; as another user they skip and say why. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

static const char *root_dir(void)
{
    const char *root = getenv("MPIJOB_SRC_DIR");
    return root && root[0] ? root : ".";
}

/* Runs a command from the repository root; fails the test with its output. */
static void run(const char *what, const char *command)
{
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "cd '%s' && %s 2>&1", root_dir(), command);
    FILE *p = popen(cmd, "r");
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
    /* the last lines say what ran and what was skipped */
    const char *tail = len > 600 ? out + len - 600 : out;
    cr_log_info("%s:\n%s", what, tail);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s failed (status %d):\n%s", what, status, out);
    free(out);
}

Test(cluster, simulation_suites, .timeout = 400)
{
    run("tests/cluster", "python3 -m unittest discover -s tests/cluster -p 'test_*.py'");
}

Test(e2e, scenarios, .timeout = 600)
{
    run("tests/e2e", "python3 tests/e2e/test_e2e.py");
}
