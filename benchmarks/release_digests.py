#!/usr/bin/env python
"""A digest of every release of a few engine configurations: a change meant to be speed only must leave them all
equal (run it before and after, or with ``PYTHONPATH=<another checkout>`` for that checkout's code).

    .venv/bin/python benchmarks/release_digests.py                 # every case, ~1 min
    .venv/bin/python benchmarks/release_digests.py cells emb784_1e4  # the cases whose line holds each word

Each case runs ``DPStreamClusterer`` as ``first_releases.py`` does (``partial_fit`` one tick at a time, seed 0,
ε = 1), with the stream's end declared at its last tick (so every pending block goes through A), under the
default and under the exact horizon, for k-means and k-median, and hashes after every tick the release's tick,
epoch, count estimate, centers and coreset (points and weights, every byte). The configurations: the
defaults; ``cellsP`` (the cells in full d: benchmarks/results/cells_default.md's P); ``cellsS`` (the cells
located in a projection, with Lloyd steps and the seeding options); the lloyd and snap semicoresets — on
emb784_1e4 (d = 784) and blobs_1e4 (d = 10), and the first three on emb784 (10⁵ points, exact horizon). Each
line also gives how many times A released a block with cells (0: the case does not exercise them)."""
from __future__ import annotations

import hashlib
import os
import sys
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from dpbench.datasets.registry import load  # noqa: E402

CONFIGS = {
    "default": {},
    "cellsP": dict(tree_cells=0.8, count_share=0.1, tree_keep_factor=1, tree_depth=9),
    "cellsS": dict(tree_cells=0.69, cells_locate_dims=32, cells_lloyd_steps=4, cells_lloyd_share=0.206, tree_depth=9,
                   count_share=0.25, cells_count_share=0.03, cells_overseed=2, cells_reseed=0.25, tree_keep_factor=1),
    "lloyd": dict(semicoreset="lloyd"),
    "snap": dict(semicoreset="snap"),
}


def cases():
    for name in ("emb784_1e4", "blobs_1e4"):
        for conf in CONFIGS:
            for objective in ("kmeans", "kmedian"):
                for exact in (False, True):
                    yield name, conf, objective, exact
    for conf in ("default", "cellsP", "cellsS"):
        yield "emb784", conf, "kmeans", True


def digest(name: str, conf: str, objective: str, exact: bool):
    """(sha256 of every release, A's releases with cells, CPU seconds)."""
    from dpstream import DPStreamClusterer
    from dpstream.semicoresets import TreeSemicoreset

    ds = load(name)
    m = DPStreamClusterer(ds.k, epsilon=1.0, delta=1e-6, radius=ds.radius, center=ds.center, random_state=0,
                          tick_size=ds.tick, objective=objective, **({"horizon_ticks": ds.T} if exact else {}),
                          **CONFIGS[conf])
    calls = [0]
    cells = TreeSemicoreset._cells

    def counted(self, block, key):
        calls[0] += 1
        return cells(self, block, key)

    TreeSemicoreset._cells = counted
    h = hashlib.sha256()
    t0 = time.process_time()
    try:
        for t in range(1, ds.T + 1):
            m.partial_fit(ds.X[(t - 1) * ds.tick:t * ds.tick], last=t == ds.T)
            r = m.release_
            h.update(repr((r.tick, r.epoch, r.count_estimate)).encode())
            for a in (r.centers, r.coreset_points, r.coreset_weights):
                a = np.ascontiguousarray(a)
                h.update(f"{a.dtype}{a.shape}".encode() + a.tobytes())
    finally:
        TreeSemicoreset._cells = cells
    return h.hexdigest()[:20], calls[0], time.process_time() - t0


def main(argv=None) -> int:
    words = sys.argv[1:] if argv is None else argv
    warnings.filterwarnings("ignore")
    import dpstream

    print(f"# dpstream from {os.path.dirname(dpstream.__file__)}")
    for name, conf, objective, exact in cases():
        tag = f"{name} {conf} {objective} {'exact' if exact else 'default'}-horizon"
        if all(w in tag for w in words):
            dg, n_cells, cpu = digest(name, conf, objective, exact)
            print(f"{tag:42s} {dg}  cells releases {n_cells:3d}  cpu {cpu:.2f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
