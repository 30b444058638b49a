"""ServiceAccounts for the API-server double, as kube-apiserver 1.32 and kube-controller-manager
give them to pods (Python 3 standard library only).

- The ServiceAccount admission plugin on pod create (plugin/pkg/admission/serviceaccount):
  spec.serviceAccountName defaults to "default", the ServiceAccount must exist, and unless
  automountServiceAccountToken is false on the pod (or, the pod silent, on the ServiceAccount)
  a projected volume `kube-api-access-<5 chars>` is added and mounted read-only at
  /var/run/secrets/kubernetes.io/serviceaccount in every container and init container that does
  not already mount that path.
- Tokens of the TokenRequest API (serviceaccounts/NAME/token): JWTs with the claims the real
  issuer writes (iss, sub, aud, exp, iat, nbf, jti and the kubernetes.io claims naming the
  namespace, the ServiceAccount and the object the token is bound to). The double signs them with
  HMAC-SHA256 under a key of its own (the real server uses RS256 and its service-account key), so
  only the double that issued a token accepts it.
"""

import base64
import hashlib
import hmac
import json
import os
import time
import uuid

TOKEN_MOUNT_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
VOLUME_PREFIX = "kube-api-access-"
DEFAULT_NAME = "default"
ROOT_CA_CONFIGMAP = "kube-root-ca.crt"
ROOT_CA_DESCRIPTION = ("Contains a CA bundle that can be used to verify the kube-apiserver when using internal "
                       "endpoints such as the internal service IP or kubernetes.default.svc. No other usage is "
                       "guaranteed across distributions of Kubernetes clusters.")
MIRROR_POD_ANNOTATION = "kubernetes.io/config.mirror"

DEFAULT_EXPIRATION = 3600                  # TokenRequestSpec.expirationSeconds default
MIN_EXPIRATION = 600                       # "may not specify a duration less than 10 minutes"
MAX_EXPIRATION = 1 << 32
WARN_ONLY_EXPIRATION = 3607                # what the kubelet asks for a projected token
EXTENDED_EXPIRATION = 365 * 24 * 3600      # --service-account-extend-token-expiration (on by default)


