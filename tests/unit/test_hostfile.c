#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpijob/hostfile.h"

/* Built by hand so these tests do not depend on the parser. */
static struct mpijob *new_job(const char *name, const char *ns, enum mpi_implementation impl,
                              int workers, int slots, bool launcher_as_worker)
{
    struct mpijob *job = calloc(1, sizeof(*job));
    cr_assert_not_null(job);
    job->name = strdup(name);
    job->namespace = strdup(ns);
    job->implementation = impl;
    job->worker.replicas = workers;
    job->slots_per_worker = slots;
    job->run_launcher_as_worker = launcher_as_worker;
    return job;
}

static void free_job(struct mpijob *job)
{
    free(job->name);
    free(job->namespace);
    free(job);
}

Test(hostfile, host_name_with_and_without_cluster_domain)
{
    struct mpijob *job = new_job("pi", "team-a", MPI_OPENMPI, 2, 1, false);
    char *h = hostfile_host(job, "pi-worker-0", NULL);
    cr_assert_str_eq(h, "pi-worker-0.pi.team-a.svc");
    free(h);
    h = hostfile_host(job, "pi-worker-0", "");
    cr_assert_str_eq(h, "pi-worker-0.pi.team-a.svc");
    free(h);
    h = hostfile_host(job, "pi-worker-1", "cluster.local");
    cr_assert_str_eq(h, "pi-worker-1.pi.team-a.svc.cluster.local");
    free(h);
    free_job(job);
}

struct render_case {
    enum mpi_implementation impl;
    const char *domain;
    bool launcher_as_worker;
    int slots;
    const char *want;
};

static const struct render_case render_cases[] = {
    {MPI_OPENMPI, NULL, false, 1,
     "pi-worker-0.pi.ns.svc slots=1\n"
     "pi-worker-1.pi.ns.svc slots=1\n"},
    {MPI_OPENMPI, NULL, true, 8,
     "pi-launcher.pi.ns.svc slots=8\n"
     "pi-worker-0.pi.ns.svc slots=8\n"
     "pi-worker-1.pi.ns.svc slots=8\n"},
    {MPI_OPENMPI, "cluster.local", false, 8,
     "pi-worker-0.pi.ns.svc.cluster.local slots=8\n"
     "pi-worker-1.pi.ns.svc.cluster.local slots=8\n"},
    {MPI_OPENMPI, "cluster.local", true, 1,
     "pi-launcher.pi.ns.svc.cluster.local slots=1\n"
     "pi-worker-0.pi.ns.svc.cluster.local slots=1\n"
     "pi-worker-1.pi.ns.svc.cluster.local slots=1\n"},
    {MPI_INTEL, NULL, false, 8,
     "pi-worker-0.pi.ns.svc:8\n"
     "pi-worker-1.pi.ns.svc:8\n"},
    {MPI_INTEL, NULL, true, 1,
     "pi-launcher.pi.ns.svc:1\n"
     "pi-worker-0.pi.ns.svc:1\n"
     "pi-worker-1.pi.ns.svc:1\n"},
    {MPI_INTEL, "cluster.local", false, 1,
     "pi-worker-0.pi.ns.svc.cluster.local:1\n"
     "pi-worker-1.pi.ns.svc.cluster.local:1\n"},
    {MPI_INTEL, "cluster.local", true, 8,
     "pi-launcher.pi.ns.svc.cluster.local:8\n"
     "pi-worker-0.pi.ns.svc.cluster.local:8\n"
     "pi-worker-1.pi.ns.svc.cluster.local:8\n"},
    {MPI_MPICH, NULL, false, 1,
     "pi-worker-0.pi.ns.svc:1\n"
     "pi-worker-1.pi.ns.svc:1\n"},
    {MPI_MPICH, NULL, true, 8,
     "pi-launcher.pi.ns.svc:8\n"
     "pi-worker-0.pi.ns.svc:8\n"
     "pi-worker-1.pi.ns.svc:8\n"},
    {MPI_MPICH, "cluster.local", false, 8,
     "pi-worker-0.pi.ns.svc.cluster.local:8\n"
     "pi-worker-1.pi.ns.svc.cluster.local:8\n"},
    {MPI_MPICH, "cluster.local", true, 1,
     "pi-launcher.pi.ns.svc.cluster.local:1\n"
     "pi-worker-0.pi.ns.svc.cluster.local:1\n"
     "pi-worker-1.pi.ns.svc.cluster.local:1\n"},
};

