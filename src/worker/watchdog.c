#include "worker/watchdog.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <mpi.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/clock.h"
#include "util/json.h"
#include "worker/diag.h"

#define TAG_CALL 1
#define TAG_ANSWER 2
/* How often an idle watchdog answers roll calls, and how often a firing one looks for answers. */
#define SERVICE_MS 200
#define ROLL_POLL_MS 10
/* How long the backend may take to abort its communicator before MPI_Abort goes ahead. */
#define BACKEND_ABORT_MS 2000

int wk_watchdog_parse_timeout(const char *s, double *out, char *err, size_t err_len)
{
    char *end = NULL;
    errno = 0;
    double v = s != NULL ? strtod(s, &end) : NAN;
    if (s == NULL || s[0] == '\0' || errno != 0 || end == s || *end != '\0' || !isfinite(v) ||
        v < 0 || v > WK_COLLECTIVE_TIMEOUT_MAX_S) {
        snprintf(err, err_len, "'%s' is not a number of seconds in [0, %.0f] (0 turns the "
                 "watchdog off)", s != NULL ? s : "", WK_COLLECTIVE_TIMEOUT_MAX_S);
        return -EINVAL;
    }
    *out = v;
    return 0;
}

cJSON *wk_watchdog_report_json(const struct wk_watchdog_report *r)
{
    cJSON *o = cJSON_CreateObject();
    if (o == NULL)
        return NULL;
    cJSON_AddStringToObject(o, "event", "collective_timeout");
    cJSON_AddNumberToObject(o, "rank", r->rank);
    if (r->step >= 0)
        cJSON_AddNumberToObject(o, "step", (double)r->step);
    else
        cJSON_AddStringToObject(o, "phase", r->step == WK_WATCHDOG_END ? "end" : "start");
    cJSON_AddStringToObject(o, "what", r->what != NULL ? r->what : "collective");
    if (r->bucket >= 0)
        cJSON_AddNumberToObject(o, "bucket", r->bucket);
    if (r->backend != NULL)
        cJSON_AddStringToObject(o, "backend", r->backend);
    cJSON_AddNumberToObject(o, "waited_s", round(r->waited_s * 10.0) / 10.0);
    cJSON_AddNumberToObject(o, "timeout_s", r->timeout_s);
    if (r->roll_called) {
        cJSON *list = cJSON_AddArrayToObject(o, "not_heard_from");
        for (int i = 0; list != NULL && i < r->not_heard_count; i++)
            cJSON_AddItemToArray(list, cJSON_CreateNumber(r->not_heard[i]));
    }
    return o;
}

void wk_watchdog_report_text(const struct wk_watchdog_report *r, char *out, size_t out_len)
{
    char where[64], detail[96], ranks[512];
    if (r->step == WK_WATCHDOG_END)
        snprintf(where, sizeof(where), "after the last step");
    else if (r->step < 0)
        snprintf(where, sizeof(where), "before the first step");
    else
        snprintf(where, sizeof(where), "at step %lld", r->step);
    if (r->bucket >= 0 && r->backend != NULL)
        snprintf(detail, sizeof(detail), " (bucket %d, %s backend)", r->bucket, r->backend);
    else if (r->backend != NULL)
        snprintf(detail, sizeof(detail), " (%s backend)", r->backend);
    else
        detail[0] = '\0';
    if (!r->roll_called) {
        snprintf(ranks, sizeof(ranks), "the other ranks were not asked");
    } else if (r->not_heard_count == 0) {
        snprintf(ranks, sizeof(ranks), "every rank answered the roll call, so a rank is slow or "
                 "stuck outside this collective");
    } else {
        size_t used = (size_t)snprintf(ranks, sizeof(ranks), "rank%s not heard from: ",
                                       r->not_heard_count > 1 ? "s" : "");
        for (int i = 0; i < r->not_heard_count && used < sizeof(ranks); i++) {
            int n = snprintf(ranks + used, sizeof(ranks) - used, "%s%d", i ? ", " : "",
                             r->not_heard[i]);
            if (n < 0 || (size_t)n >= sizeof(ranks) - used) {
                snprintf(ranks + sizeof(ranks) - 5, 5, "...");
                break;
            }
            used += (size_t)n;
        }
    }
    snprintf(out, out_len, "rank %d: collective timed out %s: the %s%s has not completed after "
             "%.1f s (collective timeout %g s); %s; aborting the job",
             r->rank, where, r->what != NULL ? r->what : "collective", detail, r->waited_s,
             r->timeout_s, ranks);
}

/* ---- the watchdog thread -------------------------------------------------------------------- */

