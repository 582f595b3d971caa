"""The report step of a batch run: post-processing of the releases, plus an operator-only evaluation.

From ``<output>/releases.jsonl`` (DP) it writes ``centers.json`` (the last
release's centers) and ``privacy_plan.md`` (the ledger every release carries).

It then reads the raw input again in this process — the built-in stream, or the
``.npy``, ``.csv`` and ``.jsonl`` files of ``--input`` when they are on a local disk,
parsed as the job parsed them (same format, same CSV header rule, same slots and
ticks) — and writes ``non_private/evaluation.json`` and ``non_private/report.png``: the cost of the released
centers against a non-private clustering of the same points (k-means: Σ squared
distances against scikit-learn's KMeans; k-median: Σ distances against weighted
Lloyd with Weiszfeld medians), on the whole stream and on each prefix of ticks.
Those two files are **NON-PRIVATE** (they read and draw the raw points): for the
operator, never for the release channel, so they live in their own folder, never beside the
releases (:mod:`pipelines.outputs`); an earlier run's evaluation is removed first, and every
file is written under a temporary name and renamed. ``report.png`` shows the data and centers
in the plane of the raw points' first two principal components (any d; a GPS pair (lat, lon)
is drawn as a map, longitude on x). When the evaluation cannot be made it says
why. It prints a progress line while it works (the evaluation is the slow part).
"""
from __future__ import annotations

import json
import os
import sys
import time
import warnings
from typing import List, Optional, Tuple

import numpy as np

from dpstream.params import objective_exponent
from dpstream.plan_text import plan_table

PREFIX_SAMPLE = 20_000  # k-median prefixes are scored on a uniform sample of at most this many points


def read_releases(path: str) -> List[dict]:
    """The release dicts of a release log, whole (references to an earlier tick's coreset resolved)."""
    from dpstream.release_log import resolve

    with open(path, encoding="utf-8") as fh:
        rels = [d for _, d in resolve([json.loads(line) for line in fh if line.strip()], f"{path}: ")]
    return sorted(rels, key=lambda r: (r.get("run", 0), r["tick"]))


class _Progress:
    """A progress line on stderr, at most every ``every`` seconds (and at the end)."""

    def __init__(self, what: str, total: int, every: float = 2.0, file=None):
        self.what, self.total, self.every = what, max(1, total), every
        self.file = file or sys.stderr
        self.t0 = self.last = time.time()

    def step(self, done: int, force: bool = False) -> None:
        now = time.time()
        if not force and now - self.last < self.every and done < self.total:
            return
        self.last = now
        el = now - self.t0
        eta = el / done * (self.total - done) if done else float("nan")
        tail = f", ETA {eta:.0f} s" if done < self.total and done else ""
        print(f"dpstream: report: {self.what} {done}/{self.total} ({el:.0f} s{tail})", file=self.file, flush=True)


def raw_points(job) -> Tuple[Optional[np.ndarray], Optional[np.ndarray], str]:
    """The valid raw points in slot order and their ticks, as the job saw them (operator-only):
    ``(X, ticks, "")``, or ``(None, None, why not)``. Points outside the horizon (and, on the
    event-time clock, without a timestamp) are left out: they never reached the clusterer."""
    from pipelines.job_clock import tick_clock

    clock = tick_clock(job)
    if job.source == "builtin":
        from dpstream.datasets import default_stream
        X = default_stream(job.builtin_n)[0]
        slots, ts = np.arange(X.shape[0], dtype=np.int64), np.full(X.shape[0], np.nan)
    elif job.source == "files":
        from pipelines.sources import plan_files
        try:
            specs = job.files or plan_files(job.input, job.fmt, job.csv_header)[0]
        except ValueError as e:
            return None, None, f"the input cannot be listed again: {e}"
        if any("://" in s.path for s in specs):
            return None, None, "the input is not on a local disk"
        xs, ss, tss = [], [], []
        prog = _Progress("reading the input again", len(specs))
        for i, spec in enumerate(specs):
            x, s, t = _read_points(spec, job.dim, job)
            xs.append(x)
            ss.append(s)
            tss.append(t)
            prog.step(i + 1)
        X = np.concatenate(xs) if xs else np.zeros((0, job.dim))
        slots, ts = np.concatenate(ss), np.concatenate(tss)
    else:
        return None, None, "a streaming input cannot be read again"
    if job.clock == "event_time":
        keep = np.isfinite(ts)
        X, slots, ts = X[keep], slots[keep], ts[keep]
    ticks = clock.ticks(slots, ts)
    keep = clock.in_horizon(ticks)
    if not keep.any():
        return None, None, "no valid record of the input lies inside the horizon"
    return X[keep], ticks[keep], ""


