"""Statistical audit of the default engine configuration with one privacy unit of many records.

The configuration of the default audit (no bicriteria, the stream counter, A = the tree, rings around
the ball's center and the released centers; d = 1, k = 2, T = 4, pure ε = 2 under add/remove, M = 200)
with ``max_contributions`` L = 4: the plan protects one unit of up to L kept points.

Neighbours: D = N one-record units at a = −0.5 in tick 1 and 2N at p = +0.7 in each of ticks 2–4; D'
adds one unit u with 100·L records at q = 0.95 in tick 1 — all in one tick, one leaf, one ring: the
adversarial layout. Bounding keeps L of them, and A's noise (calibrated for L points) hides a leaf of
L points: "a release holds a coreset point within 0.1 of q" is rare on both sides. The broken variant
skips bounding (the plan still says L): u's 400 points make a leaf far above A's keep threshold, the
event happens almost every time on D', and the audit's ε̂ exceeds the configured ε.

Events fixed in advance (Bonferroni over 2 events × 2 directions): the one above, and "the count
estimate at tick 4 ≥ 7N + 1" (the stream counter's tail; u moves it by L).

What the first audit can and cannot catch: it catches an engine that does not bound (a unit of 400
points). It does not catch an engine that bounds to L but is calibrated for one record (no ×L): a leaf
of L = 4 points against A's record-level noise, seen through one event of a whole engine release, moves
the event's probability too little for a few hundred trials (measured: ε̂ lower bound −0.58, 73/150 vs
71/150). The second audit catches that error where the engine's noise is smallest: one tick (L_T = 1),
most of the budget on the stream counter, the unit's L kept points against the counter's noise (the
record-level plan: ε̂ 2.9 > 2; the unit plan: ε̂ 1.1, point 1.8, near its ε = 2). At the mechanism,
``test_audit_user_level_mechanisms.py::test_snap_unit_audit_catches_record_level_calibration`` catches
it in A (the unit's L points in one part, ε̂ ≈ L·ε_A).
"""
from __future__ import annotations

import numpy as np
import pytest

import audit_harness as H
from dpstream import Engine, EngineConfig
from dpstream.contributions import ContributionBounder
from dpstream.privacy import PrivacyPlan

N = 500
A_LOC, P_LOC, Q_LOC = -0.5, 0.7, 0.95
T = 4
L = 4
HEAVY = 100 * L


def unit_cfg() -> EngineConfig:
    return EngineConfig(n_clusters=2, dim=1, radius=1.0, epsilon=2.0, delta=0.0, horizon_ticks=T,
                        neighbouring="add_remove", block_size=200, n_init=3, max_contributions=L)


def _ticks(side):
    ticks = [(np.full((N, 1), A_LOC), [f"a{j}" for j in range(N)])]
    ticks += [(np.full((2 * N, 1), P_LOC), [f"p{t}-{j}" for j in range(2 * N)]) for t in range(1, T)]
    if side:
        X, ids = ticks[0]
        ticks[0] = (np.r_[X, np.full((HEAVY, 1), Q_LOC)], ids + ["u"] * HEAVY)
    return ticks


def run_engine(tag, side, n_runs, bound=True):
    cfg = unit_cfg()
    near = np.zeros(n_runs, dtype=bool)
    count = np.zeros(n_runs)
    ticks = _ticks(side)
    for i in range(n_runs):
        e = Engine(cfg, H.seed_for("engine-unit", tag, side, i))
        b = ContributionBounder(cfg)
        rels = [e.step(b.bound(X, ids) if bound else X) for X, ids in ticks]
        near[i] = any(np.any(np.abs(r.coreset_points[:, 0] - Q_LOC) < 0.1) for r in rels)
        count[i] = rels[-1].count_estimate
    total = N + 2 * N * (T - 1)
    return {"a release holds a coreset point within 0.1 of q": near,
            f"count estimate at tick {T} ≥ {total + 1}": count >= total + 1}


CONFIGURED = PrivacyPlan.build(unit_cfg()).total_epsilon


def audit(tag, n_runs, bound=True):
    n = H.n_trials(n_runs)
    return H.audit_fixed(f"engine, default configuration, one unit of {HEAVY} records, L = {L} [{tag}]",
                         CONFIGURED, 0.0, run_engine(tag, 0, n, bound), run_engine(tag, 1, n, bound))


def test_unit_within_ledger():
    assert CONFIGURED == pytest.approx(2.0)
    res = audit("correct", 120)
    assert res.passed, res


def test_audit_catches_an_engine_without_bounding():
    res = audit("no-bounding", 150, bound=False)
    assert not res.passed, res
    assert res.eps_hat > CONFIGURED + 0.5, res


# -- bounded, but calibrated for one record: seen where the engine's noise is smallest ------------------

def counter_cfg(unit=True) -> EngineConfig:
    """One tick (L_T = 1), most of the budget on the stream counter: its released count estimate is the one
    output where a unit's L points stand against a small noise."""
    return EngineConfig(n_clusters=2, dim=1, radius=1.0, epsilon=2.0, delta=0.0, horizon_ticks=1,
                        neighbouring="add_remove", block_size=200, n_init=3, privacy_split=(0.0, 0.05, 0.15, 0.8),
                        max_contributions=L if unit else None)


def run_counter(tag, side, n_runs, plan_unit=True):
    """D: N one-record units; D′: and unit u with HEAVY records, bounded to L. The engine's plan is the unit's
    (correct) or the record-level one with the same bounding (broken: no ×L)."""
    ucfg = counter_cfg()
    X = np.full((N + side * HEAVY, 1), A_LOC)
    ids = [f"a{j}" for j in range(N)] + ["u"] * (side * HEAVY)
    count = np.zeros(n_runs)
    for i in range(n_runs):
        e = Engine(counter_cfg(plan_unit), H.seed_for("engine-unit-counter", tag, side, i))
        count[i] = e.step(ContributionBounder(ucfg).bound(X, ids)).count_estimate
    return {f"count estimate ≥ {N + 2}": count >= N + 2, f"count estimate ≥ {N + L}": count >= N + L}


def counter_audit(tag, n_runs, plan_unit=True):
    n = H.n_trials(n_runs)
    eps = PrivacyPlan.build(counter_cfg()).total_epsilon
    return H.audit_fixed(f"engine, stream counter, one unit bounded to L = {L} [{tag}]", eps, 0.0,
                         run_counter(tag, 0, n, plan_unit), run_counter(tag, 1, n, plan_unit))


def test_unit_counter_within_ledger():
    res = counter_audit("correct", 300)
    assert res.passed, res


def test_audit_catches_bounding_with_a_record_level_plan():
    res = counter_audit("record-plan", 300, plan_unit=False)
    assert not res.passed, res
