"""Benchmark datasets and their PUBLIC radius rules.

Every dataset comes with a ball B(center, Λ) and a per-coordinate box derived
only from public knowledge of how the data is generated or encoded (generator
parameters, pixel ranges) — never from the data itself.  dpstream gets the
ball (``radius=Λ, center=c``); diffprivlib gets the box (``bounds=(lo, hi)``),
which is the tightest per-coordinate form of the same rule (it lies inside the
ball's bounding box, so it never favours dpstream).

The data and its stream order are fixed (seed 0) across the benchmark's seeds;
the seeds vary only the methods' randomness (DP noise, k-means++ inits).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Dict, Tuple

import numpy as np

DATA_SEED = 0


@dataclass
class Dataset:
    name: str
    X: np.ndarray
    k: int
    tick: int
    radius: float
    center: np.ndarray
    bounds: Tuple[np.ndarray, np.ndarray]
    rule: str
    meta: Dict = field(default_factory=dict)

    @property
    def n(self) -> int:
        return self.X.shape[0]

    @property
    def d(self) -> int:
        return self.X.shape[1]


def _shuffle(X: np.ndarray) -> np.ndarray:
    return X[np.random.default_rng(DATA_SEED).permutation(X.shape[0])]


def blobs(n: int, d: int = 10, centers: int = 10, std: float = 1.0, box: float = 10.0, tick: int = 1000) -> Dataset:
    from sklearn.datasets import make_blobs

    X, _ = make_blobs(n_samples=n, n_features=d, centers=centers, cluster_std=std, center_box=(-box, box),
                      random_state=DATA_SEED)
    X = _shuffle(X)
    half = box + 5 * std
    lam = math.sqrt(d) * half
    rule = (f"make_blobs(d={d}, centers={centers}, cluster_std={std}, center_box=(±{box:g})): every coordinate is "
            f"within 5σ of a mean inside the box, so each coordinate ∈ [−{half:g}, {half:g}] and "
            f"Λ = √d·(box + 5σ) = √{d}·{half:g} = {lam:.4f}, center = 0. diffprivlib bounds: [−{half:g}, {half:g}]^{d}.")
    return Dataset(f"blobs_{_short(n)}", X, k=centers, tick=tick, radius=lam, center=np.zeros(d),
                   bounds=(np.full(d, -half), np.full(d, half)), rule=rule,
                   meta=dict(generator="sklearn.datasets.make_blobs", random_state=DATA_SEED))


def gmm100(n: int = 100_000, d: int = 100, k: int = 64, std: float = 0.0125, mean_radius: float = 0.875,
           tick: int = 1000) -> Dataset:
    """Google differential-privacy `learning/clustering` style synthetic set: k Gaussians in the unit ball."""
    rng = np.random.default_rng(DATA_SEED)
    dirs = rng.normal(size=(k, d))
    dirs /= np.linalg.norm(dirs, axis=1, keepdims=True)
    means = dirs * (mean_radius * rng.uniform(size=k) ** (1.0 / d))[:, None]
    lab = rng.integers(0, k, size=n)
    X = means[lab] + rng.normal(scale=std, size=(n, d))
    nrm = np.linalg.norm(X, axis=1)
    over = nrm > 1.0
    X[over] /= nrm[over][:, None]
    rule = (f"{k} Gaussians in d={d}, σ={std} per coordinate, means uniform in the ball of radius {mean_radius}, "
            f"points clipped to the unit ball by the generator: Λ = 1, center = 0. "
            f"diffprivlib bounds: [−1, 1]^{d}.")
    return Dataset("gmm100", X, k=k, tick=tick, radius=1.0, center=np.zeros(d),
                   bounds=(np.full(d, -1.0), np.full(d, 1.0)), rule=rule,
                   meta=dict(clipped_by_generator=int(over.sum())))


def digits(tick: int = 100) -> Dataset:
    from sklearn.datasets import load_digits

    X = _shuffle(load_digits().data.astype(float))
    d = X.shape[1]
    rule = ("scikit-learn digits: 64 pixels with values in [0, 16] (public encoding): the cube [0,16]^64 lies in "
            "the ball of center (8,…,8) and Λ = 8·√64 = 64. diffprivlib bounds: [0, 16]^64.")
    return Dataset("digits", X, k=10, tick=tick, radius=8.0 * math.sqrt(d), center=np.full(d, 8.0),
                   bounds=(np.zeros(d), np.full(d, 16.0)), rule=rule)


def china(tick: int = 1000) -> Dataset:
    from sklearn.datasets import load_sample_image

    X = _shuffle(load_sample_image("china.jpg").reshape(-1, 3).astype(float) / 255.0)
    rule = ("china.jpg RGB pixels / 255 ∈ [0,1]^3 (public encoding): ball of center (0.5,0.5,0.5) and "
            "Λ = √3/2 ≈ 0.8660. diffprivlib bounds: [0, 1]^3.")
    return Dataset("china", X, k=10, tick=tick, radius=math.sqrt(3) / 2, center=np.full(3, 0.5),
                   bounds=(np.zeros(3), np.ones(3)), rule=rule)


def _short(n: int) -> str:
    e = int(round(math.log10(n)))
    return f"1e{e}" if 10**e == n else str(n)


LOADERS: Dict[str, Callable[[], Dataset]] = {
    "blobs_1e4": lambda: blobs(10_000),
    "blobs_1e5": lambda: blobs(100_000),
    "blobs_1e6": lambda: blobs(1_000_000),
    "gmm100": lambda: gmm100(),
    "digits": lambda: digits(),
    "china": lambda: china(),
}


def load(name: str) -> Dataset:
    if name not in LOADERS:
        raise SystemExit(f"unknown dataset {name!r}; choose from {sorted(LOADERS)}")
    return LOADERS[name]()
