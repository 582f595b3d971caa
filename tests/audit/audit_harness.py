"""A small statistical privacy-audit harness (tests only: an empirical lower bound on ε).

An audit runs a mechanism many times on two neighbouring inputs D (without the
record x) and D' (with x), reduces every run to a discrete *category* (a
summary of its whole output), and bounds the privacy loss of one event E (a set
of categories) from below with exact Clopper–Pearson intervals:

    ε̂ = ln((p_hi,lower − δ) / p_lo,upper)

where p_hi is the probability of E on the side where E is more likely and
p_lo on the other side (both orders are tried: x may be added or removed).
A mechanism that is (ε, δ)-DP has ε̂ ≤ ε except with probability ≤ 2α over
the seeds, for an event fixed before the test runs.

The event is either fixed in advance from the mechanism's known distribution
(:func:`audit_fixed`, Bonferroni over a small family), or chosen on a separate
*calibration* run (:func:`audit_calibrated`): categories are ranked by their
(conservatively estimated) likelihood ratio — an estimate of the Neyman–Pearson
order — or by a summary value (threshold events); every prefix of an order is a
candidate event, the one expected to give the best bound is kept, and it is
evaluated once on fresh seeds.  The test run never sees the selection, so the
single-event bound holds.

Every run is seeded by a fixed, distinct master seed (:func:`seed_for`), so
the audits are deterministic.  ``DPSTREAM_AUDIT_SCALE`` (default 1) multiplies
every trial count; ``make audit`` runs them with 10× the trials.
"""
from __future__ import annotations

import hashlib
import math
import os
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional

import numpy as np
from scipy.stats import beta as beta_dist

SCALE = float(os.environ.get("DPSTREAM_AUDIT_SCALE", "1") or 1)
if not SCALE > 0:
    raise ValueError(f"DPSTREAM_AUDIT_SCALE must be > 0, got {SCALE!r}")

ALPHA = 1e-3  # one-sided level of each Clopper–Pearson bound (99.9%)

# measured ε̂ of every audit run in this process, for the README table (printed with -s)
RESULTS: List["AuditResult"] = []


def n_trials(base: int) -> int:
    """The trial count for ``base`` trials at the default scale."""
    return max(1, int(round(base * SCALE)))


def seed_for(*parts) -> bytes:
    """A fixed, distinct 32-byte master seed per (audit, side, phase, batch): tests only."""
    return hashlib.sha256(("audit-" + "-".join(str(p) for p in parts)).encode()).digest()


# --------------------------------------------------------------------------- exact binomial bounds
def cp_lower(k: int, n: int, alpha: float = ALPHA) -> float:
    """One-sided (1 − α) Clopper–Pearson lower bound of a binomial p from k successes in n."""
    if k <= 0:
        return 0.0
    return float(beta_dist.ppf(alpha, k, n - k + 1))


def cp_upper(k: int, n: int, alpha: float = ALPHA) -> float:
    """One-sided (1 − α) Clopper–Pearson upper bound."""
    if k >= n:
        return 1.0
    return float(beta_dist.ppf(1.0 - alpha, k + 1, n - k))


def eps_lower_bound(k_hi: int, n_hi: int, k_lo: int, n_lo: int, delta: float = 0.0,
                    alpha: float = ALPHA) -> float:
    """Lower confidence bound of ε from an event seen k_hi/n_hi times on one side and k_lo/n_lo on the
    other: ln((p_hi_lower − δ) / p_lo_upper), or −inf when p_hi_lower ≤ δ."""
    num = cp_lower(k_hi, n_hi, alpha) - delta
    den = cp_upper(k_lo, n_lo, alpha)
    if num <= 0:
        return -math.inf
    return math.log(num / den)


# --------------------------------------------------------------------------- results
@dataclass
class AuditResult:
    name: str
    epsilon: float  # the configured ε the mechanism claims
    delta: float
    eps_hat: float  # the lower confidence bound of the chosen event
    event: str
    counts: tuple  # (k_hi, n_hi, k_lo, n_lo)
    point: float = math.nan  # the plain estimate ln(p̂_hi / p̂_lo) of the event, for the README
    extra: Dict[str, object] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return self.eps_hat <= self.epsilon

    def __str__(self) -> str:
        k1, n1, k0, n0 = self.counts
        return (f"[audit] {self.name}: configured ε = {self.epsilon:.4g} (δ = {self.delta:g}); "
                f"ε̂ lower bound = {self.eps_hat:.4g} (point {self.point:.4g}); event {self.event}: "
                f"{k1}/{n1} vs {k0}/{n0}")


