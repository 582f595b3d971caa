"""The end-of-run operator summary and its warnings.

After a batch run (and when a streaming run is cancelled) ``dpstream`` prints, on
stderr, what happened to the records: read, valid, dead-lettered by reason, outside
the horizon, late, clipped, clustered. The numbers are the Beam ``Metrics`` counters
of namespace ``dpstream`` (:mod:`transforms.parse`, :mod:`transforms.ticks`,
:mod:`transforms.cluster`): **exact counts, operator telemetry**. They never enter a
release or the release files (``releases.jsonl``, ``centers.json``,
``privacy_plan.md``); keep the summary where only the operator reads it.

A warning names the option to check when a run did nothing useful: no record reached
the clusterer, most records were dead-lettered, fell outside the horizon, had no
clock field, came late, or were clipped onto the ball. ``docs/choosing-parameters.md``
says what each warning means.

From Python::

    result = run(argv)                 # the Beam PipelineResult
    counts = operator_counts(result)   # {"read": …, "valid": …, "clipped": …}
    job, _ = parse_args(argv)
    for line in summary_lines(job, counts) + run_warnings(job, counts): print(line)
"""
from __future__ import annotations

import datetime
import json
import os
from typing import Dict, List, Optional

from transforms.parse import NAMESPACE, REASONS

# Every counter the job keeps: operator_counts lists them all, 0 when nothing happened
COUNTERS = ("read", "valid", "dead_letter") + tuple("dead_letter_" + r for r in REASONS) + (
    "ticked", "outside_horizon", "no_clock", "after_deadline", "arrived_after_deadline", "after_close",
    "redeliveries_dropped", "after_dedup_ttl", "points_processed", "clipped", "ticks_released")

# What a dead-letter reason usually means, and the option to check.
_REASON_HINTS = {
    "wrong_dimension": "the records do not have --dim values each: check --dim (and --format)",
    "malformed_json": "the records are not JSON: check --format and the file extension "
                      "(.jsonl = one JSON object per line, .csv = comma-separated numbers)",
    "not_object": 'the records are JSON but not objects {"x": [...]}: check --format',
    "missing_x": 'the JSON records have no "x" field: write each point as {"x": [x_1, ..., x_d]}',
    "wrong_type": 'the JSON "x" fields are not lists of numbers',
    "non_numeric": "fields that are not numbers: check --format, and --csv_header if the CSV files "
                   "start with a header line",
    "nan_or_inf": "coordinates that are NaN or infinite: clean them upstream",
    "not_utf8": "records that are not UTF-8 text: check --format (.npy files are binary)",
    "unsupported_type": "records of a type the parser cannot read: check --format against the files",
    "empty": "blank records",
    "bad_ts": 'a "ts" field that is not a number of seconds since the epoch',
    "ts_in_future": 'a "ts" later than the message\'s publish time plus --max_clock_skew_seconds: check the '
                    "publishers' clocks (ts in seconds, not milliseconds) and --max_clock_skew_seconds",
    "bad_slot": "records without a valid position (a bug in the source: please report it)",
    "wrong_shape": ".npy arrays that are not 2-D (n, d): save one row per point",
    "internal_error": "a parser error (please report it, with the dead letter's detail)",
}


def operator_counts(result) -> Dict[str, int]:
    """The job's ``dpstream`` counters summed over steps, ``{name: count}`` (committed values,
    attempted where the runner commits none). Exact counts: operator telemetry, never a release."""
    from apache_beam.metrics.metric import MetricsFilter

    out: Dict[str, int] = dict.fromkeys(COUNTERS, 0)  # every counter, zeros included
    for c in result.metrics().query(MetricsFilter().with_namespace(NAMESPACE))["counters"]:
        v = c.committed if c.committed is not None else c.attempted
        out[c.key.metric.name] = out.get(c.key.metric.name, 0) + int(v or 0)
    return out


def _n(x: int) -> str:
    return f"{x:,}"


def _pct(a: int, b: int) -> str:
    return f"{100.0 * a / b:.0f}%" if b else "-"


