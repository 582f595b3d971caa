"""The ledger's lines (:class:`LedgerLine`), the Gaussian ε one line reports, and the lines of black box A's
parts, which :class:`dpstream.privacy.PrivacyPlan` builds its plan from.

A's tree (or Lloyd, or snap semicoreset) has one pair of lines per mechanism: its lines without cells and
the plain tree's lines on a block ``cells_gate`` keeps from the cells come from the same function, so the
two cannot drift apart; the cells and their Lloyd steps have lines of their own."""
from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class LedgerLine:
    """One mechanism family, composed ``count`` times sequentially per record."""

    component: str
    mechanism: str  # "gaussian" | "discrete_laplace" | "svt"
    noise: float  # σ (gaussian), scale b (discrete laplace / svt laplace)
    sensitivity: float  # ℓ2 (gaussian) or ℓ1 (laplace / svt) for one record, this relation
    count: int
    epsilon: float  # standalone ε of all ``count`` compositions (basic bound, at δ share for gaussian)
    note: str = ""

    @property
    def noise_multiplier(self) -> float:
        return self.noise / self.sensitivity


def _phi(x: float) -> float:
    return 0.5 * math.erfc(-x / math.sqrt(2.0))


def gaussian_epsilon(noise_multiplier: float, delta: float) -> float:
    """ε of the Gaussian mechanism N(0, z²) at δ, from its exact privacy profile (Balle–Wang 2018)."""
    z = float(noise_multiplier)
    if z <= 0:
        return math.inf
    a = 1.0 / (2 * z)

    def delta_of(eps):
        return _phi(a - eps * z) - math.exp(eps) * _phi(-a - eps * z) if eps < 700 else 0.0

    lo, hi = 0.0, 1.0
    while delta_of(hi) > delta:
        lo, hi = hi, hi * 2
        if hi > 1e7:
            return math.inf
    for _ in range(60):
        mid = (lo + hi) / 2
        if delta_of(mid) > delta:
            lo = mid
        else:
            hi = mid
    return hi


def tree_lines_gaussian(z_a: float, m_c: int, m_s: int, phi: float, rel1: float, s2: float, g: float, delta: float,
                        suffix: str = ""):
    """A's Gaussian count and sum lines: per record ``m_c`` counts (Δ² = m_c·rel1·g²) and ``m_s`` sums
    (Δ² = m_s·s2²·g², normalised ball) at noise multiplier ``z_a`` split φ : 1 − φ; no sum line when
    ``m_s`` = 0. ``suffix`` names the mode (the gated block's plain tree)."""
    sens_c = math.sqrt(m_c * rel1) * g
    c_scale = z_a * sens_c / math.sqrt(phi)
    out = [LedgerLine("semicoreset A counts" + suffix, "gaussian", c_scale, sens_c, 1,
                      gaussian_epsilon(c_scale / sens_c, delta / 4), f"{m_c} noisy counts per record")]
    if m_s > 0:
        sens_s = s2 * math.sqrt(m_s) * g
        s_scale = z_a * sens_s / math.sqrt(1 - phi)
        out.append(LedgerLine("semicoreset A sums" + suffix, "gaussian", s_scale, sens_s, 1,
                              gaussian_epsilon(s_scale / sens_s, delta / 4),
                              f"{m_s} noisy sums per record (normalised ball)"))
    return out


def tree_lines_pure(eps_a: float, m_c: int, m_s: int, phi: float, rel1: float, s2: float, g: float, d_sum: int,
                    suffix: str = ""):
    """A's pure count and sum lines: ``m_c`` counts (Δ₁ = m_c·rel1·g) and ``m_s`` sums of dimension ``d_sum``
    (Δ₁ = s2·√d_sum·m_s·g) per record, at ε ``eps_a`` split φ : 1 − φ; no sum line when ``m_s`` = 0."""
    sens_c = m_c * rel1 * g
    out = [LedgerLine("semicoreset A counts" + suffix, "discrete_laplace", sens_c / (phi * eps_a), sens_c, 1,
                      phi * eps_a, f"{m_c} noisy counts per record")]
    if m_s > 0:
        sens_s = s2 * math.sqrt(d_sum) * m_s * g
        out.append(LedgerLine("semicoreset A sums" + suffix, "discrete_laplace", sens_s / ((1 - phi) * eps_a),
                              sens_s, 1, (1 - phi) * eps_a, f"{m_s} noisy sums per record, ℓ1 √d per sum"))
    return out


