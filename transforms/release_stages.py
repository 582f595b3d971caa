"""The end of the clustering stages: :class:`ReleaseCoreset` (one key: the per-tick global combine of
already-reduced coresets — B of the closed epochs' coresets and the open rings' levels, the window of
runs) and :class:`ClusterCoreset` (stateless, keyed by tick: each released coreset to k centers and
window centers, Release.to_dict). See ``transforms/cluster.py`` and ``docs/beam-graph.md``."""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Optional, Tuple

import numpy as np

import apache_beam as beam
from apache_beam.coders import BytesCoder, PickleCoder
from apache_beam.metrics import Metrics
from apache_beam.transforms import userstate
from apache_beam.transforms.window import TimestampedValue

from dpstream import release_step
from dpstream.release import Release
from dpstream.release_log import RowTable, same_coreset
from dpstream.run_window import RunWindow, window_centers
from dpstream.semicoresets import WeightedSet
from transforms.parse import NAMESPACE
from transforms.release_json import ReleaseEncoder

from transforms.messages import RingRecords, RunPlans
from transforms.stages import IntKeyed, RELEASE_KEY, ClusterJob, StageFn, load_state, measured, open_msg, store_state


# --------------------------------------------------------------------------- ReleaseCoreset

def _levels_set(levels, dim):
    return WeightedSet.concat([lv for lv in levels if lv is not None], dim)


class ReleaseRecord(NamedTuple):
    """What ReleaseCoreset emits per tick (DP outputs and public numbers only)."""
    run: int
    tick: int
    global_tick: int
    epoch: int
    points: np.ndarray
    weights: np.ndarray
    count: float
    n_candidates: int
    version: Tuple[int, int]          # (epoch, tick) of the refit whose keys the coreset and centers use
    window: Optional[Tuple[np.ndarray, np.ndarray]]  # B's sample of the window, None: the run itself
    window_first_run: int
    same_as: Optional[int] = None     # release log: the tick of this run whose release holds this coreset
    ids: Optional[Tuple[list, dict]] = None  # release log: (coreset_ids, coreset_rows) of a new coreset
    fit: Optional[Tuple[np.ndarray, np.ndarray]] = None  # what the centers are fitted to (None: the coreset)


class RunSample(NamedTuple):
    """B's sample of a run's coreset at its last change, the (epoch, tick) whose keys it used, and the
    window's sample (None: the run alone)."""
    points: np.ndarray
    weights: np.ndarray
    version: Tuple[int, int]
    window: Optional[Tuple[np.ndarray, np.ndarray]]
    fit: Optional[Tuple[np.ndarray, np.ndarray]] = None  # what the centers are fitted to (None: the coreset)


@dataclass
class RunState:
    """ReleaseCoreset's state of the open run: its epoch, the open rings' levels by ring, the closed
    epochs' coresets and the last sample (reused while no ring changes)."""
    run: int
    epoch: int = 0
    levels: dict = field(default_factory=dict)
    closed: list = field(default_factory=list)
    last: Optional[RunSample] = None
    anchor: Optional[int] = None  # release log: the tick whose line holds the current coreset


@dataclass
class ReleaseState:
    """ReleaseCoreset's state (one key): the last global tick released, the ticks planned and the ring
    records counted per tick not yet released, the open run, and the window of closed runs (the
    last W runs' final coresets or their all-time merge; created at the first tick)."""
    done: int = 0
    planned: set = field(default_factory=set)
    have: dict = field(default_factory=dict)
    run: Optional[RunState] = None
    window: Optional[RunWindow] = None


class _RowTables:
    """The release log's table of the open run (:class:`dpstream.release_log.RowTable`), in a state cell
    of its own: read only when a tick makes a new coreset, written only when it changed (it holds every
    point the run released, so keeping it in the main state would pickle it on every element)."""

    def __init__(self, cell):
        self.cell, self.table, self.dirty = cell, None, False

    def get(self, run: int) -> RowTable:
        if self.table is None:
            self.table = load_state(self.cell)
        if self.table is None or self.table.run != run:
            self.table = RowTable(run)
        self.dirty = True
        return self.table

    def store(self) -> None:
        if self.dirty:
            store_state(self.cell, self.table)


