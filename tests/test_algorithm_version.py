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

# the digest of the run below, by version
# (3: the release fit's age decay spares clusters that stopped arriving; this stationary stream has none,
# so its digest is 2's, while a drifting stream's releases differ)
DIGESTS = {2: "6a5b8fafe178f6d2d041738cb251f838fa5e67348bc44d0917d862a40b4f296f",
           3: "6a5b8fafe178f6d2d041738cb251f838fa5e67348bc44d0917d862a40b4f296f"}


def _rounded(x):
    if isinstance(x, float):
        return float(f"{x:.6g}")
    if isinstance(x, dict):
        return {k: _rounded(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_rounded(v) for v in x]
    return x


def releases_digest() -> str:
    # a short stream under the default horizon, overlapping clusters, points on the ball's sphere: the
    # release fit, A's thresholds and the ring boundaries all shape what it releases
    rng = np.random.default_rng(7)
    means = rng.normal(size=(6, 3)) * 3.0
    cfg = EngineConfig(n_clusters=5, dim=3, radius=8.0, epsilon=2.0)
    e = Engine(cfg, bytes(range(32)))
    out = []
    for _ in range(24):
        x = means[rng.integers(6, size=500)] + rng.normal(size=(500, 3)) * 1.5
        x[:20] *= 8.0 / np.linalg.norm(x[:20], axis=1, keepdims=True)
        out.append(_rounded(e.step(x).to_dict()))
    return hashlib.sha256(json.dumps(out, sort_keys=True).encode()).hexdigest()


def test_the_default_runs_releases_change_only_with_the_algorithm_version():
    got = releases_digest()
    assert ALGORITHM_VERSION in DIGESTS, f"record the digest of version {ALGORITHM_VERSION}: {got}"
    assert got == DIGESTS[ALGORITHM_VERSION], (
        f"the releases of an unchanged configuration changed ({got}): bump ALGORITHM_VERSION in "
        f"dpstream/algorithm_version.py and record the new digest here")
