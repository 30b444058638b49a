#include "worker/session.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "worker/diag.h"
#include "worker/nccl_log.h"
#include "worker/plugin.h"
#include "worker/watchdog.h"

#define WHY_LEN 384

static MPI_Comm world = MPI_COMM_NULL;

int wk_backend_parse(const char *s)
{
    if (s == NULL)
        return -EINVAL;
    if (strcmp(s, "auto") == 0)
        return WK_BACKEND_AUTO;
    if (strcmp(s, "nccl") == 0)
        return WK_BACKEND_NCCL;
    if (strcmp(s, "mpi") == 0)
        return WK_BACKEND_MPI;
    return -EINVAL;
}

int wk_launcher_rank(void)
{
    static const char *const names[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        const char *v = getenv(names[i]);
        if (v != NULL && v[0] != '\0')
            return atoi(v);
    }
    return 0;
}

int wk_session_start(struct wk_session *s, int *argc, char ***argv)
{
    memset(s, 0, sizeof(*s));
    int provided = 0;
    if (MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
        wk_error(NULL, "MPI_Init_thread failed");
        return -EIO;
    }
    s->mpi_started = 1;
    if (provided < MPI_THREAD_MULTIPLE) {
        wk_error(NULL, "this MPI library does not provide MPI_THREAD_MULTIPLE (got level %d); the "
                       "CPU backend's communication thread needs it",
                 provided);
        return -EIO;
    }
    world = MPI_COMM_WORLD;
    MPI_Comm_rank(world, &s->rank);
    MPI_Comm_size(world, &s->size);
    MPI_Comm local;
    MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, s->rank, MPI_INFO_NULL, &local);
    MPI_Comm_rank(local, &s->local_rank);
    MPI_Comm_size(local, &s->local_size);
    MPI_Comm_free(&local);
    return 0;
}

/* One rank's record for wk_session_placement: its host name, then each variable's value (or
 * unset), in fixed-size fields so that one MPI_Gather collects them. */
#define PLACE_FIELD 128
static const char *const placement_env[] = {WK_PLACEMENT_ENV};
#define PLACE_VARS (sizeof(placement_env) / sizeof(placement_env[0]))
#define PLACE_RECORD (PLACE_FIELD * (1 + PLACE_VARS))
#define PLACE_UNSET "\x01"

static void count_value(cJSON *counts, const char *value)
{
    cJSON *n = cJSON_GetObjectItemCaseSensitive(counts, value);
    if (n)
        cJSON_SetNumberValue(n, n->valuedouble + 1);
    else
        cJSON_AddNumberToObject(counts, value, 1);
}

cJSON *wk_session_placement(const struct wk_session *s)
{
    char mine[PLACE_RECORD];
    memset(mine, 0, sizeof(mine));
    if (gethostname(mine, PLACE_FIELD - 1) != 0)
        snprintf(mine, PLACE_FIELD, "?");
    for (size_t i = 0; i < PLACE_VARS; i++) {
        const char *v = getenv(placement_env[i]);
        snprintf(mine + PLACE_FIELD * (i + 1), PLACE_FIELD, "%s", v ? v : PLACE_UNSET);
    }
    char *all = s->rank == 0 ? calloc((size_t)s->size, PLACE_RECORD) : NULL;
    /* Rank 0 says whether it has room, so that no rank waits in a gather it skipped. */
    int ok = s->rank != 0 || all != NULL;
    wk_watchdog_enter("placement gather", WK_WATCHDOG_START);
    int failed = MPI_Bcast(&ok, 1, MPI_INT, 0, world) != MPI_SUCCESS || !ok ||
                 MPI_Gather(mine, PLACE_RECORD, MPI_CHAR, all, PLACE_RECORD, MPI_CHAR, 0, world) != MPI_SUCCESS;
    wk_watchdog_leave();
    if (failed || s->rank != 0) {
        free(all);
        return NULL;
    }
    cJSON *out = cJSON_CreateObject();
    cJSON *hosts = cJSON_AddObjectToObject(out, "hosts");
    cJSON *env = cJSON_AddObjectToObject(out, "env");
    for (int r = 0; r < s->size; r++) {
        const char *rec = all + (size_t)r * PLACE_RECORD;
        cJSON *ranks = cJSON_GetObjectItemCaseSensitive(hosts, rec);
        if (!ranks)
            ranks = cJSON_AddArrayToObject(hosts, rec);
        cJSON_AddItemToArray(ranks, cJSON_CreateNumber(r));
    }
    for (size_t i = 0; i < PLACE_VARS; i++) {
        int set = 0;
        for (int r = 0; r < s->size; r++)
            set += strcmp(all + (size_t)r * PLACE_RECORD + PLACE_FIELD * (i + 1), PLACE_UNSET) != 0;
        if (!set)
            continue;
        cJSON *counts = cJSON_AddObjectToObject(env, placement_env[i]);
        for (int r = 0; r < s->size; r++) {
            const char *v = all + (size_t)r * PLACE_RECORD + PLACE_FIELD * (i + 1);
            count_value(counts, strcmp(v, PLACE_UNSET) == 0 ? "(unset)" : v);
        }
    }
    free(all);
    return out;
}

