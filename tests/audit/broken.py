"""Deliberately broken variants for the statistical audits (tests only).

Each function monkeypatches one natural-but-wrong implementation into dpstream, in the style of
``tests/broken_variants.py``, so an audit can show that it catches it: its ε̂ lower bound must then
exceed the configured ε.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

import dpstream.bicriteria as bic_mod
import dpstream.semicoresets as sc_mod
import dpstream.sparse_vector as svt_mod
from dpstream.params import EngineConfig
from dpstream.privacy import PrivacyPlan


def plan_scales_halved(monkeypatch, *which: str, factor: float = 0.5):
    """The plan calibrates some noise scales ``factor``× too small (default: halved, a lost factor 2).
    ``which`` ⊆ {"bic", "svt", "part_svt", "a_count", "a_sum", "a_cell_count", "a_cell_sum", "a_lloyd_count", "a_lloyd_sum"}."""
    orig = PrivacyPlan.build.__func__

    def build(cls, cfg, test_seed=False):
        plan = orig(cls, cfg, test_seed)
        changed = {}
        if "bic" in which:
            changed["bic_scale"] = {lv: s * factor for lv, s in plan.bic_scale.items()}
        if "svt" in which:
            changed["svt_scale"] = plan.svt_scale * factor
        if "part_svt" in which:
            changed["part_svt_scale"] = plan.part_svt_scale * factor
        if "a_count" in which:
            changed["a_count_scale"] = plan.a_count_scale * factor
        if "a_sum" in which:
            changed["a_sum_scale"] = plan.a_sum_scale * factor
        for name in ("a_cell_count", "a_cell_sum", "a_lloyd_count", "a_lloyd_sum"):
            if name in which:
                changed[name + "_scale"] = getattr(plan, name + "_scale") * factor
        return dataclasses.replace(plan, **changed)  # the plan is frozen

    monkeypatch.setattr(PrivacyPlan, "build", classmethod(build))


def counter_levels_off_by_one(monkeypatch):
    """The plan counts ⌊log2 T⌋ p-sums per record instead of ⌊log2 T⌋ + 1 (the mechanism itself still
    builds ⌊log2 T⌋ + 1 levels), i.e. the horizon off by one."""
    monkeypatch.setattr(EngineConfig, "counter_levels",
                        property(lambda self: max(1, int(math.floor(math.log2(self.horizon_ticks))))))


def svt_tested_only_on_arrivals(monkeypatch):
    """An instance is tested only at ticks where its ring received points (P13): its ⊤
    at an otherwise empty tick then reveals the record."""
    orig = svt_mod.LevelZeroAboveThreshold.step

    def step(self, tick, arrivals):
        arrivals = np.asarray(arrivals, dtype=np.int64)
        count, thr = self.count.copy(), self.noisy_threshold.copy()
        fired = orig(self, tick, arrivals)
        idle = arrivals == 0
        fired = fired & ~idle
        # untested instances keep their state (no restart), only their count grows
        self.count = np.where(idle, count + arrivals, self.count)
        self.noisy_threshold = np.where(idle, thr, self.noisy_threshold)
        return fired

    monkeypatch.setattr(svt_mod.LevelZeroAboveThreshold, "step", step)


def _level_decodes(monkeypatch, transform):
    """BicriteriaLevel decodes ``transform(level, update, released)`` instead of its released counters
    (the released totals stay those of the counters)."""

    def step_update(self, u):
        rel = self.counter.step(u)
        true = bic_mod._level_report(self.cfg, self.grids, rel, self.q, self.lv, self.tau_min)
        seen = bic_mod._level_report(self.cfg, self.grids, transform(self, u, rel), self.q, self.lv, self.tau_min)
        return bic_mod.LevelReport(self.q, self.lv, seen.found, true.totals)

    monkeypatch.setattr(bic_mod.BicriteriaLevel, "step_update", step_update)


def _blocks(level, arr):
    cfg = level.cfg
    return np.asarray(arr).reshape(cfg.n_reps, cfg.buckets, 1 + cfg.id_bits(level.lv))


def hh_inspects_only_buckets_with_data(monkeypatch):
    """The natural-but-wrong decoder: only buckets that received points this tick are decoded (the
    module docstring's warning): a report at an otherwise empty tick reveals the record."""

    def transform(level, u, rel):
        out = _blocks(level, rel).copy()
        got = np.zeros(out.shape[:2], dtype=bool) if u is None else _blocks(level, u)[:, :, 0] > 0
        out[:, :, 0] = np.where(got, out[:, :, 0], 0)  # N̂ = 0 never passes
        return out.ravel()

    _level_decodes(monkeypatch, transform)


def hh_prunes_on_exact_count(monkeypatch):
    """The exact count leaked: the decoder prunes on (and divides by) the exact bucket size N instead
    of the released N̂."""

    def transform(level, u, rel):
        out = _blocks(level, rel).copy()
        out[:, :, 0] = _blocks(level, level.counter.exact)[:, :, 0]
        return out.ravel()

    _level_decodes(monkeypatch, transform)


def snap_releases_exact_count(monkeypatch):
    """The exact count leaked: the snap semicoreset uses its noisy count only to decide whether a part
    is released, and releases the part's exact count as its weight."""

    def run(self, block, key):
        keys, cnt, _ = block.compact()
        n_parts = block.n_parts
        counts = np.zeros(n_parts, dtype=np.int64)
        counts[keys] = cnt
        w = self.noisy_counts(key + ("count",), counts, np.arange(n_parts))
        w = np.where(w >= self.count_tail(n_parts), counts, 0)
        return sc_mod.WeightedSet(np.zeros((n_parts, self.cfg.dim)), w, np.arange(n_parts))

    monkeypatch.setattr(sc_mod.SnapSemicoreset, "run", run)


def plan_ignores_replace_one(monkeypatch):
    """The plan calibrates for add/remove although the run's relation is replace-one (the factor 2 of
    P1 lost): every parallel-composed Laplace part gets half its scale."""
    orig = PrivacyPlan.build.__func__

    def build(cls, cfg, test_seed=False):
        plan = orig(cls, cfg.with_(neighbouring="add_remove"), test_seed)
        return dataclasses.replace(plan, neighbouring=cfg.neighbouring)

    monkeypatch.setattr(PrivacyPlan, "build", classmethod(build))



from broken_variants import ring_centers_from_raw_points  # noqa: E402,F401  (shared with tests/test_review_findings.py)
