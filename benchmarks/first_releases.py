"""The first releases of a stream under ``partial_fit``'s default horizon (T = 1,024), quickly.

``run_benchmark.py`` runs dpstream with the data set's exact horizon (its ``dpstream`` method) and checks
the targets on it; a user who does not know the stream's length gets the default horizon
(``dpstream_default_horizon``). This script runs ``DPStreamClusterer`` exactly as that method does —
``partial_fit`` one tick at a time, no ``horizon_ticks`` unless ``--exact`` — with any advanced
parameters given as ``name=value`` (JSON values), and prints per seed the final cost ratio (against
``KMeans(n_init=10)`` on all points), the worst prefix ratio at the checkpoints ≥ 10% (against
``KMeans(n_init=3)`` on each prefix, as ``metrics/checkpoints.py``) and the epoch changes; then the
medians. About a second per seed on blobs_1e4/1e5.

    .venv/bin/python benchmarks/first_releases.py blobs_1e4 --eps 1 --seeds 5
    .venv/bin/python benchmarks/first_releases.py blobs_1e5 --eps 0.5 --seeds 5 flush_schedule='"count"'
    .venv/bin/python benchmarks/first_releases.py gmm100 --no-prefix --seeds 3 root_tail='"horizon"' n_init=3

``--declare-end`` passes the last tick as ``partial_fit(X, last=True)``: the user declares the stream's end
(a file read chunk by chunk), and the final release holds every point even under the default horizon.

``--stop TICK`` runs the first TICK ticks only — the prefix as a whole stream — and prints the ratio of
its last release against the prefix's optimum; with ``--declare-end`` tick TICK is declared the end (every
pending block goes through A), what the release at TICK could be were the user to end the stream there:

    .venv/bin/python benchmarks/first_releases.py blobs_1e5 --seeds 5 --stop 10 --declare-end

``--no-prefix`` skips the prefix references (slow at high d). References are cached under
``--cache`` (default /tmp/dpstream-first-releases).

``--diagnose TICK`` prints, per seed, what the release of tick TICK is made of: each epoch's coreset
(closed epochs, then the open one: its points, its released mass, the weight factor the release fit gives
it, and the cost ratio of a k-means fit of that coreset alone), the release's own ratio and that of an
unweighted fit of the union (the release's ``n_init``) — all against the prefix's optimum — and the points
still waiting in the open epoch's blocks (an exact count read from the engine: operator telemetry for this
benchmark, never part of a release). On a labelled set it adds, from the benchmark's ground truth, how
many true clusters each epoch's points lie nearest to and how far from their means, and the cost of the
union partitioned by true cluster (each center the weighted mean of the released points nearest to one
true mean): the floor of any fit that reweighs or regroups these released sets.

    .venv/bin/python benchmarks/first_releases.py blobs_1e5 --eps 0.5 --seeds 3 --diagnose 10
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from dpbench.datasets.registry import load  # noqa: E402
from dpbench.metrics.checkpoints import checkpoint_ticks, prefix_sizes  # noqa: E402
from dpbench.metrics.cost import kmeans_cost  # noqa: E402


def references(ds, prefixes: bool, cache: str) -> dict:
    from sklearn.cluster import KMeans

    os.makedirs(cache, exist_ok=True)
    path = os.path.join(cache, f"{ds.name}{'' if prefixes else '-final'}.json")
    if os.path.exists(path):
        return json.load(open(path))
    X = ds.X
    ticks = [t for t in checkpoint_ticks(ds.T) if t < ds.T] if prefixes else []
    ref = {"full": kmeans_cost(X, KMeans(ds.k, n_init=10, random_state=0).fit(X).cluster_centers_), "ticks": ticks,
           "prefix": [kmeans_cost(X[:m], KMeans(min(ds.k, m), n_init=3, random_state=0).fit(X[:m]).cluster_centers_)
                      for m in prefix_sizes(ds.n, ds.tick, ticks)]}
    json.dump(ref, open(path, "w"))
    return ref


def diagnose(m, X: np.ndarray, k: int, opt: float, y=None) -> str:
    """What the current release of the estimator ``m`` is made of (see ``--diagnose``): post-processing of
    its released sets, scored on the prefix ``X`` against its optimum ``opt``. With the prefix's labels
    ``y`` (benchmark ground truth, never the library's): per epoch the true clusters its points lie
    nearest to and their distance to those means, and the union's labelled partition (each released point
    to its nearest true mean, centers the weighted means): what a perfect fit of these sets could reach."""
    from dpstream.offline import cluster_coreset
    from dpstream.semicoresets import WeightedSet

    e = m.engine_
    cfg = e.cfg
    sets = list(e.epoch_coresets) + ([e.mr.released()] if e.mr is not None else [])
    newest = max((i for i, s in enumerate(sets) if len(s)), default=0)

    def ratio(S) -> float:  # as many restarts as the release's own fit (fewer gave local optima at k = 64)
        c = cluster_coreset(S.points, S.weights, k, cfg.objective, np.random.default_rng(0), cfg.center_vec,
                            n_init=cfg.n_init)
        return kmeans_cost(X, c) / opt

    labs = np.unique(y) if y is not None else np.zeros(0)
    means = np.array([X[y == c].mean(axis=0) for c in labs]) if len(labs) else None

    def truth(S) -> tuple:  # (nearest true cluster of each point, its distance to that mean)
        d2 = ((S.points[:, None, :] - means[None]) ** 2).sum(axis=-1)
        return d2.argmin(axis=1), np.sqrt(d2.min(axis=1))

    rows = []
    for i, S in enumerate(sets):
        tag = "open" if i == len(sets) - 1 and e.mr is not None else "closed"
        fit = float(cfg.release_epoch_decay) ** max(newest - i, 0) if len(S) else 0.0
        line = (f"    epoch {i} ({tag}): {len(S)} points, mass {S.weights.sum():.0f}, fit factor {fit:.3g}, "
                f"alone {ratio(S) if len(S) else float('nan'):.2f}")
        if means is not None and len(S):
            near, dist = truth(S)
            line += f", true clusters {len(np.unique(near))}, median distance to their means {np.median(dist):.3g}"
        rows.append(line)
    U = WeightedSet.concat(sets, cfg.dim)
    waiting = e.mr.buffered() if e.mr is not None else 0
    # the budget a block has: A's public thresholds for the open epoch's parts (a leaf is kept from θ_keep
    # points on, a node branches from θ_branch), against M, the block size a ring fires at
    budget = ""
    if hasattr(e.A, "thresholds") and e.mr is not None:
        root, keep, branch = e.A.thresholds(e.mr.centers.shape[0], ("A", e.epoch, 0, 0))
        budget = (f"; M {e.block_size}, A's thresholds θ_keep {keep:.0f} θ_branch {branch:.0f} θ_root {root:.0f} "
                  f"(a ring's first block, {e.mr.centers.shape[0]} parts)")
    head = (f"  tick {e.t}: release {kmeans_cost(X, m.cluster_centers_) / opt:.2f}, union unweighted "
            f"{ratio(U) if len(U) else float('nan'):.2f}")
    if means is not None and len(U):
        near = truth(U)[0]
        C = np.array([np.average(U.points[near == j], axis=0, weights=U.weights[near == j]) for j in np.unique(near)])
        head += f", union by true cluster {kmeans_cost(X, C) / opt:.2f} ({len(C)} of {len(labs)} clusters)"
    return "\n".join([head + f", epoch {e.epoch}, waiting in open blocks {waiting} points (not released); "
                      f"through A {e.n_points - waiting} of {e.n_points} points, released mass "
                      f"{U.weights.sum():.0f}{budget}"] + rows)


def prefix_opt(ds, t: int, ref: dict, cache: str) -> float:
    """The k-means cost of the prefix of ticks 1..t under ``KMeans(n_init=3)`` (as the checkpoints')."""
    from sklearn.cluster import KMeans

    if t in ref["ticks"]:
        return ref["prefix"][ref["ticks"].index(t)]
    X = ds.X[:min(ds.n, t * ds.tick)]
    return kmeans_cost(X, KMeans(min(ds.k, len(X)), n_init=3, random_state=0).fit(X).cluster_centers_)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dataset")
    ap.add_argument("--eps", type=float, default=1.0)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--exact", action="store_true", help="horizon_ticks = the stream's length")
    ap.add_argument("--declare-end", action="store_true", help="partial_fit(X, last=True) at the last tick")
    ap.add_argument("--state", action="store_true",
                    help="print each seed's engine state at the end and its peak (floats, and as a share of n·d)")
    ap.add_argument("--no-prefix", action="store_true")
    ap.add_argument("--cache", default="/tmp/dpstream-first-releases")
    ap.add_argument("--diagnose", type=int, default=0, metavar="TICK",
                    help="print what the release of tick TICK is made of, per seed")
    ap.add_argument("--stop", type=int, default=0, metavar="TICK",
                    help="run ticks 1..TICK only (with --declare-end, TICK is the declared end)")
    ap.add_argument("params", nargs="*", help="advanced parameters, name=JSON value")
    a = ap.parse_intermixed_args(argv)
    warnings.filterwarnings("ignore")
    from dpstream import DPStreamClusterer

    kw = {}
    for p in a.params:
        k, v = p.split("=", 1)
        kw[k] = json.loads(v)
    ds = load(a.dataset)
    ref = references(ds, not a.no_prefix, a.cache)
    want = {t for t in ref["ticks"] if t >= 0.1 * ds.T - 1e-9}
    finals, worst = [], []
    last_tick = min(a.stop, ds.T) if a.stop > 0 else ds.T
    for s in range(a.seeds):
        m = DPStreamClusterer(ds.k, epsilon=a.eps, delta=1e-6, radius=ds.radius, center=ds.center, random_state=s,
                              tick_size=ds.tick, **({"horizon_ticks": ds.T} if a.exact else {}), **kw)
        ck, epochs, notes, flushes, part_fires = {}, [], [], [], 0
        for t in range(1, last_tick + 1):
            mr = m.engine_.mr if t > 1 else None  # the epoch's rings that step this tick (part_fire's releases)
            before = mr.part_fires if mr is not None else 0
            m.partial_fit(ds.X[(t - 1) * ds.tick:t * ds.tick], last=a.declare_end and t == last_tick)
            part_fires += (mr if mr is not None else m.engine_.mr).part_fires - before
            epochs.append(m.release_.epoch)
            if m.engine_.schedule.last_flush == t:  # the schedule's flush ticks (public: DP outputs only)
                flushes.append(t)
            if t == a.diagnose:
                notes.append(diagnose(m, ds.X[:min(ds.n, t * ds.tick)], ds.k, prefix_opt(ds, t, ref, a.cache),
                                      None if ds.y is None else ds.y[:min(ds.n, t * ds.tick)]))
            if t in want:
                ck[t] = kmeans_cost(ds.X[:min(ds.n, t * ds.tick)], m.cluster_centers_)
        if last_tick < ds.T:  # the prefix as a whole stream: its last release against the prefix's optimum
            finals.append(kmeans_cost(ds.X[:last_tick * ds.tick], m.cluster_centers_)
                          / prefix_opt(ds, last_tick, ref, a.cache))
        else:
            finals.append(kmeans_cost(ds.X, m.cluster_centers_) / ref["full"])
        ratios = {t: ck[t] / p for t, p in zip(ref["ticks"], ref["prefix"]) if t in ck}
        worst.append(max(ratios.values()) if ratios else float("nan"))
        changes = [t + 1 for t in range(1, len(epochs)) if epochs[t] != epochs[t - 1]]
        print(f"seed {s}: final {finals[-1]:.3f}  worst prefix {worst[-1]:.3f}  "
              f"prefix {' '.join(f'{t}:{r:.2f}' for t, r in ratios.items())}  epoch changes {changes}  "
              f"other flushes {[t for t in flushes[1:] if t not in changes]}"
              + (f"  part fires {part_fires}" if kw.get("part_fire") else ""), flush=True)
        for note in notes:
            print(note, flush=True)
        if a.state:
            nd = ds.n * ds.X.shape[1]
            e = m.engine_
            print(f"  state at the end {e.state_size()} floats ({e.state_size() / nd:.2%} of n·d), "
                  f"peak {e.peak_state} ({e.peak_state / nd:.2%})", flush=True)
    stop = f", stopped at tick {last_tick} (final: its prefix)" if last_tick < ds.T else ""
    print(f"{a.dataset} ε={a.eps:g} {'exact' if a.exact else 'default'} horizon{', end declared' if a.declare_end else ''}{stop} {kw}: final median "
          f"{np.median(finals):.3f}, worst prefix (≥ 10%) median {np.median(worst):.3f}, {a.seeds} seeds")


if __name__ == "__main__":
    main()
