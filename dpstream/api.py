"""``DPStreamClusterer``: the scikit-learn-style front end of the engine.

Modelled on ``sklearn.cluster.MiniBatchKMeans``: ``partial_fit(X)`` consumes one
tick, ``fit(X)`` splits X into ticks of ``tick_size`` rows, and the latest
release is exposed as ``cluster_centers_`` / ``release_``.
"""
from __future__ import annotations

import math
import numbers
import time
import warnings
from typing import Optional

import numpy as np
from sklearn.base import BaseEstimator, ClusterMixin

from . import rules
from .contributions import ContributionBounder
from .engine import Engine, StreamEnded
from .runs import RunSequence
from .noise import seed_bytes
from .params import PARAMETERS, EngineConfig, objective_exponent
from .release import Release
from .rings import nearest_center

_ADVANCED = [name for name in PARAMETERS
             if name not in ("n_clusters", "dim", "radius", "epsilon", "delta", "objective", "semicoreset",
                             "horizon_ticks", "neighbouring", "center")]

DEFAULT_PARTIAL_FIT_HORIZON = 1024
_UNIT_FIELDS = ("max_contributions", "max_contributions_per_tick", "contribution", "privacy_unit")


def progress_line(rel: Release, n_ticks: int, rows_done: int, t0: float) -> str:
    """``fit(verbose=1)``'s line: tick, epoch and run exactly as the release's fields say them
    (docs/job.md, "Reading releases back"), and the end-to-end rate (points consumed so far over the
    wall time since ``fit`` started, release work included)."""
    el = max(time.perf_counter() - t0, 1e-9)
    return (f"[dpstream] tick {rel.tick}/{n_ticks} epoch {rel.epoch} run {rel.run} "
            f"|F|={rel.n_candidate_centers} DP count ≈ {rel.count_estimate:,.0f}, ~{rows_done / el:,.0f} points/s "
            f"end to end")


class DPStreamWarning(UserWarning):
    """A run that is probably misconfigured: e.g. most points were clipped onto the public ball
    (check ``radius`` and ``center``). The message states exact counts: operator telemetry, for the
    operator's eyes (stderr, logs), never for the release channel."""


def _clip_message(n_clipped: int, n: int, radius, center) -> str:
    where = "the origin" if center is None else "(" + ", ".join(f"{v:g}" for v in np.ravel(center)) + ")"
    return (f"{n_clipped} of {n} points so far ({100.0 * n_clipped / n:.0f}%) lay outside the ball of "
            f"radius {radius:g} around {where} and were clipped onto its boundary: the releases describe the "
            f"clipped points. Check radius and center (fix them from domain knowledge, never from the data; "
            f"see docs/choosing-parameters.md)")


