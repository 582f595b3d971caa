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


def nearest_center(x: np.ndarray, centers: np.ndarray):
    """Index of and distance to the nearest center, vectorised in chunks."""
    n = x.shape[0]
    idx = np.empty(n, dtype=np.int64)
    dist = np.empty(n, dtype=float)
    if n == 0:
        return idx, dist
    c2 = np.einsum("ij,ij->i", centers, centers)
    step = max(1, _CHUNK // max(1, centers.shape[0]))
    for s in range(0, n, step):
        xb = x[s:s + step]
        d2 = xb @ (-2.0 * centers.T)
        d2 += c2[None, :]
        j = d2.argmin(axis=1)
        idx[s:s + step] = j
        dist[s:s + step] = np.sqrt(np.maximum(d2[np.arange(len(j)), j] + np.einsum("ij,ij->i", xb, xb), 0.0))
    return idx, dist


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
    """(ring, nearest-center) of every point."""
    f, dist = nearest_center(x, centers)
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
    if over.any():
        n_far += int(np.count_nonzero(sq[over] > (radius * (1 + CLIP_COUNT_TOLERANCE)) ** 2))
        y[over] *= (radius / np.sqrt(sq[over]) * (1 - 1e-12))[:, None]
    if not zero:
        y += center
    return y, n_far
