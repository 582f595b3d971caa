"""blobs_1e4 / 1e5 / 1e6: scikit-learn ``make_blobs`` (d = 10, 10 centers, σ = 1, box ±10, random_state 0)."""
from __future__ import annotations

import math

import numpy as np

from .registry import Raw, register


def blobs(n: int, d: int = 10, centers: int = 10, std: float = 1.0, box: float = 10.0, tick: int = 1000) -> Raw:
    from sklearn.datasets import make_blobs

    X, y = make_blobs(n_samples=n, n_features=d, centers=centers, cluster_std=std, center_box=(-box, box),
                      random_state=0)
    half = box + 5 * std
    lam = math.sqrt(d) * half
    rule = (f"make_blobs(d={d}, centers={centers}, cluster_std={std:g}, center_box=(±{box:g})): every coordinate "
            f"is within 5σ of a mean inside the box, so each coordinate ∈ [−{half:g}, {half:g}] and "
            f"Λ = √d·(box + 5σ) = √{d}·{half:g} = {lam:.4f}, center = 0. "
            f"diffprivlib bounds: [−{half:g}, {half:g}]^{d}.")
    return Raw(X, y, centers, tick, lam, np.zeros(d), (np.full(d, -half), np.full(d, half)), rule,
               dict(generator="sklearn.datasets.make_blobs", random_state=0))


register("blobs_1e4", "blobs")(lambda: blobs(10_000))
register("blobs_1e5", "blobs", kmedian=True)(lambda: blobs(100_000))
register("blobs_1e6", "blobs")(lambda: blobs(1_000_000))
