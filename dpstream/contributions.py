"""Contribution bounding: one privacy unit (a person, a device), not one record, as the unit of privacy.

Records carry a privacy id. Before any mechanism sees a tick, each unit's records are cut to what the
public bounds allow, by a rule that reads only that unit's own records and public parameters:

* ``contribution="records"``: a unit keeps its first ℓ records of a tick (by position within the
  tick) and, over the run, its first L records in tick order (L = ``max_contributions``,
  ℓ = ``max_contributions_per_tick``, default L). The rest are dropped.
* ``contribution="tick_mean"``: a unit contributes one point per tick, the mean of all its (clipped)
  records of the tick, for its first L ticks with records in the run. The mean lies in the ball (it
  is convex), so it is one point like any other. It takes the slot of the unit's first record of the
  tick.

Ticks are formed before bounding (by the caller's clock: the record's slot or its timestamp), and a
dropped record is ⊥ in its own slot, so no other record changes tick.

Neighbouring streams (the relation the plan is calibrated for, ``EngineConfig.neighbouring``):

* ``add_remove``: all records of one unit are added or removed (under a position clock, removed
  records leave ⊥ in their public slots);
* ``replace_one``: all records of one unit, in their public slots, are replaced by records of a unit
  that is not otherwise in the stream, or by ⊥.

Why the plan's sensitivities cover one unit (:mod:`dpstream.privacy` builds them). Bounding depends on
a unit's own records only, so no other unit's kept points change: the kept streams differ by the
removal of at most L points R and the addition of at most L points A (A empty under add/remove).
Under replace-one, A need not sit where R sat: the replacing unit holds the same public slots (or ⊥)
but keeps *its* first L records, so when its earlier slots are ⊥ its kept points lie in later ticks,
and anywhere in the ball, hence in other rings, leaves, buckets and parts. Every mechanism must
therefore allow R and A in two different instances. Each sees a nonnegative vector per point (counts,
id bits, a count per p-sum of the binary mechanism) or a sum of points in the unit ball; its input
moves by a − r with a, r ≥ 0 the parts of A and R that landed in it. Over all instances b of a family:

* ℓ2² (Gaussian counts and counters): Σ_b ‖a_b − r_b‖² ≤ Σ_b ‖a_b‖² + ‖r_b‖² ≤ (L·Δ₁)² + (L·Δ₁)²,
  Δ₁ the one-record add/remove ℓ2 sensitivity. The one-record replace-one plan already has Δ² = 2Δ₁²
  where a replaced record can move between two instances (A's parts, the bicriteria buckets), so there
  it is (L·Δ)². The stream counter is the exception: a replaced *record* keeps its tick, so its
  replace-one Δ is Δ₁ = √L_T; a replaced *unit* moves −|R| on tick a's p-sums and +|A| on tick b's,
  and Σ_nodes (a − r)² ≤ 2·L_T·L² (each point is in ≤ L_T p-sums, each p-sum holds ≤ L of R): the plan
  uses √(2·L_T)·L. (The exact worst case is |N(a) △ N(b)| ≤ 2·L_T − 1 nodes, e.g. 19 for T = 1000
  against 2·L_T = 20; tests/test_unit_privacy.py checks D and D′ built through this bounder.)
  Under add/remove only one side is there: (L·Δ₁)².
* ℓ2 of sums (A's sums): Σ_b ‖a_b − r_b‖ ≤ |A| + |R| ≤ 2L (L under add/remove): L times the plan's 2 (1).
* ℓ1 (discrete Laplace parts): the same sums with ℓ1 norms: L times the one-record ℓ1 sensitivity,
  and for the stream counter under replace-one 2·L_T·L (two partitions), not L_T·L.
* The sparse vector (pure ε, Lap(2Δ/ε_svt) on a monotone count): one segment of one ring's instance
  (up to its firing) whose count moves by c monotonically costs (c/Δ)·ε_svt with Δ the plan's
  sensitivity. Under add/remove only removals reach it: Σ c ≤ L = Δ, so at most ε_svt. Under
  replace-one (Δ = 2L) a segment may see both removals and later additions, which is not monotone; the
  stream passes through the version with the unit's slots ⊥ (remove R, then add A), each half
  costing at most (L/2L)·ε_svt, and pure ε composes along that chain: ε_svt for the pair.

So every sensitivity is L times the one-record one, and the stream counter's under replace-one also
×2 in ℓ1 (×√2 in ℓ2). The instances a unit's points reach are chosen adaptively (from earlier
releases). For the Gaussian parts the bound above holds for every output sequence, which is what fully
adaptive composition of Gaussian mechanisms needs (Smith & Thakurta 2022): together they are one
Gaussian whose ε at δ comes from its exact profile. The pure parts are ε-DP pointwise. A unit plan
composes the two by the basic sum (the Gaussian's ε at δ plus the pure ε), not by one privacy-loss
distribution of the mix: no result we can cite covers adaptive placement across both kinds in one PLD.
Calibrating for L points in one instance is exactly the worst case (a unit whose L records all land
in one tick, one leaf, one ring).

Ids are compared by Python equality (so 1, 1.0 and True are one unit): give each unit one id.

State: one int per unit seen in the open run (a dict from id to its count); the map is dropped when
the run ends. ``state_bytes()`` measures it.
"""
from __future__ import annotations

