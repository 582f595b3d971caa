"""``BatchIntoTicks``: the stream's clock as a Beam stage (P2, P4; the Beam-free rule,
:class:`~dpstream.clock.TickClock`, is in ``dpstream/clock.py``); ``DedupByMessageId``,
which runs before it on a stream, is in :mod:`transforms.dedup`.

The tick of a record is a function of **that record alone**:

* position clock (bounded input): ``tick = slot // tick_size + 1`` — 1-based, slot 0
  is in tick 1, exactly as ``DPStreamClusterer.fit`` cuts rows. The slot is the raw
  line/row index assigned before parsing (:class:`~transforms.parse.Record`), so a
  dead-lettered record keeps its slot and no other record changes tick. Neighbouring
  relation: replace-one (the slot count is public).
* event-time clock (streams): ``tick = floor(ts / tick_seconds) - t_start + 1`` where
  ``t_start = floor(start_time / tick_seconds)`` is public. Computed on Beam's
  microsecond grid (``ts`` and ``tick_seconds`` rounded to whole microseconds), so
  ``ts = 0.3, tick_seconds = 0.1`` lands in absolute tick 3, not 2. Neighbouring
  relation: add/remove one record.

Never a count of arrived records: inserting or dead-lettering one record does not
move any other record to another tick (tested).

Public horizon (P3): ticks outside ``[1, horizon_ticks]`` are dropped record by
record and counted (``outside_horizon``), never merged into a neighbouring tick.

Late data (P4): with ``allowed_lateness_seconds`` set (event-time clock only),
a record of tick k is admitted iff its **own publish time** (``ParsedPoint.publish_time``:
for Pub/Sub the message's ``publish_time``, set by the server) is at most the tick's
public deadline ``tick_end(k) + allowed_lateness_seconds``, with ``tick_end(k) =
(t_start + k) * tick_seconds``; otherwise it is dropped and counted (``after_deadline``).
A record without a publish time cannot be judged and is dropped as ``no_clock``. The
decision is a function of the record alone and public parameters: not of the wall
clock when this stage flushes its buffer (a slow record in the bundle used to make every
other record of the bundle late), not of the bundle, not of the watermark (the grouping
runs in the global window, which never expires, so the runner never drops a record as
"late" either). A payload ``ts`` cannot buy a later deadline: ``ParsePoints`` dead-letters
a ``ts`` later than the publish time plus the public ``max_clock_skew_seconds``
(``ts_in_future``).

What remains (residual risk, documented in SECURITY.md): the stage that closes tick k
downstream (``ClusterTicks``, at ``tick_end(k) + close_delay`` of the watermark) drops and
counts (``after_close``) a record admitted here that reaches it after it processed tick k:
that is a function of the record's delivery delay, which can depend on load, but not of
any other record's content. The ``arrived_after_deadline`` counter (telemetry only) counts
admitted records that reached this stage after their deadline by its wall clock: the
delivery delay the operator should compare with ``--allowed_lateness_seconds``. With
``allowed_lateness_seconds=None`` (batch, replays of old data) every record inside the
horizon is admitted.

Operator metrics (``Metrics.counter("dpstream", prefix + name)``): ``ticked`` (records
put into a tick), ``outside_horizon``, ``after_deadline``, ``arrived_after_deadline``,
``no_clock`` (a position clock record without slot, an event-time record without ts,
or, with a deadline, without publish time), ``bad_point`` (shape differs from ``dim``);
``DedupByMessageId`` (:mod:`transforms.dedup`): ``redeliveries_dropped``, ``without_message_id``,
``after_dedup_ttl``. Exact counts: telemetry only, never part of a release.
"""
from __future__ import annotations

import math
import numbers
import time
from typing import Callable, List, Optional

import numpy as np

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.transforms import trigger as beam_trigger
from apache_beam.transforms.window import GlobalWindow, GlobalWindows, TimestampCombiner, TimestampedValue
from apache_beam.utils.windowed_value import WindowedValue

from dpstream.clock import (Partial, TickClock, empty_partial,  # noqa: F401
                            is_int, merge_partials, seconds_or_none)
from transforms.parse import NAMESPACE, ParsedBatch


def stage_counter(prefix: str, name: str):
    return Metrics.counter(NAMESPACE, prefix + name)


# --------------------------------------------------------------------------- DoFns

