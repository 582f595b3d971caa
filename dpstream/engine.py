"""DPStreamCluster (Alg. 1): the whole engine in one process.

``Engine.step(points_of_one_tick) -> Release``.  Per tick t (1-based, t ≤ T):

1. the tick's points are clipped to the public ball (not dropped);
2. they are assigned to (ring, nearest center) with the epoch's center set —
   a set adopted from *released* F of an earlier tick (P8);
3. BicriteriaDPCenters advances its counters (⊥ when the tick is empty) and
   releases F_t;
4. every ring's DP-Merge-Reduce tests its sparse vector and fires A;
5. on a DP-output-dependent schedule (doubling by default) a grown
   F is adopted: every ring's pending buffer is flushed through A, the epoch's
   coreset is reduced by B and stored, and a new epoch starts with fresh
   instances.  The horizon T flushes too, so the last release holds every point, and so does
   a tick the user declares the stream's last (``step(x, last=True)``: a public end before T);
6. the release: B(∪ epoch coresets ∪ open rings' coresets) and k centers
   clustered from it (post-processing; recomputed only when a DP output changed).

Every step is a function of the tick's records, public parameters and noisy
values only, and every mechanism advances on every tick, empty or not.

The steps the Beam stages take too are written once, outside this loop: the run's
setup (:mod:`dpstream.run_setup`), the epoch schedule (:class:`dpstream.epochs.EpochSchedule`),
the epoch coreset, the release and the next ring centers (:mod:`dpstream.release_step`).
"""
from __future__ import annotations

from typing import List, Optional

import numpy as np

from . import epochs
from .epochs import ExternalCenters
from .bicriteria import BicriteriaDPCenters
from .counters import HorizonExceeded
from .merge_reduce import EpochMergeReduce
from . import release_step
from .params import EngineConfig
from .release import Release
from .rings import assign_parts, clip_to_ball  # noqa: F401 (clip_to_ball: re-exported)
from .run_setup import RunSetup
from .semicoresets import WeightedSet


class StreamEnded(RuntimeError):
    """The stream was declared ended (``last=True``, or ``DPStreamClusterer.finish``): its final release
    holds every point, and the run takes no further tick."""


