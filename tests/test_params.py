"""EngineConfig in frozen groups (dpstream/params.py, param_groups.py, choices.py): every group frozen and
documented, every string choice a StrEnum member that reads, compares and serialises as its string, and
the flat interface the grouping must not change: the keyword constructor and its messages, ``to_dict``
(the config hash's input, written out below as the former flat dataclass gave it), ``with_`` deriving
rule-filled values again, equality, hash and pickling."""
from __future__ import annotations

import copy
import dataclasses
import inspect
import json
import pickle

import pytest

from dpstream import rules
from dpstream import choices
from dpstream.choices import (Contribution, EpochSchedule, FlushSchedule, Objective, Relation, ReleaseDecayRule,
                              RingCenters, RootTail, Semicoreset)
from dpstream.param_groups import Derived
from dpstream.params import GROUPS, PARAMETERS, EngineConfig

BASE = dict(n_clusters=3, dim=2, radius=1.0, epsilon=1.0)
# the three configurations whose to_dict() is written out below
DEFAULT = BASE
SNAP = dict(n_clusters=4, dim=20, radius=5, epsilon=2, delta=0, horizon_ticks=64, runs=None, window_runs=0,
            neighbouring="add_remove", objective="kmedian", semicoreset="snap", privacy_split=(0.2, 0.1, 0.7),
            n_buckets=32, coreset_size=100, block_size=500.0, bucket_shards=2)
UNIT = dict(n_clusters=2, dim=2, radius=10.0, epsilon=4, horizon_ticks=16, runs=3, center=(1.0, -2.0),
            semicoreset="lloyd", tree_depth=8.0, first_epoch_blocks=1, bicriteria=True,
            privacy_split=(0.2, 0.1, 0.6, 0.1), flush_schedule="dyadic", epoch_schedule="horizon",
            ring_centers="bicriteria", max_contributions=3, max_contributions_per_tick=2, privacy_unit="user")

# to_dict() of the flat dataclass EngineConfig was before its groups, for the three configurations above
# (with the parameters added since at the end):
# keys, key order, values and their types (1 stays int, a 3-weight split becomes 4 floats, rule-filled
# bicriteria / tree_depth / first_epoch_blocks / count_share appear as their values, n_buckets /
# coreset_size / block_size as given, the unit's fields only with a unit)
_REST = {"n_trees": 1, "grid_levels": 6, "n_reps": 1}
# the parameters added after the flat dataclass come last, at their defaults (n_init's default became 10
# with them)
_LATER = {"flush_growth": 0.5, "flush_min_blocks": 0.5, "root_tail": "block", "release_decay_rule": "drift",
          "release_cover_factor": 3.0, "ring_tolerance": 1e-6}
