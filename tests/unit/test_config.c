/* Kubeconfig and in-cluster configuration: contexts, credentials from data and files, token
 * re-reading, $KUBECONFIG merging, and the error messages for broken files. */
#include "kube/config.h"
#include "kube/errors.h"

#include <criterion/criterion.h>

#include <ftw.h>
#include <openssl/evp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char CA_PEM[] = "-----BEGIN CERTIFICATE-----\nMIIBfakeCAcertificate\n-----END CERTIFICATE-----\n";
static const char CERT_PEM[] = "-----BEGIN CERTIFICATE-----\nMIIBfakeClientCert\n-----END CERTIFICATE-----\n";
static const char KEY_PEM[] = "-----BEGIN EC PRIVATE KEY-----\nMHcfakeKey\n-----END EC PRIVATE KEY-----\n";

static char tmp_dir[64];
static char err[1024];

/* ---- helpers ----------------------------------------------------------------------------- */

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void make_tmp_dir(void)
{
    strcpy(tmp_dir, "/tmp/test-config-XXXXXX");
    cr_assert_not_null(mkdtemp(tmp_dir));
    err[0] = '\0';
}

static void remove_tmp_dir(void)
{
    if (tmp_dir[0])
        nftw(tmp_dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    tmp_dir[0] = '\0';
}

/* tmp_dir/name; the result is static storage, valid until the next call with the same slot. */
static const char *tmp_path(int slot, const char *name)
{
    static char paths[8][512];
    snprintf(paths[slot], sizeof(paths[slot]), "%s/%s", tmp_dir, name);
    return paths[slot];
}

static void write_file(const char *path, const char *content)
{
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f, "cannot create %s", path);
    fputs(content, f);
    cr_assert_eq(fclose(f), 0);
}

/* Replaces a file the way kubelet rotates a projected token: write aside, then rename. */
static void rotate_file(const char *path, const char *content)
{
    char aside[600];
    snprintf(aside, sizeof(aside), "%s.new", path);
    write_file(aside, content);
    cr_assert_eq(rename(aside, path), 0);
}

static char *b64(const char *text)
{
    size_t len = strlen(text);
    char *out = malloc(4 * ((len + 2) / 3) + 1);
    cr_assert_not_null(out);
    EVP_EncodeBlock((unsigned char *)out, (const unsigned char *)text, (int)len);
    return out;
}

static struct kube_config *parse_ok(const char *yaml, const char *base_dir, const char *context)
{
    struct kube_config *cfg = NULL;
    int rc = kube_config_parse(yaml, strlen(yaml), base_dir, context, &cfg, err, sizeof(err));
    cr_assert_eq(rc, 0, "parse failed: rc=%d err=%s", rc, err);
    cr_assert_not_null(cfg);
    return cfg;
}

/* Parses text that must be refused with KUBE_ECONFIG and a message holding want (and want2). */
static void parse_fails(const char *yaml, size_t len, const char *want, const char *want2)
{
    struct kube_config *cfg = (struct kube_config *)1;
    err[0] = '\0';
    int rc = kube_config_parse(yaml, len, NULL, NULL, &cfg, err, sizeof(err));
    cr_assert_eq(rc, KUBE_ECONFIG, "rc=%d err=%s", rc, err);
    cr_assert_null(cfg);
    cr_assert_not_null(strstr(err, want), "message \"%s\" lacks \"%s\"", err, want);
    if (want2)
        cr_assert_not_null(strstr(err, want2), "message \"%s\" lacks \"%s\"", err, want2);
}

static void blob_is(const struct kube_blob *b, const char *want)
{
    cr_assert_not_null(b->data);
    cr_assert_eq(b->len, strlen(want), "length %zu, want %zu", b->len, strlen(want));
    cr_assert_eq(memcmp(b->data, want, b->len), 0);
}

static void token_is(struct kube_config *cfg, const char *want)
{
    char *token = kube_config_token(cfg);
    cr_assert_not_null(token);
    cr_assert_str_eq(token, want);
    free(token);
}

/* Saves and restores environment variables a test changes. */
struct saved_env {
    const char *name;
    char *value;
    int was_set;
};

static struct saved_env saved[4] = {
    {"KUBECONFIG", NULL, 0},
    {"HOME", NULL, 0},
    {"KUBERNETES_SERVICE_HOST", NULL, 0},
    {"KUBERNETES_SERVICE_PORT", NULL, 0},
};

static void save_env(void)
{
    for (size_t i = 0; i < 4; i++) {
        const char *v = getenv(saved[i].name);
        saved[i].was_set = v != NULL;
        saved[i].value = v ? strdup(v) : NULL;
    }
}

static void restore_env(void)
{
    for (size_t i = 0; i < 4; i++) {
        if (saved[i].was_set)
            setenv(saved[i].name, saved[i].value, 1);
        else
            unsetenv(saved[i].name);
        free(saved[i].value);
        saved[i].value = NULL;
    }
}

static void setup(void)
{
    save_env();
    make_tmp_dir();
}

static void teardown(void)
{
    remove_tmp_dir();
    restore_env();
}

static const char TWO_CONTEXTS[] = "apiVersion: v1\n"
                                   "kind: Config\n"
                                   "preferences: {}\n"
                                   "clusters:\n"
                                   "- name: alpha\n"
                                   "  cluster:\n"
                                   "    server: https://alpha.example:6443/\n"
                                   "    extensions: [{name: x, extension: {a: 1}}]\n"
                                   "- name: beta\n"
                                   "  cluster:\n"
                                   "    server: http://127.0.0.1:8080\n"
                                   "    tls-server-name: beta.internal\n"
                                   "users:\n"
                                   "- name: alice\n"
                                   "  user:\n"
                                   "    token: alice-token\n"
                                   "- name: bob\n"
                                   "  user:\n"
                                   "    token: bob-token\n"
                                   "contexts:\n"
                                   "- name: a\n"
                                   "  context:\n"
                                   "    cluster: alpha\n"
                                   "    user: alice\n"
                                   "    namespace: team-a\n"
                                   "- name: b\n"
                                   "  context:\n"
                                   "    cluster: beta\n"
                                   "    user: bob\n"
                                   "current-context: a\n";

