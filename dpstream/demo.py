"""``make run``: the engine over the built-in default stream.

Writes, under --out:
  releases.jsonl      every tick's release (DP: safe to publish)
  centers.json        the final release's centers (DP)
  privacy_plan.md     the privacy ledger of the run
  evaluation.json     NON-PRIVATE evaluation against k-means on the raw data
                      (operator-only; never part of the release channel)
  report.png          centers over the data and the cost over ticks (NON-PRIVATE: it draws raw points)
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import warnings

import numpy as np


def _seed(path):
    if path is None:
        return None  # OS entropy
    with open(path, "rb") as fh:
        data = fh.read().strip()
    if len(data) < 16:
        raise SystemExit(f"error: seed file {path} must hold at least 16 bytes")
    return data


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="dpstream demo: DP streaming k-means over the built-in stream")
    ap.add_argument("--out", default="out", help="output directory (default: out)")
    ap.add_argument("--epsilon", type=float, default=1.0)
    ap.add_argument("--delta", type=float, default=1e-6)
    ap.add_argument("--n", type=int, default=200_000, help="points in the default stream")
    ap.add_argument("--tick-size", type=int, default=1000)
    ap.add_argument("--seed-file", default=None, help="file holding the secret master seed (default: OS entropy)")
    args = ap.parse_args(argv)
    if args.n < 1 or args.tick_size < 1:
        ap.error("--n and --tick-size must be >= 1")

    from sklearn.cluster import KMeans

    from .api import DPStreamClusterer
    from .datasets import default_stream
    from .offline import cost

    X, _, info = default_stream(args.n)
    os.makedirs(args.out, exist_ok=True)
    n_ticks = math.ceil(X.shape[0] / args.tick_size)
    try:
        model = DPStreamClusterer(info["n_clusters"], epsilon=args.epsilon, delta=args.delta, radius=info["radius"],
                                  random_state=_seed(args.seed_file), tick_size=args.tick_size,
                                  horizon_ticks=n_ticks)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"dpstream: {X.shape[0]} points (d={X.shape[1]}, k={info['n_clusters']}, public radius "
          f"{info['radius']:.2f}) in {n_ticks} ticks of {args.tick_size}, epsilon={args.epsilon:g}, "
          f"delta={args.delta:g}")
    t0 = time.time()
    costs = []
    with open(os.path.join(args.out, "releases.jsonl"), "w") as fh:
        for t in range(n_ticks):
            model.partial_fit(X[t * args.tick_size:(t + 1) * args.tick_size])
            rel = model.release_
            fh.write(json.dumps(rel.to_dict()) + "\n")
            costs.append(rel.centers)
            if (t + 1) % max(1, n_ticks // 10) == 0 or t + 1 == n_ticks:
                print(f"  tick {rel.tick}/{n_ticks}  epoch {rel.epoch}  |F|={rel.n_candidate_centers}  "
                      f"DP count ≈ {rel.count_estimate:,.0f}  ({time.time() - t0:.1f}s)", flush=True)
    elapsed = time.time() - t0
    rel = model.release_
    with open(os.path.join(args.out, "centers.json"), "w") as fh:
        json.dump({"tick": rel.tick, "centers": rel.centers.tolist()}, fh, indent=1)
    with open(os.path.join(args.out, "privacy_plan.md"), "w") as fh:
        fh.write(rel.plan.table() + "\n")

    # ---- NON-PRIVATE evaluation (operator only) ----
    ref = KMeans(info["n_clusters"], n_init=10, random_state=0).fit(X)
    dp_cost = cost(X, rel.centers)
    prefix_ratio = []
    for t in range(max(1, n_ticks // 20), n_ticks + 1, max(1, n_ticks // 20)):
        P = X[: t * args.tick_size]
        opt = KMeans(info["n_clusters"], n_init=3, random_state=0).fit(P).inertia_
        prefix_ratio.append((t, cost(P, costs[t - 1]) / opt))
    evaluation = {"NON_PRIVATE": "evaluation against the raw data; never publish with the releases",
                  "cost_ratio_final": dp_cost / ref.inertia_, "kmeans_cost": ref.inertia_, "dp_cost": dp_cost,
                  "prefix_cost_ratios": prefix_ratio, "points_per_second": X.shape[0] / elapsed,
                  "state_floats": model.state_size(), "clipped_points": model.n_clipped_}
    with open(os.path.join(args.out, "evaluation.json"), "w") as fh:
        json.dump(evaluation, fh, indent=1)
    try:
        _report(X, rel.centers, ref.cluster_centers_, prefix_ratio, os.path.join(args.out, "report.png"))
    except Exception as exc:  # the report is optional; the releases are already written
        warnings.warn(f"report.png not written: {exc}")
    print(rel.plan.table())
    print(f"\nfinal release at tick {rel.tick}: {rel.centers.shape[0]} centers, coreset of "
          f"{rel.coreset_points.shape[0]} weighted points, {X.shape[0] / elapsed:,.0f} points/s, "
          f"state {model.state_size():,} floats")
    print(f"[non-private evaluation] cost / k-means cost on the same data = {dp_cost / ref.inertia_:.3f}")
    print(f"wrote {args.out}/releases.jsonl, centers.json, privacy_plan.md, evaluation.json, report.png")
    return 0


def _report(X, centers, ref_centers, prefix_ratio, path):
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
    ax[0].set_title("final centers")
    t, r = zip(*prefix_ratio)
    ax[1].plot(t, r, "o-")
    ax[1].axhline(1.0, c="k", lw=0.5)
    ax[1].set_xlabel("tick")
    ax[1].set_ylabel("cost / k-means cost of the prefix")
    ax[1].set_title("release quality over the stream")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
