"""Statistical privacy audit of the continual counter (dpstream.counters.BinaryMechanism).

Neighbours (add/remove, the worst placement): D feeds ⊥ at every tick; D' adds one record (+1) at
tick 1, which lies in the L_T p-sums (i, 1), i < L_T — the most a record can touch.  Every run
releases the whole sequence of noisy prefix sums y_1..y_T; many independent counters are run at
once as the coordinates of one vectorised mechanism, under many seeds.

The event is a function of the whole released sequence.  y_t = node(top(t), 1) + (nodes that do not
contain tick 1), so the record's likelihood ratio depends on the sequence only through the pure
releases y_{2^i} = node(i, 1): for discrete Laplace noise the exact log-likelihood ratio is
(2·#{i : y_{2^i} ≥ 1} − L_T)/b, and the event "every y_{2^i} ≥ 1" has ratio exactly e^{L_T/b}.
The audit summarises a run by (#{i : y_{2^i} ≥ 1}, #{t : y_t ≥ 1}) and lets the calibration run
pick the event; for Gaussian noise by Σ_i y_{2^i} (its LLR is linear in that sum) with a threshold.

Configured ε: the counter's scale is the plan's (``PrivacyPlan.bic_scale``, pure mode) — the plan
charges a (tree, level, rep) instance ε_inst for a record that changes ≤ 1+B coordinates by one in
L_T p-sums each, so one coordinate is charged ε_inst/(1+B) = L_T/b; the config is chosen so that
this is 1.  Broken variants: the plan's scale halved; the plan calibrated for ⌊log2 T⌋ p-sums per
record instead of ⌊log2 T⌋ + 1 (a horizon off by one: true loss ×4/3).
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import audit_harness as H
import broken
from dpstream.counters import BinaryMechanism
from dpstream.noise import NoiseSource
from dpstream.params import EngineConfig
from dpstream.privacy import PrivacyPlan, gaussian_epsilon

T = 8  # horizon: L_T = 4
BATCH = 25_000  # counters per seed
N_CAL, N_TEST = 50_000, 200_000  # runs per side (default scale)


def plan_cfg(eps_coord: float = 1.0) -> EngineConfig:
    """A one-level, one-bucket bicriteria whose per-coordinate charge ε_inst/(1+B) is ``eps_coord``."""
    base = dict(n_clusters=1, dim=1, radius=1.0, delta=0.0, horizon_ticks=T, neighbouring="add_remove",
                grid_levels=1, n_trees=1, n_reps=1, n_buckets=1, privacy_split=(0.5, 0.25, 0.25), bicriteria=True)
    probe = EngineConfig(epsilon=1.0, **base)
    width = 1 + probe.id_bits(0)
    return EngineConfig(epsilon=eps_coord * width / 0.5, **base)


def run_counters(tag, side, phase, n, mechanism, scale):
    """Releases (n, T) of n independent counters; side 1 adds one record at tick 1."""
    out = []
    for b in range(math.ceil(n / BATCH)):
        k = min(BATCH, n - b * BATCH)
        bm = BinaryMechanism(k, T, NoiseSource(H.seed_for("bm", tag, side, phase, b)), ("audit-bm",),
                             mechanism, scale)
        rel = np.empty((T, k), dtype=np.int64)
        for t in range(1, T + 1):
            rel[t - 1] = bm.step(np.ones(k, dtype=np.int64) if (side == 1 and t == 1) else None)
        out.append(rel.T)
    return np.concatenate(out)


def pure_summary(rel):
    dyadic = rel[:, [2**i - 1 for i in range(int(math.log2(T)) + 1)]]
    return np.stack([(dyadic >= 1).sum(axis=1), (rel >= 1).sum(axis=1)], axis=1)


def gauss_summary(rel):
    return rel[:, [2**i - 1 for i in range(int(math.log2(T)) + 1)]].sum(axis=1)


def audit_pure(tag: str, plan: PrivacyPlan, eps: float):
    scale = plan.bic_scale[0]
    n_cal, n_test = H.n_trials(N_CAL), H.n_trials(N_TEST)
    runs = [pure_summary(run_counters(tag, s, ph, n, "discrete_laplace", scale))
            for ph, n in (("cal", n_cal), ("test", n_test)) for s in (0, 1)]
    return H.audit_calibrated(f"binary mechanism, discrete Laplace [{tag}]", eps, 0.0, *runs,
                              describe=lambda rows, kind: f"(#dyadic≥1, #ticks≥1) ∈ {rows}")


def test_binary_mechanism_pure_within_plan():
    cfg = plan_cfg()
    plan = PrivacyPlan.build(cfg)
    # the plan's per-coordinate charge: L_T / b must be the configured 1
    assert plan.bic_mechanism == "discrete_laplace"
    assert cfg.counter_levels / plan.bic_scale[0] == pytest.approx(1.0)
    res = audit_pure("correct", plan, 1.0)
    assert res.passed, res


@pytest.mark.parametrize("variant", ["half_scale", "horizon_off_by_one"])
def test_binary_mechanism_audit_catches(variant, monkeypatch):
    if variant == "half_scale":
        broken.plan_scales_halved(monkeypatch, "bic")
    else:
        broken.counter_levels_off_by_one(monkeypatch)
    plan = PrivacyPlan.build(plan_cfg())
    res = audit_pure(variant, plan, 1.0)
    assert not res.passed, res
    assert res.eps_hat > 1.1, res  # a clear margin


# --------------------------------------------------------------------------- Gaussian (δ > 0)
GAUSS_DELTA = 1e-5
GAUSS_Z = 1.9938  # noise multiplier σ/Δ₂ with ε(δ = 1e-5) = 2 (Balle–Wang exact profile)


def audit_gauss(tag: str, sigma: float, eps: float):
    n_cal, n_test = H.n_trials(N_CAL), H.n_trials(N_TEST)
    runs = [gauss_summary(run_counters(tag, s, ph, n, "gaussian", sigma))
            for ph, n in (("cal", n_cal), ("test", n_test)) for s in (0, 1)]
    return H.audit_calibrated(f"binary mechanism, rounded Gaussian [{tag}]", eps, GAUSS_DELTA, *runs,
                              values=lambda r: r[0], ratio_order=False,
                              describe=lambda rows, kind: f"Σ_i y_(2^i) {kind} "
                                                          f"{rows[0][0] if kind == '>=' else rows[-1][0]}")


@pytest.mark.parametrize("variant", ["correct", "half_scale"])
def test_binary_mechanism_gaussian(variant):
    L_T = int(math.log2(T)) + 1
    sigma = GAUSS_Z * math.sqrt(L_T)  # Δ₂ of one record = √L_T
    eps = gaussian_epsilon(GAUSS_Z, GAUSS_DELTA)
    assert eps == pytest.approx(2.0, abs=1e-3)
    res = audit_gauss(variant, sigma if variant == "correct" else sigma / 2, eps)
    if variant == "correct":
        assert res.passed, res
    else:
        assert not res.passed, res
