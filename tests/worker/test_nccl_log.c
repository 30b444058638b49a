#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "worker/nccl_log.h"

/* Logs in the shape NCCL writes them (NCCL_DEBUG=INFO, NCCL_DEBUG_SUBSYS=INIT,NET). */

static const char LOG_IB_GDR[] =
    "node-a:4242:4242 [0] NCCL INFO Bootstrap: Using eth0:10.0.0.11<0>\n"
    "node-a:4242:4242 [0] NCCL INFO cudaDriverVersion 13000\n"
    "node-a:4242:4242 [0] NCCL INFO NCCL version 2.28.9+cuda13.0\n"
    "node-a:4242:4260 [0] NCCL INFO NET/Plugin: Could not find: libnccl-net.so.\n"
    "node-a:4242:4260 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB eth0:10.0.0.11<0>\n"
    "node-a:4242:4260 [0] NCCL INFO Initialized NET plugin IB\n"
    "node-a:4242:4260 [0] NCCL INFO Assigned NET plugin IB to comm\n"
    "node-a:4242:4260 [0] NCCL INFO Using network IB\n"
    "node-a:4242:4260 [0] NCCL INFO ncclCommInitRankConfig comm 0x55d0c8a0 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 18000 commId 0x1c3e5f - Init START\n"
    "node-a:4242:4260 [0] NCCL INFO Channel 00/02 : 0 1\n"
    "node-a:4242:4260 [0] NCCL INFO Channel 01/02 : 0 1\n"
    "node-a:4242:4260 [0] NCCL INFO Trees [0] 1/-1/-1->0->-1 [1] -1/-1/-1->0->1\n"
    "node-a:4242:4270 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [receive] via NET/IB/0/GDRDMA\n"
    "node-a:4242:4270 [0] NCCL INFO Channel 01/0 : 1[0] -> 0[0] [receive] via NET/IB/0/GDRDMA\n"
    "node-a:4242:4270 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0/GDRDMA\n"
    "node-a:4242:4270 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[0] [send] via NET/IB/0/GDRDMA\n"
    "node-a:4242:4270 [0] NCCL INFO Connected all rings, use ring PXN 0 GDR 1\n"
    "node-a:4242:4260 [0] NCCL INFO ncclCommInitRankConfig comm 0x55d0c8a0 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 18000 commId 0x1c3e5f - Init COMPLETE\n";

static const char LOG_SOCKET[] =
    "node-b:913:913 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to eth0\n"
    "node-b:913:931 [0] NCCL INFO NET/IB : No device found.\n"
    "node-b:913:931 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.12<0>\n"
    "node-b:913:931 [0] NCCL INFO Initialized NET plugin Socket\n"
    "node-b:913:931 [0] NCCL INFO Assigned NET plugin Socket to comm\n"
    "node-b:913:931 [0] NCCL INFO Using network Socket\n"
    "node-b:913:940 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [receive] via NET/Socket/0\n"
    "node-b:913:940 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[0] [receive] via NET/Socket/0\n"
    "node-b:913:940 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [send] via NET/Socket/0\n"
    "node-b:913:940 [0] NCCL INFO Channel 01/0 : 1[0] -> 0[0] [send] via NET/Socket/0\n"
    "node-b:913:940 [0] NCCL INFO Connected all rings\n";

/* One host, two GPUs: every channel inside the host. NCCL still names its network plugin. */
static const char LOG_P2P[] =
    "gpu1:77:77 [0] NCCL INFO Using network Socket\n"
    "gpu1:77:90 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC/read\n"
    "gpu1:77:90 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[1] via P2P/IPC/read\n"
    "gpu1:78:91 [1] NCCL INFO Channel 00/0 : 1[1] -> 0[0] via P2P/CUMEM/read\n"
    "gpu1:77:90 [0] NCCL INFO Connected all rings\n";

