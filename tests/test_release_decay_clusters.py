"""``release_decay_rule="clusters"``: the release fit's age decay only where newer epochs still arrive.

The release's k centers are fitted to every epoch's coreset with old epochs' weights decayed by age
(``release_epoch_decay``). With this rule an old epoch's points keep their whole weight in the clusters
(of a k-means fit of all released epochs) that the newer epochs no longer fill. What must hold:

* a cluster that stopped arriving keeps its weight, one the newer epochs fill decays by age, the
  newer epochs are untouched, the first epoch (the ball's rings: coarse leaf means) always decays by
  age, and a stationary stream decays exactly as the age rule;
* the rule reads the released epoch coresets and keyed noise only (post-processing): the same released
  sets give the same fit sample whatever raw points produced them, and a broken variant that reads
  anything else is caught by that replay;
* with a handful of released points, no point is a cluster of its own (the first epochs' coarse leaf
  means are not kept whole);
* the privacy plan does not change.
"""
from __future__ import annotations

import numpy as np
import pytest

import dpstream.epochs as epochs_mod
from dpstream import Engine, EngineConfig
from dpstream.noise import NoiseSource
from dpstream.privacy import PrivacyPlan
from dpstream.semicoresets import WeightedSet

pytestmark = pytest.mark.filterwarnings("ignore::dpstream.noise.UnsafeSeedWarning")

SEED = bytes(range(32))


def _cfg(**kw):
    base = dict(n_clusters=3, dim=2, radius=60.0, epsilon=1.0, delta=1e-6, horizon_ticks=64,
                release_decay_rule="clusters")
    base.update(kw)
    return EngineConfig(**base)


def _set(rng, centers, n):
    P = np.vstack([rng.normal(size=(n, 2)) + c for c in centers])
    return WeightedSet(P, np.full(len(P), 10.0), np.full(len(P), -1))


def _factor(sets, decay=0.5):
    return np.concatenate([np.full(len(s), decay ** (len(sets) - 1 - i)) for i, s in enumerate(sets)])


def _kept(cfg, sets, t=5):
    S = WeightedSet.concat(sets, cfg.dim)
    return epochs_mod._stopped_clusters_kept(cfg, NoiseSource(SEED), sets, S, _factor(sets), 2, t)


def test_a_cluster_that_stopped_arriving_keeps_its_weight():
    rng = np.random.default_rng(0)
    first = _set(rng, [(30, 0)], 10)        # the first epoch: only ever decayed by age
    old = _set(rng, [(0, 0), (30, 0)], 20)  # clusters at 0 and at 30 ...
    new = _set(rng, [(0, 0), (0, 30)], 40)  # ... and only the one at 0 still arrives
    out = _kept(_cfg(), [first, old, new])
    assert np.all(out[:10] == 0.25)
    assert np.all(out[10:30] == 0.5)    # old points where the newer epoch arrives: decayed by age
    assert np.all(out[30:50] == 1.0)    # the stopped cluster at 30: whole weight
    assert np.all(out[50:] == 1.0)      # the newest epoch: age 0


def test_a_stationary_stream_decays_exactly_by_age():
    rng = np.random.default_rng(1)
    sets = [_set(rng, [(0, 0), (30, 0), (0, 30)], n) for n in (10, 20, 40, 80)]
    np.testing.assert_array_equal(_kept(_cfg(), sets), _factor(sets))


def test_a_few_released_points_are_no_stopped_clusters():
    """Three old coarse points and four newer ones with k = 3: a partition with a center per point
    would call every old point a stopped cluster; at most one center per four points covers them."""
    rng = np.random.default_rng(2)
    first = WeightedSet(rng.normal(size=(2, 2)) * 5, np.full(2, 50.0), np.full(2, -1))
    old = WeightedSet(rng.normal(size=(3, 2)) * 5, np.full(3, 50.0), np.full(3, -1))
    new = WeightedSet(rng.normal(size=(4, 2)) * 5, np.full(4, 50.0), np.full(4, -1))
    out = _kept(_cfg(), [first, old, new])
    assert np.all(out[2:5] == 0.5)


def _drifting_ticks(rng, shift):
    """12 ticks: two clusters for six ticks, then a third one only (the first two stop arriving)."""
    out = []
    for t in range(12):
        c = [(-25 + shift, 0), (25 + shift, 0)] if t < 6 else [(0, 35)]
        out.append(np.vstack([rng.normal(size=(150, 2)) * 2 + np.array(x) for x in c]))
    return out


def _released_sets(e):
    return list(e.epoch_coresets) + [e.mr.released()]


def test_the_rule_reads_the_released_sets_alone(monkeypatch):
    """Replay: the release fit sample recomputed from the engine's released epoch coresets and the keyed
    noise equals the engine's, and equals it again for a second engine whose raw points differ (the sets
    swapped in). A broken rule that reads the raw stream (here: the engine's last tick's points, through
    a module global) gives a different sample on the replay, and the check catches it."""
    cfg = _cfg(first_epoch_blocks=0.25, block_size=150)
    e = Engine(cfg, SEED)
    for x in _drifting_ticks(np.random.default_rng(3), 0.0):
        e.step(x)
    assert len(e.epoch_coresets) >= 3
    sets, t, ep = _released_sets(e), e.t, e.epoch

    def replay():
        S = WeightedSet.concat(sets, cfg.dim)
        pts, w = epochs_mod.release_sample(cfg, NoiseSource(SEED), S, ep, t, cfg.z)
        return epochs_mod.release_fit_sample(cfg, NoiseSource(SEED), sets, pts, w, ep, t, cfg.z)

    first = replay()
    # another raw stream (shifted clusters) run through a second engine: the replay reads only `sets`
    e2 = Engine(cfg, SEED)
    for x in _drifting_ticks(np.random.default_rng(4), 3.0):
        e2.step(x)
    again = replay()
    np.testing.assert_array_equal(first[0], again[0])
    np.testing.assert_array_equal(first[1], again[1])

    orig = epochs_mod._stopped_clusters_kept
    leak = {"x": e2.n_points}

    def broken(cfg_, noise, sets_, S, factor, epoch, t_):  # keeps every old point whole on a raw count
        out = orig(cfg_, noise, sets_, S, factor, epoch, t_)
        return np.ones_like(out) if leak["x"] % 2 == 0 else out

    monkeypatch.setattr(epochs_mod, "_stopped_clusters_kept", broken)
    leaked = replay()
    caught = len(leaked[0]) != len(first[0]) or not np.array_equal(leaked[1], first[1])
    assert caught


def test_the_plan_does_not_depend_on_the_rule():
    assert PrivacyPlan.build(_cfg()).to_dict() == PrivacyPlan.build(_cfg(release_decay_rule="age")).to_dict()
    with pytest.raises(ValueError, match="release_decay_rule"):
        _cfg(release_decay_rule="drift")
