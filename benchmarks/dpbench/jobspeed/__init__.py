"""The Beam job against the library it runs, on the same files, each in a fresh process, wall clock with
imports (``benchmarks/job_vs_library.py``): ``data`` makes the files, ``runs`` times the two sides,
``profile`` profiles the job, ``report`` writes ``job_vs_library.md`` with PASS/MISS against the targets."""
