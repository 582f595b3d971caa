"""The end of the clustering stages: :class:`ReleaseCoreset` (one key: the per-tick global combine of
already-reduced coresets — B of the closed epochs' coresets and the open rings' levels, the window of
runs) and :class:`ClusterCoreset` (stateless, keyed by tick: each released coreset to k centers and
window centers, Release.to_dict). See ``transforms/cluster.py`` and ``docs/beam-graph.md``."""
from __future__ import annotations

from collections import OrderedDict
from typing import Any, NamedTuple, Optional, Tuple

import numpy as np

import apache_beam as beam
from apache_beam.coders import BytesCoder, PickleCoder
from apache_beam.metrics import Metrics
from apache_beam.transforms import userstate
from apache_beam.transforms.window import TimestampedValue

from dpstream import epochs
from dpstream.merge_reduce import reduce as _reduce
from dpstream.release import Release
from dpstream.semicoresets import WeightedSet
from transforms.parse import NAMESPACE
from transforms.release_json import ReleaseEncoder

from transforms.stages import IntKeyed, RELEASE_KEY, _Job, _StageFn, _load, _measured, _open, _store


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
    fit: Optional[Tuple[np.ndarray, np.ndarray]] = None  # what the centers are fitted to (None: the coreset)


class _ReleaseFn(_StageFn):
    STAGE = "ReleaseCoreset"
    STATE = userstate.ReadModifyWriteStateSpec("dpstream_release_state", BytesCoder())
    INBOX = userstate.BagStateSpec("dpstream_release_inbox", PickleCoder())

    @_measured
    def process(self, element, state=beam.DoFn.StateParam(STATE), inbox=beam.DoFn.StateParam(INBOX)):
        _, item = element
        item = _open(item)
        job, cfg = self.job, self.job.cfg
        st = _load(state) or {"g": 0, "planned": set(), "have": {}, "run": None, "closed": [], "all_time": None}
        if item[0] == "plan":
            st["planned"].update(job.glob(item[1], p.t) for p in item[2])
        else:
            for t, *_ in item[4]:
                g = job.glob(item[1], t)
                st["have"][g] = st["have"].get(g, 0) + 1
        nxt = st["g"] + 1
        if nxt not in st["planned"] or st["have"].get(nxt, 0) < job.n_rings:  # data gating: wait
            inbox.add(item)
            _store(state, st)
            self._stats.note(RELEASE_KEY)
            return
        plans, recs = {}, {}  # what arrived before (a bag: one small write per element), read once
        for it in list(inbox.read()) + [item]:
            if it[0] == "plan":
                for p in it[2]:
                    plans[job.glob(it[1], p.t)] = p
            else:
                _, r, e, i, rr = it
                for t, changed, delta, L in rr:
                    recs.setdefault(job.glob(r, t), {})[i] = (r, e, changed, delta, L)
        inbox.clear()
        out = []
        while True:
            g = st["g"] + 1
            p, got = plans.get(g), recs.get(g)
            if p is None or got is None or len(got) < job.n_rings:
                break
            del plans[g], recs[g]
            st["planned"].discard(g)
            st["have"].pop(g, None)
            out.append(self._tick(st, g, p, {i: v[2:] for i, v in got.items()}))
            st["g"] = g
        left = {}
        for g, got in recs.items():  # later ticks wait in the inbox again
            for i, (r, e, changed, delta, L) in got.items():
                left.setdefault((r, e, i), []).append((job.split(g)[1], changed, delta, L))
        for (r, e, i), rr in sorted(left.items()):
            inbox.add(("ring", r, e, i, rr))
        by_run = {}
        for g in sorted(plans):
            by_run.setdefault(job.split(g)[0], []).append(plans[g])
        for r, ps in sorted(by_run.items()):
            inbox.add(("plan", r, ps))
        _store(state, st)
        for rec in out:
            yield rec
        floats = 0
        if st["run"] is not None:
            d = cfg.dim + 1
            floats = sum(len(c) * d for c in st["run"]["closed"]) + sum(
                len(lv) * d for lvs in st["run"]["levels"].values() for lv in lvs if lv is not None)
        self._stats.note(RELEASE_KEY, floats=floats)

    def _tick(self, st, g, p, got) -> ReleaseRecord:
        job, cfg = self.job, self.job.cfg
        r, t = job.split(g)
        ctx = self.run(r)
        run = st["run"]
        if run is None or run["r"] != r:
            run = st["run"] = {"r": r, "epoch": 0, "levels": {}, "closed": [], "last": None}
        I = job.n_rings
        changed_any = False
        for i in range(I):
            changed, delta, L = got[i]
            if changed:
                changed_any = True
                lv = run["levels"].setdefault(i, [])
                lv.extend([None] * (L - len(lv)))
                for j, S in delta:
                    lv[j] = S
        e = run["epoch"]
        if p.adopt:  # the epoch's coreset (B of its rings' levels), then the next epoch
            S = WeightedSet.concat([_levels_set(run["levels"].get(i, ()), cfg.dim) for i in range(I)], cfg.dim)
            run["closed"].append(_reduce(cfg, ctx.noise, S, ("B", e, "epoch", t), job.z))
            run["levels"] = {}
            run["epoch"] = e = e + 1
        window_sets, first = self._window_sets(st, r)
        if changed_any or run["last"] is None:
            open_ = WeightedSet.concat([_levels_set(run["levels"].get(i, ()), cfg.dim) for i in range(I)], cfg.dim)
            sets = run["closed"] + [open_]
            S = WeightedSet.concat(sets, cfg.dim)
            pts, w = epochs.release_sample(cfg, ctx.noise, S, e, t, job.z)
            fit = epochs.release_fit_sample(cfg, ctx.noise, sets, pts, w, e, t, job.z)
            win = epochs.window_sample(cfg, ctx.noise, window_sets, pts, w, t, job.z) if window_sets else None
            run["last"] = (pts, w, (e, t), win, None if fit[0] is pts else fit)
        pts, w, version, win, fit = run["last"]
        count = max(0.0, float(p.count)) if p.count is not None else float(w.sum())
        rec = ReleaseRecord(r, t, g, e, pts, w, count, p.n_candidates, version, win, first, fit)
        if p.final:  # the run ends: its final coreset joins the window, its state goes
            if cfg.window_runs == 0:
                st["all_time"] = epochs.all_time_merge(cfg, ctx.noise, st["all_time"], pts, w, r, job.z)
            else:
                st["closed"] = (st["closed"] + [(r, pts, w)])[-cfg.window_runs:]
            st["run"] = None
        return rec

    def _window_sets(self, st, r):
        if self.job.cfg.window_runs == 0:
            return ([] if st["all_time"] is None else [st["all_time"]]), 0
        return [(p, w) for _, p, w in st["closed"]], (st["closed"][0][0] if st["closed"] else r)


