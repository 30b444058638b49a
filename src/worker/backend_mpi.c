/* The CPU backend: OpenBLAS and C on host memory, gradients summed with MPI.
 *
 * Compute runs on the calling thread, in program order, so every op is done when it returns.
 * GEMMs are OpenBLAS's cblas_sgemm, on one thread per rank unless init is given more
 * (--threads); the element-wise ops are plain loops.
 * Communication of gradient buckets runs on a dedicated thread fed by a queue: bucket_ready
 * enqueues, the thread calls MPI_Allreduce on each bucket in order on a duplicate of the
 * caller's communicator (so the main thread's own collectives, such as bench's allreduces,
 * never interleave with the buckets'), and finish() waits for the queue to drain.
 *
 * Without MPI: init with in->mpi_comm == NULL gives a single-process context. No thread is
 * started and MPI is never called; allreduce, bucket_ready and finish are the identity (the sum
 * over one rank), so the compute ops and the whole training step can be tested in a process
 * that never calls MPI_Init. */
#include "worker/backend.h"

#include <errno.h>
#include <mpi.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/clock.h"

/* OpenBLAS's own header (pkg-config openblas): it also declares openblas_set_num_threads. */
#include <cblas.h>
#ifndef OPENBLAS_VERSION
#error "cblas.h is not OpenBLAS's: build with the flags of pkg-config openblas"
#endif

#define ERR_LEN 256

struct bucket_job {
    float *buf;
    size_t n;
    int bucket;
};

struct wk_ctx {
    char err[ERR_LEN];
    char device[160]; /* "cpu (OpenBLAS 0.3.21 Cooperlake, pthread build, 1 thread)" */

    /* Communication; unused in the single-process context (has_mpi == 0). */
    int has_mpi;
    MPI_Comm comm;      /* the caller's: blocking allreduce on the main thread */
    MPI_Comm comm_dup;  /* the communication thread's */
    pthread_t thread;
    int thread_started;
    pthread_mutex_t lock;
    pthread_cond_t wake;  /* work queued, or stop */
    pthread_cond_t done;  /* a bucket finished */
    struct bucket_job *queue;
    size_t queue_cap, queue_head, queue_tail; /* jobs [head, tail) are pending */
    int stop;
    int comm_failed;  /* sticky: a bucket allreduce failed, comm_err says why */
    char comm_err[ERR_LEN]; /* written by the thread under lock, copied to err by finish */
};

static void set_error(struct wk_ctx *ctx, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void set_error(struct wk_ctx *ctx, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx->err, sizeof(ctx->err), fmt, ap);
    va_end(ap);
}

static int imax(int a, int b)
{
    return a > b ? a : b;
}

static void mpi_message(int code, char *out, size_t out_len)
{
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(code, text, &len) != MPI_SUCCESS)
        snprintf(text, sizeof(text), "MPI error %d", code);
    if (out_len == 0)
        return;
    size_t n = strnlen(text, sizeof(text));
    if (n >= out_len)
        n = out_len - 1;
    memcpy(out, text, n);
    out[n] = '\0';
}

/* ---- memory ------------------------------------------------------------- */

static float *alloc_floats(size_t n)
{
    if (n == 0)
        n = 1;
    if (n > SIZE_MAX / sizeof(float))
        return NULL;
    void *p = NULL;
    size_t bytes = n * sizeof(float);
    if (posix_memalign(&p, 64, bytes) != 0)
        return NULL;
    memset(p, 0, bytes);
    return p;
}

static float *backend_alloc(struct wk_ctx *ctx, size_t n)
{
    float *p = alloc_floats(n);
    if (p == NULL)
        set_error(ctx, "out of host memory allocating %zu floats", n);
    return p;
}

static void backend_release(struct wk_ctx *ctx, float *p)
{
    (void)ctx;
    free(p);
}

static int backend_copy(struct wk_ctx *ctx, float *dst, const float *src, size_t n)
{
    (void)ctx;
    if (n > 0)
        memmove(dst, src, n * sizeof(float));
    return 0;
}

