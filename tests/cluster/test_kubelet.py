"""The simulated kubelet against the API server double: pods as processes in their own network
namespaces. Root only (network namespaces, mounts).

    python3 -m unittest discover -s tests/cluster -p 'test_kubelet.py' -v
"""

import base64
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import unittest
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import kubelet as kubelet_mod  # noqa: E402
import netns  # noqa: E402
import podenv  # noqa: E402
import podvolumes  # noqa: E402
from clustertest import STOP, KubeletTestCase, alive, scaled, wait_for  # noqa: E402
from kube import KubeError  # noqa: E402

DOMAIN = "cluster.local"


def _pod(name, command, **spec):
    containers = spec.pop("containers", None) or [{"name": "main", "image": "ignored", "command": command}]
    for c in containers:
        c.update(spec.pop("container_extra", {}) or {})
    body = {"nodeName": "sim-node", "restartPolicy": "Never", "containers": containers,
            "terminationGracePeriodSeconds": 3}
    body.update(spec)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": body}


@unittest.skipUnless(os.geteuid() == 0, "needs root: network namespaces, bridges and mounts")
@unittest.skipUnless(shutil.which("ip") and shutil.which("unshare") and shutil.which("nsenter"),
                     "needs iproute2 and util-linux (ip, unshare, nsenter)")
