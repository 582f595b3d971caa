"""``semicoreset="lloyd"``: DP-Lloyd in each part of a block, turned into a semicoreset by the paper's
Theorem 7 (its k noisy centers per part, weighted by one last noisy count each)."""
from __future__ import annotations

import numpy as np

from .blocks import RawBlock, clipped_means, group_sum
from .rings import partition_nearest
from .semicoreset_base import Semicoreset, WeightedSet


class LloydSemicoreset(Semicoreset):
    """DP-Lloyd per part, converted by Theorem 7.

    k data-independent initial centers (keyed draws in B(0, 0.5)), I iterations
    of noisy counts and noisy quantised sums per (part, center), then one more
    noisy count per (part, center) for the weights.  A record enters I+1 counts
    and I sums.  A center whose noisy count is < 1 keeps its previous position
    (a branch on a noisy value, not on an exact count). The block keeps raw points.
    """

    name = "lloyd"

    def open_block(self, centers, radii, key, directions=None):
        return RawBlock(centers, radii, self.cfg.dim)

    def run(self, block, key):
        cfg = self.cfg
        k, d = cfg.n_clusters, cfg.dim
        y, part = block.points()
        n_parts = block.n_parts
        g = self.noise.generator(key + ("init",), k * d + k)
        init = g.normal(size=(k, d))
        init *= (0.5 * g.uniform(size=k) ** (1.0 / d) / np.linalg.norm(init, axis=1))[:, None]
        C = np.broadcast_to(init, (n_parts, k, d)).copy()
        n_cells = n_parts * k
        owner = np.repeat(np.arange(n_parts), k)
        for it in range(cfg.lloyd_iters + 1):
            cell = part * k + self._labels(y, part, C) if len(y) else np.zeros(0, dtype=np.int64)
            counts = np.bincount(cell, minlength=n_cells)
            noisy = self.noisy_counts(key + ("count", it), counts, owner)
            if it == cfg.lloyd_iters:
                break
            sums = self.noisy_sums(key + ("sum", it), group_sum(cell, self.quantise(y), n_cells)
                                   if len(y) else np.zeros((n_cells, d), dtype=np.int64), owner)
            newc = clipped_means(sums, noisy)
            flat = C.reshape(n_cells, d)
            flat = np.where((noisy >= 1)[:, None], newc, flat)
            C = flat.reshape(n_parts, k, d)
        w = np.where(noisy >= self.count_tail(n_cells, key=key), noisy, 0)
        return WeightedSet(C.reshape(n_cells, d), w, owner)

    @staticmethod
    def _labels(y, part, C):
        """Nearest of its part's centers for every point, one part at a time (bounded memory).

        The order of the work depends on which parts hold points, but its result does
        not: every part's counts and sums are noised below whether it is empty or not.
        """
        lab = np.empty(len(y), dtype=np.int64)
        order = np.argsort(part, kind="stable")
        sp = part[order]
        starts = np.flatnonzero(np.r_[True, sp[1:] != sp[:-1]])
        ends = np.r_[starts[1:], sp.size]
        for a, b in zip(starts, ends):  # loop over non-empty parts, not points
            idx = order[a:b]
            lab[idx] = partition_nearest(y[idx], C[sp[a]])[0]  # a point's label: its own row and the centers
        return lab
