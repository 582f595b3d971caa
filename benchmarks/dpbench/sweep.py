"""``--sweep``: engine knobs one factor at a time around the library's defaults (dpstream only, ε = 1,
blobs_1e5 and china, 3 seeds) → ``sweep.md`` / ``sweep.json``, with a recommendation by a stated rule and,
when some values win, a second phase running them together (``combined``)."""
from __future__ import annotations

import json
import os
from typing import Dict, List

import numpy as np

from .common import log, parse_list
from .harness import Executor, dump_results, load_results, record_key
from .summary import agg, build_meta
from .tasks import PREFIX_REF, PREPARE, Task

SWEEP_GRID = dict(block_size=[1000, 2000, 5000],
                  privacy_split=[(0.45, 0.1, 0.45), (0.3, 0.1, 0.6), (0.2, 0.1, 0.7)],
                  tree_depth=[6, 8, 10],
                  ring_centers=["bicriteria", "bicriteria+released"],
                  coreset_size=[None, 200, 500])


def _plain(v):
    return list(v) if isinstance(v, tuple) else v


def defaults() -> Dict:
    from dpstream.params import PARAMETERS, EngineConfig

    # read on the class, a parameter is its default
    return {name: getattr(EngineConfig, name) for name in PARAMETERS if name in SWEEP_GRID}


def configs(quick=False):
    cur = defaults()
    cfgs = [("default", {})]
    for knob, values in SWEEP_GRID.items():
        for v in values:
            if v == cur[knob] or (isinstance(v, tuple) and tuple(v) == tuple(cur[knob] or ())):
                continue
            cfgs.append((f"{knob}={v}", {knob: v}))
        if quick and len(cfgs) >= 3:
            break
    return cfgs, cur


def plan(dsets, seeds, cfgs) -> List[Task]:
    out = []
    for d in dsets:
        out += [Task(d, PREPARE, reference=True), Task(d, "kmeans", "-", 0, reference=True),
                Task(d, PREFIX_REF, reference=True)]
        for name, ov in cfgs:
            out += [Task(d, "dpstream", "1", s, config=name, overrides=tuple(sorted(ov.items())))
                    for s in range(seeds)]
    return out


def table(records, meta, names):
    res = {}
    for c in names:
        for d, m in meta.items():
            rs = [r for r in records if r.get("config") == c and r["dataset"] == d and r["status"] == "ok"]
            if not rs or not m.get("ref_cost") or not m.get("prefix_ref"):
                continue
            worst = [max(cc / p for cc, p, f in zip(r["ckpt_costs"], m["prefix_ref"], m["checkpoint_n"])
                         if f >= 0.1 * m["n"] - 1e-9) for r in rs]
            res[(c, d)] = dict(final=agg(r["final_cost"] / m["ref_cost"] for r in rs), worst_prefix=agg(worst),
                               pts=agg(m["n"] / r["cpu_time"] for r in rs), state=agg(r["state_final"] for r in rs),
                               peak=agg(r["state_max"] for r in rs))
    return res


def _geo(res, c, dsets, key):
    v = [res[(c, d)][key]["median"] for d in dsets if (c, d) in res]
    return float(np.exp(np.mean(np.log(v)))) if v and len(v) == len(dsets) else None


RULE = ("Per knob: S_final and S_prefix are the geometric means over the data sets of the median final and "
        "worst-prefix cost ratios; a value wins if it improves one by ≥ 2% without worsening the other by > 2% and "
        "without growing the final or peak state by > 10%; the lowest S_final·S_prefix among winners is "
        "recommended. With 3 seeds, differences of a few percent are within seed noise.")


def recommend(records, meta, cfgs, cur):
    """(table rows, recommended changes, per-config results, default scores) by :data:`RULE`."""
    dsets = list(meta)
    res = table(records, meta, [c for c, _ in cfgs])
    bf, bp = _geo(res, "default", dsets, "final"), _geo(res, "default", dsets, "worst_prefix")
    rows, changes = [], {}
    if bf is None or bp is None:
        return rows, changes, res, (bf, bp)
    for knob in SWEEP_GRID:
        best = None
        for c, v in [("default", cur[knob])] + [(c, ov[knob]) for c, ov in cfgs if list(ov) == [knob]]:
            sf, sp = _geo(res, c, dsets, "final"), _geo(res, c, dsets, "worst_prefix")
            if sf is None:
                continue
            df, dp = sf / bf - 1, sp / bp - 1
            state_ok = all(res[(c, d)]["state"]["median"] <= 1.1 * res[("default", d)]["state"]["median"] and
                           res[(c, d)]["peak"]["median"] <= 1.1 * res[("default", d)]["peak"]["median"] for d in dsets)
            gain = (df <= -0.02 and dp <= 0.02) or (dp <= -0.02 and df <= 0.02)
            verdict = "(default)" if c == "default" else ("better" if gain and state_ok else
                                                          ("state/peak > +10%" if gain else ""))
            if c != "default" and gain and state_ok and (best is None or sf * sp < best[1]):
                best = (v, sf * sp)
            rows.append([knob, str(v), f"{sf:.4f}", f"{100 * df:+.1f}%", f"{sp:.3f}", f"{100 * dp:+.1f}%", verdict])
        if best:
            changes[knob] = best[0]
    return rows, changes, res, (bf, bp)


