#!/usr/bin/env python
"""Benchmark of dpstream against its peers (issue 2, "Benchmark"; DESIGN §5).

Run it in the bench venv (scikit-learn < 1.9 so that diffprivlib 0.6.6 imports):

    make .venv-bench/.installed
    .venv-bench/bin/python benchmarks/run_benchmark.py --quick            # smoke test, < 2 min
    .venv-bench/bin/python benchmarks/run_benchmark.py --out benchmarks/results
    .venv-bench/bin/python benchmarks/run_benchmark.py --sweep --out benchmarks/results

Everything runs in this one process, single-threaded (BLAS/OpenMP limited to 1
thread), on the same data in the same order.  See benchmarks/README.md for the
meaning of every column.
"""
from __future__ import annotations

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS",
           "VECLIB_MAXIMUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse  # noqa: E402
import datetime  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from typing import Dict, List, Optional  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import datasets as bds  # noqa: E402

warnings.filterwarnings("ignore")

ALL_DATASETS = ["blobs_1e4", "blobs_1e5", "blobs_1e6", "gmm100", "digits", "china"]
ALL_EPS = [0.5, 1.0, 2.0, 4.0, 8.0, math.inf]
DELTA = 1e-6
METHODS = ["kmeans", "minibatch", "diffprivlib", "dpstream", "dpstream_snap", "dpstream_vanilla", "mean"]
DP_VARIANTS = {
    "dpstream": {},
    "dpstream_snap": dict(semicoreset="snap", ring_centers="bicriteria"),
    "dpstream_vanilla": dict(bicriteria=False, n_rings=1, ring_centers="bicriteria"),
}
METHOD_LABEL = {
    "kmeans": "scikit-learn KMeans(n_init=10) (reference)",
    "minibatch": "MiniBatchKMeans.partial_fit, 1 pass",
    "diffprivlib": "diffprivlib KMeans (offline, pure ε)",
    "dpstream": "dpstream (defaults)",
    "dpstream_snap": "ablation: snap-to-bicriteria",
    "dpstream_vanilla": "ablation: vanilla DP merge-reduce, no rings",
    "mean": "1 center at the data mean (floor)",
}
EPS_INDEPENDENT = {"kmeans", "minibatch", "mean"}
STREAMING = {"minibatch", "dpstream", "dpstream_snap", "dpstream_vanilla"}
PREFIX_FRACS = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]

T0 = time.time()


class RunTimeout(Exception):
    pass


def _alarm(signum, frame):
    raise RunTimeout()


def timed_call(fn, seconds):
    """fn() with a wall-clock limit (SIGALRM); raises RunTimeout. seconds <= 0: no limit."""
    import signal

    if not seconds or seconds <= 0:
        return fn()
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        return fn()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _loadavg():
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def log(msg: str) -> None:
    print(f"[{time.time() - T0:8.1f}s] {msg}", flush=True)


def eps_key(e) -> str:
    if e is None:
        return "-"
    return "inf" if math.isinf(e) else f"{e:g}"


# --------------------------------------------------------------------------- costs
def kcost(X: np.ndarray, C: np.ndarray, chunk: int = 1 << 16) -> float:
    """k-means cost Σ_x min_c ‖x − c‖² (float64, chunked)."""
    C = np.asarray(C, dtype=float)
    c2 = (C ** 2).sum(axis=1)
    tot = 0.0
    for s in range(0, X.shape[0], chunk):
        x = X[s:s + chunk]
        d2 = (x ** 2).sum(axis=1)[:, None] - 2.0 * x @ C.T + c2[None, :]
        tot += float(np.maximum(d2.min(axis=1), 0.0).sum())
    return tot


def checkpoint_ticks(T: int) -> List[int]:
    ticks = {max(1, int(round(T / 2 ** j))) for j in range(5)}
    ticks |= {max(1, int(math.ceil(f * T))) for f in PREFIX_FRACS}
    return sorted(t for t in ticks if 1 <= t <= T)


def dyadic_ticks(T: int) -> List[int]:
    return sorted({max(1, int(round(T / 2 ** j))) for j in range(5)})


# --------------------------------------------------------------------------- methods
def run_kmeans(ds, seed, n_init=10):
    from sklearn.cluster import KMeans

    t, c = time.perf_counter(), time.process_time()
    km = KMeans(n_clusters=ds.k, n_init=n_init, random_state=seed).fit(ds.X)
    return dict(centers=km.cluster_centers_, fit_time=time.perf_counter() - t, cpu_time=time.process_time() - c)


def run_diffprivlib(ds, eps, seed):
    from diffprivlib.accountant import BudgetAccountant
    from diffprivlib.models import KMeans as DPKMeans

    t, c = time.perf_counter(), time.process_time()
    m = DPKMeans(n_clusters=ds.k, epsilon=eps, bounds=ds.bounds, random_state=seed,
                 accountant=BudgetAccountant()).fit(ds.X)
    return dict(centers=m.cluster_centers_, fit_time=time.perf_counter() - t, cpu_time=time.process_time() - c)


def run_stream(ds, make_model, ckpt_ticks, dp: bool):
    """Feed ds.X in ticks; centers at every checkpoint tick; fit time excludes bookkeeping."""
    n, tick = ds.n, ds.tick
    T = math.ceil(n / tick)
    want = set(ckpt_ticks)
    model = make_model(T)
    fit_time, cpu_time, state_max, centers = 0.0, 0.0, 0, {}
    for t in range(1, T + 1):
        xb = ds.X[(t - 1) * tick:t * tick]
        t0, c0 = time.perf_counter(), time.process_time()
        model.partial_fit(xb)
        fit_time += time.perf_counter() - t0
        cpu_time += time.process_time() - c0
        if dp:
            state_max = max(state_max, model.state_size())
        if t in want:
            centers[t] = np.array(model.cluster_centers_, copy=True)
    out = dict(centers=centers[T], ckpt_centers=centers, fit_time=fit_time, cpu_time=cpu_time)
    if dp:
        rel = model.release_
        state_max = max(state_max, int(getattr(model.engine_, "peak_state", 0) or 0))
        out.update(state_final=int(model.state_size()), state_max=int(state_max),
                   extra=dict(epoch=int(rel.epoch), n_candidate_centers=int(rel.n_candidate_centers),
                              coreset_size=int(len(rel.coreset_weights)),
                              coreset_weight=float(np.sum(rel.coreset_weights)),
                              count_estimate=float(rel.count_estimate), n_clipped=int(model.n_clipped_),
                              plan_epsilon=float(model.privacy_plan_.total_epsilon)))
    else:
        out.update(state_final=int(model.cluster_centers_.size + model.cluster_centers_.shape[0] + tick * ds.d),
                   state_max=None)
    return out


def make_dpstream(ds, eps, seed, overrides):
    from dpstream import DPStreamClusterer

    def make(T):
        return DPStreamClusterer(ds.k, epsilon=eps, delta=DELTA, radius=ds.radius, center=ds.center,
                                 random_state=seed, tick_size=ds.tick, horizon_ticks=T, **overrides)
    return make


