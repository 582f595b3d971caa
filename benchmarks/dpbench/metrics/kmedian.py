"""The k-median reference: Lloyd with Weiszfeld geometric medians on all points, vectorised over clusters.

Starts: D¹ seeding (``dpstream.coresets.kmeanspp(z=1)``) ``n_init`` times, plus the k-means reference's
centers (scikit-learn ``KMeans(n_init=10, random_state=0)``); each start is refined to convergence (assign,
then ``inner`` Weiszfeld steps of every cluster's median, until the cost improves by < ``tol``); the lowest
Σ distances wins. The k-means start makes the reference never worse than k-means centers in k-median cost
(``dpstream.offline.weighted_kmedian``, 20 rounds from D¹ seeds, measured worse than them on blobs)."""
from __future__ import annotations

import numpy as np

from .cost import kmedian_cost


def _assign(X, C, chunk=1 << 15):
    c2 = (C ** 2).sum(axis=1)
    lab = np.empty(X.shape[0], dtype=np.int64)
    for s in range(0, X.shape[0], chunk):
        x = X[s:s + chunk]
        lab[s:s + chunk] = (c2[None, :] - 2.0 * x @ C.T).argmin(axis=1)
    return lab


def lloyd_weiszfeld(X, C, rounds: int = 100, inner: int = 5, tol: float = 1e-6):
    """Refine centers C; returns (centers, k-median cost)."""
    C = np.array(C, dtype=float)
    k = C.shape[0]
    prev = np.inf
    floor = 1e-12 * (1.0 + float(np.abs(X).max()))
    for _ in range(rounds):
        lab = _assign(X, C)
        order = np.argsort(lab, kind="stable")
        Xs, ls = X[order], lab[order]
        b = np.searchsorted(ls, np.arange(k + 1))
        dist = np.linalg.norm(Xs - C[ls], axis=1)
        cur = float(dist.sum())
        if prev - cur <= tol * cur:
            break
        prev = cur
        for it in range(inner):
            if it:
                dist = np.linalg.norm(Xs - C[ls], axis=1)
            w = 1.0 / np.maximum(dist, floor)
            for j in range(k):  # one Weiszfeld step of every cluster's median
                if b[j + 1] > b[j]:
                    wj = w[b[j]:b[j + 1]]
                    C[j] = (wj @ Xs[b[j]:b[j + 1]]) / wj.sum()
        empty = np.flatnonzero(b[1:] == b[:-1])
        if empty.size:  # re-seed an emptied cluster at the points farthest from their centers
            far = order[np.argsort(-np.linalg.norm(Xs - C[ls], axis=1))[:empty.size]]
            C[empty] = X[far]
    return C, kmedian_cost(X, C)


def reference(X: np.ndarray, k: int, seed: int = 0, n_init: int = 10) -> np.ndarray:
    from sklearn.cluster import KMeans

    from dpstream.coresets import kmeanspp

    X = np.ascontiguousarray(X, dtype=float)
    rng = np.random.default_rng(seed)
    starts = [X[kmeanspp(X, np.ones(X.shape[0]), k, rng, z=1)] for _ in range(n_init)]
    starts.append(KMeans(n_clusters=k, n_init=10, random_state=0).fit(X).cluster_centers_)
    best, best_cost = None, np.inf
    for C0 in starts:
        if C0.shape[0] < k:
            continue
        C, c = lloyd_weiszfeld(X, C0)
        if c < best_cost:
            best, best_cost = C, c
    return best
