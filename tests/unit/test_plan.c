/* The reconcile planner, table-driven (SPEC.md sections 2 and 3): for a world (the MPIJob, its
 * status, the objects the caches show, what the controller remembers) the exact ordered
 * actions and the conditions of the new status. No server, no threads: plan.h is pure. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kube/object.h"
#include "mpijob/plan.h"
#include "mpijob/status.h"
#include "mpijob/trim.h"
#include "util/json.h"

#define NOW 1800000000 /* 2027-01-15T08:00:00Z */

/* Objects present, as a bit set. */
enum {
    SERVICE = 1,
    CONFIGMAP = 2,
    SECRET = 4,
    LAUNCHER = 8,
    PODGROUP = 16,
    WORKLOAD = 32, /* --gang-scheduling workload */
    ALL_OBJECTS = SERVICE | CONFIGMAP | SECRET | LAUNCHER,
};

struct pod_spec {
    const char *name;  /* NULL ends the list */
    const char *phase; /* Pending, Running, Succeeded, Failed */
    bool ready;
    bool deleting;
    bool foreign; /* not controlled by the job */
    bool unlabelled; /* a worker without the labels the builders give (made by someone else) */
    bool going;      /* its deletion was accepted, and the cache shows it as it was before */
};

struct plan_case {
    const char *name;
    int replicas;
    const char *run_policy;      /* extra members of spec.runPolicy, JSON, e.g. "\"suspend\":true" */
    const char *creation_policy; /* launcherCreationPolicy; NULL: AtStartup */
    const char *clean_pod_policy; /* runPolicy.cleanPodPolicy; NULL: Running */
    bool unusable_worker;        /* the parsed Worker template gets a field builders cannot edit */
    const char *status;          /* the cached status, JSON; NULL: none */
    bool settle;                 /* plan once, feed its status back, and check the second plan */
    unsigned have;               /* objects present */
    unsigned pending;            /* objects whose creation is on its way into the cache */
    unsigned foreign;            /* objects present under our names but not ours */
    const char *launcher_status; /* the launcher Job's status, JSON; NULL: {} */
    bool launcher_suspended;
    struct pod_spec workers[6];
    struct pod_spec launcher_pods[3];
    const char *counted;         /* the worker whose failure is counted already, or NULL */
    const char *refusal;         /* "Kind name" refused with "exceeded quota", or NULL */
    const char *gang;            /* options.gang_scheduler */
    const char *podgroup_spec;   /* the cached PodGroup's spec, JSON */
    const char *podgroup_status; /* the cached PodGroup's status, JSON */
    unsigned deleting;           /* objects present with a deletionTimestamp */
    const char *placement;       /* spec.placement.topologyKey; NULL: none */
    const char *running_message; /* words the Running condition's message must hold; NULL: unchecked */
    const char *expect[16];      /* the action descriptions, in order */
    const char *conditions;      /* "Type=Status/Reason ..." of the new status, in order; NULL: unchecked */
    unsigned long long requeue_ms; /* 0: unchecked */
    const char *launcher_counts;   /* status.replicaStatuses.Launcher as compact JSON; NULL: unchecked */
    const char *worker_counts;     /* status.replicaStatuses.Worker as compact JSON; NULL: unchecked */
    /* The launcher's summary (SPEC.md section 3, status.launcherSummary). */
    const char *transport;       /* spec.networking.transport; NULL: Auto */
    const char *log;             /* the log read from launcher pod pi-launcher-x (summary_parse); NULL: none read */
    const char *log_refused;     /* instead: the log could not be read, with this message */
    const char *summary;         /* status.launcherSummary as compact JSON, "(none)"; NULL: unchecked */
    const char *state;           /* status.state; NULL: unchecked */
};

/* ---- the world ------------------------------------------------------------------------ */

struct world {
    struct mpijob *job;
    cJSON *tree;
    struct mpijob_options options;
    struct plan_input in;
    struct plan_object workers[6];
    bool counted[6];
    struct kube_object *owned[6], *launcher_pods[3];
    bool owned_going[6];
    struct refusal refusal;
    struct summary_read summary;
};

static cJSON *job_tree(const struct plan_case *c)
{
    char text[4096];
    snprintf(text, sizeof(text),
             "{\"apiVersion\":\"kubeflow.org/v2beta1\",\"kind\":\"MPIJob\","
             "\"metadata\":{\"name\":\"pi\",\"namespace\":\"default\",\"uid\":\"uid-pi\",\"generation\":3},"
             "\"spec\":{\"slotsPerWorker\":1,\"launcherCreationPolicy\":\"%s\","
             "\"runPolicy\":{\"cleanPodPolicy\":\"%s\"%s%s},\"networking\":{\"transport\":\"%s\"},"
             "\"placement\":{\"topologyKey\":\"%s\"},"
             "\"mpiReplicaSpecs\":{"
             "\"Launcher\":{\"replicas\":1,\"template\":{\"spec\":{\"containers\":[{\"name\":\"l\",\"image\":\"w\","
             "\"command\":[\"mpirun\",\"pi\"]}]}}},"
             "\"Worker\":{\"replicas\":%d,\"template\":{\"spec\":{\"containers\":[{\"name\":\"w\",\"image\":\"w\"}]}}}}}}",
             c->creation_policy ? c->creation_policy : "AtStartup",
             c->clean_pod_policy ? c->clean_pod_policy : "Running", c->run_policy ? "," : "",
             c->run_policy ? c->run_policy : "", c->transport ? c->transport : "Auto",
             c->placement ? c->placement : "", c->replicas);
    cJSON *tree = cJSON_Parse(text);
    cr_assert_not_null(tree, "case %s: bad job JSON", c->name);
    if (c->status)
        cJSON_AddItemToObject(tree, "status", cJSON_Parse(c->status));
    return tree;
}

/* A cached object from its JSON text; owner: the controlling uid, or NULL. */
static struct kube_object *object(const char *name, const char *uid, const char *owner, bool deleting,
                                  cJSON *tree)
{
    cJSON *meta = json_ensure_object(tree, "metadata");
    json_set_string(meta, "name", name);
    json_set_string(meta, "namespace", "default");
    json_set_string(meta, "uid", uid);
    json_set_string(meta, "resourceVersion", "7");
    if (deleting)
        json_set_string(meta, "deletionTimestamp", "2027-01-15T07:59:00Z");
    cJSON_DeleteItemFromObject(meta, "ownerReferences");
    if (owner) {
        cJSON *refs = cJSON_AddArrayToObject(meta, "ownerReferences");
        cJSON *ref = cJSON_CreateObject();
        cJSON_AddStringToObject(ref, "uid", owner);
        cJSON_AddBoolToObject(ref, "controller", true);
        cJSON_AddItemToArray(refs, ref);
    }
    struct kube_object *o = kube_object_new(tree, 1, NULL);
    cr_assert_not_null(o);
    cJSON_Delete(tree);
    return o;
}

