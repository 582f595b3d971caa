"""The groups of :class:`~dpstream.params.EngineConfig`: frozen dataclasses, one per part of the algorithm.

Each group holds its parameters **as given** (validated and normalised: integers are ``int``, the
choices :mod:`dpstream.choices` members, ``None`` still means "the public rule"); the values the rules
fill in live in :class:`Derived`, built once by :func:`derive`. A group's field has the name of the flat
keyword (``cfg.budget.epsilon`` is ``cfg.epsilon``; the shorthands of the four rule-filled ones, bicriteria,
tree_depth, first_epoch_blocks and count_share, read the effective value in ``cfg.derived``). Groups are
built by ``EngineConfig``, which checks them together (the center against ``dim``, the shards against the
buckets, …).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import FrozenSet, Optional, Tuple

from . import rules
from .choices import (Contribution, EpochSchedule, FlushSchedule, Objective, Relation, ReleaseDecayRule,
                      RingCenters, RootTail, Semicoreset, objective_exponent)


@dataclass(frozen=True)
class Problem:
    """What is clustered.

    Attributes:
      n_clusters: k, the number of centers released.
      dim: d, the points' dimension.
      radius: Λ, a public bound on ‖x − center‖ (the data's own units); points outside are clipped onto
        the ball B(center, Λ).
      center: the ball's center, ``dim`` numbers (None: the origin).
      objective: k-means or k-median (:class:`~dpstream.choices.Objective`).
    """
    n_clusters: int
    dim: int
    radius: float
    center: Optional[Tuple[float, ...]] = None
    objective: Objective = Objective.KMEANS


@dataclass(frozen=True)
class Budget:
    """The privacy budget of one run and how it is split.

    Attributes:
      epsilon: the run's total ε (every tick of every mechanism); ``math.inf`` zeroes every noise
        scale (the benchmarks' non-private limit).
      delta: the run's total δ; > 0 gives Gaussian noise composed in one privacy-loss distribution,
        0 pure ε-DP.
      neighbouring: the relation protected (P1): ``replace_one`` for a position clock such as fixed-size
        chunks, ``add_remove`` for event-time ticks.
      privacy_split: weights of (bicriteria, sparse vector, A, stream count), normalised to 4 floats
        (3 given: no stream counter). A weight whose mechanism does not run is unused: the bicriteria's
        without it, the stream counter's with it (its counters give the DP count estimate).
    """
    epsilon: float
    delta: float = 1e-6
    neighbouring: Relation = Relation.REPLACE_ONE
    privacy_split: Tuple[float, ...] = (0.1, 0.05, 0.83, 0.02)


@dataclass(frozen=True)
class Stream:
    """Ticks and runs (:mod:`dpstream.runs`).

    Attributes:
      horizon_ticks: T, ticks of one run; the engine releases at ticks 1..T and refuses tick T+1 (P3).
      runs: consecutive runs of T ticks, each with fresh mechanisms, noise keys and budget (parallel
        composition over their disjoint records); None = unbounded, 1 = one run.
      window_runs: W, every release also carries centers for the last W closed runs and the current
        one, from their released coresets; 0 = all runs.
    """
    horizon_ticks: int = 1024
    runs: Optional[int] = 1
    window_runs: int = 1


@dataclass(frozen=True)
class PrivacyUnit:
    """The unit of privacy (:mod:`dpstream.contributions`). With ``max_contributions`` set every
    sensitivity of the plan is L times the one-record one (the stream counter's under replace_one also
    ×2 in ℓ1: a replaced unit's points may move ticks), the total is the basic sum, and the plan
    protects one unit; None protects one record.

    Attributes:
      max_contributions: L, records (or tick means) one unit keeps per run; None = one record is the unit.
      max_contributions_per_tick: ℓ ≤ L, records one unit keeps per tick (None: L).
      contribution: ``records`` (a unit's first ℓ records of a tick, first L of a run) or ``tick_mean``
        (one mean point per tick, for its first L ticks).
      privacy_unit: the id field's name, for the ledger.
    """
    max_contributions: Optional[int] = None
    max_contributions_per_tick: Optional[int] = None
    contribution: Contribution = Contribution.RECORDS
    privacy_unit: str = "privacy_id"


@dataclass(frozen=True)
class BicriteriaParams:
    """BicriteriaDPCenters (Alg. 2/3): DP heavy-hitter cells over shifted grids. (Not named
    ``bicriteria``: that is the flat switch ``cfg.bicriteria``.)

    Attributes:
      bicriteria: run it? None = the public rule (:func:`dpstream.rules.bicriteria`: on for ``snap``
        only); the effective value is ``cfg.derived.bicriteria``.
      n_trees: Q, independent shifted grids.
      grid_levels: L+1 levels; level ℓ's cell side is 2Λ/2^ℓ.
      n_reps: R, independent bucket hashes per (tree, level), each with its own w buckets and counters.
      n_buckets: w, hash buckets per (tree, level) (None: 4k, ``cfg.derived.buckets``).
      hh_alpha: the bit decoder's dominance threshold, in (0.5, 1).
      hh_min_count: τ_min, in units of the counter's noise std at the horizon.
      bucket_shards: S, each (tree, level)'s w buckets cut into S contiguous ranges whose counter noise is
        drawn under its own key (the Beam job holds them on S keys); the noise distribution and the plan
        are the same for every S, the draws differ.
    """
    bicriteria: Optional[bool] = None
    n_trees: int = 1
    grid_levels: int = 6
    n_reps: int = 1
    n_buckets: Optional[int] = None
    hh_alpha: float = 0.6
    hh_min_count: float = 3.0
    bucket_shards: int = 1


@dataclass(frozen=True)
class MergeReduce:
    """Rings, blocks and epochs (Alg. 4/5), and the release.

    Attributes:
      n_rings: I+1 rings around each center; ring i ≥ 1 holds distances [r_0·ρ^(i-1), r_0·ρ^i),
        r_0 = 2Λ/ρ^I.
      ring_ratio: ρ, the ratio of consecutive ring radii.
      ring_tolerance: τ, the relative width of a band just past each ring's outer radius that still belongs
        to the ring, in [0, 1e-3]: data on a sphere around a center (unit-norm embeddings, points clipped to
        the ball) sits on a boundary, and float rounding alone would split it between two rings
        (:func:`dpstream.rings.ring_of`); 0 = exact boundaries. The default 1e-6 was measured on unit-norm
        embeddings (d = 784: 1.14 → 1.09 of the optimum with the exact horizon); data with no point on a
        boundary gives the same releases bit for bit.
      ring_centers: the centers the rings are drawn around (:class:`~dpstream.choices.RingCenters`).
      ring_center_factor: a new epoch's rings are drawn around a (factor·k)-means of the release's
        coreset (1: around its k centers).
      block_size: M, the level-0 block size (None: :func:`dpstream.rules.block_size`, block_leaves·k
        leaves of A's keep threshold).
      block_leaves: c_M in that rule.
      epoch_blocks: a ``horizon`` epoch changes once its DP count has doubled and reached this many
        blocks (M points).
      first_epoch_blocks: the same for the first epoch (None: :func:`dpstream.rules.first_epoch_blocks`;
        the effective value is ``cfg.derived.first_epoch_blocks``).
      epoch_schedule: when epochs change (:class:`~dpstream.choices.EpochSchedule`).
      flush_schedule: when pending blocks flush without an epoch change
        (:class:`~dpstream.choices.FlushSchedule`).
      coreset_size: s_B, black box B's sample size (None: :func:`dpstream.rules.coreset_size`,
        ``cfg.derived.s_b``).
      flush_growth: with the ``count`` flush schedule, rings flush once the DP count estimate has grown
        by this factor of its value at the last flush (> 0).
      flush_min_blocks: ... and by at least this many blocks (M points) since it (≥ 0).
      first_flush_leaves: under the horizon epoch schedule, the first flush (of any flush schedule; an epoch
        change or the final tick flushes regardless) waits for the first tick whose DP count estimate
        reaches this many of A's keep thresholds θ_k (≥ 0; 0, or a run without a DP count: tick 1,
        whatever it holds). A block
        below θ_k releases no leaf: flushed, its points would have had their one A call for nothing.
      release_epoch_decay: the release's k centers are fitted with each epoch's weights times this
        factor per epoch of age, in (0, 1]; the released coreset keeps its weights.
      release_decay_rule: which old points that decay applies to
        (:class:`~dpstream.choices.ReleaseDecayRule`); ``clusters`` spares an old epoch's points in the
        clusters (of a k-means fit of every released epoch) that the newer epochs no longer fill
        (:func:`dpstream.epochs.release_fit_sample`); the default ``drift`` does that and also spares every
        point of an old epoch that a permutation test says the newer epochs drifted away from
        (:mod:`dpstream.drift_decay`); ``stopped`` applies the clusters test to the first epoch too and as
        soon as the newer epochs have released enough points to tell (an option).
      release_min_points: an old epoch that released fewer than this many times k points leaves the
        release fit once a newer epoch released at least that many (default 1; 0: off; points a decay rule spares
        keep their weight; :func:`dpstream.epochs.release_fit_sample`, ``release_epoch_decay`` < 1 only).
      part_fire: C > 0 (3.5, the default; 0: off) runs the part sparse vector (P23): a ring's pending block is
        also released when one of its parts (one ring center) holds about
        :func:`dpstream.rules.part_fire_threshold` points (C·M/P, never below the threshold at which noise
        alone would fire the ring's parts more than rarely), tested at every tick but those of the run's last
        quarter by a LevelZero-AboveThreshold per (ring, part) that takes part of the sparse vector's budget.
        It releases the clusters of a stream in cluster order that would otherwise wait in open blocks.
      part_fire_rate: C2 > 0 (0, the default: off; needs ``part_fire``, a DP count estimate and
        ``ring_centers='bicriteria+released'``) raises a part's
        threshold to :func:`dpstream.rules.part_fire_rate_threshold` where that is larger: C2 times what the
        cell would hold if the stream kept the shape of the release the epoch's rings were drawn from. The
        engine only: the Beam job refuses it.
      release_cover_factor: with the ``covered`` rule, an old point decays when a newer epoch's point is
        within this many times the newer points' spacing (> 0).
    """
    n_rings: int = 12
    ring_ratio: float = 2.0
    ring_tolerance: float = 1e-6
    ring_centers: RingCenters = RingCenters.BICRITERIA_AND_RELEASED
    ring_center_factor: float = 1.0
    block_size: Optional[int] = None
    block_leaves: float = 2.0
    epoch_blocks: float = 0.25
    first_epoch_blocks: Optional[float] = None
    epoch_schedule: EpochSchedule = EpochSchedule.HORIZON
    flush_schedule: FlushSchedule = FlushSchedule.FIRST
    flush_growth: float = 0.5
    flush_min_blocks: float = 0.5
    first_flush_leaves: float = 1.0
    coreset_size: Optional[int] = None
    release_epoch_decay: float = 0.5
    release_decay_rule: ReleaseDecayRule = ReleaseDecayRule.DRIFT
    release_cover_factor: float = 3.0
    release_min_points: float = 1.0
    part_fire: float = 3.5
    part_fire_rate: float = 0.0


@dataclass(frozen=True)
class BlackBoxA:
    """Black box A, the DP semicoreset of a released block (:mod:`dpstream.semicoresets`).

    Attributes:
      semicoreset: which one (:class:`~dpstream.choices.Semicoreset`).
      tree_depth: D, the hyperplane tree's depth (None: :func:`dpstream.rules.tree_depth`; effective
        value ``cfg.derived.tree_depth``).
      tree_keep_factor: the keep threshold θ_k is at least this many times the sum noise's norm
        (√d·σ_sum), so a kept leaf's mean is not mostly noise.
      tree_branch_factor: a node branches past this many keep thresholds (at least 1).
      lloyd_iters: DP Lloyd steps (``lloyd``).
      count_share: φ, the part of A's budget spent on counts, the rest on sums (None:
        :func:`dpstream.rules.count_share`, 1 for ``snap``; effective value ``cfg.derived.count_share``).
      weight_beta: the phantom-mass threshold, in (0, 1).
      root_tail: how the root threshold's union bound is spread over the run's blocks
        (:class:`~dpstream.choices.RootTail`; ``block`` keeps a ring's first blocks from paying for a far
        horizon's).
      tree_cells: the share of A's budget, in [0, 1), spent on cells (``tree`` only; 0, the default: off).
        On, the tree's leaves only locate k centers per part (a k-means of their noisy means), every
        point of the block is labelled with its part's nearest, and A's output is one noisy mean and
        noisy count per (part, cell): a partition that follows the data instead of the hyperplanes
        (:mod:`dpstream.cells`). The block then keeps its raw points until A.
      cells_locate_dims: p with 0 < p < d (0, the default: off; p ≥ d: full d as well) locates the cells in a keyed public
        Gaussian projection to p dimensions (rows clipped to the unit ball there): the tree hashes and
        sums there, the k centers are fitted there, and each point takes its projected row's nearest
        center. The cells' sums stay d-dimensional. Needs ``tree_cells``.
      cells_lloyd_steps: L noisy Lloyd steps on the located centers before the cells' labelling (in the
        projection with ``cells_locate_dims``), with the share ``cells_lloyd_share`` of A's budget (both or
        neither; 0, the default: none). The tree keeps 1 − ``tree_cells`` − ``cells_lloyd_share``.
      cells_lloyd_share: see ``cells_lloyd_steps``.
      cells_overseed: r ≥ 1 (1, the default: off): the tree's leaves give r·k centers per part, the Lloyd
        steps move all of them, and a weighted k-means of them (weights: the last step's noisy counts, or
        the leaves' without steps) makes the k cells. Needs ``tree_cells``.
      cells_reseed: s > 0 (0, the default: off): after each Lloyd step but the last, a center whose noisy
        count is under the move threshold is moved beside its part's heaviest center, the two ± s × the
        live centers' median gap apart along a keyed public direction. Needs ``cells_lloyd_steps``.
      cells_count_share: the cells' own count share (0, the default: ``count_share``, as the tree's and
        the Lloyd steps'): their counts take this part of the cells' budget, their sums the rest.
      cells_gate: G > 0 (0, the default: off, every block gets the cells) chooses A's mode per block from
        public numbers and the DP count estimate: the cells when d > ``cells_locate_dims`` (when set) and
        the points the stream counter counted since the ring's last release reach G·(parts)·k·θ_k,
        else the plain tree with A's whole budget (P22). Needs ``tree_cells``.
      cells_gate_max: G_up > 0 (0, the default: no upper bound) bounds the gate from above: the cells only
        while the points counted since the ring's last release stay under G_up·(parts)·k·θ_tree, θ_tree the
        plain tree's keep threshold — a block that size gives the plain tree about k leaves per part or fewer,
        a larger one gives it more and the plain tree wins (P22). Needs ``cells_gate``.
    """
    semicoreset: Semicoreset = Semicoreset.TREE
    tree_depth: Optional[int] = None
    tree_keep_factor: float = 3.0
    tree_branch_factor: float = 2.0
    lloyd_iters: int = 3
    count_share: Optional[float] = None
    weight_beta: float = 0.5
    root_tail: RootTail = RootTail.BLOCK
    tree_cells: float = 0.0
    cells_locate_dims: int = 0
    cells_lloyd_steps: int = 0
    cells_lloyd_share: float = 0.0
    cells_overseed: int = 1
    cells_reseed: float = 0.0
    cells_count_share: float = 0.0
    cells_gate: float = 0.0
    cells_gate_max: float = 0.0


@dataclass(frozen=True)
class Offline:
    """The offline clustering of released coresets (:mod:`dpstream.offline`).

    Attributes:
      n_init: k-means++ restarts of each fit (the release, the ring centers, the window of runs).
      sum_grid_bits: the semicoreset's sums are kept on a fixed-point grid of 2^bits per unit, in [4, 40].
    """
    n_init: int = 10
    sum_grid_bits: int = 20


@dataclass(frozen=True)
class Derived:
    """The values a public rule or a default fills in (:mod:`dpstream.rules`): functions of the groups
    alone, built once by :func:`derive`, never data. ``cfg.<name>`` reads them.

    Attributes:
      bicriteria: the bicriteria runs (given, or ``rules.bicriteria(semicoreset)``).
      tree_depth: A's tree depth D (given, or ``rules.tree_depth(k, d)``).
      first_epoch_blocks: the first epoch's blocks (given, or ``rules.first_epoch_blocks(k, d)``).
      count_share: φ (given, or ``rules.count_share(k, d, semicoreset)``; 1 for ``snap``).
      buckets: w (``n_buckets``, or 4k).
      s_b: B's sample size (``coreset_size``, or ``rules.coreset_size(k, d)``).
      unit_bound: points one privacy unit can place in one run after bounding, the factor every
        sensitivity of the plan is scaled by (L; 1 when one record is the unit).
      per_tick_bound: points one unit can place in one tick (ℓ; L when not given; 1 for tick means
        and for one record).
      z: the objective's exponent (:func:`~dpstream.choices.objective_exponent`).
      rule_filled: the names among bicriteria, tree_depth, first_epoch_blocks and count_share that a rule
        filled (given as None): ``EngineConfig.with_`` derives them again for the changed parameters.
    """
    bicriteria: bool
    tree_depth: int
    first_epoch_blocks: float
    count_share: float
    buckets: int
    s_b: int
    unit_bound: int
    per_tick_bound: int
    z: int
    rule_filled: FrozenSet[str]


def derive(problem: Problem, unit: PrivacyUnit, bic: BicriteriaParams, mr: MergeReduce,
           a: BlackBoxA) -> Derived:
    """Every rule-filled value of a configuration, from its groups (public parameters only)."""
    k, d = problem.n_clusters, problem.dim
    filled = set()

    def rule(name: str, given, make):
        if given is None:
            filled.add(name)
            return make()
        return given

    L = unit.max_contributions
    return Derived(
        bicriteria=rule("bicriteria", bic.bicriteria, lambda: rules.bicriteria(a.semicoreset)),
        tree_depth=rule("tree_depth", a.tree_depth, lambda: rules.tree_depth(k, d)),
        first_epoch_blocks=rule("first_epoch_blocks", mr.first_epoch_blocks, lambda: rules.first_epoch_blocks(k, d)),
        count_share=rule("count_share", a.count_share, lambda: 1.0 if a.semicoreset == Semicoreset.SNAP
                         else rules.count_share(k, d, a.semicoreset)),
        buckets=4 * k if bic.n_buckets is None else int(bic.n_buckets),
        s_b=rules.coreset_size(k, d) if mr.coreset_size is None else int(mr.coreset_size),
        unit_bound=1 if L is None else int(L),
        per_tick_bound=(1 if L is None or unit.contribution == Contribution.TICK_MEAN
                        else int(unit.max_contributions_per_tick or L)),
        z=objective_exponent(problem.objective),
        rule_filled=frozenset(filled))
