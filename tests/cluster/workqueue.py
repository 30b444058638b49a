"""The loop the simulation's level-triggered controllers share (jobcontroller.py,
deployments.py): a queue of keys, each in it at most once, drained by one worker once the
informers' caches are synced, and a full pass every RESYNC_SECONDS.

    q = WorkQueue()
    q.add(key)                                          # from informer handlers, any thread
    q.run(stop_event, informers, sync, resync)          # the worker: sync(key) for each key,
                                                        # resync() on every full pass
"""

import threading
import time

RESYNC_SECONDS = 1.0


class WorkQueue:
    def __init__(self):
        self.cond = threading.Condition()
        self.keys = []
        self.queued = set()

    def add(self, key):
        """Queues key unless it is queued already."""
        with self.cond:
            if key not in self.queued:
                self.queued.add(key)
                self.keys.append(key)
                self.cond.notify()

    def _take(self, wait):
        with self.cond:
            if not self.keys:
                self.cond.wait(max(0.0, wait))
            if not self.keys:
                return None
            key = self.keys.pop(0)
            self.queued.discard(key)
            return key

    def run(self, stop_event, informers, sync, resync, period=RESYNC_SECONDS):
        """Starts the informers, waits for their caches, then calls sync(key) for every key
        queued and resync() every `period` seconds (first at once), until stop_event is set."""
        for inf in informers:
            inf.start(stop_event)
        while not stop_event.is_set() and not all(inf.synced.is_set() for inf in informers):
            stop_event.wait(0.05)
        next_resync = 0.0
        while not stop_event.is_set():
            key = self._take(min(0.2, next_resync - time.monotonic()))
            if key is not None:
                sync(key)
            if time.monotonic() >= next_resync:
                next_resync = time.monotonic() + period
                resync()
