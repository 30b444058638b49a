/* The collective watchdog (worker/watchdog.h): its timeout's parsing and its report in-process,
 * then whole runs of build/bin/mpijob-worker train in which one rank is stopped with SIGSTOP
 * (tests/worker/stop_rank.sh): for ever, where the others must end the job within the timeout
 * plus a bounded margin, naming the step and the stopped rank; and for less than the timeout,
 * where the run must go on and succeed. The margins are generous and only catch a hang: the
 * times measured are printed, never judged finely. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runcmd.h"
#include "support/deadline.h"
#include "worker/train_args.h"
#include "worker/watchdog.h"

/* ---- in-process ------------------------------------------------------------------------------ */

Test(watchdog, timeouts_parse_as_seconds_and_bad_ones_say_why)
{
    double t = -1;
    char err[256] = "";
    cr_assert_eq(wk_watchdog_parse_timeout("30", &t, err, sizeof(err)), 0, "%s", err);
    cr_assert_float_eq(t, 30.0, 1e-12);
    cr_assert_eq(wk_watchdog_parse_timeout("2.5", &t, err, sizeof(err)), 0, "%s", err);
    cr_assert_float_eq(t, 2.5, 1e-12);
    cr_assert_eq(wk_watchdog_parse_timeout("0", &t, err, sizeof(err)), 0, "%s", err);
    cr_assert_float_eq(t, 0.0, 1e-12);
    static const char *const bad[] = {"", "-1", "soon", "1e9", "nan", "inf", "10s", " "};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err[0] = '\0';
        cr_assert_eq(wk_watchdog_parse_timeout(bad[i], &t, err, sizeof(err)), -EINVAL, "'%s' accepted", bad[i]);
        cr_assert_not_null(strstr(err, "is not a number of seconds in [0, 604800]"), "%s", err);
    }
}

static int parse(struct wk_train_args *a, char *err, size_t len, const char *flag, const char *value)
{
    char *argv[] = {"train", (char *)flag, (char *)value, NULL};
    return wk_train_args_parse(a, flag ? (value ? 3 : 2) : 1, argv, err, len);
}

Test(watchdog, the_flag_wins_over_the_variable_and_the_default_is_pytorchs)
{
    struct wk_train_args a;
    char err[256] = "";
    unsetenv(WK_COLLECTIVE_TIMEOUT_ENV);
    cr_assert_eq(parse(&a, err, sizeof(err), NULL, NULL), 0, "%s", err);
    cr_assert_float_eq(a.collective_timeout, WK_COLLECTIVE_TIMEOUT_DEFAULT_S, 1e-12);
    cr_assert_float_eq(a.collective_timeout, 600.0, 1e-12); /* torch.distributed's 10 minutes */

    setenv(WK_COLLECTIVE_TIMEOUT_ENV, "45", 1);
    cr_assert_eq(parse(&a, err, sizeof(err), NULL, NULL), 0, "%s", err);
    cr_assert_float_eq(a.collective_timeout, 45.0, 1e-12);
    cr_assert_eq(parse(&a, err, sizeof(err), "--collective-timeout", "7"), 0, "%s", err);
    cr_assert_float_eq(a.collective_timeout, 7.0, 1e-12);
    cr_assert_eq(parse(&a, err, sizeof(err), "--collective-timeout=0", NULL), 0, "%s", err);
    cr_assert_float_eq(a.collective_timeout, 0.0, 1e-12);

    setenv(WK_COLLECTIVE_TIMEOUT_ENV, "forever", 1);
    cr_assert_eq(parse(&a, err, sizeof(err), NULL, NULL), -EINVAL);
    cr_assert_not_null(strstr(err, "MPIJOB_WORKER_COLLECTIVE_TIMEOUT=forever: 'forever' is not a number of seconds"),
                       "%s", err);
    unsetenv(WK_COLLECTIVE_TIMEOUT_ENV);
    cr_assert_eq(parse(&a, err, sizeof(err), "--collective-timeout", "-5"), -EINVAL);
    cr_assert_not_null(strstr(err, "--collective-timeout: '-5' is not a number of seconds"), "%s", err);
}

