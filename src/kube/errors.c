#include "kube/errors.h"

#include <string.h>

const char *kube_strerror(int code)
{
    switch (code) {
    case KUBE_OK: return "success";
    case KUBE_ENOMEM: return "out of memory";
    case KUBE_EINVAL: return "invalid argument";
    case KUBE_ECONFIG: return "configuration error";
    case KUBE_ETRANSPORT: return "transport error (connection, TLS or timeout)";
    case KUBE_ETOOBIG: return "response larger than its cap";
    case KUBE_EDECODE: return "malformed response";
    case KUBE_ENOTFOUND: return "not found";
    case KUBE_EALREADYEXISTS: return "already exists";
    case KUBE_ECONFLICT: return "conflict";
    case KUBE_EINVALID: return "invalid object";
    case KUBE_EGONE: return "resource version expired (gone)";
    case KUBE_ETOOMANYREQUESTS: return "too many requests";
    case KUBE_EUNAUTHORIZED: return "unauthorized";
    case KUBE_EFORBIDDEN: return "forbidden";
    case KUBE_EBADREQUEST: return "bad request";
    case KUBE_EUNSUPPORTEDMEDIA: return "unsupported media type";
    case KUBE_ESERVER: return "server error";
    case KUBE_EMETHOD: return "method not allowed";
    case KUBE_EHTTP: return "unexpected HTTP status";
    case KUBE_ECANCELED: return "canceled";
    case KUBE_ETIMEOUT: return "timed out";
    case KUBE_ENOTLEADER: return "not the leader: writes are fenced (the lease may have passed to another replica)";
    default: return "unknown error";
    }
}

int kube_error_from_status(long http_code, const char *reason)
{
    static const struct {
        const char *reason;
        int code;
    } by_reason[] = {
        {"NotFound", KUBE_ENOTFOUND},
        {"AlreadyExists", KUBE_EALREADYEXISTS},
        {"Conflict", KUBE_ECONFLICT},
        {"Invalid", KUBE_EINVALID},
        {"Gone", KUBE_EGONE},
        {"Expired", KUBE_EGONE},
        {"TooManyRequests", KUBE_ETOOMANYREQUESTS},
        {"Unauthorized", KUBE_EUNAUTHORIZED},
        {"Forbidden", KUBE_EFORBIDDEN},
        {"BadRequest", KUBE_EBADREQUEST},
        {"UnsupportedMediaType", KUBE_EUNSUPPORTEDMEDIA},
        {"MethodNotAllowed", KUBE_EMETHOD},
        {"Timeout", KUBE_ETIMEOUT},
        {"ServerTimeout", KUBE_ESERVER},
        {"InternalError", KUBE_ESERVER},
        {"ServiceUnavailable", KUBE_ESERVER},
    };
    if (reason && *reason) {
        for (size_t i = 0; i < sizeof(by_reason) / sizeof(by_reason[0]); i++)
            if (strcmp(reason, by_reason[i].reason) == 0)
                return by_reason[i].code;
    }
    /* No (known) reason: fall back on the status code, as client-go does. A 409 without a
     * reason is a Conflict, never an AlreadyExists. */
    switch (http_code) {
    case 400: return KUBE_EBADREQUEST;
    case 401: return KUBE_EUNAUTHORIZED;
    case 403: return KUBE_EFORBIDDEN;
    case 404: return KUBE_ENOTFOUND;
    case 405: return KUBE_EMETHOD;
    case 409: return KUBE_ECONFLICT;
    case 410: return KUBE_EGONE;
    case 413: return KUBE_ETOOBIG;
    case 415: return KUBE_EUNSUPPORTEDMEDIA;
    case 422: return KUBE_EINVALID;
    case 429: return KUBE_ETOOMANYREQUESTS;
    case 504: return KUBE_ETIMEOUT;
    default: return http_code >= 500 ? KUBE_ESERVER : KUBE_EHTTP;
    }
}