Test(hostfile, renders_every_implementation_domain_and_launcher_combination)
{
    size_t n = sizeof(render_cases) / sizeof(render_cases[0]);
    cr_assert_eq(n, 12);
    for (size_t i = 0; i < n; i++) {
        const struct render_case *c = &render_cases[i];
        struct mpijob *job = new_job("pi", "ns", c->impl, 2, c->slots, c->launcher_as_worker);
        char *got = hostfile_render(job, c->domain);
        cr_assert_not_null(got);
        cr_expect_str_eq(got, c->want, "case %zu (%s, domain %s, launcher as worker %d)", i,
                         c->impl == MPI_OPENMPI ? "OpenMPI" : c->impl == MPI_INTEL ? "Intel" : "MPICH",
                         c->domain ? c->domain : "none", c->launcher_as_worker);
        free(got);
        free_job(job);
    }
}

Test(hostfile, twelve_workers_in_index_order)
{
    struct mpijob *job = new_job("big", "ns", MPI_OPENMPI, 12, 4, false);
    char want[2048] = "";
    for (int i = 0; i < 12; i++) {
        char line[128];
        snprintf(line, sizeof(line), "big-worker-%d.big.ns.svc slots=4\n", i);
        strcat(want, line);
    }
    char *got = hostfile_render(job, NULL);
    cr_assert_str_eq(got, want);
    free(got);
    free_job(job);
}

Test(hostfile, no_workers_and_no_launcher_gives_an_empty_file)
{
    struct mpijob *job = new_job("pi", "ns", MPI_OPENMPI, 0, 1, false);
    char *got = hostfile_render(job, NULL);
    cr_assert_str_eq(got, "");
    free(got);
    free_job(job);
}

Test(discover_hosts, empty_list_is_just_the_shebang)
{
    struct mpijob *job = new_job("pi", "ns", MPI_OPENMPI, 2, 1, false);
    char *got = hostfile_discover_hosts(job, NULL, NULL, 0);
    cr_assert_str_eq(got, "#!/bin/sh\n");
    free(got);
    free_job(job);
}

Test(discover_hosts, sorts_workers_by_index_numerically)
{
    struct mpijob *job = new_job("pi", "ns", MPI_OPENMPI, 12, 1, false);
    const char *running[] = {"pi-worker-10", "pi-worker-2", "pi-worker-9", "pi-worker-0",
                             "pi-worker-11", "pi-worker-1"};
    char *got = hostfile_discover_hosts(job, NULL, running, 6);
    cr_assert_str_eq(got, "#!/bin/sh\n"
                          "echo pi-worker-0.pi.ns.svc\n"
                          "echo pi-worker-1.pi.ns.svc\n"
                          "echo pi-worker-2.pi.ns.svc\n"
                          "echo pi-worker-9.pi.ns.svc\n"
                          "echo pi-worker-10.pi.ns.svc\n"
                          "echo pi-worker-11.pi.ns.svc\n");
    free(got);
    /* The caller's array is left as it was. */
    cr_assert_str_eq(running[0], "pi-worker-10");
    free_job(job);
}

Test(discover_hosts, launcher_first_and_cluster_domain)
{
    struct mpijob *job = new_job("pi", "ns", MPI_INTEL, 3, 2, true);
    const char *running[] = {"pi-worker-2", "pi-worker-0"};
    char *got = hostfile_discover_hosts(job, "cluster.local", running, 2);
    cr_assert_str_eq(got, "#!/bin/sh\n"
                          "echo pi-launcher.pi.ns.svc.cluster.local\n"
                          "echo pi-worker-0.pi.ns.svc.cluster.local\n"
                          "echo pi-worker-2.pi.ns.svc.cluster.local\n");
    free(got);
    got = hostfile_discover_hosts(job, NULL, NULL, 0);
    cr_assert_str_eq(got, "#!/bin/sh\necho pi-launcher.pi.ns.svc\n");
    free(got);
    free_job(job);
}

Test(discover_hosts, unexpected_names_come_last_in_byte_order)
{
    /* A job whose name is a prefix of another's must not take the other's workers for its own. */
    struct mpijob *job = new_job("pi", "ns", MPI_OPENMPI, 2, 1, false);
    const char *running[] = {"pi-worker-x", "pi-worker-1", "pi-worker-", "pi-worker-0"};
    char *got = hostfile_discover_hosts(job, NULL, running, 4);
    cr_assert_str_eq(got, "#!/bin/sh\n"
                          "echo pi-worker-0.pi.ns.svc\n"
                          "echo pi-worker-1.pi.ns.svc\n"
                          "echo pi-worker-.pi.ns.svc\n"
                          "echo pi-worker-x.pi.ns.svc\n");
    free(got);
    free_job(job);
}
