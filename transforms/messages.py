"""The messages between the clustering stages (``transforms/cluster.py`` wires them), one named type
per edge, so a stage dispatches on the type and reads fields by name. Every message is sent as
:func:`~transforms.stages.wire` makes it (its one pickle, as bytes) and is never changed once made; into
ShardTicks a partial batch travels as a plain ``(global tick, wire(partial_bytes(…)))``. Beam-free.

Edges (r = run, s = point shard, e = epoch index, i = ring, t = tick within the run, g = global tick):

====================  ======================================  =============================
message               from → to                               key
====================  ======================================  =============================
``(g, bytes)``        BatchIntoTicks → ShardTicks             s
:class:`StartClock`   the job's start → ShardTicks            s
:class:`ShardCounts`  ShardTicks → EpochPlan                  r
:class:`RegistryUpdates`  CenterRegistry → EpochPlan          r
:class:`ShardPoints`  ShardTicks → RouteByEpoch               (r, s)
:class:`ShardPlans`   EpochPlan → RouteByEpoch                (r, s)
:class:`RunPlans`     EpochPlan → ReleaseCoreset              one key
:class:`RoutedTicks`  RouteByEpoch → AssignRings[e]           (r, s)
:class:`RingCenters`  EpochClose[e − 1] → AssignRings[e]      (r, s)
:class:`RingParts`    AssignRings[e] → RingMergeReduce[e]     (r, i)
:class:`RingRecords`  RingMergeReduce[e] → ReleaseCoreset     one key
:class:`RingClosed`   RingMergeReduce[e] → EpochClose[e]      r
:class:`LevelUpdate`  LevelUpdates → BicriteriaCenters        (tree, level, bucket shard)
:class:`LevelReports` BicriteriaCenters → CenterRegistry      one key
====================  ======================================  =============================
"""
from __future__ import annotations

from typing import Any, List, NamedTuple, Optional, Tuple

import numpy as np


class StartClock(NamedTuple):
    """Arms a shard's first tick timer even if the shard never sees a point."""


class ShardCounts(NamedTuple):
    """A shard's point count of each tick just closed, ``[(t, n)]`` in tick order, every tick included."""
    shard: int
    counts: List[Tuple[int, int]]


class RegistryUpdates(NamedTuple):
    """The CenterRegistry's updates of a run, ``[(t, new centers, count)]`` (the bicriteria's F)."""
    updates: list


class ShardPoints(NamedTuple):
    """A shard's points of consecutive ticks, as read (``AssignRings`` clips them): ``counts`` ``[(t, n)]`` and the points, tick after
    tick, in one array."""
    counts: List[Tuple[int, int]]
    points: np.ndarray


class ShardPlans(NamedTuple):
    """The plans (:class:`dpstream.epochs.TickPlan`) of the ticks just planned, to every shard's router."""
    plans: list


class RunPlans(NamedTuple):
    """The same plans, with their run, to ReleaseCoreset."""
    run: int
    plans: list


class RingPlan(NamedTuple):
    """The part of a tick's plan the rings need (and F at an adoption tick)."""
    first: int
    flush: bool
    adopt: bool
    final: bool
    candidates: Optional[np.ndarray]
    count: Optional[float] = None  # the tick's DP count estimate and the epoch's at its start (cells_gate)
    count0: Optional[float] = 0.0

    @classmethod
    def of(cls, plan) -> "RingPlan":
        return cls(plan.first, plan.flush, plan.adopt, plan.final, plan.candidates, plan.count, plan.count0)


class TickPoints(NamedTuple):
    """One tick of :class:`RoutedTicks`: its tick, its number of points and its plan."""
    tick: int
    n: int
    plan: RingPlan


class RoutedTicks(NamedTuple):
    """A shard's ticks of one epoch: ``ticks`` in order, their points tick after tick in one array."""
    ticks: List[TickPoints]
    points: np.ndarray


class RingCenters(NamedTuple):
    """Epoch e's ring centers; to shard 0 also the closed epochs' coresets (ring 0 carries them on to
    ``EpochClose[e]``), to the other shards ``None``."""
    centers: np.ndarray
    coresets: Optional[list]


class PackedParts(NamedTuple):
    """A ring's partial sketches of consecutive ticks, one array per position of the partial (or a list
    where the ticks' arrays differ): ``epoch_stages.pack_parts``."""
    ticks: List[int]
    ns: List[int]
    plans: List[RingPlan]
    sizes: List[int]
    cols: list


class RingParts(NamedTuple):
    """A shard's partial sketches of one ring, with the centers they were assigned to; ``prev`` (ring 0
    of shard 0 only) the closed epochs' coresets."""
    shard: int
    centers: np.ndarray
    packed: PackedParts
    prev: Optional[list]


class RingTick(NamedTuple):
    """What ReleaseCoreset needs of a ring at one tick: whether it released, the levels that changed
    ``[(level, set)]`` (None if it did not release) and its number of levels."""
    tick: int
    changed: bool
    delta: Optional[list]
    n_levels: int


class RingRecords(NamedTuple):
    """A ring's records of the ticks it just processed."""
    run: int
    epoch: int
    ring: int
    ticks: List[RingTick]


class RingClosed(NamedTuple):
    """A ring's released set at its epoch's adoption tick, with F (the candidates); ring 0 adds the
    coresets of the epochs before (``prev``), the others ``None``."""
    ring: int
    tick: int
    released: Any
    candidates: Optional[np.ndarray]
    prev: Optional[list]


class LevelUpdate(NamedTuple):
    """A (tree, level, bucket shard)'s counter update from points of one tick (updates add up)."""
    tick: int
    update: np.ndarray


class LevelReports(NamedTuple):
    """A (tree, level, bucket shard)'s reports (:class:`dpstream.bicriteria.LevelReport`) of the ticks
    it just closed, ``[(tick, report)]``."""
    level: Tuple[int, int, int]
    reports: list
