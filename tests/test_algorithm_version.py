"""The releases of a default run are pinned to ``ALGORITHM_VERSION`` (dpstream/algorithm_version.py).

The seed registry lets a seed be used again on the same run only, and the version is part of the run's
identity. If a change alters what an unchanged configuration releases without bumping the version, a
registry entry of the earlier code would accept the seed and two different functions of the same data
would share one noise draw. This test catches that: it fails when the default run's releases change and
the version does not. After a deliberate change, bump the version and record the new digest here.
Numbers are rounded to 6 significant digits, so last-bit differences between machines' BLAS kernels do
not count as a change.
"""
from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from dpstream import Engine, EngineConfig
from dpstream.algorithm_version import ALGORITHM_VERSION

pytestmark = pytest.mark.filterwarnings("ignore::dpstream.noise.UnsafeSeedWarning")

# the digest of the runs below, by version
# (3: the release fit's age decay spares clusters that stopped arriving: the shuffled stream releases what
# it released under 2, the stream in cluster order does not; 4: the first flush waits for a DP count that
# can fill one of A's leaves — the two streams above release what they released under 3, and the digest
# covers a third, of small ticks, which does not; 5: whole epochs a permutation test says the stream drifted
# away from keep their weight — the shuffled stream releases what it released under 4; 6: an old epoch that
# released fewer than k points leaves the release fit once a newer epoch released k, where the newer epochs
# still arrive — rings, blocks and released coresets are version 5's, the released centers are not; 7: fit()
# on an input of at most 50,000 rows and at least 65 columns runs A's gated cells — the engine runs below,
# and partial_fit, release what they released under 6; 8: the partition that tells where an old epoch of
# fewer than k released points still arrives has k clusters — the runs above release what they released under
# 7, and the digest covers a fourth, in cluster order with k = 12, which does not; 9: the part sparse vector
# (part_fire = 3.5, its threshold never below its noise floor, not tested in a run's last quarter) is on by
# default; 10: its threshold grows with the tests since a restart, so its fires do not follow the tick size)
DIGESTS = {2: "00a1e3e9c1a0e53761f36c00512e368f484ba2a743ae0ebcc1bce380d268e473",
           3: "29a3b67a78b927c07827247b740b9d5e0c5ff7e3bf3dc49cf3774cf7b9ab842b",
           4: "4b020335ebb0ecc0fce96f521a5e47244ce54ca0f630117ca02a13fe57d0f535",
           5: "5f3d0b68d7634b18ab385a8265ac097eb0de750c487ef88fb6989c79ea9199a2",
           6: "14c0e9c280736eb8f1a31574ae7a880296e53188b91ddd8424c77afe85857e69",
           7: "14c0e9c280736eb8f1a31574ae7a880296e53188b91ddd8424c77afe85857e69",
           8: "82a2a11b14921fa118e44732282ce5974f9e57a87cc11865f208a4cd45ba3752",
           9: "d74cb2711118ad209ea605edbde6baf5365d40cd864e9e69d3e295fb95c72a0f",
           10: "e1c3d4381ef135cf5cf074a1e9da1d0c91bb7d93db2b405c4b58f500311f74f4"}


