#!/usr/bin/env python
"""The engine's throughput against another checkout of dpstream, interleaved, on the benchmark's own run.

    git archive <base commit> | tar -x -C /tmp/base        # any checkout of the code to compare with
    .venv/bin/python benchmarks/throughput_ab.py --base /tmp/base --rounds 5 --out benchmarks/results/throughput.md

Each measurement is one fresh ``python`` that loads a data set the benchmark's way and runs the benchmark's
``dpstream`` method on it (``benchmarks/dpbench``: ``partial_fit`` one tick at a time, ε = 1, δ = 1e-6, seed 0,
the data set's horizon), timed by its ``FitClock``: process CPU time inside ``partial_fit`` only, one
BLAS thread, so the plan's one-off set-up (imports, noise calibration) of the first tick is included, as in
``run_benchmark.py``. The two sides differ only in which ``dpstream`` is imported (``PYTHONPATH``); this
checkout's ``dpbench`` drives both. Rounds alternate the sides (base first in odd rounds, this checkout first
in even ones) so a change in the machine's load reaches both; the table gives medians of CPU throughput
and the median of the per-round ratios, and the digest of each side's final centers (equal digests: the
same release). Advanced engine options go to both sides as ``name=value`` (JSON values), e.g. the cells:

    .venv/bin/python benchmarks/throughput_ab.py --base /tmp/base --datasets emb784 tree_cells=0.8 tree_depth=9"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TARGETS = {"emb784": 50_000, "blobs_1e6": 150_000}  # points per CPU second on one core

CHILD = r"""
import hashlib, json, sys
sys.path.insert(0, {bench!r})
from dpbench.common import limit_threads
limit_threads()
import numpy as np
import dpstream
from dpbench import datasets
from dpbench.peers import REGISTRY
ds = datasets.load({name!r})
out = REGISTRY["dpstream"].run(ds, 1.0, 0, [], json.loads({params!r}))
print(json.dumps(dict(cpu=out["cpu_time"], wall=out["fit_time"], n=ds.n, d=ds.d, dpstream=dpstream.__file__,
                      digest=hashlib.sha256(np.ascontiguousarray(out["centers"]).tobytes()).hexdigest()[:16])))
"""


def measure(code_root: str, name: str, python: str, params: dict = None) -> dict:
    env = dict(os.environ, PYTHONPATH=code_root, PYTHONWARNINGS="ignore")
    # cwd: ``python -c`` puts the working directory first on sys.path, ahead of PYTHONPATH
    code = CHILD.format(bench=HERE, name=name, params=json.dumps(params or {}))
    res = subprocess.run([python, "-c", code], env=env, cwd=code_root, capture_output=True, text=True, check=True)
    rec = json.loads(res.stdout.strip().splitlines()[-1])
    if not rec["dpstream"].startswith(os.path.abspath(code_root)):
        raise RuntimeError(f"{code_root}: imported dpstream from {rec['dpstream']}")
    rec["rate"] = rec["n"] / rec["cpu"]
    return rec


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base", required=True, help="a checkout of the code to compare with")
    ap.add_argument("--head", default=ROOT, help="the checkout measured against it (default: this one)")
    ap.add_argument("--datasets", default="emb784,blobs_1e6")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--out", help="write the table here as well (Markdown)")
    ap.add_argument("params", nargs="*", help="advanced engine options for both sides, name=JSON value")
    a = ap.parse_intermixed_args(argv)
    params = {k: json.loads(v) for k, v in (p.split("=", 1) for p in a.params)}
    names = [s for s in a.datasets.split(",") if s]
    sides = {"base": os.path.abspath(a.base), "head": os.path.abspath(a.head)}
    recs = {(n, s): [] for n in names for s in sides}
    load0 = os.getloadavg()[0]
    for r in range(a.rounds):
        for n in names:
            for s in (("base", "head") if r % 2 == 0 else ("head", "base")):
                rec = measure(sides[s], n, a.python, params)
                recs[n, s].append(rec)
                print(f"round {r + 1} {n:10s} {s}: {rec['rate']:,.0f} pts/s CPU ({rec['cpu']:.3f} s, "
                      f"load {os.getloadavg()[0]:.2f}) centers {rec['digest']}", flush=True)
    lines = [f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} by `benchmarks/throughput_ab.py "
             f"--rounds {a.rounds}{''.join(' ' + p for p in a.params)}` ({os.cpu_count()} CPUs, "
             f"load average {load0:.2f} at the start, "
             f"{os.getloadavg()[0]:.2f} at the end); base = `{sides['base']}`, head = `{sides['head']}`.", "",
             "| data | base pts/s CPU (median) | head pts/s CPU (median) | head / base (median of rounds) | "
             "per-round ratios | target | head | same centers |", "|---|---|---|---|---|---|---|---|"]
    for n in names:
        b, h = recs[n, "base"], recs[n, "head"]
        ratios = [y["rate"] / x["rate"] for x, y in zip(b, h)]
        hm, target = statistics.median(x["rate"] for x in h), TARGETS.get(n)
        verdict = "" if target is None else f"{'PASS' if hm >= target else 'MISS'} ({100 * (hm / target - 1):+.0f}%)"
        same = {x["digest"] for x in b} == {x["digest"] for x in h} and len({x["digest"] for x in h}) == 1
        lines.append(f"| {n} | {statistics.median(x['rate'] for x in b):,.0f} | {hm:,.0f} | "
                     f"{statistics.median(ratios):.2f}× | {', '.join(f'{q:.2f}' for q in ratios)} | "
                     f"{'' if target is None else f'≥ {target:,}'} | {verdict} | {'yes' if same else 'NO'} |")
    print("\n".join(lines))
    if a.out:
        with open(a.out, "a") as fh:
            fh.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
