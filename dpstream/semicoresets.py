"""Black box A: DP semicoresets of a block in known balls (notes §12; Lemma 4, Theorem 7).

One call covers a set of *parts*: part p is the ball (c_p, r_p) of one
(ring, center) pair.  Points are normalised to y = (x − c_p)/r_p and clipped
again to ‖y‖ ≤ 1 (review finding 18), so every sensitivity holds and the noise
scales with the ring radius (Lemma 4).  Parts are disjoint, so one call is one
mechanism by parallel composition; a record enters at most one call.

Every implementation is a *total* function (review finding 1): all parts are
processed, empty ones included; nothing branches on an exact count; output
shapes depend only on public parameters and noisy values.  Released counts are
integers plus integer noise and sums are quantised to a public grid before
integer noise (finding 6).  Weights below τ_w = (noise tail over the parts)
are zeroed: post-processing that stops empty parts adding phantom mass
(finding 14).

Implementations:
* ``TreeSemicoreset`` (default): noisy-count / noisy-mean LSH tree (§12(a)/(b)).
* ``LloydSemicoreset``: DP-Lloyd turned into a semicoreset by Theorem 7 (§12(c)).
* ``SnapSemicoreset``: each part snapped to its ball's center (§12(d)), the baseline.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .noise import NoiseSource
from .params import EngineConfig
from .privacy import PrivacyPlan


@dataclass
class WeightedSet:
    points: np.ndarray  # (m, d)
    weights: np.ndarray  # (m,)
    part: np.ndarray  # (m,) part index of each output point (for A outputs), or -1

    @classmethod
    def empty(cls, d: int) -> "WeightedSet":
        return cls(np.zeros((0, d)), np.zeros(0), np.zeros(0, dtype=np.int64))

    def __len__(self):
        return self.points.shape[0]

    def select(self, mask) -> "WeightedSet":
        return WeightedSet(self.points[mask], self.weights[mask], self.part[mask])

    @staticmethod
    def concat(sets, d: int) -> "WeightedSet":
        sets = [s for s in sets if s is not None and len(s)]
        if not sets:
            return WeightedSet.empty(d)
        return WeightedSet(np.concatenate([s.points for s in sets]), np.concatenate([s.weights for s in sets]),
                           np.concatenate([s.part for s in sets]))


def group_sum(index: np.ndarray, values: np.ndarray, n_groups: int) -> np.ndarray:
    """Σ of rows of ``values`` per group index (no per-point Python)."""
    out = np.zeros((n_groups,) + values.shape[1:], dtype=values.dtype)
    if index.size:
        np.add.at(out, index, values) if values.ndim == 1 else _add_rows(out, index, values)
    return out


def _add_rows(out, index, values):
    order = np.argsort(index, kind="stable")
    si = index[order]
    starts = np.flatnonzero(np.r_[True, si[1:] != si[:-1]])
    out[si[starts]] += np.add.reduceat(values[order], starts, axis=0)


class Semicoreset:
    name = "base"

    def __init__(self, cfg: EngineConfig, plan: PrivacyPlan, noise: NoiseSource):
        self.cfg = cfg
        self.plan = plan
        self.noise = noise
        self.grid = float(2 ** cfg.sum_grid_bits)
        self.calls = []  # (key, number of input points) of each call, for tracer tests when enabled
        self.record_calls = False

    # -- helpers shared by the implementations --------------------------------
    def normalise(self, x, part, centers, radii):
        y = (x - centers[part]) / radii[part][:, None]
        nrm = np.linalg.norm(y, axis=1)
        over = nrm > 1.0
        if over.any():  # float rounding at dist ≈ r_i (review finding 18)
            y[over] /= nrm[over][:, None] * (1 + 1e-12)
        return y

    def noisy_counts(self, key, counts: np.ndarray) -> np.ndarray:
        return counts.astype(np.int64) + self.noise.int_noise(key, counts.shape, self.plan.a_mechanism,
                                                              self.plan.a_count_scale)

    def noisy_sums(self, key, y_sums_q: np.ndarray) -> np.ndarray:
        """Quantised integer sums + integer noise (grid units) → float sums in normalised units."""
        z = self.noise.int_noise(key, y_sums_q.shape, self.plan.a_mechanism, self.plan.a_sum_scale * self.grid)
        return (y_sums_q + z) / self.grid

    def quantise(self, y: np.ndarray) -> np.ndarray:
        # truncation toward zero keeps |q_j| ≤ |y_j|·grid, so ℓ1/ℓ2 bounds of y carry over
        return np.trunc(y * self.grid).astype(np.int64)

    def count_tail(self, n_draws: int, run_wide: bool = True) -> float:
        """τ_w: with prob ≥ 1−β no noise among ``n_draws`` count draws exceeds it.

        ``run_wide`` takes the union bound over every tick of the run as well (a public
        number), so empty parts add no phantom mass over the whole stream (review finding 14);
        counts *inside* a part whose own count already passed use the bound of one call.
        """
        beta = self.cfg.weight_beta
        n = max(int(n_draws), 1) * (self.cfg.horizon_ticks if run_wide else 1)
        s = self.plan.a_count_scale
        if self.plan.a_mechanism == "gaussian":
            return s * math.sqrt(2.0 * math.log(2.0 * n / beta))
        return s * math.log(2.0 * n / beta)

    def sum_noise_norm(self) -> float:
        s = self.plan.a_sum_scale
        per = s if self.plan.a_mechanism == "gaussian" else s * math.sqrt(2.0)
        return math.sqrt(self.cfg.dim) * per

    def __call__(self, x, part, centers, radii, key) -> WeightedSet:
        centers = np.asarray(centers, dtype=float)
        radii = np.asarray(radii, dtype=float)
        part = np.asarray(part, dtype=np.int64)
        if self.record_calls:
            self.calls.append((key, int(x.shape[0])))
        y = self.normalise(np.asarray(x, dtype=float), part, centers, radii) if len(x) else np.zeros((0, self.cfg.dim))
        out = self.run(y, part, centers.shape[0], key)
        pts = centers[out.part] + radii[out.part][:, None] * out.points
        keep = out.weights > 0
        return WeightedSet(pts[keep], out.weights[keep], out.part[keep])

    def run(self, y, part, n_parts, key) -> WeightedSet:  # pragma: no cover - interface
        raise NotImplementedError


class SnapSemicoreset(Semicoreset):
    """A(block) = {(c_p, n_p + noise)} per part: Theorem 7 with C = {c_p} (notes §12(d))."""

    name = "snap"

    def run(self, y, part, n_parts, key):
        counts = np.bincount(part, minlength=n_parts)
        w = self.noisy_counts(key + ("count",), counts)
        w = np.where(w >= self.count_tail(n_parts), w, 0)
        return WeightedSet(np.zeros((n_parts, self.cfg.dim)), w, np.arange(n_parts))


class TreeSemicoreset(Semicoreset):
    """Noisy-count / noisy-mean tree coreset (notes §12(a)/(b)).

    Per part, a binary tree of depth D splits by random hyperplanes through the
    ball's center (one keyed direction per depth, shared by all parts of the
    call).  Every node on a branched path gets a noisy count; a node branches iff
    its noisy count ≥ θ_b, and then *both* children are counted (the tree's shape
    is a function of noisy counts only).  Leaves are kept nodes without kept
    children; each releases (noisy sum / noisy count, noisy count), with the sum
    of the leaf's quantised normalised points.  A record enters D+1 counts and
    one sum: the plan's multiplicities (D+1, 1).
    """

    name = "tree"

    def run(self, y, part, n_parts, key):
        cfg = self.cfg
        D, d = cfg.tree_depth, cfg.dim
        V = self.noise.generator(key + ("directions",), D * d).normal(size=(D, d))
        bits = (y @ V.T >= 0) if len(y) else np.zeros((0, D), dtype=bool)
        theta_k = max(self.count_tail(n_parts, run_wide=False), cfg.tree_keep_factor * self.sum_noise_norm())
        theta_root = max(theta_k, self.count_tail(n_parts))  # an empty part's root must not pass
        theta_b = max(cfg.tree_branch_factor, 1.0) * theta_k
        # level 0: the roots (every part, empty ones included)
        node_key = np.arange(n_parts, dtype=np.int64)  # key at level l: part·2^l + path code
        pt_node = part.copy()  # index into the current level's node list, -1 once off-tree
        levels = []  # per level: (keys, noisy counts, kept, branched, parent index)
        parent = np.full(n_parts, -1, dtype=np.int64)
        point_nodes = []
        for lv in range(D + 1):
            counts = np.bincount(pt_node[pt_node >= 0], minlength=node_key.size)
            noisy = self.noisy_counts(key + ("count", lv), counts)
            kept = noisy >= (theta_root if lv == 0 else theta_k)
            branched = kept & (noisy >= theta_b) & (lv < D)  # branched ⇒ kept: one leaf per path
            levels.append((node_key, noisy, kept, branched, parent))
            point_nodes.append(pt_node.copy())
            if lv == D or not branched.any():
                break
            # children of branched nodes, keys sorted (the noise index order)
            bidx = np.flatnonzero(branched)
            ch_parent = np.repeat(bidx, 2)
            ch_key = np.repeat(node_key[bidx] * 2, 2) + np.tile([0, 1], bidx.size)
            # child key: (part·2^l + code)·2 + bit ... with code read most-significant-first
            order = np.argsort(ch_key, kind="stable")
            ch_key, ch_parent = ch_key[order], ch_parent[order]
            on = pt_node >= 0
            nxt = np.full(len(y), -1, dtype=np.int64)
            if on.any():
                pk = node_key[pt_node[on]] * 2 + bits[on, lv]
                pos = np.searchsorted(ch_key, pk)
                pos_c = np.minimum(pos, ch_key.size - 1)
                hit = (pos < ch_key.size) & (ch_key[pos_c] == pk)
                tmp = np.full(pk.size, -1, dtype=np.int64)
                tmp[hit] = pos_c[hit]
                nxt[on] = tmp
            pt_node, node_key, parent = nxt, ch_key, ch_parent
        # leaves: kept nodes with no kept child
        n_lv = len(levels)
        has_kept_child = [np.zeros(lv[0].size, dtype=bool) for lv in levels]
        for lv in range(n_lv - 1, 0, -1):
            _, _, kept, _, par = levels[lv]
            np.logical_or.at(has_kept_child[lv - 1], par[kept], True)
        leaf_w, leaf_part = [], []
        pt_leaf = np.full(len(y), -1, dtype=np.int64)
        n_leaves = 0
        for lv in range(n_lv):
            keys, noisy, kept, _, _ = levels[lv]
            is_leaf = kept & ~has_kept_child[lv]
            li = np.flatnonzero(is_leaf)
            if li.size == 0:
                continue
            gid = np.full(keys.size, -1, dtype=np.int64)
            gid[li] = n_leaves + np.arange(li.size)
            pn = point_nodes[lv]
            on = pn >= 0
            sel = np.flatnonzero(on)
            g = gid[pn[sel]]
            pt_leaf[sel[g >= 0]] = g[g >= 0]
            leaf_w.append(noisy[li])
            leaf_part.append(keys[li] >> lv)
            n_leaves += li.size
        if n_leaves == 0:
            return WeightedSet.empty(d)
        w = np.concatenate(leaf_w)
        parts = np.concatenate(leaf_part)
        on = pt_leaf >= 0
        sums_q = group_sum(pt_leaf[on], self.quantise(y[on]), n_leaves)
        sums = self.noisy_sums(key + ("sum",), sums_q)
        means = sums / np.maximum(w, 1)[:, None]
        nrm = np.linalg.norm(means, axis=1)
        means = np.where((nrm > 1)[:, None], means / np.maximum(nrm, 1e-300)[:, None], means)
        return WeightedSet(means, w, parts)


class LloydSemicoreset(Semicoreset):
    """DP-Lloyd per part, converted by Theorem 7 (notes §12(c)).

    k data-independent initial centers (keyed draws in B(0, 0.5)), I iterations
    of noisy counts and noisy quantised sums per (part, center), then one more
    noisy count per (part, center) for the weights.  A record enters I+1 counts
    and I sums.  A center whose noisy count is < 1 keeps its previous position
    (a branch on a noisy value, not on an exact count).
    """

    name = "lloyd"

    def run(self, y, part, n_parts, key):
        cfg = self.cfg
        k, d = cfg.n_clusters, cfg.dim
        g = self.noise.generator(key + ("init",), k * d + k)
        init = g.normal(size=(k, d))
        init *= (0.5 * g.uniform(size=k) ** (1.0 / d) / np.linalg.norm(init, axis=1))[:, None]
        C = np.broadcast_to(init, (n_parts, k, d)).copy()
        n_cells = n_parts * k
        for it in range(cfg.lloyd_iters + 1):
            cell = part * k + self._labels(y, part, C) if len(y) else np.zeros(0, dtype=np.int64)
            counts = np.bincount(cell, minlength=n_cells)
            noisy = self.noisy_counts(key + ("count", it), counts)
            if it == cfg.lloyd_iters:
                break
            sums = self.noisy_sums(key + ("sum", it), group_sum(cell, self.quantise(y), n_cells)
                                   if len(y) else np.zeros((n_cells, d), dtype=np.int64))
            newc = sums / np.maximum(noisy, 1)[:, None]
            nrm = np.linalg.norm(newc, axis=1)
            newc = np.where((nrm > 1)[:, None], newc / np.maximum(nrm, 1e-300)[:, None], newc)
            flat = C.reshape(n_cells, d)
            flat = np.where((noisy >= 1)[:, None], newc, flat)
            C = flat.reshape(n_parts, k, d)
        w = np.where(noisy >= self.count_tail(n_cells), noisy, 0)
        return WeightedSet(C.reshape(n_cells, d), w, np.repeat(np.arange(n_parts), k))


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
            c = C[sp[a]]
            d2 = (c ** 2).sum(axis=1)[None, :] - 2.0 * y[idx] @ c.T
            lab[idx] = d2.argmin(axis=1)
        return lab


SEMICORESETS = {"tree": TreeSemicoreset, "lloyd": LloydSemicoreset, "snap": SnapSemicoreset}


def make_semicoreset(cfg: EngineConfig, plan: PrivacyPlan, noise: NoiseSource) -> Semicoreset:
    return SEMICORESETS[cfg.semicoreset](cfg, plan, noise)
