"""``release_decay_rule="drift"``: the ``clusters`` rule, and an old epoch that drifted away keeps its weight.

Why the release fit decays old epochs at all: in a stationary stream the newer epochs hold the same
clusters as the old ones, cut by finer rings (drawn around released centers), so the old epochs' coarser
leaf means only pull the fit between clusters. In a stream whose clusters stop arriving (in cluster order,
drifting) each cluster sits in the epochs that saw it and nothing newer replaces it: decaying it trades
its points for the newer epochs' clusters (gmm100 in cluster order, with the end declared: the fit's age
decay takes the final release from 2.29 to 2.73, while its three epochs hold disjoint sets of clusters).

The ``clusters`` and ``stopped`` rules judge one cluster at a time on the newer points in it, which needs
several released points per cluster (``stopped``: ln(k/0.05) expected newer points, 7 at k = 64; gmm100
releases about two per cluster). Here the question is asked of a whole epoch: are its points and the newer
epochs' points spread over the clusters of a k-means partition of every released point (a center per
``_POINTS_PER_CLUSTER`` points) as two samples of one distribution would be? The overlap of their mass
shares, Σ_j min(p_j, q_j), is compared with its value under ``_PERMUTATIONS`` random relabellings of which of
these released points are the old epoch's (a permutation test under the release's own key, drawn in
batches that stop once the answer is no: a stationary epoch costs one batch): an epoch whose
overlap falls below all but an ``_ALPHA`` part of them drifted, and all its points keep their whole weight.
A stationary stream's epochs overlap as their relabellings do: the ``clusters`` rule's factors stand, and
its releases are that rule's but for a false alarm (probability about ``_ALPHA`` per epoch and release).

The first epoch is judged last, and only once a later epoch drifted: its rings are the ball's alone, and
its coarse leaf means form clumps of their own that no newer point shares in a stationary stream too (at
d = 784 most of the first epoch), which the test alone would call drift.

Post-processing of the released epoch coresets under the release's keys: it reads nothing else.
"""
from __future__ import annotations

import numpy as np

_POINTS_PER_CLUSTER = 2  # as the "stopped" rule: fewer points per center make every old point a cell of its own
_PERMUTATIONS = 200
_BATCH = 10
_ALPHA = 0.01  # a stationary epoch is called drifted with probability about this, per epoch and release


def _overlap(old: np.ndarray, total: np.ndarray) -> np.ndarray:
    """Σ_j min(old share_j, newer share_j) of each row of ``old`` (the old epoch's mass per cell), ``total``
    the mass per cell of the old and newer points together."""
    new = total[None, :] - old
    so, sn = old.sum(axis=1, keepdims=True), new.sum(axis=1, keepdims=True)
    return np.minimum(old / np.where(so > 0, so, 1.0), np.maximum(new, 0.0) / np.where(sn > 0, sn, 1.0)).sum(axis=1)


def drifted(lab: np.ndarray, w: np.ndarray, is_old: np.ndarray, k: int, rng: np.random.Generator) -> bool:
    """Do the old epoch's points (``is_old``) and the newer ones share the partition ``lab`` less than
    all but an ``_ALPHA`` part of random relabellings of the same points do? (A relabelling draws which
    ``is_old.sum()`` of the points are the old epoch's, uniformly.) The relabellings are drawn in batches
    of ``_BATCH`` and the test stops once too many of them overlap no more than the epoch does: the same
    decision as all ``_PERMUTATIONS`` at once, and a stationary epoch costs one batch."""
    total = np.bincount(lab, weights=w, minlength=k)
    observed = _overlap(np.bincount(lab[is_old], weights=w[is_old], minlength=k)[None, :], total)[0]
    n, m = is_old.size, int(is_old.sum())
    most = int(np.floor(_ALPHA * (1 + _PERMUTATIONS))) - 1  # relabellings at or below it that still mean drift
    below = 0
    for start in range(0, _PERMUTATIONS, _BATCH):
        rows = min(_BATCH, _PERMUTATIONS - start)
        pick = np.argpartition(rng.random((rows, n)), m - 1, axis=1)[:, :m]
        cell = lab[pick] + k * np.arange(rows)[:, None]
        old = np.bincount(cell.ravel(), weights=w[pick].ravel(), minlength=rows * k).reshape(rows, k)
        below += int(np.count_nonzero(_overlap(old, total) <= observed))
        if below > most:
            return False
    return True


def drift_kept(cfg, noise, sets, S, factor: np.ndarray, epoch: int, t: int, partitions) -> np.ndarray:
    """The release fit's weight factors under ``release_decay_rule="drift"`` (see the module): ``factor``
    the ``clusters`` rule's factors of every point of ``S`` (the epochs ``sets`` concatenated), ``partitions``
    the release's :class:`dpstream.epochs.Partitions`; → the same with every point of a drifted epoch at 1."""
    k = max(1, min(cfg.n_clusters, len(S) // _POINTS_PER_CLUSTER))
    lab = partitions.labels(k)
    ep = np.concatenate([np.full(len(s), i) for i, s in enumerate(sets)])
    w = np.maximum(S.weights, 0.0)
    out = factor.copy()
    later_drifted = False
    for i in list(range(1, len(sets) - 1)) + [0]:
        seg, newer = ep == i, ep > i
        if not w[seg].sum() > 0 or not w[newer].sum() > 0 or (i == 0 and not later_drifted):
            continue  # (an epoch without mass overlaps nothing: the test would call it drifted)
        both = seg | newer
        if not drifted(lab[both], w[both], seg[both], k, noise.generator(("release", epoch, t, "B-fit drift", i))):
            continue
        later_drifted = True
        out[seg] = 1.0
    return out
