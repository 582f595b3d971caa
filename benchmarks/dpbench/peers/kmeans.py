"""scikit-learn ``KMeans(n_init=10, random_state=seed)`` on all points: the non-private limit. Seed 0 is
the reference, the denominator of every k-means cost ratio."""
from __future__ import annotations

from ..metrics.throughput import FitClock
from .registry import Peer, register


def run(ds, eps, seed, ckpt_ticks, overrides=None, n_init=10):
    from sklearn.cluster import KMeans

    with FitClock() as c:
        km = KMeans(n_clusters=ds.k, n_init=n_init, random_state=seed).fit(ds.X)
    return dict(centers=km.cluster_centers_, **c.as_dict(), extra=dict(n_iter=int(km.n_iter_)))


register(Peer("kmeans", "scikit-learn KMeans(n_init=10) (reference)", run, offline=True, reference=True))
