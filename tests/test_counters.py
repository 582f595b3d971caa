"""Tests of dpstream.counters.BinaryMechanism (P3).

Many independent counters are simulated at once as one BinaryMechanism of size K:
coordinate i of the vector is counter i, with its own node noise.

Statistical thresholds: each check is calibrated at false-failure probability
≤ 1e-5 (chi-square p-value > 1e-5, or 4.5 standard errors), and a test makes at
most ~10 checks, so it fails spuriously with probability ≲ 1e-4.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from dpstream.counters import BinaryMechanism, HorizonExceeded, popcount
from dpstream.noise import NoiseSource

P_MIN = 1e-5
Z = 4.5


def node_pmf(mechanism: str, scale: float, kmax: int):
    """pmf of one node's integer noise on -kmax..kmax (rounded N(0, scale²), or discrete Laplace(scale))."""
    k = np.arange(-kmax, kmax + 1)
    if mechanism == "gaussian":
        return stats.norm.cdf((k + 0.5) / scale) - stats.norm.cdf((k - 0.5) / scale)
    q = math.exp(-1.0 / scale)
    return (1 - q) / (1 + q) * q ** np.abs(k)


def sum_pmf(pmf: np.ndarray, m: int) -> np.ndarray:
    """pmf of the sum of m i.i.d. copies (support centred, length m·(len−1)+1)."""
    out = np.array([1.0])
    for _ in range(m):
        out = np.convolve(out, pmf)
    return out


def run_zero_input(seed, K, T, mechanism, scale, key=("bm-test",)):
    bm = BinaryMechanism(K, T, NoiseSource(seed), key, mechanism, scale)
    out = np.empty((T, K), dtype=np.int64)
    for t in range(T):
        out[t] = bm.step(None if t % 2 else np.zeros(K, dtype=np.int64))
    return bm, out


# --------------------------------------------------------------------------- distribution of the release
@pytest.mark.parametrize("mechanism,scale", [("gaussian", 2.0), ("discrete_laplace", 1.5)])
def test_zero_input_release_is_sum_of_popcount_node_noises(seed, chi2_gof, mechanism, scale):
    """With zero input, the release at tick t is the sum of popcount(t) i.i.d. node noises.

    Reference: the exact pmf of that sum, by convolving the exact node pmf (rounded normal, or
    discrete Laplace) popcount(t) times — rounding-aware.  Over the K = 4000 independent counters,
    at each of 6 ticks: a Pearson chi-square test, and a Kolmogorov–Smirnov test of the randomised
    probability integral transform U = F(X−1) + V·p(X), V ~ U(0,1) independent, which is exactly
    U(0,1) for a discrete X with cdf F (so kstest is valid despite the atoms).  12 checks at
    p > 5e-6 each: false failure ≤ 6e-5.
    """
    K, T = 4000, 64
    _, out = run_zero_input(seed, K, T, mechanism, scale)
    kmax = int(12 * scale) + 6  # node tail mass beyond kmax < 1e-30
    pmf1 = node_pmf(mechanism, scale, kmax)
    v = np.random.default_rng(7).random(K)
    for t in (1, 3, 7, 16, 31, 63):
        m = popcount(t)
        pmf = sum_pmf(pmf1, m)
        pmf = pmf / pmf.sum()
        lo = -m * kmax
        x = out[t - 1]
        assert x.min() >= lo and x.max() <= -lo
        obs = np.bincount(x - lo, minlength=pmf.size)
        p = chi2_gof(obs, pmf)
        assert p > 5e-6, (t, m, p)
        cdf_below = np.r_[0.0, np.cumsum(pmf)][x - lo]  # F(x − 1)
        u = np.clip(cdf_below + v * pmf[x - lo], 0.0, 1.0)
        p_ks = stats.kstest(u, "uniform").pvalue
        assert p_ks > 5e-6, (t, m, p_ks)


