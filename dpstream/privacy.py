"""The privacy ledger: one ``PrivacyPlan`` every mechanism asks (P9, P12 in docs/privacy.md).

The user's total (ε, δ) is split across the three parts of Lemma 1:

* BicriteriaDPCenters (Alg. 2/3, Lemma 5): Q·(L+1)·R vector-valued binary
  mechanisms, one per (tree, level, repetition); parallel over buckets.
* LevelZero-AboveThreshold (Alg. 5, Lemma 11): one sparse-vector instance per
  record (parallel over rings and epochs).
* Black box A (Lemma 14): one block semicoreset per record (parallel over
  blocks, rings, epochs and center parts).
* The stream counter (when its weight is > 0): one binary mechanism over the
  per-tick number of points, whose noisy prefix sum is the release's DP count
  estimate (P14). A record is in ≤ L_T of its p-sums under either
  relation (replacing a record keeps its tick; replacing it by ⊥ removes one).
  A unit is not: replaced, its kept points can move to other ticks, so with a
  unit under replace-one the counter pays the two-partition factor (ℓ1 ×2, ℓ2 ×√2).

Sensitivities are ours, for the neighbouring relation in use (P1): under
replace-one every parallel-composed pure part costs 2ε
(Laplace scale ×2), Gaussian histograms ℓ2² ×2, and Gaussian sums inside one
partition ℓ2² ×4.  dp-accounting is only ever asked with
``ADD_OR_REMOVE_ONE`` and fed these sensitivities.

With δ > 0 the counters and A use Gaussian noise (rounded to integers), the
sparse vector is a pure-ε part, and everything is composed in one privacy-loss
distribution (P12); the reported ε is min(PLD ε, basic sum).
With δ = 0 everything is pure ε with discrete Laplace noise and the total is
the basic sum.

With a privacy unit (``EngineConfig.max_contributions`` = L) every sensitivity above is L times the
one-record one, and the stream counter's under replace-one also ×2 in ℓ1 (×√2 in ℓ2): a replaced unit's
kept points may lie in other ticks than the replaced one's, which a replaced record's never do
(:mod:`dpstream.contributions` gives the argument). A unit plan's total is the basic sum (the merged
Gaussian's ε at δ plus the pure parts), never the PLD: a unit's points reach Gaussian parts and
sparse-vector segments adaptively, which fully adaptive composition covers for Gaussians alone and
pointwise for the pure parts, but no result we cite covers for the mix in one PLD. So with δ > 0 a unit
plan's Gaussian noise is a little more than L times the record-level one (pure plans: exactly L times,
the counter's ×2L under replace-one). The plan then carries ``unit`` (what is protected).
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple


from .noise import SECRET_SEED, TEST_SEED
from .cells import locate_dims
from .ledger_lines import (LedgerLine, cell_lines_gaussian, cell_lines_pure, gaussian_epsilon,
                           lloyd_lines_gaussian, lloyd_lines_pure, tree_lines_gaussian, tree_lines_pure)
from .params import EngineConfig
from .plan_text import RUNS_NOTE, UNIT_RUNS_NOTE, plan_table, relations_note, unit_statement
from . import rules

# dp_accounting (and the scipy.stats it loads) is imported by the functions that account, not with the
# module: it takes longer than the rest of dpstream together, and reading releases never needs it.
# ``ACCOUNTANT_RELATION`` (dp_accounting's ADD_OR_REMOVE_ONE) is resolved on first use by the module
# ``__getattr__`` below; :func:`_relation` reads it, so a test can replace it with ``setattr``.
_VDI = 1e-3  # PLD value discretisation interval (pessimistic estimates: upper bounds)


def __getattr__(name):
    if name == "ACCOUNTANT_RELATION":
        import dp_accounting

        globals()[name] = dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _relation():
    r = globals().get("ACCOUNTANT_RELATION")
    return __getattr__("ACCOUNTANT_RELATION") if r is None else r


def gaussian_pld(noise_multiplier: float, vdi: float = _VDI):
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

    return pld_lib.from_gaussian_mechanism(
        standard_deviation=noise_multiplier, sensitivity=1.0, value_discretization_interval=vdi,
        neighboring_relation=_relation())


def pure_pld(epsilon: float, vdi: float = _VDI):
    from dp_accounting.pld import common as pld_common
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

    return pld_lib.from_privacy_parameters(pld_common.DifferentialPrivacyParameters(epsilon, 0.0),
                                           value_discretization_interval=vdi)


def pld_discretisation(epsilon: float) -> float:
    """PLD value discretisation interval for a budget ε: 0.1% of ε within [1e-4, 1e-2].

    Pessimistic PLDs are upper bounds at any interval; scaling it with ε keeps small budgets
    precise and large ones cheap."""
    return min(1e-2, max(1e-4, 1e-3 * epsilon))


_PLD_MAX_EPS = 30.0  # beyond this the PLD grids overflow; the basic sum is used instead


@functools.lru_cache(maxsize=256)
def calibrate_gaussian_with_pure(epsilon: float, delta: float, eps_pure: float) -> float:
    """Smallest noise multiplier z with PLD(N(z) ∘ pure(eps_pure)) ≤ (ε, δ).

    For ε > 30 (runs that are private in name only) the Gaussian is calibrated
    alone at (ε − eps_pure, δ) with the analytic Gaussian mechanism, which is the
    basic composition bound.
    """
    import dp_accounting

    if epsilon > _PLD_MAX_EPS:
        return dp_accounting.get_sigma_gaussian(epsilon - eps_pure, delta)
    budget = epsilon * (1 - 1e-6)

    def eps_of(z):
        p = gaussian_pld(z, pld_discretisation(epsilon))
        if eps_pure > 0:
            p = p.compose(pure_pld(eps_pure, pld_discretisation(epsilon)))
        return p.get_epsilon_for_delta(delta)

    # bracket by the analytic Gaussian: alone at (ε, δ) it needs at least lo (composing with a pure
    # mechanism only adds loss, and the pessimistic PLD only overstates it); at (ε − eps_pure, δ) basic
    # composition already suffices, up to the PLD's discretisation, which the widening loop absorbs.
    # A tight bracket halves the PLD evaluations (the plan is built on every engine start)
    try:
        lo = dp_accounting.get_sigma_gaussian(epsilon, delta) * (1 - 1e-3)
        hi = dp_accounting.get_sigma_gaussian(max(epsilon - eps_pure, epsilon * 1e-3), delta)
    except (ValueError, ArithmeticError):
        lo, hi = 1e-3, 1.0
    lo, hi = max(lo, 1e-9), max(hi, lo * (1 + 1e-3))
    while eps_of(hi) > budget:
        lo, hi = hi, hi * 1.25
        if hi > 1e9:
            raise ValueError("cannot calibrate the Gaussian noise: epsilon too small for this delta")
    for _ in range(60):
        mid = math.sqrt(lo * hi)
        if eps_of(mid) > budget:
            lo = mid
        else:
            hi = mid
        if hi / lo < 1 + 1e-4:
            break
    return hi


def calibrate_gaussian_basic(epsilon: float, delta: float, eps_pure: float) -> float:
    """Smallest noise multiplier z whose Gaussian alone is (ε − eps_pure, δ) (exact profile): basic
    composition with the pure part, what a unit plan claims (the module docstring says why)."""
    target = epsilon - eps_pure
    if target <= 0:
        raise ValueError("the pure parts take the whole budget")
    lo, hi = 1e-6, 1.0
    while gaussian_epsilon(hi, delta) > target:
        lo, hi = hi, hi * 2
        if hi > 1e9:
            raise ValueError("cannot calibrate the Gaussian noise: epsilon too small for this delta")
    for _ in range(100):
        mid = math.sqrt(lo * hi)
        if gaussian_epsilon(mid, delta) > target:
            lo = mid
        else:
            hi = mid
        if hi / lo < 1 + 1e-9:
            break
    return hi


def _counter_note(L_T: int, rel_cnt: float) -> str:
    note = f"binary mechanism over the points per tick, L_T={L_T}"
    if rel_cnt != 1.0:
        note += "; a replaced unit's points may move to other ticks: two partitions of the p-sums"
    return note


@dataclass(frozen=True)
class PrivacyPlan:
    """The calibrated noise of every mechanism, derived from one EngineConfig. Frozen: every mechanism
    reads the plan it was built with, and a changed copy is a new plan (``dataclasses.replace``)."""

    epsilon: float
    delta: float
    neighbouring: str
    mode: str  # "gaussian+pld" | "pure"
    lines: List[LedgerLine]
    bic_scale: Dict[int, float]  # level -> per-node noise (σ or b) of the bicriteria counters
    bic_mechanism: str
    svt_scale: float  # Laplace scale of the SVT threshold and query noise
    a_count_scale: float
    a_sum_scale: float  # in normalised units (ball of radius 1)
    a_mechanism: str
    a_count_mult: int
    a_sum_mult: int
    pld_epsilon: float
    basic_epsilon: float
    test_seed: bool = False  # an integer random_state: the plan says its noise is not private
    participation: Dict[str, int] = field(default_factory=dict)
    count_scale: float = 0.0  # per-node noise of the stream counter (0: none)
    count_mechanism: str = "gaussian"
    runs: object = 1  # consecutive runs of T ticks (None: unbounded); each is calibrated as above
    horizon_ticks: int = 0
    unit: Optional[dict] = None  # the privacy unit and its bounds (None: one record is the unit)
    a_cell_count_scale: float = 0.0  # A's cells (``tree_cells``; 0: off): one count and one sum per record
    a_cell_sum_scale: float = 0.0
    a_lloyd_count_scale: float = 0.0  # the cells' Lloyd steps (``cells_lloyd_steps``; 0: off): per step and record
    a_lloyd_sum_scale: float = 0.0
    # ``cells_gate``: the plain tree's lines on a block the gate keeps from the cells (A's whole budget, as
    # without cells); a record's one A call runs one mode, so these are not composed with the cells' lines
    gated_lines: List[LedgerLine] = field(default_factory=list)
    part_svt_scale: float = 0.0  # the part sparse vector's Laplace scale (``part_fire``; 0: off)
    # the sparse vector's scale with the whole ε_svt (``svt_scale`` without ``part_fire``), which M's floor reads
    # (rules.block_size); None: a plan pickled before it, whose svt_scale is that scale
    svt_floor_scale: Optional[float] = None

    @property
    def total_epsilon(self) -> float:
        if self.unit is not None:  # a unit's adaptive mix of Gaussian and pure parts: the basic sum only
            return self.basic_epsilon
        return min(self.pld_epsilon, self.basic_epsilon)

    # -- construction -------------------------------------------------------
    @classmethod
    def build(cls, cfg: EngineConfig, test_seed: bool = False) -> "PrivacyPlan":
        """The plan of ``cfg``; a split that leaves some mechanism a budget too small to represent (its
        noise scale would be infinite) is refused here, before any noise is drawn."""
        try:
            plan = cls._build(cfg, test_seed)
        except (ZeroDivisionError, OverflowError):
            plan = None
        if plan is None or not all(math.isfinite(ln.noise) for ln in plan.lines):
            raise ValueError("the privacy split leaves a mechanism a budget too small to represent: raise "
                             "epsilon, count_share or the smallest privacy_split weight")
        return plan

    @classmethod
    def _build(cls, cfg: EngineConfig, test_seed: bool) -> "PrivacyPlan":
        rel1 = 2.0 if cfg.replace else 1.0  # ℓ1 factor / ℓ2² factor across two partitions
        w_bic, w_svt, w_a, w_cnt = cfg.privacy_split
        if not cfg.bicriteria:
            w_bic = 0.0
        if not cfg.count_counter:
            w_cnt = 0.0
        wsum = w_bic + w_svt + w_a + w_cnt
        w_bic, w_svt, w_a, w_cnt = w_bic / wsum, w_svt / wsum, w_a / wsum, w_cnt / wsum
        levels = range(cfg.grid_levels)
        n_inst = cfg.n_trees * cfg.grid_levels * cfg.n_reps if cfg.bicriteria else 0
        L_T = cfg.counter_levels
        m_c, m_s = a_multiplicities(cfg)
        d = cfg.dim
        # the unit's bound: a bounded unit is at most g points of the run (:mod:`dpstream.contributions`
        # says why scaling every sensitivity of the one-record plan by g covers it); 1 for one record
        g = cfg.unit_bound
        # the stream counter: a replaced record keeps its tick, so one record is in ≤ L_T p-sums under
        # either relation; a replaced unit is not: its kept points can move to other ticks (its earlier
        # slots ⊥ lets later records in under the bound), −L on tick a's p-sums and +L on tick b's,
        # two partitions of the counter's nodes, like any other mechanism's buckets
        rel_cnt = rel1 if cfg.max_contributions is not None else 1  # int: record-level ledgers unchanged
        unit_basic = cfg.max_contributions is not None
        if math.isinf(cfg.epsilon):
            return cls._non_private(cfg, n_inst, m_c, m_s, test_seed)
        eps_svt = w_svt * cfg.epsilon
        # part_fire (P23): the part sparse vector takes rules.PART_SVT_SHARE of the sparse vector's ε, the ring one
        # keeps the rest; the pure part of the plan (ε_svt) is the same, so no other line moves
        eps_ring = eps_svt * (1.0 - rules.PART_SVT_SHARE) if cfg.part_fire else eps_svt
        svt_scale = 2.0 * rel1 * g / eps_ring  # monotone SVT, Lyu–Su–Li: Lap(2Δ/ε) threshold and query
        svt_floor_scale = 2.0 * rel1 * g / eps_svt
        lines: List[LedgerLine] = []
        lines.append(LedgerLine("sparse vector (Alg. 5)", "svt", svt_scale, rel1 * g, 1, eps_ring,
                                "one instance per record; threshold and query noise Lap(2Δ/ε_svt)" if not cfg.part_fire
                                else "one instance per record; threshold and query noise Lap(2Δ/ε_ring), ε_ring: "
                                     "ε_svt less the part sparse vector's share"))
        part_svt_scale = 0.0
        if cfg.part_fire:
            eps_part = eps_svt - eps_ring
            part_svt_scale = 2.0 * rel1 * g / eps_part  # the same Δ as the ring one's: one (ring, part) per record
            lines.append(LedgerLine("part sparse vector", "svt", part_svt_scale, rel1 * g, 1, eps_part,
                                    "one (ring, part) instance per record; its ⊤ releases the ring's block; "
                                    "threshold and query noise Lap(2Δ/ε_part)"))
        # sum sensitivity per record: ℓ2 (normalised ball) 1 add/remove, 2 replace (same part)
        s2 = 2.0 if cfg.replace else 1.0
        if cfg.delta > 0:
            mode = "gaussian+pld"
            z = (calibrate_gaussian_basic(cfg.epsilon, cfg.delta, eps_svt) if unit_basic
                 else calibrate_gaussian_with_pure(cfg.epsilon, cfg.delta, eps_svt))

            def gaussian_parts(z):
                out: List[LedgerLine] = []
                inv2 = 1.0 / z**2
                g_share = w_bic + w_a + w_cnt
                inv_bic = inv2 * w_bic / g_share
                inv_a = inv2 * w_a / g_share
                count_scale = 0.0
                if w_cnt > 0:
                    sens_n = math.sqrt(L_T * rel_cnt) * g
                    count_scale = sens_n * math.sqrt(g_share / (inv2 * w_cnt))
                    out.append(LedgerLine("stream counter (count estimate)", "gaussian", count_scale, sens_n, 1,
                                          gaussian_epsilon(count_scale / sens_n, cfg.delta / 4),
                                          _counter_note(L_T, rel_cnt)))
                bic_scale = {}
                if n_inst:
                    z_inst = math.sqrt(n_inst / inv_bic)
                    for lv in levels:
                        sens = math.sqrt(L_T * (1 + cfg.id_bits(lv)) * rel1) * g
                        bic_scale[lv] = z_inst * sens
                        out.append(LedgerLine(
                            f"bicriteria counters, level {lv}", "gaussian", bic_scale[lv], sens,
                            cfg.n_trees * cfg.n_reps,
                            gaussian_epsilon(z_inst / math.sqrt(cfg.n_trees * cfg.n_reps), cfg.delta / 2),
                            f"binary mechanism over (count, {cfg.id_bits(lv)} id bits), L_T={L_T}; "
                            f"one (tree, rep) instance per record"))
                z_a = math.sqrt(1.0 / inv_a)
                phi = cfg.count_share if m_s > 0 else 1.0
                f, f_l = cfg.tree_cells, cfg.cells_lloyd_share
                rest = 1 - f - f_l
                # a block cells_gate keeps from the cells: the plain tree at A's whole multiplier, as without cells
                gated = tree_lines_gaussian(z_a, *_plain_tree_split(cfg), rel1, s2, g, cfg.delta,
                                            suffix=GATED) if cfg.cells_gate else []
                if f:  # the tree keeps 1 − f − f_l of A's Σ(Δ/σ)², the Lloyd steps f_l, the cells f, each φ : 1 − φ
                    z_a /= math.sqrt(rest)
                tree = tree_lines_gaussian(z_a, m_c, m_s, phi, rel1, s2, g, cfg.delta)
                out.extend(tree)
                a_count_scale, a_sum_scale = tree[0].noise, tree[1].noise if m_s > 0 else 0.0
                if f_l:
                    out.extend(lloyd_lines_gaussian(z_a * math.sqrt(rest / f_l), phi, rel1, s2, g, cfg.delta,
                                                    cfg.cells_lloyd_steps))
                if f:  # the cells' own count : sum split when cells_count_share says one
                    out.extend(cell_lines_gaussian(z_a * math.sqrt(rest / f), cfg.cells_count_share or phi, rel1, s2,
                                                   g, cfg.delta))
                return out, bic_scale, a_count_scale, a_sum_scale, count_scale, gated

            # The lines are discretised one by one in the reported PLD, which can land a hair above
            # the joint calibration: inflate the Gaussian noise until the reported total fits.
            for _ in range(200):
                gauss, bic_scale, a_count_scale, a_sum_scale, count_scale, gated = gaussian_parts(z)
                if cfg.epsilon > _PLD_MAX_EPS:
                    pld_eps = basic = cfg.epsilon
                    break
                basic = gaussian_epsilon(z, cfg.delta) + eps_svt
                pld_eps = _pld_epsilon(gauss, eps_svt, cfg.delta, cfg.epsilon)
                if (basic if unit_basic else min(pld_eps, basic)) <= cfg.epsilon:
                    break
                z *= 1.001
            else:
                raise ValueError("could not calibrate the privacy plan within the budget")
            lines.extend(gauss)
            a_mech = bic_mech = "gaussian"
        else:
            mode = "pure"
            eps_bic = w_bic * cfg.epsilon
            bic_scale = {}
            if n_inst:
                eps_inst = eps_bic / n_inst
                for lv in levels:
                    sens = L_T * (1 + cfg.id_bits(lv)) * rel1 * g
                    bic_scale[lv] = sens / eps_inst
                    lines.append(LedgerLine(f"bicriteria counters, level {lv}", "discrete_laplace", bic_scale[lv],
                                            sens, cfg.n_trees * cfg.n_reps, eps_inst * cfg.n_trees * cfg.n_reps,
                                            f"binary mechanism over (count, {cfg.id_bits(lv)} id bits), L_T={L_T}"))
            count_scale = 0.0
            if w_cnt > 0:
                eps_cnt = w_cnt * cfg.epsilon
                count_scale = L_T * rel_cnt * g / eps_cnt
                lines.append(LedgerLine("stream counter (count estimate)", "discrete_laplace", count_scale,
                                        L_T * rel_cnt * g, 1, eps_cnt, _counter_note(L_T, rel_cnt)))
            eps_a = w_a * cfg.epsilon
            phi = cfg.count_share if m_s > 0 else 1.0
            # a gated block's plain tree: A's whole ε, its sums d-dimensional (no projection without cells)
            gated = (tree_lines_pure(eps_a, *_plain_tree_split(cfg), rel1, s2, g, d, suffix=GATED)
                     if cfg.cells_gate else [])
            eps_cells = cfg.tree_cells * eps_a  # the cells' share of A's ε (0: off), split φ : 1 − φ
            eps_lloyd = cfg.cells_lloyd_share * eps_a  # the cells' Lloyd steps' share (0: off)
            eps_a -= eps_cells
            if eps_lloyd:
                eps_a -= eps_lloyd
            # the tree's and the Lloyd steps' sums are p-dimensional when the cells locate in a projection
            d_loc = locate_dims(cfg) or d
            tree = tree_lines_pure(eps_a, m_c, m_s, phi, rel1, s2, g, d_loc)
            lines.extend(tree)
            a_count_scale, a_sum_scale = tree[0].noise, tree[1].noise if m_s > 0 else 0.0
            if eps_lloyd:
                lines.extend(lloyd_lines_pure(eps_lloyd, phi, rel1, s2, g, d_loc, cfg.cells_lloyd_steps))
            if eps_cells:  # the cells' own count : sum split when cells_count_share gives one
                lines.extend(cell_lines_pure(eps_cells, cfg.cells_count_share or phi, rel1, s2, g, d))
            basic = sum(ln.epsilon for ln in lines)
            pld_eps = basic
            a_mech = bic_mech = "discrete_laplace"
        participation = {
            "stream_counter_instances": 1 if w_cnt > 0 else 0,
            "bicriteria_counter_instances": n_inst,
            "sparse_vector_instances": 1,
            "semicoreset_calls_at_most": 1,
        }
        if cfg.part_fire:
            participation["part_sparse_vector_instances"] = 1
        if cfg.max_contributions is not None:
            participation.update(_unit_participation(cfg))
        return cls(epsilon=cfg.epsilon, delta=cfg.delta, neighbouring=cfg.neighbouring, mode=mode, lines=lines,
                   bic_scale=bic_scale, bic_mechanism=bic_mech, svt_scale=svt_scale, part_svt_scale=part_svt_scale,
                   svt_floor_scale=svt_floor_scale,
                   a_count_scale=a_count_scale, a_sum_scale=a_sum_scale, a_mechanism=a_mech,
                   a_count_mult=m_c, a_sum_mult=m_s, pld_epsilon=pld_eps, basic_epsilon=basic,
                   test_seed=bool(test_seed), participation=participation, count_scale=count_scale,
                   count_mechanism=bic_mech, runs=cfg.runs, horizon_ticks=cfg.horizon_ticks,
                   unit=_unit(cfg), a_cell_count_scale=_line_noise(lines, "semicoreset A cell counts"),
                   a_cell_sum_scale=_line_noise(lines, "semicoreset A cell sums"),
                   a_lloyd_count_scale=_line_noise(lines, "semicoreset A lloyd counts"),
                   a_lloyd_sum_scale=_line_noise(lines, "semicoreset A lloyd sums"), gated_lines=gated)

    @classmethod
    def _non_private(cls, cfg, n_inst, m_c, m_s, test_seed):
        """ε = ∞: every noise scale is 0. For benchmarks' non-private limit only."""
        lines = [LedgerLine("NO PRIVACY (epsilon = inf)", "none", 0.0, 1.0, 1, math.inf,
                            "every noise scale is zero")]
        return cls(epsilon=math.inf, delta=cfg.delta, neighbouring=cfg.neighbouring, mode="non-private",
                   lines=lines, bic_scale={lv: 0.0 for lv in range(cfg.grid_levels)}, bic_mechanism="gaussian",
                   svt_scale=0.0, a_count_scale=0.0, a_sum_scale=0.0, a_mechanism="gaussian", a_count_mult=m_c,
                   a_sum_mult=m_s, pld_epsilon=math.inf, basic_epsilon=math.inf, test_seed=bool(test_seed),
                   participation={"stream_counter_instances": int(cfg.count_counter),
                                  "bicriteria_counter_instances": n_inst, "sparse_vector_instances": 1,
                                  "semicoreset_calls_at_most": 1, **(_unit_participation(cfg) if cfg.max_contributions
                                                                     is not None else {})},
                   count_mechanism="gaussian", runs=cfg.runs, horizon_ticks=cfg.horizon_ticks, unit=_unit(cfg))

    # -- presentation -------------------------------------------------------
    def to_dict(self) -> dict:
        d = {
            "epsilon": self.epsilon, "delta": self.delta, "neighbouring": self.neighbouring, "mode": self.mode,
            "total_epsilon": self.total_epsilon, "pld_epsilon": self.pld_epsilon,
            "basic_epsilon": self.basic_epsilon, "accountant_relation": _relation().name,
            "relations": relations_note(self.neighbouring, None if self.unit is None else self.unit["field"]),
            "seed": TEST_SEED if self.test_seed else SECRET_SEED, "participation": dict(self.participation),
            "horizon_ticks": self.horizon_ticks, "runs": self.runs,
            "across_runs": RUNS_NOTE,
            "lines": [dict(component=ln.component, mechanism=ln.mechanism, noise=ln.noise,
                           sensitivity=ln.sensitivity, count=ln.count, epsilon=ln.epsilon, note=ln.note)
                      for ln in self.lines],
        }
        if self.gated_lines:  # cells_gate: the other mode of A (off: the same dict as before the option)
            d["gated_lines"] = [dict(component=ln.component, mechanism=ln.mechanism, noise=ln.noise,
                                     sensitivity=ln.sensitivity, count=ln.count, epsilon=ln.epsilon, note=ln.note)
                                for ln in self.gated_lines]
        if self.unit is not None:  # record level: the same dict (and release bytes) as before units
            d["unit"] = dict(self.unit)
            d["across_runs"] = UNIT_RUNS_NOTE
        return d

    def table(self) -> str:
        return plan_table(self.to_dict())

    def __str__(self) -> str:
        return self.table()


