#!/usr/bin/env python
"""dpstream against its peers on the same data, in the same order, in one script.

    make .venv-bench/.installed
    .venv-bench/bin/python benchmarks/run_benchmark.py --quick            # smoke test, < 3 min
    .venv-bench/bin/python benchmarks/run_benchmark.py --jobs 2 --out benchmarks/results   # the full grid
    .venv-bench/bin/python benchmarks/run_benchmark.py --list             # data sets and methods

A thin command line over the ``dpbench`` package next to it; benchmarks/README.md explains every option
and column. BLAS/OpenMP are limited to one thread before numpy is imported.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dpbench.common import limit_threads  # noqa: E402  (imports nothing numeric)

limit_threads()

if __name__ == "__main__":
    from dpbench.cli import main

    sys.exit(main())
