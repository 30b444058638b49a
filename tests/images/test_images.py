"""The images `make images` builds, checked as built, and run the way a cluster runs them: the
simulated kubelet pulling from the local OCI archives and running each container with runc.

    python3 -m unittest discover -s tests/images -p 'test_images.py' -v

Builds the images first when their inputs changed (scripts/images.py; a few minutes on a fresh
machine, seconds otherwise). Root only; without podman, mmdebstrap, skopeo, umoci or runc every
test is skipped with the reason.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unittest
import uuid
from unittest import mock

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "cluster"))

import kubelet as kubelet_mod  # noqa: E402
import netns  # noqa: E402
import pods  # noqa: E402
import runtime  # noqa: E402
from clustertest import KubeletTestCase, read_text, start_apiserver, stop_apiserver, wait_for  # noqa: E402

IMAGES = os.path.join(ROOT, "build", "images")
INDEX = os.path.join(IMAGES, "index.json")
WORKER = "mpijob-worker:latest"
_built = {}


def build_images():
    """Runs scripts/images.py once per process; returns (exit status, output)."""
    if "result" not in _built:
        check = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "images.py"), "--check"],
                               capture_output=True, text=True)
        if check.returncode == 77:
            _built["result"] = (77, check.stdout.strip())
        else:
            t0 = time.monotonic()
            proc = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "images.py")],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            _built["result"] = (proc.returncode, proc.stdout)
            print("\nscripts/images.py (%.0f s):\n%s" % (time.monotonic() - t0, proc.stdout),
                  file=sys.stderr)
    return _built["result"]


def need_images(test):
    code, out = build_images()
    if code == 77:
        test.skipTest(out)
    if code != 0:
        test.fail("scripts/images.py failed:\n" + out)


def index():
    with open(INDEX) as f:
        return json.load(f)


def inspect_config(name):
    out = subprocess.run(["skopeo", "inspect", "--config", "oci-archive:" + os.path.join(IMAGES, name + ".tar")],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def chart_app_version():
    with open(os.path.join(ROOT, "charts", "mpijob-operator", "Chart.yaml")) as f:
        return re.search(r'^appVersion:\s*"?([^"\s]+)"?', f.read(), re.M).group(1)


class Images(unittest.TestCase):
    """The archives and what they say about themselves."""

    def setUp(self):
        need_images(self)

    def test_three_images_with_digests(self):
        code, out = build_images()
        refs = {e["name"]: e for e in index().values()}
        for name in ("operator", "worker", "worker-mpich"):
            self.assertIn(name, refs)
            self.assertRegex(refs[name]["digest"], r"^sha256:[0-9a-f]{64}$")
            self.assertIn(refs[name]["digest"], out, "make images prints the digest of " + name)
            self.assertGreater(os.path.getsize(os.path.join(ROOT, refs[name]["archive"])), 10 << 20)

    def test_operator_runs_as_non_root_with_the_entrypoint_the_chart_expects(self):
        cfg = inspect_config("operator")["config"]
        user = cfg.get("User", "")
        uid = user.split(":")[0]
        self.assertTrue(uid.isdigit() and int(uid) != 0, "numeric non-root user, got %r" % user)
        self.assertEqual(cfg.get("Entrypoint"), ["/usr/local/bin/mpijob-operator"])
        # The chart gives args only: the image's entrypoint is what runs them.
        with open(os.path.join(ROOT, "charts", "mpijob-operator", "templates", "deployment.yaml")) as f:
            deployment = f.read()
        self.assertNotRegex(deployment, r"\n\s+command:", "the chart relies on the image's entrypoint")
        self.assertRegex(deployment, r"runAsUser: \{\{ \$uid \}\}")
        with open(os.path.join(ROOT, "charts", "mpijob-operator", "values.yaml")) as f:
            values = f.read()
        m = re.search(r"^\s*runAsUser:\s*(\d+)", values, re.M) or re.search(r"uid:\s*(\d+)", values)
        if m:
            self.assertEqual(m.group(1), uid, "the chart's user is the image's")

    def test_oci_labels(self):
        for name in ("operator", "worker", "worker-mpich"):
            labels = inspect_config(name)["config"].get("Labels") or {}
            self.assertEqual(labels.get("org.opencontainers.image.source"),
                             "https://github.com/mpijob-operator/mpijob-operator", name)
            self.assertEqual(labels.get("org.opencontainers.image.version"), chart_app_version(), name)
            self.assertEqual(labels.get("org.opencontainers.image.licenses"), "Apache-2.0", name)
            self.assertTrue(os.path.exists(os.path.join(ROOT, "LICENSE")))
            self.assertRegex(labels.get("org.opencontainers.image.revision", ""), r"^([0-9a-f]{40}(-dirty)?|unknown)$")

    def test_same_sources_same_digest(self):
        """Every layer built again (podman build --no-cache) comes out byte for byte the same."""
        before = index()[runtime.normalize("ghcr.io/mpijob-operator/mpijob-operator:" + chart_app_version())]
        proc = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "images.py"), "--only", "operator",
                               "--no-cache"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.assertEqual(proc.returncode, 0, proc.stdout)
        after = index()[runtime.normalize("ghcr.io/mpijob-operator/mpijob-operator:" + chart_app_version())]
        self.assertEqual(after["digest"], before["digest"], proc.stdout)

    def test_no_host_keys_in_the_worker_image(self):
        image = runtime.ImageStore(INDEX, runtime.shared_cache_dir(INDEX)).pull(WORKER)
        keys = [f for f in os.listdir(os.path.join(image.rootfs, "etc", "ssh")) if f.startswith("ssh_host_")]
        self.assertEqual(keys, [], "host keys baked into the image are shared by every container")
        self.assertTrue(os.path.islink(os.path.join(image.rootfs, "usr", "sbin", "sshd")))
        self.assertTrue(os.path.exists(os.path.join(image.rootfs, "usr", "sbin", "sshd.real")))


def _pod(name, image=WORKER, command=None, args=None, pull="IfNotPresent", **spec):
    c = {"name": "main", "image": image}
    if pull:
        c["imagePullPolicy"] = pull
    if command is not None:
        c["command"] = command
    if args is not None:
        c["args"] = args
    c.update(spec.pop("container_extra", {}) or {})
    body = {"nodeName": "sim-node", "restartPolicy": "Never", "containers": [c],
            "terminationGracePeriodSeconds": 3}
    body.update(spec)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": body}


@unittest.skipUnless(os.geteuid() == 0, "needs root: network namespaces, mounts and runc")
class Containers(KubeletTestCase):
    """Pods from the images, run by the kubelet with runc."""

    ns_prefix = "i"
    WAIT = 120.0

    @classmethod
    def kubelet_options(cls):
        return {"images": INDEX}

    @classmethod
    def setUpClass(cls):
        code, out = build_images()
        if code == 77:
            raise unittest.SkipTest(out)
        if code != 0:
            raise AssertionError("scripts/images.py failed:\n" + out)
        super().setUpClass()
        # Unpacked before any test waits on a pod: skopeo and umoci take minutes on a loaded
        # machine the first time.
        try:
            for ref in (WORKER, "mpijob-worker:mpich"):
                cls.kubelet.store.pull(ref)
        except BaseException:
            cls.tearDownClass()
            raise

    # ------------------------------------------------------------------ helpers
    def run_pod(self, name, phase="Succeeded", **kw):
        ns = self.ns()
        self.create(ns, _pod(name, **kw))
        p = self.wait_phase(ns, name, phase)
        return p, self.logs(ns, name)

    # ------------------------------------------------------------------ tests
    def test_worker_image_has_mpi_the_worker_and_the_rdma_providers(self):
        p, out = self.run_pod("tools", command=["sh", "-c",
                              "mpirun --version | head -1; mpijob-worker --help >/dev/null && echo worker-ok; "
                              "ls /usr/lib/x86_64-linux-gnu/libibverbs/; cat /etc/os-release | grep ^ID="])
        self.assertIn("Open MPI", out)
        self.assertIn("worker-ok", out)
        self.assertIn("libmlx5", out)
        self.assertIn("libvmw_pvrdma", out)
        self.assertIn("ID=debian", out)
        cs = p["status"]["containerStatuses"][0]
        self.assertEqual(cs["image"], "docker.io/library/mpijob-worker:latest")
        self.assertEqual(cs["imageID"], "docker.io/library/mpijob-worker@" + index()[cs["image"]]["digest"])
        self.assertTrue(cs["containerID"].startswith("runc://"))

    def test_mpich_flavour(self):
        _, out = self.run_pod("mpich", image="mpijob-worker:mpich",
                              command=["sh", "-c", "mpiexec --version | head -3; mpijob-worker --help >/dev/null && echo ok"])
        self.assertIn("HYDRA", out)
        self.assertIn("ok", out)

    def test_command_and_args_over_entrypoint_and_cmd(self):
        # args only: the image's ENTRYPOINT runs them (the worker's entrypoint execs its arguments)
        _, out = self.run_pod("args", args=["sh", "-c", "echo args:$0", "x"])
        self.assertEqual(out, "args:x\n")
        # command replaces the ENTRYPOINT
        _, out = self.run_pod("cmd", command=["echo", "command"], args=["and", "args"])
        self.assertEqual(out, "command and args\n")
        # neither: the ENTRYPOINT with no arguments, which starts sshd on port 2222
        ns = self.ns()
        self.create(ns, _pod("sshd", container_extra={"readinessProbe": {"tcpSocket": {"port": 2222},
                                                                          "periodSeconds": 1}}))
        self.wait_pod(ns, "sshd", lambda p: any(c["type"] == "Ready" and c["status"] == "True"
                                                for c in p["status"].get("conditions") or []), "ready")

    def test_env_working_dir_volumes_and_hosts(self):
        ns = self.ns()
        self.create(ns, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"},
                         "data": {"hostfile": "w-0 slots=1\n"}}, "configmaps")
        self.create(ns, _pod("env", command=["sh", "-c",
                                             "echo $GREETING $HOME; pwd; cat /etc/mpi/hostfile; hostname; "
                                             "grep -c env /etc/hosts; touch /etc/mpi/x 2>/dev/null || echo ro"],
                             hostname="env", subdomain="grp",
                             volumes=[{"name": "cfg", "configMap": {"name": "cfg"}}],
                             container_extra={"env": [{"name": "GREETING", "value": "hello"}],
                                              "workingDir": "/usr/share",
                                              "volumeMounts": [{"name": "cfg", "mountPath": "/etc/mpi"}]}))
        self.wait_phase(ns, "env", "Succeeded")
        self.assertEqual(self.logs(ns, "env").split("\n"),
                         ["hello /root", "/usr/share", "w-0 slots=1", "env", "1", "ro", ""])

    def test_run_as_user_group_and_capabilities(self):
        _, out = self.run_pod("user", command=["sh", "-c", "id -u; id -g; echo $HOME; grep CapEff /proc/self/status"],
                              securityContext={"runAsUser": 2000, "runAsGroup": 2000})
        lines = out.split()
        self.assertEqual(lines[:3], ["2000", "2000", "/home/mpiuser"])
        self.assertEqual(lines[4], "0000000000000000", "a user's process has no effective capabilities")
        ipc_lock = 1 << 14
        _, out = self.run_pod("caps", command=["sh", "-c", "grep CapEff /proc/self/status"])
        self.assertFalse(int(out.split()[1], 16) & ipc_lock, "IPC_LOCK is not a default capability")
        _, out = self.run_pod("ipclock", command=["sh", "-c", "grep CapEff /proc/self/status"],
                              container_extra={"securityContext": {"capabilities": {"add": ["IPC_LOCK"]}}})
        self.assertTrue(int(out.split()[1], 16) & ipc_lock, "capabilities.add IPC_LOCK")
        _, out = self.run_pod("nocaps", command=["sh", "-c", "grep CapEff /proc/self/status"],
                              container_extra={"securityContext": {"capabilities": {"drop": ["ALL"]}}})
        self.assertEqual(int(out.split()[1], 16), 0)

    def test_run_as_non_root_with_a_root_image_is_a_config_error(self):
        ns = self.ns()
        self.create(ns, _pod("root", command=["true"], securityContext={"runAsNonRoot": True}))
        p = self.wait_pod(ns, "root", lambda p: ((p["status"].get("containerStatuses") or [{}])[0].get("state") or {})
                          .get("waiting", {}).get("reason") == "CreateContainerConfigError", "refused")
        self.assertIn("container has runAsNonRoot and image will run as root",
                      p["status"]["containerStatuses"][0]["state"]["waiting"]["message"])
        self.assertEqual(p["status"]["phase"], "Pending")
        self.kube.delete("/api/v1/namespaces/%s/pods/root" % ns)
        _, out = self.run_pod("user", command=["id", "-u"], securityContext={"runAsNonRoot": True, "runAsUser": 2000})
        self.assertEqual(out, "2000\n")

    def test_kubernetes_service_reaches_the_api_server(self):
        """In-cluster configuration's way in: KUBERNETES_SERVICE_HOST/PORT, proxied to the API
        server as kube-proxy does."""
        svc = self.kube.get("/api/v1/namespaces/default/services/kubernetes")
        if not svc:
            self.skipTest("this API server has no kubernetes Service in default")
        _, out = self.run_pod("incluster", command=["bash", "-c",
                              "echo $KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT; "
                              "timeout 5 bash -c 'exec 3<>/dev/tcp/$KUBERNETES_SERVICE_HOST/$KUBERNETES_SERVICE_PORT' "
                              "&& echo connected"])
        self.assertEqual(out.split("\n")[0], "%s:%d" % (svc["spec"]["clusterIP"], svc["spec"]["ports"][0]["port"]))
        self.assertIn("connected", out)

    def test_exit_codes_and_restarts(self):
        p, _ = self.run_pod("fails", phase="Failed", command=["sh", "-c", "exit 3"])
        self.assertEqual(p["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"], 3)
        # A restart gets a fresh writable layer, as a new container does; an emptyDir stays.
        p, out = self.run_pod("retry", restartPolicy="OnFailure",
                              command=["sh", "-c", "ls /scratch-* 2>/dev/null; touch /scratch-$$; "
                                       "[ -e /data/m ] && exit 0; touch /data/m; exit 4"],
                              volumes=[{"name": "d", "emptyDir": {}}],
                              container_extra={"volumeMounts": [{"name": "d", "mountPath": "/data"}]})
        cs = p["status"]["containerStatuses"][0]
        self.assertEqual(cs["restartCount"], 1)
        self.assertEqual(cs["lastState"]["terminated"]["exitCode"], 4)
        self.assertEqual(out, "", "the first run's files are gone after the restart")

    def test_liveness_probe_failures_restart_the_container(self):
        ns = self.ns()
        self.create(ns, _pod("live", command=["sh", "-c", "touch /tmp/alive; sleep 1; rm /tmp/alive; exec sleep 600"],
                             restartPolicy="Always", terminationGracePeriodSeconds=1,
                             container_extra={"livenessProbe": {"exec": {"command": ["test", "-e", "/tmp/alive"]},
                                                                "periodSeconds": 1, "failureThreshold": 2}}))
        p = self.wait_pod(ns, "live", lambda p: (p["status"].get("containerStatuses") or [{}])[0].get("restartCount", 0) >= 1,
                          "restarted")
        last = p["status"]["containerStatuses"][0]["lastState"]["terminated"]
        # sleep as PID 1 ignores SIGTERM: the SIGKILL after the grace period ends it
        self.assertEqual(last["exitCode"], 137)
        self.kube.delete("/api/v1/namespaces/%s/pods/live" % ns)

    def test_missing_image_is_a_pull_error(self):
        ns = self.ns()
        self.create(ns, _pod("nope", image="mpijob-worker:does-not-exist", command=["true"]))
        p = self.wait_pod(ns, "nope", lambda p: (((p["status"].get("containerStatuses") or [{}])[0].get("state") or {})
                                                 .get("waiting") or {}).get("reason") in ("ErrImagePull", "ImagePullBackOff"),
                          "failed to pull")
        waiting = p["status"]["containerStatuses"][0]["state"]["waiting"]
        self.assertEqual(p["status"]["phase"], "Pending")
        if waiting["reason"] == "ErrImagePull":
            self.assertIn("docker.io/library/mpijob-worker:does-not-exist", waiting["message"])
            self.assertIn("not found", waiting["message"])
        p = self.wait_pod(ns, "nope", lambda p: p["status"]["containerStatuses"][0]["state"]["waiting"]["reason"]
                          == "ImagePullBackOff", "backed off")
        self.assertIn("Back-off pulling image", p["status"]["containerStatuses"][0]["state"]["waiting"]["message"])
        self.kube.delete("/api/v1/namespaces/%s/pods/nope" % ns)

    def test_pull_policy_always_fails_as_no_registry_is_reachable(self):
        """The node holds the images of build/images, loaded and not pulled, as on a real node
        with `kind load`: a :latest image under the default policy (Always) cannot be pulled,
        while IfNotPresent runs it."""
        ns = self.ns()
        self.create(ns, _pod("always", pull=None, command=["true"]))
        p = self.wait_pod(ns, "always", lambda p: (((p["status"].get("containerStatuses") or [{}])[0].get("state") or {})
                                                   .get("waiting") or {}).get("reason") == "ErrImagePull",
                          "failed to pull")
        msg = p["status"]["containerStatuses"][0]["state"]["waiting"]["message"]
        self.assertIn("docker.io/library/mpijob-worker:latest", msg)
        self.assertIn("no registry is reachable", msg)
        self.kube.delete("/api/v1/namespaces/%s/pods/always" % ns)

    def test_kill_and_cleanup_leave_no_container(self):
        ns = self.ns()
        self.create(ns, _pod("victim", command=["sleep", "600"]))
        self.wait_phase(ns, "victim", "Running")
        ans = kubelet_mod.request(self.state, "kill", ns, "victim")
        self.assertTrue(ans["ok"], ans)
        p = self.wait_phase(ns, "victim", "Failed")
        self.assertEqual(p["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"], 137)
        self.create(ns, _pod("graceful", command=["sleep", "600"]))
        self.wait_phase(ns, "graceful", "Running")
        self.kube.delete("/api/v1/namespaces/%s/pods/graceful" % ns)
        self.wait_gone(ns, "graceful")
        running = [c for c in runtime.Runtime(self.kubelet.runc_root).list()
                   if "-main-" in c and ("graceful" in c or "victim" in c)]
        self.assertEqual(running, [], "runc still has %s" % running)
        leftovers = [d for d in os.listdir(self.kubelet.containers_dir)
                     if "graceful" in d or "victim" in d] if os.path.isdir(self.kubelet.containers_dir) else []
        self.assertEqual(leftovers, [])

    def test_kill_when_runc_kill_does_nothing(self):
        """runc's kill exits 0 and the container runs on: the kubelet sees it still running,
        kills it by its process and says so in its log."""
        ns = self.ns()
        self.create(ns, _pod("stubborn", command=["sleep", "600"]))
        self.wait_phase(ns, "stubborn", "Running")
        wrapper = os.path.join(self.tmp, "runc-ignores-kill")
        with open(wrapper, "w") as f:
            f.write('#!/bin/sh\nfor a; do [ "$a" = kill ] && exit 0; done\nexec runc "$@"\n')
        os.chmod(wrapper, 0o755)
        rt = self.kubelet.runtime
        rt.runc = wrapper
        self.addCleanup(setattr, rt, "runc", "runc")
        with self.assertLogs("kubelet", "WARNING") as logs:
            self.assertTrue(kubelet_mod.request(self.state, "kill", ns, "stubborn")["ok"])
            p = self.wait_phase(ns, "stubborn", "Failed")
        self.assertEqual(p["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"], 137)
        said = [line for line in logs.output if "container main killed, the hard way" in line]
        self.assertTrue(said, logs.output)
        self.assertIn("runc kill --all", said[0])
        self.assertIn("SIGKILL to its process", said[0])

    def test_a_container_that_cannot_be_killed_is_an_error_in_the_log(self):
        ns = self.ns()
        self.create(ns, _pod("immortal", command=["sleep", "600"]))
        self.wait_phase(ns, "immortal", "Running")
        refusal = runtime.KillError("container X still runs after everything")
        with mock.patch.object(runtime.Container, "kill", side_effect=refusal), \
                self.assertLogs("kubelet", "ERROR") as logs:
            self.assertTrue(kubelet_mod.request(self.state, "kill", ns, "immortal")["ok"])
            self.wait("the kubelet's error", lambda: logs.output, describe=lambda: self.describe_pod(ns, "immortal"))
        self.assertIn("%s/immortal: container main: container X still runs after everything" % ns,
                      "\n".join(logs.output))
        self.assertEqual(self.kube.get("/api/v1/namespaces/%s/pods/immortal" % ns)["status"]["phase"], "Running",
                         "the container runs on, and the pod says so")
        self.kube.delete("/api/v1/namespaces/%s/pods/immortal" % ns)
        self.wait_gone(ns, "immortal")
        self.assertFalse([c for c in runtime.Runtime(self.kubelet.runc_root).list() if "immortal" in c])


@unittest.skipUnless(os.geteuid() == 0, "needs root: network namespaces, mounts and runc")
class CrashReaper(unittest.TestCase):
    def setUp(self):
        need_images(self)

    def test_sigkilled_cluster_leaves_no_container(self):
        """cluster.py --images killed with SIGKILL while a container runs: its reaper removes the
        runc container, its overlay root, the pod's network namespace and the service proxy's
        iptables rule."""
        tmp = tempfile.mkdtemp(prefix="images-reaper-")
        self.addCleanup(shutil.rmtree, tmp, True)
        token = str(uuid.uuid4().int % 900000 + 100000)
        kube, api_pids, _ = start_apiserver(os.path.join(tmp, "api"))
        self.addCleanup(stop_apiserver, api_pids)
        state = os.path.join(tmp, "sim")
        log_path = os.path.join(tmp, "cluster.log")
        with open(log_path, "w") as log:
            sim = subprocess.Popen([sys.executable, os.path.join(ROOT, "tests", "cluster", "cluster.py"),
                                    "--kubeconfig", os.path.join(tmp, "api", "kubeconfig"), "--roles", "kubelet,scheduler",
                                    "--images", INDEX, "--state-dir", state], stdout=log, stderr=log)
        self.addCleanup(lambda: sim.poll() is not None or (sim.kill(), sim.wait()))
        kube.create("/api/v1/namespaces/default/pods", _pod("doomed", command=["sleep", token]))

        def until(what, fn, timeout=120):
            return wait_for(what, fn, timeout, interval=0.2,
                            describe=lambda: "cluster.log (end):\n" + read_text(log_path, 3000))

        def phase():
            return ((kube.get("/api/v1/namespaces/default/pods/doomed") or {}).get("status") or {}).get("phase")

        def sleepers():
            return pods.processes("sleep", token)

        def mounts():
            with open("/proc/mounts") as f:
                return [line.split()[1] for line in f if " %s/" % state in line]

        # Run alone, this test may be the first to unpack the worker image (skopeo, umoci), which a
        # loaded 2-core machine can take minutes to do.
        until("the pod running", lambda: phase() == "Running", timeout=600)
        until("the container's process", sleepers)
        with open(os.path.join(state, "kubelet.json")) as f:
            prefix = json.load(f)["prefix"]
        rt = runtime.Runtime(os.path.join(state, "runc"))
        self.assertTrue(rt.list(), "runc knows the container")
        self.assertTrue(mounts(), "the container's root is mounted")
        self.assertTrue(netns.leftovers(prefix))
        sim.kill()
        sim.wait()
        until("the reaper's clean-up", lambda: not sleepers() and not rt.list() and not mounts()
              and not netns.leftovers(prefix))
        rules = subprocess.run(["iptables", "-t", "nat", "-S", "PREROUTING"], capture_output=True, text=True).stdout
        self.assertNotIn(prefix + "-svc-kubernetes", rules)


if __name__ == "__main__":
    unittest.main()
