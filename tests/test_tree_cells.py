"""A with cells (``tree_cells``): the option's checks, its ledger and a record's participation.

* Off (the default) the configuration's dict and the plan are those of before the option.
* The ledger: the cells take the share f of A's budget and the tree keeps 1 − f — A's Σ(Δ/σ)² (Gaussian)
  or Σ ε (pure) is unchanged, and the check catches a plan that gives the cells A's whole budget again.
* Participation: a record x added to a block enters exactly one noisy value of each query A makes — one
  count per tree level on its path (D + 1), one leaf sum, one cell count, one cell sum — by 1 and by its own
  clipped, quantised point; the probe catches cells that sum the point without clipping it (P10).

The probe: A's one noise hook (``part_noise``) returns zeros wrapped in an array type that records what it is
added to, so every noisy query's exact input is seen, keyed by its noise key; D and D ∪ {x} are compared
query by query, the cells given the same tree output on both (the centers they label with are a release
of the tree: the cells are composed after it, conditioned on it).
"""
from __future__ import annotations

import math
import re

import numpy as np
import pytest

import dpstream.blocks as blocks_mod
import dpstream.privacy as privacy_mod
import dpstream.semicoresets as sc_mod
from dpstream.blocks import normalise
from dpstream.noise import NoiseSource
from dpstream.params import EngineConfig
from dpstream.privacy import PrivacyPlan
from dpstream.semicoresets import make_semicoreset

BASE = dict(n_clusters=3, dim=4, radius=2.0, epsilon=1.0, delta=1e-6, horizon_ticks=4, tree_depth=3)


def a_lines(plan):
    return [ln for ln in plan.lines if ln.component.startswith("semicoreset A")]