static struct kube_object *pod(const struct pod_spec *p, const char *owner)
{
    char text[1024], uid[300];
    bool failed = strcmp(p->phase, "Failed") == 0;
    /* "Evicting": Running, with the DisruptionTarget condition a kubelet posts before the kill */
    bool evicting = strcmp(p->phase, "Evicting") == 0;
    /* "Unschedulable": Pending, kube-scheduler's own reason why it does not fit; "GangWaiting":
     * Pending, it fits but waits for the rest of its gang (the Workload API's Permit) */
    bool unschedulable = strcmp(p->phase, "Unschedulable") == 0, waiting = strcmp(p->phase, "GangWaiting") == 0;
    char scheduled[300] = "";
    if (unschedulable || waiting)
        snprintf(scheduled, sizeof(scheduled),
                 ",{\"type\":\"PodScheduled\",\"status\":\"False\",\"reason\":\"Unschedulable\",\"message\":\"%s\"}",
                 unschedulable ? "0/3 nodes are available: 3 Insufficient cpu." :
                                 "waiting for minCount pods from a gang to be scheduled");
    /* a worker carries the labels build_worker_pod gives it */
    const char *index = strstr(p->name, "-worker-");
    char labels[300] = "";
    if (index && !p->unlabelled)
        snprintf(labels, sizeof(labels),
                 "\"metadata\":{\"labels\":{\"" LABEL_OPERATOR_NAME "\":\"" DEFAULT_OPERATOR_NAME "\",\"" LABEL_JOB_NAME
                 "\":\"pi\",\"" LABEL_JOB_ROLE "\":\"worker\",\"" LABEL_REPLICA_INDEX "\":\"%s\"}},",
                 index + strlen("-worker-"));
    snprintf(text, sizeof(text),
             "{\"kind\":\"Pod\",%s\"status\":{\"phase\":\"%s\",\"conditions\":[{\"type\":\"Ready\",\"status\":\"%s\"}%s%s]%s}}",
             labels, evicting ? "Running" : unschedulable || waiting ? "Pending" : p->phase, p->ready ? "True" : "False",
             scheduled,
             evicting ? ",{\"type\":\"DisruptionTarget\",\"status\":\"True\",\"reason\":\"TerminationByKubelet\","
                        "\"message\":\"Pod ephemeral local storage usage exceeds the total limit of containers 16Mi.\"}"
                      : "",
             failed ? ",\"containerStatuses\":[{\"name\":\"w\",\"state\":{\"terminated\":{\"exitCode\":137,"
                      "\"reason\":\"OOMKilled\",\"finishedAt\":\"2027-01-15T07:59:30Z\"}}}]"
                    : "");
    snprintf(uid, sizeof(uid), "uid-%s", p->name);
    return object(p->name, uid, p->foreign ? "uid-other" : owner, p->deleting, cJSON_Parse(text));
}

/* An object the builders make, as the cache would show it once created. */
static struct kube_object *built(const char *name, cJSON *desired, bool foreign, bool deleting)
{
    cr_assert_not_null(desired);
    char uid[300];
    snprintf(uid, sizeof(uid), "uid-%s", name);
    return object(name, uid, foreign ? "uid-other" : "uid-pi", deleting, desired);
}

static void present(struct world *w, const struct plan_case *c, unsigned bit, struct plan_object *po,
                    const char *name, cJSON *(*make)(struct world *w, const struct plan_case *c))
{
    if (c->have & bit)
        po->obj = built(name, make(w, c), c->foreign & bit, c->deleting & bit);
    po->pending = c->pending & bit;
}

static cJSON *make_service(struct world *w, const struct plan_case *c)
{
    (void)c;
    return build_service(w->job, &w->options);
}

static cJSON *make_configmap(struct world *w, const struct plan_case *c)
{
    (void)c;
    return build_configmap(w->job, &w->options, NULL, 0);
}

static cJSON *make_secret(struct world *w, const struct plan_case *c)
{
    (void)c;
    cJSON *s = cJSON_Parse("{\"kind\":\"Secret\",\"data\":{}}");
    (void)w;
    trim_secret(s); /* as the controller's cache holds it */
    return s;
}

static cJSON *make_launcher(struct world *w, const struct plan_case *c)
{
    cJSON *lj = NULL;
    cr_assert_eq(build_launcher_job(w->job, &w->options, NULL, &lj), 0);
    cJSON_DeleteItemFromObject(json_path(lj, "spec"), "suspend");
    cJSON_AddBoolToObject(json_path(lj, "spec"), "suspend", c->launcher_suspended);
    cJSON_AddItemToObject(lj, "status", cJSON_Parse(c->launcher_status ? c->launcher_status : "{}"));
    trim_launcher_job(lj); /* as the controller's cache holds it */
    return lj;
}

static cJSON *make_podgroup(struct world *w, const struct plan_case *c)
{
    cJSON *pg = build_podgroup(w->job, &w->options);
    if (c->podgroup_spec) {
        cJSON_DeleteItemFromObject(pg, "spec");
        cJSON_AddItemToObject(pg, "spec", cJSON_Parse(c->podgroup_spec));
    }
    if (c->podgroup_status)
        cJSON_AddItemToObject(pg, "status", cJSON_Parse(c->podgroup_status));
    return pg;
}

static cJSON *make_workload(struct world *w, const struct plan_case *c)
{
    (void)c;
    return build_workload(w->job, &w->options);
}

static void world_init(struct world *w, const struct plan_case *c)
{
    memset(w, 0, sizeof(*w));
    w->options.gang_scheduler = c->gang;
    w->tree = job_tree(c);
    struct mpijob_problems problems = {0};
    cr_assert_eq(mpijob_parse(w->tree, NULL, &w->job, &problems), 0, "case %s: job does not parse", c->name);
    mpijob_problems_free(&problems);
    if (c->unusable_worker) /* the parser refuses this; a job changed behind its back need not be */
        cJSON_AddItemToObject(json_path(w->job->worker.template, "spec.containers")->child, "env",
                              cJSON_CreateString("not a list"));
    struct plan_input *in = &w->in;
    *in = (struct plan_input){.job = w->job, .status = json_path(w->tree, "status"), .generation = 3,
                              .options = &w->options, .now = NOW, .workers = w->workers,
                              .worker_counted = w->counted, .gang = c->gang != NULL,
                              .workloads = c->gang && strcmp(c->gang, "workload") == 0};
    present(w, c, SERVICE, &in->service, "pi", make_service);
    present(w, c, CONFIGMAP, &in->configmap, "pi-config", make_configmap);
    present(w, c, SECRET, &in->secret, "pi-ssh", make_secret);
    present(w, c, LAUNCHER, &in->launcher, "pi-launcher", make_launcher);
    present(w, c, PODGROUP, &in->podgroup, "pi", make_podgroup);
    present(w, c, WORKLOAD, &in->workload, "pi", make_workload);
    for (int i = 0; c->workers[i].name; i++) {
        struct kube_object *o = pod(&c->workers[i], "uid-pi");
        int index = atoi(strrchr(c->workers[i].name, '-') + 1);
        if (index < c->replicas) {
            w->workers[index].obj = kube_object_ref(o);
            w->workers[index].going = c->workers[i].going;
        }
        if (!c->workers[i].foreign) {
            w->owned_going[in->n_owned_pods] = c->workers[i].going;
            w->owned[in->n_owned_pods++] = kube_object_ref(o);
        }
        if (index < 6)
            w->counted[index] = c->counted && strcmp(c->counted, c->workers[i].name) == 0;
        kube_object_unref(o);
    }
    for (int i = 0; c->launcher_pods[i].name; i++)
        w->launcher_pods[in->n_launcher_pods++] = pod(&c->launcher_pods[i], "uid-pi-launcher");
    in->owned_pods = w->owned;
    in->owned_going = w->owned_going;
    in->launcher_pods = w->launcher_pods;
    if (c->refusal) {
        sscanf(c->refusal, "%63s %255s", w->refusal.kind, w->refusal.name);
        snprintf(w->refusal.message, sizeof(w->refusal.message), "exceeded quota: q, requested: pods=1");
        in->refusal = &w->refusal;
    }
    if (c->log || c->log_refused) {
        w->summary.pod = "pi-launcher-x";
        w->summary.unreadable = c->log_refused != NULL;
        if (c->log_refused)
            snprintf(w->summary.message, sizeof(w->summary.message), "%s", c->log_refused);
        else
            w->summary.found = summary_parse(c->log, strlen(c->log), &w->summary.summary, w->summary.message,
                                             sizeof(w->summary.message));
        in->summary = &w->summary;
    }
}