def make_minibatch(ds, seed):
    from sklearn.cluster import MiniBatchKMeans

    return lambda T: MiniBatchKMeans(n_clusters=ds.k, batch_size=ds.tick, random_state=seed)


# --------------------------------------------------------------------------- one dataset
class Bench:
    def __init__(self, args):
        self.args = args
        self.records: List[Dict] = []
        self.meta: Dict[str, Dict] = {}
        self.timed_out = set()
        self.cell_time: Dict = {}

    def guarded(self, ds, method, eps, seed, fn):
        """Run fn under the per-run time limit and the per-cell time budget.

        A run over --run-timeout is aborted and recorded as a timeout; once a
        cell (dataset, method, ε) has used more than --cell-budget seconds, its
        remaining seeds are skipped (recorded as "capped").  Both skip the rest
        of the cell's seeds and are reported in results.md.
        """
        key = (ds.name, method, eps_key(eps))
        if key in self.timed_out:
            return None
        spent = self.cell_time.get(key, 0.0)
        budget = self.args.cell_budget
        if budget and spent > budget:
            self.records.append(dict(dataset=ds.name, method=method, eps=eps_key(eps), seed=seed, final_cost=None,
                                     final_ratio=None, fit_time=None, pts_per_s=None, state_final=None,
                                     state_max=None, extra={}, capped=budget))
            log(f"{ds.name:10s} {method:16s} eps={eps_key(eps):>4s} seed={seed} SKIPPED: cell used {spent:.0f}s "
                f"> --cell-budget {budget:g}s")
            return None
        t0 = time.time()
        try:
            return timed_call(fn, self.args.run_timeout)
        except RunTimeout:
            self.timed_out.add(key)
            self.records.append(dict(dataset=ds.name, method=method, eps=eps_key(eps), seed=seed, final_cost=None,
                                     final_ratio=None, fit_time=None, pts_per_s=None, state_final=None,
                                     state_max=None, extra={}, timeout=self.args.run_timeout))
            log(f"{ds.name:10s} {method:16s} eps={eps_key(eps):>4s} seed={seed} TIMEOUT after "
                f"{self.args.run_timeout:g}s wall — remaining seeds of this cell skipped")
            return None
        finally:
            self.cell_time[key] = spent + (time.time() - t0)

    def record(self, ds, method, eps, seed, out, ref_cost, prefix_ref, ckpts):
        if out is None:
            return None
        final_cost = kcost(ds.X, out["centers"])
        rec = dict(dataset=ds.name, method=method, eps=eps_key(eps), seed=seed, final_cost=final_cost,
                   final_ratio=final_cost / ref_cost, fit_time=out.get("fit_time"),
                   pts_per_s=(ds.n / out["fit_time"]) if out.get("fit_time") else None,
                   cpu_time=out.get("cpu_time"),
                   pts_per_s_cpu=(ds.n / out["cpu_time"]) if out.get("cpu_time") else None,
                   loadavg=_loadavg(),
                   state_final=out.get("state_final"), state_max=out.get("state_max"),
                   extra=out.get("extra", {}))
        if "ckpt_centers" in out:
            cps = []
            for t in ckpts:
                m = min(ds.n, t * ds.tick)
                c = kcost(ds.X[:m], out["ckpt_centers"][t])
                cps.append(dict(tick=t, n_prefix=m, frac=m / ds.n, cost=c, ratio=c / prefix_ref[t]))
            rec["checkpoints"] = cps
        self.records.append(rec)
        pts = f" {rec['pts_per_s']:,.0f} pts/s" if rec["pts_per_s"] else ""
        st = f" state={rec['state_final']}" if method.startswith("dpstream") else ""
        log(f"{ds.name:10s} {method:16s} eps={eps_key(eps):>4s} seed={seed} ratio={rec['final_ratio']:.4f} "
            f"fit={rec['fit_time'] or 0:.2f}s{pts}{st}")
        return rec

    def run_dataset(self, name, seeds, eps_list, methods, sweep_configs=None):
        log(f"loading {name}")
        ds = bds.load(name)
        T = math.ceil(ds.n / ds.tick)
        ckpts = checkpoint_ticks(T)
        log(f"{name}: n={ds.n} d={ds.d} k={ds.k} tick={ds.tick} T={T} Λ={ds.radius:.4f} seeds={seeds} "
            f"checkpoint ticks={ckpts}")
        # reference: KMeans(n_init=10, random_state=0) on all points
        ref = run_kmeans(ds, 0, n_init=10)
        ref_cost = kcost(ds.X, ref["centers"])
        log(f"{name}: reference KMeans(n_init=10) cost={ref_cost:.6g} ({ref['fit_time']:.1f}s)")
        prefix_ref = {}
        for t in ckpts:
            m = min(ds.n, t * ds.tick)
            if t == T:
                prefix_ref[t] = ref_cost
                continue
            from sklearn.cluster import KMeans
            km = KMeans(n_clusters=ds.k, n_init=3, random_state=0).fit(ds.X[:m])
            prefix_ref[t] = kcost(ds.X[:m], km.cluster_centers_)
        log(f"{name}: prefix references done")
        mean_cost = kcost(ds.X, ds.X.mean(axis=0, keepdims=True))
        self.meta[name] = dict(n=ds.n, d=ds.d, k=ds.k, tick=ds.tick, T=T, radius=ds.radius,
                               center=ds.center.tolist()[:3] + (["..."] if ds.d > 3 else []),
                               diffprivlib_bounds_per_coord=[float(ds.bounds[0][0]), float(ds.bounds[1][0])],
                               rule=ds.rule, seeds=seeds, ref_cost=ref_cost, ref_fit_time=ref["fit_time"],
                               mean_cost=mean_cost, checkpoint_ticks=ckpts, dyadic_ticks=dyadic_ticks(T),
                               prefix_ref={str(t): v for t, v in prefix_ref.items()}, extra=ds.meta)
        finite = [e for e in eps_list if not math.isinf(e)]
        if sweep_configs is not None:
            for cname, ov in sweep_configs:
                log(f"{name}: sweep config {cname}")
                for e in eps_list:
                    for s in range(seeds):
                        out = self.guarded(ds, f"dpstream[{cname}]", e, s,
                                           lambda: run_stream(ds, make_dpstream(ds, e, s, ov), ckpts, dp=True))
                        rec = self.record(ds, "dpstream", e, s, out, ref_cost, prefix_ref, ckpts)
                        if rec is not None:
                            rec["config"] = cname
                            rec["overrides"] = {k: list(v) if isinstance(v, tuple) else v for k, v in ov.items()}
            return
        for method in methods:
            if method == "kmeans":
                for s in range(seeds):
                    out = ref if s == 0 else self.guarded(ds, method, None, s, lambda: run_kmeans(ds, s))
                    self.record(ds, method, None, s, out, ref_cost, prefix_ref, ckpts)
            elif method == "minibatch":
                for s in range(seeds):
                    out = self.guarded(ds, method, None, s,
                                       lambda: run_stream(ds, make_minibatch(ds, s), ckpts, dp=False))
                    self.record(ds, method, None, s, out, ref_cost, prefix_ref, ckpts)
            elif method == "diffprivlib":
                for e in finite:
                    for s in range(seeds):
                        out = self.guarded(ds, method, e, s, lambda: run_diffprivlib(ds, e, s))
                        self.record(ds, method, e, s, out, ref_cost, prefix_ref, ckpts)
            elif method in DP_VARIANTS:
                for e in eps_list:
                    for s in range(seeds):
                        out = self.guarded(ds, method, e, s, lambda: run_stream(
                            ds, make_dpstream(ds, e, s, DP_VARIANTS[method]), ckpts, dp=True))
                        self.record(ds, method, e, s, out, ref_cost, prefix_ref, ckpts)
            elif method == "mean":
                self.record(ds, method, None, 0, dict(centers=ds.X.mean(axis=0, keepdims=True), fit_time=None),
                            ref_cost, prefix_ref, ckpts)
            else:
                raise SystemExit(f"unknown method {method!r}; choose from {METHODS}")