class _AssignTicksFn(beam.DoFn):
    """Buffers points as Python lists (one append per point); at the end of the bundle, or
    every ``max_buffer`` points, computes every tick and shard at once with numpy, drops
    (and counts) records outside the horizon or published after their tick's deadline, and
    emits one :class:`Partial` per (shard, tick) of the buffer.

    Every decision is a function of the record's own fields (slot, ts, publish time) and
    public parameters, so neither the bundle split, nor the flush time, nor any other
    record of the bundle changes it. ``now_fn`` (the stage's wall clock) is read once per
    flush for the ``arrived_after_deadline`` telemetry only (delivery delay), never for
    admission."""

    def __init__(self, clock: TickClock, dim: Optional[int], allowed_lateness_seconds: Optional[float],
                 now_fn: Callable[[], float], label_prefix: str, max_buffer: int = 1 << 16):
        self.clock = clock
        self.dim = dim
        self.allowed_lateness_seconds = allowed_lateness_seconds
        self.now_fn = now_fn
        self.label_prefix = label_prefix
        self.max_buffer = max_buffer

    def setup(self):
        c = lambda name: stage_counter(self.label_prefix, name)  # noqa: E731
        self._c_ticked, self._c_outside = c("ticked"), c("outside_horizon")
        self._c_late, self._c_noclock, self._c_bad = c("after_deadline"), c("no_clock"), c("bad_point")
        self._c_arrived_late = c("arrived_after_deadline")

    def start_bundle(self):
        self._points: List[np.ndarray] = []
        self._slots: List[int] = []
        self._ts: List[float] = []
        self._pub: List[float] = []
        self._mids: List[str] = []
        self._shards: List[int] = []
        self._chunks: list = []  # (points, slots, ts, mids, shards, publish times) of ParsedBatch elements
        self._n_chunked = 0

    def _process_batch(self, b):
        pts = b.points
        if not isinstance(pts, np.ndarray) or pts.ndim != 2 or \
                (self.dim is not None and pts.shape[1] != self.dim):
            self._c_bad.inc(int(len(pts)) if hasattr(pts, "__len__") else 1)
            return
        m = pts.shape[0]
        slots = np.asarray(b.slots, dtype=np.int64).reshape(m)
        ts = b.ts if isinstance(b.ts, (int, float)) and not isinstance(b.ts, bool) else None
        pub = seconds_or_none(getattr(b, "publish_time", None))
        ts_arr = np.full(m, math.nan if ts is None else float(ts))
        if self.clock.clock == "position":
            has = (slots >= 0) & (slots < 2 ** 62)
        else:
            has = np.full(m, ts is not None and (pub is not None or self.allowed_lateness_seconds is None))
        if not has.all():
            self._c_noclock.inc(int((~has).sum()))
            pts, slots, ts_arr = pts[has], slots[has], ts_arr[has]
            m = pts.shape[0]
        if m == 0:
            return
        mid = b.message_id
        n = self.clock.n_shards
        if n == 1:
            shards = np.zeros(m, np.int64)
        elif (slots >= 0).all():
            shards = slots % n
        else:
            shards = np.array([self.clock.shard_of(None if s < 0 else int(s), mid, pts[i], ts)
                               for i, s in enumerate(slots)], dtype=np.int64)
        self._chunks.append((np.asarray(pts, dtype=np.float64), slots, ts_arr,
                             np.full(m, "" if mid is None else str(mid)), shards,
                             np.full(m, math.nan if pub is None else float(pub))))
        self._n_chunked += m

    def process(self, element):
        if isinstance(element, ParsedBatch):
            self._process_batch(element)
            if len(self._points) + self._n_chunked >= self.max_buffer:
                for key, part, stamp in self._flush():
                    yield TimestampedValue((key, part), stamp)
            return
        point, slot, ts = element[0], element[1], element[2]
        mid = element[3] if len(element) > 3 else None
        pub = seconds_or_none(element[4]) if len(element) > 4 else None
        if not isinstance(point, np.ndarray) or point.ndim != 1 or \
                (self.dim is not None and point.shape[0] != self.dim):
            self._c_bad.inc()
            return
        if slot is not None and not (is_int(slot) and 0 <= slot < 2 ** 62):
            slot = None
        if ts is not None and not isinstance(ts, (int, float)):
            ts = None
        if (slot if self.clock.clock == "position" else ts) is None or \
                (self.clock.clock == "event_time" and self.allowed_lateness_seconds is not None and pub is None):
            self._c_noclock.inc()  # with a deadline, the publish time is the admission clock
            return
        self._points.append(point)
        self._slots.append(-1 if slot is None else int(slot))
        self._ts.append(math.nan if ts is None else float(ts))
        self._pub.append(math.nan if pub is None else float(pub))
        self._mids.append("" if mid is None else str(mid))
        self._shards.append(self.clock.shard_of(slot, mid, point, ts))
        if len(self._points) >= self.max_buffer:  # bounded memory on huge bundles
            for key, part, stamp in self._flush():
                yield TimestampedValue((key, part), stamp)

    def finish_bundle(self):
        for key, part, stamp in self._flush():
            yield WindowedValue((key, part), stamp, (GlobalWindow(),))

    def _flush(self):
        if not self._points and not self._chunks:
            return []
        clock = self.clock
        try:
            pts_all = [np.stack(self._points).astype(np.float64, copy=False)] if self._points else []
        except ValueError as e:
            raise ValueError("BatchIntoTicks got points of different dimensions; pass dim= "
                             "(ParsePoints' output always has one dimension)") from e
        pts_all += [c[0] for c in self._chunks]
        if len({p.shape[1:] for p in pts_all}) > 1:
            raise ValueError("BatchIntoTicks got points of different dimensions; pass dim= "
                             "(ParsePoints' output always has one dimension)")
        slots = np.concatenate([np.array(self._slots, dtype=np.int64)] + [c[1] for c in self._chunks])
        ts = np.concatenate([np.array(self._ts, dtype=np.float64)] + [c[2] for c in self._chunks])
        mids_all = np.concatenate([np.array(self._mids, dtype=str)] + [c[3] for c in self._chunks])
        shards = np.concatenate([np.array(self._shards, dtype=np.int64)] + [c[4] for c in self._chunks])
        ticks = clock.ticks(slots, ts)
        keep = clock.in_horizon(ticks)
        n_out = int((~keep).sum())
        if n_out:
            self._c_outside.inc(n_out)
        if self.allowed_lateness_seconds is not None:
            # admission by the record's own publish time against its tick's public deadline: a
            # function of the record alone (P4), whatever the bundle holds or when it flushes
            pub = np.concatenate([np.array(self._pub, dtype=np.float64)] + [c[5] for c in self._chunks])
            deadline = clock.deadline(ticks, self.allowed_lateness_seconds)
            late = keep & ~(pub <= deadline)
            n_late = int(late.sum())
            if n_late:
                self._c_late.inc(n_late)
            keep &= ~late
            if self.now_fn is not None and keep.any():  # telemetry only: delivery delay, not admission
                n_arrived_late = int((keep & (float(self.now_fn()) > deadline)).sum())
                if n_arrived_late:
                    self._c_arrived_late.inc(n_arrived_late)
        idx = np.flatnonzero(keep)
        out = []
        if idx.size:
            self._c_ticked.inc(int(idx.size))
            key = shards[idx] * (clock.last_tick + 1) + ticks[idx]
            order = np.argsort(key, kind="stable")
            cuts = np.flatnonzero(np.diff(key[order])) + 1
            gather = _RowGather(pts_all)
            for grp in np.split(order, cuts):
                g_idx = idx[grp]
                tick = int(ticks[g_idx[0]])
                part = Partial(gather(g_idx), slots[g_idx], ts[g_idx], mids_all[g_idx])
                out.append(((int(shards[g_idx[0]]), tick), part, clock.tick_start(tick)))
        self.start_bundle()
        return out