/* Gathers every rank's one-line reason on rank 0 and joins the non-empty ones into out. */
static void gather_reasons(const struct wk_session *s, const char *mine, char *out, size_t out_len)
{
    char line[WHY_LEN];
    memset(line, 0, sizeof(line));
    snprintf(line, sizeof(line), "%s", mine);
    char *all = s->rank == 0 ? calloc((size_t)s->size, WHY_LEN) : NULL;
    wk_watchdog_enter("gather of the ranks' reasons", WK_WATCHDOG_START);
    MPI_Gather(line, WHY_LEN, MPI_CHAR, all, WHY_LEN, MPI_CHAR, 0, world);
    wk_watchdog_leave();
    if (s->rank != 0 || all == NULL) {
        if (out_len)
            out[0] = '\0';
        return;
    }
    size_t used = 0;
    out[0] = '\0';
    const char *prev = NULL;
    for (int r = 0; r < s->size; r++) {
        const char *why = all + (size_t)r * WHY_LEN;
        if (why[0] == '\0')
            continue;
        /* Ranks usually fail for the same reason: say it once with the first rank. */
        if (prev != NULL && strcmp(prev, why) == 0)
            continue;
        int n = snprintf(out + used, out_len - used, "%srank %d: %s", used ? "; " : "", r, why);
        if (n < 0 || (size_t)n >= out_len - used)
            break;
        used += (size_t)n;
        prev = why;
    }
    free(all);
}

/* *all_ok = the minimum of every rank's ok, under the collective watchdog. */
static int all_ok_of(int ok, int *all_ok, const char *what)
{
    wk_watchdog_enter(what, WK_WATCHDOG_START);
    int rc = MPI_Allreduce(&ok, all_ok, 1, MPI_INT, MPI_MIN, world);
    wk_watchdog_leave();
    return rc;
}

static void set_default_env(const char *name, const char *value)
{
    if (getenv(name) == NULL)
        setenv(name, value, 0);
}

/* Prepares NCCL's debug output: a file per rank, so the transport NCCL picked can be read. */
static void nccl_log_setup(struct wk_session *s)
{
    const char *dir = getenv("TMPDIR");
    if (dir == NULL || dir[0] == '\0')
        dir = "/tmp";
    snprintf(s->nccl_log, sizeof(s->nccl_log), "%s/mpijob-worker-nccl.%d.%d.log", dir,
             (int)getpid(), s->rank);
    unlink(s->nccl_log);
    /* The user's own NCCL_DEBUG wins; INFO for INIT and NET is what names the transport. */
    set_default_env("NCCL_DEBUG", "INFO");
    set_default_env("NCCL_DEBUG_SUBSYS", "INIT,NET");
    setenv("NCCL_DEBUG_FILE", s->nccl_log, 1);
}

/* What a backend's init is told of this process. */
static struct wk_init init_args(const struct wk_session *s, int threads)
{
    struct wk_init in;
    memset(&in, 0, sizeof(in));
    in.rank = s->rank;
    in.size = s->size;
    in.local_rank = s->local_rank;
    in.mpi_comm = &world;
    in.threads = threads;
    return in;
}

