"""scikit-learn ``MiniBatchKMeans(batch_size=tick).partial_fit``, one pass over the ticks: the non-private
streaming anchor."""
from __future__ import annotations

from .registry import Peer, register, run_stream


def run(ds, eps, seed, ckpt_ticks, overrides=None):
    from sklearn.cluster import MiniBatchKMeans

    return run_stream(ds, MiniBatchKMeans(n_clusters=ds.k, batch_size=ds.tick, random_state=seed), ckpt_ticks)


register(Peer("minibatch", "MiniBatchKMeans.partial_fit, 1 pass", run, streaming=True))
