/* The GPU backend: cuBLAS and small CUDA kernels for compute, NCCL for the gradient allreduce.
 * Built by nvcc into libmpijob-worker-nccl.so and loaded with dlopen (worker/plugin.c); the one
 * exported symbol is mpijob_worker_backend (WK_PLUGIN_ENTRY), everything else is internal.
 *
 * Streams and events
 *   compute   every compute op (cuBLAS, the kernels below, uploads, downloads, alloc's memset)
 *             runs here in submission order, which is the ordering backend.h promises.
 *   comm      the bucket allreduces. Both streams are non-blocking, so neither synchronises
 *             with the legacy default stream or with the other except through events.
 *
 *   bucket_ready(i)  ev_ready[i] is recorded on compute after the gradients of bucket i were
 *                    submitted; comm waits for it and runs ncclAllReduce in place. The host
 *                    returns at once and goes on submitting the backward pass of earlier layers,
 *                    which the GPU runs on compute while comm reduces.
 *   finish()         ev_compute_done is recorded on compute (the end of the backward pass) and
 *                    ev_comm_done on comm (the end of the last reduction); compute waits for
 *                    ev_comm_done, so the optimizer step sees the sums. The host waits for both
 *                    events; exposed communication = max(0, ev_comm_done - ev_compute_done).
 *                    Waits poll the event and the communicator's asynchronous error, so a
 *                    reduction that fails (a peer gone, a network error) returns an error
 *                    instead of blocking forever.
 *   allreduce()      a blocking reduction on compute, after whatever comm still has queued (two
 *                    operations of one communicator never run at the same time).
 *
 *   ev_done[i]       recorded on comm after bucket i's ncclAllReduce: pending_bucket() (the
 *                    collective watchdog's question, asked from its own thread) is the first
 *                    bucket whose event has not completed.
 *
 * The device is made current by init on the calling thread; every op is called from that thread,
 * but for pending_bucket and abort, which the collective watchdog calls from its own. abort only
 * raises a flag: the thread waiting in wait_for sees it, aborts the communicator itself (as
 * PyTorch's watchdog does, ncclCommAbort ends the communicator's kernels) and returns an error, so
 * the communicator is never freed under a thread using it.
 * Every CUDA, cuBLAS and NCCL result is checked; a failure becomes one line in ctx->err. */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <time.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <atomic>
#include <new>
#include <type_traits>

extern "C" {
#include "worker/backend.h"
}

static_assert(sizeof(ncclUniqueId) == WK_NCCL_ID_BYTES, "NCCL unique id size differs from the ABI");

#define ERR_LEN 384
/* A bucket index above this is a caller bug, refused before growing the event array. */
#define MAX_BUCKETS 65536

struct wk_ctx {
    int device;
    cudaStream_t compute;
    cudaStream_t comm_stream;
    cublasHandle_t blas;
    ncclComm_t comm;
    /* what connect() needs: the id rank 0 made, this rank and the number of ranks */
    ncclUniqueId uid;
    int rank;
    int size;
    /* ev_ready[0..n_ready): ordering only (no timing), created on first use of each index. */
    cudaEvent_t *ev_ready;
    int n_ready;
    /* ev_done[0..n_done): bucket i's reduction done (ordering only). The watchdog's thread reads
     * them, so the array grows under done_lock. */
    cudaEvent_t *ev_done;
    int n_done;
    pthread_mutex_t done_lock;
    /* The watchdog's request (abort_requested) and the waiting thread's answer (aborted). */
    std::atomic<int> abort_requested;
    std::atomic<int> aborted;
    cudaEvent_t ev_compute_done; /* timed */
    cudaEvent_t ev_comm_done;    /* timed */
    cudaEvent_t ev_order;        /* ordering only: compute after comm, for allreduce() */
    int sms;                     /* multiprocessors: how many blocks fill the device */
    /* bias_grad's per-chunk column sums, grown on demand (partial_cap floats). */
    float *partial;
    size_t partial_cap;
    char name[288]; /* device name (up to 256) and index */
    char err[ERR_LEN];
};

