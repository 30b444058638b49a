#include "worker/nccl_log.h"

#include <stdio.h>

const char *wk_nccl_transport_from_text(const char *text, char *out, size_t out_len)
{
    (void)text;
    snprintf(out, out_len, "unknown");
    return out;
}

const char *wk_nccl_transport_from_file(const char *path, char *out, size_t out_len)
{
    (void)path;
    snprintf(out, out_len, "unknown");
    return out;
}
