"""privacy_plan.md (``plan_table``): a reader sees why the per-line ε do not add up to the total."""
from __future__ import annotations

import re

import pytest

from dpstream.params import EngineConfig
from dpstream.privacy import PrivacyPlan, gaussian_epsilon, plan_table


def _plan(**kw):
    base = dict(n_clusters=5, dim=2, radius=15.0, epsilon=1.0, delta=1e-6, horizon_ticks=200)
    base.update(kw)
    return PrivacyPlan.build(EngineConfig(**base))


def _rows(text):
    rows = [ln for ln in text.splitlines() if ln.startswith("| ") and not ln.startswith("| component")]
    return [[c.strip() for c in ln.strip("|").split("|")] for ln in rows]


def test_gaussian_plan_names_its_columns_and_shows_the_exact_composition():
    plan = _plan()
    d = plan.to_dict()
    text = plan_table(d)
    assert "ε if this line ran alone" in text and "share of the merged Gaussian" in text
    assert "does not add up to the total" in text and "PLD" in text and "basic sum" in text
    rows = _rows(text)
    assert len(rows) == len(d["lines"])
    alone = [float(r[6]) for r in rows]
    assert sum(alone) > d["total_epsilon"] * 1.5  # the standalone column is indeed not additive
    shares = [float(r[5].rstrip("%")) for r in rows if r[5].endswith("%")]
    assert sum(shares) == pytest.approx(100.0, abs=0.6)  # the shares are
    # the merged Gaussian the footnote names reproduces the basic sum
    z = float(re.search(r"noise multiplier z = ([0-9.e+-]+)", text).group(1))
    pure = sum(ln["epsilon"] for ln in d["lines"] if ln["mechanism"] != "gaussian")
    assert gaussian_epsilon(z, d["delta"]) + pure == pytest.approx(d["basic_epsilon"], rel=2e-3)


def test_pure_plan_says_its_column_adds_up():
    plan = _plan(delta=0.0)
    text = plan.table()
    assert "adds up to the total" in text
    assert sum(float(r[6]) for r in _rows(text)) == pytest.approx(plan.total_epsilon, rel=1e-3)


@pytest.mark.parametrize("rel", ["replace_one", "add_remove"])
def test_the_plan_names_both_relations_and_says_why_they_differ(rel):
    """A release says neighbouring: replace_one beside accountant_relation: ADD_OR_REMOVE_ONE; its
    ``relations`` field says what each means and why the two names differ, in words."""
    d = _plan(neighbouring=rel).to_dict()
    assert d["neighbouring"] == rel and d["accountant_relation"] == "ADD_OR_REMOVE_ONE"
    note = d["relations"]
    assert f"The data's relation is {rel}" in note and "ADD_OR_REMOVE_ONE" in note
    assert "the sensitivities are ours" in note
    if rel == "replace_one":
        assert "position" in note and "2" in note and "4" in note  # the factors of the replace-one sensitivities
    else:
        assert "present" in note
    assert note in plan_table(d)


def test_the_plan_is_frozen():
    """Every mechanism reads the plan it was built with: a calibration cannot be changed after the fact."""
    import dataclasses

    import pytest

    from dpstream.params import EngineConfig
    from dpstream.privacy import PrivacyPlan

    plan = PrivacyPlan.build(EngineConfig(n_clusters=3, dim=2, radius=5.0, epsilon=1.0))
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.svt_scale = 0.0
    assert dataclasses.replace(plan, svt_scale=1.0).svt_scale == 1.0 and plan.svt_scale != 1.0