EXPECTED = {
    "default": {
        "n_clusters": 3, "dim": 2, "radius": 1.0, "epsilon": 1.0, "delta": 1e-06, "horizon_ticks": 1024, "runs": 1,
        "window_runs": 1, "neighbouring": "replace_one", "objective": "kmeans", "semicoreset": "tree", "center": None,
        **_REST, "n_buckets": None, "hh_alpha": 0.6, "hh_min_count": 3.0, "bucket_shards": 1, "bicriteria": False,
        "ring_centers": "bicriteria+released", "n_rings": 12, "ring_ratio": 2.0, "block_size": None,
        "block_leaves": 2.0, "epoch_blocks": 0.25, "first_epoch_blocks": 0.25, "ring_center_factor": 1.0,
        "epoch_schedule": "horizon", "flush_schedule": "first", "coreset_size": None, "release_epoch_decay": 0.5,
        "tree_depth": 6, "tree_keep_factor": 3.0, "tree_branch_factor": 2.0, "lloyd_iters": 3, "count_share": 0.5,
        "weight_beta": 0.5, "privacy_split": [0.1, 0.05, 0.83, 0.02], "n_init": 10, "sum_grid_bits": 20, **_LATER},
    "snap": {
        "n_clusters": 4, "dim": 20, "radius": 5.0, "epsilon": 2.0, "delta": 0.0, "horizon_ticks": 64, "runs": None,
        "window_runs": 0, "neighbouring": "add_remove", "objective": "kmedian", "semicoreset": "snap",
        "center": None, **_REST, "n_buckets": 32, "hh_alpha": 0.6, "hh_min_count": 3.0, "bucket_shards": 2,
        "bicriteria": True, "ring_centers": "bicriteria+released", "n_rings": 12, "ring_ratio": 2.0,
        "block_size": 500, "block_leaves": 2.0, "epoch_blocks": 0.25, "first_epoch_blocks": 1.0,
        "ring_center_factor": 1.0, "epoch_schedule": "horizon", "flush_schedule": "first", "coreset_size": 100,
        "release_epoch_decay": 0.5, "tree_depth": 6, "tree_keep_factor": 3.0, "tree_branch_factor": 2.0,
        "lloyd_iters": 3, "count_share": 1.0, "weight_beta": 0.5, "privacy_split": [0.2, 0.1, 0.7, 0.0],
        "n_init": 10, "sum_grid_bits": 20, **_LATER},
    "unit": {
        "n_clusters": 2, "dim": 2, "radius": 10.0, "epsilon": 4.0, "delta": 1e-06, "horizon_ticks": 16, "runs": 3,
        "window_runs": 1, "neighbouring": "replace_one", "objective": "kmeans", "semicoreset": "lloyd",
        "center": (1.0, -2.0), **_REST, "n_buckets": None, "hh_alpha": 0.6, "hh_min_count": 3.0,
        "bucket_shards": 1, "bicriteria": True, "ring_centers": "bicriteria", "n_rings": 12, "ring_ratio": 2.0,
        "block_size": None, "block_leaves": 2.0, "epoch_blocks": 0.25, "first_epoch_blocks": 1,
        "ring_center_factor": 1.0, "epoch_schedule": "horizon", "flush_schedule": "dyadic", "coreset_size": None,
        "release_epoch_decay": 0.5, "tree_depth": 8, "tree_keep_factor": 3.0, "tree_branch_factor": 2.0,
        "lloyd_iters": 3, "count_share": 0.5, "weight_beta": 0.5, "privacy_split": [0.2, 0.1, 0.6, 0.1],
        "n_init": 10, "sum_grid_bits": 20, "max_contributions": 3, "max_contributions_per_tick": 2,
        "contribution": "records", "privacy_unit": "user", **_LATER},
}


@pytest.mark.parametrize("name, kw", [("default", DEFAULT), ("snap", SNAP), ("unit", UNIT)])
def test_to_dict_is_the_former_flat_dict_key_for_key_type_for_type(name, kw):
    d, want = EngineConfig(**kw).to_dict(), EXPECTED[name]
    assert list(d) == list(want)  # the key order json.dumps writes
    assert d == want
    assert {k: type(v) for k, v in d.items()} == {k: type(v) for k, v in want.items()}  # plain str, int vs float
    assert json.dumps(d) == json.dumps(want)


def test_every_group_is_frozen_and_documents_every_attribute():
    cfg = EngineConfig(**UNIT)
    for name, cls in GROUPS + (("derived", Derived),):
        group = getattr(cfg, name)
        assert isinstance(group, cls) and cls.__dataclass_params__.frozen
        for f in dataclasses.fields(cls):
            assert f"\n      {f.name}: " in cls.__doc__, f"{cls.__name__}.{f.name} is not documented"
            with pytest.raises(dataclasses.FrozenInstanceError):
                setattr(group, f.name, getattr(group, f.name))
    for name in ("epsilon", "tree_depth", "budget", "derived"):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(cfg, name, None)