def _read_points(spec, dim: int, job=None):
    """(points, slots, ts) of one file's valid records, parsed as the job parses them."""
    from pipelines.formats import read_parquet, text_options
    from transforms.parser import parse_record
    from transforms.records import ParsedBatch, Record

    if spec.fmt == "numpy":
        arr = read_parquet(spec.path, spec.columns) if spec.path.lower().endswith(".parquet") \
            else np.load(spec.path, allow_pickle=False)
        if arr.ndim != 2 or arr.shape[1] != dim or arr.dtype.kind not in "iuf":
            return np.zeros((0, dim)), np.zeros(0, np.int64), np.zeros(0)
        X = arr.astype(np.float64)
        ok = np.all(np.isfinite(X), axis=1)
        idx = np.flatnonzero(ok)
        return X[idx], idx.astype(np.int64) + spec.offset, np.full(idx.size, np.nan)
    from pipelines.file_bytes import read_all, split_lines
    lines = split_lines(read_all(spec.path))
    if spec.skip_header:
        lines = lines[1:]
    pts, slots, ts = [], [], []
    opts = text_options(job, spec.fmt) if job is not None else None
    for i, line in enumerate(lines):  # the report, not a DoFn: one pass over a local file
        got, _ = parse_record(Record(line, spec.offset + i), dim, spec.fmt, text_options=opts)
        for p in got:
            if isinstance(p, ParsedBatch):
                continue
            pts.append(p.point)
            slots.append(p.slot)
            ts.append(np.nan if p.ts is None else p.ts)
    X = np.array(pts, dtype=np.float64).reshape(-1, dim)
    return X, np.array(slots, dtype=np.int64), np.array(ts, dtype=np.float64)


def _reference(X: np.ndarray, k: int, objective: str, n_init: int) -> Tuple[np.ndarray, float]:
    """A non-private clustering of X and its cost (k-means: Σ squared distances; k-median: Σ distances)."""
    from dpstream.offline import cost, weighted_kmedian
    if objective == "kmedian":
        C = weighted_kmedian(X, np.ones(X.shape[0]), k, np.random.default_rng(0), n_init=n_init)
        return C, cost(X, C, z=1)
    from sklearn.cluster import KMeans
    km = KMeans(k, n_init=n_init, random_state=0).fit(X)
    return km.cluster_centers_, float(km.inertia_)


