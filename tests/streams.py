"""Small test streams shared by the flush-schedule tests (tests/ is on sys.path under pytest)."""
from __future__ import annotations

import numpy as np

MEANS = np.array([[6.0, 6.0], [-8.0, 3.0], [2.0, -9.0]])


def three_blob_ticks(seed: int, sizes) -> list:
    """One array per tick, ``sizes[i]`` points each, from three well-separated unit Gaussians in 2-d."""
    rng = np.random.default_rng(seed)
    return [MEANS[rng.integers(3, size=n)] + rng.normal(size=(n, 2)) for n in sizes]