namespace {

constexpr int kThreads = 256;    /* block size of the elementwise kernels; a power of two */
constexpr int kMaxBlocks = 4096; /* grid-stride loops cover the rest */
constexpr int kColTile = 32;     /* bias_grad: columns per block (one warp across a row) */
constexpr int kRowLanes = 16;    /* bias_grad: rows summed in parallel per block; a power of two */
constexpr int kBlocksPerSm = 4;  /* bias_grad: row chunks are sized to give about this many */
constexpr int kMaxChunks = 1024; /* bias_grad: at most this many row chunks */

__attribute__((format(printf, 3, 4))) void set_err(char *buf, size_t len, const char *fmt, ...)
{
    if (buf == NULL || len == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, len, fmt, ap);
    va_end(ap);
}

int cuda_fail(wk_ctx *ctx, const char *op, const char *call, cudaError_t e)
{
    /* Clears a non-sticky error so the next call does not report it again. */
    (void)cudaGetLastError();
    set_err(ctx->err, sizeof(ctx->err), "%s: %s: %s (%s)", op, call, cudaGetErrorString(e),
            cudaGetErrorName(e));
    return e == cudaErrorMemoryAllocation ? -ENOMEM : -EIO;
}

int blas_fail(wk_ctx *ctx, const char *op, const char *call, cublasStatus_t s)
{
    set_err(ctx->err, sizeof(ctx->err), "%s: %s: %s (%s)", op, call, cublasGetStatusName(s),
            cublasGetStatusString(s));
    if (s == CUBLAS_STATUS_ALLOC_FAILED)
        return -ENOMEM;
    if (s == CUBLAS_STATUS_INVALID_VALUE)
        return -EINVAL;
    return -EIO;
}

int nccl_fail(wk_ctx *ctx, const char *op, const char *call, ncclResult_t r)
{
    const char *last = ncclGetLastError(ctx->comm);
    set_err(ctx->err, sizeof(ctx->err), "%s: %s: %s%s%s", op, call, ncclGetErrorString(r),
            last != NULL && last[0] != '\0' ? ": " : "", last != NULL ? last : "");
    return r == ncclInvalidArgument || r == ncclInvalidUsage ? -EINVAL : -EIO;
}

int invalid(wk_ctx *ctx, const char *op, const char *what)
{
    set_err(ctx->err, sizeof(ctx->err), "%s: %s", op, what);
    return -EINVAL;
}

/* Each macro returns from the calling op on failure, with ctx->err set. */
#define CUDA_TRY(ctx, op, call, expr)                                                              \
    do {                                                                                           \
        cudaError_t e_ = (expr);                                                                   \
        if (e_ != cudaSuccess)                                                                     \
            return cuda_fail((ctx), (op), (call), e_);                                             \
    } while (0)
#define BLAS_TRY(ctx, op, call, expr)                                                              \
    do {                                                                                           \
        cublasStatus_t s_ = (expr);                                                                \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                                           \
            return blas_fail((ctx), (op), (call), s_);                                             \
    } while (0)
#define NCCL_TRY(ctx, op, call, expr)                                                              \
    do {                                                                                           \
        ncclResult_t r_ = (expr);                                                                  \
        if (r_ != ncclSuccess)                                                                     \
            return nccl_fail((ctx), (op), (call), r_);                                             \
    } while (0)
/* A kernel launch reports a bad configuration at once and a fault later, at a sync. */
#define LAUNCH_CHECK(ctx, op) CUDA_TRY(ctx, op, "kernel launch", cudaGetLastError())

/* Waits until an event (or, when ev is NULL, everything on a stream) is done. Polls instead of
 * blocking in CUDA so that a failed reduction (a peer gone, a network error: NCCL reports it as
 * the communicator's asynchronous error) ends the wait with that error instead of hanging. */
int wait_for(wk_ctx *ctx, const char *op, cudaStream_t stream, cudaEvent_t ev)
{
    for (;;) {
        cudaError_t e = ev != NULL ? cudaEventQuery(ev) : cudaStreamQuery(stream);
        if (e == cudaSuccess)
            return 0;
        if (e != cudaErrorNotReady)
            return cuda_fail(ctx, op, ev != NULL ? "cudaEventQuery" : "cudaStreamQuery", e);
        if (ctx->abort_requested.load()) {
            if (ctx->comm != NULL)
                (void)ncclCommAbort(ctx->comm);
            ctx->comm = NULL;
            ctx->aborted.store(1);
            set_err(ctx->err, sizeof(ctx->err),
                    "%s: the communicator was aborted by the collective watchdog", op);
            return -ETIMEDOUT;
        }
        if (ctx->comm != NULL) {
            ncclResult_t async = ncclSuccess;
            ncclResult_t r = ncclCommGetAsyncError(ctx->comm, &async);
            if (r != ncclSuccess)
                return nccl_fail(ctx, op, "ncclCommGetAsyncError", r);
            if (async != ncclSuccess && async != ncclInProgress)
                return nccl_fail(ctx, op, "communicator error", async);
        }
        sched_yield();
    }
}

unsigned grid_for(size_t n)
{
    size_t blocks = (n + kThreads - 1) / kThreads;
    return (unsigned)(blocks < (size_t)kMaxBlocks ? blocks : (size_t)kMaxBlocks);
}

/* ---- kernels ------------------------------------------------------------------------------ */

/* The column of element i is tracked as i advances by the grid's stride: one 64-bit remainder
 * per thread instead of one per element. */
__global__ void bias_act_kernel(float *y, const float *bias, size_t total, int cols, int relu)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    unsigned c = (unsigned)(i % (size_t)cols), step = (unsigned)(stride % (size_t)cols);
    for (; i < total; i += stride) {
        float v = y[i] + bias[c];
        y[i] = relu && v < 0.0f ? 0.0f : v;
        c += step;
        if (c >= (unsigned)cols)
            c -= (unsigned)cols;
    }
}

