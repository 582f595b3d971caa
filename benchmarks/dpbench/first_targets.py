"""The targets of useful first releases, evaluated on a summary (δ = 1e-6, median over seeds).

They are measured as a user meets them: ``partial_fit`` with its default horizon (T = 1,024 ticks, the
stream's length unknown), either with the last tick declared (``partial_fit(X, last=True)``: a file read
chunk by chunk) or without (a live stream). The no-regression rows compare the exact-horizon releases
(``dpstream``) with the values of the report these targets were set against, so that like is compared
with like. Rows are :func:`dpbench.targets._row` dicts (PASS, MISS or NOT RUN with the gap)."""
from __future__ import annotations

from typing import Dict, List

from . import targets

DEFAULT, END, EXACT = "dpstream_default_horizon", "dpstream_declared_end", "dpstream"
#: ε of the default-horizon methods in the default grid (``--first-release-eps``): the rows below read no other
EPS = ("0.5", "1", "4")

SHORT = [("digits", 1.45), ("blobs_1e4", 1.3), ("emb784_1e4", 1.30), ("pixels_1e4", 1.30)]  # END, ε = 1
PREFIX_FROM = 0.1
PREFIX = [("blobs_1e5", "1", 1.5), ("blobs_1e5", "0.5", 2.0), ("emb784", "1", 1.5), ("emb784", "0.5", 2.0)]
FINAL = [("emb784", "1", 1.10), ("china", "4", 1.02)]  # DEFAULT
# EXACT at ε = 1: the releases of the report (commit affd0a0) the targets were set against
NO_REGRESSION = [("blobs_1e5", 1.012), ("blobs_1e6", 1.008), ("gmm100", 3.7),
                 ("emb384", 1.163), ("aniso32", 1.058), ("pixels", 1.207)]

WORDS = {DEFAULT: "no declared end", END: "declared end", EXACT: "exact horizon"}


def short(summary) -> List[dict]:
    return [targets.ratio_le(summary, d, thr, method=END, label=f"{d} final release, {WORDS[END]}") for d, thr in SHORT]


def prefix(summary) -> List[dict]:
    return [targets.prefix_le(summary, d, e, PREFIX_FROM, thr, method=DEFAULT, suffix=f", {WORDS[DEFAULT]}")
            for d, e, thr in PREFIX]


def final(summary) -> List[dict]:
    return [targets.ratio_le(summary, d, thr, method=DEFAULT, eps=e,
                             label=f"{d} final release, ε = {e}, {WORDS[DEFAULT]}") for d, e, thr in FINAL]


def inorder(summary, meta) -> List[dict]:
    """Each in-order set within ``targets.INORDER_MAX`` of its shuffled set, per method (END, then DEFAULT)."""
    rows = []
    for method in (END, DEFAULT):
        rows += targets.inorder(summary, meta, method=method, suffix=f", {WORDS[method]}")
    return rows


def no_regression(summary, meta) -> List[dict]:
    rows = []
    for d, thr in NO_REGRESSION:
        held = " (held out)" if meta.get(d, {}).get("held_out") else ""
        rows.append(targets.ratio_le(summary, d, thr, method=EXACT, label=f"{d}{held}, no regression, {WORDS[EXACT]}"))
    return rows


def evaluate(summary: Dict, meta: Dict) -> List[dict]:
    """The targets in the order they were set: short streams, releases after the first tenth, the full
    high-dimensional and low-dimensional streams, in-order streams, no regression, the costs."""
    return (short(summary) + prefix(summary) + final(summary) + inorder(summary, meta)
            + no_regression(summary, meta) + targets.throughput(summary, meta) + targets.state(summary, meta))
