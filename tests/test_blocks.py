"""The level-0 blocks (dpstream/blocks.py): a block holds exactly what A reads, however it is fed.

* A leaf sketch fed one tick at a time, in any order and any split into pieces, holds the same
  table — keys, exact counts, exact integer sums — as one built from all the points at once, and A
  releases bit-identical output from either (so block size costs no accuracy and no privacy).
* The table equals a recomputation from the raw points (per (part, leaf): count and Σ trunc(2^b·y)).
* Its memory is min(points, parts·2^D) entries, whatever the block size.
"""
from __future__ import annotations

import numpy as np
import pytest

from dpstream.blocks import LeafSketch, PointSketch, RawBlock, normalise
from dpstream.noise import NoiseSource
from dpstream.params import EngineConfig
from dpstream.privacy import PrivacyPlan
from dpstream.semicoresets import make_semicoreset

D_DIM = 5


def _setup(kind="tree", dim=D_DIM, **kw):
    cfg = EngineConfig(n_clusters=3, dim=dim, radius=4.0, epsilon=1.0, horizon_ticks=16, semicoreset=kind, **kw)
    return cfg, make_semicoreset(cfg, PrivacyPlan.build(cfg), NoiseSource(bytes(range(32))))


def _data(rng, n, P, dim=D_DIM):
    centers = rng.normal(size=(P, dim))
    part = rng.integers(0, P, n)
    x = centers[part] + rng.normal(scale=0.7, size=(n, dim))
    return centers, part, x


@pytest.mark.parametrize("kind", ["tree", "snap", "lloyd"])
def test_a_block_fed_in_pieces_equals_one_fed_at_once(kind):
    cfg, A = _setup(kind)
    rng = np.random.default_rng(1)
    P = 4
    centers, part, x = _data(rng, 3000, P)
    radii = np.full(P, 2.0)
    key = ("A", 0, 3, 0)
    whole = A.open_block(centers, radii, key)
    whole.add(x, part)
    order = rng.permutation(len(x))
    pieces = A.open_block(centers, radii, key)
    for idx in np.array_split(order, 17):  # 17 "ticks", shuffled
        pieces.add(x[idx], part[idx])
    assert whole.n == pieces.n == len(x)
    if kind != "lloyd":
        for a, b in zip(whole.compact(), pieces.compact()):
            np.testing.assert_array_equal(a, b)
    out1, out2 = A.release(whole, key), A.release(pieces, key)
    if kind == "lloyd":  # raw points: the same multiset, so the same counts and sums up to order
        np.testing.assert_allclose(np.sort(out1.weights), np.sort(out2.weights))
    else:
        np.testing.assert_array_equal(out1.points, out2.points)
        np.testing.assert_array_equal(out1.weights, out2.weights)
        np.testing.assert_array_equal(out1.part, out2.part)


def test_the_sketch_is_the_raw_points_exact_statistics():
    cfg, A = _setup("tree")
    rng = np.random.default_rng(2)
    P = 3
    centers, part, x = _data(rng, 2000, P)
    radii = np.array([1.0, 2.5, 0.5])
    b = A.open_block(centers, radii, ("A", 1, 2, 5))
    for idx in np.array_split(np.arange(len(x)), 5):
        b.add(x[idx], part[idx])
    keys, counts, sums = b.compact()
    y = (x - centers[part]) / radii[part][:, None]
    nrm = np.linalg.norm(y, axis=1)
    y = np.where((nrm > 1)[:, None], y / nrm[:, None] / (1 + 1e-12), y)  # clipped into the part's ball
    D = cfg.tree_depth
    code = np.zeros(len(x), dtype=np.int64)
    for lv in range(D):
        code = 2 * code + (y @ b.V[lv] >= 0)
    key = (part.astype(np.int64) << D) + code
    q = np.trunc(y * 2.0 ** cfg.sum_grid_bits).astype(np.int64)
    want = sorted(set(key.tolist()))
    assert keys.tolist() == want
    for kk, c, s in zip(keys, counts, sums):
        sel = key == kk
        assert c == sel.sum()
        np.testing.assert_array_equal(s, q[sel].sum(axis=0))
    assert counts.sum() == len(x)


def test_the_sketch_memory_is_bounded_by_its_leaves_not_by_the_points():
    cfg, A = _setup("tree", dim=64, tree_depth=3)
    rng = np.random.default_rng(3)
    P = 5
    centers, part, x = _data(rng, 20_000, P, dim=64)
    b = A.open_block(centers, np.full(P, 3.0), ("A", 0, 0, 0))
    for idx in np.array_split(np.arange(len(x)), 20):
        b.add(x[idx], part[idx])
    entries = b.compact()[0].size
    assert entries <= P * 2 ** cfg.tree_depth
    raw = RawBlock(centers, np.full(P, 3.0), 64)
    raw.add(x, part)
    assert b.state_floats() < raw.state_floats() / 100  # 20k points, ≤ 40 leaves
    assert isinstance(b, LeafSketch)


@pytest.mark.parametrize("n, distinct, width", [(1, 1, 3), (300, 40, 10), (2048, 2048, 2), (2049, 7, 4),
                                                 (6000, 1500, 0), (900, 90, 100), (500, 500, 64)])
