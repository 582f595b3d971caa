"""Tests of dpstream.noise: keyed, counter-based noise (P11, P15, P16).

Statistical thresholds: every check is calibrated at a false-failure
probability ≤ 1e-5 (z = 4.5 two-sided for a normal statistic, or p < 1e-5 for a
goodness-of-fit test), so each test function, which makes at most ~10 such
checks, fails spuriously with probability ≲ 1e-4.  Seeds are fixed, so the
outcome is deterministic.
"""
from __future__ import annotations

import hashlib
import warnings

import numpy as np
import pytest
from scipy import stats

from dpstream.noise import NoiseSource, UnsafeSeedWarning, seed_bytes, seed_from_entropy

P_MIN = 1e-5  # per-check false-failure probability
Z = 4.5  # two-sided normal quantile at ≈ 6.8e-6


def _all_draws(src: NoiseSource, key):
    return {
        "gaussian": src.gaussian(key, 64, 2.0),
        "gaussian_int": src.gaussian_int(key, 64, 2.0),
        "discrete_laplace": src.discrete_laplace(key, 64, 2.0),
        "laplace": src.laplace(key, 64, 2.0),
        "uniform": src.uniform(key, 64, -1.0, 3.0),
        "integers": src.integers(key, 64, 0, 1 << 40),
    }


# --------------------------------------------------------------------------- determinism / keying
def test_same_seed_and_key_give_identical_draws(seed):
    a, b = NoiseSource(seed), NoiseSource(bytes(seed))
    key = ("svt", 3, 17, "query")
    da, db = _all_draws(a, key), _all_draws(b, key)
    for name in da:
        np.testing.assert_array_equal(da[name], db[name], err_msg=name)
    # and again from the same source: draws are a function of (seed, key), not of a stream position
    dc = _all_draws(a, key)
    for name in da:
        np.testing.assert_array_equal(da[name], dc[name], err_msg=name)


def test_draws_do_not_depend_on_call_order(seed):
    k1, k2 = ("bm", 0, 5, "node"), ("A", 2, 9, "count")
    a, b = NoiseSource(seed), NoiseSource(seed)
    a1 = a.gaussian(k1, 100, 1.0)
    a2 = a.discrete_laplace(k2, 100, 3.0)
    b2 = b.discrete_laplace(k2, 100, 3.0)
    b.uniform(("something", "else"), 1000)  # unrelated draws in between change nothing
    b1 = b.gaussian(k1, 100, 1.0)
    np.testing.assert_array_equal(a1, b1)
    np.testing.assert_array_equal(a2, b2)


@pytest.mark.parametrize("other_key", [
    ("svt", 3, 18, "query"),  # another tick
    ("svt", 4, 17, "query"),  # another instance
    ("svt", 3, 17, "threshold"),  # another purpose
    ("svt", 3, 17),  # a prefix of the key
    ("svt", 3, 17, "query", 0),  # an extension of the key
    ("svt", "3", 17, "query"),  # same text, other type
    (("svt", 3), 17, "query"),  # other nesting
    ("svt\x1f3", 17, "query"),  # the separator inside a part must not collide
])
def test_different_key_gives_different_draws(seed, other_key):
    src = NoiseSource(seed)
    key = ("svt", 3, 17, "query")
    da, db = _all_draws(src, key), _all_draws(src, other_key)
    for name in ("gaussian", "laplace", "uniform", "integers"):
        assert not np.array_equal(da[name], db[name]), name
    # not merely a permutation or a shifted window of the same stream either
    assert np.intersect1d(da["gaussian"], db["gaussian"]).size == 0


def test_numpy_and_python_ints_are_the_same_key(seed):
    src = NoiseSource(seed)
    np.testing.assert_array_equal(src.gaussian(("bm", np.int64(7), np.int32(3)), 10, 1.0),
                                  src.gaussian(("bm", 7, 3), 10, 1.0))


def test_different_seed_gives_different_draws(seed, make_seed):
    key = ("A", 0, 1, "count")
    da, db = _all_draws(NoiseSource(seed), key), _all_draws(NoiseSource(make_seed("other")), key)
    for name in ("gaussian", "laplace", "uniform", "integers"):
        assert not np.array_equal(da[name], db[name]), name
    # a one-bit change of the seed also changes everything
    flipped = bytes([seed[0] ^ 1]) + seed[1:]
    assert not np.array_equal(NoiseSource(flipped).gaussian(key, 64, 1.0), da["gaussian"])


