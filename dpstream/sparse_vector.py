"""LevelZero-AboveThreshold: the sparse vector technique with restarts (Alg. 5, Lemma 11).

One instance per (epoch, ring), vectorised over the rings of an epoch.  At
*every* tick each instance adds its ring's new points to its count and tests
``count + ν ≥ M + ρ`` — empty ticks included (P13: testing only on
arrivals reveals ring membership through the firing time).

Noise (P13): the monotone-query variant of Lyu–Su–Li (VLDB 2017)
with threshold noise ρ ~ Lap(2Δ/ε) and query noise ν ~ Lap(2Δ/ε), valid because
a record added at tick s raises every later query of its group by exactly one
(a monotone step).  ρ is redrawn at every restart and ν at every tick, each
under its own key (P15); the count resets to 0 at ⊤ and the block holds
every point up to and including the firing tick.  Δ = 2 under replace-one
(the record may move between two rings), which the plan folds into the scale.

The noise is continuous: SVT noise is never released, only the ⊤/⊥ bits.

The same class runs the part sparse vector (``part_fire``, P23): one instance per (epoch, ring,
part) over the ring's pending points in that part. A ring's fire (its ring instance's ⊤ or one of its
parts') restarts its instances of both (:meth:`restart`); a flush restarts only the flushed rings' part
instances (the ring instance's count keeps the flushed points). A restart caused by the other one's ⊤ or
by a flush is a function of outputs and public ticks, and the new segment counts only points after it,
so each record is still in one segment of each instance (the restarts compose in parallel, as Lemma
11's do).

``growth`` g > 0 (the part instances: ``rules.PART_FIRE_TEST_GROWTH``) raises an instance's threshold at
its j-th test since its last restart by g·b·ln j (b the Laplace scale). Each test draws a fresh ν, so after
j tests the largest ν seen is about b·ln j: without the raise an instance fires sooner, in points, the more
often it is tested, and how often is the caller's tick size. The raise depends only on j, which the ⊤
outputs and the public flush ticks fix: a public threshold chosen before each test, as the monotone
variant allows (P23).
"""
from __future__ import annotations

import numpy as np

from .noise import NoiseSource


class LevelZeroAboveThreshold:
    span = None  # (class default: an object pickled before ``span``, whose ``index`` says what it holds)
    growth = 0.0  # (likewise for ``growth``: an object pickled before it has none)
    tests = None

    def __init__(self, n: int, threshold, scale: float, noise: NoiseSource, key: tuple,
                 index: int = None, span: tuple = None, growth: float = 0.0):
        """``n`` instances drawn together under ``key``; with ``index`` = i this object holds only
        instance i of them (a Beam key per ring): it draws the same length-n vectors and keeps
        element i, so its decisions are exactly those of instance i of the vectorised object.
        ``span`` = (lo, hi) likewise holds instances lo..hi−1 (a ring's parts). ``threshold``: one
        number, or one per instance (a public vector of length n). ``growth``: the raise per test
        (module docstring), 0 for none."""
        self.n = int(n)
        self.scale = float(scale)
        self.noise = noise
        self.key = tuple(key)
        self.index = None if index is None else int(index)
        if self.index is not None and not 0 <= self.index < self.n:
            raise ValueError(f"index must be in [0, {self.n}), got {index!r}")
        if self.index is not None:
            span = (self.index, self.index + 1)
        self.span = None if span is None else (int(span[0]), int(span[1]))
        if self.span is not None and not 0 <= self.span[0] < self.span[1] <= self.n:
            raise ValueError(f"span must be within [0, {self.n}), got {span!r}")
        thr = np.asarray(threshold, dtype=float)
        if thr.ndim == 0:
            self.threshold = float(thr)
        else:
            if thr.shape != (self.n,):
                raise ValueError(f"a threshold per instance needs {self.n} of them, got shape {thr.shape}")
            self.threshold = thr if self.span is None else thr[self.span[0]:self.span[1]].copy()
        size = self.n if self.span is None else self.span[1] - self.span[0]
        self.count = np.zeros(size, dtype=np.int64)
        if not (np.isfinite(growth) and growth >= 0):
            raise ValueError(f"growth must be a finite number >= 0, got {growth!r}")
        self.growth = float(growth)
        self.tests = np.zeros(size, dtype=np.int64) if self.growth else None  # tests since each restart
        # initial thresholds: drawn once at creation, under their own key
        self.noisy_threshold = self.threshold + self._draw(self.key + ("threshold", "init"))

    def _held(self):
        if self.span is None and self.index is not None:
            return self.index, self.index + 1
        return self.span

    def _draw(self, key) -> np.ndarray:
        v = self.noise.laplace(key, self.n, self.scale)
        held = self._held()
        return v if held is None else v[held[0]:held[1]]

    def step(self, tick: int, arrivals: np.ndarray) -> np.ndarray:
        """Add this tick's arrivals per instance; return the boolean ⊤ vector (each instance that
        fired restarts)."""
        fired = self.test(tick, arrivals)
        self.restart(tick, fired)
        return fired

    def test(self, tick: int, arrivals: np.ndarray, raise_by=None) -> np.ndarray:
        """Add this tick's arrivals per instance and test each against its noisy threshold (no
        restart: :meth:`restart` follows, with the instances a caller restarts — those that fired and
        any whose block was released for another public reason). ``raise_by``: a public amount per
        instance (≥ 0, this tick only) added to the threshold (a threshold that changes with released
        values; the noise is the same)."""
        self.count = self.count + np.asarray(arrivals, dtype=np.int64)
        nu = self._draw(self.key + ("query", tick))
        thr = self.noisy_threshold
        if self.growth:
            self.tests = self.tests + 1
            thr = thr + self.growth * self.scale * np.log(self.tests)
        if raise_by is None:
            return self.count + nu >= thr
        return self.count + nu >= thr + np.asarray(raise_by, dtype=float)

    def restart(self, tick: int, mask: np.ndarray, tag: tuple = ()) -> None:
        """Restart the instances in ``mask`` (LevelZero's restart: count 0, a fresh threshold drawn
        under the tick's key — ``tag`` tells apart a second restart key of the same tick)."""
        mask = np.asarray(mask, dtype=bool)
        if self._held() is not None and not mask.any():
            # a held slice none of whose instances restarts keeps its thresholds: the fresh draw
            # (keyed and stateless, so skipping it changes no other draw) would be discarded; the
            # outputs are those of the vectorised object, which draws every tick
            return
        # fresh thresholds for every instance each tick (data-independent key use);
        # only the instances that restart adopt theirs.
        fresh = self.threshold + self._draw(self.key + ("threshold", tick) + tuple(tag))
        self.noisy_threshold = np.where(mask, fresh, self.noisy_threshold)
        self.count = np.where(mask, 0, self.count)
        if self.growth:
            self.tests = np.where(mask, 0, self.tests)

    def state_floats(self) -> int:
        return self.count.size + self.noisy_threshold.size + (self.tests.size if self.growth else 0)
