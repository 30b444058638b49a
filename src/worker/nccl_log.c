/* Reads which transport NCCL used from its INFO log.
 *
 * Lines that count (NCCL 2.4 to 2.28; the part after "NCCL INFO "):
 *   Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0           network between hosts; also
 *       ".../IB/0/GDRDMA", ".../IB/3(1)/GDRDMA(PCI)/Shared" (proxy rank), "via NET/Socket/0",
 *       plugins ("NET/IBext_v8/0", "NET/AWS Libfabric/0"); before 2.12 "Channel 00 : ...".
 *   Channel 00/0 : 0[0] -> 1[1] via P2P/IPC/read              inside the host: P2P/IPC,
 *       P2P/CUMEM, P2P/MNNVL, "P2P/direct pointer"; SHM/direct/direct, SHM/CE/direct.
 *   Using network IB                                           the network plugin picked
 *   Assigned NET plugin Socket to comm                         the same, 2.23 and later
 * The rdma-sharp plugin's "IBext..." networks are InfiniBand verbs and are reported as "IB". */
#include "worker/nccl_log.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The most of a log read from a file: its first and last halves of this when it is bigger
 * (NCCL writes the transport lines at communicator init, near the start). */
#define LOG_READ_CAP (4u << 20)
#define NAME_MAX_LEN 64

struct scan {
    char net[NAME_MAX_LEN];     /* first "via NET/<name>" */
    char using[NAME_MAX_LEN];   /* first "Using network <name>" */
    char assigned[NAME_MAX_LEN]; /* first "Assigned NET plugin <name> to comm" */
    int p2p, shm;               /* intra-host channels seen */
};

static int starts_with(const char *s, const char *end, const char *prefix)
{
    size_t n = strlen(prefix);
    return (size_t)(end - s) >= n && memcmp(s, prefix, n) == 0;
}

static const char *find(const char *s, const char *end, const char *needle)
{
    return memmem(s, (size_t)(end - s), needle, strlen(needle));
}

/* Copies [s, end) into name when it looks like a network name: printable, not empty, trailing
 * blanks dropped, cut to the buffer. Returns 1 when stored, 0 when name was already set or the
 * text is not a name. */
static int set_name(char *name, const char *s, const char *end)
{
    if (name[0] != '\0')
        return 0;
    while (end > s && isspace((unsigned char)end[-1]))
        end--;
    while (s < end && isspace((unsigned char)*s))
        s++;
    if (s == end)
        return 0;
    for (const char *p = s; p < end; p++)
        if (!isprint((unsigned char)*p))
            return 0;
    size_t n = (size_t)(end - s);
    if (n >= NAME_MAX_LEN)
        n = NAME_MAX_LEN - 1;
    memcpy(name, s, n);
    name[n] = '\0';
    if (strncmp(name, "IBext", 5) == 0)
        strcpy(name, "IB");
    return 1;
}

/* "via <path>" of a channel line. */
static void scan_path(struct scan *st, const char *p, const char *end)
{
    if (starts_with(p, end, "NET/")) {
        const char *name = p + 4;
        const char *slash = memchr(name, '/', (size_t)(end - name));
        set_name(st->net, name, slash != NULL ? slash : end);
    } else if (starts_with(p, end, "P2P/") || starts_with(p, end, "P2P ")) {
        st->p2p = 1;
    } else if (starts_with(p, end, "SHM/")) {
        st->shm = 1;
    }
}

static void scan_line(struct scan *st, const char *line, const char *end)
{
    const char *tag = find(line, end, "NCCL INFO ");
    if (tag == NULL)
        return;
    const char *msg = tag + strlen("NCCL INFO ");
    if (starts_with(msg, end, "Channel ") || starts_with(msg, end, "Ring ")) {
        const char *via = find(msg, end, " via ");
        if (via != NULL)
            scan_path(st, via + strlen(" via "), end);
    } else if (starts_with(msg, end, "Using network ")) {
        set_name(st->using, msg + strlen("Using network "), end);
    } else if (starts_with(msg, end, "Assigned NET plugin ")) {
        const char *name = msg + strlen("Assigned NET plugin ");
        const char *to = find(name, end, " to comm");
        if (to != NULL)
            set_name(st->assigned, name, to);
    }
}

