"""Built-in public data sets: the default stream of ``make run`` and benchmark generators.

They are synthetic and public, so their parameters (and the radius rule used
with them) say nothing about anybody's data.
"""
from __future__ import annotations

import numpy as np


def gaussian_mixture(n: int, d: int, k: int, *, std: float, box: float, seed: int = 0, drift: float = 0.0):
    """n points from k spherical Gaussians with means uniform in [-box, box]^d.

    With ``drift`` > 0 the means move linearly by up to ``drift`` over the
    stream (a drifting stream). Returns (X, labels, means at the end).
    """
    rng = np.random.default_rng(seed)
    means = rng.uniform(-box, box, size=(k, d))
    direction = rng.normal(size=(k, d))
    direction /= np.linalg.norm(direction, axis=1, keepdims=True)
    labels = rng.integers(0, k, size=n)
    frac = np.linspace(0.0, 1.0, n)[:, None] if drift else 0.0
    X = means[labels] + drift * frac * direction[labels] + rng.normal(scale=std, size=(n, d))
    return X, labels, means + drift * direction


def default_stream(n: int = 200_000, seed: int = 0):
    """The stream ``make run`` clusters: 5 Gaussians in the plane, std 0.6, means in [-8, 8]^2.

    Public radius rule: box·√d + 5·std·√d (every coordinate within 5 std of a
    mean inside the box), i.e. about 15.6.
    """
    d, k, std, box = 2, 5, 0.6, 8.0
    X, labels, _ = gaussian_mixture(n, d, k, std=std, box=box, seed=seed)
    radius = (box + 5 * std) * np.sqrt(d)
    return X, labels, dict(n_clusters=k, radius=float(radius))
