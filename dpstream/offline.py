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


def weiszfeld(points, weights, start, iters: int = 100, tol: float = 1e-10):
    """Weighted geometric median by Weiszfeld's iteration with the Vardi–Zhang step at data points."""
    y = np.asarray(start, dtype=float).copy()
    for _ in range(iters):
        diff = points - y
        d = np.linalg.norm(diff, axis=1)
        at = d <= 1e-12
        inv = np.where(at, 0.0, weights / np.where(at, 1.0, d))
        s = inv.sum()
        if s <= 0:
            break
        T = (inv[:, None] * points).sum(axis=0) / s
        eta = weights[at].sum()
        if eta > 0:  # y sits on a data point: move only if the pull of the others beats its weight
            r = np.linalg.norm((inv[:, None] * diff).sum(axis=0))
            lam = min(1.0, eta / r) if r > 0 else 1.0
            T = (1 - lam) * T + lam * y
        if np.linalg.norm(T - y) <= tol * (1 + np.linalg.norm(y)):
            y = T
            break
        y = T
    return y


def weighted_kmedian(points, weights, k, rng, iters: int = 20, n_init: int = 3):
    """Best of ``n_init`` runs of D¹ seeding + weighted Lloyd with Weiszfeld medians."""
    from .coresets import kmeanspp

    best, best_cost = None, np.inf
    for _ in range(max(1, n_init)):
        C = points[kmeanspp(points, weights, k, rng, z=1)]
        for _ in range(iters):
            lab, _ = nearest_center(points, C)
            newC = C.copy()
            for j in range(C.shape[0]):  # loop over k centers, not points
                m = lab == j
                wm = weights[m]
                if wm.sum() > 0:
                    mean = (wm[:, None] * points[m]).sum(axis=0) / wm.sum()
                    newC[j] = weiszfeld(points[m], wm, mean)
            if np.allclose(newC, C, rtol=0, atol=1e-12):
                break
            C = newC
        c = cost(points, C, weights, z=1)
        if c < best_cost:
            best, best_cost = C, c
    return best


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
        return _pad(weighted_kmedian(P, w, k, rng, n_init=n_init), k, mean)
    seed = int(rng.integers(0, 2**31 - 1))
    with warnings.catch_warnings(), _single_thread():
        warnings.simplefilter("ignore", ConvergenceWarning)
        if init is not None and init.shape == (k, P.shape[1]):
            # warm start from the previous release's centers (itself a DP output)
            km = KMeans(n_clusters=k, init=init, n_init=1, random_state=seed).fit(P, sample_weight=w)
        else:
            km = KMeans(n_clusters=k, n_init=n_init, random_state=seed).fit(P, sample_weight=w)
    return km.cluster_centers_
