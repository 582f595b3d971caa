"""Runs: an unbounded stream as consecutive runs of T ticks under parallel composition.

The continual counters of one run are private only up to its horizon T (P3),
so a stream that goes on for months is cut into runs: run r covers the ticks r·T + 1 … (r + 1)·T of
the stream's clock, each with fresh mechanisms, fresh noise keys (the run index enters every key)
and a fresh budget (ε, δ).

Why the whole unbounded sequence of releases is still (ε, δ)-DP per record: under the unit of
privacy of dpstream — one record — a record's tick is a function of the record and the public clock
alone (its timestamp or its slot), so it lies in exactly one run, and neighbouring streams differ in
the input of that run only. Each run is (ε, δ)-DP in its own input and independent of the others'
inputs (the window below reads only released outputs): parallel composition over disjoint inputs
gives (ε, δ) for the whole sequence. A person with one record in each of m runs gets (m·ε, m·δ) (the runs
compose); m records in one run give (m·ε, m·e^((m−1)ε)·δ) by group privacy.

What a release carries besides the run's own centers and coreset: ``window_centers``, centers of a
public window of runs (:mod:`dpstream.run_window`, which the Beam job keeps too) — the final released
coresets of the last ``window_runs`` closed runs and the current run's coreset, merged, reduced by black
box B and clustered (0: all runs so far, their coresets merged into one by B as they close). Released
coresets are DP outputs, so the window is post-processing and costs no budget.

State: the open run's engine, plus one released coreset (≤ s_B points) per run of the window (or one
for all time): bounded over any number of runs; a closed run's engine is dropped.
"""
from __future__ import annotations

import dataclasses

from .counters import HorizonExceeded
from .engine import Engine, StreamEnded
from .noise import as_seed
from .params import EngineConfig
from .release import Release
from .run_window import RunWindow, window_centers


class RunSequence:
    """Runs of ``cfg.horizon_ticks`` ticks one after another: ``step(points) -> Release`` for every
    tick of the stream, at most ``cfg.runs`` runs (None: unbounded)."""

    def __init__(self, cfg: EngineConfig, seed: bytes, trace: bool = False, bicriteria: str = "internal"):
        self.cfg = cfg
        self._seed = as_seed(seed)
        self._trace, self._bicriteria = trace, bicriteria
        self.run = 0
        self.engine = Engine(cfg, seed, trace=trace, bicriteria=bicriteria)
        self.window = RunWindow(cfg)  # closed runs' final released coresets
        self._window_cache = None

    @property
    def closed(self):
        """The window's closed runs, (run, points, weights) each (the last W; empty with W = 0)."""
        return self.window.closed

    @property
    def plan(self):
        return self.engine.plan

    def __getstate__(self):
        d = dict(self.__dict__)
        d["_seed"] = None  # the seed never travels with pickled state (as NoiseSource's)
        return d

    def attach_seed(self, seed: bytes) -> None:
        self._seed = as_seed(seed)
        self.engine.attach_seed(seed)

    @property
    def next_global_tick(self) -> int:
        """The 0-based global index of the tick the next ``step`` consumes (its run is this // T): the
        clock a contribution bounder must reset on, so the two cannot drift apart."""
        return self.run * self.cfg.horizon_ticks + self.engine.t

    def step(self, points, bicriteria_update=None, last: bool = False) -> Release:
        """``last=True``: the stream ends at this tick (:meth:`Engine.step`); no run follows it."""
        cfg = self.cfg
        if self.engine.ended:
            raise StreamEnded(f"the stream was declared ended at tick {self.next_global_tick} (run {self.run}); "
                              f"its last release holds every point. A new stream needs a new estimator (or fit)")
        if self.engine.t >= cfg.horizon_ticks:
            if cfg.runs is not None and self.run + 1 >= cfg.runs:
                raise HorizonExceeded(
                    f"the last run ({cfg.runs} run(s) of T={cfg.horizon_ticks} ticks) has ended; pass runs=None "
                    f"(unbounded) or a larger runs to go on with fresh runs")
            self._roll()
        rel = self.engine.step(points, bicriteria_update, last=last)
        return self._with_window(rel)

    @property
    def ended(self) -> bool:
        return self.engine.ended

    def _roll(self) -> None:
        """Close the run: keep its final released coreset for the window and start the next run afresh
        (from the ball's center, like run 0: carrying released centers into the next run's rings
        would be private too, but would make run r + 1 wait for run r's last release — a loop across
        runs that a Beam graph cannot unroll for an unbounded stream); the old engine (raw blocks,
        exact counters) is dropped."""
        last = self.engine._cache  # (points, weights, centers) of the run's final release
        pts, w, _ = last
        self.window.close_run(self.engine.noise, self.run, pts, w)
        self._clipped_before += self.engine.n_clipped
        self._points_before += self.engine.n_points
        self.run += 1
        self.engine = Engine(self.cfg, self._seed, trace=self._trace, bicriteria=self._bicriteria, run=self.run)
        self._window_cache = None

    def _with_window(self, rel: Release) -> Release:
        cfg = self.cfg
        sets, first = self.window.sets(self.run)
        kw = dict(run=self.run, global_tick=self.run * cfg.horizon_ticks + rel.tick, window_first_run=first)
        if not sets:  # run 0 (or nothing closed yet): the window is the run itself
            return dataclasses.replace(rel, window_centers=rel.centers, **kw)
        version = (self.run, self.engine._cache_version)
        if self._window_cache is None or self._window_cache[0] != version:
            sample, _ = self.window.sample(self.engine.noise, self.run, rel.coreset_points, rel.coreset_weights,
                                           rel.tick)
            self._window_cache = (version, window_centers(cfg, self.engine.noise, sample, rel.centers, rel.tick))
        return dataclasses.replace(rel, window_centers=self._window_cache[1], **kw)

    def state_size(self) -> int:
        """Floats held: the open run's engine and the window's released coresets (operator telemetry)."""
        n = self.engine.state_size()
        n += self.window.state_floats()
        if self._window_cache is not None:
            n += self._window_cache[1].size
        return int(n)

    @property
    def peak_state(self) -> int:
        return self.engine.peak_state + (self.state_size() - self.engine.state_size())

    @property
    def n_clipped(self) -> int:
        """Points clipped onto the ball over all runs (operator telemetry: an exact count)."""
        return self._clipped_before + self.engine.n_clipped

    @property
    def n_points(self) -> int:
        return self._points_before + self.engine.n_points

    _clipped_before = 0
    _points_before = 0
