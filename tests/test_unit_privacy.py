"""The unit of privacy end to end: the bounder on the engine's clock, the stream counter's calibration for a
replaced unit, the per-unit wording of the relation, and what a unit plan's total claims."""
from __future__ import annotations

import math

import numpy as np
import pytest

from dpstream import DPStreamClusterer, EngineConfig
from dpstream.contributions import ContributionBounder
from dpstream.privacy import UNIT_RUNS_NOTE, PrivacyPlan, gaussian_epsilon, joint_noise_multiplier, relations_note
from dpstream.runs import RunSequence

U = 0.123456789  # the watched unit's points


# -- the bounder follows the engine's clock -------------------------------------------------------------

def _per_run_points_of_u(monkeypatch, fail_first):
    seen = []
    orig = RunSequence.step

    def spy(self, points, bicriteria_update=None, last=False):
        rel = orig(self, points, bicriteria_update, last=last)  # after the step: a run's first tick rolls the run over
        seen.append((self.run, int(np.all(np.abs(np.asarray(points) - U) < 1e-12, axis=1).sum())))
        return rel

    monkeypatch.setattr(RunSequence, "step", spy)
    L, T = 2, 4
    m = DPStreamClusterer(2, epsilon=1.0, radius=10.0, random_state=5, horizon_ticks=T, runs=None,
                          max_contributions=L)
    X = np.r_[np.full((2, 2), U), np.zeros((5, 2))]
    ids = ["u", "u"] + [f"bg{i}" for i in range(5)]
    m.partial_fit(np.zeros((1, 2)), privacy_ids=["x"])
    if fail_first:
        for bad in (ids[:-1], ids[:-1] + [None]):  # one id short; a missing id
            with pytest.raises(ValueError):
                m.partial_fit(X, privacy_ids=bad)
    for _ in range(2 * T - 1):
        m.partial_fit(X, privacy_ids=ids)
    per_run = {}
    for r, c in seen:
        per_run[r] = per_run.get(r, 0) + c
    return per_run, L, m


@pytest.mark.parametrize("fail_first", [False, True])
def test_a_failed_partial_fit_does_not_move_the_bounds_against_the_engines_runs(monkeypatch, fail_first):
    """Failed calls (bad ids) before the engine's tick: the unit still keeps at most L points per engine run."""
    per_run, L, m = _per_run_points_of_u(monkeypatch, fail_first)
    assert per_run == {0: L, 1: L}
    assert m._bounder.tick == m.runs_.next_global_tick


def test_bound_checks_everything_before_changing_state():
    b = ContributionBounder(EngineConfig(n_clusters=2, dim=2, radius=1.0, epsilon=1.0, horizon_ticks=2,
                                         max_contributions=1))
    b.bound(np.zeros((1, 2)), ["a"])
    before = (b.tick, b.run, dict(b.counts), b.n_dropped)
    for bad in (["a"], ["a", None], None, [["a"], "b"]):
        with pytest.raises(ValueError):
            b.bound(np.zeros((2, 2)), bad)
    assert before == (b.tick, b.run, dict(b.counts), b.n_dropped) == (1, 0, {"a": 1}, 0)
    b.bound(np.zeros((0, 2)), [], tick=2)
    with pytest.raises(ValueError, match="before the open run"):
        b.bound(np.zeros((1, 2)), ["a"], tick=0)
    # the explicit tick decides the run: tick 2 (run 1) reset the bounds, whatever the bounder counted itself
    assert b.run == 1 and b.counts == {} and b.tick == 3


def test_unit_fields_cannot_change_once_the_engine_started():
    m = DPStreamClusterer(2, epsilon=1.0, radius=10.0, random_state=5, horizon_ticks=8)
    m.set_params(max_contributions=3)  # before any data: fine (it is the configuration)
    m.set_params(max_contributions=None)
    m.partial_fit(np.zeros((3, 2)))
    for kw in (dict(max_contributions=2), dict(privacy_unit="user"), dict(contribution="tick_mean")):
        with pytest.raises(ValueError, match="cannot change once the run has started"):
            m.set_params(**kw)
    m.set_params(max_contributions=None, n_clusters=2)  # unchanged values: accepted
    with pytest.raises(ValueError, match="max_contributions"):
        m.partial_fit(np.zeros((2, 2)), privacy_ids=["u", "u"])


