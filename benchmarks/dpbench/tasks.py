"""One run of the grid: a :class:`Task` (data set, method, ε, seed[, sweep config]) and :func:`run_task`,
which executes it — in this process or in a worker — and returns its record (raw costs, clocks, state).

Records hold raw costs only; ratios are taken when summarising (:mod:`dpbench.summary`), so no run
depends on another and the runs can go to any worker in any order. Two pseudo-methods prepare a data set:
``_prepare`` (its public rule, sizes, fingerprint, checkpoint ticks) and ``_prefix_ref`` (the
``KMeans(n_init=3)`` cost of every checkpoint's prefix)."""
from __future__ import annotations

import os
import signal
import time
import traceback
from dataclasses import dataclass
from typing import Tuple

from . import datasets, eps_value
from .common import loadavg
from .metrics.checkpoints import checkpoint_ticks, prefix_costs, prefix_references, prefix_sizes
from .metrics.cost import costs
from .peers import REGISTRY as PEERS

PREPARE, PREFIX_REF = "_prepare", "_prefix_ref"


@dataclass(frozen=True)
class Task:
    dataset: str
    method: str
    eps: str = "-"
    seed: int = 0
    config: str = ""  # sweep configuration name ("" = the grid)
    overrides: Tuple = ()  # sorted (knob, value) pairs passed to dpstream
    reference: bool = False  # a reference or preparation: never timed out or capped

    @property
    def key(self):
        return (self.dataset, self.method, self.eps, self.seed, self.config)

    @property
    def cell(self):
        return (self.dataset, self.method, self.eps, self.config)


class RunTimeout(Exception):
    pass


def _alarm(signum, frame):
    raise RunTimeout()


def timed_call(fn, seconds):
    """fn() under a wall-clock limit (SIGALRM, main thread); seconds <= 0: no limit."""
    if not seconds or seconds <= 0:
        return fn()
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        return fn()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def base_record(task: Task) -> dict:
    return dict(dataset=task.dataset, method=task.method, eps=task.eps, seed=task.seed, config=task.config,
                overrides={k: (list(v) if isinstance(v, tuple) else v) for k, v in task.overrides},
                status="ok")


def prepare(ds) -> dict:
    import numpy as np

    mean = ds.X.mean(axis=0, keepdims=True)
    km, kmed = costs(ds.X, mean)
    ticks = checkpoint_ticks(ds.T)
    lo, hi = np.asarray(ds.bounds[0]), np.asarray(ds.bounds[1])
    box = ([float(lo[0]), float(hi[0])] if (np.all(lo == lo[0]) and np.all(hi == hi[0]))
           else [lo.tolist(), hi.tolist()])
    return dict(meta=dict(n=ds.n, d=ds.d, k=ds.k, tick=ds.tick, T=ds.T, radius=ds.radius,
                          center=ds.center.tolist()[:3] + (["…"] if ds.d > 3 else []),
                          center_uniform=bool(np.all(ds.center == ds.center[0])),
                          diffprivlib_bounds=box, rule=ds.rule, family=ds.family, held_out=ds.held_out,
                          base=ds.base, order=ds.order, fingerprint=datasets.fingerprint(ds.X),
                          mean_cost=km, mean_cost_z1=kmed, checkpoint_ticks=ticks,
                          checkpoint_n=prefix_sizes(ds.n, ds.tick, ticks), generator=ds.meta))


def evaluate(ds, peer, out, ckpts) -> dict:
    km, kmed = costs(ds.X, out["centers"])
    rec = dict(final_cost=km, final_cost_z1=kmed, fit_time=out.get("fit_time"), cpu_time=out.get("cpu_time"),
               state_final=out.get("state_final"), state_max=out.get("state_max"), extra=out.get("extra", {}))
    if ckpts and peer.objective == "kmeans":
        rec["ckpt_costs"] = prefix_costs(ds.X, ds.tick, ckpts, out["ckpt_centers"])
    return rec


def run_task(task: Task, run_timeout: float = 0.0) -> dict:
    """Execute one task; never raises (a failure is a record with status "error")."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the fixed seeds' UnsafeSeedWarning, convergence warnings
        return _run_task(task, run_timeout)


def _run_task(task: Task, run_timeout: float) -> dict:
    t0 = time.time()
    rec = base_record(task)
    try:
        ds = datasets.load(task.dataset)  # generation is not part of the run's time limit
        t1 = time.time()
        if task.method == PREPARE:
            rec.update(prepare(ds))
        elif task.method == PREFIX_REF:
            rec["prefix_ref"] = prefix_references(ds.X, ds.k, ds.tick, checkpoint_ticks(ds.T))
        else:
            peer = PEERS[task.method]
            why = peer.unavailable()
            if why:
                rec.update(status="skipped", reason=why)
            else:
                ckpts = checkpoint_ticks(ds.T) if peer.streaming else []
                e = None if task.eps == "-" else eps_value(task.eps)
                out = timed_call(lambda: peer.run(ds, e, task.seed, ckpts, dict(task.overrides)),
                                 0 if task.reference else run_timeout)
                rec.update(evaluate(ds, peer, out, ckpts))
        rec["run_wall"] = time.time() - t1
    except RunTimeout:
        rec.update(status="timeout", reason=f"over --run-timeout {run_timeout:g} s wall")
    except Exception as exc:  # reported, not raised: one broken run must not stop the grid
        rec.update(status="error", reason=f"{type(exc).__name__}: {exc}",
                   traceback=traceback.format_exc(limit=6)[-3000:])
    rec.update(wall=time.time() - t0, pid=os.getpid(), loadavg=loadavg())
    return rec