def test_entries_of_one_draw_are_not_all_equal(seed):
    # the index inside the array is part of the draw: entries are i.i.d., not one value broadcast
    x = NoiseSource(seed).gaussian(("k",), 1000, 1.0)
    assert np.unique(x).size == 1000


def test_integer_draws_are_int64(seed):
    src = NoiseSource(seed)
    for arr in (src.gaussian_int(("a",), 10, 3.0), src.discrete_laplace(("b",), 10, 3.0),
                src.int_noise(("c",), 10, "gaussian", 3.0), src.int_noise(("d",), 10, "discrete_laplace", 3.0),
                src.gaussian_int(("e",), (2, 3), 3.0)):
        assert arr.dtype == np.int64
    assert src.gaussian_int(("e",), (2, 3), 3.0).shape == (2, 3)
    assert src.discrete_laplace(("f",), (4, 5), 3.0).shape == (4, 5)


def test_int_noise_dispatches_to_the_named_mechanism(seed):
    src = NoiseSource(seed)
    np.testing.assert_array_equal(src.int_noise(("x",), 50, "gaussian", 4.0), src.gaussian_int(("x",), 50, 4.0))
    np.testing.assert_array_equal(src.int_noise(("x",), 50, "discrete_laplace", 4.0),
                                  src.discrete_laplace(("x",), 50, 4.0))
    with pytest.raises(ValueError):
        src.int_noise(("x",), 50, "laplace", 4.0)  # a float mechanism must never be a released count's noise


# --------------------------------------------------------------------------- distributions
def _discrete_laplace_pmf(scale: float, kmax: int):
    q = np.exp(-1.0 / scale)
    k = np.arange(-kmax, kmax + 1)
    pmf = (1 - q) / (1 + q) * q ** np.abs(k)
    tail = q ** (kmax + 1) / (1 + q)  # P(X ≥ kmax+1) = P(X ≤ −kmax−1)
    return k, pmf, tail, q


@pytest.mark.parametrize("scale", [0.7, 3.0, 20.0])
def test_discrete_laplace_distribution(seed, chi2_gof, scale):
    """pmf ∝ q^|k| with q = e^{-1/b}; Var = 2q/(1−q)² exactly; symmetric about 0."""
    n = 400_000
    x = NoiseSource(seed).discrete_laplace(("dlap", scale), n, scale)
    kmax = int(np.ceil(8 * scale)) + 3
    k, pmf, tail, q = _discrete_laplace_pmf(scale, kmax)
    inner = np.bincount(x[np.abs(x) <= kmax] + kmax, minlength=2 * kmax + 1)
    obs = np.r_[(x < -kmax).sum(), inner, (x > kmax).sum()]
    assert chi2_gof(obs, np.r_[tail, pmf, tail]) > P_MIN

    # exact variance 2q/(1−q)²; the sample variance has SE √((μ4 − V²)/n), μ4 from the pmf (|k| ≤ 60b + 50)
    var = 2 * q / (1 - q) ** 2
    kk, pp, _, _ = _discrete_laplace_pmf(scale, int(60 * scale) + 50)
    assert abs((kk**2 * pp).sum() - var) < 1e-9 * max(var, 1)  # the closed form (sanity of the reference)
    mu4 = (kk.astype(float) ** 4 * pp).sum()
    se = np.sqrt((mu4 - var**2) / n)
    assert abs(x.var() - var) < Z * se, (x.var(), var, se)
    # symmetry: mean 0 within Z·√(V/n), and P(X>0) = P(X<0) given X ≠ 0 (binomial, Z sd)
    assert abs(x.mean()) < Z * np.sqrt(var / n)
    pos, neg = (x > 0).sum(), (x < 0).sum()
    assert abs(pos - neg) < Z * np.sqrt(pos + neg)


