/* mpijob-operator: watches MPIJob resources and drives their launcher and worker pods.
 * flags -> config -> client -> controller, until SIGTERM or SIGINT. */
#include <errno.h>
#include <getopt.h>
#include <malloc.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kube/client.h"
#include "kube/config.h"
#include "kube/events.h"
#include "kube/leaderelection.h"
#include "mpijob/controller.h"
#include "server/http.h"
#include "server/metrics.h"
#include "util/clock.h"
#include "util/log.h"

#define MAX_NAMESPACES 64
#define MPIJOB_OPERATOR_VERSION "0.1.0"
/* How long a stop waits for reconciles in flight before their requests are cut short. */
#define STOP_GRACE_MS 5000
/* How often freed memory goes back to the system (malloc_trim: a few ms at 150 MiB). */
#define TRIM_EVERY_MS 30000

struct flags {
    const char *kubeconfig, *context;
    const char *namespaces[MAX_NAMESPACES];
    size_t n_namespaces;
    int threads;
    double qps;
    int burst;
    const char *cluster_domain;
    const char *gang_scheduling;
    int max_workers;
    int leader_elect;
    const char *lease_namespace;
    int lease_duration_s, renew_deadline_s, retry_period_s;
    const char *metrics_addr, *health_addr;
    int check;
};

static void usage(FILE *out)
{
    fprintf(out,
            "Usage: mpijob-operator [options]\n"
            "\n"
            "Kubernetes operator for kubeflow.org MPIJob resources (v2beta1, v1alpha2).\n"
            "\n"
            "Options:                         default\n"
            "  --kubeconfig PATH              $KUBECONFIG, ~/.kube/config, else in-cluster\n"
            "  --context NAME                 the kubeconfig's current-context\n"
            "  --namespace NS                 every namespace (repeatable)\n"
            "  --threads N                    2 (reconcile threads)\n"
            "  --qps Q                        0: no client-side limit (the server's API Priority and\n"
            "                                 Fairness paces the operator through 429 and Retry-After);\n"
            "                                 Q > 0 caps API requests per second\n"
            "  --burst N                      30 (with --qps Q > 0)\n"
            "  --cluster-domain D             in a pod: the one its /etc/resolv.conf searches; else\n"
            "                                 none (host names end in .svc)\n"
            "  --gang-scheduling NAME         none; volcano; workload (kube-scheduler's own, Kubernetes 1.36\n"
            "                                 Workload API); or a scheduler-plugins scheduler name\n"
            "  --max-workers N                10000 (jobs asking for more are invalid)\n"
            "  --leader-elect=true|false      true (one active replica, on a Lease)\n"
            "  --lease-namespace NS           the config's namespace (in-cluster: the pod's)\n"
            "  --lease-duration S             15\n"
            "  --renew-deadline S             10\n"
            "  --retry-period S               2\n"
            "  --metrics-addr ADDR            :8080 (/metrics; 0 turns it off)\n"
            "  --health-addr ADDR             :8081 (/healthz, /readyz; 0 turns it off)\n"
            "  --log-format text|json         text\n"
            "  --check                        connect, print the server version, exit\n"
            "  -v                             verbose (debug) logging\n"
            "  -h, --help                     this help\n");
}

static int parse_int(const char *flag, const char *value, int min, int max, int *out)
{
    char *end;
    long v = strtol(value, &end, 10);
    if (!*value || *end || v < min || v > max) {
        fprintf(stderr, "mpijob-operator: %s must be an integer from %d to %d, got '%s'\n", flag, min, max, value);
        return -1;
    }
    *out = (int)v;
    return 0;
}

