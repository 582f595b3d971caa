"""The stream's public tick clock and its batch type, without Beam: :class:`TickClock` (the tick
of a record from that record alone), :class:`Partial` (a (shard, tick)'s points with their sort keys)
and :func:`merge_partials` (one tick's batches in an order that depends only on the set of records).
``transforms.ticks.BatchIntoTicks`` applies them in the Beam job; the report step re-reads the input
with them, and any Beam-free tool can cut a stream into the job's ticks.

* position clock (bounded input): ``tick = slot // tick_size + 1`` — 1-based, slot 0 is in tick 1,
  exactly as ``DPStreamClusterer.fit`` cuts rows. Neighbouring relation: replace-one (the slot
  count is public).
* event-time clock (streams): ``tick = floor(ts / tick_seconds) - t_start + 1`` where
  ``t_start = floor(start_time / tick_seconds)`` is public, computed on Beam's microsecond grid
  (``ts`` and ``tick_seconds`` rounded to whole microseconds), so ``ts = 0.3, tick_seconds = 0.1``
  lands in absolute tick 3, not 2. Neighbouring relation: add/remove one record.

Never a count of arrived records: inserting or dead-lettering one record moves no other record to
another tick. Ticks outside ``[1, horizon_ticks]`` are outside the public horizon.
"""
from __future__ import annotations

import math
import numbers
import struct
import zlib
from typing import NamedTuple, Optional

import numpy as np

MICROS = 1_000_000
MAX_ABS_TS = 9.0e12  # seconds; |ts| * 1e6 stays exact-ish and inside int64
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
        if horizon_ticks is not None and (not is_int(horizon_ticks) or horizon_ticks < 1):
            raise ValueError(f"horizon_ticks must be an integer >= 1 (the public horizon T), got {horizon_ticks!r}")
        if not is_int(n_shards) or not 1 <= n_shards <= 1 << 20:
            raise ValueError(f"n_shards must be an integer in [1, 2**20], got {n_shards!r}")
        self.clock = clock
        # None: runs without end (a stream of consecutive runs); ticks then stop only at the key width
        self.horizon_ticks = None if horizon_ticks is None else int(horizon_ticks)
        self.n_shards = int(n_shards)
        if clock == "position":
            if not is_int(tick_size) or tick_size < 1:
                raise ValueError(f"the position clock needs tick_size, an integer >= 1, got {tick_size!r}")
            if tick_seconds is not None or t_start is not None:
                raise ValueError("tick_seconds and t_start belong to the event_time clock, not the position clock")
            if self.horizon_ticks * int(tick_size) > 2 ** 62:
                raise ValueError("horizon_ticks * tick_size must stay below 2**62")
            self.tick_size = int(tick_size)
            self.tick_us = MICROS  # synthetic timeline: tick k spans [k-1, k) seconds
            self.t_start = 0
        else:
            if tick_size is not None:
                raise ValueError("tick_size belongs to the position clock, not the event_time clock")
            if not isinstance(tick_seconds, numbers.Real) or isinstance(tick_seconds, bool) \
                    or not math.isfinite(tick_seconds) or tick_seconds <= 0:
                raise ValueError(f"the event_time clock needs tick_seconds > 0, got {tick_seconds!r}")
            tick_us = round(float(tick_seconds) * MICROS)
            if tick_us < 1 or abs(tick_us - float(tick_seconds) * MICROS) > 1e-3:
                raise ValueError(f"tick_seconds must be a whole number of microseconds, got {tick_seconds!r}")
            if not is_int(t_start):
                raise ValueError("the event_time clock needs t_start, the public index of the first tick "
                                 "(floor(start_time / tick_seconds); see TickClock.t_start_for)")
            self.tick_size = None
            self.tick_us = int(tick_us)
            self.t_start = int(t_start)
        self.tick_seconds = self.tick_us / MICROS

    @staticmethod
    def t_start_for(start_time: float, tick_seconds: float) -> int:
        """``t_start`` for a run whose first tick contains ``start_time`` (seconds since the epoch)."""
        return int(round(float(start_time) * MICROS)) // round(float(tick_seconds) * MICROS)

    # -- ticks
    def ticks(self, slots: np.ndarray, ts: np.ndarray) -> np.ndarray:
        """Vectorised ticks (int64) of records with these slots (−1 = none) and ts (NaN = none).
        Records without the clock's field, or with an absurd value, get tick 0 (outside)."""
        if self.clock == "position":
            slots = np.asarray(slots, dtype=np.int64)
            t = slots // self.tick_size + 1
            return np.where(slots >= 0, t, 0)
        ts = np.asarray(ts, dtype=np.float64)
        ok = np.isfinite(ts) & (np.abs(ts) < MAX_ABS_TS)
        us = np.rint(np.where(ok, ts, 0.0) * MICROS).astype(np.int64)
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
    def tick_start_micros(self, tick: int) -> int:
        """Event time (microseconds) at which tick ``tick`` starts (position clock: ``tick - 1`` seconds)."""
        return (self.t_start + int(tick) - 1) * self.tick_us

    def tick_start(self, tick: int):
        """:meth:`tick_start_micros` as a Beam ``Timestamp`` (the Beam stages' event time)."""
        from apache_beam.utils.timestamp import Timestamp  # only the Beam stages call this: the module stays Beam-free

        return Timestamp(micros=self.tick_start_micros(tick))

    def tick_end(self, tick) -> np.ndarray:
        """Event time (seconds) at which tick(s) end: ``(t_start + tick) * tick_seconds``."""
        return (self.t_start + np.asarray(tick, dtype=np.int64)) * self.tick_us / MICROS

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


def is_int(v) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def seconds_or_none(v) -> Optional[float]:
    """A finite number of seconds, or None (booleans, non-numbers and NaN/inf are None)."""
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        return None
    v = float(v)
    return v if math.isfinite(v) else None


class Partial(NamedTuple):
    """Points of one (shard, tick) from one bundle, with their sort keys."""
    points: np.ndarray   # (m, dim) float64
    slots: np.ndarray    # (m,) int64, -1 = none
    ts: np.ndarray       # (m,) float64, NaN = none
    mids: np.ndarray     # (m,) str, "" = none


def empty_partial(dim: int) -> Partial:
    return Partial(np.zeros((0, dim)), np.zeros(0, np.int64), np.zeros(0), np.array([], dtype=str))


def merge_partials(parts) -> Partial:
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
    return Partial(np.ascontiguousarray(pts), slots, ts, mids)
