"""Statistical privacy audit of black box A (dpstream.semicoresets, via make_semicoreset).

One call of A covers many disjoint parts (balls); each part is one trial: its output depends only on
its own points and its own noise draws, which is the parallel composition the plan relies on.  Many
calls under many seeds.  d = 1, k = 1, pure ε, horizon 1 (the phantom-mass threshold τ_w is public).
Configured ε = ε_A, the sum of A's ledger lines (counts + sums), made 1 (2 under replace-one: see
below) by the config.

The record is placed where the release is most sensitive to it:

* snap (weights = noisy part counts): D has n = ⌈τ_w⌉ − 1 points in the part, D' one more, so the
  released weight's tail {w ≥ n+1} has likelihood ratio exactly e^{1/b} = e^{ε_A}.
* tree, the projection path (d = 4, the block fed in three pieces like ticks): the split is by a
  random hyperplane — the data-independent projection the partition lives in, drawn from the
  block's key — and the block is an exact leaf sketch; x sits at distance r along the hyperplane's
  normal on the side of D's points. Counts hold 90% of ε_A here, so the count tails carry most
  of the loss (the sum's per-coordinate noise is seen only along x).
* tree (depth 1): D has n = ⌈θ_branch⌉ − 1 points at the part's centre, D' adds x at distance r
  (‖y‖ = 1) on the same side of the split as D's points (placed knowing the split direction: A is
  ε_A-DP for every direction, so this is legitimate).  The root's branch decision, the leaf's noisy
  count and the leaf's noisy sum are then all in their tails: the event "a leaf with w ≥ n+1 and
  sum·sign ≥ 1" has ratio e^{2/b_count + 1/b_sum} = e^{ε_A}.
* lloyd (one iteration): D has n = ⌈τ_w⌉ − 1 points at the centre, D' adds x at ‖y‖ = 1; the
  released weight (final noisy count) and centre (noisy sum / noisy count) carry the loss.
* tree with cells (``tree_cells`` 0.8, k = 1: one cell per part, whatever the tree's leaves): D has
  n = ⌈τ_cells⌉ − 1 points at the centre, D' adds x at ‖y‖ = 1; the released cell's weight (its noisy
  count) and mean (noisy sum / noisy count) carry the cells' share of ε_A, the tree's leaves are not
  released.
* snap under replace-one: x moves from part a to part b (the plan charges 2·(1/b) for the two parts).
* snap with δ > 0 (rounded Gaussian counts): the same placement, threshold events on the weight,
  audited in the (ε, δ) form against the ledger line of A's counts (ε at δ/4).

Events are chosen on a calibration run (ratio order over the per-trial summaries).  Broken variants
that must fail: every A scale halved (tree, lloyd, snap; the cells' scales with cells); the exact count released as the weight
(snap); the plan calibrated for add/remove under replace-one.  Last, the placement "x alone in an
otherwise empty part", which catches an A that skips empty parts.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import audit_harness as H
import broken
import broken_variants  # tests/broken_variants.py: the shared "A skips empty parts" variant
from dpstream.noise import NoiseSource
from dpstream.params import EngineConfig
from dpstream.privacy import PrivacyPlan
from dpstream.semicoresets import make_semicoreset


def a_cfg(kind: str, **kw) -> EngineConfig:
    base = dict(n_clusters=1, dim=1, radius=1.0, epsilon=2.0, delta=0.0, horizon_ticks=1,
                neighbouring="add_remove", semicoreset=kind, tree_depth=1, lloyd_iters=1,
                privacy_split=(0.25, 0.25, 0.5), bicriteria=True, n_rings=1)
    base.update(kw)
    return EngineConfig(**base)


def eps_a(plan: PrivacyPlan) -> float:
    return sum(ln.epsilon for ln in plan.lines if ln.component.startswith("semicoreset A"))


def weights_by_part(out, n_parts):
    w = np.zeros(n_parts)
    w[out.part] = out.weights
    return w


# --------------------------------------------------------------------------- runners (one call = K trials)
def run_snap(cfg, tag, side, phase, n_trials, K=20_000, clip=3):
    res = []
    for b in range(math.ceil(n_trials / K)):
        noise = NoiseSource(H.seed_for("snap", tag, side, phase, b))
        A = make_semicoreset(cfg, PrivacyPlan.build(cfg), noise)
        n = math.ceil(A.count_tail(K)) - 1
        part = np.repeat(np.arange(K), n + side)
        out = A(np.zeros((part.size, 1)), part, np.zeros((K, 1)), np.ones(K), ("A", b, "audit"))
        w = weights_by_part(out, K)
        res.append(np.where(w > 0, np.clip(w - n, -clip, clip), -10**6).astype(np.int64))
    return np.concatenate(res)[:n_trials]


def run_snap_replace(cfg, tag, side, phase, n_trials, K=10_000):
    """Trial i = parts (2i, 2i+1); x sits in part 2i on D and in part 2i+1 on D'."""
    res = []
    for b in range(math.ceil(n_trials / K)):
        noise = NoiseSource(H.seed_for("snap-replace", tag, side, phase, b))
        A = make_semicoreset(cfg, PrivacyPlan.build(cfg), noise)
        n = math.ceil(A.count_tail(2 * K))
        counts = np.full(2 * K, n)
        counts[side::2] += 1
        part = np.repeat(np.arange(2 * K), counts)
        out = A(np.zeros((part.size, 1)), part, np.zeros((2 * K, 1)), np.ones(2 * K), ("A", b, "audit"))
        w = weights_by_part(out, 2 * K).reshape(K, 2)
        res.append(np.where(w > 0, np.clip(w - n, -3, 3), -9).astype(np.int64))
    return np.concatenate(res)[:n_trials]