TestSuite(config, .init = setup, .fini = teardown);

/* ---- contexts ---------------------------------------------------------------------------- */

Test(config, current_context)
{
    struct kube_config *cfg = parse_ok(TWO_CONTEXTS, NULL, NULL);
    cr_assert_str_eq(cfg->server, "https://alpha.example:6443");
    cr_assert_str_eq(cfg->namespace, "team-a");
    cr_assert_str_eq(cfg->context_name, "a");
    cr_assert_null(cfg->tls_server_name);
    cr_assert_null(cfg->ca.data);
    cr_assert_not(cfg->insecure_skip_tls_verify);
    token_is(cfg, "alice-token");
    kube_config_free(cfg);
}

Test(config, named_context_overrides_current)
{
    struct kube_config *cfg = parse_ok(TWO_CONTEXTS, NULL, "b");
    cr_assert_str_eq(cfg->server, "http://127.0.0.1:8080");
    cr_assert_str_eq(cfg->namespace, "default");
    cr_assert_str_eq(cfg->context_name, "b");
    cr_assert_str_eq(cfg->tls_server_name, "beta.internal");
    token_is(cfg, "bob-token");
    kube_config_free(cfg);
}

Test(config, missing_context)
{
    const char *yaml = "clusters: []\ncontexts: []\ncurrent-context: nowhere\n";
    parse_fails(yaml, strlen(yaml), "context \"nowhere\" not found", "kubeconfig");
    struct kube_config *cfg = NULL;
    int rc = kube_config_parse(TWO_CONTEXTS, strlen(TWO_CONTEXTS), NULL, "zeta", &cfg, err, sizeof(err));
    cr_assert_eq(rc, KUBE_ECONFIG);
    cr_assert_null(cfg);
    cr_assert_not_null(strstr(err, "context \"zeta\" not found"), "%s", err);
}

Test(config, no_current_context)
{
    const char *yaml = "clusters:\n- name: c\n  cluster: {server: https://c}\n";
    parse_fails(yaml, strlen(yaml), "current-context is not set", NULL);
}

Test(config, missing_server)
{
    const char *yaml = "clusters:\n- name: c\n  cluster:\n    insecure-skip-tls-verify: true\n"
                       "contexts:\n- name: x\n  context: {cluster: c}\ncurrent-context: x\n";
    parse_fails(yaml, strlen(yaml), "cluster \"c\"", "has no server");
}

Test(config, missing_cluster_and_user)
{
    const char *yaml = "clusters:\n- name: c\n  cluster: {server: https://c}\n"
                       "contexts:\n- name: x\n  context: {cluster: gone}\n"
                       "- name: y\n  context: {cluster: c, user: nobody}\ncurrent-context: x\n";
    parse_fails(yaml, strlen(yaml), "cluster \"gone\"", "not found");
    struct kube_config *cfg = NULL;
    cr_assert_eq(kube_config_parse(yaml, strlen(yaml), NULL, "y", &cfg, err, sizeof(err)), KUBE_ECONFIG);
    cr_assert_not_null(strstr(err, "user \"nobody\" (context \"y\") not found"), "%s", err);
}

Test(config, server_scheme_and_slash)
{
    const char *bad = "clusters:\n- name: c\n  cluster: {server: 'ftp://c'}\n"
                      "contexts:\n- name: x\n  context: {cluster: c}\ncurrent-context: x\n";
    parse_fails(bad, strlen(bad), "must start with https:// or http://", "ftp://c");
    const char *good = "clusters:\n- name: c\n  cluster: {server: 'https://c:443//'}\n"
                       "contexts:\n- name: x\n  context: {cluster: c}\ncurrent-context: x\n";
    struct kube_config *cfg = parse_ok(good, NULL, NULL);
    cr_assert_str_eq(cfg->server, "https://c:443");
    cr_assert_null(kube_config_token(cfg), "a context without user has no token");
    cr_assert_not(kube_config_invalidate_token(cfg));
    kube_config_free(cfg);
}

/* ---- TLS material ------------------------------------------------------------------------ */

Test(config, credentials_from_data)
{
    char *ca = b64(CA_PEM), *cert = b64(CERT_PEM), *key = b64(KEY_PEM);
    char yaml[4096];
    /* The CA is split over lines the way a folded scalar arrives; base64 ignores them. */
    size_t half = strlen(ca) / 2;
    snprintf(yaml, sizeof(yaml),
             "clusters:\n- name: c\n  cluster:\n    server: https://c\n"
             "    certificate-authority-data: >-\n      %.*s\n      %s\n"
             "    certificate-authority: /does/not/exist\n"
             "users:\n- name: u\n  user:\n    client-certificate-data: %s\n    client-key-data: \"%s\"\n"
             "contexts:\n- name: x\n  context: {cluster: c, user: u}\ncurrent-context: x\n",
             (int)half, ca, ca + half, cert, key);
    struct kube_config *cfg = parse_ok(yaml, NULL, NULL);
    blob_is(&cfg->ca, CA_PEM);
    blob_is(&cfg->client_cert, CERT_PEM);
    blob_is(&cfg->client_key, KEY_PEM);
    cr_assert_null(kube_config_token(cfg));
    kube_config_free(cfg);
    free(ca);
    free(cert);
    free(key);
}

