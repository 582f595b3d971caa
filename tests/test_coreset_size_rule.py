"""The public rule for s_B, the size of black box B's samples: larger in low dimension.

B only reduces DP outputs (post-processing), so s_B changes no line of the privacy plan; it only
decides how many released points a release keeps."""
from __future__ import annotations

import numpy as np
import pytest

from dpstream import DPStreamClusterer, EngineConfig, rules
from dpstream.privacy import PrivacyPlan

pytestmark = pytest.mark.filterwarnings("ignore::dpstream.noise.UnsafeSeedWarning")


def test_the_rule_and_an_explicit_value():
    assert EngineConfig(n_clusters=10, dim=3, radius=1.0, epsilon=1.0).s_b == 4000 == rules.coreset_size(10, 3)
    assert EngineConfig(n_clusters=10, dim=10, radius=1.0, epsilon=1.0).s_b == 500
    assert EngineConfig(n_clusters=10, dim=3, radius=1.0, epsilon=1.0, coreset_size=500).s_b == 500


def test_s_b_changes_no_line_of_the_plan():
    for d in (2, 3, 10):
        a = PrivacyPlan.build(EngineConfig(n_clusters=4, dim=d, radius=5.0, epsilon=1.0)).to_dict()
        b = PrivacyPlan.build(EngineConfig(n_clusters=4, dim=d, radius=5.0, epsilon=1.0, coreset_size=200)).to_dict()
        assert a == b


def test_a_low_dimensional_release_keeps_more_than_50k_points():
    """The release's coreset is B's sample of the run's coreset: in d = 3 up to 400·k points, so a
    stream whose A outputs hold more than 50·k leaves releases more than 50·k of them."""
    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, size=(60_000, 3))  # a continuum: many leaves
    sizes = {}
    for cs in (None, 100):
        m = DPStreamClusterer(2, epsilon=1e6, radius=2.0, random_state=0, tick_size=2000, coreset_size=cs) \
            if cs else DPStreamClusterer(2, epsilon=1e6, radius=2.0, random_state=0, tick_size=2000)
        m.fit(X)
        sizes[cs] = len(m.release_.coreset_weights)
    assert sizes[100] <= 100 < sizes[None] <= 800
