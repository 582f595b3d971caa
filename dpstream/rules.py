"""Public rules: the defaults that are derived rather than fixed (functions of public parameters and of the plan's noise scales only).

Every rule here is a function of public parameters — k, d, ε, δ, the horizon T, the
neighbouring relation and the algorithm constants — and of noise scales the privacy plan
derives from them. None reads data, so a rule's value can be printed, logged and written
into a release. Each default was chosen by measurement (``benchmarks/``); an explicit value
of the corresponding ``EngineConfig`` field always wins.
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np


def bicriteria(semicoreset: str) -> bool:
    """Run BicriteriaDPCenters (Alg. 2)? Measured: off is as good or better on every data set (the
    rings around the previously released centers do its work, and its share of ε goes to A);
    on for ``snap``, the paper's baseline that snaps every part to the bicriteria centers."""
    return semicoreset == "snap"


def tree_depth(k: int, d: int) -> int:
    """D, the depth of A's hyperplane tree. Low dimensions need deep trees to separate clusters
    at the first epochs (cones around one center; measured 2.9 → 1.06 on blobs from D = 6 to 12);
    high dimensions separate by direction with few hyperplanes, and every level costs one more
    noisy count per record and doubles the leaf sketch."""
    if d <= 4:  # D central hyperplanes in R^d cut only O(D^(d-1)) cones: depth buys slivers
        return 6
    if d <= 16:
        return 12
    # in high dimension random hyperplanes separate clusters by direction (their means are nearly
    # orthogonal): the first epoch's single part needs ~log2(k) levels plus a margin (measured on
    # gmm100, k = 64: D = 6 → 5.8, D = 9 → 4.1, D = 11 → 3.5; at k = 10, D = 6–9 are within noise)
    return max(6, math.ceil(math.log2(max(k, 2))) + 3)


def coreset_size(k: int, d: int) -> int:
    """s_B, the size of black box B's samples (every reduce and the release's coreset). 50·k points
    hold a separated mixture (blobs 1.005 at ε = 4); in low dimension, where the data is a continuum
    (image colours) and the k-means cost is flat, a 50·k sample of the run's coreset is what caps the
    release: china at ε = 1e6 gives 1.070 from the released 500-point sample and 1.008 from the whole
    coreset, and 400·k measured 1.100 → 1.027 at ε = 4 (median of 3 seeds; flower.jpg, not tuned
    on: 1.075 → 1.033). A refit of 400·k points at d ≤ 4 costs what 50·k do at d ≈ 30."""
    return 400 * k if d <= 4 else 50 * k


def first_epoch_blocks(k: int, d: int) -> float:
    """How many blocks (of M points) the first epoch's DP count must reach before the first epoch
    change. Its rings are the ball's alone, so it must resolve the clusters by itself: in high
    dimension a whole block lets the tree branch log2(k) levels (M = k·θ_branch), which the deep
    tree above needs; in low dimension, where the first epoch's cones separate clusters badly,
    short epochs (a quarter block) — more Lloyd-like re-centerings early — measured better."""
    return 1.0 if d > 16 else 0.25


def count_share(k: int, d: int, semicoreset: str) -> float:
    """φ, the part of A's budget spent on counts (the rest on sums). A leaf mean's noise grows as
    √d·σ_sum, so high dimensions give the sums more (measured at d ≥ 64: φ = 0.2–0.3 beat 0.5 on
    every embedding-like set; at d ≤ 16 the split hardly matters)."""
    return 0.5 if d <= 16 else 0.25


# ``part_fire`` (P23): the part sparse vector's share of the sparse vector's ε (the ring one keeps the rest).
# Two thirds: a part's threshold (C·M/P, part_fire_threshold) is a fraction of the ring's M, so the
# part instances need the smaller noise (M's floor reads the whole ε_svt: block_size). Measured
# (benchmarks/results/tail_flush.md, C = 3): at one half, shuffled gmm100 lost 2.893 → 3.236 to part fires;
# at two thirds 2.893; at one third the part instances fired on noise (blobs 10⁴: 333 part fires in 5 seeds
# at C = 2).
PART_SVT_SHARE = 2.0 / 3.0


