"""Pieces of Alg. 1 that both of its drivers call: the one-process :class:`dpstream.engine.Engine`
and the Beam job's stages (``transforms/cluster.py``). Each is a function of public parameters,
DP outputs and keyed noise only, so the two drivers release the same thing for the same seed.

* :func:`adopt_now` — is tick t an epoch change? (P8: a function of
  public parameters and DP outputs only). The ``"horizon"`` schedule is capped at
  :func:`dpstream.rules.max_epochs` epochs per run, a public number, so a Beam graph can hold
  one copy of the per-epoch stages per epoch index.
* :class:`EpochSchedule` — the epoch bookkeeping both drivers step: tick t's adoption, flush and
  final flags from its DP count estimate and |F|.
* :class:`ExternalCenters` — F as the CenterRegistry broadcasts it.
* :class:`EpochPlanner` — the epoch schedule of a run from its DP count estimates alone (the
  stream counter's, or the bicriteria's): every tick's epoch, flush and adoption flags. Loop-free:
  with the ``"horizon"`` schedule no adoption reads a release.
* :func:`release_sample`, :func:`release_fit_sample`, :func:`release_centers`, :func:`ring_centers` —
  the pieces of a tick's release (black box B on the run's coreset, then a fresh k-means++ fit),
  post-processing under the keys ``("release", epoch, t, …)``; :mod:`dpstream.release_step` puts
  them together for both drivers.
"""
from __future__ import annotations

from typing import NamedTuple, Optional

import numpy as np

from . import drift_decay, rules
from .coresets import sensitivity_sample
from .offline import cluster_coreset
from .params import EngineConfig
from .rings import clip_to_ball, nearest_center
from .semicoresets import WeightedSet


def adopt_now(cfg: EngineConfig, t: int, grown: bool, count: Optional[float], count0: float, epoch: int,
              epoch_start: int, block_size: int) -> bool:
    """Is tick t an epoch change? ``count``: this tick's DP count estimate; ``count0``: the estimate
    when the open epoch started; ``epoch``: the open epoch's index; ``epoch_start``: the tick it
    started at (0 for the first)."""
    sched = cfg.epoch_schedule
    if sched == "horizon":
        # the epoch's points (DP count) have doubled and fill a block, and the new epoch would
        # span at least half the run: ≤ log2(n/M) + 1 epochs, the last one the largest. With the
        # released centers among the ring centers, the flush of the epoch is what renews them;
        # with the paper's rule only a grown F is worth a new epoch. At most max_epochs(T) epochs
        # (a public cap: a DP count that doubles faster than the tick index adopts no further)
        if 2 * t > cfg.horizon_ticks or count is None or epoch + 1 >= rules.max_epochs(cfg.horizon_ticks):
            return False
        if cfg.ring_centers != "bicriteria+released" and not grown:
            return False
        blocks = cfg.first_epoch_blocks if epoch == 0 else cfg.epoch_blocks  # the first epoch: its own rule
        return count - count0 >= max(blocks * block_size, count0)
    if not grown:
        return False
    if sched == "every":
        return True
    return t >= max(1, 2 * epoch_start)


def flush_now(cfg: EngineConfig, t: int, adopt: bool, final: bool, last_flush: int, count: Optional[float] = None,
              last_count: float = 0.0, block_size: int = 0, leaf_threshold: float = 0.0) -> bool:
    """Does every ring release its pending block at tick t? At an epoch change, at the horizon, and at
    the public flush ticks of the ``"horizon"`` schedule (:func:`dpstream.rules.flush_tick`; ``last_flush``
    is the last tick that flushed, 0 before any; ``count``: tick t's DP count estimate, ``last_count``:
    the estimate at that flush; ``leaf_threshold``: A's keep threshold θ_k, which the first flush waits for
    ``first_flush_leaves`` times)."""
    return adopt or final or (cfg.epoch_schedule == "horizon" and rules.flush_tick(
        t, last_flush, cfg.flush_schedule, count, last_count, cfg.flush_min_blocks * block_size, cfg.flush_growth,
        cfg.first_flush_leaves * leaf_threshold))


