"""Randomly shifted grids (quadtrees), cell ids, hashing and bit encodings (Alg. 2, Prop. 1, Lemma 7).

Tree q has levels ℓ = 0..L with cell side g_ℓ = 2Λ/2^ℓ and a shift
v_q ~ U[0, 2Λ)^d shared by its levels; level ℓ uses v_q mod g_ℓ, which gives the
same (nested) partition as v_q with ids offset by a constant.  Cell ids are
offset to be non-negative and fit b_ℓ bits per coordinate, computed from the
public radius (P10); encoding asserts it, because the counters'
noise is calibrated for exactly B_ℓ = d·b_ℓ bits.

Shifts and hash functions are keyed draws from the noise source (P15):
independent of the data, reproducible from the seed.
"""
from __future__ import annotations

import numpy as np

from .noise import NoiseSource
from .params import EngineConfig

_MASK = np.uint64(0xFFFFFFFF)


class ShiftedGrids:
    def __init__(self, cfg: EngineConfig, noise: NoiseSource):
        self.cfg = cfg
        d, L = cfg.dim, cfg.grid_levels
        self.sides = np.array([cfg.cell_side(lv) for lv in range(L)])
        self.offsets = np.array([cfg.cell_offset(lv) for lv in range(L)], dtype=np.int64)
        self.bits = np.array([cfg.cell_bits(lv) for lv in range(L)], dtype=np.int64)
        self.values = np.array([cfg.cell_values(lv) for lv in range(L)], dtype=np.int64)
        self.shift = np.stack([noise.uniform(("grid", q, 0, "shift"), d, 0.0, 2.0 * cfg.radius)
                               for q in range(cfg.n_trees)])  # (Q, d)
        # multiply-shift hashing of the integer cell vector, one function per (tree, level, rep)
        self.hash_a = np.empty((cfg.n_trees, L, cfg.n_reps, d), dtype=np.uint64)
        self.hash_b = np.empty((cfg.n_trees, L, cfg.n_reps), dtype=np.uint64)
        for q in range(cfg.n_trees):
            for lv in range(L):
                for r in range(cfg.n_reps):
                    g = noise.generator(("grid", q, 0, ("hash", lv, r)), d + 1)
                    raw = g.integers(0, 2**63, d + 1, dtype=np.int64).astype(np.uint64)
                    self.hash_a[q, lv, r] = raw[:d] * np.uint64(2) + np.uint64(1)
                    self.hash_b[q, lv, r] = raw[d]

    def level_shift(self, q: int, level: int) -> np.ndarray:
        return np.mod(self.shift[q], self.sides[level])

    def cell_ids(self, x: np.ndarray, q: int, level: int) -> np.ndarray:
        """Non-negative integer cell ids (n, d) of points x (already centred, ‖x‖ ≤ Λ)."""
        g = self.sides[level]
        ids = np.floor((x + self.level_shift(q, level)) / g).astype(np.int64) + self.offsets[level]
        if ids.size and (ids.min() < 0 or ids.max() >= (1 << int(self.bits[level]))):
            raise AssertionError("cell id outside its calibrated bit width (point not clipped?)")
        return ids

    def cell_centers(self, ids: np.ndarray, q: int, level: int) -> np.ndarray:
        g = self.sides[level]
        return (ids - self.offsets[level] + 0.5) * g - self.level_shift(q, level)

    def bucket(self, ids: np.ndarray, q: int, level: int, r: int) -> np.ndarray:
        # wrap-around uint64 arithmetic is the point of multiply-shift hashing
        with np.errstate(over="ignore"):
            h = (ids.astype(np.uint64) * self.hash_a[q, level, r]).sum(axis=1, dtype=np.uint64)
            h = h + self.hash_b[q, level, r]
        return ((h >> np.uint64(32)) % np.uint64(self.cfg.buckets)).astype(np.int64)

    def encode(self, ids: np.ndarray, level: int) -> np.ndarray:
        """Bit matrix (n, d·b_ℓ), coordinate-major, least significant bit first."""
        b = int(self.bits[level])
        shifts = np.arange(b, dtype=np.int64)
        return ((ids[:, :, None] >> shifts) & 1).reshape(ids.shape[0], ids.shape[1] * b).astype(np.int8)

    def decode(self, bits: np.ndarray, level: int) -> np.ndarray:
        b = int(self.bits[level])
        d = self.cfg.dim
        w = (1 << np.arange(b, dtype=np.int64))
        return (bits.reshape(bits.shape[0], d, b).astype(np.int64) * w).sum(axis=2)
