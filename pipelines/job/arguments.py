"""The command line → a validated, frozen :class:`~pipelines.job.description.Job` and Beam's own arguments.

Every error raises :class:`~pipelines.job.options.OptionError` with one line saying what to fix, before
anything runs. The checks run in a fixed order (the runner, the input and output, the shape of the points,
the clock, the horizon and runs, the parallelism, the engine's own parameters, the reading options, the
input files), so a command line with several mistakes always names the same one first.
"""
from __future__ import annotations

import argparse
import dataclasses
import math
import time
from types import SimpleNamespace
from typing import List, Optional, Tuple

from pipelines import unit_options, user_options
from pipelines.job.description import IN_PROCESS_RUNNERS, KNOWN_RUNNERS, LOCAL_RUNNERS, Job, join, make_config
from pipelines.job.options import DEFAULT_POINT_SHARDS, IN_PROCESS_POINT_SHARDS, OptionError, build_parser

MAX_RUNS = 10 ** 9
MAX_TOTAL_TICKS = 2 ** 40  # the ticks' keys pack shard and tick into 63 bits


def parse_args(argv: Optional[List[str]]) -> Tuple[Job, List[str]]:
    """Our options → a validated :class:`Job`; Beam's → a list. Raises OptionError."""
    ns, rest = build_parser().parse_known_args(argv)
    _or_option_error(user_options.prepare, ns)
    _or_option_error(unit_options.prepare, ns)
    runner, workers = _beam_runner(rest)
    source, dead = _endpoints(ns)
    streaming = source == "pubsub"
    k, dim, radius = _shape(ns, source)
    clock, tick_size, tick_seconds, t_start = _clock(ns, source, streaming)
    horizon, n_runs = _horizon_and_runs(ns, source, clock, tick_size, streaming)
    lateness, skew = _lateness_and_skew(ns, clock, streaming)
    center = _center(ns, dim)
    runner = _runner_and_seed(ns, runner, streaming)
    point_shards = _parallelism(ns, k, streaming, runner, workers)
    if ns.report and (streaming or not ns.output or "://" in ns.output):
        raise OptionError("--report needs a batch run with a local --output directory")
    unit = unit_options.unit_of(ns, clock, ns.format, source, OptionError)
    cfg = make_config(k=k, dim=dim, radius=radius, center=center, objective=ns.objective,
                      semicoreset=ns.semicoreset, epsilon=ns.epsilon, delta=ns.delta, horizon_ticks=horizon,
                      runs=n_runs, window_runs=int(ns.window_runs), bucket_shards=int(ns.bucket_shards),
                      clock=clock, unit=unit, part_fire=ns.part_fire)  # the engine's own messages check them
    if n_runs != 1 and cfg.bicriteria:
        raise OptionError("--runs > 1 needs the default ring centers: the bicriteria stages (--semicoreset snap) "
                          "span one run; use --runs 1 or drop --semicoreset snap")
    total_ticks = None if n_runs is None else n_runs * horizon
    if clock == "position" and total_ticks is not None and total_ticks * tick_size > 2 ** 62:
        raise OptionError(f"--runs × --horizon_ticks × --tick_size = {total_ticks * tick_size:,} slots: at most "
                          f"2**62; lower --runs")
    if ns.csv_header and source != "files":
        raise OptionError("--csv_header applies to --input files")
    if ns.format is not None and source == "builtin":
        raise OptionError("the built-in stream is numpy arrays: drop --format")
    if ns.end_at_input_end and (source not in ("files", "builtin") or clock != "position"):
        raise OptionError("--end_at_input_end needs a bounded input on the position clock (files without "
                          "--tick_seconds, or the built-in stream): only there is the input's last tick public")
    tick_timer = "looping" if (ns.tick_timer == "looping" or (ns.tick_timer == "auto" and streaming)) else "batch"
    if streaming and tick_timer == "batch":
        raise OptionError("--tick_timer=batch needs a bounded input: a stream closes its ticks one by one (looping)")
    # the reading options and the input files fill in the rest (pipelines.user_options, pipelines.formats
    # work on a draft); then the job is frozen
    draft = SimpleNamespace(
        source=source, input=ns.input, subscription=ns.input_subscription, topic=ns.input_topic, fmt=ns.format,
        builtin_n=ns.builtin_n, output=ns.output, output_topic=ns.output_topic, dead_letter=dead,
        seed_file=ns.seed_file, seed_registry=ns.seed_registry, clock=clock, tick_size=tick_size,
        tick_seconds=tick_seconds, t_start=t_start, allowed_lateness_seconds=lateness, streaming=streaming,
        runner=runner, report=ns.report, t_start_given=ns.t_start is not None, csv_header=bool(ns.csv_header),
        files=None, n_slots=None, notes=None, max_clock_skew_seconds=float(skew), point_shards=point_shards,
        tick_timer=tick_timer, unit=unit, full_coresets=bool(ns.full_coresets), csv_columns=None, csv_id_column=None,
        dim=dim, end_at_input_end=bool(ns.end_at_input_end))
    _or_option_error(user_options.apply, draft, ns)
    if source == "files" and not draft.plan_only:  # --plan_only reads no data, not even file headers
        _plan_files(draft)
    fields = {f.name: getattr(draft, f.name) for f in dataclasses.fields(Job) if f.name != "cfg"}
    for name in ("files", "notes"):
        fields[name] = None if fields[name] is None else tuple(fields[name])
    return Job(cfg=cfg, **fields), rest


