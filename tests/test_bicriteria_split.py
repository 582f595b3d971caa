"""The Beam shape of Alg. 2 — one BicriteriaLevel per (tree, level, bucket shard) plus a CenterSet — releases
exactly what the engine's vectorised BicriteriaDPCenters releases, tick by tick, for the same seed."""
from __future__ import annotations

import numpy as np
import pytest

from dpstream.bicriteria import (BicriteriaDPCenters, BicriteriaLevel, CenterSet, bucket_ranges,
                                 merge_shard_reports)
from dpstream.grids import ShiftedGrids
from dpstream.noise import NoiseSource
from dpstream.params import EngineConfig
from dpstream.privacy import PrivacyPlan


@pytest.mark.parametrize("n_trees, n_reps, delta, shards", [(1, 1, 1e-6, 1), (2, 2, 1e-6, 1), (2, 1, 0.0, 1),
                                                             (1, 1, 1e-6, 5), (2, 2, 1e-6, 3), (1, 2, 0.0, 12)])
def test_levels_and_registry_equal_the_vectorised_bicriteria(seed, n_trees, n_reps, delta, shards):
    cfg = EngineConfig(n_clusters=3, dim=2, radius=10.0, epsilon=4.0, delta=delta, horizon_ticks=40, bicriteria=True,
                       n_trees=n_trees, n_reps=n_reps, bucket_shards=shards)
    plan = PrivacyPlan.build(cfg)
    whole = BicriteriaDPCenters(cfg, plan, NoiseSource(seed))
    noise = NoiseSource(seed)
    levels = [BicriteriaLevel(cfg, plan, noise, q, lv, s) for q in range(n_trees) for lv in range(cfg.grid_levels)
              for s in range(shards)]
    registry = CenterSet(cfg, ShiftedGrids(cfg, noise))
    rng = np.random.default_rng(0)
    means = np.array([[-5.0, 3.0], [4.0, -4.0], [6.0, 6.0]])
    grown = 0
    for t in range(40):
        m = 0 if t % 7 == 3 else int(rng.integers(50, 400))  # some empty ticks
        x = means[rng.integers(0, 3, m)] + rng.normal(scale=0.3, size=(m, 2))
        want_new, want_count = whole.step(x)
        reports = [lvl.step(x) for lvl in levels[::-1]]  # any arrival order
        got_new, got_count = registry.absorb_shards(reports)
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


def test_bucket_shards_cover_the_buckets_and_key_their_own_noise(seed):
    """S ranges partition the w buckets; every (tree, level, rep, shard) segment has its own noise key, so a
    sharded level draws no value twice, and a different S draws different noise (same scale: same plan)."""
    cfg = EngineConfig(n_clusters=3, dim=2, radius=10.0, epsilon=1.0, horizon_ticks=8, bicriteria=True,
                       n_reps=2, bucket_shards=5)
    ranges = bucket_ranges(cfg)
    assert ranges[0][0] == 0 and ranges[-1][1] == cfg.buckets and all(a < b for a, b in ranges)
    assert all(ranges[i][1] == ranges[i + 1][0] for i in range(len(ranges) - 1))
    noise = NoiseSource(seed, trace=True)
    whole = BicriteriaDPCenters(cfg, PrivacyPlan.build(cfg), noise)
    for _ in range(4):
        whole.step(np.zeros((0, 2)))
    node_keys = [(k, n) for k, n in noise.keys if "node" in k]
    assert node_keys and max(noise.keys[kn] for kn in node_keys) <= 2  # drawn when a node enters and leaves only
    assert all(k[3] == "bucket_shard" for k, _ in node_keys)
    assert len({k[1:7] for k, _ in node_keys}) == cfg.grid_levels * cfg.n_reps * 5
    width = {lv: 1 + cfg.id_bits(lv) for lv in range(cfg.grid_levels)}
    for k, size in node_keys:  # (component, q, lv, "bucket_shard", r, s, S, "node", …): the shard's rows only
        j0, j1 = ranges[k[5]]
        assert size == (j1 - j0) * width[k[2]]
    one = BicriteriaDPCenters(cfg.with_(bucket_shards=1), PrivacyPlan.build(cfg.with_(bucket_shards=1)),
                              NoiseSource(seed))
    assert PrivacyPlan.build(cfg.with_(bucket_shards=1)).bic_scale == PrivacyPlan.build(cfg).bic_scale
    a, b = one.counter.step(None), BicriteriaDPCenters(cfg, PrivacyPlan.build(cfg), NoiseSource(seed)).counter.step(None)
    assert a.shape == b.shape and not np.array_equal(a, b)


def test_merge_refuses_a_missing_shard(seed):
    cfg = EngineConfig(n_clusters=3, dim=2, radius=10.0, epsilon=1.0, horizon_ticks=4, bicriteria=True,
                       bucket_shards=3)
    plan = PrivacyPlan.build(cfg)
    reps = [BicriteriaLevel(cfg, plan, NoiseSource(seed), 0, 0, s).step(np.zeros((0, 2))) for s in (0, 2)]
    with pytest.raises(ValueError, match="one report per bucket shard"):
        merge_shard_reports(cfg, reps)
    with pytest.raises(ValueError, match="bucket_shards must be an integer in"):
        EngineConfig(n_clusters=3, dim=2, radius=10.0, epsilon=1.0, bucket_shards=13)


def test_a_record_touches_one_bucket_of_one_shard_per_tree_level_and_repetition(seed):
    """Participation (Lemma 5) is unchanged by sharding: over all S shard keys of a (tree, level), one point's
    update has count 1 in exactly one bucket per repetition, so each key's sensitivity is at most the level's."""
    cfg = EngineConfig(n_clusters=3, dim=2, radius=10.0, epsilon=1.0, horizon_ticks=8, bicriteria=True,
                       n_trees=2, n_reps=3, bucket_shards=4)
    plan = PrivacyPlan.build(cfg)
    rng = np.random.default_rng(2)
    for x in rng.uniform(-9, 9, size=(20, 1, 2)):
        for q in range(cfg.n_trees):
            for lv in range(cfg.grid_levels):
                width = 1 + cfg.id_bits(lv)
                counts = [BicriteriaLevel(cfg, plan, NoiseSource(seed), q, lv, s).update(x).reshape(cfg.n_reps, -1, width)
                          [:, :, 0] for s in range(4)]
                per_rep = np.stack([c.sum(axis=1) for c in counts])  # (shard, rep)
                assert (per_rep.sum(axis=0) == 1).all() and ((per_rep > 0).sum(axis=0) == 1).all()
