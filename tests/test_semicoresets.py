"""Tests of dpstream.semicoresets (black box A; Theorem 7; P6, P11, P14, P10).

Each implementation is built the way the engine builds it: ``EngineConfig`` →
``PrivacyPlan.build(cfg)`` → ``make_semicoreset(cfg, plan, NoiseSource(seed))``.

Noise regimes used below:
* ε = 1e4, δ = 1e-6: the count noise is a rounded N(0, σ²) with σ < 0.07, which
  is 0 except with probability 2Φ(−0.5/0.07) < 1e-12 per draw, so weights are
  exact counts and accuracy is the algorithm's own;
* ε = 1, δ = 1e-6 (rounded Gaussian) and ε = 20, δ = 0 (discrete Laplace):
  noise of a few units to tens of units, where bounds are derived below.

Statistical checks are calibrated at ≤ 1e-5 each (4.5 standard errors, or a
p-value > 1e-5), at most ~10 per test.
"""
from __future__ import annotations

import functools
import math

import numpy as np
import pytest
from scipy import stats
from sklearn.cluster import KMeans

from dpstream.noise import NoiseSource
from dpstream.offline import cluster_coreset, cost
from dpstream.params import EngineConfig
from dpstream.privacy import PrivacyPlan
from dpstream.rings import nearest_center
from dpstream.semicoresets import LloydSemicoreset, SnapSemicoreset, TreeSemicoreset, make_semicoreset

KINDS = ["tree", "lloyd", "snap"]
EXACT = (1e4, 1e-6)
GAUSS = (1.0, 1e-6)
DLAP = (20.0, 0.0)
Z = 4.5
D = 2


@functools.lru_cache(maxsize=None)
def _cfg_plan(kind, eps, delta, **kw):
    cfg = EngineConfig(n_clusters=3, dim=D, radius=10.0, epsilon=eps, delta=delta, semicoreset=kind, **dict(kw))
    return cfg, PrivacyPlan.build(cfg)


def make_A(kind, eps, delta, seed, trace=False, **kw):
    cfg, plan = _cfg_plan(kind, eps, delta, **kw)
    src = NoiseSource(seed, trace=trace)
    A = make_semicoreset(cfg, plan, src)
    assert type(A) is {"tree": TreeSemicoreset, "lloyd": LloydSemicoreset, "snap": SnapSemicoreset}[kind]
    return A, src


# three blobs at distinct angles around a part's center, sd 0.06·r, inside B(c, r)
BLOB_DIRS = np.array([[0.45, 0.3], [-0.5, 0.2], [0.05, -0.55]])


def blobs_in_ball(rng, c, r, per_blob=1000, sd=0.06):
    X = np.vstack([c + r * (mu + sd * rng.normal(size=(per_blob, D))) for mu in BLOB_DIRS])
    return X[np.linalg.norm(X - c, axis=1) <= r]


PART_CENTERS = np.array([[3.0, -2.0], [-4.0, 4.0], [0.0, 0.0], [6.0, 6.0], [-6.0, -6.0], [2.0, 7.0]])
PART_RADII = np.array([2.0, 1.0, 0.5, 3.0, 1.5, 0.25])


def multi_part_block(rng, filled=(0, 1, 3, 4), per_blob=600):
    xs, ps = [], []
    for p in filled:
        X = blobs_in_ball(rng, PART_CENTERS[p], PART_RADII[p], per_blob)
        xs.append(X)
        ps.append(np.full(len(X), p))
    return np.vstack(xs), np.concatenate(ps).astype(np.int64)


class ScriptedNoise(NoiseSource):
    """A NoiseSource whose integer noise is 0 except where a script says otherwise (tests only)."""

    def __init__(self, seed, script):
        super().__init__(seed)
        self.script = script  # key suffix -> array of noise values

    def int_noise(self, key, size, mechanism, scale):
        key = tuple(key)
        for suffix, val in self.script.items():
            # the tree's draws end with their part index after the purpose
            if key[-len(suffix):] == suffix or (isinstance(key[-1], int) and key[-len(suffix) - 1:-1] == suffix):
                return np.broadcast_to(np.asarray(val, dtype=np.int64), size).copy()
        return np.zeros(size, dtype=np.int64)


