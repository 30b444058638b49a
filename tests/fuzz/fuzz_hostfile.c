/* Fuzzes the hostfile and discover_hosts.sh renderers with jobs parsed from arbitrary JSON and
 * arbitrary pod names (the part of the input after the first NUL, one name per line): the
 * worker-index parsing that orders names must never misbehave, every given name must be echoed
 * exactly once, and the hostfile must have one line per host. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpijob/hostfile.h"
#include "mpijob/mpijob.h"

static size_t count(const char *s, const char *needle)
{
    size_t n = 0, len = strlen(needle);
    for (const char *p = s; (p = strstr(p, needle)) != NULL; p += len)
        n++;
    return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nul = memchr(data, '\0', size);
    size_t json_len = nul ? (size_t)(nul - data) : size;
    cJSON *obj = cJSON_ParseWithLength((const char *)data, json_len);
    if (!obj)
        return 0;
    struct mpijob_limits limits = {.max_workers = 64};
    struct mpijob *job = NULL;
    struct mpijob_problems problems;
    int rc = mpijob_parse(obj, &limits, &job, &problems);
    if (rc != 0) {
        if (rc == MPIJOB_EINVALID)
            mpijob_problems_free(&problems);
        cJSON_Delete(obj);
        return 0;
    }

    /* Names: the bytes after the NUL, split on newlines (no NUL inside a name). */
    char *rest = NULL;
    const char *names[64];
    size_t n = 0;
    if (nul) {
        size_t len = size - json_len - 1;
        rest = malloc(len + 1);
        memcpy(rest, nul + 1, len);
        rest[len] = '\0';
        for (char *p = rest, *line; n < 64 && (line = strsep(&p, "\n")) != NULL;)
            if (*line && strlen(line) <= 253) /* a pod name is at most 253 characters */
                names[n++] = line;
    }
    const char *domain = size % 2 ? "cluster.local" : NULL;

    char *hosts = hostfile_render(job, domain);
    if (!hosts)
        abort();
    size_t lines = count(hosts, "\n");
    if (lines != (size_t)job->worker.replicas + (job->run_launcher_as_worker ? 1u : 0u))
        abort();
    free(hosts);

    char *script = hostfile_discover_hosts(job, domain, names, n);
    if (!script || strncmp(script, "#!/bin/sh\n", 10) != 0)
        abort();
    for (size_t i = 0; i < n; i++) {
        char *h = hostfile_host(job, names[i], domain);
        char want[1024];
        if (!h)
            abort();
        /* "echo <host>\n" once per time the name was given */
        size_t given = 0;
        for (size_t j = 0; j < n; j++)
            given += strcmp(names[i], names[j]) == 0;
        snprintf(want, sizeof(want), "echo %s\n", h);
        size_t seen = 0;
        for (const char *p = script; (p = strstr(p, want)) != NULL; p += strlen(want))
            seen += p == script || p[-1] == '\n';
        if (seen < given)
            abort();
        free(h);
    }
    free(script);
    free(rest);
    mpijob_free(job);
    cJSON_Delete(obj);
    return 0;
}
