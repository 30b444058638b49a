/* The desired objects of one MPIJob (SPEC.md section 2).
 *
 * Pod templates are copied whole and edited in place, so whatever the user wrote and the
 * operator does not own (unknown fields included) reaches the pod as written. What the
 * operator owns: the name, namespace, ownerReferences, our label keys, hostname, subdomain,
 * restartPolicy and, with gang scheduling, schedulerName plus the scheduler's group key. What
 * it only adds: environment variables, volumes and mounts, a DNS search domain and the sshd
 * command; a variable or a mount path that the template already has stays the template's. */
#include "mpijob/builders.h"

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "kube/errors.h"
#include "mpijob/hostfile.h"
#include "util/json.h"
#include "util/path.h"

#define SSH_VOLUME "ssh-auth"
#define CONFIG_VOLUME "mpi-job-config"
#define HOSTFILE_KEY "hostfile"
#define DISCOVER_HOSTS_KEY "discover_hosts.sh"
#define SSH_PRIVATE_KEY "ssh-privatekey" /* the keys kubernetes.io/ssh-auth defines */
#define SSH_PUBLIC_KEY "ssh-publickey"
#define SSH_KEY_MODE 0600       /* sshd refuses keys that others can read */
#define HOSTFILE_MODE 0444
#define DISCOVER_HOSTS_MODE 0555
/* ConnectionAttempts rides out a worker whose sshd starts a little after its pod is Running;
 * ConnectTimeout bounds each attempt at a worker that does not answer at all (else the kernel's
 * two minutes, ten times over). ServerAlive* end an ssh session whose worker has not answered
 * for 30 s (cut off by the network, its node gone): mpirun starts each worker's daemon through
 * one and counts the daemon lost when it ends, which ends the run. Without them a worker cut off
 * mid-run held mpirun until the kernel gave up on its TCP connection, about 15 minutes
 * (docs/internals/real-nodes.md, "Faults"). */
#define SSH_CONNECT_ARGS                                                                                     \
    "-o ConnectionAttempts=10 -o ConnectTimeout=10 -o ServerAliveInterval=10 -o ServerAliveCountMax=3"
#define SSH_PORT_NAME "mpijob-ssh"
#define ENV_ROLE "K_MPI_JOB_ROLE"

const struct kube_resource MPIJOB_RESOURCE_V2BETA1 = {MPIJOB_GROUP, "v2beta1", "mpijobs",
                                                      MPIJOB_KIND, true};
const struct kube_resource PODGROUP_VOLCANO = {"scheduling.volcano.sh", "v1beta1", "podgroups",
                                               "PodGroup", true};
const struct kube_resource PODGROUP_SCHED_PLUGINS = {"scheduling.x-k8s.io", "v1alpha1",
                                                     "podgroups", "PodGroup", true};
const struct kube_resource PODGROUP_WORKLOAD_API = {"scheduling.k8s.io", "v1alpha2", "podgroups",
                                                    "PodGroup", true};
const struct kube_resource WORKLOADS = {"scheduling.k8s.io", "v1alpha2", "workloads", "Workload",
                                        true};

/* ---- metadata ------------------------------------------------------------------------------ */

static const char *operator_name(const struct mpijob_options *o)
{
    return o && o->operator_name && o->operator_name[0] ? o->operator_name : DEFAULT_OPERATOR_NAME;
}

cJSON *build_labels(const struct mpijob *job, const struct mpijob_options *o, const char *role,
                    int replica_index)
{
    cJSON *labels = cJSON_CreateObject();
    int rc = labels ? 0 : -ENOMEM;
    if (rc == 0)
        rc = json_put_string(labels, LABEL_OPERATOR_NAME, operator_name(o));
    if (rc == 0)
        rc = json_put_string(labels, LABEL_JOB_NAME, job->name);
    if (rc == 0 && role)
        rc = json_put_string(labels, LABEL_JOB_ROLE, role);
    if (rc == 0 && replica_index >= 0) {
        char index[16];
        snprintf(index, sizeof(index), "%d", replica_index);
        rc = json_put_string(labels, LABEL_REPLICA_INDEX, index);
    }
    if (rc < 0) {
        cJSON_Delete(labels);
        return NULL;
    }
    return labels;
}

cJSON *build_owner_reference(const struct mpijob *job)
{
    char api_version[64];
    snprintf(api_version, sizeof(api_version), "%s/%s", MPIJOB_RESOURCE_V2BETA1.group,
             MPIJOB_RESOURCE_V2BETA1.version);
    cJSON *ref = cJSON_CreateObject();
    int rc = ref ? 0 : -ENOMEM;
    if (rc == 0)
        rc = json_put_string(ref, "apiVersion", api_version);
    if (rc == 0)
        rc = json_put_string(ref, "kind", MPIJOB_KIND);
    if (rc == 0)
        rc = json_put_string(ref, "name", job->name);
    if (rc == 0)
        rc = json_put_string(ref, "uid", job->uid ? job->uid : "");
    if (rc == 0)
        rc = json_put_bool(ref, "controller", true);
    if (rc == 0)
        rc = json_put_bool(ref, "blockOwnerDeletion", true);
    if (rc < 0) {
        cJSON_Delete(ref);
        return NULL;
    }
    return ref;
}

