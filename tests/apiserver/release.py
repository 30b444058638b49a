"""The Kubernetes release the double answers as (docs/internals/kubernetes-versions.md).

1.32.13 by default, the oldest release the operator supports; 1.36.3 with `apiserver.py
--kubernetes 1.36` (launch.py passes $MPIJOB_DOUBLE_KUBERNETES). What 1.36 answers differently is
modelled as far as the exchanges recorded from a real 1.36.3 show it (tests/apiserver/recordings-1.36,
which the replay test checks the double against in this mode):

- pods carry metadata.generation (1 at creation, one more for each spec change and at a graceful
  deletion), as the Pod generation feature (KEP-5067) makes them;
- a time that is not set is left out of an object, where 1.32 wrote it as null: the
  creationTimestamp of pod templates (Jobs, Deployments, ReplicaSets) and of watch bookmarks;
- a number where a custom resource's schema wants an integer is refused with a second cause, the
  format check's ('Checked value must be of type integer (default format)');
- /version also names the emulated and the minimum compatible version (compatibility versions);
- every page of a list, not only the first, hands out a continue token whose key starts with "/"
  (pages come from the watch cache's snapshot, which keys objects so).
"""

RELEASES = {
    "1.32": {"major": "1", "minor": "32", "gitVersion": "v1.32.13", "gitCommit": "0" * 40,
             "gitTreeState": "clean", "buildDate": "2025-01-01T00:00:00Z",
             "goVersion": "go1.23.5", "compiler": "gc", "platform": "linux/amd64"},
    "1.36": {"major": "1", "minor": "36", "emulationMajor": "1", "emulationMinor": "36",
             "minCompatibilityMajor": "1", "minCompatibilityMinor": "35", "gitVersion": "v1.36.3",
             "gitCommit": "0" * 40, "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z",
             "goVersion": "go1.26.0", "compiler": "gc", "platform": "linux/amd64"},
}
DEFAULT = "1.32"
_current = DEFAULT


def select(name):
    """Answers as release name ("1.32" or "1.36"); ValueError for another."""
    global _current
    if name not in RELEASES:
        raise ValueError("the double answers as Kubernetes %s, not %s" % (" or ".join(sorted(RELEASES)), name))
    _current = name


def name():
    return _current


def version():
    """What /version answers."""
    return dict(RELEASES[_current])


def _minor():
    return int(RELEASES[_current]["minor"])


def pods_have_generation():
    return _minor() >= 36


def unset_times_written():
    """Whether an unset metav1.Time is written as null (1.32) rather than left out (1.36)."""
    return _minor() < 36


def integer_format_cause():
    return _minor() >= 36


def continue_keys_rooted():
    """Whether every continue token's start key keeps its leading "/" (1.32: the first page's)."""
    return _minor() >= 36


def drop_unset_times(obj):
    """obj without its null creationTimestamps where this release leaves unset times out."""
    if unset_times_written():
        return obj
    if isinstance(obj, dict):
        return {k: drop_unset_times(v) for k, v in obj.items() if not (k == "creationTimestamp" and v is None)}
    if isinstance(obj, list):
        return [drop_unset_times(v) for v in obj]
    return obj
