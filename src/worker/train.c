#include <stdio.h>

#include "worker/commands.h"

int wk_train_main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "mpijob-worker train: not built yet\n");
    return 1;
}