static int put_owner_references(const struct mpijob *job, cJSON *meta)
{
    cJSON *refs = cJSON_CreateArray();
    int rc = refs ? json_append(refs, build_owner_reference(job)) : -ENOMEM;
    if (rc < 0) {
        cJSON_Delete(refs);
        return rc;
    }
    return json_put(meta, "ownerReferences", refs);
}

/* {apiVersion, kind, metadata: {name, namespace, labels, ownerReferences}}. */
static cJSON *new_object(const struct mpijob *job, const struct mpijob_options *o,
                         const char *api_version, const char *kind, const char *name,
                         const char *role)
{
    cJSON *obj = cJSON_CreateObject(), *meta = NULL;
    int rc = obj ? 0 : -ENOMEM;
    if (rc == 0)
        rc = json_put_string(obj, "apiVersion", api_version);
    if (rc == 0)
        rc = json_put_string(obj, "kind", kind);
    if (rc == 0)
        rc = json_child(obj, "metadata", false, &meta);
    if (rc == 0)
        rc = json_put_string(meta, "name", name);
    if (rc == 0)
        rc = json_put_string(meta, "namespace", job->namespace);
    if (rc == 0)
        rc = json_put(meta, "labels", build_labels(job, o, role, -1));
    if (rc == 0)
        rc = put_owner_references(job, meta);
    if (rc < 0) {
        cJSON_Delete(obj);
        return NULL;
    }
    return obj;
}

/* ---- gang scheduling ----------------------------------------------------------------------- */

enum gang { GANG_NONE, GANG_VOLCANO, GANG_SCHED_PLUGINS, GANG_WORKLOAD };

static enum gang gang_of(const struct mpijob_options *o)
{
    if (!o || !o->gang_scheduler || !o->gang_scheduler[0])
        return GANG_NONE;
    if (strcmp(o->gang_scheduler, GANG_SCHEDULER_VOLCANO) == 0)
        return GANG_VOLCANO;
    return strcmp(o->gang_scheduler, GANG_SCHEDULER_WORKLOAD) == 0 ? GANG_WORKLOAD : GANG_SCHED_PLUGINS;
}

const struct kube_resource *podgroup_resource(const struct mpijob_options *o)
{
    switch (gang_of(o)) {
    case GANG_VOLCANO: return &PODGROUP_VOLCANO;
    case GANG_SCHED_PLUGINS: return &PODGROUP_SCHED_PLUGINS;
    case GANG_WORKLOAD: return &PODGROUP_WORKLOAD_API;
    case GANG_NONE: break;
    }
    return NULL;
}

const struct kube_resource *workload_resource(const struct mpijob_options *o)
{
    return gang_of(o) == GANG_WORKLOAD ? &WORKLOADS : NULL;
}

bool mpijob_launcher_in_gang(const struct mpijob *job, const struct mpijob_options *o)
{
    return gang_of(o) != GANG_WORKLOAD || job->launcher_creation_policy == LAUNCHER_AT_STARTUP;
}

int mpijob_gang_size(const struct mpijob *job, const struct mpijob_options *o)
{
    int workers = job->worker.replicas > 0 ? job->worker.replicas : 0;
    int min = job->run_policy.scheduling.min_available;
    if (!mpijob_launcher_in_gang(job, o))
        return min >= 1 && min < workers ? min : workers > 0 ? workers : 1;
    return min >= 0 ? min : workers + 1;
}

/* The scheduler name and the key by which the scheduler finds the pod's group. Ours win: a
 * pod that another scheduler places would never join the gang. */
static int join_gang(const struct mpijob *job, const struct mpijob_options *o, bool launcher, cJSON *meta,
                     cJSON *spec)
{
    enum gang g = gang_of(o);
    cJSON *map;
    int rc = 0;
    if (g == GANG_WORKLOAD) {
        /* The scheduler finds the group by this name in the pod's namespace. */
        if (launcher && !mpijob_launcher_in_gang(job, o))
            return 0;
        rc = json_child(spec, "schedulingGroup", false, &map);
        if (rc == 0)
            rc = json_put_string(map, "podGroupName", job->name);
    } else if (g == GANG_VOLCANO) {
        rc = json_put_string(spec, "schedulerName", GANG_SCHEDULER_VOLCANO);
        if (rc == 0)
            rc = json_child(meta, "annotations", false, &map);
        if (rc == 0)
            rc = json_put_string(map, VOLCANO_GROUP_ANNOTATION, job->name);
    } else if (g == GANG_SCHED_PLUGINS) {
        rc = json_put_string(spec, "schedulerName", o->gang_scheduler);
        if (rc == 0)
            rc = json_child(meta, "labels", false, &map);
        if (rc == 0)
            rc = json_put_string(map, SCHED_PLUGINS_GROUP_LABEL, job->name);
    }
    return rc;
}

/* Volcano reads the group's priority from the PodGroup: the policy's class, else the one the
 * launcher or worker template asks for, as the reference operator does. */
static const char *podgroup_priority_class(const struct mpijob *job)
{
    const char *s = job->run_policy.scheduling.priority_class;
    const cJSON *templates[] = {job->launcher.template, job->worker.template};
    for (size_t i = 0; (!s || !s[0]) && i < 2; i++)
        s = json_string(templates[i], "spec.priorityClassName");
    return s && s[0] ? s : NULL;
}

/* What a PodGroupTemplate and the PodGroup made from it share: schedulingPolicy.gang.minCount,
 * schedulingConstraints.topology (spec.placement.topologyKey) and priorityClassName. The
 * schedule timeout has no field in this API: kube-scheduler waits 5 minutes in Permit, fixed. */
