"""Checkpoints: the releases at ticks T/2^j (j = 0..4) and at the deciles 0.1·T … 0.9·T, each evaluated on
the prefix of the stream it has seen, against ``KMeans(n_init=3, random_state=0)`` on that prefix (the last
checkpoint against the n_init=10 reference of all points)."""
from __future__ import annotations

import math
from typing import List

import numpy as np

from .cost import kmeans_cost

PREFIX_FRACS = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]


def checkpoint_ticks(T: int) -> List[int]:
    ticks = {max(1, int(round(T / 2 ** j))) for j in range(5)}
    ticks |= {max(1, int(math.ceil(f * T))) for f in PREFIX_FRACS}
    return sorted(t for t in ticks if 1 <= t <= T)


def prefix_sizes(n: int, tick: int, ticks: List[int]) -> List[int]:
    return [min(n, t * tick) for t in ticks]


def prefix_costs(X: np.ndarray, tick: int, ticks: List[int], centers_by_tick) -> List[float]:
    """k-means cost of the centers released at each checkpoint tick on the prefix it has seen."""
    return [kmeans_cost(X[:m], centers_by_tick[t]) for t, m in zip(ticks, prefix_sizes(X.shape[0], tick, ticks))]


def prefix_references(X: np.ndarray, k: int, tick: int, ticks: List[int]) -> List[float]:
    """Cost of ``KMeans(n_init=3, random_state=0)`` on each checkpoint's prefix; None at the last tick
    (the n_init=10 reference of all points stands there)."""
    from sklearn.cluster import KMeans

    T = math.ceil(X.shape[0] / tick)
    out = []
    for t, m in zip(ticks, prefix_sizes(X.shape[0], tick, ticks)):
        if t == T:
            out.append(None)
            continue
        km = KMeans(n_clusters=min(k, m), n_init=3, random_state=0).fit(X[:m])
        out.append(kmeans_cost(X[:m], km.cluster_centers_))
    return out