# --------------------------------------------------------------------------- summaries
def agg(vals):
    v = np.asarray([x for x in vals if x is not None], dtype=float)
    if v.size == 0:
        return None
    return dict(median=float(np.median(v)), min=float(v.min()), max=float(v.max()), n=int(v.size))


def fmt_agg(a, prec=3):
    if a is None:
        return "–"
    if a["n"] == 1 or a["min"] == a["max"]:
        return f"{a['median']:.{prec}f}"
    return f"{a['median']:.{prec}f} [{a['min']:.{prec}f}–{a['max']:.{prec}f}]"


def fmt_cell(s, key="final_ratio", prec=3):
    if not s:
        return "–"
    txt = fmt_agg(s[key], prec) if s[key] else ""
    if s.get("timeouts"):
        txt = f"{txt} (timeout >{s['timeout_s']:g}s)".strip()
    if s.get("capped") and s[key]:
        txt = f"{txt} ({s[key]['n']} seed{'s' if s[key]['n'] > 1 else ''}: time cap)"
    return txt or "–"


def sel(records, **kw):
    return [r for r in records if all(r.get(k) == v for k, v in kw.items())]


def summarise(records):
    """(dataset, method, eps) -> aggregates."""
    out = {}
    keys = sorted({(r["dataset"], r["method"], r["eps"]) for r in records})
    for key in keys:
        allr = sel(records, dataset=key[0], method=key[1], eps=key[2])
        rs = [r for r in allr if not (r.get("timeout") or r.get("capped"))]
        s = dict(final_ratio=agg([r["final_ratio"] for r in rs]), pts_per_s=agg([r["pts_per_s"] for r in rs]),
                 pts_per_s_cpu=agg([r.get("pts_per_s_cpu") for r in rs]),
                 state_final=agg([r["state_final"] for r in rs]), state_max=agg([r["state_max"] for r in rs]),
                 timeouts=sum(1 for r in allr if r.get("timeout")),
                 timeout_s=max([r["timeout"] for r in allr if r.get("timeout")], default=None),
                 capped=sum(1 for r in allr if r.get("capped")))
        if rs and "checkpoints" in rs[0]:
            ck = {}
            for i, c in enumerate(rs[0]["checkpoints"]):
                ck[str(c["tick"])] = dict(frac=c["frac"], n_prefix=c["n_prefix"],
                                          ratio=agg([r["checkpoints"][i]["ratio"] for r in rs]))
            s["checkpoints"] = ck
        out["|".join(key)] = s
    return out


def get_raw(summary, ds, method, eps):
    return summary.get(f"{ds}|{method}|{eps}")


def get(summary, ds, method, eps):
    """Summary of a cell with at least one finished run (None if absent or all runs timed out)."""
    s = summary.get(f"{ds}|{method}|{eps}")
    return s if (s and s["final_ratio"]) else None


EPS_COLS = ["0.5", "1", "2", "4", "8", "inf"]


def cell_key(method, e):
    return "-" if method in EPS_INDEPENDENT else e


