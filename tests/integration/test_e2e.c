/* The cluster simulation's own tests (tests/cluster), the images with the containers the
 * simulated kubelet runs from them (tests/images) and the end-to-end scenarios (tests/e2e):
 * Python suites that need root; as another user, or without podman and runc, they skip and say
 * why. Their own waits are deadlines on conditions (tests/support/deadline.py); the timeouts here
 * are backstops, about three times what each suite takes on a busy 2-core machine, and scale with
 * MPIJOB_TEST_TIME_SCALE like every other. */
#include <criterion/criterion.h>
#include <stdio.h>

#include "support/command.h"

Test(cluster, simulation_suites, .timeout = 600)
{
    test_run_checked("tests/cluster", "python3 tests/support/pyresults.py discover -s tests/cluster -p 'test_*.py'");
}

Test(e2e, scenarios, .timeout = 1200)
{
    test_run_checked("tests/e2e", "python3 tests/support/pyresults.py discover -s tests/e2e -p test_e2e.py");
}

/* kube-scheduler's gang scheduling on real nodes of 1.36 (tests/e2e/test_gang.py); skips, saying
 * why, elsewhere. */
Test(e2e, gang_on_real_nodes, .timeout = 900)
{
    test_run_checked("tests/e2e", "python3 tests/support/pyresults.py discover -s tests/e2e -p test_gang.py");
}

/* Faults under a running job (tests/e2e/test_faults.py), one class and one cluster each; real
 * nodes only, skipping with the reason elsewhere. */
static void run_fault_class(const char *cls)
{
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "python3 tests/support/pyresults.py discover -s tests/e2e -p test_faults.py -k %s", cls);
    test_run_checked("tests/e2e", cmd);
}

/* A node's kubelet and containerd restarted. */
Test(e2e, node_daemons_restarted, .timeout = 900) { run_fault_class("NodeDaemonsRestarted"); }
/* The whole control plane restarted, the operator installed by its chart. */
Test(e2e, control_plane_restarted, .timeout = 1200) { run_fault_class("ControlPlaneRestarted"); }
/* The leading operator's node lost, the chart's replicas on two nodes. */
Test(e2e, leader_node_lost, .timeout = 1200) { run_fault_class("LeaderNodeLost"); }
/* A worker cut off by the network, then healed. */
Test(e2e, network_partition, .timeout = 1200) { run_fault_class("NetworkPartition"); }

/* Builds the images first when their sources changed (about 80 s; nothing when they did not). */
Test(images, built_and_run_with_runc, .timeout = 1200)
{
    test_run_checked("tests/images", "python3 tests/support/pyresults.py discover -s tests/images -p 'test_*.py'");
}