@pytest.mark.parametrize("mechanism,scale", [("gaussian", 3.0), ("discrete_laplace", 3.0)])
def test_releases_share_the_noise_of_shared_nodes(seed, mechanism, scale):
    """Cov(X_s, X_t) = (number of p-sum nodes in both expansions) × Var(node).

    This is the tree structure itself: fresh noise of the right variance at
    every tick would pass the marginal test above but fail here.  Node of bit j
    of t = (j, t >> j).  Tolerance: Z standard errors of the sample covariance,
    SE = sd(X_s·X_t)/√K estimated from the sample.
    """
    K, T = 6000, 32
    _, out = run_zero_input(seed, K, T, mechanism, scale)
    kmax = int(12 * scale) + 6
    k = np.arange(-kmax, kmax + 1)
    v_node = (k**2 * node_pmf(mechanism, scale, kmax)).sum()

    def nodes(t):
        return {(j, t >> j) for j in range(t.bit_length()) if (t >> j) & 1}

    for s, t in [(6, 7), (7, 8), (8, 12), (12, 13), (15, 16), (16, 31), (3, 5), (30, 31)]:
        shared = len(nodes(s) & nodes(t))
        xs, xt = out[s - 1].astype(float), out[t - 1].astype(float)
        cov = np.mean(xs * xt)  # means are 0
        se = np.std(xs * xt) / np.sqrt(K)
        assert abs(cov - shared * v_node) < Z * se, (s, t, shared, cov, shared * v_node, se)


