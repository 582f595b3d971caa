"""Tests of dpstream.sparse_vector.LevelZeroAboveThreshold (Alg. 5; P15, P13).

The implementation uses Lap(b) for both the threshold noise ρ (redrawn at every
restart) and the per-tick query noise ν, and fires at tick t iff c_t + ν_t ≥ M + ρ.
Many independent instances are run at once (one instance per coordinate).

Statistical thresholds: each check is calibrated at false-failure probability
≤ 1e-5 (p-value > 1e-5 or 4.5 standard errors); a test makes at most ~10 checks.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from dpstream.noise import NoiseSource
from dpstream.sparse_vector import LevelZeroAboveThreshold

P_MIN = 1e-5
Z = 4.5


def exact_first_stop_pmf(cum_counts: np.ndarray, M: float, b: float) -> np.ndarray:
    """P(first ⊤ at tick t), t = 1..H, and P(no ⊤ by H) as the last entry, by numerical integration:

        P(τ = t) = ∫ p_ρ(r) Π_{s<t} F_ν(M + r − c_s) · (1 − F_ν(M + r − c_t)) dr,

    ρ, ν ~ Lap(b) independent, F_ν the Laplace CDF, c_s the count at tick s.  Trapezoid rule on
    [−50b, 50b] with step b/1000 (the kinks of the integrand are at r = 0 and r = c_s − M, on the
    grid for integer M, c_s and b ∈ {1, 2}; the discretisation error, O(step²), is far below the
    Monte Carlo resolution of these tests; the tail mass beyond ±50b is e^{−50}).
    """
    r = np.linspace(-50 * b, 50 * b, 100_001)
    dens = np.exp(-np.abs(r) / b) / (2 * b)

    def cdf(x):
        e = 0.5 * np.exp(-np.abs(x) / b)
        return np.where(x < 0, e, 1.0 - e)

    surv = np.ones_like(r)  # Π_{s<t} F_ν(M + r − c_s)
    out = []
    for c in cum_counts:
        nxt = surv * cdf(M + r - c)
        out.append(np.trapezoid(dens * (surv - nxt), r))
        surv = nxt
    out.append(np.trapezoid(dens * surv, r))
    p = np.maximum(np.array(out), 0.0)
    assert abs(p.sum() - 1) < 1e-6
    return p / p.sum()


def run_first_stops(svt: LevelZeroAboveThreshold, arrivals: np.ndarray, start_tick: int = 1):
    """Feed arrivals (H, n); return the first ⊤ tick per instance (H+1 if none) and all fire flags."""
    H, n = arrivals.shape
    first = np.full(n, H + 1)
    fires = np.zeros((H, n), dtype=bool)
    for t in range(H):
        f = svt.step(start_tick + t, arrivals[t])
        assert f.shape == (n,) and f.dtype == bool
        fires[t] = f
        first = np.where(f & (first == H + 1), t + 1, first)
    return first, fires


# --------------------------------------------------------------------------- (a) exact stopping-time law, (d) empty ticks
PATTERNS = {
    "one_per_tick": lambda H: np.ones(H, dtype=int),
    "no_arrivals": lambda H: np.zeros(H, dtype=int),  # fires only through the noise: tests run at ⊥ ticks too
    "bursty": lambda H: np.where(np.arange(1, H + 1) % 4 == 0, 3, 0),
}


@pytest.mark.parametrize("b", [1.0, 2.0])
def test_first_stopping_time_matches_exact_integration(seed, chi2_gof, b):
    """Three arrival patterns interleaved in ONE vectorised object (instance i gets pattern i % 3),
    n = 30000, M = 5, horizon 30: each group's empirical first-⊤ distribution must match the exact
    integral (Pearson chi-square, p > 1e-5).  The "no_arrivals" group checks that every instance is
    tested at every tick, including ticks where it receives nothing (P13)."""
    n, H, M = 30_000, 30, 5.0
    names = list(PATTERNS)
    pat = np.stack([PATTERNS[nm](H) for nm in names])  # (3, H)
    group = np.arange(n) % 3
    arrivals = pat[group].T  # (H, n)
    svt = LevelZeroAboveThreshold(n, M, b, NoiseSource(seed), ("svt-test", b))
    first, _ = run_first_stops(svt, arrivals)
    for gi, nm in enumerate(names):
        p = exact_first_stop_pmf(np.cumsum(pat[gi]), M, b)
        obs = np.bincount(first[group == gi] - 1, minlength=H + 1)
        pv = chi2_gof(obs, p)
        assert pv > P_MIN, (nm, pv)


def test_empty_instances_fire_at_the_exact_rate_at_tick_one(seed):
    """With no arrivals, P(⊤ at tick 1) = P(ν − ρ ≥ M) = e^{−M/b}(2 + M/b)/4 (difference of two
    i.i.d. Lap(b)); every instance is tested, whatever the others receive.  Binomial z-test, Z = 4.5."""
    n, M, b = 40_000, 4.0, 2.0
    p = math.exp(-M / b) * (2 + M / b) / 4
    svt = LevelZeroAboveThreshold(n, M, b, NoiseSource(seed), ("svt-empty",))
    arrivals = np.where(np.arange(n) < n // 2, 0, 1000)  # the second half always fires
    fired = svt.step(1, arrivals)
    assert fired[n // 2:].all()
    k = fired[: n // 2].sum()
    m = n // 2
    assert abs(k - m * p) < Z * math.sqrt(m * p * (1 - p)), (k, m * p)


# --------------------------------------------------------------------------- (b) fresh threshold at every restart
def test_restart_draws_a_fresh_threshold(seed):
    n, M, b = 2000, 5.0, 1.0
    svt = LevelZeroAboveThreshold(n, M, b, NoiseSource(seed), ("svt-restart",))
    seen = [svt.noisy_threshold.copy()]
    restarts = np.zeros(n, dtype=int)
    for t in range(1, 101):
        before = svt.noisy_threshold.copy()
        f = svt.step(t, np.ones(n, dtype=int))
        after = svt.noisy_threshold
        assert np.all(after[f] != before[f])  # every restart changes the threshold
        np.testing.assert_array_equal(after[~f], before[~f])  # no change without a restart
        np.testing.assert_array_equal(svt.count[f], 0)  # the count resets at ⊤
        restarts += f
        seen.append(after.copy())
    assert restarts.min() >= 5
    # all thresholds an instance ever held are distinct (no reuse across restarts, P15)
    allthr = np.stack(seen)  # (101, n)
    for i in range(0, n, 97):
        assert np.unique(allthr[:, i]).size == restarts[i] + 1


def test_successive_blocks_are_independent_renewals(seed, chi2_gof):
    """With one arrival per tick, the count restarts from 0 after ⊤, so with a fresh ρ the second
    gap τ₂ − τ₁ has the same law as τ₁ and is independent of it.  Reusing ρ across restarts
    correlates them (the privacy loss doubles, P15).
    Checks: gap law vs exact integration; chi-square independence of (τ₁, gap) binned; and the
    rank correlation of (τ₁, gap) within Z/√n of 0."""
    n, H, M, b = 30_000, 80, 5.0, 1.0
    svt = LevelZeroAboveThreshold(n, M, b, NoiseSource(seed), ("svt-renewal",))
    _, fires = run_first_stops(svt, np.ones((H, n), dtype=int))
    t_idx = np.arange(1, H + 1)[:, None]
    fire_ticks = np.where(fires, t_idx, H + 10)
    srt = np.sort(fire_ticks, axis=0)
    t1, t2 = srt[0], srt[1]
    ok = t1 <= 40
    assert ok.mean() > 0.99
    gap = np.minimum(t2[ok] - t1[ok], 41)  # gaps > 40 (possibly censored by the horizon) pooled
    p = exact_first_stop_pmf(np.arange(1, 41), M, b)  # P(τ = 1..40), P(τ > 40)
    assert chi2_gof(np.bincount(gap - 1, minlength=41), p) > P_MIN
    # independence: contingency table on coarse bins of τ₁ and gap
    edges = [0, 3, 4, 5, 6, 7, 9, 100]
    tab = np.histogram2d(t1[ok], gap, bins=[edges, edges])[0]
    tab = tab[tab.sum(axis=1) > 0][:, tab.sum(axis=0) > 0]
    assert stats.chi2_contingency(tab).pvalue > P_MIN
    rho_s = stats.spearmanr(t1[ok], gap).statistic
    assert abs(rho_s) < Z / math.sqrt(ok.sum())


def test_noise_keys_do_not_depend_on_the_data(seed):
    """Which keys are drawn, with which sizes, is a function of the tick alone (query noise for every
    instance every tick; a fresh threshold array every tick), never of the arrivals or of ⊤."""
    traces = []
    for arr_seed in (0, 1):
        src = NoiseSource(seed, trace=True)
        svt = LevelZeroAboveThreshold(50, 3.0, 1.0, src, ("svt-keys",))
        rng = np.random.default_rng(arr_seed)
        for t in range(1, 41):
            svt.step(t, rng.integers(0, 3, 50) * (arr_seed == 1))
        traces.append(src.keys)
    assert traces[0] == traces[1]
    keys = {k for (k, size) in traces[0]}
    assert all(size == 50 for (k, size) in traces[0])
    assert {("svt-keys", "query", t) for t in range(1, 41)} <= keys
    assert ("svt-keys", "threshold", "init") in keys
    assert all(v == 1 for v in traces[0].values())  # no key is drawn twice


# --------------------------------------------------------------------------- (c) block sizes (Lemmas 12, 13; Claim 9)
def test_block_sizes_within_lemma_bounds(seed):
    """With |ρ|, |ν| ≤ B := b·ln(2·n·T'/ξ) for all ≤ n·T' Laplace draws (T' = 2T+1 draws per instance:
    T query noises and ≤ T+1 thresholds; union bound with ξ = 1e-5, P(|Lap(b)| > B) = e^{−B/b}):
      * a fired block has count ≥ M − 2B                       (Lemma 13, with Lap(b) noise);
      * a count ≥ M + 2B always fires                           (Claim 9);
      * hence before a tick's arrivals the buffer is < M + 2B, and at any tick ≤ M + 2B + arrivals.
    Random Poisson arrivals of different rates per instance, including rate 0."""
    n, T, M, b = 4000, 400, 300.0, 2.0
    xi = 1e-5
    B = b * math.log(2 * n * (2 * T + 1) / xi)
    rng = np.random.default_rng(5)
    rate = rng.choice([0.0, 0.3, 1.0, 3.0, 20.0], n)
    svt = LevelZeroAboveThreshold(n, M, b, NoiseSource(seed), ("svt-blocks",))
    n_fires = 0
    for t in range(1, T + 1):
        a = rng.poisson(rate)
        c_prev = svt.count.copy()
        assert np.all(c_prev < M + 2 * B)
        c_now = c_prev + a
        f = svt.step(t, a)
        assert np.all(c_now[f] >= M - 2 * B), c_now[f].min()
        assert np.all(f[c_now >= M + 2 * B])
        assert np.all(c_now <= M + 2 * B + a)
        n_fires += f.sum()
    assert n_fires > 1000  # the bounds were exercised


def test_state_is_two_floats_per_instance(seed):
    svt = LevelZeroAboveThreshold(123, 10.0, 1.0, NoiseSource(seed), ("svt-state",))
    for t in range(1, 50):
        svt.step(t, np.ones(123, dtype=int))
    assert svt.state_floats() == 2 * 123


# --------------------------------------------------------------------------- (d) the raise per test (``growth``)
def test_growth_raises_the_jth_test_since_a_restart_by_g_b_ln_j(seed):
    """An instance with growth g decides as one without it whose threshold is raised, at its j-th test since
    its last restart, by g·b·ln j: the same draws, the raise a function of j alone (P23: a public threshold).
    j is counted per instance and starts again at every restart, whether a ⊤ or a caller's mask caused it."""
    n, M, b, g = 3000, 6.0, 1.5, 0.5
    rng = np.random.default_rng(3)
    grown = LevelZeroAboveThreshold(n, M, b, NoiseSource(seed), ("svt-growth",), growth=g)
    plain = LevelZeroAboveThreshold(n, M, b, NoiseSource(seed), ("svt-growth",))
    j = np.zeros(n, dtype=int)
    fired_any = restarted_by_mask = 0
    for t in range(1, 121):
        a = rng.poisson(0.4, n)
        j += 1
        f = grown.test(t, a)
        np.testing.assert_array_equal(f, plain.test(t, a, g * b * np.log(j)))
        mask = f | (rng.random(n) < 0.02)  # a caller's restarts besides ⊤ (a flush)
        grown.restart(t, mask)
        plain.restart(t, mask)
        j[mask] = 0
        fired_any += f.sum()
        restarted_by_mask += (mask & ~f).sum()
    np.testing.assert_array_equal(grown.tests, j)
    assert fired_any > 1000 and restarted_by_mask > 1000


def test_growth_closes_the_gap_between_tick_sizes_in_points_at_a_fire(seed):
    """The reason for the raise: points arriving at the same rate per unit of time, in ticks of 1 or of 10 points.
    Without growth the fine ticks fire at fewer points (ten times as many tests, so a large ν comes sooner); g = 1
    closes the gap between the two tick sizes' mean counts at the first ⊤, and g = 0.5 (the part instances' value)
    about halves it."""
    n, M, b = 20_000, 60.0, 7.0

    def mean_count_at_first_fire(per_tick, growth):
        svt = LevelZeroAboveThreshold(n, M, b, NoiseSource(seed), ("svt-ticks", per_tick, growth), growth=growth)
        at = np.full(n, -1)
        for t in range(1, 1 + 300 // per_tick):
            count = svt.count + per_tick
            f = svt.test(t, np.full(n, per_tick))
            at = np.where((at < 0) & f, count, at)
            svt.restart(t, f)
        assert (at >= 0).mean() > 0.99
        return float(at[at >= 0].mean())

    gap = {g: mean_count_at_first_fire(10, g) - mean_count_at_first_fire(1, g) for g in (0.0, 0.5, 1.0)}
    assert gap[0.0] > 10, gap  # the fine ticks fire sooner, by more than one coarse tick
    assert 0.3 * gap[0.0] < gap[0.5] < 0.7 * gap[0.0], gap
    assert abs(gap[1.0]) < 0.25 * gap[0.0], gap


def test_growth_costs_one_number_per_instance_and_must_be_finite_and_nonnegative(seed):
    svt = LevelZeroAboveThreshold(123, 10.0, 1.0, NoiseSource(seed), ("svt-state",), growth=0.5)
    for t in range(1, 50):
        svt.step(t, np.ones(123, dtype=int))
    assert svt.state_floats() == 3 * 123
    for bad in (-0.1, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="growth"):
            LevelZeroAboveThreshold(3, 1.0, 1.0, NoiseSource(seed), ("x",), growth=bad)


def test_the_part_instances_grow_and_the_ring_instances_do_not():
    from dpstream import rules
    from dpstream.merge_reduce import part_svt
    from dpstream.params import EngineConfig
    from dpstream.run_setup import RunSetup

    cfg = EngineConfig(n_clusters=4, dim=3, radius=10.0, epsilon=1.0, delta=1e-6, horizon_ticks=50)
    setup = RunSetup(cfg, b"growth-test-seed")
    psvt = part_svt(cfg, setup.plan, setup.noise, 0, 3, 500)
    assert psvt.growth == rules.PART_FIRE_TEST_GROWTH > 0
    assert part_svt(cfg, setup.plan, setup.noise, 0, 3, 500, ring=2).growth == psvt.growth
    assert LevelZeroAboveThreshold.growth == 0.0  # the ring sparse vector's default: no raise
