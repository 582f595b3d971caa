"""DPStreamCluster (Alg. 1) as keyed Beam stages, each a labelled composite transform over the
core's own state machines (``dpstream.epochs``, ``dpstream.merge_reduce``, ``dpstream.blocks``,
``dpstream.sparse_vector``); no stage imports ``dpstream.engine``. ``docs/beam-graph.md`` draws the
graph; for the same seed and rows the releases equal the library's (``Engine`` / ``RunSequence``).

Stages and keys (r = run, s = point shard, e = epoch index, i = ring):

* :class:`ShardTicks` — key s, the job's only tick timer (batch: one firing at the last tick;
  looping: one per tick, guarded). Freezes each tick's points, clips them to the public ball and
  emits, for *every* tick (⊥ heartbeats included), the shard's point count to ``EpochPlan`` and
  its points to ``RouteByEpoch``.
* :class:`EpochPlan` — key r: the run's stream counter (the DP count estimate) and the epoch
  schedule (:class:`dpstream.epochs.EpochPlanner`): every tick's epoch, flush and adoption flags.
  A function of the DP count alone (with the bicriteria: of the CenterRegistry's updates), so it
  is loop-free. Broadcast to every shard's router and to ``ReleaseCoreset``.
* :class:`RouteByEpoch` — key (r, s): sends each tick's points, with its plan, to the copy of the
  per-epoch stages of the tick's epoch (one tagged output per epoch index).
* per epoch index e < E_max = ⌊log2 T⌋ + 2 (:func:`dpstream.rules.max_epochs`), a copy of
  :class:`AssignRings` (key (r, s): ring and nearest center of each point from epoch e's centers,
  one *partial leaf sketch* per (tick, ring) — sketches add up, so no point crosses the shuffle
  with the tree semicoreset), :class:`RingMergeReduce` (key (r, i): the ring's sparse vector, open
  block and merge-reduce levels; one record per tick to ``ReleaseCoreset``) and
  :class:`EpochClose` (key r: at the epoch's adoption tick, the epoch's coreset and the next
  epoch's ring centers = [F] + the centers released at that tick, broadcast to the shards of copy
  e + 1; the closed epochs' coresets ride with shard 0's copy to ring 0 and so to
  ``EpochClose[e+1]``). This unrolls the loop "release → ring centers → rings → release" over
  the public number of epochs.
* :class:`ReleaseCoreset` — one key for the whole job: the per-tick combine of already-reduced
  coresets (B of the closed epochs' coresets and the open rings' levels; the window of runs).
* :class:`ClusterCoreset` — stateless, after a pass-through keyed by global tick (a Reshuffle
  would drop the BundleBasedDirectRunner's late releases): each released coreset → k centers and
  window centers (a fresh k-means++ fit: parallel across ticks) → ``Release.to_dict()``.

The tick contract (DESIGN §4): every stage after ``ShardTicks`` gates on *data*, never on the
watermark: it processes tick t of a key once every upstream record it needs for t is in its state
(stored by tick, never "the latest"), and every upstream stage emits a record for every tick, empty
ticks included. State values are read, rebuilt and written once per element; a key's state is
cleared when its epoch or run ends. Only ``ShardTicks`` (and the bicriteria levels) have timers,
each with a pipeline-unique name and a guard against obsolete firings. The seed is read from a
file in ``setup`` and never pickled: noise sources are re-attached after every state read.

Operator metrics (namespace ``dpstream``): ``points_processed``, ``clipped``, ``after_close``,
``obsolete_timer_firings``, ``ticks_released``. Exact counts: telemetry only.
"""
from __future__ import annotations

import logging
from typing import NamedTuple, Optional

import numpy as np

import apache_beam as beam
from apache_beam.coders import BytesCoder, PickleCoder
from apache_beam.metrics import Metrics
from apache_beam.transforms import userstate
from apache_beam.transforms.timeutil import TimeDomain
from apache_beam.transforms.window import GlobalWindows

from dpstream import epochs
from dpstream.params import EngineConfig
from dpstream.rings import clip_to_ball
from transforms.parse import NAMESPACE
from transforms.tick_timer import MODES, TickSchedule, take_ticks_upto
from transforms.ticks import TickClock, merge_partials

