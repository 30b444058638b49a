#include <stdio.h>

#include "worker/commands.h"

int wk_bench_main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "mpijob-worker bench: not built yet\n");
    return 1;
}
