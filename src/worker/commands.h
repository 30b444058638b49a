/* The subcommands of mpijob-worker. Each parses its own flags (unknown flag or bad value:
 * usage on stderr, exit status 2), starts its own MPI session and returns the process's exit
 * status. argv[0] is the subcommand's name. */
#ifndef WORKER_COMMANDS_H
#define WORKER_COMMANDS_H

int wk_train_main(int argc, char **argv);  /* src/worker/train.c */
int wk_bench_main(int argc, char **argv);  /* src/worker/bench.c */
int wk_probe_main(int argc, char **argv);  /* src/worker/probe.c */

#endif
