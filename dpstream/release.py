"""What a tick releases (P18): DP by construction, safe to send anywhere."""
from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, fields

import numpy as np

from .plan_text import plan_table
from .privacy import PrivacyPlan

# The only fields a release record may carry; tests scan serialised releases against it. (A line of a
# release log may carry coreset_same_as_tick, a public tick number, instead of the two coreset arrays,
# or coreset_ids and coreset_rows, its coreset points by id, instead of coreset_points:
# dpstream/release_log.py, LOG_FIELDS and ID_FIELDS.)
RELEASE_FIELDS = ("tick", "epoch", "centers", "coreset_points", "coreset_weights", "count_estimate",
                  "n_candidate_centers", "privacy", "run", "global_tick", "window_centers", "window_first_run")


@dataclass(frozen=True)
class Release:
    """The release of one tick.

    tick: 1-based tick within its run (1..T); epoch: index of the run's open epoch;
    centers: (k, d) cluster centers of the run so far (post-processing of the coreset);
    coreset_points / coreset_weights: the run's DP weighted coreset (integer weights);
    count_estimate: a DP estimate of the run's number of points so far (post-processing
    of DP counters, never the exact count); n_candidate_centers: |F|;
    plan: the privacy plan the release was produced under (one run's);
    run: the run's index (0, 1, …); global_tick: run·T + tick, the tick of the stream clock;
    window_centers: (k, d) centers of the window — the released coresets of the runs
    window_first_run … run merged (post-processing; equal to ``centers`` in run 0).
    """

    tick: int
    epoch: int
    centers: np.ndarray
    coreset_points: np.ndarray
    coreset_weights: np.ndarray
    count_estimate: float
    n_candidate_centers: int
    plan: PrivacyPlan
    run: int = 0
    global_tick: int = None
    window_centers: np.ndarray = None
    window_first_run: int = 0

    def __post_init__(self):
        if self.global_tick is None:
            object.__setattr__(self, "global_tick", int(self.tick))
        if self.window_centers is None:
            object.__setattr__(self, "window_centers", self.centers)

    def to_dict(self) -> dict:
        d = {
            "tick": int(self.tick),
            "epoch": int(self.epoch),
            "centers": self.centers.tolist(),
            "coreset_points": self.coreset_points.tolist(),
            "coreset_weights": [int(w) for w in self.coreset_weights],
            "count_estimate": float(self.count_estimate),
            "n_candidate_centers": int(self.n_candidate_centers),
            "privacy": self.plan.to_dict(),
            "run": int(self.run),
            "global_tick": int(self.global_tick),
            "window_centers": np.asarray(self.window_centers).tolist(),
            "window_first_run": int(self.window_first_run),
        }
        for key, value in getattr(self, "_extra", {}).items():  # keys from_dict kept (a newer writer's)
            d.setdefault(key, copy.deepcopy(value))
        return d

    @classmethod
    def from_dict(cls, d: Mapping) -> "Release":
        """The inverse of :meth:`to_dict` (e.g. one line of ``releases.jsonl``): ``to_dict(from_dict(d)) == d``.

        Arrays come back as numpy arrays; the privacy plan as a :class:`ReleasedPlan` (the plan's
        dict, with attribute access and ``table()``). A key this version does not know (written by a
        newer dpstream) is kept and written back by ``to_dict``; a field missing from ``d`` takes its
        default when it has one; a missing required field raises ValueError."""
        if not isinstance(d, Mapping):
            raise ValueError(f"a release is a dict (one JSON object), got {type(d).__name__}")
        if "coreset_same_as_tick" in d and "coreset_points" not in d:
            raise ValueError(f"this line of a release log holds no coreset: it repeats the one of tick "
                             f"{d['coreset_same_as_tick']} (run {d.get('run', 0)}); read the log with "
                             f"dpstream.read_releases, which puts it back")
        if "coreset_ids" in d and "coreset_points" not in d:
            raise ValueError(f"this line of a release log names its coreset points by id (run {d.get('run', 0)}, "
                             f"tick {d.get('tick')}); the points are in the lines that first used them: read the "
                             f"log with dpstream.read_releases, which puts them back")
        kw, known = {}, set()
        for f in fields(cls):
            key = "privacy" if f.name == "plan" else f.name
            known.add(key)
            if key in d:
                kw[f.name] = _FROM_JSON.get(f.name, _same)(d[key])
            elif f.default is MISSING and f.default_factory is MISSING:
                raise ValueError(f"not a dpstream release: the key {key!r} is missing")
        pts = kw.get("coreset_points")
        centers = kw.get("centers")
        if pts is not None and pts.size == 0 and centers is not None and centers.ndim == 2:
            kw["coreset_points"] = pts.reshape(0, centers.shape[1])
        rel = cls(**kw)
        extra = {k: copy.deepcopy(v) for k, v in d.items() if k not in known}
        if extra:
            object.__setattr__(rel, "_extra", extra)  # frozen dataclass: extras ride along, outside the fields
        return rel


class ReleasedPlan(Mapping):
    """The privacy plan as a release carries it (:meth:`PrivacyPlan.to_dict`), read back: a read-only
    mapping with attribute access (``plan.total_epsilon``, ``plan.neighbouring``), ``to_dict()`` and
    ``table()`` (the Markdown ledger). Public: it is part of every release."""

    def __init__(self, d: Mapping):
        self._d = copy.deepcopy(dict(d))

    def __getitem__(self, key):
        return self._d[key]

    def __iter__(self):
        return iter(self._d)

    def __len__(self) -> int:
        return len(self._d)

    def __getattr__(self, name):
        try:
            return self.__dict__["_d"][name]
        except KeyError:
            raise AttributeError(name) from None

    def to_dict(self) -> dict:
        return copy.deepcopy(self._d)

    def table(self) -> str:
        return plan_table(self._d)

    def __str__(self) -> str:
        return self.table()

    def __repr__(self) -> str:
        return f"ReleasedPlan(epsilon={self._d.get('epsilon')!r}, delta={self._d.get('delta')!r}, " \
               f"total_epsilon={self._d.get('total_epsilon')!r}, neighbouring={self._d.get('neighbouring')!r})"


def _same(v):
    return copy.deepcopy(v)


_FROM_JSON = {
    "tick": int,
    "epoch": int,
    "centers": lambda v: np.asarray(v, dtype=np.float64),
    "coreset_points": lambda v: np.asarray(v, dtype=np.float64),
    "coreset_weights": lambda v: np.asarray(v, dtype=np.int64),
    "count_estimate": float,
    "n_candidate_centers": int,
    "plan": lambda v: ReleasedPlan(v),
    "run": int,
    "global_tick": int,
    "window_centers": lambda v: np.asarray(v, dtype=np.float64),
    "window_first_run": int,
}