def count_noise_pmf(plan, kmax=None):
    """pmf of one released count's integer noise, on −kmax..kmax."""
    s = plan.a_count_scale
    kmax = kmax or int(40 * s) + 10
    k = np.arange(-kmax, kmax + 1)
    if plan.a_mechanism == "gaussian":
        pmf = stats.norm.cdf((k + 0.5) / s) - stats.norm.cdf((k - 0.5) / s)
    else:
        q = math.exp(-1.0 / s)
        pmf = (1 - q) / (1 + q) * q ** np.abs(k)
    return k, pmf


def chernoff_sum_bound(values, probs, n, p_fail=1e-6):
    """a with P(Σ of n i.i.d. copies of V ≥ a) ≤ p_fail, V ≥ 0 with the given finite pmf:
    Chernoff, a = min_λ (n·log E[e^{λV}] + log(1/p_fail))/λ, over a grid of λ.  Exact MGF (no CLT),
    so it is valid for small n too."""
    values = np.asarray(values, dtype=float)
    probs = np.asarray(probs, dtype=float) / np.sum(probs)
    if n == 0:
        return 0.0
    vmax = max(values.max(), 1e-12)
    best = np.inf
    for lam in np.geomspace(1e-4, 50.0, 400) / vmax:
        log_m = np.log(np.sum(probs * np.exp(lam * (values - vmax)))) + lam * vmax
        best = min(best, (n * log_m + math.log(1.0 / p_fail)) / lam)
    return best


def n_count_draws(src):
    return sum(size * c for (key, size), c in src.keys.items() if "count" in key)


def assert_valid_output(out, centers, radii):
    """Integer weights > 0 (P11), every point inside its part's ball."""
    assert out.points.shape == (len(out), D) and out.weights.shape == (len(out),) and out.part.shape == (len(out),)
    if len(out):
        assert np.issubdtype(out.weights.dtype, np.integer), out.weights.dtype
    assert np.all(out.weights == np.round(out.weights)) and np.all(out.weights > 0)
    assert np.all((out.part >= 0) & (out.part < len(centers)))
    dist = np.linalg.norm(out.points - centers[out.part], axis=1)
    assert np.all(dist <= radii[out.part] * (1 + 1e-9))


# --------------------------------------------------------------------------- exact regime: weights and accuracy
@pytest.mark.parametrize("kind", KINDS)
def test_exact_regime_weights_are_the_true_counts(seed, kind):
    rng = np.random.default_rng(21)
    X, part = multi_part_block(rng)
    A, _ = make_A(kind, *EXACT, seed)
    out = A(X, part, PART_CENTERS, PART_RADII, ("A", 0, 1, "fire"))
    assert_valid_output(out, PART_CENTERS, PART_RADII)
    per_part_out = np.bincount(out.part, weights=out.weights, minlength=len(PART_CENTERS))
    np.testing.assert_array_equal(per_part_out, np.bincount(part, minlength=len(PART_CENTERS)))
    if kind == "snap":
        np.testing.assert_array_equal(out.points, PART_CENTERS[out.part])  # the 1-center baseline
        assert len(out) == 4


@pytest.mark.parametrize("key_i", range(3))
def test_tree_exact_regime_kmeans_cost_within_10_percent(seed, key_i):
    """k-means of the tree coreset, evaluated on the block, within 1.1 × OPT (OPT: best of sklearn
    KMeans with 10 restarts on the raw block, itself ≥ the true optimum)."""
    rng = np.random.default_rng(22 + key_i)
    c, r = np.array([3.0, -2.0]), 2.0
    X = blobs_in_ball(rng, c, r)
    opt = KMeans(3, n_init=10, random_state=0).fit(X).inertia_
    A, _ = make_A("tree", *EXACT, seed)
    out = A(X, np.zeros(len(X), dtype=np.int64), c[None], np.array([r]), ("A", key_i, 1, "fire"))
    C = cluster_coreset(out.points, out.weights, 3, "kmeans", np.random.default_rng(0), c, n_init=10)
    assert cost(X, C) <= 1.1 * opt, cost(X, C) / opt


