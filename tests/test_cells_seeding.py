"""The seeding options of A's cells: ``cells_overseed`` (r·k centers until a weighted k-means reduces them to
k), ``cells_reseed`` (dead centers moved beside the heaviest between Lloyd steps) and ``cells_count_share``
(the cells' own count : sum split).

* Checks: each needs ``tree_cells``; re-seeding needs Lloyd steps; the values' ranges.
* Off (the defaults) A's releases, plan and dict are those recorded before the options, with and without the
  cells' other options (a digest of A's output on one block).
* The ledger: over-seeding and re-seeding add no line and change none (post-processing); the cells' own count
  share moves budget between the cells' count and sum only.
* Participation (the probe of ``tests/test_cells_options.py``) with both seeding options on: a record still
  enters one value of each query, L Lloyd counts and sums.
* Noisy values only: every query's output forced to the same values on two different data sets, the centers
  of every labelling and A's output must come out the same — they are functions of noisy outputs and public
  draws alone. The check catches a reduction weighted by exact counts.
"""
from __future__ import annotations

import hashlib
import re

import numpy as np
import pytest

import dpstream.cells as cells_mod
import dpstream.semicoresets as sc_mod
from dpstream.noise import NoiseSource
from dpstream.params import EngineConfig
from dpstream.privacy import PrivacyPlan
from dpstream.semicoresets import make_semicoreset
from tests.test_cells_options import BASE, ON, a_lines, participation
from tests.test_tree_cells import _blobs

SEED = dict(cells_overseed=2, cells_reseed=0.25)
LABEL = cells_mod.label


@pytest.mark.parametrize("kw, message", [
    (dict(cells_overseed=2), "cells_overseed needs tree_cells > 0"),
    (dict(cells_count_share=0.1), "cells_count_share needs tree_cells > 0"),
    (dict(tree_cells=0.5, cells_overseed=0), "cells_overseed must be an integer >= 1"),
    (dict(tree_cells=0.5, cells_overseed=1.5), "cells_overseed must be an integer >= 1"),
    (dict(tree_cells=0.5, cells_reseed=-0.1), "cells_reseed must be a number >= 0"),
    (dict(tree_cells=0.5, cells_reseed=0.25), "cells_reseed needs cells_lloyd_steps"),
    (dict(tree_cells=0.5, cells_count_share=1.0), "cells_count_share must be a share in [0, 1)"),
    (dict(semicoreset="lloyd", cells_reseed=0.2), "cells_reseed needs tree_cells > 0"),
])
def test_the_seeding_options_are_checked(kw, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        EngineConfig(**{**BASE, **kw})


# A's output on one block of 40-dimensional blobs in three parts, for each configuration below (ε = 1, both
# mechanisms), and the plans' lines and the dicts: recorded before the seeding options existed, and before the
# part sparse vector was on by default (so it is off here and its key is left out of the dicts)
OFF_DIGEST = "7c795b0b9cfbbd3678e3e22fe27a985ddbaca14607dff5108fdca37bac0a2ff2"
OFF = [dict(tree_cells=0.5), dict(tree_cells=0.4, cells_locate_dims=8, cells_lloyd_steps=3, cells_lloyd_share=0.3),
       dict(tree_cells=0.4, cells_lloyd_steps=2, cells_lloyd_share=0.3, count_share=0.1), dict()]


def _off_digest(extra):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(6000, 40)) + 4 * rng.normal(size=(5, 40))[rng.integers(0, 5, 6000)]
    part = rng.integers(0, 3, 6000)
    h = hashlib.sha256()
    for kw in OFF:
        for delta in (1e-6, 0.0):
            cfg = EngineConfig(n_clusters=5, dim=40, radius=30.0, epsilon=1.0, delta=delta, horizon_ticks=8, **kw,
                               **(extra if kw else {}), part_fire=0.0)
            A = make_semicoreset(cfg, PrivacyPlan.build(cfg), NoiseSource(bytes(range(32))))
            out = A(X, part, np.zeros((3, 40)), np.full(3, 30.0), ("A", 0, 0, 0))
            h.update(out.points.tobytes())
            h.update(np.asarray(out.weights).tobytes())
            h.update(repr(PrivacyPlan.build(cfg).lines).encode())
            h.update(repr({k: v for k, v in cfg.to_dict().items() if k != "part_fire"}).encode())
    return h.hexdigest()