@pytest.mark.parametrize("sigma", [0.4, 3.0, 50.0])
def test_rounded_gaussian_distribution(seed, chi2_gof, sigma):
    """round(N(0,σ²)) has pmf Φ((k+½)/σ) − Φ((k−½)/σ); its std is ≈ σ (Sheppard: Var ≈ σ² + 1/12)."""
    n = 400_000
    x = NoiseSource(seed).gaussian_int(("rg", sigma), n, sigma)
    kmax = int(np.ceil(6 * sigma)) + 2
    k = np.arange(-kmax, kmax + 1)
    pmf = stats.norm.cdf((k + 0.5) / sigma) - stats.norm.cdf((k - 0.5) / sigma)
    tail = stats.norm.sf((kmax + 0.5) / sigma)
    inner = np.bincount((x[np.abs(x) <= kmax] + kmax), minlength=2 * kmax + 1)
    obs = np.r_[(x < -kmax).sum(), inner, (x > kmax).sum()]
    assert chi2_gof(obs, np.r_[tail, pmf, tail]) > P_MIN
    # variance against the exact variance of the rounded normal, SE from its 4th moment
    kk = np.arange(-int(12 * sigma) - 10, int(12 * sigma) + 11)
    pp = stats.norm.cdf((kk + 0.5) / sigma) - stats.norm.cdf((kk - 0.5) / sigma)
    var = (kk**2 * pp).sum()
    mu4 = (kk.astype(float) ** 4 * pp).sum()
    assert abs(x.var() - var) < Z * np.sqrt((mu4 - var**2) / n)
    assert abs(x.mean()) < Z * np.sqrt(var / n)
    if sigma >= 3:
        assert abs(np.sqrt(var) - sigma) < 0.02 * sigma  # std ≈ σ (rounding adds ≈ 1/12 to the variance)
        assert abs(x.std() - sigma) < 0.03 * sigma


def test_continuous_draws_have_their_distributions(seed):
    src = NoiseSource(seed)
    n = 200_000
    lap = src.laplace(("lap",), n, 2.5)
    assert stats.kstest(lap, stats.laplace(scale=2.5).cdf).pvalue > P_MIN
    gau = src.gaussian(("gau",), n, 1.7)
    assert stats.kstest(gau, stats.norm(scale=1.7).cdf).pvalue > P_MIN
    uni = src.uniform(("uni",), n, -2.0, 5.0)
    assert uni.min() >= -2.0 and uni.max() < 5.0
    assert stats.kstest(uni, stats.uniform(loc=-2.0, scale=7.0).cdf).pvalue > P_MIN
    ints = src.integers(("int",), n, 3, 13)
    assert ints.min() >= 3 and ints.max() <= 12
    obs = np.bincount(ints - 3, minlength=10)
    assert stats.chisquare(obs).pvalue > P_MIN


# --------------------------------------------------------------------------- tracing
def test_trace_records_keys_with_sizes(seed):
    src = NoiseSource(seed, trace=True)
    src.gaussian(("a", 1), 5, 1.0)
    src.gaussian(("a", 1), 5, 1.0)
    src.discrete_laplace(("b", 2, "count"), (3, 4), 2.0)
    src.int_noise(("c",), 7, "gaussian", 1.0)
    src.generator(("d",), 11)
    assert src.keys[(("a", 1), 5)] == 2
    assert src.keys[(("b", 2, "count"), 12)] == 1  # size = number of values, not the shape
    assert src.keys[(("c",), 7)] == 1
    assert src.keys[(("d",), 11)] == 1
    assert sum(src.keys.values()) == 5
    quiet = NoiseSource(seed)
    quiet.gaussian(("a", 1), 5, 1.0)
    assert len(quiet.keys) == 0
    # tracing does not change the values
    np.testing.assert_array_equal(NoiseSource(seed, trace=True).gaussian(("z",), 9, 1.0),
                                  NoiseSource(seed).gaussian(("z",), 9, 1.0))


# --------------------------------------------------------------------------- seeds
def test_seed_bytes_none_draws_fresh_entropy():
    a, b = seed_bytes(None), seed_bytes(None)
    assert isinstance(a, bytes) and len(a) == 32 and len(b) == 32
    assert a != b  # 2^-256 chance of a false failure
    assert seed_from_entropy() != seed_from_entropy()


