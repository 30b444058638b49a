/* mpijob-worker train: data-parallel SGD of an MLP on synthetic data (WORKER.md).
 *
 *   flags (checked before MPI starts) -> MPI session -> size and RDMA checks -> backend agreed by
 *   all ranks -> data shard and model uploaded -> weights hash checked -> steps:
 *       forward, backward (buckets handed to the backend as they fill), finish, sgd
 *   -> final weights hash and loss checks -> summary line.
 *
 * Rank 0 writes JSON lines on stdout; errors go to stderr. Exit status: 0; 2 for a bad command
 * line (unknown flag, bad value, absurd size, batch not divisible by the ranks); 1 for a failed
 * run (no RDMA when required, backend failure, weights differ across ranks, loss did not fall). */
#include <cjson/cJSON.h>
#include <errno.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/clock.h"
#include "util/json.h"
#include "worker/backend.h"
#include "worker/commands.h"
#include "worker/data.h"
#include "worker/diag.h"
#include "worker/export.h"
#include "worker/model.h"
#include "worker/rdma.h"
#include "worker/session.h"
#include "worker/train_args.h"
#include "worker/watchdog.h"

#define MSG_LEN 1024

struct run {
    struct wk_train_args args;
    struct wk_session session;
    const struct wk_ops *ops;
    struct wk_ctx *ctx;
    struct wk_shard shard;
    struct wk_layout layout;
    struct wk_model model;
    float *x, *y;        /* the shard in backend memory */
    float *host_params;  /* for the initial upload and the weights hashes */
    double check_ms;     /* time spent in weight checks, left out of the step timings */
};

/* Running sums of one reporting interval. */
struct interval {
    double start_ms;
    double check_ms_at_start;
    long long steps;
    double exposed_ms;
};

static void emit(cJSON *obj)
{
    (void)json_print_line(stdout, obj);
    cJSON_Delete(obj);
}

/* A failed backend operation on one rank: the other ranks may be inside a collective, so the
 * whole job goes down. */
static void fail_op(struct run *r, const char *what)
{
    char msg[MSG_LEN];
    snprintf(msg, sizeof(msg), "%s failed: %s", what, r->ops->error(r->ctx));
    wk_session_abort(&r->session, 1, msg);
}

/* The global mean squared error of a step that reported its loss: loss_sum was summed over the
 * ranks with the output layer's gradients (wk_model_backward with_loss), finished. */
static double global_loss(struct run *r)
{
    float sum = 0.0f;
    if (r->ops->download(r->ctx, &sum, r->model.loss_sum, 1) < 0)
        fail_op(r, "loss download");
    return (double)sum / ((double)r->args.batch * (double)r->args.output);
}

/* Hashes the weights and compares across ranks: 1 when identical on every rank. */
static int weights_identical(struct run *r, long long step)
{
    double t0 = clock_now_ms_precise();
    if (r->ops->download(r->ctx, r->host_params, r->model.params, r->layout.parameters) < 0)
        fail_op(r, "weights download");
    uint64_t h = wk_weights_hash(r->host_params, r->layout.parameters), lo = 0, hi = 0;
    wk_watchdog_enter(step < 0 ? "initial weights check" : "weights check", step < 0 ? WK_WATCHDOG_START : step);
    MPI_Allreduce(&h, &lo, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(&h, &hi, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
    wk_watchdog_leave();
    r->check_ms += clock_now_ms_precise() - t0;
    if (lo == hi)
        return 1;
    if (r->session.rank == 0 && step < 0)
        wk_error("train",
                 "the initial weights differ across ranks (hashes from %016llx to %016llx): every "
                 "rank must be started with the same flags",
                 (unsigned long long)lo, (unsigned long long)hi);
    else if (r->session.rank == 0)
        wk_error("train",
                 "the weights differ across ranks after step %lld (hashes from %016llx to "
                 "%016llx): the ranks no longer train the same model",
                 step, (unsigned long long)lo, (unsigned long long)hi);
    return 0;
}

static cJSON *bucket_list(const struct wk_layout *l)
{
    cJSON *list = cJSON_CreateArray();
    for (int i = 0; i < l->bucket_count; i++) {
        cJSON *b = cJSON_CreateObject();
        cJSON_AddNumberToObject(b, "first_layer", l->bucket[i].first_layer);
        cJSON_AddNumberToObject(b, "last_layer", l->bucket[i].last_layer);
        cJSON_AddNumberToObject(b, "bytes", (double)l->bucket[i].count * sizeof(float));
        cJSON_AddItemToArray(list, b);
    }
    return list;
}

/* The start and summary lines begin alike: the event and what ran it. */
static cJSON *run_line(const struct run *r, const char *event)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "event", event);
    cJSON_AddNumberToObject(o, "ranks", r->session.size);
    cJSON_AddStringToObject(o, "backend", r->ops->name);
    cJSON_AddStringToObject(o, "device", r->ops->device(r->ctx));
    return o;
}