class ReleaseCoreset(beam.PTransform):
    """(plans, ring records of every epoch copy) → one :class:`ReleaseRecord` per global tick, in order."""

    def __init__(self, job: _Job, label: Optional[str] = None):
        super().__init__(label)
        self.job = job

    def expand(self, pcolls):
        return (pcolls | "Flatten" >> beam.Flatten().with_output_types(IntKeyed)
                | "Release" >> beam.ParDo(_ReleaseFn(self.job)).with_input_types(IntKeyed))


# --------------------------------------------------------------------------- ClusterCoreset

class _ClusterFn(_StageFn):
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

    @_measured
    def process(self, rec: ReleaseRecord):
        cfg, ctx = self.job.cfg, self.run(rec.run)
        ev, tv = rec.version
        # a pure function of (coreset, keys): a memo only skips refitting an unchanged coreset
        fp, fw = rec.fit if rec.fit is not None else (rec.points, rec.weights)
        centers = self._fit(("c", rec.run, ev, tv), lambda: epochs.release_centers(cfg, ctx.noise, fp, fw, ev, tv))
        wc = centers if rec.window is None else self._fit(
            ("w", rec.run, tv), lambda: epochs.window_centers(cfg, ctx.noise, rec.window[0], rec.window[1], tv))
        rel = Release(tick=rec.tick, epoch=rec.epoch, centers=centers, coreset_points=rec.points,
                      coreset_weights=rec.weights, count_estimate=rec.count, n_candidate_centers=rec.n_candidates,
                      plan=ctx.plan, run=rec.run, global_tick=rec.global_tick, window_centers=wc,
                      window_first_run=rec.window_first_run)
        self._c_released.inc()
        # the JSON line is encoded here, in parallel across ticks, with repeated coresets encoded once
        yield TimestampedValue(self._json.release_dict(rel), self.job.schedule.close_time(rec.global_tick))
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

    def __init__(self, job: _Job, spread: bool = True, label: Optional[str] = None):
        super().__init__(label)
        self.job, self.spread = job, spread

    def expand(self, pcoll):
        if self.spread:
            pcoll = (pcoll | "KeyByTick" >> beam.Map(lambda rec: (int(rec.global_tick), rec))
                     .with_output_types(Tuple[int, Any])
                     | "SpreadTicks" >> beam.ParDo(_SpreadTicksFn()).with_input_types(Tuple[int, Any]))
        return pcoll | "Cluster" >> beam.ParDo(_ClusterFn(self.job))
