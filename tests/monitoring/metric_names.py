#!/usr/bin/env python3
"""Prints, one per line, every operator metric (mpijob_*) that an alert
(charts/mpijob-operator/files/monitoring/alerts.yaml) or a dashboard query
(files/monitoring/dashboard.json) names, with the file naming it:

    python3 tests/monitoring/metric_names.py        # "NAME FILE" lines

tests/integration/test_operator.c checks each against a scrape of a running operator, so that
an alert or a panel cannot watch a metric the operator does not serve (a rename, a typo).
"""
import json
import os
import re
import sys

import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
FILES = os.path.join(ROOT, "charts", "mpijob-operator", "files", "monitoring")
NAME = re.compile(r"\bmpijob_[a-z0-9_]+")


def exprs():
    """(file, PromQL expression) for every alert and every dashboard target."""
    with open(os.path.join(FILES, "alerts.yaml")) as f:
        for group in yaml.safe_load(f)["groups"]:
            for rule in group["rules"]:
                yield "alerts.yaml", rule["expr"]
    with open(os.path.join(FILES, "dashboard.json")) as f:
        for panel in json.load(f)["panels"]:
            for target in panel.get("targets") or []:
                yield "dashboard.json", target["expr"]


def main():
    seen = set()
    for where, expr in exprs():
        for name in NAME.findall(expr):
            if (name, where) not in seen:
                seen.add((name, where))
                print(name, where)
    return 0 if seen else 1


if __name__ == "__main__":
    sys.exit(main())