from transforms.stages import (IntKeyed, PairKeyed, RELEASE_KEY, Msg, _as_partial, partial_bytes, partial_from_bytes,
    row_blocks, _Job, _StageFn, _load, _measured, _open, _store)
from transforms.stages import load_seed  # noqa: F401  (re-exported: the job, tests and benchmarks import it from here)
from transforms.epoch_stages import EpochStages
from transforms.release_stages import ClusterCoreset, ReleaseCoreset

_log = logging.getLogger("dpstream")

# --------------------------------------------------------------------------- ShardTicks

class _ShardTicksFn(_StageFn):
    STAGE = "ShardTicks"
    META = userstate.ReadModifyWriteStateSpec("dpstream_shard_meta", PickleCoder())
    BUFFER = userstate.BagStateSpec("dpstream_shard_buffer", PickleCoder())
    TICK = userstate.TimerSpec("dpstream_shard_tick", TimeDomain.WATERMARK)

    def setup(self):
        super().setup()
        c = lambda name: Metrics.counter(NAMESPACE, name)  # noqa: E731
        self._c_points, self._c_clipped = c("points_processed"), c("clipped")
        self._c_closed, self._c_obsolete = c("after_close"), c("obsolete_timer_firings")

    @_measured
    def process(self, element, key=beam.DoFn.KeyParam, meta=beam.DoFn.StateParam(META),
                buf=beam.DoFn.StateParam(BUFFER), timer=beam.DoFn.TimerParam(TICK)):
        _, item = element
        item = _open(item)
        self._stats.note(key)
        sched = self.job.schedule
        m = meta.read()
        if m is None:  # the first element (the start marker or data): arm the first tick
            m = {"done": 0, "fired": 0, "armed": sched.first_armed()}
            meta.write(m)
            timer.set(sched.close_time(m["armed"]))
        if item[0] != "tick":
            return
        g, part = item[1], item[2]  # part: a Msg, kept in the bag as the bytes it came as
        if g <= m["fired"]:  # its tick is closed: frozen, never reopened
            n = int(partial_from_bytes(_open(part)).points.shape[0])
            self._c_closed.inc(n)
            _log.warning("dpstream: %d point(s) of tick %d arrived after the tick closed; dropped "
                         "(raise --allowed_lateness_seconds if this recurs)", n, g)
            return
        buf.add((g, part))

    @userstate.on_timer(TICK)
    @_measured
    def on_tick(self, ts=beam.DoFn.TimestampParam, key=beam.DoFn.KeyParam, meta=beam.DoFn.StateParam(META),
                buf=beam.DoFn.StateParam(BUFFER), timer=beam.DoFn.TimerParam(TICK)):
        sched = self.job.schedule
        m = meta.read()
        if m is None or m["armed"] is None:
            self._c_obsolete.inc()
            return
        want = sched.close_time(m["armed"])
        if ts != want:  # an obsolete firing of a timer that was re-set: restore it, do nothing
            self._c_obsolete.inc()
            timer.set(want)
            return
        fired = m["armed"]
        nxt = sched.next_armed(fired)
        meta.write({"done": fired, "fired": fired, "armed": nxt})
        if nxt is not None:
            timer.set(sched.close_time(nxt))
        pending = take_ticks_upto(buf, fired)
        job = self.job
        cfg = job.cfg
        ticks = list(range(m["done"] + 1, fired + 1))
        x, sizes = merge_ticks([[partial_from_bytes(_open(p)) for p in pending.pop(g, ())] for g in ticks], cfg.dim)
        x, nclip = clip_to_ball(x, cfg.center_vec, cfg.radius)  # row by row: one call for all the ticks
        if nclip:
            self._c_clipped.inc(nclip)
        counts, first = {}, {}
        n_all = int(x.shape[0])
        for i, (g, n) in enumerate(zip(ticks, sizes)):
            r, t = job.split(g)
            counts.setdefault(r, []).append((t, int(n)))
            first.setdefault(r, i)
        self._c_points.inc(n_all)
        ends = np.concatenate([[0], np.cumsum(sizes)])
        for r in sorted(counts):
            yield r, Msg(("count", key, counts[r]))
            # a run's ticks are consecutive: its points are one slice, shipped as one array (not one per tick)
            a = first[r]
            pts = x[ends[a]:ends[a + len(counts[r])]]
            yield beam.pvalue.TaggedOutput("points", ((r, key), Msg(("points", counts[r], pts))))
        self._stats.note(key, points=n_all)


