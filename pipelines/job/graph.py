"""The job's graph: read → parse → ticks → cluster → write, each step one labelled composite transform.

    ReadFiles / ReadPubSub → DedupByMessageId / BuiltinStream      (read_points)
      → ParsePoints [→ BoundContributions]   ──dead letters──→ WriteDeadLetters
      → BatchIntoTicks
      → [BicriteriaCenters → CenterRegistry]  (--semicoreset snap: the candidate centers F)
      → ClusterTicks                          (transforms/cluster.py: ShardTicks … ClusterCoreset)
      → WriteReleases                         (+ Progress, a side branch that only logs)

The labels are the step names an operator sees (Beam's UI, the one-line failure message of
:func:`pipelines.job.cli.describe_failure`, the options it points to). Everything here is public: the
keys, windows and timers come from the options only.
"""
from __future__ import annotations

import time
from typing import Tuple

from pipelines.job.description import Job
from pipelines.job.options import OptionError
from pipelines.job_clock import tick_clock

LOCAL_DEDUP_BUCKETS = 16  # DedupByMessageId's keys on a local runner (one key per message id elsewhere)
PANE_SECONDS = 1  # BatchIntoTicks' processing-time pane on a stream


def build(p, job: Job, seed_path: str, source=None):
    """Add the job's steps to pipeline ``p``; returns ``{"releases", "dead_letter"}``.

    ``source`` (tests): a PCollection of Records to use instead of the job's input."""
    from pipelines import local_runner
    from pipelines.progress import LogProgress
    from pipelines.sinks import WriteJsonLines, release_message

    local_runner.install(p.runner)  # local runners, measured Beam versions only (pipelines/local_runner)
    points, dead_letter = read_points(p, job, source)
    ticks = points | "BatchIntoTicks" >> batch_into_ticks(job)
    releases = cluster(ticks, job, seed_path)
    if job.output_topic:
        releases | "WriteReleases" >> WriteJsonLines(job.output_topic, job.streaming, attributes=release_message)
    else:
        releases | "WriteReleases" >> WriteJsonLines(job.releases_path, job.streaming)
    dead_letter | "WriteDeadLetters" >> WriteJsonLines(job.dead_letter, job.streaming)
    releases | "Progress" >> LogProgress(job.end_tick or job.total_ticks, time.time())  # a side branch: logs only
    return {"releases": releases, "dead_letter": dead_letter}


def read_points(p, job: Job, source=None):
    """``(points, dead letters)`` of the job's input: its files (one read and parse per record format,
    usually one), its Pub/Sub stream (deduplicated by message id) or the built-in stream."""
    from pipelines.formats import text_options
    from transforms.parse import ParsePoints

    if source is None and job.source == "files":
        return _read_files(p, job)
    if source is not None:
        records = source
    elif job.source == "pubsub":
        from pipelines.sources import ReadPubSubRecords
        records = p | "ReadPubSub" >> ReadPubSubRecords(
            job.subscription, job.topic, id_attribute=None if job.unit is None else job.unit["privacy_unit"])
    else:
        from pipelines.sources import BuiltinStream
        records = p | "BuiltinStream" >> BuiltinStream(job.builtin_n)
    skew = None
    if job.source == "pubsub" or job.streaming:
        from transforms.dedup import DedupByMessageId
        ttl, max_age = dedup_window(job)
        # the local runner scans every key with a timer between bundles: hold the ids in a few keys there
        buckets = LOCAL_DEDUP_BUCKETS if job.local else None
        records = records | "DedupByMessageId" >> DedupByMessageId(ttl_seconds=ttl, max_age_seconds=max_age,
                                                                   key_buckets=buckets)
        skew = job.max_clock_skew_seconds
    fmt = job.fmt or ("numpy" if job.source == "builtin" and source is None else "auto")
    if job.unit is None:
        parsed = records | "ParsePoints" >> ParsePoints(job.dim, fmt, batch_arrays=True, max_clock_skew_seconds=skew,
                                                        text_options=text_options(job, fmt))
        return parsed.points, parsed.dead_letter
    # (id, point) pairs: the id from the message's attribute, else the JSON key; bounded per (run, unit) as
    # each tick's admission deadline passes
    from transforms.unit_timers import BoundContributionsOnTime
    from transforms.units import ParsePointsWithId
    parsed = records | "ParsePoints" >> ParsePointsWithId(job.dim, fmt, job.unit["privacy_unit"],
                                                          max_clock_skew_seconds=skew,
                                                          text_options=text_options(job, fmt))
    points = parsed.points | "BoundContributions" >> BoundContributionsOnTime(
        job.cfg, tick_clock(job), job.allowed_lateness_seconds, close_delay_seconds(job))
    return points, parsed.dead_letter