def block_size(cfg, plan, leaf_threshold: float) -> int:
    """M, the level-0 block size: c_M·k leaves of the release's keep threshold θ_k (so a block can
    hold k clusters whose every leaf passes), and enough that the sparse vector's noise cannot fire
    a block at a fraction of it: M ≥ 4·b_svt·ln T with b_svt the SVT's Laplace scale — with the sparse
    vector's whole ε (the plan's ``svt_floor_scale``): with ``part_fire`` the ring sparse vector keeps a
    third of it and the part one releases blocks at a fraction of M by design, and a floor three times
    higher held blobs 10⁴'s blocks at 5,990 points instead of 2,352 (with a declared end 1.199 → 1.423,
    no part fire involved)."""
    b_svt = plan.svt_floor_scale if plan.svt_floor_scale is not None else plan.svt_scale
    svt_floor = 4.0 * b_svt * math.log(max(cfg.horizon_ticks, 2))
    m = max(svt_floor, cfg.block_leaves * cfg.n_clusters * leaf_threshold)
    return int(min(max(m, 1.0), 2 ** 31))


def part_fire_threshold(factor: float, block_size: int, n_parts: int, scale: float = 0.0) -> np.ndarray:
    """The part sparse vector's threshold (``part_fire`` = C, P23): a ring's block is released once one of
    its P parts (one ring center each) holds about C·M/P pending points — C times a part's share of a
    block that spreads evenly over the parts. A stream in cluster order piles a new cluster into one or
    two parts and reaches it long before the ring's count reaches M; a shuffled stream spreads each block
    over every part and reaches M first. Public quantities only (C, the block size M, P, the part sparse
    vector's Laplace scale); one threshold per part (a length-P array), so a rule that tells the parts apart
    by public values can take its place.
    (Measured against C·c_M·k·θ_k/P, the block's leaf term without M's floor: the same where the leaf term
    sets M, and many more part fires where the floor does — flower, d = 3, 1.029 → 1.246.)

    Never below :func:`part_fire_noise_floor` (``scale`` > 0): where C·M/P is a few Laplace scales (many
    parts, a small M: low dimensions and large k, a short horizon, a small ``block_size``) the P instances
    of a ring would fire on noise alone nearly every tick, and each such fire sends the ring's few pending
    points through A as a block too small to release a leaf."""
    thr = float(factor) * float(block_size) / max(int(n_parts), 1)
    if scale > 0:
        thr = max(thr, part_fire_noise_floor(int(n_parts), scale))
    return np.full(int(n_parts), thr)


# the share of a run, at its end, where the part sparse vector is no longer tested (``part_fire_open``)
PART_FIRE_LAST_SHARE = 0.25


def part_fire_open(tick: int, horizon_ticks: int) -> bool:
    """Whether the part sparse vector is tested at ``tick`` (P23): not in the run's last PART_FIRE_LAST_SHARE.
    The horizon's flush, at most T/4 ticks away there, releases every pending block whole; a part fire would
    cut one in two smaller blocks, whose leaves fall under A's thresholds sooner (measured under the exact
    horizon, 5 seeds: gmm100 2.493 → 2.294, one fire in three seeds of five; blobs 10⁴ in cluster order
    1.583 → 1.504; benchmarks/results/tail_flush.md). A function of the tick and T: public, and fewer queries."""
    return tick <= (1.0 - PART_FIRE_LAST_SHARE) * horizon_ticks


# how rarely noise alone may release a ring's block through its part instances: once in this many ticks
PART_FIRE_NOISE_TICKS = 40.0

# ``part_fire``'s raise per test (P23, ``LevelZeroAboveThreshold``'s ``growth``): a part instance's threshold at its
# j-th test since its restart is raised by this times b_part·ln j, half the largest query noise j tests are
# expected to draw. Without it the part instances fire sooner, in points, the finer the ticks: a generator whose
# clusters appear one by one (d = 16, 40,000 points) fired at a median of 262 points (threshold 926) in ticks of
# 100 rows and 931 in ticks of 1,000, and its final release cost 1.261 against 1.084 without part fires; with
# 0.5, 1.142 (benchmarks/results/tail_flush.md, version 10). A full raise (1.0) made the fires tick-size blind
# but cost the low-dimensional images (flower 1.023 → 1.046, china's exact horizon 1.074 → 1.092).
PART_FIRE_TEST_GROWTH = 0.5


