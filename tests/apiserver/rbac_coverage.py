#!/usr/bin/env python3
"""Checks that an RBAC role grants nothing the operator does not use.

    rbac_coverage.py ROLE.yaml USAGE.log

USAGE.log holds one line per request the API-server double granted to the operator's token
during a test run ("verb group resource[/sub] namespace", written when MPIJOB_TEST_RBAC_USAGE
names the file). Every verb of every rule of every Role and ClusterRole in ROLE.yaml must have
been used by at least one request; otherwise that verb (or rule) is more than the operator needs
and the check fails naming it. Together with the enforcement (403 for anything not granted, so
a missing rule fails a test) this pins the role to exactly what the operator does.

A line "unserved GROUP RESOURCE" says the server of the run does not serve that resource (a test
found it missing from discovery, e.g. scheduling.k8s.io workloads on Kubernetes 1.32): rules on
it cannot be exercised there, so they are listed as such instead of failing. A run whose server
serves them (the double, a 1.36 with the Workload API) still checks them.
"""
import sys

import yaml


def main(argv):
    if len(argv) != 3:
        sys.stderr.write(__doc__)
        return 2
    used = set()
    unserved = set()
    with open(argv[2]) as f:
        for line in f:
            parts = line.split()
            if len(parts) == 3 and parts[0] == "unserved":
                unserved.add((parts[1], parts[2]))
            elif len(parts) == 4:
                verb, group, resource, _ = parts
                used.add((verb, "" if group == '""' else group, resource))
    unused = []
    not_here = []
    with open(argv[1]) as f:
        docs = [d for d in yaml.safe_load_all(f) if isinstance(d, dict)]
    for d in docs:
        if d.get("kind") not in ("Role", "ClusterRole"):
            continue
        name = (d.get("metadata") or {}).get("name")
        labels = (d.get("metadata") or {}).get("labels") or {}
        if any(k.startswith("rbac.authorization.k8s.io/aggregate-to-") for k in labels):
            continue  # roles for people, not for the operator
        for rule in d.get("rules") or []:
            for group in rule.get("apiGroups") or []:
                for resource in rule.get("resources") or []:
                    for verb in rule.get("verbs") or []:
                        if (verb, group, resource) in used:
                            continue
                        if (group, resource) in unserved:
                            not_here.append("%s %s: %s %s in API group %r" % (d.get("kind"), name, verb, resource,
                                                                              group))
                        else:
                            unused.append("%s %s: %s %s in API group %r" % (d.get("kind"), name, verb, resource,
                                                                            group))
    if not_here:
        print("RBAC: not exercised, as the server of this run does not serve the resource:")
        for u in not_here:
            print("  " + u)
    if unused:
        print("RBAC: granted but never used by the operator in the test run:")
        for u in unused:
            print("  " + u)
        return 1
    print("RBAC: every verb of every rule in %s %swas used by the operator (%d distinct requests kinds)"
          % (argv[1], "on a resource this server serves " if not_here else "", len(used)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