/* ---- GEMM --------------------------------------------------------------- */

static int backend_gemm(struct wk_ctx *ctx, int ta, int tb, int m, int n, int k, float alpha,
                        const float *a, int lda, const float *b, int ldb, float beta, float *c,
                        int ldc)
{
    /* BLAS wants every leading dimension at least 1 as well; checked here so that a bad shape
     * is a message of ours, not xerbla's line on stderr. */
    if (m < 0 || n < 0 || k < 0 || ldc < imax(1, n) || lda < imax(1, ta ? m : k) ||
        ldb < imax(1, tb ? k : n)) {
        set_error(ctx, "gemm: bad shape m=%d n=%d k=%d lda=%d ldb=%d ldc=%d (ta=%d tb=%d)", m,
                  n, k, lda, ldb, ldc, ta, tb);
        return -EINVAL;
    }
    if (m == 0 || n == 0)
        return 0;
    /* beta == 0 overwrites C (NaN included), and k == 0 or alpha == 0 only scales it: both as
     * the BLAS reference defines them. */
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return 0;
}

/* ---- elementwise -------------------------------------------------------- */

/* Plain loops over restrict pointers, written so that the vectoriser takes them as they are (the
 * ternaries become compare-and-blend or max, not branches on data); the Makefile builds this
 * file with -O3, where gcc vectorises loops whose trip count is not a constant. */

/* row[c] += add[c] */
static void add_row(float *restrict row, const float *restrict add, int cols)
{
    for (int c = 0; c < cols; c++)
        row[c] += add[c];
}

static void add_bias_relu(float *restrict row, const float *restrict bias, int cols)
{
    for (int c = 0; c < cols; c++) {
        float v = row[c] + bias[c];
        row[c] = v > 0.0f ? v : 0.0f;
    }
}

static int backend_bias_act(struct wk_ctx *ctx, float *y, const float *bias, int rows, int cols,
                            int relu)
{
    (void)ctx;
    for (int r = 0; r < rows; r++) {
        float *row = y + (size_t)r * cols;
        if (relu)
            add_bias_relu(row, bias, cols);
        else
            add_row(row, bias, cols);
    }
    return 0;
}