def iso(seconds: float) -> str:
    """Seconds since the epoch as ISO 8601 UTC (``2026-12-01T10:00:00Z``)."""
    try:
        dt = datetime.datetime.fromtimestamp(seconds, tz=datetime.timezone.utc)
    except (OverflowError, OSError, ValueError):
        return f"{seconds:g} s"
    s = dt.isoformat().replace("+00:00", "Z")
    return s.replace(".000000Z", "Z")


def horizon_span(job) -> str:
    """The event-time clock's public horizon as a time span, for messages."""
    start = job.t_start * job.tick_seconds
    if job.total_ticks is None:  # unbounded runs
        return f"[{iso(start)}, ∞)"
    end = (job.t_start + job.total_ticks) * job.tick_seconds
    return f"[{iso(start)}, {iso(end)})"


def horizon_options(job) -> str:
    """The options that set the horizon, for messages: '--horizon_ticks T' (and '× --runs N')."""
    return f"--horizon_ticks {job.horizon_ticks}" + (f" × --runs {job.runs}" if job.runs != 1 else "")


def _late(c: Dict[str, int]) -> int:
    return c.get("after_deadline", 0) + c.get("after_close", 0) + c.get("after_dedup_ttl", 0)


def summary_lines(job, c: Dict[str, int]) -> List[str]:
    """The summary table (lines for stderr)."""
    read, valid, dead = c.get("read", 0), c.get("valid", 0), c.get("dead_letter", 0)
    reasons = sorted(((c.get("dead_letter_" + r, 0), r) for r in REASONS if c.get("dead_letter_" + r, 0)),
                     reverse=True)
    by_reason = ", ".join(f"{r} {_n(n)}" for n, r in reasons)
    processed, clipped = c.get("points_processed", 0), c.get("clipped", 0)
    rows = [
        ("records read", read, ""),
        ("valid", valid, ""),
        ("dead-lettered", dead, f"({by_reason})" if by_reason else ""),
        ("outside the horizon", c.get("outside_horizon", 0), f"(not in ticks 1..{job.total_ticks or '∞'})"),
    ]
    if job.clock == "event_time":
        rows.append(("without a timestamp", c.get("no_clock", 0), ""))
    if job.streaming:
        stale = c.get("after_dedup_ttl", 0)
        rows.append(("late", _late(c), f"(published after the deadline {_n(c.get('after_deadline', 0))}, "
                                       f"delivered after the tick closed {_n(c.get('after_close', 0))}"
                                       + (f", delivered after the dedup ttl {_n(stale)}" if stale else "") + ")"))
        if c.get("redeliveries_dropped", 0):
            rows.append(("redeliveries dropped", c["redeliveries_dropped"], ""))
    rows += [
        ("clustered", processed, f"(reached the engine, in {_n(c.get('ticks_released', 0))} ticks released)"),
        ("clipped onto the ball", clipped, f"({_pct(clipped, processed)} of the clustered points)"
         if processed else ""),
    ]
    w = max(len(r[0]) for r in rows)
    out = ["dpstream: run summary (operator telemetry: exact counts, never publish them with the releases)"]
    out += [f"  {name:<{w}}  {_n(v):>12}  {note}".rstrip() for name, v, note in rows]
    if getattr(job, "report", False) and getattr(job, "output", None):
        out.append(f"  the NON-PRIVATE evaluation (operator only, never publish): {job.output.rstrip('/')}/non_private/")
    return out


def _first_dead_letter(job) -> Optional[dict]:
    path = getattr(job, "dead_letter", None)
    if not path or "://" in path or path.startswith("projects/") or not os.path.isfile(path):
        return None
    try:
        with open(path, encoding="utf-8") as fh:
            line = fh.readline()
        return json.loads(line) if line.strip() else None
    except (OSError, ValueError):
        return None


