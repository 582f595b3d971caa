"""The job's throughput with a privacy unit against the same job without one, on the same JSONL file.

    .venv/bin/python benchmarks/beam_units.py --n 200000 --users 2000 [--repeats 2]

The GPS-like users of ``dpbench.datasets.units`` written as JSON lines ``{"x": [..], "user": id}``; the
job (DirectRunner, batch) runs on them without ``--privacy_id_field`` and with it (L = 4 tick means, and
L = 10⁹ records: every record kept, so only the bounding stage's own cost differs); each run is a child
process, timed by its CPU (user + system) and wall time; throughput = records read per CPU second.
Alternating order, ``--repeats`` times; the median per configuration is reported.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

from dpbench.datasets.units import gps_users  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--users", type=int, default=2_000)
    ap.add_argument("--tick_size", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=2)
    a = ap.parse_args()
    X, ids, meta = gps_users(a.n, a.users)
    tmp = tempfile.mkdtemp(prefix="dpstream-units-")
    with open(os.path.join(tmp, "in.jsonl"), "w") as fh:
        for x, u in zip(X.tolist(), ids.tolist()):
            fh.write(json.dumps({"x": x, "user": f"u{u}"}) + "\n")
    T = -(-a.n // a.tick_size)
    base = [sys.executable, "-m", "pipelines.dp_stream_cluster", f"--input={tmp}/in.jsonl", "--dim=2",
            f"--radius={meta['radius']}", f"--k={meta['k']}", f"--tick_size={a.tick_size}", f"--horizon_ticks={T}",
            "--epsilon=1", f"--seed_registry={tmp}/seed_registry.jsonl"]
    configs = {"no unit": [],
               "unit, L = 4 tick means": ["--privacy_id_field=user", "--max_contributions=4",
                                          "--contribution=tick_mean"],
               "unit, L = 10^9 records (all kept)": ["--privacy_id_field=user", "--max_contributions=1000000"]}
    res = {k: [] for k in configs}
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    for r in range(a.repeats):
        for name, extra in (configs.items() if r % 2 == 0 else reversed(list(configs.items()))):
            out = os.path.join(tmp, f"out-{r}-{abs(hash(name))}")
            seed = out + ".seed"  # a fresh seed per run: a seed is never reused on another configuration
            with open(seed, "w") as fh:
                fh.write(os.urandom(32).hex() + "\n")
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            t = time.time()
            subprocess.run(base + [f"--output={out}", f"--seed_file={seed}"] + extra, cwd=ROOT, env=env, check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            wall = time.time() - t
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
            res[name].append((cpu, wall))
    print(f"n = {a.n:,} records of {a.users:,} users (JSON lines), tick {a.tick_size}, T = {T}, DirectRunner")
    print("| job | records per CPU s (median) | CPU s | wall s | vs no unit |")
    print("|---|---|---|---|---|")
    med = {k: sorted(v)[len(v) // 2] for k, v in res.items()}
    for name, (cpu, wall) in med.items():
        print(f"| {name} | {a.n / cpu:,.0f} | {cpu:.1f} | {wall:.1f} | {med['no unit'][0] / cpu:.2f}× |")


if __name__ == "__main__":
    main()
