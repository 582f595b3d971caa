"""``release_decay_rule="drift"``: an old epoch keeps its whole weight in the release fit once it drifted away.

What must hold:

* the permutation test calls a stationary epoch drifted at about its level (an audit on exchangeable
  labels), and an epoch whose points share no cluster with the newer ones drifted;
* a stationary stream's epochs decay exactly by age; in cluster order every old epoch keeps its weight,
  the first one only once a later epoch drifted (a first epoch of coarse clumps alone is no drift);
* the rule reads the released epoch coresets and keyed noise only: a replay from the released sets gives
  the engine's fit sample, and a broken variant that reads the raw stream is caught by the replay;
* the privacy plan does not change.
"""
from __future__ import annotations

import numpy as np
import pytest

import dpstream.drift_decay as drift_mod
import dpstream.epochs as epochs_mod
from dpstream import Engine
from dpstream.noise import NoiseSource
from dpstream.privacy import PrivacyPlan
from dpstream.semicoresets import WeightedSet
from streams import decay_cfg, release_fit_replays, weighted_blobs

pytestmark = pytest.mark.filterwarnings("ignore::dpstream.noise.UnsafeSeedWarning")

SEED = bytes(range(32))


def _cfg(**kw):
    return decay_cfg("drift", **kw)


_set = weighted_blobs


def _age(sets, decay=0.5):
    return np.concatenate([np.full(len(s), decay ** (len(sets) - 1 - i)) for i, s in enumerate(sets)])


def _kept(sets, t=5, **kw):
    cfg = _cfg(**kw)
    S = WeightedSet.concat(sets, cfg.dim)
    noise = NoiseSource(SEED)
    return drift_mod.drift_kept(cfg, noise, sets, S, _age(sets), 2, t, epochs_mod.Partitions(cfg, noise, S, 2, t))


def test_the_permutation_test_calls_exchangeable_epochs_drifted_at_about_its_level():
    """300 draws of 60 points over 8 cells, 20 of them labelled old at random (the stationary case): the
    test fires in at most 3 % of them (its level is 1 %); with the old points in cells of their own it
    fires every time."""
    rng = np.random.default_rng(0)
    fired = 0
    for _ in range(300):
        lab = rng.integers(0, 8, 60)
        w = rng.uniform(50, 150, 60)
        is_old = np.zeros(60, bool)
        is_old[rng.choice(60, 20, replace=False)] = True
        fired += drift_mod.drifted(lab, w, is_old, 8, rng)
    assert fired <= 9
    lab = np.r_[rng.integers(0, 4, 20), rng.integers(4, 8, 40)]
    is_old = np.r_[np.ones(20, bool), np.zeros(40, bool)]
    assert all(drift_mod.drifted(lab, np.ones(60), is_old, 8, rng) for _ in range(20))


def test_the_batched_test_decides_as_all_relabellings_at_once():
    """The test stops at the first batch that decides "no"; its answer is that of all _PERMUTATIONS
    relabellings drawn at once from the same generator (over stationary, drifted and borderline cases)."""
    def full(lab, w, is_old, k, rng):
        total = np.bincount(lab, weights=w, minlength=k)
        obs = drift_mod._overlap(np.bincount(lab[is_old], weights=w[is_old], minlength=k)[None, :], total)[0]
        R, m = drift_mod._PERMUTATIONS, int(is_old.sum())
        pick = np.argpartition(rng.random((R, is_old.size)), m - 1, axis=1)[:, :m]
        old = np.bincount((lab[pick] + k * np.arange(R)[:, None]).ravel(), weights=w[pick].ravel(),
                          minlength=R * k).reshape(R, k)
        return (1 + np.count_nonzero(drift_mod._overlap(old, total) <= obs)) / (1 + R) <= drift_mod._ALPHA

    rng = np.random.default_rng(9)
    answers = set()
    for shift in np.linspace(0.0, 1.0, 30):  # from exchangeable to old points in cells of their own
        lab = np.r_[rng.integers(0, 8, 20) * (rng.uniform(size=20) > shift), rng.integers(1, 8, 30)]
        w, is_old = rng.uniform(1, 3, 50), np.r_[np.ones(20, bool), np.zeros(30, bool)]
        got = drift_mod.drifted(lab, w, is_old, 8, np.random.default_rng(int(shift * 1000)))
        assert got == full(lab, w, is_old, 8, np.random.default_rng(int(shift * 1000)))
        answers.add(got)
    assert answers == {True, False}


def test_a_stationary_stream_decays_exactly_by_age():
    rng = np.random.default_rng(1)
    sets = [_set(rng, [(0, 0), (30, 0), (0, 30)], n) for n in (10, 20, 40, 8)]  # the open epoch young
    np.testing.assert_array_equal(_kept(sets), _age(sets))