def token_volume_source():
    """The projected volume source the admission plugin adds (TokenVolumeSource)."""
    return {"sources": [
        {"serviceAccountToken": {"expirationSeconds": WARN_ONLY_EXPIRATION, "path": "token"}},
        {"configMap": {"name": ROOT_CA_CONFIGMAP, "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {"downwardAPI": {"items": [{"path": "namespace",
                                    "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
    ], "defaultMode": 420}


def mirror_service_account(spec):
    """The v1 conversion of a PodSpec: serviceAccountName taken from the deprecated
    serviceAccount when unset, and serviceAccount always written back as serviceAccountName."""
    if not isinstance(spec, dict):
        return
    name = spec.get("serviceAccountName")
    if not name and isinstance(spec.get("serviceAccount"), str) and spec["serviceAccount"]:
        spec["serviceAccountName"] = name = spec["serviceAccount"]
    if name:
        spec["serviceAccount"] = name
    else:
        spec.pop("serviceAccount", None)
        spec.pop("serviceAccountName", None)


def should_automount(sa, spec):
    if isinstance(spec.get("automountServiceAccountToken"), bool):
        return spec["automountServiceAccountToken"]
    if isinstance(sa.get("automountServiceAccountToken"), bool):
        return sa["automountServiceAccountToken"]
    return True


def mount_token(spec, suffix):
    """Adds the token volume and its mounts (mountServiceAccountToken). suffix() gives the
    random part of a new volume name."""
    volumes = spec.get("volumes") if isinstance(spec.get("volumes"), list) else []
    name = ""
    for v in volumes:
        if isinstance(v, dict) and str(v.get("name", "")).startswith(VOLUME_PREFIX):
            name = v["name"]
            break
    has_volume = bool(name)
    if not name:
        name = VOLUME_PREFIX + suffix()
    mount = {"name": name, "readOnly": True, "mountPath": TOKEN_MOUNT_PATH}
    needed = False
    for key in ("initContainers", "containers"):
        for c in spec.get(key) or []:
            if not isinstance(c, dict):
                continue
            mounts = c.get("volumeMounts") if isinstance(c.get("volumeMounts"), list) else []
            if any(isinstance(m, dict) and m.get("mountPath") == TOKEN_MOUNT_PATH for m in mounts):
                continue
            c["volumeMounts"] = mounts + [dict(mount)]
            needed = True
    if needed and not has_volume:
        spec["volumes"] = volumes + [{"name": name, "projected": token_volume_source()}]


def admit_pod(pod, namespace, get_service_account, suffix):
    """The ServiceAccount admission of a pod being created. get_service_account(ns, name) gives
    the stored ServiceAccount or None. Returns None, or the reason the pod is refused (the text
    after `pods "NAME" is forbidden: `)."""
    meta = pod.get("metadata") or {}
    if MIRROR_POD_ANNOTATION in (meta.get("annotations") or {}):
        return None
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return None
    if not spec.get("serviceAccountName"):
        spec["serviceAccountName"] = DEFAULT_NAME
        spec["serviceAccount"] = DEFAULT_NAME
    name = spec["serviceAccountName"]
    sa = get_service_account(namespace, name)
    if sa is None:
        return 'error looking up service account %s/%s: serviceaccount "%s" not found' % (namespace, name, name)
    if should_automount(sa, spec):
        mount_token(spec, suffix)
    if not spec.get("imagePullSecrets") and sa.get("imagePullSecrets"):
        spec["imagePullSecrets"] = [{"name": s.get("name", "")} for s in sa["imagePullSecrets"]
                                    if isinstance(s, dict)]
    return None


# --------------------------------------------------------------------------------------------
# Tokens
# --------------------------------------------------------------------------------------------

def _b64(data):
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text):
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class Issuer:
    """Issues and checks the double's ServiceAccount tokens. issuer: the iss claim, also the
    audience tokens get when the request names none (the real server's --api-audiences default)."""

    def __init__(self, issuer):
        self.issuer = issuer
        self.audiences = [issuer]
        self.key = os.urandom(32)
        self.kid = _b64(hashlib.sha256(self.key).digest()[:24])

    def _sign(self, signing_input):
        return _b64(hmac.new(self.key, signing_input.encode(), hashlib.sha256).digest())

    def token(self, namespace, sa, audiences, expiration, bound=None, node=None, now=None):
        """(token, claims) for ServiceAccount sa (its stored object). bound: ("pod"|"secret"|
        "node", name, uid) or None; node: (name, uid) of a bound pod's node, or None. A pod-bound
        token asked for the kubelet's 3607 s with the API audiences lives a year, warning after
        3607 s, as with --service-account-extend-token-expiration."""
        now = int(now if now is not None else time.time())
        exp = expiration
        priv = {"namespace": namespace,
                "serviceaccount": {"name": sa["metadata"]["name"], "uid": sa["metadata"]["uid"]}}
        if bound is not None:
            what, name, uid = bound
            priv[what] = {"name": name, "uid": uid}
            if what == "pod" and expiration == WARN_ONLY_EXPIRATION and \
                    set(audiences) & set(self.audiences):
                priv["warnafter"] = now + expiration
                exp = EXTENDED_EXPIRATION
        if node is not None and "node" not in priv:
            priv["node"] = {"name": node[0], "uid": node[1]}
        claims = {"aud": list(audiences), "exp": now + exp, "iat": now, "iss": self.issuer, "jti": str(uuid.uuid4()),
                  "kubernetes.io": priv, "nbf": now,
                  "sub": "system:serviceaccount:%s:%s" % (namespace, sa["metadata"]["name"])}
        header = {"alg": "HS256", "kid": self.kid}
        signing_input = _b64(json.dumps(header, separators=(",", ":")).encode()) + "." + \
            _b64(json.dumps(claims, separators=(",", ":"), sort_keys=True).encode())
        return signing_input + "." + self._sign(signing_input), claims

    def claims(self, token, now=None):
        """The claims of a token this issuer signed, unexpired and meant for the API; else None."""
        parts = token.split(".")
        if len(parts) != 3:
            return None
        if not hmac.compare_digest(self._sign(parts[0] + "." + parts[1]), parts[2]):
            return None
        try:
            claims = json.loads(_unb64(parts[1]))
        except ValueError:
            return None
        now = now if now is not None else time.time()
        if not isinstance(claims, dict) or claims.get("iss") != self.issuer:
            return None
        if not isinstance(claims.get("exp"), int) or claims["exp"] <= now:
            return None
        if isinstance(claims.get("nbf"), int) and claims["nbf"] > now + 60:
            return None
        aud = claims.get("aud")
        if not isinstance(aud, list) or not set(aud) & set(self.audiences):
            return None
        if not isinstance(claims.get("kubernetes.io"), dict):
            return None
        return claims


def user_of(claims):
    """The user a token's claims authenticate as: {username, uid, groups, extra}, as the real
    ServiceAccount authenticator gives it (without the bound objects' checks, done by the caller)."""
    priv = claims["kubernetes.io"]
    ns = priv["namespace"]
    sa = priv["serviceaccount"]
    extra = {"authentication.kubernetes.io/credential-id": ["JTI=" + claims.get("jti", "")]}
    if isinstance(priv.get("node"), dict):
        extra["authentication.kubernetes.io/node-name"] = [priv["node"]["name"]]
        extra["authentication.kubernetes.io/node-uid"] = [priv["node"]["uid"]]
    if isinstance(priv.get("pod"), dict):
        extra["authentication.kubernetes.io/pod-name"] = [priv["pod"]["name"]]
        extra["authentication.kubernetes.io/pod-uid"] = [priv["pod"]["uid"]]
    return {"username": "system:serviceaccount:%s:%s" % (ns, sa["name"]), "uid": sa["uid"],
            "groups": ["system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"],
            "extra": dict(sorted(extra.items()))}
