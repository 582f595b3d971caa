"""User-level privacy: contribution bounding and the plan calibrated for one privacy unit.

* The bounding rule keeps exactly what the public bounds allow (first ℓ of a tick, first L of a run;
  tick means: one mean per tick for the first L ticks), resets at a run change, and reads only the
  unit's own records: a unit's kept rows are the same whatever other units send (a bounder with a
  rule over the whole tick is caught).
* Per-unit participation on adversarial units, measured at the engine's input and at the sparse
  vectors' arrivals: all records in one tick (one leaf, one ring), spread over many ticks, ℓ per tick,
  across an epoch change, across runs — never more than the plan's ``unit_points_*``.
* Dropped records stay ⊥ in their ticks: no other record changes tick.
* The plan: every sensitivity is L times the one-record plan's (the stream counter's under
  replace_one also ×2 in ℓ1, ×√2 in ℓ2), pure scales exactly so, Gaussian ones by one common factor
  (the basic-sum total); the ledger recomputed independently (with the unit's sensitivities) for two
  configurations with units; the plan, its table and the release say what the unit is.
* Without privacy ids nothing changes: same plan dict (no unit key), same config dict; and L = 1 with
  one record per id releases exactly what record level releases under add_remove with pure ε.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import dpstream.sparse_vector as svt_mod
from dpstream import DPStreamClusterer, EngineConfig
from dpstream.contributions import ContributionBounder
from dpstream.privacy import PrivacyPlan
from dpstream.runs import RunSequence
from test_ledger import check_budget, mechanisms

pytestmark = pytest.mark.filterwarnings("ignore::dpstream.noise.UnsafeSeedWarning")

L = 4


def _cfg(**kw):
    base = dict(n_clusters=2, dim=2, radius=10.0, epsilon=1.0, delta=1e-6, horizon_ticks=16, max_contributions=L)
    base.update(kw)
    return EngineConfig(**base)


def _run_bounder(b, ticks_ids):
    out = []
    for t, ids in enumerate(ticks_ids):
        X = np.c_[np.asarray(ids, float), np.arange(len(ids), dtype=float) + 1000 * t]
        out.append(b.bound(X, ids))
    return out


# -- the rule ---------------------------------------------------------------------------------------

def test_records_first_per_tick_then_first_in_run():
    b = ContributionBounder(_cfg(max_contributions_per_tick=2))
    ticks = [[7, 7, 7, 8, 7], [7, 8, 8, 8], [7, 7], [8]]
    kept = _run_bounder(b, ticks)
    # unit 7: tick 1 keeps its first 2 (rows 0, 1), tick 2 its 1, tick 3 the 4th of the run only
    # unit 8: tick 1 row 3, tick 2 its first 2, tick 4 its 4th
    assert [k[:, 1].tolist() for k in kept] == [[0, 1, 3], [1000, 1001, 1002], [2000], [3000]]
    assert b.n_dropped == 4 and b.counts == {7: 4, 8: 4}


def test_records_bounds_reset_at_a_run_change():
    b = ContributionBounder(_cfg(horizon_ticks=2))
    kept = _run_bounder(b, [[1] * 6, [1] * 6, [1] * 6, [1] * 6])
    assert [len(k) for k in kept] == [L, 0, L, 0]


def test_tick_mean_one_point_per_tick_at_the_first_row():
    cfg = _cfg(contribution="tick_mean", radius=3.0)
    b = ContributionBounder(cfg)
    X = np.array([[1.0, 0.0], [0.0, 0.0], [3.0, 2.0], [5.0, 0.0]])  # unit "a": rows 0, 2, 3 (row 3 clipped to 3)
    out = b.bound(X, ["a", "b", "a", "a"])
    np.testing.assert_allclose(out[0], (np.array([1.0, 0.0]) + np.array([3.0, 2.0]) * min(1, 3 / np.hypot(3, 2))
                                        + np.array([3.0, 0.0])) / 3)
    np.testing.assert_allclose(out[1], [0.0, 0.0])
    assert b.n_clipped == 2 and b.n_dropped == 2
    for _ in range(L + 2):
        out = b.bound(np.ones((3, 2)), ["a", "a", "b"])
    assert out.shape == (0, 2) and b.counts == {"a": L, "b": L}


def test_any_hashable_ids_and_missing_ids_refused():
    b = ContributionBounder(_cfg())
    assert len(b.bound(np.zeros((3, 2)), [("x", 1), ("x", 1), "y"])) == 3
    with pytest.raises(ValueError, match="missing"):
        b.bound(np.zeros((2, 2)), ["a", None])
    with pytest.raises(ValueError, match="one id per row"):
        b.bound(np.zeros((2, 2)), ["a"])
    with pytest.raises(ValueError, match="hashable"):
        b.bound(np.zeros((1, 2)), [["a"]])


class _GlobalTickCap(ContributionBounder):
    """BROKEN: keeps the tick's first L·ℓ/2 rows whoever sends them (a rule over other units)."""

    def _records(self, X, codes, prior, u):
        keep = np.arange(len(codes)) < 2 * L
        return X[keep], np.minimum(prior + np.bincount(codes[keep], minlength=u), self.L)


