#!/usr/bin/env bash
# make demo: an MPIJob from kubectl apply to Succeeded, on this machine.
#
# Builds the images (scripts/images.py), starts the API-server double (tests/apiserver) and the
# local cluster simulation (tests/cluster: kubelet, scheduler, Job and Deployment controllers,
# garbage collector; the pods' containers run from the images with runc, each pod in its own
# network namespace), installs the operator with `helm install` of charts/mpijob-operator (two
# replicas from the operator image, one leading), applies manifests/examples/mpijob-tcp.yaml with
# kubectl, follows the job, prints the training summary, runs `helm uninstall`, and removes
# everything it made.
#
# With KUBEBUILDER_ASSETS naming a directory with etcd, kube-apiserver, kube-controller-manager
# and kube-scheduler, those run instead of the double (launch.py --control-plane), and the
# simulation plays only the kubelet: the real scheduler binds the pods, the real Job and
# Deployment controllers, token controller and garbage collector do their parts. When that
# directory also holds kubelet, kube-proxy and coredns, two real nodes run instead of the
# simulation (tests/cluster/realnode/nodes.py: containerd with runc, the CNI bridge, kubelet,
# kube-proxy, each node in its own network namespace, and CoreDNS in kube-system).
#
#   scripts/demo.sh [MANIFEST]        (needs root: network namespaces, bridges, mounts)
set -u
cd "$(dirname "$0")/.." || exit 1
manifest=${1:-manifests/examples/mpijob-tcp.yaml}
timeout_s=${DEMO_TIMEOUT:-300}

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
fail() { printf '\nmake demo: %s\n' "$*" >&2; exit 1; }

if [ "$(id -u)" -ne 0 ]; then
    fail "needs root: each simulated pod gets its own network namespace, veth and mounts. Run: sudo make demo"
fi
say "Installing what is missing and building"
scripts/install-deps.sh || fail "could not install the Debian packages (see above)"
make --no-print-directory -s all || fail "the build failed"
# kubectl: the one installed, else the one scripts/install-helm.sh brought with Helm 4
PATH="$PATH:$PWD/build/tools/kubectl/1.35.2"
command -v kubectl >/dev/null ||
    fail "kubectl is not installed and scripts/install-helm.sh could not bring one (https://kubernetes.io/docs/tasks/tools/)"
echo "kubectl: $(command -v kubectl) ($(kubectl version --client 2>/dev/null | sed -n 's/^Client Version: //p'))"

say "Building the images (make images: podman with runc, on a Debian 12 base made by mmdebstrap)"
scripts/images.py || fail "the images could not be built (see above)"

