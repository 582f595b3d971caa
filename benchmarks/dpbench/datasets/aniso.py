"""aniso32 (held out): an anisotropic Gaussian mixture, a generator family the engine was never tuned on.

k = 10 components in d = 32 with means uniform in [−2, 2]^32 and sizes from Dirichlet(3); each
component has its own random rotation Q and eigenvalues σ_max²·geomspace(1, 0.01, d) (condition number
100: elongated, overlapping clusters). Every coordinate's std is ≤ σ_max = 1.5 (a public parameter).
Random state ``default_rng(3232)``."""
from __future__ import annotations

import math

import numpy as np

from .registry import Raw, first_points, register


@register("aniso32", "anisotropic mixture", held_out=True)
def aniso(n: int = 100_000, d: int = 32, k: int = 10, box: float = 2.0, sigma_max: float = 1.5,
          seed: int = 3232, tick: int = 1000) -> Raw:
    rng = np.random.default_rng(seed)
    means = rng.uniform(-box, box, size=(k, d))
    sizes = rng.dirichlet(np.full(k, 3.0))
    lab = rng.choice(k, size=n, p=sizes)
    lam = sigma_max ** 2 * np.geomspace(1.0, 0.01, d)
    X = np.empty((n, d))
    for j in range(k):
        Q = np.linalg.qr(rng.normal(size=(d, d)))[0]
        idx = np.flatnonzero(lab == j)
        X[idx] = means[j] + (rng.normal(size=(idx.size, d)) * np.sqrt(lam)) @ Q.T
    half = box + 5 * sigma_max
    rule = (f"means in [−{box:g}, {box:g}]^{d}, every coordinate's std ≤ σ_max = {sigma_max:g} (generator "
            f"parameters): each coordinate within 5σ_max of a mean, so in [−{half:g}, {half:g}], "
            f"Λ = √{d}·{half:g} = {math.sqrt(d) * half:.4f}, center 0. "
            f"diffprivlib bounds: [−{half:g}, {half:g}]^{d}.")
    return Raw(X, lab, k, tick, math.sqrt(d) * half, np.zeros(d), (np.full(d, -half), np.full(d, half)), rule,
               dict(sizes=np.round(sizes, 4).tolist()))


register("aniso32_1e4", "anisotropic mixture", held_out=True, grid=False)(first_points(aniso, 10_000))