static int start_mpi(struct wk_session *s, int threads)
{
    char why[WHY_LEN] = "";
    struct wk_init in = init_args(s, threads);
    int rc = wk_backend_mpi.init(&in, &s->ctx, why, sizeof(why));
    int ok = rc == 0, all_ok = 0;
    all_ok_of(ok, &all_ok, "backend start agreement");
    if (!all_ok) {
        char reasons[1024];
        gather_reasons(s, rc == 0 ? "" : why, reasons, sizeof(reasons));
        if (s->rank == 0)
            wk_error(NULL, "the mpi backend failed to start: %s", reasons);
        return -EIO;
    }
    s->ops = &wk_backend_mpi;
    return 0;
}

int wk_session_backend(struct wk_session *s, enum wk_backend_choice choice, int threads)
{
    if (choice == WK_BACKEND_MPI)
        return start_mpi(s, threads);

    /* Step 1: can every rank load the plugin and see a GPU? */
    char why[WHY_LEN] = "";
    const struct wk_ops *gpu = wk_plugin_load(why, sizeof(why));
    if (gpu != NULL && !gpu->available(why, sizeof(why)))
        gpu = NULL;
    int ok = gpu != NULL, all_ok = 0;
    all_ok_of(ok, &all_ok, "backend choice agreement");
    if (!all_ok) {
        char reasons[1024];
        gather_reasons(s, ok ? "" : why, reasons, sizeof(reasons));
        if (choice == WK_BACKEND_NCCL) {
            if (s->rank == 0)
                wk_error(NULL, "--backend nccl: the GPU backend cannot run: %s", reasons);
            return -EIO;
        }
        if (s->rank == 0)
            snprintf(s->fallback, sizeof(s->fallback), "%s", reasons);
        return start_mpi(s, threads);
    }

    /* Step 2: rank 0 makes the NCCL id; every rank joins. */
    struct wk_init in = init_args(s, threads);
    nccl_log_setup(s);
    int id_ok = 1;
    if (s->rank == 0 && gpu->unique_id(in.nccl_id, why, sizeof(why)) < 0)
        id_ok = 0;
    wk_watchdog_enter("NCCL id broadcast", WK_WATCHDOG_START);
    MPI_Bcast(&id_ok, 1, MPI_INT, 0, world);
    if (id_ok)
        MPI_Bcast(in.nccl_id, WK_NCCL_ID_BYTES, MPI_UNSIGNED_CHAR, 0, world);
    wk_watchdog_leave();
    if (!id_ok) {
        if (s->rank == 0)
            wk_error(NULL, "ncclGetUniqueId failed: %s", why);
        return -EIO;
    }
    /* Step 3: each rank's own set-up, agreed; only then the collective connect, which would
     * wait for ever on a rank that is not coming. */
    for (int step = 0; step < 2; step++) {
        why[0] = '\0';
        int rc;
        if (step == 0) {
            rc = gpu->init(&in, &s->ctx, why, sizeof(why));
        } else { /* the collective: NCCL's bootstrap waits for every rank */
            wk_watchdog_enter("NCCL communicator set-up (ncclCommInitRank)", WK_WATCHDOG_START);
            rc = gpu->connect(s->ctx, why, sizeof(why));
            wk_watchdog_leave();
        }
        ok = rc == 0;
        all_ok_of(ok, &all_ok, step == 0 ? "backend start agreement" : "NCCL connect agreement");
        if (!all_ok) {
            char reasons[1024];
            gather_reasons(s, ok ? "" : why, reasons, sizeof(reasons));
            if (s->rank == 0)
                wk_error(NULL, "the nccl backend failed to start: %s", reasons);
            if (s->ctx != NULL) {
                gpu->fini(s->ctx);
                s->ctx = NULL;
            }
            return -EIO;
        }
    }
    s->ops = gpu;
    return 0;
}

