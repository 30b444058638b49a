/* Test support: starts and drives the API server the integration tests run against.
 *
 * test_apiserver_start() runs tests/apiserver/launch.py in its own session with a fresh state
 * directory under /tmp. That is the API-server double, or a real etcd + kube-apiserver when
 * KUBEBUILDER_ASSETS names a directory holding both binaries (then is_double is false and the
 * control API under /_double/ does not exist: tests that inject faults should skip).
 *
 * The repository root is $MPIJOB_SRC_DIR when set, else the current directory.
 * Talks HTTPS through libcurl directly (never the project's own client, which is under test).
 */
#ifndef TESTS_SUPPORT_APISERVER_H
#define TESTS_SUPPORT_APISERVER_H

#include <stdbool.h>

#include <cjson/cJSON.h>

/* The RBAC objects enforced for the operator's token, relative to the repository root: the
 * all-in-one manifest, rendered from the Helm chart. */
#define TEST_RBAC_DEFAULT "deploy/mpijob-operator.yaml"

struct test_apiserver {
    char dir[256];        /* state directory: ca.crt, kubeconfig, port, pid, info.json, ready */
    char kubeconfig[300]; /* <dir>/kubeconfig: server URL, CA data, token, namespace default */
    char url[64];         /* https://127.0.0.1:<port> */
    char token[64];       /* bearer token accepted by the server: an administrator */
    /* <dir>/operator.kubeconfig: the operator's ServiceAccount token, which the server holds to
     * the RBAC rules of TEST_RBAC_DEFAULT (or of the file $MPIJOB_TEST_RBAC names): 403 for any
     * request they do not grant. Tests run the controller with it. */
    char operator_kubeconfig[300];
    int port;
    int pid;              /* the launcher; its process group holds every server process */
    bool is_double;
    /* kube-controller-manager and kube-scheduler run against the real server
     * (test_apiserver_start_control_plane): the Job controller, garbage collector and scheduler
     * are real. No node runs: a test that needs a pod to run writes its status. */
    bool control_plane;
};

/* What KUBEBUILDER_ASSETS holds, as launch.py reads it. */
enum test_assets {
    TEST_ASSETS_NONE,          /* unset, or without etcd or kube-apiserver: the double runs */
    TEST_ASSETS_SERVER,        /* etcd and kube-apiserver, not both controller binaries */
    TEST_ASSETS_CONTROL_PLANE, /* also kube-controller-manager and kube-scheduler */
};
enum test_assets test_apiserver_assets(void);

/* Starts a server with a fresh temporary state directory and waits up to 120 s (times the
 * tests' time factor, support/deadline.h) for it to be ready. Returns 0, or -1 with a message on
 * stderr (nothing is left running then). */
int test_apiserver_start(struct test_apiserver *s);

/* The same, with the operator's token held to another RBAC file (relative to the repository
 * root), e.g. the namespaced variant. */
int test_apiserver_start_rbac(struct test_apiserver *s, const char *rbac_file);

/* The same, for a cluster where no CRD is installed (no MPIJobs, no PodGroups). */
int test_apiserver_start_without_crds(struct test_apiserver *s);

/* With TEST_ASSETS_CONTROL_PLANE: a real etcd and kube-apiserver with kube-controller-manager and
 * kube-scheduler (launch.py --control-plane; the ServiceAccount admission plugin is on and the
 * namespace `default` has its ServiceAccount), waiting up to 240 s (scaled); s->control_plane is then
 * true. Otherwise the same as test_apiserver_start: the double, or a real server alone when the
 * folder lacks a controller binary (callers that need the real controllers check
 * test_apiserver_assets() first and skip). */
int test_apiserver_start_control_plane(struct test_apiserver *s);

/* As test_apiserver_start_control_plane, with kube-scheduler's Workload API
 * (scheduling.k8s.io/v1alpha2) where the server can serve it (launch.py --workload-api): a real
 * server of 1.36 or later with the API's runtime-config and feature gates on every component, or
 * the double in its 1.36 mode serving the two kinds. An older real server starts as usual, without
 * it: the caller asks discovery. */
int test_apiserver_start_workload_api(struct test_apiserver *s);

/* Stops every server process (SIGTERM, then SIGKILL after 5 s) and removes the state directory.
 * Safe to call twice or after a failed start. */
void test_apiserver_stop(struct test_apiserver *s);

/* Creates the namespace (as an administrator) unless it exists: a real kube-apiserver, like the
 * double, refuses content in a namespace that does not exist. 0, or -1 with a message. */
int test_apiserver_namespace(struct test_apiserver *s, const char *name);

/* Compacts the server's storage at its current revision, as etcd's compaction does: lists and
 * continue tokens at older versions then answer 410, while watches are still served from the
 * watch cache. On the double, the fault {"compact":"storage"}; on a real server, etcd's own
 * compaction through its JSON gateway (the URL in <dir>/etcd-url). 0, or -1 with a message. */
int test_apiserver_compact(struct test_apiserver *s);

/* A request to the control API (path "/_double/..."). body may be NULL (then nothing is sent;
 * use "GET"). *out, when out is not NULL, receives the parsed JSON answer (caller frees) or NULL.
 * Returns the HTTP status, or -1 when no answer came. */
int test_apiserver_control(struct test_apiserver *s, const char *method, const char *path, const char *body,
                           cJSON **out);

/* POST /_double/fault with the given JSON text: 0 when accepted, -1 otherwise. */
int test_apiserver_fault(struct test_apiserver *s, const char *fault_json);

/* The request log entries with seq >= since (a cJSON array the caller frees), or NULL. Each entry:
 * seq, method, path, query, verb, resource, subresource, namespace, name, contentType, code, body. */
cJSON *test_apiserver_log(struct test_apiserver *s, int since);

/* A raw authenticated API request (test setup, admin view). content_type defaults to
 * application/json when a body is given. Returns the HTTP status or -1; *out as above. */
int test_apiserver_request(struct test_apiserver *s, const char *method, const char *path, const char *content_type,
                           const char *body, cJSON **out);

#endif