def test_an_in_order_stream_keeps_every_old_epoch_whole():
    """Four epochs, each holding clusters no other epoch holds: every old epoch drifted, the first one too
    (a later one did), and the fit weighs them all at their own mass."""
    rng = np.random.default_rng(2)
    sets = [_set(rng, [c], 12) for c in ((0, 0), (30, 0), (0, 30), (30, 30))]
    np.testing.assert_array_equal(_kept(sets, n_clusters=4), np.ones(48))


def test_a_first_epoch_of_coarse_clumps_alone_is_no_drift():
    """A shuffled stream: the first epoch (the ball's rings) holds coarse means between the clusters, a
    clump no newer point shares, while every later epoch holds the same clusters: no later epoch drifted,
    so the first one decays by age."""
    rng = np.random.default_rng(3)
    first = _set(rng, [(15, 15)], 12)
    later = [_set(rng, [(0, 0), (30, 0), (0, 30)], n) for n in (12, 24, 12)]
    sets = [first] + later
    np.testing.assert_array_equal(_kept(sets), _age(sets))


def _in_order_ticks(rng, shift, last_extra=0):
    """24 ticks of three clusters one after the other (8 ticks each)."""
    centers = [(-25 + shift, 0), (25 + shift, 0), (0, 35)]
    out = [rng.normal(size=(1000, 2)) * 2 + np.array(centers[t // 8]) for t in range(24)]
    out[-1] = np.vstack([out[-1], rng.normal(size=(last_extra, 2)) + np.array(centers[2])])
    return out


_RAW = {"n": 0}  # what a broken rule could read besides the released sets: the last tick's exact size
_ORIG = drift_mod.drift_kept


def _broken_rule(cfg, noise, sets, S, factor, epoch, t, partitions):
    """A rule that also reads the raw stream: it keeps the clusters rule's factors when the last tick held
    an odd number of points."""
    return factor.copy() if _RAW["n"] % 2 else _ORIG(cfg, noise, sets, S, factor, epoch, t, partitions)


def _replay_matches(monkeypatch, broken: bool) -> bool:
    """The replay of an in-order engine's last release fit from its released sets (tests/streams.py), the
    second engine on other raw points whose last tick holds one point more."""
    if broken:
        monkeypatch.setattr(drift_mod, "drift_kept", _broken_rule)
    return release_fit_replays(_cfg(epsilon=2.0), SEED, _in_order_ticks(np.random.default_rng(4), 0.0),
                               _in_order_ticks(np.random.default_rng(5), 3.0, last_extra=1), _RAW)


def test_the_rule_reads_the_released_sets_alone(monkeypatch):
    """Replay: the release fit sample recomputed from the engine's released epoch coresets and keyed noise
    equals the engine's, after a second engine has run on other raw points; the same check catches a broken
    rule that also reads the raw stream (the last tick's exact size)."""
    assert _replay_matches(monkeypatch, broken=False)
    assert not _replay_matches(monkeypatch, broken=True)


def test_an_in_order_engine_keeps_the_epochs_it_drifted_away_from():
    """End to end: on a stream in cluster order (the first cluster fills epochs 0-3), the engine's last release
    fit keeps epochs 1 and 2 whole, which the clusters rule decays by age (their cluster is a minority of
    the newer mass: it is judged one epoch at a time, and these hold it alone)."""
    cfg = _cfg(epsilon=2.0)
    e = Engine(cfg, SEED)
    for x in _in_order_ticks(np.random.default_rng(4), 0.0):
        e.step(x)
    sets = [s for s in list(e.epoch_coresets) + [e.mr.released()] if len(s)]
    S = WeightedSet.concat(sets, cfg.dim)
    ep = np.concatenate([np.full(len(s), i) for i, s in enumerate(sets)])
    parts = epochs_mod.Partitions(cfg, e.noise, S, e.epoch, e.t)
    clusters = epochs_mod._stopped_clusters_kept(cfg, e.noise, sets, S, _age(sets), e.epoch, e.t, partitions=parts)
    out = drift_mod.drift_kept(cfg, e.noise, sets, S, clusters, e.epoch, e.t, parts)
    assert np.all(clusters[(ep == 1) | (ep == 2)] < 1.0) and np.all(out[(ep == 1) | (ep == 2)] == 1.0)
    assert np.all(out[ep == len(sets) - 1] == 1.0) and np.all(out >= clusters)


def test_the_plan_does_not_depend_on_the_rule():
    assert PrivacyPlan.build(_cfg()).to_dict() == PrivacyPlan.build(_cfg(release_decay_rule="age")).to_dict()
