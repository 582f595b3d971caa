"""The ``cells`` prototype of ``block_partition.py``: a private partition of one block that follows the data.

A public Gaussian projection to p dimensions (points clipped to the unit ball there), a noisy-count tree of
D1 random hyperplanes in that space with noisy p-dimensional leaf sums, a weighted k-means of the leaf means
to ``kc`` centers (post-processing), ``lloyd`` noisy Lloyd steps in the projection, then one noisy count and
one noisy d-dimensional sum per cell of the raw block. Float Gaussian noise and a simplified tree walk: a
measurement of the idea, not an implementation to release with.

Options (``cells:key=value,...`` on block_partition's command line; a later key overrides an earlier one):

* ``p`` (``pcap=1``: at most d), ``D1``; ``keep_mult`` and ``keep_c``: a tree node is kept iff its noisy
  count reaches keep_mult × its leaf sum's noise norm √p·σ_leaf and keep_c (default √(2 ln 256) ≈ 3.33) × the
  count noise; ``lloyd`` (L) steps; ``kc`` centers in the projection (default k).
* ``f = (tree counts, leaf sums, cell counts, cell sums)``, ``fl`` and ``fz`` (zoom): shares of A's budget.
  A Lloyd step's count and its sum *each* take ``fl``, so A's budget holds iff
  sum(f) + 2·lloyd·fl + fz ≤ 1 (fz only with zoom). The defaults are within it (0.7 + 2·4·0.0375 = 1); the
  first prototype had fl = 0.075 (1.3 of A's budget) and ``results/locate_cells.md``'s tables 1.2 (see its
  correction).
* ``reduce=m``: after ``lloyd`` steps the projected centers are replaced by their weighted k-means to m
  (post-processing), then ``lloyd2`` more steps; ``over=r`` is kc = r·k with reduce = k.
* ``split=s``: after each Lloyd step but the last, every dead center (noisy count under 3σ) is moved next to
  the heaviest one, the two ± s·(the live centers' median gap) apart along a public random direction.
* ``zoom=c``: the projection recentred at its noisy mean and scaled up by 1/r, r = min(1, c × its noisy RMS
  radius), clipped to the unit ball again (a count, a p-dimensional sum and a sum of squares, fz/3 each).
* How many cells to release, public rules on released quantities only (the last Lloyd step's noisy counts
  and projected centers, the public noise scales); ``ward`` overrides ``thr``:
  ``thr=m``: a cell whose noisy count is under m·√d·σ_sum (its mean's noise norm over 1/m, in units of the
  ball's radius) joins the nearest kept center before the final sums.
  ``ward=w``: greedily merge the two cells whose merge adds the least to the cost while that addition
  (Ward's n_a·n_b/(n_a + n_b)·‖c_a − c_b‖² in the projection, less its noise bias) is under w times the
  noise cost it saves (d·σ_sum²·(1/n_a + 1/n_b − 1/(n_a + n_b)), the sums' noise as k-means cost).
* ``exact=1``: the final counts and sums without noise (not DP): what the partition alone costs.

The settings ``results/locate_cells.md`` recommends (they spend A's whole budget):
``p=32,pcap=1,D1=9,keep_mult=1,over=2,split=0.25,lloyd=4,fl=0.025,f=(0.05,0.05,0.02,0.65),zoom=2,fz=0.03,ward=1``.
"""
import math

import numpy as np


def weighted_kmeans(P, w, k, seed):
    """KMeans (n_init = 3) of the rows with positive weight; the rows themselves when there are at most k."""
    from sklearn.cluster import KMeans

    keep = w > 0
    P, w = P[keep], w[keep]
    if len(P) <= k:
        return P
    return KMeans(k, n_init=3, random_state=seed).fit(P, sample_weight=w).cluster_centers_


def _nearest(Z, C):
    return ((Z ** 2).sum(1)[:, None] - 2 * Z @ C.T + (C ** 2).sum(1)[None]).argmin(1)