def test_off_is_the_releases_plan_and_dict_of_before():
    assert _off_digest({}) == OFF_DIGEST
    assert _off_digest(dict(cells_overseed=1, cells_reseed=0.0, cells_count_share=0.0)) == OFF_DIGEST
    assert _off_digest(dict(cells_overseed=2)) != OFF_DIGEST  # the digest sees the option


@pytest.mark.parametrize("delta", [1e-6, 0.0])
def test_seeding_is_post_processing_in_the_ledger(delta):
    base = EngineConfig(**{**BASE, "delta": delta}, **ON)
    assert PrivacyPlan.build(base.with_(**SEED)).lines == PrivacyPlan.build(base).lines


@pytest.mark.parametrize("delta", [1e-6, 0.0])
def test_the_cells_count_share_moves_budget_between_the_cells_count_and_sum_only(delta):
    base = EngineConfig(**{**BASE, "delta": delta}, **ON, count_share=0.5)
    off, on = a_lines(PrivacyPlan.build(base)), a_lines(PrivacyPlan.build(base.with_(cells_count_share=0.05)))
    assert [ln.component for ln in on] == [ln.component for ln in off]
    assert on[:4] == off[:4]  # the tree's and the Lloyd steps' lines
    if delta > 0:
        load = lambda ln: (ln.sensitivity / ln.noise) ** 2  # noqa: E731
    else:
        load = lambda ln: ln.epsilon  # noqa: E731
    cells_load = load(off[4]) + load(off[5])
    assert load(off[4]) == pytest.approx(0.5 * cells_load, rel=1e-9)
    assert load(on[4]) == pytest.approx(0.05 * cells_load, rel=1e-9)
    assert load(on[5]) == pytest.approx(0.95 * cells_load, rel=1e-9)
    plan = PrivacyPlan.build(base.with_(cells_count_share=0.05))
    assert (plan.a_cell_count_scale, plan.a_cell_sum_scale) == (on[4].noise, on[5].noise)
    assert plan.total_epsilon <= 1.0 + 1e-9


def _spy_reseed(monkeypatch):
    moved = []
    orig = cells_mod.reseed

    def reseed(C, *a):
        out = orig(C, *a)
        moved.append(int(np.any(out != C, axis=-1).sum()))
        return out

    monkeypatch.setattr(cells_mod, "reseed", reseed)
    return moved


def test_a_record_enters_one_value_of_each_query_with_seeding(monkeypatch):
    moved = _spy_reseed(monkeypatch)
    touched = participation(monkeypatch, SEED)
    assert sum(moved) > 0  # the re-seeding ran and moved centers
    assert all(n <= 1 for n in touched.values())
    L = ON["cells_lloyd_steps"]
    lloyd = sorted(k for k, n in touched.items() if k[:2] == ("cells", "lloyd"))
    assert lloyd == sorted(("cells", "lloyd", s, w) for s in range(L) for w in ("count", "sum"))
    rest = sorted(k for k, n in touched.items() if n and k[0] != "count" and k[:2] != ("cells", "lloyd"))
    assert rest == [("cells", "count"), ("cells", "sum"), ("sum",)]


# --------------------------------------------------------------------------- noisy values only
class Forced(np.ndarray):
    """Noise that makes its query's output a given array whatever the query's exact value (``targets``:
    by query key; None: zero noise, the output logged)."""
    targets = None
    log: dict

    def __array_ufunc__(self, ufunc, method, *inputs, **kw):
        plain = [np.asarray(i) if isinstance(i, Forced) else i for i in inputs]
        if ufunc is np.add and method == "__call__":
            exact = plain[0] if isinstance(inputs[1], Forced) else plain[1]
            if Forced.targets is None:
                Forced.log[self.key] = np.array(exact, copy=True)
                return np.array(exact, copy=True)
            want = Forced.targets[self.key]
            assert want.shape == exact.shape, self.key
            return np.array(want, copy=True)
        return getattr(ufunc, method)(*plain, **kw)