__global__ void relu_backward_kernel(float *dy, const float *y, size_t n)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        if (y[i] <= 0.0f)
            dy[i] = 0.0f;
}

/* Column sums of a row-major [rows x cols] matrix, in two passes so that a tall matrix with few
 * columns (a large batch, a narrow layer) still spreads over the whole device. Pass one: block
 * (x, y) owns kColTile adjacent columns of the rows in chunk y; each of its kRowLanes thread rows
 * sums every kRowLanes-th row of the chunk (a warp reads one row's columns side by side), the
 * lanes are added in shared memory, and the chunk's sums go to out[y * cols + c]. Pass two adds
 * the chunks of each column in chunk order. No atomics: the same bits on every run. */
__global__ void bias_grad_kernel(float *out, const float *dy, int rows, int cols, int chunk_rows)
{
    __shared__ float part[kRowLanes][kColTile + 1];
    int c = blockIdx.x * kColTile + threadIdx.x;
    int r0 = blockIdx.y * chunk_rows;
    int r1 = rows - r0 < chunk_rows ? rows : r0 + chunk_rows;
    float s = 0.0f;
    if (c < cols)
        for (int r = r0 + (int)threadIdx.y; r < r1; r += kRowLanes)
            s += dy[(size_t)r * (size_t)cols + (size_t)c];
    part[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    for (int step = kRowLanes / 2; step > 0; step /= 2) {
        if ((int)threadIdx.y < step)
            part[threadIdx.y][threadIdx.x] += part[threadIdx.y + step][threadIdx.x];
        __syncthreads();
    }
    if (threadIdx.y == 0 && c < cols)
        out[(size_t)blockIdx.y * (size_t)cols + (size_t)c] = part[0][threadIdx.x];
}

__global__ void chunk_sum_kernel(float *db, const float *partial, int chunks, int cols)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= cols)
        return;
    float s = 0.0f;
    for (int k = 0; k < chunks; k++)
        s += partial[(size_t)k * (size_t)cols + (size_t)c];
    db[c] = s;
}

/* dy = scale * (y - t); each block adds its sum of squared differences to *loss_sum once. */
__global__ void mse_kernel(const float *y, const float *t, float *dy, size_t n, float scale,
                           float *loss_sum)
{
    __shared__ float part[kThreads];
    float s = 0.0f;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float d = y[i] - t[i];
        dy[i] = scale * d;
        s += d * d;
    }
    part[threadIdx.x] = s;
    __syncthreads();
    for (int step = kThreads / 2; step > 0; step /= 2) {
        if ((int)threadIdx.x < step)
            part[threadIdx.x] += part[threadIdx.x + step];
        __syncthreads();
    }
    if (threadIdx.x == 0)
        atomicAdd(loss_sum, part[0]);
}

__global__ void sgd_kernel(float *w, const float *g, size_t n, float lr)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        w[i] -= lr * g[i];
}

__global__ void fill_kernel(float *x, size_t n, float value)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        x[i] = value;
}

/* ---- before init ---------------------------------------------------------------------------- */

int available(char *why, size_t why_len)
{
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        set_err(why, why_len, "no CUDA device: cudaGetDeviceCount: %s", cudaGetErrorString(e));
        return 0;
    }
    if (count <= 0) {
        set_err(why, why_len, "no CUDA device: cudaGetDeviceCount found 0 devices");
        return 0;
    }
    return 1;
}

int unique_id(unsigned char id[WK_NCCL_ID_BYTES], char *why, size_t why_len)
{
    ncclUniqueId uid;
    ncclResult_t r = ncclGetUniqueId(&uid);
    if (r != ncclSuccess) {
        const char *last = ncclGetLastError(NULL);
        set_err(why, why_len, "ncclGetUniqueId: %s%s%s", ncclGetErrorString(r),
                last != NULL && last[0] != '\0' ? ": " : "", last != NULL ? last : "");
        return -EIO;
    }
    memcpy(id, &uid, sizeof(uid));
    return 0;
}

