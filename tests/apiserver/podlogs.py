"""GET pods/NAME/log, a part of Api (api.py), as kube-apiserver 1.32 serves it
(pkg/registry/core/pod/rest/log.go, the pod strategy's LogLocation, the kubelet connection info
and the generic LocationStreamer with its response checker), checked against a real one
(tests/cluster/test_podlogs.py):

  1. the query decoded into PodLogOptions: a number that strconv.ParseInt refuses, or a sinceTime
     that is not RFC 3339, is a 400 with Go's message; booleans are true unless "0" or "false";
  2. validated: tailLines < 0, limitBytes < 1, sinceSeconds < 1, both since options, or `stream`
     (the PodLogsQuerySplitStreams gate is off in 1.32) make one 422 Invalid naming them all;
  3. the pod (404 `pods "NAME" not found`); the container: none given and the pod has several
     containers is a 400 naming every container, init containers first ("a container name must
     be specified for pod P, choose one of: [i a b]"); an unknown one is "container C is not
     valid for pod P";
  4. a pod on no node (no spec.nodeName) answers 204 with nothing, as LocationStreamer does
     without a location;
  5. the Node (gone: 404 `pods "NODE" not found`, the real server's words), its address of the
     first type in PREFERRED_ADDRESS_TYPES (launch.py gives a real server the same list; none:
     500 `no preferred addresses found; known addresses: [{Type Address} ...]`), the port in
     status.daemonEndpoints.kubeletEndpoint.Port (10250 when unset);
  6. GET https://ADDR:PORT/containerLogs/NS/POD/CONTAINER?<options, keys sorted as Go's
     url.Values encodes them> without verifying the kubelet's certificate; a kubelet that cannot
     be reached is a 500 `Get "URL": dial tcp ADDR:PORT: connect: connection refused` (no
     reason, as the real server answers a transport error);
  7. a 2xx answer is passed on as text/plain with status 200; any other becomes the Status the
     response checker makes of it: 400 BadRequest with the kubelet's text, 500 "Internal error
     occurred: TEXT", 404 "the server could not find the requested resource ( pods/log POD)",
     other codes their generic message with the same suffix.

The answer is read whole (at most MAX_LOG bytes) before it is sent, where a real server streams
it; follow=true is passed on and the kubelet of tests/cluster answers it as without it."""

import errno
import http.client
import re
import socket
import ssl
import urllib.parse

from errors import api_error, err_bad_request, err_internal, fe_forbidden, fe_invalid, field_errors_text

KUBELET_PORT = 10250
KUBELET_TIMEOUT = 30
MAX_LOG = 64 << 20          # what one answer may hold (the double keeps it in memory)
MAX_ERROR_TEXT = 50000      # what the response checker reads of a kubelet's error
# The order in which a Node's addresses are tried; launch.py passes the same list to a real
# kube-apiserver (--kubelet-preferred-address-types).
PREFERRED_ADDRESS_TYPES = ("InternalIP", "Hostname", "InternalDNS", "ExternalIP", "ExternalDNS")

_INT = re.compile(r"^[+-]?[0-9]+$")
RFC3339 = "2006-01-02T15:04:05Z07:00"


def go_parse_int(text):
    """strconv.ParseInt(text, 10, 64): the value, or the 400 the decoder answers."""
    if not _INT.match(text):
        raise err_bad_request('strconv.ParseInt: parsing "%s": invalid syntax' % text)
    value = int(text)
    if not -(1 << 63) <= value < (1 << 63):
        raise err_bad_request('strconv.ParseInt: parsing "%s": value out of range' % text)
    return value


def go_parse_rfc3339(text):
    """time.Parse(time.RFC3339, text) for a query parameter: the text as given when it parses,
    else the 400 with Go's message ("" or "null" is the zero time)."""
    if text in ("", "null"):
        return "0001-01-01T00:00:00Z"
    elems = [("2006", r"\d{4}"), ("-", "-"), ("01", r"\d{2}"), ("-", "-"), ("02", r"\d{2}"), ("T", "T"),
             ("15", r"\d{2}"), (":", ":"), ("04", r"\d{2}"), (":", ":"), ("05", r"\d{2}(\.\d+)?"),
             ("Z07:00", r"Z|[+-]\d{2}:\d{2}")]
    rest = text
    for name, pattern in elems:
        m = re.match(pattern, rest)
        if not m:
            raise err_bad_request('parsing time "%s" as "%s": cannot parse "%s" as "%s"' % (text, RFC3339, rest, name))
        rest = rest[m.end():]
    if rest:
        raise err_bad_request('parsing time "%s": extra text: "%s"' % (text, rest))
    month, day, hour, minute, second = (int(text[5:7]), int(text[8:10]), int(text[11:13]), int(text[14:16]),
                                        int(text[17:19]))
    for what, v, hi in (("month", month, 12), ("day", day, 31), ("hour", hour, 23), ("minute", minute, 59),
                        ("second", second, 59)):
        if not (1 if what in ("month", "day") else 0) <= v <= hi:
            raise err_bad_request('parsing time "%s": %s out of range' % (text, what))
    return text


