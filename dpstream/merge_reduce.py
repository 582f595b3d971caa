"""DP-Merge-Reduce (Alg. 4) for every ring of one epoch.

Per ring i: points wait in a level-0 block P_0 (:mod:`dpstream.blocks`: exactly what A
reads, never an approximate summary — P7); LevelZero-AboveThreshold
(Alg. 5) decides at every tick whether P_0 holds ≈ M points; then A releases P_0 — its
parts (ring i, center f) for *every* f of the epoch's center set — and the result is
merged into a binary-counter stack of levels reduced with black box B.

Block j of ring i in epoch e is opened with the tree directions of key ("A", e, i) (shared by
the ring's blocks) and released under the key ("A", e, i, j), exactly once: a fire or the flush of
an epoch change or the horizon. The flush sends every ring's pending block through A — every part,
empty ones included — so no point is lost and each point still enters exactly one A call (P6, P9).
With ``part_fire`` (P23) a second sparse vector per (ring, part) also releases a ring's block when
one of its parts piles up; a ring still releases at most once per tick. Each ring is a separate
state machine (:class:`RingMergeReduce`), so a Beam stage can hold one ring per key and draw the
same noise.
"""
from __future__ import annotations

from typing import List, Optional

import numpy as np

from . import rules
from .coresets import sensitivity_sample
from .noise import NoiseSource
from .params import EngineConfig
from .privacy import PrivacyPlan
from .rings import assign_parts
from .semicoresets import Semicoreset, WeightedSet
from .sparse_vector import LevelZeroAboveThreshold


class RingMergeReduce:
    """DP-Merge-Reduce (Alg. 4) of one (epoch, ring): its open block and its levels (the sparse
    vector of every ring of the epoch is stepped together by :class:`EpochMergeReduce`)."""

    count_at_release = 0.0  # (class default: a ring pickled before ``cells_gate``)

    def __init__(self, cfg: EngineConfig, noise: NoiseSource, A: Semicoreset, epoch: int, ring: int,
                 centers: np.ndarray, count0: Optional[float] = 0.0):
        self.cfg, self.noise, self.A = cfg, noise, A
        self.epoch, self.ring = int(epoch), int(ring)
        # the DP count estimate at the ring's last release (at first: when its epoch started), so that
        # count − count_at_release estimates the stream's points since then, an upper bound on the ring's open
        # block (cells_gate; the ring's own count is not released)
        self.count_at_release = 0.0 if count0 is None else float(count0)
        self.centers = np.asarray(centers, dtype=float)
        self.radii = np.full(self.centers.shape[0], float(cfg.ring_radius(ring)))
        self.j = 0  # blocks released so far
        self.last_release = 0  # tick of the last release (0: none yet)
        # the tree's directions are keyed by (epoch, ring), not by block: every block of a ring shares
        # them (data-independent either way), so whoever sketches a ring's points — a Beam shard — needs
        # only the epoch's public centers and radii, never the ring's fire history
        self.V = A.directions(("A", self.epoch, self.ring))
        self.block = self._open()
        self.levels: List[Optional[WeightedSet]] = []
        self.z = cfg.z

    def _key(self):
        return ("A", self.epoch, self.ring, self.j)

    def _open(self):
        return self.A.open_block(self.centers, self.radii, ("A", self.epoch, self.ring), directions=self.V)

    def add(self, x: np.ndarray, f: np.ndarray) -> None:
        self.block.add(x, f)

    def release_block(self, tick: int, count: Optional[float] = None) -> None:
        """A on the open block (a fire or a flush), then merge-reduce; a new block opens. ``count``: tick
        ``tick``'s DP count estimate (None: the run has none)."""
        n_hat = None if count is None else float(count) - self.count_at_release
        out = self.A.release(self.block, self._key(), n_hat)
        if count is not None:
            self.count_at_release = float(count)
        self._insert(WeightedSet(out.points, out.weights.astype(float), np.full(len(out), -1)), tick)
        self.last_release = tick
        self.j += 1
        self.block = self._open()

    def _insert(self, S: WeightedSet, tick: int) -> None:
        lv = self.levels
        j = 0
        while j < len(lv) and lv[j] is not None:
            S = reduce(self.cfg, self.noise, WeightedSet.concat([lv[j], S], self.cfg.dim),
                       ("B", self.epoch, self.ring, tick, j), self.z)
            lv[j] = None
            j += 1
        if j == len(lv):
            lv.append(None)
        lv[j] = S

    def released(self) -> WeightedSet:
        return WeightedSet.concat([s for s in self.levels if s is not None], self.cfg.dim)

    def state_floats(self) -> int:
        d = self.cfg.dim
        return self.block.state_floats() + sum(len(s) * (d + 1) for s in self.levels if s is not None)

    # -- Beam state: the ring's data without the run's shared objects (config, noise source, A)
    _SHARED = ("cfg", "noise", "A")

    def state(self) -> dict:
        """The ring's own data (open block, levels, counters, directions): what a Beam key keeps."""
        return {k: v for k, v in self.__dict__.items() if k not in self._SHARED}

    @classmethod
    def from_state(cls, state: dict, cfg: EngineConfig, noise: NoiseSource, A: Semicoreset) -> "RingMergeReduce":
        ring = cls.__new__(cls)
        ring.__dict__.update(state)
        ring.cfg, ring.noise, ring.A = cfg, noise, A
        return ring


