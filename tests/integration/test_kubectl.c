/* kubectl against the API-server double: apply, get with the CRD's printer columns, describe,
 * delete and malformed manifests (tests/apiserver/test_kubectl.py does the work). */
#include <criterion/criterion.h>
#include <stdlib.h>

#include "support/command.h"

Test(kubectl, against_the_double, .timeout = 120)
{
    if (system("command -v kubectl >/dev/null 2>&1") != 0)
        cr_skip_test("kubectl is not installed");
    test_run_checked("tests/apiserver/test_kubectl.py", "python3 tests/support/pyresults.py discover -s tests/apiserver -p test_kubectl.py");
}
