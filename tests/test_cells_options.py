"""The advanced options of A's cells: ``cells_locate_dims`` (locate in a keyed public projection) and
``cells_lloyd_steps`` / ``cells_lloyd_share`` (noisy Lloyd steps on the located centers).

* Checks: each option needs ``tree_cells``; the projection must be narrower than d; steps and share go
  together; the tree must keep a share (f + g < 1).
* Off (the default) the configuration's dict, the plan and A's draws are those of before the options.
* The ledger: the tree keeps 1 − f − g of A's budget, the Lloyd steps g, the cells f — A's Σ(Δ/σ)²
  (Gaussian) or Σ ε (pure) is unchanged — and the Lloyd lines say L counts and L sums per record; the check
  catches a plan that forgets the Lloyd lines. Every one of A's lines, under both mechanisms, scales with the
  unit bound g (refused with the cells today), so lifting that refusal cannot under-count a unit.
* Participation (the probe of ``tests/test_tree_cells.py``): a record enters D + 1 tree counts, one leaf sum
  of its clipped, quantised *projected* row, L Lloyd counts and L Lloyd sums (each once, the sums by that
  same projected row), one cell count and one cell sum (by its clipped, quantised d-dimensional point);
  the probe catches a projection that is not clipped to the unit ball. Each Lloyd step and the final
  labelling are given the same centers on both sides (the steps are composed one after another, each
  conditioned on the noisy outputs before it).
* An audit of a Lloyd step's noise, through :func:`dpstream.cells.lloyd_steps` itself: with one center per
  part, a center moves iff its noisy count passes :func:`~dpstream.cells.lloyd_keep`, so the share of
  parts holding m = keep − σ_count points whose center moves estimates P(noise ≥ σ_count) (0.159), and
  with many points at the origin the new center is the sum's noise over the count, so its spread estimates
  the sum's scale; the audit catches a plan whose Lloyd scales are halved.
"""
from __future__ import annotations

import math
import re

import numpy as np
import pytest

import dpstream.cells as cells_mod
import dpstream.privacy as privacy_mod
import dpstream.semicoresets as sc_mod
from dpstream.blocks import normalise
from dpstream.noise import NoiseSource
from dpstream.params import EngineConfig
from dpstream.privacy import PrivacyPlan
from dpstream.semicoresets import make_semicoreset
from tests.audit import broken
from tests.test_tree_cells import Probe, _blobs, _probe_noise

BASE = dict(n_clusters=3, dim=8, radius=2.0, epsilon=1.0, delta=1e-6, horizon_ticks=4, tree_depth=3)
ON = dict(tree_cells=0.4, cells_locate_dims=3, cells_lloyd_steps=2, cells_lloyd_share=0.3)


def a_lines(plan):
    return [ln for ln in plan.lines if ln.component.startswith("semicoreset A")]