/* ---- lifetime ------------------------------------------------------------------------------- */

void fini(wk_ctx *ctx)
{
    if (ctx == NULL)
        return;
    /* Teardown is best effort: a failure here has nobody left to report to. A communicator
     * in error is aborted first, which also ends its kernels, so the waits below return. */
    ncclResult_t async = ncclSuccess;
    if (ctx->comm != NULL &&
        (ncclCommGetAsyncError(ctx->comm, &async) != ncclSuccess || async != ncclSuccess)) {
        (void)ncclCommAbort(ctx->comm);
        ctx->comm = NULL;
    }
    if (ctx->compute != NULL)
        (void)cudaStreamSynchronize(ctx->compute);
    if (ctx->comm_stream != NULL)
        (void)cudaStreamSynchronize(ctx->comm_stream);
    if (ctx->comm != NULL) {
        if (ncclCommFinalize(ctx->comm) == ncclSuccess)
            (void)ncclCommDestroy(ctx->comm);
        else
            (void)ncclCommAbort(ctx->comm);
    }
    if (ctx->blas != NULL)
        (void)cublasDestroy(ctx->blas);
    if (ctx->partial != NULL)
        (void)cudaFree(ctx->partial);
    for (int i = 0; i < ctx->n_ready; i++)
        (void)cudaEventDestroy(ctx->ev_ready[i]);
    free(ctx->ev_ready);
    for (int i = 0; i < ctx->n_done; i++)
        (void)cudaEventDestroy(ctx->ev_done[i]);
    free(ctx->ev_done);
    pthread_mutex_destroy(&ctx->done_lock);
    if (ctx->ev_compute_done != NULL)
        (void)cudaEventDestroy(ctx->ev_compute_done);
    if (ctx->ev_comm_done != NULL)
        (void)cudaEventDestroy(ctx->ev_comm_done);
    if (ctx->ev_order != NULL)
        (void)cudaEventDestroy(ctx->ev_order);
    if (ctx->compute != NULL)
        (void)cudaStreamDestroy(ctx->compute);
    if (ctx->comm_stream != NULL)
        (void)cudaStreamDestroy(ctx->comm_stream);
    ctx->~wk_ctx();
    free(ctx);
}

/* The steps of init that can fail; ctx->err says which. fini undoes whatever was made. */
int init_steps(wk_ctx *ctx, const wk_init *in)
{
    const char *op = "init";
    int count = 0;
    CUDA_TRY(ctx, op, "cudaGetDeviceCount", cudaGetDeviceCount(&count));
    if (count <= 0)
        return invalid(ctx, op, "no CUDA device: cudaGetDeviceCount found 0 devices");
    ctx->device = in->local_rank % count;
    CUDA_TRY(ctx, op, "cudaSetDevice", cudaSetDevice(ctx->device));
    cudaDeviceProp prop;
    CUDA_TRY(ctx, op, "cudaGetDeviceProperties", cudaGetDeviceProperties(&prop, ctx->device));
    prop.name[sizeof(prop.name) - 1] = '\0';
    snprintf(ctx->name, sizeof(ctx->name), "%s (device %d)", prop.name, ctx->device);
    ctx->sms = prop.multiProcessorCount > 0 ? prop.multiProcessorCount : 1;

    CUDA_TRY(ctx, op, "cudaStreamCreateWithFlags",
             cudaStreamCreateWithFlags(&ctx->compute, cudaStreamNonBlocking));
    CUDA_TRY(ctx, op, "cudaStreamCreateWithFlags",
             cudaStreamCreateWithFlags(&ctx->comm_stream, cudaStreamNonBlocking));
    CUDA_TRY(ctx, op, "cudaEventCreate", cudaEventCreate(&ctx->ev_compute_done));
    CUDA_TRY(ctx, op, "cudaEventCreate", cudaEventCreate(&ctx->ev_comm_done));
    CUDA_TRY(ctx, op, "cudaEventCreateWithFlags",
             cudaEventCreateWithFlags(&ctx->ev_order, cudaEventDisableTiming));

    BLAS_TRY(ctx, op, "cublasCreate", cublasCreate(&ctx->blas));
    BLAS_TRY(ctx, op, "cublasSetStream", cublasSetStream(ctx->blas, ctx->compute));
    /* Plain FP32 (no TF32), so the numbers compare with the CPU backend's. */
    BLAS_TRY(ctx, op, "cublasSetMathMode", cublasSetMathMode(ctx->blas, CUBLAS_DEFAULT_MATH));

    static_assert(sizeof(ctx->uid) <= WK_NCCL_ID_BYTES, "an NCCL id fits wk_init.nccl_id");
    memcpy(&ctx->uid, in->nccl_id, sizeof(ctx->uid));
    ctx->rank = in->rank;
    ctx->size = in->size;
    return 0;
}