class ExternalCenters:
    """F as the Beam job's CenterRegistry broadcasts it: the ball's center, then each tick's new
    centers (the engine's ``bicriteria="external"`` and the :class:`EpochPlanner`)."""

    def __init__(self, cfg: EngineConfig):
        self.cfg = cfg
        self.F = [cfg.center_vec.copy()]

    def update(self, bicriteria_update) -> float:
        """Take one tick's (new centers, count estimate); → the count estimate."""
        new, count = bicriteria_update
        new = np.asarray(new, dtype=float).reshape(-1, self.cfg.dim)
        if len(new):
            self.F.extend(new)
        return float(count)

    @property
    def centers(self) -> np.ndarray:
        return np.asarray(self.F)

    def state_floats(self) -> int:
        return len(self.F) * self.cfg.dim


class EpochSchedule:
    """The epoch bookkeeping of one run, the same for both drivers: the open epoch, the tick it started
    at, the count estimate and number of candidate centers it started with, the last flush tick.
    ``step`` decides tick t's flags from public parameters and DP outputs only (P8) and advances."""

    leaf_threshold = 0.0  # (class default: a schedule pickled before the first flush waited for a leaf)

    def __init__(self, cfg: EngineConfig, block_size: int, leaf_threshold: float = 0.0):
        """``leaf_threshold``: A's keep threshold θ_k (``A.leaf_threshold()``, public), the unit of
        ``first_flush_leaves``; 0 lets tick 1 flush whatever it holds."""
        self.cfg = cfg
        self.block_size = int(block_size)
        self.leaf_threshold = float(leaf_threshold)
        self.epoch = 0
        self.epoch_start = 0
        self.count0 = 0.0  # the DP count estimate when the open epoch started
        self.adopted_bic = 1  # |F| when the open epoch started
        self.last_flush = 0  # the last tick every ring's block was released
        self.last_flush_count = 0.0  # the DP count estimate at that tick

    def step(self, t: int, count: Optional[float], n_candidates: int, release_changed: bool = False,
             end: bool = False):
        """(adopt, flush, final) of tick t: ``count`` its DP count estimate, ``n_candidates`` = |F_t|,
        ``release_changed``: the release changed since the open epoch's rings took their centers (the
        engine's release-dependent schedules only). At an adoption the next epoch starts at t.
        ``end``: the user declared t the stream's last tick (a public tick, like T): t is final."""
        cfg = self.cfg
        grown = n_candidates > self.adopted_bic or release_changed
        final = t == cfg.horizon_ticks or bool(end)
        adopt = adopt_now(cfg, t, grown, count, self.count0, self.epoch, self.epoch_start, self.block_size)
        flush = flush_now(cfg, t, adopt, final, self.last_flush, count, self.last_flush_count, self.block_size,
                          self.leaf_threshold)
        if flush:
            self.last_flush = t
            self.last_flush_count = 0.0 if count is None else float(count)
        adopt = adopt and not final
        if adopt:
            self.count0 = count
            self.adopted_bic = n_candidates
            self.epoch += 1
            self.epoch_start = t
        return adopt, flush, final


class TickPlan(NamedTuple):
    """What the epoch schedule says of tick t of a run (public parameters and DP outputs only)."""
    t: int
    count: Optional[float]   # the tick's DP count estimate (None: the run has none)
    epoch: int               # the epoch whose rings take tick t's points
    first: int               # that epoch's first tick
    adopt: bool              # t closes the epoch (its coreset stored, new rings from this tick's release)
    flush: bool              # every ring that did not release at t releases its block (adopt, t = T, flush ticks)
    final: bool              # t = T, or the stream's declared last tick
    n_candidates: int        # |F_t| (the bicriteria's candidate centers; 1 without it: the ball's center)
    candidates: Optional[np.ndarray]  # F_t at an adoption tick (the new rings' centers start with it)
    count0: Optional[float] = 0.0  # the DP count estimate when the epoch started (the rings' cells_gate)


