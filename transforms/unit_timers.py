"""Contribution bounding on the event-time clock (streams): keyed state per (run, unit), decided per tick
by an event-time timer at the tick's public admission deadline.

On a stream a unit's records of tick k keep arriving until k's deadline ``D_k = tick_end(k) +
allowed_lateness`` (``BatchIntoTicks`` admits a record iff its own publish time is at most ``D_k``), so
the rule that picks a unit's first ℓ records of a tick (or their mean) cannot run before then. This
stage buffers each (run, unit) key's admitted records in its own state, with one watermark timer armed
at the decision time of its earliest pending tick, ``D_k`` rounded up to the next whole millisecond
(strictly after every admissible publish time, and a time the runners keep exactly). When it fires,
the key's ticks up to k are decided in tick order, each from the unit's own records and the public
bounds only — :func:`dpstream.contributions.unit_keep` on the records in their own total order (a file's slot,
then ts, message id and coordinates: :func:`record_order`), or
:func:`~dpstream.contributions.unit_tick_means` (the mean at its first record's time and id) — and the
run's kept count, in the key's state, caps the run at L. The kept records go on to ``BatchIntoTicks``
unchanged (their own ts and publish time), so they land in their own tick and pass its admission.

Why the downstream tick close still sees them: ``ShardTicks`` closes tick k at ``D_k + 2 panes − 1 ms``
of the watermark, two seconds after this stage's timer for k. In Beam's model a pending timer holds the
stage's output watermark (Dataflow and Flink implement the holds; not measured here), so the records
this timer emits are in ShardTicks' input before its watermark can pass ``D_k``. The local
BundleBasedDirectRunner holds none of its own: :mod:`pipelines.local_runner.holds` adds the hold for
this stage (without it, a watermark step past the two-second margin lost the jumped ticks' records
as ``after_close``; tested). A record of an already-decided
tick that reaches this stage late is dropped and counted (``unit_after_decision``), like ShardTicks'
``after_close``: it never joins a later tick. Records without a tick (no ts, outside the horizon,
published after their deadline) are dropped here and counted under BatchIntoTicks' names, by the same
clock: no record reaches the ticks around the bounds.

State per key: the records of its undecided ticks, the run's kept count and the armed tick. The key
arms a timer at its run's final tick, where its records go; it keeps the three integers for a whole
further run (a record of the run arriving in between finds the run decided and is dropped, instead of
opening a fresh count), then nothing: a key holds at most its last run while the next one runs.
Under event time the neighbouring relation is add/remove of one unit (``EngineConfig.neighbouring``).
"""
from __future__ import annotations

from typing import Any, NamedTuple, Optional, Tuple

import numpy as np

import apache_beam as beam
from apache_beam.coders import PickleCoder
from apache_beam.metrics import Metrics
from apache_beam.transforms import userstate
from apache_beam.transforms.timeutil import TimeDomain
from apache_beam.transforms.window import GlobalWindows
from apache_beam.utils.timestamp import Timestamp

from dpstream.clock import TickClock
from dpstream.contributions import unit_keep, unit_tick_means
from dpstream.params import EngineConfig
from transforms.parse import NAMESPACE, ParsedPoint

class UnitClock(NamedTuple):
    """A (run, unit) key's state besides its buffer: points kept in the run, ticks decided, tick armed."""
    kept: int
    decided: int
    armed: Optional[int]