def part_fire_noise_floor(n_parts: int, scale: float) -> float:
    """z·b: the part threshold at which a ring's P instances, each tested at every tick with no points, fire on
    noise alone at rate 1/PART_FIRE_NOISE_TICKS per tick: P·e^{−z}(2 + z)/4 = 1/N (an instance's chance,
    threshold and query noise both Lap(b), is P(ν − ρ ≥ z·b) = e^{−z}(2 + z)/4). Solved by fixed point."""
    target = 4.0 / (PART_FIRE_NOISE_TICKS * max(int(n_parts), 1))  # e^{−z}(2 + z) at the floor
    z = -math.log(target)
    for _ in range(20):
        z = math.log((2.0 + z) / target)
    return z * float(scale)


# the rate term's margin over the part sparse vector's noise, in Laplace scales (``part_fire_rate``): at 8
# (864 points at ε = 1, b_part = 108) it rose above blobs 10⁴'s uniform threshold (748) and missed its new
# clusters in order (1.541 → 4.953); at 5, 1.541
PART_FIRE_MARGIN = 5.0


def part_fire_rate_threshold(rate: float, shares: np.ndarray, n_hat: np.ndarray, scale: float) -> np.ndarray:
    """The rate term of the part threshold (``part_fire_rate`` = C2 > 0): C2·W_ij·n̂_i + Z·b_part per (ring i,
    part j), the part threshold being the larger of it and :func:`part_fire_threshold`. W_ij: the share of the
    release coreset's weight (the release the epoch's rings were drawn from) that falls in cell (i, j) under
    the stream's own assignment; n̂_i: the DP count of the stream's points since ring i's last release; so
    C2·W_ij·n̂_i is C2 times what the cell would hold if the stream kept the release's shape, and a stream in
    raster order (an image's rows), whose cells fill as the release says they should, does not fire them,
    while a new cluster lands in cells the release never saw (W ≈ 0). Z = :data:`PART_FIRE_MARGIN`, b_part
    the part sparse vector's scale. Public values only: released weights, a released count, the plan."""
    n = np.maximum(np.asarray(n_hat, dtype=float), 0.0)
    return float(rate) * np.asarray(shares, dtype=float) * n[:, None] + PART_FIRE_MARGIN * float(scale)


def max_epochs(horizon_ticks: int) -> int:
    """E_max = ⌊log2 T⌋ + 2: the most epochs one run of the "horizon" schedule opens (a public cap on
    its DP-count-driven adoptions: a stream whose count doubles no faster than the tick index never
    reaches it). It bounds the per-epoch stages of the Beam job: one copy per epoch index."""
    return int(math.floor(math.log2(max(int(horizon_ticks), 1)))) + 2