/* The collective step, once every rank's init succeeded (see backend.h). */
int connect(wk_ctx *ctx, char *why, size_t why_len)
{
    ncclComm_t comm = NULL;
    ncclResult_t r = ncclCommInitRank(&comm, ctx->size, ctx->uid, ctx->rank);
    if (r != ncclSuccess) {
        const char *last = ncclGetLastError(comm);
        set_err(ctx->err, sizeof(ctx->err), "init: ncclCommInitRank (rank %d of %d, %s): %s%s%s",
                ctx->rank, ctx->size, ctx->name, ncclGetErrorString(r),
                last != NULL && last[0] != '\0' ? ": " : "", last != NULL ? last : "");
        set_err(why, why_len, "%s", ctx->err);
        if (comm != NULL)
            (void)ncclCommAbort(comm);
        return -EIO;
    }
    ctx->comm = comm;
    return 0;
}

int init(const wk_init *in, wk_ctx **out, char *why, size_t why_len)
{
    *out = NULL;
    if (in == NULL || in->size <= 0 || in->rank < 0 || in->rank >= in->size || in->local_rank < 0) {
        set_err(why, why_len, "init: bad rank %d / size %d / local rank %d",
                in != NULL ? in->rank : -1, in != NULL ? in->size : -1,
                in != NULL ? in->local_rank : -1);
        return -EINVAL;
    }
    void *mem = calloc(1, sizeof(wk_ctx));
    if (mem == NULL) {
        set_err(why, why_len, "init: out of memory");
        return -ENOMEM;
    }
    wk_ctx *ctx = new (mem) wk_ctx; /* zeroed by calloc; the atomics constructed */
    ctx->abort_requested.store(0);
    ctx->aborted.store(0);
    pthread_mutex_init(&ctx->done_lock, NULL);
    int rc = init_steps(ctx, in);
    if (rc < 0) {
        set_err(why, why_len, "%s", ctx->err);
        fini(ctx);
        return rc;
    }
    *out = ctx;
    return 0;
}

const char *error(wk_ctx *ctx)
{
    return ctx != NULL ? ctx->err : "no nccl backend context";
}

const char *device(wk_ctx *ctx)
{
    return ctx != NULL ? ctx->name : "none";
}

/* ---- memory --------------------------------------------------------------------------------- */

int check_count(wk_ctx *ctx, const char *op, size_t n)
{
    if (n > SIZE_MAX / sizeof(float)) {
        set_err(ctx->err, sizeof(ctx->err), "%s: %zu floats do not fit in memory", op, n);
        return -EINVAL;
    }
    return 0;
}

float *alloc(wk_ctx *ctx, size_t n)
{
    if (check_count(ctx, "alloc", n) < 0)
        return NULL;
    /* cudaMalloc(0) gives NULL, which reads as failure: keep one float for empty buffers. */
    size_t bytes = (n > 0 ? n : 1) * sizeof(float);
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        set_err(ctx->err, sizeof(ctx->err), "alloc: cudaMalloc of %zu bytes: %s (%s)", bytes,
                cudaGetErrorString(e), cudaGetErrorName(e));
        return NULL;
    }
    e = cudaMemsetAsync(p, 0, bytes, ctx->compute);
    if (e != cudaSuccess) {
        cuda_fail(ctx, "alloc", "cudaMemsetAsync", e);
        (void)cudaFree(p);
        return NULL;
    }
    return (float *)p;
}

void release(wk_ctx *ctx, float *p)
{
    if (p == NULL)
        return;
    cudaError_t e = cudaFree(p);
    if (e != cudaSuccess)
        cuda_fail(ctx, "release", "cudaFree", e);
}

int upload(wk_ctx *ctx, float *dst, const float *src, size_t n)
{
    if (check_count(ctx, "upload", n) < 0)
        return -EINVAL;
    if (n == 0)
        return 0;
    /* From pageable memory the call returns once src was staged, so src may be reused. */
    CUDA_TRY(ctx, "upload", "cudaMemcpyAsync",
             cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyHostToDevice, ctx->compute));
    return 0;
}

int download(wk_ctx *ctx, float *dst, const float *src, size_t n)
{
    if (check_count(ctx, "download", n) < 0)
        return -EINVAL;
    if (n == 0)
        return 0;
    CUDA_TRY(ctx, "download", "cudaMemcpyAsync",
             cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToHost, ctx->compute));
    return wait_for(ctx, "download", ctx->compute, NULL);
}