def write_report(job, log=print) -> dict:
    from dpstream.offline import cost

    from pipelines.outputs import non_private_dir, remove_stale_evaluation, write_atomic, write_text_atomic

    out = job.output
    remove_stale_evaluation(out)
    rels = read_releases(job.releases_path)
    if not rels:
        raise RuntimeError(f"{job.releases_path} holds no release")
    last = rels[-1]
    write_text_atomic(os.path.join(out, "centers.json"),
                      json.dumps({"tick": last["tick"], "epoch": last["epoch"], "centers": last["centers"]},
                                 indent=1))
    table = plan_table(last["privacy"])
    write_text_atomic(os.path.join(out, "privacy_plan.md"), table + "\n")
    summary = {"releases": len(rels), "first_tick": rels[0]["tick"], "last_tick": last["tick"],
               "epochs": last["epoch"] + 1, "dp_count_estimate": last["count_estimate"]}
    log(table)
    log(f"\n{len(rels)} releases, ticks {rels[0]['tick']}..{last['tick']}; final: {len(last['centers'])} "
        f"centers, coreset of {len(last['coreset_weights'])} weighted points, DP count ≈ "
        f"{last['count_estimate']:,.0f}")

    X, ticks, why = raw_points(job)
    if X is None:
        log(f"no non_private/evaluation.json / report.png: {why}")
        log(f"wrote {out}/releases.jsonl, centers.json, privacy_plan.md and the NON-PRIVATE non_private/dead_letter.jsonl")
        summary["evaluation"] = f"not written: {why}"
        return summary
    # ---- NON-PRIVATE evaluation (operator only) ----
    k, objective = job.k, job.objective
    z = objective_exponent(objective)
    name = {"kmeans": "k-means cost (Σ squared distances)", "kmedian": "k-median cost (Σ distances)"}[objective]
    ref_name = ("scikit-learn KMeans (k-means++, n_init=10)" if objective == "kmeans"
                else "weighted Lloyd with Weiszfeld medians (D¹ seeding, n_init=2)")
    n_ticks = last["tick"]
    step = max(1, n_ticks // 20)
    prefix_ticks = list(range(step, n_ticks + 1, step))
    prog = _Progress("non-private evaluation, prefix", len(prefix_ticks) + 1)
    prog.step(0, force=True)
    ref_centers, ref_cost = _reference(X, k, objective, n_init=10 if objective == "kmeans" else 2)
    final_ratio = cost(X, np.asarray(last["centers"]), z=z) / ref_cost if ref_cost > 0 else float("nan")
    prog.step(1)
    by_tick = {r["tick"]: np.asarray(r["centers"]) for r in rels}
    order = np.argsort(ticks, kind="stable")
    X_sorted, t_sorted = X[order], ticks[order]
    rng = np.random.default_rng(0)
    prefix = []
    for i, t in enumerate(prefix_ticks):
        P = X_sorted[: int(np.searchsorted(t_sorted, t, side="right"))]
        if P.shape[0] >= k and t in by_tick:
            if objective == "kmedian" and P.shape[0] > PREFIX_SAMPLE:
                P = P[rng.choice(P.shape[0], PREFIX_SAMPLE, replace=False)]
            _, opt = _reference(P, k, objective, n_init=3 if objective == "kmeans" else 1)
            prefix.append((t, cost(P, by_tick[t], z=z) / opt if opt > 0 else float("nan")))
        prog.step(i + 2)
    evaluation = {"NON_PRIVATE": "evaluation against the raw data; never publish with the releases",
                  "objective": objective, "cost": name, "reference": ref_name,
                  "cost_ratio_final": final_ratio, "reference_cost": ref_cost,
                  "prefix_cost_ratios": prefix, "n_points": int(X.shape[0])}
    if objective == "kmedian":
        evaluation["prefix_sample"] = f"prefixes with more than {PREFIX_SAMPLE} points are scored on a uniform " \
                                      f"sample of {PREFIX_SAMPLE}"
    summary.update(cost_ratio_final=final_ratio)
    private_out = non_private_dir(out)
    write_text_atomic(os.path.join(private_out, "evaluation.json"), json.dumps(evaluation, indent=1))
    wrote = "evaluation.json"
    try:
        write_atomic(os.path.join(private_out, "report.png"),
                     lambda tmp: _plot(X, np.asarray(last["centers"]), ref_centers, prefix, tmp, objective,
                                       gps=_looks_like_gps(job)))
        wrote += ", report.png"
    except Exception as exc:  # the plot is optional; the releases are already written
        warnings.warn(f"report.png not written: {exc}")
    log(f"[NON-PRIVATE evaluation, operator only] final {name} of the released centers / the same cost of "
        f"{ref_name} on the same {X.shape[0]:,} points = {final_ratio:.3f}")
    log(f"wrote {out}/releases.jsonl, centers.json, privacy_plan.md; NON-PRIVATE (operator only, never publish) "
        f"in {private_out}/: {wrote} and, by default, the dead letters")
    summary["non_private_dir"] = private_out
    return summary


def _looks_like_gps(job) -> bool:
    """A 2-D job whose public center or columns say (lat, lon): drawn as a map, longitude on x."""
    cols = [str(c).lower() for c in (getattr(job, "columns", None) or ())]
    if job.dim != 2:
        return False
    if cols and cols[0].startswith("lat") and cols[1].startswith(("lon", "lng")):
        return True
    c = job.center
    return c is not None and abs(c[0]) <= 90 and abs(c[1]) <= 180 and job.radius <= 10


def plane(X: np.ndarray, gps: bool = False):
    """A function mapping (n, d) points to the 2-D plane report.png draws, and the axis labels:
    the raw points' first two principal components (NON-PRIVATE: fitted on the raw points), the
    coordinates themselves at d ≤ 2, and (lon, lat) for a GPS pair stored as (lat, lon)."""
    d = X.shape[1]
    if d == 1:
        return (lambda a: np.column_stack([a[:, 0], np.zeros(len(a))])), ("x0", "")
    if d == 2:
        if gps:
            return (lambda a: a[:, ::-1]), ("longitude", "latitude")
        return (lambda a: a), ("x0", "x1")
    mu = X.mean(axis=0)
    sample = X[np.random.default_rng(0).choice(X.shape[0], size=min(20000, X.shape[0]), replace=False)]
    _, _, vt = np.linalg.svd(sample - mu, full_matrices=False)
    W = vt[:2].T
    return (lambda a: (a - mu) @ W), ("principal component 1", "principal component 2")


def _plot(X, centers, ref_centers, prefix, path, objective="kmeans", gps=False):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    proj, (xlabel, ylabel) = plane(X, gps)

    def xy(a):
        p = proj(np.asarray(a, dtype=float).reshape(len(a), -1))
        return p[:, 0], p[:, 1]

    label = "k-means" if objective == "kmeans" else "k-median"
    fig, ax = plt.subplots(1, 2, figsize=(11, 4.5))
    idx = np.random.default_rng(0).choice(X.shape[0], size=min(20000, X.shape[0]), replace=False)
    ax[0].scatter(*xy(X[idx]), s=1, c="0.7", label="data (sample; NON-PRIVATE)")
    ax[0].scatter(*xy(ref_centers), marker="x", c="k", s=60, label=f"{label} (non-private)")
    ax[0].scatter(*xy(centers), marker="o", facecolors="none", edgecolors="r", s=80,
                  label="dpstream (DP release)")
    ax[0].legend(loc="best", fontsize=8)
    ax[0].set_xlabel(xlabel)
    ax[0].set_ylabel(ylabel)
    ax[0].set_title("final centers" + (" (PCA of the raw points)" if X.shape[1] > 2 else ""))
    if prefix:
        t, r = zip(*prefix)
        ax[1].plot(t, r, "o-")
    ax[1].axhline(1.0, c="k", lw=0.5)
    ax[1].set_xlabel("tick")
    ax[1].set_ylabel(f"{label} cost / non-private {label} cost of the prefix")
    ax[1].set_title("release quality over the stream")
    fig.suptitle("NON-PRIVATE evaluation (operator only): never publish", fontsize=9, color="darkred")
    fig.tight_layout()
    fig.savefig(path, dpi=90, format="png")
    plt.close(fig)
