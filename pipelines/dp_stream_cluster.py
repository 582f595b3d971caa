"""The dpstream Beam job: DP streaming k-means / k-median, batch or streaming.

    python -m pipelines.dp_stream_cluster [our options] [Beam pipeline options]

(also the ``dpstream`` console command). Steps, each a labelled composite transform
(:mod:`pipelines.job.graph`):

    Read (files | Pub/Sub | built-in stream)
    → DedupByMessageId (Pub/Sub; its window from public parameters: dedup_window)
    → ParsePoints (Pub/Sub: a ts past publish time + skew is dead-lettered) ──dead letters──→ WriteDeadLetters
    → BatchIntoTicks (public clock: slot // tick_size, or ts // tick_seconds; a late record is
      admitted by its own publish time against its tick's public deadline)
    → [--semicoreset snap: BicriteriaCenters (one key per (tree, level, bucket shard)) → CenterRegistry (F)]
    → ClusterTicks (transforms/cluster.py: ShardTicks → EpochPlan → RouteByEpoch → per epoch AssignRings
      → RingMergeReduce → EpochClose → ReleaseCoreset → ClusterCoreset; one release per tick 1..T)
    → WriteReleases (JSON lines | Pub/Sub topic, attributes tick and epoch)

(plus a side branch that logs progress). Where each part lives, under ``pipelines/job/``:

    options.py      our options (``--help``); Beam's pass through
    arguments.py    options → a validated, frozen Job (every error: one line saying what to fix)
    description.py  the Job: the engine's EngineConfig and the job's own settings
    graph.py        the steps above
    preflight.py    the output places, checked before the pipeline starts
    launch.py       the secret seed, the runner, the run
    cli.py          ``main``: exit codes, one-line errors, the end-of-run summary

Nothing heavy (Beam, scikit-learn, the accountant) is imported before the options are parsed.
"""
from __future__ import annotations

import sys
from typing import List, Optional

from pipelines.job.arguments import MAX_RUNS, MAX_TOTAL_TICKS, parse_args
from pipelines.job.cli import command, describe_failure, main, operator_counts, print_summary
from pipelines.job.description import KNOWN_RUNNERS, LOCAL_RUNNERS, Job, engine_config
from pipelines.job.graph import (LOCAL_DEDUP_BUCKETS, PANE_SECONDS, batch_into_ticks, build, close_delay_seconds,
                                 dedup_window)
from pipelines.job.launch import launch, pipeline_options, private_seed_file, warn
from pipelines.job.options import (BUILTIN_N, DEFAULT_K, DEFAULT_POINT_SHARDS, DEFAULT_SKEW, IN_PROCESS_POINT_SHARDS,
                                    OptionError, build_parser)
from pipelines.job.preflight import OUTPUT_FILES, REPORT_FILES, check_outputs
from pipelines.job.t_start import parse_t_start
from pipelines.job_clock import tick_clock

__all__ = ["run", "main", "parse_args", "launch", "build", "build_parser", "OptionError", "Job", "engine_config",
           "tick_clock", "operator_counts", "print_summary", "check_outputs", "describe_failure", "warn",
           "close_delay_seconds", "dedup_window", "batch_into_ticks", "pipeline_options", "private_seed_file",
           "parse_t_start", "command",
           "PANE_SECONDS", "LOCAL_DEDUP_BUCKETS", "LOCAL_RUNNERS", "KNOWN_RUNNERS", "BUILTIN_N",
           "DEFAULT_K", "DEFAULT_POINT_SHARDS", "DEFAULT_SKEW", "IN_PROCESS_POINT_SHARDS", "MAX_RUNS", "MAX_TOTAL_TICKS", "OUTPUT_FILES",
           "REPORT_FILES"]


def run(argv: Optional[List[str]] = None, wait: bool = True):
    """Parse options, build and run the job; returns the Beam ``PipelineResult``.

    A batch run waits for the pipeline to finish (and writes the report with
    ``--report``); a streaming run (Pub/Sub input) returns at once: poll its sinks and
    call ``result.cancel()`` to stop it. ``operator_counts(result)`` gives the job's exact
    counters as a dict (operator telemetry, see :mod:`pipelines.summary`); Beam's own
    ``result.metrics()`` has them too. Errors in the options raise :class:`OptionError`."""
    job, beam_args = parse_args(argv)   # our options → a frozen Job; the rest are Beam's
    return launch(job, beam_args, wait)  # seed, pre-flight checks, the graph, the runner


if __name__ == "__main__":
    sys.exit(command())
