"""A's per-block gate between the cells and the plain tree (``cells_gate``, P22).

What must hold:

* off (the default) the configuration's dict and the plan are those of before the option; on, the plan's
  composed lines are those of the cells and its ``gated_lines`` (the plain tree's, on a block the gate keeps
  from the cells) hold exactly A's budget as well — Σ(Δ/σ)² (Gaussian) or Σ ε (pure) — so a record's one A
  call costs the same whichever mode runs; the check catches gated lines that spend more;
* the mode of a block is a function of public numbers and of the DP count estimate alone: the n̂ each A call
  is given is the stream counter's estimate (recomputed apart from the engine) at the release tick minus its
  estimate at the ring's last release (or when the ring's epoch started), and the mode is the rule's on n̂;
  a broken engine that gives A the block's exact count is caught;
* on a gated block a record enters one count per tree level on its path and one leaf sum, by its own
  clipped, quantised point, and no query of the cells;
* a run in which no block reaches the gate releases, byte for byte, what the defaults release (the gated
  tree splits along the ring's directions of a run without cells; the cells' tree draws under its own key).
"""
from __future__ import annotations

import math
import re

import numpy as np
import pytest

import dpstream.merge_reduce as mr_mod
import dpstream.privacy as privacy_mod
import dpstream.semicoresets as sc_mod
from dpstream import Engine, EngineConfig
from dpstream.blocks import normalise
from dpstream.privacy import PrivacyPlan
from dpstream.run_setup import RunSetup

from streams import three_blob_ticks  # tests/streams.py
from test_tree_cells import BASE, _blobs, _probe_noise, _queries, a_lines

pytestmark = pytest.mark.filterwarnings("ignore::dpstream.noise.UnsafeSeedWarning")

SEED = bytes(range(32))
CELLS = dict(tree_cells=0.5, cells_lloyd_steps=2, cells_lloyd_share=0.2)


