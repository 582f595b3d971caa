"""digits: scikit-learn's 1,797 8×8 handwritten digits (64 pixels in [0, 16]), k = 10, ticks of 100."""
from __future__ import annotations

import math

import numpy as np

from .registry import Raw, register


@register("digits", "digits")
def digits(tick: int = 100) -> Raw:
    from sklearn.datasets import load_digits

    b = load_digits()
    X = b.data.astype(float)
    d = X.shape[1]
    rule = ("scikit-learn digits: 64 pixels with values in [0, 16] (public encoding): the cube [0,16]^64 lies in "
            "the ball of center (8,…,8) and Λ = 8·√64 = 64. diffprivlib bounds: [0, 16]^64.")
    return Raw(X, b.target, 10, tick, 8.0 * math.sqrt(d), np.full(d, 8.0), (np.zeros(d), np.full(d, 16.0)), rule)
