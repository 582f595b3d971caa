"""The k-median reference (run once, seed 0: the denominator of every k-median ratio, Σ distances of the
released centers / the reference's): Lloyd with Weiszfeld medians on all points from 10 D¹ seedings and from
the k-means reference's centers, the best of the 11 (:mod:`dpbench.metrics.kmedian`)."""
from __future__ import annotations

from ..metrics.kmedian import reference
from ..metrics.throughput import FitClock
from .registry import Peer, register


def run(ds, eps, seed, ckpt_ticks, overrides=None):
    with FitClock() as c:
        C = reference(ds.X, ds.k, seed, n_init=10)
    return dict(centers=C, **c.as_dict())


register(Peer("kmedian", "k-median reference (Lloyd–Weiszfeld, best of 10 D¹ + k-means starts)", run, offline=True,
              objective="kmedian", reference=True, seeded=False))
