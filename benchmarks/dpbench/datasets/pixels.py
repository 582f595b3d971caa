"""Image-like pixel data, 28×28 = 784 dimensions in [0, 1] (held out: ``pixels``, seed 1; the engine
engineer's tuning instance is ``pix784``, seed 0, not in the default grid).

k stroke prototypes: each is the maximum of Gaussian-blurred dots (width 0.035) along three random
quadratic Bézier curves with control points in [0.2, 0.8]²; class sizes from Dirichlet(6); each sample
is its prototype shifted by up to ±2 pixels (cyclic), raised to a power γ ∈ [0.6, 1.6], scaled by
[0.7, 1.0], plus N(0, 0.08²) pixel noise, clipped to [0, 1]. Random state ``default_rng(seed + 784)``.
"""
from __future__ import annotations

import math

import numpy as np

from .registry import Raw, first_points, register


def _prototypes(rng, side: int, k: int) -> np.ndarray:
    yy, xx = np.mgrid[0:side, 0:side] / (side - 1.0)
    protos = []
    for _ in range(k):
        img = np.zeros((side, side))
        for _ in range(3):  # three strokes: random quadratic curves
            t = np.linspace(0, 1, 40)
            p0, p1, p2 = rng.uniform(0.2, 0.8, size=(3, 2))
            pts = (1 - t)[:, None] ** 2 * p0 + 2 * ((1 - t) * t)[:, None] * p1 + (t ** 2)[:, None] * p2
            for (py, px) in pts:
                img = np.maximum(img, np.exp(-((yy - py) ** 2 + (xx - px) ** 2) / (2 * 0.035 ** 2)))
        protos.append(img)
    return np.array(protos)


def pixels(n: int = 100_000, side: int = 28, k: int = 10, seed: int = 0, tick: int = 1000) -> Raw:
    rng = np.random.default_rng(seed + side * side)
    d = side * side
    protos = _prototypes(rng, side, k)
    sizes = rng.dirichlet(np.full(k, 6.0))
    lab = rng.choice(k, size=n, p=sizes)
    X = np.empty((n, d), dtype=np.float64)
    ar = np.arange(side)
    for s0 in range(0, n, 10000):
        L = lab[s0:s0 + 10000]
        m = L.size
        sh = rng.integers(-2, 3, size=(m, 2))
        rows = (ar[None, :] - sh[:, :1]) % side  # np.roll(img, s, axis) == img[(i - s) % side]
        cols = (ar[None, :] - sh[:, 1:]) % side
        out = protos[L[:, None, None], rows[:, :, None], cols[:, None, :]]
        gamma = rng.uniform(0.6, 1.6, size=(m, 1, 1))
        out = np.clip(out ** gamma * rng.uniform(0.7, 1.0, size=(m, 1, 1)) + 0.08 * rng.normal(size=out.shape), 0, 1)
        X[s0:s0 + m] = out.reshape(m, d)
    rule = (f"pixel intensities in [0, 1]^{d} (public encoding; {side}×{side} images, seed {seed}): ball of center "
            f"(0.5,…,0.5) and Λ = √{d}/2 = {math.sqrt(d) / 2:g}. diffprivlib bounds: [0, 1]^{d}.")
    return Raw(X, lab, k, tick, math.sqrt(d) / 2, np.full(d, 0.5), (np.zeros(d), np.ones(d)), rule, dict(seed=seed))


register("pixels", "image-like pixels", held_out=True)(lambda: pixels(seed=1))
register("pixels_1e4", "image-like pixels", held_out=True)(first_points(lambda: pixels(seed=1), 10_000))
register("pix784", "image-like pixels", grid=False)(lambda: pixels(seed=0))
register("pix784_1e4", "image-like pixels", grid=False)(first_points(lambda: pixels(seed=0), 10_000))
