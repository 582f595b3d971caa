"""Ring boundaries with a public tolerance (``ring_tolerance``, :func:`dpstream.rings.ring_of`).

Unit-norm data around the origin — and every clipped point around the ball's center — lies on the
first epoch's ring boundary r = Λ. Exact boundaries split such a set between two rings by float
rounding (the outer one a ball of radius 2Λ); a tolerance keeps it in one. The partition stays a
function of the record and the public centers (P8), and a point a hair past its ring's radius is
clipped into the part's ball by A's normalisation (P10).
"""
from __future__ import annotations

import numpy as np
import pytest

from dpstream.blocks import normalise
from dpstream.engine import Engine
from dpstream.params import EngineConfig
from dpstream.rings import assign_parts, clip_to_ball, ring_of

SEED = b"ring-tolerance-test-seed-0123456789"


def _unit_vectors(n, d, seed=0):
    x = np.random.default_rng(seed).normal(size=(n, d))
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _first_epoch_rings(cfg, x):
    xc, _ = clip_to_ball(x, cfg.center_vec, cfg.radius)
    ring, _ = assign_parts(xc, cfg.center_vec[None, :], cfg.ring_base, cfg.n_rings, cfg.ring_ratio,
                           cfg.ring_tolerance)
    return ring


def test_unit_vectors_fall_in_two_rings_by_rounding_and_in_one_with_a_tolerance():
    x = _unit_vectors(4000, 64)
    exact = EngineConfig(n_clusters=5, dim=64, radius=1.0, epsilon=1.0, ring_tolerance=0.0)
    ring = _first_epoch_rings(exact, x)
    top = exact.n_rings - 1
    # rounding decides: both the ring of radius Λ and the outermost ring (radius 2Λ) hold a share
    assert set(np.unique(ring)) == {top - 1, top}
    assert min(np.bincount(ring)[top - 1:]) > 400
    tol = exact.with_(ring_tolerance=1e-6)
    ring = _first_epoch_rings(tol, x)
    assert (ring == top - 1).all()
    assert tol.ring_radius(top - 1) == pytest.approx(tol.radius)


def test_clipped_points_share_one_ring_with_a_tolerance():
    rng = np.random.default_rng(1)
    x = rng.normal(scale=50.0, size=(3000, 8))  # nearly all far outside the ball of radius 3
    cfg = EngineConfig(n_clusters=3, dim=8, radius=3.0, epsilon=1.0)  # the default tolerance
    ring = _first_epoch_rings(cfg, x)
    assert (ring == cfg.n_rings - 2).all()


def test_zero_tolerance_is_the_exact_boundary_rule_bit_for_bit():
    """ring_tolerance=0 is the rule of exact boundaries, bit for bit."""
    rng = np.random.default_rng(2)
    base = 2.0 / 2 ** 11
    radii = base * 2.0 ** np.arange(12)
    dist = np.r_[rng.uniform(0, 2, 5000), radii, np.nextafter(radii, 0), np.nextafter(radii, 9), 0.0]
    with np.errstate(divide="ignore"):
        want = np.clip(np.floor(np.log2(np.maximum(dist, 1e-300) / base) / np.log2(2.0)).astype(np.int64) + 1, 0, 11)
    np.testing.assert_array_equal(ring_of(dist, base, 12, 2.0), want)
    np.testing.assert_array_equal(ring_of(dist, base, 12, 2.0, 0.0), want)
    cfg = EngineConfig(n_clusters=2, dim=2, radius=1.0, epsilon=1.0)
    assert cfg.ring_tolerance == 1e-6  # the default
    assert cfg.to_dict()["ring_tolerance"] == 1e-6  # in the config dict (and its hash) like every parameter
    assert cfg.with_(ring_tolerance=0.0).to_dict()["ring_tolerance"] == 0.0


def test_a_point_within_the_band_is_in_the_inner_ring_and_clipped_into_its_ball():
    base, tol = 2.0 / 2 ** 11, 1e-6
    radii = base * 2.0 ** np.arange(1, 11)
    inside = radii * (1 + 0.5 * tol)
    outside = radii * (1 + 2 * tol)
    np.testing.assert_array_equal(ring_of(inside, base, 12, 2.0, tol), np.arange(1, 11))
    np.testing.assert_array_equal(ring_of(outside, base, 12, 2.0, tol), np.arange(2, 12))
    # the widest a ring-i point can be: r_i(1 + τ) from its center; normalised into the part's ball it is clipped
    d = 5
    u = _unit_vectors(len(radii), d, seed=3)
    x = u * inside[:, None]
    y = normalise(x.copy(), np.arange(len(radii)), np.zeros((len(radii), d)), radii)
    assert np.linalg.norm(y, axis=1).max() <= 1.0


@pytest.mark.parametrize("bad", [-1e-6, 2e-3, float("nan"), "1e-6", True])
def test_bad_tolerances_are_refused(bad):
    with pytest.raises(ValueError, match="ring_tolerance"):
        EngineConfig(n_clusters=2, dim=2, radius=1.0, epsilon=1.0, ring_tolerance=bad)


def test_engine_puts_a_unit_norm_stream_in_one_ring_per_tick():
    d = 16
    cfg = EngineConfig(n_clusters=3, dim=d, radius=1.0, epsilon=1.0, horizon_ticks=4)
    eng = Engine(cfg, SEED)
    for t in range(4):
        rel = eng.step(_unit_vectors(500, d, seed=10 + t))
        assert np.unique(eng.last_ring).size == 1
    assert np.isfinite(np.asarray(rel.centers)).all()
