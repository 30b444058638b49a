/* mpijob-operator: watches MPIJob resources and drives their launcher and worker pods.
 *
 * This build provides the Kubernetes client foundation (src/kube) and a connectivity check;
 * the MPIJob controller itself lands in src/mpijob. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kube/client.h"
#include "kube/config.h"
#include "util/log.h"

static void usage(FILE *out)
{
    fprintf(out,
            "Usage: mpijob-operator [options]\n"
            "\n"
            "Kubernetes operator for kubeflow.org MPIJob resources.\n"
            "\n"
            "This build contains the Kubernetes API client only: it loads the configuration,\n"
            "connects to the API server and reports its version (--check). The MPIJob\n"
            "controller is not part of this build yet.\n"
            "\n"
            "Options:                     default\n"
            "  --kubeconfig PATH          $KUBECONFIG, ~/.kube/config, else in-cluster\n"
            "  --context NAME             the kubeconfig's current-context\n"
            "  --check                    connect, print the server version, exit\n"
            "  --log-format text|json     text\n"
            "  -v                         verbose (debug) logging\n"
            "  -h, --help                 this help\n");
}

int main(int argc, char **argv)
{
    static const struct option long_opts[] = {
        {"kubeconfig", required_argument, NULL, 'k'}, {"context", required_argument, NULL, 'c'},
        {"check", no_argument, NULL, 'C'},           {"log-format", required_argument, NULL, 'f'},
        {"help", no_argument, NULL, 'h'},            {NULL, 0, NULL, 0}};
    const char *kubeconfig = NULL, *context = NULL;
    int check = 0, opt;
    while ((opt = getopt_long(argc, argv, "hv", long_opts, NULL)) != -1) {
        switch (opt) {
        case 'k': kubeconfig = optarg; break;
        case 'c': context = optarg; break;
        case 'C': check = 1; break;
        case 'f':
            if (strcmp(optarg, "json") == 0)
                log_set_format(LOG_JSON);
            else if (strcmp(optarg, "text") != 0) {
                fprintf(stderr, "mpijob-operator: --log-format must be text or json\n");
                usage(stderr);
                return 2;
            }
            break;
        case 'v': log_set_level(LOG_DEBUG); break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "mpijob-operator: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return 2;
    }
    if (!check) {
        fprintf(stderr, "mpijob-operator: the MPIJob controller is not part of this build; "
                        "use --check to test the connection to the API server\n");
        return 1;
    }

    char err[512] = "";
    struct kube_config *cfg = NULL;
    int rc;
    if (kubeconfig || getenv("KUBECONFIG") || !getenv("KUBERNETES_SERVICE_HOST"))
        rc = kube_config_load_kubeconfig(kubeconfig, context, &cfg, err, sizeof(err));
    else
        rc = kube_config_load_in_cluster(NULL, &cfg, err, sizeof(err));
    if (rc < 0) {
        log_error("cannot load the API server configuration", "error=\"%s\"", err);
        return 1;
    }
    struct kube_client *client = NULL;
    rc = kube_client_new(cfg, NULL, &client);
    if (rc < 0) {
        log_error("cannot create the API client", "error=\"%s\"", kube_strerror(rc));
        return 1;
    }
    cJSON *version = NULL;
    struct kube_status st = {.retry_after_s = -1};
    rc = kube_request(client, "GET", "/version", NULL, NULL, NULL, &version, &st);
    if (rc < 0) {
        log_error("API server unreachable", "error=\"%s\" message=\"%s\"", kube_strerror(rc),
                  st.message ? st.message : "");
    } else {
        cJSON *gv = cJSON_GetObjectItemCaseSensitive(version, "gitVersion");
        printf("connected to %s, Kubernetes %s\n", kube_client_config(client)->server,
               cJSON_IsString(gv) ? gv->valuestring : "(unknown version)");
    }
    kube_status_clear(&st);
    cJSON_Delete(version);
    kube_client_free(client);
    return rc < 0 ? 1 : 0;
}