import sys
from itertools import repeat
from typing import Optional, Tuple

import numpy as np

from .params import EngineConfig
from .rings import clip_to_ball


def _ids_list(privacy_ids, n: int) -> list:
    if privacy_ids is None:
        raise ValueError("privacy_ids is None: with max_contributions set every record needs a privacy id")
    ids = privacy_ids.tolist() if isinstance(privacy_ids, np.ndarray) else list(privacy_ids)
    if len(ids) != n:
        raise ValueError(f"privacy_ids has {len(ids)} entries for {n} rows (one id per row)")
    try:
        uniq = list(dict.fromkeys(ids))  # first-appearance order; C-level hashing, no per-row bytecode
    except TypeError:
        raise ValueError("privacy ids must be hashable (strings, integers, tuples)") from None
    if any(u is None or (isinstance(u, float) and u != u) for u in uniq):
        raise ValueError("a privacy id is missing (None or NaN); drop or dead-letter such records first")
    return ids, uniq


def _codes(ids: list, uniq: list) -> np.ndarray:
    index = dict(zip(uniq, range(len(uniq))))
    return np.fromiter(map(index.__getitem__, ids), dtype=np.int64, count=len(ids))


def unit_keep(ticks: np.ndarray, L: int, per_tick: int, prior: int = 0) -> np.ndarray:
    """The rule for one unit's records of one run, in stream order (ticks ascending, then position):
    which are kept. Its first ``per_tick`` of each tick, then the first ``L − prior`` of those. The
    Beam job applies it per (run, unit) key; :class:`ContributionBounder` applies the same rule tick
    by tick (a test checks they agree)."""
    ticks = np.asarray(ticks)
    if ticks.size == 0:
        return np.zeros(0, dtype=bool)
    starts = np.flatnonzero(np.r_[True, ticks[1:] != ticks[:-1]])
    rank = np.arange(ticks.size) - np.repeat(starts, np.diff(np.r_[starts, ticks.size]))
    keep = rank < per_tick
    return keep & (np.cumsum(keep) + prior <= L)


def unit_tick_means(X: np.ndarray, ticks: np.ndarray, L: int, cfg: EngineConfig):
    """One unit's records of one run in stream order → (means of its first L ticks, index of each mean's
    first record): the job's side of ``contribution="tick_mean"``, the same arithmetic as the library's."""
    Xc, _ = clip_to_ball(np.asarray(X, dtype=float), cfg.center_vec, cfg.radius)
    ticks = np.asarray(ticks)
    if ticks.size == 0:
        return np.zeros((0, Xc.shape[1])), np.zeros(0, dtype=np.int64)
    starts = np.flatnonzero(np.r_[True, ticks[1:] != ticks[:-1]])
    sizes = np.diff(np.r_[starts, ticks.size])[:L]
    starts = starts[:L]
    means = np.add.reduceat(Xc[:starts[-1] + sizes[-1]], starts, axis=0) / sizes[:, None]
    return means, starts


def _unit_segments(codes: np.ndarray, ticks: np.ndarray):
    """Rows sorted by (unit, stream order): where each unit's rows start and where each (unit, tick) run starts."""
    n = codes.size
    new_unit = np.r_[True, codes[1:] != codes[:-1]]
    new_seg = new_unit | np.r_[True, ticks[1:] != ticks[:-1]]
    return new_unit, new_seg, np.arange(n)


def units_keep(codes: np.ndarray, ticks: np.ndarray, L: int, per_tick: int) -> np.ndarray:
    """:func:`unit_keep` for many units at once: rows sorted by (unit code, stream order); each unit's
    rows are decided exactly as :func:`unit_keep` decides them alone (a test checks it), so no unit's
    decision reads another's rows."""
    codes, ticks = np.asarray(codes), np.asarray(ticks)
    if codes.size == 0:
        return np.zeros(0, dtype=bool)
    new_unit, new_seg, idx = _unit_segments(codes, ticks)
    rank = idx - np.maximum.accumulate(np.where(new_seg, idx, 0))  # position within the unit's tick
    keep = rank < per_tick
    cs = np.cumsum(keep)
    before_unit = (cs - keep)[np.maximum.accumulate(np.where(new_unit, idx, 0))]  # kept before the unit's rows
    return keep & (cs - before_unit <= L)


