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
    """The natural-but-wrong A: only parts that received points are processed (P6)."""
    orig = sc_mod.Semicoreset.release

    def release(self, block, key, *a):
        used = _parts_with_points(block)
        if used.size == 0:
            return WeightedSet.empty(self.cfg.dim)
        out = orig(self, _restrict(block, used), key, *a)
        return WeightedSet(out.points, out.weights, used[out.part])

    monkeypatch.setattr(sc_mod.Semicoreset, "release", release)


def ring_centers_from_raw_points(monkeypatch):
    """The natural-but-wrong rule: a new epoch's ring centers are a (non-private) k-means of the raw
    points of the adoption tick instead of released centers (P8)."""
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


class _DataDirectedBlock:
    """A tree block whose split directions are the principal axes of its own (normalised) points,
    chosen when the block is released: a 'data-adaptive' split instead of keyed random hyperplanes."""

    def __init__(self, centers, radii, dim, grid, depth, keyed):
        self.centers, self.radii = np.asarray(centers, dtype=float), np.asarray(radii, dtype=float)
        self.dim, self.grid, self.depth = dim, grid, depth
        self.V = np.asarray(keyed, dtype=float)  # what it shows until it has seen its points
        self._x, self._part, self.n = [], [], 0

    @property
    def n_parts(self) -> int:
        return self.centers.shape[0]

    def add(self, x, part):
        self._x.append(np.asarray(x, dtype=float).reshape(-1, self.dim))
        self._part.append(np.asarray(part, dtype=np.int64))
        self.n += len(self._x[-1])

    def compact(self):
        x = np.concatenate(self._x) if self._x else np.zeros((0, self.dim))
        part = np.concatenate(self._part) if self._part else np.zeros(0, np.int64)
        y = blocks_mod.normalise(x, part, self.centers, self.radii)
        vals, vecs = np.linalg.eigh(y.T @ y)  # principal axes of the uncentred second moment
        V = vecs[:, ::-1][:, :self.depth].T
        sketch = blocks_mod.LeafSketch(self.centers, self.radii, V, self.dim, self.grid)
        sketch.add(x, part)
        self.V, self._sketch = sketch.V, sketch
        return sketch.compact()

    def leaf_sums(self, leaves):  # the sketch's (compact, which the tree reads first, built it)
        return self._sketch.leaf_sums(leaves)


def tree_directions_from_data(monkeypatch):
    """The natural-but-wrong tree: split along the block's principal axes (computed from its points)
    instead of directions drawn from the key; the directions, and so the partition of every other
    record, then depend on each record."""

    def open_block(self, centers, radii, key, directions=None):
        keyed = self.directions(key) if directions is None else directions
        return _DataDirectedBlock(centers, radii, self.cfg.dim, self.grid, self.cfg.tree_depth, keyed)

    monkeypatch.setattr(sc_mod.TreeSemicoreset, "open_block", open_block)


def window_from_raw_points(monkeypatch):
    """The natural-but-wrong window: a closed run enters the next runs' window_centers by its raw
    points (all weight 1) instead of by its final released coreset."""
    import dpstream.runs as runs_mod

    orig_step, orig_roll = runs_mod.RunSequence.step, runs_mod.RunSequence._roll

    def step(self, points, *a, **kw):
        self.__dict__.setdefault("_raw", []).append(np.asarray(points, dtype=float).reshape(-1, self.cfg.dim))
        return orig_step(self, points, *a, **kw)

    def roll(self):
        raw = np.vstack(self._raw[:-1])  # the closed run's points (the last one is the new run's first tick)
        self._raw = self._raw[-1:]
        orig_roll(self)
        self.closed[-1] = (self.run - 1, raw, np.ones(len(raw)))

    monkeypatch.setattr(runs_mod.RunSequence, "step", step)
    monkeypatch.setattr(runs_mod.RunSequence, "_roll", roll)