/* 0 to run, 1 to exit 0 (help), 2 for a usage error. */
static int parse_flags(int argc, char **argv, struct flags *f)
{
    enum { KUBECONFIG = 256, CONTEXT, NAMESPACE, THREADS, QPS, BURST, DOMAIN, GANG, MAXW, LEADER, LOGFMT, CHECK,
           LEASE_NS, LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD, METRICS_ADDR, HEALTH_ADDR };
    static const struct option opts[] = {
        {"kubeconfig", required_argument, NULL, KUBECONFIG}, {"context", required_argument, NULL, CONTEXT},
        {"namespace", required_argument, NULL, NAMESPACE},   {"threads", required_argument, NULL, THREADS},
        {"qps", required_argument, NULL, QPS},               {"burst", required_argument, NULL, BURST},
        {"cluster-domain", required_argument, NULL, DOMAIN}, {"gang-scheduling", required_argument, NULL, GANG},
        {"max-workers", required_argument, NULL, MAXW},      {"leader-elect", optional_argument, NULL, LEADER},
        {"log-format", required_argument, NULL, LOGFMT},     {"check", no_argument, NULL, CHECK},
        {"lease-namespace", required_argument, NULL, LEASE_NS},
        {"lease-duration", required_argument, NULL, LEASE_DURATION},
        {"renew-deadline", required_argument, NULL, RENEW_DEADLINE},
        {"retry-period", required_argument, NULL, RETRY_PERIOD},
        {"metrics-addr", required_argument, NULL, METRICS_ADDR},
        {"health-addr", required_argument, NULL, HEALTH_ADDR},
        {"help", no_argument, NULL, 'h'},                    {NULL, 0, NULL, 0}};
    *f = (struct flags){.threads = 2, .qps = 0, .burst = 30, .max_workers = 10000, .leader_elect = 1,
                        .lease_duration_s = 15, .renew_deadline_s = 10, .retry_period_s = 2,
                        .metrics_addr = ":8080", .health_addr = ":8081"};
    int opt;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, "hv", opts, NULL)) != -1) {
        switch (opt) {
        case KUBECONFIG: f->kubeconfig = optarg; break;
        case CONTEXT: f->context = optarg; break;
        case NAMESPACE:
            if (!*optarg || f->n_namespaces == MAX_NAMESPACES) {
                fprintf(stderr, "mpijob-operator: --namespace needs a name (at most %d)\n", MAX_NAMESPACES);
                return 2;
            }
            f->namespaces[f->n_namespaces++] = optarg;
            break;
        case THREADS:
            if (parse_int("--threads", optarg, 1, 256, &f->threads) < 0)
                return 2;
            break;
        case QPS: {
            char *end;
            f->qps = strtod(optarg, &end);
            if (!*optarg || *end || f->qps < 0 || f->qps > 100000) {
                fprintf(stderr, "mpijob-operator: --qps must be 0 (no limit) or a number up to 100000, got '%s'\n",
                        optarg);
                return 2;
            }
            break;
        }
        case BURST:
            if (parse_int("--burst", optarg, 1, 100000, &f->burst) < 0)
                return 2;
            break;
        case DOMAIN: f->cluster_domain = optarg; break;
        case GANG: f->gang_scheduling = *optarg ? optarg : NULL; break;
        case MAXW:
            if (parse_int("--max-workers", optarg, 1, 1000000, &f->max_workers) < 0)
                return 2;
            break;
        case LEADER:
            if (!optarg || strcmp(optarg, "true") == 0) {
                f->leader_elect = 1;
            } else if (strcmp(optarg, "false") == 0) {
                f->leader_elect = 0;
            } else {
                fprintf(stderr, "mpijob-operator: --leader-elect takes true or false, got '%s'\n", optarg);
                return 2;
            }
            break;
        case LEASE_NS: f->lease_namespace = optarg; break;
        case METRICS_ADDR: f->metrics_addr = optarg; break;
        case HEALTH_ADDR: f->health_addr = optarg; break;
        case LEASE_DURATION:
            if (parse_int("--lease-duration", optarg, 2, 3600, &f->lease_duration_s) < 0)
                return 2;
            break;
        case RENEW_DEADLINE:
            if (parse_int("--renew-deadline", optarg, 1, 3600, &f->renew_deadline_s) < 0)
                return 2;
            break;
        case RETRY_PERIOD:
            if (parse_int("--retry-period", optarg, 1, 3600, &f->retry_period_s) < 0)
                return 2;
            break;
        case LOGFMT:
            if (strcmp(optarg, "json") == 0)
                log_set_format(LOG_JSON);
            else if (strcmp(optarg, "text") != 0) {
                fprintf(stderr, "mpijob-operator: --log-format must be text or json, got '%s'\n", optarg);
                return 2;
            }
            break;
        case CHECK: f->check = 1; break;
        case 'v': log_set_level(LOG_DEBUG); break;
        case 'h': usage(stdout); return 1;
        default:
            fprintf(stderr, "mpijob-operator: unknown or incomplete option '%s'\n", argv[optind - 1]);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "mpijob-operator: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    if (!(f->retry_period_s < f->renew_deadline_s && f->renew_deadline_s < f->lease_duration_s)) {
        fprintf(stderr, "mpijob-operator: need --retry-period < --renew-deadline < --lease-duration\n");
        return 2;
    }
    return 0;
}