static struct {
    pthread_mutex_t lock;
    pthread_cond_t wake;
    pthread_t thread;
    int started, stop;
    double timeout_s;
    int rank, size;
    MPI_Comm world, comm;
    const struct wk_ops *ops;
    struct wk_ctx *ctx;
    /* the training thread's wait: active from enter to leave */
    int active;
    const char *what;
    long long step;
    uint64_t since_ms;
    /* roll calls from other ranks */
    int call_buf;
    MPI_Request call_req;
} wd = {.lock = PTHREAD_MUTEX_INITIALIZER, .call_req = MPI_REQUEST_NULL};

static const int answer_token = 1, call_token = 1;
static atomic_int abort_claimed;

int wk_watchdog_claim_abort(void)
{
    int expected = 0;
    return atomic_compare_exchange_strong(&abort_claimed, &expected, 1);
}

void wk_watchdog_park(void)
{
    for (;;)
        pause();
}

static void post_call_receive(void)
{
    if (MPI_Irecv(&wd.call_buf, 1, MPI_INT, MPI_ANY_SOURCE, TAG_CALL, wd.comm, &wd.call_req) !=
        MPI_SUCCESS)
        wd.call_req = MPI_REQUEST_NULL;
}

/* Answers every roll call that has arrived. Only the watchdog thread calls it. */
static void answer_roll_calls(void)
{
    while (wd.call_req != MPI_REQUEST_NULL) {
        int done = 0;
        MPI_Status st;
        if (MPI_Test(&wd.call_req, &done, &st) != MPI_SUCCESS || !done)
            return;
        MPI_Request r;
        if (MPI_Isend(&answer_token, 1, MPI_INT, st.MPI_SOURCE, TAG_ANSWER, wd.comm, &r) ==
            MPI_SUCCESS)
            MPI_Request_free(&r);
        post_call_receive();
    }
}

/* Calls every other rank and waits up to grace_ms for the answers; not_heard[] gets the silent
 * ones. 0, or -1 when the roll call could not be made. */
static int roll_call(uint64_t grace_ms, int *not_heard, int *not_heard_count)
{
    char *heard = calloc((size_t)wd.size, 1);
    if (heard == NULL)
        return -1;
    heard[wd.rank] = 1;
    int missing = wd.size - 1;
    for (int q = 0; q < wd.size; q++) {
        MPI_Request r;
        if (q != wd.rank && MPI_Isend(&call_token, 1, MPI_INT, q, TAG_CALL, wd.comm, &r) ==
                                MPI_SUCCESS)
            MPI_Request_free(&r);
    }
    int buf = 0;
    MPI_Request answer = MPI_REQUEST_NULL;
    if (MPI_Irecv(&buf, 1, MPI_INT, MPI_ANY_SOURCE, TAG_ANSWER, wd.comm, &answer) != MPI_SUCCESS) {
        free(heard);
        return -1;
    }
    uint64_t end = clock_now_ms() + grace_ms;
    while (missing > 0 && clock_now_ms() < end) {
        answer_roll_calls(); /* a rank firing at the same time asks us too */
        int done = 0;
        MPI_Status st;
        if (MPI_Test(&answer, &done, &st) != MPI_SUCCESS)
            break;
        if (!done) {
            clock_sleep_ms(ROLL_POLL_MS);
            continue;
        }
        if (st.MPI_SOURCE >= 0 && st.MPI_SOURCE < wd.size && !heard[st.MPI_SOURCE]) {
            heard[st.MPI_SOURCE] = 1;
            missing--;
        }
        if (MPI_Irecv(&buf, 1, MPI_INT, MPI_ANY_SOURCE, TAG_ANSWER, wd.comm, &answer) !=
            MPI_SUCCESS)
            break;
    }
    /* The job is about to be aborted: the receive still posted is left as it is. */
    *not_heard_count = 0;
    for (int q = 0; q < wd.size; q++)
        if (!heard[q])
            not_heard[(*not_heard_count)++] = q;
    free(heard);
    return 0;
}

static void fire(uint64_t now)
{
    struct wk_watchdog_report r = {
        .rank = wd.rank,
        .what = wd.what,
        .step = wd.step,
        .bucket = wd.ops != NULL ? wd.ops->pending_bucket(wd.ctx) : -1,
        .backend = wd.ops != NULL ? wd.ops->name : NULL,
        .waited_s = (double)(now - wd.since_ms) / 1e3,
        .timeout_s = wd.timeout_s,
    };
    const struct wk_ops *ops = wd.ops;
    struct wk_ctx *ctx = wd.ctx;
    pthread_mutex_unlock(&wd.lock); /* the training thread may leave meanwhile: too late */
    if (!wk_watchdog_claim_abort())
        wk_watchdog_park(); /* the training thread is aborting the job already */

    int *not_heard = calloc((size_t)wd.size, sizeof(int));
    double grace = wd.timeout_s * 100.0; /* a tenth, in ms */
    grace = grace < 1000.0 ? 1000.0 : grace > 5000.0 ? 5000.0 : grace;
    if (wd.size > 1 && not_heard != NULL &&
        roll_call((uint64_t)grace, not_heard, &r.not_heard_count) == 0) {
        r.roll_called = 1;
        r.not_heard = not_heard;
    }
    char text[1024];
    wk_watchdog_report_text(&r, text, sizeof(text));
    cJSON *o = wk_watchdog_report_json(&r);
    if (o != NULL)
        (void)json_print_line(stdout, o);
    cJSON_Delete(o);
    wk_error("train", "%s", text);
    fflush(stdout);
    fflush(stderr);
    if (ops != NULL)
        (void)ops->abort(ctx, BACKEND_ABORT_MS);
    free(not_heard);
    MPI_Abort(wd.world, 1);
    _exit(1);
}