def _kept_of_unit_alone_and_in_crowd(cls, seed):
    rng = np.random.default_rng(seed)
    ticks = [rng.integers(0, 6, size=rng.integers(0, 12)).tolist() for _ in range(8)]
    crowd = _run_bounder(cls(_cfg(max_contributions_per_tick=2)), ticks)
    alone = _run_bounder(cls(_cfg(max_contributions_per_tick=2)), [[i for i in t if i == 0] for t in ticks])
    # sequence numbers are positions in the full tick: map the alone run's back to them
    back = [np.flatnonzero(np.asarray(t) == 0) + 1000 * k for k, t in enumerate(ticks)]
    got_alone = [back[k][a[:, 1].astype(int) - 1000 * k].tolist() for k, a in enumerate(alone)]
    got_crowd = [c[c[:, 0] == 0][:, 1].astype(int).tolist() for c in crowd]
    return got_alone, got_crowd


@pytest.mark.parametrize("seed", range(5))
def test_a_units_kept_rows_do_not_depend_on_other_units(seed):
    alone, crowd = _kept_of_unit_alone_and_in_crowd(ContributionBounder, seed)
    assert alone == crowd


def test_the_independence_check_catches_a_rule_over_the_whole_tick():
    assert any(a != c for a, c in (_kept_of_unit_alone_and_in_crowd(_GlobalTickCap, s) for s in range(5)))


# -- participation of one unit, at the engine ------------------------------------------------------

U = 0.123456789  # the unit's coordinate: its points are recognisable wherever they go


def _spy(monkeypatch):
    log = {"engine": [], "svt": []}
    orig_step = RunSequence.step
    orig_svt = svt_mod.LevelZeroAboveThreshold.test  # every query of the ring and part sparse vectors

    def step(self, points, bicriteria_update=None, last=False):
        log["engine"].append(np.array(points, copy=True))
        return orig_step(self, points, bicriteria_update, last=last)

    def svt_test(self, tick, arrivals, raise_by=None):
        log["svt"].append((self.key, tick, np.array(arrivals, copy=True)))
        return orig_svt(self, tick, arrivals, raise_by)

    monkeypatch.setattr(RunSequence, "step", step)
    monkeypatch.setattr(svt_mod.LevelZeroAboveThreshold, "test", svt_test)
    return log


def _background(n_ticks, per_tick=60, seed=3):
    rng = np.random.default_rng(seed)
    X = [rng.normal(scale=0.7, size=(per_tick, 2)) + [3.0, -2.0] for _ in range(n_ticks)]
    ids = [[f"bg{t}-{i}" for i in range(per_tick)] for t in range(n_ticks)]
    return X, ids


def _fit(monkeypatch, unit_rows_per_tick, **kw):
    """partial_fit a background of one-record units plus unit "u" with ``unit_rows_per_tick[t]`` records at
    (U, U) in tick t; returns (u's points per engine tick, the SVT arrivals log, the model)."""
    n = len(unit_rows_per_tick)
    X, ids = _background(n)
    log = _spy(monkeypatch)
    m = DPStreamClusterer(2, epsilon=kw.pop("epsilon", 1.0), radius=10.0, random_state=5,
                          horizon_ticks=kw.pop("horizon_ticks", n),
                          max_contributions=L, **kw)
    for t, c in enumerate(unit_rows_per_tick):
        # the unit's rows interleaved at the front, middle and back of the tick
        Xt = np.insert(X[t], np.linspace(0, len(X[t]), c).astype(int), U, axis=0) if c else X[t]
        it = list(ids[t])
        for p in np.linspace(0, len(X[t]), c).astype(int)[::-1]:
            it.insert(p, "u")
        m.partial_fit(Xt, privacy_ids=it)
    per_tick = [int(np.all(np.abs(e - U) < 1e-12, axis=1).sum()) for e in log["engine"]]
    return per_tick, log, m