Test(config, base64_padding)
{
    /* "QQ==", "QQ" (padding left out) and "QUI=" decode; the padding is not part of the data. */
    const char *forms[][2] = {{"QQ==", "A"}, {"QQ", "A"}, {"QUI=", "AB"}, {"QUJD", "ABC"}, {" QU\n JD ", "ABC"}};
    for (size_t i = 0; i < sizeof(forms) / sizeof(forms[0]); i++) {
        char yaml[512];
        snprintf(yaml, sizeof(yaml),
                 "clusters:\n- name: c\n  cluster:\n    server: https://c\n    certificate-authority-data: \"%s\"\n"
                 "contexts:\n- name: x\n  context: {cluster: c}\ncurrent-context: x\n",
                 forms[i][0]);
        struct kube_config *cfg = parse_ok(yaml, NULL, NULL);
        blob_is(&cfg->ca, forms[i][1]);
        kube_config_free(cfg);
    }
}

Test(config, invalid_base64)
{
    const char *bad[] = {"not*base64", "QQ=A", "Q", "QQ===", "=QQQ", "QUJD\\u00e9"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char yaml[512];
        snprintf(yaml, sizeof(yaml),
                 "clusters:\n- name: c\n  cluster: {server: https://c}\n"
                 "users:\n- name: u\n  user:\n    client-certificate-data: QUJD\n    client-key-data: \"%s\"\n"
                 "contexts:\n- name: x\n  context: {cluster: c, user: u}\ncurrent-context: x\n",
                 bad[i]);
        parse_fails(yaml, strlen(yaml), "user \"u\" (context \"x\"): client-key-data is not valid base64", NULL);
    }
}

Test(config, credentials_from_relative_files)
{
    cr_assert_eq(mkdir(tmp_path(0, "pki"), 0700), 0);
    write_file(tmp_path(0, "pki/ca.crt"), CA_PEM);
    write_file(tmp_path(0, "pki/client.crt"), CERT_PEM);
    write_file(tmp_path(0, "client.key"), KEY_PEM);
    const char *yaml = "clusters:\n- name: c\n  cluster:\n    server: https://c\n"
                       "    certificate-authority: pki/ca.crt\n"
                       "users:\n- name: u\n  user:\n    client-certificate: pki/client.crt\n"
                       "    client-key: client.key\n"
                       "contexts:\n- name: x\n  context: {cluster: c, user: u}\ncurrent-context: x\n";
    write_file(tmp_path(1, "config"), yaml);

    /* Loaded from another directory: the paths follow the kubeconfig, not the cwd. */
    cr_assert_eq(chdir("/"), 0);
    struct kube_config *cfg = NULL;
    int rc = kube_config_load_kubeconfig(tmp_path(1, "config"), NULL, &cfg, err, sizeof(err));
    cr_assert_eq(rc, 0, "%s", err);
    blob_is(&cfg->ca, CA_PEM);
    blob_is(&cfg->client_cert, CERT_PEM);
    blob_is(&cfg->client_key, KEY_PEM);
    kube_config_free(cfg);

    /* The same text parsed from memory with an explicit base directory. */
    cfg = parse_ok(yaml, tmp_dir, NULL);
    blob_is(&cfg->ca, CA_PEM);
    kube_config_free(cfg);
}

Test(config, unreadable_credential_file)
{
    const char *yaml = "clusters:\n- name: c\n  cluster:\n    server: https://c\n"
                       "    certificate-authority: missing-ca.crt\n"
                       "contexts:\n- name: x\n  context: {cluster: c}\ncurrent-context: x\n";
    write_file(tmp_path(0, "config"), yaml);
    struct kube_config *cfg = NULL;
    int rc = kube_config_load_kubeconfig(tmp_path(0, "config"), NULL, &cfg, err, sizeof(err));
    cr_assert_eq(rc, KUBE_ECONFIG);
    cr_assert_null(cfg);
    cr_assert_not_null(strstr(err, tmp_path(0, "config")), "%s", err);
    cr_assert_not_null(strstr(err, "cannot read certificate-authority"), "%s", err);
    cr_assert_not_null(strstr(err, tmp_path(1, "missing-ca.crt")), "%s", err);
}

Test(config, client_cert_without_key)
{
    const char *yaml = "clusters:\n- name: c\n  cluster: {server: https://c}\n"
                       "users:\n- name: u\n  user: {client-certificate-data: QUJD}\n"
                       "contexts:\n- name: x\n  context: {cluster: c, user: u}\ncurrent-context: x\n";
    parse_fails(yaml, strlen(yaml), "without client-key", NULL);
}

Test(config, insecure_only_when_written_true)
{
    const char *values[] = {"", "    insecure-skip-tls-verify: false\n", "    insecure-skip-tls-verify: true\n",
                            "    insecure-skip-tls-verify: ~\n"};
    const bool want[] = {false, false, true, false};
    for (size_t i = 0; i < 4; i++) {
        char yaml[512];
        snprintf(yaml, sizeof(yaml),
                 "clusters:\n- name: c\n  cluster:\n    server: https://c\n%s"
                 "contexts:\n- name: x\n  context: {cluster: c}\ncurrent-context: x\n",
                 values[i]);
        struct kube_config *cfg = parse_ok(yaml, NULL, NULL);
        cr_assert_eq(cfg->insecure_skip_tls_verify, want[i], "case %zu", i);
        kube_config_free(cfg);
    }
    /* Anything else is a mistake worth reporting, not a silent "true". */
    const char *odd[] = {"yes", "'true'", "1"};
    for (size_t i = 0; i < 3; i++) {
        char yaml[512];
        snprintf(yaml, sizeof(yaml),
                 "clusters:\n- name: c\n  cluster:\n    server: https://c\n    insecure-skip-tls-verify: %s\n"
                 "contexts:\n- name: x\n  context: {cluster: c}\ncurrent-context: x\n",
                 odd[i]);
        parse_fails(yaml, strlen(yaml), "insecure-skip-tls-verify must be true or false", NULL);
    }
}