def write_markdown(path, records, meta, summary, run_info):
    L: List[str] = []
    A = L.append
    A("# dpstream benchmark results\n")
    A(f"Generated {run_info['date']} by `{run_info['command']}` on {run_info['machine']} "
      f"(single process, BLAS/OpenMP threads = 1; the machine is shared, so timings are indicative). "
      f"Versions: {run_info['versions']}. dpstream code: {run_info.get('dpstream_source', '?')}.\n")
    A(f"Settings: δ = {DELTA:g}; cost ratio = k-means cost of the released centers on all points / cost of "
      "scikit-learn `KMeans(n_init=10, random_state=0)` on the same points; cells are median [min–max] over "
      "seeds. Data and stream order are fixed per dataset (seed 0); seeds vary the methods' randomness only. "
      "Non-private methods do not depend on ε: their value sits in the ∞ column.\n")
    dsets = [d for d in ALL_DATASETS if d in meta] + [d for d in meta if d not in ALL_DATASETS]
    A("| dataset | n | d | k | tick | ticks T | seeds | reference cost | mean-floor ratio |")
    A("|---|---|---|---|---|---|---|---|---|")
    for d in dsets:
        m = meta[d]
        A(f"| {d} | {m['n']:,} | {m['d']} | {m['k']} | {m['tick']} | {m['T']} | {m['seeds']} | "
          f"{m['ref_cost']:.6g} | {m['mean_cost'] / m['ref_cost']:.2f} |")
    A("")
    if run_info.get("notes"):
        for n in run_info["notes"]:
            A(f"- {n}")
        A("")

    # ---------------- targets
    A("## Targets (ε = 1, δ = 1e-6, final release, median of seeds)\n")
    A("| target | measured | threshold | result | gap |")
    A("|---|---|---|---|---|")
    for row in evaluate_targets(summary, meta, records):
        A("| " + " | ".join(row) + " |")
    A("")
    A("“Every release after the first 10%” is checked at the checkpoint ticks ≥ 10% of the stream (deciles "
      "0.1…0.9, the dyadic points T/2, T/4, T/8 and the end), each against `KMeans(n_init=3)` on that prefix "
      "(the end against the n_init=10 reference); the measured value is the worst checkpoint's median over "
      "seeds, with the worst single seed in brackets.\n")
    if run_info.get("analysis"):
        A("## Analysis: misses, their causes, and other observations\n")
        A(run_info["analysis"].strip() + "\n")

    # ---------------- per-dataset tables
    A("## Cost ratio at the final release, per dataset\n")
    for d in dsets:
        m = meta[d]
        A(f"### {d} (n={m['n']:,}, d={m['d']}, k={m['k']})\n")
        A("| method | " + " | ".join(f"ε={e}" if e != "inf" else "ε=∞ / non-DP" for e in EPS_COLS) + " |")
        A("|---|" + "---|" * len(EPS_COLS))
        for meth in METHODS:
            cells = []
            have = False
            for e in EPS_COLS:
                if meth in EPS_INDEPENDENT:
                    s = get_raw(summary, d, meth, "-") if e == "inf" else None
                else:
                    s = get_raw(summary, d, meth, e)
                have |= s is not None
                cells.append(fmt_cell(s))
            if have:
                A(f"| {METHOD_LABEL[meth]} | " + " | ".join(cells) + " |")
        A("")

    # ---------------- checkpoints
    A("## Cost ratio of intermediate releases on their prefix (ε = 1)\n")
    A("Ratio = cost(centers released at tick t, first t·tick points) / cost(`KMeans(n_init=3)` on that prefix). "
      "Columns: fraction of the stream seen.\n")
    for d in dsets:
        rows = []
        head = None
        for meth in ["minibatch", "dpstream", "dpstream_snap", "dpstream_vanilla"]:
            s = get(summary, d, meth, cell_key(meth, "1"))
            if not s or "checkpoints" not in s:
                continue
            ck = s["checkpoints"]
            ticks = sorted(ck, key=int)
            if head is None:
                head = ticks
            rows.append(f"| {METHOD_LABEL[meth]} | " + " | ".join(fmt_agg(ck[t]["ratio"], 2) for t in head) + " |")
        if head:
            A(f"### {d}\n")
            A("| method | " + " | ".join(f"{get(summary, d, 'dpstream', '1')['checkpoints'][t]['frac']:.3g}"
                                        if get(summary, d, 'dpstream', '1') else t for t in head) + " |")
            A("|---|" + "---|" * len(head))
            L.extend(rows)
            A("")

    # ---------------- state
    A("## State (floats held by the engine, `state_size()`, dpstream defaults, ε = 1)\n")
    A("`final` is after the last tick (buffers flushed); `peak` is the largest value seen after any tick.\n")
    A("| dataset | n | n·d | state final | % of n·d | state peak | peak % of n·d | final / final at n=1e5 |")
    A("|---|---|---|---|---|---|---|---|")
    base = get(summary, "blobs_1e5", "dpstream", "1")
    for d in dsets:
        s = get(summary, d, "dpstream", "1")
        if not s or not s["state_final"]:
            continue
        m = meta[d]
        nd = m["n"] * m["d"]
        sf, sp = s["state_final"]["median"], s["state_max"]["median"]
        rel = f"{sf / base['state_final']['median']:.2f}" if (base and d.startswith("blobs")) else "–"
        A(f"| {d} | {m['n']:,} | {nd:,} | {sf:,.0f} | {100 * sf / nd:.2f}% | {sp:,.0f} | {100 * sp / nd:.2f}% | "
          f"{rel} |")
    A("")
    A("State of the ablations at ε = 1 (final / peak, median):\n")
    A("| dataset | " + " | ".join(METHOD_LABEL[m] for m in DP_VARIANTS) + " |")
    A("|---|" + "---|" * len(DP_VARIANTS))
    for d in dsets:
        cells = []
        for meth in DP_VARIANTS:
            s = get(summary, d, meth, "1")
            cells.append(f"{s['state_final']['median']:,.0f} / {s['state_max']['median']:,.0f}"
                         if s and s["state_final"] else "–")
        A(f"| {d} | " + " | ".join(cells) + " |")
    A("")

    # ---------------- throughput
    A("## Throughput (points per second of fit time, median over seeds)\n")
    A("Two clocks: **wall** = n / wall-clock seconds inside fit/partial_fit; **CPU** = n / process CPU seconds "
      "(single-threaded, so this is the rate on one core, and it is less affected by other jobs sharing the "
      "machine). dpstream at ε = 1; MiniBatchKMeans and diffprivlib (ε = 1) as ratios to dpstream on the same "
      "clock (> 1 = faster than dpstream). KMeans(n_init=10) for scale.\n")
    A("| dataset | d | dpstream pts/s wall / CPU | MiniBatchKMeans pts/s wall / CPU | MBK ÷ dpstream (CPU) | "
      "diffprivlib pts/s wall / CPU | diffprivlib ÷ dpstream (CPU) | KMeans(n_init=10) pts/s CPU |")
    A("|---|---|---|---|---|---|---|---|")
    for d in dsets:
        s = get(summary, d, "dpstream", "1")
        mb = get(summary, d, "minibatch", "-")
        dp = get(summary, d, "diffprivlib", "1")
        km = get(summary, d, "kmeans", "-")
        v = lambda x, k="pts_per_s": x[k]["median"] if x and x.get(k) else None  # noqa: E731
        f = lambda x: f"{x:,.0f}" if x else "–"  # noqa: E731
        e = v(s, "pts_per_s_cpu")
        r = lambda x: f"{v(x, 'pts_per_s_cpu') / e:.2f}×" if (v(x, "pts_per_s_cpu") and e) else "–"  # noqa: E731
        A(f"| {d} | {meta[d]['d']} | {f(v(s))} / {f(e)} | {f(v(mb))} / {f(v(mb, 'pts_per_s_cpu'))} | {r(mb)} | "
          f"{f(v(dp))} / {f(v(dp, 'pts_per_s_cpu'))} | {r(dp)} | {f(v(km, 'pts_per_s_cpu'))} |")
    A("")
    A("dpstream and ablations, throughput by ε (CPU pts/s, median):\n")
    A("| dataset | method | " + " | ".join(f"ε={e}" for e in EPS_COLS) + " |")
    A("|---|---|" + "---|" * len(EPS_COLS))
    for d in dsets:
        for meth in DP_VARIANTS:
            cells = []
            for e in EPS_COLS:
                s = get(summary, d, meth, e)
                cells.append(f"{s['pts_per_s_cpu']['median']:,.0f}" if s and s.get("pts_per_s_cpu") else "–")
            if any(c != "–" for c in cells):
                A(f"| {d} | {meth} | " + " | ".join(cells) + " |")
    A("")

    # ---------------- diagnostics
    A("## Diagnostics of the final release (dpstream defaults, median over seeds)\n")
    A("| dataset | ε | epochs | size of F | coreset points | released weight / n | count estimate / n | clipped |")
    A("|---|---|---|---|---|---|---|---|")
    for d in dsets:
        for e in EPS_COLS:
            rs = [r for r in sel(records, dataset=d, method="dpstream", eps=e) if r["extra"]]
            if not rs:
                continue
            n = meta[d]["n"]
            med = lambda key: float(np.median([r["extra"][key] for r in rs]))  # noqa: E731
            A(f"| {d} | {e} | {med('epoch'):.0f} | {med('n_candidate_centers'):.0f} | {med('coreset_size'):.0f} | "
              f"{med('coreset_weight') / n:.3f} | {med('count_estimate') / n:.3f} | {med('n_clipped'):.0f} |")
    A("")

    # ---------------- radius rules
    A("## Public radius rules (never computed from the data)\n")
    for d in dsets:
        A(f"- **{d}**: {meta[d]['rule']}")
    A("")
    A("Plots: `cost_vs_eps.png` (final cost ratio vs ε per dataset), `cost_vs_checkpoint.png` (prefix cost "
      "ratio vs fraction of the stream at ε = 1), `state_vs_n.png` (state floats vs n on blobs). Raw numbers: "
      "`results.json`.\n")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("\n".join(L))