static void scan_text(struct scan *st, const char *text, size_t len)
{
    const char *end = text + len;
    for (const char *line = text; line < end;) {
        const char *nl = memchr(line, '\n', (size_t)(end - line));
        const char *stop = nl != NULL ? nl : end;
        scan_line(st, line, stop);
        line = nl != NULL ? nl + 1 : end;
    }
}

static const char *answer(const struct scan *st, char *out, size_t out_len)
{
    const char *t = "unknown";
    if (st->net[0] != '\0')
        t = st->net;
    else if (st->p2p)
        t = "P2P";
    else if (st->shm)
        t = "SHM";
    else if (st->using[0] != '\0')
        t = st->using;
    else if (st->assigned[0] != '\0')
        t = st->assigned;
    if (out == NULL || out_len == 0)
        return "unknown";
    snprintf(out, out_len, "%s", t);
    return out;
}

const char *wk_nccl_transport_from_text(const char *text, char *out, size_t out_len)
{
    struct scan st;
    memset(&st, 0, sizeof(st));
    if (text != NULL)
        scan_text(&st, text, strlen(text));
    return answer(&st, out, out_len);
}

/* Reads up to want bytes at off; returns the count read or -errno. */
static ssize_t read_at(int fd, char *buf, size_t want, off_t off)
{
    size_t got = 0;
    while (got < want) {
        ssize_t n = pread(fd, buf + got, want - got, off + (off_t)got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -errno;
        if (n == 0)
            break;
        got += (size_t)n;
    }
    return (ssize_t)got;
}

/* The log's text in a new buffer (*out, to free): all of it, or when it is bigger than
 * LOG_READ_CAP its first and last halves, each cut at a line boundary. Returns the length or
 * -errno. */
static ssize_t read_log(int fd, char **out)
{
    *out = NULL;
    struct stat sb;
    if (fstat(fd, &sb) != 0)
        return -errno;
    int regular = S_ISREG(sb.st_mode);
    size_t size = regular ? (size_t)sb.st_size : LOG_READ_CAP;
    int whole = size <= LOG_READ_CAP;
    char *buf = malloc((whole ? size : LOG_READ_CAP) + 1);
    if (buf == NULL)
        return -ENOMEM;
    ssize_t len;
    if (whole) {
        len = read_at(fd, buf, size, 0);
    } else {
        size_t half = LOG_READ_CAP / 2;
        ssize_t head = read_at(fd, buf, half, 0);
        len = head;
        if (head >= 0) {
            char *cut = memrchr(buf, '\n', (size_t)head);
            size_t used = cut != NULL ? (size_t)(cut - buf) + 1 : 0;
            char *tail = buf + used;
            ssize_t got = read_at(fd, tail, half, (off_t)(size - half));
            len = got;
            if (got >= 0) {
                char *nl = memchr(tail, '\n', (size_t)got);
                size_t skip = nl != NULL ? (size_t)(nl - tail) + 1 : (size_t)got;
                memmove(tail, tail + skip, (size_t)got - skip);
                len = (ssize_t)(used + (size_t)got - skip);
            }
        }
    }
    if (len < 0) {
        free(buf);
        return len;
    }
    buf[len] = '\0';
    *out = buf;
    return len;
}

const char *wk_nccl_transport_from_file(const char *path, char *out, size_t out_len)
{
    struct scan st;
    memset(&st, 0, sizeof(st));
    char *buf = NULL;
    ssize_t len = -ENOENT;
    int fd = path != NULL ? open(path, O_RDONLY | O_CLOEXEC) : -1;
    if (fd >= 0)
        len = read_log(fd, &buf);
    if (len > 0)
        scan_text(&st, buf, (size_t)len);
    free(buf);
    if (fd >= 0)
        close(fd);
    return answer(&st, out, out_len);
}