def run_tree(cfg, tag, side, phase, n_trials, K=5_000, pieces=1):
    """Depth 1 in d ≥ 1 dimensions; the block gets D's points in ``pieces`` adds (as ticks would)."""
    res = []
    d = cfg.dim
    for b in range(math.ceil(n_trials / K)):
        noise = NoiseSource(H.seed_for("tree", tag, side, phase, b, d))
        A = make_semicoreset(cfg, PrivacyPlan.build(cfg), noise)
        key = ("A", b, "audit")
        theta_k = max(A.count_tail(K, run_wide=False), cfg.tree_keep_factor * A.sum_noise_norm())
        theta_b = max(cfg.tree_branch_factor, 1.0) * theta_k
        n = math.ceil(max(theta_b, A.count_tail(K))) - 1  # the root branches only in its noise tail
        # the split direction of this block (a keyed draw of the projection): x goes to the side of
        # D's points (y = 0), at distance r along the direction
        block = A.open_block(np.zeros((K, d)), np.ones(K), key)
        u = block.V[0] / np.linalg.norm(block.V[0])
        parts = np.repeat(np.arange(K), n)
        for piece in np.array_split(np.arange(parts.size), pieces):
            block.add(np.zeros((piece.size, d)), parts[piece])
        if side:
            block.add(np.tile(u, (K, 1)), np.arange(K))  # ‖y‖ = 1 at radius 1
        out = A.release(block, key)
        big = out.weights >= n + 1
        tail_sum = (out.points @ u) * out.weights >= 1 - 2.0**-21  # the leaf's noisy sum along x ≥ one record
        a = np.zeros(K, dtype=np.int64)
        np.maximum.at(a, out.part[big], 1 + tail_sum[big].astype(np.int64))
        res.append(a)
    return np.concatenate(res)[:n_trials]


def run_lloyd(cfg, tag, side, phase, n_trials, K=10_000):
    return _run_part_means("lloyd", lambda A, key: A.count_tail(K * cfg.n_clusters),
                           cfg, tag, side, phase, n_trials, K)


def run_cells(cfg, tag, side, phase, n_trials, K=5_000):
    return _run_part_means("cells", lambda A, key: A.cell_tail(K, key), cfg, tag, side, phase, n_trials, K)