static int put_gang_policy(const struct mpijob *job, const struct mpijob_options *o, cJSON *spec)
{
    cJSON *policy = NULL, *gang = NULL;
    int rc = json_child(spec, "schedulingPolicy", false, &policy);
    if (rc == 0)
        rc = json_child(policy, "gang", false, &gang);
    if (rc == 0)
        rc = json_put_number(gang, "minCount", mpijob_gang_size(job, o));
    if (rc == 0 && job->placement.topology_key) {
        cJSON *constraints = NULL, *topology = NULL, *key = cJSON_CreateObject();
        rc = key ? json_put_string(key, "key", job->placement.topology_key) : -ENOMEM;
        if (rc == 0)
            rc = json_child(spec, "schedulingConstraints", false, &constraints);
        if (rc == 0)
            rc = json_child(constraints, "topology", true, &topology);
        if (rc == 0) {
            rc = json_append(topology, key);
            key = NULL;
        }
        cJSON_Delete(key);
    }
    const char *priority = podgroup_priority_class(job);
    if (rc == 0 && priority)
        rc = json_put_string(spec, "priorityClassName", priority);
    return rc;
}

cJSON *build_workload(const struct mpijob *job, const struct mpijob_options *o)
{
    if (gang_of(o) != GANG_WORKLOAD)
        return NULL;
    char api_version[128];
    snprintf(api_version, sizeof(api_version), "%s/%s", WORKLOADS.group, WORKLOADS.version);
    cJSON *wl = new_object(job, o, api_version, WORKLOADS.kind, job->name, NULL), *spec = NULL;
    cJSON *ref = NULL, *templates = NULL, *tmpl = NULL;
    int rc = wl ? json_child(wl, "spec", false, &spec) : -ENOMEM;
    if (rc == 0)
        rc = json_child(spec, "controllerRef", false, &ref);
    if (rc == 0)
        rc = json_put_string(ref, "apiGroup", MPIJOB_GROUP);
    if (rc == 0)
        rc = json_put_string(ref, "kind", MPIJOB_KIND);
    if (rc == 0)
        rc = json_put_string(ref, "name", job->name);
    if (rc == 0)
        rc = json_child(spec, "podGroupTemplates", true, &templates);
    if (rc == 0) {
        tmpl = cJSON_CreateObject();
        rc = tmpl ? json_put_string(tmpl, "name", WORKLOAD_GANG_TEMPLATE) : -ENOMEM;
    }
    if (rc == 0)
        rc = put_gang_policy(job, o, tmpl);
    if (rc == 0) {
        rc = json_append(templates, tmpl);
        tmpl = NULL;
    }
    cJSON_Delete(tmpl);
    if (rc < 0) {
        cJSON_Delete(wl);
        return NULL;
    }
    return wl;
}

cJSON *build_podgroup(const struct mpijob *job, const struct mpijob_options *o)
{
    const struct kube_resource *res = podgroup_resource(o);
    if (!res)
        return NULL;
    const struct mpijob_scheduling *policy = &job->run_policy.scheduling;
    char api_version[128];
    snprintf(api_version, sizeof(api_version), "%s/%s", res->group, res->version);
    cJSON *pg = new_object(job, o, api_version, res->kind, job->name, NULL), *spec = NULL;
    int rc = pg ? json_child(pg, "spec", false, &spec) : -ENOMEM;
    if (rc == 0 && res == &PODGROUP_WORKLOAD_API) {
        cJSON *ref = NULL, *workload = NULL;
        rc = json_child(spec, "podGroupTemplateRef", false, &ref);
        if (rc == 0)
            rc = json_child(ref, "workload", false, &workload);
        if (rc == 0)
            rc = json_put_string(workload, "workloadName", job->name);
        if (rc == 0)
            rc = json_put_string(workload, "podGroupTemplateName", WORKLOAD_GANG_TEMPLATE);
        if (rc == 0)
            rc = put_gang_policy(job, o, spec);
        if (rc < 0) {
            cJSON_Delete(pg);
            return NULL;
        }
        return pg;
    }
    /* The launcher and every worker must start together. */
    int min_member = mpijob_gang_size(job, o);
    if (rc == 0)
        rc = json_put_number(spec, "minMember", min_member);
    if (rc == 0 && policy->min_resources)
        rc = json_put(spec, "minResources", cJSON_Duplicate(policy->min_resources, true));
    if (res == &PODGROUP_VOLCANO) {
        const char *priority = podgroup_priority_class(job);
        if (rc == 0 && policy->queue && policy->queue[0])
            rc = json_put_string(spec, "queue", policy->queue);
        if (rc == 0 && priority)
            rc = json_put_string(spec, "priorityClassName", priority);
    } else if (rc == 0 && policy->schedule_timeout_s >= 0) {
        rc = json_put_number(spec, "scheduleTimeoutSeconds", policy->schedule_timeout_s);
    }
    if (rc < 0) {
        cJSON_Delete(pg);
        return NULL;
    }
    return pg;
}

/* ---- Service, ConfigMap, Secret ------------------------------------------------------------ */