def merge_ticks(parts_by_tick, dim: int):
    """:func:`~transforms.ticks.merge_partials` of every tick's partial batches (a list per tick, in
    tick order), as one array: ``(points of all the ticks in tick order, points per tick)``. Equal to
    merging tick by tick; one sort for the ticks whose slots are all known and distinct (the
    position clock: all of them), ``merge_partials`` for the others."""
    sizes = np.array([sum(p.points.shape[0] for p in parts) for parts in parts_by_tick], dtype=np.int64)
    flat = [p for parts in parts_by_tick for p in parts]
    if not flat:
        return np.zeros((0, dim)), sizes
    pts = np.concatenate([p.points for p in flat]).astype(np.float64, copy=False).reshape(-1, dim)
    slots = np.concatenate([p.slots for p in flat])
    tick = np.repeat(np.arange(len(parts_by_tick)), sizes)
    order = np.lexsort((slots, tick))  # within a tick: by slot, the order merge_partials gives distinct slots
    s, g = slots[order], tick[order]
    bad = np.zeros(len(parts_by_tick), dtype=bool)
    bad[g[s < 0]] = True
    same = g[1:] == g[:-1]
    bad[g[1:][same & ~(s[1:] > s[:-1])]] = True
    bad &= sizes > 1  # merge_partials leaves one point as it is, slot or not
    pts = pts[order]
    if bad.any():  # missing or repeated slots: merge_partials' full key, tick by tick
        blocks = row_blocks(pts, sizes)
        for i in np.flatnonzero(bad):
            blocks[i] = merge_partials(parts_by_tick[i]).points
        pts = np.concatenate(blocks)
    return np.ascontiguousarray(pts), sizes


class ShardTicks(beam.PTransform):
    """``((shard, global tick), points | _Partial)`` → ``(counts, points)``: per run and tick, every
    shard's point count (to :class:`EpochPlan`) and its clipped points (to :class:`RouteByEpoch`),
    empty ticks included."""

    def __init__(self, job: _Job, label: Optional[str] = None):
        super().__init__(label)
        self.job = job

    def expand(self, ticks):
        dim = self.job.cfg.dim
        data = (ticks | "KeyByShard" >> beam.Map(lambda kv: (int(kv[0][0]), ("tick", int(kv[0][1]),
                                                                          Msg(partial_bytes(_as_partial(kv[1], dim))))))
                .with_output_types(IntKeyed)
                | "DataWindow" >> beam.WindowInto(GlobalWindows()))
        start = (ticks.pipeline | "StartClock" >> beam.Create([(s, ("start",)) for s in range(self.job.n_shards)])
                 .with_output_types(IntKeyed))
        out = ((data, start) | "WithStart" >> beam.Flatten()
               | "Shards" >> beam.ParDo(_ShardTicksFn(self.job)).with_input_types(IntKeyed)
               .with_outputs("points", main="counts"))
        return out.counts, out.points


# --------------------------------------------------------------------------- EpochPlan

class Small(NamedTuple):
    """The part of a tick's plan the rings need (and F at an adoption tick)."""
    first: int
    flush: bool
    adopt: bool
    final: bool
    candidates: Optional[np.ndarray]


def _small(p) -> Small:
    return Small(p.first, p.flush, p.adopt, p.final, p.candidates)


