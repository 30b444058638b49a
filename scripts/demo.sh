#!/bin/sh
# make demo: the end-to-end demonstration.
cat <<'TEXT'
make demo will start a local cluster on this machine (the API-server double, the operator and
a simulated kubelet that runs pods as processes in their own network namespaces), apply
manifests/examples/mpijob-tcp.yaml with kubectl, and follow the MPIJob until it Succeeds with
the training summary of mpijob-worker.

That is not there yet. This build has the Kubernetes client (src/kube), the API-server double
(tests/apiserver) and the MPIJob controller (src/mpijob, run by build/bin/mpijob-operator);
the simulated kubelet and the worker runtime are still to come. `make test` exercises what
exists, the controller included, against the double.
TEXT
exit 1
