"""The simulated kubelet's pods: one PodRunner per pod bound to the node, in a thread of its own,
from the sandbox to the end:

  - the sandbox: the volumes (podvolumes.py; the pod waits while a ConfigMap or Secret it needs is
    missing), then a network namespace with its own address on the nodes' bridge (netns.py), or,
    for a host-network pod, its node's namespace: the node's address is its podIP, the node's
    name its host name (UTS), and its ports are the node's, shared with the node's other
    host-network pods;
  - init containers one after the other, then the containers, each started from its image with
    runc (runtime.py) or, without images, as podinit.py in namespaces of its own running this
    machine's programs; restarts per restartPolicy with a back-off (containerstate.py); probes
    (probes.py); ConfigMap, Secret and projected volumes refreshed every VOLUME_REFRESH seconds;
  - the pod's status through /status: Pending (ContainerCreating) -> Running -> Succeeded or
    Failed, with the conditions, podIP, hostIP, startTime, qosClass and every containerStatus;
  - the end: kill and evict requests (test hooks), deletion (SIGTERM, SIGKILL after the grace
    period capped at GRACE_CAP, the terminal phase written), the network namespace removed.

Only the runner's thread touches its pod's processes; other threads only post requests.
"""

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time

import kubeletapi
import netns
import podenv
import probes
import runtime
from apitime import now_rfc3339
from containerstate import BACKOFF_CAP, BACKOFF_START, Container, ProbeSchedule
from kube import KubeError
from podvolumes import Missing, PodVolumes

log = logging.getLogger("kubelet")

GRACE_CAP = 5.0
MOUNT_RETRY_START = 0.5     # a volume that cannot be set up is tried again after this (seconds),
MOUNT_RETRY_CAP = 2.0       # doubling up to this
VOLUME_REFRESH = 1.0
TICK = 0.1
PODINIT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "podinit.py")


