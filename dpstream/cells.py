"""A's cells (``tree_cells`` > 0, P21): the tree locates, one noisy mean per cell releases.

The hyperplane tree's leaves are cones of random hyperplanes: on high-dimensional data they do not
follow the clusters, and a leaf's mean mixes several of them. Measured on one block of a short stream
(``benchmarks/block_tree_variants.py``), the tree's noisy leaf means still *locate* the clusters well
enough for a k-means of them; what a d-dimensional noisy sum per leaf cannot do, one noisy sum per
Voronoi cell of those k centers can. So :class:`~dpstream.semicoresets.TreeSemicoreset`, per part:

1. runs its tree on the part's points with the share 1 − f of A's budget (the plan's ``a_count_scale``,
   ``a_sum_scale``): noisy leaf means and counts;
2. takes k centers, a weighted k-means of those leaves (:func:`centers_from_leaves`: post-processing of
   step 1, keyed per part);
3. labels every point of the part with its nearest center (:func:`label`: a function of the point and
   the centers alone), and per (part, cell) draws one noisy count and one noisy quantised sum with the
   share f (``a_cell_count_scale``, ``a_cell_sum_scale``): a record enters D + 1 tree counts, one leaf
   sum, one cell count and one cell sum, each charged in the plan;
4. releases the k cell means (noisy sum / noisy count, clipped to the ball) weighted by their noisy
   counts, zeroed below the cells' own phantom-mass threshold (P14). The leaves are not released.

The output shape is public: k cells per part, every part processed (P6). The block keeps raw points
(step 3 needs them): :class:`~dpstream.blocks.CellBlock`.
"""
from __future__ import annotations

import numpy as np

from .offline import cluster_coreset
from .rings import partition_nearest

# θ of the block-size rule with cells: a cell's noisy count that keeps its d-dimensional mean's noise at a
# third of the ball's radius (the tree's default keep factor: tree_keep_factor tunes the tree, which only
# locates here, and must not shrink the blocks)
CELL_KEEP_FACTOR = 3.0


def centers_from_leaves(points, weights, part, n_parts: int, k: int, objective: str, rng_of) -> np.ndarray:
    """(n_parts, k, d) centers in normalised coordinates: per part, its leaves when it has at most k (the
    first repeated: a copy never wins a point), else a weighted k-means of them (``rng_of(p)``: part p's
    keyed generator); a part without leaves keeps its ball's center. Padding with the leaves' mean instead
    would draw every point: a noisy leaf mean's norm is inflated by its noise, the mean of several is not."""
    d = points.shape[1]
    C = np.zeros((n_parts, k, d))
    for p in np.unique(part):  # a loop over parts with leaves, not points
        sel = np.flatnonzero(part == p)
        if sel.size <= k:
            C[p] = points[np.r_[sel, np.full(k - sel.size, sel[0])]]
        else:
            C[p] = cluster_coreset(points[sel], weights[sel], k, objective, rng_of(int(p)), np.zeros(d), n_init=3)
    return C


def label(y: np.ndarray, part: np.ndarray, C: np.ndarray) -> np.ndarray:
    """Each point's nearest center among its own part's k (ties to the lowest index): a row's label is a
    function of that row and the centers alone (:func:`~dpstream.rings.partition_nearest`)."""
    lab = np.zeros(len(y), dtype=np.int64)
    if C.shape[1] == 1:  # one cell per part: where its center is does not matter
        return lab
    order = np.argsort(part, kind="stable")
    sp = part[order]
    starts = np.flatnonzero(np.r_[True, sp[1:] != sp[:-1]]) if sp.size else np.zeros(0, dtype=np.int64)
    for a, b in zip(starts, np.r_[starts[1:], sp.size]):  # a loop over non-empty parts, not points
        idx = order[a:b]
        lab[idx] = partition_nearest(y[idx], C[sp[a]])[0]
    return lab
