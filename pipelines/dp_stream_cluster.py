"""The dpstream Beam job: DP streaming k-means / k-median, batch or streaming.

    python -m pipelines.dp_stream_cluster [our options] [Beam pipeline options]

(also the ``dpstream`` console command). Steps, each a labelled composite transform:

    Read (files | Pub/Sub | built-in stream)
    → DedupByMessageId (Pub/Sub; its window from public parameters: dedup_window)
    → ParsePoints (Pub/Sub: a ts past publish time + skew is dead-lettered) ──dead letters──→ WriteDeadLetters
    → BatchIntoTicks (public clock: slot // tick_size, or ts // tick_seconds; a late record is
      admitted by its own publish time against its tick's public deadline)
    → [--semicoreset snap: BicriteriaCenters (one key per (tree, level, bucket shard)) → CenterRegistry (F)]
    → ShardTicks → EpochPlan → RouteByEpoch → per epoch AssignRings → RingMergeReduce → EpochClose
      → ReleaseCoreset → ClusterCoreset (transforms/cluster.py; one release per tick 1..T)
    → WriteReleases (JSON lines | Pub/Sub topic, attributes tick and epoch)

(plus a side branch that logs progress). Our options are split from Beam's
(``run(argv)``); every error in them, and in the input and output paths, exits
with one line saying what to fix, before the pipeline starts. After a batch run
(or when Ctrl-C cancels a streaming one) ``main`` prints the operator summary and
its warnings on stderr (:mod:`pipelines.summary`). The master seed is a secret: it is read from
``--seed_file`` (a local path or any Beam filesystem URL such as gs://…) by the
workers, never passed as an option value, a template parameter or a log line.
Without ``--seed_file`` a local run draws 256 bits of OS entropy into a private
temporary file; a remote runner needs ``--seed_file`` (its workers cannot read
the launcher's temporary files).
"""
from __future__ import annotations

import argparse
import atexit
import logging
import math
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import List, Optional, Tuple

from pipelines import unit_options

LOCAL_DEDUP_BUCKETS = 16  # DedupByMessageId's keys on a local runner (one key per message id elsewhere)
LOCAL_RUNNERS = ("DirectRunner", "BundleBasedDirectRunner", "SwitchingDirectRunner", "FnApiRunner", "PrismRunner")
KNOWN_RUNNERS = LOCAL_RUNNERS + ("DataflowRunner", "FlinkRunner", "SparkRunner", "PortableRunner",
                                 "InteractiveRunner", "TestDataflowRunner", "TestDirectRunner")
BUILTIN_N = 200_000
DEFAULT_SKEW = 5.0  # --max_clock_skew_seconds
DEFAULT_K = 5  # also the built-in stream's number of clusters
DEFAULT_POINT_SHARDS = 8
MAX_RUNS = 10 ** 9
MAX_TOTAL_TICKS = 2 ** 40  # the ticks' keys pack shard and tick into 63 bits

log = logging.getLogger("dpstream")


class OptionError(ValueError):
    """A user error in the job's options: the message says what to fix."""


# --------------------------------------------------------------------------- options

