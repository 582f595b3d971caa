"""The peer registry and its type (the peers in this package register here)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, Optional

import numpy as np

from ..metrics.state import StateTracker
from ..metrics.throughput import FitClock


@dataclass
class Peer:
    name: str
    label: str
    run: Callable
    eps_dependent: bool = False  # one cell per ε (else one cell, shown in the ∞ / non-DP column)
    finite_eps_only: bool = False  # diffprivlib has no ε = ∞
    streaming: bool = False  # fed tick by tick (checkpoints, state)
    offline: bool = False  # sees all points at once: order-invariant, in-order variants reuse the shuffled run
    objective: str = "kmeans"  # the cost its ratio is taken in
    reference: bool = False  # seed 0 is the denominator of its objective's ratios
    seeded: bool = True  # False: one deterministic run (seed 0 only)
    grid: bool = True  # in the default methods (else only when named in --methods)
    unavailable: Callable[[], Optional[str]] = lambda: None


REGISTRY: Dict[str, Peer] = {}


def register(peer: Peer) -> Peer:
    REGISTRY[peer.name] = peer
    return peer


def run_stream(ds, model, ckpt_ticks, track_state=True, declare_end=False) -> dict:
    """Feed ds.X to ``model.partial_fit`` one tick at a time; the fit clocks cover partial_fit only.
    ``declare_end``: the last tick is ``partial_fit(X, last=True)`` (dpstream's declared end)."""
    want, clock, state, centers = set(ckpt_ticks), FitClock(), StateTracker(), {}
    T = ds.T
    for t in range(1, T + 1):
        xb = ds.X[(t - 1) * ds.tick:t * ds.tick]
        with clock:
            if declare_end and t == T:
                model.partial_fit(xb, last=True)
            else:
                model.partial_fit(xb)
        if track_state:
            state.after_tick(model)
        if t in want or t == T:
            centers[t] = np.array(model.cluster_centers_, copy=True)
    out = dict(centers=centers[T], ckpt_centers={t: centers[t] for t in ckpt_ticks}, **clock.as_dict())
    out.update(state.finish(model, ds.tick, ds.d))
    return out
