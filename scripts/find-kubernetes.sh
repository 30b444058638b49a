#!/bin/sh
# Lists the real Kubernetes folders (envtest layout: etcd and kube-apiserver, and for the full
# tiers kube-controller-manager, kube-scheduler, kubelet, kube-proxy, coredns) found on this
# machine, newest first, one "VERSION DIR" line each (VERSION as kube-apiserver --version gives it,
# without the v). Looked for, in this order (the first of two folders of one version wins):
#   $KUBEBUILDER_ASSETS                               (one folder, when set)
#   /usr/local/kubebuilder/bin                        (the envtest default)
#   /usr/local/kubebuilder/k8s/*                      (setup-envtest --bin-dir /usr/local/kubebuilder)
#   ${XDG_DATA_HOME:-$HOME/.local/share}/kubebuilder-envtest/k8s/*   (setup-envtest's default)
# MPIJOB_K8S_DIRS="DIR DIR..." replaces that list.
set -u
dirs=${MPIJOB_K8S_DIRS:-"${KUBEBUILDER_ASSETS:-} /usr/local/kubebuilder/bin /usr/local/kubebuilder/k8s/* ${XDG_DATA_HOME:-${HOME:-/root}/.local/share}/kubebuilder-envtest/k8s/*"}
seen=""
for d in $dirs; do
    [ -x "$d/kube-apiserver" ] && [ -x "$d/etcd" ] || continue
    v=$("$d/kube-apiserver" --version 2>/dev/null | sed -n 's/^Kubernetes v\([0-9][0-9.]*\).*/\1/p')
    [ -n "$v" ] || continue
    case " $seen " in *" $v "*) continue ;; esac
    seen="$seen $v"
    printf '%s %s\n' "$v" "$d"
done | sort -t. -k1,1nr -k2,2nr -k3,3nr