def _rounded(x):
    if isinstance(x, float):
        return float(f"{x:.6g}")
    if isinstance(x, dict):
        return {k: _rounded(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_rounded(v) for v in x]
    return x


def _run(in_order: bool) -> list:
    # a short stream under the default horizon, overlapping clusters, points on the ball's sphere: the
    # release fit, A's thresholds and the ring boundaries all shape what it releases; in cluster order (a new
    # cluster every four ticks, the earlier ones stop arriving) the release fit's weights of old epochs too
    rng = np.random.default_rng(7)
    means = rng.normal(size=(6, 3)) * 3.0
    cfg = EngineConfig(n_clusters=5, dim=3, radius=8.0, epsilon=2.0)
    e = Engine(cfg, bytes(range(32)))
    out = []
    for t in range(24):
        which = np.full(500, t // 4) if in_order else rng.integers(6, size=500)
        x = means[which] + rng.normal(size=(500, 3)) * 1.5
        x[:20] *= 8.0 / np.linalg.norm(x[:20], axis=1, keepdims=True)
        out.append(_rounded(e.step(x).to_dict()))
    return out


def _run_small_ticks() -> list:
    # ticks of 100 points at ε = 1, fewer than A's keep threshold can hold over the ball's rings: when the
    # first flush comes (the first DP count that can fill a leaf, from version 4) shapes the first releases
    rng = np.random.default_rng(11)
    means = rng.normal(size=(3, 3)) * 5.0
    e = Engine(EngineConfig(n_clusters=3, dim=3, radius=16.0, epsilon=1.0), bytes(range(32)))
    return [_rounded(e.step(means[rng.integers(3, size=100)] + rng.normal(size=(100, 3))).to_dict())
            for _ in range(8)]


def _run_many_clusters() -> list:
    # twelve clusters on a circle in cluster order at ε = 2: the first epochs release fewer than k points,
    # each holding clusters no newer point fills, and a later epoch releases more than k (from version 8
    # the partition that judges them has k clusters)
    rng = np.random.default_rng(5)
    ang = np.linspace(0.0, 2.0 * np.pi, 12, endpoint=False)
    means = np.c_[np.cos(ang), np.sin(ang)] * 12.0
    e = Engine(EngineConfig(n_clusters=12, dim=2, radius=16.0, epsilon=2.0), bytes(range(32)))
    return [_rounded(e.step(means[t // 2] + rng.normal(size=(300, 2))).to_dict()) for t in range(24)]


def releases_digest(version: int = ALGORITHM_VERSION) -> str:
    runs = ([_run(False), _run(True)] + ([_run_small_ticks()] if version >= 4 else [])
            + ([_run_many_clusters()] if version >= 8 else []))
    return hashlib.sha256(json.dumps(runs, sort_keys=True).encode()).hexdigest()


def test_the_default_runs_releases_change_only_with_the_algorithm_version():
    got = releases_digest()
    assert ALGORITHM_VERSION in DIGESTS, f"record the digest of version {ALGORITHM_VERSION}: {got}"
    assert got == DIGESTS[ALGORITHM_VERSION], (
        f"the releases of an unchanged configuration changed ({got}): bump ALGORITHM_VERSION in "
        f"dpstream/algorithm_version.py and record the new digest here")


# constants of the release fit's rule that the two streams above do not exercise at every value (a cluster of
# an old epoch with few points, the one-center-per-points cap), and from 7 the options fit() adds on a short
# high-dimensional input: pinned to the version, so changing one without a bump fails here
# (a name "module.constant" is dpstream.module's; a bare name is dpstream.epochs')
_VERSION_7 = {"_STILL_ARRIVING": 0.1, "_POINTS_PER_CLUSTER": 4, "_MIN_POINTS": 2,
              "drift_decay._POINTS_PER_CLUSTER": 2, "drift_decay._PERMUTATIONS": 200, "drift_decay._ALPHA": 0.01,
              # what fit() adds on a short high-dimensional input (tests/test_short_fit.py)
              "rules.SHORT_FIT_MAX_POINTS": 50_000, "rules.SHORT_FIT_MIN_DIM": 65,
              "rules.SHORT_FIT_CELLS": dict(tree_cells=0.69, cells_locate_dims=32, cells_lloyd_steps=4,
                                            cells_lloyd_share=0.206, tree_depth=9, count_share=0.25,
                                            cells_count_share=0.03, cells_overseed=2, cells_reseed=0.25,
                                            tree_keep_factor=1.0, cells_gate=0.75, cells_gate_max=3.0)}
# 9: the part sparse vector on by default: its share of ε_svt and its noise floor's rate
_VERSION_9 = {**_VERSION_7, "rules.PART_SVT_SHARE": 2.0 / 3.0, "rules.PART_FIRE_NOISE_TICKS": 40.0,
              "rules.PART_FIRE_LAST_SHARE": 0.25}
RULE_CONSTANTS = {3: {"_STILL_ARRIVING": 0.1, "_POINTS_PER_CLUSTER": 4, "_MIN_POINTS": 2},
                  4: {"_STILL_ARRIVING": 0.1, "_POINTS_PER_CLUSTER": 4, "_MIN_POINTS": 2},
                  5: {"_STILL_ARRIVING": 0.1, "_POINTS_PER_CLUSTER": 4, "_MIN_POINTS": 2,
                      "drift_decay._POINTS_PER_CLUSTER": 2, "drift_decay._PERMUTATIONS": 200,
                      "drift_decay._ALPHA": 0.01},
                  6: {"_STILL_ARRIVING": 0.1, "_POINTS_PER_CLUSTER": 4, "_MIN_POINTS": 2,
                      "drift_decay._POINTS_PER_CLUSTER": 2, "drift_decay._PERMUTATIONS": 200,
                      "drift_decay._ALPHA": 0.01},
                  7: _VERSION_7, 8: _VERSION_7,  # 8 changed the rule's partition, none of these
                  9: _VERSION_9,
                  # 10: the part instances' threshold raised per test since a restart
                  10: {**_VERSION_9, "rules.PART_FIRE_TEST_GROWTH": 0.5}}


def _constant(name: str):
    import importlib

    module, _, attr = name.rpartition(".")
    return getattr(importlib.import_module(f"dpstream.{module or 'epochs'}"), attr)


def test_the_release_rules_constants_change_only_with_the_algorithm_version():
    got = {name: _constant(name) for name in RULE_CONSTANTS[max(RULE_CONSTANTS)]}
    assert ALGORITHM_VERSION in RULE_CONSTANTS, f"record the rule's constants of version {ALGORITHM_VERSION}: {got}"
    assert got == RULE_CONSTANTS[ALGORITHM_VERSION], (
        f"the release rule's constants changed ({got}): bump ALGORITHM_VERSION in dpstream/algorithm_version.py "
        f"and record them here")
