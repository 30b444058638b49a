/* Where a server's Kubernetes version stands against the versions this operator is tested on
 * (controller_server_support): the operator logs it at start and warns below the oldest. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <stdio.h>
#include <string.h>

#include "mpijob/controller.h"

struct support_case {
    int major, minor;
    enum server_support want;
    const char *says; /* in the message */
};

static const struct support_case cases[] = {
    {1, 32, SERVER_TESTED, "supported: Kubernetes 1.32 to 1.36, tested on both"},
    {1, 34, SERVER_TESTED, "supported: Kubernetes 1.32 to 1.36, tested on both"},
    {1, 36, SERVER_TESTED, "supported: Kubernetes 1.32 to 1.36, tested on both"},
    {1, 31, SERVER_OLDER, "Kubernetes 1.31 is older than 1.32, the oldest version this operator is tested on"},
    {1, 20, SERVER_OLDER, "older than 1.32"},
    {0, 99, SERVER_OLDER, "older than 1.32"},
    {1, 37, SERVER_NEWER, "Kubernetes 1.37 is newer than 1.36, the newest version this operator is tested on"},
    {2, 0, SERVER_NEWER, "newer than 1.36"},
    {-1, 36, SERVER_UNKNOWN, "does not read as major.minor"},
    {1, -1, SERVER_UNKNOWN, "does not read as major.minor"},
};

/* The parameters are indexes: Criterion runs each in a new process, where the pointers inside
 * the cases would not be valid. */
ParameterizedTestParameters(compat, server_support)
{
    static int index[sizeof(cases) / sizeof(cases[0])];
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        index[i] = (int)i;
    return cr_make_param_array(int, index, sizeof(index) / sizeof(index[0]));
}

ParameterizedTest(int *i, compat, server_support)
{
    const struct support_case *c = &cases[*i];
    char msg[300];
    enum server_support got = controller_server_support(c->major, c->minor, msg, sizeof(msg));
    cr_expect_eq(got, c->want, "%d.%d: support %d, want %d (%s)", c->major, c->minor, got, c->want, msg);
    cr_expect(strstr(msg, c->says) != NULL, "%d.%d: \"%s\" does not say \"%s\"", c->major, c->minor, msg, c->says);
}
