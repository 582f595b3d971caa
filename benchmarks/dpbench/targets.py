"""The final-release targets, evaluated on a summary (ε = 1, δ = 1e-6, exact horizon, median over seeds).

Every function takes the summary (:func:`dpbench.summary.summarise`) and the data sets' meta and returns
rows ``dict(target, data, measured, threshold, result, gap, seeds, value)`` with ``result`` one of PASS,
MISS or NOT RUN (the data set or the peer was not in the run); ``gap`` is measured − threshold (ratios)
or the relative shortfall/excess (throughput, state). A cell with fewer seeds than asked says so."""
from __future__ import annotations

from typing import Dict, List

from .summary import get, med

EPS = "1"
SEEDS = 5
PASS, MISS, NOT_RUN = "PASS", "MISS", "NOT RUN"

RATIO_TARGETS = [("digits", 1.45), ("gmm100", 5.0), ("emb256", 1.3), ("emb784", 1.3), ("blobs_1e4", 1.3),
                 ("blobs_1e5", 1.03), ("blobs_1e6", 1.01), ("china", 1.06)]
VS_DIFFPRIVLIB = [("emb256", 0.8, "<"), ("emb784", 0.8, "<"), ("skewed", 1.0, "≤")]
INORDER_MAX = 1.05
PREFIX = ("blobs_1e5", ["0.5", "1"], 0.1, 1.5)
THROUGHPUT = [(784, ["emb784", "pixels", "pix784"], 50_000), (10, ["blobs_1e6", "blobs_1e5", "blobs_1e4"], 150_000)]
STATE = (["emb784", "pixels", "pix784"], 3.0)
HELD_OUT_MAX, HELD_OUT_VS_DPL = 1.3, 0.8


def _row(target, data, measured, threshold, ok, gap, seeds=None, value=None):
    res = NOT_RUN if ok is None else (PASS if ok else MISS)
    note = f" ({seeds} seed{'s' if seeds != 1 else ''}; target: {SEEDS})" if seeds is not None and seeds < SEEDS else ""
    return dict(target=target, data=data, measured=(measured + note) if ok is not None else measured,
                threshold=threshold, result=res, gap=gap if ok is not None else "–", seeds=seeds, value=value)


def _n(cell):
    return cell["final_ratio"]["n"] if cell and cell.get("final_ratio") else None


def _not_run(target, data, threshold, why="not run"):
    return _row(target, data, why, threshold, None, "–")


def ratio_le(summary, d, thr, method="dpstream", label=None, eps=EPS) -> dict:
    c = get(summary, d, method, eps)
    t = label or f"{d} cost ratio"
    if c is None:
        return _not_run(t, d, f"≤ {thr:g}")
    v = med(c)
    return _row(t, d, f"{v:.3f}", f"≤ {thr:g}", v <= thr, f"{v - thr:+.3f} ({100 * (v / thr - 1):+.1f}%)", _n(c), v)


def vs_diffprivlib(summary, d, factor, op) -> dict:
    a, b = get(summary, d, "dpstream", EPS), get(summary, d, "diffprivlib", EPS)
    want = f"{op} {factor:g}× diffprivlib" if factor != 1 else f"{op} diffprivlib"
    t = f"{d}: dpstream {want}"
    if a is None or b is None:
        return _not_run(t, d, want, "not run" if a is None else "diffprivlib not run")
    q = med(a) / med(b)
    ok = q < factor if op == "<" else q <= factor
    return _row(t, d, f"{med(a):.3f} vs {med(b):.3f} (÷ = {q:.3f})", f"{op} {factor:g}", ok,
                f"{q - factor:+.3f} ({100 * (q / factor - 1):+.1f}%)", min(_n(a), _n(b)), q)


def inorder(summary, meta, method="dpstream", suffix="") -> List[dict]:
    rows = []
    for d, m in meta.items():
        base = m.get("base", d)
        if base == d:
            continue
        t = f"{d} within {INORDER_MAX:g}× of {base}" + (" (held out)" if m.get("held_out") else "") + suffix
        a, b = get(summary, d, method, EPS), get(summary, base, method, EPS)
        if a is None or b is None:
            rows.append(_not_run(t, d, f"≤ {INORDER_MAX:g}×", "not run" if a is None else f"{base} not run"))
            continue
        q = med(a) / med(b)
        rows.append(_row(t, d, f"{med(a):.3f} / {med(b):.3f} = {q:.3f}×", f"≤ {INORDER_MAX:g}×", q <= INORDER_MAX,
                         f"{q - INORDER_MAX:+.3f} ({100 * (q / INORDER_MAX - 1):+.1f}%)", min(_n(a), _n(b)), q))
    return rows


