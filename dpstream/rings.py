"""Rings centred at a set (Def. 4) and the ring/part assignment of a tick.

R_0(F) = {x : dist(x, F) < r_0'},  R_i(F) = {x : r_(i-1)' ≤ dist(x, F) < r_i'} with r_i' = r_0 2^i (1 + τ),
i = 1..I, τ the public ``ring_tolerance``, with r_I = 2Λ so every clipped point has a ring.  A point's part
is (ring i, nearest center f); black box A runs on each part in the ball (f, r_i = r_0 2^i), into which its
normalisation clips the points of the band [r_i, r_i').

Privacy (P8): the partition at tick t must be a function of the
*released* center set of the epoch (adopted from F of an earlier tick) and of
the record itself — never of internal counter or merge-reduce state.  This
module only sees the centers it is given.
"""
from __future__ import annotations

import numpy as np

_CHUNK = 1 << 22  # floats per distance block, bounds memory for large |F|
_DIFF_FLOATS = 1 << 16  # floats per block of row differences (partition_nearest)
_PAIRWISE_FLOATS = 1 << 14  # first_distinct_rows compares all pairs up to this many n·n·d


def nearest_center(x: np.ndarray, centers: np.ndarray, x2: np.ndarray = None):
    """Index of and distance to the nearest center, vectorised in chunks. ``x2``: the caller's
    ``einsum("ij,ij->i", x, x)`` of the same x, used when x is one chunk (the same numbers, computed once
    by a caller that measures many center sets against one x)."""
    n = x.shape[0]
    idx = np.empty(n, dtype=np.int64)
    dist = np.empty(n, dtype=float)
    if n == 0:
        return idx, dist
    c2 = np.einsum("ij,ij->i", centers, centers)
    step = max(1, _CHUNK // max(1, centers.shape[0]))
    if x2 is None or n > step:
        x2 = None
    for s in range(0, n, step):
        xb = x[s:s + step]
        d2 = xb @ (-2.0 * centers.T)
        d2 += c2[None, :]
        j = d2.argmin(axis=1)
        idx[s:s + step] = j
        xx = np.einsum("ij,ij->i", xb, xb) if x2 is None else x2
        dist[s:s + step] = np.sqrt(np.maximum(d2[np.arange(len(j)), j] + xx, 0.0))
    return idx, dist


def partition_nearest(x: np.ndarray, centers: np.ndarray):
    """Nearest center and distance to it for the partition (P8): each row's result is a function of that
    row and the centers alone, never of the rows computed with it.

    :func:`nearest_center` gets its distances from one matrix product, and a BLAS kernel rounds a row's
    result by where the row falls in the block (a lone row, the last rows of a block, another kernel): the
    same point could land on either side of a ring boundary, or of two centers' bisector, depending on the
    other points of its tick, the shard count or the runner. Here the product only proposes the nearest
    center; the distance is recomputed from the row's own differences (an element-wise difference and a
    per-row sum, which no other row enters), and a row whose two best proposals lie within the product's
    rounding of each other has every center's distance recomputed that way. Ties go to the lowest index, and
    duplicated centers are one center (the lowest index of its copies)."""
    return _partition_nearest(x, centers, with_dist=True)


def nearest_index(x: np.ndarray, centers: np.ndarray) -> np.ndarray:
    """:func:`partition_nearest`'s index alone: the same proposals and row-local checks on the same row
    blocks, without the pass over the rows' differences that only its distance needs."""
    return _partition_nearest(x, centers, with_dist=False)[0]


def _partition_nearest(x: np.ndarray, centers: np.ndarray, with_dist: bool):
    n = x.shape[0]
    idx = np.empty(n, dtype=np.int64)
    dist = np.empty(n, dtype=float) if with_dist else None
    if n == 0:
        return idx, dist
    centers = np.asarray(centers, dtype=float)
    first = first_distinct_rows(centers)  # in order: the first exact minimum is the lowest index
    uniq = centers[first]
    k = uniq.shape[0]
    c2 = np.einsum("ij,ij->i", uniq, uniq)
    step = max(1, _CHUNK // max(1, k))
    rows = max(1, _DIFF_FLOATS // max(1, x.shape[1]))
    buf = np.empty((min(rows, n), x.shape[1])) if with_dist else None  # one small buffer: no fresh pages per call
    for s in range(0, n, step):
        xb = np.asarray(x[s:s + step], dtype=float)
        j = _exact_candidates(xb, uniq, c2)
        idx[s:s + step] = first[j]
        if not with_dist:
            continue
        for a in range(0, len(xb), rows):  # blocks of rows; each row's sum is its own
            m = min(rows, len(xb) - a)
            diff = buf[:m]
            np.take(uniq, j[a:a + m], axis=0, out=diff)
            np.subtract(xb[a:a + m], diff, out=diff)
            dist[s + a:s + a + m] = np.sqrt(np.einsum("ij,ij->i", diff, diff))
    return idx, dist


def first_distinct_rows(a: np.ndarray) -> np.ndarray:
    """Ascending indexes of the first row of each distinct value of the rows of ``a`` (finite floats; rows
    equal as numbers are one value, 0.0 and -0.0 alike): ``np.sort(np.unique(a, axis=0, return_index=True)[1])``.
    Rows are compared as raw bytes of one void item each, not as ``unique(axis=0)``'s structured dtype of d
    fields, whose per-field setup dominated a tick's partition at d = 784 (2.4 ms against 0.05 ms for 30
    centers)."""
    a = np.ascontiguousarray(a, dtype=float)
    n = a.shape[0]
    if n <= 1:
        return np.arange(n)
    if n * n * a.shape[1] <= _PAIRWISE_FLOATS:  # a few rows (k centers): compare every pair at once
        same = (a[:, None, :] == a[None, :, :]).all(axis=2)
        np.fill_diagonal(same, True)
        return np.flatnonzero(same.argmax(axis=1) == np.arange(n))  # a row whose first equal is itself
    b = a + 0.0  # -0.0 + 0.0 = +0.0: rows equal as numbers have equal bytes
    rows = b.view(np.dtype((np.void, b.dtype.itemsize * b.shape[1]))).ravel()
    _, first = np.unique(rows, return_index=True)  # the first occurrence (a stable sort)
    return np.sort(first)


def _exact_candidates(xb: np.ndarray, uniq: np.ndarray, c2: np.ndarray) -> np.ndarray:
    """Index (into the sorted unique centers) of each row's nearest center, by row-local arithmetic where
    the matrix product's rounding could decide it."""
    k = uniq.shape[0]
    if k == 1:
        return np.zeros(len(xb), dtype=np.int64)
    d2 = xb @ (-2.0 * uniq.T)
    d2 += c2[None, :]
    j = d2.argmin(axis=1)
    two = np.partition(d2, 1, axis=1)[:, :2]
    x2 = np.einsum("ij,ij->i", xb, xb)
    # the product's error on x·c is at most ≈ d·u·|x||c| ≤ d·u·(|x|² + |c|²)/2 (u = 2⁻⁵³); 1e-8 covers any d
    # below 10⁷ with room, and a row outside this band cannot have its argmin moved by rounding
    near = np.flatnonzero(two[:, 1] - two[:, 0] <= 1e-8 * (x2 + c2.max()) + 1e-300)
    if near.size:
        rows = xb[near]
        full = np.empty((near.size, k))
        for a in range(k):  # a loop over centers, not points: only the near-tied rows, each row on its own
            diff = rows - uniq[a]
            full[:, a] = np.einsum("ij,ij->i", diff, diff)
        j[near] = full.argmin(axis=1)  # the first minimum: the lowest index among exact ties
    return j


def ring_of(dist: np.ndarray, ring_base: float, n_rings: int, ratio: float = 2.0,
            tolerance: float = 0.0) -> np.ndarray:
    """Ring index: 0 below r_0, else ⌊log2(dist / r_0)⌋ + 1, capped at I = n_rings − 1.

    ``tolerance`` τ (public) moves each boundary out to r_i·(1 + τ): a distance within float rounding
    of r_i stays in ring i. Points on a sphere around a center — unit-norm embeddings around the
    origin, every clipped point around the ball's center — otherwise fall on either side of r_i by
    their last bit, and one cluster is cut into two parts, the outer one in a ball twice as wide
    (twice the noise in data units). A point of ring i is then at most r_i·(1 + τ) from its center:
    A's normalisation clips it to the ball (P10), so every sensitivity holds."""
    scaled = np.maximum(dist, 1e-300) / ring_base
    if tolerance:
        scaled = scaled / (1.0 + tolerance)
    with np.errstate(divide="ignore"):
        i = np.floor(np.log2(scaled) / np.log2(ratio)).astype(np.int64) + 1
    return np.clip(i, 0, n_rings - 1)


def assign_parts(x: np.ndarray, centers: np.ndarray, ring_base: float, n_rings: int, ratio: float = 2.0,
                 tolerance: float = 0.0):
    """(ring, nearest-center) of every point, each a function of the point and the centers only
    (:func:`partition_nearest`)."""
    f, dist = partition_nearest(x, centers)
    return ring_of(dist, ring_base, n_rings, ratio, tolerance), f


CLIP_COUNT_TOLERANCE = 1e-6
"""Public relative tolerance of the clipped *count*: a point within Λ·(1 + 1e-6) of the center is
still projected onto the ball (the sensitivity bound needs it) but is not counted as clipped.
float32 unit vectors have float64 norms up to 1 + 1.2e-7; counting them would report half of a
set of unit embeddings as clipped at radius 1."""


def clip_to_ball(x: np.ndarray, center: np.ndarray, radius: float):
    """Project points outside B(center, Λ) onto its boundary; returns (clipped, number clipped).
    The count leaves out points within float rounding of the ball (:data:`CLIP_COUNT_TOLERANCE`).

    One pass computes every row's squared distance; rows whose square overflows (huge or
    infinite coordinates) take a slower path that scales by the largest coordinate first."""
    zero = not np.any(center)
    with np.errstate(over="ignore", invalid="ignore"):
        y = np.array(x, dtype=float) if zero else x - center  # a copy either way: the input is the caller's
        sq = np.einsum("ij,ij->i", y, y) if y.size else np.zeros(len(y))
    odd = ~(sq < 1e300)  # overflow, inf or nan from inf − inf
    if odd.any():
        yo = y[odd]
        inf_rows = ~np.all(np.isfinite(yo), axis=1)
        if inf_rows.any():  # x − center overflowed: the infinite coordinates dominate the direction
            yo[inf_rows] = np.where(np.isinf(yo[inf_rows]), np.sign(yo[inf_rows]), 0.0) * radius * 4
        big = np.abs(yo).max(axis=1)
        big = np.where(big > 0, big, 1.0)
        unit = yo / big[:, None]
        s = np.linalg.norm(unit, axis=1)  # ‖y‖ / big, in [1, √d]: never overflows
        y[odd] = unit * (radius / s)[:, None] * (1 - 1e-12)
        sq[odd] = 0.0
    over = sq > radius * radius
    n_far = int(odd.sum())
    n_over = int(np.count_nonzero(over))
    if n_over:
        n_far += int(np.count_nonzero(sq[over] > (radius * (1 + CLIP_COUNT_TOLERANCE)) ** 2))
        if 8 * n_over < len(sq):
            y[over] *= (radius / np.sqrt(sq[over]) * (1 - 1e-12))[:, None]
        else:  # most rows (unit vectors on a unit ball: about half by rounding): scale every row in place,
            # the others by exactly 1.0, rather than gather and scatter half of the tick
            with np.errstate(divide="ignore"):
                scale = np.where(over, radius / np.sqrt(sq) * (1 - 1e-12), 1.0)
            y *= scale[:, None]
    if not zero:
        y += center
    return y, n_far