def _run_part_means(name, tail, cfg, tag, side, phase, n_trials, K):
    """K parts of n points at 0 (n one below A's weight tail ``tail(A, key)``), plus, on the side with the
    record, one point at 1 in each part: per part, whether its weight passes n and its released mean in
    ½-record steps."""
    res = []
    for b in range(math.ceil(n_trials / K)):
        noise = NoiseSource(H.seed_for(name, tag, side, phase, b))
        A = make_semicoreset(cfg, PrivacyPlan.build(cfg), noise)
        key = ("A", b, "audit")
        n = math.ceil(tail(A, key)) - 1
        x = np.zeros((K * n + K * side, 1))
        part = np.concatenate([np.repeat(np.arange(K), n), np.arange(K) if side else np.zeros(0, np.int64)])
        x[K * n:, 0] = 1.0
        out = A(x, part, np.zeros((K, 1)), np.ones(K), key)
        big = np.zeros(K, dtype=np.int64)
        big[out.part] = out.weights >= n + 1
        c = np.full(K, -99.0)
        c[out.part] = out.points[:, 0]
        u = np.where(c > -99, np.clip(np.floor(c * n * 2), -6, 6), -9)
        res.append(np.stack([big, u.astype(np.int64)], axis=1))
    return np.concatenate(res)[:n_trials]


RUNNERS = {"snap": run_snap, "snap_replace": run_snap_replace, "tree": run_tree, "lloyd": run_lloyd,
           "snap_gauss": lambda *a: run_snap(*a, clip=15),
           "tree_projected": lambda *a: run_tree(*a, pieces=3), "tree_cells": run_cells}
CFGS = {
    "snap": lambda: a_cfg("snap"),
    "snap_gauss": lambda: a_cfg("snap", delta=1e-5),
    "snap_replace": lambda: a_cfg("snap", neighbouring="replace_one", epsilon=4.0),
    "tree": lambda: a_cfg("tree"),
    "tree_projected": lambda: a_cfg("tree", dim=4, count_share=0.9),
    "lloyd": lambda: a_cfg("lloyd", count_share=0.2),
    "tree_cells": lambda: a_cfg("tree", tree_cells=0.8, count_share=0.5),
}
N = {"snap": (40_000, 200_000), "snap_replace": (40_000, 200_000), "snap_gauss": (100_000, 200_000),
     "tree": (10_000, 30_000), "tree_projected": (8_000, 24_000),
     "lloyd": (2_000, 8_000), "tree_cells": (5_000, 15_000)}  # (calibration, test) runs per side


def audit(kind: str, tag: str, scale_n: float = 1.0):
    cfg = CFGS[kind]()
    eps = CONFIGURED[kind]  # the correct plan's claim (a broken variant's plan is monkeypatched)
    n_cal, n_test = (H.n_trials(int(v * scale_n)) for v in N[kind])
    runs = [RUNNERS[kind](cfg, tag, s, ph, n) for ph, n in (("cal", n_cal), ("test", n_test)) for s in (0, 1)]
    if kind == "snap_gauss":  # rounded Gaussian counts: threshold events on the weight, (ε, δ) form
        return H.audit_calibrated(f"semicoreset A, {kind} [{tag}]", eps, DELTA_A, *runs, values=lambda r: r[0],
                                  ratio_order=False, describe=lambda rows, k: DESCRIBE[kind](rows, k))
    return H.audit_calibrated(f"semicoreset A, {kind} [{tag}]", eps, 0.0, *runs,
                              describe=lambda rows, kind_: DESCRIBE[kind](rows))


DESCRIBE = {
    "snap": lambda rows: f"released weight − n ∈ {[r[0] if r[0] > -10**6 else 'none' for r in rows]}",
    "snap_gauss": lambda rows, k: (f"released weight ≥ n + {rows[0][0]}" if k == ">=" else
                                   f"released weight ≤ n + {rows[-1][0]} or none"),
    "snap_replace": lambda rows: f"(w_a − n, w_b − n) ∈ {rows[:6]}{' …' if len(rows) > 6 else ''} (−9: not released)",
    "tree": lambda rows: "leaf " + " or ".join({0: "none ≥ n+1", 1: "w ≥ n+1, sum < 1",
                                                2: "w ≥ n+1 and sign·sum ≥ 1"}[r[0]] for r in rows),
    "tree_projected": lambda rows: "leaf " + " or ".join({0: "none ≥ n+1", 1: "w ≥ n+1, sum < 1",
                                                          2: "w ≥ n+1 and sum along x ≥ 1"}[r[0]] for r in rows),
    "lloyd": lambda rows: f"(w ≥ n+1, ⌊2n·centre⌋) ∈ {rows[:6]}{' …' if len(rows) > 6 else ''}",
    "tree_cells": lambda rows: f"cell (w ≥ n+1, ⌊2n·mean⌋) ∈ {rows[:6]}{' …' if len(rows) > 6 else ''}",
}
# configured ε of each audit: the correct plan's ε_A (a broken variant claims the same); with δ > 0 the
# ledger states A's counts line at δ/4
CONFIGURED = {k: eps_a(PrivacyPlan.build(f())) for k, f in CFGS.items()}
DELTA_A = CFGS["snap_gauss"]().delta / 4