class EpochPlanner:
    """The epoch schedule of one run, tick by tick, exactly as :class:`~dpstream.engine.Engine`
    follows it, from DP count estimates only: ``step(n_points)`` with the stream counter (it owns
    the counter: the count estimate's own binary mechanism), ``step(bicriteria_update=(new
    centers, count estimate))`` with the bicriteria. Needs the ``"horizon"`` schedule with the
    released-centers rule, or the paper's ``"bicriteria"`` rule (then a grown F decides): those
    read no release, which is what lets a Beam graph compute the schedule before the rings."""

    def __init__(self, setup):
        """``setup``: the run's :class:`dpstream.run_setup.RunSetup` (config, noise, plan, M)."""
        cfg = setup.cfg
        if not (cfg.epoch_schedule == "horizon" or cfg.ring_centers == "bicriteria"):
            raise ValueError("the epoch schedule reads the release (ring_centers='bicriteria+released' with "
                             f"epoch_schedule={cfg.epoch_schedule!r}): only the 'horizon' schedule is loop-free")
        if not cfg.bicriteria and not cfg.count_counter:
            raise ValueError("the epoch schedule needs a DP count estimate: a stream counter (privacy_split with "
                             "4 weights) or the bicriteria")
        self.cfg = cfg
        self.counter = setup.count_counter() if cfg.count_counter and not cfg.bicriteria else None
        self.schedule = EpochSchedule(cfg, setup.block_size, setup.A.leaf_threshold())
        self.bic = ExternalCenters(cfg)  # without the bicriteria: the ball's center alone
        self.t = 0

    def step(self, n_points: int = 0, bicriteria_update=None, end: bool = False) -> TickPlan:
        """``end``: the stream's declared last tick (public), final as T is."""
        cfg = self.cfg
        t = self.t + 1
        if cfg.bicriteria:
            count = self.bic.update(bicriteria_update)
        else:
            count = float(self.counter.step(np.array([int(n_points)], dtype=np.int64))[0])
        epoch, first, count0 = self.schedule.epoch, self.schedule.epoch_start + 1, self.schedule.count0
        adopt, flush, final = self.schedule.step(t, count, len(self.bic.F), end=end)
        candidates = self.bic.centers if adopt else None
        self.t = t
        return TickPlan(t, count, epoch, first, adopt, flush, final, len(self.bic.F), candidates, count0)

    def state_floats(self) -> int:
        return self.bic.state_floats() + (self.counter.state_floats() if self.counter is not None else 0)


def release_sample(cfg: EngineConfig, noise, S: WeightedSet, epoch: int, t: int, z: int):
    """(points, integer weights) of the release of tick t: B's sample of the run's coreset ``S``
    (closed epochs' coresets, then the open rings' levels), zero weights dropped."""
    rng = noise.generator(("release", epoch, t, "B"))
    pts, w = sensitivity_sample(S.points, S.weights, cfg.s_b, cfg.n_clusters, rng, z)
    w = np.rint(w).astype(np.int64)
    keep = w > 0
    return pts[keep], w[keep]