# -- the stream counter under replace_one with a unit -----------------------------------------------------

def _counter_nodes(T):
    """The binary mechanism's p-sums a release can use: the level-i block ending at e, for e with exactly i
    trailing zeros (a prefix [1, t] is the sum of the blocks of t's binary expansion)."""
    nodes = []
    for i in range(int(math.floor(math.log2(T))) + 1):
        for e in range(2 ** i, T + 1, 2 ** (i + 1)):
            nodes.append((e - 2 ** i + 1, e))
    return nodes


def _kept_per_tick(cfg, ticks):
    b = ContributionBounder(cfg)
    return np.array([len(b.bound(np.zeros((len(ids), 2)), ids)) for ids in ticks], dtype=float)


def _stream(T, L, a, b, side, ts=6):
    """ts slots per tick; the unit holds L slots at tick a and L at tick b (1-based). D: unit u in all of them
    (it keeps tick a's). D': a unit u' in the same public slots, its tick-a slots ⊥ (absent): it keeps tick
    b's. Every other slot holds a one-record unit, the same on both sides."""
    ticks = []
    for t in range(1, T + 1):
        ids = [f"bg{t}-{j}" for j in range(ts)]
        if t in (a, b):
            if side == 0:
                ids[:L] = ["u"] * L
            elif t == a:
                ids = ids[L:]  # u′'s slots of tick a are ⊥: no rows; no other row changes tick
            else:
                ids[:L] = ["u'"] * L
        ticks.append(ids)
    return ticks


@pytest.mark.parametrize("T", [8, 16])
@pytest.mark.parametrize("delta", [1e-6, 0.0])
def test_a_replaced_units_counter_difference_is_within_the_plans_counter_line(T, delta):
    """D and D′ through the bounder (⊥ slots on D′): the counter's p-sums differ by −L on tick a's nodes and
    +L on tick b's. The worst pair (a, b) over the horizon must be within the plan's counter sensitivity (ℓ2
    with δ > 0, ℓ1 pure); and it exceeds what one record that keeps its tick would need (√L_T·L, L_T·L),
    the calibration before units moved ticks (the check can fail)."""
    L = 3
    cfg = EngineConfig(n_clusters=2, dim=2, radius=1.0, epsilon=1.0, delta=delta, horizon_ticks=T,
                       max_contributions=L)
    line, = [ln for ln in PrivacyPlan.build(cfg).lines if ln.component.startswith("stream counter")]
    nodes = _counter_nodes(T)
    L_T = cfg.counter_levels
    worst = 0.0
    for a in range(1, T + 1):
        for b in range(a + 1, T + 1):
            d = _kept_per_tick(cfg, _stream(T, L, a, b, 0)) - _kept_per_tick(cfg, _stream(T, L, a, b, 1))
            cum = np.r_[0.0, np.cumsum(d)]
            diff = np.array([cum[e] - cum[s - 1] for s, e in nodes])
            worst = max(worst, float(np.linalg.norm(diff, 2 if delta > 0 else 1)))
    assert worst <= line.sensitivity * (1 + 1e-12)
    assert worst > (math.sqrt(L_T) * L if delta > 0 else L_T * L)


def test_record_level_counter_line_is_unchanged():
    for delta in (1e-6, 0.0):
        cfg = EngineConfig(n_clusters=2, dim=2, radius=1.0, epsilon=1.0, delta=delta, horizon_ticks=64)
        line, = [ln for ln in PrivacyPlan.build(cfg).lines if ln.component.startswith("stream counter")]
        assert line.sensitivity == (math.sqrt(7) if delta else 7) and isinstance(line.sensitivity, (int, float))
        assert "two partitions" not in line.note


# -- the relation and the total, per unit ---------------------------------------------------------------

def test_a_unit_plan_states_the_relation_per_unit():
    rep = relations_note("replace_one", "user_id")
    assert "all records of one user_id are replaced, in their public slots, by records of one other user_id" in rep
    assert "or by ⊥" in rep and "position clock" in rep and "any one record" not in rep
    add = relations_note("add_remove", "device")
    assert "all records of one device more" in add and "event-time" in add and "one record more" not in add
    cfg = EngineConfig(n_clusters=2, dim=2, radius=1.0, epsilon=1.0, max_contributions=4, privacy_unit="user_id")
    assert PrivacyPlan.build(cfg).to_dict()["relations"] == rep
    assert relations_note("replace_one") == PrivacyPlan.build(
        EngineConfig(n_clusters=2, dim=2, radius=1.0, epsilon=1.0)).to_dict()["relations"]
    assert "one record at one position" in relations_note("replace_one")


