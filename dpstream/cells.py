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

Two advanced options (off by default; P21 covers them):

* ``cells_locate_dims`` = p: steps 1–3 *locate* in a keyed public Gaussian projection z = clip(P·y) to p
  dimensions (:class:`Projected`; rows clipped to the unit ball there, so every sum's sensitivity holds):
  the tree hashes and sums there, the centers are fitted there, and a point is labelled by its projected
  row's nearest center. In high dimension the projection keeps the clusters' distances (Johnson–
  Lindenstrauss) while a p-dimensional noisy leaf mean needs far fewer points than a d-dimensional one.
  The cells' sums stay d-dimensional: only the partition is found in the projection.
* ``cells_lloyd_steps`` = L with ``cells_lloyd_share``: between steps 2 and 3, L noisy Lloyd steps on the
  centers (in the projection when there is one): per step one noisy count and one noisy sum per (part,
  center) (:func:`lloyd_steps`). A record enters L of each. The tree's k-means of its leaves starts them
  near the clusters; the steps move them to the clusters' means, which the leaves' cones mix.

Three seeding options (off by default; P21), all post-processing of noisy values and keyed draws:

* ``cells_overseed`` = r: step 2 fits r·k centers, the Lloyd steps move all of them, and a weighted k-means
  of them (:func:`reduce_centers`; weights: the last step's noisy counts) gives the k cells. With k centers
  from the start the steps keep the tree's mistakes (two clusters under one center).
* ``cells_reseed`` = s: between Lloyd steps a dead center is moved beside the heaviest (:func:`reseed`), so
  the next step can split a center that holds two clusters.
* ``cells_count_share``: the cells' own count : sum split (their sums need most of the budget once the
  partition is right; the tree's and the steps' counts do not).
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from .blocks import clip_to_unit_ball, clipped_means, group_sum
from .offline import cluster_coreset
from .rings import nearest_index

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
    if part.size and (part == part[0]).all():  # one part: its rows in their own order, not gathered
        return nearest_index(np.ascontiguousarray(y), C[part[0]])
    order = np.argsort(part, kind="stable")
    sp = part[order]
    starts = np.flatnonzero(np.r_[True, sp[1:] != sp[:-1]]) if sp.size else np.zeros(0, dtype=np.int64)
    for a, b in zip(starts, np.r_[starts[1:], sp.size]):  # a loop over non-empty parts, not points
        idx = order[a:b]
        lab[idx] = nearest_index(y[idx], C[sp[a]])
    return lab


def locate_dims(cfg) -> int:
    """p, the projection's dimension the cells locate in, or 0 (full d): ``cells_locate_dims`` when it is
    below d (a projection to p ≥ d dimensions would not be narrower: the cells then locate in full d)."""
    p = cfg.cells_locate_dims
    return p if 0 < p < cfg.dim else 0


class Projected(NamedTuple):
    """The public keyed draws of the cells located in a projection (``cells_locate_dims`` = p): the tree's
    hyperplanes in the projection and the projection itself (rows scaled by 1/√p, so that E‖P·y‖² = ‖y‖²)."""
    V: np.ndarray  # (D, p)
    P: np.ndarray  # (p, d)

    @property
    def size(self) -> int:  # the floats a block keeps for them
        return self.V.size + self.P.size


def draw_projected(noise, key, depth: int, p: int, d: int) -> Projected:
    """The draws of ``key`` (a ring's: data-independent, the same for both drivers)."""
    V = noise.generator(key + ("directions",), depth * p).normal(size=(depth, p))
    P = noise.generator(key + ("projection",), p * d).normal(size=(p, d)) / math.sqrt(p)
    return Projected(V, P)


def project(y: np.ndarray, P: np.ndarray) -> np.ndarray:
    """z = P·y per row, clipped to the unit ball (as :func:`~dpstream.blocks.normalise` clips): a record's
    z, like its y, has ‖z‖ ≤ 1, so every sum over z keeps the sensitivity of a sum over y."""
    return clip_to_unit_ball(y @ P.T)


def lloyd_steps(A, z: np.ndarray, part: np.ndarray, C: np.ndarray, key) -> np.ndarray:
    """``cfg.cells_lloyd_steps`` noisy Lloyd steps of the (n_parts, k, p) centers ``C`` on the rows ``z``
    (normalised, in the unit ball) of semicoreset ``A``'s block: per step, one noisy count and one noisy
    quantised sum per (part, center) of the rows nearest to it (:func:`label`: a function of the row and
    of the centers, themselves noisy outputs), drawn in part order (a public shape). A center whose noisy
    count is below :func:`lloyd_keep` keeps its place (a decision on a noisy value; a mean of few rows is
    mostly noise), or with ``cells_reseed`` is moved (:func:`reseed`). New centers are clipped to the unit
    ball."""
    return lloyd_steps_counted(A, z, part, C, key)[0]


def lloyd_steps_counted(A, z: np.ndarray, part: np.ndarray, C: np.ndarray, key):
    """:func:`lloyd_steps`, and the last step's noisy counts per (part, center), flat in part order."""
    cfg, plan = A.cfg, A.plan
    n_parts, k, p = C.shape
    n_cells = n_parts * k
    owner = np.repeat(np.arange(n_parts), k)
    q = A.quantise(z)
    keep = lloyd_keep(plan, p)
    C = C.copy()
    L = cfg.cells_lloyd_steps
    for step in range(L):
        cell = part * k + label(z, part, C)
        noisy = A.noisy_counts(key + ("cells", "lloyd", step, "count"), np.bincount(cell, minlength=n_cells), owner,
                               scale=plan.a_lloyd_count_scale, per_part=False)
        sums = A.noisy_sums(key + ("cells", "lloyd", step, "sum"), group_sum(cell, q, n_cells), owner,
                            scale=plan.a_lloyd_sum_scale, per_part=False)
        means = clipped_means(sums, noisy)
        flat = C.reshape(n_cells, p)
        live = noisy >= keep
        C = np.where(live[:, None], means, flat).reshape(n_parts, k, p)
        if cfg.cells_reseed and step < L - 1:  # the last step's centers go to the cells as they are
            C = reseed(C, noisy.reshape(n_parts, k), live.reshape(n_parts, k), cfg.cells_reseed,
                       A.noise.generator(key + ("cells", "reseed", step), n_cells * p).normal(size=(n_parts, k, p)))
    return C, noisy if L else None


def reseed(C: np.ndarray, noisy: np.ndarray, live: np.ndarray, s: float, U: np.ndarray) -> np.ndarray:
    """Per part, each dead center (``live`` false: its noisy count under the move threshold) moved beside
    the heaviest center, the two ± u apart, u along its own keyed public direction ``U`` (drawn for every
    center whatever the data) of norm s × the live centers' median nearest-neighbour gap; the heaviest's
    weight is halved between them before the next dead center picks. A center that holds two clusters can
    then be split by the next step, and a dead one stops wasting its slot. Everything read is a noisy
    count, a noisy center or public randomness: post-processing."""
    C = C.copy()
    for p in np.flatnonzero(live.any(axis=1) & ~live.all(axis=1)):  # a loop over parts with dead centers
        lv = np.flatnonzero(live[p])
        if lv.size < 2:  # no gap to measure (the prototype's rule): the part keeps its centers
            continue
        Lc = C[p, lv]
        d2 = ((Lc[:, None] - Lc[None]) ** 2).sum(-1)
        np.fill_diagonal(d2, np.inf)
        gap = math.sqrt(float(np.median(d2.min(axis=1))))
        w = np.where(live[p], noisy[p], 0).astype(float)
        for j in np.flatnonzero(~live[p]):  # a loop over a part's centers, at most r·k
            h = int(w.argmax())
            u = U[p, j] * (s * gap / max(float(np.linalg.norm(U[p, j])), 1e-300))
            C[p, j], C[p, h] = C[p, h] + u, C[p, h] - u
            w[j] = w[h] = w[h] / 2
    return C


def reduce_centers(C: np.ndarray, weights: np.ndarray, k: int, objective: str, rng_of) -> np.ndarray:
    """(n_parts, k, p) from over-seeded (n_parts, r·k, p) centers: per part, a weighted k-means of its
    centers (``weights``: their noisy counts, flat in part order; ≤ 0 dropped), as
    :func:`centers_from_leaves` fits the leaves (``rng_of(p)``: part p's keyed generator). Post-processing."""
    n_parts, kr, p = C.shape
    flat = C.reshape(n_parts * kr, p)
    owner = np.repeat(np.arange(n_parts), kr)
    pos = weights > 0
    out = centers_from_leaves(flat[pos], weights[pos].astype(float), owner[pos], n_parts, k, objective, rng_of)
    dead = np.ones(n_parts, dtype=bool)
    dead[owner[pos]] = False
    out[dead] = C[dead, :k]  # a part without positive weight keeps its first k centers (none is informed)
    return out


def leaf_weights(points, weights, part, C: np.ndarray) -> np.ndarray:
    """The noisy leaf counts nearest to each center of its part, flat in part order: the weights of the
    over-seeded centers when no Lloyd step counts them."""
    n_parts, kr, _ = C.shape
    if not len(points):
        return np.zeros(n_parts * kr)
    return np.bincount(part * kr + label(points, part, C), weights=weights, minlength=n_parts * kr)


def lloyd_keep(plan, dims: int) -> float:
    """The noisy count a Lloyd step's center needs to move (public): three standard deviations of its
    count noise, and at least the norm of its ``dims``-dimensional sum noise (below it the noisy mean is
    mostly noise: in full d at d = 784 a cluster of 10³ points would be)."""
    per = 1.0 if plan.a_mechanism == "gaussian" else math.sqrt(2.0)  # a scale's standard deviation
    return max(3.0 * plan.a_lloyd_count_scale, math.sqrt(dims) * plan.a_lloyd_sum_scale) * per