def release_fit_sample(cfg: EngineConfig, noise, sets, pts: np.ndarray, w: np.ndarray, epoch: int, t: int, z: int):
    """(points, weights) the k centers of tick t's release are fitted to. ``sets``: the run's coreset
    by epoch (closed epochs' coresets in order, then the open epoch's released set); (pts, w): the
    release's coreset (:func:`release_sample`).

    An epoch's coreset is only as fine as the ring centers it was cut around: the first epochs'
    rings are the ball's, and their leaves are noisy means of whole groups of clusters, which pull a
    k-means fit between clusters (blobs 1e4: 2.15 fitted to every epoch, 1.29 to the last one alone).
    So the fit weighs each epoch's points by ``release_epoch_decay``^age (age 0: the open epoch), in
    B's sample of the reweighted union under its own key: the old epochs still place centers where
    nothing newer is (a drifting stream keeps its first clusters), but no longer drag the new ones.
    With ``release_min_points`` the coarsest old epochs leave the fit where newer ones still arrive
    (:func:`_coarse_left_out`). Post-processing of DP outputs; the released coreset keeps its own weights."""
    decay = float(cfg.release_epoch_decay)
    sets = list(sets)
    while sets and len(sets[-1]) == 0:  # an open epoch that released nothing yet: age 0 is the last closed one
        sets.pop()
    if decay == 1.0 or len(sets) <= 1:
        return pts, w
    ages = np.concatenate([np.full(len(s), len(sets) - 1 - i, dtype=float) for i, s in enumerate(sets)])
    S = WeightedSet.concat(sets, cfg.dim)
    if len(S) == 0:
        return pts, w
    factor = decay ** ages
    rule = cfg.release_decay_rule
    parts = None  # the decay rule's partition: the drift rule and release_min_points ask for it again
    if rule == "covered":
        factor = _uncovered_kept(sets, factor, cfg.release_cover_factor)
    elif rule in ("clusters", "stopped", "drift"):  # drift: the clusters rule, then whole epochs that drifted away
        stopped = rule == "stopped"
        parts = Partitions(cfg, noise, S, epoch, t,
                           _STOPPED_POINTS_PER_CLUSTER if stopped else _POINTS_PER_CLUSTER)
        factor = _stopped_clusters_kept(cfg, noise, sets, S, factor, epoch, t, stopped_rule=stopped,
                                        partitions=parts)
        if rule == "drift":
            factor = drift_decay.drift_kept(cfg, noise, sets, S, factor, epoch, t, parts)
    if cfg.release_min_points > 0:
        factor = _coarse_left_out(cfg, noise, sets, S, factor, decay ** ages, epoch, t, parts)
    rng = noise.generator(("release", epoch, t, "B-fit"))
    return sensitivity_sample(S.points, S.weights * factor, cfg.s_b, cfg.n_clusters, rng, z)


def _coarse_left_out(cfg: EngineConfig, noise, sets, S: WeightedSet, factor: np.ndarray, aged: np.ndarray,
                     epoch: int, t: int, partitions: Optional["Partitions"] = None) -> np.ndarray:
    """``release_min_points`` > 0: an old epoch that released fewer than ``release_min_points``·k points, once a
    newer epoch (the open one included) released at least that many, leaves the release fit (weight 0)
    where the newer epochs still arrive. An epoch's released points are its leaves that passed A's keep
    threshold: fewer than k of them cannot hold k clusters apart, and the first epochs' (the ball's rings,
    then rings around a fit of a few such points) are noisy means of groups of clusters, 8–33× the prefix's
    optimum alone on blobs 1e5, which even at a quarter of the weight pull the fit between clusters. A
    coarse point keeps its factor in a cluster that the newer epochs fill at under ``_STILL_ARRIVING`` times
    the old epoch's share there (a cluster that stopped arriving: an in-order stream's first clusters, held
    by one or two coarse points), and wherever a decay rule spared it (its factor above the age decay
    ``aged``). The clusters: a k-means partition of every released point into k clusters (one per point
    where fewer than k were released), not the ``clusters`` rule's coarser one (a center per four released
    points), which joins an old epoch's clusters to newer ones: an in-order stream's first clusters then
    count as still arriving and leave the fit (gmm100 in cluster order, k = 64: 116 released points in 29
    clusters left most of the first epoch's 25 clusters out, 16× the optimum against 2.2 at k). The number
    of released points per epoch is public and the sets are DP outputs: post-processing."""
    m = float(cfg.release_min_points) * cfg.n_clusters
    n = np.array([len(s) for s in sets])
    later_fine = np.r_[np.cumsum((n >= m)[::-1])[::-1][1:], 0] > 0  # some later epoch released ≥ m points
    coarse = (n < m) & later_fine
    if not coarse.any():
        return factor
    if partitions is None or partitions.own_k != Partitions.k_of(cfg, S):
        # the "stopped" rule's fit, where its own k is not the clusters rule's (few released points): its
        # labels at this k would be drawn under another key than the clusters rule's own fit
        partitions = Partitions(cfg, noise, S, epoch, t)
    k = min(cfg.n_clusters, len(S))
    lab = partitions.labels(k)
    ep = np.repeat(np.arange(len(sets)), n)
    w = np.maximum(S.weights, 0.0)
    out = factor.copy()
    for i in np.flatnonzero(coarse):
        own = np.bincount(lab[ep == i], weights=w[ep == i], minlength=k)
        newer = np.bincount(lab[ep > i], weights=w[ep > i], minlength=k)
        still = newer * own.sum() >= _STILL_ARRIVING * own * newer.sum()
        seg = ep == i
        out[seg] = np.where(still[lab[seg]] & (factor[seg] <= aged[seg]), 0.0, factor[seg])
    return out


