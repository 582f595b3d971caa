"""The later sections of results.md: checkpoints, k-median, state, throughput, diagnostics, rules, and the
runs that did not finish."""
from __future__ import annotations

from typing import Dict, List

import numpy as np

from .fmt import DP_VARIANTS, KMEDIAN_ROWS, eps_cols, eps_label, fmt_agg, fmt_cell, fmt_rate, label, ordered, table
from .summary import get, get_raw, med

CKPT_ROWS = [("minibatch", "-"), ("dpstream", "1"), ("dpstream", "0.5"), ("dpstream_default_horizon", "1"),
             ("dpstream_default_horizon", "0.5"), ("dpstream_snap", "1"),
             ("dpstream_vanilla", "1")]


def problems_section(records: List[dict]) -> List[str]:
    groups: Dict[tuple, list] = {}
    for r in records:
        if r["status"] != "ok":
            groups.setdefault((r["dataset"], r["method"], r["eps"], r["status"]), []).append(r)
    if not groups:
        return []
    rows = [[d, m, e, st, str(len(rs)), "; ".join(sorted({r.get("reason", "") for r in rs}))[:300]]
            for (d, m, e, st), rs in groups.items()]
    return ["## Runs that did not finish\n"] + table(["data set", "method", "ε", "status", "runs", "why"], rows) + [""]


def checkpoint_section(summary, meta) -> List[str]:
    L = ["## Intermediate releases on their prefix\n",
         "Ratio = cost(centers released at tick t, first t·tick points) / cost(`KMeans(n_init=3)` on that prefix) "
         "(the end: the n_init=10 reference). Columns: fraction of the stream seen.\n"]
    for d in ordered(meta):
        ref = get(summary, d, "dpstream", "1") or get(summary, d, "minibatch", "-")
        if not ref or "checkpoints" not in ref:
            continue
        ticks = sorted(ref["checkpoints"], key=int)
        rows = []
        for meth, e in CKPT_ROWS:
            s = get(summary, d, meth, e)
            if s and "checkpoints" in s:
                rows.append([f"{label(meth)}{'' if e == '-' else f', ε = {e}'}"] +
                            [fmt_agg(s["checkpoints"][t]["ratio"], 2) for t in ticks])
        L.append(f"### {d}\n")
        L += table(["method"] + [f"{ref['checkpoints'][t]['frac']:.3g}" for t in ticks], rows) + [""]
    return L


def kmedian_section(summary, meta) -> List[str]:
    sets = [d for d in ordered(meta) if meta[d].get("ref_cost_z1") and
            any(k.startswith(f"{d}|dpstream_kmedian|") for k in summary)]
    if not sets:
        return []
    L = ["## k-median (Σ distances / the k-median reference's)\n",
         "Reference: D¹ seeding + Lloyd with Weiszfeld geometric medians, best of n_init = 10, on all points "
         "(`dpstream.offline.weighted_kmedian`, seed 0). Every method's final centers are scored in k-median cost; "
         "`dpstream objective=\"kmedian\"` optimises it, the others optimise k-means.\n"]
    for d in sets:
        cols = eps_cols(summary, d, ["dpstream_kmedian", "kmedian"])
        rows = []
        for meth in KMEDIAN_ROWS:
            if meth in ("kmedian", "kmeans", "minibatch", "mean"):
                cells = ["–"] * (len(cols) - 1) + [fmt_cell(get_raw(summary, d, meth, "-"), "ratio_kmedian")]
            else:
                cells = [fmt_cell(get_raw(summary, d, meth, e), "ratio_kmedian") for e in cols]
            if any(c != "–" for c in cells):
                rows.append([label(meth)] + cells)
        L.append(f"### {d} (n={meta[d]['n']:,}, d={meta[d]['d']}, k={meta[d]['k']})\n")
        L += table(["method"] + [eps_label(e) for e in cols], rows) + [""]
    return L


def state_section(summary, meta) -> List[str]:
    L = ["## State (floats held, `state_size()`, ε = 1)\n",
         "`final` after the last tick (the horizon flushes every buffer); `peak` the largest after any tick.\n"]
    rows = []
    base = get(summary, "blobs_1e5", "dpstream", "1")
    for d in ordered(meta):
        s = get(summary, d, "dpstream", "1")
        if not s or not s.get("state_final"):
            continue
        m = meta[d]
        nd = m["n"] * m["d"]
        sf, sp = med(s, "state_final"), med(s, "state_max")
        grow = f"{sf / med(base, 'state_final'):.2f}" if (base and d.startswith("blobs_1e")) else "–"
        rows.append([d, f"{m['n']:,}", str(m["d"]), f"{nd:,}", f"{sf:,.0f}", f"{100 * sf / nd:.2f}%",
                     f"{sp:,.0f}" if sp else "–", f"{100 * sp / nd:.2f}%" if sp else "–", grow])
    L += table(["data set", "n", "d", "n·d", "final", "% of n·d", "peak", "peak % of n·d",
                "final / final at blobs 1e5"], rows) + [""]
    L.append("Ablations and k-median at ε = 1 (final / peak, median):\n")
    rows = []
    for d in ordered(meta):
        cells = []
        for meth in DP_VARIANTS[1:]:
            s = get(summary, d, meth, "1")
            cells.append(f"{med(s, 'state_final'):,.0f} / {med(s, 'state_max'):,.0f}" if s and s.get("state_max")
                         else "–")
        if any(c != "–" for c in cells):
            rows.append([d] + cells)
    return L + table(["data set"] + [label(m) for m in DP_VARIANTS[1:]], rows) + [""]


