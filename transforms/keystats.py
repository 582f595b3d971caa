"""Per-key CPU and state telemetry of the clustering stages, for ``make bench-beam`` only.

Off unless the environment variable ``DPSTREAM_KEY_STATS`` names a directory: then every
stage's DoFn measures, per key, the thread CPU time of its ``process``/``on_timer`` calls
and the largest state it kept (floats, and raw points buffered), and appends one JSON line
per (stage, key) to ``<dir>/keystats-<pid>-<id>.jsonl`` when its bundle finishes. Exact
sizes are operator telemetry (like Beam Metrics): they never enter a release.
"""
from __future__ import annotations

import json
import os
import threading
import time
from collections import defaultdict

ENV = "DPSTREAM_KEY_STATS"


class KeyStats:
    def __init__(self, stage: str):
        self.stage = stage
        self.dir = os.environ.get(ENV) or None
        self._cpu = defaultdict(float)
        self._calls = defaultdict(int)
        self._floats = defaultdict(int)
        self._points = defaultdict(int)

    @property
    def on(self) -> bool:
        return self.dir is not None

    def start(self) -> float:
        return time.thread_time() if self.dir else 0.0

    def note(self, key, floats: int = None, points: int = None) -> None:
        """Name the key the running call works for (and its state size); :meth:`close` times it."""
        if not self.dir:
            return
        self._key = repr(key)
        k = self._key
        if floats is not None:
            self._floats[k] = max(self._floats[k], int(floats))
        if points is not None:
            self._points[k] = max(self._points[k], int(points))

    def close(self, t0: float) -> None:
        if not self.dir:
            return
        k = getattr(self, "_key", None) or "?"
        self._cpu[k] += time.thread_time() - t0
        self._calls[k] += 1
        self._key = None

    def flush(self) -> None:
        if not self.dir or not self._cpu:
            return
        path = os.path.join(self.dir, f"keystats-{os.getpid()}-{threading.get_ident()}-{id(self)}.jsonl")
        with open(path, "a", encoding="utf-8") as fh:
            for k in self._cpu:
                fh.write(json.dumps({"stage": self.stage, "key": k, "cpu": self._cpu[k], "calls": self._calls[k],
                                     "state_floats": self._floats.get(k, 0),
                                     "points": self._points.get(k, 0)}) + "\n")
        self._cpu.clear()
        self._calls.clear()
        self._floats.clear()
        self._points.clear()