def reduce(cfg: EngineConfig, noise: NoiseSource, S: WeightedSet, key, z: int = 2) -> WeightedSet:
    """Black box B on a weighted set of DP outputs (post-processing), to at most s_B points."""
    if len(S) <= cfg.s_b:
        return S
    p, w = sensitivity_sample(S.points, S.weights, cfg.s_b, cfg.n_clusters, noise.generator(key), z)
    return WeightedSet(p, w, np.full(p.shape[0], -1))


class EpochMergeReduce:
    """Every ring of one epoch: the rings' sparse vectors (vectorised over rings) and their
    :class:`RingMergeReduce` states."""

    # (class defaults: an epoch pickled before the part sparse vector steps and releases as it did)
    psvt = None
    part_fires = 0
    part_shares = None

    def __init__(self, cfg: EngineConfig, plan: PrivacyPlan, noise: NoiseSource, A: Semicoreset, epoch: int,
                 centers: np.ndarray, block_size: int, count0: Optional[float] = 0.0,
                 release: Optional[WeightedSet] = None):
        """``release``: the release coreset the epoch's centers were drawn from (``part_fire_rate`` reads its
        weight per (ring, part); None: no rate term)."""
        self.cfg, self.plan, self.noise, self.A = cfg, plan, noise, A
        self.epoch = epoch
        self.centers = np.asarray(centers, dtype=float)
        I = cfg.n_rings
        self.block_size = int(block_size)
        self.svt = LevelZeroAboveThreshold(I, self.block_size, plan.svt_scale, noise, ("svt", epoch))
        self.psvt = part_svt(cfg, plan, noise, epoch, self.centers.shape[0], self.block_size)
        self.part_fires = 0  # releases the part sparse vector caused (a ring fire on the same tick: not counted)
        self.part_shares = None  # W: the release's weight share per (ring, part) (``part_fire_rate``)
        if self.psvt is not None and cfg.part_fire_rate and release is not None and len(release):
            P = self.centers.shape[0]
            r, f = assign_parts(release.points, self.centers, cfg.ring_base, I, cfg.ring_ratio, cfg.ring_tolerance)
            w = np.bincount(r * P + f, weights=np.maximum(release.weights, 0.0), minlength=I * P)
            if w.sum() > 0:
                self.part_shares = (w / w.sum()).reshape(I, P)
        self.rings = [RingMergeReduce(cfg, noise, A, epoch, i, self.centers, count0) for i in range(I)]
        self.version = 0
        self.fires = 0

    # -- per tick ---------------------------------------------------------------
    def step(self, tick: int, x: np.ndarray, ring: np.ndarray, f: np.ndarray, count: Optional[float] = None
             ) -> np.ndarray:
        I = self.cfg.n_rings
        if len(x):
            order = np.argsort(ring, kind="stable")
            rs = ring[order]
            bounds = np.searchsorted(rs, np.arange(I + 1))
            for i in np.flatnonzero(np.diff(bounds)):  # loop over rings, not points
                sel = order[bounds[i]:bounds[i + 1]]
                self.rings[i].add(x[sel], f[sel])
        arrivals = np.bincount(ring, minlength=I) if len(x) else np.zeros(I, dtype=np.int64)
        if self.psvt is None:
            fired = self.svt.step(tick, arrivals)
        else:  # P23: a ring releases when its count or one of its parts' passes; once a tick either way
            P = self.centers.shape[0]
            cells = (np.bincount(ring * P + f, minlength=I * P) if len(x) else np.zeros(I * P, dtype=np.int64))
            fired, part_only = fire_and_restart(self.svt, self.psvt, tick, arrivals, cells, self._raise_by(count),
                                                rules.part_fire_open(tick, self.cfg.horizon_ticks))
            self.part_fires += int(part_only.sum())
        for i in np.flatnonzero(fired):
            self.rings[i].release_block(tick, count)
        if fired.any():
            self.fires += 1
            self.version += 1
        return fired

    def _raise_by(self, count: Optional[float]) -> Optional[np.ndarray]:
        """``part_fire_rate``: how far the rate term lifts each (ring, part)'s threshold this tick (None: not at
        all). n̂_i, the DP count since ring i's last release, is the one ``cells_gate`` reads."""
        if self.part_shares is None or count is None:
            return None
        n_hat = float(count) - np.array([r.count_at_release for r in self.rings])
        rate = rules.part_fire_rate_threshold(self.cfg.part_fire_rate, self.part_shares, n_hat,
                                              self.plan.part_svt_scale).ravel()
        return np.maximum(rate - self.psvt.threshold, 0.0)

    def flush(self, tick: int, count: Optional[float] = None) -> None:
        """Release every ring's open block — except a ring that fired at this very tick, whose new
        block is empty by construction (a function of its ⊤ output): a ring releases at most once
        per tick, which is what A's run-wide threshold counts with."""
        flushed = np.array([r.last_release != tick for r in self.rings])
        for r in self.rings:
            if r.last_release != tick:
                r.release_block(tick, count)
        if self.psvt is not None:
            flush_restart(self.psvt, tick, flushed)
        self.fires += 1
        self.version += 1

    # -- release ------------------------------------------------------------------
    def released(self) -> WeightedSet:
        return WeightedSet.concat([r.released() for r in self.rings], self.cfg.dim)

    def buffered(self) -> int:
        return sum(r.block.n for r in self.rings)

    def state_floats(self) -> int:
        return (sum(r.state_floats() for r in self.rings) + self.svt.state_floats() + self.centers.size
                + (self.psvt.state_floats() if self.psvt is not None else 0)
                + (self.part_shares.size if self.part_shares is not None else 0))