class KubeletTest(KubeletTestCase):
    ns_prefix = "t"

    @classmethod
    def kubelet_options(cls):
        # a program the "image" adds to /usr/local/bin
        image_prog = os.path.join(cls.tmp, "image-prog")
        with open(image_prog, "w") as f:
            f.write("#!/bin/sh\necho from the image: $*\n")
        os.chmod(image_prog, 0o755)
        return {"image_bin": [image_prog]}

    # ------------------------------------------------------------------ tests
    def test_lifecycle_running_then_succeeded(self):
        ns = self.ns()
        self.create(ns, _pod("hello", ["sh", "-c", "echo hi; echo host=$(hostname) pod=$POD_NAME; sleep 1"],
                             container_extra={"env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {
                                 "fieldPath": "metadata.name"}}}]}))
        p = self.wait_phase(ns, "hello", "Running")
        st = p["status"]
        self.assertTrue(st.get("podIP"))
        self.assertTrue(st.get("startTime"))
        self.assertEqual(st["hostIP"], self.kubelet.host_ip)
        self.assertIn("running", st["containerStatuses"][0]["state"])
        p = self.wait_phase(ns, "hello", "Succeeded")
        t = self.terminated(p)
        self.assertEqual(t["exitCode"], 0)
        self.assertEqual(t["reason"], "Completed")
        self.assertEqual(self.cond(p, "Ready"), "False")
        self.assertEqual(self.cond(p, "PodScheduled"), "True")
        self.assertEqual(self.logs(ns, "hello"), "hi\nhost=hello pod=hello\n")

    def test_image_programs_are_on_the_path(self):
        ns = self.ns()
        self.create(ns, _pod("img", ["sh", "-c", "command -v image-prog; image-prog ok"]))
        self.wait_phase(ns, "img", "Succeeded")
        self.assertEqual(self.logs(ns, "img"), "/usr/local/bin/image-prog\nfrom the image: ok\n")
        self.assertFalse(os.path.exists("/usr/local/bin/image-prog"), "the host's /usr/local/bin is untouched")

    def test_termination_message_from_the_log_on_error(self):
        ns = self.ns()
        self.create(ns, _pod("fails", ["sh", "-c", "echo starting; echo 'it broke: no device' >&2; exit 3"],
                             container_extra={"terminationMessagePolicy": "FallbackToLogsOnError"}))
        p = self.wait_phase(ns, "fails", "Failed")
        t = self.terminated(p)
        self.assertEqual(t["exitCode"], 3)
        self.assertEqual(t.get("message"), "starting\nit broke: no device")
        self.create(ns, _pod("quiet", ["sh", "-c", "echo nothing to see; exit 3"]))
        p = self.wait_phase(ns, "quiet", "Failed")
        self.assertNotIn("message", self.terminated(p), "only FallbackToLogsOnError takes the log")

    def test_failure_exit_code_and_restart_on_failure(self):
        ns = self.ns()
        self.create(ns, _pod("fails", ["sh", "-c", "echo bad >&2; exit 3"]))
        p = self.wait_phase(ns, "fails", "Failed")
        self.assertEqual(self.terminated(p)["exitCode"], 3)
        self.assertEqual(self.terminated(p)["reason"], "Error")
        self.assertIn("bad", self.logs(ns, "fails"))
        # OnFailure: the first run fails, the restart (same emptyDir) succeeds.
        self.create(ns, _pod("retry", ["sh", "-c", "[ -e /data/m ] && exit 0; touch /data/m; exit 4"],
                             restartPolicy="OnFailure", volumes=[{"name": "d", "emptyDir": {}}],
                             container_extra={"volumeMounts": [{"name": "d", "mountPath": "/data"}]}))
        p = self.wait_phase(ns, "retry", "Succeeded")
        cs = p["status"]["containerStatuses"][0]
        self.assertEqual(cs["restartCount"], 1)
        self.assertEqual(cs["lastState"]["terminated"]["exitCode"], 4)

    def test_pods_reach_each_other_by_fqdn(self):
        ns = self.ns()
        self.create(ns, _pod("srv", ["python3", "-m", "http.server", "8080", "--bind", "0.0.0.0"],
                             hostname="srv", subdomain="grp",
                             container_extra={"readinessProbe": {"tcpSocket": {"port": 8080},
                                                                 "periodSeconds": 1}}))
        p = self.wait_pod(ns, "srv", lambda p: self.cond(p, "Ready") == "True", "ready")
        srv_ip = p["status"]["podIP"]
        fqdn = "srv.grp.%s.svc.%s" % (ns, DOMAIN)
        # As against cluster DNS: the FQDN; srv.grp through the search entry <ns>.svc.<domain>;
        # the bare srv only through a search entry grp.<ns>.svc.<domain> (what the operator
        # gives workers), so not from cli2, which lacks it.
        script = ("import socket, urllib.request; print(socket.gethostbyname('%s'));"
                  "print(socket.gethostbyname('srv.grp')); print(socket.gethostbyname('srv'));"
                  "print(urllib.request.urlopen('http://%s:8080/', timeout=60).status)") % (fqdn, fqdn)
        self.create(ns, _pod("cli", ["python3", "-c", script], hostname="cli", subdomain="grp",
                             dnsConfig={"searches": ["grp.%s.svc.%s" % (ns, DOMAIN)]}))
        p = self.wait_phase(ns, "cli", "Succeeded")
        self.assertNotEqual(p["status"]["podIP"], srv_ip)
        self.assertEqual(self.logs(ns, "cli").split(), [srv_ip, srv_ip, srv_ip, "200"])
        bare = ("import socket\ntry:\n    print(socket.gethostbyname('srv'))\n"
                "except OSError:\n    print('unresolved')\nprint(socket.gethostbyname('srv.grp'))")
        self.create(ns, _pod("cli2", ["python3", "-c", bare], hostname="cli2", subdomain="grp"))
        self.wait_phase(ns, "cli2", "Succeeded")
        self.assertEqual(self.logs(ns, "cli2").split(), ["unresolved", srv_ip])

    def mount_points(self):
        """Where the volumes test mounts its ConfigMap, Secret and hostPath: folders this machine
        lacks, which the kubelet makes for the pod and removes at cleanup, named for this run."""
        return ("/etc/simcfg-" + self.prefix, "/etc/simsec-" + self.prefix, "/mnt/hp-" + self.prefix)

    def test_configmap_secret_hostpath_volumes(self):
        ns = self.ns()
        self.create(ns, {"metadata": {"name": "cfg"}, "data": {"a.txt": "hello", "b.txt": "other"}}, "configmaps")
        self.create(ns, {"metadata": {"name": "sec"}, "type": "Opaque",
                         "data": {"k": base64.b64encode(b"s3cret").decode(),
                                  "x": base64.b64encode(b"exe").decode()}}, "secrets")
        hp = os.path.join(self.tmp, "hostpath")
        os.makedirs(hp)
        cfg_dir, sec_dir, hp_dir = self.mount_points()
        script = ("cat {c}/a.txt; echo; ls {c}; stat -c '%a' {c}/a.txt;"
                  "cat {s}/key; echo; stat -c '%a' {s}/key {s}/run.sh;"
                  "touch {s}/w 2>/dev/null && echo writable || echo readonly;"
                  "echo out > {h}/out; echo private > /tmp/private-marker; mountpoint -q /run && "
                  "[ -d /run/sshd ] && echo run-ok").format(c=cfg_dir, s=sec_dir, h=hp_dir)
        self.create(ns, _pod("vols", ["sh", "-c", script],
                             volumes=[{"name": "c", "configMap": {"name": "cfg", "items": [{"key": "a.txt",
                                                                                           "path": "a.txt"}]}},
                                      {"name": "s", "secret": {"secretName": "sec", "defaultMode": 0o400,
                                                               "items": [{"key": "k", "path": "key"},
                                                                         {"key": "x", "path": "run.sh",
                                                                          "mode": 0o555}]}},
                                      {"name": "h", "hostPath": {"path": hp}}],
                             container_extra={"volumeMounts": [{"name": "c", "mountPath": cfg_dir},
                                                               {"name": "s", "mountPath": sec_dir},
                                                               {"name": "h", "mountPath": hp_dir}]}))
        self.wait_phase(ns, "vols", "Succeeded")
        self.assertEqual(self.logs(ns, "vols").split("\n"),
                         ["hello", "a.txt", "644", "s3cret", "400", "555", "readonly", "run-ok", ""])
        with open(os.path.join(hp, "out")) as f:
            self.assertEqual(f.read(), "out\n")
        self.assertFalse(os.path.exists("/tmp/private-marker"))
        # Mount points made on the host for the pod are not visible there as mounts.
        with open("/proc/self/mounts") as f:
            self.assertNotIn(sec_dir, f.read())

    def test_projected_volume_waits_for_its_configmap(self):
        """The volume the ServiceAccount admission plugin adds to every pod, for a pod made
        before its namespace's kube-root-ca.crt: nothing starts, the pod waits as a kubelet
        leaves it (Pending, ContainerCreating, FailedMount events) and starts, with the whole
        volume, once the ConfigMap is there."""
        ns = self.ns()
        code, obj = self.kube.request("POST", "/api/v1/namespaces/%s/serviceaccounts" % ns,
                                      {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}})
        self.assertIn(code, (201, 409), obj)
        sa_dir = "/var/run/secrets/kubernetes.io/serviceaccount"
        volume = {"name": "kube-api-access-abcde", "projected": {"defaultMode": 420, "sources": [
            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1",
                                                                         "fieldPath": "metadata.namespace"}}]}}]}}
        self.create(ns, _pod("early", ["sh", "-c", "cat %s/ca.crt; cat %s/namespace; echo; test -s %s/token && "
                                       "echo token-ok; sleep 600" % ((sa_dir,) * 3)],
                             volumes=[volume], serviceAccountName="default",
                             container_extra={"volumeMounts": [{"name": "kube-api-access-abcde",
                                                                "mountPath": sa_dir, "readOnly": True}]}))
        said = 'MountVolume.SetUp failed for volume "kube-api-access-abcde" : configmap "kube-root-ca.crt" not found'

        def failed_mount():
            evs = [e for e in self.kube.list("/api/v1/namespaces/%s/events" % ns)[0]
                   if e["involvedObject"].get("name") == "early" and e.get("reason") == "FailedMount"]
            return evs[0] if evs and evs[0].get("count", 1) >= 2 else None
        ev = self.wait("a FailedMount event, seen twice", failed_mount,
                       describe=lambda: self.kube.list("/api/v1/namespaces/%s/events" % ns)[0])
        self.assertEqual((ev["type"], ev["message"]), ("Warning", said))
        self.assertEqual(ev["source"], {"component": "kubelet", "host": "sim-node"})
        self.assertEqual(ev["involvedObject"]["kind"], "Pod")
        self.assertEqual(ev["involvedObject"]["uid"], self.pod(ns, "early")["metadata"]["uid"])
        self.assertEqual(len([e for e in self.kube.list("/api/v1/namespaces/%s/events" % ns)[0]
                              if e.get("reason") == "FailedMount"]), 1, "repeats raise the count of one Event")
        p = self.pod(ns, "early")
        self.assertEqual(p["status"]["phase"], "Pending")
        self.assertEqual(p["status"]["containerStatuses"][0]["state"], {"waiting": {"reason": "ContainerCreating"}})
        self.assertEqual(self.cond(p, "PodReadyToStartContainers"), "False")
        self.assertEqual(self.logs(ns, "early"), "", "nothing started")

        ca = "-----BEGIN CERTIFICATE-----\nMIIBsimulated\n-----END CERTIFICATE-----\n"
        self.create(ns, {"metadata": {"name": "kube-root-ca.crt"}, "data": {"ca.crt": ca}}, "configmaps")
        self.wait_phase(ns, "early", "Running")
        out = self.wait("the container's output", lambda: "token-ok" in self.logs(ns, "early") and
                        self.logs(ns, "early"), describe=lambda: self.describe_pod(ns, "early"))
        self.assertEqual(out, ca + ns + "\ntoken-ok\n")

    def _ssh_job(self, ns, workers):
        """The SSH Secret and sshd worker pods as the operator makes them; returns the volume."""
        if not os.path.exists("/usr/sbin/sshd") or not shutil.which("ssh-keygen"):
            self.skipTest("no sshd / ssh-keygen installed")
        keydir = tempfile.mkdtemp(dir=self.tmp)
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", os.path.join(keydir, "k")], check=True)
        data = {}
        for key, f in (("ssh-privatekey", "k"), ("ssh-publickey", "k.pub")):
            with open(os.path.join(keydir, f), "rb") as fh:
                data[key] = base64.b64encode(fh.read()).decode()
        self.create(ns, {"metadata": {"name": "job-ssh"}, "type": "kubernetes.io/ssh-auth", "data": data}, "secrets")
        # The volume exactly as the operator's builders.c writes it.
        ssh_vol = {"name": "ssh-auth", "secret": {"secretName": "job-ssh", "defaultMode": 0o600, "items": [
            {"key": "ssh-privatekey", "path": "id_rsa"}, {"key": "ssh-publickey", "path": "id_rsa.pub"},
            {"key": "ssh-publickey", "path": "authorized_keys"}]}}
        mount = {"volumeMounts": [{"name": "ssh-auth", "mountPath": "/root/.ssh"}]}
        for i in range(workers):
            name = "job-worker-%d" % i
            self.create(ns, _pod(name, ["/usr/sbin/sshd", "-De"], hostname=name, subdomain="job",
                                 volumes=[ssh_vol],
                                 container_extra=dict(mount, readinessProbe={"tcpSocket": {"port": 22},
                                                                             "periodSeconds": 1})))
        for i in range(workers):
            self.wait_pod(ns, "job-worker-%d" % i, lambda p: self.cond(p, "Ready") == "True", "ready")
        return ssh_vol, mount

    def test_sshd_pod_accepts_login_from_another_pod(self):
        ns = self.ns()
        ssh_vol, mount = self._ssh_job(ns, 1)
        host = "job-worker-0.job.%s.svc" % ns
        self.create(ns, _pod("job-launcher", ["ssh", "-o", "StrictHostKeyChecking=no", "-o",
                                              "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes", "-o",
                                              "ConnectionAttempts=10", "-o", "LogLevel=ERROR", host,
                                              "hostname; echo ssh-ok"],
                             hostname="job-launcher", subdomain="job", volumes=[ssh_vol], container_extra=mount))
        self.wait_phase(ns, "job-launcher", "Succeeded")
        self.assertEqual(self.logs(ns, "job-launcher").split(), ["job-worker-0", "ssh-ok"])

    def test_mpirun_across_pods(self):
        if not shutil.which("mpirun"):
            self.skipTest("no mpirun installed")
        ns = self.ns()
        ssh_vol, mount = self._ssh_job(ns, 2)
        hosts = "".join("job-worker-%d.job.%s.svc slots=1\n" % (i, ns) for i in range(2))
        self.create(ns, {"metadata": {"name": "job-config"}, "data": {"hostfile": hosts}}, "configmaps")
        env = [{"name": "OMPI_MCA_orte_default_hostfile", "value": "/etc/mpi/hostfile"},
               {"name": "OMPI_MCA_orte_keep_fqdn_hostnames", "value": "true"},
               {"name": "OMPI_MCA_plm_rsh_args",
                "value": "-o ConnectionAttempts=10 -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null "
                         "-o LogLevel=ERROR"}]
        self.create(ns, _pod("job-launcher", ["mpirun", "--allow-run-as-root", "-np", "2", "hostname"],
                             hostname="job-launcher", subdomain="job",
                             volumes=[ssh_vol, {"name": "cfg", "configMap": {"name": "job-config", "items": [
                                 {"key": "hostfile", "path": "hostfile", "mode": 0o444}]}}],
                             container_extra={"env": env, "volumeMounts": mount["volumeMounts"] + [
                                 {"name": "cfg", "mountPath": "/etc/mpi"}]}))
        self.wait_phase(ns, "job-launcher", "Succeeded", timeout=120)
        # Each rank prints its host name on a line of its own; Open MPI may add diagnostics of its
        # own (a setpgid race in plm:rsh under load), which say nothing about the pods.
        lines = self.logs(ns, "job-launcher").split("\n")
        self.assertEqual(sorted(x for x in lines if x.startswith("job-worker-")), ["job-worker-0", "job-worker-1"],
                         "\n".join(lines))

    def test_exec_readiness_probe(self):
        ns = self.ns()
        self.create(ns, _pod("slow", ["sh", "-c", "sleep 1; touch /tmp/ready; sleep 100"],
                             container_extra={"readinessProbe": {"exec": {"command": ["test", "-e", "/tmp/ready"]},
                                                                 "periodSeconds": 1, "failureThreshold": 1}}))
        p = self.wait_phase(ns, "slow", "Running")
        self.assertEqual(self.cond(p, "Ready"), "False")
        p = self.wait_pod(ns, "slow", lambda p: self.cond(p, "Ready") == "True", "ready")
        self.assertTrue(p["status"]["containerStatuses"][0]["ready"])
        self.assertEqual(self.cond(p, "ContainersReady"), "True")

    def test_startup_probe_holds_readiness_and_liveness_back(self):
        """A slow start: until its startup probe succeeds the container is not started, not ready,
        and its liveness probe (which would fail) does not run; then both run as usual."""
        ns = self.ns()
        self.create(ns, _pod("slowstart", ["sh", "-c", "sleep 2; touch /tmp/up; sleep 100"],
                             container_extra={
                                 "startupProbe": {"exec": {"command": ["test", "-e", "/tmp/up"]},
                                                  "periodSeconds": 1, "failureThreshold": 120},
                                 "livenessProbe": {"exec": {"command": ["test", "-e", "/tmp/up"]},
                                                   "periodSeconds": 1, "failureThreshold": 1}}))
        p = self.wait_phase(ns, "slowstart", "Running")
        cs = p["status"]["containerStatuses"][0]
        if not cs["started"]:
            self.assertFalse(cs["ready"], "not ready before the startup probe succeeded")
        p = self.wait_pod(ns, "slowstart", lambda p: p["status"]["containerStatuses"][0]["started"], "started")
        p = self.wait_pod(ns, "slowstart", lambda p: self.cond(p, "Ready") == "True", "ready")
        self.assertEqual(p["status"]["containerStatuses"][0]["restartCount"], 0,
                         "the liveness probe did not run before the start was over")

    def test_startup_probe_failures_restart_the_container(self):
        ns = self.ns()
        self.create(ns, _pod("neverup", ["sleep", "100"], restartPolicy="Always", terminationGracePeriodSeconds=1,
                             container_extra={"startupProbe": {"exec": {"command": ["test", "-e", "/tmp/up"]},
                                                               "periodSeconds": 1, "failureThreshold": 2}}))
        p = self.wait_pod(ns, "neverup",
                          lambda p: (p["status"].get("containerStatuses") or [{}])[0].get("restartCount", 0) >= 1,
                          "restarted")
        cs = p["status"]["containerStatuses"][0]
        self.assertFalse(cs["ready"])
        self.kube.delete("/api/v1/namespaces/%s/pods/neverup" % ns)

    def test_kill_pod_fails_with_137(self):
        ns = self.ns()
        self.create(ns, _pod("victim", ["sleep", "100"]))
        self.wait_phase(ns, "victim", "Running")
        # Through the control directory, as a test in another process would.
        ans = kubelet_mod.request(self.state, "kill", ns, "victim")
        self.assertTrue(ans["ok"], ans)
        p = self.wait_phase(ns, "victim", "Failed")
        self.assertEqual(self.terminated(p)["exitCode"], 137)
        self.assertEqual(self.terminated(p)["reason"], "Error")
        ans = kubelet_mod.request(self.state, "kill", ns, "nobody")
        self.assertFalse(ans["ok"])

    def test_evict_pod(self):
        ns = self.ns()
        self.create(ns, _pod("evictee", ["sleep", "100"], restartPolicy="OnFailure"))
        self.wait_phase(ns, "evictee", "Running")
        self.assertTrue(self.kubelet.evict_pod(ns, "evictee", "The node was low on resource: memory."))
        p = self.wait_phase(ns, "evictee", "Failed")
        self.assertEqual(p["status"]["reason"], "Evicted")
        self.assertIn("low on resource", p["status"]["message"])
        self.assertEqual(self.cond(p, "DisruptionTarget"), "True")
        self.assertEqual(p["status"]["containerStatuses"][0]["restartCount"], 0)

    def test_delete_kills_processes(self):
        ns = self.ns()
        self.create(ns, _pod("doomed", ["sh", "-c", "sleep 100 & sleep 101; wait"]))
        self.wait_phase(ns, "doomed", "Running")
        runner = self.kubelet._find(ns, "doomed")
        pod_ns = runner.net.ns
        pids = self.wait("the pod's processes in its network namespace", lambda: netns.netns_pids(pod_ns))
        self.assertTrue(self.kube.delete("/api/v1/namespaces/%s/pods/doomed" % ns))
        self.wait("the pod's runner to finish", runner.finished.is_set, describe=lambda: self.describe_pod(ns, "doomed"))
        self.assertEqual([pid for pid in pids if alive(pid)], [], "still running")
        self.assertNotIn(pod_ns, subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout)

    def test_z_cleanup_leaves_nothing(self):
        self.kube.ensure_namespace("t-z")
        self.create("t-z", _pod("left", ["sleep", "100"]))
        self.wait_phase("t-z", "left", "Running")
        self.assertTrue(netns.leftovers(self.prefix))
        self.__class__.stop.set()
        self.__class__.thread.join(timeout=scaled(STOP))
        self.kubelet.cleanup()
        self.assertEqual(netns.leftovers(self.prefix), [])
        links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
        self.assertNotIn(self.prefix, links)
        left = [p for p in self.mount_points() if os.path.exists(p)]
        self.assertEqual(left, [], "mount points made for the pods are removed")