cJSON *build_service(const struct mpijob *job, const struct mpijob_options *o)
{
    cJSON *svc = new_object(job, o, "v1", "Service", job->name, NULL), *spec = NULL;
    int rc = svc ? json_child(svc, "spec", false, &spec) : -ENOMEM;
    if (rc == 0)
        rc = json_put_string(spec, "clusterIP", "None");
    /* operator-name too: other Kubeflow operators put the same job-name label on their pods. */
    if (rc == 0)
        rc = json_put(spec, "selector", build_labels(job, o, NULL, -1));
    /* A launcher in its own hostfile resolves its own name before its pod is Ready. */
    if (rc == 0 && job->run_launcher_as_worker)
        rc = json_put_bool(spec, "publishNotReadyAddresses", true);
    if (rc < 0) {
        cJSON_Delete(svc);
        return NULL;
    }
    return svc;
}

static int put_ssh_port_annotation(cJSON *meta, int port)
{
    char text[16];
    snprintf(text, sizeof(text), "%d", port);
    cJSON *annotations = NULL;
    int rc = meta ? json_child(meta, "annotations", false, &annotations) : -EINVAL;
    return rc < 0 ? rc : json_put_string(annotations, ANNOTATION_SSH_PORT, text);
}

int mpijob_ssh_port_of(const cJSON *obj)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(obj, "metadata"),
                                         "annotations"),
        ANNOTATION_SSH_PORT);
    if (!cJSON_IsString(v))
        return 0;
    char *end = NULL;
    long port = strtol(v->valuestring, &end, 10);
    return end != v->valuestring && *end == '\0' && port >= 1 && port <= 65535 ? (int)port : 0;
}

cJSON *build_configmap(const struct mpijob *job, const struct mpijob_options *o,
                       const char *const *running_workers, size_t n)
{
    const char *domain = o ? o->cluster_domain : NULL;
    char *name = mpijob_configmap_name(job);
    char *hostfile = hostfile_render(job, domain);
    char *discover = hostfile_discover_hosts(job, domain, running_workers, n);
    cJSON *cm = name && hostfile && discover ? new_object(job, o, "v1", "ConfigMap", name, NULL)
                                             : NULL;
    cJSON *data = NULL;
    int rc = cm ? json_child(cm, "data", false, &data) : -ENOMEM;
    if (rc == 0)
        rc = json_put_string(data, HOSTFILE_KEY, hostfile);
    if (rc == 0)
        rc = json_put_string(data, DISCOVER_HOSTS_KEY, discover);
    /* Where a host-network job's port is kept: chosen once, read back by every reconcile. */
    if (rc == 0 && job->networking.host_network && job->networking.ssh_port > 0)
        rc = put_ssh_port_annotation(cJSON_GetObjectItemCaseSensitive(cm, "metadata"),
                                     job->networking.ssh_port);
    free(name);
    free(hostfile);
    free(discover);
    if (rc < 0) {
        cJSON_Delete(cm);
        return NULL;
    }
    return cm;
}

/* Standard base64 with padding and no line breaks, as Secret data wants it. */
static cJSON *base64_string(const char *text)
{
    size_t len = strlen(text);
    if (len > INT_MAX / 2)
        return NULL;
    unsigned char *out = malloc(4 * ((len + 2) / 3) + 1);
    if (!out)
        return NULL;
    EVP_EncodeBlock(out, (const unsigned char *)text, (int)len);
    cJSON *s = cJSON_CreateString((const char *)out);
    free(out);
    return s;
}

cJSON *build_secret(const struct mpijob *job, const struct mpijob_options *o,
                    const struct ssh_keypair *keys)
{
    if (!keys || !keys->private_pem || !keys->public_authorized)
        return NULL;
    char *name = mpijob_secret_name(job);
    cJSON *secret = name ? new_object(job, o, "v1", "Secret", name, NULL) : NULL, *data = NULL;
    int rc = secret ? json_put_string(secret, "type", "kubernetes.io/ssh-auth") : -ENOMEM;
    if (rc == 0)
        rc = json_child(secret, "data", false, &data);
    if (rc == 0)
        rc = json_put(data, SSH_PRIVATE_KEY, base64_string(keys->private_pem));
    if (rc == 0)
        rc = json_put(data, SSH_PUBLIC_KEY, base64_string(keys->public_authorized));
    free(name);
    if (rc < 0) {
        cJSON_Delete(secret);
        return NULL;
    }
    return secret;
}

/* ---- pod templates ------------------------------------------------------------------------- */

/* A private copy of a replica's template and the parts every pod edits. */
struct pod {
    cJSON *tmpl, *meta, *spec, *container;
};

static int pod_open(const cJSON *template, struct pod *p)
{
    memset(p, 0, sizeof(*p));
    if (!cJSON_IsObject(template))
        return -EINVAL;
    if (!(p->tmpl = cJSON_Duplicate(template, true)))
        return -ENOMEM;
    p->spec = cJSON_GetObjectItemCaseSensitive(p->tmpl, "spec");
    p->container = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(p->spec, "containers"), 0);
    if (!cJSON_IsObject(p->spec) || !cJSON_IsObject(p->container))
        return -EINVAL;
    return json_child(p->tmpl, "metadata", false, &p->meta);
}

/* Our labels over the template's: the informers, the Service and the reconciler select on
 * them. */
static int add_labels(struct pod *p, cJSON *ours)
{
    cJSON *labels, *l;
    int rc = ours ? json_child(p->meta, "labels", false, &labels) : -ENOMEM;
    cJSON_ArrayForEach(l, ours) {
        if (rc == 0)
            rc = json_put_string(labels, l->string, l->valuestring);
    }
    cJSON_Delete(ours);
    return rc;
}

