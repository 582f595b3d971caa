"""The privacy ledger, recomputed independently (P1, P9, P10, P12).

For a grid of configurations the API accepts, the test derives every per-record
sensitivity from the configuration itself (L_T = ⌊log2 T⌋+1 = T.bit_length(),
B_ℓ = d·b_ℓ with b_ℓ from P10, tree depth D+1 counts, the replace-one
factors of P1, the stream counter's L_T p-sums — the same under both
relations: replacing a record keeps its tick, replacing it by ⊥ removes one),
takes the noise scales the mechanisms are built with (``plan.bic_scale``,
``a_count_scale``, ``a_sum_scale``, ``svt_scale``, ``count_scale``; a test checks
that the instantiated mechanisms really use them), and recomputes the total:

* δ > 0: one PLD built only with ``ADD_OR_REMOVE_ONE``:
  ``from_gaussian_mechanism(σ, sensitivity=Δ)`` per Gaussian mechanism, composed
  ``count`` times, and ``from_privacy_parameters(ε_svt, 0)`` for the SVT; plus an
  exact analytic cross-check (Gaussian parts compose to one Gaussian with
  μ² = Σ count·(Δ/σ)²; the pure part's dominating pair is randomized response),
  which needs no discretisation tolerance;
* δ = 0: the basic sum Σ count·Δ/b, with ε_svt = 2Δ/b for the SVT's Lap(2Δ/ε).

and asserts it is ≤ (ε, δ).  Each check is shown to catch a broken plan.
"""
from __future__ import annotations

import dataclasses

import itertools
import math

import dp_accounting
import numpy as np
import pytest
from dp_accounting.pld import common as pld_common
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from scipy.stats import norm

import dpstream.privacy as privacy_mod
from dpstream import Engine, EngineConfig, rules
from dpstream.params import EngineConfig as _EC
from dpstream.privacy import PrivacyPlan

pytestmark = pytest.mark.filterwarnings("ignore::dpstream.noise.UnsafeSeedWarning")

ADD_REMOVE = dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE
VDI = 1e-3  # value discretisation of the independent PLD at ε = 1 (pessimistic: an upper bound)


def vdi_for(epsilon: float) -> float:
    """0.1% of ε within [1e-4, 1e-2]: the same precision rule as the plan (an accounting parameter)."""
    return min(1e-2, max(1e-4, VDI * epsilon))
PLD_TOL = 1e-3  # relative slack for the PLD's discretisation
EXACT_TOL = 1e-6  # relative slack on δ for the exact analytic bound


# -- sensitivities, derived here from the configuration ------------------------------------

def horizon_levels(T: int) -> int:
    return int(T).bit_length()  # = ⌊log2 T⌋ + 1 for T ≥ 1


def bits_per_coord(cfg, level: int) -> int:
    g = 2.0 * cfg.radius / 2.0 ** level
    values = math.floor((cfg.radius + g) / g) - math.floor(-cfg.radius / g) + 1
    return max(1, math.ceil(math.log2(values)))


def a_multiplicity(cfg):
    """(noisy counts, noisy sums) one record enters in its one A call."""
    if cfg.semicoreset == "tree":
        return cfg.tree_depth + 1, 1
    if cfg.semicoreset == "lloyd":
        return cfg.lloyd_iters + 1, cfg.lloyd_iters
    assert cfg.semicoreset == "snap"
    return 1, 0