/* A kubeconfig when one is named (flag or $KUBECONFIG) or when not running in a pod; the pod's
 * service account otherwise. */
static int load_config(const struct flags *f, struct kube_config **out, char *err, size_t err_len)
{
    if (f->kubeconfig || getenv("KUBECONFIG") || !getenv("KUBERNETES_SERVICE_HOST"))
        return kube_config_load_kubeconfig(f->kubeconfig, f->context, out, err, err_len);
    return kube_config_load_in_cluster(NULL, out, err, err_len);
}

/* What the signal thread and the elector's callbacks tell the main thread. */
static struct {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool leading, lost, stopping;
    bool connected; /* the API server answered and serves MPIJobs */
    char waiting_for[512]; /* why not connected yet, for /readyz */
    bool controller_stopped;
    struct kube_client *controller_client;
    struct controller *controller; /* set once its caches are synced */
    bool leader_elect;
    struct metrics *metrics;
} state = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};

/* API requests by verb and status code, from both clients. */
static void count_request(void *ctx, const char *verb, long code, uint64_t ms)
{
    char code_text[16];
    snprintf(code_text, sizeof(code_text), "%ld", code);
    const char *const labels[] = {"verb", verb, "code", code ? code_text : "error", NULL};
    metrics_counter_add(state.metrics, "mpijob_api_requests_total", "Kubernetes API requests by verb and code.",
                        1, labels);
}

/* Ready: connected, and caches synced and reconciling or a healthy standby waiting for the
 * lease. Alive (/healthz) from the start: a replica that waits for the API server is not one to
 * restart. */
static bool is_ready(void *ctx, char *why, size_t len)
{
    pthread_mutex_lock(&state.lock);
    bool ready = !state.stopping && state.connected &&
                 (state.controller || (state.leader_elect && !state.leading && !state.lost));
    if (!ready) {
        if (state.stopping)
            snprintf(why, len, "stopping");
        else if (!state.connected)
            snprintf(why, len, "API server not reachable yet: %s", state.waiting_for);
        else
            snprintf(why, len, "%s", state.lost ? "lost the lease" : "caches not synced yet");
    }
    pthread_mutex_unlock(&state.lock);
    return ready;
}

static char *render_metrics(void *ctx)
{
    pthread_mutex_lock(&state.lock);
    if (state.controller)
        controller_update_metrics(state.controller);
    metrics_gauge_set(state.metrics, "mpijob_leader", "1 while this replica leads (or runs without election).",
                      state.leading ? 1 : 0, NULL);
    pthread_mutex_unlock(&state.lock);
    return metrics_render(state.metrics);
}

static struct http_server *serve(const char *what, const char *addr)
{
    if (!addr || !*addr || strcmp(addr, "0") == 0)
        return NULL;
    struct http_handlers h = {.ready = is_ready, .metrics = render_metrics};
    char err[256];
    struct http_server *srv = http_server_start(addr, &h, err, sizeof(err));
    if (!srv)
        log_error("cannot serve", "what=%s addr=%s error=\"%s\"", what, addr, err);
    else
        log_info("serving", "what=%s addr=%s port=%d", what, addr, http_server_port(srv));
    return srv;
}

static void stop_servers(struct http_server *metrics_server, struct http_server *health_server)
{
    http_server_stop(metrics_server);
    http_server_stop(health_server);
    metrics_free(state.metrics);
    state.metrics = NULL;
}

static void *wait_for_signal(void *arg)
{
    int sig = 0;
    sigwait(arg, &sig);
    log_info("stopping", "signal=%s", sig == SIGTERM ? "SIGTERM" : "SIGINT");
    pthread_mutex_lock(&state.lock);
    state.stopping = true;
    pthread_cond_broadcast(&state.cond);
    pthread_mutex_unlock(&state.lock);
    return NULL;
}

static void started_leading(void *ctx)
{
    log_info("leading", "%s", "");
    pthread_mutex_lock(&state.lock);
    state.leading = true;
    pthread_cond_broadcast(&state.cond);
    pthread_mutex_unlock(&state.lock);
}