class DPStreamClusterer(ClusterMixin, BaseEstimator):
    """Differentially private streaming k-means / k-median (Epasto, Mukherjee, Zhong).

    Every release (one per tick) holds k centers and a DP weighted coreset; the
    whole sequence of releases is (ε, δ)-DP for the neighbouring relation in
    ``neighbouring``, and the engine's memory stays polylogarithmic in the stream.

    Parameters
    ----------
    n_clusters : int >= 1
    epsilon : float > 0
        Total privacy budget of the whole run (all ticks). ``math.inf`` turns
        every noise scale to zero (benchmarks' non-private limit only).
    delta : float in [0, 1), default 1e-6
        With delta > 0 the counters and the semicoreset use Gaussian noise
        composed in one privacy-loss distribution; delta = 0 gives pure ε-DP.
    radius : float > 0
        Public bound Λ on ‖x − center‖. Choose it from domain knowledge, never
        from the data; points outside are clipped onto the ball.
    objective : "kmeans" | "kmedian"
    semicoreset : "tree" | "lloyd" | "snap"
        Black box A: noisy-count/noisy-mean tree (default), DP-Lloyd with
        Theorem 7, or snap-to-center (the paper's strawman baseline).
    random_state : None | int | bytes
        The master seed of every noise draw. None (default) takes 256 bits of
        OS entropy — the only safe choice in production: whoever knows the seed
        can subtract the noise, and a seed reused on other data releases exact
        differences. An int makes releases reproducible, for tests; it warns.
    tick_size : int, default 1000
        Rows per tick in ``fit``.
    horizon_ticks : int or None
        Public horizon T of one run: releases happen at ticks 1..T and tick T+1 is
        refused unless more runs are allowed (``runs``). None means the number of
        ticks of X in ``fit`` and 1024 for ``partial_fit``. A stream that ends before T
        says so with ``partial_fit(X, last=True)`` or ``finish()``: its last release then
        holds every point.
    runs : int or None, default 1 (an advanced parameter)
        Consecutive runs of T ticks, each with fresh mechanisms, noise and budget:
        a record lies in one run, so the whole sequence stays (ε, δ)-DP per record
        (parallel composition; :mod:`dpstream.runs`). None: unbounded
        (``partial_fit`` past T rolls over). ``window_runs`` (default 1): releases
        also carry ``window_centers`` of the last W closed runs and the current one
        (0: all runs).
    neighbouring : "replace_one" (default) | "add_remove"
        The neighbouring relation the plan is calibrated for. Ticks made by
        counting rows (``fit``, or ``partial_fit`` with fixed-size chunks) are a
        position clock: DP under replace-one only. Use "add_remove" only when
        each ``partial_fit`` call holds the records of a fixed time interval.
    center : array of shape (d,) or None
        Public center of the data ball (default: the origin).
    verbose : int, default 0
        ``fit`` prints a progress line every 10% of the ticks when > 0.
    max_contributions, max_contributions_per_tick, contribution, privacy_unit : (advanced)
        User-level privacy (:mod:`dpstream.contributions`, docs/user-level-privacy.md): with
        ``max_contributions`` = L every row needs a privacy id (``privacy_ids`` of ``fit`` and
        ``partial_fit``), each id keeps at most L records per run (at most
        ``max_contributions_per_tick`` per tick), or with ``contribution="tick_mean"`` one mean point
        per tick for at most L ticks, and the plan protects one id (``privacy_unit`` names it in the
        ledger) instead of one record. None (default): one record is the unit.
    **advanced
        Any other field of :class:`dpstream.params.EngineConfig` (grid levels,
        buckets, block size, tree depth, privacy split, ...).

    Attributes
    ----------
    cluster_centers_ : (k, d) centers of the latest release (of its run)
    window_centers_ : (k, d) the latest release's window centers (runs window_first_run … run)
    release_ : the latest :class:`dpstream.release.Release`
    privacy_plan_ : the :class:`dpstream.privacy.PrivacyPlan`
    fit_options_ : the options ``fit`` added for this input (a dict; empty for ``partial_fit``): on an
        input of at most 50,000 rows and at least 65 columns, A's cells, gated per block
        (:func:`dpstream.rules.short_fit_options`; n and d are public under fit's clock). Setting any
        of them yourself (e.g. ``tree_cells=0``) keeps them off.
    n_ticks_ : ticks consumed
    labels_ : after ``fit(X)``, the index of each row of X's nearest released center (like X itself,
        operator data: an assignment of the raw rows)
    n_clipped_ : points clipped onto the ball — operator telemetry, an exact
        count: never publish it with the releases.
    n_dropped_ : records dropped by contribution bounding (tick means: records merged into
        a mean or dropped) — operator telemetry, like ``n_clipped_``.

    Warnings
    --------
    ``fit`` (once per call) and ``partial_fit`` (once, when it first happens) warn with
    :class:`DPStreamWarning` when most points of the stream so far were clipped onto the
    ball: ``radius`` or ``center`` is probably wrong.

    Only the releases (``release_``, ``cluster_centers_``, ``privacy_plan_``) are DP.
    The estimator object itself is operator state: its engine holds raw buffered points
    and exact counter sums, ``state_size()`` and ``n_clipped_`` are exact counts. Never
    publish, pickle to a shared place or return the model object to a data consumer;
    publish its releases (``release_.to_dict()``) and rebuild a model for predictions
    with :meth:`from_release`.
    """

    def __init__(self, n_clusters=8, *, epsilon=1.0, delta=1e-6, radius=None, objective="kmeans",
                 semicoreset="tree", random_state=None, tick_size=1000, horizon_ticks=None,
                 neighbouring="replace_one", center=None, verbose=0, **advanced):
        unknown = set(advanced) - set(_ADVANCED)
        if unknown:
            raise ValueError(f"unknown parameter(s) {sorted(unknown)}; known advanced parameters: {_ADVANCED}")
        self.n_clusters = n_clusters
        self.epsilon = epsilon
        self.delta = delta
        self.radius = radius
        self.objective = objective
        self.semicoreset = semicoreset
        self.random_state = random_state
        self.tick_size = tick_size
        self.horizon_ticks = horizon_ticks
        self.neighbouring = neighbouring
        self.center = center
        self.verbose = verbose
        self.advanced = dict(advanced)
        if radius is None:
            raise ValueError("radius is required: a public bound on the norm of the data (never computed from it)")
        if not (isinstance(tick_size, numbers.Integral) and tick_size >= 1):
            raise ValueError(f"tick_size must be an integer >= 1, got {tick_size!r}")
        # validate everything now, with a placeholder dimension
        self._config(dim=1 if center is None else len(np.atleast_1d(center)),
                     horizon=1 if horizon_ticks is None else horizon_ticks)
        self._engine: Optional[Engine] = None

    def get_params(self, deep=True):
        p = super().get_params(deep)
        p.pop("advanced", None)
        p.update(self.advanced)
        return p

    def set_params(self, **params):
        """scikit-learn's ``set_params``; an advanced parameter (any other EngineConfig field, e.g.
        ``n_trees``) goes where ``__init__`` keeps it, so ``get_params``/``clone`` see it."""
        adv = {k: params.pop(k) for k in list(params) if k in _ADVANCED}
        changed = sorted(k for k in _UNIT_FIELDS if k in adv and adv[k] != self.advanced.get(k))
        if changed and getattr(self, "_engine", None) is not None:
            # the open run's plan and bounder were built without them: going on would bound (and
            # calibrate for) the old unit while the parameters claim the new one
            raise ValueError(f"{changed} cannot change once the run has started (the plan and the contribution "
                             f"bounds are fixed at the first tick); start a new estimator, e.g. "
                             f"sklearn.base.clone(model).set_params(...)")
        super().set_params(**params)
        if adv:
            self.advanced = {**self.advanced, **adv}
        return self

    def plan(self, n_features: int, points_per_tick: Optional[float] = None) -> str:
        """The privacy plan, block size, first tick with a full block and state bound of this
        configuration for ``n_features`` dimensions, before any data (:mod:`dpstream.planning`;
        the job's ``--plan_only``). ``points_per_tick`` default: ``tick_size``. ``fit`` on a short
        high-dimensional input adds options to it (``fit_options_``; its ``privacy_plan_`` is that run's)."""
        from .planning import plan_text
        cfg = self._config(int(n_features), DEFAULT_PARTIAL_FIT_HORIZON if self.horizon_ticks is None
                           else self.horizon_ticks)
        return plan_text(cfg, points_per_tick or self.tick_size)

    def _config(self, dim: int, horizon: int, extra: Optional[dict] = None) -> EngineConfig:
        """``extra``: options fit adds from public n and d (:func:`dpstream.rules.short_fit_options`)."""
        return EngineConfig(n_clusters=self.n_clusters, dim=dim, radius=self.radius, epsilon=self.epsilon,
                            delta=self.delta, horizon_ticks=horizon, neighbouring=self.neighbouring,
                            objective=self.objective, semicoreset=self.semicoreset,
                            center=None if self.center is None else tuple(np.asarray(self.center, float)),
                            **{**(extra or {}), **self.advanced})

    # -- input validation -----------------------------------------------------
    def _check_X(self, X, allow_empty=True) -> np.ndarray:
        if X is None:
            raise ValueError("X is None; pass an array of shape (n_points, n_features) (0 rows for an empty tick)")
        try:
            arr = np.asarray(X)
        except Exception as exc:  # ragged lists and the like
            raise ValueError(f"X could not be read as a 2-D numeric array: {exc}") from None
        if arr.dtype == object or not (np.issubdtype(arr.dtype, np.number) or arr.dtype == bool):
            raise ValueError(f"X must be numeric, got dtype {arr.dtype}; convert or dead-letter non-numeric rows")
        if np.issubdtype(arr.dtype, np.complexfloating):
            raise ValueError("X must be real-valued, got complex numbers")
        if arr.ndim == 1 and arr.size == 0:
            arr = arr.reshape(0, self.n_features_in_ if hasattr(self, "n_features_in_") else 0)
        if arr.ndim != 2:
            raise ValueError(f"X must be 2-D (n_points, n_features), got shape {arr.shape}; "
                             f"use X.reshape(1, -1) for one point")
        arr = np.asarray(arr, dtype=float)  # no copy of a float64 input: the engine copies when it clips
        if hasattr(self, "n_features_in_") and arr.shape[1] != self.n_features_in_:
            raise ValueError(f"X has {arr.shape[1]} features but this clusterer was fitted with "
                             f"{self.n_features_in_}")
        if arr.shape[1] == 0:
            raise ValueError("X must have at least one feature")
        if self.center is not None and arr.shape[1] != len(np.atleast_1d(self.center)):
            raise ValueError(f"X has {arr.shape[1]} features but center has {len(np.atleast_1d(self.center))}")
        # one reduction instead of an n×d mask: NaN and ±inf propagate into the sum; only a sum that
        # overflowed (huge finite rows) or is non-finite takes the row-wise check
        if not np.isfinite(arr.sum()) and not np.all(np.isfinite(arr)):
            bad = int((~np.isfinite(arr)).any(axis=1).sum())
            raise ValueError(f"X contains NaN or infinite values in {bad} row(s); drop or dead-letter them first")
        if not allow_empty and arr.shape[0] == 0:
            raise ValueError("X has no rows")
        return arr

    def _start(self, dim: int, horizon: int, extra: Optional[dict] = None) -> None:
        cfg = self._config(dim, horizon, extra)
        self.fit_options_ = dict(extra or {})
        self._engine = RunSequence(cfg, seed_bytes(self.random_state))
        self.n_features_in_ = dim
        self.privacy_plan_ = self._engine.plan
        self._bounder = ContributionBounder(cfg) if cfg.max_contributions is not None else None
        self._n_seen = 0  # operator telemetry, for the clipping warning only
        self._clip_warned = False

    # -- fitting --------------------------------------------------------------
    def _check_ids(self, privacy_ids) -> None:
        if self.advanced.get("max_contributions") is None:
            if privacy_ids is not None:
                raise ValueError("privacy_ids need a contribution bound: set max_contributions (L, the most "
                                 "records one id may contribute per run); see docs/user-level-privacy.md")
        elif privacy_ids is None:
            raise ValueError("max_contributions is set: pass privacy_ids (one id per row)")

    def _bounded(self, X, privacy_ids) -> np.ndarray:
        if getattr(self, "_bounder", None) is None:
            return X
        # the engine's clock, not the bounder's own: a call that failed before reaching the engine
        # cannot shift the bounder's run boundaries against the engine's
        return self._bounder.bound(X, privacy_ids, self._engine.next_global_tick)

    def partial_fit(self, X, y=None, privacy_ids=None, last=False) -> "DPStreamClusterer":
        """Consume one tick of points (0 rows is an empty tick: every mechanism still advances).

        ``privacy_ids``: one privacy id per row (any hashable), required exactly when
        ``max_contributions`` is set.

        ``last=True`` declares X the stream's last tick (a file read chunk by chunk, a drained
        source): its release holds every point of the stream, as a release at the horizon does,
        and the estimator then refuses further points (:class:`~dpstream.StreamEnded`). Without it,
        a stream that stops before the horizon (``horizon_ticks``, 1024 by default) keeps its points
        since the last flush out of every release. See :meth:`finish` when the last chunk is only
        known after it was passed."""
        if getattr(self, "_engine", None) is not None and self._engine.ended:
            raise StreamEnded(self._ended_message())
        X = self._check_X(X)
        self._check_ids(privacy_ids)
        if self._engine is None:
            self._start(X.shape[1], DEFAULT_PARTIAL_FIT_HORIZON if self.horizon_ticks is None
                        else self.horizon_ticks)
        self._take(self._engine.step(self._bounded(X, privacy_ids), last=bool(last)))
        self._n_seen = getattr(self, "_n_seen", 0) + X.shape[0]  # getattr: an estimator pickled by an older version
        if not getattr(self, "_clip_warned", False):
            self._check_clipping()
        return self

    def finish(self) -> "DPStreamClusterer":
        """Declare the end of the stream after the last ``partial_fit``: one more tick, empty, ends it
        as ``partial_fit(X, last=True)`` would have (every pending point reaches the release). When
        the run has just reached its horizon T, whose release already holds every point, no tick is
        added. Further ``partial_fit`` calls raise :class:`~dpstream.StreamEnded`; ``fit`` (or a
        clone) starts a new stream. The end is public, like the horizon: decide it from the input's
        public extent (its file, its row count under replace-one, the clock), not from its contents."""
        if getattr(self, "_engine", None) is None:
            raise ValueError("nothing to finish: call partial_fit first")
        eng = self._engine
        if eng.ended:
            raise StreamEnded(self._ended_message())
        if eng.engine.t >= eng.cfg.horizon_ticks:
            eng.engine.ended = True  # the horizon flushed at this tick: the same release, nothing added
            return self
        self._take(eng.step(self._bounded(np.zeros((0, self.n_features_in_)), [] if self._bounder else None),
                            last=True))
        return self

    def _ended_message(self) -> str:
        return (f"the stream was declared ended at tick {self.n_ticks_} (partial_fit(..., last=True) or "
                f"finish()); its last release (release_) holds every point. To cluster another stream, "
                f"start a new estimator (sklearn.base.clone(model)) or call fit")

    def fit(self, X, y=None, privacy_ids=None) -> "DPStreamClusterer":
        """Restart and stream X in ticks of ``tick_size`` rows (a position clock); ``privacy_ids`` as
        in :meth:`partial_fit` (bounding drops rows inside their ticks: no row changes tick)."""
        if self.neighbouring != "replace_one":
            raise ValueError("fit() makes ticks by counting rows (a position clock), which is differentially "
                             "private only under neighbouring='replace_one'; use partial_fit with one call per "
                             "fixed time interval for add_remove")
        for attr in ("n_features_in_", "release_", "cluster_centers_", "labels_"):
            self.__dict__.pop(attr, None)
        X = self._check_X(X, allow_empty=False)
        self._check_ids(privacy_ids)
        if privacy_ids is not None:
            privacy_ids = privacy_ids if isinstance(privacy_ids, (list, np.ndarray)) else list(privacy_ids)
            if len(privacy_ids) != X.shape[0]:
                raise ValueError(f"privacy_ids has {len(privacy_ids)} entries for {X.shape[0]} rows (one id per row)")
        n_ticks = math.ceil(X.shape[0] / self.tick_size)
        horizon = n_ticks if self.horizon_ticks is None else self.horizon_ticks
        runs = self.advanced.get("runs", 1)
        if runs is not None and n_ticks > horizon * runs:
            raise ValueError(f"X needs {n_ticks} ticks of {self.tick_size} rows but horizon_ticks={horizon} "
                             f"with runs={runs}; raise horizon_ticks, tick_size or runs (None: unbounded)")
        # a short high-dimensional input runs A's cells: n is public under fit's clock, and the input is in
        # memory anyway (rules.short_fit_options; the user's own options win)
        self._start(X.shape[1], horizon,
                    rules.short_fit_options(X.shape[0], X.shape[1], self.semicoreset, self.advanced))
        every = max(1, n_ticks // 10)
        t0 = time.perf_counter()
        for i, s in enumerate(range(0, X.shape[0], self.tick_size)):
            ids = None if privacy_ids is None else privacy_ids[s:s + self.tick_size]
            self._take(self._engine.step(self._bounded(X[s:s + self.tick_size], ids)))
            if self.verbose and ((i + 1) % every == 0 or i + 1 == n_ticks):
                rel = self.release_
                print(progress_line(rel, n_ticks, min(X.shape[0], s + self.tick_size), t0), flush=True)
        self._n_seen = X.shape[0]
        self.labels_ = self.predict(X)  # X's points by the released centers (sklearn's labels_)
        self._check_clipping()
        return self

    def _check_clipping(self) -> None:
        """Warn (once per run) when most points so far were clipped onto the ball."""
        n, n_clipped = self._n_seen, self.n_clipped_
        if n and 2 * n_clipped > n:
            self._clip_warned = True
            warnings.warn(_clip_message(n_clipped, n, self.radius, self.center), DPStreamWarning, stacklevel=3)

    def _take(self, rel: Release) -> None:
        self.release_ = rel
        self.cluster_centers_ = rel.centers
        self.window_centers_ = rel.window_centers
        self.n_ticks_ = rel.global_tick
        self.n_clipped_ = self._engine.n_clipped
        bounder = getattr(self, "_bounder", None)
        if bounder is not None:
            self.n_clipped_ += bounder.n_clipped
            self.n_dropped_ = bounder.n_dropped

    def predict(self, X) -> np.ndarray:
        if not hasattr(self, "cluster_centers_"):
            raise ValueError("this DPStreamClusterer has no release yet; call fit or partial_fit first")
        X = self._check_X(X)
        idx, _ = nearest_center(X, self.cluster_centers_)
        return idx

    def fit_predict(self, X, y=None) -> np.ndarray:
        return self.fit(X).labels_

    def transform(self, X) -> np.ndarray:
        """Euclidean distances (n, k) from each row of X to each released center."""
        if not hasattr(self, "cluster_centers_"):
            raise ValueError("this DPStreamClusterer has no release yet; call fit or partial_fit first")
        from .reader import ReleaseModel
        return ReleaseModel(self.release_, self.objective).transform(self._check_X(X))

    def score(self, X, y=None) -> float:
        """Minus the cost of X under the released centers (higher is better, as in scikit-learn):
        −Σ min squared distance for k-means, −Σ min distance for k-median."""
        if not hasattr(self, "cluster_centers_"):
            raise ValueError("this DPStreamClusterer has no release yet; call fit or partial_fit first")
        dist = nearest_center(self._check_X(X), self.cluster_centers_)[1]
        return -float((dist ** objective_exponent(self.objective)).sum())

    def state_size(self, peak: bool = False) -> int:
        """Floats held in the engine's state, measured from its arrays (``peak=True``: the largest seen).

        Operator telemetry: an exact function of how many points are buffered, not DP. Use it to
        size workers; never publish it with the releases."""
        if self._engine is None:
            return 0
        return self._engine.peak_state if peak else self._engine.state_size()

    @staticmethod
    def from_release(release, objective=None):
        """A model that predicts from a saved release (a :class:`~dpstream.release.Release` or its dict,
        e.g. from :func:`dpstream.read_releases`): a :class:`~dpstream.reader.ReleaseModel` with
        ``predict``, ``transform`` (distances to the centers) and ``score`` (−cost; k-median: distances).
        It holds only the release, which is DP: unlike this estimator, it may be published."""
        from .reader import ReleaseModel
        return ReleaseModel(release, objective)

    @property
    def engine_(self) -> Engine:
        """The open run's engine — operator state, not a release: it holds raw buffered points and
        exact counter sums (so does its pickle). Never publish it; publish ``release_`` instead."""
        if self._engine is None:
            raise AttributeError("not fitted")
        return self._engine.engine

    @property
    def runs_(self) -> RunSequence:
        """The run sequence (operator state, like ``engine_``)."""
        if self._engine is None:
            raise AttributeError("not fitted")
        return self._engine