def test_lloyd_exact_regime_is_lloyd_and_weights_are_voronoi_counts(seed):
    """Theorem 7: Y = {(c, |π⁻¹(c)|)} for Lloyd's output centers C.
      * With all integer noise scripted to 0 (same keyed init), one more iteration is one exact
        Lloyd step: the output with I+1 iterations is the set of means of the non-empty Voronoi
        cells of the output with I iterations, up to the 2^-20 quantisation of the sums
        (|err| ≤ r·2^-20 per coordinate).
      * In the exact regime (ε = 1e4, real plan noise) the weights equal the Voronoi counts of the
        output points, and the k-means cost ratio is ≤ 1.1 on the median of 21 keys.  A
        data-independent init can converge to a local optimum — DP-Lloyd's weakness, not an error
        of the implementation — measured on 51/400 keys (13%) for this block, so only the median
        is asserted: P(Bin(21, 0.13) ≥ 11) ≈ 2e-5 (≈ 1e-3 even at a 20% rate)."""
    rng = np.random.default_rng(23)
    c, r = np.array([3.0, -2.0]), 2.0
    X = blobs_in_ball(rng, c, r)
    part = np.zeros(len(X), dtype=np.int64)
    opt = KMeans(3, n_init=10, random_state=0).fit(X).inertia_
    ratios = []
    for i in range(21):
        key = ("A", i, 1, "fire")
        prev = None
        for iters in ((1, 2, 3) if i < 5 else ()):
            cfg, plan = _cfg_plan("lloyd", *EXACT, lloyd_iters=iters)
            out = LloydSemicoreset(cfg, plan, ScriptedNoise(seed, {}))(X, part, c[None], np.array([r]), key)
            lab, _ = nearest_center(X, out.points)
            np.testing.assert_array_equal(out.weights, np.bincount(lab, minlength=len(out)))
            if prev is not None:
                plab, _ = nearest_center(X, prev)
                nj = np.bincount(plab, minlength=len(prev))
                means = np.array([X[plab == j].mean(axis=0) for j in range(len(prev)) if nj[j] > 0])
                assert len(out) == len(means)
                for p in out.points:  # each new center is the mean of one old Voronoi cell
                    assert np.abs(means - p).max(axis=1).min() <= r * 2.0**-20 + 1e-12
            prev = out.points
        A, _ = make_A("lloyd", *EXACT, seed)
        out = A(X, part, c[None], np.array([r]), key)
        assert_valid_output(out, c[None], np.array([r]))
        lab, _ = nearest_center(X, out.points)
        np.testing.assert_array_equal(out.weights, np.bincount(lab, minlength=len(out)))
        ratios.append(cost(X, out.points) / opt)
    assert np.median(ratios) <= 1.1, ratios


# --------------------------------------------------------------------------- noisy regimes: derived weight bounds
@pytest.mark.parametrize("regime", [GAUSS, DLAP], ids=["gaussian", "discrete_laplace"])
@pytest.mark.parametrize("kind", KINDS)
def test_total_weight_within_derived_bound(seed, kind, regime):
    """W_out − n within bounds derived from the mechanism, on 5 independent keys.

    Released weights are noisy counts n_c + e_c of *disjoint* point sets (snap: parts; lloyd:
    Voronoi cells; tree: leaves), each released iff it is ≥ τ (tree: θ_k), else zeroed.  With N the
    number of count draws that can be released (from the trace) and e⁺ = max(e, 0):
      upper:  W − n ≤ Σ_released e_c ≤ Σ_all e⁺            (unreleased/lost points only lower W);
      lower:  n − W ≤ Σ_unreleased n_c + Σ_released e⁻ ≤ (N − #released)·τ + Σ_all |e|,
              since an unreleased set has n_c < τ − e_c ≤ τ + |e_c| (tree: a lost point lies in its
              first non-kept node, and leaves and non-kept nodes are disjoint).
    Sums of N i.i.d. e⁺ or |e| are bounded at failure probability 1e-6 each by a Chernoff bound with
    the exact pmf (valid for small N, where a CLT bound is not).  τ is the implementation's public
    threshold (checked in test_count_tail_bounds_the_phantom_rate)."""
    rng = np.random.default_rng(24)
    X, part = multi_part_block(rng)
    n = len(X)
    P = len(PART_CENTERS)
    for i in range(5):
        A, src = make_A(kind, *regime, seed, trace=True)
        out = A(X, part, PART_CENTERS, PART_RADII, ("A", i, 3, "fire"))
        assert_valid_output(out, PART_CENTERS, PART_RADII)
        k, pmf = count_noise_pmf(A.plan)
        if kind == "tree":
            N = n_count_draws(src)
            tau = max(A.count_tail(P), A.cfg.tree_keep_factor * A.sum_noise_norm())
        else:
            N = P * (A.cfg.n_clusters if kind == "lloyd" else 1)  # the last count round is the weights
            assert n_count_draws(src) == N * ((A.cfg.lloyd_iters + 1) if kind == "lloyd" else 1)
            tau = A.count_tail(N)
        W = out.weights.sum()
        upper = chernoff_sum_bound(np.maximum(k, 0), pmf, N)
        lower = (N - len(out)) * tau + chernoff_sum_bound(np.abs(k), pmf, N)
        assert -lower <= W - n <= upper, (kind, W - n, -lower, upper)