static void *watch(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&wd.lock);
    while (!wd.stop) {
        uint64_t now = clock_now_ms();
        uint64_t timeout_ms = (uint64_t)(wd.timeout_s * 1e3);
        if (wd.active && now - wd.since_ms >= timeout_ms)
            fire(now); /* does not return */
        uint64_t sleep_ms = SERVICE_MS;
        if (wd.active && wd.since_ms + timeout_ms - now < sleep_ms)
            sleep_ms = wd.since_ms + timeout_ms - now;
        struct timespec until;
        clock_deadline_monotonic(&until, sleep_ms);
        pthread_cond_timedwait(&wd.wake, &wd.lock, &until);
        if (wd.stop)
            break;
        pthread_mutex_unlock(&wd.lock);
        answer_roll_calls();
        pthread_mutex_lock(&wd.lock);
    }
    pthread_mutex_unlock(&wd.lock);
    return NULL;
}

int wk_watchdog_start(double *timeout_s, const void *mpi_comm, int rank, int size)
{
    MPI_Comm world = *(const MPI_Comm *)mpi_comm;
    double agreed = *timeout_s;
    if (MPI_Bcast(&agreed, 1, MPI_DOUBLE, 0, world) != MPI_SUCCESS)
        return -EIO;
    if (agreed != *timeout_s)
        wk_warn("train", "rank %d: collective timeout %g s here, %g s on rank 0: rank 0's is used",
                rank, *timeout_s, agreed);
    *timeout_s = agreed;
    if (agreed <= 0)
        return 0;
    if (MPI_Comm_dup(world, &wd.comm) != MPI_SUCCESS) {
        wk_error("train", "rank %d: no collective watchdog: MPI_Comm_dup failed", rank);
        return -EIO;
    }
    wd.world = world;
    wd.rank = rank;
    wd.size = size;
    wd.timeout_s = agreed;
    wd.stop = 0;
    wd.active = 0;
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&wd.wake, &attr);
    pthread_condattr_destroy(&attr);
    post_call_receive();
    int e = pthread_create(&wd.thread, NULL, watch, NULL);
    if (e != 0) {
        wk_error("train", "rank %d: no collective watchdog: %s", rank, strerror(e));
        if (wd.call_req != MPI_REQUEST_NULL) {
            MPI_Cancel(&wd.call_req);
            MPI_Wait(&wd.call_req, MPI_STATUS_IGNORE);
        }
        MPI_Comm_free(&wd.comm);
        pthread_cond_destroy(&wd.wake);
        return -e;
    }
    wd.started = 1;
    return 0;
}

void wk_watchdog_backend(const struct wk_ops *ops, struct wk_ctx *ctx)
{
    if (!wd.started)
        return;
    pthread_mutex_lock(&wd.lock);
    wd.ops = ops;
    wd.ctx = ctx;
    pthread_mutex_unlock(&wd.lock);
}

void wk_watchdog_enter(const char *what, long long step)
{
    if (!wd.started)
        return;
    pthread_mutex_lock(&wd.lock);
    wd.what = what;
    wd.step = step;
    wd.since_ms = clock_now_ms();
    wd.active = 1; /* no wake-up: the thread looks at least every SERVICE_MS */
    pthread_mutex_unlock(&wd.lock);
}

void wk_watchdog_leave(void)
{
    if (!wd.started)
        return;
    pthread_mutex_lock(&wd.lock);
    wd.active = 0;
    pthread_mutex_unlock(&wd.lock);
}

void wk_watchdog_stop(void)
{
    if (!wd.started)
        return;
    pthread_mutex_lock(&wd.lock);
    wd.stop = 1;
    wd.active = 0;
    wd.ops = NULL;
    wd.ctx = NULL;
    pthread_cond_signal(&wd.wake);
    pthread_mutex_unlock(&wd.lock);
    pthread_join(wd.thread, NULL);
    if (wd.call_req != MPI_REQUEST_NULL) {
        MPI_Cancel(&wd.call_req);
        MPI_Wait(&wd.call_req, MPI_STATUS_IGNORE);
    }
    MPI_Comm_free(&wd.comm);
    pthread_cond_destroy(&wd.wake);
    wd.started = 0;
}
