/* Reads the transport NCCL actually used from its own debug log (NCCL_DEBUG=INFO with
 * NCCL_DEBUG_FILE, set up by worker/session.c before NCCL starts).
 *
 * NCCL names the network it loaded ("NCCL INFO Using network IB", "... Using network Socket")
 * and each channel's path ("... via NET/IB/0", "... via NET/Socket/0", "via P2P/IPC",
 * "via SHM/direct/direct"). */
#ifndef WORKER_NCCL_LOG_H
#define WORKER_NCCL_LOG_H

#include <stddef.h>

/* From the text of a log: "IB" or "Socket" (the network NCCL used between hosts, as named in
 * "via NET/<name>" lines, else in "Using network <name>"), "P2P" or "SHM" when every channel
 * stayed inside the host, "unknown" when the log says nothing. Writes into out. */
const char *wk_nccl_transport_from_text(const char *text, char *out, size_t out_len);
/* The same from a file; "unknown" when it cannot be read. */
const char *wk_nccl_transport_from_file(const char *path, char *out, size_t out_len);

#endif