class Engine:
    BICRITERIA = ("internal", "external")
    # ``part_fire_rate``: the release the next epoch's rings were drawn from, held only from
    # ``_ring_centers`` to the new epoch's construction (which keeps its per-(ring, part) shares)
    _ring_release = None

    def __init__(self, cfg: EngineConfig, seed: bytes, trace: bool = False, bicriteria: str = "internal",
                 run: int = 0):
        """One run of T ticks (:mod:`dpstream.runs` chains them); ``run`` (≥ 0) enters every noise key."""
        if bicriteria not in self.BICRITERIA:
            raise ValueError(f"bicriteria must be one of {self.BICRITERIA}, got {bicriteria!r}")
        self.cfg = cfg
        self.run = int(run)
        setup = RunSetup(cfg, seed, run=self.run, trace=trace)
        self.noise, self.plan, self.A, self.block_size = setup.noise, setup.plan, setup.A, setup.block_size
        # the DP count estimate's own binary mechanism (P14), unless the bicriteria gives it
        self.counter = setup.count_counter() if cfg.count_counter else None
        self.external_bicriteria = bicriteria == "external" and cfg.bicriteria
        if not cfg.bicriteria:
            self.bic = None
        elif self.external_bicriteria:
            self.bic = ExternalCenters(cfg)
        else:
            self.bic = BicriteriaDPCenters(cfg, self.plan, self.noise)
        self.center = cfg.center_vec
        self.t = 0
        # the first flush waits for a DP count that can fill one of A's leaves; without a DP count (no
        # stream counter nor bicriteria: the schedule's gate is the release's own mass) tick 1 flushes
        has_count = cfg.bicriteria or cfg.count_counter
        self.schedule = epochs.EpochSchedule(cfg, self.block_size, self.A.leaf_threshold() if has_count else 0.0)
        self.epoch_coresets: List[WeightedSet] = []
        self.mr = EpochMergeReduce(cfg, self.plan, self.noise, self.A, 0, self.center[None, :], self.block_size)
        self.n_clipped = 0  # operator telemetry: never enters a release
        self.n_points = 0  # operator telemetry
        self._cache_version = None
        self._refits = 0
        self.peak_state = 0  # largest state_size() seen after a tick's ingestion (before flushes) and at its end
        self._adopted_release = None
        self._cache = None
        self._released = None  # the last refit (release_step.Released): _cache is its (points, weights, centers)
        self.last_ring = None  # ring of each point of the last tick (tracer tests)

    def __getstate__(self):
        d = dict(self.__dict__)
        d["last_ring"] = None  # a tracer field for tests, one int per point: never kept in Beam state
        return d

    def attach_seed(self, seed: bytes) -> None:
        """After unpickling (Beam state): the pickle never holds the secret seed."""
        self.noise.attach_seed(seed)

    @property
    def epoch_centers(self) -> np.ndarray:
        return self.mr.centers

    def candidate_centers(self) -> np.ndarray:
        return self.bic.centers if self.bic is not None else self.center[None, :]

    @property
    def epoch(self) -> int:
        """The open epoch."""
        return self.schedule.epoch

    @property
    def epoch_start(self) -> int:
        return self.schedule.epoch_start

    @property
    def last_flush(self) -> int:
        """The last tick every ring's block was released (public ticks, DP counts)."""
        return self.schedule.last_flush

    ended = False  # the stream was declared ended (class default: an engine pickled before the flag)

    def step(self, points, bicriteria_update=None, last: bool = False) -> Release:
        """Advance one tick. ``bicriteria_update`` = (new centers, count estimate) of this tick
        from the CenterRegistry, with ``bicriteria="external"`` only.

        ``last=True`` declares this tick the stream's end, a public tick like the horizon T: it is
        final as T is (every ring's pending block goes through A, no epoch change), and the engine
        refuses any later tick. A run that ends before T releases a prefix of what a run to T would
        (each ring at most once per tick, at most T blocks per ring and epoch): the plan is unchanged."""
        cfg = self.cfg
        if self.ended:
            raise StreamEnded(f"the stream was declared ended at tick {self.t}; its last release holds every "
                              f"point. A new stream needs a new run (a new estimator, or fit)")
        if (bicriteria_update is not None) != self.external_bicriteria:
            raise ValueError("bicriteria_update is given exactly when the engine was built with "
                             "bicriteria='external'")
        if self.t >= cfg.horizon_ticks:
            raise HorizonExceeded(f"the run's horizon is T={cfg.horizon_ticks} ticks; tick {self.t + 1} "
                                  f"would exceed it (start a new run with a fresh budget for later ticks)")
        x = np.asarray(points, dtype=float)
        if x.size == 0:
            x = x.reshape(0, cfg.dim)
        # one reduction, not an n×d mask: NaN and ±inf reach the sum; a sum that overflowed takes the mask
        with np.errstate(over="ignore", invalid="ignore"):
            finite = x.ndim == 2 and (np.isfinite(x.sum()) or np.all(np.isfinite(x)))
        if x.ndim != 2 or x.shape[1] != cfg.dim or not finite:
            raise ValueError(f"a tick must be a finite array of shape (n, {cfg.dim}), got shape {x.shape}")
        x, nclip = clip_to_ball(x, self.center, cfg.radius)
        self.n_clipped += nclip
        self.n_points += x.shape[0]
        t = self.t + 1
        ring, f = assign_parts(x, self.mr.centers, cfg.ring_base, cfg.n_rings, cfg.ring_ratio,
                                cfg.ring_tolerance)
        self.last_ring = ring
        if self.external_bicriteria:
            count_est = self.bic.update(bicriteria_update)
        elif self.bic is not None:
            _, count_est = self.bic.step(x - self.center)
        elif self.counter is not None:
            count_est = float(self.counter.step(np.array([x.shape[0]], dtype=np.int64))[0])
        else:
            count_est = None
        self.mr.step(t, x, ring, f, count_est)
        self.peak_state = max(self.peak_state, self.state_size())
        F = self.candidate_centers()
        changed = (cfg.ring_centers == "bicriteria+released" and self._cache is not None
                   and self._cache_version != self._adopted_release)
        gate = count_est if count_est is not None else (float(self._cache[1].sum()) if self._cache else 0.0)
        adopt, flush, _ = self.schedule.step(t, gate, F.shape[0], changed, end=last)
        if flush:
            # (the public flush ticks flush without an epoch change: a release reflects what arrived)
            self.mr.flush(t, count_est)
            if adopt:
                self._close_epoch(t)
                if cfg.ring_centers == "bicriteria+released":
                    # the centers released at this tick, from every epoch's coreset including the one
                    # just flushed: DP outputs of ticks ≤ t, and the new rings only see ticks > t
                    F = release_step.next_ring_centers(F, self._ring_centers(t, gate))
                    self._adopted_release = self._cache_version
                release = self.__dict__.pop("_ring_release", None)  # the class default again: nothing kept
                self.mr = EpochMergeReduce(cfg, self.plan, self.noise, self.A, self.epoch, F.copy(),
                                           self.block_size, count_est, release)
        self.t = t
        if last:
            self.ended = True
        rel = self._release(t, count_est)
        # and at the tick's end: a new epoch's part sparse vector has one instance per (ring, part) of its
        # own centers, more than the closed epoch's when the release has more centers than its rings had
        self.peak_state = max(self.peak_state, self.state_size())
        return rel

    def _ring_centers(self, t: int, count: float) -> np.ndarray:
        """The released centers the new epoch's rings use (post-processing of this tick's release)."""
        self._refit(t)
        rel = release_step.ring_release(self.cfg, self.noise, self.epoch_coresets, None, self.epoch, t, self._released)
        if self.cfg.part_fire_rate:  # the new epoch keeps its cells' shares of it, not the coreset
            self._ring_release = rel.coreset
        return release_step.released_ring_centers(self.cfg, self.noise, rel, self.epoch, t)

    def _close_epoch(self, t: int) -> None:
        """The epoch that adoption tick t closed (the schedule has opened the next) keeps its coreset."""
        self.epoch_coresets.append(release_step.epoch_coreset(self.cfg, self.noise, self.mr.released(),
                                                              self.epoch - 1, t))
        self.mr = None  # the next epoch's rings are built from the release of this tick

    def coreset(self) -> WeightedSet:
        open_ = [self.mr.released()] if self.mr is not None else []
        return WeightedSet.concat(self.epoch_coresets + open_, self.cfg.dim)

    def _version(self):
        return (self.epoch, self.mr.version if self.mr is not None else 0, len(self.epoch_coresets))

    def _refit(self, t: int):
        """(points, weights, centers) of the release of tick t, recomputed only when a DP output
        changed: B's sample of every epoch's coreset and a fresh k-means++ fit of it."""
        version = self._version()
        if version != self._cache_version:
            rel = release_step.release(self.cfg, self.noise, self.epoch_coresets,
                                       self.mr.released() if self.mr is not None else None, self.epoch, t)
            self._refits += 1
            self._released = rel
            self._cache = (rel.coreset.points, rel.coreset.weights, rel.centers)
            self._cache_version = version
        return self._cache

    def _release(self, t: int, count_est: Optional[float]) -> Release:
        pts, w, centers = self._refit(t)
        return Release(tick=t, epoch=self.epoch, centers=centers, coreset_points=pts, coreset_weights=w,
                       count_estimate=release_step.released_count(count_est, w),
                       n_candidate_centers=int(self.candidate_centers().shape[0]), plan=self.plan)

    def state_size(self) -> int:
        """Floats held in state, measured from the arrays the engine keeps."""
        n = self.mr.state_floats()
        n += sum(len(s) * (self.cfg.dim + 1) for s in self.epoch_coresets)
        if self.bic is not None:
            n += self.bic.state_floats()
        if self._cache is not None:
            n += self._cache[0].size + self._cache[1].size + self._cache[2].size
        rc = self._released.coreset if self._released is not None else None
        if rc is not None and not rc.own_fit:  # a decayed fit sample of its own (≤ s_B points): kept, pickled
            n += rc.fit_points.size + rc.fit_weights.size
        return int(n)
