"""``benchmarks/job_vs_library.py``: make the files, time both sides on each, time import and --help,
measure the release log, optionally profile the job, write ``<out>/job_vs_library.md``."""
from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import statistics
import sys
import time

from .data import make_cases
from .profile import profile_job
from .report import release_bytes, render
from .runs import (help_argv, import_argv, job_argv, library_argv, median_timed, new_seed_file,
                   python_argv, timed)


def _median(argv, repeats: int):
    """(median wall, median CPU) of ``repeats`` runs; NaN if none succeeded."""
    runs = [r for r in (timed(argv) for _ in range(repeats)) if r.ok]
    if not runs:
        return float("nan"), float("nan")
    return statistics.median(r.wall for r in runs), statistics.median(r.cpu for r in runs)


def _uncompiled_note() -> str:
    """A warning when Beam's modules have no bytecode next to them: with PYTHONDONTWRITEBYTECODE set
    (or a read-only venv) every job process then compiles Beam's ~2,000 modules again (~3 s of CPU
    measured at 10⁶ × 10), which the library side, importing far less, does not pay. `make` installs with
    ``--compile-bytecode``, as pip does by default, so that cost is not what a user pays."""
    import importlib.util

    spec = importlib.util.find_spec("apache_beam")
    root = os.path.dirname(spec.origin) if spec and spec.origin else ""
    if root and os.path.isdir(os.path.join(root, "transforms", "__pycache__")):
        return ""
    return (" WARNING: apache_beam has no compiled bytecode in this environment, so every job process "
            "compiles it again: the job's times include that (rebuild the venv with `make`).")


def _venv_note() -> str:
    """Which environment both sides ran in: the job's start depends on it (Beam imports its Google Cloud
    clients whenever they are installed, so a venv with the ``dpstream[gcp]`` extra starts the job slower
    than the one ``pip install dpstream`` gives)."""
    from pipelines.job.gcp_extra import missing_modules

    extra = "without" if missing_modules() else "with"
    return f" Python: {sys.executable}, {extra} the dpstream[gcp] extra (Beam's Google Cloud clients)."


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="job_vs_library.py", description=__doc__)
    ap.add_argument("--work", default="/tmp/dpstream-jobspeed", help="where the input files and outputs go")
    ap.add_argument("--out", default="benchmarks/results", help="where job_vs_library.md goes")
    ap.add_argument("--cases", default="npy,csv,hd", help="npy (1e6×10), csv (the same points), hd (1e5×384)")
    ap.add_argument("--n", type=int, default=10 ** 6, help="points of the npy and csv cases")
    ap.add_argument("--k", type=int, default=5, help="k of both sides (the data are 5 blobs whatever k)")
    ap.add_argument("--repeats", type=int, default=3, help="runs of the import and --help timings (median)")
    ap.add_argument("--rounds", type=int, default=1, help="interleaved library/job runs of every case (median)")
    ap.add_argument("--profile", action="store_true", help="also profile the job on the npy case (cProfile)")
    args = ap.parse_args(argv)
    which = tuple(args.cases.split(","))
    t0 = time.time()
    cases = [dataclasses.replace(c, k=args.k) for c in make_cases(args.work, n=args.n, which=which)]
    print(f"files ready in {time.time() - t0:.0f} s", flush=True)
    load = os.getloadavg()[0]
    python_s = _median(python_argv(), args.repeats)
    imports = _median(import_argv(), args.repeats)
    helps = _median(help_argv(), args.repeats)
    print(f"python {python_s[0]:.2f} s, import dpstream {imports[0]:.2f} s, --help {helps[0]:.2f} s", flush=True)
    rows, sizes = [], {}
    runs = {case.name: ([], []) for case in cases}
    # rounds interleave the two sides case by case (and swap which goes first), so the load of a shared
    # machine falls on both alike; the verdict reads the median of the rounds' CPU ratios
    for rnd in range(args.rounds):
        for i, case in enumerate(cases):
            out_dir = os.path.join(args.work, f"out_{i}")
            seed = os.path.join(args.work, f"seed_{i}")
            sides = [("library", lambda: timed(library_argv(case))),
                     ("job", lambda: timed(job_argv(case, out_dir, new_seed_file(seed))))]
            got = dict((name, run()) for name, run in (sides if rnd % 2 == 0 else sides[::-1]))
            lib, job = got["library"], got["job"]
            runs[case.name][0].append(lib)
            runs[case.name][1].append(job)
            print(f"round {rnd + 1} {case.name}: library {lib.wall:.1f} s wall {lib.cpu:.1f} s CPU, "
                  f"job {job.wall:.1f} s wall {job.cpu:.1f} s CPU"
                  + ("" if lib.ok and job.ok else f" FAILED: {lib.tail if not lib.ok else job.tail}"), flush=True)
            if rnd == 0 and job.ok and case.d == 10 and case.path.endswith(".npy"):
                sizes[case.name] = release_bytes(out_dir)
                log_b, refs_b, full_b, _ = sizes[case.name]
                print(f"{case.name}: releases.jsonl {log_b:,} bytes, references only {refs_b:,}, whole {full_b:,}: "
                      f"{100 * log_b / full_b:.1f}% of whole", flush=True)
    for case in cases:
        libs, jobs = runs[case.name]
        rows.append((case.name, median_timed(libs), median_timed(jobs),
                     [j.cpu / l.cpu for l, j in zip(libs, jobs) if l.ok and j.ok]))
    prof = profile_job(cases[0], args.work) if args.profile else ""
    meta = (f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {platform.node() or 'this machine'}, "
            f"{os.cpu_count()} CPUs, k = {args.k}, load average {load:.2f} at the start (a shared machine: wall times "
            f"carry "
            f"other processes' load; CPU times less so). {args.rounds} round(s), the two sides interleaved case by "
            f"case; times are medians." + _venv_note() + _uncompiled_note())
    text = render(rows, imports, helps, python_s, sizes, meta, prof)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "job_vs_library.md"), "w", encoding="utf-8") as fh:
        fh.write(text)
    print(text)
    return 0
