"""BicriteriaDPCenters (Alg. 2): the growing DP candidate center set F.

Q shifted quadtrees × (L+1) levels × R hash repetitions, each a DPFindCenters
(Alg. 3) over w buckets.  All Q·(L+1)·R·w vector counters are one vectorised
binary mechanism whose node noise is keyed per (tree, level), stepped once per
tick whether or not data arrived (the paper's ⊥ updates).

The same computation comes in two shapes, with identical outputs for the same
seed: :class:`BicriteriaDPCenters` (the engine: every (tree, level) in one
vectorised counter) and, for the Beam job, one :class:`BicriteriaLevel` per
(tree, level) key plus a :class:`CenterSet` (the CenterRegistry's state) that
absorbs their per-tick :class:`LevelReport` objects.  A record touches exactly one bucket per
(tree, level, repetition): Q·(L+1)·R counter instances (Lemma 5; review
finding 9 — the count and bit counters are one merged vector counter).

F only grows; it starts with the public center of the data ball, so rings are
defined from the first tick.  Every reported cell centre is post-processing of
released counters.  The DP count estimate of a release is the mean over
(tree, level, rep) of Σ_j N̂_j (review finding 16), also post-processing.
"""
from __future__ import annotations

import math
from typing import List, NamedTuple

import numpy as np

from .counters import BinaryMechanism
from .grids import ShiftedGrids
from .heavy_hitters import bucket_updates, bucket_updates_from_ids, decode_buckets
from .noise import NoiseSource
from .params import EngineConfig
from .privacy import PrivacyPlan


class LevelReport(NamedTuple):
    """What one (tree, level) releases at a tick: per repetition, the decoded cell ids that
    passed pruning (DP: post-processing of its counters) and its noisy bucket-size total."""
    q: int
    level: int
    found: list    # [(r, ids ndarray (m, d) int64)], r ascending
    totals: list   # [float] per repetition


def _tau_min(cfg: EngineConfig, plan: PrivacyPlan, lv: int) -> float:
    L_T = cfg.counter_levels
    per_node = 1.0 if plan.bic_mechanism == "gaussian" else math.sqrt(2.0)
    return cfg.hh_min_count * plan.bic_scale[lv] * per_node * math.sqrt(L_T)


def _level_width(cfg: EngineConfig, lv: int) -> int:
    return cfg.buckets * (1 + cfg.id_bits(lv)) * cfg.n_reps


def _level_update(cfg: EngineConfig, grids: ShiftedGrids, x: np.ndarray, q: int, lv: int) -> np.ndarray:
    """The (tree, level) segment of the counter update: R blocks of w × (1 + id bits)."""
    w = cfg.buckets
    ids = grids.cell_ids(x, q, lv)
    nv, nb = int(grids.values[lv]), int(grids.bits[lv])
    out = []
    for r in range(cfg.n_reps):
        j = grids.bucket(ids, q, lv, r)
        if w * nv <= 2 * len(ids) * nb:  # the id-value histogram is cheaper than the bit matrix (measured)
            upd = bucket_updates_from_ids(j, ids, w, nv, nb)
        else:
            upd = bucket_updates(j, grids.encode(ids, lv), w)
        out.append(upd.ravel())
    return np.concatenate(out).astype(np.int64)


def _level_report(cfg: EngineConfig, grids: ShiftedGrids, released: np.ndarray, q: int, lv: int,
                  tau_min: float) -> LevelReport:
    w, width = cfg.buckets, 1 + cfg.id_bits(lv)
    found, totals = [], []
    for r in range(cfg.n_reps):
        rel = released[r * w * width:(r + 1) * w * width].reshape(w, width)
        totals.append(float(rel[:, 0].sum()))
        bits, passed, _, _ = decode_buckets(rel, cfg.hh_alpha, tau_min)
        if passed.any():
            found.append((r, grids.decode(bits[passed], lv)))
    return LevelReport(q, lv, found, totals)


class BicriteriaLevel:
    """One (tree, level) of Alg. 2 with its own binary mechanism (the Beam job's
    BicriteriaCenters key): draws exactly the noise of its segment of
    :class:`BicriteriaDPCenters`' vectorised counter."""

    def __init__(self, cfg: EngineConfig, plan: PrivacyPlan, noise: NoiseSource, q: int, lv: int):
        self.cfg, self.q, self.lv = cfg, int(q), int(lv)
        self.grids = ShiftedGrids(cfg, noise)
        size = _level_width(cfg, lv)
        self.counter = BinaryMechanism(size, cfg.horizon_ticks, noise, (BicriteriaDPCenters.COMPONENT,),
                                       plan.bic_mechanism, plan.bic_scale[lv], segments=[((q, lv), 0, size)])
        self.tau_min = _tau_min(cfg, plan, lv)

    def update(self, x_centered: np.ndarray):
        """This level's counter update for a set of (clipped, centred) points; None for no points.
        Updates of parts of a tick add up: ``update(a) + update(b) == update(a ∪ b)``."""
        return _level_update(self.cfg, self.grids, x_centered, self.q, self.lv) if len(x_centered) else None

    def step_update(self, u) -> LevelReport:
        """Advance one tick with the tick's summed update (None: ⊥, an empty tick)."""
        return _level_report(self.cfg, self.grids, self.counter.step(u), self.q, self.lv, self.tau_min)

    def step(self, x_centered: np.ndarray) -> LevelReport:
        return self.step_update(self.update(x_centered))

    def state_floats(self) -> int:
        return self.counter.state_floats()


