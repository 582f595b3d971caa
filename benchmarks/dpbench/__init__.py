"""dpbench: the dpstream benchmark (peers on the same data, in the same order, in one script) as a small package.

A data set, a peer or a metric is one short file:

* ``datasets/`` — the generators and their public radius/center/bounds rules (a registry);
* ``peers/`` — the methods run on the same data in the same order (a registry);
* ``metrics/`` — k-means / k-median cost, checkpoints, state, throughput;
* ``harness`` (grid, seeds, time limits, 1 or 2 worker processes, merging), ``summary``,
  ``targets`` (PASS/MISS with the gap), ``report`` and ``plots``, ``sweep`` (engine knobs);
* ``beam/`` — the Beam job's benchmark (``benchmarks/beam_benchmark.py``).

``benchmarks/run_benchmark.py`` and ``benchmarks/beam_benchmark.py`` are thin command lines over it.
Benchmarks measure, tests assert: nothing here fails on a number; targets are reported.
"""
from __future__ import annotations

import math

DELTA = 1e-6
ALL_EPS = [0.5, 1.0, 2.0, 4.0, 8.0, math.inf]
EPS_COLS = ["0.5", "1", "2", "4", "8", "inf"]  # the ε keys of records and tables
NO_EPS = "-"  # the ε key of methods that do not depend on ε


def eps_key(e) -> str:
    if e is None or e == NO_EPS:
        return NO_EPS
    e = float(e)
    return "inf" if math.isinf(e) else f"{e:g}"


def parse_eps(x) -> float:
    x = str(x).strip().lower()
    return math.inf if x in ("inf", "∞") else float(x)


def eps_value(key: str) -> float:
    return math.inf if key == "inf" else float(key)