def fire_and_restart(svt: LevelZeroAboveThreshold, psvt: LevelZeroAboveThreshold, tick: int, arrivals: np.ndarray,
                     cells: np.ndarray, raise_by: Optional[np.ndarray] = None, part_open: bool = True) -> tuple:
    """One tick of ``part_fire`` (P23) for rings and their parts, the engine's (every ring) and a Beam key's (one
    ring: ``svt`` and ``psvt`` hold its instances): ``arrivals`` per ring, ``cells`` per (ring, part). A ring
    releases when its count or one of its parts' passes — once a tick either way — and then its ring and part
    instances all restart. ``part_open`` False (a public tick: :func:`dpstream.rules.part_fire_open`): the part
    instances are not tested, only restarted with their ring. Returns (fired, part_only) per ring; part_only:
    released by a part's test alone."""
    ring_fired = svt.test(tick, arrivals)
    if part_open:
        part_fired = psvt.test(tick, cells, raise_by).reshape(ring_fired.size, -1).any(axis=1)
    else:
        part_fired = np.zeros_like(ring_fired)
    fired = ring_fired | part_fired
    svt.restart(tick, fired)
    psvt.restart(tick, np.repeat(fired, psvt.count.size // fired.size))
    return fired, part_fired & ~ring_fired


def flush_restart(psvt: LevelZeroAboveThreshold, tick: int, flushed: np.ndarray) -> None:
    """The flush of tick ``tick`` (P23): the part instances of the rings in ``flushed`` (those the flush released,
    so their pending blocks are empty) restart, under the tick's second restart key."""
    flushed = np.asarray(flushed, dtype=bool)
    psvt.restart(tick, np.repeat(flushed, psvt.count.size // flushed.size), ("flush",))


def part_svt(cfg: EngineConfig, plan: PrivacyPlan, noise: NoiseSource, epoch: int, n_parts: int, block_size: int,
             ring: Optional[int] = None) -> Optional[LevelZeroAboveThreshold]:
    """The part sparse vector of an epoch (``part_fire``, P23; None when off): one LevelZero-AboveThreshold
    instance per (ring, part), instance i·P + f, thresholds from :func:`dpstream.rules.part_fire_threshold`,
    raised at each test since a restart by ``rules.PART_FIRE_TEST_GROWTH`` (the class's ``growth``).
    With ``ring`` = i, only ring i's P instances (a Beam key per ring), the same draws."""
    if not cfg.part_fire:
        return None
    I, P = cfg.n_rings, int(n_parts)
    thr = np.tile(rules.part_fire_threshold(cfg.part_fire, block_size, P, plan.part_svt_scale), I)
    span = None if ring is None else (ring * P, (ring + 1) * P)
    return LevelZeroAboveThreshold(I * P, thr, plan.part_svt_scale, noise, ("part-svt", epoch), span=span,
                                   growth=rules.PART_FIRE_TEST_GROWTH)
