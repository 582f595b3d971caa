"""AssignRings keeps the routed ticks that come before its epoch's ring centers in a bag, which gives them
back in any order: ``_in_tick_order`` puts every tick, with its own points, back in tick order (the partial
sketches and the plans ReleaseCoreset follows are per tick), and uses one message in order as it is."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("apache_beam", reason="apache_beam is not importable: the Beam job cannot run",
                    exc_type=ImportError)

from transforms.epoch_stages import _in_tick_order  # noqa: E402
from transforms.messages import RingPlan, RoutedTicks, TickPoints  # noqa: E402

PLAN = RingPlan(1, False, False, False, None)


def _msg(ticks_sizes):
    """A RoutedTicks whose every point's first coordinate is its tick (so a point's tick can be read back)."""
    ticks = [TickPoints(t, n, PLAN) for t, n in ticks_sizes]
    x = np.concatenate([np.full((n, 2), float(t)) for t, n in ticks_sizes]) if ticks_sizes else np.zeros((0, 2))
    return RoutedTicks(ticks, x)


def test_messages_out_of_order_come_back_in_tick_order_with_their_own_points():
    got, x = _in_tick_order([_msg([(5, 2), (6, 0)]), _msg([(2, 3)]), _msg([(3, 1), (4, 4)])])
    assert [tp.tick for tp in got] == [2, 3, 4, 5, 6]
    assert [tp.n for tp in got] == [3, 1, 4, 2, 0]
    assert x[:, 0].tolist() == [2.0] * 3 + [3.0] + [4.0] * 4 + [5.0] * 2


def test_one_message_in_order_is_used_as_it_is_and_none_gives_nothing():
    m = _msg([(1, 2), (2, 3)])
    got, x = _in_tick_order([m])
    assert [tp.tick for tp in got] == [1, 2] and x is m.points  # no copy of the points
    assert _in_tick_order([]) == ([], None)
    got, x = _in_tick_order([_msg([(4, 1), (2, 2)])])  # one message out of order is sorted too
    assert [tp.tick for tp in got] == [2, 4] and x[:, 0].tolist() == [2.0, 2.0, 4.0]