def test_all_records_in_one_tick_one_leaf_one_ring(monkeypatch):
    per_tick, log, m = _fit(monkeypatch, [0, 3 * L, 0, 0])
    assert per_tick == [0, L, 0, 0]
    assert m.privacy_plan_.participation["unit_points_per_run_at_most"] == L
    # the L points are one ring's arrivals at tick 2 (and one part's, of the part sparse vector): the
    # instances the plan calibrates for L points
    _, log0, _ = _fit(monkeypatch, [0, 0, 0, 0])  # (its spy wraps the first: ``log`` gets its queries too)
    assert [(k, t) for k, t, _ in log["svt"][:len(log0["svt"])]] == [(k, t) for k, t, _ in log0["svt"]]
    for family in ("svt", "part-svt"):
        d = np.concatenate([a - b for (k, t, a), (_, _, b) in zip(log["svt"], log0["svt"])
                            if t == 2 and k[0] == family])
        assert d.max() == L and np.abs(d).sum() == L, family


def test_records_spread_over_many_ticks(monkeypatch):
    per_tick, _, _ = _fit(monkeypatch, [1] * (3 * L))
    assert per_tick == [1] * L + [0] * (2 * L)


def test_per_tick_bound(monkeypatch):
    per_tick, _, m = _fit(monkeypatch, [3] * (2 * L), max_contributions_per_tick=2)
    assert per_tick == [2, 2] + [0] * (2 * L - 2)
    assert m.privacy_plan_.participation["unit_points_per_tick_at_most"] == 2


def test_across_an_epoch_change(monkeypatch):
    # epochs change whenever F grows: the unit's records on both sides of the changes still total L
    per_tick, log, m = _fit(monkeypatch, [2] * (2 * L), epoch_schedule="every", ring_centers="bicriteria",
                            bicriteria=True, epsilon=200.0, grid_levels=4)
    assert m.release_.epoch >= 2
    assert per_tick == [2, 2] + [0] * (2 * L - 2)
    assert len({k for k, _, _ in log["svt"]}) >= 3  # several epochs' sparse vectors saw the stream


def test_across_runs_each_run_has_its_own_bound(monkeypatch):
    per_tick, _, m = _fit(monkeypatch, [2 * L] * 4, horizon_ticks=2, runs=None)
    assert per_tick == [L, 0, L, 0]
    assert "m-fold composition" in m.privacy_plan_.to_dict()["across_runs"]


def test_tick_mean_one_point_per_tick_for_L_ticks(monkeypatch):
    per_tick, _, _ = _fit(monkeypatch, [5] * (2 * L), contribution="tick_mean")
    assert per_tick == [1] * L + [0] * L


def test_dropped_records_leave_every_other_record_in_its_tick(monkeypatch):
    rng = np.random.default_rng(1)
    X = rng.normal(size=(500, 2))
    ids = np.where(rng.random(500) < 0.5, "heavy", np.arange(500).astype(str))
    log = _spy(monkeypatch)
    DPStreamClusterer(2, epsilon=1.0, radius=10.0, random_state=5, tick_size=50, max_contributions=L
                      ).fit(X, privacy_ids=ids)
    heavy = {tuple(r) for r in X[ids == "heavy"]}
    assert len(log["engine"]) == 10
    for t, e in enumerate(log["engine"]):
        mine = X[t * 50:(t + 1) * 50][ids[t * 50:(t + 1) * 50] != "heavy"]
        # every one-record unit's row reaches the engine in its own tick, in order
        np.testing.assert_array_equal(np.array([r for r in e if tuple(r) not in heavy]).reshape(-1, 2), mine)
    assert sum(sum(tuple(r) in heavy for r in e) for e in log["engine"]) == L


# -- the plan --------------------------------------------------------------------------------------

@pytest.mark.parametrize("kw", [dict(), dict(delta=0.0), dict(neighbouring="add_remove"),
                                dict(bicriteria=True, grid_levels=3, delta=0.0, neighbouring="add_remove"),
                                dict(bicriteria=True, grid_levels=3, semicoreset="lloyd")])