def worst_prefix(cell, min_frac):
    """(worst median prefix ratio over checkpoints ≥ min_frac, its fraction, worst single seed)."""
    worst, at, any_seed = None, None, None
    for c in (cell.get("checkpoints") or {}).values():
        if c["frac"] < min_frac - 1e-9 or not c["ratio"]:
            continue
        if worst is None or c["ratio"]["median"] > worst:
            worst, at = c["ratio"]["median"], c["frac"]
        any_seed = max(any_seed or 0.0, c["ratio"]["max"])
    return worst, at, any_seed


def prefix_le(summary, d, e, frac, thr, method="dpstream", suffix="") -> dict:
    """The worst median release from ``frac`` of stream ``d`` on (``method`` at ε = ``e``) against ≤ ``thr``."""
    t = f"{d}: releases after {frac:.0%} within {thr:g}× of the prefix optimum, ε = {e}{suffix}"
    c = get(summary, d, method, e)
    v, at, seed_max = worst_prefix(c, frac) if c else (None, None, None)
    if v is None:
        return _not_run(t, d, f"≤ {thr:g}")
    return _row(t, d, f"{v:.3f} at {at:.3g}·n [worst seed {seed_max:.3f}]", f"≤ {thr:g}", v <= thr,
                f"{v - thr:+.3f}", _n(c), v)


def prefix(summary) -> List[dict]:
    d, eps_list, frac, thr = PREFIX
    return [prefix_le(summary, d, e, frac, thr) for e in eps_list]


def _first(summary, names):
    for d in names:
        c = get(summary, d, "dpstream", EPS)
        if c and c.get("pts_per_s_cpu"):
            return d, c
    return names[0], None


def throughput(summary, meta) -> List[dict]:
    rows = []
    for dim, names, thr in THROUGHPUT:
        d, c = _first(summary, names)
        t = f"throughput at d = {dim}, one core (CPU time in partial_fit)"
        if c is None:
            rows.append(_not_run(t, d, f"≥ {thr:,} pts/s"))
            continue
        v, w = med(c, "pts_per_s_cpu"), med(c, "pts_per_s")
        rows.append(_row(t, d, f"{v:,.0f} pts/s CPU ({w:,.0f} wall)", f"≥ {thr:,} pts/s", v >= thr,
                         f"{100 * (v / thr - 1):+.1f}%", _n(c), v))
    return rows


def state(summary, meta) -> List[dict]:
    names, pct_max = STATE
    d, c = _first(summary, names)
    t = "state at n = 1e5, d = 784 (final, after the horizon)"
    if c is None or not c.get("state_final"):
        return [_not_run(t, d, f"≤ {pct_max:g}% of n·d")]
    nd = meta[d]["n"] * meta[d]["d"]
    f, p = med(c, "state_final"), med(c, "state_max")
    pct = 100 * f / nd
    peak = f" (peak {100 * p / nd:.2f}%)" if p else ""
    return [_row(t, d, f"{f:,.0f} floats = {pct:.2f}% of n·d{peak}", f"≤ {pct_max:g}%", pct <= pct_max,
                 f"{pct - pct_max:+.2f} pp", _n(c), pct)]


def evaluate(summary: Dict, meta: Dict) -> List[dict]:
    """The final-release targets, in the order they were set."""
    rows = []
    for d, thr in RATIO_TARGETS:
        rows.append(ratio_le(summary, d, thr))
        rows += [vs_diffprivlib(summary, d, f, op) for dd, f, op in VS_DIFFPRIVLIB if dd == d]
    rows += inorder(summary, meta)
    rows += prefix(summary)
    rows += [vs_diffprivlib(summary, d, f, op) for d, f, op in VS_DIFFPRIVLIB if d not in dict(RATIO_TARGETS)]
    rows += throughput(summary, meta)
    rows += state(summary, meta)
    return rows


def held_out(summary: Dict, meta: Dict) -> List[dict]:
    """Not targets: the embedding rule (≤ 1.3 and < 0.8× diffprivlib) applied to the held-out
    sets, to see whether the tuning generalises."""
    rows = []
    for d, m in meta.items():
        if not m.get("held_out") or m.get("base", d) != d:
            continue
        rows.append(ratio_le(summary, d, HELD_OUT_MAX, label=f"{d} (held out) cost ratio"))
        rows.append(vs_diffprivlib(summary, d, HELD_OUT_VS_DPL, "<"))
    return rows


def tally(rows: List[dict]) -> str:
    c = {k: sum(1 for r in rows if r["result"] == k) for k in (PASS, MISS, NOT_RUN)}
    return f"{c[PASS]} PASS, {c[MISS]} MISS, {c[NOT_RUN]} not run"
