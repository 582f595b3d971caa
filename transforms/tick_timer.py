"""The tick timer every stateful dpstream stage shares (the tick contract of docs/beam-graph.md).

``TickSchedule`` says when a stage closes tick k: at ``tick_end(k) + close_delay``
of the watermark (public), set 1 ms early because the FnApiRunner truncates timers to
milliseconds. ``batch`` arms one timer for the horizon's last tick (every buffered
tick is processed in that one firing: Beam's state cache sizes every write, so one
firing instead of T is what was measured fast); ``streaming`` loops one timer
per tick 1, 2, …, T and stops at T — never "at the last tick seen" (P3); with
``horizon_ticks=None`` (runs without end) it goes on.
A firing whose timestamp is not the armed tick's is obsolete (the
BundleBasedDirectRunner delivers such firings): the stage re-arms and returns.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Dict, List, Optional

from apache_beam.utils.timestamp import Timestamp

MODES = ("batch", "streaming")


class TickSchedule:
    def __init__(self, clock, horizon_ticks: int, mode: str, close_delay_seconds: float = 0.0):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        if not close_delay_seconds >= 0:
            raise ValueError(f"close_delay_seconds must be >= 0, got {close_delay_seconds!r}")
        self.t_start = clock.t_start
        self.tick_us = clock.tick_us
        if horizon_ticks is None and mode == "batch":
            raise ValueError("an unbounded horizon (runs without end) needs the streaming (looping) timer")
        self.horizon_ticks = None if horizon_ticks is None else int(horizon_ticks)
        self.mode = mode
        self.close_delay_us = int(round(close_delay_seconds * 1_000_000))

    def close_time(self, tick: int) -> Timestamp:
        end_us = (self.t_start + int(tick)) * self.tick_us + self.close_delay_us
        return Timestamp(micros=end_us - 1000)

    def first_armed(self) -> int:
        return self.horizon_ticks if self.mode == "batch" else 1

    def next_armed(self, upto: int) -> Optional[int]:
        """The tick to arm after ``upto``; None past the horizon (``horizon_ticks=None``: runs without
        end, the looping timer goes on across runs)."""
        if self.horizon_ticks is None:
            return upto + 1
        return upto + 1 if upto < self.horizon_ticks else None


def take_ticks_upto(buf, upto: int) -> Dict[int, List]:
    """Read a bag of ``(tick, item)``, return the items of ticks ≤ ``upto`` by tick, and write back
    only the later ones: a stage's state is read, rebuilt and written once per firing."""
    pending, later = defaultdict(list), []
    for tick, item in buf.read():
        if tick <= upto:
            pending[tick].append(item)
        else:
            later.append((tick, item))
    buf.clear()
    for entry in later:
        buf.add(entry)
    return pending
