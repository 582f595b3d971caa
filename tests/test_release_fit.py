"""The release's k centers are fitted to the run's coreset with older epochs' weights decayed
(``release_epoch_decay``): post-processing of DP outputs, the same function in both drivers."""
from __future__ import annotations

import numpy as np
import pytest

from dpstream import Engine, EngineConfig, epochs
from dpstream.noise import NoiseSource
from dpstream.privacy import PrivacyPlan
from dpstream.semicoresets import WeightedSet

pytestmark = pytest.mark.filterwarnings("ignore::dpstream.noise.UnsafeSeedWarning")

SEED = bytes(range(32))


def _set(points, weights):
    p = np.asarray(points, dtype=float)
    return WeightedSet(p, np.asarray(weights, dtype=float), np.full(len(p), -1))


def _cfg(**kw):
    return EngineConfig(n_clusters=2, dim=2, radius=10.0, epsilon=1.0, **kw)


def test_each_epoch_weighs_decay_to_the_power_of_its_age():
    cfg = _cfg(release_min_points=0.0)  # the age decay alone: the middle epoch's one point is not left out
    sets = [_set([[0, 0], [1, 1]], [40, 60]), _set([[5, 5]], [10]), _set([[-5, 5], [2, 2]], [7, 9])]
    noise = NoiseSource(SEED)
    pts, w = np.zeros((1, 2)), np.ones(1)
    P, W = epochs.release_fit_sample(cfg, noise, sets, pts, w, 2, 9, 2)  # fewer points than s_B: kept whole
    np.testing.assert_array_equal(P, np.vstack([s.points for s in sets]))
    np.testing.assert_allclose(W, [40 * 0.25, 60 * 0.25, 10 * 0.5, 7, 9])
    # an open epoch that released nothing yet is not an age: the engine's sets and the job's (which
    # always carry the open epoch's levels) give the same fit
    P2, W2 = epochs.release_fit_sample(cfg, noise, sets + [WeightedSet.empty(2)], pts, w, 2, 9, 2)
    np.testing.assert_array_equal(P, P2)
    np.testing.assert_array_equal(W, W2)


def test_decay_one_or_a_single_epoch_fits_the_released_coreset_itself():
    sets = [_set([[0, 0]], [4]), _set([[1, 1]], [5])]
    pts, w = np.ones((3, 2)), np.arange(3.0)
    for cfg, ss in ((_cfg(release_epoch_decay=1.0), sets), (_cfg(), sets[:1])):
        P, W = epochs.release_fit_sample(cfg, NoiseSource(SEED), ss, pts, w, 1, 3, 2)
        assert P is pts and W is w
    with pytest.raises(ValueError, match="release_epoch_decay"):
        _cfg(release_epoch_decay=0.0)


def test_the_plan_does_not_depend_on_the_decay():
    assert (PrivacyPlan.build(_cfg()).to_dict() == PrivacyPlan.build(_cfg(release_epoch_decay=1.0)).to_dict())


def test_the_engine_fits_to_its_released_epoch_coresets_only(monkeypatch):
    """Every set the fit reads is a released coreset (a closed epoch's, or the open epoch's released
    levels) — never a block that A has not released."""
    seen = []
    orig = epochs.release_fit_sample

    def spy(cfg, noise, sets, *a):
        seen.append(list(sets))
        return orig(cfg, noise, sets, *a)

    monkeypatch.setattr(epochs, "release_fit_sample", spy)
    cfg = EngineConfig(n_clusters=3, dim=2, radius=20.0, epsilon=1.0, horizon_ticks=64)
    e = Engine(cfg, SEED)
    rng = np.random.default_rng(0)
    means = np.array([[6.0, 6.0], [-8.0, 3.0], [2.0, -9.0]])
    for t in range(40):
        e.step(means[rng.integers(3, size=300)] + rng.normal(size=(300, 2)))
        released = e.epoch_coresets + ([e.mr.released()] if e.mr is not None else [])
        last = seen[-1] if seen else []
        for s in last:
            assert any(len(s) == len(r) and np.array_equal(s.points, r.points) and np.array_equal(s.weights, r.weights)
                       for r in released + [WeightedSet.empty(2)]) or len(s) == 0
    assert e.epoch >= 2 and seen
