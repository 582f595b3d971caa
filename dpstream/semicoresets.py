"""Black box A: DP semicoresets of a block in known balls (Lemma 4, Theorem 7).

One call covers a set of *parts*: part p is the ball (c_p, r_p) of one
(ring, center) pair.  Points are normalised to y = (x − c_p)/r_p and clipped
again to ‖y‖ ≤ 1 (P10), so every sensitivity holds and the noise
scales with the ring radius (Lemma 4).  Parts are disjoint, so one call is one
mechanism by parallel composition; a record enters at most one call.

Every implementation is a *total* function (P6): all parts are
processed, empty ones included; nothing branches on an exact count; output
shapes depend only on public parameters and noisy values.  Released counts are
integers plus integer noise and sums are quantised to a public grid before
integer noise (P11).  Weights below τ_w = (noise tail over the parts)
are zeroed: post-processing that stops empty parts adding phantom mass
(P14).

Interface: ``block = A.open_block(centers, radii, key)`` opens a level-0 block with its parts
(the key draws only the tree's directions: the engine passes (epoch, ring), so a ring's blocks share
them) (:mod:`dpstream.blocks`: the form each A reads —
exact leaf sums for the tree and snap, raw points for DP-Lloyd); ``block.add(x, part)``
takes the ring's points tick by tick; ``A.release(block, key)`` is the DP step, run once per
block. A part's output depends on that part's points and its own noise only (a Beam stage may
shard parts): the tree, whose shape per part below the root is a noisy decision, keys those
draws by (block key, purpose, part); every public shape (the roots, snap, lloyd) draws one
array per purpose in part order.
``A(x, part, centers, radii, key)`` does all three at once.
The interface, the output and the noise helpers every A shares live in :mod:`dpstream.semicoreset_base`.

Implementations:
* ``TreeSemicoreset`` (default): noisy-count / noisy-mean LSH tree (the hierarchical-partition coresets of offline DP clustering).
* ``LloydSemicoreset`` (:mod:`dpstream.lloyd_semicoreset`): DP-Lloyd turned into a semicoreset by the paper's
  Theorem 7.
* ``SnapSemicoreset``: each part snapped to its ball's center, the paper's baseline.
  With ``tree_cells`` > 0 its leaves only locate k centers per part and one noisy mean per Voronoi
  cell of the raw block is released (:mod:`dpstream.cells`).
"""
from __future__ import annotations

import copy
import math
from dataclasses import replace
from typing import Optional

import numpy as np

from . import cells
from .blocks import CellBlock, LeafSketch, PointSketch, clipped_means, quantised_group_sum
from .lloyd_semicoreset import LloydSemicoreset
from .noise import NoiseSource
from .params import EngineConfig
from .privacy import PrivacyPlan
from .semicoreset_base import Semicoreset, WeightedSet

__all__ = ["LloydSemicoreset", "Semicoreset", "SnapSemicoreset", "TreeSemicoreset", "WeightedSet",
           "make_semicoreset"]


class SnapSemicoreset(Semicoreset):
    """A(block) = {(c_p, n_p + noise)} per part: Theorem 7 with C = {c_p} (the paper's baseline); the
    paper's baseline ("assign to the bicriteria centers")."""

    name = "snap"

    def open_block(self, centers, radii, key, directions=None):
        return LeafSketch(centers, radii, np.zeros((0, self.cfg.dim)), self.cfg.dim, self.grid, with_sums=False)

    def run(self, block, key):
        keys, cnt, _ = block.compact()
        n_parts = block.n_parts
        counts = np.zeros(n_parts, dtype=np.int64)
        counts[keys] = cnt
        w = self.noisy_counts(key + ("count",), counts, np.arange(n_parts))
        w = np.where(w >= self.count_tail(n_parts, key=key), w, 0)
        return WeightedSet(np.zeros((n_parts, self.cfg.dim)), w, np.arange(n_parts))


