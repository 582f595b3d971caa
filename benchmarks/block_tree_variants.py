#!/usr/bin/env python
"""A's hyperplane tree on one block, one change at a time: which difference from an offline DP tree
(a SimHash prefix tree whose leaves' noisy means are clustered) moves the cost of a short stream.

    .venv/bin/python benchmarks/block_tree_variants.py emb784_1e4 --seeds 5
    .venv/bin/python benchmarks/block_tree_variants.py digits --variants 'tree|sim|sim:recompute=0.5'

The block, the budget and the scoring are ``block_partition.py``'s: the whole data set is one first-epoch
block (one part: the public ball), A's budget at ε = 1, δ = 1e-6 from the engine's own plan (replace-one,
Gaussian; Σ (Δ/σ)² over A's queries is what a variant may spend), k centers fitted to the variant's weighted
output (KMeans, n_init = 3), cost on all points over KMeans' own (n_init = 3).

``tree`` is the engine's A itself; ``tree:key=value,...`` the engine's A with EngineConfig overrides (the
cells of ``tree_cells``, say). ``sim[:key=value,...]`` re-implements it with float Gaussian noise (its
defaults reproduce ``tree``: check that first), and each key changes one thing:

* ``depth`` (D; default the engine's rule), ``keep`` (θ_k in units of the leaf sum noise's norm √p·σ_sum,
  default 3), ``branch`` (θ_branch / θ_k, default 2), ``phi`` (the tree counts' share, default the engine's).
* ``cap=1``: θ_k = min(θ_k, ñ/(2k)) with ñ the root's noisy count — the offline tree's rule that lets a
  block of a few thousand points still hold ~2k leaves, whatever their sums' noise.
* ``split="mean"``: the hyperplanes pass through the noisy mean of the root (a share ``fm`` of the budget
  on one more d-dimensional sum) instead of the ball's center.
* ``split="origin"``: through the data space's origin (SimHash of the raw points, the offline tree's hash).
* ``proj=p``: the points are hashed, and the leaf sums taken, in a public Gaussian projection to p
  dimensions (then the leaves can only locate: use with ``recompute``).
* ``one_scale=1`` (with ``recompute``): the shares a privacy plan with one count scale and one sum scale per
  A gives — D + 2 counts and 2 sums per record (``recompute`` then only switches the cells on).
* ``add_remove=1``: the offline peers' relation (Δ_sum = Λ, Δ²_count = 1) instead of the engine's replace-one
  (2Λ, 2): not a variant to release with, the part of a gap to an offline peer that is the relation.
* ``recompute=f``: the k centers fitted to the leaves (post-processing) label the raw block; one noisy count
  and one noisy d-dimensional sum per Voronoi cell with the share f of the budget (the tree keeps 1 − f),
  and the k cell means (weights: their noisy counts) are the output; ``rounds=r`` repeats it r times
  (noisy Lloyd steps in data coordinates, each with f/r).
"""
import argparse
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from block_partition import Block, report_variants, weighted_kmeans  # noqa: E402  (limits threads on import)

import numpy as np  # noqa: E402


def sq_dists(X, C):
    return np.maximum((X ** 2).sum(1)[:, None] - 2.0 * X @ C.T + (C ** 2).sum(1)[None], 0.0)


def tree_leaves(Z, rng, sig_c, sig_s, depth, theta_root, theta_k, theta_b, offset):
    """The noisy-count tree on the rows of Z (normalised, ‖z‖ ≤ 1): SimHash bits of (z − offset), a node
    kept iff its noisy count ≥ θ_k (the root: θ_root), branched iff ≥ θ_b; leaves = kept nodes without a
    kept child. Returns the leaves' (noisy sums / noisy counts, noisy counts)."""
    n, p = Z.shape
    bits = ((Z - offset) @ rng.normal(size=(depth, p)).T >= 0).astype(np.int64)
    code = (bits << np.arange(depth - 1, -1, -1)).sum(1)
    root = n + rng.normal() * sig_c
    if root < theta_root:
        return np.zeros((0, p)), np.zeros(0)
    means, weights = [], []
    frontier = [(0, 0, root)]  # (level, prefix, noisy count): a handful of nodes, not points
    while frontier:
        nxt = []
        for lv, pre, nc in frontier:
            kids = []
            if nc >= theta_b and lv < depth:
                for b in (0, 1):
                    m = (code >> (depth - lv - 1)) == 2 * pre + b
                    q = m.sum() + rng.normal() * sig_c
                    if q >= theta_k:
                        kids.append((lv + 1, 2 * pre + b, q))
            if kids:
                nxt += kids
            else:
                m = (code >> (depth - lv)) == pre if lv else np.ones(n, bool)
                mu = (Z[m].sum(0) + rng.normal(size=p) * sig_s) / max(nc, 1.0)
                means.append(mu / max(np.linalg.norm(mu), 1.0))
                weights.append(nc)
        frontier = nxt
    return np.array(means).reshape(-1, p), np.array(weights)


