"""Throughput: time spent inside ``fit`` / ``partial_fit`` only (the benchmark's own cost evaluations and
state measurements excluded), on two clocks: wall and process CPU time (single-threaded: the rate on one
core, less disturbed by other jobs; the throughput targets are judged on it)."""
from __future__ import annotations

import time


class FitClock:
    def __init__(self):
        self.wall = 0.0
        self.cpu = 0.0

    def __enter__(self):
        self._w, self._c = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc):
        self.wall += time.perf_counter() - self._w
        self.cpu += time.process_time() - self._c
        return False

    def as_dict(self) -> dict:
        return dict(fit_time=self.wall, cpu_time=self.cpu)


def rate(n: int, seconds):
    return (n / seconds) if seconds else None
