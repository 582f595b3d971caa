"""What every black box A shares (:mod:`dpstream.semicoresets` describes A): its output, a
:class:`WeightedSet` per block, and :class:`Semicoreset`, the interface (open a block, release it once) with
the noise every implementation draws — integer count and quantised-sum noise per part or in part order,
and the count threshold τ_w whose union bound covers every block of a run (P14)."""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Optional

import numpy as np

from .blocks import normalise, quantise
from .noise import NoiseSource
from .params import EngineConfig
from .privacy import PrivacyPlan


@dataclass
class WeightedSet:
    points: np.ndarray  # (m, d)
    weights: np.ndarray  # (m,)
    part: np.ndarray  # (m,) part index of each output point (for A outputs), or -1

    @classmethod
    def empty(cls, d: int) -> "WeightedSet":
        return cls(np.zeros((0, d)), np.zeros(0), np.zeros(0, dtype=np.int64))

    def __len__(self):
        return self.points.shape[0]

    @staticmethod
    def concat(sets, d: int) -> "WeightedSet":
        sets = [s for s in sets if s is not None and len(s)]
        if not sets:
            return WeightedSet.empty(d)
        return WeightedSet(np.concatenate([s.points for s in sets]), np.concatenate([s.weights for s in sets]),
                           np.concatenate([s.part for s in sets]))


@functools.lru_cache(maxsize=64)
def _harmonic(T: int) -> float:
    """H_T = Σ_{j ≤ T} 1/j, or beyond 10⁶ its upper bound ln T + γ + 1/(2T) (a larger H only lowers the
    shares: the union bound stays valid, and a huge public horizon allocates nothing)."""
    if T <= 10 ** 6:
        return float(np.sum(1.0 / np.arange(1, T + 1)))
    return math.log(T) + 0.5772156649015329 + 0.5 / T


