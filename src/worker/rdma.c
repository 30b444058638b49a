#include "worker/rdma.h"

#include <stdio.h>

int wk_rdma_list(struct wk_rdma_device *devs, int max, char *why, size_t why_len)
{
    (void)devs;
    (void)max;
    snprintf(why, why_len, "not built yet");
    return -1;
}

int wk_rdma_required(void) { return 0; }

int wk_rdma_check(char *msg, size_t msg_len)
{
    snprintf(msg, msg_len, "RDMA requested but no usable device: not built yet");
    return -1;
}