class _ReleaseFn(StageFn):
    STAGE = "ReleaseCoreset"
    STATE = userstate.ReadModifyWriteStateSpec("dpstream_release_state", BytesCoder())
    INBOX = userstate.BagStateSpec("dpstream_release_inbox", PickleCoder())
    ROWS = userstate.ReadModifyWriteStateSpec("dpstream_release_rows", BytesCoder())

    @measured
    def process(self, element, state=beam.DoFn.StateParam(STATE), inbox=beam.DoFn.StateParam(INBOX),
                rows=beam.DoFn.StateParam(ROWS)):
        _, item = element
        item = open_msg(item)
        job, cfg = self.job, self.job.cfg
        st = load_state(state) or ReleaseState()
        if isinstance(item, RunPlans):
            st.planned.update(job.glob(item.run, p.t) for p in item.plans)
        else:  # RingRecords
            for rt in item.ticks:
                g = job.glob(item.run, rt.tick)
                st.have[g] = st.have.get(g, 0) + 1
        nxt = st.done + 1
        if nxt not in st.planned or st.have.get(nxt, 0) < job.n_rings:  # data gating: wait
            inbox.add(item)
            store_state(state, st)
            self._stats.note(RELEASE_KEY)
            return
        plans, recs = {}, {}  # what arrived before (a bag: one small write per element), read once
        for it in list(inbox.read()) + [item]:
            if isinstance(it, RunPlans):
                for p in it.plans:
                    plans[job.glob(it.run, p.t)] = p
            else:
                for rt in it.ticks:
                    recs.setdefault(job.glob(it.run, rt.tick), {})[it.ring] = (it.run, it.epoch, rt)
        inbox.clear()
        out, tables = [], _RowTables(rows)
        while True:
            g = st.done + 1
            p, got = plans.get(g), recs.get(g)
            if p is None or got is None or len(got) < job.n_rings:
                break
            del plans[g], recs[g]
            st.planned.discard(g)
            st.have.pop(g, None)
            out.append(self._tick(st, g, p, {i: v[2] for i, v in got.items()}, tables))
            st.done = g
        left = {}
        for g, got in recs.items():  # later ticks wait in the inbox again
            for i, (r, e, rt) in got.items():
                left.setdefault((r, e, i), []).append(rt)
        for (r, e, i), rr in sorted(left.items()):
            inbox.add(RingRecords(r, e, i, rr))
        by_run = {}
        for g in sorted(plans):
            by_run.setdefault(job.split(g)[0], []).append(plans[g])
        for r, ps in sorted(by_run.items()):
            inbox.add(RunPlans(r, ps))
        store_state(state, st)
        tables.store()
        for rec in out:
            yield rec
        floats = 0
        if st.run is not None:
            d = cfg.dim + 1
            floats = sum(len(c) * d for c in st.run.closed) + sum(
                len(lv) * d for lvs in st.run.levels.values() for lv in lvs if lv is not None)
            last = st.run.last
            if last is not None:  # the release coreset re-emitted while no ring changes, and its own fit sample
                floats += last.points.size + last.weights.size
                if last.fit is not None:
                    floats += last.fit[0].size + last.fit[1].size
        if tables.table is not None:
            floats += tables.table.state_floats()
        self._stats.note(RELEASE_KEY, floats=floats)

    def _tick(self, st, g, p, got, tables: _RowTables) -> ReleaseRecord:
        job, cfg = self.job, self.job.cfg
        r, t = job.split(g)
        ctx = self.run(r)
        run = st.run
        if run is None or run.run != r:
            run = st.run = RunState(r)
        I = job.n_rings
        changed_any = False
        for i in range(I):
            rt = got[i]
            if rt.changed:
                changed_any = True
                lv = run.levels.setdefault(i, [])
                lv.extend([None] * (rt.n_levels - len(lv)))
                for j, S in rt.delta:
                    lv[j] = S
        e = run.epoch
        if p.adopt:  # the epoch's coreset (B of its rings' levels), then the next epoch
            S = WeightedSet.concat([_levels_set(run.levels.get(i, ()), cfg.dim) for i in range(I)], cfg.dim)
            run.closed.append(release_step.epoch_coreset(cfg, ctx.noise, S, e, t))
            run.levels = {}
            run.epoch = e = e + 1
        if st.window is None:
            st.window = RunWindow(cfg)
        first = st.window.sets(r)[1]
        before = run.last
        if changed_any or run.last is None:
            open_ = WeightedSet.concat([_levels_set(run.levels.get(i, ()), cfg.dim) for i in range(I)], cfg.dim)
            rc = release_step.release_coreset(cfg, ctx.noise, run.closed, open_, e, t)
            pts, w = rc.points, rc.weights
            win, _ = st.window.sample(ctx.noise, r, pts, w, t)
            run.last = RunSample(pts, w, (e, t), win, None if rc.own_fit else (rc.fit_points, rc.fit_weights))
        pts, w, version, win, fit = run.last
        same_as = ids = None
        if job.release_log:  # the rules of dpstream.release_log.ReleaseLog: the previous tick's, bit for bit,
            if before is not None and same_coreset(before[0], before[1], pts, w):  # else points by id
                same_as = run.anchor
            else:
                run.anchor = t
                ids = tables.get(r).encode(pts)
        count = release_step.released_count(p.count, w)
        rec = ReleaseRecord(r, t, g, e, pts, w, count, p.n_candidates, version, win, first, same_as=same_as,
                            ids=ids, fit=fit)
        if p.final:  # the run ends: its final coreset joins the window, its state goes
            st.window.close_run(ctx.noise, r, pts, w)
            st.run = None
        return rec


