"""The configuration files of a real node's daemons: containerd, the CNI network, kubelet and
kube-proxy, and the kubeconfig they share. Text only; nodes.py writes and runs them."""

import base64
import json

CLUSTER_DNS = "10.96.0.10"
CLUSTER_DOMAIN = "cluster.local"


def kubeconfig(server, ca_pem, token, server_name="kubernetes"):
    """A kubeconfig for server (the relay's address), checking the API server's certificate for
    server_name, one of the names it holds."""
    return json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "node",
        "clusters": [{"name": "cluster", "cluster": {
            "server": server, "tls-server-name": server_name,
            "certificate-authority-data": base64.b64encode(ca_pem).decode()}}],
        "users": [{"name": "node", "user": {"token": token}}],
        "contexts": [{"name": "node", "context": {"cluster": "cluster", "user": "node"}}],
    }, indent=1) + "\n"


def containerd_toml(root, state, cni_dir, pause_image):
    return """version = 2
root = "{root}"
state = "{state}"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
                    "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs",
                    "io.containerd.internal.v1.tracing", "io.containerd.tracing.processor.v1.otlp"]

[grpc]
  address = "{state}/containerd.sock"
[ttrpc]
  address = "{state}/containerd.sock.ttrpc"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{pause}"
  enable_selinux = false
  # Without CAP_SYS_RESOURCE runc cannot give the sandbox its oom_score_adj (-998) and fails with
  # "can't get final child's PID from pipe: EOF": clamp the scores to containerd's own.
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = "/usr/sbin/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{cni}"
    max_conf_num = 1
""".format(root=root, state=state, cni=cni_dir, pause=pause_image)


def cni_conflist(pod_cidr, pod_gateway, ipam_dir):
    """The bridge and host-local plugins (Debian's containernetworking-plugins), as kind's and
    kubeadm's guides set them up: pods on the node's bridge `cni0`, default route via it, no
    masquerading (the node has nowhere else to send them)."""
    return json.dumps({
        "cniVersion": "1.0.0", "name": "realnode",
        "plugins": [
            {"type": "bridge", "bridge": "cni0", "isGateway": True, "ipMasq": False, "hairpinMode": True,
             "ipam": {"type": "host-local", "ranges": [[{"subnet": pod_cidr, "gateway": pod_gateway}]],
                      "routes": [{"dst": "0.0.0.0/0"}], "dataDir": ipam_dir}},
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }, indent=1) + "\n"


def kubelet_yaml(node_ip, pod_cidr, cgroup_root, runtime_socket, logs_dir, max_pods=110):
    return json.dumps({
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": node_ip,
        "port": 10250,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": 10248,
        # the API server dials the kubelet without a client certificate (logs, exec)
        "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
        "authorization": {"mode": "AlwaysAllow"},
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": cgroup_root,
        "cgroupsPerQOS": True,
        "enforceNodeAllocatable": ["pods"],
        "failSwapOn": False,
        "failCgroupV1": False,
        "containerRuntimeEndpoint": "unix://" + runtime_socket,
        "podLogsDir": logs_dir,
        # pods with dnsPolicy Default get no nameserver: nothing is resolved outside the cluster
        "resolvConf": "",
        "clusterDNS": [CLUSTER_DNS],
        "clusterDomain": CLUSTER_DOMAIN,
        "podCIDR": pod_cidr,
        "maxPods": max_pods,
        "serializeImagePulls": False,
        # the images are imported, not pulled: never collect them
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        # The nodes' files are on this machine's own disk, which other work fills too (a CI
        # machine's disk was seen with under 1% free): a node under DiskPressure rejects every
        # pod, which no test here is about. As kind does, disk never counts for eviction; a
        # pod's own ephemeral-storage limit still does (the eviction test).
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "0%", "imagefs.available": "0%",
                         "nodefs.inodesFree": "0%", "imagefs.inodesFree": "0%"},
        "protectKernelDefaults": False,
        "makeIPTablesUtilChains": False,
        "rotateCertificates": False,
        "serverTLSBootstrap": False,
        "registerNode": True,
    }, indent=1) + "\n"


def kube_proxy_yaml(node_name, cluster_cidr, kubeconfig_path):
    return json.dumps({
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "mode": "iptables",
        "hostnameOverride": node_name,
        "bindAddress": "0.0.0.0",
        "clusterCIDR": cluster_cidr,
        "healthzBindAddress": "127.0.0.1:10256",
        "metricsBindAddress": "127.0.0.1:10249",
        "clientConnection": {"kubeconfig": kubeconfig_path},
        # the conntrack table is the machine's: leave its sysctls alone
        "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
        "iptables": {"localhostNodePorts": False, "masqueradeAll": False},
        "nodePortAddresses": ["primary"],
    }, indent=1) + "\n"
