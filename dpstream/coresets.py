"""Black box B: a non-DP coreset by sensitivity sampling.

Feldman–Langberg 2011 / Bachem–Lucic–Krause 2017: weighted k-means++ (D^z
sampling) gives a rough solution A; each point's sensitivity is bounded by
s(x) = w_x·(dist(x, A)^z / cost_A + 1 / W_a(x)); m i.i.d. draws with
p(x) = s(x)/S get weight w_x/(m·p(x)) and duplicates are merged.  The result is
unbiased: E[cost(Q, C)] = cost(P, C) for every C.

B only ever sees DP outputs (block semicoresets, released coresets), so it is
post-processing and costs no budget; its randomness is still keyed so runs are
reproducible.  Sets no larger than m pass through unchanged.
"""
from __future__ import annotations

import numpy as np

from .rings import nearest_center


def _sq_dists(points: np.ndarray, c: np.ndarray) -> np.ndarray:
    """((points − c) ** 2).sum(axis=1), squared in place (x ** 2 is x · x)."""
    diff = points - c
    np.multiply(diff, diff, out=diff)
    return diff.sum(axis=1)


def kmeanspp(points: np.ndarray, weights: np.ndarray, k: int, rng: np.random.Generator, z: int = 2):
    """Weighted D^z seeding; returns center indices (≤ k, fewer if fewer distinct points)."""
    n = points.shape[0]
    w = np.maximum(weights, 0.0)
    if n == 0 or w.sum() <= 0:
        return np.zeros(0, dtype=np.int64)
    first = rng.choice(n, p=w / w.sum())
    chosen = [first]
    d2 = _sq_dists(points, points[first])
    for _ in range(1, min(k, n)):
        pot = w * (d2 if z == 2 else np.sqrt(d2))
        tot = pot.sum()
        if tot <= 0:
            break
        c = rng.choice(n, p=pot / tot)
        chosen.append(c)
        d2 = np.minimum(d2, _sq_dists(points, points[c]))
    return np.asarray(chosen, dtype=np.int64)


def greedy_kmeanspp(points: np.ndarray, weights: np.ndarray, k: int, rng: np.random.Generator,
                    n_trials: int = None, p2: np.ndarray = None, two_p: np.ndarray = None) -> np.ndarray:
    """Greedy weighted k-means++ seeding (Arthur–Vassilvitskii; the variant scikit-learn uses):
    each new center is the best of ``2 + ⌊ln k⌋`` D²-sampled candidates. Returns (k, d) centers
    (points may repeat if fewer than k have positive weight). ``p2``, ``two_p``: the caller's
    ``einsum("ij,ij->i", points, points)`` and ``2.0 * points``, when it seeds the same points again."""
    n, d = points.shape
    w = np.maximum(weights, 0.0)
    trials = n_trials or 2 + int(np.log(max(k, 1)))
    if p2 is None:
        p2 = np.einsum("ij,ij->i", points, points)
    if two_p is None:
        two_p = 2.0 * points  # 2·x once, not per candidate: the same products enter the same matrix products
    C = np.empty((k, d))
    first = rng.choice(n, p=w / w.sum())
    C[0] = points[first]
    d2 = np.maximum(p2 - two_p @ points[first] + p2[first], 0.0)
    for j in range(1, k):
        pot = w * d2
        tot = pot.sum()
        if tot <= 0:
            C[j:] = C[0]
            break
        cand = np.searchsorted(np.cumsum(pot), rng.uniform(size=trials) * tot)
        cand = np.minimum(cand, n - 1)
        # max(|x|² − 2x·c + |c|², 0) in place, in that order
        dc = two_p[cand] @ points.T
        np.subtract(p2[None, :], dc, out=dc)
        dc += p2[cand][:, None]
        np.maximum(dc, 0.0, out=dc)
        new = np.minimum(d2[None, :], dc, out=dc)
        best = int(np.argmin(new @ w))
        C[j] = points[cand[best]]
        d2 = new[best]
    return C


def sensitivity_sample(points: np.ndarray, weights: np.ndarray, m: int, k: int, rng: np.random.Generator,
                       z: int = 2):
    """A weighted coreset of size ≤ m of (points, weights); unbiased for every cost."""
    w = np.maximum(np.asarray(weights, dtype=float), 0.0)
    pos = w > 0
    points, w = points[pos], w[pos]
    n = points.shape[0]
    if n <= m:
        return points, w
    seeds = kmeanspp(points, w, k, rng, z)
    a, dist = nearest_center(points, points[seeds])
    dz = dist ** z
    cost = float((w * dz).sum())
    W = np.bincount(a, weights=w, minlength=seeds.size)
    s = w * ((dz / cost if cost > 0 else 0.0) + 1.0 / W[a])
    p = s / s.sum()
    draws = rng.choice(n, size=m, p=p)
    cnt = np.bincount(draws, minlength=n)  # draws are indexes below n: counted, not sorted
    idx = np.flatnonzero(cnt)
    cnt = cnt[idx]
    new_w = cnt * w[idx] / (m * p[idx])
    return points[idx], new_w
