"""Utility against ε on blobs_1e5 (the benchmark's data set and public radius): the final release's
k-means cost over scikit-learn KMeans' on the same points, and the release at 10% of the stream over
its prefix's optimum; median [min–max] of seeds. Writes a Markdown table on stdout.

    python benchmarks/eps_table.py --seeds 3
"""
from __future__ import annotations

import argparse
import math
import warnings

import numpy as np
from sklearn.cluster import KMeans
from sklearn.datasets import make_blobs

from dpstream import DPStreamClusterer
from dpstream.offline import cost


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--eps", default="0.25,0.5,1,2,4")
    a = ap.parse_args()
    X, _ = make_blobs(n_samples=100_000, n_features=10, centers=10, cluster_std=1.0, center_box=(-10, 10),
                      random_state=0)
    radius = math.sqrt(10) * 15.0  # the benchmark's public rule: √d·(box + 5σ)
    opt = KMeans(10, n_init=10, random_state=0).fit(X).inertia_
    P = X[:10_000]
    opt10 = KMeans(10, n_init=10, random_state=0).fit(P).inertia_
    print("| ε | final release / non-private | release at 10% of the stream / its prefix's optimum |")
    print("|---|---|---|")
    for eps in [float(e) for e in a.eps.split(",")]:
        fin, early = [], []
        for s in range(a.seeds):
            m = DPStreamClusterer(10, epsilon=eps, delta=1e-6, radius=radius, random_state=s, tick_size=1000)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                m.fit(X)
            fin.append(cost(X, m.cluster_centers_, z=2) / opt)
            m2 = DPStreamClusterer(10, epsilon=eps, delta=1e-6, radius=radius, random_state=s, tick_size=1000,
                                   horizon_ticks=100)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                for t in range(10):
                    m2.partial_fit(X[t * 1000:(t + 1) * 1000])
            early.append(cost(P, m2.cluster_centers_, z=2) / opt10)
        f = lambda v: f"{np.median(v):.3f} [{min(v):.3f}–{max(v):.3f}]"  # noqa: E731
        print(f"| {eps:g} | {f(fin)} | {f(early)} |", flush=True)


if __name__ == "__main__":
    main()