@pytest.mark.parametrize("kind", ["snap", "tree", "tree_projected", "lloyd", "snap_replace", "snap_gauss",
                                  "tree_cells"])
def test_semicoreset_within_plan(kind):
    if kind != "snap_gauss":
        assert CONFIGURED[kind] == pytest.approx(2.0 if kind == "snap_replace" else 1.0)
    else:
        assert PrivacyPlan.build(CFGS[kind]()).a_mechanism == "gaussian"
    res = audit(kind, "correct")
    assert res.passed, res


BROKEN = [
    ("snap", "half_scale", lambda mp: broken.plan_scales_halved(mp, "a_count", "a_sum"), 0.25),
    ("tree", "half_scale", lambda mp: broken.plan_scales_halved(mp, "a_count", "a_sum"), 1.0),
    ("tree_projected", "half_scale", lambda mp: broken.plan_scales_halved(mp, "a_count", "a_sum"), 1.0),
    ("lloyd", "half_scale", lambda mp: broken.plan_scales_halved(mp, "a_count", "a_sum"), 1.0),
    ("tree_cells", "half_scale", lambda mp: broken.plan_scales_halved(mp, "a_cell_count", "a_cell_sum"), 1.0),
    ("snap", "exact_count_released", broken.snap_releases_exact_count, 0.05),
    ("snap_gauss", "half_scale", lambda mp: broken.plan_scales_halved(mp, "a_count"), 1.0),
    ("snap_replace", "plan_ignores_replace_one", broken.plan_ignores_replace_one, 0.25),
]


@pytest.mark.parametrize("kind,variant,patch,scale_n", BROKEN, ids=[f"{k}-{v}" for k, v, _, _ in BROKEN])
def test_semicoreset_audit_catches(kind, variant, patch, scale_n, monkeypatch):
    patch(monkeypatch)
    res = audit(kind, variant, scale_n)
    assert not res.passed, res
    assert res.eps_hat > 1.1 * CONFIGURED[kind], res


# --------------------------------------------------------------------------- x alone in an otherwise empty part
# The placement "an otherwise empty center part" (P6): one call of A per trial with two
# parts, part 0 holding D's points and part 1 empty on D; D' puts x alone in part 1.  The event is
# fixed: "part 1 is released".  On the correct A the empty part is noised like any other and its
# weight is zeroed below τ_w, so the release of part 1 has ratio e^{ε_A} (a noise tail on both
# sides); an A that skips empty parts never releases part 1 on D.
N_EMPTY = 1500  # calls per side


def run_empty_part(cfg, tag, side, n_calls, n_bulk=20):
    plan = PrivacyPlan.build(cfg)
    out_ = np.zeros(n_calls, dtype=bool)
    for i in range(n_calls):
        A = make_semicoreset(cfg, plan, NoiseSource(H.seed_for("empty-part", tag, side, i)))
        part = np.r_[np.zeros(n_bulk, dtype=np.int64), np.ones(side, dtype=np.int64)]
        out = A(np.zeros((part.size, 1)), part, np.zeros((2, 1)), np.ones(2), ("A", 0, 1, "flush"))
        out_[i] = np.any(out.part == 1)
    return out_


@pytest.mark.parametrize("variant", ["correct", "skips_empty_parts"])
def test_semicoreset_empty_part(variant, monkeypatch):
    cfg = a_cfg("snap")
    if variant != "correct":
        broken_variants.a_skips_empty_parts(monkeypatch)
    n = H.n_trials(N_EMPTY)
    e0, e1 = run_empty_part(cfg, variant, 0, n), run_empty_part(cfg, variant, 1, n)
    res = H.audit_fixed(f"semicoreset A, snap, x alone in an empty part [{variant}]", CONFIGURED["snap"], 0.0,
                        {"part of x released": e0}, {"part of x released": e1})
    if variant == "correct":
        assert res.passed, res
    else:
        assert not res.passed, res
        assert res.eps_hat > 2.0, res
