/* mpijob-worker: the worker runtime started by mpirun on every slot (WORKER.md).
 *   train   data-parallel SGD on an MLP, NCCL (GPU) or MPI (CPU) allreduce
 *   bench   allreduce bandwidth sweep with a correctness check
 *   probe   RDMA devices, ports and GIDs, and the NCCL settings they suggest */
#include <stdio.h>
#include <string.h>

#include "worker/commands.h"
#include "worker/diag.h"

static void usage(FILE *out)
{
    fprintf(out,
            "Usage: mpijob-worker COMMAND [options]\n"
            "\n"
            "The MPIJob worker runtime, started by mpirun on every worker slot.\n"
            "\n"
            "Commands:\n"
            "  train   data-parallel training of an MLP on synthetic data; gradients averaged\n"
            "          with NCCL allreduce on GPUs, MPI allreduce on CPUs\n"
            "  bench   allreduce bandwidth sweep over message sizes, with a correctness check\n"
            "  probe   list RDMA devices and suggest NCCL_IB_HCA / NCCL_IB_GID_INDEX\n"
            "\n"
            "  mpijob-worker COMMAND --help   the command's flags and their defaults\n");
}

int main(int argc, char **argv)
{
    /* Diagnostics are lines of text as worker/diag.h writes them, without stamp or level. */
    log_set_format(LOG_PLAIN);
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "help") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(cmd, "train") == 0)
        return wk_train_main(argc - 1, argv + 1);
    if (strcmp(cmd, "bench") == 0)
        return wk_bench_main(argc - 1, argv + 1);
    if (strcmp(cmd, "probe") == 0)
        return wk_probe_main(argc - 1, argv + 1);
    wk_usage_error(NULL, usage, "unknown command '%s'", cmd);
    return 2;
}