class _FakeKube:
    """Answers GETs from objects ({path: object, or an exception to raise}) and TokenRequests."""

    def __init__(self):
        self.objects = {}
        self.token_code = 201

    def get(self, path):
        found = self.objects.get(path)
        if isinstance(found, Exception):
            raise found
        return found

    def request(self, method, path, body=None):
        if self.token_code != 201:
            return self.token_code, {"message": "the server is currently unable to handle the request"}
        return 201, {"status": {"token": "t0ken"}}


class VolumeFilesTest(unittest.TestCase):
    """podvolumes.PodVolumes on its own: a volume is complete or untouched, whatever the API
    server answers."""

    CM = "/api/v1/namespaces/ns/configmaps/"

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="volumes-test-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.kube = _FakeKube()
        self.kube.objects[self.CM + "kube-root-ca.crt"] = {"data": {"ca.crt": "CA-1"}}
        self.kube.objects[self.CM + "extra"] = {"data": {"x": "1"}}
        sources = [{"serviceAccountToken": {"path": "token"}},
                   {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                   {"configMap": {"name": "extra", "optional": True}},
                   {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]}}]
        pod = {"metadata": {"name": "p", "namespace": "ns", "uid": "u1"},
               "spec": {"volumes": [{"name": "kube-api-access-x", "projected": {"sources": sources}}]}}

        class Kubelet:
            kube = self.kube
            runtime = None

        class Runner:
            k, ns, name, uid, spec, dir = Kubelet, "ns", "p", "u1", pod["spec"], self.tmp
        Runner.pod = pod
        self.vols = podvolumes.PodVolumes(Runner)
        self.dir = os.path.join(self.tmp, "volumes", "kube-api-access-x")

    def files(self):
        out = {}
        for name in sorted(os.listdir(self.dir)):
            with open(os.path.join(self.dir, name)) as f:
                out[name] = f.read()
        return out

    def test_complete_volume(self):
        self.assertEqual(self.vols.prepare(), [])
        self.assertEqual(self.files(), {"ca.crt": "CA-1", "namespace": "ns", "token": "t0ken", "x": "1"})

    def test_an_unreadable_source_is_not_an_absent_one(self):
        for answer in (OSError("GET ...: timed out"), KubeError(500, {"message": "etcd timeout"})):
            self.kube.objects[self.CM + "extra"] = answer      # optional, and yet: no answer is no answer
            failed = self.vols.prepare()
            self.assertEqual(len(failed), 1)
            self.assertTrue(str(failed[0]).startswith(
                'MountVolume.SetUp failed for volume "kube-api-access-x" : failed to get configmap "extra": '),
                failed[0])
            self.assertFalse(os.path.exists(os.path.join(self.dir, "ca.crt")), "nothing half made")

    def test_a_missing_configmap_names_the_volume(self):
        del self.kube.objects[self.CM + "kube-root-ca.crt"]
        self.assertEqual([str(e) for e in self.vols.prepare()],
                         ['MountVolume.SetUp failed for volume "kube-api-access-x" : configmap "kube-root-ca.crt" '
                          'not found'])
        self.kube.objects[self.CM + "kube-root-ca.crt"] = {"data": {}}
        self.assertEqual([e.reason for e in self.vols.prepare()],
                         ["configmap references non-existent config key: ca.crt"])
        self.kube.objects[self.CM + "kube-root-ca.crt"] = {"data": {"ca.crt": "CA-1"}}
        self.kube.token_code = 503
        self.vols.tokens.clear()        # none asked yet
        self.assertEqual([e.reason for e in self.vols.prepare()],
                         ["failed to fetch token: HTTP 503: the server is currently unable to handle the request"])

    def test_a_refresh_that_cannot_read_keeps_every_file(self):
        self.assertEqual(self.vols.prepare(), [])
        before = self.files()
        for path, answer in ((self.CM + "kube-root-ca.crt", OSError("timed out")),
                             (self.CM + "kube-root-ca.crt", None),
                             (self.CM + "kube-root-ca.crt", {"data": {"other": "y"}}),
                             (self.CM + "extra", KubeError(429, {"message": "too many requests"}))):
            saved = self.kube.objects.get(path)
            self.kube.objects[path] = answer
            self.assertEqual(len(self.vols.refresh()), 1, answer)
            self.assertEqual(self.files(), before, "after %r" % (answer,))
            self.kube.objects[path] = saved
        # What a complete reading no longer has goes: an optional ConfigMap deleted.
        self.kube.objects[self.CM + "kube-root-ca.crt"] = {"data": {"ca.crt": "CA-2"}}
        self.kube.objects[self.CM + "extra"] = None
        self.assertEqual(self.vols.refresh(), [])
        self.assertEqual(self.files(), {"ca.crt": "CA-2", "namespace": "ns", "token": "t0ken"})
        self.assertEqual([n for n in os.listdir(self.dir) if n.endswith(".sim-tmp")], [])


