"""Clustering costs of a set of centers on points: k-means Σ min‖x − c‖² and k-median Σ min‖x − c‖.

The cost ratio of a method is its cost on all points divided by the reference's cost on the same points
(k-means: scikit-learn ``KMeans(n_init=10, random_state=0)``; k-median: :mod:`dpbench.metrics.kmedian`)."""
from __future__ import annotations

from typing import Tuple

import numpy as np


def costs(X: np.ndarray, C: np.ndarray, chunk: int = 1 << 15) -> Tuple[float, float]:
    """(k-means cost, k-median cost) of centers C on X, float64, chunked."""
    C = np.asarray(C, dtype=float)
    c2 = (C ** 2).sum(axis=1)
    km = kmed = 0.0
    for s in range(0, X.shape[0], chunk):
        x = X[s:s + chunk]
        d2 = np.maximum(((x ** 2).sum(axis=1)[:, None] - 2.0 * x @ C.T + c2[None, :]).min(axis=1), 0.0)
        km += float(d2.sum())
        kmed += float(np.sqrt(d2).sum())
    return km, kmed


def kmeans_cost(X, C) -> float:
    return costs(X, C)[0]


def kmedian_cost(X, C) -> float:
    return costs(X, C)[1]

