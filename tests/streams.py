"""Small test streams and probes shared by the flush-schedule tests (tests/ is on sys.path under pytest)."""
from __future__ import annotations

import numpy as np

MEANS = np.array([[6.0, 6.0], [-8.0, 3.0], [2.0, -9.0]])


def three_blob_ticks(seed: int, sizes) -> list:
    """One array per tick, ``sizes[i]`` points each, from three well-separated unit Gaussians in 2-d."""
    rng = np.random.default_rng(seed)
    return [MEANS[rng.integers(3, size=n)] + rng.normal(size=(n, 2)) for n in sizes]


def record_ring_releases(monkeypatch) -> list:
    """Patch ``RingMergeReduce.release_block`` to record ``(tick, epoch, ring)`` of every block a ring
    releases; returns the list it fills."""
    import dpstream.merge_reduce as mr_mod

    seen = []
    orig = mr_mod.RingMergeReduce.release_block

    def release_block(self, tick):
        seen.append((tick, self.epoch, self.ring))
        return orig(self, tick)

    monkeypatch.setattr(mr_mod.RingMergeReduce, "release_block", release_block)
    return seen