/* ExitCode is the operator's to interpret: the pod itself must not restart. */
static const char *restart_policy_text(enum restart_policy r)
{
    switch (r) {
    case RESTART_ON_FAILURE: return "OnFailure";
    case RESTART_ALWAYS: return "Always";
    case RESTART_NEVER:
    case RESTART_EXIT_CODE: break;
    }
    return "Never";
}

/* The host name the hostfile gives the pod: <hostname>.<subdomain>.N.svc resolves through
 * the headless Service J. */
static int set_identity(const struct mpijob *job, struct pod *p, const char *hostname,
                        enum restart_policy restart)
{
    int rc = json_put_string(p->spec, "hostname", hostname);
    if (rc == 0)
        rc = json_put_string(p->spec, "subdomain", job->name);
    if (rc == 0)
        rc = json_put_string(p->spec, "restartPolicy", restart_policy_text(restart));
    return rc;
}

/* Adds name=value to container 0 unless the template sets name already. */
static int env_default(struct pod *p, const char *name, const char *value)
{
    cJSON *env;
    int rc = json_child(p->container, "env", true, &env);
    if (rc < 0 || json_env_find(env, name))
        return rc;
    return json_env_append(env, name, value);
}

/* Mounts a volume whose source is {source_key: source} (source is taken) at path in container
 * 0, under a volume name based on base. A template that mounts something at path already keeps
 * its own mount, and the volume is dropped. */
static int mount_volume(struct pod *p, const char *base, const char *path, const char *source_key,
                        cJSON *source)
{
    cJSON *mounts = NULL, *volumes = NULL, *e;
    int rc = source ? json_child(p->container, "volumeMounts", true, &mounts) : -ENOMEM;
    bool mounted = false;
    cJSON_ArrayForEach(e, mounts) {
        const char *at = json_string(e, "mountPath");
        mounted = mounted || (at && path_equal(at, path));
    }
    if (rc == 0 && !mounted)
        rc = json_child(p->spec, "volumes", true, &volumes);
    if (rc < 0 || mounted) {
        cJSON_Delete(source);
        return rc;
    }
    /* A template volume of the same name would make the pod invalid: take the next free one. */
    char name[64];
    for (int i = 0;; i++) {
        if (i == 0)
            snprintf(name, sizeof(name), "%s", base);
        else
            snprintf(name, sizeof(name), "%s-%d", base, i);
        bool taken = false;
        cJSON_ArrayForEach(e, volumes) {
            const char *n = json_string(e, "name");
            taken = taken || (n && strcmp(n, name) == 0);
        }
        if (!taken)
            break;
    }
    cJSON *volume = cJSON_CreateObject(), *mount = cJSON_CreateObject();
    rc = volume && mount ? json_put_string(volume, "name", name) : -ENOMEM;
    if (rc == 0) {
        rc = json_put(volume, source_key, source);
        source = NULL;
    }
    if (rc == 0)
        rc = json_put_string(mount, "name", name);
    if (rc == 0)
        rc = json_put_string(mount, "mountPath", path);
    if (rc == 0 && (rc = json_append(volumes, volume)) == 0)
        volume = NULL;
    if (rc == 0 && (rc = json_append(mounts, mount)) == 0)
        mount = NULL;
    cJSON_Delete(source);
    cJSON_Delete(volume);
    cJSON_Delete(mount);
    return rc;
}

static cJSON *key_to_path(const char *key, const char *path, int mode)
{
    cJSON *item = cJSON_CreateObject();
    int rc = item ? json_put_string(item, "key", key) : -ENOMEM;
    if (rc == 0)
        rc = json_put_string(item, "path", path);
    if (rc == 0 && mode >= 0)
        rc = json_put_number(item, "mode", mode);
    if (rc < 0) {
        cJSON_Delete(item);
        return NULL;
    }
    return item;
}

/* Secret J-ssh at sshAuthMountPath in container 0: the launcher's ssh client and the workers'
 * sshd read the same key pair (id_rsa is only a file name; the key is ECDSA). */
static int mount_ssh_keys(const struct mpijob *job, struct pod *p)
{
    char *secret_name = mpijob_secret_name(job);
    cJSON *secret = cJSON_CreateObject(), *items = NULL;
    int rc = secret_name && secret ? json_put_string(secret, "secretName", secret_name) : -ENOMEM;
    if (rc == 0)
        rc = json_put_number(secret, "defaultMode", SSH_KEY_MODE);
    if (rc == 0)
        rc = json_child(secret, "items", true, &items);
    if (rc == 0)
        rc = json_append(items, key_to_path(SSH_PRIVATE_KEY, "id_rsa", -1));
    if (rc == 0)
        rc = json_append(items, key_to_path(SSH_PUBLIC_KEY, "id_rsa.pub", -1));
    if (rc == 0)
        rc = json_append(items, key_to_path(SSH_PUBLIC_KEY, "authorized_keys", -1));
    free(secret_name);
    if (rc < 0) {
        cJSON_Delete(secret);
        return rc;
    }
    const char *path = job->ssh_auth_mount_path ? job->ssh_auth_mount_path : "/root/.ssh";
    return mount_volume(p, SSH_VOLUME, path, "secret", secret);
}

