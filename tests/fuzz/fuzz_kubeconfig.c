/* Fuzzes the kubeconfig parser: YAML, the walk over clusters/users/contexts, base64 and the
 * token state. Relative credential paths resolve into a scratch directory holding a CA file
 * and a token file, so the file-reading branches run too. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kube/config.h"
#include "util/log.h"

static char scratch[64];

static void write_scratch(const char *name, const char *content)
{
    char path[128];
    snprintf(path, sizeof(path), "%s/%s", scratch, name);
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(content, f);
        fclose(f);
    }
}

static void remove_scratch(void)
{
    const char *names[] = {"ca.crt", "token", "client.crt", "client.key"};
    char path[128];
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        snprintf(path, sizeof(path), "%s/%s", scratch, names[i]);
        unlink(path);
    }
    rmdir(scratch);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    log_set_level(LOG_ERROR); /* token re-read warnings would drown the fuzzer's output */
    strcpy(scratch, "/tmp/fuzz-kubeconfig-XXXXXX");
    if (!mkdtemp(scratch)) {
        scratch[0] = '\0';
        return 0;
    }
    write_scratch("ca.crt", "-----BEGIN CERTIFICATE-----\nMIIBfake\n-----END CERTIFICATE-----\n");
    write_scratch("client.crt", "-----BEGIN CERTIFICATE-----\nMIIBclient\n-----END CERTIFICATE-----\n");
    write_scratch("client.key", "-----BEGIN EC PRIVATE KEY-----\nMHcfake\n-----END EC PRIVATE KEY-----\n");
    write_scratch("token", "fuzz-token\n");
    atexit(remove_scratch);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct kube_config *cfg = NULL;
    char err[512];
    const char *base_dir = scratch[0] ? scratch : NULL;

    int rc = kube_config_parse((const char *)data, size, base_dir, NULL, &cfg, err, sizeof(err));
    if (rc == 0) {
        free(kube_config_token(cfg));
        kube_config_invalidate_token(cfg);
        free(kube_config_token(cfg));
    } else if (cfg || !memchr(err, '\0', sizeof(err)) || err[0] == '\0') {
        abort(); /* a failure must leave no config behind and say why */
    }
    kube_config_free(cfg);

    /* The same text with a context named explicitly takes the other lookup path. */
    rc = kube_config_parse((const char *)data, size, base_dir, "fuzz", &cfg, err, sizeof(err));
    if (rc == 0)
        free(kube_config_token(cfg));
    kube_config_free(cfg);
    return 0;
}
