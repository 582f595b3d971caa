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
(tree, level, repetition): Q·(L+1)·R counter instances (Lemma 5; 
P9 — the count and bit counters are one merged vector counter).

With ``bucket_shards`` S > 1 each (tree, level)'s w buckets are cut into S contiguous ranges
(:func:`bucket_ranges`) and the node noise of repetition r's range s is drawn under its own key, so a
:class:`BicriteriaLevel` can hold one range (the Beam job's (tree, level, bucket shard) key) and draw
exactly its part of the engine's noise. Decoding is per bucket, so the ranges' reports, merged in bucket
order (:func:`merge_shard_reports`), are the level's report; their noisy totals add up.

F only grows; it starts with the public center of the data ball, so rings are
defined from the first tick.  Every reported cell centre is post-processing of
released counters.  The DP count estimate of a release is the mean over
(tree, level, rep) of Σ_j N̂_j (P14), also post-processing.
"""
from __future__ import annotations

import math
from typing import List, NamedTuple, Optional, Tuple

import numpy as np

from .counters import BinaryMechanism
from .grids import ShiftedGrids
from .heavy_hitters import bucket_updates, bucket_updates_from_ids, decode_buckets
from .noise import NoiseSource
from .params import EngineConfig
from .privacy import PrivacyPlan


class LevelReport(NamedTuple):
    """What one (tree, level) — or one bucket shard of it — releases at a tick: per repetition, the
    decoded cell ids that passed pruning (DP: post-processing of its counters) and its noisy
    bucket-size total (over the shard's buckets)."""
    q: int
    level: int
    found: list    # [(r, ids ndarray (m, d) int64)], r ascending, bucket order within r
    totals: list   # [float] per repetition
    shard: int = 0


def _tau_min(cfg: EngineConfig, plan: PrivacyPlan, lv: int) -> float:
    L_T = cfg.counter_levels
    per_node = 1.0 if plan.bic_mechanism == "gaussian" else math.sqrt(2.0)
    return cfg.hh_min_count * plan.bic_scale[lv] * per_node * math.sqrt(L_T)


def _level_width(cfg: EngineConfig, lv: int) -> int:
    return cfg.buckets * (1 + cfg.id_bits(lv)) * cfg.n_reps


def bucket_ranges(cfg: EngineConfig) -> List[Tuple[int, int]]:
    """The S = ``cfg.bucket_shards`` contiguous bucket ranges [j0, j1) of a (tree, level), public."""
    w, n = cfg.buckets, cfg.bucket_shards
    return [(s * w // n, (s + 1) * w // n) for s in range(n)]


def level_segments(cfg: EngineConfig, q: int, lv: int, offset: int = 0, shard: Optional[int] = None):
    """The noise-key segments ``[(subkey, start, stop)]`` of (tree, level) — of its bucket shard ``shard``
    alone if given — laid out from ``offset`` in the order of the level's counter vector (repetition, then
    bucket). One key per (tree, level) when S = 1; per (tree, level, repetition, shard) otherwise."""
    width, n = 1 + cfg.id_bits(lv), cfg.bucket_shards
    if n == 1:
        return [((q, lv), offset, offset + _level_width(cfg, lv))]
    ranges = bucket_ranges(cfg)
    out, off = [], offset
    for r in range(cfg.n_reps):
        for s in (range(n) if shard is None else (shard,)):
            size = (ranges[s][1] - ranges[s][0]) * width
            out.append(((q, lv, "bucket_shard", r, s, n), off, off + size))
            off += size
    return out


def shard_of_update(cfg: EngineConfig, lv: int, u: np.ndarray, shard: int) -> np.ndarray:
    """Bucket shard ``shard``'s part of a (tree, level) counter update (its buckets' rows, every repetition)."""
    if cfg.bucket_shards == 1:
        return u
    w, width = cfg.buckets, 1 + cfg.id_bits(lv)
    j0, j1 = bucket_ranges(cfg)[shard]
    return u.reshape(cfg.n_reps, w, width)[:, j0:j1].ravel()


def level_update(cfg: EngineConfig, grids: ShiftedGrids, x: np.ndarray, q: int, lv: int) -> np.ndarray:
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
                  tau_min: float, shard: int = 0) -> LevelReport:
    """Decode the released counters of a (tree, level) — ``released`` of any number of buckets
    per repetition (the level's w, or a bucket shard's): decoding is bucket by bucket."""
    width = 1 + cfg.id_bits(lv)
    found, totals = [], []
    for r, rel in enumerate(released.reshape(cfg.n_reps, -1, width)):
        totals.append(float(rel[:, 0].sum()))
        bits, passed, _, _ = decode_buckets(rel, cfg.hh_alpha, tau_min)
        if passed.any():
            found.append((r, grids.decode(bits[passed], lv)))
    return LevelReport(q, lv, found, totals, shard)


def merge_shard_reports(cfg: EngineConfig, reports: List[LevelReport]) -> List[LevelReport]:
    """Reports of (tree, level, bucket shard) keys, any order → one report per (tree, level), as its
    unsharded counter would decode it: ids in bucket order (shards ascending), totals summed (integer-
    valued floats: the sums are exact)."""
    by_level = {}
    for rep in reports:
        by_level.setdefault((rep.q, rep.level), []).append(rep)
    out = []
    for (q, lv), parts in sorted(by_level.items()):
        parts.sort(key=lambda r: r.shard)
        if [p.shard for p in parts] != list(range(cfg.bucket_shards)):
            raise ValueError(f"(tree, level) ({q}, {lv}) needs one report per bucket shard 0..{cfg.bucket_shards - 1}, "
                             f"got shards {[p.shard for p in parts]}")
        if len(parts) == 1:
            out.append(parts[0])
            continue
        ids = {}
        for p in parts:
            for r, a in p.found:
                ids.setdefault(r, []).append(a)
        found = [(r, np.concatenate(ids[r])) for r in sorted(ids)]
        totals = [float(sum(p.totals[r] for p in parts)) for r in range(cfg.n_reps)]
        out.append(LevelReport(q, lv, found, totals, 0))
    return out


class BicriteriaLevel:
    """One (tree, level) of Alg. 2 — or one bucket shard of it — with its own binary mechanism (the
    Beam job's BicriteriaCenters key): draws exactly the noise of its segments of
    :class:`BicriteriaDPCenters`' vectorised counter."""

    def __init__(self, cfg: EngineConfig, plan: PrivacyPlan, noise: NoiseSource, q: int, lv: int,
                 shard: int = 0):
        self.cfg, self.q, self.lv = cfg, int(q), int(lv)
        if not 0 <= int(shard) < cfg.bucket_shards:
            raise ValueError(f"shard must be in [0, bucket_shards = {cfg.bucket_shards}), got {shard!r}")
        self.shard = int(shard)
        self.grids = ShiftedGrids(cfg, noise)
        segments = level_segments(cfg, q, lv, shard=self.shard)
        self.counter = BinaryMechanism(segments[-1][2], cfg.horizon_ticks, noise, (BicriteriaDPCenters.COMPONENT,),
                                       plan.bic_mechanism, plan.bic_scale[lv], segments=segments)
        self.tau_min = _tau_min(cfg, plan, lv)

    def update(self, x_centered: np.ndarray):
        """This key's counter update for a set of (clipped, centred) points; None for no points.
        Updates of parts of a tick add up: ``update(a) + update(b) == update(a ∪ b)``."""
        if not len(x_centered):
            return None
        return shard_of_update(self.cfg, self.lv, level_update(self.cfg, self.grids, x_centered, self.q, self.lv),
                               self.shard)

    def step_update(self, u) -> LevelReport:
        """Advance one tick with the tick's summed update (None: ⊥, an empty tick)."""
        return _level_report(self.cfg, self.grids, self.counter.step(u), self.q, self.lv, self.tau_min, self.shard)

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

    def absorb_shards(self, reports: List[LevelReport]):
        """One tick's reports of all Q·(L+1)·S (tree, level, bucket shard) keys, any order → :meth:`absorb`."""
        n = self.cfg.n_trees * self.cfg.grid_levels * self.cfg.bucket_shards
        if len(reports) != n:
            raise ValueError(f"a tick needs the reports of all {n} (tree, level, bucket shard) keys, got {len(reports)}")
        return self.absorb(merge_shard_reports(self.cfg, reports))

    def absorb(self, reports: List[LevelReport]):
        """One tick's reports of all Q·(L+1) levels (whole levels) → (new centers, count estimate)."""
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
                                       segments=[seg for q, lv, a, _ in self.levels
                                                 for seg in level_segments(cfg, q, lv, a)])
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
            u[a:a + n] = level_update(self.cfg, self.grids, x, q, lv)
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
