"""Statistical audits of single mechanisms with one privacy unit, where the unit is worst placed.

* A (snap) with the unit's L points in one part: the plan's ×L calibration is exact there (ε̂ ≈ ε_A),
  and a plan calibrated for one record is caught (ε̂ ≈ L·ε_A).
* The sparse vector when one unit is replaced in its public slots and its kept points move from one
  tick to another of the same ring: the instance's count is not monotone in that case; it stays within
  ε_svt (the chain through the unit's ⊥ version), and a record-level plan is caught.
"""
from __future__ import annotations

import numpy as np
import pytest

import audit_harness as H
from dpstream import EngineConfig
from dpstream.privacy import PrivacyPlan

L = 4


# -- the calibration is exact where the unit is worst placed: all L points in one part of A ---------

def _snap_cfg(**kw):
    base = dict(n_clusters=1, dim=1, radius=1.0, epsilon=2.0, delta=0.0, horizon_ticks=1, neighbouring="add_remove",
                semicoreset="snap", privacy_split=(0.25, 0.25, 0.5), bicriteria=True, n_rings=1, max_contributions=L)
    base.update(kw)
    return EngineConfig(**base)


def run_snap_unit(cfg, tag, side, phase, n_trials, K=20_000):
    """K parts per call, each a trial: n points, plus on D' one unit's L points (what bounding keeps of
    it) in the same part; the category is the released weight above n in steps of L."""
    from dpstream.noise import NoiseSource
    from dpstream.semicoresets import make_semicoreset
    res = []
    for b in range(-(-n_trials // K)):
        noise = NoiseSource(H.seed_for("snap-unit", tag, side, phase, b))
        A = make_semicoreset(cfg, PrivacyPlan.build(cfg), noise)
        n = int(np.ceil(A.count_tail(K))) - 1
        part = np.repeat(np.arange(K), n + side * L)
        out = A(np.zeros((part.size, 1)), part, np.zeros((K, 1)), np.ones(K), ("A", b, "audit"))
        w = np.zeros(K)
        w[out.part] = out.weights
        res.append(np.where(w > 0, np.clip(np.floor((w - n) / L), -3, 3), -10**6).astype(np.int64))
    return np.concatenate(res)[:n_trials]


def snap_audit(tag, plan_cfg):
    cfg = _snap_cfg()
    eps = sum(ln.epsilon for ln in PrivacyPlan.build(cfg).lines if ln.component.startswith("semicoreset A"))
    n_cal, n_test = H.n_trials(40_000), H.n_trials(200_000)
    runs = [run_snap_unit(plan_cfg, tag, s, ph, n) for ph, n in (("cal", n_cal), ("test", n_test)) for s in (0, 1)]
    return H.audit_calibrated(f"semicoreset A, snap, one unit of L = {L} points in one part [{tag}]", eps, 0.0,
                              *runs, describe=lambda rows, k: f"⌊(weight − n)/L⌋ ∈ {[r[0] for r in rows]}")


def test_snap_unit_in_one_part_within_plan():
    res = snap_audit("correct", _snap_cfg())
    assert res.passed, res
    assert res.eps_hat > 0.6, res  # the tail of a part holding the unit's L points is near the plan's ε_A = 1


def test_snap_unit_audit_catches_record_level_calibration():
    res = snap_audit("record-plan", _snap_cfg(max_contributions=None))  # group privacy not accounted
    assert not res.passed, res
    assert res.eps_hat > 2.0, res


# -- the sparse vector under unit replacement: the non-monotone case ---------------------------------

SVT_H, SVT_L = 8, 3
SVT_M = 2 * SVT_L


def _svt_cfg(**kw):
    base = dict(n_clusters=1, dim=1, radius=1.0, epsilon=20.0, delta=0.0, horizon_ticks=SVT_H,
                neighbouring="replace_one", block_size=SVT_M, grid_levels=1, bicriteria=True,
                privacy_split=(0.1, 0.05, 0.85), max_contributions=SVT_L)
    base.update(kw)
    return EngineConfig(**base)


def run_svt_patterns(scale, tag, side, phase, n, batch=50_000):
    """One ring's instance; background: L points at every even tick. D: a unit's L points at tick 1; D': in
    the same public slots a unit whose tick-1 slots are ⊥ keeps L points at tick 2 instead (its first L),
    so the instance's count moves by −L at tick 1 and not at all from tick 2 on: not monotone."""
    from dpstream.noise import NoiseSource
    from dpstream.sparse_vector import LevelZeroAboveThreshold
    out = []
    for b in range(-(-n // batch)):
        k = min(batch, n - b * batch)
        svt = LevelZeroAboveThreshold(k, SVT_M, scale, NoiseSource(H.seed_for("svt-unit", tag, side, phase, b)),
                                      ("svt", 0))
        code = np.zeros(k, dtype=np.int64)
        for t in range(1, SVT_H + 1):
            a = SVT_L * (t % 2 == 0) + SVT_L * (t == (2 if side else 1))
            code |= svt.step(t, np.full(k, a, dtype=np.int64)).astype(np.int64) << (t - 1)
        out.append(code)
    return np.concatenate(out)


def svt_audit(tag, plan_cfg):
    eps_svt = [ln.epsilon for ln in PrivacyPlan.build(_svt_cfg()).lines if ln.mechanism == "svt"][0]
    scale = PrivacyPlan.build(plan_cfg).svt_scale
    runs = [run_svt_patterns(scale, tag, s, ph, H.n_trials(n)) for ph, n in (("cal", 50_000), ("test", 200_000))
            for s in (0, 1)]
    return H.audit_calibrated(f"sparse vector, one unit replaced (non-monotone), L = {SVT_L} [{tag}]", eps_svt,
                              0.0, *runs, describe=lambda rows, k: f"{len(rows)} firing patterns")


def test_svt_unit_replacement_within_plan():
    assert [ln.epsilon for ln in PrivacyPlan.build(_svt_cfg()).lines if ln.mechanism == "svt"][0] == \
        pytest.approx(1.0)
    res = svt_audit("correct", _svt_cfg())
    assert res.passed, res


def test_svt_unit_audit_catches_record_level_calibration():
    res = svt_audit("record-plan", _svt_cfg(max_contributions=None))
    assert not res.passed, res