/* ---- compute -------------------------------------------------------------------------------- */

/* Row-major C = alpha op(A) op(B) + beta C, on column-major cuBLAS. A row-major matrix with row
 * length ld is, read column-major, its transpose with the same ld. So the call computes
 * C^T [n x m] = alpha op(B)^T op(A)^T + beta C^T: operands swapped, m and n swapped, and each
 * operand keeps its own transpose flag. */
int gemm(wk_ctx *ctx, int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda,
         const float *b, int ldb, float beta, float *c, int ldc)
{
    if (m < 0 || n < 0 || k < 0)
        return invalid(ctx, "gemm", "negative dimension");
    /* Row lengths of the stored matrices: A is [m x k] (or [k x m] when ta), B is [k x n]
     * (or [n x k] when tb), C is [m x n]. */
    int a_row = ta ? m : k, b_row = tb ? k : n;
    if (lda < (a_row > 1 ? a_row : 1) || ldb < (b_row > 1 ? b_row : 1) || ldc < (n > 1 ? n : 1)) {
        set_err(ctx->err, sizeof(ctx->err),
                "gemm: leading dimension shorter than a row (lda %d < %d, ldb %d < %d or "
                "ldc %d < %d)",
                lda, a_row, ldb, b_row, ldc, n);
        return -EINVAL;
    }
    if (m == 0 || n == 0)
        return 0;
    cublasOperation_t op_a = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t op_b = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    BLAS_TRY(ctx, "gemm", "cublasSgemm",
             cublasSgemm(ctx->blas, op_b, op_a, n, m, k, &alpha, b, ldb, a, lda, &beta, c, ldc));
    return 0;
}

int bias_act(wk_ctx *ctx, float *y, const float *bias, int rows, int cols, int relu)
{
    if (rows < 0 || cols < 0)
        return invalid(ctx, "bias_act", "negative dimension");
    size_t total = (size_t)rows * (size_t)cols;
    if (total == 0)
        return 0;
    bias_act_kernel<<<grid_for(total), kThreads, 0, ctx->compute>>>(y, bias, total, cols, relu);
    LAUNCH_CHECK(ctx, "bias_act");
    return 0;
}

int relu_backward(wk_ctx *ctx, float *dy, const float *y, size_t n)
{
    if (n == 0)
        return 0;
    relu_backward_kernel<<<grid_for(n), kThreads, 0, ctx->compute>>>(dy, y, n);
    LAUNCH_CHECK(ctx, "relu_backward");
    return 0;
}

/* bias_grad's rows per chunk: enough chunks for about kBlocksPerSm blocks per multiprocessor
 * (at most kMaxChunks), each a whole number of kRowLanes rows. */
int bias_grad_chunk_rows(int rows, int cols, int sms)
{
    int tiles = (cols + kColTile - 1) / kColTile;
    int chunks = (kBlocksPerSm * sms + tiles - 1) / tiles;
    chunks = chunks < kMaxChunks ? chunks : kMaxChunks;
    int per = (rows + chunks - 1) / chunks;
    per = (per + kRowLanes - 1) / kRowLanes * kRowLanes;
    return per > kRowLanes ? per : kRowLanes;
}

/* Makes ctx->partial hold at least n floats (grown, never shrunk). */
int partial_space(wk_ctx *ctx, size_t n)
{
    if (n <= ctx->partial_cap)
        return 0;
    if (ctx->partial != NULL) {
        /* cudaFree waits for the kernels that may still read the old buffer. */
        cudaError_t e = cudaFree(ctx->partial);
        ctx->partial = NULL;
        ctx->partial_cap = 0;
        if (e != cudaSuccess)
            return cuda_fail(ctx, "bias_grad", "cudaFree", e);
    }
    CUDA_TRY(ctx, "bias_grad", "cudaMalloc", cudaMalloc((void **)&ctx->partial, n * sizeof(float)));
    ctx->partial_cap = n;
    return 0;
}

int bias_grad(wk_ctx *ctx, float *db, const float *dy, int rows, int cols)
{
    if (rows < 0 || cols < 0)
        return invalid(ctx, "bias_grad", "negative dimension");
    if (cols == 0)
        return 0;
    int chunk_rows = bias_grad_chunk_rows(rows, cols, ctx->sms);
    int chunks = rows > 0 ? (rows + chunk_rows - 1) / chunk_rows : 1;
    float *out = db;
    if (chunks > 1) {
        int rc = partial_space(ctx, (size_t)chunks * (size_t)cols);
        if (rc < 0)
            return rc;
        out = ctx->partial;
    }
    int tiles = (cols + kColTile - 1) / kColTile;
    dim3 block(kColTile, kRowLanes);
    dim3 grid((unsigned)tiles, (unsigned)chunks);
    bias_grad_kernel<<<grid, block, 0, ctx->compute>>>(out, dy, rows, cols, chunk_rows);
    LAUNCH_CHECK(ctx, "bias_grad");
    if (chunks > 1) {
        chunk_sum_kernel<<<(unsigned)((cols + kThreads - 1) / kThreads), kThreads, 0,
                           ctx->compute>>>(db, ctx->partial, chunks, cols);
        LAUNCH_CHECK(ctx, "bias_grad");
    }
    return 0;
}