/* Losing the lease stops reconciling at once: no write leaves the controller's client after
 * this, even from a reconcile in flight. */
static void stopped_leading(void *ctx)
{
    if (state.controller_client)
        kube_client_fence_writes(state.controller_client, true);
    pthread_mutex_lock(&state.lock);
    state.lost = state.leading;
    state.leading = false;
    pthread_cond_broadcast(&state.cond);
    pthread_mutex_unlock(&state.lock);
}

/* A stop lets reconciles in flight finish, but not sit out a server's Retry-After or a
 * backoff: past STOP_GRACE_MS the controller's client is shut down, which ends them. */
static void *stop_watchdog(void *arg)
{
    struct timespec until;
    clock_deadline_realtime(&until, STOP_GRACE_MS);
    pthread_mutex_lock(&state.lock);
    while (!state.controller_stopped && pthread_cond_timedwait(&state.cond, &state.lock, &until) != ETIMEDOUT)
        ;
    bool late = !state.controller_stopped;
    pthread_mutex_unlock(&state.lock);
    if (late) {
        log_warn("reconciles still running at stop; cutting their requests short", "grace_ms=%d", STOP_GRACE_MS);
        kube_client_shutdown(arg);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    /* Few threads allocate much: two malloc arenas instead of eight per core keep the resident
     * size near what the caches hold. */
    mallopt(M_ARENA_MAX, 2);
    struct flags f;
    int prc = parse_flags(argc, argv, &f);
    if (prc == 1)
        return 0;
    if (prc == 2) {
        usage(stderr);
        return 2;
    }

    /* Signals go to one thread that only records them. Blocked before any other thread exists
     * (curl, the HTTP servers, informers), so that none of them can be killed by one. */
    static sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGTERM);
    sigaddset(&stop_signals, SIGINT);
    pthread_sigmask(SIG_BLOCK, &stop_signals, NULL);
    if (!f.check) {
        pthread_t signal_thread;
        pthread_create(&signal_thread, NULL, wait_for_signal, &stop_signals);
        pthread_detach(signal_thread);
    }

    char err[512] = "";
    struct kube_config *cfg = NULL;
    int rc = load_config(&f, &cfg, err, sizeof(err));
    if (rc < 0) {
        log_error("cannot load the API server configuration", "error=\"%s\"", err);
        return 1;
    }
    /* In a pod, without --cluster-domain: the domain the kubelet put in this pod's DNS search,
     * so that the workers' search domain <job>.<ns>.svc.<domain> resolves short names. */
    static char detected_domain[256];
    if (!f.cluster_domain && cfg->ca_file) {
        char *d = NULL;
        if (kube_config_cluster_domain(NULL, cfg->namespace, &d) == 0 && strlen(d) < sizeof(detected_domain)) {
            snprintf(detected_domain, sizeof(detected_domain), "%s", d);
            f.cluster_domain = detected_domain;
            log_info("cluster domain from /etc/resolv.conf", "domain=%s", detected_domain);
        }
        free(d);
    }
    struct kube_client_options copts = {.qps = f.qps, .burst = f.burst};
    struct kube_client *client = NULL;
    rc = kube_client_new(cfg, &copts, &client);
    if (rc < 0) {
        log_error("cannot create the API client", "error=\"%s\"", error_str(rc));
        return 1;
    }

    if (f.check) {
        cJSON *version = NULL;
        struct kube_status st = {.retry_after_s = -1};
        rc = kube_request(client, "GET", "/version", NULL, NULL, NULL, &version, &st);
        if (rc < 0)
            log_error("API server unreachable", "error=\"%s\" message=\"%s\"", error_str(rc),
                      st.message ? st.message : "");
        else
            printf("connected to %s, Kubernetes %s\n", kube_client_config(client)->server,
                   cJSON_IsString(cJSON_GetObjectItem(version, "gitVersion"))
                       ? cJSON_GetObjectItem(version, "gitVersion")->valuestring
                       : "(unknown version)");
        kube_status_clear(&st);
        cJSON_Delete(version);
        kube_client_free(client);
        return rc < 0 ? 1 : 0;
    }

    state.metrics = metrics_new();
    if (!state.metrics) {
        kube_client_free(client);
        return 1;
    }
    const char *const build[] = {"version", MPIJOB_OPERATOR_VERSION, NULL};
    metrics_gauge_set(state.metrics, "mpijob_operator_build_info", "The operator's version.", 1, build);
    kube_client_set_observer(client, count_request, NULL);
    /* Health and metrics first: a kubelet probes the pod while it waits for the API server. One
     * server answers every path, so the same address for both means one server (port 0 asks for
     * a fresh port each time, so it never means the same server). */
    size_t mlen = f.metrics_addr ? strlen(f.metrics_addr) : 0;
    bool shared = f.metrics_addr && f.health_addr && strcmp(f.metrics_addr, f.health_addr) == 0 &&
                  !(mlen >= 2 && strcmp(f.metrics_addr + mlen - 2, ":0") == 0);
    struct http_server *metrics_server = serve("metrics", f.metrics_addr);
    struct http_server *health_server = shared ? NULL : serve("health", f.health_addr);
    bool want_metrics = f.metrics_addr && strcmp(f.metrics_addr, "0") != 0;
    bool want_health = !shared && f.health_addr && strcmp(f.health_addr, "0") != 0;
    if ((want_metrics && !metrics_server) || (want_health && !health_server)) {
        stop_servers(metrics_server, health_server);
        kube_client_free(client);
        return 1;
    }
    /* The CRD first: without it there is nothing to watch, and the user should hear why. An API
     * server that cannot be reached yet is waited for, with backoff and a line per attempt, alive
     * (/healthz) and not ready (/readyz says why). */
    for (uint64_t delay_ms = 1000;; delay_ms = delay_ms < 30000 ? delay_ms * 2 : 30000) {
        char why[512] = "";
        struct mpijob_options needed = {.gang_scheduler = f.gang_scheduling};
        struct server_needs needs = {.options = &needed, .leases = f.leader_elect};
        rc = controller_check_server(client, &needs, why, sizeof(why));
        if (rc == 0)
            break;
        if (rc == MPIJOB_ENOCRD || rc == MPIJOB_ENOAPI || rc == KUBE_EUNAUTHORIZED || rc == KUBE_EFORBIDDEN) {
            log_error("cannot start", "error=\"%s\"", why);
            stop_servers(metrics_server, health_server);
            kube_client_free(client);
            return 1;
        }
        pthread_mutex_lock(&state.lock);
        snprintf(state.waiting_for, sizeof(state.waiting_for), "%s", why);
        pthread_mutex_unlock(&state.lock);
        log_warn("API server not reachable yet; retrying", "server=%s error=\"%s\" retry_in_ms=%llu",
                 kube_client_config(client)->server, why, (unsigned long long)delay_ms);
        for (uint64_t slept = 0; slept < delay_ms && !state.stopping; slept += 100)
            clock_sleep_ms(100);
        if (state.stopping) {
            stop_servers(metrics_server, health_server);
            kube_client_free(client);
            return 0;
        }
    }
    pthread_mutex_lock(&state.lock);
    state.connected = true;
    pthread_mutex_unlock(&state.lock);

    state.leader_elect = f.leader_elect;

    char host[HOST_NAME_MAX + 1] = "";
    gethostname(host, sizeof(host));
    struct event_recorder *events = NULL;
    if (event_recorder_new(client, "mpijob-operator", host, &events) < 0) {
        kube_client_free(client);
        return 1;
    }

    /* Leader election runs on a client of its own: the controller's client is fenced outside
     * the elector's terms, and the elector must still be able to talk. */
    struct leader_elector *elector = NULL;
    struct kube_client *election_client = NULL;
    char identity[HOST_NAME_MAX + 32];
    snprintf(identity, sizeof(identity), "%s_%d", host[0] ? host : "mpijob-operator", (int)getpid());
    state.controller_client = client;
    if (f.leader_elect) {
        char err2[512];
        struct kube_config *ecfg = NULL;
        rc = load_config(&f, &ecfg, err2, sizeof(err2));
        if (rc == 0)
            rc = kube_client_new(ecfg, &copts, &election_client);
        if (rc == 0)
            kube_client_set_observer(election_client, count_request, NULL);
        struct leader_election_config lcfg = {
            .lease_namespace = f.lease_namespace ? f.lease_namespace : kube_client_config(client)->namespace,
            .lease_name = "mpijob-operator",
            .identity = identity,
            .lease_duration_ms = (uint64_t)f.lease_duration_s * 1000,
            .renew_deadline_ms = (uint64_t)f.renew_deadline_s * 1000,
            .retry_period_ms = (uint64_t)f.retry_period_s * 1000,
            /* The controller's writes stop when the term ends, before a standby can take
             * over, even if stopped_leading has not run yet. */
            .fenced_client = client,
            .on_started_leading = started_leading,
            .on_stopped_leading = stopped_leading,
            .ctx = &state,
        };
        if (rc == 0)
            rc = leader_elector_start(election_client, &lcfg, &elector);
        if (rc < 0) {
            log_error("leader election did not start", "error=\"%s\"", error_str(rc));
            event_recorder_free(events);
            kube_client_free(election_client);
            kube_client_free(client);
            return 1;
        }
        log_info("waiting to lead", "lease=%s/mpijob-operator identity=%s", lcfg.lease_namespace, identity);
    } else {
        state.leading = true;
    }

    pthread_mutex_lock(&state.lock);
    while (!state.leading && !state.stopping)
        pthread_cond_wait(&state.cond, &state.lock);
    bool run_controller = state.leading && !state.stopping;
    pthread_mutex_unlock(&state.lock);

    struct controller *ctl = NULL;
    int exit_code = 0;
    if (run_controller) {
        struct controller_config ccfg = {
            .client = client,
            .namespaces = f.namespaces,
            .n_namespaces = f.n_namespaces,
            .threads = f.threads,
            .options = {.cluster_domain = f.cluster_domain, .gang_scheduler = f.gang_scheduling},
            .limits = {.max_workers = f.max_workers},
            .events = events,
            .metrics = state.metrics,
        };
        rc = controller_start(&ccfg, &ctl);
        pthread_mutex_lock(&state.lock);
        state.controller = rc == 0 ? ctl : NULL;
        pthread_mutex_unlock(&state.lock);
        if (rc < 0) {
            log_error("controller did not start", "error=\"%s\"", error_str(rc));
            exit_code = 1;
        } else {
            /* The start-up lists and every pass over the jobs leave freed memory between the
             * cached objects (request bodies, parsed trees); hand it back to the system every
             * TRIM_EVERY_MS, as malloc keeps freed pages otherwise. Every 5 minutes left 30 MiB
             * more resident than the caches need at the end of a long sync (10,000 jobs). */
            pthread_mutex_lock(&state.lock);
            uint64_t next_trim = clock_now_ms() + 10000;
            while (!state.lost && !state.stopping) {
                uint64_t now = clock_now_ms();
                struct timespec until;
                clock_deadline_realtime(&until, next_trim > now ? next_trim - now : 0);
                if (pthread_cond_timedwait(&state.cond, &state.lock, &until) == ETIMEDOUT &&
                    clock_now_ms() >= next_trim) {
                    uint64_t t0 = clock_now_ms();
                    malloc_trim(0);
                    log_debug("returned freed memory to the system", "ms=%llu",
                              (unsigned long long)(clock_now_ms() - t0));
                    next_trim = clock_now_ms() + TRIM_EVERY_MS;
                }
            }
            pthread_mutex_unlock(&state.lock);
            /* Stop taking work; reconciles in flight finish (their writes are fenced if the
             * lease was lost). */
            pthread_mutex_lock(&state.lock);
            state.controller = NULL;
            bool lost = state.lost;
            pthread_mutex_unlock(&state.lock);
            /* After a lost lease nothing the controller does can land: end it at once. */
            if (lost)
                kube_client_shutdown(client);
            pthread_t watchdog;
            bool watched = pthread_create(&watchdog, NULL, stop_watchdog, client) == 0;
            controller_stop(ctl);
            pthread_mutex_lock(&state.lock);
            state.controller_stopped = true;
            pthread_cond_broadcast(&state.cond);
            pthread_mutex_unlock(&state.lock);
            if (watched)
                pthread_join(watchdog, NULL);
        }
    }
    if (state.lost && !state.stopping) {
        log_error("lost the lease; exiting so that a fresh candidate takes over", "identity=%s", identity);
        exit_code = 1;
    }
    leader_elector_stop(elector); /* releases the Lease when still leading */
    kube_client_free(election_client);
    http_server_stop(metrics_server);
    http_server_stop(health_server);
    log_info("stopped", "exit=%d", exit_code);
    event_recorder_free(events);
    kube_client_free(client);
    metrics_free(state.metrics);
    return exit_code;
}

