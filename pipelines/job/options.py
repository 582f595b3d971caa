"""The job's own options (``dpstream --help``): one argparse parser, its groups in the order the help lists them.

Beam's pipeline options (``--runner``, ``--project``, …) are not declared here: whatever this parser does
not know is handed to Beam (:mod:`pipelines.job.arguments`). Only argparse is imported, so ``--help`` loads
no heavy library. The privacy-unit group is :mod:`pipelines.unit_options`; the reading and judging options
are :mod:`pipelines.user_options`.
"""
from __future__ import annotations

import argparse

from pipelines import unit_options

BUILTIN_N = 200_000
DEFAULT_SKEW = 5.0  # --max_clock_skew_seconds
DEFAULT_K = 5  # also the built-in stream's number of clusters
DEFAULT_POINT_SHARDS = 8  # several worker processes (Dataflow, Flink, local multi_processing)
IN_PROCESS_POINT_SHARDS = 2  # one local worker process (pipelines.job.arguments.default_point_shards says why)


class OptionError(ValueError):
    """A user error in the job's options: the message says what to fix."""


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
    g.add_argument("--csv_header", type=flag, nargs="?", const=True, default=False, metavar="BOOL",
                   help="skip the first line of every CSV file, a header; it keeps no slot (slot 0 is the first "
                        "data row). --csv_header alone means true")
    g.add_argument("--builtin_n", type=int, default=BUILTIN_N,
                   help=f"points of the built-in stream when no input is given (default {BUILTIN_N})")
    g = ap.add_argument_group("output")
    g.add_argument("--output", help="output directory (local or gs://): <output>/releases.jsonl")
    g.add_argument("--output_topic", help="Pub/Sub topic for releases (one message per tick)")
    g.add_argument("--full_coresets", type=flag, nargs="?", const=True, default=False, metavar="BOOL",
                   help="with --output: write every release's coreset in full; by default a release whose coreset "
                        "is the previous tick's refers to it (\"coreset_same_as_tick\") and a new coreset names by "
                        "id the points its run's lines already wrote (\"coreset_ids\", \"coreset_rows\"): "
                        "docs/release-log.md; dpstream.read_releases puts them back. A topic always gets full "
                        "releases. --full_coresets alone means true")
    g.add_argument("--dead_letter", help="file path or Pub/Sub topic for dead letters "
                                         "(default <output>/non_private/dead_letter.jsonl: dead letters hold raw records)")
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
    g.add_argument("--part_fire", type=float, default=None, metavar="C",
                   help="the part sparse vector: a ring's pending points are also released when one of its parts "
                        "(one ring center) holds about C·M/P of them, so that clusters a stream brings one after "
                        "another reach the releases without waiting for a whole block; it takes two thirds of the "
                        "sparse vector's budget (a second line of the privacy plan). 0 turns it off (default: the "
                        "library's, 3.5)")
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
    g.add_argument("--end_at_input_end", type=flag, nargs="?", const=True, default=False, metavar="BOOL",
                   help="a file (or the built-in stream) read with the position clock that ends before the horizon: "
                        "its last tick, ceil(records / tick_size) (public under replace-one), is declared the "
                        "stream's end, as the library's partial_fit(X, last=True): every pending block is released "
                        "there and the job closes no later tick. Without it the ticks after the input's end release "
                        "too, and the points since the last flush reach no release")
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
    g.add_argument("--point_shards", type=int, default=None,
                   help="keys the per-point work is spread over (ShardTicks, RouteByEpoch, AssignRings): a record's "
                        f"shard is its slot (or message id) modulo this; no effect on the releases (default: "
                        f"{IN_PROCESS_POINT_SHARDS} on one local worker process, whose one thread visits the keys one after "
                        f"another; "
                        f"{DEFAULT_POINT_SHARDS} with several workers: Dataflow, Flink, Spark, local multi_processing)")
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


def flag(v: str) -> bool:
    """A boolean option value: true/false, 1/0, yes/no (a Flex Template passes --name=value)."""
    t = str(v).strip().lower()
    if t in ("true", "1", "yes", "on"):
        return True
    if t in ("false", "0", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {v!r}")