work=$(mktemp -d /tmp/mpijob-demo.XXXXXX)
cluster_pid=""
cleanup() {
    trap - EXIT INT TERM
    [ -n "$cluster_pid" ] && kill "$cluster_pid" 2>/dev/null
    [ -n "$cluster_pid" ] && wait "$cluster_pid" 2>/dev/null
    # What the local cluster made on this machine is gone with it: say so, or what is left.
    if [ -f "$work/cluster/nodes.json" ]; then
        left=$( { for ns in $(sed -n 's/.*"namespace": *"\([^"]*\)".*/\1/p' "$work/cluster/nodes.json"); do
                      ip netns list | grep "^$ns"; ls -d "/run/mpijob-realnodes/$ns" 2>/dev/null
                      ls -d /sys/fs/cgroup/*/"$ns" 2>/dev/null; done
                  grep " $work/" /proc/mounts | cut -d' ' -f2; } | head -20)
        if [ -n "$left" ]; then
            echo "left on this machine:"
            echo "$left"
        else
            echo "this machine: no node network namespace, container, mount or cgroup of the demo left"
        fi
    elif [ -f "$work/cluster/kubelet.json" ]; then
        prefix=$(sed -n 's/.*"prefix": *"\([^"]*\)".*/\1/p' "$work/cluster/kubelet.json")
        left=$( { ip netns list | grep "^$prefix-"
                  ip -o link show | grep -o "$prefix[a-z0-9]*" | sort -u
                  runc --root "$work/cluster/runc" list -q 2>/dev/null
                  grep " $work/" /proc/mounts | cut -d' ' -f2
                  iptables -t nat -S PREROUTING 2>/dev/null | grep -- "$prefix-svc"; } | head -20)
        if [ -n "$left" ]; then
            echo "left on this machine:"
            echo "$left"
        else
            echo "this machine: no network namespace, link, container, mount or iptables rule of the demo left"
        fi
    fi
    if [ -f "$work/api/pid" ]; then
        # shellcheck disable=SC2046
        kill $(cat "$work/api/pid") 2>/dev/null
        # the API server (and the control plane) stop within seconds; their state goes after them
        for _ in $(seq 50); do
            alive=""
            for pid in $(cat "$work/api/pid"); do kill -0 "$pid" 2>/dev/null && alive=1; done
            [ -z "$alive" ] && break
            sleep 0.2
        done
    fi
    [ -n "${DEMO_KEEP:-}" ] && echo "kept: $work" && return
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

control_plane="" real_nodes=""
roles="kubelet,scheduler,jobs,deployments,gc"
assets=${KUBEBUILDER_ASSETS:-}
if [ -n "$assets" ] && [ -x "$assets/etcd" ] && [ -x "$assets/kube-apiserver" ] &&
    [ -x "$assets/kube-controller-manager" ] && [ -x "$assets/kube-scheduler" ]; then
    control_plane=1
    roles="kubelet"
    if [ -x "$assets/kubelet" ] && [ -x "$assets/kube-proxy" ] && [ -x "$assets/coredns" ]; then
        real_nodes=1
    fi
    say "Starting a Kubernetes control plane: etcd, kube-apiserver, kube-controller-manager, kube-scheduler ($assets)"
else
    unset KUBEBUILDER_ASSETS
    say "Starting a Kubernetes API server (the project's double, HTTPS on 127.0.0.1)"
fi
# --control-plane: the real controller-manager and scheduler; with the double, what
# kube-controller-manager does for pods' in-cluster configuration (each namespace's default
# ServiceAccount, kube-root-ca.crt) and the ServiceAccount admission plugin.
python3 tests/apiserver/launch.py --state-dir "$work/api" --background --control-plane \
    >/dev/null || fail "the API server did not start (logs: DEMO_KEEP=1)"
export KUBECONFIG="$work/api/kubeconfig"
chmod 600 "$KUBECONFIG"    # it holds the admin's credentials (and helm says so otherwise)
echo "kubeconfig: $KUBECONFIG"

if [ -n "$real_nodes" ]; then
    say "Starting two real nodes: containerd with runc, CNI bridge, kubelet and kube-proxy each, CoreDNS"
    python3 tests/cluster/realnode/nodes.py --kubeconfig "$KUBECONFIG" --state-dir "$work/cluster" \
        --assets "$assets" --images "$PWD/build/images/index.json" \
        --log-file "$work/cluster.log" &
    cluster_pid=$!
    end=$((SECONDS + 300))
    while [ ! -f "$work/cluster/ready" ] && [ $SECONDS -lt $end ] && kill -0 "$cluster_pid" 2>/dev/null; do
        sleep 0.5
    done
    [ -f "$work/cluster/ready" ] || { tail -20 "$work/cluster.log"; fail "the real nodes did not start"; }
    echo "each node is a network namespace of this machine with its own containerd (the images of"
    echo "build/images imported into it), kubelet and kube-proxy; log: $work/cluster.log"
    kubectl get nodes -o wide
    kubectl get pods -n kube-system -o wide
else
    if [ -n "$control_plane" ]; then
        say "Starting the local node: the kubelet (the real scheduler binds pods to it)"
    else
        say "Starting the local cluster: kubelet, scheduler, Job and Deployment controllers, garbage collector"
    fi
    python3 tests/cluster/cluster.py --kubeconfig "$KUBECONFIG" --state-dir "$work/cluster" \
        --roles "$roles" --node-resource cpu=64 --node-resource memory=256Gi --node-resource nvidia.com/gpu=4 \
        --images "$PWD/build/images/index.json" \
        --job-pod-backoff 1 \
        --log-file "$work/cluster.log" &
    cluster_pid=$!
    echo "containers run from the images in build/images with runc, each pod in its own network"
    echo "namespace; log: $work/cluster.log"
fi

export HELM_CACHE_HOME="$work/helm/cache" HELM_CONFIG_HOME="$work/helm/config" HELM_DATA_HOME="$work/helm/data"
helm=${HELM:-build/tools/bin/helm}
say "helm install mpijob-operator charts/mpijob-operator -n mpijob-system --create-namespace (Helm $("$helm" version --short))"
"$helm" install mpijob-operator charts/mpijob-operator -n mpijob-system --create-namespace ||
    fail "helm install failed"
echo
echo "Waiting for the operator's pods (the Deployment's two replicas, from the operator image)"
end=$((SECONDS + 120)) holder=""
while [ $SECONDS -lt $end ]; do
    ready=$(kubectl get pods -n mpijob-system -l app.kubernetes.io/name=mpijob-operator \
        -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' 2>/dev/null |
        grep -c True)
    holder=$(kubectl get lease mpijob-operator -n mpijob-system -o jsonpath='{.spec.holderIdentity}' 2>/dev/null)
    [ "$ready" = 2 ] && [ -n "$holder" ] && break
    sleep 1
done
kubectl get pods -n mpijob-system -o wide
[ "$ready" = 2 ] || fail "the operator's pods did not become Ready (kubectl describe pods -n mpijob-system)"
echo "image: $(kubectl get pods -n mpijob-system -l app.kubernetes.io/name=mpijob-operator \
    -o jsonpath='{.items[0].status.containerStatuses[0].imageID}')"
echo "leader (Lease mpijob-system/mpijob-operator): $holder"

say "kubectl apply -f $manifest"
kubectl apply -f "$manifest" || fail "kubectl apply failed"
name=$(kubectl get -f "$manifest" -o jsonpath='{.metadata.name}') || fail "cannot read the job's name"

say "Following mpijob/$name (kubectl get mpijob $name)"
last="" state="" launcher_log="" shown=0 end=$((SECONDS + timeout_s))
# Rows as kubectl prints them, one per change, in the header's columns. Cells are cut where
# kubectl's own header puts them, so that an empty one (USED until the launcher has ended) shows
# as "-" and does not shift the others.
job_row() {
    kubectl get mpijob "$name" 2>/dev/null | awk '
        NR == 1 { for (i = 1; i <= length($0); i++)
                      if (substr($0, i, 1) != " " && (i == 1 || substr($0, i - 1, 1) == " ")) at[++n] = i
                  next }
        NR == 2 { out = ""
                  for (k = 1; k <= n; k++) {
                      v = k < n ? substr($0, at[k], at[k + 1] - at[k]) : substr($0, at[k])
                      gsub(/^ +| +$/, "", v); gsub(/ /, "_", v)
                      out = out (k > 1 ? " " : "") (v == "" ? "-" : v)
                  }
                  print out }'
}
row_format="%-$(( ${#name} + 3 ))s%-12s%-12s%-9s%-10s%s\n"
# shellcheck disable=SC2059
printf "$row_format" NAME STATE TRANSPORT USED WORKERS AGE
while [ $SECONDS -lt $end ]; do
    row=$(job_row)
    if [ -n "$row" ] && [ "$row" != "$last" ]; then
        # shellcheck disable=SC2086,SC2059
        printf "$row_format" $row
        last=$row
    fi
    state=$(kubectl get mpijob "$name" -o jsonpath='{.status.state}' 2>/dev/null)
    # the launcher's output, as the simulation or (real nodes) the nodes' log copier writes it
    [ -z "$launcher_log" ] && launcher_log=$(ls "$work"/cluster/logs/*"$name"-launcher-*.log 2>/dev/null | head -1)
    if [ -n "$launcher_log" ]; then
        total=$(wc -l <"$launcher_log")
        if [ "$total" -gt "$shown" ]; then
            # the launcher's new lines, without per-step lines, each cut to one screen line
            sed -n "$((shown + 1)),${total}p" "$launcher_log" | grep -v '"event":"step"' |
                cut -c1-150 | sed 's/^\(.\{149\}\).$/\1 .../; s/^/  launcher | /'
            shown=$total
        fi
    fi
    case "$state" in Succeeded | Failed) break ;; esac
    sleep 1
done
# USED: the transport the training really used, which the operator reads from the launcher's log
# once its pod has ended (status.launcherSummary); that pod's end may reach it just after the
# job's, so give it a moment when the log holds a summary.
if [ -n "$launcher_log" ] && grep -q '"event":"summary"' "$launcher_log"; then
    for _ in $(seq 30); do
        used=$(kubectl get mpijob "$name" -o jsonpath='{.status.launcherSummary.transport}' 2>/dev/null)
        [ -n "$used" ] && break
        sleep 1
    done
    if [ -z "$used" ]; then
        # Should the column stay empty, say what the operator's replicas made of the launcher's log.
        echo "(status.launcherSummary is still empty; what the operator logged of $name:)"
        kubectl logs -n mpijob-system -l app.kubernetes.io/name=mpijob-operator --prefix --tail=-1 2>&1 |
            grep -e "launcher's log" -e "$name" | tail -20
    fi
    row=$(job_row)
    # shellcheck disable=SC2086,SC2059
    [ -n "$row" ] && [ "$row" != "$last" ] && printf "$row_format" $row
fi

say "Result"
kubectl get mpijob "$name" -o wide
echo
kubectl get pods,jobs -o wide
summary=$( [ -n "$launcher_log" ] && grep '"event":"summary"' "$launcher_log" | tail -1)
if [ -n "$summary" ]; then
    echo
    echo "Training summary (rank 0 of mpijob-worker):"
    printf '%s\n' "$summary" | python3 -c '
import json, sys
s = json.loads(sys.stdin.read())
rows = [
    ("ranks", s.get("ranks")),
    ("backend", "%s on %s, transport %s" % (s.get("backend"), s.get("device"), s.get("transport"))),
    ("loss", "%.4f -> %.4f over %s steps" % (s.get("loss_first"), s.get("loss_last"), s.get("steps"))),
    ("weights identical", "yes, on every rank" if s.get("weights_identical") else "NO"),
    ("throughput", "{:,.0f} samples/s, {:.2f} ms a step".format(s.get("samples_per_sec"), s.get("step_ms"))),
    ("exposed comm", "%.2f ms a step (allreduce not hidden behind compute)" % s.get("exposed_comm_ms")),
]
for k, v in rows:
    print("  %-18s %s" % (k, v))'
fi
case "$state" in
    Succeeded)
        echo
        echo "mpijob/$name Succeeded. Cleaning up."
        say "helm uninstall mpijob-operator -n mpijob-system"
        "$helm" uninstall mpijob-operator -n mpijob-system || fail "helm uninstall failed"
        for _ in $(seq 60); do
            left=$(kubectl get all,serviceaccounts,roles,rolebindings -n mpijob-system \
                -l app.kubernetes.io/instance=mpijob-operator -o name 2>/dev/null)
            [ -z "$left" ] && break
            sleep 0.5
        done
        [ -z "$left" ] || fail "left after helm uninstall: $left"
        echo "nothing of the release is left in mpijob-system (the CRD stays, as helm keeps crds/)"
        [ -z "${DEMO_KEEP:-}" ] && echo "(DEMO_KEEP=1 make demo keeps the logs and state above; any MPIJob manifest: scripts/demo.sh FILE)"
        exit 0
        ;;
    Failed) kubectl describe mpijob "$name" | tail -15; fail "mpijob/$name Failed" ;;
    *) tail -20 "$work"/cluster/logs/mpijob-system_*; tail -20 "$work/cluster.log"; fail "mpijob/$name did not finish in ${timeout_s} s" ;;
esac
