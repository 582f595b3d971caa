"""End-to-end statistical privacy audit of the engine (dpstream.engine.Engine).

A tiny public configuration, pure ε = 2 under add/remove, T = 2 ticks: d = 1, k = 1, one grid level,
one tree, two buckets, three rings, the snap semicoreset, a block size the sparse vector reaches
only through its noise (so both the fire path and the final flush carry the record's part).  Every
mechanism runs: the bicriteria counters (its count estimate is released at every tick), the sparse
vector of every ring at every tick, A on every (ring, center) part.  The heavy-hitter floor
hh_min_count is set so high that F stays {ball centre} (a public parameter: F is then the same on D
and D', which keeps the release's layout fixed; the reports themselves are audited in
test_audit_heavy_hitters).

Neighbours: D = 30 points at the ball centre at tick 1, nothing at tick 2; D' adds the record x at the
centre at tick 1.  Every run is a fresh Engine(cfg, seed) with its own seed.  Events, fixed in
advance from the known distribution of the release (Bonferroni over 2 events × 2 directions):

* "the first released coreset weight at tick T is ≥ 31": the ring-0 part's weight 30 + Z vs 31 + Z,
  Z discrete Laplace of the plan's A scale — a noise tail with ratio e^{ε_A} (ε_A = 0.85 ε);
* "the count estimate at tick 1 is ≥ 31".

Configured ε = the ledger's total (plan.total_epsilon).  Broken variants that must fail: A's count
scale halved (true ε_A doubles, beyond the total), and the exact count released as the count
estimate (operator telemetry in the release channel).
"""
from __future__ import annotations

import numpy as np
import pytest

import audit_harness as H
import broken
import dpstream.engine as engine_mod
from dpstream import Engine, EngineConfig
from dpstream.privacy import PrivacyPlan

N_BULK = 30


def engine_cfg() -> EngineConfig:
    return EngineConfig(n_clusters=1, dim=1, radius=1.0, epsilon=2.0, delta=0.0, horizon_ticks=2,
                        neighbouring="add_remove", semicoreset="snap", grid_levels=1, n_trees=1, n_reps=1,
                        n_buckets=2, hh_min_count=1e6, ring_centers="bicriteria", n_rings=3, block_size=60,
                        n_init=1)


def run_engine(tag, side, n_runs):
    cfg = engine_cfg()
    first_w = np.zeros(n_runs)
    count1 = np.zeros(n_runs)
    tick1 = np.zeros((N_BULK + side, 1))
    for i in range(n_runs):
        eng = Engine(cfg, H.seed_for("engine", tag, side, i))
        r1 = eng.step(tick1)
        r2 = eng.step(np.zeros((0, 1)))
        assert r2.tick == cfg.horizon_ticks and r2.epoch == 0 and r2.n_candidate_centers == 1
        count1[i] = r1.count_estimate
        first_w[i] = r2.coreset_weights[0] if len(r2.coreset_weights) else 0
    return {f"first coreset weight at tick 2 ≥ {N_BULK + 1}": first_w >= N_BULK + 1,
            f"count estimate at tick 1 ≥ {N_BULK + 1}": count1 >= N_BULK + 1}


CONFIGURED = PrivacyPlan.build(engine_cfg()).total_epsilon  # the ledger's claim (before any monkeypatch)


def audit(tag, n_runs):
    n = H.n_trials(n_runs)
    return H.audit_fixed(f"engine end to end [{tag}]", CONFIGURED, 0.0, run_engine(tag, 0, n),
                         run_engine(tag, 1, n))


def test_engine_within_ledger():
    plan = PrivacyPlan.build(engine_cfg())
    assert plan.total_epsilon == pytest.approx(2.0)
    res = audit("correct", 250)
    assert res.passed, res


def _exact_count_estimate(monkeypatch):
    """Operator telemetry in the release: the count estimate is the exact number of points read."""
    orig = engine_mod.Engine._release
    monkeypatch.setattr(engine_mod.Engine, "_release", lambda self, t, c: orig(self, t, float(self.n_points)))


BROKEN = [
    ("a_count_scale_halved", lambda mp: broken.plan_scales_halved(mp, "a_count"), 500),
    ("exact_count_estimate", _exact_count_estimate, 150),
]


@pytest.mark.parametrize("variant,patch,n_runs", BROKEN, ids=[b[0] for b in BROKEN])
def test_engine_audit_catches(variant, patch, n_runs, monkeypatch):
    patch(monkeypatch)
    res = audit(variant, n_runs)
    assert not res.passed, res
    assert res.eps_hat > CONFIGURED + 0.25, res