def _or_option_error(fn, *args):
    try:
        return fn(*args)
    except ValueError as e:
        raise OptionError(str(e)) from None


def beam_parser() -> argparse.ArgumentParser:
    """Every option of Beam's ``PipelineOptions`` subclasses, to tell Beam's options from typos."""
    from apache_beam.options.pipeline_options import PipelineOptions

    p = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    seen = set()
    stack = list(PipelineOptions.__subclasses__())
    while stack:
        cls = stack.pop()
        if cls in seen:
            continue
        seen.add(cls)
        stack.extend(cls.__subclasses__())
        try:
            cls._add_argparse_args(p)
        except argparse.ArgumentError:
            pass  # an option two classes both declare
    return p


def _beam_runner(rest: List[str]) -> Tuple[str, int]:
    """Beam's options: all known, a known runner, local workers only where their timers are safe."""
    bns, unknown = beam_parser().parse_known_args(rest)
    if unknown:
        raise OptionError(f"unknown option {unknown[0]!r} (see --help for dpstream's options; other options "
                          f"must be Beam pipeline options)")
    runner = getattr(bns, "runner", None) or ""
    if runner and runner.split(".")[-1] not in KNOWN_RUNNERS:
        raise OptionError(f"unknown runner {runner!r}: use DirectRunner or BundleBasedDirectRunner locally, "
                          f"DataflowRunner, FlinkRunner or SparkRunner at scale")
    workers = getattr(bns, "direct_num_workers", None) or 1
    mode = getattr(bns, "direct_running_mode", None) or "in_memory"
    if workers > 1 and mode != "multi_processing":
        raise OptionError("--direct_num_workers > 1 needs --runner=FnApiRunner --direct_running_mode=multi_processing: "
                          "the DirectRunner's multi_threading mode fires looping tick timers twice or hangs "
                          "(measured, apache-beam 2.77), which would break the tick clock")
    if mode == "multi_threading":
        raise OptionError("--direct_running_mode=multi_threading is refused: it fires looping tick timers twice or "
                          "hangs (measured, apache-beam 2.77); use --runner=FnApiRunner "
                          "--direct_running_mode=multi_processing for several local worker processes")
    if workers > 1 and runner.split(".")[-1] != "FnApiRunner":
        raise OptionError("several local workers need --runner=FnApiRunner named explicitly (with "
                          "--direct_running_mode=multi_processing): under DirectRunner a pipeline with timers may "
                          "be moved to the single-process BundleBasedDirectRunner")
    return runner, workers