def write(out, records, cfgs, cur, info):
    from .fmt import fmt_agg

    meta = build_meta(records)
    rows, changes, res, (bf, bp) = recommend(records, meta, [c for c in cfgs if c[0] != "combined"], cur)
    L = ["# Engine-knob sweep (ε = 1, δ = 1e-6)\n",
         f"Generated {info['date']} by `{info['command']}` (1 thread per process; dpstream code: "
         f"{info.get('dpstream_source', '?')}). One factor at a time around the library defaults "
         f"{json.dumps({k: _plain(v) for k, v in cur.items()})} (None = the library's public rule). Cells: median "
         "[min–max] over seeds; `worst prefix` = per seed, the worst prefix cost ratio over the checkpoints ≥ 10% "
         "of the stream. pts/s per CPU second.\n"]
    for d, m in meta.items():
        L += [f"## {d} (n={m['n']:,}, d={m['d']}, k={m['k']}, tick={m['tick']})\n",
              "| config | final cost ratio | worst prefix ratio | pts/s (CPU) | state final | state peak |",
              "|---|---|---|---|---|---|"]
        for c, _ in cfgs:
            r = res.get((c, d))
            if r:
                L.append(f"| {c} | {fmt_agg(r['final'])} | {fmt_agg(r['worst_prefix'])} | {r['pts']['median']:,.0f} | "
                         f"{r['state']['median']:,.0f} | {r['peak']['median']:,.0f} |")
        L.append("")
    L += ["## Recommendation\n", RULE + "\n"]
    if bf is not None and bp is not None:
        L += [f"Default: S_final = {bf:.4f}, S_prefix = {bp:.3f}.\n", "| knob | value | S_final | Δ | S_prefix | Δ | "
              "verdict |", "|---|---|---|---|---|---|---|"] + ["| " + " | ".join(r) + " |" for r in rows] + [""]
    L += [f"- **{k}**: " + (f"change {cur[k]} → {changes[k]}." if k in changes else f"keep {cur[k]}.")
          for k in SWEEP_GRID] + [""]
    comb = [c for c in cfgs if c[0] == "combined"]
    dsets = list(meta)
    if comb and all(("combined", d) in res for d in dsets):
        sf, sp = _geo(res, "combined", dsets, "final"), _geo(res, "combined", dsets, "worst_prefix")
        together = json.dumps({k: _plain(v) for k, v in comb[0][1].items()})
        L.append(f"The recommended changes together (`combined` = {together}): S_final = {sf:.4f} "
                 f"({100 * (sf / bf - 1):+.1f}%), S_prefix = {sp:.3f} ({100 * (sp / bp - 1):+.1f}%).\n")
    elif not changes:
        L.append("No value beats the defaults by the rule. One factor at a time: interactions are not measured.\n")
    with open(os.path.join(out, "sweep.md"), "w", encoding="utf-8") as fh:
        fh.write("\n".join(L))
    info = dict(info, configs=[[c, {k: _plain(v) for k, v in ov.items()}] for c, ov in cfgs])
    dump_results(os.path.join(out, "sweep.json"), info, records, {})
    return changes


def main(args, argv, out) -> int:
    from .runinfo import run_info

    dsets = parse_list(args.datasets) if args.datasets else (["blobs_1e4"] if args.quick else ["blobs_1e5", "china"])
    seeds = args.seeds or (1 if args.quick else 3)
    cfgs, cur = configs(args.quick)
    info = run_info(argv, args.note, args.jobs)
    spath = os.path.join(out, "sweep.json")
    records = []
    if (args.merge or args.report_only) and os.path.exists(spath):
        old = load_results(spath)
        records = old["records"]
        if args.report_only:
            info = old["run"]
            cfgs += [(c, ov) for c, ov in old["run"].get("configs", []) if c == "combined"]
    if not args.report_only:
        done = {record_key(r) for r in records}
        ex = Executor(args.jobs, args.run_timeout, 0)
        todo = [t for t in plan(dsets, seeds, cfgs) if t.key not in done]
        log(f"sweep: {len(cfgs)} configs × {dsets} × {seeds} seeds: {len(todo)} tasks → {out}")
        ex.run(todo, lambda t, r: (records.append(r), log(f"{t.dataset} {t.config} seed={t.seed} {r['status']}")))
        changes = write(out, records, cfgs, cur, info)
        if changes and not args.quick:
            combo = ("combined", {k: (tuple(v) if isinstance(v, list) else v) for k, v in changes.items()})
            cfgs.append(combo)
            ex.run([t for t in plan(dsets, seeds, [combo]) if t.config == "combined"],
                   lambda t, r: records.append(r))
    write(out, records, cfgs, cur, info)
    log(f"wrote {out}/sweep.md")
    return 0