/* ---- tokens ------------------------------------------------------------------------------ */

Test(config, static_token)
{
    const char *yaml = "clusters:\n- name: c\n  cluster: {server: https://c}\n"
                       "users:\n- name: u\n  user:\n    token: \"abc.def-ghi\"\n"
                       "contexts:\n- name: x\n  context: {cluster: c, user: u}\ncurrent-context: x\n";
    struct kube_config *cfg = parse_ok(yaml, NULL, NULL);
    token_is(cfg, "abc.def-ghi");
    cr_assert_not(kube_config_invalidate_token(cfg), "a static token has no file to re-read");
    token_is(cfg, "abc.def-ghi");
    kube_config_free(cfg);
}

static struct kube_config *token_file_config(void)
{
    write_file(tmp_path(2, "token"), "first-token\n");
    const char *yaml = "clusters:\n- name: c\n  cluster: {server: https://c}\n"
                       "users:\n- name: u\n  user:\n    token: static-loses\n    tokenFile: token\n"
                       "contexts:\n- name: x\n  context: {cluster: c, user: u}\ncurrent-context: x\n";
    write_file(tmp_path(3, "config"), yaml);
    struct kube_config *cfg = NULL;
    int rc = kube_config_load_kubeconfig(tmp_path(3, "config"), NULL, &cfg, err, sizeof(err));
    cr_assert_eq(rc, 0, "%s", err);
    return cfg;
}

Test(config, token_file_read_and_trimmed)
{
    struct kube_config *cfg = token_file_config();
    token_is(cfg, "first-token");
    kube_config_free(cfg);
}

Test(config, token_file_rotated_and_invalidated)
{
    struct kube_config *cfg = token_file_config();
    kube_config_set_token_max_age_ms(cfg, UINT64_MAX); /* never too old: only a 401 re-reads */
    token_is(cfg, "first-token");
    rotate_file(tmp_path(2, "token"), "second-token\r\n");
    token_is(cfg, "first-token"); /* not yet re-read: the token is fresh */
    cr_assert(kube_config_invalidate_token(cfg));
    token_is(cfg, "second-token");
    kube_config_free(cfg);
}

/* A maximum age of 0: every use is past it, so every use reads the file. */
Test(config, token_file_rotated_reread_after_max_age)
{
    struct kube_config *cfg = token_file_config();
    kube_config_set_token_max_age_ms(cfg, 0);
    token_is(cfg, "first-token");
    rotate_file(tmp_path(2, "token"), "second-token\n");
    token_is(cfg, "second-token");
    kube_config_free(cfg);
}

Test(config, token_file_reread_failure_keeps_previous)
{
    struct kube_config *cfg = token_file_config();
    cr_assert_eq(unlink(tmp_path(2, "token")), 0);
    cr_assert(kube_config_invalidate_token(cfg));
    token_is(cfg, "first-token");
    write_file(tmp_path(2, "token"), "\n");
    cr_assert(kube_config_invalidate_token(cfg));
    token_is(cfg, "first-token"); /* an empty file is no token */
    kube_config_free(cfg);
}

Test(config, token_file_missing_at_load)
{
    const char *yaml = "clusters:\n- name: c\n  cluster: {server: https://c}\n"
                       "users:\n- name: u\n  user: {tokenFile: /nonexistent/token}\n"
                       "contexts:\n- name: x\n  context: {cluster: c, user: u}\ncurrent-context: x\n";
    parse_fails(yaml, strlen(yaml), "cannot read tokenFile /nonexistent/token", "user \"u\"");
}

Test(config, exec_plugin_refused)
{
    const char *yaml = "clusters:\n- name: c\n  cluster: {server: https://c}\n"
                       "users:\n- name: u\n  user:\n    exec:\n      apiVersion: client.authentication.k8s.io/v1\n"
                       "      command: aws\n      args: [eks, get-token]\n"
                       "contexts:\n- name: x\n  context: {cluster: c, user: u}\ncurrent-context: x\n";
    parse_fails(yaml, strlen(yaml), "user \"u\"", "credential plugins (exec) are not supported");
    const char *gcp = "clusters:\n- name: c\n  cluster: {server: https://c}\n"
                      "users:\n- name: u\n  user:\n    auth-provider: {name: gcp}\n"
                      "contexts:\n- name: x\n  context: {cluster: c, user: u}\ncurrent-context: x\n";
    parse_fails(gcp, strlen(gcp), "credential plugins (auth-provider) are not supported", NULL);

    /* With a token beside it, the plugin is simply ignored. */
    const char *both = "clusters:\n- name: c\n  cluster: {server: https://c}\n"
                       "users:\n- name: u\n  user:\n    token: t\n    exec: {command: aws}\n"
                       "contexts:\n- name: x\n  context: {cluster: c, user: u}\ncurrent-context: x\n";
    struct kube_config *cfg = parse_ok(both, NULL, NULL);
    token_is(cfg, "t");
    kube_config_free(cfg);
}

/* ---- $KUBECONFIG and the default path ---------------------------------------------------- */

static const char FIRST[] = "clusters:\n- name: shared\n  cluster: {server: https://first}\n"
                            "users:\n- name: u\n  user: {token: first-token}\n"
                            "contexts:\n- name: one\n  context: {cluster: shared, user: u, namespace: ns1}\n"
                            "current-context: one\n";
