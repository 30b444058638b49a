/* Where the API server is and how to authenticate to it.
 *
 * Two sources, as client-go has them:
 *  - kubeconfig: the file named by the caller, else $KUBECONFIG (a ':'-separated list, merged:
 *    the first file to define a name wins, current-context from the first that sets it), else
 *    ~/.kube/config. The current context or a named one. Cluster CA, client certificate and
 *    key, bearer token and tokenFile, each from *-data (base64) or from a file path (relative
 *    paths resolved against the kubeconfig's directory). `insecure-skip-tls-verify: true` is
 *    honoured only when the kubeconfig says so; TLS is verified otherwise.
 *  - in-cluster: $KUBERNETES_SERVICE_HOST / $KUBERNETES_SERVICE_PORT and the service account
 *    files token, ca.crt and namespace under /var/run/secrets/kubernetes.io/serviceaccount
 *    (the directory can be overridden for tests).
 *
 * Tokens read from a file are re-read when older than KUBE_TOKEN_MAX_AGE_MS and after every
 * kube_config_invalidate_token (called by the REST layer on 401), so bound-token rotation works.
 * The in-cluster ca.crt is treated like the token: read through kube_config_ca, again whenever
 * the file changes and after kube_config_invalidate_ca (called by the REST layer when the
 * server's certificate fails verification), so a CA that is published late or rotated is picked
 * up without a restart. An in-cluster config never falls back to the system's trust store: a
 * ca.crt that is missing, unreadable or holds no certificate is an error naming the file.
 * All functions are thread-safe. */
#ifndef KUBE_CONFIG_H
#define KUBE_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KUBE_TOKEN_MAX_AGE_MS 60000
#define KUBE_CA_CHECK_MS 1000 /* how often kube_config_ca looks whether the CA file changed */
#define KUBE_IN_CLUSTER_DIR "/var/run/secrets/kubernetes.io/serviceaccount"

struct kube_blob {
    char *data; /* owned; NULL when unset. PEM text for certificates and keys. */
    size_t len;
};

struct kube_config {
    char *server;        /* "https://host:port" without trailing '/' */
    char *namespace;     /* context namespace or in-cluster namespace file; "default" if unset */
    char *context_name;  /* the context used (kubeconfig only) */
    char *tls_server_name; /* optional SNI / verification name override */
    struct kube_blob ca;          /* certificate-authority(-data) of a kubeconfig; see kube_config_ca */
    struct kube_blob client_cert; /* client-certificate(-data) */
    struct kube_blob client_key;  /* client-key(-data) */
    bool insecure_skip_tls_verify;
    /* private: token and CA file state, each guarded by an internal mutex */
    struct kube_config_token *token_state;
    struct kube_config_ca_file *ca_file; /* the in-cluster ca.crt; NULL for a kubeconfig */
};

/* Loads a kubeconfig. path may be NULL ($KUBECONFIG, then ~/.kube/config); context may be NULL
 * (current-context). On failure returns KUBE_ECONFIG (or KUBE_ENOMEM) and writes a message
 * naming the file and the field into err. The result is freed with kube_config_free. */
int kube_config_load_kubeconfig(const char *path, const char *context, struct kube_config **out,
                                char *err, size_t err_len);

/* Loads the in-cluster config. dir may be NULL (KUBE_IN_CLUSTER_DIR). */
int kube_config_load_in_cluster(const char *dir, struct kube_config **out, char *err, size_t err_len);

/* Parses kubeconfig text already in memory (base_dir resolves relative file paths; may be NULL).
 * Used by the loader and by the fuzzer. */
int kube_config_parse(const char *text, size_t len, const char *base_dir, const char *context,
                      struct kube_config **out, char *err, size_t err_len);

/* The current bearer token, or NULL when the config uses none. The caller frees the copy.
 * Re-reads a token file when it is older than KUBE_TOKEN_MAX_AGE_MS or was invalidated. */
char *kube_config_token(struct kube_config *cfg);
/* Marks the token stale: the next kube_config_token re-reads the file. Call after a 401.
 * Returns true when there is a file to re-read (a retry may help), false otherwise. */
bool kube_config_invalidate_token(struct kube_config *cfg);

/* The CA bundle (PEM) to verify the API server with: a copy in *pem, freed by the caller, and
 * its length. *pem is NULL when the configuration names no CA (a kubeconfig without one: the
 * system's trust store verifies). A kubeconfig's CA is the one it was loaded with. An in-cluster
 * config's ca.crt is read again when the file changed (looked at every KUBE_CA_CHECK_MS at most)
 * or after kube_config_invalidate_ca; when it cannot be used and no earlier good copy exists,
 * returns KUBE_ECONFIG with err naming the file and why (a later call reads it again). */
int kube_config_ca(struct kube_config *cfg, char **pem, size_t *len, char *err, size_t err_len);
/* The server's certificate failed verification: the next kube_config_ca reads the CA file again
 * whatever its modification time. Returns true when there is a file to re-read. */
bool kube_config_invalidate_ca(struct kube_config *cfg);

void kube_config_free(struct kube_config *cfg);

/* The cluster's DNS domain as the kubelet told this pod: the resolv.conf at path (NULL:
 * /etc/resolv.conf) searches "<namespace>.svc.<domain>" first. *domain is a copy the caller
 * frees. Returns 0, KUBE_ENOTFOUND when no search entry has that form (not in a pod, or a pod
 * with a custom dnsConfig), or KUBE_ECONFIG when the file cannot be read. */
int kube_config_cluster_domain(const char *path, const char *namespace, char **domain);

/* For tests only: changes how old a token read from a file may get before it is re-read
 * (KUBE_TOKEN_MAX_AGE_MS by default). No effect on a config without a token. */
void kube_config_set_token_max_age_ms(struct kube_config *cfg, uint64_t ms);
/* For tests only: how often kube_config_ca looks at the CA file (KUBE_CA_CHECK_MS by default;
 * 0: at every call). No effect on a config without a CA file. */
void kube_config_set_ca_check_ms(struct kube_config *cfg, uint64_t ms);

#endif
