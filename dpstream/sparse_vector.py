"""LevelZero-AboveThreshold: the sparse vector technique with restarts (Alg. 5, Lemma 11).

One instance per (epoch, ring), vectorised over the rings of an epoch.  At
*every* tick each instance adds its ring's new points to its count and tests
``count + ν ≥ M + ρ`` — empty ticks included (review finding 12: testing only on
arrivals reveals ring membership through the firing time).

Noise (review finding 12): the monotone-query variant of Lyu–Su–Li (VLDB 2017)
with threshold noise ρ ~ Lap(2Δ/ε) and query noise ν ~ Lap(2Δ/ε), valid because
a record added at tick s raises every later query of its group by exactly one
(a monotone step).  ρ is redrawn at every restart and ν at every tick, each
under its own key (finding 7d); the count resets to 0 at ⊤ and the block holds
every point up to and including the firing tick.  Δ = 2 under replace-one
(the record may move between two rings), which the plan folds into the scale.

The noise is continuous: SVT noise is never released, only the ⊤/⊥ bits.
"""
from __future__ import annotations

import numpy as np

from .noise import NoiseSource


class LevelZeroAboveThreshold:
    def __init__(self, n: int, threshold: float, scale: float, noise: NoiseSource, key: tuple):
        self.n = int(n)
        self.threshold = float(threshold)
        self.scale = float(scale)
        self.noise = noise
        self.key = tuple(key)
        self.count = np.zeros(self.n, dtype=np.int64)
        # initial thresholds: drawn once at creation, under their own key
        self.noisy_threshold = self.threshold + self.noise.laplace(self.key + ("threshold", "init"), self.n,
                                                                   self.scale)

    def step(self, tick: int, arrivals: np.ndarray) -> np.ndarray:
        """Add this tick's arrivals per instance; return the boolean ⊤ vector."""
        self.count = self.count + np.asarray(arrivals, dtype=np.int64)
        nu = self.noise.laplace(self.key + ("query", tick), self.n, self.scale)
        fired = self.count + nu >= self.noisy_threshold
        # fresh thresholds for every instance each tick (data-independent key use);
        # only the instances that fired adopt theirs.
        fresh = self.threshold + self.noise.laplace(self.key + ("threshold", tick), self.n, self.scale)
        self.noisy_threshold = np.where(fired, fresh, self.noisy_threshold)
        self.count = np.where(fired, 0, self.count)
        return fired

    def state_floats(self) -> int:
        return self.count.size + self.noisy_threshold.size