def units_tick_means(X: np.ndarray, codes: np.ndarray, ticks: np.ndarray, L: int, cfg: EngineConfig):
    """:func:`unit_tick_means` for many units at once (rows sorted by (unit code, stream order)):
    ``(means, index of each mean's first row)``, each unit's first L ticks, the same arithmetic."""
    codes, ticks = np.asarray(codes), np.asarray(ticks)
    Xc, _ = clip_to_ball(np.asarray(X, dtype=float), cfg.center_vec, cfg.radius)
    if codes.size == 0:
        return np.zeros((0, Xc.shape[1])), np.zeros(0, dtype=np.int64)
    new_unit, new_seg, idx = _unit_segments(codes, ticks)
    starts = np.flatnonzero(new_seg)
    sizes = np.diff(np.r_[starts, codes.size])
    seg_no = np.arange(starts.size)
    first_seg = np.maximum.accumulate(np.where(new_unit[starts], seg_no, 0))
    keep = seg_no - first_seg < L  # the unit's first L ticks with rows
    means = np.add.reduceat(Xc, starts, axis=0) / sizes[:, None]
    return means[keep], starts[keep]


class ContributionBounder:
    """Per-run contribution bounds of :class:`~dpstream.params.EngineConfig` (``max_contributions``
    and friends), applied tick by tick: ``bound(X, ids) -> X'`` for the engine's next tick."""

    def __init__(self, cfg: EngineConfig):
        if cfg.max_contributions is None:
            raise ValueError("contribution bounding needs max_contributions")
        self.cfg = cfg
        self.L = cfg.max_contributions
        self.per_tick = cfg.per_tick_bound
        self.tick = 0  # the global index of the next tick (over all runs): one past the last one bounded
        self._run = 0  # the run whose bounds ``counts`` holds
        self.counts: dict = {}  # unit -> points kept in the open run (operator state, never released)
        self.n_dropped = 0  # operator telemetry
        self.n_clipped = 0  # operator telemetry (tick means: records clipped before averaging)

    @property
    def run(self) -> int:
        return self._run

    def bound(self, X: np.ndarray, privacy_ids, tick: Optional[int] = None) -> np.ndarray:
        """The rows of one tick that the bounds keep (records), or one mean per unit (tick means), in
        the order of the tick's rows (a unit's mean at its first row).

        ``tick``: the global 0-based index of this tick in the engine's clock (run = tick // T); the
        front end passes the engine's own count, so the bounds reset exactly when the engine starts a
        run, whatever calls failed before. None: the tick after the last one bounded here (a driver
        that feeds every bounded tick to the engine, as the tests do). Everything is checked before
        any state changes: a call that raises leaves the bounder as it was."""
        X = np.asarray(X, dtype=float)
        n = X.shape[0]
        tick = self.tick if tick is None else int(tick)
        if tick < 0:
            raise ValueError(f"tick must be >= 0, got {tick}")
        run = tick // self.cfg.horizon_ticks
        if run < self._run:
            raise ValueError(f"tick {tick} lies in run {run}, before the open run {self._run}: ticks only go forward")
        if n:
            ids, uniq = _ids_list(privacy_ids, n)
            codes = _codes(ids, uniq)
        # validated: from here on nothing raises on bad input
        if run != self._run:
            self.counts = {}  # a new run: fresh bounds, the old map is dropped
            self._run = run
        self.tick = tick + 1
        if n == 0:
            return X
        prior = np.fromiter(map(self.counts.get, uniq, repeat(0)), dtype=np.int64, count=len(uniq))
        if self.cfg.contribution == "tick_mean":
            out, new = self._tick_means(X, codes, prior, len(uniq))
        else:
            out, new = self._records(X, codes, prior, len(uniq))
        self.n_dropped += n - out.shape[0]
        self.counts.update(zip(uniq, new.tolist()))
        return out

    def _records(self, X, codes, prior, u) -> Tuple[np.ndarray, np.ndarray]:
        order = np.argsort(codes, kind="stable")
        sc = codes[order]
        starts = np.flatnonzero(np.r_[True, sc[1:] != sc[:-1]])
        sizes = np.diff(np.r_[starts, sc.size])
        rank_sorted = np.arange(sc.size) - np.repeat(starts, sizes)
        rank = np.empty_like(rank_sorted)
        rank[order] = rank_sorted  # position of a row among its unit's rows of the tick
        keep = (rank < self.per_tick) & (prior[codes] + rank < self.L)
        per_unit = np.bincount(codes, minlength=u)
        new = np.minimum(prior + np.minimum(per_unit, self.per_tick), self.L)
        return X[keep], new

    def _tick_means(self, X, codes, prior, u) -> Tuple[np.ndarray, np.ndarray]:
        Xc, nclip = clip_to_ball(X, self.cfg.center_vec, self.cfg.radius)
        self.n_clipped += nclip
        order = np.argsort(codes, kind="stable")
        starts = np.flatnonzero(np.r_[True, np.diff(codes[order]) != 0])  # one start per unit, in code order
        per_unit = np.diff(np.r_[starts, codes.size])
        means = np.add.reduceat(Xc[order], starts, axis=0) / per_unit[:, None]
        keep = prior < self.L  # units are in first-appearance order: their means sit at their first rows
        return means[keep], prior + keep

    def state_bytes(self) -> int:
        """Bytes of the unit map (the dict, its keys and counts; shared small ints and interned keys
        are counted too, so this is an upper bound)."""
        n = sys.getsizeof(self.counts)
        n += sum(sys.getsizeof(k) + sys.getsizeof(v) for k, v in self.counts.items())
        return int(n)