class _EpochPlanFn(_StageFn):
    STAGE = "EpochPlan"
    STATE = userstate.ReadModifyWriteStateSpec("dpstream_plan_state", BytesCoder())

    @_measured
    def process(self, element, state=beam.DoFn.StateParam(STATE)):
        r, item = element
        item = _open(item)
        job, cfg = self.job, self.job.cfg
        st = _load(state) or {"planner": None, "pending": {}, "done": 0}
        if item[0] == "count":
            for t, n in item[2]:
                if t > st["done"]:
                    st["pending"].setdefault(t, {})[item[1]] = n
            need = job.n_shards
        else:  # ("bic", [(t, new centers, count)]): the CenterRegistry's updates
            for t, new, count in item[1]:
                if t > st["done"]:
                    st["pending"][t] = (new, count)
            need = None
        ctx = self.run(r)
        planner = st["planner"]
        if planner is None:
            planner = epochs.EpochPlanner(cfg, ctx.plan, ctx.noise, ctx.block_size)
        elif planner.counter is not None:
            planner.counter.noise = ctx.noise
        plans = []
        while True:
            t = st["done"] + 1
            got = st["pending"].get(t)
            if got is None or (need is not None and len(got) < need):
                break
            del st["pending"][t]
            plans.append(planner.step(sum(got.values())) if need is not None
                         else planner.step(bicriteria_update=got))
            st["done"] = t
        if planner.counter is not None:
            planner.counter.noise = None  # never pickled with the state (re-attached above)
        st["planner"] = planner
        if st["done"] >= job.T:
            state.clear()
        else:
            _store(state, st)
        if plans:
            msg = Msg(("plan", plans))
            for s in range(job.n_shards):
                yield (r, s), msg
            yield beam.pvalue.TaggedOutput("release", (RELEASE_KEY, Msg(("plan", r, plans))))
        self._stats.note(r, floats=planner.state_floats() + len(st["pending"]) * job.n_shards)


class EpochPlan(beam.PTransform):
    """Per-tick counts of every shard (or the CenterRegistry's updates, ``from_registry=True``) →
    ``(plans by shard, plans for ReleaseCoreset)``: one :class:`dpstream.epochs.TickPlan` per tick."""

    def __init__(self, job: _Job, from_registry: bool = False, label: Optional[str] = None):
        super().__init__(label)
        self.job, self.from_registry = job, from_registry

    def expand(self, pcoll):
        out = ((pcoll,) | "Typed" >> beam.Flatten().with_output_types(IntKeyed)
               | "Plan" >> beam.ParDo(_EpochPlanFn(self.job)).with_input_types(IntKeyed)
               .with_outputs("release", main="shards"))
        return out.shards, out.release


# --------------------------------------------------------------------------- RouteByEpoch

class _RouteFn(_StageFn):
    STAGE = "RouteByEpoch"
    STATE = userstate.ReadModifyWriteStateSpec("dpstream_route_state", BytesCoder())

    @_measured
    def process(self, element, state=beam.DoFn.StateParam(STATE)):
        key, item = element
        item = _open(item)
        st = _load(state) or {"points": {}, "plans": {}, "routed": 0}
        if isinstance(st["points"], tuple):  # stored as one array (below)
            ts, sizes, x = st["points"]
            st["points"] = dict(zip(ts, row_blocks(x, sizes)))
        if item[0] == "points":
            _, counts, x = item
            ends = np.cumsum([n for _, n in counts])
            for (t, n), end in zip(counts, ends):
                st["points"][t] = x[end - n:end]
        else:
            for p in item[1]:
                st["plans"][p.t] = p
        ready = sorted(set(st["points"]) & set(st["plans"]))
        out = {}
        for t in ready:
            p = st["plans"].pop(t)
            out.setdefault(p.epoch, []).append((t, st["points"].pop(t), _small(p)))
        st["routed"] += len(ready)
        held = sum(len(x) for x in st["points"].values())
        if st["routed"] >= self.job.T:
            state.clear()
        else:
            if st["points"]:  # stored as one array, not one pickled array per tick
                ts = sorted(st["points"])
                st["points"] = (ts, [len(st["points"][t]) for t in ts], np.concatenate([st["points"][t] for t in ts]))
            _store(state, st)
        for e in sorted(out):
            ticks = out[e]  # each epoch copy gets its ticks' points as one array, with (t, n, plan) per tick
            x = np.concatenate([x for _, x, _ in ticks]) if ticks else np.zeros((0, self.job.cfg.dim))
            yield beam.pvalue.TaggedOutput(f"e{e}", (key, Msg(("tick", [(t, len(x), p) for t, x, p in ticks], x))))
        self._stats.note(key, points=held)