def run_warnings(job, c: Dict[str, int]) -> List[str]:
    """Warnings (lines for stderr), each naming the option to check; [] for a healthy run."""
    out: List[str] = []
    read, valid, dead = c.get("read", 0), c.get("valid", 0), c.get("dead_letter", 0)
    outside, no_clock, late = c.get("outside_horizon", 0), c.get("no_clock", 0), _late(c)
    processed, clipped = c.get("points_processed", 0), c.get("clipped", 0)

    if read == 0:
        where = {"files": "--input", "pubsub": "--input_subscription / --input_topic (is anyone publishing?)",
                 "builtin": "--builtin_n"}[job.source]
        out.append(f"no record was read: check {where}")
    if read and dead * 2 > read:
        reasons = sorted(((c.get("dead_letter_" + r, 0), r) for r in REASONS), reverse=True)
        n_top, top = reasons[0]
        msg = (f"{_n(dead)} of {_n(read)} records ({_pct(dead, read)}) were dead-lettered, most as {top} "
               f"({_n(n_top)}): {_REASON_HINTS.get(top, 'see the dead letters')}")
        first = _first_dead_letter(job)
        if first and first.get("detail"):
            msg += f" (first dead letter: {first['reason']}: {first['detail']})"
        out.append(msg + f"; the dead letters are in {job.dead_letter}")
    if job.clock == "position" and outside:
        cap = job.total_ticks * job.tick_size  # the position clock always has a last tick
        out.append(f"{_n(outside)} records were beyond the horizon and dropped: {horizon_options(job)} × "
                   f"--tick_size {job.tick_size} = {_n(cap)} slots, the input has more; "
                   f"raise --horizon_ticks (or --tick_size) before the run, from the public input size")
    timed = valid - c.get("bad_point", 0)
    if job.clock == "event_time" and outside and outside * 2 > max(1, timed):
        hint = (f"ticks 1..{job.total_ticks or '∞'} of --tick_seconds {job.tick_seconds:g} span {horizon_span(job)}; "
                f"check --t_start (the time your data starts: ISO 8601 like 2026-12-01T10:00:00Z or Unix "
                f"seconds), --tick_seconds and --horizon_ticks; numeric \"ts\" in milliseconds need --ts_unit ms")
        if not getattr(job, "t_start_given", True):
            hint += " (--t_start was not given, so the horizon started at the launch time)"
        out.append(f"{_n(outside)} of {_n(timed)} timestamped records ({_pct(outside, timed)}) fell outside the "
                   f"horizon and were dropped: {hint}")
    if job.clock == "event_time" and no_clock and no_clock * 2 > max(1, timed):
        out.append(f"{_n(no_clock)} records had no timestamp, but --tick_seconds makes the clock event time: "
                   f'give each JSON record a numeric "ts" (seconds since the epoch), or use --tick_size '
                   f"(a position clock) for files without timestamps")
    if job.streaming and late and late * 2 > max(1, timed):
        out.append(f"{_n(late)} records ({_pct(late, timed)}) came after their tick's public deadline (published "
                   f"after it, or delivered after the tick closed) and were dropped: raise "
                   f"--allowed_lateness_seconds, or publish closer to real time")
    if processed and clipped * 2 > processed:
        center = "the origin" if job.center is None else "(" + ", ".join(f"{v:g}" for v in job.center) + ")"
        out.append(f"{_n(clipped)} of {_n(processed)} clustered points ({_pct(clipped, processed)}) lay outside "
                   f"the ball of --radius {job.radius:g} around {center} and were clipped onto its boundary: "
                   f"check --radius and --center ({clip_hint(job.dim)}, see docs/choosing-parameters.md)")
    if read and processed == 0:
        out.append("no record reached the clusterer: every release holds noise only (see the warnings above)"
                   if out else "no record reached the clusterer: every release holds noise only")
    return ["dpstream: warning: " + w for w in out]


def clip_hint(dim: int) -> str:
    """What usually sets the ball, for data of this dimension."""
    if dim == 2:
        return "GPS (lat, lon) data needs --center at your region and --radius in degrees"
    if dim >= 32:
        return ("embeddings: unit-normalised vectors need --radius 1; otherwise the largest norm your model "
                "can produce")
    return "the ball must hold your points' possible range, fixed from domain knowledge"


def report(job, counts: Dict[str, int]) -> List[str]:
    """Summary then warnings."""
    return summary_lines(job, counts) + run_warnings(job, counts)