@pytest.mark.parametrize("kw, message", [
    (dict(cells_locate_dims=3), "cells_locate_dims needs tree_cells > 0"),
    (dict(cells_lloyd_steps=2, cells_lloyd_share=0.3), "cells_lloyd_steps needs tree_cells > 0"),
    (dict(tree_cells=0.5, cells_locate_dims=-1), "cells_locate_dims must be an integer >= 0"),
    (dict(tree_cells=0.5, cells_locate_dims=2.5), "cells_locate_dims must be an integer >= 0"),
    (dict(tree_cells=0.5, cells_lloyd_steps=2), "cells_lloyd_steps and cells_lloyd_share go together"),
    (dict(tree_cells=0.5, cells_lloyd_share=0.2), "cells_lloyd_steps and cells_lloyd_share go together"),
    (dict(tree_cells=0.5, cells_lloyd_steps=2, cells_lloyd_share=1.0), "cells_lloyd_share must be a share in [0, 1)"),
    (dict(tree_cells=0.6, cells_lloyd_steps=2, cells_lloyd_share=0.4), "tree_cells + cells_lloyd_share must be < 1"),
    (dict(semicoreset="lloyd", cells_locate_dims=3), "cells_locate_dims needs tree_cells > 0"),
    (dict(max_contributions=2, cells_lloyd_steps=1, cells_lloyd_share=0.2), "cells_lloyd_steps needs tree_cells > 0"),
])
def test_the_options_are_checked(kw, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        EngineConfig(**{**BASE, **kw})


def test_off_is_the_configuration_plan_and_draws_of_before():
    cells = EngineConfig(**BASE, tree_cells=0.4)
    zero = EngineConfig(**BASE, tree_cells=0.4, cells_locate_dims=0, cells_lloyd_steps=0, cells_lloyd_share=0.0)
    assert zero.to_dict() == cells.to_dict() and not set(ON) - {"tree_cells"} & set(cells.to_dict())
    assert PrivacyPlan.build(zero).lines == PrivacyPlan.build(cells).lines
    wide = EngineConfig(**{**BASE, "delta": 0.0}, tree_cells=0.4, cells_locate_dims=8)  # p = d: nothing to narrow
    assert PrivacyPlan.build(wide).lines == PrivacyPlan.build(cells.with_(delta=0.0)).lines
    assert isinstance(make_semicoreset(wide, PrivacyPlan.build(wide), NoiseSource(bytes(32))).directions(("A", 0, 0)),
                      np.ndarray)
    noise = NoiseSource(bytes(32))
    A = make_semicoreset(zero, PrivacyPlan.build(zero), noise)
    assert isinstance(A.directions(("A", 0, 0)), np.ndarray) and A.directions(("A", 0, 0)).shape == (3, 8)
    on = EngineConfig(**BASE, **ON)
    got = make_semicoreset(on, PrivacyPlan.build(on), noise).directions(("A", 0, 0))
    assert isinstance(got, cells_mod.Projected) and got.V.shape == (3, 3) and got.P.shape == (3, 8)


def _ledger_check(delta, f, g, steps):
    off = PrivacyPlan.build(EngineConfig(**{**BASE, "delta": delta}))
    on = PrivacyPlan.build(EngineConfig(**{**BASE, "delta": delta}, tree_cells=f, cells_lloyd_steps=steps,
                                        cells_lloyd_share=g, cells_locate_dims=3))
    names = [ln.component for ln in a_lines(on)]
    assert names == ["semicoreset A counts", "semicoreset A sums", "semicoreset A lloyd counts",
                     "semicoreset A lloyd sums", "semicoreset A cell counts", "semicoreset A cell sums"]
    tree, lloyd, cells = a_lines(on)[:2], a_lines(on)[2:4], a_lines(on)[4:]
    if delta > 0:  # A's Σ (Δ/σ)², the Gaussian budget it composes to
        load = lambda lines: sum((ln.sensitivity / ln.noise) ** 2 for ln in lines)  # noqa: E731
        # L queries of sensitivity √2 (counts) and 2 (sums, replace-one) per record
        assert [ln.sensitivity ** 2 for ln in lloyd] == pytest.approx([2 * steps, 4 * steps])
    else:  # pure: A's Σ ε; L counts of ℓ1 2 and L sums of ℓ1 2√p per record
        load = lambda lines: sum(ln.epsilon for ln in lines)  # noqa: E731
        assert [ln.sensitivity for ln in lloyd] == pytest.approx([2 * steps, 2 * math.sqrt(3) * steps])
        assert tree[1].sensitivity == pytest.approx(2 * math.sqrt(3))  # the tree's sums are 3-dimensional
    total = load(a_lines(off))
    assert load(a_lines(on)) == pytest.approx(total, rel=1e-9)
    assert load(lloyd) == pytest.approx(g * total, rel=1e-9)
    assert load(cells) == pytest.approx(f * total, rel=1e-9)
    assert load(tree) == pytest.approx((1 - f - g) * total, rel=1e-9)
    assert on.total_epsilon <= 1.0 + 1e-9
    assert (on.a_lloyd_count_scale, on.a_lloyd_sum_scale) == (lloyd[0].noise, lloyd[1].noise)
    assert "semicoreset A lloyd sums" in on.table()


@pytest.mark.parametrize("delta", [1e-6, 0.0])
@pytest.mark.parametrize("f, g, steps", [(0.5, 0.3, 4), (0.2, 0.1, 1)])
def test_lloyd_steps_take_their_share_of_a_and_no_more(delta, f, g, steps):
    _ledger_check(delta, f, g, steps)


def test_ledger_check_catches_a_plan_that_forgets_the_lloyd_lines(monkeypatch):
    monkeypatch.setattr(privacy_mod, "lloyd_lines_gaussian", lambda *a: [])
    with pytest.raises(AssertionError):
        _ledger_check(1e-6, 0.5, 0.3, 4)


class _UnitView:
    """A cells configuration seen with a unit bound of g (a bounded unit is refused with the cells today;
    the ledger must still scale every one of A's lines by g, so that lifting that refusal cannot leave
    the cells' lines calibrated for one record)."""

    def __init__(self, cfg, g):
        self._cfg, self.unit_bound = cfg, g

    def __getattr__(self, name):
        return getattr(self._cfg, name)


@pytest.mark.parametrize("delta", [1e-6, 0.0])
def test_every_line_of_a_scales_with_the_unit_bound(delta):
    cfg = EngineConfig(n_clusters=3, dim=8, radius=1.0, epsilon=1.0, delta=delta, horizon_ticks=64,
                       tree_cells=0.5, cells_locate_dims=3, cells_lloyd_steps=2, cells_lloyd_share=0.2)
    one, five = (PrivacyPlan._build(_UnitView(cfg, g), False) for g in (1, 5))
    a = lambda plan: {ln.component: ln for ln in plan.lines if ln.component.startswith("semicoreset A")}  # noqa: E731
    assert len(a(one)) == 6
    for name, ln in a(one).items():
        assert a(five)[name].sensitivity == pytest.approx(5 * ln.sensitivity), name
        assert a(five)[name].noise == pytest.approx(5 * ln.noise, rel=1e-3), name


# --------------------------------------------------------------------------- participation (the probe)
def _queries(cfg, X, part, centers, radii, replay=None):
    """Every noisy query's exact input by key, and the centers each labelling used (``replay``: the centers
    of the run on D, given to the same labellings on D ∪ {x}; the tree's output is replayed likewise)."""
    Probe.log = []
    A = make_semicoreset(cfg, PrivacyPlan.build(cfg), NoiseSource(bytes(range(32))))
    seen = {"C": [], "leaves": None}
    orig_leaves, orig_label = sc_mod.TreeSemicoreset._leaves, cells_mod.label

    def leaves(self, block, key):
        seen["leaves"] = orig_leaves(self, block, key)
        return seen["leaves"] if replay is None else replay["leaves"]

    def label(z, part, C):
        C = C if replay is None else replay["C"][len(seen["C"])]
        seen["C"].append(C)
        return orig_label(z, part, C)

    sc_mod.TreeSemicoreset._leaves, cells_mod.label = leaves, label
    try:
        A(X, part, centers, radii, ("A", 0, 0, 0))
    finally:
        sc_mod.TreeSemicoreset._leaves, cells_mod.label = orig_leaves, orig_label
    return {key: v for key, v in Probe.log}, seen, A


def participation(monkeypatch, extra=None):
    """Per query key, how many of its values the record x changes (``extra``: more options of the cells)."""
    _probe_noise(monkeypatch)
    rng = np.random.default_rng(5)
    cfg = EngineConfig(**{**BASE, "epsilon": 8.0}, **ON, tree_keep_factor=0.5, **(extra or {}))
    X, part, centers = _blobs(rng, 2, cfg.dim)
    radii = np.full(2, cfg.radius)
    A = make_semicoreset(cfg, PrivacyPlan.build(cfg), NoiseSource(bytes(range(32))))
    P = A.directions(("A", 0, 0, 0)).P  # the key _queries' block opens with
    u = np.linalg.svd(P)[2][0]  # the direction P stretches most: outside the ball, its row ‖P·y‖ > 1
    x = centers[1] + 3.0 * cfg.radius * u
    y = normalise(x[None], np.array([1]), centers, radii)
    z = y @ P.T
    assert np.linalg.norm(z) > 1.2  # so an unclipped projection would show
    z /= np.sqrt(np.einsum("ij,ij->i", z, z)) * (1 + 1e-12)  # clipped as the unit ball's rows are
    q0, seen, A = _queries(cfg, X, part, centers, radii)
    q1, seen1, _ = _queries(cfg, np.r_[X, x[None]], np.r_[part, 1], centers, radii, seen)
    assert len(seen["C"]) == len(seen1["C"]) == ON["cells_lloyd_steps"] + 1  # L steps and the final labelling
    want_z, want_y = A.quantise(z)[0], A.quantise(y)[0]
    assert q0.keys() == q1.keys()
    touched = {}
    for key in q0:
        diff = q1[key] - q0[key]
        rows = np.flatnonzero(np.any(diff.reshape(diff.shape[0], -1) != 0, axis=1))
        touched[key[4:]] = rows.size
        if rows.size:
            assert rows.size == 1, key  # one node, leaf, center or cell of the query
            want = 1 if diff.ndim == 1 else (want_y if key[4:] == ("cells", "sum") else want_z)
            assert np.array_equal(diff[rows[0]], want), key
    return touched


def test_a_record_enters_one_value_of_each_query_and_l_lloyd_steps(monkeypatch):
    touched = participation(monkeypatch)
    assert all(n <= 1 for n in touched.values())
    levels = [k for k, n in touched.items() if n and k[0] == "count"]
    assert levels == [("count", lv) for lv in range(BASE["tree_depth"] + 1)]  # its whole path here
    L = ON["cells_lloyd_steps"]
    lloyd = sorted(k for k, n in touched.items() if k[:2] == ("cells", "lloyd"))
    assert lloyd == sorted(("cells", "lloyd", s, w) for s in range(L) for w in ("count", "sum"))
    assert all(touched[k] == 1 for k in lloyd)  # every step: one count and one sum
    rest = sorted(k for k, n in touched.items() if n and k[0] != "count" and k[:2] != ("cells", "lloyd"))
    assert rest == [("cells", "count"), ("cells", "sum"), ("sum",)]


def test_participation_catches_a_projection_that_is_not_clipped(monkeypatch):
    monkeypatch.setattr(cells_mod, "project", lambda y, P: y @ P.T)
    with pytest.raises(AssertionError, match="lloyd"):  # the steps sum the unclipped row (the tree re-clips)
        participation(monkeypatch)


# --------------------------------------------------------------------------- the audit of a Lloyd step
AUDIT = dict(n_clusters=1, dim=8, radius=1.0, epsilon=1.0, delta=1e-6, horizon_ticks=4, tree_depth=3,
             tree_cells=0.4, cells_locate_dims=3, cells_lloyd_steps=1, cells_lloyd_share=0.3)


def _lloyd_audit(sc, ss):
    """(share of the count parts whose center moved, spread of the sum parts' centers over σ_sum, whether
    every sum part moved) of one Lloyd step run with the plan A builds, against the scales (σ_count, σ_sum)
    the audit expects."""
    cfg = EngineConfig(**AUDIT)
    A = make_semicoreset(cfg, PrivacyPlan.build(cfg), NoiseSource(bytes(range(32))))
    keep = 3.0 * sc  # cells.lloyd_keep of the expected plan
    m_count, n_count = int(round(keep - sc)), 3000  # parts whose center moves iff the count noise ≥ σ
    m_sum, n_sum = 4000, 200  # parts whose new center is the sum's noise over ≈ m_sum
    sizes = np.r_[np.full(n_count, m_count), np.full(n_sum, m_sum)]
    part = np.repeat(np.arange(sizes.size), sizes)
    z = np.zeros((part.size, 3))  # every row at the origin: the exact sums are 0
    C0 = np.tile([0.5, 0.0, 0.0], (sizes.size, 1, 1))
    C = cells_mod.lloyd_steps(A, z, part, C0, ("A", 0, 0, 0))[:, 0]
    moved = np.any(C != C0[:, 0], axis=1)
    frac = moved[:n_count].mean()  # P(N(0, σ) ≥ σ) = 0.159 (integer rounding aside)
    spread = np.std(C[n_count:] * m_sum) / ss  # ≈ 1: the sum's noise in normalised units
    return frac, spread, moved[n_count:].all()


def _expected():
    plan = PrivacyPlan.build(EngineConfig(**AUDIT))
    # here the count's 3σ is the larger term of the keep threshold (the sum noise's norm: √3·σ_sum)
    assert cells_mod.lloyd_keep(plan, 3) == pytest.approx(3.0 * plan.a_lloyd_count_scale)
    return plan.a_lloyd_count_scale, plan.a_lloyd_sum_scale


def test_a_lloyd_step_draws_its_planned_noise():
    frac, spread, all_moved = _lloyd_audit(*_expected())
    assert all_moved
    assert 0.13 <= frac <= 0.19, frac
    assert 0.9 <= spread <= 1.1, spread


def test_the_lloyd_audit_catches_halved_scales(monkeypatch):
    want = _expected()
    broken.plan_scales_halved(monkeypatch, "a_lloyd_count", "a_lloyd_sum")
    frac, spread, _ = _lloyd_audit(*want)
    assert not (0.13 <= frac <= 0.19) and not (0.9 <= spread <= 1.1)