def joint_noise_multiplier(gauss_lines) -> float:
    """Gaussian mechanisms compose exactly into one: 1/z² = Σ count·(Δ/σ)²."""
    inv = sum(ln.count * (ln.sensitivity / ln.noise) ** 2 for ln in gauss_lines)
    return math.inf if inv == 0 else 1.0 / math.sqrt(inv)


def _pld_epsilon(gauss_lines, eps_svt: float, delta: float, epsilon: float) -> float:
    vdi = pld_discretisation(epsilon)
    return gaussian_pld(joint_noise_multiplier(gauss_lines), vdi).compose(
        pure_pld(eps_svt, vdi)).get_epsilon_for_delta(delta)


def _line_noise(lines, component: str) -> float:
    return next((ln.noise for ln in lines if ln.component == component), 0.0)


GATED = " (gated block: plain tree)"  # the gated lines' components: A's count and sum lines, this appended


def _plain_tree_split(cfg: EngineConfig) -> Tuple[int, int, float]:
    """(counts, sums, φ) per record of the plain tree a gated block runs (``cfg.gated_tree()``), as the plan
    without cells has them (P22)."""
    plain = cfg.gated_tree()
    m_c, m_s = a_multiplicities(plain)
    return m_c, m_s, plain.count_share if m_s > 0 else 1.0


def a_multiplicities(cfg: EngineConfig) -> Tuple[int, int]:
    """(noisy counts, noisy sums) one record enters inside its one A call."""
    if cfg.semicoreset == "tree":
        return cfg.tree_depth + 1, 1
    if cfg.semicoreset == "lloyd":
        return cfg.lloyd_iters + 1, cfg.lloyd_iters
    return 1, 0


def _unit(cfg: EngineConfig) -> Optional[dict]:
    if cfg.max_contributions is None:
        return None
    return {"field": cfg.privacy_unit, "contribution": cfg.contribution,
            "max_contributions": cfg.max_contributions, "max_contributions_per_tick": cfg.per_tick_bound,
            "statement": unit_statement(cfg.privacy_unit, cfg.contribution, cfg.max_contributions,
                                        cfg.per_tick_bound)}


def _unit_participation(cfg: EngineConfig) -> dict:
    return {"unit_points_per_run_at_most": cfg.unit_bound, "unit_points_per_tick_at_most": cfg.per_tick_bound}
