/* The cluster simulation's own tests (tests/cluster), the images with the containers the
 * simulated kubelet runs from them (tests/images) and the end-to-end scenarios (tests/e2e):
 * Python suites that need root; as another user, or without podman and runc, they skip and say
 * why. Their own waits are deadlines on conditions (tests/support/deadline.py); the timeouts here
 * are backstops, about three times what each suite takes on a busy 2-core machine, and scale with
 * MPIJOB_TEST_TIME_SCALE like every other. */
#include <criterion/criterion.h>

#include "support/command.h"

Test(cluster, simulation_suites, .timeout = 600)
{
    test_run_checked("tests/cluster", "python3 tests/support/pyresults.py discover -s tests/cluster -p 'test_*.py'");
}

Test(e2e, scenarios, .timeout = 1200)
{
    test_run_checked("tests/e2e", "python3 tests/support/pyresults.py discover -s tests/e2e -p test_e2e.py");
}

/* Builds the images first when their sources changed (about 80 s; nothing when they did not). */
Test(images, built_and_run_with_runc, .timeout = 1200)
{
    test_run_checked("tests/images", "python3 tests/support/pyresults.py discover -s tests/images -p 'test_*.py'");
}
