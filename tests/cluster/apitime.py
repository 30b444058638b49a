"""Times as the Kubernetes API writes them, one copy for every role of the simulation."""

import datetime
import time


def now_rfc3339():
    """Now, to the second: what metav1.Time fields hold (2024-01-02T03:04:05Z)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def now_micro():
    """Now, to the microsecond: what metav1.MicroTime fields hold (a Lease's renewTime, an
    Event's eventTime)."""
    t = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + ".%06dZ" % int((t % 1) * 1e6)


def parse_time(text):
    """Seconds since the epoch of an API time (either kind), None when there is none or it is
    not one."""
    if not text:
        return None
    try:
        return datetime.datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None
