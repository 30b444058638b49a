/* The Helm chart, deploy/mpijob-operator.yaml and deploy/Dockerfile are checked by the Python
 * unittest suite tests/deploy/test_deploy.py (helm lint and template, the schema, yamllint, RBAC
 * against manifests/rbac, the Deployment against mpijob-operator --help, the image's libraries);
 * this runs it under make test. It needs build/bin/mpijob-operator and helm in build/tools. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>

Test(deploy, chart_deploy_file_and_dockerfile, .timeout = 300)
{
    const char *root = getenv("MPIJOB_SRC_DIR");
    char cmd[1024];
    snprintf(cmd, sizeof(cmd),
             "cd '%s' && out=$(mktemp /tmp/mpijob-deploy.XXXXXX) || exit 1;"
             " python3 tests/deploy/test_deploy.py > \"$out\" 2>&1; rc=$?;"
             " [ $rc -eq 0 ] || cat \"$out\"; rm -f \"$out\"; exit $rc",
             root ? root : ".");
    int status = system(cmd);
    cr_assert_eq(status, 0, "python3 tests/deploy/test_deploy.py failed (output above)");
}
