/* mpijob-worker: the worker runtime started by mpirun on every slot (train | bench | probe).
 * The runtime itself is described in WORKER.md and is not part of this build yet. */
#include <stdio.h>
#include <string.h>

static void usage(FILE *out)
{
    fprintf(out,
            "Usage: mpijob-worker train|bench|probe [options]\n"
            "\n"
            "The MPIJob worker runtime: data-parallel training with NCCL (GPU) or MPI (CPU)\n"
            "allreduce, an allreduce bandwidth benchmark, and an RDMA device probe.\n"
            "\n"
            "This build contains none of the subcommands yet: each exits with status 1.\n"
            "\n"
            "  -h, --help   this help\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(argv[1], "train") == 0 || strcmp(argv[1], "bench") == 0 || strcmp(argv[1], "probe") == 0) {
        fprintf(stderr, "mpijob-worker: '%s' is not available in this build\n", argv[1]);
        return 1;
    }
    fprintf(stderr, "mpijob-worker: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
