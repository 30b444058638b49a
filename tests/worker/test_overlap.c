/* Overlap of the gradient allreduce with the backward pass, measured over a shaped link between
 * two network namespaces by tests/worker/netns_overlap.sh. The acceptance point is a ratio, not
 * a timing: with overlap, the communication left exposed after the backward pass is at most 70%
 * of what it is without. */
#include <criterion/criterion.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runcmd.h"

#define MAX_EXPOSED_RATIO 0.7

static int have_ip(void)
{
    return access("/usr/sbin/ip", X_OK) == 0 || access("/sbin/ip", X_OK) == 0 ||
           access("/usr/bin/ip", X_OK) == 0 || access("/bin/ip", X_OK) == 0;
}

Test(overlap, exposed_communication_over_a_shaped_link, .timeout = 120)
{
    if (geteuid() != 0)
        cr_skip("needs root: it creates network namespaces, a veth pair and a tc qdisc");
    if (!have_ip())
        cr_skip("needs the 'ip' tool (iproute2)");

    const char *src = runcmd_src_dir();
    char cmd[3 * PATH_MAX], *out = NULL;
    snprintf(cmd, sizeof(cmd), "bash '%s/tests/worker/netns_overlap.sh' '%s' 2>&1", src,
             runcmd_worker_bin());
    int status = runcmd(cmd, &out, NULL);
    if (status == 77) {
        char why[512];
        const char *at = strstr(out, "SKIP: ");
        snprintf(why, sizeof(why), "%.*s", (int)strcspn(at ? at + 6 : out, "\n"),
                 at ? at + 6 : out);
        free(out);
        cr_skip("%s", why);
    }
    cr_assert_eq(status, 0, "%s exited %d:\n%s", cmd, status, out);

    const char *line = strstr(out, "overlap_exposed_ms=");
    cr_assert_not_null(line, "no figures in:\n%s", out);
    double with = -1, without = -1, ratio = -1;
    cr_assert_eq(sscanf(line, "overlap_exposed_ms=%lf no_overlap_exposed_ms=%lf ratio=%lf", &with,
                        &without, &ratio),
                 3, "cannot read: %s", line);
    const char *link = strstr(out, "link=");
    fprintf(stderr, "overlap: %.*s", (int)strcspn(link ? link : line, "\n") + 1,
            link ? link : line);
    cr_assert_gt(without, 0.0, "without overlap no communication was exposed: %s", out);
    cr_assert_leq(ratio, MAX_EXPOSED_RATIO,
                  "overlap left %.1f ms of communication exposed per step, %.0f%% of the %.1f ms "
                  "without overlap (at most %.0f%% required)\n%s",
                  with, 100 * ratio, without, 100 * MAX_EXPOSED_RATIO, out);
    free(out);
}