Test(watchdog, the_report_names_step_bucket_backend_time_and_silent_ranks)
{
    int silent[] = {1, 3};
    struct wk_watchdog_report r = {.rank = 0, .what = "gradient allreduce", .step = 12, .bucket = 2,
                                   .backend = "nccl", .waited_s = 30.04, .timeout_s = 30,
                                   .not_heard = silent, .not_heard_count = 2, .roll_called = 1};
    char text[1024];
    wk_watchdog_report_text(&r, text, sizeof(text));
    cr_assert_str_eq(text, "rank 0: collective timed out at step 12: the gradient allreduce (bucket 2, nccl "
                           "backend) has not completed after 30.0 s (collective timeout 30 s); ranks not "
                           "heard from: 1, 3; aborting the job");
    cJSON *o = wk_watchdog_report_json(&r);
    char *line = cJSON_PrintUnformatted(o);
    cr_assert_str_eq(line, "{\"event\":\"collective_timeout\",\"rank\":0,\"step\":12,\"what\":\"gradient "
                           "allreduce\",\"bucket\":2,\"backend\":\"nccl\",\"waited_s\":30,\"timeout_s\":30,"
                           "\"not_heard_from\":[1,3]}");
    free(line);
    cJSON_Delete(o);

    /* Before the backend, outside the steps, everyone answering. */
    struct wk_watchdog_report start = {.rank = 2, .what = "backend choice agreement", .step = WK_WATCHDOG_START,
                                       .bucket = -1, .waited_s = 5, .timeout_s = 5, .roll_called = 1};
    wk_watchdog_report_text(&start, text, sizeof(text));
    cr_assert_not_null(strstr(text, "rank 2: collective timed out before the first step: the backend choice "
                                    "agreement has not completed after 5.0 s"),
                       "%s", text);
    cr_assert_not_null(strstr(text, "every rank answered the roll call"), "%s", text);
    o = wk_watchdog_report_json(&start);
    cr_assert_str_eq(cJSON_GetObjectItemCaseSensitive(o, "phase")->valuestring, "start");
    cr_assert_null(cJSON_GetObjectItemCaseSensitive(o, "step"));
    cr_assert_null(cJSON_GetObjectItemCaseSensitive(o, "bucket"));
    cJSON_Delete(o);

    struct wk_watchdog_report end = {.rank = 1, .what = "final barrier", .step = WK_WATCHDOG_END, .bucket = -1,
                                     .backend = "mpi", .waited_s = 5, .timeout_s = 5};
    wk_watchdog_report_text(&end, text, sizeof(text));
    cr_assert_not_null(strstr(text, "collective timed out after the last step: the final barrier (mpi backend)"),
                       "%s", text);
    cr_assert_not_null(strstr(text, "the other ranks were not asked"), "%s", text);
}

/* ---- runs with a rank stopped ------------------------------------------------------------------ */

struct stop_run {
    int status;
    long stopped_ms;
    char *out, *err; /* the run's own stdout and stderr */
};

static char *read_file(const char *path)
{
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "%s: %s", path, strerror(errno));
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    char *text = calloc(1, (size_t)(n > 0 ? n : 0) + 1);
    cr_assert_not_null(text);
    if (n > 0 && fread(text, 1, (size_t)n, f) != (size_t)n)
        text[0] = '\0';
    fclose(f);
    return text;
}

static void stop_rank(struct stop_run *r, int np, int victim, const char *stop_for, const char *flags)
{
    char cmd[2048];
    snprintf(cmd, sizeof(cmd), "bash '%s/tests/worker/stop_rank.sh' '%s' %d %d %s %s", runcmd_src_dir(),
             runcmd_worker_bin(), np, victim, stop_for, flags);
    char *out = NULL, *err = NULL;
    int rc = runcmd(cmd, &out, &err);
    cr_assert_eq(rc, 0, "stop_rank.sh: %d: %s %s", rc, out, err);
    char out_path[512] = "", err_path[512] = "";
    cr_assert_eq(sscanf(out, "status=%d stopped_ms=%ld out=%511s err=%511s", &r->status, &r->stopped_ms, out_path,
                        err_path),
                 4, "stop_rank.sh said: %s %s", out, err);
    r->out = read_file(out_path);
    r->err = read_file(err_path);
    cr_assert_geq(r->stopped_ms, 0, "no rank was stopped: %s\nrun's stdout:\n%s\nrun's stderr:\n%s", err, r->out,
                  r->err);
    free(out);
    free(err);
    char dir[512];
    snprintf(dir, sizeof(dir), "%s", out_path);
    char *slash = strrchr(dir, '/');
    if (slash) {
        *slash = '\0';
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
        (void)runcmd(cmd, NULL, NULL);
    }
}

