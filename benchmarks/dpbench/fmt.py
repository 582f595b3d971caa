"""Formatting shared by the reports: median [min–max] cells, ordering of data sets and methods."""
from __future__ import annotations

from typing import Dict, List

from . import EPS_COLS, datasets
from .peers import REGISTRY as PEERS

KMEANS_ROWS = ["kmeans", "minibatch", "diffprivlib", "dpstream", "dpstream_default_horizon", "dpstream_declared_end",
               "dpstream_snap", "dpstream_vanilla", "mean"]
KMEDIAN_ROWS = ["kmedian", "dpstream_kmedian", "dpstream", "kmeans", "diffprivlib", "minibatch", "mean"]
DP_VARIANTS = ["dpstream", "dpstream_snap", "dpstream_vanilla", "dpstream_kmedian"]


def ordered(meta: Dict[str, dict]) -> List[str]:
    """Data sets in registry order, each shuffled set followed by its in-order variant; held-out last."""
    names = datasets.all_names()
    known = [d for d in names if d in meta]
    return sorted(known, key=lambda d: (bool(meta[d].get("held_out")), names.index(d))) + \
        [d for d in meta if d not in names]


NON_PRIVATE = ("kmeans", "minibatch", "mean", "kmedian")


def eps_cols(summary, ds, methods) -> List[str]:
    """The ε columns of a table of ``methods`` on ``ds``; with a non-private method among them, always the ∞ one
    too (its cell sits there, not under the largest ε that ran)."""
    cols = [e for e in EPS_COLS if any(f"{ds}|{m}|{e}" in summary for m in methods)] or ["1"]
    if "inf" not in cols and any(m in NON_PRIVATE for m in methods):
        cols.append("inf")
    return cols


def eps_label(e: str) -> str:
    return "ε=∞ / non-DP" if e == "inf" else f"ε={e}"


def fmt_agg(a, prec=3) -> str:
    if not a:
        return "–"
    if a["n"] == 1 or a["min"] == a["max"]:
        return f"{a['median']:.{prec}f}"
    return f"{a['median']:.{prec}f} [{a['min']:.{prec}f}–{a['max']:.{prec}f}]"


def fmt_cell(s, key="final_ratio", prec=3, seeds=None) -> str:
    """A cell's median [min–max]; notes for missing seeds (timeouts, caps, skips, errors)."""
    if not s:
        return "–"
    txt = fmt_agg(s.get(key), prec) if s.get(key) else ""
    st = s.get("status") or {}
    notes = []
    if st.get("skipped"):
        notes.append("skipped")
    if st.get("timeout"):
        notes.append(f"{st['timeout']} timeout")
    if st.get("capped"):
        notes.append(f"{st['capped']} capped")
    if st.get("error"):
        notes.append(f"{st['error']} error")
    if notes and s.get(key):
        notes.insert(0, f"{s[key]['n']} seed{'s' if s[key]['n'] != 1 else ''}")
    if notes:
        txt = f"{txt} ({', '.join(notes)})".strip()
    if s.get("from_base") and txt:
        txt += " †"
    return txt or "–"


def fmt_rate(v) -> str:
    return f"{v:,.0f}" if v else "–"


def label(method: str) -> str:
    return PEERS[method].label if method in PEERS else method


def table(head: List[str], rows: List[List[str]]) -> List[str]:
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(r) + " |" for r in rows]
