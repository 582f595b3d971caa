#!/usr/bin/env python
"""One block through black box A, against what A's budget allows: where the cost of a short stream goes.

    .venv/bin/python benchmarks/block_partition.py emb784_1e4 --seeds 5
    .venv/bin/python benchmarks/block_partition.py digits --variants mean,tree,oracle,oracle:0.95
    .venv/bin/python benchmarks/block_partition.py held_out:mix20:0.1 --seeds 5   # held_out_orders.py's generators

The whole data set is one block of the first epoch: one part, the public ball (center, Λ), A's budget at
ε = 1 (``--eps``), δ = 1e-6 from the engine's own plan (replace-one). k centers are fitted to each variant's weighted
output (scikit-learn KMeans, n_init = 3) and their cost on all points is divided by KMeans' own (n_init = 3).
The variants:

* ``mean``: one center at the data's mean (exact; the floor any release must beat).
* ``tree``: the engine's A (``TreeSemicoreset``, the defaults) on the block.
* ``oracle[:f[,K[,s]]]``: the *non-private* K-means clusters (K = k by default) as the partition and one
  noisy d-dimensional sum per cluster with a share f (0.7 by default) of A's budget, the counts with the rest:
  what a perfect partition leaves after the noise on the sums. Not DP (the partition reads the data): a
  floor, not a method. K < k asks whether fewer, larger clusters beat the noise where k clusters cannot;
  s = 1 shrinks each noisy mean toward the count-weighted mean of all of them by the James–Stein factor
  1 − d·σ²/(ñ²·‖m̂ − m̄‖²) (post-processing: σ is public, ñ noisy).
* ``cells[:key=value,...]``: a prototype of a partition that follows the data (``cells_partition.py``: a
  public projection, a noisy tree there, noisy Lloyd steps in the projection, one noisy count and one noisy
  d-dimensional sum per cell of the raw block; its options and their budget shares are listed there).
"""
import argparse
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dpbench.common import limit_threads  # noqa: E402

limit_threads()

import numpy as np  # noqa: E402

from cells_partition import cells, weighted_kmeans  # noqa: E402,F401  (block_tree_variants imports weighted_kmeans from here)


def cost(X, C):
    d2 = (X ** 2).sum(1)[:, None] - 2.0 * X @ C.T + (C ** 2).sum(1)[None]
    return float(np.maximum(d2.min(1), 0).sum())