def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="dpstream", allow_abbrev=False,
        description="Differentially private streaming k-means / k-median as an Apache Beam job. "
                    "Options not listed here are passed to Beam (e.g. --runner, --project, --region).")
    g = ap.add_argument_group("input (at most one; none = the built-in public stream)")
    g.add_argument("--input", help="file glob of .npy, .csv or .jsonl files (read in sorted name order)")
    g.add_argument("--input_subscription", help="Pub/Sub subscription projects/P/subscriptions/S (streaming)")
    g.add_argument("--input_topic", help="Pub/Sub topic projects/P/topics/T (streaming; the runner makes its own "
                                         "subscription and misses messages published before the job starts)")
    g.add_argument("--format", choices=("auto", "json", "csv", "numpy"),
                   help="record format: json, csv, numpy, or auto (sniff each line: JSON if it starts with { or "
                        "[, else CSV); default: each file's extension (.jsonl/.json → json, .csv → csv, .npy → "
                        "numpy), auto for Pub/Sub")
    g.add_argument("--csv_header", type=_flag, nargs="?", const=True, default=False, metavar="BOOL",
                   help="skip the first line of every CSV file, a header; it keeps no slot (slot 0 is the first "
                        "data row). --csv_header alone means true")
    g.add_argument("--builtin_n", type=int, default=BUILTIN_N,
                   help=f"points of the built-in stream when no input is given (default {BUILTIN_N})")
    g = ap.add_argument_group("output")
    g.add_argument("--output", help="output directory (local or gs://): <output>/releases.jsonl")
    g.add_argument("--output_topic", help="Pub/Sub topic for releases (one message per tick)")
    g.add_argument("--dead_letter", help="file path or Pub/Sub topic for dead letters "
                                         "(default <output>/dead_letter.jsonl)")
    g = ap.add_argument_group("clustering (public parameters)")
    g.add_argument("--k", type=int, default=DEFAULT_K, help=f"number of centers k (default {DEFAULT_K})")
    g.add_argument("--dim", type=int, help="dimension d of the points (required with an input)")
    g.add_argument("--radius", type=float, help="public radius Λ of the data ball (required with an input); "
                                                "points outside are clipped onto it")
    g.add_argument("--center", help="center of the data ball, d comma-separated numbers (default the origin)")
    g.add_argument("--objective", default="kmeans", choices=("kmeans", "kmedian"),
                   help="the clustering objective: kmeans (sum of squared distances) or kmedian (sum of "
                        "distances) (default kmeans)")
    g.add_argument("--semicoreset", default="tree", choices=("tree", "lloyd", "snap"),
                   help="the DP block semicoreset A: tree (noisy-count/noisy-mean tree), lloyd (DP-Lloyd with "
                        "Theorem 7) or snap (snap-to-center: the paper's baseline, for comparison only) "
                        "(default tree)")
    g = ap.add_argument_group("privacy")
    g.add_argument("--epsilon", type=float, default=1.0, help="total ε of the whole run (default 1)")
    g.add_argument("--delta", type=float, default=1e-6, help="total δ of the whole run (default 1e-6)")
    g.add_argument("--seed_file", help="file holding the secret master seed, ≥ 32 bytes of key material, raw or "
                                       "as hex or base64 text (head -c 32 /dev/urandom > FILE; local path or "
                                       "gs://…); default: OS entropy (local runners only)")
    g.add_argument("--seed_registry", help="where the fingerprints of used seeds are recorded, to refuse a seed "
                                           "reused on other data (default $DPSTREAM_SEED_REGISTRY or "
                                           "~/.dpstream/seed_registry.jsonl; use a gs:// path on Dataflow)")
    g = ap.add_argument_group("clock (public)")
    g.add_argument("--tick_size", type=int, help="records per tick of a file input's position clock "
                                                 "(default 1000)")
    g.add_argument("--tick_seconds", type=float, help="seconds per tick of the event-time clock "
                                                      "(Pub/Sub: default 10; files: uses each record's ts)")
    g.add_argument("--t_start", help="event-time clock: the public time the first tick contains, as ISO 8601 "
                                     "(2026-12-01T10:00:00Z) or Unix seconds (1796119200); tick 1 starts at "
                                     "floor(t / tick_seconds) * tick_seconds. tick:N gives the tick index N "
                                     "itself. Required for timestamped files; Pub/Sub default: the launch time")
    g.add_argument("--horizon_ticks", type=int, help="public horizon T of one run: ticks 1..T release, later records "
                                                     "go to the next run or are dropped (required with an input)")
    g.add_argument("--runs", default="1",
                   help="consecutive runs of T ticks (public): run r holds global ticks r·T+1 .. (r+1)·T with fresh "
                        "mechanisms, noise keys and budget ε — records of different runs are disjoint, so every "
                        "release stays (ε, δ)-DP per record (parallel composition). A months-long stream sets a "
                        "large N or 'unbounded' (Pub/Sub: runs until cancelled; the guarantee does not depend on the number) "
                        "(default 1)")
    g.add_argument("--window_runs", type=int, default=1,
                   help="each release also carries window_centers: the released coresets of the last W closed runs "
                        "and the current one, merged (post-processing, no budget); 0 = all runs (default 1)")
    g.add_argument("--allowed_lateness_seconds", type=float, default=5.0,
                   help="event-time clock: a record is admitted iff its publish time is at most its tick's end "
                        "plus this public delay (default 5)")
    g.add_argument("--max_clock_skew_seconds", type=float, default=DEFAULT_SKEW,
                   help="Pub/Sub: the public bound on how far the publishers', Pub/Sub's and the workers' clocks "
                        "disagree; a record whose \"ts\" is later than its publish time plus this is dead-lettered "
                        "(ts_in_future), and redeliveries are remembered for tick + lateness + 2 s + twice this "
                        f"(default {DEFAULT_SKEW:g})")
    g = ap.add_argument_group("parallelism (public)")
    g.add_argument("--point_shards", type=int, default=DEFAULT_POINT_SHARDS,
                   help="keys the per-point work is spread over (ShardTicks, RouteByEpoch, AssignRings): a record's "
                        f"shard is its slot (or message id) modulo this; no effect on the releases "
                        f"(default {DEFAULT_POINT_SHARDS})")
    g.add_argument("--bucket_shards", type=int, default=1,
                   help="with --semicoreset snap: keys each (tree, level) of BicriteriaCenters is split over, by "
                        "contiguous ranges of its 4k heavy-hitter buckets (1 to 4k); each range draws its noise "
                        "under its own key, so the draws (not their distribution, not the privacy plan) depend "
                        "on it (default 1)")
    g.add_argument("--tick_timer", default="auto", choices=("auto", "batch", "looping"),
                   help="how ShardTicks closes ticks: batch (one timer firing at the horizon's last tick: fastest "
                        "on bounded input), looping (one guarded timer per tick, what a stream uses) or auto "
                        "(looping for Pub/Sub, batch otherwise) (default auto)")
    unit_options.add_options(ap)
    g = ap.add_argument_group("report")
    g.add_argument("--report", action="store_true",
                   help="after a batch run with --output, write centers.json and privacy_plan.md, and the "
                        "NON-PRIVATE evaluation.json and report.png in <output>/non_private/")
    from pipelines.user_options import add_options
    add_options(ap)  # --columns, --delimiter, --ts_unit, --max_dead_letter_fraction, --plan_only, --version
    return ap


