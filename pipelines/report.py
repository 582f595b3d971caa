"""The report step of a batch run: post-processing of the releases, plus an operator-only evaluation.

From ``<output>/releases.jsonl`` (DP) it writes ``centers.json`` (the last
release's centers) and ``privacy_plan.md`` (the ledger every release carries).
When the job read data this process can load again (the built-in stream or
.npy files) it also writes ``evaluation.json`` and ``report.png`` and prints the
cost against non-private k-means on the same data: those are **NON-PRIVATE**
(they read the raw points) and are for the operator, never for the release
channel.
"""
from __future__ import annotations

import json
import os
import warnings
from typing import List, Optional

import numpy as np

from dpstream.privacy import plan_table


def read_releases(path: str) -> List[dict]:
    with open(path, encoding="utf-8") as fh:
        rels = [json.loads(line) for line in fh if line.strip()]
    return sorted(rels, key=lambda r: r["tick"])


def _raw_data(job) -> Optional[np.ndarray]:
    """The raw points in slot order, when they can be read here cheaply (operator-only)."""
    if job.source == "builtin":
        from dpstream.datasets import default_stream
        return default_stream(job.builtin_n)[0]
    if job.source == "files":
        from pipelines.sources import file_format, match_files
        paths = match_files(job.input)
        if all(file_format(p) == "numpy" for p in paths):
            arrs = [np.load(p, allow_pickle=False) for p in paths if "://" not in p]
            if len(arrs) == len(paths) and all(a.ndim == 2 and a.shape[1] == job.dim for a in arrs):
                X = np.concatenate(arrs)
                return X[np.all(np.isfinite(X), axis=1)]
    return None


def write_report(job, log=print) -> dict:
    from dpstream.offline import cost

    rels = read_releases(job.releases_path)
    if not rels:
        raise RuntimeError(f"{job.releases_path} holds no release")
    last = rels[-1]
    out = job.output
    with open(os.path.join(out, "centers.json"), "w") as fh:
        json.dump({"tick": last["tick"], "epoch": last["epoch"], "centers": last["centers"]}, fh, indent=1)
    table = plan_table(last["privacy"])
    with open(os.path.join(out, "privacy_plan.md"), "w") as fh:
        fh.write(table + "\n")
    summary = {"releases": len(rels), "first_tick": rels[0]["tick"], "last_tick": last["tick"],
               "epochs": last["epoch"] + 1, "dp_count_estimate": last["count_estimate"]}
    log(table)
    log(f"\n{len(rels)} releases, ticks {rels[0]['tick']}..{last['tick']}; final: {len(last['centers'])} "
        f"centers, coreset of {len(last['coreset_weights'])} weighted points, DP count ≈ "
        f"{last['count_estimate']:,.0f}")

    X = _raw_data(job)
    if X is None or job.clock != "position":
        log(f"wrote {out}/releases.jsonl, dead_letter.jsonl, centers.json, privacy_plan.md")
        return summary
    # ---- NON-PRIVATE evaluation (operator only) ----
    from sklearn.cluster import KMeans

    k = job.k
    ref = KMeans(k, n_init=10, random_state=0).fit(X)
    final_ratio = cost(X, np.asarray(last["centers"])) / ref.inertia_
    by_tick = {r["tick"]: np.asarray(r["centers"]) for r in rels}
    n_ticks = last["tick"]
    step = max(1, n_ticks // 20)
    prefix = []
    for t in range(step, n_ticks + 1, step):
        P = X[: t * job.tick_size]
        if P.shape[0] < k:
            continue
        opt = KMeans(k, n_init=3, random_state=0).fit(P).inertia_
        prefix.append((t, cost(P, by_tick[t]) / opt if opt > 0 else float("nan")))
    evaluation = {"NON_PRIVATE": "evaluation against the raw data; never publish with the releases",
                  "cost_ratio_final": final_ratio, "kmeans_cost": float(ref.inertia_),
                  "prefix_cost_ratios": prefix, "n_points": int(X.shape[0])}
    summary.update(cost_ratio_final=final_ratio)
    with open(os.path.join(out, "evaluation.json"), "w") as fh:
        json.dump(evaluation, fh, indent=1)
    try:
        _plot(X, np.asarray(last["centers"]), ref.cluster_centers_, prefix, os.path.join(out, "report.png"))
    except Exception as exc:  # the plot is optional; the releases are already written
        warnings.warn(f"report.png not written: {exc}")
    log(f"[non-private evaluation] final cost / k-means cost on the same data = {final_ratio:.3f}")
    log(f"wrote {out}/releases.jsonl, dead_letter.jsonl, centers.json, privacy_plan.md, evaluation.json, "
        f"report.png")
    return summary


def _plot(X, centers, ref_centers, prefix, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 2, figsize=(11, 4.5))
    idx = np.random.default_rng(0).choice(X.shape[0], size=min(20000, X.shape[0]), replace=False)
    ax[0].scatter(X[idx, 0], X[idx, 1], s=1, c="0.7", label="data (sample; NON-PRIVATE)")
    ax[0].scatter(ref_centers[:, 0], ref_centers[:, 1], marker="x", c="k", s=60, label="k-means (non-private)")
    ax[0].scatter(centers[:, 0], centers[:, 1], marker="o", facecolors="none", edgecolors="r", s=80,
                  label="dpstream (DP release)")
    ax[0].legend(loc="best", fontsize=8)
    ax[0].set_title("final centers (first two coordinates)")
    if prefix:
        t, r = zip(*prefix)
        ax[1].plot(t, r, "o-")
    ax[1].axhline(1.0, c="k", lw=0.5)
    ax[1].set_xlabel("tick")
    ax[1].set_ylabel("cost / k-means cost of the prefix")
    ax[1].set_title("release quality over the stream")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
