"""DP-Merge-Reduce (Alg. 4) for every ring of one epoch.

Per ring i: raw points wait in a level-0 buffer P_0 (never summarised before A:
review finding 8); LevelZero-AboveThreshold (Alg. 5) decides at every tick
whether P_0 holds ≈ M points; then P_0 is replaced by the DP semicoreset A of
its parts (ring i, center f) for *every* f of the epoch's center set, and the
result is merged into a binary-counter stack of levels reduced with black box B.

At an epoch change or the horizon the pending buffers of every ring are flushed
through A — every (ring, center) part, empty ones included — so no point is
lost and each point still enters exactly one A call (review, "Flush fix").
"""
from __future__ import annotations

from typing import List, Optional

import numpy as np

from .coresets import sensitivity_sample
from .noise import NoiseSource
from .params import EngineConfig
from .privacy import PrivacyPlan
from .semicoresets import Semicoreset, WeightedSet
from .sparse_vector import LevelZeroAboveThreshold


class EpochMergeReduce:
    def __init__(self, cfg: EngineConfig, plan: PrivacyPlan, noise: NoiseSource, A: Semicoreset, epoch: int,
                 centers: np.ndarray):
        self.cfg, self.plan, self.noise, self.A = cfg, plan, noise, A
        self.epoch = epoch
        self.centers = np.asarray(centers, dtype=float)
        I = cfg.n_rings
        self.svt = LevelZeroAboveThreshold(I, cfg.block_size, plan.svt_scale, noise, ("svt", epoch))
        self.buf_x: List[List[np.ndarray]] = [[] for _ in range(I)]
        self.buf_f: List[List[np.ndarray]] = [[] for _ in range(I)]
        self.levels: List[List[Optional[WeightedSet]]] = [[] for _ in range(I)]
        self.version = 0
        self.z = 1 if cfg.objective == "kmedian" else 2
        self.fires = 0

    # -- per tick ---------------------------------------------------------------
    def step(self, tick: int, x: np.ndarray, ring: np.ndarray, f: np.ndarray) -> np.ndarray:
        I = self.cfg.n_rings
        if len(x):
            order = np.argsort(ring, kind="stable")
            rs = ring[order]
            bounds = np.searchsorted(rs, np.arange(I + 1))
            for i in np.flatnonzero(np.diff(bounds)):  # loop over rings, not points
                sel = order[bounds[i]:bounds[i + 1]]
                self.buf_x[i].append(x[sel])
                self.buf_f[i].append(f[sel])
        arrivals = np.bincount(ring, minlength=I) if len(x) else np.zeros(I, dtype=np.int64)
        fired = self.svt.step(tick, arrivals)
        if fired.any():
            self._run_A(np.flatnonzero(fired), tick, "fire")
        return fired

    def flush(self, tick: int) -> None:
        self._run_A(np.arange(self.cfg.n_rings), tick, "flush")

    def _run_A(self, rings: np.ndarray, tick: int, why: str) -> None:
        nF = self.centers.shape[0]
        xs, parts = [], []
        for pos, i in enumerate(rings):
            if self.buf_x[i]:
                xs.append(np.concatenate(self.buf_x[i]))
                parts.append(pos * nF + np.concatenate(self.buf_f[i]))
            self.buf_x[i], self.buf_f[i] = [], []
        x = np.concatenate(xs) if xs else np.zeros((0, self.cfg.dim))
        part = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
        part_centers = np.tile(self.centers, (rings.size, 1))
        part_radii = np.repeat(self.cfg.ring_radius(rings), nF)
        out = self.A(x, part, part_centers, part_radii, ("A", self.epoch, tick, why))
        ring_of_out = rings[out.part // nF] if len(out) else np.zeros(0, dtype=np.int64)
        for pos, i in enumerate(rings):
            sel = ring_of_out == i
            self._insert(i, WeightedSet(out.points[sel], out.weights[sel].astype(float),
                                        np.full(int(sel.sum()), -1)), tick)
        self.fires += 1
        self.version += 1

    def _insert(self, ring: int, S: WeightedSet, tick: int) -> None:
        lv = self.levels[ring]
        j = 0
        while j < len(lv) and lv[j] is not None:
            S = self.reduce(WeightedSet.concat([lv[j], S], self.cfg.dim), ("B", self.epoch, ring, tick, j))
            lv[j] = None
            j += 1
        if j == len(lv):
            lv.append(None)
        lv[j] = S

    def reduce(self, S: WeightedSet, key) -> WeightedSet:
        if len(S) <= self.cfg.s_b:
            return S
        rng = self.noise.generator(key)
        p, w = sensitivity_sample(S.points, S.weights, self.cfg.s_b, self.cfg.n_clusters, rng, self.z)
        return WeightedSet(p, w, np.full(p.shape[0], -1))

    # -- release ------------------------------------------------------------------
    def released(self) -> WeightedSet:
        return WeightedSet.concat([s for lv in self.levels for s in lv if s is not None], self.cfg.dim)

    def buffered(self) -> int:
        return sum(a.shape[0] for b in self.buf_x for a in b)

    def state_floats(self) -> int:
        d = self.cfg.dim
        buf = self.buffered() * (d + 1)
        lv = sum(len(s) * (d + 1) for l in self.levels for s in l if s is not None)
        return buf + lv + self.svt.state_floats() + self.centers.size