@pytest.mark.parametrize("kw, message", [
    (dict(tree_cells=1.0), "tree_cells must be a share in [0, 1)"),
    (dict(tree_cells=-0.1), "tree_cells must be a share in [0, 1)"),
    (dict(tree_cells=float("nan")), "tree_cells must be a share in [0, 1)"),
    (dict(tree_cells=True), "tree_cells must be a share in [0, 1)"),
    (dict(tree_cells=0.5, semicoreset="lloyd"), "tree_cells needs semicoreset='tree'"),
    (dict(tree_cells=0.5, max_contributions=2), "tree_cells is not available with a bounded privacy unit"),
])
def test_tree_cells_is_checked(kw, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        EngineConfig(**{**BASE, **kw})


def test_off_is_the_configuration_and_plan_of_before():
    off, on = EngineConfig(**BASE), EngineConfig(**BASE, tree_cells=0.5)
    assert "tree_cells" not in off.to_dict() and on.to_dict()["tree_cells"] == 0.5
    assert EngineConfig(**BASE, tree_cells=0).to_dict() == off.to_dict()
    plan = PrivacyPlan.build(off)
    assert [ln.component for ln in a_lines(plan)] == ["semicoreset A counts", "semicoreset A sums"]
    assert plan.a_cell_count_scale == plan.a_cell_sum_scale == 0.0
    assert type(make_semicoreset(off, plan, NoiseSource(bytes(32))).open_block(np.zeros((1, 4)), np.ones(1), ("A", 0, 0))).__name__ == "LeafSketch"


def _ledger_check(delta, f):
    off = PrivacyPlan.build(EngineConfig(**{**BASE, "delta": delta}))
    on = PrivacyPlan.build(EngineConfig(**{**BASE, "delta": delta}, tree_cells=f))
    cells = [ln for ln in a_lines(on) if "cell" in ln.component]
    assert [ln.component for ln in cells] == ["semicoreset A cell counts", "semicoreset A cell sums"]
    if delta > 0:  # A's Σ (Δ/σ)², the Gaussian budget it composes to, is unchanged; the cells hold f of it
        load = lambda lines: sum((ln.sensitivity / ln.noise) ** 2 for ln in lines)  # noqa: E731
    else:  # pure: A's Σ ε
        load = lambda lines: sum(ln.epsilon for ln in lines)  # noqa: E731
    assert load(a_lines(on)) == pytest.approx(load(a_lines(off)), rel=1e-9)
    assert load(cells) == pytest.approx(f * load(a_lines(off)), rel=1e-9)
    assert on.total_epsilon <= 1.0 + 1e-9
    assert (on.a_cell_count_scale, on.a_cell_sum_scale) == (cells[0].noise, cells[1].noise)


@pytest.mark.parametrize("delta", [1e-6, 0.0])
@pytest.mark.parametrize("f", [0.2, 0.8])
def test_cells_take_their_share_of_a_and_no_more(delta, f):
    _ledger_check(delta, f)


def test_ledger_check_catches_cells_that_spend_a_whole_budget_again(monkeypatch):
    orig = privacy_mod.cell_lines_gaussian
    # the natural slip: the cells' noise multiplier from A's whole budget (z_a), not from their share f
    monkeypatch.setattr(privacy_mod, "cell_lines_gaussian",
                        lambda z, phi, *a: orig(z * math.sqrt(0.5), phi, *a))  # f = 0.5: z_a = z·√f
    with pytest.raises(AssertionError):
        _ledger_check(1e-6, 0.5)


# --------------------------------------------------------------------------- participation (the probe)
class Probe(np.ndarray):
    """Zero noise that records the exact array it is added to (the query's true value)."""
    log: list

    def __array_ufunc__(self, ufunc, method, *inputs, **kw):
        plain = [np.asarray(i) if isinstance(i, Probe) else i for i in inputs]
        if ufunc is np.add and method == "__call__":
            other = plain[0] if isinstance(inputs[1], Probe) else plain[1]
            Probe.log.append((self.key, np.array(other, copy=True)))
        return getattr(ufunc, method)(*plain, **kw)


def _probe_noise(monkeypatch):
    def part_noise(self, key, owner, tail=(), scale=None, per_part=True):
        z = np.zeros((owner.size,) + tuple(tail), dtype=np.int64).view(Probe)
        z.key = key
        return z
    monkeypatch.setattr(sc_mod.Semicoreset, "part_noise", part_noise)


def _queries(cfg, X, part, centers, radii, leaves=None):
    """Every noisy query's exact input by key, and the tree's output (``leaves``: replay this tree output
    to the cells instead, as an adaptive composition conditions the cells on the tree's release)."""
    Probe.log = []
    A = make_semicoreset(cfg, PrivacyPlan.build(cfg), NoiseSource(bytes(range(32))))
    out = {}

    def tree_leaves(self, block, key):
        out["leaves"] = orig(self, block, key)
        return out["leaves"] if leaves is None else leaves

    orig = sc_mod.TreeSemicoreset._leaves
    sc_mod.TreeSemicoreset._leaves = tree_leaves
    try:
        A(X, part, centers, radii, ("A", 0, 0, 0))
    finally:
        sc_mod.TreeSemicoreset._leaves = orig
    return {key: v for key, v in Probe.log}, out["leaves"], A


def _blobs(rng, n_parts, d):
    centers = rng.normal(scale=10.0, size=(n_parts, d))
    means = rng.normal(scale=0.6, size=(n_parts, 3, d))
    part = np.repeat(np.arange(n_parts), 3000)
    X = centers[part] + means[part, rng.integers(0, 3, part.size)] + rng.normal(scale=0.15, size=(part.size, d))
    return X, part, centers


def participation(monkeypatch, outside: bool = False):
    _probe_noise(monkeypatch)
    rng = np.random.default_rng(3)
    cfg = EngineConfig(**{**BASE, "epsilon": 8.0}, tree_cells=0.5, tree_keep_factor=0.5)
    X, part, centers = _blobs(rng, 2, cfg.dim)
    radii = np.full(2, cfg.radius)
    u = rng.normal(size=cfg.dim)
    x = centers[1] + (3.0 if outside else 0.4) * cfg.radius * u / np.linalg.norm(u)
    q0, leaves, A = _queries(cfg, X, part, centers, radii)
    q1, _, _ = _queries(cfg, np.r_[X, x[None]], np.r_[part, 1], centers, radii, leaves)
    q_x = A.quantise(normalise(x[None], np.array([1]), centers, radii))[0]  # its own clipped, quantised point
    assert q0.keys() == q1.keys()
    touched = {}
    for key in q0:
        diff = q1[key] - q0[key]
        rows = np.flatnonzero(np.any(diff.reshape(diff.shape[0], -1) != 0, axis=1))
        touched[key] = rows.size
        if rows.size:
            assert rows.size == 1, key  # one node, leaf or cell of the query
            want = 1 if diff.ndim == 1 else q_x
            assert np.array_equal(diff[rows[0]], want), key
    return [k[4:] for k, n in touched.items() if n]


@pytest.mark.parametrize("outside", [False, True])
def test_a_record_enters_one_value_of_each_query(monkeypatch, outside):
    touched = participation(monkeypatch, outside)
    levels = [k for k in touched if k[0] == "count"]
    assert 1 <= len(levels) <= BASE["tree_depth"] + 1 and levels[0] == ("count", 0)
    assert len(levels) == BASE["tree_depth"] + 1  # here its whole path: the blobs keep the tree branching
    assert sorted(k for k in touched if k[0] != "count") == [("cells", "count"), ("cells", "sum"), ("sum",)]


def test_participation_catches_cells_that_do_not_clip(monkeypatch):
    def unclipped(self):  # the natural slip: the cells sum (x − c)/r without clipping it to the unit ball
        x, p = self.raw()
        return (x - self.centers[p]) / self.radii[p][:, None], p

    monkeypatch.setattr(blocks_mod.CellBlock, "points", unclipped)
    with pytest.raises(AssertionError):
        participation(monkeypatch, outside=True)
