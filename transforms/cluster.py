"""DPStreamCluster (Alg. 1) as keyed Beam stages, each a labelled composite transform over the
core's own state machines (``dpstream.epochs``, ``dpstream.merge_reduce``, ``dpstream.blocks``,
``dpstream.sparse_vector``); no stage imports ``dpstream.engine``. ``docs/beam-graph.md`` draws the
graph; for the same seed and rows the releases equal the library's (``Engine`` / ``RunSequence``).

Stages and keys (r = run, s = point shard, e = epoch index, i = ring):

* :class:`~transforms.shard_ticks.ShardTicks` — key s, the job's only tick timer (batch: one firing at the last tick;
  looping: one per tick, guarded). Freezes each tick's points and emits, for *every* tick (⊥
  heartbeats included), the shard's point count to ``EpochPlan`` and its points, as read (AssignRings
  clips them), to ``RouteByEpoch``.
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

The tick contract (docs/beam-graph.md): every stage after ``ShardTicks`` gates on *data*, never on the
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

from dataclasses import dataclass, field
from typing import Optional

import numpy as np

import apache_beam as beam
from apache_beam.coders import BytesCoder
from apache_beam.transforms import userstate

from dpstream import epochs
from dpstream.clock import TickClock
from dpstream.params import EngineConfig
from transforms.tick_timer import MODES, TickSchedule

from transforms.stages import (IntKeyed, PairKeyed, RELEASE_KEY, wire, row_blocks, ClusterJob, StageFn, load_state,
                               measured, open_msg, store_state)
from transforms.stages import load_seed  # noqa: F401  (re-exported: the job, tests and benchmarks import it from here)
from transforms.shard_ticks import ShardTicks
from transforms.epoch_stages import EpochStages
from transforms.messages import (RegistryUpdates, RingPlan, RoutedTicks, RunPlans, ShardCounts, ShardPlans,
                                 ShardPoints, TickPoints)
from transforms.release_stages import ClusterCoreset, ReleaseCoreset


# --------------------------------------------------------------------------- EpochPlan

@dataclass
class PlanState:
    """EpochPlan's state of a run: the planner, what arrived for ticks not yet planned
    (``{t: {shard: n}}``, or ``{t: (new centers, count)}`` from the CenterRegistry) and the last tick planned."""
    planner: Optional[epochs.EpochPlanner] = None
    pending: dict = field(default_factory=dict)
    done: int = 0


class _EpochPlanFn(StageFn):
    STAGE = "EpochPlan"
    STATE = userstate.ReadModifyWriteStateSpec("dpstream_plan_state", BytesCoder())

    @measured
    def process(self, element, state=beam.DoFn.StateParam(STATE)):
        r, item = element
        item = open_msg(item)
        job, cfg = self.job, self.job.cfg
        st = load_state(state) or PlanState()
        if isinstance(item, ShardCounts):
            for t, n in item.counts:
                if t > st.done:
                    st.pending.setdefault(t, {})[item.shard] = n
            need = job.n_shards
        else:  # RegistryUpdates: [(t, new centers, count)]
            for t, new, count in item.updates:
                if t > st.done:
                    st.pending[t] = (new, count)
            need = None
        ctx = self.run(r)
        planner = st.planner
        if planner is None:
            planner = epochs.EpochPlanner(ctx)
        elif planner.counter is not None:
            planner.counter.noise = ctx.noise
        plans = []
        while True:
            t = st.done + 1
            got = st.pending.get(t)
            if got is None or (need is not None and len(got) < need):
                break
            del st.pending[t]
            end = job.ends_at(r, t)
            plans.append(planner.step(sum(got.values()), end=end) if need is not None
                         else planner.step(bicriteria_update=got, end=end))
            st.done = t
        if planner.counter is not None:
            planner.counter.noise = None  # never pickled with the state (re-attached above)
        st.planner = planner
        if st.done >= job.last_tick(r):
            state.clear()
        else:
            store_state(state, st)
        if plans:
            msg = wire(ShardPlans(plans))
            for s in range(job.n_shards):
                yield (r, s), msg
            yield beam.pvalue.TaggedOutput("release", (RELEASE_KEY, wire(RunPlans(r, plans))))
        self._stats.note(r, floats=planner.state_floats() + len(st.pending) * job.n_shards)


class EpochPlan(beam.PTransform):
    """Per-tick counts of every shard (or the CenterRegistry's updates, ``from_registry=True``) →
    ``(plans by shard, plans for ReleaseCoreset)``: one :class:`dpstream.epochs.TickPlan` per tick."""

    def __init__(self, job: ClusterJob, from_registry: bool = False, label: Optional[str] = None):
        super().__init__(label)
        self.job, self.from_registry = job, from_registry

    def expand(self, pcoll):
        out = ((pcoll,) | "Typed" >> beam.Flatten().with_output_types(IntKeyed)
               | "Plan" >> beam.ParDo(_EpochPlanFn(self.job)).with_input_types(IntKeyed)
               .with_outputs("release", main="shards"))
        return out.shards, out.release


# --------------------------------------------------------------------------- RouteByEpoch

@dataclass
class RouteState:
    """RouteByEpoch's state of a (run, shard): points and plans of ticks not yet routed, by tick, and
    how many ticks it routed. Stored with the points as one array (``packed``: ticks, sizes, array)."""
    points: dict = field(default_factory=dict)
    plans: dict = field(default_factory=dict)
    routed: int = 0
    packed: Optional[tuple] = None


class _RouteFn(StageFn):
    STAGE = "RouteByEpoch"
    STATE = userstate.ReadModifyWriteStateSpec("dpstream_route_state", BytesCoder())

    @measured
    def process(self, element, state=beam.DoFn.StateParam(STATE)):
        key, item = element
        item = open_msg(item)
        # stored as a framed message (wire): the waiting points come back as views of the stored bytes
        st = open_msg(state.read()) or RouteState()
        if st.packed is not None:  # stored as one array (below)
            ts, sizes, x = st.packed
            st.points, st.packed = dict(zip(ts, row_blocks(x, sizes))), None
        if isinstance(item, ShardPoints):
            x = item.points
            ends = np.cumsum([n for _, n in item.counts])
            for (t, n), end in zip(item.counts, ends):
                st.points[t] = x[end - n:end]
        else:  # ShardPlans
            for p in item.plans:
                st.plans[p.t] = p
        ready = sorted(set(st.points) & set(st.plans))
        out = {}
        for t in ready:
            p = st.plans.pop(t)
            out.setdefault(p.epoch, []).append((t, st.points.pop(t), RingPlan.of(p)))
        st.routed += len(ready)
        held = sum(len(x) for x in st.points.values())
        if st.routed >= self.job.last_tick(key[0]):
            state.clear()
        else:
            if st.points:  # stored as one array, not one pickled array per tick
                ts = sorted(st.points)
                st.packed = (ts, [len(st.points[t]) for t in ts], joined([st.points[t] for t in ts], self.job.cfg.dim))
                st.points = {}
            state.write(wire(st))
        for e in sorted(out):
            ticks = out[e]  # each epoch copy gets its ticks' points as one array, with (t, n, plan) per tick
            x = joined([x for _, x, _ in ticks], self.job.cfg.dim)
            routed = RoutedTicks([TickPoints(t, len(x), p) for t, x, p in ticks], x)
            yield beam.pvalue.TaggedOutput(f"e{e}", (key, wire(routed)))
        self._stats.note(key, points=held)


def joined(blocks, dim: int) -> np.ndarray:
    """The blocks' rows, in order, as one array: without a copy when they are consecutive rows of one array
    (a message's ticks, routed or stored together: the usual case in batch, where a shard's points come as
    one message), else concatenated (the same dtype either way)."""
    if not blocks:
        return np.zeros((0, dim))
    if len(blocks) == 1:
        return blocks[0]
    rows = [b for b in blocks if len(b)]  # an empty slice need not point where its rows would be
    if rows and all(b.dtype == rows[0].dtype for b in blocks) and all(b.flags.c_contiguous for b in rows):
        first, root = rows[0], rows[0].base
        if len(rows) == 1:
            return first
        if (isinstance(root, np.ndarray) and all(b.base is root for b in rows)
                and all(a.ctypes.data + a.nbytes == b.ctypes.data for a, b in zip(rows, rows[1:]))):
            n = sum(len(b) for b in rows)  # the rows after the first block's, in the same array: shown, not copied
            return np.lib.stride_tricks.as_strided(first, shape=(n,) + first.shape[1:], writeable=False)
    return np.concatenate(blocks)


class RouteByEpoch(beam.PTransform):
    """(shard points, shard plans) → one PCollection per epoch index: ``((r, s), RoutedTicks)``."""

    def __init__(self, job: ClusterJob, label: Optional[str] = None):
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
    """``((shard, global tick), points | Partial)`` → one release dict per tick (every tick of every
    run), through the stages of the module docstring.

    ``ClusterTicks(cfg, clock, seed_path, mode="batch"|"streaming", close_delay_seconds=0.0,
    n_shards=clock.n_shards, release_log=False, end_tick=None)``. ``end_tick``: the global tick the user
    declared the stream's end (the job's ``--end_at_input_end``): final as T is (every pending block
    released, ``dpstream.epochs.EpochPlanner.step(end=True)``), and the last tick the job closes.
    ``release_log=True``: every release is emitted as its line of a
    release log (:mod:`dpstream.release_log`: a repeated coreset refers to its tick, a new one names
    its points by id), for a file sink; False: every release whole (a Pub/Sub topic). With the bicriteria
    (``cfg.bicriteria``) apply it to ``(ticks, registry updates)``, the second the output of
    :class:`~transforms.bicriteria.CenterRegistry`."""

    def __init__(self, cfg: EngineConfig, clock: TickClock, seed_path: str, mode: str = "batch",
                 close_delay_seconds: float = 0.0, n_shards: Optional[int] = None, release_log: bool = False,
                 end_tick: Optional[int] = None, label: Optional[str] = None):
        super().__init__(label)
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        if not (close_delay_seconds >= 0 and np.isfinite(close_delay_seconds)):
            raise ValueError(f"close_delay_seconds must be finite and >= 0, got {close_delay_seconds!r}")
        runs = cfg.runs
        total = None if runs is None else runs * cfg.horizon_ticks
        if total is not None and clock.horizon_ticks != total:
            raise ValueError(f"the clock's horizon ({clock.horizon_ticks}) must be runs × T = {total} ticks")
        if end_tick is not None and not (1 <= end_tick and (total is None or end_tick <= total)):
            raise ValueError(f"end_tick must be a tick of the horizon 1..{total or '∞'}, got {end_tick!r}")
        self.cfg = cfg
        # a declared end is the last tick the job closes: the stream has no tick after it
        schedule = TickSchedule(clock, total if end_tick is None else end_tick, mode, float(close_delay_seconds))
        self.job = ClusterJob(cfg, seed_path, clock.n_shards if n_shards is None else n_shards, schedule, end_tick)
        self.job.release_log = bool(release_log)

    @property
    def schedule(self) -> TickSchedule:
        return self.job.schedule

    def expand(self, pcolls):
        ticks, updates = pcolls if self.cfg.bicriteria else (pcolls, None)
        return apply_stages(self.job, ticks, updates)


def apply_stages(job: ClusterJob, ticks, updates=None):
    """Wire the clustering stages onto ``ticks`` (and the CenterRegistry's ``updates``) inside
    :class:`ClusterTicks`; returns the release dicts."""
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


def _registry_by_run(ups, job: ClusterJob):
    """The CenterRegistry's ``[(global tick, new centers, count)]`` → per run ``(r, RegistryUpdates)``."""
    by = {}
    for g, new, count in ups:
        r, t = job.split(g)
        by.setdefault(r, []).append((t, new, count))
    for r in sorted(by):
        yield r, wire(RegistryUpdates(by[r]))
