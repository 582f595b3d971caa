"""Shared by the parent and the child stages: constants, clocks, Beam options, the job's arguments."""
from __future__ import annotations

import math
import resource
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]  # the repository root (benchmarks/dpbench/beam/common.py)
CLI = REPO / "benchmarks" / "beam_benchmark.py"  # the children run the same command line with --_stage


STD, BOX = 1.0, 10.0
TARGET_PTS_S = 30_000
TARGET_FLOOR_RATIO = 3.0
CHEAP_STAGES, CHEAP_REPEATS = ("empty", "floor_read", "floor_parse"), 3  # sub-second: at least 3 runs each
MB = 1024 * 1024



class _Clock:
    """Wall and CPU (getrusage of this process, all threads) between start and stop."""

    def __enter__(self):
        self.w0 = time.perf_counter()
        r = resource.getrusage(resource.RUSAGE_SELF)
        self.c0 = r.ru_utime + r.ru_stime
        rc = resource.getrusage(resource.RUSAGE_CHILDREN)
        self.cc0 = rc.ru_utime + rc.ru_stime
        return self

    def __exit__(self, *exc):
        self.wall = time.perf_counter() - self.w0
        r = resource.getrusage(resource.RUSAGE_SELF)
        self.cpu = r.ru_utime + r.ru_stime - self.c0
        rc = resource.getrusage(resource.RUSAGE_CHILDREN)
        self.cpu_children = rc.ru_utime + rc.ru_stime - self.cc0
        return False


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: KiB


def _quiet_beam():
    import logging
    for name in ("apache_beam", "absl", "dpstream"):
        logging.getLogger(name).setLevel(logging.ERROR)


def _options():
    from apache_beam.options.pipeline_options import PipelineOptions
    return PipelineOptions(["--runner=DirectRunner"])


def _counter(result, name: str) -> int:
    from apache_beam.metrics.metric import MetricsFilter
    res = result.metrics().query(MetricsFilter().with_namespace("dpstream").with_name(name))["counters"]
    return int(sum(c.committed if c.committed is not None else c.attempted for c in res))


def _job_argv(ctx: dict, data_glob: str, out_dir: str, n: int, seed_file: str = None) -> list:
    return [f"--input={data_glob}", f"--output={out_dir}", f"--dim={ctx['d']}", f"--radius={ctx['radius']!r}",
            f"--k={ctx['k']}", f"--tick_size={ctx['tick_size']}",
            f"--horizon_ticks={math.ceil(n / ctx['tick_size'])}", f"--seed_file={seed_file or ctx['seed_file']}"]



PREIMPORT = ("numpy", "scipy", "apache_beam", "apache_beam.runners.direct.direct_runner",
             "apache_beam.runners.portability.fn_api_runner.fn_runner", "apache_beam.io.textio",
             "apache_beam.transforms.userstate", "dpstream.engine", "dpstream.privacy", "dpstream.offline",
             "transforms.parse", "transforms.ticks", "transforms.bicriteria", "transforms.cluster",
             "pipelines.sources", "pipelines.sinks", "pipelines.dp_stream_cluster")


def _preimport() -> float:
    """Import every module any stage uses before its clock starts, in every child alike: module imports
    are a one-time cost of the interpreter, not throughput (this sandbox sets PYTHONDONTWRITEBYTECODE, so
    an import compiles from source; the children cache bytecode under the work directory instead)."""
    import importlib
    t0 = time.perf_counter()
    for m in PREIMPORT:
        importlib.import_module(m)
    return time.perf_counter() - t0