def evaluate_targets(summary, meta, records):
    rows = []

    def final(d, meth="dpstream", e="1"):
        s = get(summary, d, meth, e)
        return s["final_ratio"]["median"] if s else None

    for d, thr in (("blobs_1e6", 1.15), ("blobs_1e5", 1.3), ("china", 1.3)):
        v = final(d)
        if v is None:
            rows.append([f"{d} cost ratio", "not run", f"≤ {thr}", "–", "–"])
            continue
        ok = v <= thr
        rows.append([f"{d} cost ratio", f"{v:.3f}", f"≤ {thr}", "PASS" if ok else "MISS",
                     f"{v - thr:+.3f} ({100 * (v / thr - 1):+.1f}%)"])
    # better than diffprivlib at every eps on every dataset
    for d in [x for x in ALL_DATASETS if x in meta]:
        worse, worst = [], None
        for e in EPS_COLS[:-1]:
            a, b = final(d, "dpstream", e), final(d, "diffprivlib", e)
            if a is None or b is None:
                continue
            q = a / b
            worst = q if worst is None else max(worst, q)
            if a >= b:
                worse.append(f"ε={e}: {a:.3f} vs {b:.3f}")
        if worst is None:
            continue
        rows.append([f"{d}: dpstream < diffprivlib at every ε",
                     "worst dpstream/diffprivlib = " + f"{worst:.3f}" + ("; " + "; ".join(worse) if worse else ""),
                     "< 1 at every ε", "PASS" if not worse else "MISS",
                     f"{100 * (worst - 1):+.1f}%"])
    # prefix releases after 10%
    for d in [x for x in ALL_DATASETS if x in meta]:
        s = get(summary, d, "dpstream", "1")
        if not s or "checkpoints" not in s:
            continue
        worst_med, worst_t, worst_any = 0.0, None, 0.0
        for t, c in s["checkpoints"].items():
            if c["frac"] < 0.1 - 1e-9:
                continue
            if c["ratio"]["median"] > worst_med:
                worst_med, worst_t = c["ratio"]["median"], c["frac"]
            worst_any = max(worst_any, c["ratio"]["max"])
        ok = worst_med <= 1.5
        rows.append([f"{d}: releases after 10% within 1.5× of prefix optimum",
                     f"{worst_med:.3f} at {worst_t:.3g}·n [worst seed {worst_any:.3f}]", "≤ 1.5",
                     "PASS" if ok else "MISS", f"{worst_med - 1.5:+.3f}"])
    # state
    s6, s5 = get(summary, "blobs_1e6", "dpstream", "1"), get(summary, "blobs_1e5", "dpstream", "1")
    if s6:
        nd = meta["blobs_1e6"]["n"] * meta["blobs_1e6"]["d"]
        f6, p6 = s6["state_final"]["median"], s6["state_max"]["median"]
        pct = 100 * f6 / nd
        rows.append(["state at n=1e6 ≤ 2% of n·d", f"{f6:,.0f} floats = {pct:.3f}% (peak {100 * p6 / nd:.3f}%)",
                     "≤ 2%", "PASS" if pct <= 2 else "MISS", f"{pct - 2:+.3f} pp"])
        if s5:
            q = f6 / s5["state_final"]["median"]
            qp = p6 / s5["state_max"]["median"]
            rows.append(["state(1e6) ≤ 2× state(1e5)", f"{q:.2f}× (peak {qp:.2f}×)", "≤ 2×",
                         "PASS" if q <= 2 else "MISS", f"{q - 2:+.2f}×"])
    # throughput
    for d in ("blobs_1e6", "blobs_1e5"):
        s = get(summary, d, "dpstream", "1")
        if s and s.get("pts_per_s_cpu"):
            v, w = s["pts_per_s_cpu"]["median"], s["pts_per_s"]["median"]
            rows.append([f"throughput at d=10 ({d}), one core", f"{v:,.0f} pts/s CPU ({w:,.0f} wall-clock)",
                         "≥ 100,000 pts/s", "PASS" if v >= 1e5 else "MISS", f"{100 * (v / 1e5 - 1):+.1f}%"])
            break
    return rows


# --------------------------------------------------------------------------- plots
def write_plots(out, records, meta, summary):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    dsets = [d for d in ALL_DATASETS if d in meta]
    if not dsets:
        return
    colors = dict(kmeans="k", minibatch="tab:gray", diffprivlib="tab:red", dpstream="tab:blue",
                  dpstream_snap="tab:orange", dpstream_vanilla="tab:green", mean="tab:brown")
    # cost vs eps
    nc = min(3, len(dsets))
    nr = math.ceil(len(dsets) / nc)
    fig, axes = plt.subplots(nr, nc, figsize=(5 * nc, 3.8 * nr), squeeze=False)
    xs = {e: (math.log2(float(e)) if e != "inf" else 4.0) for e in EPS_COLS}
    for ax, d in zip(axes.flat, dsets):
        for meth in METHODS:
            if meth in EPS_INDEPENDENT:
                s = get(summary, d, meth, "-")
                if s:
                    ax.axhline(s["final_ratio"]["median"], color=colors[meth], ls="--", lw=1, label=meth)
                continue
            pts = [(xs[e], get(summary, d, meth, e)) for e in EPS_COLS if get(summary, d, meth, e)]
            if not pts:
                continue
            x = [p[0] for p in pts]
            med = np.array([p[1]["final_ratio"]["median"] for p in pts])
            lo = med - np.array([p[1]["final_ratio"]["min"] for p in pts])
            hi = np.array([p[1]["final_ratio"]["max"] for p in pts]) - med
            ax.errorbar(x, med, yerr=[lo, hi], marker="o", ms=4, capsize=3, color=colors[meth], label=meth)
        ax.set_yscale("log")
        ax.set_xticks([xs[e] for e in EPS_COLS])
        ax.set_xticklabels(["0.5", "1", "2", "4", "8", "∞"])
        ax.set_xlabel("ε")
        ax.set_ylabel("cost ratio (log)")
        ax.set_title(d)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(dsets):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "cost_vs_eps.png"), dpi=80)
    plt.close(fig)
    # cost vs checkpoint
    fig, axes = plt.subplots(nr, nc, figsize=(5 * nc, 3.8 * nr), squeeze=False)
    for ax, d in zip(axes.flat, dsets):
        for meth in ["minibatch", "dpstream", "dpstream_snap", "dpstream_vanilla"]:
            s = get(summary, d, meth, cell_key(meth, "1"))
            if not s or "checkpoints" not in s:
                continue
            ck = sorted(s["checkpoints"].values(), key=lambda c: c["frac"])
            x = [c["frac"] for c in ck]
            med = np.array([c["ratio"]["median"] for c in ck])
            ax.fill_between(x, [c["ratio"]["min"] for c in ck], [c["ratio"]["max"] for c in ck],
                            color=colors[meth], alpha=0.15)
            ax.plot(x, med, marker="o", ms=3, color=colors[meth], label=meth)
        ax.axhline(1.5, color="r", ls=":", lw=1)
        ax.axvline(0.1, color="r", ls=":", lw=1)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("fraction of stream seen")
        ax.set_ylabel("prefix cost ratio (ε=1)")
        ax.set_title(d)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(dsets):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "cost_vs_checkpoint.png"), dpi=80)
    plt.close(fig)
    # state vs n
    bl = [d for d in ("blobs_1e4", "blobs_1e5", "blobs_1e6") if d in meta]
    if bl:
        fig, ax = plt.subplots(figsize=(5.5, 4))
        ns = [meta[d]["n"] for d in bl]
        for meth in DP_VARIANTS:
            ss = [get(summary, d, meth, "1") for d in bl]
            if all(ss):
                ax.plot(ns, [s["state_final"]["median"] for s in ss], marker="o", color=colors[meth],
                        label=f"{meth} final")
                ax.plot(ns, [s["state_max"]["median"] for s in ss], marker="x", ls="--", color=colors[meth],
                        label=f"{meth} peak")
        ax.plot(ns, [n * 10 for n in ns], color="k", lw=1, label="n·d (raw data)")
        ax.plot(ns, [0.02 * n * 10 for n in ns], color="r", ls=":", lw=1, label="2% of n·d")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("n (blobs, d=10)")
        ax.set_ylabel("floats in state (ε=1)")
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
        fig.tight_layout()
        fig.savefig(os.path.join(out, "state_vs_n.png"), dpi=80)
        plt.close(fig)


