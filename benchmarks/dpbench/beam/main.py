"""``benchmarks/beam_benchmark.py``: options, the data, the stages in order, the report."""
from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import shutil
import sys
import tempfile
import time

from .common import BOX, CHEAP_REPEATS, CHEAP_STAGES, STD, TARGET_FLOOR_RATIO, TARGET_PTS_S, _preimport
from .engine_stage import stage_engine
from .micro import stage_micro
from .report import build_report
from .runner import best, code_fingerprint, code_version, run_stage
from .stages import (stage_empty, stage_floor_cluster, stage_floor_parse, stage_floor_read, stage_floor_ticks,
                     stage_job, stage_job_profile)

STAGES = {"empty": stage_empty, "floor_read": stage_floor_read, "floor_parse": stage_floor_parse,
          "floor_ticks": stage_floor_ticks, "floor_cluster": stage_floor_cluster, "job": stage_job,
          "job_profile": stage_job_profile, "engine": stage_engine, "micro": stage_micro}


def main(argv=None):
    ap = argparse.ArgumentParser(prog="beam_benchmark.py", allow_abbrev=False, description="Throughput of the "
                                 "Beam job (pipelines.dp_stream_cluster) against its floors and the library engine.")
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--d", type=int, default=10)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--tick_size", type=int, default=1000)
    ap.add_argument("--out", default="benchmarks/results")
    ap.add_argument("--repeats", type=int, default=1, help="runs of each Beam pipeline (best wall time is reported)")
    ap.add_argument("--profile", choices=("auto", "always", "never"), default="auto",
                    help="cProfile the job when it misses a target (auto), always, or never")
    ap.add_argument("--profile_n", type=int, default=200_000, help="points of the profiled run (default 2e5)")
    ap.add_argument("--notes", default="", help="a paragraph appended to the report")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    ap.add_argument("--_stage", help=argparse.SUPPRESS)
    ap.add_argument("--_ctx", help=argparse.SUPPRESS)
    ap.add_argument("--_result", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args._stage:  # child process
        with open(args._ctx) as fh:
            ctx = json.load(fh)
        import_wall = _preimport()
        res = STAGES[args._stage](ctx)
        res["import_wall"] = import_wall
        with open(args._result, "w") as fh:
            json.dump(res, fh)
        return 0

    import numpy as np

    from dpstream.datasets import gaussian_mixture

    n, d, k = args.n, args.d, args.k
    if min(n, d, k, args.tick_size, args.repeats) < 1:
        ap.error("--n, --d, --k, --tick_size and --repeats must be >= 1")
    command = " ".join([".venv/bin/python", "benchmarks/beam_benchmark.py"] +
                       [shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv)])
    work = tempfile.mkdtemp(prefix="dpstream-beam-bench-")
    try:
        t0 = time.perf_counter()
        X, _, _ = gaussian_mixture(n, d, k, std=STD, box=BOX, seed=0)
        os.makedirs(f"{work}/data")
        np.save(f"{work}/data/points.npy", X)
        profile_n = min(args.profile_n, n)
        if args.profile != "never":
            os.makedirs(f"{work}/prof")
            np.save(f"{work}/prof/points.npy", X[:profile_n])
        del X
        gen_wall = time.perf_counter() - t0
        seed_file, profile_seed_file = f"{work}/seed", f"{work}/seed_profile"
        for path in (seed_file, profile_seed_file):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as fh:
                fh.write(os.urandom(32).hex())
        ctx = {"n": n, "d": d, "k": k, "tick_size": args.tick_size, "radius": (BOX + 5 * STD) * math.sqrt(d),
               "work": work, "data_file": f"{work}/data/points.npy", "data_glob": f"{work}/data/*.npy",
               "profile_glob": f"{work}/prof/*.npy", "profile_n": profile_n, "seed_file": seed_file,
               "profile_seed_file": profile_seed_file, "code": code_version(), "code_fingerprint": code_fingerprint()}
        print(f"data: n={n:,} d={d} k={k} in {gen_wall:.1f} s; work dir {work}", flush=True)

        res = {}
        for name in ("empty", "floor_read", "floor_parse", "floor_ticks", "floor_cluster", "job"):
            runs = max(args.repeats, CHEAP_REPEATS) if name in CHEAP_STAGES else args.repeats
            res[name] = [run_stage(name, ctx) for _ in range(runs)]
        job = best(res["job"])
        if "DONE" not in job["state"]:
            raise RuntimeError(f"the job ended in state {job['state']}")
        res["engine"] = run_stage("engine", dict(ctx, releases=res["job"][-1]["releases"]))
        res["micro"] = run_stage("micro", dict(ctx, releases=res["job"][-1]["releases"]))
        missed = (n / job["wall"] < TARGET_PTS_S
                  or job["wall"] / best(res["floor_parse"])["wall"] > TARGET_FLOOR_RATIO)
        if args.profile == "always" or (args.profile == "auto" and missed):
            res["job_profile"] = run_stage("job_profile", ctx)

        code_end, fp_end = code_version(), code_fingerprint()
        if fp_end != ctx["code_fingerprint"]:
            fp0 = ctx["code_fingerprint"]
            changed = sorted(f for f in set(fp0) | set(fp_end) if fp0.get(f) != fp_end.get(f))
            print(f"warning: the code changed during the run: {ctx['code']} -> {code_end}: {', '.join(changed)}",
                  flush=True)
            ctx["code"] += (f" at the start; {code_end} at the end ({', '.join(changed)} edited during the run, "
                            f"so later stages may have run the edited version)")
        elif code_end != ctx["code"]:  # the same files, committed during the run
            ctx["code"] = f"{code_end} (the files measured, committed during the run; at the start: {ctx['code']})"
        report = build_report(args, ctx, res, command, gen_wall)
        if args.notes:
            report += "\n" + args.notes.strip() + "\n"
        os.makedirs(args.out, exist_ok=True)
        path = os.path.join(args.out, "beam.md")
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(report.rstrip() + "\n")
        print()
        print(report)
        print(f"\nwrote {path}")
        eng = res["engine"]
        return 0 if eng["n_mismatched"] == 0 and eng["n_missing"] == 0 and not eng["extra"] else 1
    finally:
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)

