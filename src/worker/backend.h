/* What the training loop and the bench need from a compute and communication backend.
 *
 * Two implementations share this table:
 *   "mpi"  : CPU. OpenBLAS GEMMs and plain C loops on host memory; allreduce with MPI
 *            (src/worker/backend_mpi.c).
 *   "nccl" : GPU. cuBLAS and small CUDA kernels on a compute stream, ncclAllReduce on a
 *            communication stream (src/worker/nccl/backend_nccl.cu), built by nvcc into
 *            build/lib/libmpijob-worker-nccl.so and loaded with dlopen (src/worker/plugin.c),
 *            so the main binary links MPI only and runs where CUDA is absent.
 *
 * Conventions:
 *   - Buffers are arrays of float in the backend's memory (device memory for nccl); the host
 *     touches them only through upload/download.
 *   - Matrices are row-major. gemm computes C[m x n] = alpha * op(A)[m x k] * op(B)[k x n]
 *     + beta * C, where op(X) is X or its transpose (ta/tb nonzero). Leading dimensions are the
 *     row lengths of the stored (untransposed) matrices.
 *   - Compute operations are ordered: each sees the results of the ones before it (a CUDA stream
 *     on the GPU; plain program order on the CPU). They may return before the work is done.
 *   - Every function returns 0 or a negative errno-style code; ops->error() then says why, in
 *     one line meant for a person.
 *
 * Gradient buckets (the overlap of communication with the backward pass):
 *   bucket_ready(ctx, i, buf, n) is called as soon as the backward pass has written the
 *   gradients of bucket i (buckets are layer-aligned and are made ready from the last layer to
 *   the first). It starts a sum-allreduce of buf[0..n) in place, ordered after the compute work
 *   already submitted, and returns without waiting. The caller goes on computing the earlier
 *   layers. finish() waits until every started bucket is reduced and makes later compute work
 *   (the optimizer step) see the sums; it reports the exposed communication time: how long,
 *   after the last compute work submitted before finish(), the reductions were still running.
 *   With --no-overlap the caller submits all buckets only after the whole backward pass.
 */
#ifndef WORKER_BACKEND_H
#define WORKER_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#define WK_BACKEND_ABI 4
#define WK_NCCL_ID_BYTES 128

struct wk_ctx; /* a backend's own state, opaque to its callers */

struct wk_init {
    int rank;        /* this process's rank in the job, 0..size-1 */
    int size;        /* number of ranks */
    int local_rank;  /* rank among the processes on this host: picks the GPU */
    /* nccl: the unique id made by rank 0 (ops->unique_id) and broadcast over MPI. */
    unsigned char nccl_id[WK_NCCL_ID_BYTES];
    /* mpi: the communicator to use, an MPI_Comm passed by address (the plugin never sees MPI). */
    const void *mpi_comm;
    /* mpi: the threads of this rank's compute (OpenBLAS); 0 means 1. nccl: unused. */
    int threads;
};

struct wk_ops {
    int abi;           /* WK_BACKEND_ABI */
    const char *name;  /* "mpi" or "nccl" */

    /* Before init, no context needed. available: 1 when this backend can run here, else 0 and
     * why[] says what is missing ("no CUDA device: cudaGetDeviceCount: no CUDA-capable device
     * is detected"). unique_id: rank 0 makes the communicator id (nccl; NULL for mpi). */
    int (*available)(char *why, size_t why_len);
    int (*unique_id)(unsigned char id[WK_NCCL_ID_BYTES], char *why, size_t why_len);

    /* init: this rank's own set-up (device, streams, libraries); fails with why[] set, and on
     * success *out is the context, to be given to fini. connect: joins the other ranks (NCCL's
     * communicator), a collective that waits for every rank, so it is called only once every
     * rank's init succeeded: a rank whose init failed would leave the others waiting in it for
     * ever. NULL when init needs no second step (mpi). */
    int (*init)(const struct wk_init *in, struct wk_ctx **out, char *why, size_t why_len);
    int (*connect)(struct wk_ctx *ctx, char *why, size_t why_len);
    void (*fini)(struct wk_ctx *ctx);
    const char *(*error)(struct wk_ctx *ctx);
    /* A short description of the device: "NVIDIA H100 80GB HBM3 (device 0)" or "cpu". */
    const char *(*device)(struct wk_ctx *ctx);

