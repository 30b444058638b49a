/* Errors: one convention across src/.
 *
 * A function returns 0 (or a count) on success and a negative code on failure; never -1, never
 * a global error state. A code is either
 *  - a negative errno value (-ENOMEM, -EINVAL, -EIO, -ENOENT, ...), for what the system and the
 *    libraries report in those terms; or
 *  - a named code below, for outcomes errno has no word for: an API server's answers (the
 *    client's, kube/), the operator's own (mpijob/). Named codes are -1000 and below, so they
 *    never collide with errno values; out of memory and a bad argument are the errno ones.
 * error_str describes any code. A function that returns a pointer returns NULL only for out of
 * memory; one that can fail otherwise returns a code and gives its result through an out
 * parameter (builders.h's template builders, say). Callers propagate with
 * `if (rc < 0) goto out;` and free in one place. */
#ifndef UTIL_ERROR_H
#define UTIL_ERROR_H

#include <errno.h>

enum error_code {
    ERR_OK = 0,
    /* The Kubernetes client (kube/). A non-2xx answer is decoded from its Status body by
     * `reason`, so AlreadyExists and Conflict (both HTTP 409) are distinct codes. */
    KUBE_OK = 0,
    KUBE_ENOMEM = -ENOMEM,          /* out of memory */
    KUBE_EINVAL = -EINVAL,          /* bad argument from the caller */
    KUBE_ECONFIG = -1003,           /* kubeconfig or in-cluster config unusable */
    KUBE_ETRANSPORT = -1004,        /* connection refused/reset, TLS failure, timeout */
    KUBE_ETOOBIG = -1005,           /* a body or a watch line passed its cap */
    KUBE_EDECODE = -1006,           /* a body that is not the JSON we expect */
    KUBE_ENOTFOUND = -1010,         /* 404 NotFound */
    KUBE_EALREADYEXISTS = -1011,    /* 409 AlreadyExists */
    KUBE_ECONFLICT = -1012,         /* 409 Conflict (stale resourceVersion, failed precondition) */
    KUBE_EINVALID = -1013,          /* 422 Invalid */
    KUBE_EGONE = -1014,             /* 410 Gone / Expired */
    KUBE_ETOOMANYREQUESTS = -1015,  /* 429, after the allowed retries */
    KUBE_EUNAUTHORIZED = -1016,     /* 401, after one credential reload */
    KUBE_EFORBIDDEN = -1017,        /* 403 */
    KUBE_EBADREQUEST = -1018,       /* 400 */
    KUBE_EUNSUPPORTEDMEDIA = -1019, /* 415 (strategic merge patch on a custom resource) */
    KUBE_ESERVER = -1020,           /* 5xx, after the allowed retries */
    KUBE_EMETHOD = -1021,           /* 405 */
    KUBE_EHTTP = -1022,             /* another non-2xx status */
    KUBE_ECANCELED = -1023,         /* stopped by the caller (watch stop, shutdown) */
    KUBE_ETIMEOUT = -1024,          /* 504, a server-side Timeout status, or the caller's deadline */
    KUBE_ENOTLEADER = -1025,        /* a write refused by the client: its lease may have lapsed */
    /* The operator (mpijob/). */
    MPIJOB_EINVALID = -2001,        /* an MPIJob spec that cannot run; no retry will change it */
    MPIJOB_ENOCRD = -2002,          /* the MPIJob CRD is not served */
    MPIJOB_ENOAPI = -2003,          /* the API server does not serve an API the operator needs */
};

/* A static, thread-safe description of any code: "success", a named code's text, or the errno
 * text of a negative errno value. */
const char *error_str(int code);

#endif
