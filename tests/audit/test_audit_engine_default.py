"""End-to-end statistical privacy audit of the engine in its *default* configuration (issue 8, item 7).

The defaults: no bicriteria, the stream counter, A = the tree over exact leaf sketches, rings around the
ball's center and the centers released at each epoch change (``ring_centers="bicriteria+released"``),
epochs gated on the DP count. Tiny public sizes only: d = 1, k = 2, T = 4 ticks, pure ε = 2 under
add/remove (δ = 0: discrete Laplace everywhere, so the audit's ε̂ is directly comparable), block size
M = 200 (so the count gate 0.25·M passes): the runs change epoch at ticks 1 and 2 (all but a noise
tail of the DP count; asserted for ≥ 95% of them).

Neighbours: D = N points at a = −0.5 in tick 1 and 2N points at p = +0.7 in each of ticks 2–4 (so the
DP count doubles by tick 2 whatever its noise); D' adds the record x at p in tick 1. Events fixed in advance (Bonferroni over 2 events × 2 directions):

* "the release of tick 2 holds a coreset point within 1e-5 of p": the tick-2 points at p are
  summarised in epoch 1, whose rings are centered on the ball's center and the centers *released* at
  tick 1 (near a: on D and D' alike, up to e^ε). Their leaf means then carry noise at the scale of a
  ring of radius ~1 around the ball's center, ≈ 1e-2: the event is rare on both sides. A broken
  engine whose ring centers come from the raw points of the tick (a non-private k-means) puts a ring
  center exactly at x on D': the tick-2 points sit at distance 0, in a ring of radius r_0 ≈ 1e-3, and
  their released mean lands within ~1e-5 of p every time — the release reveals x.
* "the count estimate at tick 4 ≥ 7N + 1" (the stream counter's noise tail; x moves it by one).

Configured ε = the ledger's total (plan.total_epsilon).
"""
from __future__ import annotations

import numpy as np
import pytest

import audit_harness as H
import broken
from dpstream import Engine, EngineConfig
from dpstream.privacy import PrivacyPlan

N = 500
A_LOC, P_LOC = -0.5, 0.7
T = 4


def default_cfg() -> EngineConfig:
    return EngineConfig(n_clusters=2, dim=1, radius=1.0, epsilon=2.0, delta=0.0, horizon_ticks=T,
                        neighbouring="add_remove", block_size=200, n_init=3)


def run_engine(tag, side, n_runs):
    cfg = default_cfg()
    near = np.zeros(n_runs, dtype=bool)
    count = np.zeros(n_runs)
    epochs = np.zeros(n_runs)
    ticks = [np.full((N + side, 1), A_LOC)] + [np.full((2 * N, 1), P_LOC) for _ in range(T - 1)]
    if side:
        ticks[0][-1] = P_LOC  # x, at p, in tick 1
    for i in range(n_runs):
        e = Engine(cfg, H.seed_for("engine-default", tag, side, i))
        rels = [e.step(x) for x in ticks]
        epochs[i] = e.epoch
        near[i] = np.any(np.abs(rels[1].coreset_points[:, 0] - P_LOC) < 1e-5)
        count[i] = rels[-1].count_estimate
    assert np.mean(epochs >= 2) >= 0.95, "the audited runs must go through at least two epoch changes"
    total = N + 2 * N * (T - 1)
    return {"tick-2 release holds a point within 1e-5 of p": near,
            f"count estimate at tick {T} ≥ {total + 1}": count >= total + 1}


CONFIGURED = PrivacyPlan.build(default_cfg()).total_epsilon


def audit(tag, n_runs):
    n = H.n_trials(n_runs)
    return H.audit_fixed(f"engine, default configuration [{tag}]", CONFIGURED, 0.0, run_engine(tag, 0, n),
                         run_engine(tag, 1, n))


def test_default_engine_within_ledger():
    assert CONFIGURED == pytest.approx(2.0)
    res = audit("correct", 300)
    assert res.passed, res


def test_default_engine_audit_catches_ring_centers_from_raw_points(monkeypatch):
    broken.ring_centers_from_raw_points(monkeypatch)
    res = audit("raw-ring-centers", 150)
    assert not res.passed, res
    assert res.eps_hat > CONFIGURED + 0.5, res