def test_seed_bytes_int_warns_and_is_reproducible():
    with pytest.warns(UnsafeSeedWarning):
        a = seed_bytes(12345)
    with pytest.warns(UnsafeSeedWarning):
        b = seed_bytes(np.int64(12345))
    with pytest.warns(UnsafeSeedWarning):
        c = seed_bytes(12346)
    assert a == b and a != c and len(a) >= 16
    NoiseSource(a)  # usable as a seed


def test_seed_bytes_passes_long_bytes_and_rejects_bad_seeds():
    s = bytes(range(32))
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnsafeSeedWarning)  # bytes seeds do not warn
        assert seed_bytes(s) == s
        assert seed_bytes(bytearray(s)) == s
    for bad in (b"", b"short", bytes(15), bytearray(8), bytes(16), bytes(31)):
        with pytest.raises(ValueError):
            seed_bytes(bad)
    for bad in (True, False, 1.5, "a string seed of many chars", [1, 2, 3]):
        with pytest.raises(ValueError):
            seed_bytes(bad)


def test_noise_source_rejects_short_or_non_byte_seeds():
    for bad in (b"", bytes(15), "0123456789abcdef0123", 12345, None):
        with pytest.raises(ValueError):
            NoiseSource(bad)
    NoiseSource(bytes(16))


def test_the_fingerprint_is_not_the_seed_and_never_a_noise_source_attribute(seed, make_seed):
    from dpstream.noise import fingerprint
    h = fingerprint(seed)
    assert h == fingerprint(seed) and h != fingerprint(make_seed("x"))
    assert seed.hex() not in h and hashlib.sha256(seed).hexdigest()[:16] != h
    assert not hasattr(NoiseSource(seed), "seed_hash")  # nothing a plan could copy into a release


# --------------------------------------------------------------------------- the reused draw generator
def test_draws_from_the_reused_philox_equal_draws_from_a_new_generator(seed):
    """The draw methods reset one Philox per thread instead of making a new one per key: every value
    equals the same draw from ``generator(key)``, whatever was drawn before (odd sizes leave Philox's
    output buffer part-used; 32-bit draws leave a half word)."""
    import pickle
    src = NoiseSource(seed, prefix=("run", 2))
    rng = np.random.default_rng(0)
    for i in range(300):
        key = ("svt", int(rng.integers(0, 5)), i, "x")
        size = int(rng.integers(0, 9))
        kind = i % 6
        if kind == 0:
            got, want = src.gaussian(key, size, 1.5), src.generator(key, size).normal(0.0, 1.5, size)
        elif kind == 1:
            got, want = src.gaussian_int(key, size, 3.0), np.rint(src.generator(key).normal(0.0, 3.0, size))
        elif kind == 2:
            g, p = src.generator(key), -np.expm1(-1.0 / 2.0)
            got, want = src.discrete_laplace(key, size, 2.0), g.geometric(p, size) - g.geometric(p, size)
        elif kind == 3:
            got, want = src.laplace(key, size, 0.7), src.generator(key).laplace(0.0, 0.7, size)
        elif kind == 4:
            got, want = src.uniform(key, size, -1.0, 2.0), src.generator(key).uniform(-1.0, 2.0, size)
        else:
            got, want = src.integers(key, size, 0, 2 ** 31), src.generator(key).integers(0, 2 ** 31, size)
        np.testing.assert_array_equal(got, want)
        src._drawing(("half", i), 3).integers(0, 7, 3, dtype=np.int32)  # 32-bit draws between keys
    back = pickle.loads(pickle.dumps(src))  # the per-thread generator is not pickled
    back.attach_seed(seed)
    np.testing.assert_array_equal(back.laplace(("k",), 5, 1.0), src.laplace(("k",), 5, 1.0))


def test_the_reused_philox_is_per_thread(seed):
    """Threads drawing from one NoiseSource at once (a runner's worker threads share a DoFn's objects)
    each get their own generator: every draw still equals the same draw from ``generator(key)``."""
    import threading
    src = NoiseSource(seed)
    bad, start = [], threading.Barrier(4)

    def work(w):
        start.wait()
        for i in range(1500):
            key = ("thread", w, i)
            if not np.array_equal(src.gaussian(key, 7, 1.0), src.generator(key).normal(0.0, 1.0, 7)):
                bad.append(key)

    threads = [threading.Thread(target=work, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert bad == []
