"""End-to-end statistical privacy audit of the engine in its *default* configuration.

The defaults: no bicriteria, the stream counter, A = the tree over exact leaf sketches, rings around the
ball's center and the centers released at each epoch change (``ring_centers="bicriteria+released"``),
epochs gated on the DP count. Two sizes, each through two epoch changes (ticks 1 and 2: all but a noise
tail of the DP count; asserted for ≥ 95% of the runs), k = 2, T = 4 ticks, ε = 2 under add/remove,
block size M = 200 (so the count gate 0.25·M passes):

* d = 1, pure ε (δ = 0: discrete Laplace everywhere, so the audit's ε̂ is directly comparable);
* d = 64, δ = 1e-6: the tree's random projection splits in 64 dimensions (depth 6) and every counter
  and A use the rounded Gaussian, composed by the PLD accountant — the path a real deployment runs.

Neighbours: D = N points at a = −0.5·e₁ in tick 1 and 2N points at p = +0.7·e₁ in each of ticks 2–4
(so the DP count doubles by tick 2 whatever its noise); D' adds the record x at p in tick 1. Events
fixed in advance (Bonferroni over 2 events × 2 directions):

* "the release of tick 2 holds a coreset point near p" (within 1e-5 at d = 1, 1e-3 at d = 64): the
  tick-2 points at p are summarised in epoch 1, whose rings are centered on the ball's center and the
  centers *released* at tick 1 (near a: on D and D' alike, up to e^ε). Their leaf means then carry
  noise at the scale of a ring of radius ~1 around the ball's center (≈ 1e-2 per release, ≈ 2e-2 in
  norm at d = 64): the event is rare on both sides. A broken engine whose ring centers come from the
  raw points of the tick (a non-private k-means) puts a ring center exactly at x on D': the tick-2
  points sit at distance 0, in a ring of radius r_0 ≈ 1e-3, and their released mean lands within
  ~2e-5 of p every time — the release reveals x.
* "the count estimate at tick 4 ≥ 7N + 1" (the stream counter's noise tail; x moves it by one).

Configured (ε, δ) = the ledger's total (plan.total_epsilon) at the configuration's δ.
"""
from __future__ import annotations

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

import audit_harness as H
import broken
from dpstream import Engine, EngineConfig
from dpstream.privacy import PrivacyPlan

N = 500
A_LOC, P_LOC = -0.5, 0.7
T = 4
SIZES = {"d1-pure": (1, 0.0, 1e-5), "d64-gaussian": (64, 1e-6, 1e-3)}  # (d, δ, "near" distance)


def default_cfg(size: str = "d1-pure") -> EngineConfig:
    d, delta, _ = SIZES[size]
    return EngineConfig(n_clusters=2, dim=d, radius=1.0, epsilon=2.0, delta=delta, horizon_ticks=T,
                        neighbouring="add_remove", block_size=200, n_init=3)


def run_engine(size, tag, side, n_runs):
    cfg = default_cfg(size)
    d, _, near_dist = SIZES[size]
    a, p = np.zeros(d), np.zeros(d)
    a[0], p[0] = A_LOC, P_LOC
    near = np.zeros(n_runs, dtype=bool)
    count = np.zeros(n_runs)
    epochs = np.zeros(n_runs)
    ticks = [np.tile(a, (N + side, 1))] + [np.tile(p, (2 * N, 1)) for _ in range(T - 1)]
    if side:
        ticks[0][-1] = p  # x, at p, in tick 1
    with threadpool_limits(1):  # the broken variant's k-means: one thread is ~25x faster at this size
        for i in range(n_runs):
            e = Engine(cfg, H.seed_for("engine-default", size, tag, side, i))
            rels = [e.step(x) for x in ticks]
            epochs[i] = e.epoch
            pts = rels[1].coreset_points
            near[i] = len(pts) > 0 and np.min(np.linalg.norm(pts - p, axis=1)) < near_dist
            count[i] = rels[-1].count_estimate
    assert np.mean(epochs >= 2) >= 0.95, "the audited runs must go through at least two epoch changes"
    total = N + 2 * N * (T - 1)
    return {"tick-2 release holds a point near p": near,
            f"count estimate at tick {T} ≥ {total + 1}": count >= total + 1}


CONFIGURED = {size: PrivacyPlan.build(default_cfg(size)).total_epsilon for size in SIZES}


def audit(size, tag, n_runs):
    n = H.n_trials(n_runs)
    return H.audit_fixed(f"engine, default configuration, {size} [{tag}]", CONFIGURED[size], SIZES[size][1],
                         run_engine(size, tag, 0, n), run_engine(size, tag, 1, n))


@pytest.mark.parametrize("size", SIZES)
def test_default_engine_within_ledger(size):
    assert CONFIGURED[size] == pytest.approx(2.0, abs=1e-3)
    cfg, plan = default_cfg(size), PrivacyPlan.build(default_cfg(size))
    if cfg.dim > 1:  # the path of a real deployment: the projection in 64 dimensions, Gaussian noise
        assert cfg.semicoreset == "tree" and cfg.tree_depth >= 2 and plan.mode == "gaussian+pld"
        assert plan.a_mechanism == "gaussian" and plan.count_mechanism == "gaussian"
    res = audit(size, "correct", 300 if cfg.dim == 1 else 200)
    assert res.passed, res


@pytest.mark.parametrize("size", SIZES)
def test_default_engine_audit_catches_ring_centers_from_raw_points(size, monkeypatch):
    broken.ring_centers_from_raw_points(monkeypatch)
    res = audit(size, "raw-ring-centers", 150)
    assert not res.passed, res
    assert res.eps_hat > CONFIGURED[size] + 0.5, res
