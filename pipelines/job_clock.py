"""The job's public tick clock from its description: one function the job's graph and the report's
re-reading of the input both call, so the report assigns every raw point the tick the job did. A leaf
(no import of the job module), so the report does not depend on the job's entry module."""
from __future__ import annotations


def tick_clock(job):
    """The :class:`~dpstream.clock.TickClock` of a parsed job (position or event time, the whole
    horizon of ``runs × T`` ticks, the job's point shards)."""
    from dpstream.clock import TickClock

    if job.clock == "position":
        return TickClock("position", tick_size=job.tick_size, horizon_ticks=job.total_ticks,
                         n_shards=job.point_shards)
    return TickClock("event_time", tick_seconds=job.tick_seconds, t_start=job.t_start,
                     horizon_ticks=job.total_ticks, n_shards=job.point_shards)