static void stop_run_free(struct stop_run *r)
{
    free(r->out);
    free(r->err);
}

static bool json_list_has(const cJSON *list, int rank)
{
    const cJSON *who;
    cJSON_ArrayForEach(who, list) if (cJSON_IsNumber(who) && who->valueint == rank) return true;
    return false;
}

/* Every collective_timeout line of the run's stdout: each must name the step and the time
 * waited, and carry the roll call's list. At least one, from a rank that was not stopped, must
 * name the stopped rank. Not every one: the first rank to fire ends its roll call before it aborts
 * the job, but once a rank has aborted, mpirun's daemon sends every rank SIGCONT before its
 * SIGTERM (Open MPI's odls, so that a stopped process gets the SIGTERM), and a rank whose roll
 * call was still open then hears the stopped one answer; the stopped rank itself, woken, may
 * find its own collective overdue and say so, naming the rank that aborted. Likewise, on a
 * machine with fewer cores than ranks, the others' watchdog threads, starved by ranks spinning
 * in MPI, may miss the roll call's grace too (seen with 4 ranks on 2 busy cores): named as well,
 * which says no more than that they did not answer in time. Returns how many lines there were;
 * *named gets how many of them named the stopped rank. */
static int check_timeout_lines(const struct stop_run *r, int victim, double timeout_s, int *named)
{
    int lines = 0;
    *named = 0;
    for (const char *p = r->out; p && *p;) {
        const char *end = strchr(p, '\n');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        cJSON *o = cJSON_ParseWithLength(p, len);
        const cJSON *ev = cJSON_GetObjectItemCaseSensitive(o, "event");
        if (cJSON_IsString(ev) && strcmp(ev->valuestring, "collective_timeout") == 0) {
            lines++;
            const cJSON *rank = cJSON_GetObjectItemCaseSensitive(o, "rank");
            const cJSON *step = cJSON_GetObjectItemCaseSensitive(o, "step");
            const cJSON *what = cJSON_GetObjectItemCaseSensitive(o, "what");
            const cJSON *silent = cJSON_GetObjectItemCaseSensitive(o, "not_heard_from");
            const cJSON *waited = cJSON_GetObjectItemCaseSensitive(o, "waited_s");
            cr_assert(cJSON_IsNumber(rank), "%.*s", (int)len, p);
            cr_assert(cJSON_IsNumber(step) && step->valuedouble >= 0, "a training step: %.*s", (int)len, p);
            cr_assert(cJSON_IsString(what), "%.*s", (int)len, p);
            cr_assert(cJSON_IsNumber(waited) && waited->valuedouble >= timeout_s, "%.*s", (int)len, p);
            cr_assert(cJSON_IsArray(silent), "the roll call's list: %.*s", (int)len, p);
            if (rank->valueint == victim)
                fprintf(stderr, "watchdog: the stopped rank, woken by mpirun's teardown, timed out too: %.*s\n",
                        (int)len, p);
            else if (json_list_has(silent, victim))
                ++*named;
            else
                fprintf(stderr, "watchdog: a roll call heard rank %d, continued by mpirun's teardown: %.*s\n",
                        victim, (int)len, p);
            if (cJSON_GetArraySize(silent) > 1)
                fprintf(stderr, "watchdog: rank %d also named ranks that answered late: %.*s\n", victim, (int)len,
                        p);
        }
        cJSON_Delete(o);
        p = end ? end + 1 : NULL;
    }
    return lines;
}

/* Whether a human line of the run's stderr says the collective timed out at a step and names the
 * stopped rank among those not heard from. */
static bool human_line_names(const char *err, int victim)
{
    for (const char *p = err; p && *p;) {
        const char *end = strchr(p, '\n');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        char line[2048];
        snprintf(line, sizeof(line), "%.*s", (int)(len < sizeof(line) ? len : sizeof(line) - 1), p);
        const char *list = strstr(line, " not heard from: ");
        if (strstr(line, "collective timed out at step ") != NULL && list != NULL) {
            list += strlen(" not heard from: ");
            const char *stop = strstr(list, "; aborting the job");
            for (const char *q = list; stop != NULL && q < stop;) {
                char *after = NULL;
                long n = strtol(q, &after, 10);
                if (after == q)
                    break;
                if (n == victim)
                    return true;
                q = after;
                while (*q == ',' || *q == ' ')
                    q++;
            }
        }
        p = end ? end + 1 : NULL;
    }
    return false;
}

