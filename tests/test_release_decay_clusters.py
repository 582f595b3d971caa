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
from dpstream import Engine
from dpstream.noise import NoiseSource
from dpstream.privacy import PrivacyPlan
from dpstream.semicoresets import WeightedSet
from streams import decay_cfg, release_fit_replays, weighted_blobs

pytestmark = pytest.mark.filterwarnings("ignore::dpstream.noise.UnsafeSeedWarning")

SEED = bytes(range(32))


def _cfg(**kw):
    return decay_cfg("clusters", **kw)


_set = weighted_blobs


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


def _drifting_ticks(rng, shift, last_extra=0):
    """20 ticks: two clusters for three ticks, then a third one only (the first two stop arriving before
    the epochs that start at ticks 4 and 8)."""
    out = []
    for t in range(20):
        c = [(-25 + shift, 0), (25 + shift, 0)] if t < 3 else [(0, 35), (0, 35)]
        out.append(np.vstack([rng.normal(size=(1000, 2)) * 2 + np.array(x) for x in c]))
    out[-1] = np.vstack([out[-1], rng.normal(size=(last_extra, 2)) + np.array([0, 35])])
    return out


_RAW = {"n": 0}  # what a broken rule could read besides the released sets: the last tick's exact size


def _broken_rule(cfg, noise, sets, S, factor, epoch, t, **kw):
    """A rule that also reads the raw stream: it keeps every old point whole when the last tick held an
    even number of points."""
    return np.ones_like(factor) if _RAW["n"] % 2 == 0 else _ORIG(cfg, noise, sets, S, factor, epoch, t, **kw)


_ORIG = epochs_mod._stopped_clusters_kept


def _replay_matches(monkeypatch, broken: bool, rule: str = "clusters") -> bool:
    """The replay of a drifting engine's last release fit from its released sets (tests/streams.py), the
    second engine on other raw points whose last tick holds one point more."""
    if broken:
        monkeypatch.setattr(epochs_mod, "_stopped_clusters_kept", _broken_rule)
    return release_fit_replays(_cfg(epsilon=2.0, release_decay_rule=rule), SEED,
                               _drifting_ticks(np.random.default_rng(3), 0.0),
                               _drifting_ticks(np.random.default_rng(4), 3.0, last_extra=1), _RAW, min_epochs=3)


def test_the_rule_reads_the_released_sets_alone(monkeypatch):
    """Replay: the release fit sample recomputed from the engine's released epoch coresets and keyed noise
    equals the engine's, after a second engine has run on other raw points. The same check catches a
    broken rule that also reads the raw stream (the last tick's exact size)."""
    assert _replay_matches(monkeypatch, broken=False)
    assert not _replay_matches(monkeypatch, broken=True)


def test_the_rule_keeps_the_clusters_a_drifting_engine_stopped_receiving():
    """End to end: on a stream whose first two clusters stop arriving, the engine's last release fit keeps
    some old points whole, where the age rule would have decayed them all."""
    cfg = _cfg(epsilon=2.0)
    e = Engine(cfg, SEED)
    for x in _drifting_ticks(np.random.default_rng(3), 0.0):
        e.step(x)
    sets = [s for s in list(e.epoch_coresets) + [e.mr.released()] if len(s)]
    S = WeightedSet.concat(sets, cfg.dim)
    age = _factor(sets)
    out = epochs_mod._stopped_clusters_kept(cfg, e.noise, sets, S, age, e.epoch, e.t)
    assert np.any((out == 1.0) & (age < 1.0))


def test_the_plan_does_not_depend_on_the_rule():
    assert PrivacyPlan.build(_cfg()).to_dict() == PrivacyPlan.build(_cfg(release_decay_rule="age")).to_dict()
    with pytest.raises(ValueError, match="release_decay_rule"):
        _cfg(release_decay_rule="nearby")


# -- release_decay_rule="stopped": the same test of shares, for the first epoch too and without waiting for
# the newer epochs to outweigh the old one, on a fit with a center per two released points

def _kept_stopped(sets, t=5, n_clusters=3):
    cfg = _cfg(release_decay_rule="stopped", n_clusters=n_clusters)
    S = WeightedSet.concat(sets, cfg.dim)
    return epochs_mod._stopped_clusters_kept(cfg, NoiseSource(SEED), sets, S, _factor(sets), 2, t, stopped_rule=True)