# --------------------------------------------------------------------------- sweep
SWEEP_DEFAULTS = dict(block_size=2000, privacy_split=(0.45, 0.1, 0.45), tree_depth=8,
                      ring_centers="bicriteria+released", coreset_size=None)
SWEEP_GRID = dict(block_size=[1000, 2000, 5000],
                  privacy_split=[(0.45, 0.1, 0.45), (0.3, 0.1, 0.6), (0.2, 0.1, 0.7)],
                  tree_depth=[6, 8, 10],
                  ring_centers=["bicriteria", "bicriteria+released"],
                  coreset_size=[None, 200, 500])


def default_s_b(k: int = 10) -> int:
    from dpstream.params import EngineConfig

    return EngineConfig(n_clusters=k, dim=1, radius=1.0, epsilon=1.0).s_b


def sweep_configs(quick=False):
    from dpstream.params import EngineConfig
    import dataclasses

    cur = {f.name: f.default for f in dataclasses.fields(EngineConfig) if f.name in SWEEP_DEFAULTS}
    cfgs = [("default", {})]
    for knob, values in SWEEP_GRID.items():
        for v in values:
            if v == cur[knob] or (knob == "privacy_split" and tuple(v) == tuple(cur[knob])):
                continue
            if knob == "coreset_size" and v in (None, default_s_b()):
                continue  # None = the library's default s_B for k = 10: the default itself
            cfgs.append((f"{knob}={v}", {knob: v}))
        if quick and len(cfgs) >= 3:
            break
    return cfgs, cur


def _sweep_table(records, meta, names):
    res = {}
    for c in names:
        for d in meta:
            rs = [r for r in records if r.get("config") == c and r["dataset"] == d]
            if not rs:
                continue
            worst = [max(cp["ratio"] for cp in r["checkpoints"] if cp["frac"] >= 0.1 - 1e-9) for r in rs]
            res[(c, d)] = dict(final=agg([r["final_ratio"] for r in rs]), worst_prefix=agg(worst),
                               pts=agg([r.get("pts_per_s_cpu") or r["pts_per_s"] for r in rs]),
                               state=agg([r["state_final"] for r in rs]), peak=agg([r["state_max"] for r in rs]))
    return res


def _geo(res, c, dsets, key):
    v = [res[(c, d)][key]["median"] for d in dsets if (c, d) in res]
    return float(np.exp(np.mean(np.log(v)))) if v and len(v) == len(dsets) else None


def sweep_recommendation(records, meta, cfgs, cur):
    """Per knob: the value to use, by the rule documented in sweep.md. Returns (rows, changes)."""
    names = [c for c, _ in cfgs]
    dsets = list(meta)
    res = _sweep_table(records, meta, names)
    bf, bp = _geo(res, "default", dsets, "final"), _geo(res, "default", dsets, "worst_prefix")
    rows, changes = [], {}
    for knob in SWEEP_GRID:
        opts = [("default", cur[knob])] + [(c, ov[knob]) for c, ov in cfgs if list(ov) == [knob]]
        best = None
        for c, v in opts:
            sf, sp = _geo(res, c, dsets, "final"), _geo(res, c, dsets, "worst_prefix")
            if sf is None:
                continue
            df, dp_ = sf / bf - 1, sp / bp - 1
            state_ok = all(res[(c, d)]["state"]["median"] <= 1.1 * res[("default", d)]["state"]["median"]
                           and res[(c, d)]["peak"]["median"] <= 1.1 * res[("default", d)]["peak"]["median"]
                           for d in dsets)
            gain = (df <= -0.02 and dp_ <= 0.02) or (dp_ <= -0.02 and df <= 0.02)
            verdict = "(default)" if c == "default" else (
                "better" if gain and state_ok else ("state/peak > +10%" if gain else ""))
            if c != "default" and gain and state_ok and (best is None or sf * sp < best[2]):
                best = (c, v, sf * sp)
            rows.append([knob, str(v), f"{sf:.4f}", f"{100 * df:+.1f}%", f"{sp:.3f}", f"{100 * dp_:+.1f}%", verdict])
        if best:
            changes[knob] = best[1]
    return rows, changes, res, (bf, bp)


