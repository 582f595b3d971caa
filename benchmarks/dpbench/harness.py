"""The grid: which runs (plan), how they run (serially or in worker processes, under time limits), and
how their records are merged with an earlier results.json.

Every run is deterministic from its seed (the data and stream orders are fixed), so ``--jobs 2`` gives
the same records as a serial run except for the clocks; the only order-dependent parts are the time
limits (``--run-timeout``, ``--cell-budget``), which skip runs and say so."""
from __future__ import annotations

import json
import math
import multiprocessing as mp
import os
from collections import deque
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from typing import Callable, Dict, Iterable, List, Optional

from . import datasets, eps_key
from .common import json_default, log, rounded
from .peers import REGISTRY as PEERS
from .tasks import PREFIX_REF, PREPARE, Task, base_record, run_task

TIMING_FIELDS = ("fit_time", "cpu_time", "wall", "run_wall", "pid", "loadavg")


ABLATIONS = ("dpstream_snap", "dpstream_vanilla")
DEFAULT_HORIZON = ("dpstream_default_horizon", "dpstream_declared_end")


def plan(dsets: Iterable[str], methods: List[str], eps_list, seeds_for: Callable[[str], int],
         kmedian_sets: Iterable[str] = (), kmedian_eps=None, inorder_ablation_eps=None,
         first_release_eps=None) -> List[Task]:
    """Tasks, data set by data set (each in-order variant after its shuffled set, which holds the
    references: the same points, so the same reference cost; offline peers are order-invariant and are
    run on the shuffled set only). ``kmedian_eps`` / ``inorder_ablation_eps``: the ε keys at which the
    k-median methods / the ablations on in-order variants / the default-horizon methods run (None: every
    ε of ``eps_list``)."""
    dsets, kmedian_sets = list(dsets), set(kmedian_sets)
    order = {b: i for i, b in enumerate(dict.fromkeys(datasets.split_name(d)[0] for d in dsets))}
    dsets = sorted(dsets, key=lambda d: (order[datasets.split_name(d)[0]], datasets.split_name(d)[1]))
    out: List[Task] = []
    for d in dsets:
        base, inorder = datasets.split_name(d)
        kmed = d in kmedian_sets
        sel = [m for m in methods if PEERS[m].objective == "kmeans" or kmed]
        refs = [Task(base, PREPARE, reference=True), Task(base, "kmeans", "-", 0, reference=True)]
        if kmed:
            refs.append(Task(base, "kmedian", "-", 0, reference=True))
        out += refs + [Task(d, PREPARE, reference=True)]
        if any(PEERS[m].streaming and PEERS[m].objective == "kmeans" for m in sel):
            out.append(Task(d, PREFIX_REF, reference=True))
        for m in sel:
            p = PEERS[m]
            if inorder and p.offline:
                continue
            cells = ([eps_key(e) for e in eps_list if not (p.finite_eps_only and math.isinf(e))]
                     if p.eps_dependent else ["-"])
            only = (kmedian_eps if p.objective == "kmedian" else
                    inorder_ablation_eps if (inorder and m in ABLATIONS) else
                    first_release_eps if m in DEFAULT_HORIZON else None)
            if only is not None and p.eps_dependent:
                cells = [e for e in cells if e in only]
            for e in cells:
                for s in (range(seeds_for(d)) if p.seeded else [0]):
                    out.append(Task(d, m, e, s, reference=p.reference and s == 0))
    return list(dict.fromkeys(out))  # drop repeated references, keep the order


def _capped(task: Task, budget: float, reason: str) -> dict:
    rec = base_record(task)
    rec.update(status="capped", reason=reason, wall=0.0)
    return rec


