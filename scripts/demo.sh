#!/bin/sh
# make demo: the end-to-end demonstration.
cat <<'TEXT'
make demo will start a local cluster on this machine (the API-server double, the operator and
a simulated kubelet that runs pods as processes in their own network namespaces), apply
manifests/examples/mpijob-tcp.yaml with kubectl, and follow the MPIJob until it Succeeds with
the training summary of mpijob-worker.

That is not there yet: this build has the Kubernetes client library (src/kube), its
API-server double (tests/apiserver) and their tests. Run `make test` to exercise them.
TEXT
exit 1
