"""gmm100: 64 Gaussians in the unit ball of R^100 (Google differential-privacy `learning/clustering` style)."""
from __future__ import annotations

import numpy as np

from .registry import Raw, first_points, register


@register("gmm100", "gmm")
def gmm100(n: int = 100_000, d: int = 100, k: int = 64, std: float = 0.0125, mean_radius: float = 0.875,
           tick: int = 1000) -> Raw:
    rng = np.random.default_rng(0)
    dirs = rng.normal(size=(k, d))
    dirs /= np.linalg.norm(dirs, axis=1, keepdims=True)
    means = dirs * (mean_radius * rng.uniform(size=k) ** (1.0 / d))[:, None]
    lab = rng.integers(0, k, size=n)
    X = means[lab] + rng.normal(scale=std, size=(n, d))
    nrm = np.linalg.norm(X, axis=1)
    over = nrm > 1.0
    X[over] /= nrm[over][:, None]
    rule = (f"{k} Gaussians in d={d}, σ={std} per coordinate, means uniform in the ball of radius {mean_radius}, "
            f"points clipped to the unit ball by the generator: Λ = 1, center = 0. diffprivlib bounds: [−1, 1]^{d}.")
    return Raw(X, lab, k, tick, 1.0, np.zeros(d), (np.full(d, -1.0), np.full(d, 1.0)), rule,
               dict(clipped_by_generator=int(over.sum())))


register("gmm100_1e4", "gmm", grid=False)(first_points(gmm100, 10_000))
