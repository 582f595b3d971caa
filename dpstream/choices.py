"""The string choices of :class:`~dpstream.params.EngineConfig`, as ``enum.StrEnum`` members.

A member is the string it names (``Objective.KMEANS == "kmeans"``, ``json.dumps`` writes ``"kmeans"``,
a dict keyed by ``"kmeans"`` finds it), so code, messages and JSON that compare or print the plain
strings read the same; its ``repr`` is the string's too, so an error message that quotes a choice with
``!r`` reads as it did before the choices were enums.
"""
from __future__ import annotations

import enum


class _Choice(enum.StrEnum):
    def __repr__(self) -> str:
        return repr(self.value)


class Relation(_Choice):
    """The neighbouring relation the whole run is private for (docs/privacy.md)."""
    REPLACE_ONE = "replace_one"  # a position clock (fixed-size chunks): one record replaced in its slot
    ADD_REMOVE = "add_remove"    # event-time ticks: one record added or removed


class Objective(_Choice):
    KMEANS = "kmeans"    # cost Σ w·dist², z = 2
    KMEDIAN = "kmedian"  # cost Σ w·dist, z = 1


class Semicoreset(_Choice):
    """Black box A (:mod:`dpstream.semicoresets`)."""
    TREE = "tree"    # noisy counts and sums over a hyperplane tree's leaves
    LLOYD = "lloyd"  # DP Lloyd steps from the ring's centers
    SNAP = "snap"    # the paper's baseline: every point snapped to the bicriteria centers


class EpochSchedule(_Choice):
    HORIZON = "horizon"    # a new epoch once the epoch's DP count has doubled (and 2t ≤ T)
    DOUBLING = "doubling"  # a new epoch at every power of two
    EVERY = "every"        # a new epoch at every tick


class FlushSchedule(_Choice):
    """Ticks where every ring's pending block is released through A (:func:`dpstream.rules.flush_tick`)."""
    FIRST = "first"    # the first flush only (tick 1, or the first DP count that fills a leaf: first_flush_leaves)
    DYADIC = "dyadic"  # also at powers of two with no flush since t/2
    COUNT = "count"    # also once the DP count estimate has grown by flush_growth since the last flush


class RootTail(_Choice):
    """How A's root threshold spreads its union bound over a run's blocks (:mod:`dpstream.semicoresets`)."""
    BLOCK = "block"      # half by the block's index within its (epoch, ring), half over the T·I blocks alike
    HORIZON = "horizon"  # all over the T·I blocks alike


class ReleaseDecayRule(_Choice):
    """Where an old epoch's points lose weight in the release's fit (:mod:`dpstream.release_step`)."""
    AGE = "age"          # every old epoch's point, by its age
    COVERED = "covered"  # only where a newer epoch has points nearby
    CLUSTERS = "clusters"  # only in the clusters (of a k-means fit of every epoch) that newer epochs fill too
    STOPPED = "stopped"    # as clusters, also for the first epoch and young newer epochs, on a finer fit
    DRIFT = "drift"        # as stopped, where a permutation test says the whole old epoch drifted away


class RingCenters(_Choice):
    """The centers the rings of merge-reduce are drawn around."""
    BICRITERIA = "bicriteria"
    BICRITERIA_AND_RELEASED = "bicriteria+released"


class Contribution(_Choice):
    """What one privacy unit contributes (:mod:`dpstream.contributions`)."""
    RECORDS = "records"      # its first ℓ records of a tick and first L of a run
    TICK_MEAN = "tick_mean"  # one mean point per tick, for its first L ticks


def values(choice: type) -> tuple:
    """The choice's strings, in declaration order (what the error messages list)."""
    return tuple(m.value for m in choice)


RELATIONS = values(Relation)
OBJECTIVES = values(Objective)
SEMICORESETS = values(Semicoreset)
EPOCH_SCHEDULES = values(EpochSchedule)
FLUSH_SCHEDULES = values(FlushSchedule)
RING_CENTERS = values(RingCenters)
CONTRIBUTIONS = values(Contribution)
ROOT_TAILS = values(RootTail)
RELEASE_DECAY_RULES = values(ReleaseDecayRule)


def objective_exponent(objective: str) -> int:
    """The objective's exponent z in cost = Σ w·dist^z: 1 for k-median, 2 for k-means. Every sampler,
    reduction and fit of a run takes it from here (or from :attr:`EngineConfig.z`)."""
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {OBJECTIVES}, got {objective!r}")
    return 1 if objective == Objective.KMEDIAN else 2
