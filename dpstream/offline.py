"""Offline clustering of a weighted coreset (Alg. 1, step 4: post-processing).

k-means: weighted k-means++ seeding and weighted Lloyd; k-median: weighted
Lloyd with Weiszfeld geometric medians.  Negative noisy weights are clamped to
0 first.  Both only see released coresets, so they cost no privacy; their
randomness is keyed for reproducibility.  The output always has exactly k
centers (a shape fixed by public parameters), distinct whenever the coreset has at
least k distinct points of positive weight; otherwise the remaining centers repeat
the coreset's weighted mean (or the public ball center when the coreset is empty).
"""
from __future__ import annotations

import numpy as np

from .rings import first_distinct_rows, nearest_center
from .params import objective_exponent


def _pad(centers: np.ndarray, k: int, fill: np.ndarray) -> np.ndarray:
    if centers.shape[0] >= k:
        return centers[:k]
    return np.vstack([centers, np.repeat(fill[None, :], k - centers.shape[0], axis=0)])


def cost(points: np.ndarray, centers: np.ndarray, weights=None, z: int = 2, x2: np.ndarray = None) -> float:
    """Σ w(x)·dist(x, C)^z (``x2``: :func:`nearest_center`'s Σx² of these points, if the caller has it)."""
    _, dist = nearest_center(points, centers, x2)
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


def _lloyd(points, weights, C, iters: int, tol: float, pre=None):
    """Weighted Lloyd iterations from centers C; an emptied cluster is re-seeded at the point of
    largest cost. Returns (centers, cost). ``pre``: :func:`_prepared` of these points (computed once for
    several runs)."""
    k = C.shape[0]
    n = points.shape[0]
    p2, two_p, x2 = pre if pre is not None else _prepared(points)
    rows = np.arange(n)
    prev = np.inf
    for _ in range(iters):
        # max(|x|² − 2x·c + |c|², 0) in place, in that order
        d2 = two_p @ C.T
        np.subtract(p2[:, None], d2, out=d2)
        d2 += (C ** 2).sum(axis=1)[None, :]
        np.maximum(d2, 0.0, out=d2)
        lab = d2.argmin(axis=1)
        dmin = d2[rows, lab]
        cur = float(weights @ dmin)
        if prev - cur <= tol * max(cur, 1e-300):
            break
        prev = cur
        onehot = np.zeros((n, k))
        onehot[rows, lab] = weights
        W = onehot.sum(axis=0)
        S = onehot.T @ points
        empty = W <= 0
        C = np.where(empty[:, None], C, S / np.where(empty, 1.0, W)[:, None])
        if empty.any():
            far = np.argsort(-(weights * dmin))[:int(empty.sum())]
            C[np.flatnonzero(empty)[:far.size]] = points[far]
    return C, cost(points, C, weights, z=2, x2=x2)  # Σx² computed once for every run


def _prepared(points):
    """What every Lloyd run and seeding of the same points recomputes: Σx² as Lloyd sums it, 2·x, and
    Σx² as the distance functions' einsum sums it (the two sums may differ in the last bit)."""
    return (points ** 2).sum(axis=1), 2.0 * points, np.einsum("ij,ij->i", points, points)


def weighted_kmeans(points, weights, k, rng, iters: int = 100, n_init: int = 3, init=None, tol: float = 1e-7):
    """Best of ``n_init`` runs of greedy weighted k-means++ seeding (or one run from ``init``),
    each followed by weighted Lloyd.

    A few vectorised lines here instead of scikit-learn's ``KMeans``: the release refits a coreset
    of a few hundred points hundreds of times per stream, where ``KMeans``' per-call validation
    and thread-pool overhead dominates (measured 17 ms per refit at d = 10, and 8 ms for
    ``kmeans_plusplus`` alone, against ~2 ms here for the same seeding rule and Lloyd)."""
    from .coresets import greedy_kmeanspp

    points = np.ascontiguousarray(points, dtype=float)
    pre = _prepared(points)
    best, best_cost = None, np.inf
    for _ in range(max(1, n_init)):
        if init is not None:
            C0 = np.array(init, dtype=float)
        else:
            C0 = greedy_kmeanspp(points, weights, k, rng, p2=pre[2], two_p=pre[1])
        C, c = _lloyd(points, weights, C0, iters, tol, pre)
        if c < best_cost:
            best, best_cost = C, c
    return best


def _weiszfeld_step(points, weights, lab, C):
    """One Weiszfeld step for every cluster at once, with the Vardi–Zhang correction at a data point:
    a median sitting on points of weight η moves only if the pull r of the others beats it."""
    k = C.shape[0]
    diff = points - C[lab]
    d = np.linalg.norm(diff, axis=1)
    at = d <= 1e-12 * (1.0 + np.linalg.norm(C[lab], axis=1))
    inv = np.where(at, 0.0, weights / np.where(at, 1.0, d))
    den = np.bincount(lab, weights=inv, minlength=k)
    num = np.zeros_like(C)
    np.add.at(num, lab, inv[:, None] * points)
    pull = np.zeros_like(C)
    np.add.at(pull, lab, inv[:, None] * diff)
    eta = np.bincount(lab, weights=np.where(at, weights, 0.0), minlength=k)
    ok = den > 0
    T = np.where(ok[:, None], num / np.where(ok, den, 1.0)[:, None], C)
    r = np.linalg.norm(pull, axis=1)
    lam = np.where(eta > 0, np.minimum(1.0, eta / np.where(r > 0, r, 1.0)), 0.0)
    lam = np.where((eta > 0) & (r <= 0), 1.0, lam)
    return (1 - lam)[:, None] * T + lam[:, None] * C