def _record(res: AuditResult) -> AuditResult:
    RESULTS.append(res)
    print(res)
    return res


def _point(k_hi, n_hi, k_lo, n_lo) -> float:
    if k_hi == 0:
        return -math.inf
    if k_lo == 0:
        return math.inf
    return math.log((k_hi / n_hi) / (k_lo / n_lo))


# --------------------------------------------------------------------------- categories
def _rows(arrays):
    rows = [np.asarray(a) for a in arrays]
    return [a.reshape(a.shape[0], -1) for a in rows]


def _categorise(arrays):
    """(codes per array, unique rows): common integer category codes for the rows of several arrays."""
    rows = _rows(arrays)
    allr = np.concatenate(rows, axis=0)
    if np.issubdtype(allr.dtype, np.integer) or allr.dtype == bool:
        a = allr.astype(np.int64)
        lo = a.min(axis=0) if a.size else np.zeros(a.shape[1], dtype=np.int64)
        span = (a.max(axis=0) - lo + 1) if a.size else np.ones(a.shape[1], dtype=np.int64)
        if float(np.prod(span.astype(float))) < 2**62:  # mixed-radix key: a 1-D unique is much faster
            key = np.zeros(a.shape[0], dtype=np.int64)
            for j in range(a.shape[1]):
                key = key * span[j] + (a[:, j] - lo[j])
            uk, inv = np.unique(key, return_inverse=True)
            uniq = np.empty((uk.size, a.shape[1]), dtype=np.int64)
            rem = uk.copy()
            for j in range(a.shape[1] - 1, -1, -1):
                uniq[:, j] = rem % span[j] + lo[j]
                rem //= span[j]
            return _split(inv.ravel(), rows), uniq
    uniq, inv = np.unique(allr, axis=0, return_inverse=True)
    return _split(inv.ravel(), rows), uniq


def _split(inv, rows):
    out, s = [], 0
    for a in rows:
        out.append(inv[s:s + a.shape[0]])
        s += a.shape[0]
    return out