static void emit_start(const struct run *r, cJSON *placement)
{
    const struct wk_train_args *a = &r->args;
    cJSON *o = run_line(r, "start");
    /* Where the ranks run and the transport settings that reached them, from the ranks. */
    if (placement)
        cJSON_AddItemToObject(o, "placement", placement);
    if (r->session.fallback[0] != '\0')
        cJSON_AddStringToObject(o, "fallback", r->session.fallback);
    cJSON *m = cJSON_AddObjectToObject(o, "model");
    cJSON_AddNumberToObject(m, "input", a->input);
    cJSON_AddNumberToObject(m, "hidden", a->hidden);
    cJSON_AddNumberToObject(m, "layers", a->layers);
    cJSON_AddNumberToObject(m, "output", a->output);
    cJSON_AddNumberToObject(o, "parameters", (double)r->layout.parameters);
    cJSON_AddNumberToObject(o, "global_batch", a->batch);
    cJSON_AddNumberToObject(o, "local_batch", r->shard.local_batch);
    cJSON_AddNumberToObject(o, "steps", (double)a->steps);
    cJSON_AddNumberToObject(o, "lr", a->lr);
    cJSON_AddNumberToObject(o, "samples", (double)a->samples);
    cJSON_AddNumberToObject(o, "seed", (double)a->seed);
    cJSON_AddNumberToObject(o, "threads", a->threads);
    cJSON_AddNumberToObject(o, "bucket_mb", a->bucket_mb);
    cJSON_AddItemToObject(o, "buckets", bucket_list(&r->layout));
    cJSON_AddBoolToObject(o, "overlap", a->overlap);
    emit(o);
}

static void emit_step(const struct run *r, long long step, double loss, const struct interval *iv)
{
    double wall = clock_now_ms_precise() - iv->start_ms - (r->check_ms - iv->check_ms_at_start);
    double per_step = iv->steps > 0 ? wall / (double)iv->steps : 0.0;
    double exposed = iv->steps > 0 ? iv->exposed_ms / (double)iv->steps : 0.0;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "event", "step");
    cJSON_AddNumberToObject(o, "step", (double)step);
    cJSON_AddNumberToObject(o, "loss", loss);
    cJSON_AddNumberToObject(o, "samples_per_sec",
                            wall > 0 ? (double)iv->steps * r->args.batch / (wall / 1e3) : 0.0);
    cJSON_AddNumberToObject(o, "compute_ms", per_step - exposed);
    cJSON_AddNumberToObject(o, "exposed_comm_ms", exposed);
    cJSON_AddNumberToObject(o, "allreduce_bytes", (double)r->layout.parameters * sizeof(float));
    emit(o);
}

static void interval_reset(struct interval *iv, const struct run *r)
{
    iv->start_ms = clock_now_ms_precise();
    iv->check_ms_at_start = r->check_ms;
    iv->steps = 0;
    iv->exposed_ms = 0.0;
}

/* Generates this rank's shard, the model and its initial weights on the backend. */
static int setup(struct run *r, char *why, size_t why_len)
{
    const struct wk_train_args *a = &r->args;
    struct wk_teacher teacher;
    float *hx = NULL, *hy = NULL;
    int rc = wk_shard_plan(&r->shard, (uint64_t)a->samples, a->batch, r->session.size,
                           r->session.rank, (uint64_t)a->steps, why, why_len);
    if (rc < 0)
        return rc;
    rc = wk_teacher_init(&teacher, a->input, a->output);
    if (rc < 0) {
        snprintf(why, why_len, "out of memory for the teacher network");
        return rc;
    }
    size_t nx = (size_t)r->shard.rows * (size_t)a->input;
    size_t ny = (size_t)r->shard.rows * (size_t)a->output;
    hx = malloc(nx * sizeof(float));
    hy = malloc(ny * sizeof(float));
    if (hx == NULL || hy == NULL) {
        snprintf(why, why_len, "out of host memory for the data shard (%zu floats)", nx + ny);
        rc = -ENOMEM;
        goto out;
    }
    wk_shard_fill(&r->shard, &teacher, a->seed, hx, hy);
    r->x = r->ops->alloc(r->ctx, nx);
    r->y = r->x ? r->ops->alloc(r->ctx, ny) : NULL;
    if (r->y == NULL || r->ops->upload(r->ctx, r->x, hx, nx) < 0 ||
        r->ops->upload(r->ctx, r->y, hy, ny) < 0) {
        snprintf(why, why_len, "data shard: %s", r->ops->error(r->ctx));
        rc = -ENOMEM;
        goto out;
    }

    struct wk_model_shape shape = {a->input, a->hidden, a->layers, a->output};
    rc = wk_layout_make(&r->layout, &shape, a->bucket_mb * 1024.0 * 1024.0, why, why_len);
    if (rc < 0)
        goto out;
    rc = wk_model_init(&r->model, r->ops, r->ctx, &r->layout, r->shard.local_batch, why, why_len);
    if (rc < 0)
        goto out;
    r->host_params = malloc(r->layout.parameters * sizeof(float));
    if (r->host_params == NULL) {
        snprintf(why, why_len, "out of host memory for %zu parameters", r->layout.parameters);
        rc = -ENOMEM;
        goto out;
    }
    wk_model_init_params(&r->layout, a->seed, r->host_params);
    if (r->ops->upload(r->ctx, r->model.params, r->host_params, r->layout.parameters) < 0) {
        snprintf(why, why_len, "weights upload: %s", r->ops->error(r->ctx));
        rc = -EIO;
        goto out;
    }
out:
    free(hx);
    free(hy);
    wk_teacher_free(&teacher);
    return rc;
}