def _flag(v: str) -> bool:
    """A boolean option value: true/false, 1/0, yes/no (a Flex Template passes --name=value)."""
    t = str(v).strip().lower()
    if t in ("true", "1", "yes", "on"):
        return True
    if t in ("false", "0", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {v!r}")


@dataclass
class Job:
    source: str                 # "files" | "pubsub" | "builtin"
    input: Optional[str]
    subscription: Optional[str]
    topic: Optional[str]
    fmt: str
    builtin_n: int
    output: Optional[str]
    output_topic: Optional[str]
    dead_letter: str
    k: int
    dim: int
    radius: float
    center: Optional[Tuple[float, ...]]
    objective: str
    semicoreset: str
    epsilon: float
    delta: float
    seed_file: Optional[str]
    seed_registry: Optional[str]
    clock: str                  # "position" | "event_time"
    tick_size: Optional[int]
    tick_seconds: Optional[float]
    t_start: Optional[int]      # the event-time clock's index of tick 1: floor(start time / tick_seconds)
    horizon_ticks: int
    allowed_lateness_seconds: Optional[float]
    streaming: bool
    runner: str
    report: bool
    t_start_given: bool = True  # False: --t_start defaulted to the launch time (Pub/Sub)
    csv_header: bool = False
    files: Optional[list] = None  # file input: the FileSpecs checked at launch (path, slot offset, format, header)
    n_slots: Optional[int] = None  # file input: the records (slots) the files hold — public under replace-one
    notes: Optional[list] = None  # launch-time hints for the operator
    max_clock_skew_seconds: float = DEFAULT_SKEW  # Pub/Sub: payload ts vs publish time, and clocks vs each other
    point_shards: int = DEFAULT_POINT_SHARDS  # keys of the per-point stages (public; releases do not depend on it)
    bucket_shards: int = 1  # keys per (tree, level) of BicriteriaCenters (public; part of the engine's config)
    tick_timer: str = "batch"  # "batch" (one firing) | "looping" (one per tick; streaming)
    runs: Optional[int] = 1  # consecutive runs of horizon_ticks ticks each (public); None: unbounded
    window_runs: int = 1  # closed runs merged into each release's window_centers (0: all)
    columns: Optional[tuple] = None  # --columns: names or indexes (pipelines.formats)
    csv_columns: Optional[tuple] = None  # --columns resolved to CSV field indexes at launch
    csv_id_column: Optional[int] = None  # --privacy_id_field resolved to a CSV field index at launch
    delimiter: str = ","
    ts_unit: str = "s"
    max_dead_letter_fraction: float = 0.5  # pipelines.exit_codes
    plan_only: bool = False
    unit: Optional[dict] = None  # the privacy unit and its bounds (pipelines.unit_options); None: one record

    @property
    def local(self) -> bool:
        """Runs on a local runner (where the local-runner workarounds apply)."""
        return self.runner.split(".")[-1] in LOCAL_RUNNERS

    @property
    def total_ticks(self) -> Optional[int]:
        """Ticks of the whole job: runs × T (the clock's horizon); None with unbounded runs."""
        return None if self.runs is None else self.runs * self.horizon_ticks

    @property
    def releases_path(self) -> Optional[str]:
        return None if self.output is None else _join(self.output, "releases.jsonl")


def _join(base: str, name: str) -> str:
    return base.rstrip("/") + "/" + name


def _beam_parser() -> argparse.ArgumentParser:
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


def parse_args(argv: Optional[List[str]]) -> Tuple[Job, List[str]]:
    """Our options → a validated :class:`Job`; Beam's → a list. Raises OptionError."""
    ap = build_parser()
    ns, rest = ap.parse_known_args(argv)
    from pipelines import user_options
    try:
        user_options.prepare(ns)
        unit_options.prepare(ns)
    except ValueError as e:
        raise OptionError(str(e)) from None
    bns, unknown = _beam_parser().parse_known_args(rest)
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

    inputs = [n for n in ("input", "input_subscription", "input_topic") if getattr(ns, n)]
    if len(inputs) > 1:
        raise OptionError(f"give at most one of --input, --input_subscription, --input_topic (got "
                          f"{', '.join('--' + n for n in inputs)})")
    source = "builtin" if not inputs else ("files" if inputs[0] == "input" else "pubsub")
    if not ns.output and not ns.output_topic:
        raise OptionError("give --output (a directory) or --output_topic (a Pub/Sub topic) for the releases")
    if ns.output and ns.output_topic:
        raise OptionError("give one of --output and --output_topic, not both")
    if ns.output_topic and not _topic_ok(ns.output_topic):
        raise OptionError(f"--output_topic must look like projects/P/topics/T, got {ns.output_topic!r}")
    if ns.input_topic and not _topic_ok(ns.input_topic):
        raise OptionError(f"--input_topic must look like projects/P/topics/T, got {ns.input_topic!r}")
    if ns.input_subscription and not (ns.input_subscription.startswith("projects/")
                                      and "/subscriptions/" in ns.input_subscription):
        raise OptionError(f"--input_subscription must look like projects/P/subscriptions/S, got "
                          f"{ns.input_subscription!r}")
    dead = ns.dead_letter or (_join(ns.output, "dead_letter.jsonl") if ns.output else None)
    if dead is None:
        raise OptionError("give --dead_letter (a file path or a Pub/Sub topic): records that fail to parse are "
                          "never dropped silently")

    if source == "builtin":
        if ns.builtin_n < 1:
            raise OptionError(f"--builtin_n must be >= 1, got {ns.builtin_n}")
        from dpstream.datasets import default_stream
        info = default_stream(1)[2]
        k = ns.k
        dim = ns.dim if ns.dim is not None else 2
        radius = ns.radius if ns.radius is not None else info["radius"]
        if dim != 2:
            raise OptionError("the built-in stream is 2-dimensional: drop --dim or give --input")
    else:
        for name in ("dim", "radius"):
            if getattr(ns, name) is None:
                what = {"dim": "the dimension d of the points",
                        "radius": "the public radius Λ of the data ball (fixed before seeing data; points "
                                  "outside are clipped)"}[name]
                raise OptionError(f"missing --{name}: {what}")
        k = ns.k
        dim, radius = ns.dim, ns.radius

    streaming = source == "pubsub"
    if ns.tick_size is not None and ns.tick_seconds is not None:
        raise OptionError("give one of --tick_size (position clock) and --tick_seconds (event-time clock)")
    if streaming and ns.tick_size is not None:
        raise OptionError("--tick_size is the position clock of a bounded input; a Pub/Sub stream uses "
                          "--tick_seconds (event time)")
    clock = "event_time" if (streaming or ns.tick_seconds is not None) else "position"
    tick_size = tick_seconds = t_start = None
    if clock == "position":
        tick_size = ns.tick_size if ns.tick_size is not None else 1000
        if tick_size < 1:
            raise OptionError(f"--tick_size must be >= 1, got {tick_size}")
        if ns.t_start is not None:
            raise OptionError("--t_start belongs to the event-time clock (--tick_seconds)")
    else:
        tick_seconds = ns.tick_seconds if ns.tick_seconds is not None else 10.0
        if not (math.isfinite(tick_seconds) and tick_seconds > 0):
            raise OptionError(f"--tick_seconds must be > 0, got {tick_seconds}")
        if source == "builtin":
            raise OptionError("the built-in stream has no timestamps: drop --tick_seconds (it uses --tick_size, "
                              "a position clock)")
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

    center = None
    if ns.center is not None:
        try:
            center = tuple(float(v) for v in ns.center.split(","))
        except ValueError:
            raise OptionError(f"--center must be {dim} comma-separated numbers, got {ns.center!r}") from None
        if len(center) != dim:
            raise OptionError(f"--center has {len(center)} numbers; --dim is {dim}")

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
    if not 1 <= ns.point_shards <= 4096:
        raise OptionError(f"--point_shards must be an integer in [1, 4096], got {ns.point_shards}")
    if ns.bucket_shards != 1 and ns.semicoreset != "snap":
        raise OptionError("--bucket_shards splits the BicriteriaCenters stage, which runs only with --semicoreset "
                          "snap: drop --bucket_shards or add --semicoreset snap")
    if k >= 1 and not 1 <= ns.bucket_shards <= 4 * k:  # a bad --k gets the engine's message below
        raise OptionError(f"--bucket_shards must be an integer in [1, 4·k = {4 * k}] (each shard holds at least one "
                          f"of the 4k heavy-hitter buckets), got {ns.bucket_shards}")
    if streaming and workers > 1:
        raise OptionError("a Pub/Sub job runs on the single-process BundleBasedDirectRunner locally: drop "
                          "--direct_num_workers (several workers: Dataflow or Flink)")
    if ns.report and (streaming or not ns.output or "://" in ns.output):
        raise OptionError("--report needs a batch run with a local --output directory")

    job = Job(source=source, input=ns.input, subscription=ns.input_subscription, topic=ns.input_topic,
              fmt=ns.format, builtin_n=ns.builtin_n, output=ns.output, output_topic=ns.output_topic,
              dead_letter=dead, k=k, dim=dim, radius=radius, center=center, objective=ns.objective,
              semicoreset=ns.semicoreset, epsilon=ns.epsilon, delta=ns.delta, seed_file=ns.seed_file,
              seed_registry=ns.seed_registry,
              clock=clock, tick_size=tick_size, tick_seconds=tick_seconds, t_start=t_start,
              horizon_ticks=horizon, allowed_lateness_seconds=lateness, streaming=streaming, runner=runner,
              report=ns.report, t_start_given=ns.t_start is not None, runs=n_runs,
              window_runs=int(ns.window_runs), bucket_shards=int(ns.bucket_shards),
              unit=unit_options.unit_of(ns, clock, ns.format, source, OptionError))
    cfg = engine_config(job)  # validates k, ε, δ, radius … with the engine's own messages
    if job.runs != 1 and cfg.bicriteria:
        raise OptionError("--runs > 1 needs the default ring centers: the bicriteria stages (--semicoreset snap) "
                          "span one run; use --runs 1 or drop --semicoreset snap")
    if clock == "position" and job.total_ticks is not None and job.total_ticks * tick_size > 2 ** 62:
        raise OptionError(f"--runs × --horizon_ticks × --tick_size = {job.total_ticks * tick_size:,} slots: at most "
                          f"2**62; lower --runs")
    if ns.csv_header and source != "files":
        raise OptionError("--csv_header applies to --input files")
    if ns.format is not None and source == "builtin":
        raise OptionError("the built-in stream is numpy arrays: drop --format")
    job.csv_header = bool(ns.csv_header)
    job.point_shards = int(ns.point_shards)
    job.tick_timer = "looping" if (ns.tick_timer == "looping" or (ns.tick_timer == "auto" and streaming)) \
        else "batch"
    if streaming and job.tick_timer == "batch":
        raise OptionError("--tick_timer=batch needs a bounded input: a stream closes its ticks one by one (looping)")
    job.max_clock_skew_seconds = float(skew)
    try:
        user_options.apply(job, ns)
    except ValueError as e:
        raise OptionError(str(e)) from None
    if source == "files" and not job.plan_only:  # --plan_only reads no data, not even file headers
        from pipelines.formats import resolve
        from pipelines.sources import plan_files
        try:
            job.files, job.n_slots, job.notes = plan_files(job.input, job.fmt, job.csv_header)
            resolve(job)
        except ValueError as e:
            raise OptionError(str(e)) from None
        unit_options.check_files(job.unit, job.files, OptionError)
    return job, rest


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


def _topic_ok(t: str) -> bool:
    return t.startswith("projects/") and "/topics/" in t


def engine_config(job: Job):
    """The engine's configuration for a job (the same object the equivalence test builds)."""
    from dpstream.params import EngineConfig

    try:
        return EngineConfig(n_clusters=job.k, dim=job.dim, radius=job.radius, epsilon=job.epsilon,
                            delta=job.delta, horizon_ticks=job.horizon_ticks, runs=job.runs,
                            window_runs=job.window_runs,
                            neighbouring="replace_one" if job.clock == "position" else "add_remove",
                            objective=job.objective, semicoreset=job.semicoreset, center=job.center,
                            bucket_shards=job.bucket_shards, **unit_options.engine_kwargs(job.unit))
    except ValueError as e:
        raise OptionError(str(e)) from None


from pipelines.job_clock import tick_clock  # noqa: E402,F401  (the report's leaf; job_mod.tick_clock)


# --------------------------------------------------------------------------- the graph

def build(p, job: Job, seed_path: str, source=None):
    """Add the job's steps to pipeline ``p``; returns ``{"releases", "dead_letter"}``.

    ``source`` (tests): a PCollection of Records to use instead of the job's input."""
    import apache_beam as beam

    from pipelines.sinks import WriteJsonLines, release_message
    from pipelines.sources import BuiltinStream, ReadFileRecords, ReadPubSubRecords
    from transforms.bicriteria import BicriteriaCenters, CenterRegistry
    from transforms.cluster import ClusterTicks, apply_stages
    from transforms.parse import ParsePoints
    from pipelines.formats import text_options
    from transforms.tick_timer import TickSchedule
    from transforms.dedup import DedupByMessageId
    from pipelines import local_runner
    from transforms.units import BoundContributions, ParsePointsWithId
    from transforms.unit_timers import BoundContributionsOnTime

    local_runner.install(p.runner)  # local runners, measured Beam versions only (pipelines/local_runner)

    cfg = engine_config(job)
    clock = tick_clock(job)
    if source is None and job.source == "files":
        # one read + parse per record format (usually one): each file is parsed as its format says
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
            points = points | "BoundContributions" >> BoundContributions(cfg, job.tick_size)
        elif job.unit is not None:
            points = points | "BoundContributions" >> BoundContributionsOnTime(
                cfg, clock, job.allowed_lateness_seconds, close_delay_seconds(job))
    else:
        if source is not None:
            records = source
        elif job.source == "pubsub":
            records = p | "ReadPubSub" >> ReadPubSubRecords(
                job.subscription, job.topic, id_attribute=None if job.unit is None else job.unit["privacy_unit"])
        else:
            records = p | "BuiltinStream" >> BuiltinStream(job.builtin_n)
        skew = None
        if job.source == "pubsub" or job.streaming:
            ttl, max_age = dedup_window(job)
            # the local runner scans every key with a timer between bundles: hold the ids in a few keys there
            buckets = LOCAL_DEDUP_BUCKETS if job.local else None
            records = records | "DedupByMessageId" >> DedupByMessageId(ttl_seconds=ttl, max_age_seconds=max_age,
                                                                       key_buckets=buckets)
            skew = job.max_clock_skew_seconds
        fmt = job.fmt or ("numpy" if job.source == "builtin" and source is None else "auto")
        if job.unit is None:
            parsed = records | "ParsePoints" >> ParsePoints(job.dim, fmt, batch_arrays=True,
                                                            max_clock_skew_seconds=skew,
                                                            text_options=text_options(job, fmt))
        else:  # (id, point) pairs: the id from the message's attribute, else the JSON key
            parsed = records | "ParsePoints" >> ParsePointsWithId(job.dim, fmt, job.unit["privacy_unit"],
                                                                  max_clock_skew_seconds=skew,
                                                                  text_options=text_options(job, fmt))
        points, dead_letter = parsed.points, parsed.dead_letter
        if job.unit is not None:
            points = points | "BoundContributions" >> BoundContributionsOnTime(
                cfg, clock, job.allowed_lateness_seconds, close_delay_seconds(job))
    ticks = points | "BatchIntoTicks" >> _batch_into_ticks(job)
    mode = "streaming" if job.streaming or job.tick_timer == "looping" else "batch"
    delay = close_delay_seconds(job)
    schedule = TickSchedule(clock, job.total_ticks, mode, delay)
    updates = None
    if cfg.bicriteria:  # the paper's Alg. 2 in its own keyed stages, feeding the epoch plan
        reports = ticks | "BicriteriaCenters" >> BicriteriaCenters(cfg, schedule, seed_path)
        updates = reports | "CenterRegistry" >> CenterRegistry(cfg, seed_path)
    stages = ClusterTicks(cfg, clock, seed_path, mode=mode, close_delay_seconds=delay)
    releases = apply_stages(stages.job, ticks, updates)  # ShardTicks … ClusterCoreset, at the top level
    if job.output_topic:
        releases | "WriteReleases" >> WriteJsonLines(job.output_topic, job.streaming, attributes=release_message)
    else:
        releases | "WriteReleases" >> WriteJsonLines(job.releases_path, job.streaming)
    dead_letter | "WriteDeadLetters" >> WriteJsonLines(job.dead_letter, job.streaming)
    from pipelines.progress import LogProgress
    releases | "Progress" >> LogProgress(job.total_ticks, time.time())  # a side branch: logs only
    return {"releases": releases, "dead_letter": dead_letter}


def plan_files_or_fail(job: Job):
    from pipelines.sources import plan_files
    try:
        return plan_files(job.input, job.fmt, job.csv_header)[0]
    except ValueError as e:
        raise OptionError(str(e)) from None


PANE_SECONDS = 1  # BatchIntoTicks' processing-time pane on a stream


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


def _batch_into_ticks(job: Job):
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


def pipeline_options(job: Job, beam_args: List[str]):
    from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

    args = list(beam_args)
    if not any(a == "--runner" or a.startswith("--runner=") for a in args):
        args.append(f"--runner={job.runner}")
    opts = PipelineOptions(args)
    if job.streaming:
        opts.view_as(StandardOptions).streaming = True
    return opts


def private_seed_file() -> str:
    """OS entropy in a file only this user can read, removed at exit (local runs)."""
    d = tempfile.mkdtemp(prefix="dpstream-seed-")
    path = os.path.join(d, "seed")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(os.urandom(32).hex().encode())
    atexit.register(shutil.rmtree, d, True)
    return path


def run(argv: Optional[List[str]] = None, wait: bool = True):
    """Parse options, build and run the job; returns the Beam ``PipelineResult``.

    A batch run waits for the pipeline to finish (and writes the report with
    ``--report``); a streaming run (Pub/Sub input) returns at once: poll its sinks and
    call ``result.cancel()`` to stop it. ``operator_counts(result)`` gives the job's exact
    counters as a dict (operator telemetry, see :mod:`pipelines.summary`); Beam's own
    ``result.metrics()`` has them too. Errors in the options raise :class:`OptionError`."""
    job, beam_args = parse_args(argv)
    return launch(job, beam_args, wait)


def launch(job: Job, beam_args: List[str], wait: bool = True):
    """Build and run a parsed job (:func:`run` without the parsing). With ``--plan_only`` it prints
    the plan (:mod:`dpstream.planning`) on stdout and returns its text instead of a result."""
    if job.plan_only:
        from dpstream.planning import plan_text
        text = plan_text(engine_config(job), points_per_tick=job.tick_size)
        print(text)
        return text
    import apache_beam as beam

    seed_path = job.seed_file or private_seed_file()
    if job.seed_file:
        from dpstream.noise import fingerprint
        from pipelines.seed_registry import SeedReused, check_and_record, run_identity
        from transforms.cluster import load_seed
        try:
            seed = load_seed(job.seed_file)  # fail at launch, not on a worker
        except (OSError, ValueError) as e:
            raise OptionError(f"--seed_file: {e}") from None
        try:
            check_and_record(fingerprint(seed), run_identity(job, engine_config(job)), job.streaming,
                             job.seed_registry)
        except SeedReused as e:
            raise OptionError(str(e)) from None
        del seed
    check_outputs(job)
    opts = pipeline_options(job, beam_args)
    p = beam.Pipeline(options=opts)
    build(p, job, seed_path)
    log.info("dpstream: %s input, %s clock, T=%d ticks × %s run(s), k=%d, d=%d, epsilon=%g, delta=%g, runner %s",
             job.source, job.clock, job.horizon_ticks, "unbounded" if job.runs is None else job.runs, job.k,
             job.dim, job.epsilon, job.delta, job.runner)
    for note in job.notes or []:
        warn(note)
    if job.clock == "position" and job.n_slots is not None and job.total_ticks is not None \
            and job.n_slots > job.total_ticks * job.tick_size:
        from pipelines.summary import horizon_options
        cap = job.total_ticks * job.tick_size
        warn(f"the input holds {job.n_slots:,} records but {horizon_options(job)} × --tick_size "
             f"{job.tick_size} = {cap:,} slots: the records from slot {cap:,} on will be dropped (the slot count "
             f"is public: ceil({job.n_slots:,} / {job.tick_size}) = {math.ceil(job.n_slots / job.tick_size)} ticks "
             f"would hold them all)")
    if job.clock == "event_time":
        from pipelines.summary import horizon_span
        log.info("dpstream: event-time horizon: ticks 1..%s of %g s span %s%s",
                 "∞" if job.total_ticks is None else job.total_ticks,
                 job.tick_seconds, horizon_span(job), "" if job.t_start_given else " (from the launch time)")
    tmp = tempfile.mkdtemp(prefix="dpstream-beam-")
    atexit.register(shutil.rmtree, tmp, True)  # also after Ctrl-C
    result = _run_with_tempdir(p, tmp)
    if wait and not job.streaming:
        result.wait_until_finish()
        shutil.rmtree(tmp, ignore_errors=True)
        if job.report:
            from pipelines.report import write_report
            write_report(job)
    else:
        atexit.register(shutil.rmtree, tmp, True)
    return result


def _run_with_tempdir(p, tmp: str):
    """``p.run()`` with the process's temporary directory pointed at ``tmp`` (removed by the caller):
    the DirectRunner first tries the Prism runner, whose job server leaves an empty
    ``beam-temp*`` folder in the temporary directory when its binary cannot be fetched."""
    old = tempfile.tempdir
    tempfile.tempdir = tmp
    try:
        return p.run()
    finally:
        tempfile.tempdir = old


OUTPUT_FILES = ("releases.jsonl", "dead_letter.jsonl")
REPORT_FILES = ("centers.json", "privacy_plan.md", "non_private/evaluation.json", "non_private/report.png")


def _local(path: Optional[str]) -> bool:
    return bool(path) and "://" not in path and not path.startswith("projects/")


def _check_dir(path: str, subject: str) -> None:
    """Create the directory ``path`` if needed and check this process can write in it (and make a
    folder in it, as Beam's file sinks do); one-line OptionError about ``subject`` otherwise."""
    fix = "choose a path you can write"
    if os.path.exists(path) and not os.path.isdir(path):
        raise OptionError(f"cannot write {subject}: {path} is a file, not a directory; {fix}")
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        why = "a part of the path is a file" if isinstance(e, (NotADirectoryError, FileExistsError)) \
            else (e.strerror or str(e))
        raise OptionError(f"cannot write {subject}: cannot create {path}: {why}; {fix}") from None
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".dpstream-probe-", dir=path))
    except OSError as e:
        raise OptionError(f"cannot write {subject}: {path}: {e.strerror or e}; {fix}") from None