def topic_ok(t: str) -> bool:
    return t.startswith("projects/") and "/topics/" in t


def _endpoints(ns) -> Tuple[str, str]:
    """``(source, dead-letter place)``: at most one input, exactly one place for the releases."""
    inputs = [n for n in ("input", "input_subscription", "input_topic") if getattr(ns, n)]
    if len(inputs) > 1:
        raise OptionError(f"give at most one of --input, --input_subscription, --input_topic (got "
                          f"{', '.join('--' + n for n in inputs)})")
    source = "builtin" if not inputs else ("files" if inputs[0] == "input" else "pubsub")
    if not ns.output and not ns.output_topic:
        raise OptionError("give --output (a directory) or --output_topic (a Pub/Sub topic) for the releases")
    if ns.output and ns.output_topic:
        raise OptionError("give one of --output and --output_topic, not both")
    if ns.output_topic and not topic_ok(ns.output_topic):
        raise OptionError(f"--output_topic must look like projects/P/topics/T, got {ns.output_topic!r}")
    if ns.input_topic and not topic_ok(ns.input_topic):
        raise OptionError(f"--input_topic must look like projects/P/topics/T, got {ns.input_topic!r}")
    if ns.input_subscription and not (ns.input_subscription.startswith("projects/")
                                      and "/subscriptions/" in ns.input_subscription):
        raise OptionError(f"--input_subscription must look like projects/P/subscriptions/S, got "
                          f"{ns.input_subscription!r}")
    dead = ns.dead_letter or (join(ns.output, "non_private/dead_letter.jsonl") if ns.output else None)
    if dead is None:
        raise OptionError("give --dead_letter (a file path or a Pub/Sub topic): records that fail to parse are "
                          "never dropped silently")
    return source, dead


def _shape(ns, source: str) -> Tuple[int, int, float]:
    """``(k, d, Λ)``: an input needs --dim and --radius; the built-in stream has its own."""
    if source == "builtin":
        if ns.builtin_n < 1:
            raise OptionError(f"--builtin_n must be >= 1, got {ns.builtin_n}")
        from dpstream.datasets import default_stream
        info = default_stream(1)[2]
        dim = ns.dim if ns.dim is not None else 2
        radius = ns.radius if ns.radius is not None else info["radius"]
        if dim != 2:
            raise OptionError("the built-in stream is 2-dimensional: drop --dim or give --input")
        return ns.k, dim, radius
    for name in ("dim", "radius"):
        if getattr(ns, name) is None:
            what = {"dim": "the dimension d of the points",
                    "radius": "the public radius Λ of the data ball (fixed before seeing data; points "
                              "outside are clipped)"}[name]
            raise OptionError(f"missing --{name}: {what}")
    return ns.k, ns.dim, ns.radius


def _clock(ns, source: str, streaming: bool):
    """``(clock, tick_size, tick_seconds, t_start)`` of the public tick clock."""
    if ns.tick_size is not None and ns.tick_seconds is not None:
        raise OptionError("give one of --tick_size (position clock) and --tick_seconds (event-time clock)")
    if streaming and ns.tick_size is not None:
        raise OptionError("--tick_size is the position clock of a bounded input; a Pub/Sub stream uses "
                          "--tick_seconds (event time)")
    clock = "event_time" if (streaming or ns.tick_seconds is not None) else "position"
    if clock == "position":
        tick_size = ns.tick_size if ns.tick_size is not None else 1000
        if tick_size < 1:
            raise OptionError(f"--tick_size must be >= 1, got {tick_size}")
        if ns.t_start is not None:
            raise OptionError("--t_start belongs to the event-time clock (--tick_seconds)")
        return clock, tick_size, None, None
    tick_seconds = ns.tick_seconds if ns.tick_seconds is not None else 10.0
    if not (math.isfinite(tick_seconds) and tick_seconds > 0):
        raise OptionError(f"--tick_seconds must be > 0, got {tick_seconds}")
    if source == "builtin":
        raise OptionError("the built-in stream has no timestamps: drop --tick_seconds (it uses --tick_size, "
                          "a position clock)")
    from pipelines.job.t_start import parse_t_start
    from transforms.ticks import TickClock
    if ns.t_start is not None:
        t_start = parse_t_start(ns.t_start, tick_seconds)
    elif source == "files":
        raise OptionError("missing --t_start: a timestamped file (--tick_seconds) needs the public time its "
                          "first tick starts, e.g. --t_start 2026-12-01T00:00:00Z (ISO 8601) or Unix seconds: "
                          "when your data starts, fixed without looking at the data (without it the horizon "
                          "would start at the launch time and every record would fall outside it)")
    else:
        t_start = TickClock.t_start_for(time.time(), tick_seconds)
    return clock, None, tick_seconds, t_start


