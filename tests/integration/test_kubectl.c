/* kubectl against the API-server double: apply, get with the CRD's printer columns, describe,
 * delete and malformed manifests (tests/apiserver/test_kubectl.py does the work). */
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

/* Runs a Python check from the repository root; fails the test with its output. */
static void run_python(const char *script)
{
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "cd '%s' && python3 %s 2>&1", root_dir(), script);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p, "popen: %s", strerror(errno));
    size_t cap = 1 << 16, len = 0;
    char *out = malloc(cap);
    cr_assert_not_null(out);
    size_t n;
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
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s failed (status %d):\n%s", script, status, out);
    free(out);
}

Test(kubectl, against_the_double, .timeout = 120)
{
    if (system("command -v kubectl >/dev/null 2>&1") != 0)
        cr_skip_test("kubectl is not installed");
    run_python("tests/apiserver/test_kubectl.py");
}
