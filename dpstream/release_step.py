"""The release of a tick and the close of an epoch, written once for both drivers.

The one-process :class:`dpstream.engine.Engine` and the Beam stages (``transforms/epoch_stages.py``
``EpochClose``, ``transforms/release_stages.py`` ``ReleaseCoreset`` and ``ClusterCoreset``) hold the
run's coreset in different shapes (an engine's rings vs. ring records keyed by ring), but from the
closed epochs' coresets and the open epoch's released set on they call the functions here, so a
change to what a release is made of is made in one place and both drivers release the same bytes.

* :func:`epoch_coreset` — black box B on the closing epoch's released rings, under the key
  ``("B", epoch, "epoch", t)``.
* :func:`release_coreset` — the release's coreset (B's sample of every epoch's coreset) and the
  sample its centers are fitted to (:func:`dpstream.epochs.release_fit_sample`).
* :func:`fit_centers` — the k centers of a release coreset (the Beam job runs this in its own
  stateless stage, keyed by tick).
* :func:`release` — both, as the engine and ``EpochClose`` need them at once.
* :func:`ring_release`, :func:`released_ring_centers`, :func:`next_ring_centers` — the centers a new
  epoch's rings start with: the bicriteria's candidates and the centers released at the adoption tick.
* :func:`released_count` — the count estimate a release carries.

Everything here is post-processing of DP outputs under keyed noise: the same (seed, run, epoch,
tick) gives the same bytes in either driver.
"""
from __future__ import annotations

from typing import NamedTuple, Optional, Sequence

import numpy as np

from . import epochs
from .merge_reduce import reduce
from .params import EngineConfig
from .semicoresets import WeightedSet


class ReleaseCoreset(NamedTuple):
    """A release's coreset (integer weights) and what its k centers are fitted to. ``fit_points`` *is*
    ``points`` (the same array) when the fit uses the coreset itself."""
    points: np.ndarray
    weights: np.ndarray
    fit_points: np.ndarray
    fit_weights: np.ndarray

    @property
    def own_fit(self) -> bool:
        """True when the centers are fitted to the released coreset itself."""
        return self.fit_points is self.points


class Released(NamedTuple):
    """A release coreset and its k centers."""
    coreset: ReleaseCoreset
    centers: np.ndarray


def epoch_coreset(cfg: EngineConfig, noise, rings: WeightedSet, epoch: int, t: int) -> WeightedSet:
    """The coreset the closing epoch ``epoch`` keeps for the rest of the run: B of its rings' released
    levels ``rings``, at the adoption tick t."""
    return reduce(cfg, noise, rings, ("B", epoch, "epoch", t), cfg.z)


def release_coreset(cfg: EngineConfig, noise, closed: Sequence[WeightedSet], open_: Optional[WeightedSet],
                    epoch: int, t: int) -> ReleaseCoreset:
    """The release coreset of tick t of the open epoch ``epoch``: ``closed`` are the closed epochs'
    coresets in order, ``open_`` the open epoch's released set (None or empty: nothing yet)."""
    sets = _sets(closed, open_)
    pts, w = epochs.release_sample(cfg, noise, WeightedSet.concat(sets, cfg.dim), epoch, t, cfg.z)
    fp, fw = epochs.release_fit_sample(cfg, noise, sets, pts, w, epoch, t, cfg.z)
    return ReleaseCoreset(pts, w, fp, fw)


def _sets(closed: Sequence[WeightedSet], open_: Optional[WeightedSet]) -> list:
    return list(closed) + ([open_] if open_ is not None else [])


def fit_centers(cfg: EngineConfig, noise, coreset: ReleaseCoreset, epoch: int, t: int) -> np.ndarray:
    """The k centers of the release coreset of tick t (``epoch``: the epoch whose keys it used)."""
    return epochs.release_centers(cfg, noise, coreset.fit_points, coreset.fit_weights, epoch, t)


def release(cfg: EngineConfig, noise, closed: Sequence[WeightedSet], open_: Optional[WeightedSet], epoch: int,
            t: int) -> Released:
    """:func:`release_coreset` and :func:`fit_centers` of tick t."""
    rc = release_coreset(cfg, noise, closed, open_, epoch, t)
    return Released(rc, fit_centers(cfg, noise, rc, epoch, t))


def ring_release(cfg: EngineConfig, noise, closed: Sequence[WeightedSet], open_: Optional[WeightedSet], epoch: int,
                 t: int, rel: Optional[Released] = None) -> Released:
    """The release of tick t that the next epoch's rings are drawn from: ``rel`` (tick t's release, when the
    caller has it), or with ``release_min_points`` on, the release the same sets give with it off. That
    option changes the k centers a tick releases, never the rings: the coarse epochs it leaves out of a
    short prefix's fit still spread the ring centers over regions the finer epochs cover thinly (measured
    on long low-d streams: china at ε = 4, 1.010 → 1.018 with the rings drawn around the option's centers,
    1.012 without), so every ring, block, epoch coreset and released coreset is the default's. ``rel`` must
    be the release of these sets: its coreset, which the option does not change, is not drawn again."""
    if cfg.release_min_points <= 0:
        return rel if rel is not None else release(cfg, noise, closed, open_, epoch, t)
    off = cfg.with_(release_min_points=0.0)
    if rel is None:
        return release(off, noise, closed, open_, epoch, t)
    pts, w = rel.coreset.points, rel.coreset.weights
    fp, fw = epochs.release_fit_sample(off, noise, _sets(closed, open_), pts, w, epoch, t, off.z)
    rc = ReleaseCoreset(pts, w, fp, fw)
    return Released(rc, fit_centers(off, noise, rc, epoch, t))


def released_ring_centers(cfg: EngineConfig, noise, rel: Released, epoch: int, t: int) -> np.ndarray:
    """The centers of tick t's release ``rel`` that the rings of the epoch ``epoch`` (starting after
    adoption tick t) use: its k centers or a ``ring_center_factor``·k fit of its coreset
    (:func:`dpstream.epochs.ring_centers`)."""
    return epochs.ring_centers(cfg, noise, rel.coreset.points, rel.coreset.weights, rel.centers, epoch, t)


def next_ring_centers(candidates: np.ndarray, released: np.ndarray) -> np.ndarray:
    """The new epoch's ring centers: the bicriteria's candidates, then the released ones."""
    return np.vstack([candidates, released])


def released_count(count: Optional[float], weights: np.ndarray) -> float:
    """The count estimate a release carries: the tick's DP count estimate clamped at 0
    (post-processing), or without a counter the release coreset's mass (DP, biased low)."""
    return float(weights.sum()) if count is None else max(0.0, float(count))