#define RUN_FLAGS "--backend mpi --layers 2 --hidden 96 --input 48 --output 4 --batch 64 --log-every 50"

/* 10 s, not less: with the other tests' ranks spinning beside them on 2 cores, a run's first
 * allreduce once took 3 s to complete, and a 3 s timeout fired before anything was stopped. */
static void a_stopped_rank_ends_the_job(int np, int victim)
{
    const double timeout_s = 10;
    struct stop_run r;
    char flags[256];
    snprintf(flags, sizeof(flags), RUN_FLAGS " --steps 100000000 --collective-timeout %.0f", timeout_s);
    stop_rank(&r, np, victim, "forever", flags);
    printf("watchdog, %d ranks, rank %d stopped: the job ended %.1f s after the stop (timeout %.0f s), "
           "exit status %d\n",
           np, victim, (double)r.stopped_ms / 1e3, timeout_s, r.status);
    cr_assert_neq(r.status, 124, "the job hung for the whole limit after rank %d stopped:\n%s\n%s", victim, r.out,
                  r.err);
    cr_assert_neq(r.status, 0, "%s\n%s", r.out, r.err);
    /* The timeout, the roll call's grace and mpirun's teardown; a minute of
     * margin catches a hang, not a slow machine. */
    cr_assert_lt(r.stopped_ms, (long)test_ms((uint64_t)(timeout_s * 1000) + 60000), "%s", r.err);
    int named = 0;
    int lines = check_timeout_lines(&r, victim, timeout_s, &named);
    cr_assert_geq(lines, 1, "no collective_timeout line:\n%s\n%s", r.out, r.err);
    cr_assert_geq(named, 1, "no collective_timeout line names rank %d among those not heard from:\n%s", victim,
                  r.out);
    cr_assert(human_line_names(r.err, victim),
              "no line says the collective timed out at a step with rank %d not heard from:\n%s", victim, r.err);
    stop_run_free(&r);
}

Test(watchdog_run, a_stopped_rank_of_two_ends_the_job_naming_it)
{
    a_stopped_rank_ends_the_job(2, 1);
}

Test(watchdog_run, a_stopped_rank_of_four_ends_the_job_naming_it)
{
    a_stopped_rank_ends_the_job(4, 2);
}

/* Rank 0 stopped: the ranks that fire name it, and one of them aborts the job. */
Test(watchdog_run, a_stopped_rank_0_is_named_by_the_others)
{
    a_stopped_rank_ends_the_job(2, 0);
}

/* A rank that is only slow, stopped for 2 s under a 20 s timeout, is waited for. 100,000 steps of
 * this model take 3 to 6 s, so that the stop lands mid-run on a busy machine too (20,000 once
 * ended before the rank was found). */
Test(watchdog_run, a_slow_rank_below_the_timeout_is_waited_for)
{
    struct stop_run r;
    stop_rank(&r, 2, 1, "2", RUN_FLAGS " --steps 100000 --collective-timeout 20");
    printf("watchdog, a rank stopped for 2 s under a 20 s timeout: exit status %d, %.1f s from the stop to "
           "the end\n",
           r.status, (double)r.stopped_ms / 1e3);
    cr_assert_eq(r.status, 0, "%s\n%s", r.out, r.err);
    cr_assert_null(strstr(r.out, "collective_timeout"), "%s", r.out);
    cr_assert_not_null(strstr(r.out, "\"event\":\"summary\""), "%s", r.out);
    stop_run_free(&r);
}

/* A bad value is a bad command line: exit 2 from one rank, before anything starts. */
Test(watchdog_run, a_bad_timeout_is_a_bad_command_line)
{
    char cmd[1024];
    char *out = NULL, *err = NULL;
    snprintf(cmd, sizeof(cmd), RUNCMD_MPIRUN " -np 2 -x MPIJOB_WORKER_COLLECTIVE_TIMEOUT=soon %s train " RUN_FLAGS
                                             " --steps 4",
             runcmd_worker_bin());
    int status = runcmd(cmd, &out, &err);
    cr_assert_eq(status, 2, "exit %d: %s %s", status, out, err);
    cr_assert_not_null(strstr(err, "MPIJOB_WORKER_COLLECTIVE_TIMEOUT=soon: 'soon' is not a number of seconds"),
                       "%s", err);
    free(out);
    free(err);
}
