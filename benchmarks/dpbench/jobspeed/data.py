"""The benchmark's input files, made once per work directory (public parameters next to each)."""
from __future__ import annotations

import math
import os
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Case:
    name: str          # the report's row
    path: str          # the input file
    n: int
    d: int
    k: int
    radius: float
    tick_size: int

    @property
    def ticks(self) -> int:
        return math.ceil(self.n / self.tick_size)


def blobs(n: int, d: int, k: int, seed: int = 0) -> np.ndarray:
    from dpstream.datasets import gaussian_mixture

    return gaussian_mixture(n, d, k, std=1.0, box=10.0, seed=seed)[0]


def unit_vectors(n: int, d: int, k: int, seed: int = 0) -> np.ndarray:
    """float32 unit vectors around k random directions (an embedding-like stream)."""
    rng = np.random.default_rng(seed)
    dirs = rng.normal(size=(k, d))
    dirs /= np.linalg.norm(dirs, axis=1, keepdims=True)
    X = dirs[rng.integers(0, k, n)] + rng.normal(scale=0.6 / math.sqrt(d), size=(n, d))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    return X.astype(np.float32)


def make_cases(work: str, n: int = 10 ** 6, d: int = 10, n_hd: int = 10 ** 5, d_hd: int = 384,
               k: int = 5, which=("npy", "csv", "hd")) -> list:
    """The three cases of the issue (file sizes: 80 MB .npy, ~190 MB .csv, 154 MB float32 .npy)."""
    os.makedirs(work, exist_ok=True)
    radius = (10.0 + 5 * 1.0) * math.sqrt(d)  # box + 5 std per coordinate: public, from the generator
    cases = []
    X = None
    if "npy" in which or "csv" in which:
        X = blobs(n, d, k)
    if "npy" in which:
        p = os.path.join(work, f"blobs_{n}x{d}.npy")
        if not os.path.exists(p):
            np.save(p, X)
        cases.append(Case(f"{n:.0e} × {d} .npy", p, n, d, k, radius, 1000))
    if "csv" in which:
        p = os.path.join(work, f"blobs_{n}x{d}.csv")
        if not os.path.exists(p):
            np.savetxt(p + ".tmp", X, delimiter=",", fmt="%.17g")
            os.replace(p + ".tmp", p)
        cases.append(Case(f"{n:.0e} × {d} .csv", p, n, d, k, radius, 1000))
    if "hd" in which:
        p = os.path.join(work, f"unit_{n_hd}x{d_hd}_f32.npy")
        if not os.path.exists(p):
            np.save(p, unit_vectors(n_hd, d_hd, k))
        cases.append(Case(f"{n_hd:.0e} × {d_hd} float32 unit .npy", p, n_hd, d_hd, k, 1.0, 1000))
    return cases
