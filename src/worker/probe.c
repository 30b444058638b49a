#include <stdio.h>

#include "worker/commands.h"

int wk_probe_main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "mpijob-worker probe: not built yet\n");
    return 1;
}
