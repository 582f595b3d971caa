"""``ShardTicks``, the first clustering stage (key: point shard): the job's only tick timer. It freezes
each tick's points (merged in an order that depends only on the set of records) and emits, for *every*
tick (⊥ heartbeats included), the shard's point count to ``EpochPlan`` and its points to ``RouteByEpoch``,
as they were read: ``AssignRings`` clips them to the public ball (row by row, so where does not change a
bit), so that float32 input crosses the two later shuffles as float32. ``transforms/cluster.py`` wires
the stages."""
from __future__ import annotations

import logging
from typing import NamedTuple, Optional

import numpy as np

import apache_beam as beam
from apache_beam.coders import BytesCoder, PickleCoder, TupleCoder, VarIntCoder
from apache_beam.metrics import Metrics
from apache_beam.transforms import userstate
from apache_beam.transforms.timeutil import TimeDomain
from apache_beam.transforms.window import GlobalWindows

from dpstream.clock import merge_partials
from transforms.messages import ShardCounts, ShardPoints, StartClock
from transforms.parse import NAMESPACE
from transforms.stages import (IntKeyed, as_partial, compact_points, partial_bytes, partial_from_bytes, row_blocks,
                               ClusterJob, StageFn, measured, open_msg, wire)
from transforms.tick_timer import take_ticks_upto

_log = logging.getLogger("dpstream")


class ShardClock(NamedTuple):
    """ShardTicks' state: the last tick closed (its points frozen) and the tick its timer is armed for."""
    fired: int
    armed: Optional[int]


class _ShardTicksFn(StageFn):
    STAGE = "ShardTicks"
    META = userstate.ReadModifyWriteStateSpec("dpstream_shard_meta", PickleCoder())
    BUFFER = userstate.BagStateSpec("dpstream_shard_buffer", TupleCoder([VarIntCoder(), BytesCoder()]))  # (g, bytes)
    TICK = userstate.TimerSpec("dpstream_shard_tick", TimeDomain.WATERMARK)

    def setup(self):
        super().setup()
        c = lambda name: Metrics.counter(NAMESPACE, name)  # noqa: E731
        self._c_points = c("points_processed")
        self._c_closed, self._c_obsolete = c("after_close"), c("obsolete_timer_firings")

    @measured
    def process(self, element, key=beam.DoFn.KeyParam, meta=beam.DoFn.StateParam(META),
                buf=beam.DoFn.StateParam(BUFFER), timer=beam.DoFn.TimerParam(TICK)):
        _, item = element
        item = open_msg(item)
        self._stats.note(key)
        sched = self.job.schedule
        m = meta.read()
        if m is None:  # the first element (the start marker or data): arm the first tick
            m = ShardClock(0, sched.first_armed())
            meta.write(m)
            timer.set(sched.close_time(m.armed))
        if isinstance(item, StartClock):
            return
        g, part = item  # part: the partial's message (bytes), kept in the bag as it came
        if g <= m.fired:  # its tick is closed: frozen, never reopened
            n = int(partial_from_bytes(open_msg(part)).points.shape[0])
            self._c_closed.inc(n)
            _log.warning("dpstream: %d point(s) of tick %d arrived after the tick closed; dropped "
                         "(raise --allowed_lateness_seconds if this recurs)", n, g)
            return
        buf.add((g, part))

    @userstate.on_timer(TICK)
    @measured
    def on_tick(self, ts=beam.DoFn.TimestampParam, key=beam.DoFn.KeyParam, meta=beam.DoFn.StateParam(META),
                buf=beam.DoFn.StateParam(BUFFER), timer=beam.DoFn.TimerParam(TICK)):
        sched = self.job.schedule
        m = meta.read()
        if m is None or m.armed is None:
            self._c_obsolete.inc()
            return
        want = sched.close_time(m.armed)
        if ts != want:  # an obsolete firing of a timer that was re-set: restore it, do nothing
            self._c_obsolete.inc()
            timer.set(want)
            return
        fired = m.armed
        nxt = sched.next_armed(fired)
        meta.write(ShardClock(fired, nxt))
        if nxt is not None:
            timer.set(sched.close_time(nxt))
        pending = take_ticks_upto(buf, fired)
        job = self.job
        cfg = job.cfg
        ticks = list(range(m.fired + 1, fired + 1))
        x, sizes = merge_ticks([[partial_from_bytes(open_msg(p)) for p in pending.pop(g, ())] for g in ticks], cfg.dim)
        counts, first = {}, {}
        n_all = int(x.shape[0])
        for i, (g, n) in enumerate(zip(ticks, sizes)):
            r, t = job.split(g)
            counts.setdefault(r, []).append((t, int(n)))
            first.setdefault(r, i)
        self._c_points.inc(n_all)
        ends = np.concatenate([[0], np.cumsum(sizes)])
        for r in sorted(counts):
            yield r, wire(ShardCounts(key, counts[r]))
            # a run's ticks are consecutive: its points are one slice, shipped as one array (not one per tick)
            a = first[r]
            pts = x[ends[a]:ends[a + len(counts[r])]]
            yield beam.pvalue.TaggedOutput("points", ((r, key), wire(ShardPoints(counts[r], compact_points(pts)))))
        self._stats.note(key, points=n_all)


def merge_ticks(parts_by_tick, dim: int):
    """:func:`~dpstream.clock.merge_partials` of every tick's partial batches (a list per tick, in
    tick order), as one array: ``(points of all the ticks in tick order, points per tick)``, float32 if
    every partial's points are (:func:`~transforms.stages.compact_points`), else float64. Equal to
    merging tick by tick; one sort for the ticks whose slots are all known and distinct (the
    position clock: all of them), ``merge_partials`` for the others."""
    sizes = np.array([sum(p.points.shape[0] for p in parts) for parts in parts_by_tick], dtype=np.int64)
    flat = [p for parts in parts_by_tick for p in parts]
    if not flat:
        return np.zeros((0, dim)), sizes
    pts = np.concatenate([p.points for p in flat]).reshape(-1, dim)  # float32 only if all are: exact
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
        pts = np.concatenate(blocks, dtype=pts.dtype)  # float32 blocks keep the firing's own dtype
    return np.ascontiguousarray(pts), sizes


class ShardTicks(beam.PTransform):
    """``((shard, global tick), points | Partial)`` → ``(counts, points)``: per run and tick, every
    shard's point count (to :class:`EpochPlan`) and its points, not yet clipped (to :class:`RouteByEpoch`),
    empty ticks included."""

    def __init__(self, job: ClusterJob, label: Optional[str] = None):
        super().__init__(label)
        self.job = job

    def expand(self, ticks):
        dim = self.job.cfg.dim
        # (tick, bytes) as a plain tuple: Beam encodes it field by field (a NamedTuple it would pickle, bytes and all)
        data = (ticks | "KeyByShard" >> beam.Map(lambda kv: (int(kv[0][0]), (
                    int(kv[0][1]), wire(partial_bytes(as_partial(kv[1], dim))))))
                .with_output_types(IntKeyed)
                | "DataWindow" >> beam.WindowInto(GlobalWindows()))
        start = (ticks.pipeline | "StartClock" >> beam.Create([(s, StartClock()) for s in range(self.job.n_shards)])
                 .with_output_types(IntKeyed))
        out = ((data, start) | "WithStart" >> beam.Flatten()
               | "Shards" >> beam.ParDo(_ShardTicksFn(self.job)).with_input_types(IntKeyed)
               .with_outputs("points", main="counts"))
        return out.counts, out.points