class _MergeTickFn(beam.DoFn):
    """One sorted batch per (shard, tick) pane (:func:`merge_partials`); with
    ``keep_order_keys`` the :class:`Partial` itself, so a consumer that receives a
    tick in several panes can merge them into the same order."""

    def __init__(self, clock: TickClock, keep_order_keys: bool = False):
        self.clock = clock
        self.keep_order_keys = keep_order_keys

    def process(self, element):
        (shard, tick), parts = element
        parts = list(parts)
        if not parts:  # a processing-time pane can fire empty on a stream (measured)
            return
        merged = merge_partials(parts)
        out = merged if self.keep_order_keys else merged.points
        yield TimestampedValue(((shard, tick), out), self.clock.tick_start(tick))


class _EmptyTicksFn(beam.DoFn):
    def __init__(self, clock: TickClock, dim: int):
        self.clock, self.dim = clock, dim

    def process(self, _):
        empty = empty_partial(self.dim)
        if self.clock.horizon_ticks is None:
            raise ValueError("emit_empty_ticks needs a bounded horizon")
        for tick in range(1, self.clock.horizon_ticks + 1):
            ts = self.clock.tick_start(tick)
            for shard in range(self.clock.n_shards):
                yield TimestampedValue(((shard, tick), empty), ts)


