"""skewed: one mode with 91% of the mass near the origin (σ = 2) and 9 small far modes (1% each,
σ = 0.5, means uniform in [−10, 10]^10). Random state ``default_rng(seed + 99)``."""
from __future__ import annotations

import math

import numpy as np

from .registry import Raw, register


@register("skewed", "skewed mixture")
def skewed(n: int = 100_000, d: int = 10, k: int = 10, seed: int = 0, tick: int = 1000) -> Raw:
    rng = np.random.default_rng(seed + 99)
    box, big, small = 10.0, 2.0, 0.5
    means = np.r_[np.zeros((1, d)), rng.uniform(-box, box, size=(k - 1, d))]
    p = np.r_[0.91, np.full(k - 1, 0.01)]
    lab = rng.choice(k, size=n, p=p)
    X = means[lab] + rng.normal(scale=np.where(lab == 0, big, small)[:, None], size=(n, d))
    half = box + 5 * big
    rule = (f"means in the box [−{box:g}, {box:g}]^{d} (the main mode at 0), per-coordinate σ ≤ {big:g}: every "
            f"coordinate within 5σ of a mean, so in [−{half:g}, {half:g}], Λ = √{d}·{half:g} = "
            f"{math.sqrt(d) * half:.4f}, center 0. diffprivlib bounds: [−{half:g}, {half:g}]^{d}.")
    return Raw(X, lab, k, tick, math.sqrt(d) * half, np.zeros(d), (np.full(d, -half), np.full(d, half)), rule,
               dict(mass=p.tolist()))
