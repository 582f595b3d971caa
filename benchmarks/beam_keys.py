#!/usr/bin/env python
"""Scale evidence for the sharded Beam job: CPU time and buffered points of every key of the clustering
stages, and the scale-out factor.

    .venv/bin/python benchmarks/beam_keys.py [--n 1000000] [--d 10] [--k 10] [--tick_size 1000]
                                             [--point_shards 8] [--tick_timer batch] [--out benchmarks/results]
                                             [--semicoreset snap --bucket_shards S --name beam_keys_snap.md]

Data: ``dpstream.datasets.gaussian_mixture(n, d, k, std=1, box=10, seed=0)`` saved as one .npy file, public
radius Λ = (box + 5·std)·√d, ``--horizon_ticks`` = ⌈n / tick_size⌉ (as ``benchmarks/beam_benchmark.py``).
The job (``pipelines.dp_stream_cluster.run``) runs once, in this process, on one DirectRunner worker, with
``DPSTREAM_KEY_STATS`` set: every stage of ``transforms/cluster.py`` (and, with ``--semicoreset snap``,
``BicriteriaCenters`` and ``CenterRegistry``) then records, per key, the thread CPU
time of its ``process`` / ``on_timer`` calls (its own code, outputs built before Beam encodes them) and the
most floats / raw points it kept (``transforms/keystats.py``). Exact sizes: operator telemetry, never a
release.

* **scale-out factor** = total CPU of the clustering stages / CPU of their busiest key: the speed-up a
  runner with enough workers could reach on those stages (a key runs on one thread at a time);
* **throughput** = n / wall time of the whole ``run([...])`` call (one worker, imports excluded).

With ``--baseline_repo PATH`` (a checkout of another commit, e.g. ``git worktree add /tmp/wt-old b2bba06``)
it also times that checkout's job against this one on the same data and seed file, each run a fresh child
process (``python benchmarks/beam_keys.py --_time_job REPO …``: imports before the clock, no key stats),
alternating baseline / current ``--repeats`` times: the issue-10 comparison "current ≥ pre-sharding job,
same machine, same moment". The baseline gets the options both versions know (no ``--point_shards`` /
``--tick_timer``: its job has neither).

Writes ``<out>/beam_keys.md`` and prints it.
"""
from __future__ import annotations

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse  # noqa: E402
import glob  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import resource  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections import defaultdict  # noqa: E402
from pathlib import Path  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

STD, BOX = 1.0, 10.0
TARGET_FACTOR = 8.0


def _stage_family(stage: str) -> str:
    return stage.split("[")[0]


def summarise(stats_dir: str):
    keys = defaultdict(lambda: {"cpu": 0.0, "calls": 0, "floats": 0, "points": 0})
    for path in glob.glob(os.path.join(stats_dir, "keystats-*.jsonl")):
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                r = json.loads(line)
                k = keys[(r["stage"], r["key"])]
                k["cpu"] += r["cpu"]
                k["calls"] += r["calls"]
                k["floats"] = max(k["floats"], r["state_floats"])
                k["points"] = max(k["points"], r["points"])
    return keys