def go_bool(values):
    """A bool query parameter as the API machinery converts it: absent, "0" or "false" is false."""
    return bool(values) and not (values[0] == "0" or values[0].lower() == "false")


class PodLogOptions:
    """The query of a pods/log request, decoded as kube-apiserver decodes it (field order of
    v1.PodLogOptions, the first error answered)."""

    def __init__(self, query):
        def first(key):
            values = query.get(key)
            return values[0] if values else None
        self.container = first("container") or ""
        self.follow = go_bool(query.get("follow"))
        self.previous = go_bool(query.get("previous"))
        raw = first("sinceSeconds")
        self.since_seconds = go_parse_int(raw) if raw is not None else None
        raw = first("sinceTime")
        self.since_time = go_parse_rfc3339(raw) if "sinceTime" in query else None
        self.timestamps = go_bool(query.get("timestamps"))
        raw = first("tailLines")
        self.tail_lines = go_parse_int(raw) if raw is not None else None
        raw = first("limitBytes")
        self.limit_bytes = go_parse_int(raw) if raw is not None else None
        self.stream = first("stream") if "stream" in query else None

    def errors(self):
        """ValidatePodLogOptions with the split-streams gate off."""
        errs = []
        if self.tail_lines is not None and self.tail_lines < 0:
            errs.append(fe_invalid("tailLines", self.tail_lines, "must be greater than or equal to 0"))
        if self.limit_bytes is not None and self.limit_bytes < 1:
            errs.append(fe_invalid("limitBytes", self.limit_bytes, "must be greater than 0"))
        if self.since_seconds is not None and self.since_time is not None:
            errs.append(fe_forbidden("[]", "at most one of `sinceTime` or `sinceSeconds` may be specified"))
        elif self.since_seconds is not None and self.since_seconds < 1:
            errs.append(fe_invalid("sinceSeconds", self.since_seconds, "must be greater than 0"))
        if self.stream is not None:
            errs.append(fe_forbidden("stream", "may not be specified"))
        return errs

    def kubelet_query(self):
        """What LogLocation passes to the kubelet, encoded as url.Values.Encode does (keys sorted)."""
        params = []
        if self.follow:
            params.append(("follow", "true"))
        if self.previous:
            params.append(("previous", "true"))
        if self.timestamps:
            params.append(("timestamps", "true"))
        if self.since_seconds is not None:
            params.append(("sinceSeconds", str(self.since_seconds)))
        if self.since_time is not None:
            params.append(("sinceTime", self.since_time))
        if self.tail_lines is not None:
            params.append(("tailLines", str(self.tail_lines)))
        if self.limit_bytes is not None:
            params.append(("limitBytes", str(self.limit_bytes)))
        return urllib.parse.urlencode(sorted(params))


def _generic_kubelet_error(code, text, pod):
    """errors.NewGenericServerResponse(code, "", pods/log, pod, text), as the response checker
    makes it of a kubelet's answer that is neither 400 nor 500."""
    reasons = {409: ("Conflict", "the server reported a conflict"),
               404: ("NotFound", "the server could not find the requested resource"),
               400: ("BadRequest", "the server rejected our request for an unknown reason"),
               401: ("Unauthorized", "the server has asked for the client to provide credentials"),
               403: ("Forbidden", text),
               406: ("NotAcceptable", text if text and text != "unknown" else
                     "the server was unable to respond with a content type that the client supports"),
               415: ("UnsupportedMediaType", text),
               405: ("MethodNotAllowed", "the server does not allow this method on the requested resource"),
               422: ("Invalid", "the server rejected our request due to an error in our request"),
               503: ("ServiceUnavailable", "the server is currently unable to handle the request"),
               504: ("Timeout", "the server was unable to return a response in the time allotted, but may still "
                                "be processing the request"),
               429: ("TooManyRequests", "the server has received too many requests and has asked us to try again "
                                        "later")}
    if code in reasons:
        reason, message = reasons[code]
    elif code >= 500:
        reason, message = "InternalError", 'an error on the server ("%s") has prevented the request from ' \
                                           'succeeding' % text.replace("\\", "\\\\").replace('"', '\\"')
    else:
        reason, message = "", "the server responded with the status code %d but did not return more " \
                              "information" % code
    return api_error(code, reason, "%s ( pods/log %s)" % (message, pod), {"name": pod, "kind": "pods/log"})


def kubelet_error(code, text, pod):
    """The Status a kubelet's non-2xx answer becomes (GenericHttpResponseChecker)."""
    if code == 500:
        return err_internal(text)
    if code == 400:
        return err_bad_request(text)
    return _generic_kubelet_error(code, text, pod)