static const char SECOND[] = "clusters:\n- name: shared\n  cluster: {server: https://second}\n"
                             "- name: own\n  cluster: {server: https://own}\n"
                             "users:\n- name: u\n  user: {token: second-token}\n"
                             "contexts:\n- name: one\n  context: {cluster: own}\n"
                             "- name: two\n  context: {cluster: own, user: u}\n"
                             "current-context: two\n";

Test(config, kubeconfig_env_merge_first_wins)
{
    write_file(tmp_path(0, "first"), FIRST);
    write_file(tmp_path(1, "second"), SECOND);
    char env[2048];
    snprintf(env, sizeof(env), "%s:%s:%s", tmp_path(2, "absent"), tmp_path(0, "first"), tmp_path(1, "second"));
    setenv("KUBECONFIG", env, 1);

    struct kube_config *cfg = NULL;
    int rc = kube_config_load_kubeconfig(NULL, NULL, &cfg, err, sizeof(err));
    cr_assert_eq(rc, 0, "%s", err);
    cr_assert_str_eq(cfg->context_name, "one"); /* current-context of the first file */
    cr_assert_str_eq(cfg->server, "https://first");
    cr_assert_str_eq(cfg->namespace, "ns1");
    token_is(cfg, "first-token");
    kube_config_free(cfg);

    /* A context only the second file defines, naming a cluster only it has and a user both
     * have: the user comes from the first file. */
    rc = kube_config_load_kubeconfig(NULL, "two", &cfg, err, sizeof(err));
    cr_assert_eq(rc, 0, "%s", err);
    cr_assert_str_eq(cfg->server, "https://own");
    token_is(cfg, "first-token");
    kube_config_free(cfg);

    /* Reversed, the second file wins everything it defines. */
    snprintf(env, sizeof(env), "%s:%s", tmp_path(1, "second"), tmp_path(0, "first"));
    setenv("KUBECONFIG", env, 1);
    rc = kube_config_load_kubeconfig(NULL, NULL, &cfg, err, sizeof(err));
    cr_assert_eq(rc, 0, "%s", err);
    cr_assert_str_eq(cfg->context_name, "two");
    token_is(cfg, "second-token");
    kube_config_free(cfg);
}

Test(config, kubeconfig_env_current_context_from_later_file)
{
    write_file(tmp_path(0, "no-current"), "clusters: []\n");
    write_file(tmp_path(1, "second"), SECOND);
    char env[2048];
    snprintf(env, sizeof(env), "%s:%s", tmp_path(0, "no-current"), tmp_path(1, "second"));
    setenv("KUBECONFIG", env, 1);
    struct kube_config *cfg = NULL;
    int rc = kube_config_load_kubeconfig(NULL, NULL, &cfg, err, sizeof(err));
    cr_assert_eq(rc, 0, "%s", err);
    cr_assert_str_eq(cfg->context_name, "two");
    kube_config_free(cfg);
}

Test(config, kubeconfig_env_all_missing)
{
    char env[2048];
    snprintf(env, sizeof(env), "%s:%s", tmp_path(0, "a"), tmp_path(1, "b"));
    setenv("KUBECONFIG", env, 1);
    struct kube_config *cfg = NULL;
    int rc = kube_config_load_kubeconfig(NULL, NULL, &cfg, err, sizeof(err));
    cr_assert_eq(rc, KUBE_ECONFIG);
    cr_assert_null(cfg);
    cr_assert_not_null(strstr(err, "none of the files exists"), "%s", err);
}

Test(config, explicit_path_must_exist)
{
    struct kube_config *cfg = NULL;
    int rc = kube_config_load_kubeconfig(tmp_path(0, "nope"), NULL, &cfg, err, sizeof(err));
    cr_assert_eq(rc, KUBE_ECONFIG);
    cr_assert_not_null(strstr(err, tmp_path(0, "nope")), "%s", err);
    cr_assert_not_null(strstr(err, "No such file"), "%s", err);
}

Test(config, default_path_under_home)
{
    unsetenv("KUBECONFIG");
    setenv("HOME", tmp_dir, 1);
    cr_assert_eq(mkdir(tmp_path(0, ".kube"), 0700), 0);
    write_file(tmp_path(1, ".kube/config"), FIRST);
    struct kube_config *cfg = NULL;
    int rc = kube_config_load_kubeconfig(NULL, NULL, &cfg, err, sizeof(err));
    cr_assert_eq(rc, 0, "%s", err);
    cr_assert_str_eq(cfg->server, "https://first");
    kube_config_free(cfg);
}

/* ---- in-cluster -------------------------------------------------------------------------- */

static void write_service_account(void)
{
    write_file(tmp_path(0, "token"), "sa-token-1\n");
    write_file(tmp_path(1, "ca.crt"), CA_PEM);
    write_file(tmp_path(2, "namespace"), "jobs\n");
}

/* A self-signed certificate made by openssl (the CA file must hold a real one), as PEM text in
 * static storage of the slot. */
static const char *real_ca(int slot, const char *cn)
{
    static char pem[2][4096];
    char cmd[1024], out[600];
    snprintf(out, sizeof(out), "%s/made-%d.crt", tmp_dir, slot);
    snprintf(cmd, sizeof(cmd),
             "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj /CN=%s "
             "-keyout /dev/null -out %s -days 1 2>/dev/null", cn, out);
    cr_assert_eq(system(cmd), 0, "openssl could not make a certificate");
    FILE *f = fopen(out, "r");
    cr_assert_not_null(f);
    size_t n = fread(pem[slot], 1, sizeof(pem[slot]) - 1, f);
    pem[slot][n] = '\0';
    fclose(f);
    unlink(out);
    return pem[slot];
}