static void world_free(struct world *w)
{
    struct plan_object *single[] = {&w->in.service, &w->in.configmap, &w->in.secret, &w->in.launcher,
                                    &w->in.podgroup, &w->in.workload};
    for (size_t i = 0; i < 6; i++)
        kube_object_unref(single[i]->obj);
    for (int i = 0; i < 6; i++)
        kube_object_unref(w->workers[i].obj);
    for (size_t i = 0; i < w->in.n_owned_pods; i++)
        kube_object_unref(w->owned[i]);
    for (size_t i = 0; i < w->in.n_launcher_pods; i++)
        kube_object_unref(w->launcher_pods[i]);
    mpijob_free(w->job);
    cJSON_Delete(w->tree);
}

/* ---- checking --------------------------------------------------------------------------- */

static char *describe(const struct plan *p)
{
    size_t len = 1;
    char *all = calloc(1, 1), line[512];
    for (size_t i = 0; i < p->n; i++) {
        action_describe(&p->actions[i], line, sizeof(line));
        len += strlen(line) + 1;
        all = realloc(all, len);
        strcat(all, line);
        strcat(all, "\n");
    }
    return all;
}

static char *conditions_of(const cJSON *status)
{
    char *all = calloc(1, 4096);
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(status, "conditions")) {
        char one[256];
        snprintf(one, sizeof(one), "%s%s=%s/%s", *all ? " " : "", json_string(c, "type"), json_string(c, "status"),
                 json_string(c, "reason"));
        strcat(all, one);
    }
    return all;
}

static void check(const struct plan_case *c)
{
    struct world w;
    world_init(&w, c);
    struct plan p;
    cr_assert_eq(plan_job(&w.in, &p), 0, "case %s: plan failed", c->name);
    if (c->settle) {
        /* The status written, as the cache shows it next: the second plan starts from it. */
        cJSON *status = cJSON_Duplicate(p.status, true);
        cJSON_DeleteItemFromObject(w.tree, "status");
        cJSON_AddItemToObject(w.tree, "status", status);
        w.in.status = status;
        plan_free(&p);
        cr_assert_eq(plan_job(&w.in, &p), 0);
    }
    char *got = describe(&p);
    char want[2048] = "";
    for (int i = 0; c->expect[i]; i++) {
        strcat(want, c->expect[i]);
        strcat(want, "\n");
    }
    cr_expect_str_eq(got, want, "case %s:\nplanned:\n%s\nexpected:\n%s", c->name, got, want);
    if (c->conditions) {
        char *conds = conditions_of(p.status);
        cr_expect_str_eq(conds, c->conditions, "case %s: conditions %s, expected %s", c->name, conds, c->conditions);
        free(conds);
    }
    if (c->running_message) {
        const char *m = json_string(mpijob_status_condition(p.status, MPIJOB_COND_RUNNING), "message");
        cr_expect(m && strstr(m, c->running_message), "case %s: Running says \"%s\", without \"%s\"", c->name,
                  m ? m : "(nothing)", c->running_message);
    }
    if (c->launcher_counts) {
        char *got_counts = cJSON_PrintUnformatted(json_path(p.status, "replicaStatuses.Launcher"));
        cr_expect_str_eq(got_counts ? got_counts : "(none)", c->launcher_counts, "case %s: Launcher counts", c->name);
        free(got_counts);
    }
    if (c->worker_counts) {
        char *got_counts = cJSON_PrintUnformatted(json_path(p.status, "replicaStatuses.Worker"));
        cr_expect_str_eq(got_counts ? got_counts : "(none)", c->worker_counts, "case %s: Worker counts", c->name);
        free(got_counts);
    }
    if (c->summary) {
        char *got_summary = cJSON_PrintUnformatted(json_path(p.status, "launcherSummary"));
        cr_expect_str_eq(got_summary ? got_summary : "(none)", c->summary, "case %s: launcherSummary", c->name);
        free(got_summary);
    }
    if (c->state) {
        const char *state = json_string(p.status, "state");
        cr_expect_str_eq(state ? state : "(none)", c->state, "case %s: state", c->name);
    }
    if (c->requeue_ms)
        cr_expect_eq(p.requeue_after_ms, c->requeue_ms, "case %s: requeue after %llu ms", c->name,
                     (unsigned long long)p.requeue_after_ms);
    cr_expect_eq(json_int(p.status, "observedGeneration", -1), 3, "case %s: observedGeneration", c->name);
    free(got);
    plan_free(&p);
    world_free(&w);
}

/* ---- the table ----------------------------------------------------------------------------- */

#define T0 "\"lastTransitionTime\":\"2027-01-15T07:00:00Z\",\"lastUpdateTime\":\"2027-01-15T07:00:00Z\""
#define CREATED "{\"type\":\"Created\",\"status\":\"True\",\"reason\":\"MPIJobCreated\",\"message\":\"MPIJob default/pi is created.\"," T0 "}"
#define RUNNING "{\"type\":\"Running\",\"status\":\"True\",\"reason\":\"MPIJobRunning\",\"message\":\"MPIJob default/pi is running.\"," T0 "}"
#define STARTED "\"startTime\":\"2027-01-15T07:00:00Z\""
#define STATUS_CREATED "{\"conditions\":[" CREATED "]," STARTED "}"
#define STATUS_RUNNING "{\"conditions\":[" CREATED "," RUNNING "]," STARTED "}"
#define SUCCEEDED_LONG_AGO                                                                                              \
    "{\"conditions\":[" CREATED ",{\"type\":\"Succeeded\",\"status\":\"True\",\"reason\":\"MPIJobSucceeded\"," T0 "}]," \
    STARTED ",\"completionTime\":\"2027-01-15T07:00:00Z\"}"

#define W(i, phase, ready) {"pi-worker-" #i, phase, ready, false, false}
/* A worker of an earlier run, Running and Ready while it is deleted; or whose deletion the server
 * accepted, the cache not showing it yet. */
#define TERMINATING(i) {"pi-worker-" #i, "Running", true, true, false}
#define GOING(i) {"pi-worker-" #i, "Running", true, false, false, false, true}
/* Suspended while it ran: the status a resume starts from. */
#define SUSPENDED_WAS_RUNNING                                                                                          \
    "{\"conditions\":[" CREATED ",{\"type\":\"Running\",\"status\":\"False\",\"reason\":\"MPIJobSuspended\",\"message\":"  \
    "\"MPIJob suspended\"," T0 "},{\"type\":\"Suspended\",\"status\":\"True\",\"reason\":\"MPIJobSuspended\",\"message\":"  \
    "\"MPIJob suspended\"," T0 "}]}"
/* A job whose launcher has just succeeded: this plan finishes it (and reads the summary). */
#define JUST_SUCCEEDED                                                                                                 \
    .replicas = 1, .status = "{\"conditions\":[" CREATED "," RUNNING "]," STARTED "}", .have = ALL_OBJECTS,          \
    .workers = {W(0, "Running", true)}, .launcher_status = COMPLETE,                                                \
    .launcher_pods = {{"pi-launcher-x", "Succeeded", false, false, false}}
/* mpijob-worker train's last line, as mpirun passes it to the launcher's log. */
#define SUMMARY_LINE(transport)                                                                                        \
    "{\"event\":\"summary\",\"ranks\":4,\"backend\":\"nccl\",\"device\":\"NVIDIA H100 80GB HBM3\",\"transport\":\""     \
    transport "\",\"loss_first\":2.3,\"loss_last\":0.4,\"weights_identical\":true,\"samples_per_sec\":81234.5678,"    \
    "\"step_ms\":12.6049,\"exposed_comm_ms\":1.23456,\"compute_ms\":11.37,\"steps\":200,\"global_batch\":1024}\n"
