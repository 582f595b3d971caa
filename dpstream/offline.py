"""Offline clustering of a weighted coreset (Alg. 1, step 4: post-processing).

k-means: scikit-learn ``KMeans`` with ``sample_weight``; k-median: weighted
Lloyd with Weiszfeld geometric medians.  Negative noisy weights are clamped to
0 first.  Both only see released coresets, so they cost no privacy; their
randomness is keyed for reproducibility.  The output always has exactly k
centers (a shape fixed by public parameters): if the coreset has fewer than k
points of positive weight, the remaining centers repeat the coreset's weighted
mean (or the public ball center when the coreset is empty).
"""
from __future__ import annotations

import warnings

import numpy as np
from sklearn.cluster import KMeans
from sklearn.exceptions import ConvergenceWarning

from .rings import nearest_center

_THREADPOOLS = None


def _single_thread():
    """One BLAS/OpenMP thread for the small k-means fits (thread start-up dominates them)."""
    global _THREADPOOLS
    if _THREADPOOLS is None:
        from threadpoolctl import ThreadpoolController

        _THREADPOOLS = ThreadpoolController()
    return _THREADPOOLS.limit(limits=1)


def _pad(centers: np.ndarray, k: int, fill: np.ndarray) -> np.ndarray:
    if centers.shape[0] >= k:
        return centers[:k]
    return np.vstack([centers, np.repeat(fill[None, :], k - centers.shape[0], axis=0)])


def cost(points: np.ndarray, centers: np.ndarray, weights=None, z: int = 2) -> float:
    """Σ w(x)·dist(x, C)^z."""
    _, dist = nearest_center(points, centers)
    v = dist ** z
    return float(v.sum() if weights is None else (np.asarray(weights) * v).sum())


def weiszfeld(points, weights, start, iters: int = 20):
    y = start.copy()
    for _ in range(iters):
        d = np.linalg.norm(points - y, axis=1)
        inv = weights / np.maximum(d, 1e-12)
        s = inv.sum()
        if s <= 0:
            break
        y = (inv[:, None] * points).sum(axis=0) / s
    return y


def weighted_kmedian(points, weights, k, rng, iters: int = 10):
    from .coresets import kmeanspp

    C = points[kmeanspp(points, weights, k, rng, z=1)]
    for _ in range(iters):
        lab, _ = nearest_center(points, C)
        newC = C.copy()
        for j in range(C.shape[0]):  # loop over k centers, not points
            m = lab == j
            if weights[m].sum() > 0:
                newC[j] = weiszfeld(points[m], weights[m], C[j])
        if np.allclose(newC, C):
            break
        C = newC
    return C


def cluster_coreset(points, weights, k: int, objective: str, rng: np.random.Generator, fallback: np.ndarray,
                    n_init: int = 3, init=None) -> np.ndarray:
    w = np.maximum(np.asarray(weights, dtype=float), 0.0)
    pos = w > 0
    P, w = points[pos], w[pos]
    if P.shape[0] == 0:
        return _pad(np.zeros((0, fallback.size)), k, fallback)
    mean = (w[:, None] * P).sum(axis=0) / w.sum()
    if P.shape[0] <= k:
        return _pad(P, k, mean)
    if objective == "kmedian":
        return _pad(weighted_kmedian(P, w, k, rng), k, mean)
    seed = int(rng.integers(0, 2**31 - 1))
    with warnings.catch_warnings(), _single_thread():
        warnings.simplefilter("ignore", ConvergenceWarning)
        if init is not None and init.shape == (k, P.shape[1]):
            # warm start from the previous release's centers (itself a DP output)
            km = KMeans(n_clusters=k, init=init, n_init=1, random_state=seed).fit(P, sample_weight=w)
        else:
            km = KMeans(n_clusters=k, n_init=n_init, random_state=seed).fit(P, sample_weight=w)
    return km.cluster_centers_