static void relu_mask(float *restrict dy, const float *restrict y, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dy[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

static int backend_relu_backward(struct wk_ctx *ctx, float *dy, const float *y, size_t n)
{
    (void)ctx;
    relu_mask(dy, y, n);
    return 0;
}

static int backend_bias_grad(struct wk_ctx *ctx, float *db, const float *dy, int rows, int cols)
{
    (void)ctx;
    memset(db, 0, (size_t)cols * sizeof(float));
    for (int r = 0; r < rows; r++)
        add_row(db, dy + (size_t)r * cols, cols);
    return 0;
}

static int backend_mse(struct wk_ctx *ctx, const float *y, const float *t, float *dy, size_t n,
                       float scale, float *loss_sum)
{
    (void)ctx;
    double sum = 0.0;
    for (size_t i = 0; i < n; i++) {
        float d = y[i] - t[i];
        dy[i] = scale * d;
        sum += (double)d * d;
    }
    *loss_sum += (float)sum;
    return 0;
}

/* Not cblas_saxpy: the update must give the same bits on every rank, and OpenBLAS picks its
 * kernel (FMA or not) by the CPU it runs on, which may differ between the hosts of one job. */
static void step(float *restrict w, const float *restrict g, size_t n, float lr)
{
    for (size_t i = 0; i < n; i++)
        w[i] -= lr * g[i];
}

static int backend_sgd(struct wk_ctx *ctx, float *w, const float *g, size_t n, float lr)
{
    (void)ctx;
    step(w, g, n, lr);
    return 0;
}

static int backend_fill(struct wk_ctx *ctx, float *x, size_t n, float value)
{
    (void)ctx;
    for (size_t i = 0; i < n; i++)
        x[i] = value;
    return 0;
}

/* ---- communication ------------------------------------------------------ */

static void *comm_thread(void *arg)
{
    struct wk_ctx *ctx = arg;
    pthread_mutex_lock(&ctx->lock);
    for (;;) {
        while (!ctx->stop && ctx->queue_head == ctx->queue_tail)
            pthread_cond_wait(&ctx->wake, &ctx->lock);
        if (ctx->queue_head == ctx->queue_tail)
            break; /* stop, and nothing left */
        struct bucket_job job = ctx->queue[ctx->queue_head % ctx->queue_cap];
        int failed = ctx->comm_failed;
        pthread_mutex_unlock(&ctx->lock);

        int rc = MPI_SUCCESS;
        char why[ERR_LEN / 2] = "";
        /* After one failure the rest are skipped: the step is lost either way, and a rank
         * that stops calling collectives must not leave the others half-way in one. */
        if (!failed && job.n > 0) {
            if (job.n > (size_t)INT32_MAX) {
                rc = MPI_ERR_COUNT;
                snprintf(why, sizeof(why), "%zu floats is more than one MPI call can carry",
                         job.n);
            } else {
                rc = MPI_Allreduce(MPI_IN_PLACE, job.buf, (int)job.n, MPI_FLOAT, MPI_SUM,
                                   ctx->comm_dup);
                if (rc != MPI_SUCCESS)
                    mpi_message(rc, why, sizeof(why));
            }
        }

        pthread_mutex_lock(&ctx->lock);
        if (rc != MPI_SUCCESS && !ctx->comm_failed) {
            ctx->comm_failed = 1;
            snprintf(ctx->comm_err, sizeof(ctx->comm_err),
                     "allreduce of bucket %d (%zu floats) failed: %s", job.bucket, job.n, why);
        }
        ctx->queue_head++;
        pthread_cond_broadcast(&ctx->done);
    }
    pthread_mutex_unlock(&ctx->lock);
    return NULL;
}

static int backend_bucket_ready(struct wk_ctx *ctx, int bucket, float *buf, size_t n)
{
    if (!ctx->has_mpi)
        return 0; /* one process: the sum is the buffer itself */
    pthread_mutex_lock(&ctx->lock);
    int rc = 0;
    if (ctx->comm_failed) {
        set_error(ctx, "%s", ctx->comm_err);
        rc = -EIO;
        goto out;
    }
    if (ctx->queue_tail - ctx->queue_head == ctx->queue_cap) {
        /* Grow the ring: unwrap the pending jobs into a bigger array. */
        size_t cap = ctx->queue_cap * 2;
        struct bucket_job *q = calloc(cap, sizeof(*q));
        if (q == NULL) {
            set_error(ctx, "out of memory queueing bucket %d", bucket);
            rc = -ENOMEM;
            goto out;
        }
        size_t pending = ctx->queue_tail - ctx->queue_head;
        for (size_t i = 0; i < pending; i++)
            q[i] = ctx->queue[(ctx->queue_head + i) % ctx->queue_cap];
        free(ctx->queue);
        ctx->queue = q;
        ctx->queue_cap = cap;
        ctx->queue_head = 0;
        ctx->queue_tail = pending;
    }
    ctx->queue[ctx->queue_tail % ctx->queue_cap] =
        (struct bucket_job){.buf = buf, .n = n, .bucket = bucket};
    ctx->queue_tail++;
    pthread_cond_signal(&ctx->wake);
out:
    pthread_mutex_unlock(&ctx->lock);
    return rc;
}

static int backend_finish(struct wk_ctx *ctx, double *exposed_ms)
{
    if (exposed_ms != NULL)
        *exposed_ms = 0.0;
    if (!ctx->has_mpi)
        return 0;
    double start = clock_now_ms_precise();
    pthread_mutex_lock(&ctx->lock);
    while (ctx->queue_head != ctx->queue_tail)
        pthread_cond_wait(&ctx->done, &ctx->lock);
    int rc = 0;
    if (ctx->comm_failed) {
        set_error(ctx, "%s", ctx->comm_err);
        rc = -EIO;
    }
    pthread_mutex_unlock(&ctx->lock);
    if (exposed_ms != NULL)
        *exposed_ms = clock_now_ms_precise() - start;
    return rc;
}

static int backend_allreduce(struct wk_ctx *ctx, float *buf, size_t n)
{
    if (!ctx->has_mpi || n == 0)
        return 0;
    if (n > (size_t)INT32_MAX) {
        set_error(ctx, "allreduce of %zu floats: more than one MPI call can carry", n);
        return -E2BIG;
    }
    int rc = MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, ctx->comm);
    if (rc != MPI_SUCCESS) {
        char why[ERR_LEN];
        mpi_message(rc, why, sizeof(why));
        set_error(ctx, "allreduce of %zu floats failed: %s", n, why);
        return -EIO;
    }
    return 0;
}

static int backend_sync(struct wk_ctx *ctx)
{
    return backend_finish(ctx, NULL);
}

/* The queue's head is the bucket the communication thread is reducing (it leaves the queue
 * only once reduced); buckets complete in order, so it is the lowest outstanding. */
static int backend_pending_bucket(struct wk_ctx *ctx)
{
    if (ctx == NULL || !ctx->has_mpi)
        return -1;
    pthread_mutex_lock(&ctx->lock);
    int bucket = ctx->queue_head != ctx->queue_tail
                     ? ctx->queue[ctx->queue_head % ctx->queue_cap].bucket
                     : -1;
    pthread_mutex_unlock(&ctx->lock);
    return bucket;
}

/* Nothing of ours to abort: MPI_Abort, which the watchdog calls next, ends the collectives. */
static int backend_abort(struct wk_ctx *ctx, int wait_ms)
{
    (void)ctx;
    (void)wait_ms;
    return 0;
}

/* ---- life cycle --------------------------------------------------------- */

/* OpenBLAS's threads for this process's GEMMs. OPENBLAS_NUM_THREADS and OMP_NUM_THREADS size
 * the pool OpenBLAS starts when it loads, but the count used is always set here, from --threads:
 * one rank per core is the usual layout, and an environment inherited from the image must not
 * make every rank start as many threads as the node has cores. The same call works with each of
 * Debian's builds (pthread, openmp, serial); one that cannot run n threads (serial, or above
 * its MAX_THREADS) is refused rather than run with fewer. On success device[] names the library,
 * its kernels, its build and the threads. */
static int blas_threads(int n, char *device, size_t device_len, char *why, size_t why_len)
{
    openblas_set_num_threads(n);
    int got = openblas_get_num_threads();
    if (got != n) {
        snprintf(why, why_len, "%d threads asked, but this OpenBLAS runs %d (%s)", n, got,
                 openblas_get_config());
        return -EINVAL;
    }
    /* "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH ...": the first two words */
    const char *config = openblas_get_config();
    int name_len = 0;
    for (int words = 0; config[name_len] != '\0'; name_len++)
        if (config[name_len] == ' ' && ++words == 2)
            break;
    static const char *const builds[] = {"serial", "pthread", "openmp"};
    int parallel = openblas_get_parallel();
    snprintf(device, device_len, "cpu (%.*s %s, %s build, %d thread%s)", name_len, config,
             openblas_get_corename(),
             parallel >= 0 && parallel <= 2 ? builds[parallel] : "unknown", n, n == 1 ? "" : "s");
    return 0;
}

static int backend_available(char *why, size_t why_len)
{
    if (why_len > 0)
        why[0] = '\0';
    return 1;
}

static void backend_fini(struct wk_ctx *ctx)
{
    if (ctx == NULL)
        return;
    if (ctx->thread_started) {
        pthread_mutex_lock(&ctx->lock);
        ctx->stop = 1;
        pthread_cond_signal(&ctx->wake);
        pthread_mutex_unlock(&ctx->lock);
        pthread_join(ctx->thread, NULL);
    }
    if (ctx->has_mpi) {
        if (ctx->comm_dup != MPI_COMM_NULL)
            MPI_Comm_free(&ctx->comm_dup);
        pthread_cond_destroy(&ctx->done);
        pthread_cond_destroy(&ctx->wake);
        pthread_mutex_destroy(&ctx->lock);
    }
    free(ctx->queue);
    free(ctx);
}

static int backend_init(const struct wk_init *in, struct wk_ctx **out, char *why, size_t why_len)
{
    *out = NULL;
    struct wk_ctx *ctx = calloc(1, sizeof(*ctx));
    if (ctx == NULL) {
        snprintf(why, why_len, "out of memory");
        return -ENOMEM;
    }
    int rc = 0;
    ctx->comm = MPI_COMM_NULL;
    ctx->comm_dup = MPI_COMM_NULL;
    rc = blas_threads(in->threads > 0 ? in->threads : 1, ctx->device, sizeof(ctx->device), why,
                      why_len);
    if (rc < 0)
        goto out;
    if (in->mpi_comm == NULL)
        goto out; /* single-process context, see the top of this file */

    ctx->has_mpi = 1;
    ctx->comm = *(const MPI_Comm *)in->mpi_comm;
    pthread_mutex_init(&ctx->lock, NULL);
    pthread_cond_init(&ctx->wake, NULL);
    pthread_cond_init(&ctx->done, NULL);
    ctx->queue_cap = 16;
    ctx->queue = calloc(ctx->queue_cap, sizeof(*ctx->queue));
    if (ctx->queue == NULL) {
        snprintf(why, why_len, "out of memory");
        rc = -ENOMEM;
        goto out;
    }
    int mrc = MPI_Comm_dup(ctx->comm, &ctx->comm_dup);
    if (mrc != MPI_SUCCESS) {
        char text[ERR_LEN];
        mpi_message(mrc, text, sizeof(text));
        snprintf(why, why_len, "MPI_Comm_dup failed: %s", text);
        ctx->comm_dup = MPI_COMM_NULL;
        rc = -EIO;
        goto out;
    }
    /* Errors come back as codes (reported by error()) instead of aborting inside the thread. */
    MPI_Comm_set_errhandler(ctx->comm_dup, MPI_ERRORS_RETURN);
    int prc = pthread_create(&ctx->thread, NULL, comm_thread, ctx);
    if (prc != 0) {
        snprintf(why, why_len, "cannot start the communication thread: %s", strerror(prc));
        rc = -prc;
        goto out;
    }
    ctx->thread_started = 1;
out:
    if (rc < 0) {
        backend_fini(ctx);
        return rc;
    }
    *out = ctx;
    return 0;
}

static const char *backend_error(struct wk_ctx *ctx)
{
    return ctx != NULL && ctx->err[0] != '\0' ? ctx->err : "no error";
}

static const char *backend_device(struct wk_ctx *ctx)
{
    return ctx->device;
}

const struct wk_ops wk_backend_mpi = {
    .abi = WK_BACKEND_ABI,
    .name = "mpi",
    .available = backend_available,
    .unique_id = NULL,
    .init = backend_init,
    .fini = backend_fini,
    .error = backend_error,
    .device = backend_device,
    .alloc = backend_alloc,
    .release = backend_release,
    .upload = backend_copy,
    .download = backend_copy,
    .gemm = backend_gemm,
    .bias_act = backend_bias_act,
    .relu_backward = backend_relu_backward,
    .bias_grad = backend_bias_grad,
    .mse = backend_mse,
    .sgd = backend_sgd,
    .fill = backend_fill,
    .bucket_ready = backend_bucket_ready,
    .finish = backend_finish,
    .allreduce = backend_allreduce,
    .sync = backend_sync,
    .pending_bucket = backend_pending_bucket,
    .abort = backend_abort,
};
