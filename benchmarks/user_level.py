"""User-level privacy: the cost of protecting one person instead of one record.

For streams whose records carry a privacy unit (:mod:`dpstream.dpbench.datasets.units`), the k-means
cost on *all* records of the released centers, divided by sklearn KMeans' on the same records, for
user-level ε and bounds L, kept records vs per-tick means, next to record level (one record protected)
and the group-privacy baseline (records bounded to L, record-level engine at ε/L).

    python benchmarks/user_level.py --data gps --n 100000 --users 1000 --eps 0.5 1 4 --L 1 4 16 64
    python benchmarks/user_level.py --data gps --heavy 0.25 ...    # one person with a quarter of the records
    python benchmarks/user_level.py --state 1000000                  # bytes per unit of the bounding map

Prints one Markdown table row per configuration (median over seeds, and the seeds' range).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import tracemalloc
import warnings

import numpy as np
from sklearn.cluster import KMeans

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dpbench.datasets.units import author_embeddings, gps_users  # noqa: E402

from dpstream import DPStreamClusterer, EngineConfig  # noqa: E402
from dpstream.contributions import ContributionBounder  # noqa: E402


def cost(X, C, chunk=200_000):
    tot = 0.0
    for s in range(0, X.shape[0], chunk):
        x = X[s:s + chunk]
        d2 = (x * x).sum(1)[:, None] - 2 * x @ C.T + (C * C).sum(1)[None, :]
        tot += float(np.maximum(d2.min(1), 0).sum())
    return tot


def fit(X, ids, meta, eps, seed, L=None, mode="records", tick=1000, delta=1e-6):
    kw = dict(max_contributions=L, contribution=mode, privacy_unit="user_id") if L else {}
    m = DPStreamClusterer(meta["k"], epsilon=eps, delta=delta, radius=meta["radius"], center=meta["center"],
                          random_state=seed, tick_size=tick, **kw)
    t = time.process_time()
    m.fit(X, privacy_ids=ids if L else None)
    return m.cluster_centers_, time.process_time() - t


def group_baseline(X, ids, meta, eps, seed, L, tick=1000, delta=1e-6):
    """Records bounded to L per unit (the same rule), then the record-level engine at ε/L."""
    cfg = EngineConfig(n_clusters=meta["k"], dim=X.shape[1], radius=meta["radius"], epsilon=eps,
                       horizon_ticks=-(-X.shape[0] // tick), max_contributions=L)
    b = ContributionBounder(cfg)
    kept = [b.bound(X[s:s + tick], ids[s:s + tick]) for s in range(0, X.shape[0], tick)]
    m = DPStreamClusterer(meta["k"], epsilon=eps / L, delta=delta, radius=meta["radius"], center=meta["center"],
                          random_state=seed, horizon_ticks=len(kept))
    for k in kept:
        m.partial_fit(k)
    return m.cluster_centers_


def own_center(C, meta, within=3.0):
    """Does a released center sit within ``within`` km of the heavy person's places (30 km from any city)?"""
    hp = meta["heavy_places"]
    return bool(np.min(np.linalg.norm(C[:, None, :] - hp[None], axis=2)) < within)


def state_bytes(units: int) -> None:
    cfg = EngineConfig(n_clusters=2, dim=2, radius=1.0, epsilon=1.0, max_contributions=16, horizon_ticks=10**6)
    ids = np.array([f"user-{i:07d}" for i in range(units)])
    b = ContributionBounder(cfg)
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    X = np.zeros((10_000, 2))
    t = time.process_time()
    for s in range(0, units, 10_000):
        b.bound(X[:len(ids[s:s + 10_000])], ids[s:s + 10_000])
    cpu = time.process_time() - t
    X = None
    traced = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    print(f"| {units:,} units (ids 'user-NNNNNNN', str) | traced {traced / units:.0f} B/unit | "
          f"state_bytes() {b.state_bytes() / units:.0f} B/unit | bound() {1e6 * cpu / units:.2f} µs/record |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", choices=("gps", "embeddings"), default="gps")
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--users", type=int, default=1_000)
    ap.add_argument("--heavy", type=float, default=0.0)
    ap.add_argument("--eps", type=float, nargs="+", default=[0.5, 1.0, 4.0])
    ap.add_argument("--L", type=int, nargs="+", default=[1, 4, 16, 64])
    ap.add_argument("--modes", nargs="+", default=["records", "tick_mean"])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--record-level", action="store_true", help="also the record-level engine (one record protected)")
    ap.add_argument("--group", type=int, nargs="*", default=[], help="group-privacy baseline at these L")
    ap.add_argument("--state", type=int, default=0, help="only measure the bounding map at this many units")
    a = ap.parse_args()
    if a.state:
        state_bytes(a.state)
        return
    warnings.simplefilter("ignore")
    if a.data == "gps":
        X, ids, meta = gps_users(a.n, a.users, heavy=a.heavy)
    else:
        X, ids, meta = author_embeddings(a.n, a.users)
    km = KMeans(meta["k"], n_init=3, random_state=0).fit(X)
    base = cost(X, km.cluster_centers_)
    print(f"{a.data}: n = {X.shape[0]:,}, units = {len(meta['counts']):,}, d = {X.shape[1]}, k = {meta['k']}; "
          f"records per unit: median {np.median(meta['counts']):g}, max {meta['counts'].max():,}; {meta['rule']}")
    if a.heavy:
        print(f"KMeans on all records gives the heavy person ({a.heavy:.0%} of records) its own center: "
              f"{own_center(km.cluster_centers_, meta)}")
    print("| privacy | ε | L | contribution | cost / KMeans (median) | range over seeds | CPU s | own center |")
    print("|---|---|---|---|---|---|---|---|")

    def row(label, eps, L, mode, runs):
        r = np.array([cost(X, C) / base for C, _ in runs])
        cpu = np.median([c for _, c in runs])
        own = sum(own_center(C, meta) for C, _ in runs) if a.heavy else "-"
        print(f"| {label} | {eps:g} | {L} | {mode} | {np.median(r):.3f} | {r.min():.3f}–{r.max():.3f} | "
              f"{cpu:.1f} | {own} |", flush=True)

    for eps in a.eps:
        if a.record_level:
            row("record", eps, "-", "-", [fit(X, ids, meta, eps, s) for s in range(a.seeds)])
        for L in a.group:
            row("group (records ≤ L, engine at ε/L)", eps, L, "records",
                [(group_baseline(X, ids, meta, eps, s, L), 0.0) for s in range(a.seeds)])
        for mode in a.modes:
            for L in a.L:
                row("user", eps, L, mode, [fit(X, ids, meta, eps, s, L, mode) for s in range(a.seeds)])


if __name__ == "__main__":
    main()