static int mount_mpi_config(const struct mpijob *job, struct pod *p)
{
    char *cm_name = mpijob_configmap_name(job);
    cJSON *cm = cJSON_CreateObject(), *items = NULL;
    int rc = cm_name && cm ? json_put_string(cm, "name", cm_name) : -ENOMEM;
    if (rc == 0)
        rc = json_child(cm, "items", true, &items);
    if (rc == 0)
        rc = json_append(items, key_to_path(HOSTFILE_KEY, HOSTFILE_KEY, HOSTFILE_MODE));
    if (rc == 0)
        rc = json_append(items,
                         key_to_path(DISCOVER_HOSTS_KEY, DISCOVER_HOSTS_KEY, DISCOVER_HOSTS_MODE));
    free(cm_name);
    if (rc < 0) {
        cJSON_Delete(cm);
        return rc;
    }
    return mount_volume(p, CONFIG_VOLUME, MPI_CONFIG_MOUNT_PATH, "configMap", cm);
}

/* The template becomes {metadata, spec} of a new object; p is emptied. */
static int pod_move_into(struct pod *p, cJSON *obj)
{
    int rc = json_put(obj, "metadata", cJSON_DetachItemViaPointer(p->tmpl, p->meta));
    if (rc == 0)
        rc = json_put(obj, "spec", cJSON_DetachItemViaPointer(p->tmpl, p->spec));
    cJSON_Delete(p->tmpl);
    memset(p, 0, sizeof(*p));
    return rc;
}

/* ---- worker pods --------------------------------------------------------------------------- */

/* Workers find each other (and a launcher that is a worker) by short names too: Intel MPI and
 * MPICH use the names their peers report. */
static int add_dns_search(const struct mpijob *job, const struct mpijob_options *o, struct pod *p)
{
    const char *domain = o ? o->cluster_domain : NULL;
    char *search = NULL;
    int n = domain && domain[0] ? asprintf(&search, "%s.%s.svc.%s", job->name, job->namespace, domain)
                                : asprintf(&search, "%s.%s.svc", job->name, job->namespace);
    if (n < 0)
        return -ENOMEM;
    cJSON *dns = NULL, *searches = NULL, *e;
    int rc = json_child(p->spec, "dnsConfig", false, &dns);
    if (rc == 0)
        rc = json_child(dns, "searches", true, &searches);
    bool listed = false;
    cJSON_ArrayForEach(e, searches) {
        listed = listed || (cJSON_IsString(e) && strcmp(e->valuestring, search) == 0);
    }
    if (rc == 0 && !listed)
        rc = json_append_string(searches, search);
    free(search);
    return rc;
}

/* A host-network job's pod (SPEC.md section 4): on its node's network, asking cluster DNS
 * (ClusterFirstWithHostNet) so that the workers' names resolve, with the job's ssh port in
 * MPIJOB_SSH_PORT (the image's sshd listens on it) and declared as a hostPort. The hostPort is
 * what keeps pods that would collide apart: the scheduler never puts two pods asking for one
 * hostPort on one node, so two workers of a job get different nodes (and so does the launcher,
 * for which mpirun would otherwise take a worker on its own node for itself and start that
 * worker's ranks in the launcher's container), while jobs with different ports may share
 * nodes. The template's own choices stay: its dnsPolicy (validation allows only None besides),
 * a port it already declares, its MPIJOB_SSH_PORT. */
static int apply_host_network(const struct mpijob *job, struct pod *p)
{
    int port = job->networking.ssh_port;
    if (!job->networking.host_network || port <= 0)
        return 0;
    char text[16];
    snprintf(text, sizeof(text), "%d", port);
    int rc = json_put_bool(p->spec, "hostNetwork", true);
    if (rc == 0 && !cJSON_GetObjectItemCaseSensitive(p->spec, "dnsPolicy"))
        rc = json_put_string(p->spec, "dnsPolicy", "ClusterFirstWithHostNet");
    if (rc == 0)
        rc = put_ssh_port_annotation(p->meta, port);
    if (rc == 0)
        rc = env_default(p, ENV_SSH_PORT, text);
    cJSON *ports = NULL, *e;
    if (rc == 0)
        rc = json_child(p->container, "ports", true, &ports);
    bool declared = false, name_taken = false;
    cJSON_ArrayForEach(e, ports) {
        const cJSON *cp = cJSON_GetObjectItemCaseSensitive(e, "containerPort");
        const char *name = json_string(e, "name");
        declared = declared || (cJSON_IsNumber(cp) && cp->valuedouble == port);
        name_taken = name_taken || (name && strcmp(name, SSH_PORT_NAME) == 0);
    }
    if (rc < 0 || declared)
        return rc;
    cJSON *decl = cJSON_CreateObject();
    rc = decl ? 0 : -ENOMEM;
    if (rc == 0 && !name_taken)
        rc = json_put_string(decl, "name", SSH_PORT_NAME);
    if (rc == 0)
        rc = json_put_number(decl, "containerPort", port);
    if (rc == 0)
        rc = json_put_number(decl, "hostPort", port);
    if (rc == 0)
        rc = json_put_string(decl, "protocol", "TCP");
    if (rc < 0) {
        cJSON_Delete(decl);
        return rc;
    }
    return json_append(ports, decl);
}

