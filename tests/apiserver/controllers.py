"""The controllers Api (api.py) plays, acting within the write they follow (the real ones act a
moment after it, so here a namespace comes with its ServiceAccount): kube-apiserver's own, which
keep the `kubernetes` Service and serve each CustomResourceDefinition (the establishing
controller), and with --control-plane what kube-controller-manager does for pods' in-cluster
configuration, each namespace's `default` ServiceAccount (serviceaccount controller) and
kube-root-ca.crt ConfigMap (root-ca-cert-publisher)."""

import copy

import serviceaccounts
from crds import kind_from_crd, say_once
from errors import ApiError
from kinds import CRD_GROUP
from objects import now_rfc3339, strip_server_meta
from store import ADDED, DELETED, MODIFIED

# The `kubernetes` Service of namespace default, as kube-apiserver keeps it with
# --service-cluster-ip-range=10.96.0.0/12 (the first address of the range)
KUBERNETES_SERVICE_IP = "10.96.0.1"
KUBERNETES_SERVICE_PORT = 443


class Controllers:
    """The controllers, a part of Api: start_controllers() turns them on, on_commit() runs them
    after every write."""

    def start_controllers(self, ca_pem, port):
        """Starts the controllers once the port and the CA are known; objects that exist already
        (the system namespaces, those the --rbac files name) get what they would have got."""
        self.ca_pem = ca_pem
        self.port = port
        self.issuer = serviceaccounts.Issuer("https://127.0.0.1:%d" % port)
        with self.store.lock:
            self.controllers = True
            self._seed()

    def _seed(self):
        self._ensure_kubernetes_service()
        ns_kind = self._kind("", "namespaces")
        for n in self.rbac_namespaces:
            if self.store.get(ns_kind, None, n) is None:
                self._create_object(ns_kind, "v1", None, {"apiVersion": "v1", "kind": "Namespace",
                                                          "metadata": {"name": n}}, {})
        if self.service_accounts:
            for (_, n) in sorted(self.store.objects[("", "namespaces")]):
                self._ensure_namespace_content(n)
        self._store_rbac_objects()
        for kind in list(self.store.kinds):
            if kind.crd:
                self._ensure_crd_object(kind)

    def _ensure_kubernetes_service(self):
        """The `kubernetes` Service as kube-apiserver reconciles it. Its Endpoints and
        EndpointSlice are not written: a real kube-apiserver advertising 127.0.0.1 cannot write
        them either (an Endpoints address may not be in the loopback range), so clients reach the
        API server through this Service's targetPort on 127.0.0.1 (launch.py's info.json)."""
        svc = self._kind("", "services")
        if self.store.get(svc, "default", "kubernetes") is None:
            self._create_object(svc, "v1", "default", {
                "apiVersion": "v1", "kind": "Service",
                "metadata": {"name": "kubernetes", "labels": {"component": "apiserver", "provider": "kubernetes"}},
                "spec": {"ports": [{"name": "https", "protocol": "TCP", "port": KUBERNETES_SERVICE_PORT,
                                    "targetPort": self.port}],
                         "clusterIP": KUBERNETES_SERVICE_IP, "type": "ClusterIP", "sessionAffinity": "None"}}, {})

    def _ensure_namespace_content(self, ns):
        sa = self._kind("", "serviceaccounts")
        if self.store.get(sa, ns, serviceaccounts.DEFAULT_NAME) is None:
            self._create_object(sa, "v1", ns, {"apiVersion": "v1", "kind": "ServiceAccount",
                                               "metadata": {"name": serviceaccounts.DEFAULT_NAME}}, {})
        self._publish_root_ca(ns)

    def _publish_root_ca(self, ns):
        """kube-controller-manager's root-ca-cert-publisher: kube-root-ca.crt holds the CA the
        server's certificate chains to, and is put back when changed or deleted."""
        cm = self._kind("", "configmaps")
        name = serviceaccounts.ROOT_CA_CONFIGMAP
        data = {"ca.crt": self.ca_pem}
        cur = self.store.get(cm, ns, name)
        if cur is None:
            self._create_object(cm, "v1", ns, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
                "name": name, "annotations": {"kubernetes.io/description": serviceaccounts.ROOT_CA_DESCRIPTION}},
                "data": data}, {})
            return
        ann = (cur["metadata"].get("annotations") or {})
        if cur.get("data") == data and ann.get("kubernetes.io/description"):
            return
        new = copy.deepcopy(cur)
        new["data"] = data
        new["metadata"]["annotations"] = dict(ann, **{"kubernetes.io/description":
                                                      serviceaccounts.ROOT_CA_DESCRIPTION})
        self._update_object(cm, "v1", ns, name, cur, new, "", None, [], rv_required=False, from_patch=True)

    def _store_rbac_objects(self):
        """The ServiceAccount and RBAC objects of the --rbac files, created as launch.py creates
        them on a real server (those missing only)."""
        for doc in self.rbac_objects:
            kind = self.store.kind_by_group_kind(str(doc.get("apiVersion", "")).rpartition("/")[0], doc.get("kind"))
            meta = doc.get("metadata") or {}
            ns = (meta.get("namespace") or "default") if kind.namespaced else None
            if self.store.get(kind, ns, meta.get("name")) is not None:
                continue
            try:
                self._create_object(kind, kind.versions[0], ns, doc, {})
            except ApiError as e:
                raise RuntimeError("--rbac: cannot store %s %s: %s" % (doc.get("kind"), meta.get("name"),
                                                                      e.body.get("message")))

    def _ensure_crd_object(self, kind):
        """A CustomResourceDefinition for a custom resource the double serves of its own (the
        project's MPIJob CRD, the PodGroup CRDs, --extra-crd), as they would be installed."""
        crds = self._kind(CRD_GROUP, "customresourcedefinitions")
        if crds is None or self.store.get(crds, None, "%s.%s" % (kind.plural, kind.group)) is not None:
            return
        if kind.crd_object is not None:
            body = copy.deepcopy(kind.crd_object)
            body.pop("status", None)
            strip_server_meta(body.setdefault("metadata", {}))
        else:
            preserve = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
            versions = []
            for i, v in enumerate(kind.versions):
                ver = {"name": v, "served": True, "storage": i == 0,
                       "schema": {"openAPIV3Schema": copy.deepcopy(kind.schema_for(v) or preserve)}}
                if kind.status:
                    ver["subresources"] = {"status": {}}
                versions.append(ver)
            names = {"plural": kind.plural, "singular": kind.singular, "kind": kind.kind,
                     "listKind": kind.kind + "List"}
            if kind.short:
                names["shortNames"] = list(kind.short)
            if kind.categories:
                names["categories"] = list(kind.categories)
            body = {"apiVersion": CRD_GROUP + "/v1", "kind": "CustomResourceDefinition",
                    "metadata": {"name": "%s.%s" % (kind.plural, kind.group)},
                    "spec": {"group": kind.group, "names": names,
                             "scope": "Namespaced" if kind.namespaced else "Cluster", "versions": versions}}
        try:
            self._create_object(crds, "v1", None, body, {})
        except ApiError as e:
            say_once("no CustomResourceDefinition for %s: %s" % (kind.qualified, e.body.get("message")))

    def on_commit(self, kind, etype, ns, name, obj, prev):
        """The controllers, after every write (the store lock held)."""
        if not self.controllers:
            return
        skey = kind.skey
        if skey == ("", "namespaces"):
            if etype == ADDED and self.service_accounts:
                self._ensure_namespace_content(name)
        elif skey == ("", "serviceaccounts"):
            if etype == DELETED and name == serviceaccounts.DEFAULT_NAME and self.service_accounts and \
                    self._namespace_exists(ns):
                self._ensure_namespace_content(ns)
        elif skey == ("", "configmaps"):
            if name == serviceaccounts.ROOT_CA_CONFIGMAP and etype != ADDED and self.service_accounts and \
                    self._namespace_exists(ns):
                self._publish_root_ca(ns)
        elif skey == ("", "services"):
            if etype == DELETED and ns == "default" and name == "kubernetes":
                self._ensure_kubernetes_service()
        elif skey == (CRD_GROUP, "customresourcedefinitions"):
            self._crd_changed(kind, etype, obj, prev)

    def _crd_changed(self, crds, etype, obj, prev):
        """apiextensions-apiserver: a new CRD is established and its resource served; a changed
        one is served anew; a deleted one takes its objects with it (DELETED events), then is
        served no more."""
        spec = obj.get("spec") or {}
        skey = (spec.get("group"), (spec.get("names") or {}).get("plural"))
        served = self.store.by_skey.get(skey)
        if etype == DELETED:
            if served is not None and served.crd:
                for (ons, oname), o in sorted(self.store.objects.get(skey, {}).items()):
                    self.store.commit(served, DELETED, ons, oname, copy.deepcopy(o), o)
                self.store.remove_kind(served)
            return
        if etype == ADDED:
            new = copy.deepcopy(obj)
            names = new["spec"].get("names") or {}
            now = now_rfc3339()
            new["status"] = {
                "conditions": [
                    {"type": "NamesAccepted", "status": "True", "lastTransitionTime": now, "reason": "NoConflicts",
                     "message": "no conflicts found"},
                    {"type": "Established", "status": "True", "lastTransitionTime": now,
                     "reason": "InitialNamesAccepted", "message": "the initial names have been accepted"}],
                "acceptedNames": {k: names[k] for k in ("plural", "singular", "shortNames", "kind", "listKind",
                                                        "categories") if k in names},
                "storedVersions": (obj.get("status") or {}).get("storedVersions") or []}
            self.store.commit(crds, MODIFIED, None, obj["metadata"]["name"], new, obj)
            if served is not None:
                return          # one of the double's own kinds: served already
        elif prev is not None and prev.get("spec") == obj.get("spec"):
            return
        try:
            self.store.add_kind(kind_from_crd(obj))
        except (KeyError, TypeError, AttributeError, ValueError) as e:
            say_once("cannot serve the CustomResourceDefinition %s: %s" % (obj["metadata"].get("name"), e))