def decision_micros(clock: TickClock, tick: int, lateness: Optional[float]) -> int:
    """When a unit's records of ``tick`` are decided: its deadline, rounded up to the next whole ms."""
    us = (clock.t_start + int(tick)) * clock.tick_us + int(round((lateness or 0.0) * 1_000_000)) + 1
    return -(-us // 1000) * 1000


def forget_micros(clock: TickClock, tick: int, close_delay: float, horizon_ticks: int = 0) -> int:
    """When a key whose run ended at ``tick`` forgets it: a whole run (``horizon_ticks`` ticks) and a
    second after ShardTicks closes that tick. Until then the key remembers the run is decided, so a
    straggler cannot open a fresh count for it; a record of the run that reaches this stage a whole run
    after the run's last tick closed is long past ShardTicks' own close of its tick (which drops it as
    ``after_close``), whatever the two stages' watermarks lag by, short of a run's length. State stays
    bounded: a key remembers at most its last run while the next one runs."""
    us = (clock.t_start + int(tick) + int(horizon_ticks)) * clock.tick_us + int(round(close_delay * 1_000_000)) \
        + 1_000_000
    return -(-us // 1000) * 1000


def record_order(entry) -> tuple:
    """The order of a unit's records within a tick: position first (a file's slot, public and unique),
    then time, message id and the coordinates — a total order on the unit's own records, whatever order
    they arrive in (bundle boundaries, which other units' records shape, never pick which are kept)."""
    tick, p = entry
    slot = p.slot if p.slot is not None else -1
    return (tick, slot, p.ts, p.message_id or "", tuple(np.asarray(p.point, dtype=float).tolist()))


class _KeyByRunAndUnitFn(beam.DoFn):
    """``(id, point)`` → ``((run, id), (tick, point))``. A record without a tick here (no ts, outside the
    horizon, published after its deadline) is dropped and counted under BatchIntoTicks' own names, by
    the same clock and the same comparisons: nothing reaches the ticks without passing the bounds."""

    def __init__(self, clock: TickClock, horizon_ticks: int, lateness: Optional[float]):
        self.clock, self.T, self.lateness = clock, int(horizon_ticks), lateness

    def setup(self):
        c = lambda name: Metrics.counter(NAMESPACE, name)  # noqa: E731  telemetry, never released
        self._noclock, self._outside, self._late = c("no_clock"), c("outside_horizon"), c("after_deadline")

    def process(self, kv):
        pid, p = kv
        ts = p.ts if isinstance(p.ts, (int, float)) and not isinstance(p.ts, bool) else None
        pub = p.publish_time
        if ts is None or (self.lateness is not None and pub is None):
            self._noclock.inc()
            return
        tick = self.clock.tick_of(None, ts)
        if tick is None:
            self._outside.inc()
            return
        if self.lateness is not None and not pub <= float(self.clock.deadline(tick, self.lateness)):
            self._late.inc()
            return
        yield ((tick - 1) // self.T, pid), (tick, p)


class _BoundUnitOnTimeFn(beam.DoFn):
    STATE = userstate.ReadModifyWriteStateSpec("dpstream_unit_clock", PickleCoder())
    BUFFER = userstate.BagStateSpec("dpstream_unit_buffer", PickleCoder())
    TIMER = userstate.TimerSpec("dpstream_unit_tick", TimeDomain.WATERMARK)

    def __init__(self, cfg: EngineConfig, clock: TickClock, lateness: Optional[float], close_delay: float):
        self.cfg, self.clock, self.lateness, self.close_delay = cfg, clock, lateness, float(close_delay)

    def setup(self):
        c = lambda name: Metrics.counter(NAMESPACE, name)  # noqa: E731  telemetry, never released
        self._dropped, self._late = c("contributions_dropped"), c("unit_after_decision")

    def _time(self, tick: int) -> Timestamp:
        return Timestamp(micros=decision_micros(self.clock, tick, self.lateness))

    def process(self, element, state=beam.DoFn.StateParam(STATE), buf=beam.DoFn.StateParam(BUFFER),
                timer=beam.DoFn.TimerParam(TIMER)):
        (run, _), (tick, p) = element
        st = state.read() or UnitClock(0, run * self.cfg.horizon_ticks, None)
        if tick <= st.decided:  # its tick was decided: never reopened, never moved to a later tick
            self._late.inc()
            return
        buf.add((tick, p))
        if st.armed is None or tick < st.armed:
            st = st._replace(armed=tick)
            timer.set(self._time(tick))
        state.write(st)

    @userstate.on_timer(TIMER)
    def on_tick(self, fired=beam.DoFn.TimestampParam, key=beam.DoFn.KeyParam, state=beam.DoFn.StateParam(STATE),
                buf=beam.DoFn.StateParam(BUFFER), timer=beam.DoFn.TimerParam(TIMER)):
        st = state.read()
        if st is None:
            return
        if st.armed is None:  # the run was decided: forget the key once ShardTicks has closed its last tick
            gc = Timestamp(micros=forget_micros(self.clock, st.decided, self.close_delay, self.cfg.horizon_ticks))
            if fired != gc:
                timer.set(gc)
                return
            state.clear()
            return
        if fired != self._time(st.armed):  # an obsolete firing of a timer that was re-set: restore it
            timer.set(self._time(st.armed))
            return
        upto = st.armed
        run_last = (key[0] + 1) * self.cfg.horizon_ticks
        now, later = [], []
        for tick, p in buf.read():
            (now if tick <= upto else later).append((tick, p))
        buf.clear()
        for entry in later:
            buf.add(entry)
        kept = st.kept
        if now:
            # the unit's own records of the decided ticks, in a total order of their own (record_order):
            # nothing else is read, and the order they arrived in does not matter
            now.sort(key=record_order)
            ticks = np.fromiter((t for t, _ in now), dtype=np.int64, count=len(now))
            pts = [p for _, p in now]
            cfg = self.cfg
            room = max(cfg.max_contributions - kept, 0)
            if cfg.contribution == "tick_mean" and room == 0:
                self._dropped.inc(len(pts))
            elif cfg.contribution == "tick_mean":
                means, first = unit_tick_means(np.stack([p.point for p in pts]), ticks, room, cfg)
                self._dropped.inc(len(pts) - len(first))
                kept += len(first)
                for m, i in zip(means, first.tolist()):
                    q = pts[i]
                    yield ParsedPoint(m, q.slot, q.ts, q.message_id, q.publish_time)
            else:
                keep = unit_keep(ticks, cfg.max_contributions, cfg.per_tick_bound, kept)
                self._dropped.inc(int((~keep).sum()))
                kept += int(keep.sum())
                for i in np.flatnonzero(keep).tolist():
                    yield pts[i]
        if upto >= run_last:  # the run is decided for this key: its records go, its state a little later
            buf.clear()
            state.write(UnitClock(kept, run_last, None))
            timer.set(Timestamp(micros=forget_micros(self.clock, run_last, self.close_delay,
                                                     self.cfg.horizon_ticks)))
            return
        nxt = min((t for t, _ in later), default=run_last)
        state.write(UnitClock(kept, upto, nxt))
        timer.set(self._time(nxt))


class BoundContributionsOnTime(beam.PTransform):
    """``(privacy id, ParsedPoint)`` on the event-time clock → the ParsedPoints the unit's bounds keep,
    decided at each tick's deadline (module docstring)."""

    def __init__(self, cfg: EngineConfig, clock: TickClock, allowed_lateness_seconds: Optional[float],
                 close_delay_seconds: float = 0.0, label: Optional[str] = None):
        super().__init__(label)
        if cfg.max_contributions is None:
            raise ValueError("BoundContributionsOnTime needs max_contributions")
        if clock.clock != "event_time":
            raise ValueError("BoundContributionsOnTime is for the event-time clock (the position clock: "
                             "transforms.units.BoundContributions)")
        self.cfg, self.clock, self.lateness = cfg, clock, allowed_lateness_seconds
        self.close_delay = float(close_delay_seconds)

    def expand(self, pcoll):
        return (pcoll
                | "KeyByRunAndUnit" >> beam.ParDo(_KeyByRunAndUnitFn(self.clock, self.cfg.horizon_ticks, self.lateness))
                .with_output_types(Tuple[Tuple[int, Any], Any])
                | "UnitWindow" >> beam.WindowInto(GlobalWindows())
                | "BoundUnitOnTime" >> beam.ParDo(_BoundUnitOnTimeFn(self.cfg, self.clock, self.lateness,
                                                                     self.close_delay)))