def mechanisms(cfg, plan):
    """[(kind, noise, per-draw sensitivity, compositions)] of everything one record touches.

    kind ∈ {"gaussian", "laplace", "svt"}; the sensitivities are derived here from cfg,
    the noises are the scales the mechanisms are built with.
    """
    replace = cfg.neighbouring == "replace_one"
    L_T = horizon_levels(cfg.horizon_ticks)
    out = []
    gauss = cfg.delta > 0
    if cfg.bicriteria:
        for lv in range(cfg.grid_levels):
            B = cfg.dim * bits_per_coord(cfg, lv)
            # one record: (1, bits) in one bucket at ≤ L_T nodes; replace: two buckets
            if gauss:
                sens = math.sqrt(L_T * (1 + B) * (2 if replace else 1))
            else:
                sens = L_T * (1 + B) * (2 if replace else 1)
            out.append(("gaussian" if gauss else "laplace", plan.bic_scale[lv], sens, cfg.n_trees * cfg.n_reps))
    m_c, m_s = a_multiplicity(cfg)
    # counts: one node per level; replace moves the record between two nodes
    if gauss:
        out.append(("gaussian", plan.a_count_scale, math.sqrt(2 if replace else 1), m_c))
        if m_s:  # sums of points in the unit ball; replace: ‖y − y'‖ ≤ 2 in one part
            out.append(("gaussian", plan.a_sum_scale, 2.0 if replace else 1.0, m_s))
    else:
        out.append(("laplace", plan.a_count_scale, 2.0 if replace else 1.0, m_c))
        if m_s:  # ℓ1 of a point of the unit ball is ≤ √d
            out.append(("laplace", plan.a_sum_scale, math.sqrt(cfg.dim) * (2.0 if replace else 1.0), m_s))
    out.append(("svt", plan.svt_scale, 2.0 if replace else 1.0, 1))
    if cfg.part_fire:  # the part sparse vector (P23): the record's one (ring, part) count, the ring one's Δ
        out.append(("svt", plan.part_svt_scale, 2.0 if replace else 1.0, 1))
    if cfg.count_counter:  # the stream counter: one count per tick, in ≤ L_T p-sums
        out.append(("gaussian" if gauss else "laplace", plan.count_scale, math.sqrt(L_T) if gauss else L_T, 1))
    return out


def svt_epsilon(mechs) -> float:
    # monotone SVT: Lap(2Δ/ε) threshold and query noise → ε; the ring one and (part_fire) the part one
    return sum(2.0 * sens / b for kind, b, sens, _ in mechs if kind == "svt")


def independent_pld_epsilon(mechs, delta: float, epsilon: float) -> float:
    """PLD of (all Gaussian parts) ∘ (SVT as a pure-ε part), built with ADD_OR_REMOVE_ONE.

    Gaussian mechanisms compose exactly into one Gaussian with 1/z² = Σ count·(Δ/σ)² (a fact
    about Gaussians, not an approximation); composing their discretised PLDs one by one would
    instead stack each line's pessimistic rounding (≈0.5% of ε at ε = 0.1)."""
    vdi = vdi_for(epsilon)
    pld = pld_lib.from_privacy_parameters(pld_common.DifferentialPrivacyParameters(svt_epsilon(mechs), 0.0),
                                          value_discretization_interval=vdi)
    inv = sum(count * (sens / sigma) ** 2 for kind, sigma, sens, count in mechs if kind == "gaussian")
    p = pld_lib.from_gaussian_mechanism(1.0 / math.sqrt(inv), sensitivity=1.0, value_discretization_interval=vdi,
                                        neighboring_relation=ADD_REMOVE)
    return pld.compose(p).get_epsilon_for_delta(delta)


def exact_delta(mechs, epsilon: float) -> float:
    """δ(ε) of Gaussian(μ) ∘ pure(ε0), exactly: μ² = Σ count·(Δ/σ)²; the pure part is
    dominated by randomized response, so δ(ε) = p·δ_G(ε−ε0) + (1−p)·δ_G(ε+ε0)."""
    mu = math.sqrt(sum(c * (s / sig) ** 2 for k, sig, s, c in mechs if k == "gaussian"))
    e0 = svt_epsilon(mechs)

    def delta_g(x):
        return norm.cdf(-x / mu + mu / 2) - math.exp(x + norm.logcdf(-x / mu - mu / 2))

    p = 1.0 / (1.0 + math.exp(-e0))
    return p * delta_g(epsilon - e0) + (1 - p) * delta_g(epsilon + e0)


def basic_pure_epsilon(mechs) -> float:
    return sum(c * s / b for k, b, s, c in mechs if k == "laplace") + svt_epsilon(mechs)


def check_budget(plan, cfg):
    """Asserts the mechanisms' noise keeps the whole run within (ε, δ); returns the recomputed ε."""
    mechs = mechanisms(cfg, plan)
    if cfg.delta == 0:
        assert all(k != "gaussian" for k, *_ in mechs)
        eps = basic_pure_epsilon(mechs)
        assert eps <= cfg.epsilon * (1 + 1e-9), f"pure plan spends {eps} > ε = {cfg.epsilon}"
        return eps
    eps = independent_pld_epsilon(mechs, cfg.delta, cfg.epsilon)
    assert eps <= cfg.epsilon * (1 + PLD_TOL), f"PLD recomputation: ε = {eps} > {cfg.epsilon} at δ = {cfg.delta}"
    d_exact = exact_delta(mechs, cfg.epsilon)
    assert d_exact <= cfg.delta * (1 + EXACT_TOL), f"exact: δ(ε={cfg.epsilon}) = {d_exact} > {cfg.delta}"
    return eps