class TreeSemicoreset(Semicoreset):
    """Noisy-count / noisy-mean tree coreset.

    Per part, a binary tree of depth D splits by random hyperplanes through the
    ball's center (D keyed directions, shared by the parts and blocks of a ring: a SimHash LSH,
    i.e. the partition lives in a data-independent D-dimensional random projection while
    sums are noised in the original space). Every node on a branched path gets a noisy
    count; a node branches iff its noisy count ≥ θ_b, and then *both* children are
    counted (the tree's shape is a function of noisy counts only). Leaves are kept nodes
    without kept children; each releases (noisy sum / noisy count, noisy count), with
    the sum of the leaf's quantised normalised points. (Keeping an unkept child's points
    in its parent instead — no mass lost — was measured worse everywhere but china: the
    coarse parent means sit between clusters.) A record enters D+1 counts and
    one sum: the plan's multiplicities (D+1, 1). The block is a :class:`LeafSketch`
    (exact per-leaf counts and sums), from which every count and sum below is exact.
    """

    name = "tree"
    per_part_noise = True
    last_mode = None  # "cells" or "tree": the mode of the last release (telemetry for benchmarks and tests)
    _gated = None  # the plain tree of gated blocks (its configuration and scales), made at first use

    def __init__(self, cfg: EngineConfig, plan: PrivacyPlan, noise: NoiseSource):
        super().__init__(cfg, plan, noise)
        if cfg.cells_gate and not (cfg.bicriteria or cfg.count_counter):
            raise ValueError("cells_gate needs a DP count estimate: a stream counter (privacy_split with 4 "
                             "weights) or the bicriteria")

    def use_cells(self, n_hat: Optional[float], n_parts: int) -> bool:
        """``cells_gate`` = G (P22): the cells on a block iff they locate in fewer dimensions than d (when
        ``cells_locate_dims`` is set) and the DP count estimate ``n_hat`` of the stream's points since the
        ring's last release reaches G · n_parts · k · θ_k — on average G·θ_k points for each of the k cells of every part,
        θ_k the cells' keep threshold — and, with ``cells_gate_max`` = G_up, stays under G_up · n_parts · k ·
        θ_tree, θ_tree the plain tree's keep threshold (a block of n points keeps at most n/θ_tree leaves, so under
        that bound the plain tree resolves about k leaves per part or fewer and the cells, k per part by
        construction, are the better mode; above it the plain tree resolves more and wins). Public numbers and a
        released DP value only: post-processing."""
        cfg = self.cfg
        if not cfg.tree_cells:
            return False
        if not cfg.cells_gate:
            return True
        if cfg.cells_locate_dims and cfg.cells_locate_dims >= cfg.dim:
            return False
        if n_hat is None:
            raise ValueError("cells_gate needs the DP count estimate of the block's ring")
        unit = n_parts * cfg.n_clusters
        if cfg.cells_gate_max and float(n_hat) >= cfg.cells_gate_max * unit * self.gated_tree().leaf_threshold():
            return False  # enough points for the plain tree to resolve more than k leaves per part: it wins
        return float(n_hat) >= cfg.cells_gate * unit * self.cells_threshold()

    def run_gated(self, block, key, n_hat):
        if not self.cfg.tree_cells:
            return self._leaves(block, key)
        if self.use_cells(n_hat, block.n_parts):
            self.last_mode = "cells"
            return self._cells(block, key)
        self.last_mode = "tree"
        return self._plain_tree(block, key)

    def gated_tree(self) -> "TreeSemicoreset":
        """The plain tree of gated blocks: :meth:`EngineConfig.gated_tree` at the plan's ``gated_lines``."""
        if self._gated is None:
            lines = {ln.component.split(" (")[0]: ln.noise for ln in self.plan.gated_lines}
            plain = copy.copy(self)
            plain.cfg = self.cfg.gated_tree()
            plain.plan = replace(self.plan, a_count_scale=lines["semicoreset A counts"],
                                 a_sum_scale=lines["semicoreset A sums"], gated_lines=[])
            self._gated = plain
        return self._gated

    def _plain_tree(self, block, key):
        """The plain tree on a cells block the gate keeps from the cells, exactly as a run without cells
        releases it: the same keyed directions of the ring (:meth:`_plain_directions`) and noise keys (one
        mode runs per block, so no draw serves two queries), at A's whole budget (the plan's ``gated_lines``)."""
        plain = self.gated_tree()
        sketch = LeafSketch(block.centers, block.radii, self._plain_directions(key), plain.cfg.dim, self.grid)
        x, part = block.raw()
        sketch.add(x, part)
        return plain._leaves(sketch, key)

    def _plain_directions(self, key):
        """The gated tree's directions for the ring of block ``key``: a run without cells draws them under the
        ring's directions key (with the gate, the cells' tree draws under a key of its own, :meth:`directions`,
        so no key is drawn at two sizes); drawn once per ring, so every gated block of a ring splits along the
        same directions; only the open epoch's rings are kept."""
        ring = tuple(key[:3])
        cache = self.__dict__.setdefault("_plain_dirs", {})
        if ring not in cache:
            for old in [r for r in cache if r[:2] != ring[:2]]:
                del cache[old]
            cache[ring] = self.gated_tree().directions(ring)
        return cache[ring]

    def directions(self, key):
        """(D, d) keyed hyperplanes; with cells located in a projection, the :class:`~dpstream.cells.Projected`
        draws (hyperplanes in the projection and the projection) instead."""
        D, d = self.cfg.tree_depth, self.cfg.dim
        if self.cfg.cells_gate:  # the ring's directions key is the gated plain tree's (:meth:`_plain_directions`)
            key = tuple(key) + ("cells",)
        if cells.locate_dims(self.cfg):
            return cells.draw_projected(self.noise, key, D, cells.locate_dims(self.cfg), d)
        return self.noise.generator(key + ("directions",), D * d).normal(size=(D, d))

    def open_block(self, centers, radii, key, directions=None):
        V = self.directions(key) if directions is None else directions
        if self.cfg.tree_cells:
            return CellBlock(centers, radii, V, self.cfg.dim)
        return LeafSketch(centers, radii, V, self.cfg.dim, self.grid)

    def leaf_threshold(self) -> float:
        """θ_k: the cells' keep threshold with cells; with ``cells_gate`` the gated tree's, as a run without
        cells has it (the block size and the first flush follow the plain tree that most blocks of a long
        stream run)."""
        if not self.cfg.tree_cells:
            return super().leaf_threshold()
        if self.cfg.cells_gate:
            return self.gated_tree().leaf_threshold()
        return self.cells_threshold()

    def cells_threshold(self) -> float:
        """The cells' keep threshold: a cell's noisy count must pass its count tail and its mean's sum noise."""
        s = self.plan.a_cell_sum_scale
        per = s if self.plan.a_mechanism == "gaussian" else s * math.sqrt(2.0)
        return max(self.cell_tail(1), cells.CELL_KEEP_FACTOR * math.sqrt(self.cfg.dim) * per)

    def cell_tail(self, n_cells: int, key=None) -> float:
        """τ of the cells' counts: :meth:`count_tail`'s run-wide bound at the cells' count scale."""
        n = max(int(n_cells), 1) * self.run_wide_blocks(key)
        s, beta = self.plan.a_cell_count_scale, self.cfg.weight_beta
        if self.plan.a_mechanism == "gaussian":
            return s * math.sqrt(2.0 * math.log(2.0 * n / beta))
        return s * math.log(2.0 * n / beta)

    def thresholds(self, n_parts: int, key=None, dim: int = None):
        """(θ_root, θ_keep, θ_branch) of a release with ``n_parts`` parts (public numbers) of block ``key``
        whose sums have ``dim`` coordinates (d unless the cells locate in a projection)."""
        cfg = self.cfg
        theta_k = max(self.count_tail(n_parts, run_wide=False), cfg.tree_keep_factor * self.sum_noise_norm(dim))
        theta_root = max(theta_k, self.count_tail(n_parts, key=key))  # an empty part's root must not pass
        return theta_root, theta_k, max(cfg.tree_branch_factor, 1.0) * theta_k

    def run(self, block, key):
        return self.run_gated(block, key, None)

    def _cells(self, block, key):
        """Steps 1–4 of :mod:`dpstream.cells` on a :class:`CellBlock` (located in its projection, with Lloyd
        steps, when the options say so)."""
        d, k, n_parts = self.cfg.dim, self.cfg.n_clusters, block.n_parts
        y, part = block.points()
        if isinstance(block.V, cells.Projected):
            loc = cells.project(y, block.V.P)  # the rows the cells are located with
            n_loc = loc.shape[1]
            sketch = LeafSketch(np.zeros((n_parts, n_loc)), np.ones(n_parts), block.V.V, n_loc, self.grid)
            sketch.add(loc, part)
        else:
            loc = y
            # the tree of LeafSketch.add(raw points), from the y at hand (the same normalisation of the same
            # rows): its counts table, and its leaves' sums from the points once the leaves are known
            sketch = PointSketch(block.centers, block.radii, block.V, d, self.grid, y, part)
        leaves = self._leaves(sketch, key)
        k_loc = k * self.cfg.cells_overseed  # over-seeded: r·k centers until the reduction below
        C = cells.centers_from_leaves(leaves.points, leaves.weights, leaves.part, n_parts, k_loc, self.cfg.objective,
                                      lambda p: self.noise.generator(key + ("cells", "fit", p)))
        if self.cfg.cells_lloyd_steps:
            C, weights = cells.lloyd_steps_counted(self, loc, part, C, key)
        elif k_loc > k:
            weights = cells.leaf_weights(leaves.points, leaves.weights, leaves.part, C)
        if k_loc > k:
            C = cells.reduce_centers(C, weights, k, self.cfg.objective,
                                     lambda p: self.noise.generator(key + ("cells", "reduce", p)))
        n_cells = n_parts * k
        cell = part * k + cells.label(loc, part, C)
        owner = np.repeat(np.arange(n_parts), k)  # a public shape: one draw per purpose, in part order
        noisy = self.noisy_counts(key + ("cells", "count"), np.bincount(cell, minlength=n_cells), owner,
                                  scale=self.plan.a_cell_count_scale, per_part=False)
        sums = self.noisy_sums(key + ("cells", "sum"), quantised_group_sum(cell, y, self.grid, n_cells), owner,
                               scale=self.plan.a_cell_sum_scale, per_part=False)
        means = clipped_means(sums, noisy)
        w = np.where(noisy >= self.cell_tail(n_cells, key), noisy, 0)
        return WeightedSet(means, w, owner)

    def _leaves(self, block, key):
        D, d = block.depth, block.dim  # d: the sketch's, p when the cells locate in a projection
        keys, ecount, _ = block.compact()
        n_parts = block.n_parts
        theta_root, theta_k, theta_b = self.thresholds(n_parts, key, None if d == self.cfg.dim else d)
        node_key = np.arange(n_parts, dtype=np.int64)  # key at level l: part·2^l + path code
        parent = np.full(n_parts, -1, dtype=np.int64)
        levels = []  # per level: (keys, noisy counts, kept, parent index)
        for lv in range(D + 1):
            pref = keys >> (D - lv)
            counts = np.zeros(node_key.size, dtype=np.int64)
            if pref.size:
                pos = np.minimum(np.searchsorted(node_key, pref), node_key.size - 1)
                hit = node_key[pos] == pref
                np.add.at(counts, pos[hit], ecount[hit])
            # level 0 has one node per part (a public shape): one draw in part order; below, a
            # part's nodes are its own noisy decisions, so each part draws under its own key
            noisy = counts + self.part_noise(key + ("count", lv), node_key >> lv, per_part=lv > 0)
            kept = noisy >= (theta_root if lv == 0 else theta_k)
            branched = kept & (noisy >= theta_b) & (lv < D)  # branched ⇒ kept: one leaf per path
            levels.append((node_key, noisy, kept, parent))
            if lv == D or not branched.any():
                break
            bidx = np.flatnonzero(branched)  # children of branched nodes; keys stay sorted
            parent = np.repeat(bidx, 2)
            node_key = np.repeat(node_key[bidx] * 2, 2) + np.tile([0, 1], bidx.size)
        # leaves: kept nodes with no kept child (points of an unkept child are not released)
        has_kept_child = [np.zeros(lv[0].size, dtype=bool) for lv in levels]
        for lv in range(len(levels) - 1, 0, -1):
            _, _, kept, par = levels[lv]
            np.logical_or.at(has_kept_child[lv - 1], par[kept], True)
        leaf_key, leaf_w, leaf_part = [], [], []
        for lv, (nk, noisy, kept, _) in enumerate(levels):
            li = np.flatnonzero(kept & ~has_kept_child[lv])
            if li.size == 0:
                continue
            leaf_key.append((lv, nk[li]))
            leaf_w.append(noisy[li])
            leaf_part.append(nk[li] >> lv)
        if not leaf_w:
            return WeightedSet.empty(d)
        w = np.concatenate(leaf_w)
        parts = np.concatenate(leaf_part)
        order = np.argsort(parts, kind="stable")  # group each part's leaves for its own sum key
        w, parts = w[order], parts[order]
        sums_q = block.leaf_sums(leaf_key)[order]  # exact integer sums: the table's or the points' alike
        means = clipped_means(self.noisy_sums(key + ("sum",), sums_q, parts), w)
        return WeightedSet(means, w, parts)


SEMICORESETS = {"tree": TreeSemicoreset, "lloyd": LloydSemicoreset, "snap": SnapSemicoreset}


def make_semicoreset(cfg: EngineConfig, plan: PrivacyPlan, noise: NoiseSource) -> Semicoreset:
    return SEMICORESETS[cfg.semicoreset](cfg, plan, noise)
