"""results.md: the run, the data sets, the targets (PASS/MISS with the gap), then every table.
The later tables (checkpoints, k-median, state, throughput, diagnostics, rules) are in
:mod:`dpbench.report_tables`; the plots in :mod:`dpbench.plots`."""
from __future__ import annotations

from typing import Dict, List

from . import DELTA, first_targets, targets
from .fmt import KMEANS_ROWS, eps_cols, eps_label, fmt_cell, label, ordered, table
from .report_tables import (checkpoint_section, diagnostics_section, kmedian_section, problems_section,
                            rules_section, state_section, throughput_section)
from .summary import get, get_raw, med


def header(info: dict, meta: Dict[str, dict]) -> List[str]:
    jobs = info.get("jobs", 1)
    par = ("single process" if jobs == 1 else f"{jobs} worker processes on {info.get('cores', '?')} cores, each "
           "single-threaded (runs overlap: the clocks are per process, wall times include the contention)")
    L = ["# dpstream benchmark results\n",
         f"Generated {info['date']} by `{info['command']}` on {info['machine']} ({par}; BLAS/OpenMP threads = 1; "
         f"the machine is shared, so timings are indicative). Versions: {info['versions']}. dpstream code: "
         f"{info.get('dpstream_source', '?')}.\n",
         f"Settings: δ = {DELTA:g}; cost ratio = k-means cost of the released centers on all points / cost of "
         "scikit-learn `KMeans(n_init=10, random_state=0)` on the same points (k-median: Σ distances / the k-median "
         "reference's); cells are median [min–max] over seeds. Data and stream orders are fixed per data set; seeds "
         "vary the methods' randomness only. Non-private methods do not depend on ε: their value sits in the ∞ "
         "column. † = an offline peer's cell on an in-order variant: the shuffled set's run (same points, "
         "order-invariant).\n"]
    for prev in info.get("previous", []):
        L.append(f"- Records merged from an earlier run: `{prev}`")
    for n in info.get("notes", []):
        L.append(f"- {n}")
    if info.get("notes") or info.get("previous"):
        L.append("")
    rows = []
    for d in ordered(meta):
        m = meta[d]
        ref = m.get("ref_cost")
        rows.append([d, "**held out**" if m.get("held_out") else "tuning", m.get("order", "?"), f"{m['n']:,}",
                     str(m["d"]), str(m["k"]), str(m["tick"]), str(m["T"]), str(m.get("seeds", "–")),
                     f"{ref:.6g}" if ref else "–", f"{m['mean_cost'] / ref:.2f}" if ref else "–",
                     f"`{m.get('fingerprint', '?')}`"])
    L += table(["data set", "set", "order", "n", "d", "k", "tick", "ticks T", "seeds", "reference cost",
                "mean-floor ratio", "data sha256"], rows) + [""]
    return L


def _target_table(rows) -> List[str]:
    return table(["target", "measured", "threshold", "result", "gap"],
                 [[r["target"], r["measured"], r["threshold"], f"**{r['result']}**" if r["result"] == "MISS"
                   else r["result"], r["gap"]] for r in rows])


def first_target_section(summary, meta) -> List[str]:
    rows = first_targets.evaluate(summary, meta)
    L = [f"## Targets of the first releases (partial_fit's default horizon, ε = 1 unless said, δ = 1e-6, median "
         f"of seeds): {targets.tally(rows)}\n",
         "Measured as a user meets them: `partial_fit` without `horizon_ticks` (T = 1,024 ticks), with the last "
         "tick declared (`partial_fit(X, last=True)`, method `dpstream_declared_end`) or not "
         "(`dpstream_default_horizon`). The no-regression rows compare the exact-horizon releases (`dpstream`) "
         "with the values of the report these targets were set against (commit affd0a0). Throughput and state "
         "are the exact-horizon runs'.\n"]
    return L + _target_table(rows) + [""]


