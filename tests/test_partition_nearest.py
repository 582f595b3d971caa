"""A point's part (ring, nearest center) is a function of the point and the released centers alone (P8).

``dpstream.rings.partition_nearest`` decides it. A matrix product rounds a row by where it falls in the
block, so a distance computed with other rows can differ in its last bits from the same row computed
alone: a point on a ring boundary (or on two centers' bisector) would then change part with the other
records of its tick, the shard count or the runner, and one record's presence could move another record
between parts. These tests compare every row with the same row computed by itself, at several positions
in a batch and under permutations, for float64 and widened float32 input; exact ties and duplicated
centers go to the lowest index; and a point planted on a ring boundary keeps its ring whatever shares its
batch.
"""
from __future__ import annotations

import numpy as np
import pytest

from dpstream.cells import label
from dpstream.rings import assign_parts, first_distinct_rows, nearest_index, partition_nearest


def _alone(x, C):
    """Each row on its own: the exact lowest-index nearest center and its distance, row by row."""
    idx, dist = [], []
    for row in x:
        d2 = np.array([np.einsum("i,i->", row - c, row - c) for c in C])
        j = int(np.flatnonzero(d2 == d2.min())[0])
        diff = (row - C[j])[None, :]
        idx.append(j)
        dist.append(np.sqrt(np.einsum("ij,ij->i", diff, diff))[0])
    return np.array(idx), np.array(dist)


@pytest.mark.parametrize("d, k, f32", [(2, 3, False), (3, 6, True), (10, 5, False), (17, 9, True),
                                       (64, 12, False), (384, 4, True)])
def test_every_row_is_what_it_is_alone_wherever_it_falls_in_the_batch(d, k, f32):
    rng = np.random.default_rng(d * 100 + k)
    C = rng.standard_normal((k, d)) * 2.0
    x = rng.standard_normal((257, d)) * 3.0
    if f32:
        x = x.astype(np.float32).astype(float)
    ref_i, ref_d = _alone(x, C)
    for lead in (0, 1, 7, 64):  # rows of another tick or shard before these
        other = rng.standard_normal((lead, d)) * 3.0
        for perm in (np.arange(len(x)), rng.permutation(len(x))):
            i, dist = partition_nearest(np.vstack([other, x[perm]]), C)
            np.testing.assert_array_equal(i[lead:], ref_i[perm])
            assert (dist[lead:].view(np.uint64) == ref_d[perm].view(np.uint64)).all()


def test_exact_ties_and_duplicated_centers_go_to_the_lowest_index():
    C = np.array([[1.0, 0.0], [-1.0, 0.0], [1.0, 0.0], [0.0, 5.0]])
    x = np.array([[0.0, 0.0], [0.0, 1.0], [1.0, 0.0], [0.5, 0.0], [0.0, 9.0]])
    i, dist = partition_nearest(x, C)
    assert i.tolist() == [0, 0, 0, 0, 3]  # on the bisector of 0 and 1: 0; center 2 is center 0 again
    assert dist.tolist() == [1.0, np.sqrt(2.0), 0.0, 0.5, 4.0]


def test_a_point_on_a_ring_boundary_keeps_its_ring_whatever_shares_its_batch():
    """The record x sits where the matrix product's rounding decides its ring: exactly at the boundary its
    own row-wise distance gives. Batched with any other rows, its ring is the one it has alone."""
    rng = np.random.default_rng(5)
    d, k = 10, 5
    C = rng.standard_normal((k, d))
    x = rng.standard_normal((1, d)) * 2.0
    _, dx = partition_nearest(x, C)
    base = float(dx[0]) / 4.0  # the boundary r_0·2² lies at x's distance
    alone = assign_parts(x, C, base, 12)[0][0]
    for lead in range(0, 40):
        batch = np.vstack([rng.standard_normal((lead, d)) * 3.0, x, rng.standard_normal((lead % 7, d))])
        assert assign_parts(batch, C, base, 12)[0][lead] == alone


def test_far_from_the_origin_the_distance_does_not_lose_its_digits():
    """Points and centers far from the origin (GPS-like offsets): |x|² − 2x·c + |c|² cancels to a tiny
    number and keeps few correct digits; the row's own differences keep them, so a point close to its
    center gets ring 0, not a ring decided by cancellation."""
    off = np.full(3, 1e6)
    C = off + np.array([[0.0, 0.0, 0.0], [10.0, 0.0, 0.0]])
    x = off + np.array([[1e-4, 0.0, 0.0], [9.9999, 0.0, 0.0]])
    i, dist = partition_nearest(x, C)
    assert i.tolist() == [0, 1]
    np.testing.assert_allclose(dist, [1e-4, 1e-4], rtol=1e-6)
    assert assign_parts(x, C, 1e-3, 12)[0].tolist() == [0, 0]


@pytest.mark.parametrize("n, d", [(2, 3), (12, 10), (30, 784), (400, 10)])  # both paths: all pairs, and bytes
def test_first_distinct_rows_are_uniques_first_occurrences(n, d):
    """The distinct rows (and their first copies) of a set of centers are those of ``np.unique(axis=0)``,
    with 0.0 and -0.0 one value: a duplicated center is one center, ties go to the lowest index."""
    rng = np.random.default_rng(n + d)
    a = rng.integers(-1, 2, (n, d)).astype(float) * rng.choice([1.0, 0.5, -0.0], (n, d))
    a[rng.integers(0, n, n // 2)] = a[rng.integers(0, n, n // 2)]  # copies
    a[:, 0] = np.where(a[:, 0] == 0, rng.choice([0.0, -0.0], n), a[:, 0])  # zeros of both signs
    want = np.sort(np.unique(a, axis=0, return_index=True)[1])
    got = first_distinct_rows(a)
    assert want.size < n and np.array_equal(got, want)


@pytest.mark.parametrize("d, k", [(2, 4), (32, 10), (784, 10)])
def test_nearest_index_and_the_cells_labels_are_partition_nearest_s_index(d, k):
    """The cells label their points with nearest_index (partition_nearest without its distance pass), a
    block of one part without gathering its rows: every label is partition_nearest's index of that row among
    its part's centers, exact ties and duplicated centers included."""
    rng = np.random.default_rng(d + k)
    C = rng.standard_normal((3, k, d))
    C[:, 1] = C[:, 0]  # a duplicated center: its copy never wins
    x = rng.standard_normal((500, d))
    x[:5] = (C[0, 0] + C[0, 2]) / 2  # on a bisector (up to rounding)
    x[5] = C[0, 3]
    np.testing.assert_array_equal(nearest_index(x, C[0]), partition_nearest(x, C[0])[0])
    np.testing.assert_array_equal(label(x, np.zeros(len(x), dtype=np.int64), C), partition_nearest(x, C[0])[0])
    part = rng.integers(0, 3, len(x))
    want = np.empty(len(x), dtype=np.int64)
    for p in range(3):
        want[part == p] = partition_nearest(x[part == p], C[p])[0]
    np.testing.assert_array_equal(label(x, part, C), want)
    np.testing.assert_array_equal(label(x[::2], part[::2] * 0 + 2, C), partition_nearest(x[::2], C[2])[0])
