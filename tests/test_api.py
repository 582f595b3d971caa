"""``DPStreamClusterer``: validation, ticks, attributes, state and clipping (README "Library use")."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from dpstream import DPStreamClusterer
from dpstream.engine import clip_to_ball
from dpstream.privacy import PrivacyPlan

pytestmark = pytest.mark.filterwarnings("ignore::dpstream.noise.UnsafeSeedWarning")

SMALL = dict(grid_levels=3, n_rings=6, block_size=100, tree_depth=4)


def make(**kw):
    base = dict(n_clusters=3, epsilon=1.0, radius=10.0, random_state=0, tick_size=200)
    base.update(SMALL)
    base.update(kw)
    return DPStreamClusterer(**base)


def _X(n=1000, d=2, seed=0):
    rng = np.random.default_rng(seed)
    means = np.array([[4.0, 4.0], [-4.0, 3.0], [1.0, -5.0]])[:, :d] if d <= 2 else rng.uniform(-4, 4, (3, d))
    return means[rng.integers(0, 3, n)] + rng.normal(scale=0.6, size=(n, d))


# -- input validation -----------------------------------------------------------------------

@pytest.mark.parametrize("X,words", [
    (np.ones(5), "2-D"),
    (np.ones((2, 3, 2)), "2-D"),
    (np.array([[1.0, np.nan], [0.0, 0.0]]), "NaN"),
    (np.array([[1.0, np.inf], [0.0, 0.0]]), "infinite"),
    (np.array([[-np.inf, 0.0]]), "infinite"),
    (np.array([["a", "b"], ["c", "d"]]), "numeric"),
    ([["1.0", "2.0"]], "numeric"),
    (np.array([[1.0, "x"]], dtype=object), "numeric"),
    (np.array([[1.0, 2.0]], dtype=object), "numeric"),
    (np.array([[1 + 2j, 0.0]]), "complex|real"),
    ([[1.0, 2.0], [3.0]], "2-D|numeric|read"),
    (None, "None"),
])
@pytest.mark.parametrize("method", ["fit", "partial_fit"])
def test_bad_X_raises_value_error(X, words, method):
    m = make()
    with pytest.raises(ValueError, match=words):
        getattr(m, method)(X)


def test_dimension_change_between_partial_fits():
    m = make()
    m.partial_fit(_X(50))
    with pytest.raises(ValueError, match="features"):
        m.partial_fit(np.ones((5, 3)))
    with pytest.raises(ValueError, match="features"):
        m.predict(np.ones((5, 3)))
    m.partial_fit(np.zeros((0, 2)))  # still fine afterwards
    assert m.n_ticks_ == 2


@pytest.mark.parametrize("kw,words", [
    (dict(epsilon=0.0), "epsilon"),
    (dict(epsilon=-1.0), "epsilon"),
    (dict(epsilon=float("nan")), "epsilon"),
    (dict(epsilon="1"), "epsilon"),
    (dict(delta=-1e-9), "delta"),
    (dict(delta=1.0), "delta"),
    (dict(delta=float("nan")), "delta"),
    (dict(radius=0.0), "radius"),
    (dict(radius=-2.0), "radius"),
    (dict(radius=None), "radius"),
    (dict(radius=float("inf")), "radius"),
    (dict(n_clusters=0), "n_clusters"),
    (dict(n_clusters=2.5), "n_clusters"),
    (dict(n_clusters="3"), "n_clusters"),
    (dict(n_clusters=True), "n_clusters"),
    (dict(neighbouring="replace"), "neighbouring"),
    (dict(semicoreset="kd"), "semicoreset"),
    (dict(tick_size=0), "tick_size"),
    (dict(horizon_ticks=0), "horizon_ticks"),
    (dict(n_clsuters=3), "unknown parameter"),
    (dict(grid_level=3), "unknown parameter"),
])
def test_bad_parameters_raise_value_error(kw, words):
    with pytest.raises(ValueError, match=words):
        make(**kw)


# -- ticks, horizon, attributes -------------------------------------------------------------

def test_partial_fit_empty_first_tick():
    m = make(horizon_ticks=8)
    m.partial_fit(np.zeros((0, 2)))
    assert m.n_ticks_ == 1 and m.release_.tick == 1 and m.n_features_in_ == 2
    assert m.cluster_centers_.shape == (3, 2) and np.all(np.isfinite(m.cluster_centers_))
    m.partial_fit(_X(300))
    assert m.release_.tick == 2


@pytest.mark.parametrize("n,tick_size", [(1000, 200), (1001, 200), (999, 1000), (7, 3)])
def test_fit_splits_into_ceil_ticks(n, tick_size):
    m = make(tick_size=tick_size).fit(_X(n))
    assert m.release_.tick == m.n_ticks_ == math.ceil(n / tick_size)
    assert m.engine_.cfg.horizon_ticks == math.ceil(n / tick_size)


def test_fit_restarts():
    m = make()
    m.partial_fit(_X(50, d=2))
    m.fit(_X(600, d=3))  # a new run: new dimension, tick count from 1
    assert m.n_features_in_ == 3 and m.release_.tick == 3


def test_horizon_smaller_than_needed_raises():
    with pytest.raises(ValueError, match="horizon"):
        make(tick_size=100, horizon_ticks=5).fit(_X(600))
    make(tick_size=100, horizon_ticks=6).fit(_X(600))  # exactly enough


def test_fitted_attributes():
    X = _X(2000)
    m = make().fit(X)
    labels = m.predict(X)
    assert labels.shape == (2000,) and labels.min() >= 0 and labels.max() < 3
    assert np.issubdtype(labels.dtype, np.integer)
    assert m.cluster_centers_.shape == (3, 2)
    assert isinstance(m.privacy_plan_, PrivacyPlan)
    assert m.privacy_plan_.epsilon == 1.0 and m.privacy_plan_.total_epsilon <= 1.0 + 1e-3
    assert m.release_.plan is m.privacy_plan_
    assert np.array_equal(m.fit_predict(X), labels)  # same seed, same run


def test_predict_before_fit_raises():
    with pytest.raises(ValueError, match="fit"):
        make().predict(_X(10))


def test_state_size_is_positive_and_sublinear():
    X = _X(40_000, seed=1)
    # s_B of 50·k: the levels saturate within the first 10k points (the low-dimension rule's 400·k later)
    m = make(radius=20.0, tick_size=500, horizon_ticks=128, block_size=500, coreset_size=150)
    assert m.state_size() == 0
    for i in range(20):
        m.partial_fit(X[i * 500:(i + 1) * 500])
    s10, p10 = m.state_size(), m.state_size(peak=True)
    assert 0 < s10 <= p10
    for i in range(20, 80):
        m.partial_fit(X[i * 500:(i + 1) * 500])
    s40, p40 = m.state_size(), m.state_size(peak=True)
    # 4× the points: the merge-reduce levels and epoch coresets grow only logarithmically
    assert p40 < 3 * p10, f"peak state {p10} at 10k points grew to {p40} at 40k"
    assert s40 < 3 * p10
    assert p40 < 0.1 * X.size  # far below storing the stream


def test_clipping_counts_go_to_n_clipped_only():
    X = _X(1000)
    far = np.array([[100.0, 0.0], [0.0, -1e6], [30.0, 40.0]])
    m = make().fit(np.r_[X, far])
    assert m.n_clipped_ == 3
    assert "n_clipped" not in m.release_.to_dict() and not hasattr(m.release_, "n_clipped")
    inside = make().fit(X)
    assert inside.n_clipped_ == 0


def test_the_callers_array_is_never_changed():
    # float64 input is read without a copy (the engine copies when it clips): nothing may write into it
    X = np.r_[_X(1000), [[100.0, 0.0], [0.0, -1e6]]]
    before = X.copy()
    m = make()
    m.fit(X)
    assert np.array_equal(X, before)
    part = make(horizon_ticks=3)
    for i in range(3):
        part.partial_fit(X[i * 200:(i + 1) * 200])
    assert np.array_equal(X, before)


def test_clipping_projects_onto_the_boundary():
    x, n = clip_to_ball(np.array([[30.0, 40.0], [1.0, 1.0], [-1e6, 0.0]]), np.zeros(2), 5.0)
    assert n == 2
    np.testing.assert_allclose(x[0], [3.0, 4.0], rtol=1e-9)
    np.testing.assert_array_equal(x[1], [1.0, 1.0])
    np.testing.assert_allclose(x[2], [-5.0, 0.0], rtol=1e-9)


def test_clipping_huge_finite_values_projects_onto_the_boundary():
    """A finite point whose squared norm overflows (|x| > ~1e154) must still be projected onto the
    boundary along its direction, not sent to the center (and never become NaN)."""
    X = np.array([[1e200, 1e200], [-1.7e308, 0.0], [1e308, -1e308]])
    x, n = clip_to_ball(X.copy(), np.zeros(2), 5.0)
    assert n == 3 and np.all(np.isfinite(x))
    np.testing.assert_allclose(x[0], [5 / math.sqrt(2), 5 / math.sqrt(2)], rtol=1e-9)
    np.testing.assert_allclose(x[1], [-5.0, 0.0], rtol=1e-9)
    np.testing.assert_allclose(x[2], [5 / math.sqrt(2), -5 / math.sqrt(2)], rtol=1e-9)
    # x − center overflows: still a point on the boundary, and the engine does not crash
    y, n = clip_to_ball(np.array([[-1.7e308, 0.0]]), np.array([1e308, 0.0]), 1.0)
    assert n == 1 and np.all(np.isfinite(y))
    assert abs(np.linalg.norm(y[0] - [1e308, 0.0])) <= 1.0 + 1e-6 * 1e308 * 2 ** -52 * 4
    m = make(radius=1.0, center=(1e308, 0.0), horizon_ticks=2)
    m.partial_fit(np.array([[-1.7e308, 0.0], [1e308, 0.5]]))
    assert m.n_clipped_ == 1


# -- hypothesis: anything finite is accepted, anything non-finite rejected --------------------

FINITE = st.floats(allow_nan=False, allow_infinity=False, width=64)


_STREAMS = {}  # one long-horizon clusterer per dimension: each example is one more tick


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(d=st.integers(1, 3), data=st.data())
def test_any_finite_array_is_accepted(d, data):
    X = data.draw(hnp.arrays(np.float64, st.tuples(st.integers(0, 12), st.just(d)), elements=FINITE))
    m = _STREAMS.setdefault(d, make(n_clusters=2, horizon_ticks=10_000))
    tick = getattr(m, "n_ticks_", 0)
    clipped = getattr(m, "n_clipped_", 0)
    m.partial_fit(X)
    assert m.release_.tick == tick + 1
    assert 0 <= m.n_clipped_ - clipped <= len(X)
    assert m.cluster_centers_.shape == (2, d) and np.all(np.isfinite(m.cluster_centers_))
    assert np.all(np.linalg.norm(m.cluster_centers_, axis=1) <= 10.0 * (1 + 1e-9))
    if len(X):
        labels = m.predict(X)
        assert labels.shape == (len(X),) and labels.min() >= 0 and labels.max() < 2


@settings(max_examples=40, deadline=None)
@given(d=st.integers(1, 3), data=st.data())
def test_any_non_finite_array_is_rejected(d, data):
    X = data.draw(hnp.arrays(np.float64, st.tuples(st.integers(1, 12), st.just(d)), elements=FINITE))
    i = data.draw(st.integers(0, X.shape[0] - 1))
    j = data.draw(st.integers(0, d - 1))
    X[i, j] = data.draw(st.sampled_from([np.nan, np.inf, -np.inf]))
    m = make(n_clusters=2, horizon_ticks=2)
    with pytest.raises(ValueError, match="NaN or infinite"):
        m.partial_fit(X)
    with pytest.raises(ValueError, match="NaN or infinite"):
        m.fit(X)
    assert not hasattr(m, "release_")


# -- DPStreamWarning: most points clipped -----------------------------------------------------

def _latlon(n=3000, seed=0):
    rng = np.random.default_rng(seed)
    return np.c_[rng.normal(48.85, 0.05, n), rng.normal(2.35, 0.05, n)]


def test_fit_warns_once_when_most_points_were_clipped():
    import warnings
    from dpstream import DPStreamWarning
    with pytest.warns(DPStreamWarning, match="radius and center") as rec:
        m = make(radius=6.0, tick_size=500).fit(_latlon())
    assert m.n_clipped_ == 3000
    ours = [w for w in rec if issubclass(w.category, DPStreamWarning)]
    assert len(ours) == 1 and "3000 of 3000" in str(ours[0].message)
    with warnings.catch_warnings():  # the same data with its public center and radius: silent
        warnings.simplefilter("error", DPStreamWarning)
        make(radius=1.0, center=(48.85, 2.35), tick_size=500).fit(_latlon())


def test_partial_fit_warns_once_when_clipping_first_dominates():
    import warnings
    from dpstream import DPStreamWarning
    m = make(radius=10.0, horizon_ticks=20)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DPStreamWarning)
        m.partial_fit(_X(400))  # inside the ball: no warning
        m.partial_fit(_latlon(300))  # 300 of 700 clipped: not most yet
    with pytest.warns(DPStreamWarning) as rec:
        for i in range(5):
            m.partial_fit(_latlon(300, seed=i + 1))
    assert len([w for w in rec if issubclass(w.category, DPStreamWarning)]) == 1
    assert issubclass(DPStreamWarning, UserWarning)