def check_outputs(job: Job) -> None:
    """Check (and create) the local output places before the pipeline starts, so a bad path fails
    with one line instead of a Beam traceback; say which files a re-run overwrites."""
    if _local(job.output):
        _check_dir(job.output, f"--output {job.output}")
        for name in OUTPUT_FILES + REPORT_FILES:
            if os.path.isdir(os.path.join(job.output, name)):
                raise OptionError(f"--output {job.output} holds a directory named {name}, where the job writes a "
                                  f"file: remove it or choose another --output")
    if _local(job.dead_letter):
        if os.path.isdir(job.dead_letter):
            raise OptionError(f"--dead_letter {job.dead_letter} is a directory: give a file path (e.g. "
                              f"{_join(job.dead_letter, 'dead_letter.jsonl')})")
        _check_dir(os.path.dirname(os.path.abspath(job.dead_letter)), f"--dead_letter {job.dead_letter}")
    ours = []
    if _local(job.output):
        ours.append(_join(job.output, "releases.jsonl"))
        if job.report:
            ours += [_join(job.output, n) for n in REPORT_FILES]
    if _local(job.dead_letter):
        ours.append(job.dead_letter)
    again = [f for f in ours if os.path.exists(f)]
    if again:
        print(f"dpstream: overwriting the files of an earlier run: {', '.join(again)}", file=sys.stderr)
        if job.streaming:  # the streaming file sink appends: start from empty files
            for f in again:
                os.remove(f)
    from pipelines.outputs import check_remote, remove_stale_evaluation
    if _local(job.output):
        remove_stale_evaluation(job.output)  # an earlier run's NON-PRIVATE evaluation describes other releases
    elif job.output and "://" in job.output:
        try:
            check_remote(job.output, "--output")
        except ValueError as e:
            raise OptionError(str(e)) from None


