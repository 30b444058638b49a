/* Error codes of the Kubernetes client. Every function returns 0 (or a count) on success and
 * one of these negative codes on failure. A non-2xx answer is decoded from its Status body by
 * `reason`, so AlreadyExists and Conflict (both HTTP 409) are distinct codes. */
#ifndef KUBE_ERRORS_H
#define KUBE_ERRORS_H

enum kube_error {
    KUBE_OK = 0,
    KUBE_ENOMEM = -1001,          /* out of memory */
    KUBE_EINVAL = -1002,          /* bad argument from the caller */
    KUBE_ECONFIG = -1003,         /* kubeconfig or in-cluster config unusable */
    KUBE_ETRANSPORT = -1004,      /* connection refused/reset, TLS failure, timeout */
    KUBE_ETOOBIG = -1005,         /* a body or a watch line passed its cap */
    KUBE_EDECODE = -1006,         /* a body that is not the JSON we expect */
    KUBE_ENOTFOUND = -1010,       /* 404 NotFound */
    KUBE_EALREADYEXISTS = -1011,  /* 409 AlreadyExists */
    KUBE_ECONFLICT = -1012,       /* 409 Conflict (stale resourceVersion, failed precondition) */
    KUBE_EINVALID = -1013,        /* 422 Invalid */
    KUBE_EGONE = -1014,           /* 410 Gone / Expired */
    KUBE_ETOOMANYREQUESTS = -1015,/* 429, after the allowed retries */
    KUBE_EUNAUTHORIZED = -1016,   /* 401, after one credential reload */
    KUBE_EFORBIDDEN = -1017,      /* 403 */
    KUBE_EBADREQUEST = -1018,     /* 400 */
    KUBE_EUNSUPPORTEDMEDIA = -1019,/* 415 (strategic merge patch on a custom resource) */
    KUBE_ESERVER = -1020,         /* 5xx, after the allowed retries */
    KUBE_EMETHOD = -1021,         /* 405 */
    KUBE_EHTTP = -1022,           /* another non-2xx status */
    KUBE_ECANCELED = -1023,       /* stopped by the caller (watch stop, shutdown) */
    KUBE_ETIMEOUT = -1024,        /* 504, a server-side Timeout status, or the caller's deadline */
    KUBE_ENOTLEADER = -1025,      /* a write refused by the client: its lease may have lapsed */
};

/* A static description of the code. */
const char *kube_strerror(int code);
/* The code for a Status `reason` string and HTTP status; used by the REST layer. */
int kube_error_from_status(long http_code, const char *reason);

#endif