@pytest.mark.parametrize("kw, message", [
    (dict(cells_gate=-1.0), "cells_gate must be a number >= 0"),
    (dict(cells_gate=math.inf), "cells_gate must be a number >= 0"),
    (dict(cells_gate=True), "cells_gate must be a number >= 0"),
    (dict(cells_gate=0.5, cells_gate_max=-1.0), "cells_gate_max must be a number >= 0"),
    (dict(cells_gate=0.5, cells_gate_max=math.inf), "cells_gate_max must be a number >= 0"),
    (dict(cells_gate=0.5, cells_gate_max=True), "cells_gate_max must be a number >= 0"),
    (dict(cells_gate_max=1.5), "cells_gate_max needs cells_gate > 0"),
])
def test_cells_gate_is_checked(kw, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        EngineConfig(**BASE, **CELLS, **kw)
    with pytest.raises(ValueError, match="cells_gate needs tree_cells"):
        EngineConfig(**BASE, cells_gate=0.5)


def test_the_gate_needs_a_dp_count_estimate():
    cfg = EngineConfig(**BASE, **CELLS, cells_gate=0.5, privacy_split=[0.3, 0.2, 0.5])  # no stream counter
    with pytest.raises(ValueError, match="cells_gate needs a DP count estimate"):
        RunSetup(cfg, SEED)


def test_off_is_the_configuration_and_plan_of_before():
    off, on = EngineConfig(**BASE, **CELLS), EngineConfig(**BASE, **CELLS, cells_gate=0.5)
    assert "cells_gate" not in off.to_dict() and on.to_dict()["cells_gate"] == 0.5
    assert EngineConfig(**BASE, **CELLS, cells_gate=0).to_dict() == off.to_dict()
    # the upper bound off (the default): the gate's dict of before it; on, it adds its key and no plan line
    bounded = EngineConfig(**BASE, **CELLS, cells_gate=0.5, cells_gate_max=1.5)
    assert "cells_gate_max" not in on.to_dict() and bounded.to_dict() == {**on.to_dict(), "cells_gate_max": 1.5}
    assert EngineConfig(**BASE, **CELLS, cells_gate=0.5, cells_gate_max=0).to_dict() == on.to_dict()
    assert PrivacyPlan.build(bounded).to_dict() == PrivacyPlan.build(on).to_dict()
    p_off, p_on = PrivacyPlan.build(off), PrivacyPlan.build(on)
    assert "gated_lines" not in p_off.to_dict() and p_off.gated_lines == []
    # the gate adds no composed line: a record's A call runs one mode, whose lines are these or the gated ones
    assert [(ln.component, ln.noise) for ln in p_on.lines] == [(ln.component, ln.noise) for ln in p_off.lines]
    assert len(p_on.to_dict()["gated_lines"]) == 2
    assert "cells_gate" not in p_off.table()
    on_table = p_on.table()  # the table shows the gated lines and A's equal load in either mode
    assert "semicoreset A sums (gated block: plain tree)" in on_table
    loads = re.findall(r"Σ \(Δ/σ\)² = ([0-9.]+[0-9](?:e[+-]?[0-9]+)?)", on_table)
    assert len(loads) == 2 and float(loads[0]) == pytest.approx(float(loads[1]), rel=1e-5)


def _load(lines, delta):
    if delta > 0:  # Gaussian: Σ (Δ/σ)², what the lines compose to
        return sum(ln.count * (ln.sensitivity / ln.noise) ** 2 for ln in lines)
    return sum(ln.epsilon for ln in lines)  # pure: Σ ε


def _gate_ledger_check(delta, **kw):
    cfg = {**BASE, "delta": delta, **CELLS, **kw}
    on_cfg = EngineConfig(**cfg, cells_gate=0.5)
    plain = PrivacyPlan.build(on_cfg.gated_tree())  # A without cells, its tree by the rules
    assert on_cfg.gated_tree().to_dict() == EngineConfig(**{**BASE, "delta": delta, "tree_depth": None}).to_dict()
    on = PrivacyPlan.build(on_cfg)
    gated = on.gated_lines
    assert [ln.component for ln in gated] == ["semicoreset A counts (gated block: plain tree)",
                                              "semicoreset A sums (gated block: plain tree)"]
    # either mode spends exactly A's budget: the cells' lines, the gated lines and A without cells alike
    assert _load(gated, delta) == pytest.approx(_load(a_lines(on), delta), rel=1e-9)
    assert _load(gated, delta) == pytest.approx(_load(a_lines(plain), delta), rel=1e-9)
    assert [x for ln in gated for x in (ln.noise, ln.sensitivity)] == pytest.approx(
        [x for ln in a_lines(plain) for x in (ln.noise, ln.sensitivity)], rel=1e-9)
    assert on.total_epsilon <= 1.0 + 1e-9


@pytest.mark.parametrize("delta", [1e-6, 0.0])
@pytest.mark.parametrize("locate", [0, 2])
def test_a_gated_block_spends_a_budget_and_no_more(delta, locate):
    _gate_ledger_check(delta, cells_locate_dims=locate)


@pytest.mark.parametrize("delta", [1e-6, 0.0])
def test_ledger_check_catches_gated_lines_that_spend_more(monkeypatch, delta):
    if delta > 0:  # the natural slip: the gated tree at the cells' tree share's z_a·√(1 − f − g), less noise
        orig = privacy_mod.tree_lines_gaussian  # (the tree's lines without the gate's suffix are the cells' mode)
        monkeypatch.setattr(privacy_mod, "tree_lines_gaussian",
                            lambda z, *a, suffix="": orig(z * math.sqrt(0.3) if suffix else z, *a, suffix=suffix))
    else:  # pure: the gated sums charged ℓ1 √p of the projection instead of √d
        orig = privacy_mod.tree_lines_pure
        monkeypatch.setattr(privacy_mod, "tree_lines_pure",
                            lambda *a, suffix="": orig(*a[:-1], 2 if suffix else a[-1], suffix=suffix))
    with pytest.raises(AssertionError):
        _gate_ledger_check(delta, cells_locate_dims=2)


# --------------------------------------------------------------------------- the gate reads DP values only
def _cfg(**kw):
    base = dict(n_clusters=3, dim=2, radius=20.0, epsilon=1.0, delta=1e-6, horizon_ticks=1024, tree_cells=0.4,
                cells_gate=0.5, flush_schedule="count", flush_growth=0.5, flush_min_blocks=0.0)
    base.update(kw)
    return EngineConfig(**base)


def _run(cfg, ticks, monkeypatch):
    """[(tick, epoch, ring, n_parts, n̂ given to A, mode)] of every A call, and the epoch after each tick."""
    calls, where = [], {}
    orig_release = mr_mod.RingMergeReduce.release_block
    orig_gated = sc_mod.TreeSemicoreset.run_gated

    def release_block(self, tick, *a):
        where["at"] = (tick, self.epoch, self.ring)
        return orig_release(self, tick, *a)

    def run_gated(self, block, key, n_hat):
        out = orig_gated(self, block, key, n_hat)
        calls.append(where["at"] + (block.n_parts, n_hat, self.last_mode))
        return out

    monkeypatch.setattr(mr_mod.RingMergeReduce, "release_block", release_block)
    monkeypatch.setattr(sc_mod.TreeSemicoreset, "run_gated", run_gated)
    e = Engine(cfg, SEED)
    epochs = []
    for x in ticks:
        e.step(x)
        epochs.append(e.epoch)
    return e, calls, epochs


def _replay(cfg, ticks, calls, epochs):
    """[(n̂, mode, why)] of each A call from the stream counter's DP estimates (recomputed apart from the
    engine), the release ticks, the epoch changes and public numbers alone; why: "cells", "below" the gate or
    "above" its upper bound (``cells_gate_max``)."""
    counter = RunSetup(cfg, SEED).count_counter()
    counts = [float(counter.step(np.array([len(x)], dtype=np.int64))[0]) for x in ticks]
    start = {0: 0.0}  # the DP count when each epoch's rings opened
    for t in range(1, len(ticks)):
        if epochs[t] != epochs[t - 1]:
            start[epochs[t]] = counts[t]
    A = RunSetup(cfg, SEED).A
    theta = A.cells_threshold()  # the gate's unit: the cells' keep threshold
    theta_tree = A.gated_tree().leaf_threshold()  # the upper bound's: the plain tree's
    last, out = {}, []
    for tick, epoch, ring, n_parts, _, _ in calls:
        n_hat = counts[tick - 1] - last.get((epoch, ring), start[epoch])
        last[(epoch, ring)] = counts[tick - 1]
        unit = n_parts * cfg.n_clusters
        if cfg.cells_gate_max and n_hat >= cfg.cells_gate_max * unit * theta_tree:
            out.append((n_hat, "tree", "above"))
        elif n_hat >= cfg.cells_gate * unit * theta:
            out.append((n_hat, "cells", "cells"))
        else:
            out.append((n_hat, "tree", "below"))
    return out


@pytest.mark.parametrize("gate_max", [0.0, 1.3])
@pytest.mark.parametrize("broken", [None, "exact_count"])
def test_the_mode_is_a_function_of_dp_counts(monkeypatch, broken, gate_max):
    """Two streams with nothing in common but the seed: each A call's n̂ is the stream counter's DP estimate
    since the ring's last release, recomputed apart from the engine, and its mode is the rule's on that n̂ —
    with ``cells_gate_max`` too, whose upper bound sends some blocks of these streams back to the plain tree.
    The broken engine gives A its block's exact count instead; the check catches it."""
    if broken == "exact_count":
        orig = mr_mod.RingMergeReduce.release_block

        def exact(self, tick, count=None):
            if count is not None:
                self.count_at_release = count - self.block.n  # so that A reads n̂ = the exact block count
            return orig(self, tick, count)

        monkeypatch.setattr(mr_mod.RingMergeReduce, "release_block", exact)
    cfg = _cfg(cells_gate_max=gate_max)
    dense = three_blob_ticks(1, [100] * 24)
    sparse_ = three_blob_ticks(2, [0, 3, 0, 70, 5, 0, 0, 200, 1, 0, 0, 0, 90, 0, 0, 4, 0, 0, 0, 0, 300, 0, 7, 0])
    ok, modes, whys = True, set(), set()
    for s in (dense, sparse_):
        _, calls, epochs = _run(cfg, s, monkeypatch)
        got = [(n_hat, mode) for *_, n_hat, mode in calls]
        want = _replay(cfg, s, calls, epochs)
        ok &= [m for _, m in got] == [m for _, m, _ in want] and np.allclose([n for n, _ in got],
                                                                             [n for n, _, _ in want])
        modes |= {m for _, m in got}
        whys |= {w for *_, w in want}
    if broken is None:  # both modes run on these streams, and with the upper bound each of its three cases
        assert modes == {"cells", "tree"}
        assert whys == ({"cells", "below", "above"} if gate_max else {"cells", "below"})
    assert ok == (broken is None)


# --------------------------------------------------------------------------- participation on a gated block
def test_a_record_of_a_gated_block_enters_one_value_of_each_tree_query(monkeypatch):
    _probe_noise(monkeypatch)
    rng = np.random.default_rng(3)
    cfg = EngineConfig(**{**BASE, "epsilon": 8.0}, tree_cells=0.5, tree_keep_factor=0.5, cells_gate=1e9)
    X, part, centers = _blobs(rng, 2, cfg.dim)
    radii = np.full(2, cfg.radius)
    x = X[part == 1][0] + 0.01  # beside a point of a dense blob: its leaf is kept, so its sum is released
    orig = sc_mod.Semicoreset.__call__

    def call(self, X, part, centers, radii, key):  # A's one call as a gated block: n̂ = 0
        block = self.open_block(np.asarray(centers, float), np.asarray(radii, float), key)
        block.add(np.asarray(X, float), np.asarray(part, np.int64))
        return self.release(block, key, 0.0)

    monkeypatch.setattr(sc_mod.Semicoreset, "__call__", call)
    q0, _, A = _queries(cfg, X, part, centers, radii)
    q1, _, _ = _queries(cfg, np.r_[X, x[None]], np.r_[part, 1], centers, radii)
    monkeypatch.setattr(sc_mod.Semicoreset, "__call__", orig)
    assert A.last_mode == "tree" and q0.keys() == q1.keys()
    q_x = A.quantise(normalise(x[None], np.array([1]), centers, radii))[0]
    touched = []
    for key in q0:
        diff = q1[key] - q0[key]
        rows = np.flatnonzero(np.any(diff.reshape(diff.shape[0], -1) != 0, axis=1))
        if rows.size:
            assert rows.size == 1, key
            assert np.array_equal(diff[rows[0]], 1 if diff.ndim == 1 else q_x), key
            touched.append(key[4:])
    D = cfg.gated_tree().tree_depth  # the rule's depth, not the cells' tree_depth
    assert D != cfg.tree_depth
    assert sorted(touched) == sorted([("count", lv) for lv in range(D + 1)]
                                                   + [("sum",)])


def test_at_d_up_to_the_locate_dims_the_cells_never_run(monkeypatch):
    cfg = _cfg(cells_gate=1e-9, cells_locate_dims=2)  # d = 2 ≤ p: the cells would locate in full d
    _, calls, _ = _run(cfg, three_blob_ticks(1, [100] * 12), monkeypatch)
    assert calls and {mode for *_, mode in calls} == {"tree"}
    _, calls, _ = _run(_cfg(cells_gate=1e-9), three_blob_ticks(1, [100] * 12), monkeypatch)
    assert "cells" in {mode for *_, mode in calls}


@pytest.mark.parametrize("dim, delta, lloyd, gate", [(2, 1e-6, False, dict(cells_gate=1e9)),
                                                    (20, 0.0, True, dict(cells_gate=1e9)),
                                                    (20, 1e-6, True, dict(cells_gate=1e-9, cells_gate_max=1e-9))])
def test_a_gate_no_block_reaches_releases_what_the_defaults_release(dim, delta, lloyd, gate):
    """Every block on the plain tree, under the gate (G too high) or over its upper bound (G_up too low): the
    gated tree is the defaults' tree (depth, keep factor, count share, the ring's directions and every noise
    key), and the block size and first flush follow its threshold."""
    rng = np.random.default_rng(3)
    means = rng.normal(scale=6.0, size=(3, dim))
    ticks = [means[rng.integers(0, 3, 150)] + rng.normal(size=(150, dim)) for _ in range(40)]
    base = dict(n_clusters=3, dim=dim, radius=30.0, epsilon=1.0, delta=delta, horizon_ticks=64)
    cells = dict(tree_cells=0.4, **gate, **(dict(cells_lloyd_steps=2, cells_lloyd_share=0.2) if lloyd else {}))
    runs = []
    for kw in ({}, cells):
        e = Engine(EngineConfig(**base, **kw), SEED)
        runs.append([e.step(X) for X in ticks])
    assert sum(len(r.coreset_weights) for r in runs[0]) > 0
    for r0, r1 in zip(*runs):
        for a, b in ((r0.centers, r1.centers), (r0.coreset_points, r1.coreset_points),
                     (r0.coreset_weights, r1.coreset_weights)):
            assert a.tobytes() == b.tobytes()