def report(args, keys, wall, cpu, n_released, argv) -> str:
    total = sum(v["cpu"] for v in keys.values())
    (bs, bk), busiest = max(keys.items(), key=lambda kv: kv[1]["cpu"])
    factor = total / busiest["cpu"] if busiest["cpu"] > 0 else float("nan")
    stages = defaultdict(list)
    for (stage, key), v in keys.items():
        stages[stage].append((key, v))
    L = ["# Sharded Beam job: CPU and buffered points per key of the clustering stages", ""]
    L.append(f"Command: `.venv/bin/python benchmarks/beam_keys.py {' '.join(sys.argv[1:])}`".rstrip() + "")
    L.append("")
    L.append(f"Code measured: commit {_git_head(str(REPO))}.")
    L.append("")
    L.append(f"Data: `gaussian_mixture(n={args.n:,}, d={args.d}, k={args.k}, std={STD}, box={BOX}, seed=0)`; "
             f"`--tick_size {args.tick_size}`, T = {math.ceil(args.n / args.tick_size)}, "
             f"`--point_shards {args.point_shards}`, `--tick_timer {args.tick_timer}`"
             + (f", `--semicoreset {args.semicoreset}`, `--bucket_shards {args.bucket_shards}`"
                if args.semicoreset != "tree" else "") + ", ε = 1 (defaults otherwise); "
             f"one DirectRunner worker (FnApiRunner in-process), BLAS threads = 1; 2-core machine shared with "
             f"other work. Job argv: `{' '.join(a for a in argv if not a.startswith('--seed_file'))}`.")
    L.append("")
    L.append("| measure | value |")
    L.append("|---|---:|")
    L.append(f"| releases written | {n_released} |")
    L.append(f"| job wall time (one worker) | {wall:.1f} s |")
    L.append(f"| job CPU time (process) | {cpu:.1f} s |")
    L.append(f"| **throughput** | **{args.n / wall / 1e3:.1f}k points/s** (wall), {args.n / cpu / 1e3:.1f}k per CPU s |")
    L.append(f"| CPU of the clustering stages (sum over keys) | {total:.2f} s |")
    L.append(f"| busiest key | `{bs}` key `{bk}`: {busiest['cpu']:.2f} s |")
    L.append(f"| **scale-out factor** (total / busiest key) | **{factor:.1f}** (target ≥ {TARGET_FACTOR:g}) |")
    L.append("")
    L.append("## Per stage")
    L.append("")
    L.append("| stage | keys | CPU s (sum) | CPU s (busiest key) | calls | max floats in a key | max raw points in a key |")
    L.append("|---|---:|---:|---:|---:|---:|---:|")
    order = ["BicriteriaCenters", "CenterRegistry", "ShardTicks", "EpochPlan", "RouteByEpoch", "AssignRings", "RingMergeReduce", "EpochClose",
             "ReleaseCoreset", "ClusterCoreset"]
    for stage in sorted(stages, key=lambda s: (order.index(_stage_family(s)) if _stage_family(s) in order else 99, s)):
        vs = [v for _, v in stages[stage]]
        L.append(f"| {stage} | {len(vs)} | {sum(v['cpu'] for v in vs):.2f} | {max(v['cpu'] for v in vs):.2f} | "
                 f"{sum(v['calls'] for v in vs)} | {max(v['floats'] for v in vs):,} | {max(v['points'] for v in vs):,} |")
    L.append("")
    L.append("## The 15 busiest keys")
    L.append("")
    L.append("| stage | key | CPU s | share | calls | max floats | max raw points |")
    L.append("|---|---|---:|---:|---:|---:|---:|")
    for (stage, key), v in sorted(keys.items(), key=lambda kv: -kv[1]["cpu"])[:15]:
        L.append(f"| {stage} | `{key}` | {v['cpu']:.2f} | {v['cpu'] / total:.1%} | {v['calls']} | {v['floats']:,} | "
                 f"{v['points']:,} |")
    L.append("")
    L.append("Raw points: the points a key held between calls (`ShardTicks` with the batch timer buffers its "
             "shard's ticks until the one firing at the horizon; `RingMergeReduce` its open block). CPU is the "
             "stages' own code per key, with the unpickling of the messages it reads (a message is unpickled where "
             "it is read) and, in `ClusterCoreset`, the encoding of the release's JSON line; Beam's per-element, state "
             "and shuffle work is not in it.")
    return "\n".join(L) + "\n", factor


def time_job(repo: str, job_argv) -> dict:
    """One run of ``repo``'s job in this (fresh) process: wall and CPU of the ``run([...])`` call, imports
    before the clock (``--_time_job``; prints one JSON line)."""
    repo = os.path.abspath(repo)
    sys.path.insert(0, repo)
    for name in [m for m in sys.modules if m.split(".")[0] in ("dpstream", "pipelines", "transforms")]:
        del sys.modules[name]  # this script's own checkout may be imported already
    from pipelines import dp_stream_cluster as job_mod
    import dpstream
    import transforms  # noqa: F401
    for mod in (job_mod, dpstream):
        assert os.path.abspath(mod.__file__).startswith(repo + os.sep), (mod.__file__, repo)
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    result = job_mod.run(list(job_argv))
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    assert "DONE" in str(result.state), result.state
    return {"wall": wall, "cpu": (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)}


def compare(args, work: str, job_argv) -> list:
    """Baseline and current job, alternating, each run in a fresh child process: ``[(label, result)]``."""
    common = [a for a in job_argv if not a.startswith(("--point_shards", "--tick_timer", "--output", "--seed_registry"))]
    out = []
    for i in range(args.repeats):
        for label, repo, extra in (("baseline", args.baseline_repo, []),
                                   ("current", str(REPO), [a for a in job_argv if a.startswith(("--point_shards",
                                                                                                  "--tick_timer"))])):
            run_dir = f"{work}/cmp-{label}-{i}"
            argv = common + extra + [f"--output={run_dir}", f"--seed_registry={run_dir}-registry.jsonl"]
            cp = subprocess.run([sys.executable, __file__, "--_time_job", repo, "--"] + argv, cwd=repo,
                                capture_output=True, text=True)
            if cp.returncode:
                raise RuntimeError(f"{label} job failed:\n{cp.stderr[-3000:]}")
            res = json.loads(cp.stdout.strip().splitlines()[-1])
            print(f"{label} run {i + 1}: {res['wall']:.2f} s wall, {res['cpu']:.2f} s CPU", file=sys.stderr)
            out.append((label, res))
    return out


