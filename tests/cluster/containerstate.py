"""The simulated kubelet's record of one container of a pod: its state (waiting with a reason,
running, terminated with exit code and reason), restarts and their back-off, probe counters, its
process, and the containerStatus the pod's status reports for it.

A restart waits BACKOFF_START seconds, doubling up to BACKOFF_CAP (a kubelet's 10 s to 5 min,
shortened).
"""

BACKOFF_START = 0.5
BACKOFF_CAP = 5.0


class ProbeSchedule:
    """When a probe that can restart the container runs next (0: not yet), and its failures in a
    row (probes.py)."""

    def __init__(self):
        self.next = 0.0
        self.fails = 0


class Container:
    """One container of a pod (spec: its entry in the pod's containers or initContainers)."""

    def __init__(self, spec, init=False):
        self.spec = spec
        self.name = spec.get("name", "")
        self.init = init
        self.proc = None
        self.state = "waiting"
        self.waiting_reason = "ContainerCreating"
        self.started_at = None
        self.finished_at = None
        self.exit_code = None
        self.message = None    # the termination message of the last exit
        self.reason = None
        self.restart_count = 0
        self.last_terminated = None
        self.ready = False
        self.next_start = 0.0
        self.backoff = BACKOFF_START
        self.probe_next = 0.0
        self.probe_ok = 0
        self.probe_fail = 0
        self.done = False      # will not run again
        self.waiting_message = None
        self.started = False   # running, and its startupProbe (if any) has succeeded
        self.startup = ProbeSchedule()  # startupProbe
        self.live = ProbeSchedule()     # livenessProbe
        self.kill_at = 0.0     # SIGKILL then, after a liveness failure's SIGTERM
        self.image = None      # runtime.Image, once pulled (images mode)
        self.ctr = None        # runtime.Container while it exists (images mode)
        self.pull_failures = 0
        self.serial = 0        # containers made for this spec, for unique runc ids
        self.runc_id = None

    def terminated_state(self):
        st = {"exitCode": self.exit_code, "reason": self.reason, "startedAt": self.started_at,
              "finishedAt": self.finished_at, "containerID": self.container_id()}
        if self.message:
            st["message"] = self.message
        return st

    def container_id(self):
        if self.runc_id is not None:
            return "runc://%s" % self.runc_id
        return "sim://%s-%d" % (self.name, self.restart_count)

    def status(self):
        st = {"name": self.name,
              "image": self.image.normalized if self.image is not None else self.spec.get("image", ""),
              "imageID": self.image.image_id if self.image is not None else "",
              "containerID": self.container_id(), "ready": self.ready,
              "restartCount": self.restart_count, "started": self.state == "running" and self.started,
              "lastState": {"terminated": self.last_terminated} if self.last_terminated else {}}
        if self.state == "running":
            st["state"] = {"running": {"startedAt": self.started_at}}
        elif self.state == "terminated":
            st["state"] = {"terminated": self.terminated_state()}
        else:
            st["state"] = {"waiting": {"reason": self.waiting_reason}}
            if self.waiting_message:
                st["state"]["waiting"]["message"] = self.waiting_message
            if self.restart_count == 0 and self.waiting_reason != "CrashLoopBackOff":
                st["containerID"] = ""
        return st