CHOICES = [("neighbouring", Relation, {}), ("objective", Objective, {}), ("semicoreset", Semicoreset, {}),
           ("epoch_schedule", EpochSchedule, {}), ("flush_schedule", FlushSchedule, {}),
           ("ring_centers", RingCenters, {}), ("contribution", Contribution, {"max_contributions": 2}),
           ("root_tail", RootTail, {}), ("release_decay_rule", ReleaseDecayRule, {})]


def test_every_choice_of_the_choices_module_is_round_tripped_below():
    declared = {c for c in vars(choices).values()
                if isinstance(c, type) and issubclass(c, choices.enum.StrEnum) and c.__members__}
    assert declared == {c for _, c, _ in CHOICES}


@pytest.mark.parametrize("param, choice, extra", CHOICES, ids=[c[0] for c in CHOICES])
def test_every_choice_round_trips_as_its_string(param, choice, extra):
    for member in choice:
        for given in (member.value, member):
            cfg = EngineConfig(**BASE, **extra, **{param: given})
            got = getattr(cfg, param)
            assert got is member and got == member.value and hash(got) == hash(member.value)
            assert repr(got) == repr(member.value) and f"{got}" == member.value and choice(member.value) is member
            d = cfg.to_dict()
            assert type(d[param]) is str and d[param] == member.value
            assert json.dumps(d[param]) == json.dumps(got) == json.dumps(member.value)
            back = pickle.loads(pickle.dumps(cfg))
            assert getattr(back, param) is member and back == cfg


def test_with_derives_rule_filled_values_again_and_keeps_given_ones():
    cfg = EngineConfig(**BASE)
    assert cfg.derived.rule_filled == {"bicriteria", "tree_depth", "first_epoch_blocks", "count_share"}
    assert cfg.black_box_a.tree_depth is None and cfg.tree_depth == rules.tree_depth(3, 2) == 6
    d8 = cfg.with_(dim=8)
    assert d8.tree_depth == rules.tree_depth(3, 8) == 12
    d20 = cfg.with_(dim=20)
    assert (d20.first_epoch_blocks, d20.count_share) == (rules.first_epoch_blocks(3, 20), 0.25) == (1.0, 0.25)
    snap = cfg.with_(semicoreset="snap")
    assert snap.bicriteria is True and snap.count_share == 1.0
    fresh = EngineConfig(**{**BASE, "dim": 20})
    assert d20 == fresh and d20.to_dict() == fresh.to_dict() and d20.derived == fresh.derived
    given = EngineConfig(**BASE, tree_depth=6, count_share=0.5, bicriteria=False)
    assert given.derived.rule_filled == {"first_epoch_blocks"}
    kept = given.with_(dim=20, semicoreset="lloyd")
    assert (kept.tree_depth, kept.count_share, kept.bicriteria, kept.first_epoch_blocks) == (6, 0.5, False, 1.0)
    assert given.with_(tree_depth=None, dim=8).tree_depth == 12  # None asks for the rule again


def test_equality_hash_and_pickling_are_those_of_the_effective_values():
    cfg = EngineConfig(**UNIT)
    assert cfg == EngineConfig(**UNIT) and hash(cfg) == hash(EngineConfig(**UNIT))
    for other in (pickle.loads(pickle.dumps(cfg)), copy.deepcopy(cfg), copy.copy(cfg)):
        assert other == cfg and hash(other) == hash(cfg) and other.to_dict() == cfg.to_dict()
        assert other.derived == cfg.derived and other.unit == cfg.unit
    # a rule's value given explicitly: the same run, an equal configuration (as the flat dataclass had it)
    ruled = EngineConfig(**BASE)
    explicit = EngineConfig(**BASE, tree_depth=6, first_epoch_blocks=0.25, count_share=0.5, bicriteria=False)
    assert ruled == explicit and hash(ruled) == hash(explicit) and ruled.given() != explicit.given()
    assert ruled != ruled.with_(epsilon=2.0) and ruled != ruled.with_(n_buckets=12)  # given 12 = 4k, still differs
    assert len({ruled, explicit, ruled.with_(epsilon=2.0)}) == 2