def test_every_noise_scale_is_L_times_the_record_plans(kw):
    """Every sensitivity is L times the one-record one (the stream counter's under replace_one also
    ×2 in ℓ1, ×√2 in ℓ2: a replaced unit's points may move to other ticks). Pure plans: every scale
    exactly that multiple, the same total. Gaussian plans: the unit's total is the basic sum (not the
    PLD), so the merged Gaussian is somewhat noisier: one common factor c ≥ 1 over every line."""
    unit = PrivacyPlan.build(_cfg(**kw))
    rec = PrivacyPlan.build(_cfg(max_contributions=None, **kw))
    cfg = _cfg(**kw)
    two = 2.0 if cfg.replace else 1.0
    cnt = two if unit.mode == "pure" else math.sqrt(two)
    ratios = []
    for name, f in (("svt_scale", 1.0), ("a_count_scale", 1.0), ("a_sum_scale", 1.0), ("count_scale", cnt)):
        if getattr(rec, name):
            ratios.append(getattr(unit, name) / (L * f * getattr(rec, name)))
    for lv in rec.bic_scale:
        ratios.append(unit.bic_scale[lv] / (L * rec.bic_scale[lv]))
    for a, b in zip(unit.lines, rec.lines):
        f = cnt if a.component.startswith("stream counter") else 1.0
        assert a.sensitivity == pytest.approx(L * f * b.sensitivity, rel=1e-12), a.component
    if unit.mode == "pure":
        assert ratios == pytest.approx([1.0] * len(ratios), rel=1e-12)
        assert unit.total_epsilon == pytest.approx(rec.total_epsilon, rel=1e-12)
    else:
        assert ratios[0] == pytest.approx(1.0, rel=1e-12)  # the sparse vector is pure: exactly ×L
        c = ratios[1]
        assert 1.0 <= c < 1.1 and ratios[1:] == pytest.approx([c] * (len(ratios) - 1), rel=1e-9)
        assert unit.total_epsilon == unit.basic_epsilon <= cfg.epsilon * (1 + 1e-9)


@pytest.mark.parametrize("kw", [dict(max_contributions=16, delta=1e-6, neighbouring="replace_one"),
                                dict(max_contributions=3, contribution="tick_mean", delta=0.0,
                                     neighbouring="add_remove", bicriteria=True, grid_levels=3)])
def test_ledger_recomputed_for_a_unit(kw):
    """The one-record sensitivities derived independently (tests/test_ledger.py), times the unit's
    bound, against the noise the mechanisms are built with: within (ε, δ); and the plan's record-level
    sensitivities alone would not be (the check can fail)."""
    cfg = _cfg(**kw)
    plan = PrivacyPlan.build(cfg)
    Lu = cfg.max_contributions
    unit_mechs = [(k, noise, Lu * sens, c) for k, noise, sens, c in mechanisms(cfg, plan)]
    if cfg.count_counter and cfg.replace:  # the stream counter (last): a replaced unit's points change tick
        k, noise, sens, c = unit_mechs[-1]
        unit_mechs[-1] = (k, noise, sens * (math.sqrt(2.0) if k == "gaussian" else 2.0), c)
    if cfg.delta > 0:  # what a unit plan claims: the merged Gaussian's ε at δ plus the pure part
        from dpstream.privacy import gaussian_epsilon
        z = sum(c * (s_ / n) ** 2 for k, n, s_, c in unit_mechs if k == "gaussian") ** -0.5
        eps_svt = sum(2 * s_svt / b for k, b, s_svt, _ in unit_mechs if k == "svt")  # the ring and part ones
        assert gaussian_epsilon(z, cfg.delta) + eps_svt <= cfg.epsilon * (1 + 1e-6)

    import test_ledger
    orig = test_ledger.mechanisms
    try:
        test_ledger.mechanisms = lambda c, p: unit_mechs
        eps = check_budget(plan, cfg)
    finally:
        test_ledger.mechanisms = orig
    assert eps <= cfg.epsilon * (1 + 1e-3)
    # the same mechanisms with twice the unit (a bound the plan did not calibrate for) exceed ε
    try:
        test_ledger.mechanisms = lambda c, p: [(k, n, 2 * s, c_) for k, n, s, c_ in unit_mechs]
        with pytest.raises(AssertionError):
            check_budget(plan, cfg)
    finally:
        test_ledger.mechanisms = orig


