#include "util/error.h"

#include <string.h>

const char *error_str(int code)
{
    switch (code) {
    case ERR_OK: return "success";
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
    case MPIJOB_EINVALID: return "invalid MPIJob spec";
    case MPIJOB_ENOCRD: return "the MPIJob CRD is not served";
    case MPIJOB_ENOAPI: return "an API the operator needs is not served";
    case -ENOMEM: return "out of memory"; /* the words every log already uses */
    case -EINVAL: return "invalid argument";
    default: break;
    }
    const char *text = code < 0 && code > -4096 ? strerrordesc_np(-code) : NULL;
    return text ? text : "unknown error";
}
