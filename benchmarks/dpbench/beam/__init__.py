"""The Beam job's benchmark (``benchmarks/beam_benchmark.py``): ``pipelines.dp_stream_cluster`` on the
DirectRunner against no-op floors reading the same input, nested pipelines that split its time by stage,
the library engine alone on the same ticks (its releases compared with the job's), a micro split of the
job's own code without Beam, and a cProfile when the job misses a target.

Modules: ``common`` (clocks, job arguments, pre-imports), ``stages`` (the Beam pipelines, one per child
process), ``engine_stage`` (the engine alone + the release check), ``micro`` (the job's code per element),
``profile`` (cProfile summary), ``runner`` (child processes, code fingerprint), ``report`` /
``report_split`` (beam.md), ``main`` (the command line).
"""