def target_section(summary, meta, info) -> List[str]:
    L = first_target_section(summary, meta)
    rows = targets.evaluate(summary, meta)
    L += [f"## Targets of the final releases (ε = 1, δ = 1e-6, exact horizon, median of seeds): "
          f"{targets.tally(rows)}\n"]
    L += _target_table(rows)
    L += ["", "Releases after the first 10% are checked at the checkpoints ≥ 10% of the stream (deciles, the dyadic "
          "ticks T/2 … T/16 and the end), each against `KMeans(n_init=3)` on its prefix; the measured value is the "
          "worst checkpoint's median over seeds (worst single seed in brackets). Throughput is n / CPU seconds "
          "inside `partial_fit`; state is `state_size()` after the last tick (peak after any tick in brackets).\n"]
    ho = targets.held_out(summary, meta)
    if ho:
        L.append(f"### Held-out sets: {targets.tally(ho)}\n")
        L.append("Not targets: the embedding targets' rule (≤ 1.3 and < 0.8× diffprivlib at ε = 1) "
                 "applied to data sets the engine was never tuned on; their in-order variants are in the table "
                 "above.\n")
        L += table(["check", "measured", "threshold", "result", "gap"],
                   [[r["target"], r["measured"], r["threshold"], r["result"], r["gap"]] for r in ho]) + [""]
    if info.get("analysis"):
        L += ["## Analysis\n", info["analysis"].strip(), ""]
    return L


def cost_tables(summary, meta) -> List[str]:
    L = ["## k-means cost ratio at the final release, per data set\n"]
    for d in ordered(meta):
        m = meta[d]
        rows_m = [x for x in KMEANS_ROWS if any(k.startswith(f"{d}|{x}|") for k in summary)]
        if not rows_m:
            continue
        cols = eps_cols(summary, d, rows_m)
        L.append(f"### {d} (n={m['n']:,}, d={m['d']}, k={m['k']}{', held out' if m.get('held_out') else ''}"
                 f"{', ' + m['order'] if m.get('order') != 'shuffled' else ''})\n")
        rows = []
        for meth in rows_m:
            if meth in ("kmeans", "minibatch", "mean"):
                cells = ["–"] * (len(cols) - 1) + [fmt_cell(get_raw(summary, d, meth, "-"))]
            else:
                cells = [fmt_cell(get_raw(summary, d, meth, e)) for e in cols]
            rows.append([label(meth)] + cells)
        L += table(["method"] + [eps_label(e) for e in cols], rows) + [""]
    return L


def inorder_section(summary, meta) -> List[str]:
    pairs = [(d, meta[d]["base"]) for d in ordered(meta) if meta[d].get("base", d) != d]
    if not pairs:
        return []
    L = ["## In order vs shuffled (ε = 1)\n",
         "The same points streamed with their clusters one after another (china: raster order), against the "
         "shuffled stream; quotient = in-order cost ratio / shuffled cost ratio (target for dpstream: ≤ 1.05).\n"]
    rows = []
    for d, base in pairs:
        for meth, e in (("dpstream", "1"), ("dpstream_snap", "1"), ("dpstream_vanilla", "1"), ("minibatch", "-")):
            a, b = get(summary, d, meth, e), get(summary, base, meth, e)
            if a is None and b is None:
                continue
            q = f"{med(a) / med(b):.3f}×" if (a and b) else "–"
            rows.append([d, label(meth), fmt_cell(b), fmt_cell(a), q])
    return L + table(["in-order set", "method", "shuffled", "in order", "quotient"], rows) + [""]


def write_markdown(path: str, records: List[dict], meta: Dict[str, dict], summary: Dict, info: dict) -> None:
    L = header(info, meta)
    L += target_section(summary, meta, info)
    L += problems_section(records)
    L += cost_tables(summary, meta)
    L += inorder_section(summary, meta)
    L += checkpoint_section(summary, meta)
    L += kmedian_section(summary, meta)
    L += state_section(summary, meta)
    L += throughput_section(summary, meta, info)
    L += diagnostics_section(records, meta)
    L += rules_section(meta)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("\n".join(L).rstrip() + "\n")