def _eps_lower_vec(k_hi, n_hi, k_lo, n_lo, delta, alpha):
    """Vectorised :func:`eps_lower_bound` over arrays of counts."""
    k_hi, k_lo = np.asarray(k_hi, dtype=float), np.asarray(k_lo, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        lo = np.where(k_hi > 0, beta_dist.ppf(alpha, np.maximum(k_hi, 1e-9), n_hi - k_hi + 1), 0.0)
        hi = np.where(k_lo < n_lo, beta_dist.ppf(1 - alpha, k_lo + 1, np.maximum(n_lo - k_lo, 1e-9)), 1.0)
        num = lo - delta
        return np.where(num > 0, np.log(np.maximum(num, 1e-300) / hi), -np.inf)


SELECT_ALPHA = 0.2  # confidence of the conservative plug-in estimates used to choose an event


def _cp_vec(k, n, alpha, upper):
    k = np.asarray(k, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        if upper:
            return np.where(k < n, beta_dist.ppf(1 - alpha, k + 1, np.maximum(n - k, 1e-9)), 1.0)
        return np.where(k > 0, beta_dist.ppf(alpha, np.maximum(k, 1e-9), n - k + 1), 0.0)


def _prefix_candidates(c0: np.ndarray, c1: np.ndarray, n0: int, n1: int, t0: int, t1: int, delta: float,
                       alpha: float, values: Optional[np.ndarray] = None, ratio_order: bool = True):
    """Best event (a prefix of a category order) from calibration counts c0 (D, n0 runs) and c1 (D',
    n1 runs), for a test run of t0 and t1 runs.

    Each candidate is scored by the bound the test run would give if the event's probabilities were
    the calibration's *conservative* estimates (80% Clopper–Pearson on the side that hurts): this
    targets the test size yet does not reward categories seen a handful of times (winner's curse).
    Orders tried: by a conservative likelihood ratio per category (both directions) and, when
    ``values`` are given, by value (thresholds ``v ≥ θ`` and ``v ≤ θ``).
    Returns (score, direction, category indices, kind of order)."""
    best = (-math.inf, None, None, None)
    a = SELECT_ALPHA
    orders = []
    if ratio_order:
        up = np.log(np.maximum(_cp_vec(c1, n1, a, False), 1e-300)) - np.log(_cp_vec(c0, n0, a, True))
        down = np.log(np.maximum(_cp_vec(c0, n0, a, False), 1e-300)) - np.log(_cp_vec(c1, n1, a, True))
        orders += [("ratio", np.lexsort((-c1, -up))), ("ratio", np.lexsort((-c0, -down)))]
    if values is not None:
        orders += [(">=", np.argsort(-values, kind="stable")), ("<=", np.argsort(values, kind="stable"))]
    for kind, order in orders:
        K1, K0 = np.cumsum(c1[order]), np.cumsum(c0[order])
        p1_lo, p1_hi = _cp_vec(K1, n1, a, False), _cp_vec(K1, n1, a, True)
        p0_lo, p0_hi = _cp_vec(K0, n0, a, False), _cp_vec(K0, n0, a, True)
        for direction, b in (("D'>D", _eps_lower_vec(p1_lo * t1, t1, p0_hi * t0, t0, delta, alpha)),
                             ("D>D'", _eps_lower_vec(p0_lo * t0, t0, p1_hi * t1, t1, delta, alpha))):
            j = int(np.argmax(b))
            if b[j] > best[0]:
                best = (float(b[j]), direction, order[:j + 1].copy(), kind)
    return best


def audit_calibrated(name: str, epsilon: float, delta: float, cal0, cal1, test0, test1,
                     values: Optional[Callable] = None, describe: Optional[Callable] = None,
                     ratio_order: bool = True, alpha: float = ALPHA) -> AuditResult:
    """Choose the event on the calibration outputs (cal0 from D, cal1 from D'), evaluate it once on the
    test outputs.  Each argument is an array with one summary row per run; ``values`` (optional) maps a
    summary row to a number, adding threshold events (``ratio_order=False``: threshold events only);
    ``describe(rows, kind)`` formats the chosen event from its summary rows and the kind of order
    ("ratio", ">=", "<=") that produced it."""
    codes, uniq = _categorise([cal0, cal1, test0, test1])
    n_cat = uniq.shape[0]
    k = [np.bincount(c, minlength=n_cat) for c in codes]
    vals = np.array([values(r) for r in uniq], dtype=float) if values is not None else None
    n_cal0, n_cal1, n_t0, n_t1 = (len(c) for c in codes)
    b_cal, direction, chosen, kind = _prefix_candidates(k[0].astype(float), k[1].astype(float), n_cal0, n_cal1,
                                                        n_t0, n_t1, delta, alpha, vals, ratio_order)
    if direction is None:
        return _record(AuditResult(name, epsilon, delta, -math.inf, "none", (0, n_t1, 0, n_t0)))
    mask = np.zeros(n_cat, dtype=bool)
    mask[chosen] = True
    t0, t1 = int(k[2][mask].sum()), int(k[3][mask].sum())
    counts = (t1, n_t1, t0, n_t0) if direction == "D'>D" else (t0, n_t0, t1, n_t1)
    eh = eps_lower_bound(*counts, delta=delta, alpha=alpha)
    rows = [tuple(int(v) if float(v).is_integer() else float(v) for v in uniq[i]) for i in sorted(chosen)]
    desc = describe(rows, kind) if describe is not None else f"{len(chosen)} of {n_cat} output categories"
    more = "D'" if direction == "D'>D" else "D"
    return _record(AuditResult(name, epsilon, delta, eh, f"{desc}, more likely under {more}", counts,
                               _point(*counts), {"selection_score": b_cal, "kind": kind}))


def audit_fixed(name: str, epsilon: float, delta: float, events0: Dict[str, np.ndarray],
                events1: Dict[str, np.ndarray], alpha: float = ALPHA) -> AuditResult:
    """Events fixed in advance: ``events0[e]`` / ``events1[e]`` are boolean arrays (one entry per run on
    D / D').  Every event is tried in both directions with a Bonferroni-corrected level, so the
    reported maximum is still a (1 − 2α) lower bound."""
    m = 2 * len(events0)
    a = alpha / m
    best = None
    for e in events0:
        e0, e1 = np.asarray(events0[e], dtype=bool), np.asarray(events1[e], dtype=bool)
        k0, k1, n0, n1 = int(e0.sum()), int(e1.sum()), e0.size, e1.size
        for direction, counts in (("D'>D", (k1, n1, k0, n0)), ("D>D'", (k0, n0, k1, n1))):
            b = eps_lower_bound(*counts, delta=delta, alpha=a)
            if best is None or b > best[0]:
                best = (b, f"{e} [{direction}]", counts)
    b, desc, counts = best
    return _record(AuditResult(name, epsilon, delta, b, desc, counts, _point(*counts),
                               {"bonferroni_events": m}))