/* kube_config_ca's answer must be want (NULL: an error whose message holds `error`). */
static void ca_is(struct kube_config *cfg, const char *want, const char *error)
{
    char *pem = (char *)1;
    size_t len = 1;
    err[0] = '\0';
    int rc = kube_config_ca(cfg, &pem, &len, err, sizeof(err));
    if (want) {
        cr_assert_eq(rc, 0, "kube_config_ca: %d %s", rc, err);
        cr_assert_not_null(pem);
        cr_assert_eq(len, strlen(want));
        cr_assert_str_eq(pem, want);
    } else {
        cr_assert_eq(rc, KUBE_ECONFIG, "rc=%d, want KUBE_ECONFIG", rc);
        cr_assert_null(pem);
        cr_assert_not_null(strstr(err, error), "message \"%s\" lacks \"%s\"", err, error);
        cr_assert_not_null(strstr(err, tmp_path(7, "ca.crt")), "message \"%s\" names no file", err);
    }
    free(pem == (char *)1 ? NULL : pem);
}

static struct kube_config *load_in_cluster_ok(void)
{
    setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1", 1);
    setenv("KUBERNETES_SERVICE_PORT", "443", 1);
    struct kube_config *cfg = NULL;
    int rc = kube_config_load_in_cluster(tmp_dir, &cfg, err, sizeof(err));
    cr_assert_eq(rc, 0, "%s", err);
    return cfg;
}

Test(config, in_cluster)
{
    write_service_account();
    const char *ca = real_ca(0, "cluster-ca");
    write_file(tmp_path(1, "ca.crt"), ca);
    struct kube_config *cfg = load_in_cluster_ok();
    cr_assert_str_eq(cfg->server, "https://10.96.0.1:443");
    cr_assert_str_eq(cfg->namespace, "jobs");
    cr_assert_null(cfg->context_name);
    ca_is(cfg, ca, NULL);
    cr_assert_not(cfg->insecure_skip_tls_verify);
    token_is(cfg, "sa-token-1");

    rotate_file(tmp_path(0, "token"), "sa-token-2\n");
    cr_assert(kube_config_invalidate_token(cfg));
    token_is(cfg, "sa-token-2");
    kube_config_free(cfg);
}

Test(config, in_cluster_ipv6_and_default_namespace)
{
    write_file(tmp_path(0, "token"), "t");
    setenv("KUBERNETES_SERVICE_HOST", "fd00:10:96::1", 1);
    setenv("KUBERNETES_SERVICE_PORT", "6443", 1);
    struct kube_config *cfg = NULL;
    int rc = kube_config_load_in_cluster(tmp_dir, &cfg, err, sizeof(err));
    cr_assert_eq(rc, 0, "%s", err);
    cr_assert_str_eq(cfg->server, "https://[fd00:10:96::1]:6443");
    cr_assert_str_eq(cfg->namespace, "default");
    kube_config_free(cfg);
}

/* A ca.crt the kubelet has not written yet: the configuration loads, every request asks for the
 * CA and gets an error naming the file (never the system's trust store), and the first request
 * after the file appears uses it. */
Test(config, in_cluster_ca_published_late)
{
    write_file(tmp_path(0, "token"), "t");
    struct kube_config *cfg = load_in_cluster_ok();
    ca_is(cfg, NULL, "No such file or directory");
    ca_is(cfg, NULL, "No such file or directory");
    const char *ca = real_ca(0, "late-ca");
    rotate_file(tmp_path(1, "ca.crt"), ca);
    ca_is(cfg, ca, NULL); /* no earlier good copy: read at once, whatever the check interval */
    kube_config_free(cfg);
}

/* Rotation: a changed file is read again at the next look (every KUBE_CA_CHECK_MS; at every call
 * with an interval of 0), or at once after a failed verification; until then the copy in hand is
 * used. */
Test(config, in_cluster_ca_rotated)
{
    write_file(tmp_path(0, "token"), "t");
    const char *first = real_ca(0, "first-ca"), *second = real_ca(1, "second-ca");
    write_file(tmp_path(1, "ca.crt"), first);
    struct kube_config *cfg = load_in_cluster_ok();
    ca_is(cfg, first, NULL);

    kube_config_set_ca_check_ms(cfg, UINT64_MAX); /* no look at the file but the ones asked for */
    rotate_file(tmp_path(1, "ca.crt"), second);
    ca_is(cfg, first, NULL);
    cr_assert(kube_config_invalidate_ca(cfg));
    ca_is(cfg, second, NULL);

    kube_config_set_ca_check_ms(cfg, 0);
    rotate_file(tmp_path(1, "ca.crt"), first);
    ca_is(cfg, first, NULL);
    kube_config_free(cfg);
}

/* A CA file that is empty, holds no certificate or vanishes: an error naming the file while there
 * is no good copy; once one was read, it is kept (a half-written file is not a reason to stop). */
