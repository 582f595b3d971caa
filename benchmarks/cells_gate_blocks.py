"""Which blocks a run sends through A, and how big they are (operator telemetry for this benchmark only).

Runs ``first_releases.py`` with the same arguments and logs every block a ring releases: epoch, ring, block
index j, tick, a sparse-vector fire or a flush, its exact point count (read from the engine's state: never
part of a release), its parts, its size in units of parts·k·θ_k (θ_k: A's keep threshold; with ``cells_gate``
the cells' keep threshold, the gate's unit; and in units of parts·k·θ_tree, θ_tree the plain tree's keep threshold,
``cells_gate_max``'s unit) and, with ``cells_gate``, the DP estimate n̂ A was given and the mode it ran. Empty blocks
are left out; the log follows the seeds' runs in order (a line ``seed s`` opens each).

    .venv/bin/python benchmarks/cells_gate_blocks.py emb784_1e4 --seeds 1 --declare-end --no-prefix tree_cells=0.69
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import dpstream.engine as engine_mod  # noqa: E402
import dpstream.merge_reduce as mr  # noqa: E402
import dpstream.semicoresets as sc  # noqa: E402
import first_releases  # noqa: E402

_release_block, _flush, _gated, _init = (mr.RingMergeReduce.release_block, mr.EpochMergeReduce.flush,
                                         sc.TreeSemicoreset.run_gated, engine_mod.Engine.__init__)
_state = {"flush": False, "seed": 0}


def release_block(self, tick, *a):
    n = int(self.block.n)
    if n:
        theta = self.A.cells_threshold() if self.cfg.cells_gate else self.A.leaf_threshold()
        unit = self.block.n_parts * self.cfg.n_clusters * theta
        print(f"  e{self.epoch} r{self.ring} j{self.j} t{tick} {'flush' if _state['flush'] else 'fire'} n={n} "
              f"parts={self.block.n_parts} n/(parts·k·θ_k)={n / unit:.3f} (θ_k={theta:.1f})", end="")
        if self.cfg.cells_gate:  # the plain tree's keep threshold too: cells_gate_max's unit
            theta_tree = self.A.gated_tree().leaf_threshold()
            print(f" n/(parts·k·θ_tree)={n / (unit / theta * theta_tree):.3f} (θ_tree={theta_tree:.1f})", end="")
    _release_block(self, tick, *a)
    if n:
        print(f" n̂={_state['n_hat']:.0f} mode={_state['mode']}" if "mode" in _state else "", flush=True)


def flush(self, tick, *a):
    _state["flush"] = True
    try:
        _flush(self, tick, *a)
    finally:
        _state["flush"] = False


def run_gated(self, block, key, n_hat):
    out = _gated(self, block, key, n_hat)
    if self.cfg.cells_gate:
        _state.update(n_hat=float("nan") if n_hat is None else n_hat, mode=self.last_mode)
    return out


def init(self, *a, **kw):
    print(f"seed {_state['seed']} (its blocks, then its result)", flush=True)
    _state["seed"] += 1
    _init(self, *a, **kw)


mr.RingMergeReduce.release_block = release_block
mr.EpochMergeReduce.flush = flush
sc.TreeSemicoreset.run_gated = run_gated
engine_mod.Engine.__init__ = init

if __name__ == "__main__":
    first_releases.main()
