"""DPFindCenters (Alg. 3): continual heavy hitters per bucket, with ℓ1 pruning.

Each bucket keeps one vector-valued continual counter over (N_j, K_j1..K_jB):
its number of points and, per id bit m, how many of them have bit m set
(a bit decoder: a Bitstogram-style DP heavy hitter).  Decoding is
post-processing of the released noisy counters and inspects **every** bucket
every tick (P6: inspecting only the bucket that received data would reveal
the hash of the point's cell):

    b_m = [K̂_m ≥ N̂/2],  f̂ = min_m (K̂_m if b_m else N̂ − K̂_m),
    report cell(b) iff f̂ ≥ α·N̂ (dominance/pruning) and N̂ ≥ τ_min.
"""
from __future__ import annotations

import numpy as np


def bucket_updates(buckets: np.ndarray, bits: np.ndarray, n_buckets: int) -> np.ndarray:
    """Per-bucket (count, bit sums) of one tick, (w, 1+B) int64, without per-point loops."""
    B = bits.shape[1]
    out = np.zeros((n_buckets, 1 + B), dtype=np.int64)
    if buckets.size == 0:
        return out
    order = np.argsort(buckets, kind="stable")
    sb = buckets[order]
    starts = np.flatnonzero(np.r_[True, sb[1:] != sb[:-1]])
    uniq = sb[starts]
    out[uniq, 0] = np.diff(np.r_[starts, sb.size])
    out[uniq, 1:] = np.add.reduceat(bits[order].astype(np.int64), starts, axis=0)
    return out


def bucket_updates_from_ids(buckets: np.ndarray, ids: np.ndarray, n_buckets: int, n_values: int,
                            n_bits: int) -> np.ndarray:
    """Same result as ``bucket_updates(buckets, encode(ids))`` without materialising the bit matrix.

    Per (bucket, coordinate) a histogram of id values is one ``bincount``; the
    bit sums are that histogram times the (values × bits) bit table.
    """
    n, d = ids.shape
    out = np.zeros((n_buckets, 1 + d * n_bits), dtype=np.int64)
    if n == 0:
        return out
    out[:, 0] = np.bincount(buckets, minlength=n_buckets)
    flat = ((buckets[:, None] * d + np.arange(d)) * n_values + ids).ravel()
    hist = np.bincount(flat, minlength=n_buckets * d * n_values).reshape(n_buckets * d, n_values)
    table = (np.arange(n_values)[:, None] >> np.arange(n_bits)) & 1
    out[:, 1:] = (hist @ table).reshape(n_buckets, d * n_bits)
    return out


def decode_buckets(released: np.ndarray, alpha: float, tau_min: float):
    """Decode each bucket's dominant cell from noisy (N̂, K̂) rows of shape (w, 1+B).

    Returns (bits (w, B) int8, passed (w,) bool, f_hat (w,), n_hat (w,)).
    """
    n_hat = released[:, 0].astype(float)
    k_hat = released[:, 1:].astype(float)
    bits = k_hat >= (n_hat[:, None] / 2.0)
    agree = np.where(bits, k_hat, n_hat[:, None] - k_hat)
    f_hat = agree.min(axis=1) if agree.shape[1] else n_hat
    passed = (f_hat >= alpha * n_hat) & (n_hat >= tau_min) & (n_hat > 0)
    return bits.astype(np.int8), passed, f_hat, n_hat
