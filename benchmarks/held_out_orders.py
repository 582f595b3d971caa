"""Two settings of the library on generators and stream orders that no default was tuned on.

The benchmark's registered sets (``dpbench/datasets``) are what the defaults were measured on, and their
held-out sets differ in data but share the two orders (shuffled, or sorted by cluster). This script draws
four further generators and streams each in orders the registry does not have, then runs ``partial_fit``
as a user does (default horizon T = 1,024, the end not declared), with the end declared, and under the
exact horizon, for each setting; it prints per cell the median over seeds of the final cost ratio (against
``KMeans(n_init=10)`` on all points) and of the worst release at the deciles ≥ 10 % (against
``KMeans(n_init=3)`` on each prefix). ε = 1, δ = 1e-6, ticks of 1,000 rows, radius from each generator's
public rule (``--eps`` for another ε).

Generators (``draw``): ``loc2`` (d = 2, six blobs of unequal spread: locations), ``mix20`` (d = 20, eight
blobs, σ from 0.5 to 2.5), ``dir50`` (d = 50, fifteen Gaussian clusters with Dirichlet(1) weights: a few
large, several small), ``grow`` (d = 16, eight clusters that appear one by one and then stay).
Orders (``order``): ``shuffled``; ``label`` (sorted by cluster); ``sweep`` (sorted by the first
coordinate: a spatial sweep); ``bursty`` (bursts of 500 rows of one cluster, the clusters in turn);
``natural`` (the generator's own order: ``grow``'s appearances). ``blobsKxD`` (K blobs of σ = 1 in D
dimensions, 50,000 rows) spans k and d beyond the registry's k = 10:

    .venv/bin/python benchmarks/held_out_orders.py --seeds 3 --setting 'defaults:' \\
        --cells blobs2x8:shuffled,blobs5x128:shuffled,blobs25x32:shuffled,blobs50x8:shuffled

    .venv/bin/python benchmarks/held_out_orders.py                       # every cell, defaults against part_fire=0
    .venv/bin/python benchmarks/held_out_orders.py --cells dir50:label,grow:natural --seeds 3 \\
        --setting 'off:part_fire=0' --setting 'defaults:'
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import warnings
from typing import Dict, List, Tuple

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from dpbench.metrics.cost import kmeans_cost  # noqa: E402

CELLS = ("loc2:shuffled,loc2:sweep,loc2:label,mix20:shuffled,mix20:label,mix20:sweep,mix20:bursty,"
         "dir50:shuffled,dir50:label,dir50:bursty,grow:natural,grow:shuffled")
TICK = 1000


def draw(name: str, scale: float = 1.0) -> Tuple[np.ndarray, np.ndarray, int, float]:
    """(X, labels, k, radius): the radius from the generator's bounds (box + 5σ per coordinate), never from X."""
    from sklearn.datasets import make_blobs

    rng = np.random.default_rng(12345)
    if name == "loc2":
        X, y = make_blobs(int(50_000 * scale), n_features=2, centers=6, cluster_std=np.linspace(0.3, 1.0, 6),
                          center_box=(-10, 10), random_state=3)
        return X, y, 6, math.sqrt(2) * (10 + 5 * 1.0)
    if name == "mix20":
        X, y = make_blobs(int(40_000 * scale), n_features=20, centers=8, cluster_std=np.linspace(0.5, 2.5, 8),
                          center_box=(-8, 8), random_state=7)
        return X, y, 8, math.sqrt(20) * (8 + 5 * 2.5)
    if name == "dir50":
        k, d, n, sd = 15, 50, int(30_000 * scale), 0.8
        y = rng.choice(k, size=n, p=rng.dirichlet(np.ones(k)))
        return rng.uniform(-3, 3, size=(k, d))[y] + sd * rng.normal(size=(n, d)), y, k, math.sqrt(d) * (3 + 5 * sd)
    if name == "grow":
        k, d, n = 8, 16, int(40_000 * scale)
        mu = rng.uniform(-5, 5, size=(k, d))
        y = np.floor(rng.random(n) * (np.arange(n) * k // n + 1)).astype(int)  # uniform over the appeared
        return mu[y] + rng.normal(size=(n, d)), y, k, math.sqrt(d) * (5 + 5 * 1.0)
    grid = re.fullmatch(r"blobs(\d+)x(\d+)", name)
    if grid:  # k blobs of σ = 1 in d dimensions, centers uniform in the box ±10: the k-and-d grid
        k, d = int(grid[1]), int(grid[2])
        X, y = make_blobs(int(50_000 * scale), n_features=d, centers=k, cluster_std=1.0, center_box=(-10, 10),
                          random_state=11 + k + d)
        return X, y, k, math.sqrt(d) * (10 + 5 * 1.0)
    raise SystemExit(f"unknown generator {name!r}: loc2, mix20, dir50, grow or blobsKxD (e.g. blobs25x128)")


def order(X: np.ndarray, y: np.ndarray, how: str) -> np.ndarray:
    """The permutation of the rows that streams them in order ``how``."""
    n = X.shape[0]
    rng = np.random.default_rng(0)
    if how == "shuffled":
        return rng.permutation(n)
    if how == "label":
        return np.argsort(y, kind="stable")
    if how == "sweep":
        return np.argsort(X[:, 0], kind="stable")
    if how == "natural":
        return np.arange(n)
    if how == "bursty":
        p = rng.permutation(n)
        pools = [p[y[p] == c] for c in np.unique(y)]
        rounds = max(math.ceil(len(q) / 500) for q in pools)
        return np.concatenate([q[r * 500:(r + 1) * 500] for r in range(rounds) for q in pools])
    raise SystemExit(f"unknown order {how!r}: shuffled, label, sweep, natural or bursty")


def run_cell(X: np.ndarray, k: int, radius: float, settings: List[Tuple[str, dict]], seeds: int,
             modes=("none", "end", "exact"), eps: float = 1.0) -> Dict[Tuple[str, str], Tuple[float, float]]:
    """{(setting, mode): (median final ratio, median worst decile ratio ≥ 10 %)}."""
    from sklearn.cluster import KMeans

    from dpstream import DPStreamClusterer

    T = math.ceil(X.shape[0] / TICK)
    full = KMeans(k, n_init=10, random_state=0).fit(X).inertia_
    deciles = sorted({max(1, round(T * q / 10)) for q in range(1, 11)})
    prefix = {t: KMeans(k, n_init=3, random_state=0).fit(X[:t * TICK]).inertia_ for t in deciles}
    out = {}
    for label, kw in settings:
        for mode in modes:
            finals, worst = [], []
            for s in range(seeds):
                m = DPStreamClusterer(k, epsilon=eps, delta=1e-6, radius=radius, random_state=s, tick_size=TICK,
                                      **({"horizon_ticks": T} if mode == "exact" else {}), **kw)
                w = 0.0
                for t in range(1, T + 1):
                    m.partial_fit(X[(t - 1) * TICK:t * TICK], last=mode == "end" and t == T)
                    if t in prefix:
                        w = max(w, kmeans_cost(X[:t * TICK], m.cluster_centers_) / prefix[t])
                finals.append(kmeans_cost(X, m.cluster_centers_) / full)
                worst.append(w)
            out[(label, mode)] = (float(np.median(finals)), float(np.median(worst)))
    return out


def parse_setting(text: str) -> Tuple[str, dict]:
    label, _, rest = text.partition(":")
    kw = {}
    for item in filter(None, rest.split(",")):
        name, value = item.split("=", 1)
        kw[name] = json.loads(value)
    return label, kw


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cells", default=CELLS, help="comma list of generator:order")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--scale", type=float, default=1.0, help="rows as a fraction of each generator's n")
    ap.add_argument("--eps", type=float, default=1.0, help="the run's ε (δ = 1e-6)")
    ap.add_argument("--setting", action="append", metavar="LABEL:name=value,...",
                    help="a setting to run (repeatable); default 'part_fire=0:part_fire=0' and 'defaults:'")
    a = ap.parse_args(argv)
    warnings.filterwarnings("ignore")
    settings = [parse_setting(s) for s in (a.setting or ["part_fire=0:part_fire=0", "defaults:"])]
    print("| generator | order | n × d, k | " + " | ".join(
        f"{lab} {mode}" for lab, _ in settings for mode in ("no end", "end", "exact")) + " |")
    print("|" + "---|" * (3 + 3 * len(settings)))
    for cell in a.cells.split(","):
        gen, how = cell.split(":")
        X, y, k, radius = draw(gen, a.scale)
        X = X[order(X, y, how)]
        res = run_cell(X, k, radius, settings, a.seeds, eps=a.eps)
        row = [f"{res[(lab, mode)][0]:.3f} / {res[(lab, mode)][1]:.2f}" for lab, _ in settings
               for mode in ("none", "end", "exact")]
        print(f"| {gen} | {how} | {X.shape[0]:,} × {X.shape[1]}, {k} | " + " | ".join(row) + " |", flush=True)


if __name__ == "__main__":
    main()