@pytest.mark.parametrize("mechanism", ["gaussian", "discrete_laplace"])
def test_noise_std_matches_empirical_std_per_coordinate_scale(seed, mechanism):
    """A per-coordinate scale vector gives each coordinate its own noise level, and
    noise_std(t) reports it (exactly for the continuous mechanisms, ≈ for the
    integer ones: within 3% at scale ≥ 10)."""
    K, T = 6000, 15
    scale = np.where(np.arange(K) < K // 2, 10.0, 40.0)
    bm, out = run_zero_input(seed, K, T, mechanism, scale)
    x = out[T - 1].astype(float)  # popcount(15) = 4
    std = bm.noise_std(T)
    for sel in (slice(0, K // 2), slice(K // 2, K)):
        # sample variance vs the reported std², SE = √((m4 − s⁴)/n) from the sample's 4th moment,
        # plus 3% slack for the approximation of an integer noise's variance by σ² or 2b²
        emp = x[sel].var()
        target = std[sel][0] ** 2
        se = np.sqrt((np.mean(x[sel] ** 4) - emp**2) / x[sel].size)
        assert abs(emp - target) < Z * se + 0.03 * target, (mechanism, emp, target, se)
    assert std[-1] / std[0] == pytest.approx(4.0)


# --------------------------------------------------------------------------- accuracy bound
def _css_mgf_condition_holds(b: float) -> bool:
    """Chan–Shi–Song Lemma 2.8 uses E[e^{hX}] ≤ exp(2h²b²) for |h| < 1/(√2 b).  It holds for the
    continuous Laplace; check numerically that the discrete Laplace's MGF
    (1−q)²/((1−qe^h)(1−qe^{−h})), q = e^{−1/b}, obeys it too, so Cor. 2.9's tail bound applies."""
    q = math.exp(-1.0 / b)
    h = np.linspace(-1, 1, 4001)[1:-1] / (math.sqrt(2) * b)
    mgf = (1 - q) ** 2 / ((1 - q * np.exp(h)) * (1 - q * np.exp(-h)))
    return bool(np.all(mgf <= np.exp(2 * h**2 * b**2) * (1 + 1e-12)))


@pytest.mark.parametrize("mechanism,scale", [("gaussian", 2.0), ("discrete_laplace", 2.0)])
def test_error_within_chan_shi_song_bound_at_every_tick(seed, mechanism, scale):
    """|release_t − prefix_t| within the per-tick tail bound at every tick, for every counter.

    Union bound over T ticks × K counters with total failure probability ξ = 1e-5,
    γ = ξ/(T·K) per (tick, counter), m_t = popcount(t):
      discrete Laplace(b): CSS Cor. 2.9, |X_t| ≤ b·√(8 ln(2/γ))·√(max(m_t, ln(2/γ)));
      rounded Gaussian(σ): |X_t| ≤ |Σ N_i| + m_t/2 ≤ σ√m_t·Φ⁻¹(1−γ/2) + m_t/2.
    And the uniform err_BM(ξ) with L_T for m_t holds a fortiori.
    The input is random (the error must not depend on it).
    """
    K, T = 2000, 1024
    xi = 1e-5
    gamma = xi / (T * K)
    rng = np.random.default_rng(1)
    bm = BinaryMechanism(K, T, NoiseSource(seed), ("css",), mechanism, scale)
    prefix = np.zeros(K, dtype=np.int64)
    worst_ratio, worst_uniform = 0.0, 0.0
    L_T = bm.levels
    lg = math.log(2 / gamma)
    if mechanism == "discrete_laplace":
        assert _css_mgf_condition_holds(scale)
        err_bm = scale * math.sqrt(8 * lg) * math.sqrt(max(L_T, lg))
    else:
        err_bm = scale * math.sqrt(L_T) * stats.norm.isf(gamma / 2) + L_T / 2
    for t in range(1, T + 1):
        u = rng.integers(0, 3, K)
        prefix += u
        err = np.abs(bm.step(u) - prefix).max()
        m = popcount(t)
        if mechanism == "discrete_laplace":
            bound = scale * math.sqrt(8 * lg) * math.sqrt(max(m, lg))
        else:
            bound = scale * math.sqrt(m) * stats.norm.isf(gamma / 2) + m / 2
        worst_ratio = max(worst_ratio, err / bound)
        worst_uniform = max(worst_uniform, err / err_bm)
    assert worst_ratio <= 1.0, worst_ratio
    assert worst_uniform <= 1.0, worst_uniform


# --------------------------------------------------------------------------- exactness and data independence
def test_zero_noise_release_is_exact_prefix_sum(seed):
    K, T = 7, 300
    rng = np.random.default_rng(2)
    bm = BinaryMechanism(K, T, NoiseSource(seed), ("exact",), "gaussian", 0.0)
    prefix = np.zeros(K, dtype=np.int64)
    for t in range(1, T + 1):
        if t % 5 == 0:
            out = bm.step(None)  # ⊥ tick
        else:
            u = rng.integers(-50, 1000, K)
            prefix += u
            out = bm.step(u)
        np.testing.assert_array_equal(out, prefix)
        np.testing.assert_array_equal(bm.release(), prefix)
        assert out.dtype == np.int64


def test_noise_is_independent_of_the_data(seed):
    """Same seed and key: D and D' release exactly prefix(D) − prefix(D') apart at every tick,
    i.e. the noise does not depend on the data (a data-dependent key or draw would break this)."""
    K, T = 50, 200
    rng = np.random.default_rng(3)
    a = BinaryMechanism(K, T, NoiseSource(seed), ("ind",), "discrete_laplace", 5.0)
    b = BinaryMechanism(K, T, NoiseSource(seed), ("ind",), "discrete_laplace", 5.0)
    pa = np.zeros(K, dtype=np.int64)
    for t in range(1, T + 1):
        u = rng.integers(0, 20, K) * (rng.random(K) < 0.3)
        pa += u
        ra, rb = a.step(u), b.step(None)
        np.testing.assert_array_equal(ra - rb, pa)


def test_updates_must_have_the_counter_shape(seed):
    K = 4
    bm = BinaryMechanism(K, 10, NoiseSource(seed), ("shape",), "gaussian", 1.0)
    for bad in (np.zeros(K + 1, dtype=int), np.zeros((K, 1), dtype=int), np.zeros((1, K), dtype=int), 3,
                np.zeros(0, dtype=int), [1, 2, 3]):
        with pytest.raises(ValueError):
            bm.step(bad)
    assert bm.t == 0  # a rejected update does not advance the clock
    bm.step([1, 2, 3, 4])  # a list of the right length is fine
    bm.step(None)
    assert bm.t == 2


@pytest.mark.parametrize("T", [1, 2, 5, 8, 100])
def test_horizon_is_enforced(seed, T):
    """P3: the counter refuses tick T+1, and the state does not change."""
    bm = BinaryMechanism(3, T, NoiseSource(seed), ("hz",), "gaussian", 1.0)
    for _ in range(T):
        bm.step(np.ones(3, dtype=int))
    before = bm.release().copy()
    with pytest.raises(HorizonExceeded):
        bm.step(np.ones(3, dtype=int))
    with pytest.raises(HorizonExceeded):
        bm.step(None)
    assert bm.t == T
    np.testing.assert_array_equal(bm.release(), before)


@pytest.mark.parametrize("T", [1, 7, 8, 9, 100, 1000])
def test_each_tick_lies_in_at_most_L_T_drawn_nodes(seed, T):
    """The privacy calibration assumes each tick's update lies in ≤ L_T = ⌊log2 T⌋+1 p-sums.
    Check it on the noise keys actually drawn: node (j, i) covers ticks ((i−1)2^j, i·2^j]."""
    src = NoiseSource(seed, trace=True)
    bm = BinaryMechanism(1, T, src, ("cov",), "gaussian", 1.0)
    assert bm.levels == int(math.floor(math.log2(T))) + 1
    for _ in range(T):
        bm.step(None)
    nodes = {key[-2:] for (key, size) in src.keys if key[:2] == ("cov", "node")}
    assert all(j < bm.levels for j, _ in nodes)
    cover = np.zeros(T + 1, dtype=int)
    for j, i in nodes:
        lo, hi = (i - 1) << j, min(i << j, T)
        cover[lo + 1:hi + 1] += 1
    assert cover[1:].max() <= bm.levels
    # and each node is one draw of the counter's size: no per-tick draws outside the tree
    assert all(size == 1 for (key, size) in src.keys)


def test_state_is_O_K_and_does_not_grow(seed):
    K = 64
    bm = BinaryMechanism(K, 5000, NoiseSource(seed), ("state",), "gaussian", 1.0)
    bm.step(np.ones(K, dtype=int))
    assert bm.state_floats() == 2 * K

    def array_cells(obj):
        return sum(v.size for v in vars(obj).values() if isinstance(v, np.ndarray))

    cells_1 = array_cells(bm)
    for _ in range(4000):
        bm.step(None)
    assert bm.state_floats() == 2 * K
    assert array_cells(bm) == cells_1 <= 3 * K  # exact prefix, noise total, per-coordinate scale


def test_regenerated_node_noise_is_identical(seed):
    """After t steps, noise_total equals Σ over the set bits j of t of node (j, t >> j)'s noise,
    regenerated from the keys by a fresh instance: removed nodes are regenerated exactly, never redrawn."""
    K = 32
    for mechanism in ("gaussian", "discrete_laplace"):
        bm = BinaryMechanism(K, 1 << 10, NoiseSource(seed), ("regen",), mechanism, 7.0)
        fresh = BinaryMechanism(K, 1 << 10, NoiseSource(seed), ("regen",), mechanism, 7.0)
        checkpoints = {1, 2, 3, 4, 255, 256, 341, 682, 1023, 1024}
        for t in range(1, (1 << 10) + 1):
            bm.step(None)
            if t in checkpoints:
                expect = sum(fresh.node_noise(j, t) for j in range(t.bit_length()) if (t >> j) & 1)
                np.testing.assert_array_equal(bm.noise_total, expect)
                np.testing.assert_array_equal(bm.release(), expect)
