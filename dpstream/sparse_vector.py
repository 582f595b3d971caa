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
"""
from __future__ import annotations

import numpy as np

from .noise import NoiseSource


class LevelZeroAboveThreshold:
    def __init__(self, n: int, threshold: float, scale: float, noise: NoiseSource, key: tuple,
                 index: int = None):
        """``n`` instances drawn together under ``key``; with ``index`` = i this object holds only
        instance i of them (a Beam key per ring): it draws the same length-n vectors and keeps
        element i, so its decisions are exactly those of instance i of the vectorised object."""
        self.n = int(n)
        self.threshold = float(threshold)
        self.scale = float(scale)
        self.noise = noise
        self.key = tuple(key)
        self.index = None if index is None else int(index)
        if self.index is not None and not 0 <= self.index < self.n:
            raise ValueError(f"index must be in [0, {self.n}), got {index!r}")
        self.count = np.zeros(self.n if self.index is None else 1, dtype=np.int64)
        # initial thresholds: drawn once at creation, under their own key
        self.noisy_threshold = self.threshold + self._draw(self.key + ("threshold", "init"))

    def _draw(self, key) -> np.ndarray:
        v = self.noise.laplace(key, self.n, self.scale)
        return v if self.index is None else v[self.index:self.index + 1]

    def step(self, tick: int, arrivals: np.ndarray) -> np.ndarray:
        """Add this tick's arrivals per instance; return the boolean ⊤ vector."""
        self.count = self.count + np.asarray(arrivals, dtype=np.int64)
        nu = self._draw(self.key + ("query", tick))
        fired = self.count + nu >= self.noisy_threshold
        # fresh thresholds for every instance each tick (data-independent key use);
        # only the instances that fired adopt theirs.
        if self.index is not None and not fired[0]:
            # one instance that did not fire keeps its threshold: its fresh draw (keyed and stateless,
            # so skipping it changes no other draw) would be discarded; the outputs are those of the
            # vectorised object, which draws every tick
            return fired
        fresh = self.threshold + self._draw(self.key + ("threshold", tick))
        self.noisy_threshold = np.where(fired, fresh, self.noisy_threshold)
        self.count = np.where(fired, 0, self.count)
        return fired

    def state_floats(self) -> int:
        return self.count.size + self.noisy_threshold.size