def _in_order_sets(rng, n=6):
    """A stream in cluster order, a cluster per epoch whose epochs double: epoch 0 holds the cluster at
    (0, 0), epoch 1 (twice its mass) the one at (30, 0), and the young open epoch (half of epoch 1's
    mass) the one at (0, 30)."""
    return [WeightedSet(rng.normal(size=(n, 2)) + c, np.full(n, m), np.full(n, -1))
            for c, m in (((0, 0), 100.0), ((30, 0), 200.0), ((0, 30), 100.0))]


def test_stopped_keeps_an_in_order_stream_whole_where_clusters_decays_it():
    """Every old cluster of an in-order stream stopped arriving: the "stopped" rule keeps the first epoch's
    and the not yet outweighed epoch's clusters whole; the "clusters" rule decays both by age."""
    sets = _in_order_sets(np.random.default_rng(5))
    np.testing.assert_array_equal(_kept_stopped(sets), np.ones(18))
    np.testing.assert_array_equal(_kept(_cfg(), sets), _factor(sets))


def test_stopped_decays_an_old_cluster_the_newer_epochs_still_fill():
    rng = np.random.default_rng(6)
    first = _set(rng, [(0, 0), (30, 0)], 10)
    old = _set(rng, [(0, 0), (30, 0)], 20)
    new = _set(rng, [(0, 0), (0, 30)], 10)  # younger than the old epoch, and only the cluster at 0 arrives
    out = _kept_stopped([first, old, new])
    assert np.all(out[:20] == 0.25)  # the first epoch's two clusters both arrive in the old epoch
    assert np.all(out[20:40] == 0.5)  # the old epoch's cluster at 0 still arrives: decayed by age
    assert np.all(out[40:60] == 1.0)  # the one at 30 stopped: whole
    assert np.all(out[60:] == 1.0)


def test_stopped_decays_a_stationary_stream_exactly_by_age():
    rng = np.random.default_rng(1)
    sets = [_set(rng, [(0, 0), (30, 0), (0, 30)], n) for n in (10, 20, 40, 8)]  # the open epoch young
    np.testing.assert_array_equal(_kept_stopped(sets), _factor(sets))


def test_stopped_reads_the_released_sets_alone(monkeypatch):
    """The replay of the engine's last release fit from released sets and keyed noise, under "stopped"; the
    same broken variant (reading the raw stream) is caught."""
    assert _replay_matches(monkeypatch, broken=False, rule="stopped")
    assert not _replay_matches(monkeypatch, broken=True, rule="stopped")


def test_stopped_does_not_judge_on_too_few_newer_points():
    """The open epoch has released two points: were the old epoch's cluster still arriving at its share, the
    open epoch would have put two points in it, fewer than ln(k / 0.05) ≈ 4.1, and none there is no evidence
    that it stopped: decayed by age, and so is the first epoch (no later epoch kept a cluster). With a
    six-point open epoch both are kept."""
    rng = np.random.default_rng(7)
    first, old, _ = _in_order_sets(rng)
    young = WeightedSet(rng.normal(size=(2, 2)) + (0, 30), np.full(2, 100.0), np.full(2, -1))
    sets = [first, old, young]
    np.testing.assert_array_equal(_kept_stopped(sets), _factor(sets))
    grown = WeightedSet(rng.normal(size=(6, 2)) + (0, 30), np.full(6, 100.0), np.full(6, -1))
    assert np.all(_kept_stopped([first, old, grown])[:12] == 1.0)


def test_stopped_keeps_the_first_epoch_only_whole_and_in_a_drifting_stream():
    """The first epoch's points in three clumps no newer epoch fills, a third of its mass each (the ball's
    coarse leaf means between the clusters of a shuffled stream): decayed by age, though a later epoch's
    cluster stopped. All its mass in one such clump: kept when a later epoch's cluster stopped too (an
    in-order stream), decayed when the later epochs are stationary (a high-d shuffled stream's first epoch,
    whose coarse means all sit near the data's mean)."""
    rng = np.random.default_rng(8)
    drifting = [_set(rng, [(0, 0), (30, 0)], 6), _set(rng, [(0, 0), (30, 30)], 12)]  # (30, 0) stopped
    stationary = [_set(rng, [(0, 0), (30, 30)], n) for n in (6, 12)]
    parts = _set(rng, [(-30, -30), (-30, 30), (30, -30)], 4)
    assert np.all(_kept_stopped([parts] + drifting, n_clusters=6)[:12] == 0.25)
    one = _set(rng, [(-30, -30)], 6)
    out = _kept_stopped([one] + drifting, n_clusters=4)
    assert np.all(out[:6] == 1.0) and np.all(out[12:18] == 1.0)  # the first epoch's and the (30, 0) cluster
    np.testing.assert_array_equal(_kept_stopped([one] + stationary, n_clusters=4)[:6], np.full(6, 0.25))