_STEP_OPTIONS = {"WriteDeadLetters": "--dead_letter", "WriteReleases": "--output / --output_topic",
                 "ReadFiles": "--input", "ReadPubSub": "--input_subscription / --input_topic"}


def describe_failure(exc: BaseException, job: Optional[Job] = None) -> str:
    """One line for a failure inside the pipeline: what failed, in which step, the option to check."""
    import re

    text = str(exc).strip()
    first = text.splitlines()[0] if text else type(exc).__name__
    m = re.search(r"\[while running '([^']+)'\]", text)
    step = m.group(1) if m else None
    msg = re.sub(r"\s*\[while running '[^']+'\]", "", first).strip()
    if len(msg) > 300:
        msg = msg[:300] + "…"
    out = f"the job failed: {msg}"
    if step:
        top = step.split("/")[0]
        out += f" (in step {top})"
        opt = next((o for k, o in _STEP_OPTIONS.items() if top.startswith(k)), None)
        if opt:
            out += f"; check {opt}"
    return out + "; set DPSTREAM_DEBUG=1 for the full traceback"


class _QuietBeamErrors(logging.Filter):
    """Beam logs a failing step's traceback at ERROR before raising; ``main`` prints one line instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.name.startswith("apache_beam") and record.levelno >= logging.ERROR)


def warn(message: str) -> None:
    """An operator warning on stderr (launch-time checks; the end-of-run summary)."""
    print(f"dpstream: warning: {message}", file=sys.stderr, flush=True)


def operator_counts(result) -> dict:
    """The job's exact ``dpstream`` counters of a finished (or cancelled) run, as a dict:
    ``read``, ``valid``, ``dead_letter``, ``dead_letter_<reason>``, ``outside_horizon``,
    ``no_clock``, ``after_deadline``, ``arrived_after_deadline``, ``after_close``,
    ``redeliveries_dropped``, ``after_dedup_ttl``, ``points_processed``, ``clipped``,
    ``ticks_released``, …  Operator telemetry: never publish them with the releases."""
    from pipelines.summary import operator_counts as _counts
    return _counts(result)


def print_summary(job: Job, result, file=None) -> dict:
    """Print the end-of-run summary and warnings (stderr by default); returns the counts."""
    from pipelines.summary import report
    try:
        counts = operator_counts(result)
    except Exception as e:  # a runner without metrics: say so, never fail the run for it
        print(f"dpstream: no run summary: the runner's metrics are unavailable ({type(e).__name__})",
              file=file or sys.stderr)
        return {}
    for line in report(job, counts):
        print(line, file=file or sys.stderr)
    return counts


def main(argv: Optional[List[str]] = None) -> int:
    """The ``dpstream`` command: exit 0 after a run (with its summary on stderr), 3 after the summary of
    a batch run that is useless (:mod:`pipelines.exit_codes`), 2 with one line on an error in the options
    or in the run (``DPSTREAM_DEBUG=1`` shows Beam's traceback), 130 on Ctrl-C of a batch run (Ctrl-C
    cancels a streaming run, prints its summary and exits 0)."""
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    for noisy in ("apache_beam", "absl"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    # "Deleting 1 existing files in target path matching: ": the job's own line names the files it overwrites
    logging.getLogger("apache_beam.io.filebasedsink").setLevel(logging.ERROR)
    debug = bool(os.environ.get("DPSTREAM_DEBUG"))
    quiet = _QuietBeamErrors()
    handlers = [] if debug else list(logging.getLogger().handlers)
    for h in handlers:
        h.addFilter(quiet)
    job = None
    try:
        job, beam_args = parse_args(argv)
        result = launch(job, beam_args)
        if job.plan_only:
            return 0
        if getattr(result, "state", None) is not None and "RUNNING" in str(result.state):
            try:
                result.wait_until_finish()
            except KeyboardInterrupt:
                print("dpstream: interrupted: cancelling the job (up to ~30 s while the Pub/Sub reader's "
                      "pending pull returns)", file=sys.stderr, flush=True)
                result.cancel()
    except OptionError as e:
        print(f"dpstream: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        from pipelines.outputs import remove_beam_temp
        if job is not None:
            remove_beam_temp(job)  # the file sinks' half-written folders
        print("dpstream: interrupted", file=sys.stderr)
        return 130
    except Exception as e:
        if debug:
            raise
        print(f"dpstream: error: {describe_failure(e, job)}", file=sys.stderr)
        return 2
    finally:
        for h in handlers:
            h.removeFilter(quiet)
    from pipelines.exit_codes import EXIT_OK, EXIT_USELESS, useless_reason
    why = useless_reason(job, print_summary(job, result))
    if why:
        print(f"dpstream: exit {EXIT_USELESS}: the run is useless: {why}", file=sys.stderr)
        return EXIT_USELESS
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