def _tree_leaves(Z, rng, D1, sig_c, sig_z, theta_k):
    n, p = Z.shape
    bits = (Z @ rng.normal(size=(D1, p)).T >= 0).astype(np.int64)
    code = (bits << np.arange(D1 - 1, -1, -1)).sum(1)
    leaves, frontier = [], [(0, 0, n + rng.normal() * sig_c)]
    while frontier:
        nxt = []
        for lv, pre, nc in frontier:
            if lv == 0 and nc < theta_k:
                continue
            kids = []
            if nc >= 2 * theta_k and lv < D1:
                for b in (0, 1):
                    m = (code >> (D1 - lv - 1)) == 2 * pre + b
                    q = m.sum() + rng.normal() * sig_c
                    if q >= theta_k:
                        kids.append((lv + 1, 2 * pre + b, q))
            if kids:
                nxt += kids
            else:
                leaves.append((lv, pre, nc))
        frontier = nxt
    Lz, Lw = [], []
    for lv, pre, nc in leaves:
        m = (code >> (D1 - lv)) == pre if lv else np.ones(n, bool)
        Lz.append((Z[m].sum(0) + rng.normal(size=p) * sig_z) / max(nc, 1))
        Lw.append(nc)
    return np.array(Lz).reshape(-1, p), np.array(Lw)


def _threshold_groups(Cz, W, floor):
    kept = W >= floor
    if not kept.any():
        kept = W == W.max()
    idx = np.flatnonzero(kept)
    return _nearest(Cz, Cz[idx])


def _ward_groups(Cz, W, noise, bias, w):
    """noise: d·σ_sum² (the noise cost of a cell of one point); bias: p·σ_step² (a projected center's)."""
    W = np.maximum(W, 1.0)
    groups = [[i] for i in range(len(Cz))]
    C, n = [c for c in Cz], list(W)
    while len(groups) > 1:
        best = None
        for a in range(len(groups)):
            for b in range(a + 1, len(groups)):
                na, nb = n[a], n[b]
                d2 = max(((C[a] - C[b]) ** 2).sum() - bias * (1 / na ** 2 + 1 / nb ** 2), 0.0)
                gain = na * nb / (na + nb) * d2 - w * noise * (1 / na + 1 / nb - 1 / (na + nb))
                if best is None or gain < best[0]:
                    best = (gain, a, b)
        gain, a, b = best
        if gain >= 0:
            break
        C[a], n[a] = (n[a] * C[a] + n[b] * C[b]) / (n[a] + n[b]), n[a] + n[b]
        groups[a] += groups.pop(b)
        C.pop(b), n.pop(b)
    g = np.empty(len(Cz), np.int64)
    for j, members in enumerate(groups):
        g[members] = j
    return g


def _split_heaviest(Cz, W, live, scale, rng):
    """Each dead center (its noisy count under 3σ) takes half of the heaviest center's weight: the two sit
    ± u around it, u a public random direction of norm scale × the live centers' median gap."""
    if live.sum() < 2 or live.all():
        return Cz, W
    L = Cz[live]
    gap = np.sqrt(np.median(np.sort(((L[:, None] - L[None]) ** 2).sum(-1), 1)[:, 1]))
    Cz, W = Cz.copy(), np.where(live, W, 0.0)
    for j in np.flatnonzero(~live):
        h = int(W.argmax())
        u = rng.normal(size=Cz.shape[1])
        u *= scale * gap / np.linalg.norm(u)
        Cz[j], Cz[h] = Cz[h] + u, Cz[h] - u
        W[j] = W[h] = W[h] / 2
    return Cz, W


def _zoom(b, Z, c, share, rng):
    """Recentre the projection at its noisy mean and rescale by r = min(1, c·(noisy RMS distance to it)),
    clipping to the unit ball again: every later stage keeps its sensitivities and its noise shrinks by r
    against the data where the data fill a small part of the public ball. Three queries of share/3 each."""
    n_ = len(Z) + rng.normal() * b.sigma(math.sqrt(2), share / 3)
    m = (Z.sum(0) + rng.normal(size=Z.shape[1]) * b.sigma(2.0, share / 3)) / max(n_, 1)
    m /= max(np.linalg.norm(m), 1.0)
    ss = ((Z - m) ** 2).sum() + rng.normal() * b.sigma(4.0, share / 3)
    r = min(1.0, c * math.sqrt(max(ss, 0) / max(n_, 1)))
    r = max(r, 1e-3)
    Z = (Z - m) / r
    return Z / np.maximum(np.linalg.norm(Z, axis=1), 1.0)[:, None], r


