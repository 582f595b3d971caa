"""ShardTicks merges and clips all the ticks of a firing at once (transforms.shard_ticks.merge_ticks): the
same points, in the same order, as merge_partials and clip_to_ball tick by tick."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("apache_beam", reason="apache_beam is not importable", exc_type=ImportError)

from dpstream.rings import clip_to_ball  # noqa: E402
from transforms.shard_ticks import merge_ticks  # noqa: E402
from transforms.ticks import Partial, merge_partials  # noqa: E402


def _part(rng, m, d, slots):
    return Partial(rng.normal(scale=8.0, size=(m, d)), np.asarray(slots, np.int64),
                    rng.normal(size=m), np.array([str(v) for v in rng.integers(0, 3, m)]))


@pytest.mark.parametrize("seed", range(6))
def test_merge_ticks_equals_merging_and_clipping_tick_by_tick(seed):
    rng = np.random.default_rng(seed)
    d, ticks = 3, []
    for t in range(40):
        kind = rng.integers(0, 6)
        base = 1000 * t
        if kind == 0:
            ticks.append([])  # an empty tick
        elif kind == 1:  # missing slots: the full sort key
            ticks.append([_part(rng, m, d, -np.ones(m)) for m in rng.integers(0, 5, 2)])
        elif kind == 2:  # a repeated slot across two parts
            ticks.append([_part(rng, 3, d, [base + 1, base + 5, base + 2]), _part(rng, 2, d, [base + 5, base])])
        elif kind == 3:  # one point without a slot
            ticks.append([_part(rng, 1, d, [-1])])
        else:  # distinct slots, parts out of order
            sl = rng.permutation(50)[:int(rng.integers(2, 30))] + base
            cut = int(rng.integers(0, len(sl)))
            ticks.append([_part(rng, len(sl[:cut]), d, sl[:cut]), _part(rng, len(sl[cut:]), d, sl[cut:])])
    x, sizes = merge_ticks(ticks, d)
    want = [merge_partials(p).points if p else np.zeros((0, d)) for p in ticks]
    assert list(sizes) == [len(w) for w in want]
    np.testing.assert_array_equal(x, np.concatenate(want))
    center, radius = np.full(d, 0.5), 9.0
    got, n = clip_to_ball(x, center, radius)
    per = [clip_to_ball(np.array(w, dtype=np.float64), center, radius) for w in want]
    assert n == sum(c for _, c in per) > 0
    assert got.tobytes() == np.concatenate([y for y, _ in per]).tobytes()


def test_partial_bytes_round_trip():
    """ShardTicks' input partials cross the shuffle as one bytes object each (transforms.stages.partial_bytes)."""
    import pickle
    from transforms.stages import partial_bytes, partial_from_bytes
    rng = np.random.default_rng(0)
    parts = [_part(rng, m, 3, rng.integers(-1, 100, m)) for m in (1, 7)]
    parts.append(Partial(np.zeros((0, 3)), np.zeros(0, np.int64), np.zeros(0), np.array([], dtype=str)))
    parts.append(Partial(rng.normal(size=(6, 4))[::2], np.arange(3), np.full(3, np.nan), np.array(["ab", "", "c"])))
    for p in parts:
        packed = partial_bytes(p)
        assert isinstance(packed, tuple) and not isinstance(packed, Partial)
        back = partial_from_bytes(pickle.loads(pickle.dumps(packed)))
        for a, b in zip(back, p):
            assert a.dtype == b.dtype and a.shape == b.shape
            np.testing.assert_array_equal(a, b)
    odd = Partial(np.zeros((2, 3), np.float32), np.zeros(2, np.int64), np.zeros(2), np.array(["", ""]))
    assert partial_bytes(odd) is odd and partial_from_bytes(odd) is odd  # other dtypes: pickled as they are


def test_points_that_are_float32_cross_as_float32_and_come_back_bit_for_bit():
    """compact_points: float32 input read as float64 (embeddings) crosses the shuffle in half the bytes and
    merge_ticks widens it to the very float64 numbers; one value that is not a float32 (or a negative zero,
    which must keep its sign) keeps or restores the exact bits either way."""
    import pickle
    from transforms.stages import compact_points, partial_bytes, partial_from_bytes
    rng = np.random.default_rng(3)
    x32 = rng.normal(size=(40, 5)).astype(np.float32).astype(np.float64)
    x32[3, 1] = -0.0
    mixed = x32.copy()
    mixed[-1, -1] = 0.1  # not a float32: the whole array stays float64
    assert compact_points(x32).dtype == np.float32 and compact_points(mixed) is mixed
    assert compact_points(x32).astype(np.float64).tobytes() == x32.tobytes()
    slots = rng.permutation(40)
    parts, want = [], []
    for x in (x32, mixed):
        p = Partial(x, slots, np.full(40, np.nan), np.array([""] * 40))
        packed = partial_bytes(p)
        back = partial_from_bytes(pickle.loads(pickle.dumps(packed)))
        assert back.points.dtype == (np.float32 if x is x32 else np.float64)
        assert len(packed[-1]) == 40 * (5 * back.points.dtype.itemsize + 8 + 8 + 4)
        parts.append(back)
        want.append(merge_partials([p]).points)
    no_slots = Partial(x32[::-1].copy(), np.full(40, -1, np.int64), rng.normal(size=40), np.array(["a"] * 40))
    parts.append(partial_from_bytes(partial_bytes(no_slots)))  # merge_partials' full key (coordinates), float32
    want.append(merge_partials([no_slots]).points)
    got, sizes = merge_ticks([[parts[0]], [parts[1]], [parts[2]]], 5)
    assert got.dtype == np.float64 and list(sizes) == [40, 40, 40]  # one float64 partial: all widened
    assert got.tobytes() == np.concatenate(want).tobytes()
    # every partial float32: the merge stays float32 (AssignRings widens), the very numbers merge_partials gives
    got, sizes = merge_ticks([[parts[0]], [parts[2]]], 5)
    assert got.dtype == np.float32 and list(sizes) == [40, 40]
    assert got.astype(np.float64).tobytes() == np.concatenate([want[0], want[2]]).tobytes()