def check_report(plan, cfg, eps):
    """The ledger reports what the mechanisms spend, accounted with ADD_OR_REMOVE_ONE."""
    assert privacy_mod.ACCOUNTANT_RELATION == ADD_REMOVE
    if cfg.delta == 0:
        assert plan.mode == "pure" and plan.bic_mechanism == plan.a_mechanism == "discrete_laplace"
        assert plan.total_epsilon == pytest.approx(eps, rel=1e-9)
    else:
        assert plan.mode == "gaussian+pld" and plan.bic_mechanism == plan.a_mechanism == "gaussian"
        assert plan.pld_epsilon == pytest.approx(eps, rel=5e-3, abs=1e-4), (
            f"plan reports PLD ε = {plan.pld_epsilon}, the mechanisms spend {eps}")


def check_ledger(plan, cfg):
    eps = check_budget(plan, cfg)
    check_report(plan, cfg, eps)
    return eps


# -- the configuration grid -----------------------------------------------------------------

def _cfg(**kw):
    base = dict(n_clusters=3, dim=2, radius=5.0, epsilon=1.0, delta=1e-6, horizon_ticks=64, grid_levels=3,
                n_trees=1, n_reps=1, tree_depth=4, lloyd_iters=2, bicriteria=True)
    base.update(kw)
    return EngineConfig(**base)


SEMIS = ("tree", "lloyd", "snap")
GRID = []
for i, (eps, delta, rel) in enumerate(itertools.product((0.1, 1.0, 8.0), (0.0, 1e-6, 1e-3),
                                                        ("replace_one", "add_remove"))):
    if eps == 8.0 and delta == 1e-3:
        continue  # each (ε, δ) at ε = 8 costs ~5-10 s of calibration in PrivacyPlan.build: one is enough
    GRID.append(dict(epsilon=eps, delta=delta, neighbouring=rel, semicoreset=SEMIS[i % 3]))
# splits, shapes, horizons, dimensions (at ε = 1 to keep the number of calibrations small)
GRID += [
    dict(privacy_split=(0.2, 0.2, 0.6), semicoreset="tree"),
    dict(privacy_split=(0.7, 0.05, 0.25), semicoreset="lloyd", neighbouring="add_remove"),
    dict(privacy_split=(0.2, 0.2, 0.6), delta=0.0, semicoreset="snap"),
    dict(n_trees=2, n_reps=3, grid_levels=4, semicoreset="tree"),
    dict(n_trees=3, n_reps=2, grid_levels=2, delta=0.0, semicoreset="lloyd"),
    dict(n_trees=2, n_reps=2, grid_levels=5, dim=3, horizon_ticks=100, neighbouring="add_remove"),
    dict(horizon_ticks=1, semicoreset="snap"),
    dict(horizon_ticks=1000, dim=3, radius=3.7, tree_depth=7, delta=0.0),
    dict(bicriteria=False, semicoreset="tree"),
    dict(count_share=0.8, lloyd_iters=4, semicoreset="lloyd", delta=1e-3),
    # the defaults: no bicriteria, the stream counter, rule-based depth and share
    dict(bicriteria=False, privacy_split=EngineConfig.privacy_split, tree_depth=None),
    dict(bicriteria=False, privacy_split=EngineConfig.privacy_split, tree_depth=None, delta=0.0, dim=20),
    dict(bicriteria=False, privacy_split=(0.0, 0.1, 0.5, 0.4), semicoreset="lloyd", neighbouring="add_remove"),
    dict(bicriteria=True, privacy_split=(0.2, 0.1, 0.6, 0.1), delta=0.0),
    # part_fire (P23): the part sparse vector's line beside the ring one's
    dict(bicriteria=False, privacy_split=EngineConfig.privacy_split, tree_depth=None, part_fire=3.0),
    dict(bicriteria=False, privacy_split=EngineConfig.privacy_split, tree_depth=None, part_fire=3.0, delta=0.0),
    dict(part_fire=2.0, neighbouring="add_remove", delta=1e-3),
]