Test(config, in_cluster_ca_unusable)
{
    write_file(tmp_path(0, "token"), "t");
    write_file(tmp_path(1, "ca.crt"), "");
    struct kube_config *cfg = load_in_cluster_ok();
    kube_config_set_ca_check_ms(cfg, 0);
    ca_is(cfg, NULL, "the file is empty");
    rotate_file(tmp_path(1, "ca.crt"), CA_PEM); /* PEM armour around no certificate */
    ca_is(cfg, NULL, "holds no PEM certificate");
    cr_assert_eq(mkdir(tmp_path(1, "ca.crt.d"), 0755), 0);
    cr_assert_eq(unlink(tmp_path(1, "ca.crt")), 0);
    cr_assert_eq(rename(tmp_path(2, "ca.crt.d"), tmp_path(1, "ca.crt")), 0);
    ca_is(cfg, NULL, "not a regular file");
    cr_assert_eq(rmdir(tmp_path(1, "ca.crt")), 0);

    const char *good = real_ca(0, "good-ca");
    write_file(tmp_path(1, "ca.crt"), good);
    ca_is(cfg, good, NULL);
    rotate_file(tmp_path(1, "ca.crt"), "-----BEGIN CERTIFICATE-----\nMIIBhalf");
    ca_is(cfg, good, NULL);
    cr_assert_eq(unlink(tmp_path(1, "ca.crt")), 0);
    ca_is(cfg, good, NULL);
    kube_config_free(cfg);
}

/* A kubeconfig's CA is the one it was loaded with; there is no file to read again. */
Test(config, kubeconfig_ca_is_fixed)
{
    char *ca = b64(CA_PEM);
    char yaml[2048];
    snprintf(yaml, sizeof(yaml),
             "clusters:\n- name: c\n  cluster:\n    server: https://c\n    certificate-authority-data: %s\n"
             "users:\n- name: u\n  user: {token: t}\ncontexts:\n- name: x\n  context: {cluster: c, user: u}\n"
             "current-context: x\n", ca);
    free(ca);
    struct kube_config *cfg = parse_ok(yaml, NULL, NULL);
    char *pem;
    size_t len;
    cr_assert_eq(kube_config_ca(cfg, &pem, &len, err, sizeof(err)), 0);
    cr_assert_eq(len, strlen(CA_PEM));
    cr_assert_str_eq(pem, CA_PEM);
    free(pem);
    cr_assert_not(kube_config_invalidate_ca(cfg));
    kube_config_free(cfg);

    cfg = parse_ok("clusters:\n- name: c\n  cluster: {server: https://c}\nusers:\n- name: u\n  user: {token: t}\n"
                   "contexts:\n- name: x\n  context: {cluster: c, user: u}\ncurrent-context: x\n", NULL, NULL);
    cr_assert_eq(kube_config_ca(cfg, &pem, &len, err, sizeof(err)), 0);
    cr_assert_null(pem, "no CA named: the system's trust store verifies");
    kube_config_free(cfg);
}

Test(config, in_cluster_errors)
{
    write_service_account();
    unsetenv("KUBERNETES_SERVICE_HOST");
    setenv("KUBERNETES_SERVICE_PORT", "443", 1);
    struct kube_config *cfg = NULL;
    cr_assert_eq(kube_config_load_in_cluster(tmp_dir, &cfg, err, sizeof(err)), KUBE_ECONFIG);
    cr_assert_not_null(strstr(err, "KUBERNETES_SERVICE_HOST"), "%s", err);

    setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1", 1);
    setenv("KUBERNETES_SERVICE_PORT", "https", 1);
    cr_assert_eq(kube_config_load_in_cluster(tmp_dir, &cfg, err, sizeof(err)), KUBE_ECONFIG);
    cr_assert_not_null(strstr(err, "not a port number"), "%s", err);

    setenv("KUBERNETES_SERVICE_PORT", "443", 1);
    cr_assert_eq(unlink(tmp_path(0, "token")), 0);
    cr_assert_eq(kube_config_load_in_cluster(tmp_dir, &cfg, err, sizeof(err)), KUBE_ECONFIG);
    cr_assert_null(cfg);
    cr_assert_not_null(strstr(err, "cannot read token file"), "%s", err);
    cr_assert_not_null(strstr(err, tmp_path(0, "token")), "%s", err);
}

/* ---- malformed input --------------------------------------------------------------------- */

Test(config, yaml_with_tabs)
{
    const char *yaml = "clusters:\n\t- name: c\n";
    parse_fails(yaml, strlen(yaml), "kubeconfig: line 2 column 1", "cannot start any token");
}

Test(config, yaml_unclosed_quote)
{
    const char *yaml = "current-context: \"abc\nclusters: []\n";
    parse_fails(yaml, strlen(yaml), "kubeconfig: line 3", "while scanning a quoted scalar at line 1 column 18");
}

Test(config, yaml_bad_indentation)
{
    const char *yaml = "clusters:\n- name: c\n  cluster:\n    server: https://c\n   bad: 1\n";
    parse_fails(yaml, strlen(yaml), "line 5 column 4", NULL);
}

Test(config, list_where_a_map_belongs)
{
    const char *yaml = "clusters:\n- name: c\n  cluster:\n  - server: https://c\n"
                       "contexts:\n- name: x\n  context: {cluster: c}\ncurrent-context: x\n";
    parse_fails(yaml, strlen(yaml), "line 4 column 3: cluster \"c\": cluster must be a mapping, found a list", NULL);
    const char *top = "clusters:\n  name: c\n";
    parse_fails(top, strlen(top), "clusters must be a list, found a mapping", NULL);
    const char *item = "users:\n- just-a-name\n";
    parse_fails(item, strlen(item), "users[0] must be a mapping, found a string", NULL);
    const char *field = "clusters:\n- name: c\n  cluster: {server: [https://c]}\n"
                        "contexts:\n- name: x\n  context: {cluster: c}\ncurrent-context: x\n";
    parse_fails(field, strlen(field), "cluster \"c\": server must be a string, found a list", NULL);
}

Test(config, scalar_and_list_documents)
{
    parse_fails("just a string\n", 14, "top level must be a mapping, found a string", NULL);
    parse_fails("- a\n- b\n", 8, "top level must be a mapping, found a list", NULL);
}