static void teardown(struct run *r)
{
    if (r->ops != NULL) {
        wk_model_fini(&r->model);
        if (r->x != NULL)
            r->ops->release(r->ctx, r->x);
        if (r->y != NULL)
            r->ops->release(r->ctx, r->y);
    }
    wk_layout_free(&r->layout);
    free(r->host_params);
    r->x = r->y = r->host_params = NULL;
}

/* The training loop; returns the exit status. */
static int train(struct run *r)
{
    const struct wk_train_args *a = &r->args;
    const int rank0 = r->session.rank == 0;
    const size_t in = (size_t)a->input, out = (size_t)a->output, b = (size_t)r->shard.local_batch;
    const float scale = (float)(2.0 / ((double)a->batch * (double)a->output));
    double loss_first = 0.0, loss_last = 0.0, exposed_total = 0.0;
    double timed_start = 0.0, timed_check_ms = 0.0; /* steps 1.. (--steps is at least 2) */
    long long timed_steps = 0;
    struct interval iv;

    cJSON *placement = wk_session_placement(&r->session);
    if (rank0)
        emit_start(r, placement);
    else
        cJSON_Delete(placement);
    /* The initial weights come from the seed on every rank; verify rather than trust. */
    if (!weights_identical(r, -1))
        return 1;

    interval_reset(&iv, r);
    for (long long s = 0; s < a->steps; s++) {
        const int last = s == a->steps - 1;
        const int log = s == 0 || last || (a->log_every > 0 && s % a->log_every == 0);
        if (s == 1) { /* step 0 warms up: the totals start after it */
            timed_start = clock_now_ms_precise();
            timed_check_ms = r->check_ms;
        }
        uint64_t slot = wk_shard_slot(&r->shard, (uint64_t)s);
        const float *x = r->x + slot * b * in, *y = r->y + slot * b * out;
        double exposed = 0.0;
        if (log && r->ops->fill(r->ctx, r->model.loss_sum, 1, 0.0f) < 0)
            fail_op(r, "fill");
        if (wk_model_forward(&r->model, x, y, scale) < 0)
            fail_op(r, "forward pass");
        if (wk_model_backward(&r->model, a->overlap, log) < 0)
            fail_op(r, "backward pass");
        wk_watchdog_enter("gradient allreduce", s);
        if (r->ops->finish(r->ctx, &exposed) < 0)
            fail_op(r, "gradient allreduce");
        wk_watchdog_leave();
        if (wk_model_sgd(&r->model, (float)a->lr) < 0)
            fail_op(r, "sgd");
        iv.steps++;
        iv.exposed_ms += exposed;
        if (s >= 1) {
            timed_steps++;
            exposed_total += exposed;
        }
        if (log) {
            double loss = global_loss(r);
            if (s == 0)
                loss_first = loss;
            loss_last = loss;
            if (rank0)
                emit_step(r, s, loss, &iv);
            interval_reset(&iv, r);
        }
        if (!last && a->check_every > 0 && (s + 1) % a->check_every == 0 &&
            !weights_identical(r, s))
            return 1;
    }
    wk_watchdog_enter("final sync", a->steps - 1);
    if (r->ops->sync(r->ctx) < 0)
        fail_op(r, "sync");
    wk_watchdog_leave();
    double wall = clock_now_ms_precise() - timed_start - (r->check_ms - timed_check_ms);
    int identical = weights_identical(r, a->steps - 1);
    int falling = loss_last < loss_first;

    if (rank0) {
        char transport[64];
        wk_session_transport(&r->session, transport, sizeof(transport));
        double step_ms = timed_steps > 0 ? wall / (double)timed_steps : 0.0;
        double exposed_ms = timed_steps > 0 ? exposed_total / (double)timed_steps : 0.0;
        cJSON *o = run_line(r, "summary");
        cJSON_AddStringToObject(o, "transport", transport);
        cJSON_AddNumberToObject(o, "loss_first", loss_first);
        cJSON_AddNumberToObject(o, "loss_last", loss_last);
        cJSON_AddBoolToObject(o, "weights_identical", identical);
        cJSON_AddNumberToObject(o, "samples_per_sec",
                                wall > 0 ? (double)timed_steps * a->batch / (wall / 1e3) : 0.0);
        cJSON_AddNumberToObject(o, "step_ms", step_ms);
        cJSON_AddNumberToObject(o, "exposed_comm_ms", exposed_ms);
        cJSON_AddNumberToObject(o, "compute_ms", step_ms - exposed_ms);
        cJSON_AddNumberToObject(o, "steps", (double)a->steps);
        cJSON_AddNumberToObject(o, "global_batch", a->batch);
        cJSON_AddNumberToObject(o, "parameters", (double)r->layout.parameters);
        cJSON_AddNumberToObject(o, "allreduce_bytes",
                                (double)r->layout.parameters * sizeof(float));
        cJSON_AddNumberToObject(o, "buckets", r->layout.bucket_count);
        cJSON_AddBoolToObject(o, "overlap", a->overlap);
        emit(o);
        if (identical && !falling)
            wk_error("train",
                     "the loss did not fall: %.6g at the first step, %.6g at the last (try a "
                     "smaller --lr or more --steps)",
                     loss_first, loss_last);
    }
    return identical && falling ? 0 : 1;
}

