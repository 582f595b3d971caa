"""``benchmarks/run_benchmark.py``: options, the quick and full configurations, and the main loop."""
from __future__ import annotations

import argparse
import math
import os
import sys

from . import ALL_EPS, datasets, eps_key, first_targets, parse_eps
from .common import log, parse_list
from .harness import Executor, dump_results, load_results, merge, plan, record_key
from .peers import REGISTRY as PEERS
from .plots import write_plots
from .report import write_markdown
from .runinfo import run_info
from .summary import build_meta, summarise
from .tasks import PREFIX_REF, PREPARE

METHODS = [m for m, p in PEERS.items() if p.grid]
QUICK = dict(datasets=["blobs_1e4", "blobs_1e4_inorder", "digits"], eps=[1.0, math.inf], seeds=2,
             kmedian=["blobs_1e4", "blobs_1e4_inorder"])
DEFAULT_OUT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "results")
QUICK_OUT = "/tmp/dpstream-bench-quick"


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="run_benchmark.py", description="dpstream against its peers on the same data "
                                 "(benchmarks/README.md explains every option and column).")
    ap.add_argument("--out", default=None, help=f"output directory (default {DEFAULT_OUT}; {QUICK_OUT} with --quick)")
    ap.add_argument("--quick", action="store_true", help="smoke configuration: blobs_1e4 (+ in order) and digits, "
                    "ε ∈ {1, ∞}, 2 seeds (< 3 minutes)")
    ap.add_argument("--datasets", default=None, help="comma list (default: the grid; 'all' adds the sets outside "
                    "it); --list shows them")
    ap.add_argument("--methods", default=None, help=f"comma list from {list(PEERS)} (default: {METHODS})")
    ap.add_argument("--eps", default=None, help="comma list of ε ('inf' = dpstream's non-private limit)")
    ap.add_argument("--seeds", type=int, default=None, help="seeds per cell (default 5, 2 with --quick)")
    ap.add_argument("--seeds-for", default="", help="per-data-set seed counts, e.g. blobs_1e6=3,pixels=3")
    ap.add_argument("--kmedian-datasets", default=None, help="data sets of the k-median methods (default: "
                    "blobs_1e5, china, emb256, blobs_1e5_inorder; 'none' to skip)")
    ap.add_argument("--kmedian-eps", default="0.5,1,4", help="ε of the k-median methods, within --eps "
                    "(default 0.5,1,4; 'all' = every ε of --eps)")
    ap.add_argument("--inorder-ablation-eps", default="1", help="ε of the ablations on in-order variants, within "
                    "--eps (default 1; 'all' = every ε of --eps)")
    ap.add_argument("--first-release-eps", default=",".join(first_targets.EPS), help="ε of the default-horizon "
                    "methods (dpstream_default_horizon, dpstream_declared_end), within --eps (default "
                    f"{','.join(first_targets.EPS)}: what the first-release targets read; 'all' = every ε of --eps)")
    ap.add_argument("--jobs", type=int, default=1, help="worker processes for independent runs (default 1; "
                    "results are identical, clocks then run concurrently)")
    ap.add_argument("--run-timeout", type=float, default=900.0, help="wall seconds of one run before it is stopped "
                    "and its cell's remaining seeds skipped (0 = none; references are never stopped)")
    ap.add_argument("--cell-budget", type=float, default=300.0, help="wall seconds per cell (data set, method, ε) "
                    "after which its remaining seeds are skipped (0 = none)")
    ap.add_argument("--merge", action="store_true", help="keep the records of OUT/results.json that are not re-run")
    ap.add_argument("--resume", action="store_true", help="like --merge, and skip the runs OUT/results.json "
                    "already holds (finished ones)")
    ap.add_argument("--report-only", action="store_true", help="rebuild the reports from OUT/results.json "
                    "(with --sweep: OUT/sweep.json) without running anything")
    ap.add_argument("--note", action="append", default=[], help="a note line in results.md (repeatable)")
    ap.add_argument("--analysis", default=None, help="a Markdown file inserted after the targets")
    ap.add_argument("--sweep", action="store_true", help="sweep engine knobs one at a time on blobs_1e5 and china "
                    "at ε = 1 → sweep.md")
    ap.add_argument("--list", action="store_true", help="list the data sets and methods, and exit")
    return ap


def selection(args):
    q = args.quick
    if args.datasets in (None, "", "default"):
        dsets = list(QUICK["datasets"]) if q else datasets.default_grid()
    elif args.datasets == "all":
        dsets = datasets.all_names()
    else:
        dsets = parse_list(args.datasets)
    for d in dsets:
        datasets.spec(d)  # raises on an unknown name
    eps = [parse_eps(e) for e in parse_list(args.eps)] if args.eps else (list(QUICK["eps"]) if q else list(ALL_EPS))
    methods = parse_list(args.methods) if args.methods else list(METHODS)
    bad = [m for m in methods if m not in PEERS]
    if bad:
        raise SystemExit(f"unknown method(s) {bad}; choose from {METHODS}")
    if args.kmedian_datasets is None:
        kmed = list(QUICK["kmedian"]) if q else datasets.default_kmedian()
    else:
        kmed = [] if args.kmedian_datasets == "none" else parse_list(args.kmedian_datasets)
    seeds = args.seeds or (QUICK["seeds"] if q else 5)
    over = {k: int(v) for k, v in (p.split("=") for p in parse_list(args.seeds_for))}
    only = {}
    for name in ("kmedian_eps", "inorder_ablation_eps", "first_release_eps"):
        v = getattr(args, name)
        only[name] = None if v == "all" else {eps_key(parse_eps(e)) for e in parse_list(v)}
    return dsets, eps, methods, kmed, only, (lambda d: over.get(d, seeds)), seeds, over


