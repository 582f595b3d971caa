"""A measurement, NOT a private mechanism: how far a per-part firing rule could take in-order streams.

Runs ``first_releases.py`` (same arguments) with every ring's block also released through A when one part
(one ring center) of its pending block holds C·M/P points (P: the ring's parts, M: the block size), read
from the *exact* count (``NOISY=0``, a non-private ceiling) or from the count plus Laplace noise at the
ring sparse vector's scale under its own threshold noise (``NOISY=1``: what a per-part sparse vector with a
budget like the ring one's would see; the noise is drawn per (epoch, tick), not from the run's seed). Every
point still enters one block; the extra release resets the ring's sparse-vector count as a fire does.
Prints the extra releases it caused. Bench-only: the library has no such rule.

    C=2 NOISY=0 .venv/bin/python benchmarks/part_fire_oracle.py gmm100_inorder --seeds 5 --no-prefix
"""
import os, sys
import numpy as np
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dpstream.merge_reduce as mr
C = float(os.environ.get("C", "2"))
NOISY = os.environ.get("NOISY", "0") == "1"
FIRES = [0]
orig_step = mr.EpochMergeReduce.step

def step(self, tick, x, ring, f):
    I = self.cfg.n_rings
    if not hasattr(self, "_pc"):
        self._pc = np.zeros((I, self.centers.shape[0]), dtype=np.int64)
    if len(x):
        np.add.at(self._pc, (ring, f), 1)
    fired = orig_step(self, tick, x, ring, f)
    self._pc[fired] = 0
    thr = C * self.block_size / self.centers.shape[0]
    if NOISY:
        rng = np.random.default_rng(abs(hash((self.epoch, tick))) % 2**32)
        b = self.plan.svt_scale
        if not hasattr(self, "_rho"):
            self._rho = rng.laplace(0, b, self._pc.shape)
        nu = rng.laplace(0, b, self._pc.shape)
        extra = ((self._pc + nu) >= thr + self._rho).any(axis=1) & ~fired
    else:
        extra = (self._pc.max(axis=1) >= thr) & ~fired
    for i in np.flatnonzero(extra):
        self.rings[i].release_block(tick)
        self.svt.count[i] = 0
        self._pc[i] = 0
        if NOISY:
            self._rho[i] = np.random.default_rng(tick * 1000 + i).laplace(0, self.plan.svt_scale, self._pc.shape[1])
        FIRES[0] += 1
    if extra.any():
        self.version += 1
    return fired

orig_flush = mr.EpochMergeReduce.flush
def flush(self, tick):
    orig_flush(self, tick)
    if hasattr(self, "_pc"):
        self._pc[:] = 0
mr.EpochMergeReduce.step = step
mr.EpochMergeReduce.flush = flush
import first_releases
first_releases.main(sys.argv[1:])
print("oracle extra fires:", FIRES[0], "C =", C, "noisy", NOISY)
