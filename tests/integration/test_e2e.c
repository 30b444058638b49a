/* The cluster simulation's own tests (tests/cluster) and the end-to-end scenarios (tests/e2e):
 * Python suites that need root; as another user they skip and say why. */
#include <criterion/criterion.h>

#include "support/command.h"

Test(cluster, simulation_suites, .timeout = 400)
{
    test_run_checked("tests/cluster", "python3 tests/support/pyresults.py discover -s tests/cluster -p 'test_*.py'");
}

Test(e2e, scenarios, .timeout = 600)
{
    test_run_checked("tests/e2e", "python3 tests/support/pyresults.py discover -s tests/e2e -p test_e2e.py");
}
