/* The CRD, its generator, the schema validator the double uses, and the example manifests are
 * checked by Python unittest suites in tests/apiserver; this runs them under make test. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>

Test(manifests, crd_schema_and_examples, .timeout = 120)
{
    const char *root = getenv("MPIJOB_SRC_DIR");
    char cmd[1024];
    snprintf(cmd, sizeof(cmd),
             "cd '%s/tests/apiserver' && python3 ../support/pyresults.py test_schema test_manifests > /tmp/mpijob-manifests.$$ 2>&1;"
             " rc=$?; [ $rc -eq 0 ] || cat /tmp/mpijob-manifests.$$; rm -f /tmp/mpijob-manifests.$$; exit $rc",
             root ? root : ".");
    int status = system(cmd);
    cr_assert_eq(status, 0, "python3 -m unittest test_schema test_manifests failed (output above)");
}