def _git_head(repo: str) -> str:
    try:
        head = subprocess.run(["git", "-C", repo, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", repo, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "?"
    return head + (" + uncommitted changes" if dirty else "")


def compare_report(args, runs) -> str:
    L = ["", f"## Same session: this job against `{args.baseline_repo}` (commit {_git_head(args.baseline_repo)})", ""]
    L.append(f"Each run a fresh child process (`beam_keys.py --_time_job`), imports before the clock, no key "
             f"stats, the same .npy file and seed file; baseline and current alternate, {args.repeats} time(s) "
             f"each. Current: commit {_git_head(str(REPO))} with `--point_shards {args.point_shards} --tick_timer "
             f"{args.tick_timer}`; baseline: the options it knows (its defaults otherwise).")
    L.append("")
    L.append("| job | runs | wall s (best / median) | CPU s (best / median) | points/s (best wall) | points per CPU s (best) |")
    L.append("|---|---:|---:|---:|---:|---:|")
    stats = {}
    for label in ("baseline", "current"):
        rs = [r for lb, r in runs if lb == label]
        w, c = [r["wall"] for r in rs], [r["cpu"] for r in rs]
        stats[label] = (min(w), statistics.median(w), min(c), statistics.median(c))
        L.append(f"| {label} | {len(rs)} | {min(w):.2f} / {statistics.median(w):.2f} | {min(c):.2f} / "
                 f"{statistics.median(c):.2f} | {args.n / min(w) / 1e3:.1f}k | {args.n / min(c) / 1e3:.1f}k |")
    b, c = stats["baseline"], stats["current"]
    L.append("")
    L.append(f"**Ratio current / baseline throughput** (baseline time / current time): {b[0] / c[0]:.2f}× wall "
             f"(best), {b[1] / c[1]:.2f}× (median); {b[2] / c[2]:.2f}× CPU (best), {b[3] / c[3]:.2f}× (median). "
             f"Target ≥ 1.")
    L.append("")
    L.append("Runs in order: " + ", ".join(f"{lb} {r['wall']:.1f} s / {r['cpu']:.1f} s CPU" for lb, r in runs) + ".")
    return "\n".join(L) + "\n"


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["--_time_job"]:  # a child of compare(): --_time_job REPO -- JOB ARGS
        print(json.dumps(time_job(argv[1], argv[3:])))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--d", type=int, default=10)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--tick_size", type=int, default=1000)
    ap.add_argument("--point_shards", type=int, default=8)
    ap.add_argument("--tick_timer", choices=("batch", "looping"), default="batch")
    ap.add_argument("--semicoreset", choices=("tree", "lloyd", "snap"), default="tree",
                    help="snap runs the bicriteria stages too (BicriteriaCenters, CenterRegistry)")
    ap.add_argument("--bucket_shards", type=int, default=1, help="with --semicoreset snap: keys per (tree, level)")
    ap.add_argument("--name", default="beam_keys.md", help="the report's file name in --out (default beam_keys.md)")
    ap.add_argument("--out", default="benchmarks/results")
    ap.add_argument("--baseline_repo", help="a checkout of another commit whose job to time against this one")
    ap.add_argument("--repeats", type=int, default=2, help="runs of each job in the comparison (default 2)")
    args = ap.parse_args(argv)

    import numpy as np
    from dpstream.datasets import gaussian_mixture
    from transforms.keystats import ENV

    with tempfile.TemporaryDirectory(prefix="dpstream-beamkeys-") as work:
        X, _, _ = gaussian_mixture(args.n, args.d, args.k, std=STD, box=BOX, seed=0)
        os.makedirs(f"{work}/data")
        np.save(f"{work}/data/points.npy", X)
        del X
        seed_file = f"{work}/seed"
        Path(seed_file).write_text(os.urandom(32).hex() + "\n")
        stats = f"{work}/stats"
        os.makedirs(stats)
        radius = (BOX + 5 * STD) * math.sqrt(args.d)
        job_argv = [f"--input={work}/data/*.npy", f"--output={work}/out", f"--dim={args.d}", f"--radius={radius!r}",
                    f"--k={args.k}", f"--tick_size={args.tick_size}",
                    f"--horizon_ticks={math.ceil(args.n / args.tick_size)}", f"--point_shards={args.point_shards}",
                    f"--tick_timer={args.tick_timer}", f"--seed_file={seed_file}",
                    f"--seed_registry={work}/registry.jsonl"]
        if args.semicoreset != "tree":
            job_argv += [f"--semicoreset={args.semicoreset}", f"--bucket_shards={args.bucket_shards}"]
        from pipelines import dp_stream_cluster as job_mod
        os.environ[ENV] = stats
        r0 = resource.getrusage(resource.RUSAGE_SELF)
        t0 = time.perf_counter()
        result = job_mod.run(job_argv)
        wall = time.perf_counter() - t0
        r1 = resource.getrusage(resource.RUSAGE_SELF)
        del os.environ[ENV]
        assert "DONE" in str(result.state), result.state
        cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
        with open(f"{work}/out/releases.jsonl", encoding="utf-8") as fh:
            n_released = sum(1 for line in fh if line.strip())
        keys = summarise(stats)
        runs = compare(args, work, job_argv) if args.baseline_repo else None
    text, factor = report(args, keys, wall, cpu, n_released, job_argv)
    if runs:
        text += compare_report(args, runs)
    os.makedirs(args.out, exist_ok=True)
    Path(args.out, args.name).write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
