"""Validated public parameters of a run (chosen without looking at the data).

Everything here is fixed before any data is seen; nothing data-dependent may
choose it.  ``EngineConfig`` is the one object from which both the mechanisms
and the :class:`~dpstream.privacy.PrivacyPlan` derive their shapes and noise
scales, so a budget can never be split for a different configuration than the
one that runs (P9).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Optional, Tuple

import numpy as np

RELATIONS = ("replace_one", "add_remove")
OBJECTIVES = ("kmeans", "kmedian")
SEMICORESETS = ("tree", "lloyd", "snap")
EPOCH_SCHEDULES = ("horizon", "doubling", "every")
FLUSH_SCHEDULES = ("first", "dyadic")
RING_CENTERS = ("bicriteria", "bicriteria+released")
CONTRIBUTIONS = ("records", "tick_mean")
UNIT_FIELDS = ("max_contributions", "max_contributions_per_tick", "contribution", "privacy_unit")
# measured (docs/choosing-parameters.md): unit-norm embeddings at d = 784 1.14 -> 1.09 with the exact horizon,
# their first 10^4 points 2.13 -> 1.88; sets with no point on a ring boundary give the same releases, bit for bit
RING_TOLERANCE = 1e-6


def objective_exponent(objective: str) -> int:
    """The objective's exponent z in cost = Σ w·dist^z: 1 for k-median, 2 for k-means. Every sampler,
    reduction and fit of a run takes it from here (or from :attr:`EngineConfig.z`)."""
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {OBJECTIVES}, got {objective!r}")
    return 1 if objective == "kmedian" else 2


def _check(cond: bool, msg: str) -> None:
    if not cond:
        raise ValueError(msg)


def _is_whole(x) -> bool:
    """A finite number with an integer value (inf would overflow int())."""
    return _is_num(x) and math.isfinite(x) and int(x) == x


def _is_num(x) -> bool:
    return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, bool)


@dataclass(frozen=True)
class EngineConfig:
    """Public configuration of one DP streaming clustering run.

    Core:
      n_clusters (k), dim (d), radius (Λ: points are clipped to the ball
      B(center, Λ)), epsilon, delta, horizon_ticks (T: the engine releases at
      ticks 1..T and refuses tick T+1 — P3), neighbouring
      ("replace_one" for a position clock such as fixed-size chunks,
      "add_remove" for event-time ticks; P1).

    Runs (:mod:`dpstream.runs`): runs (consecutive runs of T ticks, each with fresh mechanisms,
    noise keys and budget — parallel composition over their disjoint records; None = unbounded,
    1 = one run: tick T+1 is refused), window_runs (W: every release also carries centers for the
    last W closed runs plus the current one, from their released coresets; 0 = all time).

    Bicriteria (Alg. 2/3): n_trees (Q), grid_levels (L+1 levels, cell side
    2Λ/2^ℓ), n_reps (R), n_buckets (w, default 4k), hh_alpha (the bit
    decoder's dominance threshold), hh_min_count (τ_min in units of the
    counter's noise std at horizon), bucket_shards (S: each (tree, level)'s w buckets are cut
    into S contiguous ranges whose counter noise is drawn under its own key, so the Beam job's
    BicriteriaCenters can hold them on S keys; the noise distribution and the privacy plan are
    the same for every S, the draws differ; 1 = one key per (tree, level)).

    Merge-reduce (Alg. 4/5): n_rings (I+1; the ring base r_0 = 2Λ/2^(I)),
    block_size (M; None = the public rule of :mod:`dpstream.rules`, block_leaves·k
    leaves of A's keep threshold), epoch_schedule ("horizon": a new epoch at tick t
    with 2t ≤ T once the epoch's DP count has doubled and reached epoch_blocks·M —
    first_epoch_blocks·M for the first (None = rule); "doubling"; "every"),
    coreset_size (s_B of black box B; None = the public rule of :mod:`dpstream.rules`),
    release_epoch_decay (the release's k centers are fitted to the run's coreset with each epoch's
    weights times this factor per epoch of age; 1 = every epoch alike; the released coreset keeps
    its weights either way).

    Black box A: semicoreset ("tree" | "lloyd" | "snap"), tree_depth (None = rule),
    tree_keep_factor, tree_branch_factor, lloyd_iters, count_share (the part
    of A's budget spent on counts; None = rule), weight_beta (phantom-mass threshold).

Unit of privacy (:mod:`dpstream.contributions`): max_contributions (L; None = one record is the
    unit), max_contributions_per_tick (ℓ ≤ L, default L), contribution ("records": a unit's first ℓ
    records of a tick and first L of a run; "tick_mean": one mean per tick for its first L ticks),
    privacy_unit (the id field's name, for the ledger). With L set every sensitivity of the plan is
    L times the one-record one (the stream counter's under replace_one also ×2 in ℓ1: a replaced
    unit's points may move ticks), the total is the basic sum, and the plan protects one unit.

    Budget: privacy_split = (bicriteria, sparse vector, A, stream count) weights
    (three weights: no stream counter). ``bicriteria=None`` is the public rule: off,
    chosen by measurement (the rings around the released centers do its work), except
    for the snap semicoreset, the paper's "snap to the bicriteria centers" baseline.
    Without it its weight is unused and the release's DP count estimate comes from the
    stream counter (a binary mechanism over the per-tick counts); with it the counter's
    weight is unused (the bicriteria's counters give the estimate).
    """

    n_clusters: int
    dim: int
    radius: float
    epsilon: float
    delta: float = 1e-6
    horizon_ticks: int = 1024
    runs: Optional[int] = 1
    window_runs: int = 1
    neighbouring: str = "replace_one"
    objective: str = "kmeans"
    semicoreset: str = "tree"
    center: Optional[Tuple[float, ...]] = None
    # bicriteria
    n_trees: int = 1
    grid_levels: int = 6
    n_reps: int = 1
    n_buckets: Optional[int] = None
    hh_alpha: float = 0.6
    hh_min_count: float = 3.0
    bucket_shards: int = 1
    bicriteria: Optional[bool] = None
    ring_centers: str = "bicriteria+released"
    # rings / merge-reduce
    n_rings: int = 12
    ring_ratio: float = 2.0
    # relative width of the band just past each ring's outer radius that still belongs to the ring: data on
    # a sphere around a center (unit-norm embeddings, points clipped to the ball) sits on a boundary, and
    # float rounding alone would split it between two rings (dpstream.rings.ring_of); 0 = exact boundaries
    ring_tolerance: float = RING_TOLERANCE
    block_size: Optional[int] = None
    block_leaves: float = 2.0
    epoch_blocks: float = 0.25
    first_epoch_blocks: Optional[float] = None
    ring_center_factor: float = 1.0
    epoch_schedule: str = "horizon"
    flush_schedule: str = "first"
    coreset_size: Optional[int] = None
    release_epoch_decay: float = 0.5
    # black box A
    tree_depth: Optional[int] = None
    tree_keep_factor: float = 3.0
    tree_branch_factor: float = 2.0
    lloyd_iters: int = 3
    count_share: Optional[float] = None
    weight_beta: float = 0.5
    # budget split (bicriteria, svt, A, stream count)
    privacy_split: Tuple[float, ...] = (0.1, 0.05, 0.83, 0.02)
    # offline clustering
    n_init: int = 3
    sum_grid_bits: int = 20
    # the unit of privacy (dpstream.contributions): None = one record; an integer L = one privacy unit
    # (a person, a device) with at most L records per run kept, at most max_contributions_per_tick of
    # them per tick (None: L), or with contribution="tick_mean" one mean point per tick (at most L ticks)
    max_contributions: Optional[int] = None
    max_contributions_per_tick: Optional[int] = None
    contribution: str = "records"
    privacy_unit: str = "privacy_id"

    def __post_init__(self):
        _check(_is_whole(self.n_clusters) and self.n_clusters >= 1,
               f"n_clusters must be an integer >= 1, got {self.n_clusters!r}")
        _check(_is_whole(self.dim) and self.dim >= 1,
               f"dim must be an integer >= 1, got {self.dim!r}")
        _check(_is_num(self.radius) and math.isfinite(self.radius) and self.radius > 0,
               f"radius must be a finite number > 0 (a public bound on the data's norm), got {self.radius!r}")
        _check(1e-100 <= self.radius <= 1e100,
               f"radius must be in [1e-100, 1e100] (rescale the data's units), got {self.radius!r}")
        _check(_is_num(self.epsilon) and self.epsilon > 0 and not math.isnan(self.epsilon),
               f"epsilon must be > 0 (use a large value such as 1e6 for a near non-private run), got {self.epsilon!r}")
        _check(self.epsilon >= 1e-6,
               f"epsilon must be >= 1e-6 (below that every release is noise), got {self.epsilon!r}")
        _check(_is_num(self.delta) and 0 <= self.delta < 1,
               f"delta must be in [0, 1), got {self.delta!r}")
        _check(_is_whole(self.horizon_ticks) and 1 <= self.horizon_ticks <= 2**40,
               f"horizon_ticks must be an integer in [1, 2^40], got {self.horizon_ticks!r}")
        _check(self.runs is None or (_is_whole(self.runs) and 1 <= self.runs <= 2**40),
               f"runs must be an integer >= 1 or None (unbounded), got {self.runs!r}")
        _check(_is_whole(self.window_runs) and 0 <= self.window_runs <= 10**6,
               f"window_runs must be an integer >= 0 (0: all runs), got {self.window_runs!r}")
        _check(self.neighbouring in RELATIONS, f"neighbouring must be one of {RELATIONS}, got {self.neighbouring!r}")
        _check(self.objective in OBJECTIVES, f"objective must be one of {OBJECTIVES}, got {self.objective!r}")
        _check(self.semicoreset in SEMICORESETS, f"semicoreset must be one of {SEMICORESETS}, got {self.semicoreset!r}")
        _check(self.ring_centers in RING_CENTERS, f"ring_centers must be one of {RING_CENTERS}, got {self.ring_centers!r}")
        _check(self.flush_schedule in FLUSH_SCHEDULES,
               f"flush_schedule must be one of {FLUSH_SCHEDULES}, got {self.flush_schedule!r}")
        _check(self.epoch_schedule in EPOCH_SCHEDULES,
               f"epoch_schedule must be one of {EPOCH_SCHEDULES}, got {self.epoch_schedule!r}")
        if self.center is not None:
            c = np.asarray(self.center, dtype=float)
            _check(c.shape == (self.dim,) and np.all(np.isfinite(c)),
                   f"center must be {self.dim} finite numbers (a public point), got shape {c.shape}")
        self._check_unit()
        from . import rules
        auto = set()
        if self.bicriteria is None:
            object.__setattr__(self, "bicriteria", rules.bicriteria(self.semicoreset))
            auto.add("bicriteria")
        _check(isinstance(self.bicriteria, (bool, np.bool_)), f"bicriteria must be True, False or None, got "
                                                               f"{self.bicriteria!r}")
        object.__setattr__(self, "bicriteria", bool(self.bicriteria))
        if self.tree_depth is None:
            object.__setattr__(self, "tree_depth", rules.tree_depth(self.n_clusters, self.dim))
            auto.add("tree_depth")
        if self.first_epoch_blocks is None:
            object.__setattr__(self, "first_epoch_blocks", rules.first_epoch_blocks(self.n_clusters, self.dim))
            auto.add("first_epoch_blocks")
        _check(_is_num(self.first_epoch_blocks) and math.isfinite(self.first_epoch_blocks)
               and self.first_epoch_blocks > 0, f"first_epoch_blocks must be a finite number > 0, got "
                                               f"{self.first_epoch_blocks!r}")
        if self.count_share is None:
            object.__setattr__(self, "count_share", rules.count_share(self.n_clusters, self.dim, self.semicoreset)
                               if self.semicoreset != "snap" else 1.0)
            auto.add("count_share")
        object.__setattr__(self, "_auto", frozenset(auto))
        if self.block_size is not None:
            _check(_is_whole(self.block_size) and self.block_size >= 1,
                   f"block_size must be an integer >= 1 or None (the public rule), got {self.block_size!r}")
        _check(_is_num(self.block_leaves) and math.isfinite(self.block_leaves) and self.block_leaves > 0,
               f"block_leaves must be a finite number > 0, got {self.block_leaves!r}")
        for name in ("n_trees", "grid_levels", "n_reps", "n_rings", "tree_depth",
                     "lloyd_iters", "n_init"):
            v = getattr(self, name)
            _check(_is_whole(v) and v >= 1, f"{name} must be an integer >= 1, got {v!r}")
        for name, cap in (("n_trees", 64), ("n_reps", 4096), ("lloyd_iters", 1000), ("n_init", 1000),
                          ("block_size", 2**31), ("n_clusters", 10**6), ("dim", 10**6)):
            if getattr(self, name) is None:
                continue
            _check(getattr(self, name) <= cap, f"{name} must be <= {cap}, got {getattr(self, name)!r}")
        _check(_is_num(self.ring_tolerance) and 0 <= self.ring_tolerance <= 1e-3,
               f"ring_tolerance must be a number in [0, 1e-3] (a relative band past each ring's radius), got "
               f"{self.ring_tolerance!r}")
        object.__setattr__(self, "ring_tolerance", float(self.ring_tolerance))
        _check(self.grid_levels <= 30, "grid_levels must be <= 30")
        _check(self.n_rings <= 60, "n_rings must be <= 60")
        _check(self.tree_depth <= 30, "tree_depth must be <= 30")
        if self.n_buckets is not None:
            _check(_is_whole(self.n_buckets) and 1 <= self.n_buckets <= 2**20,
                   "n_buckets must be an integer in [1, 2^20]")
        if self.coreset_size is not None:
            _check(_is_whole(self.coreset_size) and self.coreset_size >= self.n_clusters,
                   "coreset_size must be an integer >= n_clusters")
        _check(_is_whole(self.bucket_shards) and 1 <= self.bucket_shards <= self.buckets,
               f"bucket_shards must be an integer in [1, n_buckets = {self.buckets}] (each shard holds at least "
               f"one heavy-hitter bucket), got {self.bucket_shards!r}")
        _check(0.5 < self.hh_alpha < 1, f"hh_alpha must be in (0.5, 1), got {self.hh_alpha!r}")
        _check(self.hh_min_count >= 0, "hh_min_count must be >= 0")
        _check(_is_num(self.count_share) and 0 < self.count_share <= 1, "count_share must be in (0, 1]")
        _check(self.count_share < 1 or self.semicoreset == "snap",
               "count_share must be < 1 with the tree and lloyd semicoresets (their sums need a share)")
        _check(0 < self.weight_beta < 1, "weight_beta must be in (0, 1)")
        _check(_is_num(self.release_epoch_decay) and 0 < self.release_epoch_decay <= 1,
               f"release_epoch_decay must be in (0, 1], got {self.release_epoch_decay!r}")
        _check(self.tree_keep_factor > 0 and self.tree_branch_factor > 0, "tree factors must be > 0")
        _check(4 <= self.sum_grid_bits <= 40, "sum_grid_bits must be in [4, 40]")
        try:
            split = tuple(float(s) for s in self.privacy_split)
        except (TypeError, ValueError):
            split = ()
        _check(len(split) in (3, 4) and all(math.isfinite(s) and s >= 0 for s in split),
               "privacy_split must be 3 or 4 finite weights >= 0 (bicriteria, sparse vector, A[, stream count])")
        if len(split) == 3:
            split = split + (0.0,)
        _check(split[1] > 0 and split[2] > 0, "privacy_split needs a positive sparse-vector and A weight")
        _check(split[0] > 0 or not self.bicriteria, "privacy_split needs a positive bicriteria weight")
        object.__setattr__(self, "privacy_split", split)
        object.__setattr__(self, "radius", float(self.radius))
        object.__setattr__(self, "epsilon", float(self.epsilon))
        object.__setattr__(self, "delta", float(self.delta))
        if self.runs is not None:
            object.__setattr__(self, "runs", int(self.runs))
        object.__setattr__(self, "window_runs", int(self.window_runs))
        for name in ("n_clusters", "dim", "horizon_ticks", "n_trees", "grid_levels", "n_reps", "bucket_shards",
                     "n_rings", "tree_depth", "lloyd_iters", "n_init") + (("block_size",) if self.block_size is not None else ()):
            object.__setattr__(self, name, int(getattr(self, name)))

    def _check_unit(self) -> None:
        L, per_tick = self.max_contributions, self.max_contributions_per_tick
        _check(self.contribution in CONTRIBUTIONS,
               f"contribution must be one of {CONTRIBUTIONS}, got {self.contribution!r}")
        _check(isinstance(self.privacy_unit, str) and 0 < len(self.privacy_unit) <= 200,
               f"privacy_unit must be a non-empty name (of the id field), got {self.privacy_unit!r}")
        if L is None:
            _check(per_tick is None and self.contribution == "records",
                   "max_contributions_per_tick and contribution need max_contributions (the unit's bound L)")
            return
        _check(_is_whole(L) and 1 <= L <= 10**6, f"max_contributions must be an integer in [1, 10^6], got {L!r}")
        object.__setattr__(self, "max_contributions", int(L))
        if per_tick is not None:
            _check(_is_whole(per_tick) and 1 <= per_tick <= L,
                   f"max_contributions_per_tick must be an integer in [1, max_contributions = {L}], got {per_tick!r}")
            _check(self.contribution == "records", "max_contributions_per_tick bounds kept records; with "
                                                   "contribution='tick_mean' a unit has one point per tick")
            object.__setattr__(self, "max_contributions_per_tick", int(per_tick))

    @property
    def unit_bound(self) -> int:
        """How many points one privacy unit can place in one run after bounding: the factor every
        sensitivity of the plan is scaled by (1: one record is the unit)."""
        return 1 if self.max_contributions is None else int(self.max_contributions)

    @property
    def per_tick_bound(self) -> int:
        """Points one unit can place in one tick (ℓ): 1 for tick means, L when not given."""
        if self.max_contributions is None or self.contribution == "tick_mean":
            return 1
        return int(self.max_contributions_per_tick or self.max_contributions)

    # -- derived public quantities -----------------------------------------
    @property
    def z(self) -> int:
        """The objective's exponent (:func:`objective_exponent`)."""
        return objective_exponent(self.objective)

    @property
    def buckets(self) -> int:
        return int(self.n_buckets) if self.n_buckets is not None else 4 * self.n_clusters

    @property
    def s_b(self) -> int:
        from . import rules
        return int(self.coreset_size) if self.coreset_size is not None else rules.coreset_size(self.n_clusters,
                                                                                               self.dim)

    @property
    def center_vec(self) -> np.ndarray:
        return np.zeros(self.dim) if self.center is None else np.asarray(self.center, dtype=float)

    @property
    def replace(self) -> bool:
        return self.neighbouring == "replace_one"

    @property
    def counter_levels(self) -> int:
        """L_T = floor(log2 T) + 1: p-sums a tick lies in, for t <= T."""
        return int(math.floor(math.log2(self.horizon_ticks))) + 1

    def cell_side(self, level: int) -> float:
        return 2.0 * self.radius / 2.0**level

    def cell_offset(self, level: int) -> int:
        """-floor(-Λ/g): added to raw cell indices so ids are >= 0."""
        return -int(math.floor(-self.radius / self.cell_side(level)))

    def cell_values(self, level: int) -> int:
        """Values a coordinate's cell index can take (shift in [0, g_ℓ); P10)."""
        g = self.cell_side(level)
        return int(math.floor((self.radius + g) / g)) + self.cell_offset(level) + 1

    def cell_bits(self, level: int) -> int:
        return max(1, int(math.ceil(math.log2(self.cell_values(level)))))

    def id_bits(self, level: int) -> int:
        """B_ℓ = d·b_ℓ, the bits encoded per cell id."""
        return self.dim * self.cell_bits(level)

    @property
    def ring_base(self) -> float:
        """r_0: ring i (i >= 1) holds distances in [r_0 2^(i-1), r_0 2^i), each end times (1 + ring_tolerance)."""
        return 2.0 * self.radius / self.ring_ratio ** (self.n_rings - 1)

    def ring_radius(self, i) -> np.ndarray:
        return self.ring_base * np.power(self.ring_ratio, np.asarray(i, dtype=float))

    @property
    def count_counter(self) -> bool:
        """Is there a stream counter (the DP count estimate's own binary mechanism)? Not with the
        bicriteria, whose counters give the estimate for free (its weight is then unused)."""
        return self.privacy_split[3] > 0 and not self.bicriteria

    def with_(self, **kw) -> "EngineConfig":
        """A copy with some fields changed; fields set by a public rule are derived again."""
        for name in getattr(self, "_auto", ()):
            kw.setdefault(name, None)
        return replace(self, **kw)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["privacy_split"] = list(self.privacy_split)
        if self.max_contributions is None:  # record level: the same dict (and config hash) as before units
            for name in UNIT_FIELDS:
                d.pop(name)
        if self.ring_tolerance == RING_TOLERANCE:  # the default: the same dict (and config hash) as before the field
            d.pop("ring_tolerance")
        return d
