"""dpstream: ``DPStreamClusterer`` with the library defaults, driven by ``partial_fit`` one tick at a time,
and the paper's strawmen as ablations.

* ``dpstream``: ``DPStreamClusterer(k, epsilon=ε, delta=1e-6, radius=Λ, center=c, tick_size=tick,
  horizon_ticks=T, random_state=seed)``; nothing else is set.
* ``dpstream_snap``: snap-to-bicriteria, ``semicoreset="snap", ring_centers="bicriteria"``.
* ``dpstream_vanilla``: vanilla DP merge-and-reduce without rings,
  ``bicriteria=False, n_rings=1, ring_centers="bicriteria"`` (one part: every clipped point is in ring 0,
  whose ball has radius 2Λ).
* ``dpstream_kmedian``: the defaults with ``objective="kmedian"``.
* ``dpstream_default_horizon``: the defaults without ``horizon_ticks`` (``partial_fit``'s T = 1,024): what a
  user who does not know the stream's length gets.
* ``dpstream_declared_end``: the same, with the last tick passed as ``partial_fit(X, last=True)``: what a user
  who knows when the stream ends (a file read chunk by chunk) gets.
"""
from __future__ import annotations

from .. import DELTA
from .registry import Peer, register, run_stream

VARIANTS = {
    "dpstream": {},
    "dpstream_snap": dict(semicoreset="snap", ring_centers="bicriteria"),
    "dpstream_vanilla": dict(bicriteria=False, n_rings=1, ring_centers="bicriteria"),
    "dpstream_kmedian": dict(objective="kmedian"),
    "dpstream_default_horizon": dict(horizon_ticks=None),
    "dpstream_declared_end": dict(horizon_ticks=None),
}


def make(ds, eps, seed, overrides):
    from dpstream import DPStreamClusterer

    overrides = {"horizon_ticks": ds.T, **overrides}
    return DPStreamClusterer(ds.k, epsilon=eps, delta=DELTA, radius=ds.radius, center=ds.center,
                             random_state=seed, tick_size=ds.tick, **overrides)


def diagnostics(model) -> dict:
    rel = model.release_
    return dict(epoch=int(rel.epoch), n_candidate_centers=int(rel.n_candidate_centers),
                coreset_size=int(len(rel.coreset_weights)), coreset_weight=float(sum(rel.coreset_weights)),
                count_estimate=float(rel.count_estimate), n_clipped=int(model.n_clipped_),
                plan_epsilon=float(model.privacy_plan_.total_epsilon))


def runner(variant):
    def run(ds, eps, seed, ckpt_ticks, overrides=None):
        model = make(ds, eps, seed, {**VARIANTS[variant], **(overrides or {})})
        out = run_stream(ds, model, ckpt_ticks, declare_end=variant == "dpstream_declared_end")
        out["extra"] = diagnostics(model)
        return out
    return run


LABELS = {
    "dpstream": "dpstream (defaults)",
    "dpstream_snap": "ablation: snap-to-bicriteria",
    "dpstream_vanilla": "ablation: vanilla DP merge-reduce, no rings",
    "dpstream_kmedian": "dpstream objective=\"kmedian\"",
    "dpstream_default_horizon": "dpstream, partial_fit's default horizon (T = 1,024)",
    "dpstream_declared_end": "dpstream, the default horizon and partial_fit(X, last=True) at the last tick",
}
for _v in VARIANTS:
    register(Peer(_v, LABELS[_v], runner(_v), eps_dependent=True, streaming=True,
                  objective="kmedian" if _v == "dpstream_kmedian" else "kmeans"))