#define LOG_WITH(transport) "+ mpirun -np 4 mpijob-worker train\n{\"event\":\"start\",\"ranks\":4}\n" SUMMARY_LINE(transport)
#define SUMMARY_STATUS(transport)                                                                                      \
    "{\"pod\":\"pi-launcher-x\",\"transport\":\"" transport "\",\"backend\":\"nccl\",\"device\":\"NVIDIA H100 80GB "   \
    "HBM3\",\"ranks\":4,\"samplesPerSecond\":81234.6,\"stepMs\":12.605,\"exposedCommunicationMs\":1.235,"            \
    "\"weightsIdentical\":true}"
#define SUCCEEDED_EVENTS "write status", "event Normal MPIJobSucceeded"
#define CLEANED "delete Pod pi-worker-0" /* cleanPodPolicy Running */
/* Two or more workers go in one request, selected by the labels every worker of the job carries. */
#define WORKERS_SELECTOR                                                                                              \
    "-l training.kubeflow.org/operator-name=mpijob-operator,training.kubeflow.org/job-name=pi,"                     \
    "training.kubeflow.org/job-role=worker"
#define CLEANED_ALL_RUNNING "delete Pods " WORKERS_SELECTOR " --field-selector status.phase!=Succeeded,status.phase!=Failed"
#define CLEANED_ALL "delete Pods " WORKERS_SELECTOR
#define RUNNING_WORKERS {W(0, "Running", true), W(1, "Running", true)}
#define LAUNCHER_RUNNING {{"pi-launcher-x", "Running", true, false, false}}
#define COMPLETE_CONDITIONS "\"conditions\":[{\"type\":\"Complete\",\"status\":\"True\"}]"
#define COMPLETE "{" COMPLETE_CONDITIONS "}"
#define BACKOFF "{\"conditions\":[{\"type\":\"Failed\",\"status\":\"True\",\"reason\":\"BackoffLimitExceeded\",\"message\":\"Job has reached the specified backoff limit\"}]}"
#define BACKOFF_AT(t) "{\"conditions\":[{\"type\":\"Failed\",\"status\":\"True\",\"reason\":\"BackoffLimitExceeded\",\"message\":\"Job has reached the specified backoff limit\",\"lastTransitionTime\":\"" t "\"}]}"