int wk_train_main(int argc, char **argv)
{
    struct run r;
    char msg[MSG_LEN];
    memset(&r, 0, sizeof(r));
    const int print = wk_launcher_rank() == 0;

    int rc = wk_train_args_parse(&r.args, argc, argv, msg, sizeof(msg));
    if (rc == 1) {
        if (print)
            wk_train_usage(stdout);
        return 0;
    }
    if (rc == 0)
        rc = wk_train_args_check_size(&r.args, 0, NULL, msg, sizeof(msg));
    if (rc < 0) {
        if (print)
            wk_usage_error("train", wk_train_usage, "%s", msg);
        return 2;
    }

    if (r.args.export_dir != NULL) {
        /* Written by one process: under mpirun, by the launcher's rank 0 alone. The problem is
         * the whole global batch, as one rank would hold it. */
        if (!print)
            return 0;
        if (wk_train_args_check_size(&r.args, 1, NULL, msg, sizeof(msg)) < 0 ||
            wk_export_problem(&r.args, msg, sizeof(msg)) < 0) {
            wk_error("train", "--export %s: %s", r.args.export_dir, msg);
            return 1;
        }
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "event", "export");
        cJSON_AddStringToObject(o, "dir", r.args.export_dir);
        emit(o);
        return 0;
    }

    if (wk_session_start(&r.session, &argc, &argv) < 0) {
        wk_session_end(&r.session, 1);
        return 1;
    }
    const int rank0 = r.session.rank == 0;
    int status = 1;
    MPI_Comm world = MPI_COMM_WORLD;
    (void)wk_watchdog_start(&r.args.collective_timeout, &world, r.session.rank, r.session.size);
    /* Every rank computes the same answer here, so all of them stop together. */
    if (wk_train_args_check_size(&r.args, r.session.size, NULL, msg, sizeof(msg)) < 0) {
        if (rank0)
            wk_error("train", "%s\n(see mpijob-worker train --help)", msg);
        status = 2;
        goto out;
    }

    if (r.args.require_rdma || wk_rdma_required()) {
        int ok = wk_rdma_check(msg, sizeof(msg)) == 0;
        int first_bad = ok ? r.session.size : r.session.rank, reporter = 0;
        wk_watchdog_enter("RDMA check agreement", WK_WATCHDOG_START);
        MPI_Allreduce(&first_bad, &reporter, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
        wk_watchdog_leave();
        if (reporter < r.session.size) {
            if (r.session.rank == reporter)
                wk_error("train", "rank %d: %s", reporter, msg);
            goto out;
        }
    }

    if (wk_session_backend(&r.session, (enum wk_backend_choice)r.args.backend, r.args.threads) < 0)
        goto out;
    r.ops = r.session.ops;
    r.ctx = r.session.ctx;
    wk_watchdog_backend(r.ops, r.ctx);

    rc = setup(&r, msg, sizeof(msg));
    if (rc < 0)
        wk_error("train", "rank %d: %s", r.session.rank, msg);
    if (wk_session_agree(&r.session, rc) < 0)
        goto out;
    status = train(&r);
out:
    teardown(&r);
    wk_session_end(&r.session, status);
    return status;
}
