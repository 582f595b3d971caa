"""Embedding-like mixtures on the unit sphere (emb64, emb256, emb784; held-out: emb384).

Normalised text/image embeddings are unit vectors, anisotropic (they share a common direction) and,
within a topic, vary mostly along a few directions. The generator: k cluster means = random unit
directions pulled towards one common direction (weight 0.6) and renormalised; cluster sizes from a
Dirichlet(4) draw; within a cluster, noise in a cluster-specific random subspace of dimension
``intrinsic`` with a 1/√j spectrum (scaled to unit total variance), plus a small isotropic floor
(0.3/√d per coordinate), times ``spread``; every point is then normalised to unit length.
Random state ``default_rng(seed + d)``.
"""
from __future__ import annotations

import math

import numpy as np

from .registry import Raw, first_points, register


def embeddings(n: int = 100_000, d: int = 256, k: int = 10, intrinsic: int = 24, spread: float = 0.75,
               seed: int = 0, tick: int = 1000) -> Raw:
    rng = np.random.default_rng(seed + d)
    common = rng.normal(size=d)
    common /= np.linalg.norm(common)
    means = rng.normal(size=(k, d))
    means /= np.linalg.norm(means, axis=1, keepdims=True)
    means = means + 0.6 * common
    means /= np.linalg.norm(means, axis=1, keepdims=True)
    sizes = rng.dirichlet(np.full(k, 4.0))
    lab = rng.choice(k, size=n, p=sizes)
    X = np.empty((n, d))
    spec = 1.0 / np.sqrt(np.arange(1, intrinsic + 1))
    for j in range(k):
        idx = np.flatnonzero(lab == j)
        basis = np.linalg.qr(rng.normal(size=(d, intrinsic)))[0]
        noise = (rng.normal(size=(idx.size, intrinsic)) * spec) @ basis.T
        noise /= np.sqrt((spec ** 2).sum())
        noise += 0.3 * rng.normal(size=(idx.size, d)) / math.sqrt(d)
        X[idx] = means[j] + spread * noise
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    rule = (f"unit-norm vectors (the generator normalises every point, as embedding models do; d={d}, k={k}, "
            f"intrinsic dimension {intrinsic}, spread {spread:g}, seed {seed}): ball of center 0 and Λ = 1. "
            f"diffprivlib bounds: [−1, 1]^{d}.")
    return Raw(X, lab, k, tick, 1.0, np.zeros(d), (np.full(d, -1.0), np.full(d, 1.0)), rule,
               dict(intrinsic=intrinsic, spread=spread, seed=seed))


register("emb64", "embeddings")(lambda: embeddings(d=64))
register("emb256", "embeddings", kmedian=True)(lambda: embeddings(d=256))
register("emb784", "embeddings")(lambda: embeddings(d=784))
register("emb784_1e4", "embeddings")(first_points(lambda: embeddings(d=784), 10_000))
# short inputs for fit's cells rule (rules.short_fit_options): the first 10⁴–5·10⁴ points of the streams above
register("emb64_1e4", "embeddings", grid=False)(first_points(lambda: embeddings(d=64), 10_000))
register("emb256_1e4", "embeddings", grid=False)(first_points(lambda: embeddings(d=256), 10_000))
register("emb256_3e4", "embeddings", grid=False)(first_points(lambda: embeddings(d=256), 30_000))
register("emb784_3e4", "embeddings", grid=False)(first_points(lambda: embeddings(d=784), 30_000))
register("emb784_5e4", "embeddings", grid=False)(first_points(lambda: embeddings(d=784), 50_000))
# held out: another dimension (a common sentence-embedding size), intrinsic dimension and seed
register("emb384", "embeddings", held_out=True)(lambda: embeddings(d=384, intrinsic=8, seed=1000))
register("emb384_1e4", "embeddings", held_out=True, grid=False)(
    first_points(lambda: embeddings(d=384, intrinsic=8, seed=1000), 10_000))
