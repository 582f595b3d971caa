"""``BatchIntoTicks``: the stream's clock (DESIGN §3.1, privacy review finding 4); ``DedupByMessageId``,
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

Public horizon (finding 2): ticks outside ``[1, horizon_ticks]`` are dropped record by
record and counted (``outside_horizon``), never merged into a neighbouring tick.

Late data (finding 4c): with ``allowed_lateness_seconds`` set (event-time clock only),
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
import struct
import time
import zlib
from typing import Callable, List, NamedTuple, Optional

import numpy as np

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.transforms import trigger as beam_trigger
from apache_beam.transforms.window import GlobalWindow, GlobalWindows, TimestampCombiner, TimestampedValue
from apache_beam.utils.timestamp import Timestamp
from apache_beam.utils.windowed_value import WindowedValue

from transforms.parse import NAMESPACE, ParsedBatch

_US = 1_000_000
_MAX_ABS_TS = 9.0e12  # seconds; |ts| * 1e6 stays exact-ish and inside int64
UNBOUNDED_LAST_TICK = 2 ** 40 - 1  # runs without end: shard · 2**40 + tick stays inside int64 for 2**20 shards


# --------------------------------------------------------------------------- the clock

class TickClock:
    """The public tick rule: pure, picklable, vectorised (see the module docstring).

    ``TickClock("position", tick_size=1000, horizon_ticks=100, n_shards=4)`` or
    ``TickClock("event_time", tick_seconds=60, t_start=..., horizon_ticks=1440)``."""

    CLOCKS = ("position", "event_time")

    def __init__(self, clock: str = "position", *, tick_size: Optional[int] = None,
                 tick_seconds: Optional[float] = None, t_start: Optional[int] = None,
                 horizon_ticks: Optional[int], n_shards: int = 1):
        if clock not in self.CLOCKS:
            raise ValueError(f"clock must be one of {self.CLOCKS}, got {clock!r}")
        if horizon_ticks is None and clock != "event_time":
            raise ValueError("an unbounded horizon (runs without end) needs the event_time clock")
        if horizon_ticks is not None and (not _is_int(horizon_ticks) or horizon_ticks < 1):
            raise ValueError(f"horizon_ticks must be an integer >= 1 (the public horizon T), got {horizon_ticks!r}")
        if not _is_int(n_shards) or not 1 <= n_shards <= 1 << 20:
            raise ValueError(f"n_shards must be an integer in [1, 2**20], got {n_shards!r}")
        self.clock = clock
        # None: runs without end (a stream of consecutive runs); ticks then stop only at the key width
        self.horizon_ticks = None if horizon_ticks is None else int(horizon_ticks)
        self.n_shards = int(n_shards)
        if clock == "position":
            if not _is_int(tick_size) or tick_size < 1:
                raise ValueError(f"the position clock needs tick_size, an integer >= 1, got {tick_size!r}")
            if tick_seconds is not None or t_start is not None:
                raise ValueError("tick_seconds and t_start belong to the event_time clock, not the position clock")
            if self.horizon_ticks * int(tick_size) > 2 ** 62:
                raise ValueError("horizon_ticks * tick_size must stay below 2**62")
            self.tick_size = int(tick_size)
            self.tick_us = _US  # synthetic timeline: tick k spans [k-1, k) seconds
            self.t_start = 0
        else:
            if tick_size is not None:
                raise ValueError("tick_size belongs to the position clock, not the event_time clock")
            if not isinstance(tick_seconds, numbers.Real) or isinstance(tick_seconds, bool) \
                    or not math.isfinite(tick_seconds) or tick_seconds <= 0:
                raise ValueError(f"the event_time clock needs tick_seconds > 0, got {tick_seconds!r}")
            tick_us = round(float(tick_seconds) * _US)
            if tick_us < 1 or abs(tick_us - float(tick_seconds) * _US) > 1e-3:
                raise ValueError(f"tick_seconds must be a whole number of microseconds, got {tick_seconds!r}")
            if not _is_int(t_start):
                raise ValueError("the event_time clock needs t_start, the public index of the first tick "
                                 "(floor(start_time / tick_seconds); see TickClock.t_start_for)")
            self.tick_size = None
            self.tick_us = int(tick_us)
            self.t_start = int(t_start)
        self.tick_seconds = self.tick_us / _US

    @staticmethod
    def t_start_for(start_time: float, tick_seconds: float) -> int:
        """``t_start`` for a run whose first tick contains ``start_time`` (seconds since the epoch)."""
        return int(round(float(start_time) * _US)) // round(float(tick_seconds) * _US)

    # -- ticks
    def ticks(self, slots: np.ndarray, ts: np.ndarray) -> np.ndarray:
        """Vectorised ticks (int64) of records with these slots (−1 = none) and ts (NaN = none).
        Records without the clock's field, or with an absurd value, get tick 0 (outside)."""
        if self.clock == "position":
            slots = np.asarray(slots, dtype=np.int64)
            t = slots // self.tick_size + 1
            return np.where(slots >= 0, t, 0)
        ts = np.asarray(ts, dtype=np.float64)
        ok = np.isfinite(ts) & (np.abs(ts) < _MAX_ABS_TS)
        us = np.rint(np.where(ok, ts, 0.0) * _US).astype(np.int64)
        t = us // self.tick_us - self.t_start + 1
        return np.where(ok, t, 0)

    def tick_of(self, slot: Optional[int] = None, ts: Optional[float] = None) -> Optional[int]:
        """Scalar tick of one record, or None when it lies outside ``[1, horizon_ticks]``."""
        s = -1 if slot is None or slot < 0 or slot >= 2 ** 62 else int(slot)
        t = int(self.ticks(np.array([s], dtype=np.int64),
                           np.array([np.nan if ts is None else float(ts)]))[0])
        return t if 1 <= t <= self.last_tick else None

    @property
    def last_tick(self) -> int:
        """The last tick admitted: the horizon, or (unbounded) the largest tick the shard keys can hold."""
        return UNBOUNDED_LAST_TICK if self.horizon_ticks is None else self.horizon_ticks

    def in_horizon(self, ticks: np.ndarray) -> np.ndarray:
        return (ticks >= 1) & (ticks <= self.last_tick)

    # -- times
    def tick_start(self, tick: int) -> Timestamp:
        """Event time at which tick ``tick`` starts (position clock: ``tick - 1`` seconds)."""
        return Timestamp(micros=(self.t_start + int(tick) - 1) * self.tick_us)

    def tick_end(self, tick) -> np.ndarray:
        """Event time (seconds) at which tick(s) end: ``(t_start + tick) * tick_seconds``."""
        return (self.t_start + np.asarray(tick, dtype=np.int64)) * self.tick_us / _US

    def deadline(self, tick, allowed_lateness_seconds: float) -> np.ndarray:
        """Public deadline (seconds since the epoch) of tick(s): a record published after it is not
        admitted (``BatchIntoTicks`` compares each record's own publish time with it)."""
        return self.tick_end(tick) + float(allowed_lateness_seconds)

    # -- shards
    def shard_of(self, slot: Optional[int], message_id: Optional[str], point: np.ndarray,
                 ts: Optional[float]) -> int:
        """A public function of the record: ``slot % n_shards``; without a slot, a CRC-32
        of the message id; without either, a CRC-32 of the point's bytes and ts. Never
        of arrival order."""
        n = self.n_shards
        if n == 1:
            return 0
        if slot is not None:
            return int(slot) % n
        if message_id is not None:
            return zlib.crc32(str(message_id).encode("utf-8", "surrogatepass")) % n
        return zlib.crc32(np.ascontiguousarray(point, dtype=np.float64).tobytes()
                          + struct.pack("<d", math.nan if ts is None else float(ts))) % n