def dial_error(url, host, port, e):
    """A transport error as Go's http.Client reports it: 'Get "URL": dial tcp ...'."""
    where = "%s:%d" % (host, port) if ":" not in host else "[%s]:%d" % (host, port)
    if isinstance(e, socket.gaierror):
        what = "dial tcp: lookup %s: no such host" % host
    elif isinstance(e, (socket.timeout, TimeoutError)):
        what = "dial tcp %s: i/o timeout" % where
    elif isinstance(e, ssl.SSLError):
        what = "remote error: %s" % (e.reason or e).__str__().lower()
    elif isinstance(e, OSError) and e.errno in (errno.ECONNREFUSED, errno.EHOSTUNREACH, errno.ENETUNREACH,
                                                  errno.ECONNRESET, errno.EADDRNOTAVAIL):
        what = "dial tcp %s: connect: %s" % (where, {
            errno.ECONNREFUSED: "connection refused", errno.EHOSTUNREACH: "no route to host",
            errno.ENETUNREACH: "network is unreachable", errno.ECONNRESET: "connection reset by peer",
            errno.EADDRNOTAVAIL: "cannot assign requested address"}[e.errno])
    else:
        what = str(e) or type(e).__name__
    return api_error(500, "", 'Get "%s": %s' % (url, what))


class PodLogs:
    """do_log, a part of Api."""

    def do_log(self, req):
        name = req.name
        opts = PodLogOptions(req.query)
        errs = opts.errors()
        if errs:
            raise api_error(422, "Invalid", 'PodLogOptions "%s" is invalid: %s' % (name, field_errors_text(errs)),
                            {"name": name, "kind": "PodLogOptions", "causes": [e.cause() for e in errs]})
        with self.store.lock:
            pod = self.store.get(req.kind, req.ns, name)
            if pod is None:
                raise req.kind.not_found(name)
            node_name = (pod.get("spec") or {}).get("nodeName")
            node = None
            if node_name:
                node_kind = self.store.by_gvr.get(("", "v1", "nodes"))
                node = self.store.get(node_kind, None, node_name) if node_kind else None
        container = self._container(pod, name, opts.container)
        if not node_name:
            return 204, b"", {}   # LocationStreamer without a location: no content
        if node is None:
            # the registry's node getter answers in the pods' words
            raise api_error(404, "NotFound", 'pods "%s" not found' % node_name, {"name": node_name, "kind": "pods"})
        status = node.get("status") or {}
        host = self._kubelet_address(status)
        port = ((status.get("daemonEndpoints") or {}).get("kubeletEndpoint") or {}).get("Port")
        port = port if isinstance(port, int) and port > 0 else KUBELET_PORT
        qs = opts.kubelet_query()
        path = "/containerLogs/%s/%s/%s" % tuple(urllib.parse.quote(p, safe="") for p in (req.ns, name, container))
        url = "https://%s%s%s" % ("%s:%d" % (host, port) if ":" not in host else "[%s]:%d" % (host, port),
                                  path, "?" + qs if qs else "")
        ctx = ssl._create_unverified_context()   # no --kubelet-certificate-authority: not verified
        conn = http.client.HTTPSConnection(host, port, timeout=KUBELET_TIMEOUT, context=ctx)
        try:
            try:
                conn.request("GET", path + ("?" + qs if qs else ""))
                resp = conn.getresponse()
            except (OSError, http.client.HTTPException) as e:
                raise dial_error(url, host, port, e)
            try:
                if 200 <= resp.status <= 206:
                    return 200, resp.read(MAX_LOG), {}
                text = resp.read(MAX_ERROR_TEXT).decode("utf-8", "replace")
            except (OSError, http.client.HTTPException) as e:
                raise api_error(500, "", 'Get "%s": %s' % (url, str(e) or "EOF"))
            raise kubelet_error(resp.status, text, name)
        finally:
            conn.close()

    @staticmethod
    def _container(pod, name, container):
        """The container whose log is read (validateContainer)."""
        spec = pod.get("spec") or {}
        containers = [c.get("name") for c in spec.get("containers") or []]
        every = [c.get("name") for c in spec.get("initContainers") or []] + containers + \
            [c.get("name") for c in spec.get("ephemeralContainers") or []]
        if not container:
            if len(containers) == 1:
                return containers[0]
            if not containers:
                raise err_bad_request("a container name must be specified for pod %s" % name)
            raise err_bad_request("a container name must be specified for pod %s, choose one of: [%s]"
                                  % (name, " ".join(every)))
        if container not in every:
            raise err_bad_request("container %s is not valid for pod %s" % (container, name))
        return container

    @staticmethod
    def _kubelet_address(status):
        addresses = [a for a in status.get("addresses") or [] if isinstance(a, dict)]
        for want in PREFERRED_ADDRESS_TYPES:
            for a in addresses:
                if a.get("type") == want:
                    return a.get("address") or ""
        raise api_error(500, "", "no preferred addresses found; known addresses: [%s]" % " ".join(
            "{%s %s}" % (a.get("type", ""), a.get("address", "")) for a in addresses))