class CenterSet:
    """F (starts with the ball's public center, only grows) and the DP count estimate,
    from the per-tick reports of every (tree, level): the CenterRegistry's state."""

    def __init__(self, cfg: EngineConfig, grids: ShiftedGrids):
        self.cfg, self.grids = cfg, grids
        self.center = cfg.center_vec
        self.F = [self.center.copy()]
        self._keys = set()

    @property
    def centers(self) -> np.ndarray:
        return np.asarray(self.F)

    def absorb(self, reports: List[LevelReport]):
        """One tick's reports of all Q·(L+1) levels → (new centers, count estimate)."""
        if len(reports) != self.cfg.n_trees * self.cfg.grid_levels:
            raise ValueError(f"a tick needs the reports of all {self.cfg.n_trees * self.cfg.grid_levels} "
                             f"(tree, level) pairs, got {len(reports)}")
        new, totals = [], []
        for rep in sorted(reports, key=lambda r: (r.q, r.level)):  # the engine's block order
            totals.extend(rep.totals)
            for _, ids in rep.found:
                for cid in map(tuple, ids):
                    key = (rep.q, rep.level, cid)
                    if key in self._keys:
                        continue
                    self._keys.add(key)
                    c = self.grids.cell_centers(np.asarray([cid]), rep.q, rep.level)[0]
                    nrm = np.linalg.norm(c)
                    if nrm > self.cfg.radius:
                        c = c * (self.cfg.radius / nrm)
                    new.append(c + self.center)
        if new:
            self.F.extend(new)
        return (np.asarray(new) if new else np.zeros((0, self.cfg.dim))), float(np.mean(totals))

    def state_floats(self) -> int:
        return len(self.F) * self.cfg.dim + len(self._keys) * (self.cfg.dim + 2)


class BicriteriaDPCenters:
    COMPONENT = "bicriteria"

    def __init__(self, cfg: EngineConfig, plan: PrivacyPlan, noise: NoiseSource):
        self.cfg = cfg
        self.grids = ShiftedGrids(cfg, noise)
        w = cfg.buckets
        self.blocks = []  # (q, level, r, offset, width)
        self.levels = []  # (q, level, offset, size): one noise-key segment per (tree, level)
        off = 0
        scales = []
        for q in range(cfg.n_trees):
            for lv in range(cfg.grid_levels):
                width = 1 + cfg.id_bits(lv)
                start = off
                for r in range(cfg.n_reps):
                    self.blocks.append((q, lv, r, off, width))
                    off += w * width
                    scales.append(np.full(w * width, plan.bic_scale[lv]))
                self.levels.append((q, lv, start, off - start))
        self.size = off
        self.counter = BinaryMechanism(off, cfg.horizon_ticks, noise, (self.COMPONENT,), plan.bic_mechanism,
                                       np.concatenate(scales),
                                       segments=[((q, lv), a, a + n) for q, lv, a, n in self.levels])
        self.tau_min = {lv: _tau_min(cfg, plan, lv) for lv in range(cfg.grid_levels)}
        self.registry = CenterSet(cfg, self.grids)

    @property
    def centers(self) -> np.ndarray:
        return self.registry.centers

    @property
    def F(self) -> list:
        return self.registry.F

    def _update_vector(self, x: np.ndarray) -> np.ndarray:
        u = np.zeros(self.size, dtype=np.int64)
        for q, lv, a, n in self.levels:
            u[a:a + n] = _level_update(self.cfg, self.grids, x, q, lv)
        return u

    def step(self, x_centered: np.ndarray):
        """Advance one tick with the tick's (clipped, centred) points; return (new centers, count estimate)."""
        u = self._update_vector(x_centered) if len(x_centered) else None
        released = self.counter.step(u)
        reports = [_level_report(self.cfg, self.grids, released[a:a + n], q, lv, self.tau_min[lv])
                   for q, lv, a, n in self.levels]
        return self.registry.absorb(reports)

    def state_floats(self) -> int:
        return self.counter.state_floats() + self.registry.state_floats()
