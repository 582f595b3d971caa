"""A progress line for long runs: ticks released / T, points per second, ETA.

``ReleaseProgress`` is a side branch on the releases (it reads them and emits
nothing), so it cannot change what is released. It logs on the ``dpstream``
logger at most every :data:`PROGRESS_SECONDS` seconds (environment variable
``DPSTREAM_PROGRESS_SECONDS``), and once more at the last tick::

    dpstream: progress: tick 120/200 released (60%), ~39,800 points/s (DP count estimate), ETA 14 s

The rate uses the releases' own DP count estimates (public values; with several runs,
the sum of each run's latest estimate, since a run's estimate counts that run only), so
the line holds nothing a release does not. In batch the engine processes the ticks after the
whole input is read, so the first line appears once reading and parsing are done.
"""
from __future__ import annotations

import logging
import os
import time

import apache_beam as beam

_log = logging.getLogger("dpstream")


def progress_seconds() -> float:
    try:
        return float(os.environ.get("DPSTREAM_PROGRESS_SECONDS", "5"))
    except ValueError:
        return 5.0


def _duration(s: float) -> str:
    s = int(round(s))
    if s < 90:
        return f"{s} s"
    if s < 5400:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


class ReleaseProgress(beam.DoFn):
    """Logs ``tick i/T released``, the rate and the ETA, rate-limited; outputs nothing."""

    def __init__(self, horizon_ticks: int, launched: float, every_seconds: float):
        self.horizon_ticks = None if horizon_ticks is None else int(horizon_ticks)  # None: unbounded runs
        self.launched = float(launched)
        self.every_seconds = float(every_seconds)

    def setup(self):
        self._done, self._first, self._last_log, self._max_tick = 0, None, 0.0, 0
        self._run_counts = {}  # run -> (tick, DP count estimate) of its latest release seen

    def process(self, rel):
        now = time.time()
        self._done += 1
        tick = int(rel.get("global_tick", rel.get("tick", 0)))  # runs: the stream clock's tick
        self._max_tick = max(self._max_tick, tick)
        est = rel.get("count_estimate")
        if isinstance(est, (int, float)):
            run = int(rel.get("run", 0))
            if tick >= self._run_counts.get(run, (-1, 0.0))[0]:
                self._run_counts[run] = (tick, max(float(est), 0.0))
        if self._first is None:
            self._first = now
        T = self.horizon_ticks
        final = T is not None and self._max_tick >= T
        if not final and now - self._last_log < self.every_seconds:
            return
        self._last_log = now
        if T is None:  # unbounded runs: no end to count down to
            _log.info(f"dpstream: progress: tick {self._max_tick} released (run {rel.get('run', 0)}, tick "
                      f"{rel.get('tick', self._max_tick)} of it)")
            return
        parts = [f"dpstream: progress: tick {self._max_tick}/{T} released ({100 * self._max_tick // T}%)"]
        elapsed = now - self.launched
        est = sum(c for _, c in self._run_counts.values())
        if elapsed > 0 and est > 0:
            parts.append(f"~{est / elapsed:,.0f} points/s (DP count estimate)")
        if final:
            parts.append(f"done in {_duration(elapsed)}")
        elif self._done > 1 and now > self._first:
            per_tick = (now - self._first) / (self._done - 1)
            parts.append(f"ETA {_duration(per_tick * (T - self._max_tick))}")
        _log.info(", ".join(parts))
        return
        yield  # a generator that emits nothing


class LogProgress(beam.PTransform):
    """Releases → nothing; logs progress (module docstring)."""

    def __init__(self, horizon_ticks: int, launched: float, every_seconds: float = None, label=None):
        super().__init__(label)
        self._fn = ReleaseProgress(horizon_ticks, launched,
                                   progress_seconds() if every_seconds is None else every_seconds)

    def expand(self, releases):
        return releases | "Log" >> beam.ParDo(self._fn)