static const char LOG_SHM[] =
    "gpu2:55:55 [0] NCCL INFO Using network IB\n"
    "gpu2:55:60 [0] NCCL INFO Channel 00 : 0[1000] -> 1[2000] via SHM/direct/direct\n"
    "gpu2:55:60 [0] NCCL INFO Channel 01 : 0[1000] -> 1[2000] via SHM/CE/direct\n";

/* Two hosts of two GPUs: NVLink inside each host, the network between them. */
static const char LOG_MIXED[] =
    "h1:10:10 [0] NCCL INFO Using network IB\n"
    "h1:10:20 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read\n"
    "h1:10:20 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[1] via P2P/CUMEM/read\n"
    "h1:11:21 [1] NCCL INFO Channel 00/0 : 1[1] -> 2[0] [send] via NET/IB/1(0)/GDRDMA/Shared\n"
    "h1:10:20 [0] NCCL INFO Channel 00/0 : 3[1] -> 0[0] [receive] via NET/IB/0/GDRDMA(PCI)\n"
    "h1:10:20 [0] NCCL INFO Channel 02/0 : 0[0] -> 1[1] via P2P/direct pointer/read\n";

static const char *transport(const char *text)
{
    static char out[64];
    return wk_nccl_transport_from_text(text, out, sizeof(out));
}

Test(nccl_log, infiniband_with_gpudirect)
{
    cr_expect_str_eq(transport(LOG_IB_GDR), "IB");
}

Test(nccl_log, sockets)
{
    cr_expect_str_eq(transport(LOG_SOCKET), "Socket");
}

Test(nccl_log, p2p_inside_one_host)
{
    cr_expect_str_eq(transport(LOG_P2P), "P2P");
}

Test(nccl_log, shared_memory_inside_one_host)
{
    cr_expect_str_eq(transport(LOG_SHM), "SHM");
}

Test(nccl_log, mixed_channels_name_the_network)
{
    cr_expect_str_eq(transport(LOG_MIXED), "IB");
}

Test(nccl_log, older_channel_format_and_mpirun_prefixes)
{
    const char *log =
        "[1,0]<stdout>:ip-172-31-0-63:2120:2135 [0] NCCL INFO Channel 00 : 0[1b0] -> 4[1b0] [send] via NET/Socket/0\n"
        "[1,0]<stdout>:ip-172-31-0-63:2120:2135 [0] NCCL INFO Channel 00 : 3[1e0] -> 0[1b0] via P2P/IPC\n";
    cr_expect_str_eq(transport(log), "Socket");
}

Test(nccl_log, plugin_networks)
{
    cr_expect_str_eq(transport("h:1:2 [5] NCCL INFO Channel 14/0 : 37[5] -> 21[5] [send] via "
                               "NET/IBext_v8/6\n"),
                     "IB");
    cr_expect_str_eq(transport("h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via "
                               "NET/AWS Libfabric/0/GDRDMA\n"),
                     "AWS Libfabric");
    cr_expect_str_eq(transport("h:1:2 [0] NCCL INFO Assigned NET plugin Libfabric to comm\n"),
                     "Libfabric");
}

Test(nccl_log, single_rank_names_the_loaded_network)
{
    /* One rank opens no channel; the network line is all there is. */
    cr_expect_str_eq(transport("solo:1:1 [0] NCCL INFO Using network Socket\r\n"
                               "solo:1:1 [0] NCCL INFO comm 0x1 rank 0 nRanks 1 nNodes 1 "
                               "localRanks 1 localRank 0 MNNVL 0\n"),
                     "Socket");
}

Test(nccl_log, nothing_to_say)
{
    cr_expect_str_eq(transport(""), "unknown");
    cr_expect_str_eq(transport(NULL), "unknown");
    cr_expect_str_eq(transport("n:1:1 [0] NCCL INFO NCCL version 2.28.9+cuda13.0\n"
                               "n:1:1 [0] NCCL INFO Channel 00/02 : 0 1\n"),
                     "unknown");
}