static const struct plan_case cases[] = {
    {.name = "a new job: status, event, then every object in SPEC order",
     .replicas = 2,
     .expect = {"write status", "event Normal MPIJobCreated", "create Service pi", "create ConfigMap pi-config",
                "create Secret pi-ssh", "create Pod pi-worker-0", "create Pod pi-worker-1", "create Job pi-launcher alone"},
     .conditions = "Created=True/MPIJobCreated"},
    {.name = "creations on their way into the cache are not made twice",
     .replicas = 2, .status = STATUS_CREATED, .have = SERVICE, .pending = CONFIGMAP | SECRET | LAUNCHER,
     .workers = {W(0, "Pending", false)},
     .expect = {"write status", "create Pod pi-worker-1"}},
    {.name = "WaitForWorkersReady: no launcher while a worker is not Ready",
     .replicas = 2, .status = STATUS_CREATED, .creation_policy = "WaitForWorkersReady",
     .have = SERVICE | CONFIGMAP | SECRET, .workers = {W(0, "Running", true), W(1, "Running", false)},
     .expect = {"write status", "replace ConfigMap pi-config"}},
    {.name = "WaitForWorkersReady: the launcher once every worker is Ready",
     .replicas = 2, .status = STATUS_CREATED, .creation_policy = "WaitForWorkersReady",
     .have = SERVICE | CONFIGMAP | SECRET, .workers = RUNNING_WORKERS,
     .expect = {"write status", "replace ConfigMap pi-config", "create Job pi-launcher alone"}},
    {.name = "Pending pods are not active; Running needs the launcher and every worker Running",
     .replicas = 2, .status = STATUS_CREATED, .have = ALL_OBJECTS,
     .workers = {W(0, "Running", true), W(1, "Pending", false)}, .launcher_pods = LAUNCHER_RUNNING,
     .expect = {"write status", "replace ConfigMap pi-config"},
     .conditions = "Created=True/MPIJobCreated"},
    {.name = "running: status, the Running event once, the hostfile follows",
     .replicas = 2, .status = STATUS_CREATED, .have = ALL_OBJECTS, .workers = RUNNING_WORKERS,
     .launcher_pods = LAUNCHER_RUNNING,
     .expect = {"write status", "event Normal MPIJobRunning", "replace ConfigMap pi-config"},
     .conditions = "Created=True/MPIJobCreated Running=True/MPIJobRunning"},
    {.name = "steady state: a second look plans nothing",
     .replicas = 2, .status = STATUS_RUNNING, .have = ALL_OBJECTS & ~CONFIGMAP, .workers = RUNNING_WORKERS,
     .launcher_pods = LAUNCHER_RUNNING, .settle = true,
     .expect = {"create ConfigMap pi-config"}},
    /* the status that says Succeeded counts the workers it deletes as gone already: no second
     * write once the deletions show */
    {.name = "launcher Complete: Succeeded, then cleanPodPolicy Running deletes the running workers",
     .replicas = 2, .status = STATUS_RUNNING, .have = ALL_OBJECTS, .workers = RUNNING_WORKERS,
     .launcher_status = COMPLETE,
     .expect = {"write status", "event Normal MPIJobSucceeded", CLEANED_ALL_RUNNING},
     .conditions = "Created=True/MPIJobCreated Running=False/MPIJobRunning Succeeded=True/MPIJobSucceeded",
     .worker_counts = "{}"},
    {.name = "the workers deleted at the finish, seen going: the status written then stands",
     .replicas = 2, .status = STATUS_RUNNING, .have = ALL_OBJECTS,
     .workers = {GOING(0), GOING(1)}, .launcher_status = COMPLETE, .settle = true, .expect = {NULL},
     .worker_counts = "{}"},
    {.name = "cleanPodPolicy Running: the server deletes what it sees Pending or Running, in one request",
     .replicas = 3, .status = STATUS_RUNNING, .have = ALL_OBJECTS,
     .workers = {W(0, "Running", true), W(1, "Pending", false), W(2, "Succeeded", false)},
     .launcher_status = COMPLETE,
     /* a worker that ended while the job ran goes by name first (as a stopped worker, counted) */
     .expect = {"write status", "event Normal MPIJobSucceeded", "delete Pod pi-worker-2", CLEANED_ALL_RUNNING}},
    {.name = "cleanPodPolicy All: every worker, ended or not, in one request",
     .replicas = 3, .clean_pod_policy = "All", .status = SUCCEEDED_LONG_AGO, .have = ALL_OBJECTS,
     .workers = {W(0, "Running", true), W(1, "Succeeded", false), W(2, "Failed", false)},
     .launcher_status = COMPLETE, .expect = {"write status", CLEANED_ALL}}, /* the counts change */
    {.name = "cleanPodPolicy All, one worker left: deleted by name",
     .replicas = 2, .clean_pod_policy = "All", .status = STATUS_RUNNING, .have = ALL_OBJECTS,
     .workers = {W(0, "Running", true), {"pi-worker-1", "Running", false, true, false}},
     .launcher_status = COMPLETE, .expect = {"write status", "event Normal MPIJobSucceeded", CLEANED}},
    {.name = "cleanPodPolicy None: the workers stay",
     .replicas = 2, .clean_pod_policy = "None", .status = STATUS_RUNNING, .have = ALL_OBJECTS,
     .workers = RUNNING_WORKERS, .launcher_status = COMPLETE, .expect = {"write status", "event Normal MPIJobSucceeded"},
     .worker_counts = "{\"active\":2,\"ready\":2}"},
    {.name = "workers without our labels (made by someone else, adopted): each deleted by name",
     .replicas = 2, .status = STATUS_RUNNING, .have = ALL_OBJECTS,
     .workers = {W(0, "Running", true), {"pi-worker-1", "Running", true, false, false, true}},
     .launcher_status = COMPLETE,
     .expect = {"write status", "event Normal MPIJobSucceeded", "delete Pod pi-worker-0", "delete Pod pi-worker-1"}},
    {.name = "launcher out of retries: Failed with the Job's reason",
     .replicas = 1, .status = STATUS_RUNNING, .have = ALL_OBJECTS, .workers = {W(0, "Running", true)},
     .launcher_status = BACKOFF,
     .expect = {"write status", "event Warning MPIJobFailed", "delete Pod pi-worker-0"},
     .conditions = "Created=True/MPIJobCreated Running=False/MPIJobRunning Failed=True/BackoffLimitExceeded"},
    {.name = "launcher out of retries 2 s ago: the job's failure waits for a worker's, its usual cause",
     .replicas = 2, .status = STATUS_RUNNING, .have = ALL_OBJECTS, .workers = RUNNING_WORKERS,
     .launcher_status = BACKOFF_AT("2027-01-15T07:59:58Z"),
     .expect = {"write status", "replace ConfigMap pi-config"}, .requeue_ms = 3000,
     .conditions = "Created=True/MPIJobCreated Running=True/MPIJobRunning"},
    {.name = "a worker's failure seen while the launcher's settles is the job's reason",
     .replicas = 2, .run_policy = "\"backoffLimit\":0", .status = STATUS_RUNNING, .have = ALL_OBJECTS,
     .workers = {W(0, "Running", true), W(1, "Failed", false)}, .launcher_status = BACKOFF_AT("2027-01-15T07:59:58Z"),
     .expect = {"write status", "event Warning MPIJobFailed", "delete Pod pi-worker-1", "delete Pod pi-worker-0"},
     .conditions = "Created=True/MPIJobCreated Running=False/MPIJobRunning Failed=True/WorkerFailed"},
    {.name = "launcher out of retries while a worker is being evicted: the eviction is the job's reason",
     .replicas = 2, .status = STATUS_RUNNING, .have = ALL_OBJECTS,
     .workers = {W(0, "Running", true), W(1, "Evicting", false)}, .launcher_status = BACKOFF_AT("2027-01-15T07:59:59Z"),
     .expect = {"write status", "event Warning MPIJobFailed", CLEANED_ALL_RUNNING},
     .conditions = "Created=True/MPIJobCreated Running=False/MPIJobRunning Failed=True/MPIJobEvicted"},
    {.name = "launcher out of retries 5 s ago, no worker failed: Failed with the Job's reason",
     .replicas = 2, .status = STATUS_RUNNING, .have = ALL_OBJECTS, .workers = RUNNING_WORKERS,
     .launcher_status = BACKOFF_AT("2027-01-15T07:59:55Z"),
     .expect = {"write status", "event Warning MPIJobFailed", CLEANED_ALL_RUNNING},
     .conditions = "Created=True/MPIJobCreated Running=False/MPIJobRunning Failed=True/BackoffLimitExceeded"},
    {.name = "a finished job's workers are counted as they now are",
     .replicas = 2, .status = SUCCEEDED_LONG_AGO, .have = ALL_OBJECTS,
     .workers = {{"pi-worker-0", "Running", true, true, false}, W(1, "Succeeded", false)},
     .expect = {"write status"}},
    {.name = "a finished job's launcher count follows its pod, whichever event came first",
     .replicas = 1, .have = ALL_OBJECTS, .launcher_status = "{\"succeeded\":1," COMPLETE_CONDITIONS "}",
     .status = "{\"conditions\":[" CREATED ",{\"type\":\"Succeeded\",\"status\":\"True\",\"reason\":\"MPIJobSucceeded\"," T0 "}],"
               STARTED ",\"completionTime\":\"2027-01-15T07:00:00Z\",\"replicaStatuses\":{\"Launcher\":{\"active\":1,\"ready\":1}}}",
     .launcher_pods = {{"pi-launcher-x", "Succeeded", false, false, false}},
     .expect = {"write status"}, .launcher_counts = "{\"succeeded\":1}"},
    {.name = "a failed worker: Restarting, counted, then deleted so that it is made afresh",
     .replicas = 2, .run_policy = "\"backoffLimit\":3", .status = STATUS_RUNNING, .have = ALL_OBJECTS,
     .workers = {W(0, "Running", true), W(1, "Failed", false)}, .launcher_pods = LAUNCHER_RUNNING,
     .expect = {"write status", "event Warning MPIJobRestarting", "delete Pod pi-worker-1", "replace ConfigMap pi-config"},
     .conditions = "Created=True/MPIJobCreated Restarting=True/MPIJobRestarting"},
    {.name = "a worker that ended Succeeded while the job runs (sshd stopped by its node) is replaced too",
     .replicas = 2, .run_policy = "\"backoffLimit\":3", .status = STATUS_RUNNING, .have = ALL_OBJECTS,
     .workers = {W(0, "Running", true), W(1, "Succeeded", false)}, .launcher_pods = LAUNCHER_RUNNING,
     .expect = {"write status", "event Warning MPIJobRestarting", "delete Pod pi-worker-1", "replace ConfigMap pi-config"},
     .conditions = "Created=True/MPIJobCreated Restarting=True/MPIJobRestarting"},
    {.name = "a failed worker counted before: only its deletion is left",
     .replicas = 2, .run_policy = "\"backoffLimit\":3", .status = STATUS_RUNNING, .have = ALL_OBJECTS,
     .workers = {W(0, "Running", true), W(1, "Failed", false)}, .counted = "pi-worker-1", .settle = true,
     .expect = {"delete Pod pi-worker-1", "replace ConfigMap pi-config"}},
    {.name = "worker replacements past backoffLimit fail the job and clean up",
     .replicas = 2, .run_policy = "\"backoffLimit\":0", .status = STATUS_RUNNING, .have = ALL_OBJECTS,
     .workers = {W(0, "Running", true), W(1, "Failed", false)},
     .expect = {"write status", "event Warning MPIJobFailed", "delete Pod pi-worker-1", "delete Pod pi-worker-0"},
     .conditions = "Created=True/MPIJobCreated Running=False/MPIJobRunning Failed=True/WorkerFailed"},
    {.name = "suspend: Running False, workers deleted, the launcher Job suspended",
     .replicas = 2, .run_policy = "\"suspend\":true", .status = STATUS_RUNNING, .have = ALL_OBJECTS,
     .workers = RUNNING_WORKERS, .launcher_pods = LAUNCHER_RUNNING,
     .expect = {"write status", "event Normal MPIJobSuspended", "replace ConfigMap pi-config", CLEANED_ALL,
                "patch Job pi-launcher spec"},
     .conditions = "Created=True/MPIJobCreated Suspended=True/MPIJobSuspended Running=False/MPIJobSuspended"},
    {.name = "resume: workers again, startTime cleared through /status, then unsuspended",
     .replicas = 2,
     .status = "{\"conditions\":[" CREATED ",{\"type\":\"Suspended\",\"status\":\"True\",\"reason\":\"MPIJobSuspended\",\"message\":\"MPIJob suspended\"," T0 "}]}",
     .have = ALL_OBJECTS, .launcher_suspended = true, .launcher_status = "{\"startTime\":\"2027-01-15T06:00:00Z\"}",
     .expect = {"write status", "event Normal MPIJobResumed", "create Pod pi-worker-0", "create Pod pi-worker-1",
                "patch Job pi-launcher status", "patch Job pi-launcher spec"},
     .conditions = "Created=True/MPIJobCreated Suspended=False/MPIJobResumed"},
    {.name = "resume under WaitForWorkersReady: the launcher stays suspended until workers are Ready",
     .replicas = 2, .creation_policy = "WaitForWorkersReady",
     .status = "{\"conditions\":[" CREATED ",{\"type\":\"Suspended\",\"status\":\"True\",\"reason\":\"MPIJobSuspended\",\"message\":\"MPIJob suspended\"," T0 "}]}",
     .have = ALL_OBJECTS, .launcher_suspended = true,
     .expect = {"write status", "event Normal MPIJobResumed", "create Pod pi-worker-0", "create Pod pi-worker-1"}},
    /* A resume that came before the suspend's workers were gone: the cache still holds them,
     * Ready, being deleted; the new ones cannot be made under their names yet. They are of the
     * earlier run: the launcher waits, and they count nowhere. */
    {.name = "resume under WaitForWorkersReady, the old workers Terminating and Ready: the launcher stays suspended",
     .replicas = 2, .creation_policy = "WaitForWorkersReady", .status = SUSPENDED_WAS_RUNNING,
     .have = ALL_OBJECTS, .launcher_suspended = true, .launcher_status = "{\"startTime\":\"2027-01-15T07:00:00Z\"}",
     .workers = {TERMINATING(0), TERMINATING(1)},
     .launcher_pods = {{"pi-launcher-x", "Running", true, true, false}},
     .expect = {"write status", "event Normal MPIJobResumed"},
     .conditions = "Created=True/MPIJobCreated Running=False/MPIJobSuspended Suspended=False/MPIJobResumed",
     .worker_counts = "{}", .launcher_counts = "{}"},
    {.name = "resume under WaitForWorkersReady, the old workers' deletion accepted but not yet seen: the launcher stays suspended",
     .replicas = 2, .creation_policy = "WaitForWorkersReady", .status = SUSPENDED_WAS_RUNNING,
     .have = ALL_OBJECTS, .launcher_suspended = true,
     .workers = {GOING(0), GOING(1)},
     .expect = {"write status", "event Normal MPIJobResumed"}, .worker_counts = "{}"},
    {.name = "resume under WaitForWorkersReady, one new worker Ready beside an old one Terminating: still waiting",
     .replicas = 2, .creation_policy = "WaitForWorkersReady", .status = "{\"conditions\":[" CREATED "]," STARTED "}",
     .have = ALL_OBJECTS, .launcher_suspended = true,
     .workers = {W(0, "Running", true), TERMINATING(1)},
     .expect = {"write status", "replace ConfigMap pi-config"},
     .worker_counts = "{\"active\":1,\"ready\":1}"},
    {.name = "resumed, new workers Running, the old launcher pod still Terminating: not Running yet",
     .replicas = 2, .status = "{\"conditions\":[" CREATED "]," STARTED "}", .have = ALL_OBJECTS,
     .workers = RUNNING_WORKERS, .launcher_pods = {{"pi-launcher-x", "Running", true, true, false}},
     .expect = {"write status", "replace ConfigMap pi-config"},
     .conditions = "Created=True/MPIJobCreated", .launcher_counts = "{}"},
    {.name = "suspended, the workers' deletion accepted but not yet seen: not deleted again",
     .replicas = 2, .run_policy = "\"suspend\":true",
     .status = "{\"conditions\":[" CREATED ",{\"type\":\"Suspended\",\"status\":\"True\",\"reason\":\"MPIJobSuspended\",\"message\":\"MPIJob suspended\"," T0 "}]}",
     .have = ALL_OBJECTS, .launcher_suspended = true, .workers = {GOING(0), GOING(1)}, .settle = true,
     .expect = {NULL}},
    {.name = "a running job's worker being deleted leaves the hostfile and the counts",
     .replicas = 2, .status = STATUS_RUNNING, .have = ALL_OBJECTS,
     .workers = {W(0, "Running", true), TERMINATING(1)}, .launcher_pods = LAUNCHER_RUNNING,
     .expect = {"write status", "replace ConfigMap pi-config"},
     .conditions = "Created=True/MPIJobCreated Running=True/MPIJobRunning",
     .worker_counts = "{\"active\":1,\"ready\":1}"},
    {.name = "scale down 3 -> 1: the workers at indexes >= 1 go, the launcher is left alone",
     .replicas = 1, .status = STATUS_RUNNING, .have = ALL_OBJECTS,
     .workers = {W(0, "Running", true), W(1, "Running", true), W(2, "Running", true)},
     .launcher_pods = LAUNCHER_RUNNING,
     .expect = {"write status", "replace ConfigMap pi-config", "delete Pod pi-worker-1", "delete Pod pi-worker-2"}},
    {.name = "scale up 1 -> 3: the new indexes are created",
     .replicas = 3, .status = STATUS_RUNNING, .have = ALL_OBJECTS, .workers = {W(0, "Running", true)},
     .launcher_pods = LAUNCHER_RUNNING,
     .expect = {"write status", "replace ConfigMap pi-config", "create Pod pi-worker-1", "create Pod pi-worker-2"}},
    {.name = "activeDeadlineSeconds passed: Failed, the launcher and the running pods deleted",
     .replicas = 1, .run_policy = "\"activeDeadlineSeconds\":60", .status = STATUS_RUNNING, .have = ALL_OBJECTS,
     .workers = {W(0, "Running", true)},
     .expect = {"write status", "event Warning MPIJobFailed", "delete Job pi-launcher", "delete Pod pi-worker-0"},
     .conditions = "Created=True/MPIJobCreated Running=False/MPIJobRunning Failed=True/DeadlineExceeded"},
    {.name = "activeDeadlineSeconds not yet: look again when it passes",
     .replicas = 1, .run_policy = "\"activeDeadlineSeconds\":7200", .status = STATUS_CREATED,
     .have = ALL_OBJECTS, .workers = {W(0, "Pending", false)}, .settle = true,
     .expect = {NULL}, .requeue_ms = 3600 * 1000ULL},
    {.name = "ttlSecondsAfterFinished passed: the MPIJob itself is deleted",
     .replicas = 1, .run_policy = "\"ttlSecondsAfterFinished\":60", .status = SUCCEEDED_LONG_AGO, .settle = true,
     .expect = {"delete MPIJob pi"}},
    {.name = "ttlSecondsAfterFinished not yet: look again then",
     .replicas = 1, .run_policy = "\"ttlSecondsAfterFinished\":7200", .status = SUCCEEDED_LONG_AGO, .settle = true,
     .expect = {NULL}, .requeue_ms = 3600 * 1000ULL},
    {.name = "an object under our name that is not ours: reported, nothing after it made",
     .replicas = 1, .have = SERVICE, .foreign = SERVICE,
     .expect = {"write status", "event Normal MPIJobCreated", "event Warning ErrResourceExists"},
     .conditions = "Created=False/ErrResourceExists"},
    {.name = "a worker pod of another owner under our name blocks the launcher",
     .replicas = 2, .status = STATUS_CREATED, .have = SERVICE | CONFIGMAP | SECRET,
     .workers = {W(0, "Pending", false), {"pi-worker-1", "Pending", false, false, true}},
     .expect = {"write status", "event Warning ErrResourceExists"}},
    {.name = "a refused creation: ReplicaFailure with the server's message, written before the retry",
     .replicas = 2, .status = STATUS_CREATED, .have = SERVICE | CONFIGMAP | SECRET | LAUNCHER,
     .workers = {W(0, "Pending", false)}, .refusal = "Pod pi-worker-1",
     .expect = {"write status", "create Pod pi-worker-1"},
     .conditions = "Created=True/MPIJobCreated ReplicaFailure=True/FailedCreate"},
    {.name = "a refusal is over once the object exists: ReplicaFailure goes",
     .replicas = 1, .have = ALL_OBJECTS, .workers = {W(0, "Pending", false)}, .refusal = "Pod pi-worker-0",
     .status = "{\"conditions\":[" CREATED ",{\"type\":\"ReplicaFailure\",\"status\":\"True\",\"reason\":\"FailedCreate\",\"message\":\"m\"," T0 "}]," STARTED ",\"state\":\"ReplicaFailure\"}",
     .expect = {"write status"},
     .conditions = "Created=True/MPIJobCreated"},
    {.name = "a template the operator cannot edit fails the job instead of a retry for ever",
     .replicas = 1, .status = STATUS_CREATED, .have = SERVICE | CONFIGMAP | SECRET,
     .unusable_worker = true,
     .expect = {"write status", "event Warning InvalidSpec"},
     .conditions = "Created=True/MPIJobCreated Failed=True/InvalidSpec"},
    {.name = "gang scheduling: the PodGroup before the pods",
     .replicas = 1, .gang = "volcano", .status = STATUS_CREATED, .have = SERVICE | CONFIGMAP | SECRET,
     .expect = {"write status", "create PodGroup pi alone", "create Pod pi-worker-0", "create Job pi-launcher alone"}},
    {.name = "gang scheduling: the PodGroup follows schedulingPolicy",
     .replicas = 1, .gang = "volcano", .status = STATUS_CREATED, .have = ALL_OBJECTS | PODGROUP,
     .podgroup_spec = "{\"minMember\":7}", .workers = {W(0, "Pending", false)},
     .expect = {"write status", "patch PodGroup pi spec"}},
    {.name = "gang scheduling: suspend removes the PodGroup",
     .replicas = 1, .gang = "volcano", .run_policy = "\"suspend\":true", .status = STATUS_CREATED,
     .have = ALL_OBJECTS | PODGROUP, .launcher_suspended = true,
     .expect = {"write status", "event Normal MPIJobSuspended", "delete PodGroup pi"}},

    /* ---- --gang-scheduling workload: kube-scheduler's Workload API (Kubernetes 1.36) ---- */
    {.name = "Workload API: the Workload, then the PodGroup made from it, before the pods",
     .replicas = 2, .gang = "workload", .status = STATUS_CREATED, .have = SERVICE | CONFIGMAP | SECRET,
     .placement = "example.com/rack",
     .expect = {"write status", "create Workload pi alone", "create PodGroup pi alone", "create Pod pi-worker-0",
                "create Pod pi-worker-1", "create Job pi-launcher alone"}},
    {.name = "Workload API: both are immutable: a gang made for other numbers is left as it is",
     .replicas = 1, .gang = "workload", .status = STATUS_CREATED, .have = ALL_OBJECTS | PODGROUP | WORKLOAD,
     .podgroup_spec = "{\"schedulingPolicy\":{\"gang\":{\"minCount\":7}}}", .workers = {W(0, "Pending", false)},
     .expect = {"write status"}},
    {.name = "Workload API: suspend removes the PodGroup and the Workload",
     .replicas = 1, .gang = "workload", .run_policy = "\"suspend\":true", .status = STATUS_CREATED,
     .have = ALL_OBJECTS | PODGROUP | WORKLOAD, .launcher_suspended = true,
     .expect = {"write status", "event Normal MPIJobSuspended", "delete PodGroup pi", "delete Workload pi"}},
    {.name = "Workload API: a suspend's PodGroup still going is not deleted twice",
     .replicas = 1, .gang = "workload", .run_policy = "\"suspend\":true", .status = SUSPENDED_WAS_RUNNING,
     .have = ALL_OBJECTS | PODGROUP, .deleting = PODGROUP, .launcher_suspended = true, .settle = true,
     .expect = {NULL}},
    {.name = "Workload API: a resume makes no pod while the suspend's PodGroup is still going",
     .replicas = 2, .gang = "workload", .status = SUSPENDED_WAS_RUNNING, .have = ALL_OBJECTS | PODGROUP | WORKLOAD,
     .deleting = PODGROUP, .launcher_suspended = true, .requeue_ms = 5000,
     .expect = {"write status", "event Normal MPIJobResumed"}},
    {.name = "Workload API: once it is gone, a resume makes the gang again, then the pods",
     .replicas = 1, .gang = "workload", .status = SUSPENDED_WAS_RUNNING, .have = ALL_OBJECTS,
     .launcher_suspended = true,
     .expect = {"write status", "event Normal MPIJobResumed", "create Workload pi alone", "create PodGroup pi alone",
                "create Pod pi-worker-0", "patch Job pi-launcher spec"}},
    {.name = "Workload API: a gang that cannot be placed says why, quoting the scheduler",
     .replicas = 2, .gang = "workload", .status = STATUS_CREATED, .have = ALL_OBJECTS | PODGROUP | WORKLOAD,
     .podgroup_status = "{\"conditions\":[{\"type\":\"PodGroupScheduled\",\"status\":\"False\",\"reason\":"
                        "\"Unschedulable\",\"message\":\"\"}]}",
     .workers = {W(0, "GangWaiting", false), W(1, "Unschedulable", false)},
     .expect = {"write status", "event Warning GangUnschedulable"},
     .running_message = "MPIJob default/pi cannot start: kube-scheduler cannot place its gang of 3 pods (PodGroup pi) "
                        "all at once; pod pi-worker-1: 0/3 nodes are available: 3 Insufficient cpu.",
     .conditions = "Created=True/MPIJobCreated Running=False/GangUnschedulable"},
    {.name = "Workload API: the PodGroup's own words when no pod has any",
     .replicas = 1, .gang = "workload", .status = STATUS_CREATED, .have = ALL_OBJECTS | PODGROUP | WORKLOAD,
     .podgroup_status = "{\"conditions\":[{\"type\":\"PodGroupScheduled\",\"status\":\"False\",\"reason\":"
                        "\"Unschedulable\",\"message\":\"no feasible placements found\"}]}",
     .workers = {W(0, "Pending", false)},
     .expect = {"write status", "event Warning GangUnschedulable"},
     .running_message = "PodGroup pi: Unschedulable: no feasible placements found",
     .conditions = "Created=True/MPIJobCreated Running=False/GangUnschedulable"},
    {.name = "Workload API: once the gang is placed the condition goes",
     .replicas = 1, .gang = "workload", .have = ALL_OBJECTS | PODGROUP | WORKLOAD,
     .status = "{\"conditions\":[" CREATED ",{\"type\":\"Running\",\"status\":\"False\",\"reason\":"
               "\"GangUnschedulable\",\"message\":\"m\"," T0 "}]," STARTED "}",
     .podgroup_status = "{\"conditions\":[{\"type\":\"PodGroupScheduled\",\"status\":\"True\",\"reason\":"
                        "\"Scheduled\"}]}",
     .workers = {W(0, "Pending", false)},
     .expect = {"write status"}, .conditions = "Created=True/MPIJobCreated"},
    {.name = "spec.placement without the Workload API fails the job as an invalid spec",
     .replicas = 1, .gang = "volcano", .placement = "example.com/rack", .status = STATUS_CREATED,
     .have = SERVICE | CONFIGMAP | SECRET,
     .expect = {"write status", "event Warning InvalidSpec"},
     .conditions = "Created=True/MPIJobCreated Failed=True/InvalidSpec"},

    /* ---- the launcher's summary ---- */
    {.name = "summary: TCP asked and Socket used: launcherSummary and a Normal event, no mismatch",
     JUST_SUCCEEDED, .transport = "TCP", .log = LOG_WITH("Socket"),
     .expect = {SUCCEEDED_EVENTS, "event Normal TrainingSummary", CLEANED},
     .conditions = "Created=True/MPIJobCreated Running=False/MPIJobRunning Succeeded=True/MPIJobSucceeded",
     .summary = SUMMARY_STATUS("Socket"), .state = "Succeeded"},
    {.name = "summary: RDMA asked and IB used: no mismatch",
     JUST_SUCCEEDED, .transport = "RDMA", .log = LOG_WITH("IB"),
     .expect = {SUCCEEDED_EVENTS, "event Normal TrainingSummary", CLEANED},
     .conditions = "Created=True/MPIJobCreated Running=False/MPIJobRunning Succeeded=True/MPIJobSucceeded",
     .summary = SUMMARY_STATUS("IB")},
    {.name = "summary: RDMA asked and Socket used: TransportMismatch and a Warning; the state stays Succeeded",
     JUST_SUCCEEDED, .transport = "RDMA", .log = LOG_WITH("Socket"),
     .expect = {SUCCEEDED_EVENTS, "event Normal TrainingSummary", "event Warning TransportMismatch", CLEANED},
     .conditions = "Created=True/MPIJobCreated Running=False/MPIJobRunning Succeeded=True/MPIJobSucceeded "
                   "TransportMismatch=True/TransportMismatch",
     .summary = SUMMARY_STATUS("Socket"), .state = "Succeeded"},
    {.name = "summary: RDMA asked and the CPU backend (mpi) used: a mismatch",
     JUST_SUCCEEDED, .transport = "RDMA", .log = LOG_WITH("mpi"),
     .expect = {SUCCEEDED_EVENTS, "event Normal TrainingSummary", "event Warning TransportMismatch", CLEANED},
     .conditions = "Created=True/MPIJobCreated Running=False/MPIJobRunning Succeeded=True/MPIJobSucceeded "
                   "TransportMismatch=True/TransportMismatch"},
    {.name = "summary: RDMA asked and NCCL's log unclear (unknown): a mismatch",
     JUST_SUCCEEDED, .transport = "RDMA", .log = LOG_WITH("unknown"),
     .expect = {SUCCEEDED_EVENTS, "event Normal TrainingSummary", "event Warning TransportMismatch", CLEANED}},
    {.name = "summary: RDMA asked and one rank (no network at all): no mismatch",
     JUST_SUCCEEDED, .transport = "RDMA", .log = LOG_WITH("none (one rank)"),
     .expect = {SUCCEEDED_EVENTS, "event Normal TrainingSummary", CLEANED}},
    {.name = "summary: TCP asked and IB used: a mismatch",
     JUST_SUCCEEDED, .transport = "TCP", .log = LOG_WITH("IB"),
     .expect = {SUCCEEDED_EVENTS, "event Normal TrainingSummary", "event Warning TransportMismatch", CLEANED},
     .conditions = "Created=True/MPIJobCreated Running=False/MPIJobRunning Succeeded=True/MPIJobSucceeded "
                   "TransportMismatch=True/TransportMismatch"},
    {.name = "summary: TCP asked and mpi used: no mismatch",
     JUST_SUCCEEDED, .transport = "TCP", .log = LOG_WITH("mpi"),
     .expect = {SUCCEEDED_EVENTS, "event Normal TrainingSummary", CLEANED}, .summary = SUMMARY_STATUS("mpi")},
    {.name = "summary: Auto accepts whatever was used",
     JUST_SUCCEEDED, .log = LOG_WITH("IB"),
     .expect = {SUCCEEDED_EVENTS, "event Normal TrainingSummary", CLEANED}, .summary = SUMMARY_STATUS("IB")},
    {.name = "summary: a later run as asked turns an earlier run's mismatch False",
     .replicas = 1, .transport = "RDMA", .have = ALL_OBJECTS, .workers = {W(0, "Running", true)},
     .launcher_pods = {{"pi-launcher-x", "Failed", false, false, false}, {"pi-launcher-y", "Running", true, false, false}},
     .status = "{\"conditions\":[" CREATED "," RUNNING ",{\"type\":\"TransportMismatch\",\"status\":\"True\","
               "\"reason\":\"TransportMismatch\",\"message\":\"m\"," T0 "}]," STARTED ",\"state\":\"Running\"}",
     .log = LOG_WITH("IB"),
     .expect = {"write status", "event Normal TrainingSummary", "replace ConfigMap pi-config"},
     .conditions = "Created=True/MPIJobCreated Running=True/MPIJobRunning TransportMismatch=False/TransportAsRequested",
     .state = "Running"},
    {.name = "summary: a summary read after the job finished is written then",
     .replicas = 1, .status = SUCCEEDED_LONG_AGO, .have = ALL_OBJECTS, .launcher_status = COMPLETE,
     .launcher_pods = {{"pi-launcher-x", "Succeeded", false, false, false}}, .log = LOG_WITH("Socket"),
     .expect = {"write status", "event Normal TrainingSummary"}, .summary = SUMMARY_STATUS("Socket")},
    {.name = "summary: a log without a summary line (not mpijob-worker) changes nothing and says nothing",
     JUST_SUCCEEDED, .transport = "RDMA", .log = "+ mpirun -np 2 python train.py\nepoch 1 loss 0.3\n",
     .expect = {SUCCEEDED_EVENTS, CLEANED}, .summary = "(none)",
     .conditions = "Created=True/MPIJobCreated Running=False/MPIJobRunning Succeeded=True/MPIJobSucceeded"},
    {.name = "summary: a broken summary line: no status, one Normal event",
     JUST_SUCCEEDED, .transport = "RDMA", .log = "{\"event\":\"summary\",\"ranks\":4,\"transport\":\"IB\",\"samples_per\n",
     .expect = {SUCCEEDED_EVENTS, "event Normal LauncherSummaryUnreadable", CLEANED}, .summary = "(none)",
     .conditions = "Created=True/MPIJobCreated Running=False/MPIJobRunning Succeeded=True/MPIJobSucceeded"},
    {.name = "summary: a log that cannot be read: no status, one Normal event",
     JUST_SUCCEEDED, .log_refused = "forbidden: pods \"pi-launcher-x\" is forbidden: cannot get resource \"pods/log\"",
     .expect = {SUCCEEDED_EVENTS, "event Normal LauncherLogUnreadable", CLEANED}, .summary = "(none)"},
    {.name = "summary: a finished job with nothing read plans nothing",
     .replicas = 1, .settle = true, .status = SUCCEEDED_LONG_AGO, .have = ALL_OBJECTS, .launcher_status = COMPLETE,
     .launcher_pods = {{"pi-launcher-x", "Succeeded", false, false, false}},
     .expect = {NULL}},
};

/* The parameters are indexes: Criterion runs each in a new process, where the pointers inside
 * the cases would not be valid. */
ParameterizedTestParameters(plan, table)
{
    static int index[sizeof(cases) / sizeof(cases[0])];
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        index[i] = (int)i;
    return cr_make_param_array(int, index, sizeof(index) / sizeof(index[0]));
}

ParameterizedTest(int *i, plan, table)
{
    check(&cases[*i]);
}
