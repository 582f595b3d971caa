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
"""
from __future__ import annotations

import numpy as np

from .noise import NoiseSource


class LevelZeroAboveThreshold:
    span = None  # (class default: an object pickled before ``span``, whose ``index`` says what it holds)

    def __init__(self, n: int, threshold, scale: float, noise: NoiseSource, key: tuple,
                 index: int = None, span: tuple = None):
        """``n`` instances drawn together under ``key``; with ``index`` = i this object holds only
        instance i of them (a Beam key per ring): it draws the same length-n vectors and keeps
        element i, so its decisions are exactly those of instance i of the vectorised object.
        ``span`` = (lo, hi) likewise holds instances lo..hi−1 (a ring's parts). ``threshold``: one
        number, or one per instance (a public vector of length n)."""
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
        if raise_by is None:
            return self.count + nu >= self.noisy_threshold
        return self.count + nu >= self.noisy_threshold + np.asarray(raise_by, dtype=float)

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

    def state_floats(self) -> int:
        return self.count.size + self.noisy_threshold.size
