"""``semicoreset="lloyd"``: DP-Lloyd in each part of a block, turned into a semicoreset by the paper's
Theorem 7 (its k noisy centers per part, weighted by one last noisy count each)."""
from __future__ import annotations

import numpy as np

from . import cells
from .blocks import RawBlock, clipped_means, group_sum
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
            # a point's label: its own row and its part's centers (every part's counts and sums are noised
            # below whether it holds points or not)
            cell = part * k + cells.label(y, part, C) if len(y) else np.zeros(0, dtype=np.int64)
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