    /* Memory. alloc returns n zeroed floats or NULL (see error). */
    float *(*alloc)(struct wk_ctx *ctx, size_t n);
    void (*release)(struct wk_ctx *ctx, float *p);
    int (*upload)(struct wk_ctx *ctx, float *dst, const float *src, size_t n);
    /* Waits for the compute work before it, then copies. */
    int (*download)(struct wk_ctx *ctx, float *dst, const float *src, size_t n);

    /* Compute, ordered. */
    int (*gemm)(struct wk_ctx *ctx, int ta, int tb, int m, int n, int k, float alpha,
                const float *a, int lda, const float *b, int ldb, float beta, float *c, int ldc);
    /* y[r][c] += bias[c] for every row, then y = max(y, 0) when relu. */
    int (*bias_act)(struct wk_ctx *ctx, float *y, const float *bias, int rows, int cols, int relu);
    /* dy[i] = 0 where y[i] <= 0 (y is the ReLU output). */
    int (*relu_backward)(struct wk_ctx *ctx, float *dy, const float *y, size_t n);
    /* db[c] = sum over rows of dy[r][c] (overwrites db). */
    int (*bias_grad)(struct wk_ctx *ctx, float *db, const float *dy, int rows, int cols);
    /* Mean squared error pieces: dy[i] = scale * (y[i] - t[i]);
     * *loss_sum (one float in backend memory) += sum of (y[i] - t[i])^2. */
    int (*mse)(struct wk_ctx *ctx, const float *y, const float *t, float *dy, size_t n,
               float scale, float *loss_sum);
    /* w[i] -= lr * g[i] */
    int (*sgd)(struct wk_ctx *ctx, float *w, const float *g, size_t n, float lr);
    /* x[i] = value, for bench buffers and resetting accumulators. */
    int (*fill)(struct wk_ctx *ctx, float *x, size_t n, float value);

    /* Communication (sum over all ranks, in place). */
    int (*bucket_ready)(struct wk_ctx *ctx, int bucket, float *buf, size_t n);
    int (*finish)(struct wk_ctx *ctx, double *exposed_ms);
    /* Blocking allreduce: returns when buf holds the sum on this rank. For bench and for the
     * small reductions of the training loop (loss). */
    int (*allreduce)(struct wk_ctx *ctx, float *buf, size_t n);
    /* Waits for all submitted work (compute and communication). */
    int (*sync)(struct wk_ctx *ctx);

    /* For the collective watchdog (worker/watchdog.h), called from its own thread while the
     * training thread may be inside any op above; both are safe to call at any time.
     * pending_bucket: the lowest bucket index whose reduction was started by bucket_ready and
     * has not completed, or -1 when none is outstanding (or the backend cannot tell).
     * abort: asks the backend to abort its communicator, as PyTorch's watchdog does with
     * ncclCommAbort, so that a wait inside finish, allreduce or sync returns an error instead of
     * spinning on a peer that is gone. The abort itself is done by the thread waiting in the
     * backend (a communicator is never freed under a thread that uses it). Returns 1 once it was
     * done within wait_ms, 0 when no thread was waiting in the backend by then, or when there is
     * nothing to abort (mpi: MPI_Abort ends the job's collectives). */
    int (*pending_bucket)(struct wk_ctx *ctx);
    int (*abort)(struct wk_ctx *ctx, int wait_ms);
};

/* The CPU backend, always built in. */
extern const struct wk_ops wk_backend_mpi;

/* The symbol the GPU plugin exports: returns its table, or NULL when abi differs. */
typedef const struct wk_ops *(*wk_plugin_entry_fn)(int abi);
#define WK_PLUGIN_ENTRY "mpijob_worker_backend"

#endif