# --------------------------------------------------------------------------- transforms

class BatchIntoTicks(beam.PTransform):
    """``ParsedPoint``s → ``((shard, tick), points)`` with ``points`` a float64 array
    ``(m, dim)`` sorted by slot (then ts, message id, coordinates).

    ``BatchIntoTicks(clock="position"|"event_time", tick_size=…, tick_seconds=…,
    t_start=…, horizon_ticks=…, n_shards=1, dim=None, allowed_lateness_seconds=None,
    emit_empty_ticks=False, pane_seconds=1, now_fn=time.time, label_prefix="")``

    * The tick comes from the record alone (module docstring); shard =
      :meth:`TickClock.shard_of` (``slot % n_shards`` when there is a slot).
    * Grouping is a Beam ``GroupByKey`` on ``(shard, tick)`` in the global window.
      Points are gathered into arrays per bundle *before* the shuffle, so the shuffle
      moves one array per (shard, tick, bundle), not one element per point.
    * Output elements carry the tick's start as their timestamp
      (:meth:`TickClock.tick_start`; position clock: ``tick − 1`` seconds).
    * Bounded input: exactly one batch per (shard, tick) that received a point; with
      ``emit_empty_ticks=True`` (needs ``dim``) one batch for **every** (shard, tick)
      in ``[0, n_shards) × [1, horizon_ticks]``, empty ones as ``(0, dim)`` arrays, so
      the set of keys does not depend on the data.
    * ``keep_order_keys=True`` emits the sorted ``Partial`` (points, slots, ts,
      message ids) instead of the bare array, for consumers that merge panes.
    * ``group=False`` skips the GroupByKey: one ``Partial`` per (shard, tick, bundle flush), for
      a keyed consumer that buffers by tick and merges a tick's partials itself (the job's
      ``ShardTicks``: one shuffle instead of two).
    * Unbounded input: the GroupByKey fires on processing time every ``pane_seconds``
      (``Repeatedly(AfterProcessingTime)``, discarding), never on the watermark, so
      a (shard, tick) can arrive in several batches; the consumer keeps state by tick
      and concatenates. Late data follows ``allowed_lateness_seconds`` (module
      docstring): a record is admitted iff its publish time is at most its tick's
      public deadline. ``emit_empty_ticks`` is refused: heartbeats of empty ticks come
      from the consumers' tick timers.
    * ``max_buffer``: points buffered per bundle before a flush (memory against the number of partials:
      input that is not in tick order, such as the output of the job's per-unit bounding, makes one
      partial per (shard, tick) per flush).
    * ``now_fn`` (default ``time.time``) is the stage's wall clock, read once per flush for
      the ``arrived_after_deadline`` telemetry only; no admission decision reads it.
    """

    def __init__(self, clock: str = "position", *, tick_size: Optional[int] = None,
                 tick_seconds: Optional[float] = None, t_start: Optional[int] = None,
                 horizon_ticks: int, n_shards: int = 1, dim: Optional[int] = None,
                 allowed_lateness_seconds: Optional[float] = None, emit_empty_ticks: bool = False,
                 pane_seconds: int = 1, now_fn: Callable[[], float] = time.time,
                 label_prefix: str = "", keep_order_keys: bool = False, group: bool = True,
                 max_buffer: int = 1 << 16, label: Optional[str] = None):
        super().__init__(label)
        self.max_buffer = int(max_buffer)
        self.group = bool(group)
        self.keep_order_keys = bool(keep_order_keys)
        self.clock = TickClock(clock, tick_size=tick_size, tick_seconds=tick_seconds, t_start=t_start,
                               horizon_ticks=horizon_ticks, n_shards=n_shards)
        if dim is not None and (not is_int(dim) or dim < 1):
            raise ValueError(f"dim must be an integer >= 1 or None, got {dim!r}")
        if allowed_lateness_seconds is not None:
            if clock != "event_time":
                raise ValueError("allowed_lateness_seconds applies to the event_time clock only "
                                 "(a position clock reads a bounded input: nothing is late)")
            if not isinstance(allowed_lateness_seconds, numbers.Real) or allowed_lateness_seconds < 0 \
                    or not math.isfinite(allowed_lateness_seconds):
                raise ValueError(f"allowed_lateness_seconds must be finite and >= 0, got {allowed_lateness_seconds!r}")
        if emit_empty_ticks and dim is None:
            raise ValueError("emit_empty_ticks needs dim (the shape of the empty batches)")
        if not is_int(pane_seconds) or pane_seconds < 1:  # Beam's trigger proto holds whole seconds
            raise ValueError(f"pane_seconds must be an integer >= 1, got {pane_seconds!r}")
        self.dim = dim
        self.allowed_lateness_seconds = allowed_lateness_seconds
        self.emit_empty_ticks = emit_empty_ticks
        self.pane_seconds = int(pane_seconds)
        self.now_fn = now_fn
        self.label_prefix = label_prefix

    def expand(self, pcoll):
        if not isinstance(pcoll.windowing.windowfn, GlobalWindows):
            pcoll = pcoll | "IntoGlobalWindow" >> beam.WindowInto(GlobalWindows())
        parts = pcoll | "AssignTicks" >> beam.ParDo(
            _AssignTicksFn(self.clock, self.dim, self.allowed_lateness_seconds, self.now_fn, self.label_prefix,
                           self.max_buffer))
        bounded = pcoll.is_bounded
        if not self.group:  # the consumer merges a tick's partials itself (transforms.cluster.ShardTicks)
            if self.emit_empty_ticks:
                raise ValueError("emit_empty_ticks needs group=True")
            return parts | "Window" >> beam.WindowInto(GlobalWindows())
        if self.emit_empty_ticks:
            if not bounded:
                raise ValueError("emit_empty_ticks is for bounded input; on a stream the consumers' "
                                 "tick timers emit the heartbeats of empty ticks")
            empties = (pcoll.pipeline | "Impulse" >> beam.Impulse()
                       | "EmptyTicks" >> beam.ParDo(_EmptyTicksFn(self.clock, self.dim)))
            parts = (parts, empties) | "WithEmptyTicks" >> beam.Flatten()
        if bounded:
            win = beam.WindowInto(GlobalWindows(), timestamp_combiner=TimestampCombiner.OUTPUT_AT_EARLIEST)
        else:
            win = beam.WindowInto(
                GlobalWindows(),
                trigger=beam_trigger.Repeatedly(beam_trigger.AfterProcessingTime(self.pane_seconds)),
                accumulation_mode=beam_trigger.AccumulationMode.DISCARDING,
                timestamp_combiner=TimestampCombiner.OUTPUT_AT_EARLIEST)
        return (parts
                | "Window" >> win
                | "GroupByShardTick" >> beam.GroupByKey()
                | "MergeTick" >> beam.ParDo(_MergeTickFn(self.clock, self.keep_order_keys)))


