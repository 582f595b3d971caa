"""Deliberately broken engine variants shared by several privacy tests (tests only).

Each function monkeypatches one natural-but-wrong implementation into dpstream so a
test can show that its check catches it.
"""
import numpy as np

import dpstream.semicoresets as sc_mod
from dpstream.semicoresets import WeightedSet


def a_skips_empty_parts(monkeypatch):
    """The natural-but-wrong A: only parts that received points are processed (review finding 1)."""
    orig = sc_mod.Semicoreset.__call__

    def call(self, x, part, centers, radii, key):
        part = np.asarray(part, dtype=np.int64)
        used = np.unique(part)
        if used.size == 0:
            return WeightedSet.empty(self.cfg.dim)
        out = orig(self, x, np.searchsorted(used, part), np.asarray(centers)[used], np.asarray(radii)[used], key)
        return WeightedSet(out.points, out.weights, used[out.part])

    monkeypatch.setattr(sc_mod.Semicoreset, "__call__", call)
