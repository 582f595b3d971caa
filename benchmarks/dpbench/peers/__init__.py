"""Peers: the methods run on the same data, in the same order, in the same script.

Each peer is a :class:`Peer` in ``REGISTRY`` (report order). ``run(ds, eps, seed, ckpt_ticks, overrides)``
returns ``centers`` (final), ``ckpt_centers`` ({tick: centers} for streaming peers), the fit clocks and,
for dpstream, its state and release diagnostics. A peer whose package is missing reports why
(``unavailable()``) and its runs are recorded as skipped.
"""
from __future__ import annotations

from .registry import Peer, REGISTRY, register, run_stream  # noqa: F401

# the peers register themselves, in report order
from . import kmeans, minibatch, diffprivlib_peer, dpstream_peer, mean, kmedian  # noqa: E402,F401