def _horizon_and_runs(ns, source: str, clock: str, tick_size: Optional[int], streaming: bool):
    """``(T, runs)``: public, never derived from the data (the built-in stream's length is public)."""
    if ns.horizon_ticks is not None:
        horizon = ns.horizon_ticks
    elif source == "builtin" and clock == "position":
        horizon = math.ceil(ns.builtin_n / tick_size)  # the built-in stream's length is public
    else:
        raise OptionError("missing --horizon_ticks: the public number of ticks T of the run (every tick 1..T "
                          "releases; it must not be derived from the data)")
    if horizon < 1:
        raise OptionError(f"--horizon_ticks must be >= 1, got {horizon}")
    runs_arg = str(ns.runs).strip().lower()
    if runs_arg == "unbounded":
        if not streaming:
            raise OptionError("--runs unbounded needs a Pub/Sub input (a file or the built-in stream ends): give a "
                              "number of runs")
        n_runs = None
    else:
        try:
            n_runs = int(runs_arg)
        except ValueError:
            raise OptionError(f"--runs must be an integer or 'unbounded', got {ns.runs!r}") from None
        if not 1 <= n_runs <= MAX_RUNS:
            raise OptionError(f"--runs must be an integer in [1, {MAX_RUNS:,}] or 'unbounded', got {ns.runs}")
    if ns.window_runs < 0:
        raise OptionError(f"--window_runs must be >= 0 (0: all runs), got {ns.window_runs}")
    if n_runs is not None and horizon * n_runs > MAX_TOTAL_TICKS:
        raise OptionError(f"--runs × --horizon_ticks = {horizon * n_runs:,} ticks: at most {MAX_TOTAL_TICKS:,} "
                          f"(keys pack the tick with the shard into 63 bits); lower --runs")
    return horizon, n_runs


def _lateness_and_skew(ns, clock: str, streaming: bool):
    lateness = None
    if clock == "event_time":
        lateness = ns.allowed_lateness_seconds
        if not (math.isfinite(lateness) and lateness >= 0):
            raise OptionError(f"--allowed_lateness_seconds must be finite and >= 0, got {lateness}")
        if not streaming:
            lateness = None  # a bounded input: nothing is late
    skew = ns.max_clock_skew_seconds
    if not (math.isfinite(skew) and skew >= 0):
        raise OptionError(f"--max_clock_skew_seconds must be finite and >= 0, got {skew}")
    return lateness, skew


def _center(ns, dim: int):
    if ns.center is None:
        return None
    try:
        center = tuple(float(v) for v in ns.center.split(","))
    except ValueError:
        raise OptionError(f"--center must be {dim} comma-separated numbers, got {ns.center!r}") from None
    if len(center) != dim:
        raise OptionError(f"--center has {len(center)} numbers; --dim is {dim}")
    return center