class Executor:
    """Runs tasks serially (jobs = 1) or in ``jobs`` spawned worker processes, at most ``jobs`` in flight.

    A run over ``run_timeout`` seconds is stopped and recorded as a timeout, and the rest of its cell
    (data set, method, ε) is skipped; once a cell has used ``cell_budget`` seconds its remaining seeds are
    skipped ("capped"). References and preparations are never limited."""

    def __init__(self, jobs: int = 1, run_timeout: float = 0.0, cell_budget: float = 0.0):
        self.jobs, self.run_timeout, self.cell_budget = max(1, int(jobs)), run_timeout, cell_budget
        self.spent: Dict = {}
        self.timed_out = set()

    def _skip(self, t: Task) -> Optional[dict]:
        if t.reference:
            return None
        if t.cell in self.timed_out:
            return _capped(t, self.cell_budget, "an earlier seed of this cell timed out")
        spent = self.spent.get(t.cell, 0.0)
        if self.cell_budget and spent > self.cell_budget:
            return _capped(t, self.cell_budget, f"cell used {spent:.0f} s > --cell-budget {self.cell_budget:g} s")
        return None

    def _account(self, t: Task, rec: dict) -> None:
        self.spent[t.cell] = self.spent.get(t.cell, 0.0) + (rec.get("wall") or 0.0)
        if rec["status"] == "timeout":
            self.timed_out.add(t.cell)

    def run(self, tasks: List[Task], on_record: Callable[[Task, dict], None]) -> None:
        if self.jobs == 1:
            for t in tasks:
                rec = self._skip(t) or run_task(t, self.run_timeout)
                self._account(t, rec)
                on_record(t, rec)
            return
        pending, inflight = deque(tasks), {}
        with ProcessPoolExecutor(self.jobs, mp_context=mp.get_context("spawn")) as ex:
            while pending or inflight:
                while pending and len(inflight) < self.jobs:
                    t = pending.popleft()
                    skip = self._skip(t)
                    if skip:
                        on_record(t, skip)
                    else:
                        inflight[ex.submit(run_task, t, self.run_timeout)] = t
                if not inflight:
                    continue
                done, _ = wait(inflight, return_when=FIRST_COMPLETED)
                for f in done:
                    t = inflight.pop(f)
                    try:
                        rec = f.result()
                    except Exception as exc:  # the worker died (e.g. out of memory)
                        rec = base_record(t)
                        rec.update(status="error", reason=f"worker failed: {type(exc).__name__}: {exc}", wall=0.0)
                    self._account(t, rec)
                    on_record(t, rec)


# --------------------------------------------------------------------------- results.json

def record_key(r: dict):
    return (r["dataset"], r["method"], r["eps"], r["seed"], r.get("config", ""))


def sort_records(records: List[dict]) -> List[dict]:
    """A canonical order (data set registry order, method registry order, ε, seed), independent of
    the order the runs finished in."""
    names = datasets.all_names()
    meth = [PREPARE, PREFIX_REF] + list(PEERS)

    def key(r):
        d, m = r["dataset"], r["method"]
        e = r["eps"]
        return (names.index(d) if d in names else len(names), d, meth.index(m) if m in meth else len(meth), m,
                r.get("config", ""), -1.0 if e == "-" else (math.inf if e == "inf" else float(e)), r["seed"])
    return sorted(records, key=key)


def load_results(path: str) -> dict:
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def dump_results(path: str, info: dict, records: List[dict], summary: dict) -> None:
    tmp = path[:-5] + ".tmp.json" if path.endswith(".json") else path + ".tmp"  # git-ignored like the JSON
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(dict(run=info, summary=rounded(summary), records=rounded(sort_records(records))), fh,
                  separators=(",", ":"), default=json_default)
    os.replace(tmp, path)


def merge(old: List[dict], new_keys, resume: bool) -> List[dict]:
    """Records of an earlier run to keep: every one not re-run now (with ``resume``, the finished ones
    are not re-run)."""
    kept = [r for r in old if record_key(r) not in new_keys or (resume and r["status"] == "ok")]
    log(f"merge: kept {len(kept)} of {len(old)} earlier records")
    return kept


def comparable(records: List[dict]) -> List[dict]:
    """Records without their clocks: what a serial and a parallel run must agree on."""
    return [{k: v for k, v in r.items() if k not in TIMING_FIELDS} for r in sort_records(records)]
