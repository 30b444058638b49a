"""The simulated kubelet's probes: startupProbe, readinessProbe and livenessProbe by tcpSocket,
exec (`runc exec` from an image, nsenter into the container's namespaces otherwise) and httpGet;
grpc probes always fail. As a kubelet runs them: after initialDelaySeconds, every periodSeconds;
readiness and liveness only once the startup probe has succeeded (c.started), and a startup probe
that fails failureThreshold times in a row restarts the container as a liveness failure does.
Readiness alone runs at least every PROBE_PERIOD_CAP seconds, so that tests need not wait for a
pod to turn Ready; the probes that restart containers keep the pod's own timing, which is what a
slow start under load is measured against.

    probes.readiness(runner, c)         # updates c.ready
    if probes.startup_failed(runner, c) or probes.liveness_failed(runner, c):
        ...                             # the runner stops the container
"""

import socket
import subprocess
import time
import urllib.error
import urllib.request

import podenv
from podvolumes import Missing

PROBE_PERIOD_CAP = 1.0


def port_number(pod_spec, port):
    """A probe's port: a number, or the name of a container port of the pod."""
    if isinstance(port, int) or (isinstance(port, str) and port.isdigit()):
        return int(port)
    for c in pod_spec.get("containers") or []:
        for p in c.get("ports") or []:
            if p.get("name") == port:
                return int(p["containerPort"])
    raise ValueError("named port %s not found" % port)


def probe_once(runner, c, probe):
    """True when the probe succeeds now against container c of runner's pod."""
    timeout = float(probe.get("timeoutSeconds", 1))
    try:
        if "tcpSocket" in probe:
            port = port_number(runner.spec, probe["tcpSocket"]["port"])
            with socket.create_connection((runner.pod_ip, port), timeout=timeout):
                return True
        if "exec" in probe and c.ctr is not None:
            return c.ctr.exec(probe["exec"].get("command") or [], max(timeout, 1.0)) == 0
        if "exec" in probe:
            pid = runner.main_pid(c)
            if pid is None:
                return False
            env = podenv.process_spec(runner, c)["env"]
            p = subprocess.run(["nsenter", "-t", str(pid), "-m", "-u", "-n", "-p", "--"]
                               + list(probe["exec"].get("command") or []),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                               timeout=max(timeout, 1.0))
            return p.returncode == 0
        if "httpGet" in probe:
            hg = probe["httpGet"]
            url = "http://%s:%d%s" % (runner.pod_ip, port_number(runner.spec, hg.get("port")), hg.get("path", "/"))
            try:
                with urllib.request.urlopen(url, timeout=timeout) as r:
                    return 200 <= r.status < 400
            except urllib.error.HTTPError as e:
                return 200 <= e.code < 400
        if "grpc" in probe:
            return False
    except (OSError, subprocess.TimeoutExpired, ValueError, Missing):
        return False
    return True


def _period(probe):
    return float(probe.get("periodSeconds", 10))


def readiness(runner, c):
    """readinessProbe: c.ready after successThreshold successes, not after failureThreshold
    failures."""
    probe = c.spec.get("readinessProbe")
    if not probe or c.state != "running" or not c.started or time.monotonic() < c.probe_next:
        return
    c.probe_next = time.monotonic() + min(_period(probe), PROBE_PERIOD_CAP)
    if probe_once(runner, c, probe):
        c.probe_ok += 1
        c.probe_fail = 0
        if c.probe_ok >= int(probe.get("successThreshold", 1)):
            c.ready = True
    else:
        c.probe_fail += 1
        c.probe_ok = 0
        if c.probe_fail >= int(probe.get("failureThreshold", 3)):
            c.ready = False


def _run_if_due(runner, c, probe, schedule):
    """None while the probe is not due; else its result, counted in schedule
    (containerstate.ProbeSchedule)."""
    now = time.monotonic()
    if schedule.next == 0.0:
        schedule.next = now + float(probe.get("initialDelaySeconds", 0))
    if now < schedule.next:
        return None
    schedule.next = now + _period(probe)
    ok = probe_once(runner, c, probe)
    schedule.fails = 0 if ok else schedule.fails + 1
    return ok


def _threshold_reached(probe, schedule):
    """failureThreshold failures in a row: True, and the count starts again."""
    if schedule.fails < int(probe.get("failureThreshold", 3)):
        return False
    schedule.fails = 0
    return True


def startup_failed(runner, c):
    """startupProbe: sets c.started at its first success (then readiness and liveness begin);
    True once it failed failureThreshold times in a row, and the runner restarts the container."""
    probe = c.spec.get("startupProbe")
    if c.started or not probe or c.state != "running" or c.proc is None:
        return False
    ok = _run_if_due(runner, c, probe, c.startup)
    if ok:
        c.started = True
        c.ready = c.ready or not c.spec.get("readinessProbe")
    return ok is False and _threshold_reached(probe, c.startup)


def liveness_failed(runner, c):
    """livenessProbe: True once it failed failureThreshold times in a row (the count starts
    again); the runner then stops the container as a kubelet does."""
    probe = c.spec.get("livenessProbe")
    if not probe or c.state != "running" or not c.started or c.proc is None:
        return False
    return _run_if_due(runner, c, probe, c.live) is False and _threshold_reached(probe, c.live)
