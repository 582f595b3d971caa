"""The Beam shape of Alg. 2 — one BicriteriaLevel per (tree, level) plus a CenterSet — releases exactly
what the engine's vectorised BicriteriaDPCenters releases, tick by tick, for the same seed."""
from __future__ import annotations

import numpy as np
import pytest

from dpstream.bicriteria import BicriteriaDPCenters, BicriteriaLevel, CenterSet
from dpstream.grids import ShiftedGrids
from dpstream.noise import NoiseSource
from dpstream.params import EngineConfig
from dpstream.privacy import PrivacyPlan


@pytest.mark.parametrize("n_trees, n_reps, delta", [(1, 1, 1e-6), (2, 2, 1e-6), (2, 1, 0.0)])
def test_levels_and_registry_equal_the_vectorised_bicriteria(seed, n_trees, n_reps, delta):
    cfg = EngineConfig(n_clusters=3, dim=2, radius=10.0, epsilon=4.0, delta=delta, horizon_ticks=40, bicriteria=True,
                       n_trees=n_trees, n_reps=n_reps)
    plan = PrivacyPlan.build(cfg)
    whole = BicriteriaDPCenters(cfg, plan, NoiseSource(seed))
    noise = NoiseSource(seed)
    levels = [BicriteriaLevel(cfg, plan, noise, q, lv) for q in range(n_trees) for lv in range(cfg.grid_levels)]
    registry = CenterSet(cfg, ShiftedGrids(cfg, noise))
    rng = np.random.default_rng(0)
    means = np.array([[-5.0, 3.0], [4.0, -4.0], [6.0, 6.0]])
    grown = 0
    for t in range(40):
        m = 0 if t % 7 == 3 else int(rng.integers(50, 400))  # some empty ticks
        x = means[rng.integers(0, 3, m)] + rng.normal(scale=0.3, size=(m, 2))
        want_new, want_count = whole.step(x)
        reports = [lvl.step(x) for lvl in levels[::-1]]  # any arrival order
        got_new, got_count = registry.absorb(reports)
        np.testing.assert_array_equal(got_new, want_new)
        assert got_count == want_count
        grown += len(got_new)
    np.testing.assert_array_equal(registry.centers, whole.centers)
    assert grown >= 1  # the comparison covered centers being found, not only empty reports
    assert sum(lvl.state_floats() for lvl in levels) == whole.counter.state_floats()


def test_registry_refuses_an_incomplete_tick(seed):
    cfg = EngineConfig(n_clusters=3, dim=2, radius=10.0, epsilon=1.0, horizon_ticks=4, bicriteria=True)
    plan = PrivacyPlan.build(cfg)
    noise = NoiseSource(seed)
    levels = [BicriteriaLevel(cfg, plan, noise, 0, lv) for lv in range(cfg.grid_levels)]
    with pytest.raises(ValueError, match="all 6"):
        CenterSet(cfg, ShiftedGrids(cfg, noise)).absorb([lvl.step(np.zeros((0, 2))) for lvl in levels[:-1]])
