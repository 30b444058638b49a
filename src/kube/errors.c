#include "kube/errors.h"

#include <string.h>

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