/* The image's entrypoint is not sshd in general; a worker that says nothing else runs it. */
static int default_to_sshd(const struct mpijob *job, struct pod *p)
{
    bool no_command = true, no_args = true;
    int rc = json_array_is_empty(p->container, "command", &no_command);
    if (rc == 0)
        rc = json_array_is_empty(p->container, "args", &no_args);
    if (rc < 0 || !no_command || !no_args)
        return rc;
    cJSON *command = cJSON_CreateArray();
    rc = command ? json_append_string(command, "/usr/sbin/sshd") : -ENOMEM;
    if (rc == 0)
        rc = json_append_string(command, "-De");
    if (rc == 0 && job->networking.host_network && job->networking.ssh_port > 0) {
        char port[16];
        snprintf(port, sizeof(port), "%d", job->networking.ssh_port);
        rc = json_append_string(command, "-p");
        if (rc == 0)
            rc = json_append_string(command, port);
    }
    if (rc < 0) {
        cJSON_Delete(command);
        return rc;
    }
    return json_put(p->container, "command", command);
}

int build_worker_pod(const struct mpijob *job, const struct mpijob_options *o, int index,
                     struct transport_report *report, cJSON **out)
{
    struct pod p = {0};
    *out = NULL;
    cJSON *pod = NULL;
    char *name = mpijob_worker_name(job, index);
    int rc = name ? pod_open(job->worker.template, &p) : -ENOMEM;
    if (rc == 0)
        rc = add_labels(&p, build_labels(job, o, ROLE_NAME_WORKER, index));
    if (rc == 0)
        rc = json_put_string(p.meta, "name", name);
    if (rc == 0)
        rc = json_put_string(p.meta, "namespace", job->namespace);
    if (rc == 0)
        rc = put_owner_references(job, p.meta);
    if (rc == 0)
        rc = set_identity(job, &p, name, job->worker.restart_policy);
    if (rc == 0)
        rc = add_dns_search(job, o, &p);
    if (rc == 0)
        rc = apply_host_network(job, &p);
    if (rc == 0)
        rc = default_to_sshd(job, &p);
    if (rc == 0)
        rc = env_default(&p, ENV_ROLE, ROLE_NAME_WORKER);
    if (rc == 0)
        rc = mount_ssh_keys(job, &p);
    if (rc == 0)
        rc = join_gang(job, o, false, p.meta, p.spec);
    if (rc == 0)
        rc = transport_apply(job, ROLE_WORKER, p.tmpl, report);
    if (rc == 0) {
        pod = cJSON_CreateObject();
        rc = pod ? json_put_string(pod, "apiVersion", "v1") : -ENOMEM;
    }
    if (rc == 0)
        rc = json_put_string(pod, "kind", "Pod");
    if (rc == 0)
        rc = pod_move_into(&p, pod);
    free(name);
    cJSON_Delete(p.tmpl);
    if (rc < 0) {
        cJSON_Delete(pod);
        return rc == -EINVAL ? MPIJOB_EINVALID : KUBE_ENOMEM;
    }
    *out = pod;
    return 0;
}

/* ---- launcher Job -------------------------------------------------------------------------- */

struct env_default {
    const char *name;
    const char *value;
};

/* What makes mpirun use the hostfile and reach the workers' sshd, per implementation. Open MPI
 * 5 replaced ORTE with PRRTE, which ignores the orte_* names and would otherwise run every rank
 * on the launcher; each version ignores the other's variables, so both sets are given. On the
 * host network, every implementation's ssh arguments also carry the job's port. */
static int add_mpi_env(const struct mpijob *job, struct pod *p)
{
    char slots[16], ssh_args[160];
    snprintf(slots, sizeof(slots), "%d", job->slots_per_worker);
    bool host_network = job->networking.host_network && job->networking.ssh_port > 0;
    if (host_network)
        snprintf(ssh_args, sizeof(ssh_args), "%s -p %d", SSH_CONNECT_ARGS, job->networking.ssh_port);
    else
        snprintf(ssh_args, sizeof(ssh_args), "%s", SSH_CONNECT_ARGS);
    const struct env_default openmpi[] = {
        {"OMPI_MCA_orte_default_hostfile", MPI_HOSTFILE_PATH},
        /* With false, ssh would get the shortened name, which does not resolve. */
        {"OMPI_MCA_orte_keep_fqdn_hostnames", "true"},
        {"OMPI_MCA_plm_rsh_args", ssh_args},
        {"OMPI_MCA_orte_set_default_slots", slots},
        {"PRTE_MCA_prte_default_hostfile", MPI_HOSTFILE_PATH},
        {"PRTE_MCA_prte_keep_fqdn_hostnames", "true"},
        {"PRTE_MCA_plm_ssh_args", ssh_args},
        {"PRTE_MCA_prte_set_default_slots", slots},
        /* PRRTE 3.0 hands PRTE_MCA_* values to the daemons that start further daemons (beyond
         * 64 nodes) cut at their second '=', so "-o ConnectionAttempts=10" arrives as
         * "-o ConnectionAttempts" and ssh refuses it: the launcher starts every daemon itself
         * (docs/internals/openmpi5.md). */
        {"PRTE_MCA_plm_ssh_no_tree_spawn", "true"},
        {NULL, NULL},
    };
    const struct env_default intel[] = {
        {"I_MPI_HYDRA_HOST_FILE", MPI_HOSTFILE_PATH},
        {"I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS", ssh_args},
        {"I_MPI_PERHOST", slots},
        {NULL, NULL},
    };
    /* HYDRA_LAUNCH_EXTRA_ARGS is the reference operator's spelling, kept for tools that read
     * it; MPICH's Hydra reads HYDRA_LAUNCHER_EXTRA_ARGS (its -launcher-extra-args), without
     * which ssh gives up on a worker whose sshd is a moment late. */
    const struct env_default mpich[] = {
        {"HYDRA_HOST_FILE", MPI_HOSTFILE_PATH},
        {"HYDRA_LAUNCH_EXTRA_ARGS", ssh_args},
        {"HYDRA_LAUNCHER_EXTRA_ARGS", ssh_args},
        {NULL, NULL},
    };
    const struct env_default *vars = job->implementation == MPI_INTEL   ? intel
                                     : job->implementation == MPI_MPICH ? mpich
                                                                        : openmpi;
    int rc = 0;
    for (; rc == 0 && vars->name; vars++)
        rc = env_default(p, vars->name, vars->value);
    /* Hydra's proxies on the workers call back to mpiexec by the launcher's host name, which
     * cluster DNS publishes only once the launcher pod is Ready: a moment after mpiexec started
     * them, and a miss is cached for 30 s. Named by its interface, Hydra gives them its address.
     * On the host network the pod's eth0 is not known; there the interface is the user's to
     * name (networking.interface, which transport.c applies). */
    const char *iface = job->networking.interface ? job->networking.interface : "eth0";
    if (rc == 0 && !job->networking.host_network && job->implementation == MPI_MPICH)
        rc = env_default(p, "HYDRA_IFACE", iface);
    if (rc == 0 && !job->networking.host_network && job->implementation == MPI_INTEL)
        rc = env_default(p, "I_MPI_HYDRA_IFACE", iface);
    return rc;
}