@pytest.mark.parametrize("regime", [GAUSS, DLAP], ids=["gaussian", "discrete_laplace"])
def test_snap_released_count_noise_has_the_plan_distribution(seed, chi2_gof, regime):
    """Snap releases n_p + e_p per part; over 400 keys × 4 filled parts (n_p ≥ 500 ≫ τ + max|e|, so
    never zeroed), e_p must follow the plan's integer noise exactly (Pearson chi-square, p > 1e-5).
    The 2 empty parts release only when e ≥ τ: their number of releases is ≤ the Binomial(#empty
    draws, P(e ≥ τ)) quantile at 1e-5 (exact pmf), and every such weight is ≥ τ."""
    rng = np.random.default_rng(25)
    X, part = multi_part_block(rng, per_blob=200)
    counts = np.bincount(part, minlength=len(PART_CENTERS))
    A, _ = make_A("snap", *regime, seed)
    tau = A.count_tail(len(PART_CENTERS))
    k, pmf = count_noise_pmf(A.plan)
    assert counts[counts > 0].min() > tau + k.max()
    errs, phantom = [], []
    n_keys = 400
    for i in range(n_keys):
        out = A(X, part, PART_CENTERS, PART_RADII, ("A", i, 7, "fire"))
        filled = counts[out.part] > 0
        errs.append(out.weights[filled] - counts[out.part[filled]])
        phantom.append(out.weights[~filled])
        assert filled.sum() == 4
    errs = np.concatenate(errs)
    obs = np.bincount(errs - k.min(), minlength=k.size)
    assert obs.size == k.size
    assert chi2_gof(obs, pmf / pmf.sum()) > 1e-5
    phantom = np.concatenate(phantom)
    p_pass = pmf[k >= tau].sum()
    assert phantom.size <= stats.binom.isf(1e-5, n_keys * 2, p_pass) and np.all(phantom >= tau)


@pytest.mark.parametrize("mechanism_regime", [GAUSS, DLAP], ids=["gaussian", "discrete_laplace"])
@pytest.mark.parametrize("n_draws", [1, 12, 600])
def test_count_tail_bounds_the_phantom_rate(seed, mechanism_regime, n_draws):
    """P14: weights below τ_w are zeroed so that empty parts add no phantom mass.  With the
    exact pmf: n·P(e ≥ τ(n)) ≤ β, i.e. among n empty parts the expected number of phantoms is ≤ β."""
    for kind in KINDS:
        A, _ = make_A(kind, *mechanism_regime, seed)
        k, pmf = count_noise_pmf(A.plan)
        tau = A.count_tail(n_draws)
        assert n_draws * pmf[k >= tau].sum() <= A.cfg.weight_beta


# --------------------------------------------------------------------------- total function (P6)
@pytest.mark.parametrize("regime", [GAUSS, DLAP, EXACT], ids=["gaussian", "discrete_laplace", "exact"])
@pytest.mark.parametrize("kind", KINDS)
def test_empty_block_and_empty_parts(seed, kind, regime):
    """A is total: an empty block, with 1 or 60 (empty) parts, returns without error and with
    (almost) no weight: each empty part passes τ with probability ≤ β/n (previous test), so the
    number of phantom outputs is ≤ 2 except with probability < 1e-5 (Poisson(β ≤ 0.05) tail), and
    each phantom weight is ≤ t := the noise's (1 − 1e-6/N) quantile (union bound over N draws)."""
    for P in (1, 60):
        centers = np.random.default_rng(P).normal(size=(P, D)) * 5
        radii = np.full(P, 0.7)
        A, src = make_A(kind, *regime, seed, trace=True)
        out = A(np.zeros((0, D)), np.zeros(0, dtype=np.int64), centers, radii, ("A", P, 9, "flush"))
        assert_valid_output(out, centers, radii)
        N = max(n_count_draws(src), 1)
        k, pmf = count_noise_pmf(A.plan)
        t = k[np.searchsorted(np.cumsum(pmf), 1 - 1e-6 / N)]
        assert len(out) <= 2 and np.all(out.weights <= t)
        if regime == EXACT:
            assert len(out) == 0