class Semicoreset:
    name = "base"

    def __init__(self, cfg: EngineConfig, plan: PrivacyPlan, noise: NoiseSource):
        self.cfg = cfg
        self.plan = plan
        self.noise = noise
        self.grid = float(2 ** cfg.sum_grid_bits)
        self.calls = []  # (key, number of input points) of each release, for tracer tests when enabled
        self.record_calls = False

    # -- the interface ----------------------------------------------------------
    def open_block(self, centers, radii, key, directions=None):  # pragma: no cover - interface
        raise NotImplementedError

    def directions(self, key) -> np.ndarray:
        """The tree's hyperplane directions for ``key`` (a keyed draw: data-independent); none otherwise."""
        return np.zeros((0, self.cfg.dim))

    def release(self, block, key, n_hat: Optional[float] = None) -> WeightedSet:
        """The DP step on a whole block: a weighted set in data coordinates (zero weights dropped).
        ``n_hat``: the DP count estimate of the stream's points since the ring's last release, an upper bound
        on the block (``cells_gate`` reads it; never an exact count)."""
        if self.record_calls:
            self.calls.append((key, int(block.n)))
        out = self.run_gated(block, key, n_hat)
        centers, radii = block.centers, block.radii
        pts = centers[out.part] + radii[out.part][:, None] * out.points
        keep = out.weights > 0
        return WeightedSet(pts[keep], out.weights[keep], out.part[keep])

    def __call__(self, x, part, centers, radii, key) -> WeightedSet:
        block = self.open_block(np.asarray(centers, dtype=float), np.asarray(radii, dtype=float), key)
        block.add(np.asarray(x, dtype=float).reshape(-1, self.cfg.dim), np.asarray(part, dtype=np.int64))
        return self.release(block, key)

    def run(self, block, key) -> WeightedSet:  # pragma: no cover - interface
        raise NotImplementedError

    def run_gated(self, block, key, n_hat: Optional[float]) -> WeightedSet:
        return self.run(block, key)

    # -- helpers shared by the implementations --------------------------------
    def normalise(self, x, part, centers, radii):
        return normalise(x, part, centers, radii)

    def quantise(self, y: np.ndarray) -> np.ndarray:
        return quantise(y, self.grid)

    def part_noise(self, key, owner: np.ndarray, tail=(), scale: float = None, per_part: bool = True) -> np.ndarray:
        """Integer noise for entries owned by parts ``owner`` (sorted ascending).

        ``per_part``: part p's entries draw under ``key + (p,)``, so a part's noise never depends
        on another part's shape (the tree, whose nodes per part are noisy decisions). Otherwise the
        shape is public (snap: one count per part; lloyd: k per part) and one draw under ``key``
        covers every part in order: entry i is the i-th value whoever draws it."""
        scale = self.plan.a_count_scale if scale is None else scale
        if owner.size == 0:
            return np.zeros((0,) + tuple(tail), dtype=np.int64)
        if not per_part:
            return self.noise.int_noise(key, (owner.size,) + tuple(tail), self.plan.a_mechanism, scale)
        starts = np.flatnonzero(np.r_[True, owner[1:] != owner[:-1]])
        ends = np.r_[starts[1:], owner.size]
        # loop over parts, not points; the draws keep their own dtype (integer noise stays integer)
        return np.concatenate([self.noise.int_noise(key + (int(owner[a]),), (b - a,) + tuple(tail),
                                                    self.plan.a_mechanism, scale) for a, b in zip(starts, ends)])

    per_part_noise = False

    def noisy_counts(self, key, counts: np.ndarray, owner: np.ndarray, scale: float = None,
                     per_part: bool = None) -> np.ndarray:
        """Exact counts + integer noise at ``scale`` (A's count scale by default; the cells and their Lloyd
        steps have their own), drawn as :meth:`part_noise` says (``per_part``: this A's rule by default)."""
        per_part = self.per_part_noise if per_part is None else per_part
        return counts.astype(np.int64) + self.part_noise(key, owner, scale=scale, per_part=per_part)

    def noisy_sums(self, key, y_sums_q: np.ndarray, owner: np.ndarray, scale: float = None,
                   per_part: bool = None) -> np.ndarray:
        """Quantised integer sums + integer noise (grid units) → float sums in normalised units; ``scale`` and
        ``per_part`` as in :meth:`noisy_counts` (A's sum scale by default)."""
        scale = self.plan.a_sum_scale if scale is None else scale
        per_part = self.per_part_noise if per_part is None else per_part
        z = self.part_noise(key, owner, y_sums_q.shape[1:], scale * self.grid, per_part=per_part)
        return (y_sums_q + z) / self.grid

    def count_tail(self, n_draws: int, run_wide: bool = True, key=None) -> float:
        """τ_w: with prob ≥ 1−β no noise among ``n_draws`` count draws exceeds it.

        ``run_wide`` takes the union bound over every block the run can release as well (at most
        one per ring per tick: a public number), so empty parts add no phantom mass over the
        whole stream (P14); counts *inside* a part whose own count already passed
        use the bound of one release.
        """
        beta = self.cfg.weight_beta
        n = max(int(n_draws), 1) * (self.run_wide_blocks(key) if run_wide else 1)
        s = self.plan.a_count_scale
        if self.plan.a_mechanism == "gaussian":
            return s * math.sqrt(2.0 * math.log(2.0 * n / beta))
        return s * math.log(2.0 * n / beta)

    def run_wide_blocks(self, key=None) -> float:
        """The union bound's weight of the block ``key`` = ("A", epoch, ring, j) among the run's blocks.

        ``root_tail="horizon"``: every block alike, T·I of them (at most one per ring per tick).
        ``"block"``: the j-th block of a ring in an epoch gets the share 1/((j+1)·H_T) of its ring's and
        epoch's β (Σ_{j<T} 1/(j+1) = H_T, and a ring releases at most T blocks per epoch), the rings and
        the epochs (≤ E_max with the "horizon" schedule, else ≤ T) alike: still ≤ β phantoms expected
        over the run, but a ring's first blocks — all a short stream has — need not pay for the
        T·I blocks of a long run under a far horizon. j and the epoch are counts of DP outputs (fires,
        public flush ticks, DP-count adoptions), so the threshold stays post-processing."""
        cfg = self.cfg
        T = max(int(cfg.horizon_ticks), 1)
        if (cfg.root_tail != "block" or key is None or len(key) < 4 or key[0] != "A"
                or not isinstance(key[3], (int, np.integer)) or isinstance(key[3], bool)):  # not a ring's block
            return float(T * cfg.n_rings)
        from . import rules
        epochs = rules.max_epochs(T) if cfg.epoch_schedule == "horizon" else T
        harmonic = _harmonic(T)
        share = 0.5 / (T * cfg.n_rings) + 0.5 / (cfg.n_rings * epochs * harmonic * (int(key[3]) + 1))
        return 1.0 / share

    def leaf_threshold(self) -> float:
        """θ_k, the noisy count a released part or leaf needs (one part; public): the block-size rule's unit."""
        if self.plan.a_sum_scale > 0:
            return max(self.count_tail(1, run_wide=False), self.cfg.tree_keep_factor * self.sum_noise_norm())
        return self.count_tail(1)

    def sum_noise_norm(self, dim: int = None) -> float:
        s = self.plan.a_sum_scale
        per = s if self.plan.a_mechanism == "gaussian" else s * math.sqrt(2.0)
        return math.sqrt(self.cfg.dim if dim is None else dim) * per
