"""The plots: cost ratio vs ε per data set, prefix cost ratio vs fraction of the stream (shuffled solid,
in order dashed), state vs n on blobs."""
from __future__ import annotations

import math
import os

import numpy as np

from . import EPS_COLS
from .fmt import ordered
from .summary import get

COLORS = dict(kmeans="k", minibatch="tab:gray", diffprivlib="tab:red", dpstream="tab:blue",
              dpstream_snap="tab:orange", dpstream_vanilla="tab:green", mean="tab:brown", dpstream_kmedian="tab:purple")
EPS_X = {e: (math.log2(float(e)) if e != "inf" else 4.0) for e in EPS_COLS}


def _save(plt, fig, out: str, name: str) -> None:
    fig.tight_layout()
    fig.savefig(os.path.join(out, name), dpi=70)
    plt.close(fig)


def _grid(plt, n):
    nc = min(4, n)
    nr = math.ceil(n / nc)
    fig, axes = plt.subplots(nr, nc, figsize=(4.2 * nc, 3.4 * nr), squeeze=False)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    return fig, axes


def cost_vs_eps(plt, out, summary, dsets):
    fig, axes = _grid(plt, len(dsets))
    for ax, d in zip(axes.flat, dsets):
        for meth in ("kmeans", "minibatch", "mean"):
            s = get(summary, d, meth, "-")
            if s:
                ax.axhline(s["final_ratio"]["median"], color=COLORS[meth], ls="--", lw=1, label=meth)
        for meth in ("diffprivlib", "dpstream", "dpstream_snap", "dpstream_vanilla"):
            pts = [(EPS_X[e], get(summary, d, meth, e)) for e in EPS_COLS if get(summary, d, meth, e)]
            if not pts:
                continue
            med = np.array([p[1]["final_ratio"]["median"] for p in pts])
            lo = med - np.array([p[1]["final_ratio"]["min"] for p in pts])
            hi = np.array([p[1]["final_ratio"]["max"] for p in pts]) - med
            ax.errorbar([p[0] for p in pts], med, yerr=[lo, hi], marker="o", ms=3, capsize=2, color=COLORS[meth],
                        label=meth)
        ax.set_yscale("log")
        ax.set_xticks([EPS_X[e] for e in EPS_COLS])
        ax.set_xticklabels(["0.5", "1", "2", "4", "8", "∞"])
        ax.set_xlabel("ε")
        ax.set_ylabel("cost ratio (log)")
        ax.set_title(d, fontsize=9)
        ax.grid(alpha=0.3)
    axes.flat[0].legend(fontsize=6)
    _save(plt, fig, out, "cost_vs_eps.png")


def cost_vs_checkpoint(plt, out, summary, dsets):
    fig, axes = _grid(plt, len(dsets))
    for ax, d in zip(axes.flat, dsets):
        for name, ls in ((d, "-"), (d + "_inorder", "--")):
            for meth, e in (("minibatch", "-"), ("dpstream", "1"), ("dpstream_snap", "1"), ("dpstream_vanilla", "1")):
                s = get(summary, name, meth, e)
                if not s or "checkpoints" not in s:
                    continue
                ck = sorted(s["checkpoints"].values(), key=lambda c: c["frac"])
                ax.plot([c["frac"] for c in ck], [c["ratio"]["median"] for c in ck], marker="o", ms=2, ls=ls,
                        color=COLORS[meth], label=f"{meth}{' in order' if ls == '--' else ''}")
        ax.axhline(1.5, color="r", ls=":", lw=1)
        ax.axvline(0.1, color="r", ls=":", lw=1)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("fraction of stream seen")
        ax.set_ylabel("prefix cost ratio (ε=1)")
        ax.set_title(d, fontsize=9)
        ax.grid(alpha=0.3)
    axes.flat[0].legend(fontsize=6)
    _save(plt, fig, out, "cost_vs_checkpoint.png")


def state_vs_n(plt, out, summary, meta):
    bl = [d for d in ("blobs_1e4", "blobs_1e5", "blobs_1e6") if d in meta]
    if not bl:
        return
    fig, ax = plt.subplots(figsize=(5.5, 4))
    ns = [meta[d]["n"] for d in bl]
    for meth in ("dpstream", "dpstream_snap", "dpstream_vanilla"):
        ss = [get(summary, d, meth, "1") for d in bl]
        if all(s and s.get("state_final") for s in ss):
            ax.plot(ns, [s["state_final"]["median"] for s in ss], marker="o", color=COLORS[meth], label=f"{meth} final")
            if all(s.get("state_max") for s in ss):
                ax.plot(ns, [s["state_max"]["median"] for s in ss], marker="x", ls="--", color=COLORS[meth],
                        label=f"{meth} peak")
    ax.plot(ns, [n * 10 for n in ns], color="k", lw=1, label="n·d (raw data)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("n (blobs, d=10)")
    ax.set_ylabel("floats in state (ε=1)")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    _save(plt, fig, out, "state_vs_n.png")


def write_plots(out, summary, meta) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    dsets = [d for d in ordered(meta) if meta[d].get("base", d) == d]
    if not dsets:
        return
    cost_vs_eps(plt, out, summary, dsets)
    cost_vs_checkpoint(plt, out, summary, dsets)
    state_vs_n(plt, out, summary, meta)
