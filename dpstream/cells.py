"""Black box A with cells (``tree_cells`` > 0): the tree locates, one noisy mean per cell releases.

The hyperplane tree's leaves are cones of random hyperplanes: on high-dimensional data they do not
follow the clusters, and a leaf's mean mixes several of them. Measured on one block of a short stream
(``benchmarks/block_tree_variants.py``), the tree's noisy leaf means still *locate* the clusters well
enough for a k-means of them; what a d-dimensional noisy sum per leaf cannot do, one noisy sum per
Voronoi cell of those k centers can. So, per part:

1. the tree of :class:`~dpstream.semicoresets.TreeSemicoreset` on the part's points, with the share
   1 − f of A's budget (the plan's ``a_count_scale``, ``a_sum_scale``): noisy leaf means and counts;
2. k centers: a weighted k-means of those leaves (post-processing of step 1; keyed per part);
3. every point of the part labelled with its nearest center (a function of the point and the centers
   alone), and per (part, cell) one noisy count and one noisy quantised sum with the share f
   (``a_cell_count_scale``, ``a_cell_sum_scale``): a record enters D + 1 tree counts, one leaf sum,
   one cell count and one cell sum, each charged in the plan;
4. the output: the k cell means (noisy sum / noisy count, clipped to the ball) weighted by their noisy
   counts, zeroed below the cells' own phantom-mass threshold (P14).

The output shape is public: k cells per part, every part processed (P6). The block keeps raw points
(the labels of step 3 need them): :class:`CellBlock`.
"""
from __future__ import annotations

import math

import numpy as np

from .blocks import LeafSketch, RawBlock
from .offline import cluster_coreset
from .semicoresets import LloydSemicoreset, TreeSemicoreset, WeightedSet, group_sum


CELL_KEEP_FACTOR = 3.0


class CellBlock(RawBlock):
    """Raw points and part indices (as :class:`RawBlock`) plus the tree's directions of the block."""

    def __init__(self, centers, radii, directions, dim: int):
        super().__init__(centers, radii, dim)
        self.V = np.asarray(directions, dtype=float).reshape(-1, dim)


class TreeCellsSemicoreset(TreeSemicoreset):
    name = "tree"

    def open_block(self, centers, radii, key, directions=None):
        V = self.directions(key) if directions is None else directions
        return CellBlock(centers, radii, V, self.cfg.dim)

    def cell_tail(self, n_cells: int, key=None) -> float:
        """τ of the cells' counts: the bound of :meth:`count_tail` (run-wide) at the cells' count scale."""
        n = max(int(n_cells), 1) * self.run_wide_blocks(key)
        s, beta = self.plan.a_cell_count_scale, self.cfg.weight_beta
        if self.plan.a_mechanism == "gaussian":
            return s * math.sqrt(2.0 * math.log(2.0 * n / beta))
        return s * math.log(2.0 * n / beta)

    def leaf_threshold(self) -> float:
        """θ of the block-size rule, for a cell: a noisy count that keeps its d-dimensional mean's noise at
        a third of the ball's radius (the tree's default keep factor: ``tree_keep_factor`` tunes the
        tree, which only locates here, and must not shrink the blocks)."""
        s = self.plan.a_cell_sum_scale
        per = s if self.plan.a_mechanism == "gaussian" else s * math.sqrt(2.0)
        return max(self.cell_tail(1), CELL_KEEP_FACTOR * math.sqrt(self.cfg.dim) * per)

    def run(self, block, key) -> WeightedSet:
        cfg, d, k = self.cfg, self.cfg.dim, self.cfg.n_clusters
        n_parts = block.n_parts
        x, part = block.raw()
        sketch = LeafSketch(block.centers, block.radii, block.V, d, self.grid)
        sketch.add(x, part)
        leaves = super().run(sketch, key)  # step 1: the tree, exactly as without cells
        y, part = block.points()
        C = np.zeros((n_parts, k, d))  # step 2: no leaf, the ball's center (a public default)
        if k > 1:  # with one cell per part its center does not matter
            for p in np.unique(leaves.part):  # a loop over parts with leaves, not points
                sel = np.flatnonzero(leaves.part == p)
                if sel.size <= k:
                    # the leaves themselves, the first repeated (a copy never wins a point): padding with
                    # their mean instead would draw every point, since a noisy leaf mean's norm is inflated
                    # by its noise and the mean of several is not
                    C[p] = leaves.points[np.r_[sel, np.full(k - sel.size, sel[0])]]
                    continue
                rng = self.noise.generator(key + ("cells", "fit", int(p)))
                C[p] = cluster_coreset(leaves.points[sel], leaves.weights[sel], k, cfg.objective, rng,
                                       np.zeros(d), n_init=3)
            label = LloydSemicoreset._labels(y, part, C) if len(y) else np.zeros(0, dtype=np.int64)
        else:
            label = np.zeros(len(y), dtype=np.int64)
        n_cells = n_parts * k
        cell = part * k + label
        owner = np.repeat(np.arange(n_parts), k)
        counts = np.bincount(cell, minlength=n_cells)  # step 3: one count and one sum per record
        noisy = counts + self.part_noise(key + ("cells", "count"), owner, scale=self.plan.a_cell_count_scale,
                                         per_part=False)
        sums_q = group_sum(cell, self.quantise(y), n_cells) if len(y) else np.zeros((n_cells, d), dtype=np.int64)
        z = self.part_noise(key + ("cells", "sum"), owner, (d,), self.plan.a_cell_sum_scale * self.grid,
                            per_part=False)
        means = (sums_q + z) / self.grid / np.maximum(noisy, 1)[:, None]
        nrm = np.linalg.norm(means, axis=1)
        means = np.where((nrm > 1)[:, None], means / np.maximum(nrm, 1e-300)[:, None], means)
        w = np.where(noisy >= self.cell_tail(n_cells, key), noisy, 0)  # step 4
        return WeightedSet(means, w, owner)