# --------------------------------------------------------------------------- dedup



class _RowGather:
    """Rows of the concatenation of ``arrays`` by ascending global index, gathered straight from the arrays
    into the result: one copy of each point, where concatenating first and gathering after made two (at
    d = 384 a copy of a bundle's points is 0.15 GB)."""

    def __init__(self, arrays):
        self.arrays = arrays
        self.dtype = np.result_type(*arrays)
        self.ends = np.cumsum([a.shape[0] for a in arrays])

    def __call__(self, rows: np.ndarray) -> np.ndarray:
        out = np.empty((rows.size,) + self.arrays[0].shape[1:], dtype=self.dtype)
        which = np.searchsorted(self.ends, rows, side="right")  # rows ascend, so each array's rows are a run
        cuts = np.flatnonzero(np.diff(which)) + 1
        for a, b in zip(np.r_[0, cuts], np.r_[cuts, rows.size]):
            i = int(which[a])
            start = int(self.ends[i] - self.arrays[i].shape[0])
            src, local = self.arrays[i], rows[a:b] - start
            if src.dtype == self.dtype:  # mode="clip": an unbuffered take (the rows are in range by construction)
                np.take(src, local, axis=0, out=out[a:b], mode="clip")
            else:
                out[a:b] = src[local]
        return out

