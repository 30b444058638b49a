/* Loads the GPU backend (build/lib/libmpijob-worker-nccl.so) with dlopen.
 *
 * Where it looks, first hit wins: $MPIJOB_WORKER_PLUGIN (a file path); the directory of the
 * running executable, then ../lib/ relative to it; the dynamic linker's own search path.
 * The library links libcudart, libcublas and libnccl; when one of them is missing dlopen fails
 * and why[] carries dlerror()'s text, so the fall-back to MPI is explained, never silent. */
#ifndef WORKER_PLUGIN_H
#define WORKER_PLUGIN_H

#include <stddef.h>

#include "worker/backend.h"

#define WK_PLUGIN_FILE "libmpijob-worker-nccl.so"

/* Returns the plugin's table, or NULL with why[] saying what failed (not found, dlopen error,
 * missing entry symbol, ABI mismatch). The library stays loaded for the life of the process. */
const struct wk_ops *wk_plugin_load(char *why, size_t why_len);

#endif