def write_all(out, info, records, plots=True):
    meta = build_meta(records)
    summary = summarise(records, meta)
    dump_results(os.path.join(out, "results.json"), info, records, summary)
    write_markdown(os.path.join(out, "results.md"), records, meta, summary, info)
    if plots:
        write_plots(out, summary, meta)


def list_all() -> None:
    print("data sets (name; held out; in the default grid; k-median set) — every one also as <name>_inorder:")
    km = set(datasets.default_kmedian())
    for s in datasets.REGISTRY.values():
        print(f"  {s.name:10s} {'held-out' if s.held_out else 'tuning  '} {'grid' if s.grid else '    '} "
              f"{'k-median' if s.name in km else ''}  ({s.family})")
    print("methods:", ", ".join(f"{p.name}" for p in PEERS.values()))


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser().parse_args(argv)
    if args.list:
        list_all()
        return 0
    out = args.out or (QUICK_OUT if args.quick else DEFAULT_OUT)
    os.makedirs(out, exist_ok=True)
    if args.sweep:
        from .sweep import main as sweep_main
        return sweep_main(args, argv, out)
    jpath = os.path.join(out, "results.json")
    if args.report_only:
        old = load_results(jpath)
        info = old["run"]
        info["notes"] = list(info.get("notes", [])) + [n for n in args.note if n not in info.get("notes", [])]
        if args.analysis:
            with open(args.analysis, encoding="utf-8") as fh:
                info["analysis"] = fh.read()
        write_all(out, info, old["records"])
        log(f"rebuilt {out}/results.md and the plots from {jpath}")
        return 0

    dsets, eps, methods, kmed, only, seeds_for, seeds, over = selection(args)
    tasks = plan(dsets, methods, eps, seeds_for, kmed, **only)
    notes = list(args.note)
    if over:
        notes.append("Seeds per data set: " + ", ".join(f"{k}: {v}" for k, v in over.items()) + f" (others: {seeds}).")
    info = run_info(argv, notes, args.jobs)
    if args.analysis:
        with open(args.analysis, encoding="utf-8") as fh:
            info["analysis"] = fh.read()
    records = []
    if (args.merge or args.resume) and os.path.exists(jpath):
        old = load_results(jpath)
        records = merge(old["records"], {t.key for t in tasks}, args.resume)
        info["previous"] = list(old["run"].get("previous", [])) + [old["run"]["command"]]
        done = {record_key(r) for r in records if r["status"] == "ok"}
        if args.resume:
            tasks = [t for t in tasks if t.key not in done]
    runs = [t for t in tasks if t.method not in (PREPARE, PREFIX_REF)]
    log(f"benchmark: {len(runs)} runs (+ {len(tasks) - len(runs)} preparations) on {len(dsets)} data sets, "
        f"eps={[eps_key(e) for e in eps]}, seeds={seeds}, methods={methods}, jobs={args.jobs} → {out}")
    left = {}
    for t in tasks:
        left[t.dataset] = left.get(t.dataset, 0) + 1
    refs, sizes = {}, {}

    def on_record(t, rec):
        records.append(rec)
        if t.method == "kmeans" and t.seed == 0 and rec["status"] == "ok":
            refs[t.dataset] = rec["final_cost"]
        if t.method in PEERS:
            ref = refs.get(datasets.split_name(t.dataset)[0])
            r = (f"ratio={rec['final_cost'] / ref:.4f}" if (ref and rec.get("final_cost") is not None
                                                            and PEERS[t.method].objective == "kmeans") else "")
            cpu, n = rec.get("cpu_time"), sizes.get(t.dataset)
            pts = f" {n / cpu:,.0f} pts/s CPU" if cpu and n else ""
            st = f" state={rec['state_final']}" if rec.get("state_final") and t.method.startswith("dpstream") else ""
            what = rec["status"] if rec["status"] != "ok" else r
            log(f"{t.dataset:18s} {t.method:16s} eps={t.eps:>4s} seed={t.seed} {what} "
                f"fit={rec.get('fit_time') or 0:.2f}s{pts}{st}" + (f" ({rec.get('reason')})" if rec.get("reason")
                                                                   else ""))
        elif rec["status"] != "ok":
            log(f"{t.dataset}: {t.method} {rec['status']}: {rec.get('reason')}")
        if t.method == PREPARE and rec["status"] == "ok":
            sizes[t.dataset] = rec["meta"]["n"]
        left[t.dataset] -= 1
        if left[t.dataset] == 0:
            write_all(out, info, records, plots=False)
            log(f"wrote {out}/results.md and results.json ({t.dataset} done)")

    Executor(args.jobs, args.run_timeout, args.cell_budget).run(tasks, on_record)
    write_all(out, info, records)
    log(f"done: {out}/results.md, results.json, plots")
    return 0