@pytest.mark.parametrize("kind", KINDS)
def test_data_in_one_of_many_parts(seed, kind):
    rng = np.random.default_rng(26)
    P = 40
    centers = rng.normal(size=(P, D)) * 20
    radii = rng.uniform(0.5, 3, P)
    X = blobs_in_ball(rng, centers[13], radii[13], 300)
    A, _ = make_A(kind, *EXACT, seed)
    out = A(X, np.full(len(X), 13), centers, radii, ("A", 0, 2, "fire"))
    assert_valid_output(out, centers, radii)
    assert set(out.part.tolist()) == {13} and out.weights.sum() == len(X)


@pytest.mark.parametrize("kind", KINDS)
def test_all_parts_are_processed_whatever_their_content(seed, kind):
    """P6 at the unit level: two blocks with the same number of parts but data in different
    parts (and one with a single extra point in an otherwise empty part) consume, under the same
    seed, the same root-level count keys with the same sizes; for lloyd and snap, whose shapes are
    fully public, the whole multiset of keys is identical."""
    rng = np.random.default_rng(27)
    X1, p1 = multi_part_block(rng, filled=(0, 1), per_blob=300)
    X2, p2 = multi_part_block(rng, filled=(3, 4, 5), per_blob=300)
    X3, p3 = np.vstack([X1, PART_CENTERS[[2]]]), np.r_[p1, 2]
    traces = []
    for X, p in ((X1, p1), (X2, p2), (X3, p3), (np.zeros((0, D)), np.zeros(0, dtype=np.int64))):
        A, src = make_A(kind, *GAUSS, seed, trace=True)
        A(X, p, PART_CENTERS, PART_RADII, ("A", 0, 4, "fire"))
        traces.append(src.keys)
    key = ("A", 0, 4, "fire")
    root = key + (("count", 0) if kind == "tree" else ("count", 0) if kind == "lloyd" else ("count",))
    for tr in traces:  # every part draws its root-level counts (one array in part order)
        assert tr[(root, len(PART_CENTERS) * (3 if kind == "lloyd" else 1))] == 1
    if kind != "tree":
        assert traces[0] == traces[1] == traces[2] == traces[3]
    else:
        for tr in traces:  # directions are drawn once, for every block
            assert tr[(key + ("directions",), A.cfg.tree_depth * D)] == 1


@pytest.mark.parametrize("kind", KINDS)
def test_empty_parts_receive_noise_like_filled_parts(seed, kind):
    """P6, on values: the noise added to a part's count must not depend on whether the part
    is empty.  Script the noise of the released count round to a constant K above every threshold
    (everything else 0): then every part — empty ones included — must release its count + K
    (snap: one point per part; lloyd: one per (part, center); tree: the root of an empty part is
    kept, branches, and, its children being empty and noise-free, is a leaf of weight K).  An
    implementation that skips, or zeroes the noise of, empty parts (``np.where(counts > 0, …)``)
    releases nothing for them.  The trace-based key test above cannot see such a leak."""
    rng = np.random.default_rng(32)
    X, part = multi_part_block(rng, filled=(0, 3), per_blob=200)
    P = len(PART_CENTERS)
    counts = np.bincount(part, minlength=P)
    cfg, plan = _cfg_plan(kind, *GAUSS)
    probe = make_semicoreset(cfg, plan, NoiseSource(seed))
    K = int(10 * max(probe.count_tail(P * cfg.n_clusters), cfg.tree_keep_factor * probe.sum_noise_norm())) + 1
    if kind == "tree":
        script = {("count", 0): K}
    elif kind == "lloyd":
        script = {("count", cfg.lloyd_iters): K}
    else:
        script = {("count",): K}
    A = make_semicoreset(cfg, plan, ScriptedNoise(seed, script))
    out = A(X, part, PART_CENTERS, PART_RADII, ("A", 0, 8, "fire"))
    assert_valid_output(out, PART_CENTERS, PART_RADII)
    empty = np.flatnonzero(counts == 0)
    if kind == "snap":
        np.testing.assert_array_equal(out.part, np.arange(P))
        np.testing.assert_array_equal(out.weights, counts + K)
    elif kind == "lloyd":
        np.testing.assert_array_equal(out.part, np.repeat(np.arange(P), cfg.n_clusters))
        per_part = np.bincount(out.part, weights=out.weights, minlength=P)
        np.testing.assert_array_equal(per_part, counts + cfg.n_clusters * K)
    else:
        for p in empty:
            assert (out.part == p).sum() == 1 and out.weights[out.part == p][0] == K
            np.testing.assert_allclose(out.points[out.part == p][0], PART_CENTERS[p], atol=1e-12)
    assert set(out.part.tolist()) == set(range(P))