int mse(wk_ctx *ctx, const float *y, const float *t, float *dy, size_t n, float scale,
        float *loss_sum)
{
    if (n == 0)
        return 0;
    mse_kernel<<<grid_for(n), kThreads, 0, ctx->compute>>>(y, t, dy, n, scale, loss_sum);
    LAUNCH_CHECK(ctx, "mse");
    return 0;
}

int sgd(wk_ctx *ctx, float *w, const float *g, size_t n, float lr)
{
    if (n == 0)
        return 0;
    sgd_kernel<<<grid_for(n), kThreads, 0, ctx->compute>>>(w, g, n, lr);
    LAUNCH_CHECK(ctx, "sgd");
    return 0;
}

int fill(wk_ctx *ctx, float *x, size_t n, float value)
{
    if (n == 0)
        return 0;
    fill_kernel<<<grid_for(n), kThreads, 0, ctx->compute>>>(x, n, value);
    LAUNCH_CHECK(ctx, "fill");
    return 0;
}

/* ---- communication -------------------------------------------------------------------------- */

/* Makes (*events)[0..bucket] exist, growing the array (doubling) on demand; *count counts only
 * created events, so fini destroys exactly those. */
int bucket_event(wk_ctx *ctx, cudaEvent_t **events, int *count, int bucket, cudaEvent_t *out)
{
    if (bucket < 0 || bucket >= MAX_BUCKETS) {
        set_err(ctx->err, sizeof(ctx->err), "bucket_ready: bucket %d outside 0..%d", bucket,
                MAX_BUCKETS - 1);
        return -EINVAL;
    }
    if (bucket >= *count) {
        int want = *count > 0 ? *count : 8;
        while (want <= bucket)
            want *= 2;
        if (want > MAX_BUCKETS)
            want = MAX_BUCKETS;
        cudaEvent_t *grown = (cudaEvent_t *)realloc(*events, (size_t)want * sizeof(**events));
        if (grown == NULL) {
            set_err(ctx->err, sizeof(ctx->err), "bucket_ready: out of memory for %d events", want);
            return -ENOMEM;
        }
        *events = grown;
        while (*count < want) {
            CUDA_TRY(ctx, "bucket_ready", "cudaEventCreateWithFlags",
                     cudaEventCreateWithFlags(&(*events)[*count], cudaEventDisableTiming));
            (*count)++;
        }
    }
    *out = (*events)[bucket];
    return 0;
}

int ready_event(wk_ctx *ctx, int bucket, cudaEvent_t *out)
{
    return bucket_event(ctx, &ctx->ev_ready, &ctx->n_ready, bucket, out);
}

int done_event(wk_ctx *ctx, int bucket, cudaEvent_t *out)
{
    if (bucket < ctx->n_done) { /* only this thread grows the array: no lock to read it */
        *out = ctx->ev_done[bucket];
        return 0;
    }
    pthread_mutex_lock(&ctx->done_lock);
    int rc = bucket_event(ctx, &ctx->ev_done, &ctx->n_done, bucket, out);
    pthread_mutex_unlock(&ctx->done_lock);
    return rc;
}

int bucket_ready(wk_ctx *ctx, int bucket, float *buf, size_t n)
{
    cudaEvent_t ev;
    int rc = ready_event(ctx, bucket, &ev);
    if (rc < 0)
        return rc;
    CUDA_TRY(ctx, "bucket_ready", "cudaEventRecord", cudaEventRecord(ev, ctx->compute));
    CUDA_TRY(ctx, "bucket_ready", "cudaStreamWaitEvent", cudaStreamWaitEvent(ctx->comm_stream, ev, 0));
    if (n == 0)
        return 0;
    cudaEvent_t done;
    rc = done_event(ctx, bucket, &done);
    if (rc < 0)
        return rc;
    NCCL_TRY(ctx, "bucket_ready", "ncclAllReduce",
             ncclAllReduce(buf, buf, n, ncclFloat, ncclSum, ctx->comm, ctx->comm_stream));
    CUDA_TRY(ctx, "bucket_ready", "cudaEventRecord", cudaEventRecord(done, ctx->comm_stream));
    return 0;
}

