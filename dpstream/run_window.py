"""The window of runs, written once for both drivers: :class:`dpstream.runs.RunSequence` (one process)
and the Beam job's ``ReleaseCoreset`` / ``ClusterCoreset`` (``transforms/release_stages.py``).

Each release also carries centers of a public window of runs: the final released coresets of the
last ``window_runs`` closed runs (0: all runs so far, merged into one set by black box B as each
closes) and the current run's release coreset, sampled by B and clustered. Only released coresets
enter, so the window is post-processing of DP outputs and costs no budget; its state is bounded
(one coreset per run of the window, or one for all time).
"""
from __future__ import annotations

from typing import List, NamedTuple, Optional, Tuple

import numpy as np

from . import epochs
from .params import EngineConfig


class ClosedRun(NamedTuple):
    """A closed run's final released coreset."""
    run: int
    points: np.ndarray
    weights: np.ndarray


class RunWindow:
    """The closed runs' released coresets a release's window centers are drawn from."""

    def __init__(self, cfg: EngineConfig):
        self.cfg = cfg
        self.closed: List[ClosedRun] = []  # the last W closed runs (W = cfg.window_runs > 0)
        self.all_time: Optional[Tuple[np.ndarray, np.ndarray]] = None  # W = 0: every closed run, merged

    def close_run(self, noise, run: int, points: np.ndarray, weights: np.ndarray) -> None:
        """Run ``run`` ended with the final release coreset (points, weights); ``noise``: that run's."""
        W = self.cfg.window_runs
        if W == 0:
            self.all_time = epochs.all_time_merge(self.cfg, noise, self.all_time, points, weights, run, self.cfg.z)
        else:
            self.closed = (self.closed + [ClosedRun(run, points, weights)])[-W:]

    def sets(self, run: int):
        """([(points, weights)] of the window's closed runs, the first run of the window) seen from the
        open run ``run``."""
        if self.cfg.window_runs == 0:
            return ([] if self.all_time is None else [self.all_time]), 0
        return [(p, w) for _, p, w in self.closed], (self.closed[0][0] if self.closed else run)

    def sample(self, noise, run: int, points: np.ndarray, weights: np.ndarray, t: int):
        """(B's sample of the window and the open run's release coreset (points, weights) at tick t, or
        None while no run has closed: the window is then the run itself; the window's first run)."""
        sets, first = self.sets(run)
        if not sets:
            return None, first
        return epochs.window_sample(self.cfg, noise, sets, points, weights, t, self.cfg.z), first

    def state_floats(self) -> int:
        n = sum(p.size + w.size for _, p, w in self.closed)
        if self.all_time is not None:
            n += self.all_time[0].size + self.all_time[1].size
        return int(n)


def window_centers(cfg: EngineConfig, noise, sample, centers: np.ndarray, t: int) -> np.ndarray:
    """The window's k centers at tick t from its :meth:`RunWindow.sample` (None: the run's own
    ``centers``)."""
    if sample is None:
        return centers
    return epochs.window_centers(cfg, noise, sample[0], sample[1], t)