def _uncovered_kept(sets, factor: np.ndarray, cover: float) -> np.ndarray:
    """``release_decay_rule="covered"``: an old epoch's point keeps its whole weight unless a newer epoch
    has a point within ``cover`` times the newer set's median nearest-neighbour spacing — a cluster that
    stopped arriving (a drifting or in-order stream) is not faded out by epochs that never saw it, while
    regions the newer, finer epochs cover are decayed as before. Post-processing of released sets."""
    from scipy.spatial import cKDTree  # lazy: scipy loads on first use (a KD-tree, not an n×n matrix)

    out = factor.copy()
    starts = np.cumsum([0] + [len(s) for s in sets])
    for i in range(len(sets) - 1):
        newer = np.vstack([s.points for s in sets[i + 1:] if len(s)])
        if len(newer) < 2 or len(sets[i]) == 0:
            continue
        tree = cKDTree(newer)
        spacing = np.median(tree.query(newer, k=2)[0][:, 1])  # each point's nearest other point
        near = tree.query(sets[i].points, k=1)[0] <= cover * spacing
        seg = slice(starts[i], starts[i + 1])
        out[seg] = np.where(near, factor[seg], 1.0)
    return out


# an old epoch's cluster counts as still arriving when the newer epochs' share of their mass there is at
# least this part of the old epoch's share (shares, as the open epoch starts small): a stationary stream's
# shares are alike, a cluster that stopped arriving holds ~0 of the newer mass (noisy leaf means only)
_STILL_ARRIVING = 0.1
_POINTS_PER_CLUSTER = 4
_MIN_POINTS = 2
# the "stopped" rule: a center per two released points (a cluster still needs _MIN_POINTS of the old
# epoch's), and a cluster is judged only where the newer epochs, were it still arriving at the old epoch's
# share, would have released at least ln(k / _FALSE_STOPS) points in it: a Poisson count of that mean is 0
# with probability _FALSE_STOPS / k, so a stationary stream keeps a cluster whole by chance at most
# _FALSE_STOPS times per epoch in expectation, whatever k (a fixed mean of 3 flagged enough of shuffled
# gmm100's clusters, about two released points each, to take it from 2.53 to 2.80)
_STOPPED_POINTS_PER_CLUSTER = 2
_FALSE_STOPS = 0.05


