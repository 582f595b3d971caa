"""Stream orders. Shuffled: a fixed random permutation (seed 0, as the benchmark always used).
In order: stable sort by cluster label, so the clusters arrive one after another (drift); a data set
without labels keeps its natural order (china: the image's raster order, a spatially drifting stream)."""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np

ORDER_SEED = 0


def stream_order(n: int, labels: Optional[np.ndarray], inorder: bool) -> Tuple[np.ndarray, str]:
    if not inorder:
        return np.random.default_rng(ORDER_SEED).permutation(n), "shuffled"
    if labels is None:
        return np.arange(n), "natural"
    return np.argsort(labels, kind="stable"), "inorder"