@pytest.mark.parametrize("nb", ["replace_one", "add_remove"])
def test_a_unit_plan_reports_the_basic_sum_not_the_pld(nb):
    """A unit's points reach Gaussian parts and sparse-vector segments adaptively: the plan claims the merged
    Gaussian's ε at δ plus the pure part, recomputed here, and no less; record-level plans keep min(PLD, basic)."""
    kw = dict(n_clusters=8, dim=2, radius=212.0, epsilon=1.0, delta=1e-6, horizon_ticks=1000, neighbouring=nb)
    unit = PrivacyPlan.build(EngineConfig(max_contributions=4, contribution="tick_mean", **kw))
    rec = PrivacyPlan.build(EngineConfig(**kw))
    z = joint_noise_multiplier([ln for ln in unit.lines if ln.mechanism == "gaussian"])
    pure = sum(ln.epsilon for ln in unit.lines if ln.mechanism != "gaussian")
    basic = gaussian_epsilon(z, 1e-6) + pure
    assert unit.total_epsilon == unit.basic_epsilon == pytest.approx(basic, rel=1e-6)
    assert basic <= 1.0 * (1 + 1e-6) and basic > 0.999
    assert unit.pld_epsilon < unit.total_epsilon  # the tighter PLD exists but is not claimed
    assert rec.total_epsilon == min(rec.pld_epsilon, rec.basic_epsilon)
    d = unit.to_dict()
    assert d["total_epsilon"] == unit.basic_epsilon
    assert f"the basic sum of the lines (for one {d['unit']['field']} the PLD composition is not claimed)" in \
        unit.table()
    assert "the smaller of the PLD composition" in rec.table()


def test_unit_runs_wording():
    assert "(m·ε, m·δ) by basic composition over m runs" in UNIT_RUNS_NOTE
    cfg = EngineConfig(n_clusters=2, dim=2, radius=1.0, epsilon=1.0, horizon_ticks=10, runs=None,
                       max_contributions=4, privacy_unit="user_id")
    table = PrivacyPlan.build(cfg).table()
    assert "the guarantee holds for the whole sequence" not in table and UNIT_RUNS_NOTE in table
    rec = PrivacyPlan.build(EngineConfig(n_clusters=2, dim=2, radius=1.0, epsilon=1.0, horizon_ticks=10, runs=None))
    assert "the guarantee holds for the whole sequence" in rec.table()


@pytest.mark.parametrize("delta", [0.0, 1e-6])
def test_the_ledger_recomputation_catches_a_sparse_vector_calibrated_for_add_remove(monkeypatch, delta):
    """The sparse vector's Δ = 2L under replace_one, recomputed independently of the plan (tests/test_ledger.py's
    one-record sensitivities × L): the plan's scale is within ε, half of it (the add_remove calibration, an
    error the sparse vector's own audits cannot show: its loss is loose by more than 2) is not."""
    import dataclasses

    import test_ledger
    cfg = EngineConfig(n_clusters=2, dim=2, radius=1.0, epsilon=1.0, delta=delta, horizon_ticks=16,
                       max_contributions=4, privacy_split=(0.0, 0.5, 0.4, 0.1))
    plan = PrivacyPlan.build(cfg)
    orig = test_ledger.mechanisms

    def unit_mechanisms(c, p):
        out = [(k, noise, 4 * sens, n) for k, noise, sens, n in orig(c, p)]
        k, noise, sens, n = out[-1]  # the stream counter: two partitions for a replaced unit
        out[-1] = (k, noise, sens * (math.sqrt(2.0) if k == "gaussian" else 2.0), n)
        return out

    monkeypatch.setattr(test_ledger, "mechanisms", unit_mechanisms)
    test_ledger.check_budget(plan, cfg)
    half = dataclasses.replace(plan, svt_scale=PrivacyPlan.build(
        cfg.with_(neighbouring="add_remove")).svt_scale)
    assert half.svt_scale == pytest.approx(plan.svt_scale / 2)
    with pytest.raises(AssertionError):
        test_ledger.check_budget(half, cfg)