class Partitions:
    """k-means partitions of every released point of a release fit (``S``: the epochs concatenated), each
    k fitted once: the ``clusters`` rule's k under its own key ``("release", epoch, t, "B-fit clusters")``,
    any other k under that key and k (``points_per_cluster``: the rule's released points per center,
    which sets its own k)."""

    def __init__(self, cfg: EngineConfig, noise, S: WeightedSet, epoch: int, t: int,
                 points_per_cluster: int = _POINTS_PER_CLUSTER):
        self.cfg, self.noise, self.S, self.epoch, self.t = cfg, noise, S, epoch, t
        self.own_k = self.k_of(cfg, S, points_per_cluster)
        self._labels = {}

    @staticmethod
    def k_of(cfg: EngineConfig, S: WeightedSet, points_per_cluster: int = _POINTS_PER_CLUSTER) -> int:
        """The own k of a partition of ``S`` at ``points_per_cluster`` released points per center."""
        return max(1, min(cfg.n_clusters, len(S) // points_per_cluster))

    def labels(self, k: int) -> np.ndarray:
        if k not in self._labels:
            key = ("release", self.epoch, self.t, "B-fit clusters") + (() if k == self.own_k else (k,))
            C = cluster_coreset(self.S.points, self.S.weights, k, self.cfg.objective, self.noise.generator(key),
                                self.cfg.center_vec, n_init=1)
            self._labels[k] = nearest_center(self.S.points, C)[0]
        return self._labels[k]


def _stopped_clusters_kept(cfg: EngineConfig, noise, sets, S: WeightedSet, factor: np.ndarray, epoch: int,
                           t: int, stopped_rule: bool = False, partitions: Optional[Partitions] = None) -> np.ndarray:
    """``release_decay_rule="clusters"``: the age decay applies to an old epoch's points only in the clusters
    that newer epochs still fill. The clusters are a k-means fit of every epoch's points at full weight
    (under its own key, at most one center per ``_POINTS_PER_CLUSTER`` points); an old epoch's points in a
    cluster that held at least 1/(2k) of that epoch's mass, and where the newer epochs' share of their mass
    is under ``_STILL_ARRIVING`` times the old epoch's share, keep their whole weight: a cluster that stopped
    arriving (an in-order or drifting stream) is not faded by epochs that never saw it. The first epoch
    always decays by age, and an epoch is judged only once the newer epochs outweigh it. The k-means
    partition sets the scale of "nearby", which a distance to single noisy leaf means cannot (the
    ``"covered"`` rule). Post-processing of released sets.

    ``release_decay_rule="stopped"`` (``stopped_rule``): the same test of shares, for every old epoch
    including the first, on a fit with a center per ``_STOPPED_POINTS_PER_CLUSTER`` points; in place of
    "the newer epochs outweigh it" a cluster is judged when the newer epochs would have released at least
    ln(k / ``_FALSE_STOPS``) points in it at the old epoch's share (an in-order stream's first epoch holds
    its first clusters alone; the epoch before the open one is never outweighed while its clusters are
    newest but one). In the first epoch only a cluster holding at least half its mass counts, and only once
    a later epoch kept half of its own mass (the stream drifts): a clump of the ball's coarse leaf means holds a part
    of it (shuffled aniso32: 1.034 → 1.045 without the half), or in high d most of it (emb784: 1.086 →
    1.103 without the drift)."""
    # a fit with about as many centers as points makes every old point a cluster of its own, which no newer
    # point shares: a few coarse leaf means would all count as stopped
    if partitions is None:  # (a partition given is the one of the rule's points_per_cluster)
        partitions = Partitions(cfg, noise, S, epoch, t,
                                _STOPPED_POINTS_PER_CLUSTER if stopped_rule else _POINTS_PER_CLUSTER)
    k = partitions.own_k
    lab = partitions.labels(k)
    ep = np.concatenate([np.full(len(s), i) for i, s in enumerate(sets)])
    w = np.maximum(S.weights, 0.0)
    out = factor.copy()
    # "clusters": the first epoch's rings are the ball's alone: its leaf means average whole groups of
    # clusters, a clump of its own that no later epoch fills (measured: nearly all that a shuffled stream kept)
    # "stopped" judges the first epoch last, and keeps its clusters only once a later epoch kept half its
    # mass: a clump of the ball's coarse leaf means (high d: near the mean of the newer points) holds most
    # of a shuffled stream's first epoch too (emb784: 1.086 → 1.103 without this), and a stationary stream
    # keeps at most a stray part of a finer epoch (pixels, seed 4: 2 of epoch 1's 12 points)
    drifted = False
    for i in (list(range(1, len(sets) - 1)) + [0]) if stopped_rule else range(1, len(sets) - 1):
        own = np.bincount(lab[ep == i], weights=w[ep == i], minlength=k)
        newer = np.bincount(lab[ep > i], weights=w[ep > i], minlength=k)
        if not stopped_rule and newer.sum() < own.sum():  # the newer epochs too young to tell (a small cluster may be unsampled yet)
            continue
        # shares, not masses (the open epoch starts small), and only a cluster that held a real share of
        # the old epoch (not a few stray leaf means that the fit happened to give a center)
        n_own = np.bincount(lab[ep == i], minlength=k)  # released points, not mass: one noisy leaf mean is no cluster
        stopped = ((newer * own.sum() < _STILL_ARRIVING * own * newer.sum()) & (2 * k * own >= own.sum())
                   & (n_own >= _MIN_POINTS))
        if stopped_rule:  # absent newer points mean "stopped" only where some were to be expected
            stopped &= own * np.count_nonzero(ep > i) >= np.log(k / _FALSE_STOPS) * own.sum()
            if i == 0:  # the ball's rings: a clump of coarse leaf means holds a part of the first epoch; a
                # first epoch that saw one cluster (an in-order stream's first ticks) holds most of it there
                stopped &= (2 * own >= own.sum()) & drifted
        seg = ep == i
        drifted |= bool(2 * w[seg][stopped[lab[seg]]].sum() >= w[seg].sum())
        out[seg] = np.where(stopped[lab[seg]], 1.0, factor[seg])
    return out


def release_centers(cfg: EngineConfig, noise, pts: np.ndarray, w: np.ndarray, epoch: int, t: int) -> np.ndarray:
    """The k centers of the release of tick t: a fresh k-means++ fit of its coreset alone (no warm
    start from the previous release: measured no better, and a stateless fit cannot stay stuck in
    an earlier epoch's local optimum and runs in parallel across ticks in the Beam job), clipped
    into the public ball (post-processing: A's noisy means can land outside it)."""
    centers = cluster_coreset(pts, w, cfg.n_clusters, cfg.objective, noise.generator(("release", epoch, t, "cluster")),
                              cfg.center_vec, n_init=cfg.n_init)
    centers, _ = clip_to_ball(np.array(centers, dtype=float), cfg.center_vec, cfg.radius)
    return centers


def ring_centers(cfg: EngineConfig, noise, pts: np.ndarray, w: np.ndarray, centers: np.ndarray, epoch: int,
                 t: int) -> np.ndarray:
    """The released centers a new epoch's rings use (post-processing of tick t's release): its k
    centers, or a (ring_center_factor·k)-means of its coreset."""
    k_r = int(round(cfg.ring_center_factor * cfg.n_clusters))
    if k_r == cfg.n_clusters:
        return centers
    return cluster_coreset(pts, w, max(1, k_r), cfg.objective, noise.generator(("release", epoch, t, "ring centers")),
                           cfg.center_vec, n_init=cfg.n_init)


# -- the window of runs (dpstream.runs): released coresets of closed runs merged (post-processing)

def all_time_merge(cfg: EngineConfig, noise, all_time, pts: np.ndarray, w: np.ndarray, run: int, z: int):
    """``window_runs = 0``: the all-time set after run ``run`` closes with final coreset (pts, w):
    B's sample of the previous all-time set and it, under the closing run's noise."""
    merged = (pts, w) if all_time is None else (np.vstack([all_time[0], pts]), np.r_[all_time[1], w])
    rng = noise.generator(("window", "all-time", run))
    p2, w2 = sensitivity_sample(merged[0], merged[1], cfg.s_b, cfg.n_clusters, rng, z)
    return p2, np.rint(w2).astype(np.int64)


def window_sample(cfg: EngineConfig, noise, sets, pts: np.ndarray, w: np.ndarray, t: int, z: int):
    """B's sample of the window's closed-run coresets ``sets`` [(points, weights)] and the current
    run's release coreset (pts, w) at tick t (float weights, as B returns them)."""
    P = np.vstack([p for p, _ in sets] + [pts])
    W = np.concatenate([ww for _, ww in sets] + [w]).astype(float)
    return sensitivity_sample(P, W, cfg.s_b, cfg.n_clusters, noise.generator(("window", t, "B")), z)


def window_centers(cfg: EngineConfig, noise, P: np.ndarray, W: np.ndarray, t: int) -> np.ndarray:
    """The window's k centers at tick t (a fresh k-means++ fit of :func:`window_sample`), clipped."""
    C = cluster_coreset(P, np.rint(W), cfg.n_clusters, cfg.objective, noise.generator(("window", t, "cluster")),
                        cfg.center_vec, n_init=cfg.n_init)
    C, _ = clip_to_ball(np.asarray(C, dtype=float), cfg.center_vec, cfg.radius)
    return C