def test_points_outside_their_ball_are_clipped_into_it(seed):
    """P10: points at (or by rounding just beyond) the ring radius, or given unclipped, are
    normalised into the unit ball, so outputs stay inside the part's ball."""
    c, r = np.array([1.0, 1.0]), 0.3
    rng = np.random.default_rng(28)
    ang = rng.uniform(0, 2 * np.pi, 3000)
    X = c + r * np.c_[np.cos(ang), np.sin(ang)] * rng.choice([1.0, 1.0 + 1e-15, 3.0], 3000)[:, None]
    for kind in KINDS:
        A, _ = make_A(kind, *GAUSS, seed)
        out = A(X, np.zeros(len(X), dtype=np.int64), c[None], np.array([r]), ("A", 1, 1, "fire"))
        assert_valid_output(out, c[None], np.array([r]))
        y = A.normalise(X.copy(), np.zeros(len(X), dtype=np.int64), c[None], np.array([r]))
        assert np.linalg.norm(y, axis=1).max() <= 1.0


@pytest.mark.parametrize("kind", KINDS)
def test_same_seed_and_key_reproduce_and_other_keys_do_not(seed, kind):
    rng = np.random.default_rng(29)
    X, part = multi_part_block(rng, per_blob=200)
    A, _ = make_A(kind, *GAUSS, seed)
    B, _ = make_A(kind, *GAUSS, seed)
    o1 = A(X, part, PART_CENTERS, PART_RADII, ("A", 0, 5, "fire"))
    o2 = B(X, part, PART_CENTERS, PART_RADII, ("A", 0, 5, "fire"))
    o3 = A(X, part, PART_CENTERS, PART_RADII, ("A", 0, 6, "fire"))
    np.testing.assert_array_equal(o1.points, o2.points)
    np.testing.assert_array_equal(o1.weights, o2.weights)
    assert len(o1) != len(o3) or not np.array_equal(o1.weights, o3.weights)


@pytest.mark.parametrize("branch_factor", [2.0, 1.0, 0.5])
def test_tree_leaves_are_disjoint_for_every_accepted_branch_factor(seed, branch_factor):
    """Leaves must be disjoint, so with zero noise everywhere but one level the total weight is n.

    Script: all 1000 points sit in one tight cluster (one path); level-1 counts get noise
    −(n − ⌈(θ_b + θ_k)/2⌉), every other count 0.  The level-1 node holding the points then has a noisy
    count strictly between θ_b and θ_k when θ_b < θ_k (tree_branch_factor < 1): it branches but is not
    kept, its kept descendants are leaves — and the root, whose only *children* are not kept, is a
    leaf too, counting the same points again (W = 2n).  With θ_b ≥ θ_k the node is not branched and
    the root is the only leaf (W = n).  Correct behaviour: W = n, or EngineConfig rejects the
    factor.  Fails for branch_factor = 0.5 until the fix (see the report)."""
    try:
        EngineConfig(n_clusters=3, dim=D, radius=10.0, epsilon=2.0, delta=0.0, tree_branch_factor=branch_factor)
    except ValueError:
        assert branch_factor < 1  # only a factor < 1 may be rejected
        return
    cfg, plan = _cfg_plan("tree", 2.0, 0.0, tree_branch_factor=branch_factor)
    rng = np.random.default_rng(31)
    n = 1000
    X = np.array([0.3, 0.2]) + 1e-3 * rng.normal(size=(n, D))
    probe = TreeSemicoreset(cfg, plan, NoiseSource(seed))
    theta_k = max(probe.count_tail(1), cfg.tree_keep_factor * probe.sum_noise_norm())
    theta_b = cfg.tree_branch_factor * theta_k
    target = math.ceil((theta_b + theta_k) / 2) if theta_b < theta_k else math.ceil(theta_k) - 1
    A = TreeSemicoreset(cfg, plan, ScriptedNoise(seed, {("count", 1): target - n}))
    out = A(X, np.zeros(n, dtype=np.int64), np.zeros((1, D)), np.ones(1), ("A", 0, 1, "fire"))
    assert out.weights.sum() == n, (out.weights.sum(), len(out))
