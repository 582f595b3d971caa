"""The tree semicoreset's projection is data-independent: its split directions are a keyed draw.

The audit of A's tree (``test_audit_semicoresets``, ``tree_projected``) puts x on the same side of the
split as D's points, so it cannot see *where* the split lies: an A whose directions were derived from
the data would pass it. Here x is isolated instead: D's points sit on one side of the keyed split, in
two groups along a second direction w, and x alone on the other side at distance 1 along the split's
normal u. With keyed directions x changes nothing but its own (empty-looking) leaf. With directions
derived from the data (the block's principal axes, ``broken_variants.tree_directions_from_data``)
the split follows w without x — D's points come out as two leaves of n/2 — and u with x, where they
come out as one leaf of n: the whole release moves with one record.

Also here: two blocks under one key (another block of the same ring, another worker with the same
seed) split along byte-identical directions, which is what lets the Beam job sketch a ring's points
on any shard and the engine reproduce it.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import audit_harness as H
import broken_variants
from dpstream.engine import Engine
from dpstream.noise import NoiseSource
from dpstream.params import EngineConfig
from dpstream.privacy import PrivacyPlan
from dpstream.semicoresets import make_semicoreset

K = 1_000  # parts (trials) per call of A
N_ISOLATED = (1_000, 3_000)  # (calibration, test) trials per side


def tree_cfg() -> EngineConfig:
    return EngineConfig(n_clusters=1, dim=4, radius=1.0, epsilon=2.0, delta=0.0, horizon_ticks=1,
                        neighbouring="add_remove", semicoreset="tree", tree_depth=1, privacy_split=(0.25, 0.25, 0.5),
                        bicriteria=True, n_rings=1, count_share=0.9)


def eps_a(plan: PrivacyPlan) -> float:
    return sum(ln.epsilon for ln in plan.lines if ln.component.startswith("semicoreset A"))


def run_isolated(cfg, tag, side, phase, n_trials, pieces=3):
    """Per trial (one part): (a leaf holds ≥ ¾ n, the number of leaves released)."""
    d, res = cfg.dim, []
    for b in range(math.ceil(n_trials / K)):
        key = ("A", b, "audit")
        A = make_semicoreset(cfg, PrivacyPlan.build(cfg), NoiseSource(H.seed_for("isolated", tag, side, phase, b)))
        _, theta_k, theta_b = A.thresholds(K)
        n = 2 * math.ceil(max(theta_b, 2 * theta_k) / 2 + 3 * A.count_tail(K))  # the root branches, halves kept
        u = A.directions(key)[0]
        u /= np.linalg.norm(u)
        w = np.eye(d)[int(np.argmin(np.abs(u)))]
        w -= (w @ u) * u
        w /= np.linalg.norm(w)
        a = 0.1  # D: −a·u ± b·w; the second moment along w beats u's without x, loses to it with x
        b_ = math.sqrt(a * a + 0.5 / n)
        grp = np.stack([-a * u + b_ * w, -a * u - b_ * w])
        X = np.tile(np.repeat(grp, n // 2, axis=0), (K, 1))
        parts = np.repeat(np.arange(K), n)
        block = A.open_block(np.zeros((K, d)), np.ones(K), key)
        for piece in np.array_split(np.arange(parts.size), pieces):
            block.add(X[piece], parts[piece])
        if side:
            block.add(np.tile(u, (K, 1)), np.arange(K))  # x alone on the far side of the keyed split
        out = A.release(block, key)
        big = np.zeros(K, dtype=np.int64)
        np.maximum.at(big, out.part, (out.weights >= 0.75 * n).astype(np.int64))
        leaves = np.bincount(out.part, minlength=K)
        res.append(np.stack([big, leaves], axis=1))
    return np.concatenate(res)[:n_trials]


def audit(tag):
    cfg = tree_cfg()
    eps = eps_a(PrivacyPlan.build(cfg))
    n_cal, n_test = (H.n_trials(v) for v in N_ISOLATED)
    runs = [run_isolated(cfg, tag, s, ph, n) for ph, n in (("cal", n_cal), ("test", n_test)) for s in (0, 1)]
    return H.audit_calibrated(f"semicoreset A, tree, x isolated by the split [{tag}]", eps, 0.0, *runs,
                              describe=lambda rows, kind: f"(a leaf ≥ ¾n, leaves) ∈ {rows}"), eps


@pytest.mark.parametrize("variant", ["correct", "directions_from_data"])
def test_tree_with_x_isolated_by_the_split(variant, monkeypatch):
    if variant != "correct":
        broken_variants.tree_directions_from_data(monkeypatch)
    res, eps = audit(variant)
    assert eps == pytest.approx(1.0)
    if variant == "correct":
        assert res.passed, res
    else:
        assert not res.passed and res.eps_hat > 2 * eps, res


# --------------------------------------------------------------------------- one key, one set of directions

def test_two_blocks_under_one_key_split_along_byte_identical_directions(seed):
    cfg = EngineConfig(n_clusters=3, dim=16, radius=1.0, epsilon=1.0, delta=1e-6, horizon_ticks=4,
                       semicoreset="tree", tree_depth=3)
    plan = PrivacyPlan.build(cfg)
    key = ("A", 2, 1)
    rng = np.random.default_rng(0)
    A1 = make_semicoreset(cfg, plan, NoiseSource(seed))
    A2 = make_semicoreset(cfg, plan, NoiseSource(bytes(seed)))  # another worker, the same seed
    b1 = A1.open_block(np.zeros((2, 16)), np.ones(2), key)
    b1.add(rng.normal(size=(50, 16)) * 0.1, rng.integers(0, 2, 50))
    A1.release(b1, key + (0,))
    b2 = A1.open_block(np.ones((5, 16)) * 0.01, np.full(5, 0.5), key)  # the ring's next block, other parts
    b3 = A2.open_block(np.zeros((1, 16)), np.ones(1), key)
    assert b1.V.shape == (3, 16)
    assert b1.V.tobytes() == b2.V.tobytes() == b3.V.tobytes() == A2.directions(key).tobytes()
    assert A1.directions(key).tobytes() != A1.directions(("A", 2, 2)).tobytes()  # another ring: its own
    # the engine: every block a ring opens, before and after a release, uses its ring's keyed directions
    eng = Engine(cfg.with_(horizon_ticks=8), seed)
    for t in range(8):
        eng.step(rng.normal(size=(200, 16)) * 0.3)
    rings = [r for mr in _ring_merge_reduces(eng) for r in [mr]]
    assert rings, "the engine opened no ring"
    for r in rings:
        assert r.block.V.tobytes() == r.V.tobytes() == A2.directions(("A", r.epoch, r.ring)).tobytes()


def _ring_merge_reduces(eng):
    from dpstream.merge_reduce import RingMergeReduce
    seen, todo = [], [eng]
    while todo:  # walk the engine's objects for its RingMergeReduce instances
        o = todo.pop()
        if isinstance(o, RingMergeReduce):
            seen.append(o)
            continue
        vals = o.values() if isinstance(o, dict) else o if isinstance(o, (list, tuple)) else \
            getattr(o, "__dict__", {}).values()
        todo.extend(v for v in vals if isinstance(v, (dict, list, tuple)) or
                    type(v).__module__.startswith("dpstream"))
    return seen
