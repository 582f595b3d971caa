"""The audit harness itself, on mechanisms whose privacy is known exactly (no dpstream involved).

* Clopper–Pearson bounds are exact binomial tail inversions.
* Randomized response at ε = 1 (ratio exactly e) audits to ε̂ ≤ 1 with a point estimate near 1,
  and the same output claimed at ε = 0.5 is caught.
* A mechanism that publishes the secret with probability δ is (ε, δ)-DP but not ε-DP: the (ε, δ)
  form passes it, the pure form catches it.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

import audit_harness as H


@pytest.mark.parametrize("k,n", [(0, 50), (3, 50), (25, 50), (50, 50), (1234, 100_000)])
def test_clopper_pearson_bounds_invert_the_binomial_tail(k, n):
    a = 1e-3
    lo, hi = H.cp_lower(k, n, a), H.cp_upper(k, n, a)
    assert lo <= k / n <= hi
    if k > 0:
        assert stats.binom.sf(k - 1, n, lo) == pytest.approx(a, rel=1e-6)  # P(X ≥ k | p = lo) = α
    else:
        assert lo == 0.0
    if k < n:
        assert stats.binom.cdf(k, n, hi) == pytest.approx(a, rel=1e-6)  # P(X ≤ k | p = hi) = α
    else:
        assert hi == 1.0


def randomized_response(bit: int, n: int, eps: float, rng, leak: float = 0.0):
    """Report the bit truthfully with probability e^ε/(1+e^ε); with probability ``leak`` publish it
    tagged (output 2 + bit)."""
    keep = rng.random(n) < math.exp(eps) / (1 + math.exp(eps))
    out = np.where(keep, bit, 1 - bit)
    return np.where(rng.random(n) < leak, 2 + bit, out)


def _runs(eps, leak=0.0, n=(20_000, 50_000)):
    rng = np.random.default_rng(np.frombuffer(H.seed_for("harness", eps, leak), dtype=np.uint32))
    return [randomized_response(side, m, eps, rng, leak) for m in n for side in (0, 1)]


def test_randomized_response_audits_to_its_epsilon():
    res = H.audit_calibrated("randomized response, ε = 1", 1.0, 0.0, *_runs(1.0))
    assert res.passed and res.eps_hat > 0.9 and abs(res.point - 1.0) < 0.05, res


def test_randomized_response_claimed_at_half_its_epsilon_is_caught():
    res = H.audit_calibrated("randomized response, ε = 1 claimed as 0.5", 0.5, 0.0, *_runs(1.0))
    assert not res.passed, res


def test_delta_form():
    runs = _runs(0.5, leak=0.01)
    assert H.audit_calibrated("RR(0.5) + leak w.p. 0.01, as (0.5, 0.01)", 0.5, 0.01, *runs).passed
    res = H.audit_calibrated("RR(0.5) + leak w.p. 0.01, as (0.5, 0)", 0.5, 0.0, *runs)
    assert not res.passed and res.eps_hat > 3.0, res