def _lloyd_median(points, weights, C, iters: int, tol: float, inner: int = 8):
    """Weighted Lloyd for k-median: assign, then Weiszfeld steps for every cluster at once until the
    medians stop moving. Returns (centers, Σ w·distance)."""
    scale = float(np.abs(points).max()) or 1.0
    prev = np.inf
    for _ in range(iters):
        lab, dist = nearest_center(points, C)
        cur = float(weights @ dist)
        if prev - cur <= tol * max(cur, 1e-300):
            break
        prev = cur
        for _ in range(inner):
            newC = _weiszfeld_step(points, weights, lab, C)
            moved = float(np.abs(newC - C).max())
            C = newC
            if moved <= 1e-10 * scale:
                break
    _, dist = nearest_center(points, C)
    return C, float(weights @ dist)


def weighted_kmedian(points, weights, k, rng, iters: int = 15, n_init: int = 3, init=None):
    """Best of ``n_init`` runs of D¹ seeding (or one run from ``init``) + weighted Lloyd with Weiszfeld
    median steps, all clusters updated together."""
    from .coresets import kmeanspp

    points = np.ascontiguousarray(points, dtype=float)
    best, best_cost = None, np.inf
    for _ in range(max(1, n_init)):
        C0 = np.array(init, dtype=float) if init is not None else points[kmeanspp(points, weights, k, rng, z=1)]
        C, c = _lloyd_median(points, weights, _pad(C0, k, points[0]), iters, 1e-7)
        if c < best_cost:
            best, best_cost = C, c
    return best


def _distinct(C: np.ndarray, P: np.ndarray, w: np.ndarray, z: int) -> np.ndarray:
    """Replace repeated centers by the coreset points that cost most under the others (farthest
    first): k distinct centers whenever the coreset has ≥ k distinct points."""
    C = np.array(C, dtype=float)
    keep = first_distinct_rows(np.round(C, 12))
    repeated = np.ones(C.shape[0], dtype=bool)
    repeated[keep] = False
    dup = np.flatnonzero(repeated)  # ascending, as setdiff1d gave them
    for j in dup:  # at most k iterations
        _, dist = nearest_center(P, C[keep])
        gain = w * dist ** z
        if gain.max() <= 0:
            break
        C[j] = P[int(np.argmax(gain))]
        keep = np.r_[keep, j]
    return C


def _more_distinct_rows_than(a: np.ndarray, k: int) -> bool:
    """True only if ``a`` has more than k distinct rows; False: it may have k or fewer. Its first 4k + 4
    rows are enough to tell for a released coreset (its points are nearly all distinct), and distinct rows
    among them are distinct rows of ``a``: the sort of every row is left to the rare set that needs it."""
    if a.shape[0] <= k:
        return False
    return first_distinct_rows(a[:4 * k + 4]).size > k


def cluster_coreset(points, weights, k: int, objective: str, rng: np.random.Generator, fallback: np.ndarray,
                    n_init: int = 3, init=None) -> np.ndarray:
    """k centers for a weighted coreset (post-processing of a release).

    A fresh k-means++ fit (``n_init`` ≥ 3 restarts; weighted D¹ seeding + Weiszfeld for k-median)
    always runs; a warm start from ``init`` (e.g. an earlier release's centers, a DP output), when
    given, competes with it and the lower coreset cost wins — so the result is never worse, on the
    coreset, than a fresh fit. The centers are distinct whenever the coreset has ≥ k distinct points;
    with fewer, the remaining centers repeat the coreset's weighted mean (the public ball center if
    empty)."""
    w = np.maximum(np.asarray(weights, dtype=float), 0.0)
    pos = w > 0
    P, w = points[pos], w[pos]
    z = objective_exponent(objective)
    if P.shape[0] == 0:
        return _pad(np.zeros((0, fallback.size)), k, fallback)
    mean = (w[:, None] * P).sum(axis=0) / w.sum()
    rounded = np.round(P, 12)
    if not _more_distinct_rows_than(rounded, k):
        first = first_distinct_rows(rounded)
        if first.size <= k:  # the distinct points themselves, in input order
            return _pad(P[first], k, mean)
    n_init = max(3, int(n_init))
    warm = init is not None and np.shape(init) == (k, P.shape[1])
    if objective == "kmedian":
        cands = [weighted_kmedian(P, w, k, rng, n_init=n_init)]
        if warm:
            cands.append(weighted_kmedian(P, w, k, rng, n_init=1, init=np.asarray(init, dtype=float)))
    else:
        cands = [weighted_kmeans(P, w, k, rng, n_init=n_init)]
        if warm:
            cands.append(weighted_kmeans(P, w, k, rng, n_init=1, init=np.asarray(init, dtype=float)))
    cands = [_distinct(_pad(C, k, mean), P, w, z) for C in cands]
    if len(cands) == 1:  # no warm start: nothing to compare
        return cands[0]
    costs = [cost(P, C, w, z) for C in cands]
    return cands[int(np.argmin(costs))]