def write_sweep(out, records, meta, cfgs, cur, run_info):
    names = [c for c, _ in cfgs]
    dsets = list(meta)
    rows, changes, res, (bf, bp) = sweep_recommendation(records, meta, [c for c in cfgs if c[0] != "combined"],
                                                        cur)
    L = []
    A = L.append
    A("# Engine-knob sweep (ε = 1, δ = 1e-6)\n")
    A(f"Generated {run_info['date']} by `{run_info['command']}` (single process, 1 thread, shared 2-core machine; "
      f"dpstream code: {run_info.get('dpstream_source', '?')}). "
      f"One factor at a time around the current defaults "
      f"{json.dumps({k: (list(v) if isinstance(v, tuple) else v) for k, v in cur.items()})}"
      f" (coreset_size None = the library default s_B = {default_s_b()} for k = 10). Seeds: {sorted({r['seed'] for r in records})}. Cells: "
      "median [min–max] over seeds. `worst prefix` = per seed, the worst prefix cost ratio over the checkpoints "
      "≥ 10% of the stream (target: ≤ 1.5), then median [min–max]. pts/s is per CPU second (one core).\n")
    for d in dsets:
        A(f"## {d} (n={meta[d]['n']:,}, d={meta[d]['d']}, k={meta[d]['k']}, tick={meta[d]['tick']})\n")
        A("| config | final cost ratio | worst prefix ratio | pts/s (CPU) | state final | state peak |")
        A("|---|---|---|---|---|---|")
        for c in names:
            r = res.get((c, d))
            if not r:
                continue
            A(f"| {c} | {fmt_agg(r['final'])} | {fmt_agg(r['worst_prefix'])} | {r['pts']['median']:,.0f} | "
              f"{r['state']['median']:,.0f} | {r['peak']['median']:,.0f} |")
        A("")
    A("## Recommendation\n")
    A("Rule: for each config, S_final = geometric mean over the datasets of the median final cost ratio and "
      "S_prefix = the same for the median worst prefix ratio. A value replaces the default if it improves one "
      "score by ≥ 2% without worsening the other by > 2%, and neither the final nor the peak state grows by "
      "> 10% on any dataset; among such values the lowest S_final·S_prefix wins. With 3 seeds, differences of a "
      "few percent are within seed noise (compare the [min–max] ranges above).\n")
    A(f"Default: S_final = {bf:.4f}, S_prefix = {bp:.3f}.\n")
    A("| knob | value | S_final | Δ | S_prefix | Δ | verdict |")
    A("|---|---|---|---|---|---|---|")
    for row in rows:
        A("| " + " | ".join(row) + " |")
    A("")
    for knob in SWEEP_GRID:
        if knob in changes:
            A(f"- **{knob}**: change {cur[knob]} → {changes[knob]}.")
        else:
            A(f"- **{knob}**: keep {cur[knob]}.")
    A("")
    comb = [c for c in cfgs if c[0] == "combined"]
    if comb and all(("combined", d) in res for d in dsets):
        sf, sp = _geo(res, "combined", dsets, "final"), _geo(res, "combined", dsets, "worst_prefix")
        A(f"The recommended changes together (`combined` = {json.dumps({k: (list(v) if isinstance(v, tuple) else v) for k, v in comb[0][1].items()})}) "
          f"measured: S_final = {sf:.4f} ({100 * (sf / bf - 1):+.1f}%), S_prefix = {sp:.3f} "
          f"({100 * (sp / bp - 1):+.1f}%) against the default.\n")
    elif changes:
        A("The combination of the recommended changes has not been measured yet (`--sweep --merge` runs it).\n")
    if changes:
        A("One factor at a time: interactions between knobs are measured only through the `combined` row.\n")
    else:
        A("No value beats the current defaults by the rule, so no combined configuration was run: the sweep "
          "confirms the defaults. One factor at a time: interactions between knobs are not measured.\n")
    with open(os.path.join(out, "sweep.md"), "w", encoding="utf-8") as fh:
        fh.write("\n".join(L))
    with open(os.path.join(out, "sweep.json"), "w", encoding="utf-8") as fh:
        json.dump(dict(run=run_info, meta=meta, defaults={k: (list(v) if isinstance(v, tuple) else v)
                                                          for k, v in cur.items()},
                       configs=[[c, {k: (list(v) if isinstance(v, tuple) else v) for k, v in ov.items()}]
                                for c, ov in cfgs],
                       records=records), fh, indent=1, default=_json_default)


# --------------------------------------------------------------------------- main
def _round(o, sig=6):
    if isinstance(o, float):
        return float(f"{o:.{sig}g}") if math.isfinite(o) else o
    if isinstance(o, dict):
        return {k: _round(v, sig) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_round(v, sig) for v in o]
    return o


def compact_records(records):
    """For results.json: checkpoint ratios as one list per run (ticks, prefix sizes in meta)."""
    out = []
    for r in records:
        r = dict(r)
        if "checkpoints" in r:
            r["ckpt_ratios"] = [c["ratio"] for c in r.pop("checkpoints")]
        out.append(r)
    return _round(out, 7)


def expand_records(records, meta):
    """Inverse of compact_records (for --merge / --report-only)."""
    for r in records:
        if "ckpt_ratios" in r:
            m = meta[r["dataset"]]
            ticks = m["checkpoint_ticks"]
            r["checkpoints"] = [dict(tick=t, n_prefix=min(m["n"], t * m["tick"]),
                                     frac=min(m["n"], t * m["tick"]) / m["n"], ratio=v)
                                for t, v in zip(ticks, r.pop("ckpt_ratios"))]
    return records


def dump_results(path, info, meta, summary, records):
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(dict(run=info, meta=_round(meta, 10), summary=_round(summary),
                       records=compact_records(records)), fh, separators=(",", ":"), default=_json_default)


def _json_default(o):
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(type(o))