def _forced_run(monkeypatch, X, part, centers, radii, targets):
    def part_noise(self, key, owner, tail=(), scale=None, per_part=True):
        z = np.zeros((owner.size,) + tuple(tail), dtype=np.int64).view(Forced)
        z.key = key
        return z

    monkeypatch.setattr(sc_mod.Semicoreset, "part_noise", part_noise)
    seen = []

    def label(z, part, C):
        seen.append(np.array(C, copy=True))
        return LABEL(z, part, C)

    monkeypatch.setattr(cells_mod, "label", label)
    Forced.targets, Forced.log = targets, {}
    cfg = EngineConfig(**{**BASE, "epsilon": 8.0}, **ON, tree_keep_factor=0.5, **SEED)
    A = make_semicoreset(cfg, PrivacyPlan.build(cfg), NoiseSource(bytes(range(32))))
    try:
        out = A(X, part, centers, radii, ("A", 0, 0, 0))
    finally:
        Forced.targets = None
    return out, seen, dict(Forced.log)


def noisy_values_only(monkeypatch):
    """Run A on D with zero noise, then on a different D' with every query's output forced to D's: the
    centers of every labelling and the output must be D's."""
    moved = _spy_reseed(monkeypatch)
    rng = np.random.default_rng(5)
    X, part, centers = _blobs(rng, 2, BASE["dim"])
    radii = np.full(2, BASE["radius"])
    X2 = np.r_[X + rng.normal(scale=0.05, size=X.shape), X[:400] + 0.5]
    part2 = np.r_[part, part[:400]]
    out1, seen1, log = _forced_run(monkeypatch, X, part, centers, radii, None)
    out2, seen2, _ = _forced_run(monkeypatch, X2, part2, centers, radii, log)
    assert sum(moved) > 0
    assert len(seen1) == len(seen2) == ON["cells_lloyd_steps"] + 1
    for a, b in zip(seen1, seen2):
        assert a.shape == (2, 2 * BASE["n_clusters"], 3) or a.shape == (2, BASE["n_clusters"], 3)
        assert np.array_equal(a, b)
    assert np.array_equal(out1.points, out2.points) and np.array_equal(out1.weights, out2.weights)


def test_seeding_reads_noisy_values_only(monkeypatch):
    noisy_values_only(monkeypatch)


def test_noisy_values_only_catches_a_reduction_weighted_by_exact_counts(monkeypatch):
    orig = cells_mod.lloyd_steps_counted

    def exact_weights(A, z, part, C, key):
        C, _ = orig(A, z, part, C, key)
        n_parts, k, _ = C.shape
        return C, np.bincount(part * k + LABEL(z, part, C), minlength=n_parts * k)

    monkeypatch.setattr(cells_mod, "lloyd_steps_counted", exact_weights)
    with pytest.raises(AssertionError):
        noisy_values_only(monkeypatch)


# --------------------------------------------------------------------------- the two steps themselves
def test_reseed_moves_each_dead_center_beside_the_heaviest():
    C = np.array([[[0.0, 0.0], [1.0, 0.0], [3.0, 0.0], [9.0, 9.0]]])
    noisy = np.array([[50, 200, 60, 2]])
    live = noisy >= 10
    U = np.zeros((1, 4, 2))
    U[0, 3] = [0.0, 5.0]  # the dead center's public direction
    out = cells_mod.reseed(C, noisy, live, 0.5, U)
    gap = 1.0  # the live centers' nearest-neighbour distances: 1, 1, 2
    assert np.allclose(out[0, :3], [[0.0, 0.0], [1.0, -0.5 * gap], [3.0, 0.0]])
    assert np.allclose(out[0, 3], [1.0, 0.5 * gap])
    # a part with fewer than two live centers, or none dead, keeps its centers
    assert np.array_equal(cells_mod.reseed(C, noisy, noisy >= 100, 0.5, U), C)
    assert np.array_equal(cells_mod.reseed(C, noisy, noisy >= 0, 0.5, U), C)


def test_reduce_gives_k_centers_per_part_from_positive_weights():
    rng = np.random.default_rng(0)
    C = np.concatenate([rng.normal(size=(1, 6, 3)), rng.normal(size=(1, 6, 3))])
    w = np.r_[[100, 100, 100, 100, 0, -5], [0, 0, 0, 0, 0, 0]]
    out = cells_mod.reduce_centers(C, w, 3, "kmeans", lambda p: np.random.default_rng(p))
    assert out.shape == (2, 3, 3)
    assert np.array_equal(out[1], C[1, :3])  # no positive weight: the first k centers
    # part 0: three groups of its four weighted centers; the zero and negative ones take no part
    inside = np.linalg.norm(out[0][:, None] - C[0, :4][None], axis=-1).min(axis=1)
    assert inside.max() <= np.linalg.norm(C[0, :4][:, None] - C[0, :4][None], axis=-1).max()
