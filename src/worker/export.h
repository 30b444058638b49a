/* `mpijob-worker train --export DIR`: the training problem as files, so that another framework
 * can train exactly what train trains (tests/bench/bench_ddp.py runs PyTorch on them).
 *
 * DIR (created when missing) gets, every array raw little-endian float32, row-major:
 *   problem.json  the shape, the flags that define the run, the files and each layer's offsets
 *   params.f32    the initial parameters in train's layout: per layer W (out x in), then b
 *   x.f32, y.f32  the inputs and targets of every distinct global batch, window after window:
 *                 step s uses window s mod windows; rank r of P takes its rows
 *                 [r*B/P, (r+1)*B/P), B the global batch
 * Nothing here depends on the number of ranks; no MPI is started. */
#ifndef WORKER_EXPORT_H
#define WORKER_EXPORT_H

#include <stddef.h>

#include "worker/train_args.h"

/* Writes the problem of these flags to a->export_dir. 0, or a negative errno with why[] set. The
 * caller has checked the sizes (wk_train_args_check_size with one rank). */
int wk_export_problem(const struct wk_train_args *a, char *why, size_t why_len);

#endif
