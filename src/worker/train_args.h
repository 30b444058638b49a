/* The flags of `mpijob-worker train`: one table of names, defaults and help (printed by
 * --help), the parser, and the size check that refuses absurd models before anything is
 * allocated. No MPI here, so all of it runs and is tested in a plain process. */
#ifndef WORKER_TRAIN_ARGS_H
#define WORKER_TRAIN_ARGS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Memory one rank may use for the model, its gradients, activations and its data shard. */
#define WK_TRAIN_MAX_BYTES (16ull << 30)
#define WK_TRAIN_MAX_LAYERS 1024
#define WK_TRAIN_MAX_THREADS 1024

struct wk_train_args {
    int backend;             /* enum wk_backend_choice */
    int layers, hidden, input, output;
    int batch;               /* global, split over the ranks */
    long long steps;
    double lr;
    double bucket_mb;        /* MiB */
    int overlap;             /* 0 with --no-overlap */
    long long log_every;     /* 0: first and last step only */
    long long check_every;   /* 0: start and end only */
    long long samples;
    uint64_t seed;
    int require_rdma;        /* --require rdma */
    int threads;             /* OpenBLAS threads per rank (mpi backend) */
    const char *export_dir;  /* --export: write the problem there and stop; NULL: train */
    double collective_timeout; /* seconds; 0: no watchdog (worker/watchdog.h) */
};

/* Fills a with the defaults, then the flags in argv[1..argc-1] (argv[0] is the command name).
 * --collective-timeout, when not given, comes from $MPIJOB_WORKER_COLLECTIVE_TIMEOUT when that
 * is set. Returns 0, 1 when --help was asked, or -EINVAL with err[] naming the flag (or the
 * variable) and the problem. */
int wk_train_args_parse(struct wk_train_args *a, int argc, char **argv, char *err,
                        size_t err_len);

/* The flag table with defaults. */
void wk_train_usage(FILE *out);

/* Memory a rank needs for these flags with `ranks` ranks (model, gradients, activations, data
 * shard on the backend, plus the host copies made while starting). 0 when it fits in
 * WK_TRAIN_MAX_BYTES; else -E2BIG (or -EINVAL when the batch does not split over the ranks)
 * with msg[] saying why and what the cap is. ranks = 0 checks only what does not depend on the
 * number of ranks (parameters and gradients), for use before MPI starts. */
int wk_train_args_check_size(const struct wk_train_args *a, int ranks, uint64_t *bytes,
                             char *msg, size_t msg_len);

#endif