def _id(c):
    return ",".join(f"{k}={v}" for k, v in c.items())


@pytest.mark.parametrize("over", GRID, ids=[_id(c) for c in GRID])
def test_ledger_within_budget(over):
    cfg = _cfg(**over)
    plan = PrivacyPlan.build(cfg)
    check_ledger(plan, cfg)
    assert plan.neighbouring == cfg.neighbouring


@pytest.mark.parametrize("over", [c for c in GRID if c.get("delta", 1e-6) > 0][:6] + [GRID[-1]],
                         ids=lambda c: _id(c))
def test_reported_total_never_exceeds_target(over):
    """P12: the ledger's total never exceeds the user's (ε, δ).  The number the
    plan *reports* (``total_epsilon``, shown in every release) must not exceed ε either."""
    cfg = _cfg(**over)
    plan = PrivacyPlan.build(cfg)
    assert plan.total_epsilon <= cfg.epsilon * (1 + 1e-9), (
        f"the ledger reports spent ε = {plan.total_epsilon!r} > target ε = {cfg.epsilon!r}")


def test_mechanisms_use_the_plan_scales():
    """The ledger check reads the plan's scales: the instantiated mechanisms must use exactly them."""
    for over in (dict(n_trees=2, n_reps=2, grid_levels=3), dict(delta=0.0, semicoreset="lloyd")):
        cfg = _cfg(**over)
        e = Engine(cfg, bytes(32))
        w = cfg.buckets
        for q, lv, r, off, width in e.bic.blocks:
            assert width == 1 + cfg.dim * bits_per_coord(cfg, lv)
            np.testing.assert_array_equal(e.bic.counter.scale[off:off + w * width], e.plan.bic_scale[lv])
        assert e.bic.counter.mechanism == e.plan.bic_mechanism
        assert e.bic.counter.levels == horizon_levels(cfg.horizon_ticks)
        assert e.mr.svt.scale == e.plan.svt_scale
        assert e.A.plan is e.plan
    for over in (dict(bicriteria=False, privacy_split=(0.0, 0.1, 0.8, 0.1)),
                 dict(bicriteria=False, privacy_split=(0.0, 0.1, 0.8, 0.1), delta=0.0)):
        cfg = _cfg(**over)
        e = Engine(cfg, bytes(32))
        assert e.bic is None and e.counter is not None
        np.testing.assert_array_equal(e.counter.scale, e.plan.count_scale)
        assert e.counter.mechanism == e.plan.count_mechanism == e.plan.a_mechanism
        assert e.counter.levels == horizon_levels(cfg.horizon_ticks)


def test_accountant_relation_is_add_or_remove():
    assert privacy_mod.ACCOUNTANT_RELATION == ADD_REMOVE
    assert PrivacyPlan.build(_cfg()).to_dict()["accountant_relation"] == "ADD_OR_REMOVE_ONE"
    # a REPLACE_ONE accountant doubles a Gaussian event itself (P1): a switch changes the number
    z = 5.0
    eps = {}
    for rel in (ADD_REMOVE, dp_accounting.NeighboringRelation.REPLACE_ONE):
        acc = dp_accounting.pld.PLDAccountant(rel)
        acc.compose(dp_accounting.GaussianDpEvent(z))
        eps[rel] = acc.get_epsilon(1e-6)
    assert eps[dp_accounting.NeighboringRelation.REPLACE_ONE] > 1.5 * eps[ADD_REMOVE]


def test_infinite_epsilon_plan_has_zero_noise():
    cfg = _cfg(epsilon=math.inf)
    plan = PrivacyPlan.build(cfg)
    assert math.isinf(plan.total_epsilon)
    assert plan.svt_scale == 0 and plan.a_count_scale == 0 and plan.a_sum_scale == 0
    assert all(v == 0 for v in plan.bic_scale.values()) and set(plan.bic_scale) == set(range(cfg.grid_levels))
    text = plan.table()
    assert "inf" in text and "NO PRIVACY" in text
    # the engine runs and its counters are exact
    e = Engine(cfg, bytes(32))
    rng = np.random.default_rng(0)
    for _ in range(3):
        e.step(rng.normal(size=(50, 2)))
    np.testing.assert_array_equal(e.bic.counter.release(), e.bic.counter.exact)


