#include "host_rdma.h"

#include "worker/rdma.h"
#include "worker/rdma_suggest.h"

int test_host_has_rdma(void)
{
    struct wk_rdma_device devs[8];
    char why[256];
    int n = wk_rdma_list(devs, 8, why, sizeof(why));
    struct wk_rdma_suggestion s;
    wk_rdma_suggest(devs, n > 0 ? n : 0, &s);
    return s.active_ports > 0;
}
