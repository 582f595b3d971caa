"""Engine.step validates its tick: a wrong width is never silently reshaped into other points."""
import numpy as np
import pytest

from dpstream import Engine, EngineConfig

pytestmark = pytest.mark.filterwarnings("ignore::dpstream.noise.UnsafeSeedWarning")


def _engine():
    return Engine(EngineConfig(n_clusters=2, dim=3, radius=5.0, epsilon=1.0, horizon_ticks=4), bytes(range(32)))


@pytest.mark.parametrize("bad", [np.zeros((4, 2)), np.zeros(6), np.zeros((2, 3, 1)), np.array([[0.0, np.nan, 1.0]])])
def test_bad_tick_shapes_and_values_raise(bad):
    e = _engine()
    with pytest.raises(ValueError, match="shape"):
        e.step(bad)
    assert e.t == 0  # nothing advanced


def test_empty_and_valid_ticks_advance():
    e = _engine()
    assert e.step(np.zeros((0, 3))).tick == 1
    assert e.step([]).tick == 2
    assert e.step(np.ones((5, 3))).tick == 3


def test_released_centers_lie_inside_the_public_ball():
    """A's noisy means can land outside B(center, Λ); the released centers are clipped onto it
    (post-processing). Data far outside the ball, clipped onto its boundary, made them reach 1.0025 Λ."""
    import warnings

    from dpstream import DPStreamClusterer
    for s in range(6, 12):
        rng = np.random.default_rng(s)
        a = rng.uniform(0, 2 * np.pi, 3)
        spots = np.c_[np.cos(a), np.sin(a)] * 20.0
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            m = DPStreamClusterer(n_clusters=3, radius=10.0, epsilon=1.0, random_state=s, horizon_ticks=8)
            for _ in range(8):
                m.partial_fit(spots[rng.integers(0, 3, 300)])
                assert np.linalg.norm(m.cluster_centers_, axis=1).max() <= 10.0
