"""GET pods/NAME/log, a part of Api (api.py), as kube-apiserver 1.32 serves it
(pkg/registry/core/pod/rest/log.go and the pod strategy's LogLocation): the pod and its container
are checked here (a pod on no node yet has an empty log), then the log is fetched from the kubelet of the pod's node, at the node's
InternalIP (then Hostname) and its status.daemonEndpoints.kubeletEndpoint.Port, over HTTPS
without verifying the kubelet's certificate, and its answer passed on as text.

The options passed to the kubelet: container, tailLines, limitBytes, previous, timestamps
(follow is served as without it: the answer ends where the file does)."""

import http.client
import ssl
import urllib.parse

from errors import api_error, err_bad_request

KUBELET_TIMEOUT = 30
# What one log answer may hold when no limitBytes is given (the double keeps it in memory).
MAX_LOG = 64 << 20


def _invalid(pod, field, value, detail):
    msg = "%s: Invalid value: %s: %s" % (field, value, detail)
    return api_error(422, "Invalid", 'PodLogOptions "%s" is invalid: %s' % (pod, msg),
                     {"name": pod, "kind": "PodLogOptions",
                      "causes": [{"reason": "FieldValueInvalid", "message": "Invalid value: %s: %s" % (value, detail),
                                  "field": field}]})


def _int_option(req, name):
    raw = req.q(name)
    if raw is None or raw == "":
        return None
    try:
        return int(raw)
    except ValueError:
        raise err_bad_request('strconv.ParseInt: parsing "%s": invalid syntax' % raw)


class PodLogs:
    """do_log, a part of Api."""

    def do_log(self, req):
        name = req.name
        tail, limit = _int_option(req, "tailLines"), _int_option(req, "limitBytes")
        if tail is not None and tail < 0:
            raise _invalid(name, "tailLines", tail, "must be greater than or equal to 0")
        if limit is not None and limit < 1:
            raise _invalid(name, "limitBytes", limit, "must be greater than 0")
        with self.store.lock:
            pod = self.store.get(req.kind, req.ns, name)
            if pod is None:
                raise req.kind.not_found(name)
            node = None
            node_name = (pod.get("spec") or {}).get("nodeName")
            if node_name:
                node_kind = self.store.by_gvr.get(("", "v1", "nodes"))
                node = self.store.get(node_kind, None, node_name) if node_kind else None
        spec = pod.get("spec") or {}
        names = [c.get("name") for c in spec.get("containers") or []]
        inits = [c.get("name") for c in spec.get("initContainers") or []]
        ephemeral = [c.get("name") for c in spec.get("ephemeralContainers") or []]
        container = req.q("container") or ""
        if not container:
            if len(names) == 1:
                container = names[0]
            else:
                msg = "a container name must be specified for pod %s, choose one of: [%s]" % (name, " ".join(names))
                if inits:
                    msg += " or one of the init containers: [%s]" % " ".join(inits)
                if ephemeral:
                    msg += " or one of the ephemeral containers: [%s]" % " ".join(ephemeral)
                raise err_bad_request(msg)
        elif container not in names + inits + ephemeral:
            raise err_bad_request("container %s is not valid for pod %s" % (container, name))
        if not node_name:
            return 200, b"", {}  # no host yet: kube-apiserver streams nothing (LocationStreamer, no location)
        if node is None:
            raise api_error(404, "NotFound", 'nodes "%s" not found' % node_name,
                            {"name": node_name, "kind": "nodes"})
        host = self._kubelet_address(node)
        port = (((node.get("status") or {}).get("daemonEndpoints") or {}).get("kubeletEndpoint") or {}).get("Port")
        port = int(port or 10250)
        query = [("tailLines", tail), ("limitBytes", limit)]
        for flag in ("previous", "timestamps"):
            if (req.q(flag) or "").lower() == "true":
                query.append((flag, "true"))
        path = "/containerLogs/%s/%s/%s" % tuple(urllib.parse.quote(p, safe="") for p in (req.ns, name, container))
        qs = urllib.parse.urlencode(sorted((k, v) for k, v in query if v is not None))  # as Go's Values.Encode
        url_path = path + ("?" + qs if qs else "")
        ctx = ssl._create_unverified_context()  # as kube-apiserver without --kubelet-certificate-authority
        conn = http.client.HTTPSConnection(host, port, timeout=KUBELET_TIMEOUT, context=ctx)
        shown = "https://%s/containerLogs/%s/%s/%s%s" % (
            "%s:%d" % (host, port) if ":" not in host else "[%s]:%d" % (host, port), req.ns, name, container,
            "?" + qs if qs else "")
        try:
            conn.request("GET", url_path)
            resp = conn.getresponse()
            data = resp.read(MAX_LOG + 1)
        except OSError as e:
            reason = getattr(e, "strerror", None) or str(e)
            if isinstance(e, ConnectionRefusedError):
                reason = "connect: connection refused"
            raise api_error(500, "InternalError", 'Get "%s": dial tcp %s:%d: %s' % (shown, host, port, reason),
                            {"causes": [{"message": 'Get "%s": dial tcp %s:%d: %s' % (shown, host, port, reason)}]})
        finally:
            conn.close()
        if resp.status != 200:
            # kube-apiserver passes a kubelet's error on as the Status of the code it got
            text = data.decode("utf-8", "replace").strip()
            raise api_error(resp.status, "NotFound" if resp.status == 404 else "InternalError", text, {})
        return 200, data[:MAX_LOG], {}

    @staticmethod
    def _kubelet_address(node):
        addresses = (node.get("status") or {}).get("addresses") or []
        for want in ("InternalIP", "Hostname", "InternalDNS", "ExternalIP", "ExternalDNS"):
            for a in addresses:
                if a.get("type") == want and a.get("address"):
                    return a["address"]
        raise api_error(500, "InternalError", 'no preferred addresses found; known addresses: %s' % addresses, {})