class ReleaseCoreset(beam.PTransform):
    """(plans, ring records of every epoch copy) → one :class:`ReleaseRecord` per global tick, in order."""

    def __init__(self, job: ClusterJob, label: Optional[str] = None):
        super().__init__(label)
        self.job = job

    def expand(self, pcolls):
        return (pcolls | "Flatten" >> beam.Flatten().with_output_types(IntKeyed)
                | "Release" >> beam.ParDo(_ReleaseFn(self.job)).with_input_types(IntKeyed))


# --------------------------------------------------------------------------- ClusterCoreset

class _ClusterFn(StageFn):
    STAGE = "ClusterCoreset"

    def setup(self):
        super().setup()
        self._memo = OrderedDict()
        self._json = ReleaseEncoder()
        self._c_released = Metrics.counter(NAMESPACE, "ticks_released")

    def _fit(self, key, fn):
        v = self._memo.get(key)
        if v is None:
            v = self._memo[key] = fn()
            while len(self._memo) > 4096:  # k·d floats each
                self._memo.popitem(last=False)
        return v

    @measured
    def process(self, rec: ReleaseRecord):
        cfg, ctx = self.job.cfg, self.run(rec.run)
        ev, tv = rec.version
        # a pure function of (coreset, keys): a memo only skips refitting an unchanged coreset
        fp, fw = rec.fit if rec.fit is not None else (rec.points, rec.weights)
        rc = release_step.ReleaseCoreset(rec.points, rec.weights, fp, fw)
        centers = self._fit(("c", rec.run, ev, tv), lambda: release_step.fit_centers(cfg, ctx.noise, rc, ev, tv))
        wc = centers if rec.window is None else self._fit(
            ("w", rec.run, tv), lambda: window_centers(cfg, ctx.noise, rec.window, centers, tv))
        rel = Release(tick=rec.tick, epoch=rec.epoch, centers=centers, coreset_points=rec.points,
                      coreset_weights=rec.weights, count_estimate=rec.count, n_candidate_centers=rec.n_candidates,
                      plan=ctx.plan, run=rec.run, global_tick=rec.global_tick, window_centers=wc,
                      window_first_run=rec.window_first_run)
        self._c_released.inc()
        # the JSON line is encoded here, in parallel across ticks, with repeated coresets encoded once
        yield TimestampedValue(self._json.release_dict(rel, rec.same_as, rec.ids),
                               self.job.schedule.close_time(rec.global_tick))
        self._stats.note(("tick", rec.global_tick))


class _SpreadTicksFn(beam.DoFn):
    """A pass-through keyed by global tick, so a runner spreads the ticks' clustering over its
    workers (it breaks fusion with the single-key ReleaseCoreset as a Reshuffle would). Not a
    Reshuffle: its GroupByKey drops records that arrive behind the watermark, and the
    BundleBasedDirectRunner (streaming, TestStream), which keeps no watermark holds for pending
    timers, delivers the ticks released after the input's end exactly so (measured: a TestStream
    run lost its last 3 of 8 releases). A stateful DoFn drops nothing; the state is declared, never
    written (a stateful ParDo is what makes the runner shuffle by key)."""
    KEYED = userstate.ReadModifyWriteStateSpec("dpstream_spread_keyed", BytesCoder())

    def process(self, element, keyed=beam.DoFn.StateParam(KEYED)):
        yield element[1]


class ClusterCoreset(beam.PTransform):
    """Released coresets → release dicts (:meth:`dpstream.release.Release.to_dict`), timestamped at
    their tick's public close time. Stateless; first a pass-through keyed by global tick
    (:class:`_SpreadTicksFn`), so a runner spreads the ticks."""

    def __init__(self, job: ClusterJob, spread: bool = True, label: Optional[str] = None):
        super().__init__(label)
        self.job, self.spread = job, spread

    def expand(self, pcoll):
        if self.spread:
            pcoll = (pcoll | "KeyByTick" >> beam.Map(lambda rec: (int(rec.global_tick), rec))
                     .with_output_types(Tuple[int, Any])
                     | "SpreadTicks" >> beam.ParDo(_SpreadTicksFn()).with_input_types(Tuple[int, Any]))
        return pcoll | "Cluster" >> beam.ParDo(_ClusterFn(self.job))