def dpstream_source() -> str:
    """Which dpstream code ran: a snapshot (SNAPSHOT file next to the package) or a git checkout."""
    import subprocess

    import dpstream

    pkg = os.path.dirname(os.path.abspath(dpstream.__file__))
    snap = os.path.join(os.path.dirname(pkg), "SNAPSHOT")
    if os.path.exists(snap):
        with open(snap, encoding="utf-8") as fh:
            return f"{pkg} ({fh.read().strip()})"
    try:
        head = subprocess.run(["git", "-C", pkg, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", pkg, "status", "--porcelain", "--", "."], capture_output=True,
                               text=True, timeout=10).stdout.strip()
        return f"{pkg} (git {head}{', with uncommitted changes' if dirty else ''})"
    except Exception:  # pragma: no cover
        return pkg


def run_info(argv, notes):
    import sklearn
    import dpstream

    try:
        import diffprivlib
        dpl = diffprivlib.__version__
    except Exception as exc:  # pragma: no cover
        dpl = f"not importable ({exc})"
    try:
        load = os.getloadavg()
        load = f"load avg at start {load[0]:.2f}"
    except OSError:
        load = ""
    return dict(date=datetime.datetime.now().isoformat(timespec="seconds"), dpstream_source=dpstream_source(),
                command="python benchmarks/run_benchmark.py " + " ".join(argv),
                machine=f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, {load}",
                versions=f"dpstream {getattr(dpstream, '__version__', '?')}, numpy {np.__version__}, "
                         f"scikit-learn {sklearn.__version__}, diffprivlib {dpl}",
                notes=notes)


def parse_list(s, conv=str):
    return [conv(x) for x in s.split(",") if x.strip()]


def parse_eps(x):
    x = x.strip().lower()
    return math.inf if x in ("inf", "∞") else float(x)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=None, help="output directory (default benchmarks/results; "
                                                "/tmp/dpstream-bench-quick with --quick)")
    ap.add_argument("--quick", action="store_true", help="tiny smoke configuration (< 2 minutes)")
    ap.add_argument("--datasets", default=None, help=f"comma list from {ALL_DATASETS}")
    ap.add_argument("--eps", default=None, help="comma list of ε ('inf' allowed)")
    ap.add_argument("--seeds", type=int, default=None, help="seeds per configuration (default 5; 3 for --sweep)")
    ap.add_argument("--seeds-for", default="", help="per-dataset seed override, e.g. blobs_1e6=3,china=3")
    ap.add_argument("--methods", default=None, help=f"comma list from {METHODS}")
    ap.add_argument("--run-timeout", type=float, default=900.0,
                    help="wall-clock limit in seconds of one run (one method, ε, seed); a cell that times out "
                         "is reported as such and its remaining seeds are skipped (0 = no limit)")
    ap.add_argument("--cell-budget", type=float, default=300.0,
                    help="seconds of wall time per cell (dataset, method, ε) after which its remaining seeds are "
                         "skipped and the cell reports fewer seeds (0 = no budget)")
    ap.add_argument("--merge", action="store_true",
                    help="keep other datasets' records already in OUT/results.json (replace the ones re-run)")
    ap.add_argument("--report-only", action="store_true",
                    help="do not run anything: rebuild results.md and the plots from OUT/results.json "
                         "(with --sweep: sweep.md from OUT/sweep.json)")
    ap.add_argument("--analysis", default=None,
                    help="a Markdown file inserted in results.md after the targets (kept in results.json)")
    ap.add_argument("--note", action="append", default=[], help="a note printed in results.md (repeatable)")
    ap.add_argument("--sweep", action="store_true",
                    help="sweep engine knobs (one factor at a time) on blobs_1e5 and china at ε=1 → sweep.md")
    args = ap.parse_args(argv)

    out = args.out or ("/tmp/dpstream-bench-quick" if args.quick else
                       os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    os.makedirs(out, exist_ok=True)
    seed_over = {k: int(v) for k, v in (p.split("=") for p in parse_list(args.seeds_for))}

    if args.sweep:
        dsets = parse_list(args.datasets) if args.datasets else (["blobs_1e4"] if args.quick else
                                                                 ["blobs_1e5", "china"])
        eps = [parse_eps(e) for e in parse_list(args.eps)] if args.eps else [1.0]
        seeds = args.seeds or (1 if args.quick else 3)
        cfgs, cur = sweep_configs(args.quick)
        info = run_info(argv, args.note)
        b = Bench(args)
        spath = os.path.join(out, "sweep.json")
        if (args.merge or args.report_only) and os.path.exists(spath):
            with open(spath, encoding="utf-8") as fh:
                old = json.load(fh)
            b.records, b.meta = old["records"], old["meta"]
            info = old["run"] if args.report_only else info
            log(f"sweep: loaded {len(b.records)} records from {spath}")
        done = {(r.get("config"), r["dataset"]) for r in b.records}
        if not args.report_only:
            log(f"sweep: {len(cfgs)} configs × {dsets} × ε={eps} × {seeds} seeds → {out}")
            for d in dsets:
                todo = [c for c in cfgs if (c[0], d) not in done]
                if todo:
                    b.run_dataset(d, seed_over.get(d, seeds), eps, ["dpstream"], sweep_configs=todo)
                    write_sweep(out, b.records, b.meta, cfgs, cur, info)
                    log(f"wrote {out}/sweep.md")
            # phase 2: the recommended changes together
            _, changes, _, _ = sweep_recommendation(b.records, b.meta, cfgs, cur)
            if changes and not args.quick:
                combo = ("combined", {k: (tuple(v) if isinstance(v, list) else v) for k, v in changes.items()})
                cfgs = cfgs + [combo]
                for d in dsets:
                    if ("combined", d) in done:
                        continue
                    b.run_dataset(d, seed_over.get(d, seeds), eps, ["dpstream"], sweep_configs=[combo])
                    write_sweep(out, b.records, b.meta, cfgs, cur, info)
        else:
            combo = [c for c in (old.get("configs") or []) if c[0] == "combined"]
            if combo:
                cfgs = cfgs + [("combined", combo[0][1])]
        write_sweep(out, b.records, b.meta, cfgs, cur, info)
        log(f"wrote {out}/sweep.md")
        return

    if args.quick:
        dsets = parse_list(args.datasets) if args.datasets else ["blobs_1e4", "digits"]
        eps = [parse_eps(e) for e in parse_list(args.eps)] if args.eps else [1.0, math.inf]
        seeds = args.seeds or 2
    else:
        dsets = parse_list(args.datasets) if args.datasets else list(ALL_DATASETS)
        eps = [parse_eps(e) for e in parse_list(args.eps)] if args.eps else list(ALL_EPS)
        seeds = args.seeds or 5
    methods = parse_list(args.methods) if args.methods else list(METHODS)
    for m in methods:
        if m not in METHODS:
            raise SystemExit(f"unknown method {m!r}; choose from {METHODS}")
    for d in dsets:
        if d not in bds.LOADERS:
            raise SystemExit(f"unknown dataset {d!r}; choose from {ALL_DATASETS}")

    notes = list(args.note)
    if seed_over:
        notes.append("Seeds reduced on the slowest datasets to fit the time budget: " +
                     ", ".join(f"{k}: {v} seeds" for k, v in seed_over.items()) + f" (others: {seeds}).")
    info = run_info(argv, notes)
    if args.analysis:
        with open(args.analysis, encoding="utf-8") as fh:
            info["analysis"] = fh.read()
    b = Bench(args)
    jpath = os.path.join(out, "results.json")
    if args.merge and os.path.exists(jpath):
        with open(jpath, encoding="utf-8") as fh:
            old = json.load(fh)
        b.records = [r for r in expand_records(old["records"], old["meta"]) if r["dataset"] not in dsets]
        b.meta = {k: v for k, v in old["meta"].items() if k not in dsets}
        log(f"merge: kept {len(b.records)} records of {sorted(b.meta)} from {jpath}")
    if args.report_only:
        with open(jpath, encoding="utf-8") as fh:
            old = json.load(fh)
        old["run"].setdefault("notes", [])
        old["run"]["notes"] = list(old["run"]["notes"]) + [n for n in args.note if n not in old["run"]["notes"]]
        if args.analysis:
            with open(args.analysis, encoding="utf-8") as fh:
                old["run"]["analysis"] = fh.read()
        expand_records(old["records"], old["meta"])
        summary = summarise(old["records"])
        dump_results(jpath, old["run"], old["meta"], summary, old["records"])
        write_markdown(os.path.join(out, "results.md"), old["records"], old["meta"], summary, old["run"])
        write_plots(out, old["records"], old["meta"], summary)
        log(f"rebuilt {out}/results.md and plots from {jpath}")
        return
    log(f"benchmark: datasets={dsets} eps={[eps_key(e) for e in eps]} seeds={seeds} methods={methods} → {out}")
    for d in dsets:
        b.run_dataset(d, seed_over.get(d, seeds), eps, methods)
        summary = summarise(b.records)
        dump_results(jpath, info, b.meta, summary, b.records)
        write_markdown(os.path.join(out, "results.md"), b.records, b.meta, summary, info)
        write_plots(out, b.records, b.meta, summary)
        log(f"wrote {out}/results.md, results.json, plots ({d} done)")
    log("done")


if __name__ == "__main__":
    main()
