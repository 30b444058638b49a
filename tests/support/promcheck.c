#include "support/promcheck.h"

#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* Runs promcheck.py on text; returns its exit status (0 = valid), -1 when it cannot run.
 * Its complaints go to the test log when verbose. */
int promcheck_run(const char *text, bool verbose)
{
    const char *dir = getenv("MPIJOB_SRC_DIR");
    char script[4096];
    snprintf(script, sizeof(script), "%s/tests/unit/promcheck.py", dir && *dir ? dir : ".");
    if (access(script, R_OK) != 0) {
        cr_log_error("cannot read %s (run from the source tree or set MPIJOB_SRC_DIR)", script);
        return -1;
    }
    char tmp[] = "/tmp/promcheck.XXXXXX";
    int fd = mkstemp(tmp);
    if (fd < 0)
        return -1;
    size_t len = strlen(text);
    ssize_t w = write(fd, text, len);
    close(fd);
    if (w != (ssize_t)len) {
        unlink(tmp);
        return -1;
    }
    char cmd[8300];
    snprintf(cmd, sizeof(cmd), "python3 '%s' '%s' 2>&1", script, tmp);
    FILE *p = popen(cmd, "r");
    if (!p) {
        unlink(tmp);
        return -1;
    }
    char line[1024];
    while (fgets(line, sizeof(line), p))
        if (verbose)
            cr_log_warn("promcheck: %s", line);
    int st = pclose(p);
    unlink(tmp);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}