def flush_tick(t: int, last_flush: int, schedule: str, count: Optional[float] = None, last_count: float = 0.0,
               min_count: float = 0.0, growth: float = 0.5, first_count: float = 0.0) -> bool:
    """Is tick t a scheduled flush, every ring's pending block released through A without an epoch
    change? A function of the tick index and of the last flush tick (itself a function of public
    ticks and DP counts: the epoch changes), never of a buffer's size.

    ``"dyadic"``: at a power of two t whenever nothing flushed at a tick ≥ t/2 — at 4, 16, 64, … when
    nothing else flushes — so a release at tick t reflects more than the first t/4 ticks even when the
    horizon T is far off: ``partial_fit``'s default T = 1,024 on a stream whose DP count never opens
    a second epoch would otherwise release tick 1's points alone (digits: every release the ball's
    center). Flushing at every power of two instead cuts the blocks the epoch changes already close
    into small ones, whose leaves fall under A's thresholds (measured on blobs 1e4, median of 9
    seeds: 3.56 against 2.44; with this rule 2.44, the epoch changes cover every power of four).
    ``"first"`` (the default): the first flush only. Both flush first at tick 1 (the first release is a DP
    estimate) or, with ``first_count``, at the first tick whose DP count reaches it. A
    flush closes each ring's block once, so a point still enters exactly one block.

    Why ``"first"`` stays the default: an early flush cannot know whether the stream goes on, and when
    it does, the flushed blocks are fragments of the block a fire would have released. On gmm100
    (k = 64, d = 100, M ≈ 39k points: the first epoch changes at tick 39) the flushes at ticks 4 and 16
    cut that first epoch into blocks of 3k and 12k points, 3.28 → 5.90 (default horizon, 3 seeds);
    at tick 16 that stream and digits (1,797 points, never a fire: 4.52 → 1.88 with ``"dyadic"``) are
    indistinguishable from their DP counts.

    ``"count"``: when the stream's DP count estimate ``count`` (already released: the stream counter's
    or the bicriteria's) has grown since the last flush by ``growth`` times its value ``last_count``
    there, and by at least ``min_count`` points — a release then reflects at least 1/(1 + growth) of
    what the DP count says arrived, and the flushed blocks grow with the stream (never fragments of
    a fixed size: O(log n / log(1 + growth)) flushes in all). A function of released DP counts and
    public parameters only (post-processing).

    ``first_count`` > 0 (``first_flush_leaves`` keep thresholds θ_k of A, a public number): before any
    flush, every schedule flushes at the first tick whose DP count estimate reaches it, not at tick 1. A
    first block of fewer points than θ_k releases nothing (every leaf is under the keep threshold, so
    its weights are zeroed), and those points, which enter A once, would be lost to every later
    release: emb784 at ε = 0.5 (θ_k ≈ 1,600 points, ticks of 1,000) released the ball's center until
    its first epoch change at tick ~33 (2.70× the prefix's optimum), and 2.3× from tick 2 with this rule.
    Without a DP count (no stream counter nor bicriteria) tick 1 flushes, as with ``first_count`` = 0."""
    t = int(t)
    if first_count > 0 and int(last_flush) == 0 and count is not None:
        return float(count) >= float(first_count)
    if t == 1:
        return True
    if schedule == "count":
        if count is None:
            return False
        c0 = max(float(last_count), 0.0)
        return float(count) - c0 >= max(float(min_count), float(growth) * c0)
    return schedule == "dyadic" and t & (t - 1) == 0 and 2 * int(last_flush) < t


# ``fit(X)`` on a short high-dimensional input runs A's cells, gated per block (docs/choosing-parameters.md,
# "fit on a short high-dimensional input"). fit's position clock makes n public (P1) and the whole input is
# in memory, so the cells' raw pending block costs no more than the input. Measured (ε = 1, exact horizon,
# end at the last tick, 5 seeds; benchmarks/results/cells_default.md): emb784's first 10⁴ / 3·10⁴ / 5·10⁴
# points 1.879 → 1.349 / 1.700 → 1.119 / 1.201 → 1.078, emb256's first 10⁴ / 3·10⁴ 1.719 → 1.264 /
# 1.224 → 1.134, pix784's first 10⁴ 1.531 → 1.464; the same releases on digits (d = 64) and on gmm100's
# first 10⁴ points. At d = 64 the cells lost (emb64's first 10⁴ points 1.268 → 1.328 with the gate's bound at
# 2 or 3), hence the dimension bound; at the bound 1.5 emb256's first 10⁴ points kept the plain tree.
SHORT_FIT_MAX_POINTS = 50_000
SHORT_FIT_MIN_DIM = 65
SHORT_FIT_CELLS = dict(tree_cells=0.69, cells_locate_dims=32, cells_lloyd_steps=4, cells_lloyd_share=0.206,
                       tree_depth=9, count_share=0.25, cells_count_share=0.03, cells_overseed=2, cells_reseed=0.25,
                       tree_keep_factor=1.0, cells_gate=0.75, cells_gate_max=3.0)


def short_fit_options(n: int, d: int, semicoreset: str, user_options) -> dict:
    """The options ``fit`` adds for an input of n rows and d columns (public under fit's clock): A's cells,
    gated per block (``SHORT_FIT_CELLS``), when n ≤ ``SHORT_FIT_MAX_POINTS``, d ≥ ``SHORT_FIT_MIN_DIM``, A is
    the tree and the user set none of those options nor a privacy unit (the cells need records as the unit).
    Otherwise none: ``partial_fit`` and the Beam job never see n in advance and run the defaults."""
    user = set(user_options)
    if (n > SHORT_FIT_MAX_POINTS or d < SHORT_FIT_MIN_DIM or getattr(semicoreset, "value", semicoreset) != "tree"
            or user & set(SHORT_FIT_CELLS) or user_options.get("max_contributions") is not None):
        return {}
    return dict(SHORT_FIT_CELLS)