def _is_int(v) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def _seconds_or_none(v) -> Optional[float]:
    """A finite number of seconds, or None (booleans, non-numbers and NaN/inf are None)."""
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        return None
    v = float(v)
    return v if math.isfinite(v) else None


class _Partial(NamedTuple):
    """Points of one (shard, tick) from one bundle, with their sort keys."""
    points: np.ndarray   # (m, dim) float64
    slots: np.ndarray    # (m,) int64, -1 = none
    ts: np.ndarray       # (m,) float64, NaN = none
    mids: np.ndarray     # (m,) str, "" = none


def _empty_partial(dim: int) -> _Partial:
    return _Partial(np.zeros((0, dim)), np.zeros(0, np.int64), np.zeros(0), np.array([], dtype=str))


def _counter(prefix: str, name: str):
    return Metrics.counter(NAMESPACE, prefix + name)


# --------------------------------------------------------------------------- DoFns

class _AssignTicksFn(beam.DoFn):
    """Buffers points as Python lists (one append per point); at the end of the bundle, or
    every ``max_buffer`` points, computes every tick and shard at once with numpy, drops
    (and counts) records outside the horizon or published after their tick's deadline, and
    emits one :class:`_Partial` per (shard, tick) of the buffer.

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
        c = lambda name: _counter(self.label_prefix, name)  # noqa: E731
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
        pub = _seconds_or_none(getattr(b, "publish_time", None))
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
        pub = _seconds_or_none(element[4]) if len(element) > 4 else None
        if not isinstance(point, np.ndarray) or point.ndim != 1 or \
                (self.dim is not None and point.shape[0] != self.dim):
            self._c_bad.inc()
            return
        if slot is not None and not (_is_int(slot) and 0 <= slot < 2 ** 62):
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
        try:
            all_pts = np.concatenate(pts_all) if len(pts_all) > 1 else pts_all[0]
        except ValueError as e:
            raise ValueError("BatchIntoTicks got points of different dimensions; pass dim= "
                             "(ParsePoints' output always has one dimension)") from e
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
            # function of the record alone (finding 4c), whatever the bundle holds or when it flushes
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
            for grp in np.split(order, cuts):
                g_idx = idx[grp]  # one gather of each group's rows (at d = 384 a copy of all points is 0.3 GB)
                tick = int(ticks[g_idx[0]])
                part = _Partial(all_pts[g_idx], slots[g_idx], ts[g_idx], mids_all[g_idx])
                out.append(((int(shards[g_idx[0]]), tick), part, clock.tick_start(tick)))
        self.start_bundle()
        return out


def merge_partials(parts) -> _Partial:
    """Concatenate partial batches of one tick and sort them by (slot, ts, message id,
    coordinates): the result is a deterministic function of the *set* of records,
    whatever the bundle split, pane split or arrival order."""
    parts = list(parts)
    if len(parts) == 1 and parts[0].points.shape[0] <= 1:
        return parts[0]
    pts = np.concatenate([p.points for p in parts], axis=0)
    slots = np.concatenate([p.slots for p in parts])
    ts = np.concatenate([p.ts for p in parts])
    mids = np.concatenate([p.mids for p in parts])
    if pts.shape[0] > 1:
        order = np.argsort(slots, kind="stable")
        s = slots[order]
        if not (s[0] >= 0 and (s[1:] > s[:-1]).all()):  # missing or repeated slots: full key
            keys = [pts[:, j] for j in range(pts.shape[1] - 1, -1, -1)] + [mids, ts, slots]
            order = np.lexsort(keys)
        pts, slots, ts, mids = pts[order], slots[order], ts[order], mids[order]
    return _Partial(np.ascontiguousarray(pts), slots, ts, mids)


class _MergeTickFn(beam.DoFn):
    """One sorted batch per (shard, tick) pane (:func:`merge_partials`); with
    ``keep_order_keys`` the :class:`_Partial` itself, so a consumer that receives a
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
        empty = _empty_partial(self.dim)
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
    * ``keep_order_keys=True`` emits the sorted ``_Partial`` (points, slots, ts,
      message ids) instead of the bare array, for consumers that merge panes.
    * ``group=False`` skips the GroupByKey: one ``_Partial`` per (shard, tick, bundle flush), for
      a keyed consumer that buffers by tick and merges a tick's partials itself (the job's
      ``ShardTicks``: one shuffle instead of two).
    * Unbounded input: the GroupByKey fires on processing time every ``pane_seconds``
      (``Repeatedly(AfterProcessingTime)``, discarding), never on the watermark, so
      a (shard, tick) can arrive in several batches; the consumer keeps state by tick
      and concatenates. Late data follows ``allowed_lateness_seconds`` (module
      docstring): a record is admitted iff its publish time is at most its tick's
      public deadline. ``emit_empty_ticks`` is refused: heartbeats of empty ticks come
      from the consumers' tick timers.
    * ``now_fn`` (default ``time.time``) is the stage's wall clock, read once per flush for
      the ``arrived_after_deadline`` telemetry only; no admission decision reads it.
    """

    def __init__(self, clock: str = "position", *, tick_size: Optional[int] = None,
                 tick_seconds: Optional[float] = None, t_start: Optional[int] = None,
                 horizon_ticks: int, n_shards: int = 1, dim: Optional[int] = None,
                 allowed_lateness_seconds: Optional[float] = None, emit_empty_ticks: bool = False,
                 pane_seconds: int = 1, now_fn: Callable[[], float] = time.time,
                 label_prefix: str = "", keep_order_keys: bool = False, group: bool = True,
                 label: Optional[str] = None):
        super().__init__(label)
        self.group = bool(group)
        self.keep_order_keys = bool(keep_order_keys)
        self.clock = TickClock(clock, tick_size=tick_size, tick_seconds=tick_seconds, t_start=t_start,
                               horizon_ticks=horizon_ticks, n_shards=n_shards)
        if dim is not None and (not _is_int(dim) or dim < 1):
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
        if not _is_int(pane_seconds) or pane_seconds < 1:  # Beam's trigger proto holds whole seconds
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
            _AssignTicksFn(self.clock, self.dim, self.allowed_lateness_seconds, self.now_fn, self.label_prefix))
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