Test(nccl_log, garbage)
{
    /* Not NCCL lines, truncated lines, a name that is not text. */
    cr_expect_str_eq(transport("via NET/IB/0\nUsing network IB\n"), "unknown");
    cr_expect_str_eq(transport("x NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/"), "unknown");
    cr_expect_str_eq(transport("x NCCL INFO Using network \x01\x02\n"), "unknown");
    cr_expect_str_eq(transport("x NCCL INFO Using network \n"), "unknown");
    char junk[4096];
    for (size_t i = 0; i < sizeof(junk) - 1; i++)
        junk[i] = (char)(1 + (i * 7919) % 255);
    junk[sizeof(junk) - 1] = '\0';
    cr_expect_str_eq(transport(junk), "unknown");
}

Test(nccl_log, long_names_are_cut_and_small_buffers_hold)
{
    char log[512];
    snprintf(log, sizeof(log), "x NCCL INFO Using network %0200d\n", 7);
    char out[128];
    wk_nccl_transport_from_text(log, out, sizeof(out));
    cr_expect_lt(strlen(out), 64);
    char tiny[3];
    cr_expect_str_eq(wk_nccl_transport_from_text(LOG_SOCKET, tiny, sizeof(tiny)), "So");
    cr_expect_str_eq(wk_nccl_transport_from_text(LOG_SOCKET, NULL, 0), "unknown");
}

static char *write_temp(const char *text, size_t len)
{
    char *path = strdup("/tmp/mpijob-nccl-log-test.XXXXXX");
    cr_assert_not_null(path);
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    size_t done = 0;
    while (done < len) {
        ssize_t n = write(fd, text + done, len - done);
        cr_assert_gt(n, 0);
        done += (size_t)n;
    }
    close(fd);
    return path;
}

Test(nccl_log, from_file)
{
    char out[64];
    char *path = write_temp(LOG_IB_GDR, strlen(LOG_IB_GDR));
    cr_expect_str_eq(wk_nccl_transport_from_file(path, out, sizeof(out)), "IB");
    unlink(path);
    free(path);
    path = write_temp("", 0);
    cr_expect_str_eq(wk_nccl_transport_from_file(path, out, sizeof(out)), "unknown");
    unlink(path);
    free(path);
}

Test(nccl_log, missing_file)
{
    char out[64];
    cr_expect_str_eq(wk_nccl_transport_from_file("/nonexistent/nccl.log", out, sizeof(out)),
                     "unknown");
    cr_expect_str_eq(wk_nccl_transport_from_file(NULL, out, sizeof(out)), "unknown");
    cr_expect_str_eq(wk_nccl_transport_from_file("/tmp", out, sizeof(out)), "unknown");
}

/* A log bigger than the read cap: the init lines at the start still count, and a line cut by
 * the cap is never read as half a line. */
Test(nccl_log, big_file_reads_head_and_tail)
{
    size_t filler_lines = 200000; /* about 12 MiB */
    const char *filler = "n:1:2 [0] NCCL INFO NET/IB: Got async event : port active ....\n";
    size_t flen = strlen(filler);
    const char *head = "n:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0\n";
    size_t total = strlen(head) + filler_lines * flen;
    char *text = malloc(total + 1);
    cr_assert_not_null(text);
    size_t at = 0;
    memcpy(text, head, strlen(head));
    at += strlen(head);
    for (size_t i = 0; i < filler_lines; i++, at += flen)
        memcpy(text + at, filler, flen);
    text[at] = '\0';
    char out[64];
    char *path = write_temp(text, at);
    cr_expect_str_eq(wk_nccl_transport_from_file(path, out, sizeof(out)), "Socket");
    unlink(path);
    free(path);

    /* The network line only at the very end, after the filler. */
    const char *last = "n:1:2 [0] NCCL INFO Using network IB\n";
    size_t end = at - flen;
    memcpy(text + end, last, strlen(last));
    end += strlen(last);
    path = write_temp(text + strlen(head), end - strlen(head));
    cr_expect_str_eq(wk_nccl_transport_from_file(path, out, sizeof(out)), "IB");
    unlink(path);
    free(path);
    free(text);
}
