"""``release_min_points``: an old epoch that released fewer than that many times k points leaves the release fit
once a newer epoch released that many, where the newer epochs still arrive.

What must hold:

* a shuffled stream's coarse first epochs (a few noisy means between the clusters) get weight 0 in the fit
  once a finer epoch exists, and keep their age decay while none does;
* a coarse epoch holding a cluster no newer epoch fills (an in-order stream's first cluster) keeps its
  weight, also among many clusters (the partition has k of them), and so does a point a decay rule spared;
* the rule reads the released epoch coresets and keyed noise only: a replay from the released sets gives
  the engine's fit sample, and a broken variant that reads the raw stream is caught by the replay;
* the released coreset and the privacy plan do not change; off (0) the fit is version 5's.
"""
from __future__ import annotations

import numpy as np
import pytest

import dpstream.epochs as epochs_mod
from dpstream import Engine
from dpstream.noise import NoiseSource
from dpstream.privacy import PrivacyPlan
from dpstream.semicoresets import WeightedSet
from streams import decay_cfg, release_fit_replays, three_blob_ticks, weighted_blobs

pytestmark = pytest.mark.filterwarnings("ignore::dpstream.noise.UnsafeSeedWarning")

SEED = bytes(range(32))
CLUSTERS = [(0, 0), (30, 0), (0, 30)]


def _cfg(**kw):
    return decay_cfg("drift", **{"release_min_points": 1.5, **kw})


def _age(sets, decay=0.5):
    return np.concatenate([np.full(len(s), decay ** (len(sets) - 1 - i)) for i, s in enumerate(sets)])


def _left_out(sets, factor=None, t=5, **kw):
    cfg = _cfg(**kw)
    S = WeightedSet.concat(sets, cfg.dim)
    aged = _age(sets)
    return epochs_mod._coarse_left_out(cfg, NoiseSource(SEED), sets, S, aged if factor is None else factor, aged,
                                       2, t)


def test_coarse_first_epochs_leave_the_fit_once_a_finer_epoch_released():
    """Two coarse epochs (2 and 3 noisy means between the clusters, fewer than 1.5·k = 4.5 points) and a
    finer one (12 points on the three clusters): the coarse ones weigh 0, the finer one keeps its factor."""
    rng = np.random.default_rng(0)
    sets = [weighted_blobs(rng, [(15, 15)], 2), weighted_blobs(rng, [(15, 0), (0, 15), (15, 15)], 1),
            weighted_blobs(rng, CLUSTERS, 4)]
    out = _left_out(sets)
    np.testing.assert_array_equal(out[:5], 0.0)
    np.testing.assert_array_equal(out[5:], 1.0)


def test_without_a_finer_epoch_every_epoch_keeps_its_age_decay():
    """Every epoch under 1.5·k points (the low-ε prefixes: 2–14 points each): nothing leaves the fit; the
    same sets under a larger k (3·1.5 = 4.5 ≤ 12 points, but 10·1.5 = 15 > 12) with the finer epoch."""
    rng = np.random.default_rng(1)
    sets = [weighted_blobs(rng, [(15, 15)], 2), weighted_blobs(rng, CLUSTERS, 1)]
    np.testing.assert_array_equal(_left_out(sets), _age(sets))
    sets = [weighted_blobs(rng, [(15, 15)], 2), weighted_blobs(rng, CLUSTERS, 4)]
    np.testing.assert_array_equal(_left_out(sets, n_clusters=10), _age(sets))
    assert np.all(_left_out(sets)[:2] == 0.0)


def test_a_coarse_epoch_holding_a_cluster_no_newer_epoch_fills_keeps_its_weight():
    """An in-order stream: the first epoch's two points hold a cluster of their own (far from the three the
    newer epoch holds); the k-means partition gives them a cell the newer epochs leave empty, so they keep
    their age decay, while a coarse epoch between the newer clusters leaves the fit."""
    rng = np.random.default_rng(2)
    sets = [weighted_blobs(rng, [(-30, -30)], 2), weighted_blobs(rng, [(15, 15)], 2),
            weighted_blobs(rng, CLUSTERS, 8)]
    out = _left_out(sets, n_clusters=4)
    np.testing.assert_array_equal(out[:2], _age(sets)[:2])
    np.testing.assert_array_equal(out[2:4], 0.0)
    np.testing.assert_array_equal(out[4:], 1.0)


