"""Deliberately broken engine variants shared by several privacy tests (tests only).

Each function monkeypatches one natural-but-wrong implementation into dpstream so a
test can show that its check catches it.
"""
import numpy as np

import dpstream.blocks as blocks_mod
import dpstream.semicoresets as sc_mod
from dpstream.semicoresets import WeightedSet


def _parts_with_points(block):
    if isinstance(block, blocks_mod.RawBlock):
        return np.unique(block.raw()[1])
    keys, _, _ = block.compact()
    return np.unique(keys >> block.depth)


def _restrict(block, used):
    """The same block with only the parts ``used`` (renumbered 0..len(used)-1)."""
    if isinstance(block, blocks_mod.RawBlock):
        x, p = block.raw()
        sub = blocks_mod.RawBlock(block.centers[used], block.radii[used], block.dim)
        sub.add(x, np.searchsorted(used, p))
        return sub
    keys, counts, sums = block.compact()
    sub = blocks_mod.LeafSketch(block.centers[used], block.radii[used], block.V, block.dim, block.grid,
                                block.with_sums)
    mask = (1 << block.depth) - 1
    sub.keys = (np.searchsorted(used, keys >> block.depth) << block.depth) | (keys & mask)
    sub.counts, sub.sums, sub.n = counts, sums, block.n
    return sub


def a_skips_empty_parts(monkeypatch):
    """The natural-but-wrong A: only parts that received points are processed (review finding 1)."""
    orig = sc_mod.Semicoreset.release

    def release(self, block, key):
        used = _parts_with_points(block)
        if used.size == 0:
            return WeightedSet.empty(self.cfg.dim)
        out = orig(self, _restrict(block, used), key)
        return WeightedSet(out.points, out.weights, used[out.part])

    monkeypatch.setattr(sc_mod.Semicoreset, "release", release)


def ring_centers_from_raw_points(monkeypatch):
    """The natural-but-wrong rule: a new epoch's ring centers are a (non-private) k-means of the raw
    points of the adoption tick instead of released centers (review finding 10)."""
    import dpstream.engine as engine_mod
    from dpstream.offline import cluster_coreset

    orig_step = engine_mod.Engine.step

    def step(self, points, *a, **kw):
        self._raw_tick = np.asarray(points, dtype=float).reshape(-1, self.cfg.dim)
        return orig_step(self, points, *a, **kw)

    def ring_centers(self, t, count):
        x = self._raw_tick
        if len(x) < self.cfg.n_clusters:
            return np.repeat(self.center[None, :], self.cfg.n_clusters, axis=0)
        # k-means++ and Lloyd on the raw points, unweighted and unnoised (the audits run it hundreds of
        # times: scikit-learn's KMeans spent ~0.2 s a fit in thread start-up and validation)
        return cluster_coreset(x, np.ones(len(x)), self.cfg.n_clusters, "kmeans", np.random.default_rng(0),
                               self.center, n_init=3)

    monkeypatch.setattr(engine_mod.Engine, "step", step)
    monkeypatch.setattr(engine_mod.Engine, "_ring_centers", ring_centers)
