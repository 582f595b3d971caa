"""fit(X) on a short high-dimensional input turns A's gated cells on (rules.short_fit_options; docs/privacy.md P22).

The choice reads n and d, public under fit's position clock, and the user's own options; the run is then
exactly the run of that configuration set by hand, and partial_fit never makes the choice.
"""
from __future__ import annotations

import numpy as np
import pytest

from dpstream import DPStreamClusterer, rules

pytestmark = pytest.mark.filterwarnings("ignore::dpstream.noise.UnsafeSeedWarning")

CELLS = rules.SHORT_FIT_CELLS


def _data(n: int, d: int, k: int = 3, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    means = rng.normal(size=(k, d)) * 2.0
    return means[rng.integers(k, size=n)] + rng.normal(size=(n, d)) * 0.5


@pytest.mark.parametrize("n, d, semicoreset, kw, on", [
    (rules.SHORT_FIT_MAX_POINTS, rules.SHORT_FIT_MIN_DIM, "tree", {}, True),
    (1, 784, "tree", {}, True),
    (rules.SHORT_FIT_MAX_POINTS + 1, rules.SHORT_FIT_MIN_DIM, "tree", {}, False),
    (1000, rules.SHORT_FIT_MIN_DIM - 1, "tree", {}, False),
    (1000, 784, "lloyd", {}, False),
    (1000, 784, "tree", {"tree_cells": 0.0}, False),   # the user's "off"
    (1000, 784, "tree", {"tree_depth": 7}, False),     # any of the options, set by hand
    (1000, 784, "tree", {"cells_gate_max": 2.0}, False),
    (1000, 784, "tree", {"max_contributions": 2}, False),  # the cells need records as the unit
    (1000, 784, "tree", {"n_rings": 8}, True),          # an option the cells do not set
])
def test_the_choice_reads_only_n_d_and_the_users_options(n, d, semicoreset, kw, on):
    got = rules.short_fit_options(n, d, semicoreset, kw)
    assert got == (dict(CELLS) if on else {})
    got["tree_cells"] = 0.5  # a copy: the rule's own dict is not the caller's to change
    assert CELLS["tree_cells"] == 0.69


def test_fit_reads_the_inputs_shape(monkeypatch):
    monkeypatch.setattr(rules, "SHORT_FIT_MAX_POINTS", 600)
    X = _data(601, 70)
    m = DPStreamClusterer(3, radius=30.0, tick_size=100, random_state=1).fit(X[:600])
    assert m.fit_options_ == CELLS and m._engine.cfg.tree_cells == CELLS["tree_cells"]
    assert m._engine.cfg.cells_gate_max == CELLS["cells_gate_max"]
    m.fit(X)  # one row more: the defaults again
    assert m.fit_options_ == {} and m._engine.cfg.tree_cells == 0.0
    m = DPStreamClusterer(3, radius=30.0, tick_size=100, random_state=1).fit(X[:600, :64])
    assert m.fit_options_ == {} and m._engine.cfg.tree_cells == 0.0


def test_fit_releases_what_the_explicit_options_release():
    X = _data(3000, 100)
    auto = DPStreamClusterer(3, radius=30.0, tick_size=500, random_state=4).fit(X)
    hand = DPStreamClusterer(3, radius=30.0, tick_size=500, random_state=4, **CELLS).fit(X)
    plain = DPStreamClusterer(3, radius=30.0, tick_size=500, random_state=4, tree_cells=0.0).fit(X)
    assert auto.fit_options_ == CELLS and hand.fit_options_ == {} and plain.fit_options_ == {}
    assert auto.privacy_plan_.to_dict() == hand.privacy_plan_.to_dict()
    np.testing.assert_array_equal(auto.cluster_centers_, hand.cluster_centers_)
    np.testing.assert_array_equal(auto.release_.coreset_points, hand.release_.coreset_points)
    # and it is not the defaults' configuration, plan or release
    assert auto.privacy_plan_.to_dict() != plain.privacy_plan_.to_dict()
    assert not np.array_equal(auto.release_.coreset_points, plain.release_.coreset_points)


def test_partial_fit_never_adds_them():
    X = _data(1000, 100)
    m = DPStreamClusterer(3, radius=30.0, tick_size=500, random_state=2)
    m.partial_fit(X[:500]).partial_fit(X[500:], last=True)
    assert m.fit_options_ == {} and m._engine.cfg.tree_cells == 0.0
    m.fit(X)  # the same estimator's fit makes the choice for its own input
    assert m.fit_options_ == CELLS
