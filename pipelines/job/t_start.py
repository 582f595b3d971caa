"""``--t_start``: the public time the event-time clock's first tick contains."""
from __future__ import annotations

import math

from pipelines.job.options import OptionError

_LAST_SECOND = 253402300799.0  # 9999-12-31T23:59:59Z
_FIRST_SECOND = -62135596800.0  # 0001-01-01T00:00:00Z


def parse_t_start(value: str, tick_seconds: float) -> int:
    """``--t_start`` → the event-time clock's index of tick 1, ``floor(t / tick_seconds)``.

    ``value`` is a time: ISO 8601 with a time zone (``2026-12-01T10:00:00Z``,
    ``2026-12-01T11:00:00+01:00``) or Unix seconds (``1796119200``, ``1796119200.5``);
    or, explicitly marked, the tick index itself (``tick:179611920``). Raises OptionError."""
    import datetime

    from transforms.ticks import TickClock

    v = str(value).strip()
    if v.lower().startswith("tick:"):
        try:
            index = int(v[5:])
        except ValueError:
            raise OptionError(f"--t_start {value!r}: tick:N needs an integer tick index N") from None
        if not _FIRST_SECOND <= index * tick_seconds <= _LAST_SECOND:
            raise OptionError(f"--t_start {value!r}: tick index {index} of {tick_seconds:g} s would start after "
                              f"the year 9999; give a time instead (ISO 8601 or Unix seconds)")
        return index
    try:
        t = float(v)
    except ValueError:
        t = None
    if t is None:
        try:
            dt = datetime.datetime.fromisoformat(v[:-1] + "+00:00" if v[-1:] in "zZ" else v)
        except ValueError:
            raise OptionError(f"--t_start {value!r} is not a time: give ISO 8601 (2026-12-01T10:00:00Z) or Unix "
                              f"seconds (1796119200), or tick:N for a tick index") from None
        if dt.tzinfo is None:
            raise OptionError(f"--t_start {value!r} has no time zone: add Z for UTC (e.g. "
                              f"{dt.isoformat()}Z) or an offset such as +01:00")
        t = dt.timestamp()
    if not math.isfinite(t):
        raise OptionError(f"--t_start must be a finite time, got {value!r}")
    if not _FIRST_SECOND <= t <= _LAST_SECOND:
        hint = " (milliseconds? give seconds since the epoch)" if t > _LAST_SECOND else ""
        raise OptionError(f"--t_start {value!r} is outside the years 1..9999{hint}")
    return TickClock.t_start_for(t, tick_seconds)