class Block:
    def __init__(self, name, eps: float = 1.0):
        """A registered data set, or ``held_out:GEN[:SCALE]``: a generator of ``held_out_orders.py`` (its rows
        in the generator's order; one block holds them all, so the order does not matter)."""
        if name.startswith("held_out:"):
            import held_out_orders

            gen, _, scale = name.split(":", 1)[1].partition(":")
            X, _, k, radius = held_out_orders.draw(gen, float(scale) if scale else 1.0)
            self._of(X, k, np.zeros(X.shape[1]), radius, math.ceil(X.shape[0] / held_out_orders.TICK), eps)
            return
        from dpbench.datasets import load

        ds = load(name)
        self._of(ds.X, ds.k, ds.center, ds.radius, ds.T, eps)

    def _of(self, X, k, center, radius, T, eps):
        from dpstream.params import EngineConfig
        from dpstream.run_setup import RunSetup
        from sklearn.cluster import KMeans

        self.X, self.k, self.c, self.R = X, k, np.asarray(center, dtype=float), float(radius)
        self.n, self.d = self.X.shape
        km = KMeans(self.k, n_init=3, random_state=0).fit(self.X)
        self.labels, self.ref = km.labels_, cost(self.X, km.cluster_centers_)
        self.cfg = EngineConfig(self.k, self.d, self.R, float(eps), horizon_ticks=T, center=tuple(self.c))
        self.setup = RunSetup(self.cfg, b"block-partition-benchmark-seed-0")
        plan = self.setup.plan
        # A's budget as Σ (Δ/σ)² over its Gaussian components: the sum line (Δ = 2, replace-one) holds the
        # share 1 − count_share of it
        self.inv = (2.0 / plan.a_sum_scale) ** 2 / (1 - self.cfg.count_share)
        Y = (self.X - self.c) / self.R
        self.Y = Y / np.maximum(np.linalg.norm(Y, axis=1), 1.0)[:, None]

    def ratio(self, C):
        return cost(self.X, C) / self.ref

    def sigma(self, sens, share):
        return sens / math.sqrt(share * self.inv)

    def tree(self, seed):
        out = self.setup.A(self.X, np.zeros(self.n, dtype=np.int64), self.c[None], np.array([self.R]),
                           ("block", seed))
        return weighted_kmeans(out.points, out.weights, self.k, seed), len(out.weights)

    def oracle(self, seed, share=0.7, K=None, shrink=False):
        from sklearn.cluster import KMeans

        rng = np.random.default_rng(seed)
        k, d = (self.k, self.d) if K is None else (int(K), self.d)
        labels = self.labels if K is None else KMeans(k, n_init=3, random_state=0).fit(self.X).labels_
        cnt = np.bincount(labels, minlength=k) + rng.normal(size=k) * self.sigma(math.sqrt(2), 1 - share)
        S = np.zeros((k, d))
        np.add.at(S, labels, self.Y)
        S += rng.normal(size=(k, d)) * self.sigma(2.0, share)
        M, w = S / np.maximum(cnt, 1)[:, None], np.maximum(cnt, 1)
        if shrink:
            dev = M - (M * w[:, None]).sum(0) / w.sum()
            a = np.clip(1 - d * self.sigma(2.0, share) ** 2 / w ** 2 / np.maximum((dev ** 2).sum(1), 1e-300), 0, 1)
            M = M - (1 - a)[:, None] * dev
        return self.c + self.R * M, k

    def cells(self, seed, **options):
        return cells(self, seed, **options)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dataset")
    ap.add_argument("--variants", default="mean|tree|oracle|oracle:0.95|cells",
                    help="'|'-separated; cells takes key=value arguments after a colon")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--seed0", type=int, default=0, help="the first seed (seeds seed0 .. seed0 + seeds − 1)")
    ap.add_argument("--eps", type=float, default=1.0, help="the run's ε (δ = 1e-6); A's budget is the plan's at it")
    a = ap.parse_args(argv)
    b = Block(a.dataset, a.eps)
    print(f"{a.dataset}, ε = {a.eps:g}: n = {b.n}, d = {b.d}, k = {b.k}, ball radius {b.R:g}; ratios to KMeans (n_init = 3)")
    def run(name, args, s):
        if name == "mean":
            return b.X.mean(0)[None], 1
        if name == "tree":
            return b.tree(s)
        if name == "oracle":
            share, K, shrink = (args.split(",") + ["", "", ""])[:3]
            return b.oracle(s, float(share) if share else 0.7, int(K) if K else None, shrink == "1")
        if name == "cells":
            return b.cells(s, **options(args))
        return None

    report_variants(b, a.variants, range(a.seed0, a.seed0 + a.seeds), run, "output points/leaves")


def options(args: str) -> dict:
    """``key=value,...`` (Python literals) as keyword arguments; a later key overrides an earlier one, so a
    variant can be a named setting with one thing changed."""
    import ast

    call = ast.parse(f"f({args})", mode="eval").body
    return {kw.arg: ast.literal_eval(kw.value) for kw in call.keywords}


def report_variants(b: Block, variants: str, seeds, run, size_name: str) -> None:
    """One line per '|'-separated variant ``name[:args]``: the median and each seed's cost ratio of
    ``run(name, args, seed)`` → (centers, output size), or None for a name it does not know."""
    for v in variants.split("|"):
        name, _, args = v.partition(":")
        ratios, sizes = [], []
        for s in (range(seeds) if isinstance(seeds, int) else seeds):
            got = run(name, args, s)
            if got is None:
                raise SystemExit(f"unknown variant {name!r}")
            ratios.append(b.ratio(got[0]))
            sizes.append(got[1])
        print(f"{v:60s} median {np.median(ratios):.3f}  [{' '.join(f'{r:.3f}' for r in ratios)}]  "
              f"{size_name} {int(np.median(sizes))}", flush=True)

if __name__ == "__main__":
    sys.exit(main())