static int launcher_pod_template(const struct mpijob *job, const struct mpijob_options *o,
                                 struct transport_report *report, cJSON **out)
{
    struct pod p = {0};
    char *name = mpijob_launcher_name(job);
    int rc = name ? pod_open(job->launcher.template, &p) : -ENOMEM;
    if (rc == 0)
        rc = add_labels(&p, build_labels(job, o, ROLE_NAME_LAUNCHER, 0));
    if (rc == 0)
        rc = set_identity(job, &p, name, job->launcher.restart_policy);
    if (rc == 0)
        rc = env_default(&p, ENV_ROLE, ROLE_NAME_LAUNCHER);
    if (rc == 0)
        rc = apply_host_network(job, &p);
    if (rc == 0)
        rc = add_mpi_env(job, &p);
    /* A launcher that only runs mpirun must not take the node's GPUs through a runtime that
     * exposes all of them by default; one that is a worker needs its own. */
    if (rc == 0 && !job->run_launcher_as_worker)
        rc = env_default(&p, "NVIDIA_VISIBLE_DEVICES", "");
    if (rc == 0)
        rc = mount_ssh_keys(job, &p);
    if (rc == 0)
        rc = mount_mpi_config(job, &p);
    if (rc == 0)
        rc = join_gang(job, o, true, p.meta, p.spec);
    if (rc == 0)
        rc = transport_apply(job, ROLE_LAUNCHER, p.tmpl, report);
    /* When mpirun fails, the end of its output (a rank's "RDMA requested but no usable device",
     * mpirun's own verdict) becomes the container's termination message, and from there the
     * MPIJob's Failed condition: the user reads why without kubectl logs. A policy the template
     * sets is kept. */
    if (rc == 0 && !cJSON_GetObjectItemCaseSensitive(p.container, "terminationMessagePolicy"))
        rc = json_put_string(p.container, "terminationMessagePolicy", "FallbackToLogsOnError");
    free(name);
    if (rc < 0) {
        cJSON_Delete(p.tmpl);
        return rc;
    }
    /* Only metadata and spec belong in a Job's pod template. */
    cJSON *tmpl = cJSON_CreateObject();
    if (!tmpl || pod_move_into(&p, tmpl) < 0) {
        cJSON_Delete(p.tmpl);
        cJSON_Delete(tmpl);
        return -ENOMEM;
    }
    *out = tmpl;
    return 0;
}

int build_launcher_job(const struct mpijob *job, const struct mpijob_options *o,
                       struct transport_report *report, cJSON **out)
{
    *out = NULL;
    char *name = mpijob_launcher_name(job);
    cJSON *obj = name ? new_object(job, o, "batch/v1", "Job", name, ROLE_NAME_LAUNCHER) : NULL;
    cJSON *spec = NULL;
    int rc = obj ? json_child(obj, "spec", false, &spec) : -ENOMEM;
    /* activeDeadlineSeconds and ttlSecondsAfterFinished are the operator's (counted from the
     * MPIJob's start, deleting the MPIJob), so the Job carries neither. */
    if (rc == 0)
        rc = json_put_number(spec, "backoffLimit", job->run_policy.backoff_limit);
    /* A retry starts only once the failed launcher pod is gone, so two mpiruns never overlap. */
    if (rc == 0)
        rc = json_put_string(spec, "podReplacementPolicy", "Failed");
    if (rc == 0)
        rc = json_put_bool(spec, "suspend", job->run_policy.suspend);
    cJSON *tmpl = NULL;
    if (rc == 0)
        rc = launcher_pod_template(job, o, report, &tmpl);
    if (rc == 0)
        rc = json_put(spec, "template", tmpl);
    free(name);
    if (rc < 0) {
        cJSON_Delete(obj);
        return rc == -EINVAL ? MPIJOB_EINVALID : KUBE_ENOMEM;
    }
    *out = obj;
    return 0;
}
