"""china: the 273,280 RGB pixels of scikit-learn's china.jpg / 255, k = 10 (no labels: its in-order
variant is the image's raster order)."""
from __future__ import annotations

import math

import numpy as np

from .registry import Raw, register


@register("china", "image colours", kmedian=True)
def china(tick: int = 1000) -> Raw:
    from sklearn.datasets import load_sample_image

    X = load_sample_image("china.jpg").reshape(-1, 3).astype(float) / 255.0
    rule = ("china.jpg RGB pixels / 255 ∈ [0,1]^3 (public encoding): ball of center (0.5,0.5,0.5) and "
            "Λ = √3/2 ≈ 0.8660. diffprivlib bounds: [0, 1]^3.")
    return Raw(X, None, 10, tick, math.sqrt(3) / 2, np.full(3, 0.5), (np.zeros(3), np.ones(3)), rule)


@register("flower", "image colours", held_out=True, grid=False)
def flower(tick: int = 1000) -> Raw:
    """flower.jpg, the other sample image of scikit-learn: the same public rule as china, other colours
    (a low-dimensional set the engine's defaults were not tuned on; not in the default grid)."""
    from sklearn.datasets import load_sample_image

    X = load_sample_image("flower.jpg").reshape(-1, 3).astype(float) / 255.0
    rule = ("flower.jpg RGB pixels / 255 ∈ [0,1]^3 (public encoding): ball of center (0.5,0.5,0.5) and "
            "Λ = √3/2 ≈ 0.8660. diffprivlib bounds: [0, 1]^3.")
    return Raw(X, None, 10, tick, math.sqrt(3) / 2, np.full(3, 0.5), (np.zeros(3), np.ones(3)), rule)