class SweepTest(unittest.TestCase):
    @unittest.skipUnless(os.geteuid() == 0, "needs root")
    def test_sweep_removes_a_crashed_runs_leftovers(self):
        prefix = "s" + uuid.uuid4().hex[:5]
        net = netns.Network(prefix, netns.free_cidr())
        net.up()
        pod = net.add_pod()
        net.write_file(pod, "hosts", "127.0.0.1 localhost\n")
        proc = subprocess.Popen(["ip", "netns", "exec", pod.ns, "sleep", "100"], start_new_session=True)
        wait_for("the process in the namespace", lambda: netns.netns_pids(pod.ns), 30)
        self.assertTrue(netns.leftovers(prefix))
        removed = kubelet_mod.sweep(prefix)
        self.assertIn(pod.ns, removed)
        self.assertEqual(proc.wait(timeout=scaled(30)), -signal.SIGKILL)
        self.assertEqual(netns.leftovers(prefix), [])

    def test_expand(self):
        env = {"A": "1", "B": "two"}
        self.assertEqual(podenv.expand("$(A)-$(B)-$(C)-$$(A)", env), "1-two-$(C)-$(A)")

    def test_bad_prefix(self):
        with self.assertRaises(ValueError):
            netns.check_prefix("Bad-Prefix-Too-Long")


if __name__ == "__main__":
    unittest.main()
