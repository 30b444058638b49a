/* The pod sandbox's first process on real nodes (what Kubernetes' pause image runs): it holds the
 * pod's namespaces, reaps the zombies of a shared process namespace, and exits on SIGINT or
 * SIGTERM. Built static by tests/cluster/realnode/images.py. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_stop(int sig)
{
    (void)sig;
    _exit(0);
}

static void on_child(int sig)
{
    (void)sig;
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "-v") == 0) {
        puts("pause (mpijob-operator real-node tier)");
        return 0;
    }
    if (getpid() != 1)
        fprintf(stderr, "pause: warning: not the first process of its namespace\n");
    struct sigaction stop = {.sa_handler = on_stop};
    struct sigaction child = {.sa_handler = on_child, .sa_flags = SA_NOCLDSTOP};
    if (sigaction(SIGINT, &stop, NULL) < 0 || sigaction(SIGTERM, &stop, NULL) < 0 ||
        sigaction(SIGCHLD, &child, NULL) < 0) {
        perror("pause: sigaction");
        return 1;
    }
    for (;;)
        pause();
}