def sim(b: Block, seed, depth=None, keep=3.0, branch=2.0, phi=None, cap=0, split="center", fm=0.05, proj=0,
        recompute=0.0, rounds=1, add_remove=0, one_scale=0):
    rng = np.random.default_rng(seed + 7919)
    n, d, k, Y = b.n, b.d, b.k, b.Y
    D = b.cfg.tree_depth if depth is None else int(depth)
    phi = b.cfg.count_share if phi is None else float(phi)
    f_tree = 1.0 - recompute - (fm if split == "mean" else 0.0)
    rel = 0.5 if add_remove else 1.0  # the sensitivities' factor: Δ halves under add/remove
    if not one_scale:
        sig_c = b.sigma(math.sqrt(2 * rel * (D + 1)), f_tree * phi)  # D + 1 counts per record, replace-one Δ² = 2
        sig_s = b.sigma(2.0 * rel, f_tree * (1 - phi))
    else:  # the plan's form: one count scale for D + 2 counts, one sum scale for 2 sums per record
        assert recompute and int(rounds) == 1 and split == "center"
        sig_c = b.sigma(math.sqrt(2 * rel * (D + 2)), phi)
        sig_s = b.sigma(2.0 * rel * math.sqrt(2), 1 - phi)
    offset = np.zeros(d)
    if split == "mean":
        s = Y.sum(0) + rng.normal(size=d) * b.sigma(2.0, fm)
        offset = s / max(n + rng.normal() * sig_c, 1.0)  # the root's count is re-used (post-processing)
    if split == "origin":  # SimHash of the raw coordinates, as an offline tree on data it was not told to center
        offset = -b.c / b.R
    Z, off = Y, offset
    if proj:
        P = rng.normal(size=(int(proj), d)) / math.sqrt(int(proj))
        Z = Y @ P.T
        Z /= np.maximum(np.linalg.norm(Z, axis=1), 1.0)[:, None]  # clipped again: the sum's Δ holds
        off = offset @ P.T
    p = Z.shape[1]
    tail = math.sqrt(2 * math.log(2 / b.cfg.weight_beta))  # one part, one release
    theta_k = max(sig_c * tail, keep * math.sqrt(p) * sig_s)
    run_wide = b.cfg.horizon_ticks * b.cfg.n_rings  # the root's union bound over the run's blocks
    theta_root = max(theta_k, sig_c * math.sqrt(2 * math.log(2 * run_wide / b.cfg.weight_beta)))
    if cap:
        n_noisy = n + rng.normal() * sig_c  # in the engine this is the root's own noisy count
        theta_k = max(min(theta_k, n_noisy / (2 * k)), sig_c * tail)
    M, W = tree_leaves(Z, rng, sig_c, sig_s, D, theta_root, theta_k, max(branch, 1.0) * theta_k, off)
    if len(W) == 0:
        return b.c[None], 0
    if not recompute:
        assert not proj, "proj needs recompute: projected leaves have no data coordinates"
        return weighted_kmeans(b.c + b.R * M, W, k, seed), len(W)
    C = weighted_kmeans(M, W, k, seed)
    f = recompute / int(rounds)  # each round: one count and one sum per record
    sc, ss = (sig_c, sig_s) if one_scale else (b.sigma(math.sqrt(2), f * phi), b.sigma(2.0, f * (1 - phi)))
    for _ in range(int(rounds)):
        lab = sq_dists(Z if C.shape[1] == p else Y, C).argmin(1)
        kk = len(C)
        cnt = np.bincount(lab, minlength=kk) + rng.normal(size=kk) * sc
        S = np.zeros((kk, d))
        np.add.at(S, lab, Y)
        S += rng.normal(size=(kk, d)) * ss
        keep_c = cnt >= sc * math.sqrt(2 * math.log(2 * kk / b.cfg.weight_beta))
        if not keep_c.any():
            return b.c[None], len(W)
        Mc = S[keep_c] / cnt[keep_c][:, None]
        C = Mc / np.maximum(np.linalg.norm(Mc, axis=1), 1.0)[:, None]
    return weighted_kmeans(b.c + b.R * C, cnt[keep_c], k, seed), len(W)

def engine_a(b: Block, seed, overrides):
    from dpstream.run_setup import RunSetup

    setup = RunSetup(b.cfg.with_(**overrides), b"block-partition-benchmark-seed-0")
    out = setup.A(b.X, np.zeros(b.n, dtype=np.int64), b.c[None], np.array([b.R]), ("block", seed))
    return weighted_kmeans(out.points, out.weights, b.k, seed), len(out.weights)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dataset")
    ap.add_argument("--variants", default="mean|tree|sim|sim:recompute=0.5")
    ap.add_argument("--seeds", type=int, default=5)
    a = ap.parse_args(argv)
    b = Block(a.dataset)
    print(f"{a.dataset}: n = {b.n}, d = {b.d}, k = {b.k}, Λ = {b.R:g}, D = {b.cfg.tree_depth}, "
          f"φ = {b.cfg.count_share}; ratios to KMeans (n_init = 3)")
    def run(name, args, s):
        if name == "mean":
            return b.X.mean(0)[None], 1
        if name == "tree" and args:  # the engine's A with EngineConfig overrides (e.g. tree_cells=0.8)
            return engine_a(b, s, eval(f"dict({args})", {}))
        if name == "tree":
            return b.tree(s)
        if name == "sim":
            return sim(b, s, **eval(f"dict({args})", {}))  # a measurement tool's own command line
        return None

    report_variants(b, a.variants, a.seeds, run, "leaves")

if __name__ == "__main__":
    sys.exit(main())
