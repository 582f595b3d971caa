#!/usr/bin/env python
"""The Beam job against the library on the same files (issue targets: job / library ≤ 2×, import ≤ 1.5 s,
--help ≤ 2 s, release log ≤ 25% of whole releases):

    .venv/bin/python benchmarks/job_vs_library.py [--cases npy,csv,hd] [--n 1000000] [--profile]
                                                  [--work /tmp/dpstream-jobspeed] [--out benchmarks/results]

The code is the ``dpbench.jobspeed`` package next to this file (``benchmarks/dpbench/jobspeed/``).
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
for _p in (os.path.dirname(HERE), HERE):  # the repository (dpstream, transforms, pipelines), then dpbench
    if _p not in sys.path:
        sys.path.insert(0, _p)

if __name__ == "__main__":
    from dpbench.jobspeed.main import main

    sys.exit(main())
