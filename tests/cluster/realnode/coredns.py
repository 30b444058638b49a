"""Cluster DNS on the real nodes: CoreDNS as kubeadm installs it, a Deployment in kube-system behind
the Service kube-dns (10.96.0.10), serving cluster.local from the API server. It has no upstream
(the binary has no forward plugin, and the Corefile names none): a name outside the cluster gets
an error, never a query off this machine."""

from config import CLUSTER_DNS, CLUSTER_DOMAIN

COREFILE = """.:53 {
    errors
    health :8080
    ready :8181
    kubernetes %s in-addr.arpa ip6.arpa {
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 30
    }
    cache 30
    loop
    reload
    loadbalance
}
""" % CLUSTER_DOMAIN

LABELS = {"k8s-app": "kube-dns"}


def objects(image):
    """(API collection path, object) for each object, in the order to create them."""
    ns = "kube-system"
    return [
        ("/api/v1/namespaces/%s/serviceaccounts" % ns,
         {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "coredns", "namespace": ns}}),
        ("/apis/rbac.authorization.k8s.io/v1/clusterroles",
         {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "system:coredns"},
          "rules": [{"apiGroups": [""], "resources": ["endpoints", "services", "pods", "namespaces"],
                     "verbs": ["list", "watch"]},
                    {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"],
                     "verbs": ["list", "watch"]}]}),
        ("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
         {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
          "metadata": {"name": "system:coredns"},
          "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:coredns"},
          "subjects": [{"kind": "ServiceAccount", "name": "coredns", "namespace": ns}]}),
        ("/api/v1/namespaces/%s/configmaps" % ns,
         {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "coredns", "namespace": ns},
          "data": {"Corefile": COREFILE}}),
        ("/apis/apps/v1/namespaces/%s/deployments" % ns,
         {"apiVersion": "apps/v1", "kind": "Deployment",
          "metadata": {"name": "coredns", "namespace": ns, "labels": dict(LABELS)},
          "spec": {
              "replicas": 1,
              "selector": {"matchLabels": dict(LABELS)},
              "template": {
                  "metadata": {"labels": dict(LABELS)},
                  "spec": {
                      "serviceAccountName": "coredns",
                      "priorityClassName": "system-cluster-critical",
                      "dnsPolicy": "Default",
                      "tolerations": [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"},
                                      {"key": "CriticalAddonsOnly", "operator": "Exists"}],
                      "containers": [{
                          "name": "coredns", "image": image, "imagePullPolicy": "IfNotPresent",
                          "args": ["-conf", "/etc/coredns/Corefile"],
                          "resources": {"limits": {"memory": "170Mi"}, "requests": {"cpu": "10m", "memory": "70Mi"}},
                          "volumeMounts": [{"name": "config", "mountPath": "/etc/coredns", "readOnly": True}],
                          "ports": [{"name": "dns", "containerPort": 53, "protocol": "UDP"},
                                    {"name": "dns-tcp", "containerPort": 53, "protocol": "TCP"},
                                    {"name": "metrics", "containerPort": 9153, "protocol": "TCP"}],
                          "securityContext": {"allowPrivilegeEscalation": False,
                                              "capabilities": {"add": ["NET_BIND_SERVICE"], "drop": ["ALL"]},
                                              "readOnlyRootFilesystem": True},
                          "livenessProbe": {"httpGet": {"path": "/health", "port": 8080}, "initialDelaySeconds": 60,
                                            "timeoutSeconds": 5, "failureThreshold": 5},
                          "readinessProbe": {"httpGet": {"path": "/ready", "port": 8181}, "periodSeconds": 2},
                      }],
                      "volumes": [{"name": "config", "configMap": {
                          "name": "coredns", "items": [{"key": "Corefile", "path": "Corefile"}]}}],
                  },
              },
          }}),
        ("/api/v1/namespaces/%s/services" % ns,
         {"apiVersion": "v1", "kind": "Service",
          "metadata": {"name": "kube-dns", "namespace": ns,
                       "labels": dict(LABELS, **{"kubernetes.io/name": "CoreDNS"})},
          "spec": {"selector": dict(LABELS), "clusterIP": CLUSTER_DNS,
                   "ports": [{"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53},
                             {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": 53},
                             {"name": "metrics", "port": 9153, "protocol": "TCP", "targetPort": 9153}]}}),
    ]
