"""One timed run in a fresh interpreter: the job's command line, the library's ``fit``, an import, --help.

Wall clock from spawn to exit (imports included); CPU is the child's user + system time. BLAS/OpenMP
pools are limited to one thread in the children (both sides run on one core)."""
from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from dataclasses import dataclass

from ..common import THREAD_VARS
from .data import Case

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


@dataclass
class Timed:
    wall: float
    cpu: float
    ok: bool
    tail: str = ""


def _env() -> dict:
    env = dict(os.environ)
    for v in THREAD_VARS:
        env[v] = "1"
    # the job's command turns numpy's huge-page advice off for its own run (pipelines.job.memory); the
    # library gets the same, so neither side's time carries the kernel's page compaction of the moment
    env["NUMPY_MADVISE_HUGEPAGE"] = "0"
    env["PYTHONPATH"] = REPO + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def timed(argv, timeout: float = 900.0) -> Timed:
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    out = subprocess.run(argv, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=timeout)
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    return Timed(wall, cpu, out.returncode == 0, (out.stderr or "")[-600:])


def median_timed(runs) -> Timed:
    """The median wall and CPU of the runs that succeeded (a failed one if none did)."""
    import statistics

    ok = [r for r in runs if r.ok]
    if not ok:
        return runs[0]
    return Timed(statistics.median(r.wall for r in ok), statistics.median(r.cpu for r in ok), True)


def job_argv(case: Case, out_dir: str, seed_file: str, extra=()) -> list:
    return [sys.executable, "-m", "pipelines.dp_stream_cluster", f"--input={case.path}", f"--output={out_dir}",
            f"--dim={case.d}", f"--radius={case.radius!r}", f"--k={case.k}", f"--tick_size={case.tick_size}",
            f"--horizon_ticks={case.ticks}", f"--seed_file={seed_file}",
            f"--seed_registry={out_dir}-seed_registry.jsonl", *extra]


LIBRARY = """
import sys
import numpy as np
from dpstream import DPStreamClusterer
path, k, radius, tick_size = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
X = np.loadtxt(path, delimiter=",") if path.endswith(".csv") else np.load(path)
m = DPStreamClusterer(k, radius=radius, tick_size=tick_size).fit(X)
assert m.release_.tick == -(-X.shape[0] // tick_size)
"""


def library_argv(case: Case) -> list:
    return [sys.executable, "-c", LIBRARY, case.path, str(case.k), repr(case.radius), str(case.tick_size)]


def new_seed_file(path: str) -> str:
    """A fresh secret seed per job run (the job refuses a seed it recorded on other data)."""
    with open(path, "w") as fh:
        fh.write(os.urandom(32).hex())
    return path


def import_argv() -> list:
    return [sys.executable, "-c", "import dpstream"]


def help_argv() -> list:
    return [sys.executable, "-m", "pipelines.dp_stream_cluster", "--help"]


def python_argv() -> list:
    return [sys.executable, "-c", "pass"]