def test_plan_table_and_release_name_the_unit():
    m = DPStreamClusterer(2, epsilon=1.0, radius=10.0, random_state=5, max_contributions=16,
                          max_contributions_per_tick=4, privacy_unit="user_id")
    m.partial_fit(np.zeros((3, 2)), privacy_ids=["a", "a", "b"])
    d = m.release_.to_dict()["privacy"]
    assert d["unit"]["statement"] == ("unit of privacy: one user_id, at most 16 records per run, at most 4 per "
                                      "tick (the rest are dropped)")
    table = m.privacy_plan_.table()
    assert "-DP for one user_id" in table and "Unit of privacy: one user_id, at most 16 records per run" in table
    assert "sensitivity per unit" in table
    tm = EngineConfig(n_clusters=2, dim=2, radius=1.0, epsilon=1.0, max_contributions=8, contribution="tick_mean",
                      privacy_unit="device")
    assert PrivacyPlan.build(tm).to_dict()["unit"]["statement"].startswith(
        "unit of privacy: one device, one mean point per tick, at most 8 ticks per run")


# -- without ids: record level unchanged ------------------------------------------------------------

def test_record_level_dicts_have_no_unit():
    cfg = _cfg(max_contributions=None)
    assert "unit" not in PrivacyPlan.build(cfg).to_dict()
    assert not {"max_contributions", "contribution", "privacy_unit"} & set(cfg.to_dict())
    assert "max_contributions" in _cfg().to_dict()


def test_one_record_per_id_with_L_1_releases_what_record_level_releases():
    """Under add_remove with pure ε a unit of one record is a record: the same plan, the same releases.
    (Under replace_one it is not: a replaced unit's kept record may lie in another tick, which the
    stream counter pays for, and Gaussian unit plans report the basic sum.)"""
    rng = np.random.default_rng(2)
    X = rng.normal(size=(3000, 2))
    kw = dict(epsilon=1.0, delta=0.0, radius=5.0, random_state=9, horizon_ticks=10, neighbouring="add_remove")
    a, b = DPStreamClusterer(3, **kw), DPStreamClusterer(3, max_contributions=1, **kw)
    for s in range(0, 3000, 300):
        a.partial_fit(X[s:s + 300])
        b.partial_fit(X[s:s + 300], privacy_ids=np.arange(s, s + 300))
    np.testing.assert_array_equal(a.cluster_centers_, b.cluster_centers_)
    np.testing.assert_array_equal(a.release_.coreset_weights, b.release_.coreset_weights)


def test_ids_and_bounds_go_together():
    with pytest.raises(ValueError, match="max_contributions"):
        DPStreamClusterer(2, radius=1.0).partial_fit(np.zeros((2, 2)), privacy_ids=[1, 2])
    with pytest.raises(ValueError, match="pass privacy_ids"):
        DPStreamClusterer(2, radius=1.0, max_contributions=2).partial_fit(np.zeros((2, 2)))
    with pytest.raises(ValueError, match="max_contributions_per_tick"):
        EngineConfig(n_clusters=2, dim=2, radius=1.0, epsilon=1.0, max_contributions=2, max_contributions_per_tick=3)
    with pytest.raises(ValueError, match="need max_contributions"):
        EngineConfig(n_clusters=2, dim=2, radius=1.0, epsilon=1.0, contribution="tick_mean")


# -- a person with a quarter of all records -----------------------------------------------------------

def test_a_person_with_a_quarter_of_the_records_gets_no_center_of_their_own():
    """GPS-like users (benchmarks' generator), one person with 25% of the records at two places 30 km from
    every city: record level puts a center there (the check can fail); user level (L = 4 tick means) does not."""
    import os
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))
    from dpbench.datasets.units import gps_users
    X, ids, meta = gps_users(40_000, 400, heavy=0.25)

    def nearest(**kw):
        m = DPStreamClusterer(8, epsilon=4.0, radius=meta["radius"], random_state=0, tick_size=1000, **kw)
        m.fit(X, privacy_ids=ids if kw else None)
        return np.min(np.linalg.norm(m.cluster_centers_[:, None] - meta["heavy_places"][None], axis=2))

    assert nearest() < 3.0
    assert nearest(max_contributions=4, contribution="tick_mean") > 30.0