def test_aggregate_sort_and_sparse_paths_agree_exactly(n, distinct, width, monkeypatch):
    """_aggregate sums by sorting up to _SORT_AGGREGATE_MAX entries and by a sparse product above it, and
    sorted entries of _WIDE_ROWS or more coordinates by a sparse product built from the sort: every path
    gives the same sorted keys, counts and int64 sums, bit for bit (large values included), and the sums
    are the per-key sums of q."""
    import dpstream.blocks as blocks
    rng = np.random.default_rng(n)
    key = rng.integers(0, distinct, n).astype(np.int64) << 20
    count = rng.integers(1, 5, n).astype(np.int64)
    q = rng.integers(-2**40, 2**40, (n, width)).astype(np.int64)
    got = {}
    for limit in (0, 10**9):  # every call sparse / every call sorted
        for wide in (0, 10**9):  # sorted entries summed by the product from the sort / gathered and reduced
            monkeypatch.setattr(blocks, "_SORT_AGGREGATE_MAX", limit)
            monkeypatch.setattr(blocks, "_WIDE_ROWS", wide)
            got[limit, wide] = blocks._aggregate(key, count, q)
    for path in got.values():
        for a, b in zip(path, got[10**9, 10**9]):
            assert a.dtype == b.dtype == np.int64 and np.array_equal(a, b)
    uniq, counts, sums = got[0, 0]
    for i in rng.choice(uniq.size, min(5, uniq.size), replace=False):  # a few keys summed by hand
        assert np.array_equal(sums[i], q[key == uniq[i]].sum(axis=0)) and counts[i] == count[key == uniq[i]].sum()
    assert (np.diff(uniq) > 0).all() and counts.sum() == count.sum() and sums.shape == (uniq.size, width)
    assert np.array_equal(sums.sum(axis=0), q.sum(axis=0))


@pytest.mark.parametrize("n, groups, width", [(0, 4, 5), (1, 1, 3), (300, 7, 40), (700, 500, 64), (2000, 30, 784)])
def test_group_sums_and_quantised_group_sums_are_the_exact_sums_on_every_path(n, groups, width, monkeypatch):
    """group_sum sums integer rows by a sparse product from _SPARSE_SUM_MIN values on, and
    quantised_group_sum quantises and sums in blocks of rows, each block into every group or into the
    groups it holds: every path gives the int64 per-group sums of quantise(y), bit for bit."""
    import dpstream.blocks as blocks
    rng = np.random.default_rng(n + groups)
    index = rng.integers(0, groups, n)
    y = rng.uniform(-1, 1, (n, width))
    y[:min(n, 3), 0] = [-0.0, 1.0, -1.0][:min(n, 3)]
    grid = 2.0 ** 40  # the widest grid: the largest integers
    q = blocks.quantise(y, grid)
    assert q.dtype == np.int64 and np.array_equal(q, (y * grid).astype(np.int64))  # the cast of astype
    want = np.zeros((groups, width), dtype=np.int64)
    np.add.at(want, index, q)
    for sparse_min in (0, 10**9):
        monkeypatch.setattr(blocks, "_SPARSE_SUM_MIN", sparse_min)
        got = blocks.group_sum(index, q, groups)
        assert got.dtype == np.int64 and np.array_equal(got, want)
        for floats in (width, 37 * width, 1 << 21):  # blocks of 1 row (into the groups held), 37, all rows
            monkeypatch.setattr(blocks, "_QUANTISE_FLOATS", floats)
            got = blocks.quantised_group_sum(index, y, grid, groups)
            assert got.dtype == np.int64 and np.array_equal(got, want)


def test_points_normalised_in_pieces_and_a_point_sketch_are_those_of_the_raw_points():
    """The cells' release reads a block's points normalised once: a raw block's points, added in pieces
    with several radii, are the normalisation of all its points at once, bit for bit; a PointSketch of
    those rows holds the counts table of a LeafSketch fed the raw points, gives the same sums under any
    set of disjoint leaves, and the tree released from either is the same, bit for bit."""
    rng = np.random.default_rng(11)
    P, dim = 6, 40
    centers, part, x = _data(rng, 3000, P, dim)
    radii = rng.uniform(0.5, 3.0, P)
    raw = RawBlock(centers, radii, dim)
    for a, b in ((0, 1), (1, 900), (900, 901), (901, 3000)):
        raw.add(x[a:b], part[a:b])
    y, p = raw.points()
    assert np.array_equal(p, part)
    assert np.array_equal(y.view(np.uint64), normalise(x, part, centers, radii).view(np.uint64))
    assert np.array_equal(raw.raw()[0], x) and raw.raw()[0] is raw.raw()[0]  # joined once
    cfg, A = _setup("tree", dim=dim, tree_depth=6)
    V = rng.normal(size=(6, dim))
    ref, got = LeafSketch(centers, radii, V, dim, A.grid), PointSketch(centers, radii, V, dim, A.grid, y, part)
    ref.add(x, part)
    for a, b in zip(ref.compact()[:2], got.compact()[:2]):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    assert got.n == ref.n == len(x)
    keys = ref.compact()[0]
    # disjoint leaves: part 2 whole, every other level-3 node of parts 0, 1, 4, 5, part 3's level-6 nodes
    mid = np.unique(keys >> 3)
    leaves = [(0, np.array([2])), (3, mid[~np.isin(mid >> 3, [2, 3])][::2]), (6, keys[(keys >> 6) == 3])]
    want = ref.leaf_sums(leaves)
    assert want.shape == (sum(lk.size for _, lk in leaves), dim) and want.any()
    assert np.array_equal(got.leaf_sums(leaves), want)
    a, b = A._leaves(ref, ("A", 0, 0, 0)), A._leaves(got, ("A", 0, 0, 0))
    assert len(a) > P
    for f in ("points", "weights", "part"):
        assert np.array_equal(getattr(a, f), getattr(b, f)) and getattr(a, f).dtype == getattr(b, f).dtype
        assert getattr(a, f).tobytes() == getattr(b, f).tobytes()