def test_an_in_order_streams_first_clusters_keep_their_weight_when_k_is_large():
    """Many clusters in cluster order (k = 12): the first epoch holds five clusters of its own in 10 points
    (fewer than 1.5·k: coarse), the newer one seven others in 21. The partition that decides where the newer
    epochs still arrive has k clusters, so each first cluster is a cluster no newer point fills and keeps its
    age decay. A partition of a center per four points (7 for 31 points, the ``clusters`` rule's) would join
    some first clusters to newer ones and leave them out of the fit."""
    rng = np.random.default_rng(4)
    ring = [(50 * np.cos(a), 50 * np.sin(a)) for a in np.linspace(0, 2 * np.pi, 12, endpoint=False)]
    sets = [weighted_blobs(rng, ring[:5], 2, spread=0.5), weighted_blobs(rng, ring[5:], 3, spread=0.5)]
    out = _left_out(sets, n_clusters=12)
    np.testing.assert_array_equal(out, _age(sets))


def test_a_point_a_decay_rule_spared_keeps_its_weight():
    rng = np.random.default_rng(3)
    sets = [weighted_blobs(rng, [(15, 15)], 2), weighted_blobs(rng, CLUSTERS, 4)]
    factor = _age(sets)
    factor[0] = 1.0  # spared by a decay rule (above its age decay 0.5)
    out = _left_out(sets, factor=factor)
    assert out[0] == 1.0 and out[1] == 0.0


def test_the_option_changes_the_released_centers_only():
    """A shuffled stream of three clusters (epochs of 2, 3, 4 and 22 released points), the engine with the
    option and without in lockstep: every tick's released coreset and every epoch coreset are the default's
    (the rings are drawn around the default's centers, :func:`dpstream.release_step.ring_release`), the
    fit sample and the centers differ at some tick, and 1 is the default."""
    cfg = _cfg(epsilon=1.0, radius=15.0)
    on, off = Engine(cfg, SEED), Engine(cfg.with_(release_min_points=0.0), SEED)
    differ = 0
    for x in three_blob_ticks(0, [200] * 24):
        a, b = on.step(x), off.step(x)
        np.testing.assert_array_equal(a.coreset_points, b.coreset_points)
        np.testing.assert_array_equal(a.coreset_weights, b.coreset_weights)
        differ += not np.array_equal(a.centers, b.centers)
    sizes = [len(s) for s in on.epoch_coresets]
    assert min(sizes[:-1]) < 4.5 <= sizes[-1]
    for p, q in zip(on.epoch_coresets, off.epoch_coresets, strict=True):
        np.testing.assert_array_equal(p.points, q.points)
        np.testing.assert_array_equal(p.weights, q.weights)
    np.testing.assert_array_equal(on.mr.centers, off.mr.centers)
    assert differ >= 1
    assert not np.array_equal(on._released.coreset.fit_weights, off._released.coreset.fit_weights)
    assert decay_cfg("drift").release_min_points == 1.0


_RAW = {"n": 0}  # what a broken rule could read besides the released sets: the last tick's exact size
_ORIG = epochs_mod._coarse_left_out


def _broken_rule(cfg, noise, sets, S, factor, aged, epoch, t, partitions=None):
    """A rule that also reads the raw stream: it leaves nothing out when the last tick held an odd number of
    points."""
    return factor.copy() if _RAW["n"] % 2 else _ORIG(cfg, noise, sets, S, factor, aged, epoch, t, partitions)


def _replay_matches(monkeypatch, broken: bool) -> bool:
    """The replay of a shuffled engine's last release fit from its released sets (tests/streams.py), the
    second engine on other raw points whose last tick holds one point more."""
    if broken:
        monkeypatch.setattr(epochs_mod, "_coarse_left_out", _broken_rule)
    sizes = [200] * 24
    return release_fit_replays(_cfg(epsilon=1.0, radius=15.0), SEED, three_blob_ticks(0, sizes),
                               three_blob_ticks(7, sizes[:-1] + [201]), _RAW, min_epochs=3)


def test_the_rule_reads_the_released_sets_alone(monkeypatch):
    """Replay: the release fit sample recomputed from the engine's released epoch coresets and keyed noise
    equals the engine's, after a second engine has run on other raw points; the same check catches a broken
    rule that also reads the raw stream (the last tick's exact size)."""
    assert _replay_matches(monkeypatch, broken=False)
    assert not _replay_matches(monkeypatch, broken=True)


def test_the_plan_does_not_depend_on_the_rule():
    assert PrivacyPlan.build(_cfg()).to_dict() == PrivacyPlan.build(_cfg(release_min_points=0.0)).to_dict()


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf"), "2"])
def test_the_option_is_validated(bad):
    with pytest.raises(ValueError, match="release_min_points"):
        _cfg(release_min_points=bad)