def throughput_section(summary, meta, info) -> List[str]:
    jobs = info.get("jobs", 1)
    L = ["## Throughput (points per second inside fit / partial_fit, median over seeds)\n",
         "**wall** = n / wall seconds, **CPU** = n / process CPU seconds (single-threaded: the rate on one core). "
         "dpstream at ε = 1; peers as ratios to dpstream on CPU time (> 1 = faster than dpstream)."
         + (f" Measured with {jobs} worker processes running at once: CPU time is per process, wall time includes "
            "the contention." if jobs > 1 else "") + "\n"]
    rows = []
    for d in ordered(meta):
        s, mb = get(summary, d, "dpstream", "1"), get(summary, d, "minibatch", "-")
        dp, km = get(summary, d, "diffprivlib", "1"), get(summary, d, "kmeans", "-")
        e = med(s, "pts_per_s_cpu")
        if not (s or mb or dp):
            continue
        q = lambda x: f"{med(x, 'pts_per_s_cpu') / e:.2f}×" if (e and med(x, "pts_per_s_cpu")) else "–"  # noqa: E731
        rows.append([d, str(meta[d]["d"]), f"{fmt_rate(med(s, 'pts_per_s'))} / {fmt_rate(e)}",
                     f"{fmt_rate(med(mb, 'pts_per_s'))} / {fmt_rate(med(mb, 'pts_per_s_cpu'))}", q(mb),
                     f"{fmt_rate(med(dp, 'pts_per_s'))} / {fmt_rate(med(dp, 'pts_per_s_cpu'))}", q(dp),
                     fmt_rate(med(km, "pts_per_s_cpu"))])
    L += table(["data set", "d", "dpstream wall / CPU", "MiniBatchKMeans wall / CPU", "MBK ÷ dpstream",
                "diffprivlib (ε=1) wall / CPU", "diffprivlib ÷ dpstream", "KMeans(n_init=10) CPU"], rows) + [""]
    L.append("dpstream variants by ε (CPU pts/s, median):\n")
    rows = []
    for d in ordered(meta):
        for meth in DP_VARIANTS:
            cols = eps_cols(summary, d, [meth])
            cells = {e: get(summary, d, meth, e) for e in cols}
            if any(cells.values()):
                rows.append([d, meth] + [", ".join(f"{eps_label(e)}: {fmt_rate(med(c, 'pts_per_s_cpu'))}"
                                                   for e, c in cells.items() if c)])
    return L + table(["data set", "method", "CPU pts/s"], rows) + [""]


def diagnostics_section(records, meta) -> List[str]:
    L = ["## Diagnostics of dpstream's final release (defaults, median over seeds)\n"]
    rows = []
    for d in ordered(meta):
        by_eps: Dict[str, list] = {}
        for r in records:
            if r["dataset"] == d and r["method"] == "dpstream" and r["status"] == "ok" and not r.get("config"):
                by_eps.setdefault(r["eps"], []).append(r["extra"])
        n = meta[d]["n"]
        for e, xs in by_eps.items():
            md = lambda k: float(np.median([x[k] for x in xs]))  # noqa: E731
            rows.append([d, e, f"{md('epoch'):.0f}", f"{md('n_candidate_centers'):.0f}", f"{md('coreset_size'):.0f}",
                         f"{md('coreset_weight') / n:.3f}", f"{md('count_estimate') / n:.3f}",
                         f"{md('n_clipped'):.0f}"])
    return L + table(["data set", "ε", "epochs", "size of F", "coreset points", "released weight / n",
                      "count estimate / n", "clipped"], rows) + [""]


def rules_section(meta) -> List[str]:
    L = ["## Data sets and their public rules (never computed from the data)\n"]
    for d in ordered(meta):
        m = meta[d]
        if m.get("base", d) != d:
            continue
        L.append(f"- **{d}**{' (held out)' if m.get('held_out') else ''} — {m.get('family', '')}: {m['rule']}")
    L += ["", "Every data set also runs as `<name>_inorder`: the same points sorted by cluster label (stable), so "
          "the clusters arrive one after another; china, which has no labels, in its raster order. Plots: "
          "`cost_vs_eps.png`, `cost_vs_checkpoint.png`, `state_vs_n.png`. Raw numbers: `results.json`.", ""]
    return L