def _reduce(Cz, W, m, seed):
    """The weighted k-means of the projected centers to m (post-processing); weights follow their centers."""
    C = weighted_kmeans(Cz, np.maximum(W, 0), m, seed)
    return C, np.bincount(_nearest(Cz, C), weights=W, minlength=len(C))


def cells(b, seed, p=32, D1=9, f=(0.1, 0.1, 0.1, 0.4), lloyd=4, fl=0.0375, keep_mult=3.0, kc=None,
          thr=0.0, ward=0.0, exact=0, reduce=0, lloyd2=0, keep_c=None, split=0.0, over=0.0, zoom=0.0,
          fz=0.03, pcap=0):
    """Centers fitted to the cells' noisy means (weights: their noisy counts), and how many cells were
    released. The defaults are the first prototype's, with its Lloyd share halved to fit A's budget."""
    rng = np.random.default_rng(seed + 1000)
    n, d, k, Y = b.n, b.d, b.k, b.Y
    if over:
        kc, reduce = round(over * k), k
    if pcap:
        p = min(p, d)
    Z = Y @ (rng.normal(size=(p, d)) / math.sqrt(p)).T
    Z /= np.maximum(np.linalg.norm(Z, axis=1), 1.0)[:, None]
    r = 1.0  # the projection's scale against the ball's (zoom): Ward compares its distances with sum noise
    if zoom:
        Z, r = _zoom(b, Z, zoom, fz, rng)
    f_cnt, f_leaf, f_cell_cnt, f_cell_sum = f
    sig_c, sig_z = b.sigma(math.sqrt(2 * (D1 + 1)), f_cnt), b.sigma(2.0, f_leaf)
    theta_k = max(sig_c * (keep_c or math.sqrt(2 * math.log(2 * 64 / 0.5))), keep_mult * math.sqrt(p) * sig_z)
    Lz, Lw = _tree_leaves(Z, rng, D1, sig_c, sig_z, theta_k)
    if not len(Lz):
        return b.c[None], 0
    Cz = weighted_kmeans(Lz, Lw, kc or k, seed)
    W = np.bincount(_nearest(Lz, Cz), weights=Lw, minlength=len(Cz))
    sig_lc, sig_lz = b.sigma(math.sqrt(2), fl), b.sigma(2.0, fl)
    for step in range(lloyd + lloyd2):
        if reduce and step == lloyd:
            Cz, W = _reduce(Cz, W, reduce, seed)
        lab = _nearest(Z, Cz)
        cn = np.bincount(lab, minlength=len(Cz)) + rng.normal(size=len(Cz)) * sig_lc
        Sz = np.zeros_like(Cz)
        np.add.at(Sz, lab, Z)
        Sz += rng.normal(size=Sz.shape) * sig_lz
        live = cn > 3 * sig_lc
        Cz = np.where(live[:, None], Sz / np.maximum(cn, 1)[:, None], Cz)
        W = cn
        if split and step < lloyd + lloyd2 - 1:
            Cz, W = _split_heaviest(Cz, W, live, split, rng)
    if reduce and not lloyd2:
        Cz, W = _reduce(Cz, W, reduce, seed)
    sig_s = b.sigma(2.0, f_cell_sum)
    g = np.arange(len(Cz))  # cell → released group: from released quantities only, never from occupancy
    if thr:
        g = _threshold_groups(Cz, W, thr * math.sqrt(d) * sig_s)
    if ward:
        g = _ward_groups(Cz, W, d * sig_s ** 2 / r ** 2, p * (sig_lz if lloyd else sig_z) ** 2, ward)
    kk = int(g.max()) + 1
    lab = g[_nearest(Z, Cz)]
    sig_cc = b.sigma(math.sqrt(2), f_cell_cnt)
    cnt = np.bincount(lab, minlength=kk) + rng.normal(size=kk) * sig_cc * (not exact)
    S = np.zeros((kk, d))
    np.add.at(S, lab, Y)
    S += rng.normal(size=(kk, d)) * sig_s * (not exact)
    keep = cnt >= sig_cc * math.sqrt(2 * math.log(2 * kk * 1024 / 0.5))
    M = S[keep] / cnt[keep][:, None]
    M /= np.maximum(np.linalg.norm(M, axis=1), 1.0)[:, None]
    return weighted_kmeans(b.c + b.R * M, cnt[keep], k, seed), int(keep.sum())
