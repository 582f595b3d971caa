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