class PodRunner:
    """Runs one pod in its own thread; only that thread touches the pod's processes."""

    def __init__(self, kubelet, pod):
        self.k = kubelet
        self.pod = pod
        meta = pod["metadata"]
        self.ns = meta["namespace"]
        self.name = meta["name"]
        self.uid = meta["uid"]
        self.path = "/api/v1/namespaces/%s/pods/%s" % (self.ns, self.name)
        spec = pod.get("spec") or {}
        self.spec = spec
        self.policy = spec.get("restartPolicy") or "Always"
        self.node = spec.get("nodeName")
        self.host_network = bool(spec.get("hostNetwork"))
        # hostname: the pod's name in DNS (hosts files); uts_hostname: what its containers' host
        # name is, the node's for a host-network pod, as it shares the node's UTS namespace.
        self.hostname = spec.get("hostname") or self.name[:63]
        self.uts_hostname = self.node if self.host_network else self.hostname
        self.subdomain = spec.get("subdomain") or ""
        self.dir = os.path.join(kubelet.state_dir, "pods", self.uid)
        self.init_containers = [Container(c, init=True) for c in spec.get("initContainers") or []]
        self.containers = [Container(c) for c in spec.get("containers") or []]
        self.net = None
        self.start_time = None
        self.phase = "Pending"
        self.reason = None
        self.message = None
        self.conditions = {}
        self.last_status = None
        self.delete_req = None        # (grace seconds, api_gone)
        self.kill_req = False
        self.evict_req = None
        self.finished = threading.Event()
        self.volumes = PodVolumes(self)
        self.next_refresh = 0.0
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._run, name="pod-%s/%s" % (self.ns, self.name), daemon=True)

    # ---------------------------------------------------------------- requests (any thread)
    def request_delete(self, grace, api_gone):
        """False when the runner has already finished (it will not act on the request)."""
        with self.lock:
            if self.finished.is_set():
                return False
            if self.delete_req is None or api_gone:
                g = grace if self.delete_req is None else min(grace, self.delete_req[0])
                self.delete_req = (g, api_gone or (self.delete_req or (0, False))[1])
            return True

    def request_kill(self):
        self.kill_req = True

    def request_evict(self, message):
        self.evict_req = message or "The node was low on resource: memory. (simulated eviction)"

    def update(self, pod):
        self.pod = pod

    # ---------------------------------------------------------------- status
    def _cond(self, ctype, ok, reason=None):
        status = "True" if ok else "False"
        old = self.conditions.get(ctype)
        if old and old["status"] == status and old.get("reason") == reason:
            return
        c = {"type": ctype, "status": status, "lastProbeTime": None,
             "lastTransitionTime": now_rfc3339()}
        if reason:
            c["reason"] = reason
        self.conditions[ctype] = c

    def _status(self):
        initialized = all(c.done and c.exit_code == 0 for c in self.init_containers)
        ready = initialized and bool(self.containers) and all(c.ready for c in self.containers) \
            and self.phase == "Running"
        self._cond("PodReadyToStartContainers", self.net is not None and self.phase in ("Pending", "Running"))
        self._cond("Initialized", initialized, None if initialized else "ContainersNotInitialized")
        self._cond("Ready", ready, None if ready else ("PodCompleted" if self.phase in ("Succeeded", "Failed")
                                                       else "ContainersNotReady"))
        self._cond("ContainersReady", ready, None if ready else ("PodCompleted" if self.phase in ("Succeeded", "Failed")
                                                                 else "ContainersNotReady"))
        self._cond("PodScheduled", True)
        order = ["DisruptionTarget", "PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady",
                 "PodScheduled"]
        st = {"phase": self.phase,
              "conditions": [self.conditions[t] for t in order if t in self.conditions],
              "hostIP": self.k.node_ip(self.node), "hostIPs": [{"ip": self.k.node_ip(self.node)}],
              "containerStatuses": [c.status() for c in self.containers],
              "qosClass": self._qos()}
        if self.init_containers:
            st["initContainerStatuses"] = [c.status() for c in self.init_containers]
        if self.net is not None or self.pod_ip:
            st["podIP"] = self.pod_ip
            st["podIPs"] = [{"ip": self.pod_ip}]
        if self.start_time:
            st["startTime"] = self.start_time
        if self.reason:
            st["reason"] = self.reason
        if self.message:
            st["message"] = self.message
        return st

    pod_ip = None

    def _qos(self):
        """The pod's QoS class: the one the API server set at creation (a real kube-apiserver
        does, and refuses any other later: the field is immutable), else computed as it does,
        from the cpu and memory requests and limits alone (extended resources such as
        nvidia.com/gpu do not count)."""
        given = (self.pod.get("status") or {}).get("qosClass")
        if given:
            return given
        res = [c.get("resources") or {} for c in
               (self.spec.get("initContainers") or []) + (self.spec.get("containers") or [])]

        def pick(r, kind):
            return {k: v for k, v in (r.get(kind) or {}).items() if k in ("cpu", "memory") and str(v) not in ("0", "")}
        if not any(pick(r, "limits") or pick(r, "requests") for r in res):
            return "BestEffort"
        for r in res:
            limits = pick(r, "limits")
            requests = dict(limits, **pick(r, "requests"))   # requests default to the limits
            if set(limits) != {"cpu", "memory"} or requests != limits:
                return "Burstable"
        return "Guaranteed"

    def _publish(self):
        st = self._status()
        if st == self.last_status:
            return
        try:
            self.k.kube.patch_status(self.path, {"status": st})
            self.last_status = st
        except KubeError as e:
            if e.code == 404:
                self.last_status = st
                return
            log.warning("%s/%s: status: %s", self.ns, self.name, e)
        except OSError as e:
            log.warning("%s/%s: status: %s", self.ns, self.name, e)

    # ---------------------------------------------------------------- processes
    def _start_from_image(self, c):
        """Images mode: the container from its image with runc, in the pod's network namespace."""
        spec = podenv.process_spec(self, c)
        sc = podenv.security_context(self.spec, c.spec)
        os.makedirs(self.dir, exist_ok=True)
        hostname_file = os.path.join(self.dir, "hostname")
        with open(hostname_file, "w") as f:
            f.write(self.uts_hostname + "\n")
        etc = os.path.join(netns.NETNS_ETC, self.net.ns)
        cs = runtime.ContainerSpec(
            command=spec["command"], args=spec["args"], env=spec["env"],
            working_dir=spec["workingDir"], run_as_user=sc.get("runAsUser"),
            run_as_group=sc.get("runAsGroup"), groups=spec["groups"] or [],
            security_context=sc, mounts=self.volumes.mounts(c), hostname=self.uts_hostname,
            netns_path=os.path.join("/var/run/netns", self.net.ns),
            etc_files={"/etc/hosts": os.path.join(etc, "hosts"),
                       "/etc/resolv.conf": os.path.join(etc, "resolv.conf"),
                       "/etc/hostname": hostname_file})
        c.serial += 1
        c.runc_id = "%s-%s-%s-%s-%d" % (self.k.prefix, self.name[:40], self.uid[:8], c.name, c.serial)
        c.ctr = self.k.runtime.create(c.runc_id, c.image, cs,
                                      os.path.join(self.k.containers_dir, c.runc_id))
        logp = self.k.log_path(self.ns, self.name, c.name)
        kubeletapi.add_run(logp)    # where this run's output begins: the log's "current" and "previous"
        c.proc = c.ctr.start(logp)

    def _start(self, c):
        if self.k.runtime:
            self._start_from_image(c)
            self._started(c)
            return
        spec = podenv.process_spec(self, c)
        spec["mounts"] = self.volumes.mounts(c)
        if self.k.image_overlays:
            spec["overlays"] = self.k.image_overlays
        os.makedirs(self.dir, exist_ok=True)
        spec_path = os.path.join(self.dir, "%s%s.json" % ("init-" if c.init else "", c.name))
        with open(spec_path, "w") as f:
            json.dump(spec, f)
        logp = self.k.log_path(self.ns, self.name, c.name)
        kubeletapi.add_run(logp)    # where this run's output begins: the log's "current" and "previous"
        logf = open(logp, "ab")
        cmd = ["ip", "netns", "exec", self.net.ns,
               "unshare", "--fork", "--pid", "--mount-proc", "--mount", "--uts", "--propagation", "private",
               "--kill-child=SIGKILL", "--", sys.executable, PODINIT, spec_path]
        try:
            c.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=logf, stderr=logf,
                                      start_new_session=True, env={"PATH": podenv.DEFAULT_PATH, "LANG": "C.UTF-8"})
        finally:
            logf.close()
        self._started(c)

    def _started(self, c):
        c.state = "running"
        c.waiting_message = None
        c.kill_at = 0.0
        c.started_at = now_rfc3339()
        c.ready = False
        c.probe_ok = c.probe_fail = 0
        c.started = c.init or not c.spec.get("startupProbe")
        c.startup, c.live = ProbeSchedule(), ProbeSchedule()
        probe = c.spec.get("readinessProbe")
        c.probe_next = time.monotonic() + (probe.get("initialDelaySeconds", 0) if probe else 0)
        if not probe and not c.init and c.started:
            c.ready = True

    def main_pid(self, c):
        """The host pid of the container's PID 1 (podinit), or None."""
        if c.proc is None:
            return None
        if c.ctr is not None:
            return c.ctr.pid()
        try:
            with open("/proc/%d/task/%d/children" % (c.proc.pid, c.proc.pid)) as f:
                kids = f.read().split()
            return int(kids[0]) if kids else None
        except OSError:
            return None

    def _signal(self, c, sig):
        """Signals a running container; with SIGKILL, returns once it ended. False (and an error
        in the log naming the container) when that could not be done: the container still
        runs."""
        if c.proc is None or c.proc.poll() is not None:
            return True
        if c.ctr is not None:
            try:
                problems = c.ctr.signal(sig)
            except runtime.KillError as e:
                log.error("%s/%s: container %s: %s", self.ns, self.name, c.name, e)
                self.k.events[self.node].record(self.pod, "Warning", "FailedKillPod",
                                                'error killing pod: [failed to "KillContainer" for "%s" with '
                                                'KillContainerError: "%s"]' % (c.name, e))
                return False
            if problems:
                log.warning("%s/%s: container %s killed, the hard way: %s", self.ns, self.name, c.name,
                            "; ".join(problems))
            return True
        pid = c.proc.pid if sig == signal.SIGKILL else self.main_pid(c)
        try:
            os.kill(pid if pid else c.proc.pid, signal.SIGKILL if pid is None else sig)
        except ProcessLookupError:
            pass
        if sig == signal.SIGKILL:
            try:
                c.proc.wait(timeout=runtime.KILL_WAIT)
            except subprocess.TimeoutExpired:
                log.error("%s/%s: container %s: its process %d still runs %.0f s after SIGKILL",
                          self.ns, self.name, c.name, c.proc.pid, runtime.KILL_WAIT)
                return False
        return True

    def _reap(self, c):
        """Records the exit of a running container; True if it ended."""
        if c.state != "running" or c.proc is None:
            return False
        rc = c.proc.poll()
        if rc is None:
            return False
        code = rc if rc >= 0 else 128 - rc
        if c.ctr is not None:
            try:
                c.ctr.remove()
            except runtime.KillError as e:
                log.error("%s/%s: container %s: %s", self.ns, self.name, c.name, e)
            c.ctr = None
        c.exit_code = code
        c.reason = "Completed" if code == 0 else "Error"
        c.message = self._termination_message(c)
        c.finished_at = now_rfc3339()
        c.state = "terminated"
        c.ready = False
        c.proc = None
        return True

    def _termination_message(self, c):
        """terminationMessagePolicy FallbackToLogsOnError: after a failure, the end of the
        container's log, as the kubelet takes it (the last 80 lines, at most 2048 bytes). The
        terminationMessagePath file is not read: containers share this machine's /dev."""
        if c.exit_code == 0 or c.spec.get("terminationMessagePolicy") != "FallbackToLogsOnError":
            return None
        try:
            with open(self.k.log_path(self.ns, self.name, c.name), "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - 2048))
                tail = f.read()
        except OSError:
            return None
        text = tail.decode("utf-8", errors="replace")
        lines = text.split("\n")
        if len(tail) == 2048 and len(lines) > 1:
            lines = lines[1:]          # the first line was cut
        return "\n".join(lines[-81:]).strip("\n") or None

    def _after_exit(self, c, can_restart):
        restart = can_restart and (self.policy == "Always" and not c.init
                                   or self.policy in ("Always", "OnFailure") and c.exit_code != 0)
        if not restart:
            c.done = True
            return
        c.last_terminated = c.terminated_state()
        c.restart_count += 1
        c.state = "waiting"
        c.waiting_reason = "CrashLoopBackOff"
        c.next_start = time.monotonic() + c.backoff
        c.backoff = min(c.backoff * 2, BACKOFF_CAP)

    def _liveness(self, c):
        """startupProbe and livenessProbe: after failureThreshold failures in a row the container
        is stopped as a kubelet stops it (SIGTERM, SIGKILL after the grace period, capped) and
        restarts as its restartPolicy says."""
        if c.kill_at and time.monotonic() >= c.kill_at and c.state == "running":
            c.kill_at = 0.0
            self._signal(c, signal.SIGKILL)
            return
        failed = "startupProbe" if probes.startup_failed(self, c) else \
            "livenessProbe" if probes.liveness_failed(self, c) else None
        if failed:
            log.info("%s/%s: container %s failed its %s %s times: restarting it", self.ns, self.name, c.name,
                     failed, c.spec[failed].get("failureThreshold", 3))
            self._signal(c, signal.SIGTERM)
            grace = self.spec.get("terminationGracePeriodSeconds", 30)
            c.kill_at = time.monotonic() + min(float(grace if grace is not None else 30), GRACE_CAP)

    # ---------------------------------------------------------------- lifecycle
    def _run(self):
        try:
            self._lifecycle()
        except Exception:
            log.exception("%s/%s: pod runner failed", self.ns, self.name)
            for c in self.init_containers + self.containers:
                self._signal(c, signal.SIGKILL)
        finally:
            self._teardown()
            with self.lock:      # a delete request lands before this (and is acted on) or is refused
                self.finished.set()
                req = self.delete_req
            self.k.pod_finished(self, req)

    @staticmethod
    def _field_path(c):
        return "spec.%s{%s}" % ("initContainers" if c.init else "containers", c.name)

    def _wait_or_delete(self, seconds):
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if self.delete_req or self.k.stopping.is_set():
                return False
            time.sleep(TICK)
        return True

    def _lifecycle(self):
        self.start_time = now_rfc3339()
        # The sandbox: every volume complete, then the network. While a volume cannot be set up
        # (a ConfigMap, Secret or token missing or unreadable) the pod waits as a kubelet leaves
        # it: Pending, its containers waiting in ContainerCreating, a FailedMount event per try.
        retry = MOUNT_RETRY_START
        while True:
            if self.delete_req or self.k.stopping.is_set():
                return self._terminate()
            try:
                failed = self.volumes.prepare()
            except ValueError as e:
                self.phase, self.reason, self.message = "Failed", "UnsupportedPod", str(e)
                self._publish()
                return
            if not failed:
                break
            for e in failed:
                self.k.events[self.node].record(self.pod, "Warning", "FailedMount", str(e))
            self._publish()
            if not self._wait_or_delete(retry):
                return self._terminate()
            retry = min(retry * 2, MOUNT_RETRY_CAP)
        if self.host_network:
            net = self.k.net.add_host_pod(self.k.node_nets[self.node])
        else:
            net = self.k.net.add_pod()
        with self.k._lock:
            self.pod_ip = net.ip
            self.net = net
        self.k.pod_network_changed(self)
        self._publish()

        # Init containers, one after the other.
        for c in self.init_containers:
            while not c.done:
                if self.delete_req or self.k.stopping.is_set():
                    return self._terminate()
                if self.kill_req or self.evict_req:
                    self.kill_req = False
                    self._signal(c, signal.SIGKILL)
                if c.state == "waiting" and time.monotonic() >= c.next_start:
                    if self._try_start(c) is False:
                        return
                    self._publish()
                if self._reap(c):
                    self._after_exit(c, not self.evict_req)
                    if c.done and c.exit_code != 0:
                        self.phase = "Failed"
                        for m in self.containers:
                            m.waiting_reason = "PodInitializing"
                        self._collect_earlier_runs()
                        self._publish()
                        return
                    self._publish()
                if self.evict_req and c.done:
                    break
                time.sleep(TICK)
            if self.evict_req:
                return self._evicted()

        for c in self.containers:
            c.waiting_reason = "ContainerCreating"
        while True:
            if self.delete_req or self.k.stopping.is_set():
                return self._terminate()
            if self.evict_req:
                return self._evicted()
            if self.kill_req:
                self.kill_req = False
                for c in self.containers:
                    # The kill is seen as the container's own end; one that could not be killed
                    # runs on, and the log says so.
                    self._signal(c, signal.SIGKILL)
            for c in self.containers:
                if c.state == "waiting" and not c.done and time.monotonic() >= c.next_start:
                    if self._try_start(c) is False:
                        return
            for c in self.containers:
                if self._reap(c):
                    self._after_exit(c, True)
                probes.readiness(self, c)
                self._liveness(c)
            if all(c.done for c in self.containers):
                failed = any(c.exit_code != 0 for c in self.containers)
                self.phase = "Failed" if failed else "Succeeded"
                self._collect_earlier_runs()
                self._publish()
                return
            # Pending until a container has started (one waiting on its image keeps it so).
            if any(c.state != "waiting" or c.restart_count > 0 for c in self.containers):
                self.phase = "Running"
            if time.monotonic() >= self.next_refresh:
                self.next_refresh = time.monotonic() + VOLUME_REFRESH
                self.volumes.refresh()
            self._publish()
            time.sleep(TICK)

    def _pull(self, c):
        """Images mode: the container's image, or False after recording the pull failure as a
        kubelet does (ErrImagePull, then ImagePullBackOff while it waits to try again)."""
        if c.image is not None:
            return True
        try:
            ref = c.spec.get("image") or ""
            c.image = self.k.store.pull(ref, c.spec.get("imagePullPolicy") or runtime.default_pull_policy(ref))
            c.pull_failures = 0
            c.waiting_reason, c.waiting_message = "ContainerCreating", None
            return True
        except runtime.PullError as e:
            c.pull_failures += 1
            c.waiting_reason = "ErrImageNeverPull" if e.never else "ErrImagePull"
            c.waiting_message = str(e)
            self._publish()
            # The back-off a kubelet uses for pulls: 10 s doubling; shortened here as restarts are.
            wait = min(BACKOFF_START * 2 ** c.pull_failures, BACKOFF_CAP * 2)
            if self._wait_or_delete(min(wait, 1.0)):
                c.waiting_reason = "ImagePullBackOff"
                c.waiting_message = 'Back-off pulling image "%s"' % c.spec.get("image", "")
                self._publish()
            c.next_start = time.monotonic() + max(0.0, wait - 1.0)
            return False

    def _try_start(self, c):
        if self.k.runtime and not self._pull(c):
            return None
        try:
            self._start(c)
            return True
        except (runtime.ConfigError, Missing) as e:
            # What the container reads (a ConfigMap, Secret or key) is missing or unreadable, or
            # its spec cannot hold for its image: waits, as a kubelet does, and tries again.
            c.waiting_reason = "CreateContainerConfigError"
            c.waiting_message = str(e) if isinstance(e, Missing) else \
                "%s (pod: \"%s_%s(%s)\", container: %s)" % (e, self.name, self.ns, self.uid, c.name)
            self.k.events[self.node].record(self.pod, "Warning", "Failed", "Error: " + c.waiting_message,
                                            field_path=self._field_path(c))
            c.next_start = time.monotonic() + 1.0
            self._publish()
            return None
        except (ValueError, OSError, runtime.CreateError) as e:
            c.state = "terminated"
            c.exit_code, c.reason, c.finished_at = 128, "StartError", now_rfc3339()
            c.started_at = c.started_at or c.finished_at
            self.message = "container %s: %s" % (c.name, e)
            self._after_exit(c, True)
            self._publish()
            return None

    def _collect_earlier_runs(self):
        """A pod that ended by itself: a real kubelet removes its containers' earlier runs (the
        status loses lastState, and `kubectl logs --previous` is refused), keeping the last one's
        log. A pod ended by its deletion keeps them, as there."""
        for c in self.init_containers + self.containers:
            kubeletapi.keep_last_run(self.k.log_path(self.ns, self.name, c.name))

    def _kill_all(self, grace):
        conts = self.init_containers + self.containers
        for c in conts:
            self._signal(c, signal.SIGTERM)
        end = time.monotonic() + grace
        while time.monotonic() < end and any(c.proc is not None and c.proc.poll() is None for c in conts):
            time.sleep(0.05)
        for c in conts:
            self._signal(c, signal.SIGKILL)
            self._reap(c)

    def _evicted(self):
        self._kill_all(0)
        for c in self.containers + self.init_containers:
            c.done = True
            if c.state == "waiting":
                c.state, c.exit_code, c.reason = "terminated", 137, "ContainerStatusUnknown"
                c.started_at = c.finished_at = now_rfc3339()
        self.phase, self.reason, self.message = "Failed", "Evicted", self.evict_req
        self._cond("DisruptionTarget", True, "TerminationByKubelet")
        self.conditions["DisruptionTarget"]["message"] = self.evict_req
        self._publish()

    def _terminate(self):
        grace, api_gone = self.delete_req or (0, True)
        if self.k.stopping.is_set():
            grace = 0
        self._kill_all(grace)
        if api_gone or self.k.stopping.is_set():
            return
        # As a kubelet does (1.27 on): a deleted pod's last status is a terminal phase, Succeeded
        # when every container ended with 0, else Failed; then it is deleted for good.
        for c in self.init_containers + self.containers:
            c.done = True
        ok = bool(self.containers) and all(c.state == "terminated" and c.exit_code == 0 for c in self.containers)
        self.phase = "Succeeded" if ok else "Failed"
        self._publish()

    def _teardown(self):
        with self.k._lock:   # hosts files are written from other runners' threads under this lock
            net, self.net = self.net, None
        if net is not None:
            self.k.pod_network_changed(self)
            self.k.net.remove_pod(net)