class RouteByEpoch(beam.PTransform):
    """(shard points, shard plans) → one PCollection per epoch index: ``((r, s), ("tick", [(t, n, plan)], x))``,
    x the n points of each tick, tick after tick, in one array."""

    def __init__(self, job: _Job, label: Optional[str] = None):
        super().__init__(label)
        self.job = job

    def expand(self, pcolls):
        tags = [f"e{e}" for e in range(self.job.n_epochs)]
        out = (pcolls | "Flatten" >> beam.Flatten().with_output_types(PairKeyed)
               | "Route" >> beam.ParDo(_RouteFn(self.job)).with_input_types(PairKeyed)
               .with_outputs(*tags))
        return tuple(out[tag] for tag in tags)


# --------------------------------------------------------------------------- the whole clustering part

class ClusterTicks(beam.PTransform):
    """``((shard, global tick), points | _Partial)`` → one release dict per tick (every tick of every
    run), through the stages of the module docstring.

    ``ClusterTicks(cfg, clock, seed_path, mode="batch"|"streaming", close_delay_seconds=0.0,
    n_shards=clock.n_shards, release_log=False)``. ``release_log=True``: a release that repeats the
    previous tick's coreset is emitted as its line of a release log (:mod:`dpstream.release_log`),
    for a file sink; False: every release whole (a Pub/Sub topic). With the bicriteria
    (``cfg.bicriteria``) apply it to ``(ticks, registry updates)``, the second the output of
    :class:`~transforms.bicriteria.CenterRegistry`."""

    def __init__(self, cfg: EngineConfig, clock: TickClock, seed_path: str, mode: str = "batch",
                 close_delay_seconds: float = 0.0, n_shards: Optional[int] = None, release_log: bool = False,
                 label: Optional[str] = None):
        super().__init__(label)
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        if not (close_delay_seconds >= 0 and np.isfinite(close_delay_seconds)):
            raise ValueError(f"close_delay_seconds must be finite and >= 0, got {close_delay_seconds!r}")
        runs = cfg.runs
        total = None if runs is None else runs * cfg.horizon_ticks
        if total is not None and clock.horizon_ticks != total:
            raise ValueError(f"the clock's horizon ({clock.horizon_ticks}) must be runs × T = {total} ticks")
        self.cfg = cfg
        schedule = TickSchedule(clock, total, mode, float(close_delay_seconds))
        self.job = _Job(cfg, seed_path, clock.n_shards if n_shards is None else n_shards, schedule)
        self.job.release_log = bool(release_log)

    @property
    def schedule(self) -> TickSchedule:
        return self.job.schedule

    def expand(self, pcolls):
        ticks, updates = pcolls if self.cfg.bicriteria else (pcolls, None)
        return apply_stages(self.job, ticks, updates)


def apply_stages(job: _Job, ticks, updates=None):
    """Wire the clustering stages onto ``ticks`` (and the CenterRegistry's ``updates``) where they
    are applied (the job applies them at its top level); returns the release dicts."""
    counts, points = ticks | "ShardTicks" >> ShardTicks(job)
    if updates is not None:
        counts = updates | "KeyUpdates" >> beam.FlatMap(_registry_by_run, job).with_output_types(IntKeyed)
    plans, release_plans = counts | "EpochPlan" >> EpochPlan(job, from_registry=updates is not None)
    routed = (points, plans) | "RouteByEpoch" >> RouteByEpoch(job)
    ring_out = [release_plans]
    centers = None
    for e in range(job.n_epochs):
        ins = {"ticks": routed[e]}
        if centers is not None:
            ins["centers"] = centers
        rel, centers = ins | f"Epoch{e}" >> EpochStages(job, e)
        ring_out.append(rel)
    records = tuple(ring_out) | "ReleaseCoreset" >> ReleaseCoreset(job)
    return records | "ClusterCoreset" >> ClusterCoreset(job)


def _registry_by_run(ups, job: _Job):
    """The CenterRegistry's ``[(global tick, new centers, count)]`` → per run ``(r, ("bic", [(t, …)]))``."""
    by = {}
    for g, new, count in ups:
        r, t = job.split(g)
        by.setdefault(r, []).append((t, new, count))
    for r in sorted(by):
        yield r, Msg(("bic", by[r]))