def _read_files(p, job: Job):
    import apache_beam as beam

    from pipelines.formats import text_options
    from pipelines.sources import ReadFileRecords
    from transforms.parse import ParsePoints
    from transforms.units import BoundContributions, ParsePointsWithId

    # each file is parsed as its format says
    by_fmt = {}
    for spec in job.files or plan_files_or_fail(job):
        by_fmt.setdefault(spec.fmt, []).append(spec)
    outs = []
    for fmt, specs in sorted(by_fmt.items()):
        sfx = "" if len(by_fmt) == 1 else "_" + fmt
        records = p | ("ReadFiles" + sfx) >> ReadFileRecords(files=specs)
        if job.unit is not None:  # (id, point) pairs, bounded per (run, unit) below
            outs.append(records | ("ParsePoints" + sfx) >> ParsePointsWithId(
                job.dim, fmt, job.unit["privacy_unit"], text_options=text_options(job, fmt),
                csv_index=job.csv_id_column, pack=job.clock == "position"))
            continue
        outs.append(records | ("ParsePoints" + sfx) >> ParsePoints(job.dim, fmt, batch_arrays=True,
                                                                   text_options=text_options(job, fmt)))
    if len(outs) == 1:
        points, dead_letter = outs[0].points, outs[0].dead_letter
    else:
        points = tuple(o.points for o in outs) | "AllPoints" >> beam.Flatten()
        dead_letter = tuple(o.dead_letter for o in outs) | "AllDeadLetters" >> beam.Flatten()
    if job.unit is not None and job.clock == "position":
        points = points | "BoundContributions" >> BoundContributions(job.cfg, job.tick_size)
    elif job.unit is not None:  # timestamped files: the event-time clock
        from transforms.unit_timers import BoundContributionsOnTime
        points = points | "BoundContributions" >> BoundContributionsOnTime(
            job.cfg, tick_clock(job), job.allowed_lateness_seconds, close_delay_seconds(job))
    return points, dead_letter


def cluster(ticks, job: Job, seed_path: str):
    """The clustering of the ticks, one composite (``ClusterTicks``), after the bicriteria's own keyed
    steps (the paper's Alg. 2) when the semicoreset needs them; returns the release dicts."""
    from transforms.bicriteria import BicriteriaCenters, CenterRegistry
    from transforms.cluster import ClusterTicks
    from transforms.tick_timer import TickSchedule

    cfg = job.cfg
    mode = "streaming" if job.streaming or job.tick_timer == "looping" else "batch"
    delay = close_delay_seconds(job)
    clock = tick_clock(job)
    # a file is a release log (a repeated coreset refers to its first tick, a new one names its points by
    # id); a topic's messages stand alone
    stages = ClusterTicks(cfg, clock, seed_path, mode=mode, close_delay_seconds=delay,
                          release_log=not job.output_topic and not job.full_coresets, end_tick=job.end_tick)
    if not cfg.bicriteria:
        return ticks | "ClusterTicks" >> stages
    schedule = TickSchedule(clock, job.end_tick or job.total_ticks, mode, delay)
    reports = ticks | "BicriteriaCenters" >> BicriteriaCenters(cfg, schedule, seed_path)
    updates = reports | "CenterRegistry" >> CenterRegistry(cfg, seed_path)
    return (ticks, updates) | "ClusterTicks" >> stages


def plan_files_or_fail(job: Job):
    from pipelines.sources import plan_files
    try:
        return plan_files(job.input, job.fmt, job.csv_header)[0]
    except ValueError as e:
        raise OptionError(str(e)) from None


def close_delay_seconds(job: Job) -> float:
    """When ClusterTicks closes tick k, after its end (public): on a stream the admission
    deadline plus two panes of BatchIntoTicks, so a record published just before its
    deadline and delivered promptly still reaches the engine before the tick is released
    (one delivered later is dropped there, ``after_close``); 0 in batch."""
    if not job.streaming:
        return 0.0
    return float(job.allowed_lateness_seconds or 0.0) + 2 * PANE_SECONDS


def dedup_window(job: Job) -> Tuple[float, float]:
    """``(ttl_seconds, max_age_seconds)`` of the stream's ``DedupByMessageId``, from public
    parameters only (:func:`transforms.ticks.redelivery_window`): ``max_age = tick_seconds +
    close_delay + skew`` (the latest a message published at P can still enter an open tick is
    ``P + max_age``; ``close_delay = allowed_lateness + 2 panes``) and ``ttl = max_age + skew``,
    so a redelivery after the ttl is past its tick's close and dropped (``after_dedup_ttl``)."""
    from transforms.dedup import redelivery_window

    return redelivery_window(job.tick_seconds, close_delay_seconds(job), job.max_clock_skew_seconds)


def batch_into_ticks(job: Job):
    """The ``BatchIntoTicks`` step of the job's clock (position or event time)."""
    from transforms.ticks import BatchIntoTicks

    if job.clock == "position":
        # the per-unit bounding emits each unit's run, not tick after tick: flush every ~32 MB of points
        # rather than every 65,536, or each flush holds a partial of almost every (shard, tick)
        extra = {} if job.unit is None else {"max_buffer": max(1 << 16, (1 << 22) // job.dim)}
        return BatchIntoTicks("position", tick_size=job.tick_size, horizon_ticks=job.total_ticks,
                              n_shards=job.point_shards, dim=job.dim, keep_order_keys=True, group=False, **extra)
    return BatchIntoTicks("event_time", tick_seconds=job.tick_seconds, t_start=job.t_start,
                          horizon_ticks=job.total_ticks, n_shards=job.point_shards, dim=job.dim,
                          allowed_lateness_seconds=job.allowed_lateness_seconds, pane_seconds=PANE_SECONDS,
                          keep_order_keys=True, group=False)