const char *wk_session_transport(const struct wk_session *s, char *out, size_t out_len)
{
    if (strcmp(s->ops->name, "mpi") == 0) {
        snprintf(out, out_len, "mpi");
        return out;
    }
    /* Alone, NCCL connects to nobody, though its log still names the network it loaded. */
    if (s->size == 1) {
        snprintf(out, out_len, "none (one rank)");
        return out;
    }
    return wk_nccl_transport_from_file(s->nccl_log, out, out_len);
}

int wk_session_agree(struct wk_session *s, int status)
{
    int ok = status == 0, all_ok = 0;
    if (all_ok_of(ok, &all_ok, "agreement between the ranks") != MPI_SUCCESS)
        return -EIO;
    (void)s;
    return all_ok ? 0 : -ECANCELED; /* another rank failed */
}

/* Seconds MPI_Finalize may take: MPIJOB_WORKER_FINALIZE_TIMEOUT, else the default; 0: none. */
static int finalize_timeout_s(void)
{
    const char *v = getenv("MPIJOB_WORKER_FINALIZE_TIMEOUT");
    if (v == NULL || v[0] == '\0')
        return WK_FINALIZE_TIMEOUT_S;
    char *end = NULL;
    long t = strtol(v, &end, 10);
    if (end == v || *end != '\0' || t < 0 || t > 86400) {
        wk_error(NULL, "MPIJOB_WORKER_FINALIZE_TIMEOUT=%s is not a number of seconds in [0, 86400]; "
                 "using %d", v, WK_FINALIZE_TIMEOUT_S);
        return WK_FINALIZE_TIMEOUT_S;
    }
    return (int)t;
}

struct finalize_guard {
    int seconds, status, rank;
};

static void *finalize_watchdog(void *arg)
{
    const struct finalize_guard *g = arg;
    struct timespec left = {g->seconds, 0};
    while (nanosleep(&left, &left) != 0 && errno == EINTR) {
    }
    wk_error(NULL, "rank %d: MPI_Finalize has not returned after %d s, though every rank has "
             "finished its work; exiting with status %d without it", g->rank, g->seconds,
             g->status);
    fflush(stdout);
    fflush(stderr);
    _exit(g->status);
    return NULL;
}

void wk_session_end(struct wk_session *s, int status)
{
    wk_watchdog_backend(NULL, NULL); /* before the context goes */
    if (s->ops != NULL && s->ctx != NULL)
        s->ops->fini(s->ctx);
    s->ctx = NULL;
    s->ops = NULL;
    if (s->mpi_started) {
        int finalized = 0;
        MPI_Finalized(&finalized);
        if (!finalized) {
            /* Every rank reaches MPI_Finalize at about the same time; then the watchdog. With
             * Debian 12's MPICH (4.0, over UCX's TCP transport) a rank's endpoint close in
             * MPI_Finalize can wait for ever on a peer that has closed its own and gone on
             * (2 ranks in 2 pods: 1 job in 7 to 24, the training done and reported). */
            if (world != MPI_COMM_NULL) {
                wk_watchdog_enter("final barrier", WK_WATCHDOG_END);
                MPI_Barrier(world);
                wk_watchdog_leave();
            }
            wk_watchdog_stop();
            static struct finalize_guard guard;
            guard.seconds = finalize_timeout_s();
            guard.status = status;
            guard.rank = s->rank;
            pthread_t t;
            pthread_attr_t attr;
            if (guard.seconds > 0 && pthread_attr_init(&attr) == 0) {
                pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
                int e = pthread_create(&t, &attr, finalize_watchdog, &guard);
                if (e != 0)
                    wk_error(NULL, "rank %d: no watchdog for MPI_Finalize: %s", s->rank,
                             strerror(e));
                pthread_attr_destroy(&attr);
            }
            MPI_Finalize();
        }
        s->mpi_started = 0;
    }
}

void wk_session_abort(struct wk_session *s, int code, const char *msg)
{
    if (!wk_watchdog_claim_abort())
        wk_watchdog_park(); /* the collective watchdog is aborting the job and has said why */
    wk_error(NULL, "rank %d: %s", s->rank, msg);
    MPI_Abort(world == MPI_COMM_NULL ? MPI_COMM_WORLD : world, code);
    exit(code);
}