def test_flat_shorthands_read_the_groups():
    cfg = EngineConfig(**UNIT)
    derived = {f.name for f in dataclasses.fields(Derived)}
    for name in PARAMETERS:
        group = next(getattr(cfg, g) for g, cls in GROUPS if name in {f.name for f in dataclasses.fields(cls)})
        want = getattr(cfg.derived, name) if name in derived else getattr(group, name)
        assert getattr(cfg, name) is want, name
    assert (cfg.buckets, cfg.s_b, cfg.z, cfg.unit_bound, cfg.per_tick_bound) == (8, 800, 2, 3, 2)
    assert cfg.given()["count_share"] is None and cfg.to_dict()["count_share"] == 0.5
    # read on the class, a shorthand is the parameter's default, as the flat dataclass's attribute was
    assert EngineConfig.privacy_split == (0.1, 0.05, 0.83, 0.02) and EngineConfig.tree_depth is None
    assert EngineConfig.neighbouring == "replace_one" and EngineConfig.delta == 1e-6
    assert list(inspect.signature(EngineConfig).parameters) == list(PARAMETERS)  # help() lists the keywords


@pytest.mark.parametrize("kw, error, message", [
    (dict(neighbouring="x"), ValueError, "neighbouring must be one of ('replace_one', 'add_remove'), got 'x'"),
    (dict(epoch_schedule="weekly"), ValueError,
     "epoch_schedule must be one of ('horizon', 'doubling', 'every'), got 'weekly'"),
    (dict(contribution="tick_mean"), ValueError,
     "max_contributions_per_tick and contribution need max_contributions (the unit's bound L)"),
    (dict(n_clusters=0, epsilon=-1.0), ValueError, "n_clusters must be an integer >= 1, got 0"),
    (dict(tree_depth=31), ValueError, "tree_depth must be <= 30"),
    (dict(count_share=1.0), ValueError,
     "count_share must be < 1 with the tree and lloyd semicoresets (their sums need a share)"),
    (dict(semicoreset="snap", privacy_split=(0.0, 0.1, 0.9)), ValueError,
     "privacy_split needs a positive bicriteria weight"),
    (dict(bucket_shards=13), ValueError, "bucket_shards must be an integer in [1, n_buckets = 12] (each shard "
                                         "holds at least one heavy-hitter bucket), got 13"),
    (dict(max_contributions=2, max_contributions_per_tick=3), ValueError,
     "max_contributions_per_tick must be an integer in [1, max_contributions = 2], got 3"),
    (dict(bicriteria="yes", first_epoch_blocks=-1), ValueError, "bicriteria must be True, False or None, got 'yes'"),
    (dict(privacy_split=(0.1, 0.0, 0.9)), ValueError, "privacy_split needs a positive sparse-vector and A weight"),
    (dict(center=(1.0,)), ValueError, "center must be 2 finite numbers (a public point), got shape (1,)"),
    (dict(n_trees=None), ValueError, "n_trees must be an integer >= 1, got None"),
    (dict(tree_depth=2.5, n_rings=0), ValueError, "n_rings must be an integer >= 1, got 0"),
    (dict(nonsense=1), TypeError, "EngineConfig.__init__() got an unexpected keyword argument 'nonsense'"),
    (dict(flush_schedule="dyadic", epoch_schedule="doubling"), ValueError,
     "flush_schedule='dyadic' needs epoch_schedule='horizon' (the other epoch schedules flush at every epoch "
     "change)"),
    (dict(flush_schedule="count", privacy_split=(0.1, 0.05, 0.85)), ValueError,
     "flush_schedule='count' needs a DP count estimate: a stream-counter weight in privacy_split (its 4th "
     "weight) or the bicriteria"),
])
def test_the_flat_constructor_names_the_same_first_mistake_as_before(kw, error, message):
    with pytest.raises(error) as e:
        EngineConfig(**{**BASE, **kw})
    assert str(e.value) == message