def cell_lines_gaussian(z_cells: float, phi: float, rel1: float, s2: float, g: float, delta: float):
    """The Gaussian ledger lines of A's cells: one count (Δ² = rel1·g²) and one sum (Δ = s2·g) per
    record, with noise multiplier ``z_cells`` (the cells' share of A's Σ(Δ/σ)²) split φ : 1 − φ."""
    c_scale = z_cells * math.sqrt(rel1) * g / math.sqrt(phi)
    s_scale = z_cells * s2 * g / math.sqrt(1 - phi)
    return [LedgerLine("semicoreset A cell counts", "gaussian", c_scale, math.sqrt(rel1) * g, 1,
                       gaussian_epsilon(c_scale / (math.sqrt(rel1) * g), delta / 4),
                       "1 noisy count per record (its cell)"),
            LedgerLine("semicoreset A cell sums", "gaussian", s_scale, s2 * g, 1,
                       gaussian_epsilon(s_scale / (s2 * g), delta / 4),
                       "1 noisy sum per record (its cell, normalised ball)")]


def cell_lines_pure(eps_cells: float, phi: float, rel1: float, s2: float, g: float, d: int):
    """The pure ledger lines of A's cells: one count (Δ₁ = rel1·g) and one d-dimensional sum per record, at
    the cells' ε split φ : 1 − φ."""
    sens_cc, sens_cs = rel1 * g, s2 * math.sqrt(d) * g
    return [LedgerLine("semicoreset A cell counts", "discrete_laplace", sens_cc / (phi * eps_cells),
                       sens_cc, 1, phi * eps_cells, "1 noisy count per record (its cell)"),
            LedgerLine("semicoreset A cell sums", "discrete_laplace", sens_cs / ((1 - phi) * eps_cells), sens_cs, 1,
                       (1 - phi) * eps_cells, "1 noisy sum per record (its cell), ℓ1 √d")]


def lloyd_lines_gaussian(z_lloyd: float, phi: float, rel1: float, s2: float, g: float, delta: float, steps: int):
    """The Gaussian ledger lines of the cells' Lloyd steps: per record ``steps`` counts (Δ² = steps·rel1·g²)
    and ``steps`` sums (Δ² = steps·s2²·g²), one of each per step, at noise multiplier ``z_lloyd`` (their
    share of A's Σ(Δ/σ)²) split φ : 1 − φ; each line's noise is one step's."""
    sens_c, sens_s = math.sqrt(steps * rel1) * g, s2 * math.sqrt(steps) * g
    c_scale = z_lloyd * sens_c / math.sqrt(phi)
    s_scale = z_lloyd * sens_s / math.sqrt(1 - phi)
    return [LedgerLine("semicoreset A lloyd counts", "gaussian", c_scale, sens_c, 1,
                       gaussian_epsilon(c_scale / sens_c, delta / 4),
                       f"{steps} noisy counts per record (its center's, one per Lloyd step)"),
            LedgerLine("semicoreset A lloyd sums", "gaussian", s_scale, sens_s, 1,
                       gaussian_epsilon(s_scale / sens_s, delta / 4),
                       f"{steps} noisy sums per record (one per Lloyd step, normalised ball)")]


def lloyd_lines_pure(eps_lloyd: float, phi: float, rel1: float, s2: float, g: float, d_loc: int, steps: int):
    """The pure ledger lines of the cells' Lloyd steps: ``steps`` counts and ``steps`` sums of dimension
    ``d_loc`` per record, at their ε split φ : 1 − φ."""
    sens_lc, sens_ls = steps * rel1 * g, s2 * math.sqrt(d_loc) * steps * g
    return [LedgerLine("semicoreset A lloyd counts", "discrete_laplace", sens_lc / (phi * eps_lloyd), sens_lc, 1,
                       phi * eps_lloyd, f"{steps} noisy counts per record (its center's, one per Lloyd step)"),
            LedgerLine("semicoreset A lloyd sums", "discrete_laplace", sens_ls / ((1 - phi) * eps_lloyd), sens_ls, 1,
                       (1 - phi) * eps_lloyd, f"{steps} noisy sums per record (one per Lloyd step), ℓ1 √{d_loc} each")]