def _runner_and_seed(ns, runner: str, streaming: bool) -> str:
    """The runner (default: the local one for the input); a remote one needs a seed file and registry."""
    if not runner:
        runner = "BundleBasedDirectRunner" if streaming else "DirectRunner"
    runner_name = runner.split(".")[-1]
    if runner_name not in LOCAL_RUNNERS and not ns.seed_file:
        raise OptionError(f"--seed_file is required with {runner_name}: the workers must read the secret seed "
                          f"from a file they can reach (e.g. gs://…), it is never passed as an option")
    if runner_name not in LOCAL_RUNNERS and not ns.seed_registry:
        raise OptionError(f"--seed_registry is required with {runner_name}: a durable path (e.g. gs://…/"
                          f"seed_registry.jsonl) where used seeds are recorded; the launcher's own disk is "
                          f"thrown away, so a reused seed would go unnoticed")
    return runner


def _parallelism(ns, k: int, streaming: bool, runner: str, workers: int) -> int:
    """Checks the parallelism options; returns the number of point shards."""
    if ns.point_shards is not None and not 1 <= ns.point_shards <= 4096:
        raise OptionError(f"--point_shards must be an integer in [1, 4096], got {ns.point_shards}")
    if ns.bucket_shards != 1 and ns.semicoreset != "snap":
        raise OptionError("--bucket_shards splits the BicriteriaCenters stage, which runs only with --semicoreset "
                          "snap: drop --bucket_shards or add --semicoreset snap")
    if k >= 1 and not 1 <= ns.bucket_shards <= 4 * k:  # a bad --k gets the engine's message later
        raise OptionError(f"--bucket_shards must be an integer in [1, 4·k = {4 * k}] (each shard holds at least one "
                          f"of the 4k heavy-hitter buckets), got {ns.bucket_shards}")
    if streaming and workers > 1:
        raise OptionError("a Pub/Sub job runs on the single-process BundleBasedDirectRunner locally: drop "
                          "--direct_num_workers (several workers: Dataflow or Flink)")
    return int(ns.point_shards) if ns.point_shards is not None else default_point_shards(runner, workers)


def default_point_shards(runner: str, workers: int) -> int:
    """``IN_PROCESS_POINT_SHARDS`` (2) on one in-process worker, else ``DEFAULT_POINT_SHARDS``. The
    releases are the same for every number of shards; only the cost differs. One worker process visits the
    shards' keys one after another on one thread, so each shard adds messages and state per tick: S·I ring
    partials into RingMergeReduce, S messages into RouteByEpoch and EpochPlan (10⁶ × 10, 1,000 ticks: the
    job's CPU 9.3 s with 8 shards, 6.9 s with 1, 6.7 s with 2). Not 1: with the batch timer a shard sends all
    its points as one message, which the runner copies several times at once; two shards halve that
    message (10⁵ × 384 float32: 8.4 s of CPU with 1 shard, 6.7 s with 2, 8.2 s with 8). Where workers run
    keys side by side (Dataflow, Flink, local multi_processing), the shards are what spreads the per-point
    work."""
    if runner.split(".")[-1] in IN_PROCESS_RUNNERS and workers <= 1:
        return IN_PROCESS_POINT_SHARDS
    return DEFAULT_POINT_SHARDS


def _plan_files(draft) -> None:
    """Match the input files, count their records (public slots) and resolve --columns against them."""
    from pipelines.formats import resolve
    from pipelines.job.gcp_extra import is_gcs, require
    from pipelines.sources import plan_files
    if is_gcs(draft.input):
        require(f"--input {draft.input}")  # else Beam's missing gs:// filesystem reads as "matches no file"
    try:
        if draft.columns is not None and isinstance(draft.columns[0], str) and not draft.csv_header:
            # names are read from the CSV header, which then keeps no slot (whatever the glob looks like)
            from pipelines.sources import file_format, match_files
            draft.csv_header = draft.fmt == "csv" or (draft.fmt is None and any(
                file_format(p_) == "csv" for p_ in match_files(draft.input)))
        draft.files, draft.n_slots, draft.notes = plan_files(draft.input, draft.fmt, draft.csv_header)
        resolve(draft)
    except ValueError as e:
        raise OptionError(str(e)) from None
    unit_options.check_files(draft.unit, draft.files, OptionError)
