"""BicriteriaDPCenters (Alg. 2): the growing DP candidate center set F.

Q shifted quadtrees × (L+1) levels × R hash repetitions, each a DPFindCenters
(Alg. 3) over w buckets.  All Q·(L+1)·R·w vector counters are one vectorised
binary mechanism (one noise key family), stepped once per tick whether or not
data arrived (the paper's ⊥ updates).  A record touches exactly one bucket per
(tree, level, repetition): Q·(L+1)·R counter instances (Lemma 5; review
finding 9 — the count and bit counters are one merged vector counter).

F only grows; it starts with the public center of the data ball, so rings are
defined from the first tick.  Every reported cell centre is post-processing of
released counters.  The DP count estimate of a release is the mean over
(tree, level, rep) of Σ_j N̂_j (review finding 16), also post-processing.
"""
from __future__ import annotations

import math

import numpy as np

from .counters import BinaryMechanism
from .grids import ShiftedGrids
from .heavy_hitters import bucket_updates, bucket_updates_from_ids, decode_buckets
from .noise import NoiseSource
from .params import EngineConfig
from .privacy import PrivacyPlan


class BicriteriaDPCenters:
    COMPONENT = "bicriteria"

    def __init__(self, cfg: EngineConfig, plan: PrivacyPlan, noise: NoiseSource):
        self.cfg = cfg
        self.grids = ShiftedGrids(cfg, noise)
        w = cfg.buckets
        self.blocks = []  # (q, level, r, offset, width)
        off = 0
        scales = []
        for q in range(cfg.n_trees):
            for lv in range(cfg.grid_levels):
                width = 1 + cfg.id_bits(lv)
                for r in range(cfg.n_reps):
                    self.blocks.append((q, lv, r, off, width))
                    off += w * width
                    scales.append(np.full(w * width, plan.bic_scale[lv]))
        self.size = off
        self.counter = BinaryMechanism(off, cfg.horizon_ticks, noise, (self.COMPONENT, "all"),
                                       plan.bic_mechanism, np.concatenate(scales))
        L_T = cfg.counter_levels
        per_node = 1.0 if plan.bic_mechanism == "gaussian" else math.sqrt(2.0)
        self.tau_min = {lv: cfg.hh_min_count * plan.bic_scale[lv] * per_node * math.sqrt(L_T)
                        for lv in range(cfg.grid_levels)}
        self.center = cfg.center_vec
        self.F = [self.center.copy()]  # public start: the ball's center
        self._keys = set()

    @property
    def centers(self) -> np.ndarray:
        return np.asarray(self.F)

    def _update_vector(self, x: np.ndarray) -> np.ndarray:
        u = np.zeros(self.size, dtype=np.int64)
        w = self.cfg.buckets
        cache = {}
        for q, lv, r, off, width in self.blocks:
            if (q, lv) not in cache:
                cache[(q, lv)] = self.grids.cell_ids(x, q, lv)
            ids = cache[(q, lv)]
            j = self.grids.bucket(ids, q, lv, r)
            nv, nb = int(self.grids.values[lv]), int(self.grids.bits[lv])
            if w * nv <= 2 * len(ids) * nb:  # the id-value histogram is cheaper than the bit matrix (measured)
                upd = bucket_updates_from_ids(j, ids, w, nv, nb)
            else:
                upd = bucket_updates(j, self.grids.encode(ids, lv), w)
            u[off:off + w * width] = upd.ravel()
        return u

    def step(self, x_centered: np.ndarray):
        """Advance one tick with the tick's (clipped, centred) points; return (new centers, count estimate)."""
        u = self._update_vector(x_centered) if len(x_centered) else None
        released = self.counter.step(u)
        w = self.cfg.buckets
        new = []
        totals = []
        for q, lv, r, off, width in self.blocks:
            rel = released[off:off + w * width].reshape(w, width)
            totals.append(rel[:, 0].sum())
            bits, passed, _, _ = decode_buckets(rel, self.cfg.hh_alpha, self.tau_min[lv])
            if not passed.any():
                continue
            ids = self.grids.decode(bits[passed], lv)
            for cid in map(tuple, ids):
                key = (q, lv, cid)
                if key in self._keys:
                    continue
                self._keys.add(key)
                c = self.grids.cell_centers(np.asarray([cid]), q, lv)[0]
                nrm = np.linalg.norm(c)
                if nrm > self.cfg.radius:
                    c = c * (self.cfg.radius / nrm)
                new.append(c + self.center)
        if new:
            self.F.extend(new)
        count_estimate = float(np.mean(totals))
        return (np.asarray(new) if new else np.zeros((0, self.cfg.dim))), count_estimate

    def state_floats(self) -> int:
        return self.counter.state_floats() + len(self.F) * self.cfg.dim + len(self._keys) * (self.cfg.dim + 2)