Test(config, empty_file)
{
    parse_fails("", 0, "kubeconfig is empty", NULL);
    parse_fails("# only a comment\n---\n", 21, "kubeconfig is empty", NULL);
    write_file(tmp_path(0, "empty"), "");
    struct kube_config *cfg = NULL;
    cr_assert_eq(kube_config_load_kubeconfig(tmp_path(0, "empty"), NULL, &cfg, err, sizeof(err)), KUBE_ECONFIG);
    cr_assert_not_null(strstr(err, tmp_path(0, "empty")), "%s", err);
    cr_assert_not_null(strstr(err, "is empty"), "%s", err);
}

Test(config, binary_garbage)
{
    static const char garbage[] = {'\x7f', 'E', 'L', 'F', '\x02', '\x01', '\x00', '\x00', '\x89', '\xfe', '\xff'};
    parse_fails(garbage, sizeof(garbage), "kubeconfig: byte offset", NULL);
    static const char bad_utf8[] = "clusters:\n- name: \xc3\x28\n";
    parse_fails(bad_utf8, sizeof(bad_utf8) - 1, "invalid", "UTF-8");
}

Test(config, deep_nesting_and_aliases)
{
    char deep[1024];
    memset(deep, '[', 500);
    memset(deep + 500, ']', 500);
    parse_fails(deep, 1000, "line 1 column 65: nested deeper than 64 levels", NULL);
    /* Unclosed, it is not YAML at all: libyaml's message, with its position. */
    parse_fails(deep, 500, "kubeconfig: line ", "did not find expected node content");

    /* An alias inside the collection it names would make a cycle: refused. */
    const char *cycle = "clusters: &a [*a]\n";
    parse_fails(cycle, strlen(cycle), "line 1 column 11: an alias inside this collection refers back to it (a cycle)",
                NULL);
    const char *undefined = "clusters: *nope\n";
    parse_fails(undefined, strlen(undefined), "kubeconfig: line 1 column 11: found undefined alias", NULL);

    /* "Billion laughs": each level multiplies the one before by ten. */
    const char *laughs = "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
                         "b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
                         "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\n"
                         "d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
                         "e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\n"
                         "f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]\n"
                         "clusters: [*f, *f, *f, *f, *f, *f, *f, *f, *f, *f]\n";
    parse_fails(laughs, strlen(laughs), "aliases expand to more than", NULL);

    /* Aliases to finished nodes work, as YAML allows. */
    const char *alias = "clusters:\n- name: c\n  cluster: &cl {server: https://c}\n- name: d\n  cluster: *cl\n"
                        "contexts:\n- name: x\n  context: {cluster: d}\ncurrent-context: x\n";
    struct kube_config *cfg = parse_ok(alias, NULL, NULL);
    cr_assert_str_eq(cfg->server, "https://c");
    kube_config_free(cfg);
}

Test(config, not_nul_terminated_input)
{
    /* The parser must read exactly len bytes: the text continues past them here. */
    const char *yaml = "clusters:\n- name: c\n  cluster: {server: https://c}\n"
                       "contexts:\n- name: x\n  context: {cluster: c}\ncurrent-context: x\nGARBAGE: [";
    struct kube_config *cfg = NULL;
    int rc = kube_config_parse(yaml, strlen(yaml) - strlen("GARBAGE: ["), NULL, NULL, &cfg, err, sizeof(err));
    cr_assert_eq(rc, 0, "%s", err);
    kube_config_free(cfg);
}

Test(config, free_null)
{
    kube_config_free(NULL);
    cr_assert_null(kube_config_token(NULL));
    cr_assert_not(kube_config_invalidate_token(NULL));
}

/* ---- the cluster domain from a pod's resolv.conf ------------------------------------------ */

static int domain_of(const char *resolv, const char *ns, char **out)
{
    write_file(tmp_path(0, "resolv.conf"), resolv);
    return kube_config_cluster_domain(tmp_path(0, "resolv.conf"), ns, out);
}

Test(config, cluster_domain_from_the_kubelets_search_list, .init = make_tmp_dir, .fini = remove_tmp_dir)
{
    char *d = NULL;
    cr_assert_eq(domain_of("search mpijob-system.svc.cluster.local svc.cluster.local cluster.local\n"
                           "nameserver 10.96.0.10\noptions ndots:5\n", "mpijob-system", &d), 0);
    cr_assert_str_eq(d, "cluster.local");
    free(d);
    /* a custom domain, a trailing dot, a pod's own extra search first, tabs */
    cr_assert_eq(domain_of("nameserver 10.0.0.10\nsearch\tx.example  team-a.svc.corp.example.  svc.corp.example\n",
                           "team-a", &d), 0);
    cr_assert_str_eq(d, "corp.example");
    free(d);
}

Test(config, cluster_domain_absent_outside_a_pod, .init = make_tmp_dir, .fini = remove_tmp_dir)
{
    char *d = NULL;
    cr_assert_eq(domain_of("nameserver 192.168.1.1\nsearch lan\n", "default", &d), KUBE_ENOTFOUND);
    cr_assert_null(d);
    /* another namespace's entry is not this pod's; "<ns>.svc." alone names no domain */
    cr_assert_eq(domain_of("search other.svc.cluster.local default.svc.\n", "default", &d), KUBE_ENOTFOUND);
    cr_assert_eq(domain_of("", "default", &d), KUBE_ENOTFOUND);
    cr_assert_eq(kube_config_cluster_domain(tmp_path(1, "missing"), "default", &d), KUBE_ECONFIG);
    cr_assert_eq(kube_config_cluster_domain(tmp_path(1, "missing"), "", &d), KUBE_EINVAL);
}