def test_table_renders_every_line():
    for over in (dict(), dict(delta=0.0, semicoreset="lloyd")):
        plan = PrivacyPlan.build(_cfg(**over))
        text = plan.table()
        assert text.count("\n| ") >= len(plan.lines)
        for ln in plan.lines:
            assert ln.component in text
        assert str(plan) == text


# -- broken plans: the check must catch each ---------------------------------------------

def _plan_as_add_remove(cfg):
    """Replace-one run calibrated with add/remove sensitivities (P1's missing ×2)."""
    return PrivacyPlan.build(cfg.with_(neighbouring="add_remove"))


def _plan_ignoring_reps(cfg):
    """Budget split over Q·(L+1) instances instead of Q·(L+1)·R (P9)."""
    return PrivacyPlan.build(cfg.with_(n_reps=1))


def _plan_short_horizon(cfg):
    """L_T of a shorter horizon (P3: a counter run past the horizon it was calibrated for)."""
    return PrivacyPlan.build(cfg.with_(horizon_ticks=cfg.horizon_ticks // 2))


def _plan_with_svt_half_noise(cfg):
    """SVT noise Lap(Δ/ε) while ε_svt is charged as for Lap(2Δ/ε)."""
    p = PrivacyPlan.build(cfg)
    return dataclasses.replace(p, svt_scale=p.svt_scale / 2)  # the plan is frozen: a changed copy


def _plan_with_count_half_noise(cfg):
    """The stream counter's node noise halved (its p-sum multiplicity forgotten)."""
    p = PrivacyPlan.build(cfg)
    return dataclasses.replace(p, count_scale=p.count_scale / 2)


def _plan_level0_one_bit(cfg, monkeypatch):
    """b_ℓ = ℓ+1 (the naive formula, P10): level 0 calibrated for 1 bit per coordinate."""
    orig = _EC.cell_bits
    monkeypatch.setattr(_EC, "cell_bits", lambda self, lv: lv + 1 if lv == 0 else orig(self, lv))
    p = PrivacyPlan.build(cfg)
    monkeypatch.undo()
    return p


def _plan_forgetting_the_part_line(cfg):
    """part_fire on, but the ring sparse vector keeps the whole ε_svt and the part one gets the same noise
    (no share of its own: the part sparse vector's line forgotten)."""
    p = PrivacyPlan.build(cfg.with_(part_fire=0.0))
    return dataclasses.replace(p, part_svt_scale=p.svt_scale)


def _plan_with_part_svt_half_noise(cfg):
    """The part sparse vector's noise Lap(Δ/ε) while its ε is charged as for Lap(2Δ/ε)."""
    p = PrivacyPlan.build(cfg)
    return dataclasses.replace(p, part_svt_scale=p.part_svt_scale / 2)


BROKEN_PLANS = {
    "part_line_forgotten": _plan_forgetting_the_part_line,
    "part_svt_half_noise": _plan_with_part_svt_half_noise,
    "add_remove_scales_under_replace": _plan_as_add_remove,
    "ignores_reps": _plan_ignoring_reps,
    "horizon_too_short": _plan_short_horizon,
    "svt_half_noise": _plan_with_svt_half_noise,
    "level0_bits": _plan_level0_one_bit,
    "count_half_noise": _plan_with_count_half_noise,
}


@pytest.mark.parametrize("delta", [0.0, 1e-6])
@pytest.mark.parametrize("name", sorted(BROKEN_PLANS))
def test_ledger_check_catches_broken_plans(name, delta, monkeypatch):
    cfg = _cfg(delta=delta, n_trees=2, n_reps=2, grid_levels=3, horizon_ticks=64,
               privacy_split=(0.45, 0.3, 0.25))
    if name == "count_half_noise":  # the default shape: no bicriteria, a stream counter with a real share
        cfg = _cfg(delta=delta, bicriteria=False, privacy_split=(0.0, 0.2, 0.3, 0.5), horizon_ticks=64)
    if name.startswith("part_"):  # the part sparse vector on, with a share large enough to matter
        cfg = cfg.with_(part_fire=3.0)
    make = BROKEN_PLANS[name]
    plan = make(cfg, monkeypatch) if name == "level0_bits" else make(cfg)
    with pytest.raises(AssertionError, match="spends|recomputation|exact"):
        check_budget(plan, cfg)


def test_ledger_check_catches_a_replace_one_accountant(monkeypatch):
    """If privacy.py built its PLDs with REPLACE_ONE (which doubles the Gaussian itself), the
    plan would report a number that is not what the mechanisms spend."""
    cfg = _cfg(privacy_split=(0.45, 0.3, 0.25))
    privacy_mod.calibrate_gaussian_with_pure.cache_clear()
    monkeypatch.setattr(privacy_mod, "ACCOUNTANT_RELATION", dp_accounting.NeighboringRelation.REPLACE_ONE)
    try:
        plan = PrivacyPlan.build(cfg)
        with pytest.raises(AssertionError):
            check_ledger(plan, cfg)
        monkeypatch.setattr(privacy_mod, "ACCOUNTANT_RELATION", ADD_REMOVE)
        eps = check_budget(plan, cfg)  # over-noised, so within budget ...
        with pytest.raises(AssertionError, match="plan reports"):  # ... but the ledger misreports it
            check_report(plan, cfg, eps)
    finally:
        privacy_mod.calibrate_gaussian_with_pure.cache_clear()


@pytest.mark.parametrize("kw", [dict(count_share=5e-324, delta=0.0),
                                dict(privacy_split=(0.1, 1e-320, 0.8, 0.02), delta=0.0)])
def test_a_budget_share_too_small_to_represent_is_refused_not_divided_by(kw):
    # a positive share that underflows to a zero budget would give an infinite noise scale (or a
    # ZeroDivisionError mid-run); the plan refuses it with a message that says what to raise
    cfg = EngineConfig(n_clusters=2, dim=2, radius=1.0, epsilon=0.05, **kw)
    with pytest.raises(ValueError, match="too small to represent"):
        PrivacyPlan.build(cfg)


@pytest.mark.parametrize("delta", [0.0, 1e-6])
def test_part_fire_takes_its_budget_from_the_sparse_vector_share(delta):
    """P23: with part_fire the ledger has a "part sparse vector" line; it and the ring sparse vector's line
    split the sparse vector's ε (PART_SVT_SHARE), their noise scales follow from their shares, and every
    other line of the plan is the one without the option."""
    off = _cfg(delta=delta, bicriteria=False, privacy_split=EngineConfig.privacy_split, tree_depth=None,
               part_fire=0.0)
    on = off.with_(part_fire=3.0)
    p_off, p_on = PrivacyPlan.build(off), PrivacyPlan.build(on)
    names = [ln.component for ln in p_on.lines]
    assert "part sparse vector" in names and "part sparse vector" not in [ln.component for ln in p_off.lines]
    ring = {ln.component: ln for ln in p_on.lines}["sparse vector (Alg. 5)"]
    part = {ln.component: ln for ln in p_on.lines}["part sparse vector"]
    eps_svt = {ln.component: ln for ln in p_off.lines}["sparse vector (Alg. 5)"].epsilon
    assert ring.epsilon + part.epsilon == pytest.approx(eps_svt, rel=1e-12)
    assert part.epsilon == pytest.approx(rules.PART_SVT_SHARE * eps_svt, rel=1e-12)
    assert p_on.part_svt_scale == part.noise == pytest.approx(2 * part.sensitivity / part.epsilon)
    assert p_on.svt_scale == ring.noise == pytest.approx(2 * ring.sensitivity / ring.epsilon)
    others = lambda p: [ln for ln in p.lines if "sparse vector" not in ln.component]  # noqa: E731
    assert others(p_on) == others(p_off)
    assert p_on.basic_epsilon == pytest.approx(p_off.basic_epsilon, rel=1e-12)
    assert p_on.participation["part_sparse_vector_instances"] == 1
    assert "part_sparse_vector_instances" not in p_off.participation and p_off.part_svt_scale == 0.0
    check_ledger(p_on, on)
    assert "part sparse vector" in p_on.table()
    # the engine's part sparse vector draws at the plan's scale
    e = Engine(on, bytes(32))
    assert e.mr.psvt.scale == p_on.part_svt_scale and e.mr.svt.scale == p_on.svt_scale