/* Buckets are reduced in the order they were made ready, one after the other on comm; an event
 * never recorded reads as complete. */
int pending_bucket(wk_ctx *ctx)
{
    if (ctx == NULL)
        return -1;
    (void)cudaSetDevice(ctx->device); /* this thread's current device */
    int bucket = -1;
    pthread_mutex_lock(&ctx->done_lock);
    for (int i = 0; i < ctx->n_done && bucket < 0; i++)
        if (cudaEventQuery(ctx->ev_done[i]) == cudaErrorNotReady)
            bucket = i;
    pthread_mutex_unlock(&ctx->done_lock);
    return bucket;
}

int abort_comm(wk_ctx *ctx, int wait_ms)
{
    if (ctx == NULL)
        return 0;
    ctx->abort_requested.store(1);
    struct timespec tick = {0, 1000000};
    for (int waited = 0; !ctx->aborted.load() && waited < wait_ms; waited++)
        nanosleep(&tick, NULL);
    return ctx->aborted.load();
}

int finish(wk_ctx *ctx, double *exposed_ms)
{
    const char *op = "finish";
    if (exposed_ms != NULL)
        *exposed_ms = 0.0;
    CUDA_TRY(ctx, op, "cudaEventRecord", cudaEventRecord(ctx->ev_compute_done, ctx->compute));
    CUDA_TRY(ctx, op, "cudaEventRecord", cudaEventRecord(ctx->ev_comm_done, ctx->comm_stream));
    CUDA_TRY(ctx, op, "cudaStreamWaitEvent",
             cudaStreamWaitEvent(ctx->compute, ctx->ev_comm_done, 0));
    /* Both events must be complete before their distance can be read. */
    int rc = wait_for(ctx, op, NULL, ctx->ev_comm_done);
    if (rc == 0)
        rc = wait_for(ctx, op, NULL, ctx->ev_compute_done);
    if (rc < 0)
        return rc;
    float ms = 0.0f;
    CUDA_TRY(ctx, op, "cudaEventElapsedTime",
             cudaEventElapsedTime(&ms, ctx->ev_compute_done, ctx->ev_comm_done));
    if (exposed_ms != NULL)
        *exposed_ms = ms > 0.0f ? (double)ms : 0.0;
    return 0;
}

int allreduce(wk_ctx *ctx, float *buf, size_t n)
{
    const char *op = "allreduce";
    /* After any bucket still in flight on comm: one communicator, one operation at a time. */
    CUDA_TRY(ctx, op, "cudaEventRecord", cudaEventRecord(ctx->ev_order, ctx->comm_stream));
    CUDA_TRY(ctx, op, "cudaStreamWaitEvent", cudaStreamWaitEvent(ctx->compute, ctx->ev_order, 0));
    if (n > 0)
        NCCL_TRY(ctx, op, "ncclAllReduce",
                 ncclAllReduce(buf, buf, n, ncclFloat, ncclSum, ctx->comm, ctx->compute));
    return wait_for(ctx, op, ctx->compute, NULL);
}

int sync(wk_ctx *ctx)
{
    int rc = wait_for(ctx, "sync", ctx->compute, NULL);
    return rc < 0 ? rc : wait_for(ctx, "sync", ctx->comm_stream, NULL);
}

wk_ops make_table()
{
    wk_ops t;
    memset(&t, 0, sizeof(t));
    t.abi = WK_BACKEND_ABI;
    t.name = "nccl";
    t.available = available;
    t.unique_id = unique_id;
    t.init = init;
    t.connect = connect;
    t.fini = fini;
    t.error = error;
    t.device = device;
    t.alloc = alloc;
    t.release = release;
    t.upload = upload;
    t.download = download;
    t.gemm = gemm;
    t.bias_act = bias_act;
    t.relu_backward = relu_backward;
    t.bias_grad = bias_grad;
    t.mse = mse;
    t.sgd = sgd;
    t.fill = fill;
    t.bucket_ready = bucket_ready;
    t.finish = finish;
    t.allreduce = allreduce;
    t.sync = sync;
    t.pending_bucket = pending_bucket;
    t.abort = abort_comm;
    return t;
}

const wk_ops table = make_table();

} /* namespace */

extern "C" __attribute__((visibility("default"))) const struct wk_ops *mpijob_worker_backend(int abi)
{
    return abi == WK_BACKEND_ABI ? &table : NULL;
}

static_assert(std::is_same<decltype(&mpijob_worker_backend), wk_plugin_entry_fn>::value,
              "the entry point must have the type backend.h names");
