#include "worker/backend.h"

#include <errno.h>
#include <stdio.h>

static int available(char *why, size_t why_len)
{
    snprintf(why, why_len, "not built yet");
    return 0;
}

static int init(const struct wk_init *in, struct wk_ctx **out, char *why, size_t why_len)
{
    (void)in;
    *out = NULL;
    snprintf(why, why_len, "not built yet");
    return -ENOSYS;
}

const struct wk_ops wk_backend_mpi = {
    .abi = WK_BACKEND_ABI,
    .name = "mpi",
    .available = available,
    .init = init,
};
