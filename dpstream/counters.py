"""Binary mechanism for continual counting (Chan–Shi–Song 2011; Dwork et al. 2010).

Vectorised over K counters with vector-valued updates: at tick t every
coordinate of the K-vector receives one update (zero for ⊥), and the released
value is the noisy prefix sum.  A record lies in at most L_T = ⌊log2 T⌋ + 1
p-sums while t ≤ T, which is what the plan calibrates for; the mechanism fails
closed past the horizon (P3).

State is O(K): the exact prefix sum and the running total of the noise of the
p-sums that tick t's binary expansion selects.  Node noise is keyed by
(component, level, node index), so it is regenerated, not stored, when a node
leaves the expansion: identical values, no fresh draw.
"""
from __future__ import annotations

import numpy as np

from .noise import NoiseSource


class HorizonExceeded(RuntimeError):
    """The counter's privacy holds only up to its horizon T (P3)."""


def popcount(t: int) -> int:
    return bin(int(t)).count("1")


class BinaryMechanism:
    """K continual counters stepped together, noise ``mechanism`` with ``scale`` per p-sum node.

    ``scale`` may be a scalar or a length-K array (coordinates of different
    sensitivity, e.g. grid levels with different id widths, get their own σ).

    ``segments`` — ``[(subkey, start, stop), ...]`` covering ``[0, K)`` in order —
    draws each segment's node noise under its own key ``key + subkey``, so a
    mechanism over one segment alone (a Beam key holding one (tree, level))
    draws exactly the noise of that segment of the vectorised mechanism.
    """

    def __init__(self, size: int, horizon: int, noise: NoiseSource, key: tuple,
                 mechanism: str, scale, segments=None):
        self.size = int(size)
        self.horizon = int(horizon)
        self.levels = int(np.floor(np.log2(self.horizon))) + 1
        self.noise = noise
        self.key = tuple(key)
        self.mechanism = mechanism
        self.scale = np.broadcast_to(np.asarray(scale, dtype=float), (self.size,)).copy()
        if segments is None:
            segments = [((), 0, self.size)]
        segments = [(tuple(k), int(a), int(b)) for k, a, b in segments]
        if [a for _, a, _ in segments] != [0] + [b for _, _, b in segments[:-1]] or segments[-1][2] != self.size:
            raise ValueError("segments must cover [0, size) in order without gaps")
        self.segments = segments
        self.t = 0
        self.exact = np.zeros(self.size, dtype=np.int64)  # exact prefix sum S_t
        self.noise_total = np.zeros(self.size, dtype=np.int64)  # Σ noise of the p-sums in t's expansion

    def node_noise(self, level: int, t: int) -> np.ndarray:
        # the noise source's integer noise, one scale per coordinate (the same draws, in the same order)
        parts = [self.noise.int_noise(self.key + subkey + ("node", level, t >> level), b - a, self.mechanism,
                                      self.scale[a:b])
                 for subkey, a, b in self.segments]
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def step(self, update) -> np.ndarray:
        """Feed tick t+1's update (int vector of length K, or None for ⊥); return the noisy prefix sums."""
        if self.t >= self.horizon:
            raise HorizonExceeded(
                f"continual counter reached its horizon T={self.horizon} ticks; start a new run "
                f"(fresh budget) for later ticks")
        t = self.t + 1
        if update is not None:
            u = np.asarray(update)
            if u.shape != (self.size,):
                raise ValueError(f"counter update must have shape ({self.size},), got {u.shape}")
            self.exact += u.astype(np.int64)
        i = (t & -t).bit_length() - 1  # trailing zeros
        # p-sums at levels j < i (ending at t-1) leave the expansion; node i ending at t enters.
        for j in range(i):
            self.noise_total -= self.node_noise(j, t - 1)
        self.noise_total += self.node_noise(i, t)
        self.t = t
        return self.exact + self.noise_total

    def release(self) -> np.ndarray:
        return self.exact + self.noise_total

    def noise_std(self, t: int | None = None) -> np.ndarray:
        """Std of the released noise at tick t (popcount(t) i.i.d. node noises)."""
        t = self.t if t is None else t
        m = popcount(max(t, 1))
        if self.mechanism == "gaussian":
            return self.scale * np.sqrt(m)
        return self.scale * np.sqrt(2.0 * m)

    def state_floats(self) -> int:
        return self.exact.size + self.noise_total.size
