#!/usr/bin/env python
"""Throughput of the Beam job (``pipelines.dp_stream_cluster``) against its floors and the library engine.

    .venv/bin/python benchmarks/beam_benchmark.py [--n 1000000] [--d 10] [--k 10] [--tick_size 1000]
                                                 [--out benchmarks/results] [--repeats 1]

One script, on one data set (``dpstream.datasets.gaussian_mixture(n, d, k, std=1, box=10, seed=0)``,
saved as one .npy file in a temporary directory; public radius Λ = (box + 5·std)·√d; a temporary
seed file holding the hex text of 32 random bytes):

* **floors** — no-op Beam pipelines on the same runner (DirectRunner) reading the same input:
  ``ReadFileRecords → count rows`` (read only) and ``ReadFileRecords → ParsePoints(batch_arrays=True) →
  Map(None)`` (read + the job's vectorised parse: one ``ParsedBatch`` per 8192-row record; the floor the job
  is judged against); also ``… → BatchIntoTicks → Map(None)``, the job with its sinks replaced by
  ``Map(None)`` and an empty pipeline (start-up cost), nested stages that split the job's time by stage;
* **job** — ``pipelines.dp_stream_cluster.run([...])`` with ``horizon_ticks = ceil(n / tick_size)``;
* **engine** — ``dpstream.engine.Engine(engine_config(job), seed)`` stepped tick by tick on the same
  rows; every one of its releases is compared (JSON round trip) with the job's ``releases.jsonl``;
* **micro** — the job's own Python code per element, without Beam, on the elements its stages see:
  ``ParsePointsFn(batch_arrays=True).process`` per numpy record, ``_AssignTicksFn`` on the ``ParsedBatch``
  elements (+ its flushes), ``merge_partials`` per tick, ``_LevelUpdatesFn.process`` per tick batch, each
  (tree, level)'s ``BicriteriaLevel.step_update``, ``CenterSet.absorb``, ``Engine(bicriteria="external").step``
  + ``to_dict``, and the pickling of the batch-mode bag states — so that each Beam stage's time can be split
  into "our code" and "Beam's own work" (per-element, state, shuffles);
* **profile** — when the job misses a target (``--profile auto``), a cProfile of the job at
  ``--profile_n`` points, summed by package.

Every timed run is a fresh child process of this script (``--_stage``), so its peak RSS
(``ru_maxrss``) and CPU time (``getrusage(RUSAGE_SELF)``: the DirectRunner's batch mode runs the
pipeline in-process) are its own. BLAS/OpenMP pools are limited to 1 thread (as in
``run_benchmark.py``). The report goes to ``<out>/beam.md`` and stdout. The code is the ``dpbench.beam``
package next to this file; this is its command line (and its children's, with ``--_stage``).
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
for _p in (os.path.dirname(HERE), HERE):  # the repository (dpstream, transforms, pipelines), then dpbench
    if _p not in sys.path:
        sys.path.insert(0, _p)
from dpbench.common import limit_threads  # noqa: E402  (imports nothing numeric)

limit_threads()

if __name__ == "__main__":
    from dpbench.beam.main import main

    sys.exit(main())
