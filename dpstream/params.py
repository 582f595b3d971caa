"""Validated public parameters of a run (chosen without looking at the data).

Everything here is fixed before any data is seen; nothing data-dependent may
choose it.  ``EngineConfig`` is the one object from which both the mechanisms
and the :class:`~dpstream.privacy.PrivacyPlan` derive their shapes and noise
scales, so a budget can never be split for a different configuration than the
one that runs (P9). Its groups are in :mod:`dpstream.param_groups`, its string
choices in :mod:`dpstream.choices`.
"""
from __future__ import annotations

import copy
import enum
import inspect
import math
from dataclasses import MISSING, dataclass, fields
from operator import attrgetter

import numpy as np

from .choices import (CONTRIBUTIONS, EPOCH_SCHEDULES, FLUSH_SCHEDULES, OBJECTIVES, RELATIONS,
                      RELEASE_DECAY_RULES, RING_CENTERS, ROOT_TAILS, SEMICORESETS, Contribution, EpochSchedule,
                      FlushSchedule, Objective, Relation, ReleaseDecayRule, RingCenters, RootTail, Semicoreset,
                      objective_exponent)
from .param_groups import (BicriteriaParams, BlackBoxA, Budget, Derived, MergeReduce, Offline, PrivacyUnit, Problem,
                           Stream, derive)

__all__ = ["EngineConfig", "PARAMETERS", "objective_exponent"]  # objective_exponent: where the modules import it

# (attribute, group) in the order the groups are read: the problem, then its privacy, then the algorithm
GROUPS = (("problem", Problem), ("budget", Budget), ("stream", Stream), ("unit", PrivacyUnit),
          ("bicriteria_params", BicriteriaParams), ("merge_reduce", MergeReduce), ("black_box_a", BlackBoxA),
          ("offline", Offline))
# Every flat keyword, in the order of the flat dataclass EngineConfig was before its groups: to_dict()'s
# key order, kept so that every dict written from it reads (and hashes, in the seed registry) as before.
PARAMETERS = (
    "n_clusters", "dim", "radius", "epsilon", "delta", "horizon_ticks", "runs", "window_runs", "neighbouring",
    "objective", "semicoreset", "center", "n_trees", "grid_levels", "n_reps", "n_buckets", "hh_alpha",
    "hh_min_count", "bucket_shards", "bicriteria", "ring_centers", "n_rings", "ring_ratio", "block_size",
    "block_leaves", "epoch_blocks", "first_epoch_blocks", "ring_center_factor", "epoch_schedule",
    "flush_schedule", "coreset_size", "release_epoch_decay", "tree_depth", "tree_keep_factor",
    "tree_branch_factor", "lloyd_iters", "count_share", "weight_beta", "privacy_split", "n_init",
    "sum_grid_bits", "max_contributions", "max_contributions_per_tick", "contribution", "privacy_unit",
    # added later, so they come last: the earlier keys keep their order
    "flush_growth", "flush_min_blocks", "root_tail", "release_decay_rule", "release_cover_factor", "ring_tolerance",
    "tree_cells", "first_flush_leaves", "cells_locate_dims", "cells_lloyd_steps", "cells_lloyd_share",
    "cells_overseed", "cells_reseed", "cells_count_share", "release_min_points", "cells_gate", "cells_gate_max",
    "part_fire", "part_fire_rate")
CELLS_OPTIONS = ("cells_locate_dims", "cells_lloyd_steps", "cells_lloyd_share", "cells_overseed", "cells_reseed",
                 "cells_count_share", "cells_gate", "cells_gate_max")
UNIT_FIELDS = ("max_contributions", "max_contributions_per_tick", "contribution", "privacy_unit")
_NAMES = {name: tuple(f.name for f in fields(cls)) for name, cls in GROUPS}
_GROUP_OF = {field: name for name, names in _NAMES.items() for field in names}
assert sorted(_GROUP_OF) == sorted(PARAMETERS) and len(_GROUP_OF) == len(PARAMETERS)
_DEFAULTS = {f.name: f.default for _, cls in GROUPS for f in fields(cls) if f.name in PARAMETERS[4:]}
_DERIVED = tuple(f.name for f in fields(Derived) if f.name != "rule_filled")


def _check(cond: bool, msg: str) -> None:
    if not cond:
        raise ValueError(msg)


def _check_cells_options(v: dict) -> None:
    """The advanced options of A's cells: each needs ``tree_cells`` (which already excludes lloyd, snap and
    a bounded privacy unit), and the tree must keep a share of A's budget."""
    p, steps, g, f = v["cells_locate_dims"], v["cells_lloyd_steps"], v["cells_lloyd_share"], v["tree_cells"]
    _check(_is_whole(p) and p >= 0, f"cells_locate_dims must be an integer >= 0, got {p!r}")
    _check(_is_whole(steps) and steps >= 0, f"cells_lloyd_steps must be an integer >= 0, got {steps!r}")
    _check(_is_num(g) and 0 <= g < 1, f"cells_lloyd_share must be a share in [0, 1), got {g!r}")
    v["cells_locate_dims"], v["cells_lloyd_steps"], v["cells_lloyd_share"] = int(p), int(steps), float(g)
    over, split, phi = v["cells_overseed"], v["cells_reseed"], v["cells_count_share"]
    _check(_is_whole(over) and over >= 1, f"cells_overseed must be an integer >= 1, got {over!r}")
    _check_nonneg(v, "cells_reseed", "a number")
    _check(_is_num(phi) and 0 <= phi < 1, f"cells_count_share must be a share in [0, 1), got {phi!r}")
    v["cells_overseed"], v["cells_reseed"], v["cells_count_share"] = int(over), float(split), float(phi)
    gate = v["cells_gate"] = float(_check_nonneg(v, "cells_gate", "a number"))
    top = v["cells_gate_max"] = float(_check_nonneg(v, "cells_gate_max", "a number"))
    _check(not top or gate, "cells_gate_max needs cells_gate > 0 (it bounds the gate from above)")
    for name in CELLS_OPTIONS:
        _check(v[name] == _DEFAULTS[name] or f, f"{name} needs tree_cells > 0 (the options of A's cells)")
    _check(not split or steps, "cells_reseed needs cells_lloyd_steps (it moves the steps' dead centers)")
    _check(bool(steps) == bool(g), "cells_lloyd_steps and cells_lloyd_share go together: set both > 0 "
           "(Lloyd steps with their share of A's budget) or neither")
    _check(f + g < 1, f"tree_cells + cells_lloyd_share must be < 1 (the tree keeps the rest of A's budget), "
           f"got {f!r} + {g!r}")


def _is_whole(x) -> bool:
    """A finite number with an integer value (inf would overflow int())."""
    return _is_num(x) and math.isfinite(x) and int(x) == x


def _is_num(x) -> bool:
    return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, bool)


def _check_nonneg(v: dict, name: str, what: str = "a finite number"):
    """``v[name]``, checked to be a finite number >= 0 (a bool is not one)."""
    x = v[name]
    _check(_is_num(x) and math.isfinite(x) and x >= 0, f"{name} must be {what} >= 0, got {x!r}")
    return x


@dataclass(frozen=True, eq=False, init=False)
class EngineConfig:
    """Public configuration of one DP streaming clustering run, in frozen groups.

    Build it with the flat keywords (``EngineConfig(n_clusters=3, dim=2, radius=1.0, epsilon=1.0,
    n_trees=2)``: every field of every group, by its own name); read it by group (``cfg.budget``,
    ``cfg.black_box_a``) or by the flat shorthand of any field (``cfg.epsilon`` is
    ``cfg.budget.epsilon``; ``cfg.tree_depth`` is ``cfg.derived.tree_depth``, the effective value).

    Why this shape:

    * **Groups** (:mod:`dpstream.param_groups`), one per part of the algorithm, each attribute
      documented where it is declared, as PipelineDP's and Google's parameter dataclasses are. They
      hold the parameters *as given* (``None`` = the public rule); :class:`Derived` holds what the
      rules fill in, built by one function from the groups, with the names it filled declared
      (``derived.rule_filled``). :meth:`with_` rebuilds from the given values, so a rule-filled value
      is derived again for the changed parameters while an explicit one stays.
    * **Flat keywords and shorthands** stay the public interface: ``DPStreamClusterer`` exposes every
      parameter to ``get_params``/``set_params``/``clone``, the job's options map onto them, and the
      mechanisms read ``cfg.<name>``. The constructor checks every parameter in one fixed order (so a
      configuration with several mistakes always names the same one first) before building the groups.
    * **Choices** are :mod:`dpstream.choices` ``StrEnum`` members: equal to, hashed and written to JSON
      as their strings.
    * **Equality and hash** are those of the flat effective values (as before the groups): a rule's
      value and the same value given explicitly make equal configurations, which run identically.
      :meth:`to_dict` keeps the flat shape the config hash was defined on.
    * Plain frozen dataclasses: picklable (Beam ships the config to its workers), cheap to build.
    """

    problem: Problem
    budget: Budget
    stream: Stream
    unit: PrivacyUnit
    bicriteria_params: BicriteriaParams
    merge_reduce: MergeReduce
    black_box_a: BlackBoxA
    offline: Offline
    derived: Derived

    def __init__(self, n_clusters, dim, radius, epsilon, **options):
        """Every parameter by its flat name (:data:`PARAMETERS`; the signature lists them with their
        defaults); None for bicriteria, tree_depth, first_epoch_blocks, count_share, n_buckets,
        coreset_size or block_size asks for the public rule. Raises ValueError naming the first mistake."""
        unknown = sorted(set(options) - set(_DEFAULTS))
        if unknown:
            raise TypeError(f"EngineConfig.__init__() got an unexpected keyword argument {unknown[0]!r}")
        v = {**_DEFAULTS, **options, "n_clusters": n_clusters, "dim": dim, "radius": radius, "epsilon": epsilon}
        _check_and_normalise(v)
        groups = {name: cls(**{field: v[field] for field in _NAMES[name]}) for name, cls in GROUPS}
        derived = derive(groups["problem"], groups["unit"], groups["bicriteria_params"], groups["merge_reduce"],
                         groups["black_box_a"])
        _check(v["privacy_split"][0] > 0 or not derived.bicriteria, "privacy_split needs a positive bicriteria weight")
        # a flush schedule that could never act is a mistake, not a silent no-op
        _check(v["flush_schedule"] == FlushSchedule.FIRST or v["epoch_schedule"] == EpochSchedule.HORIZON,
               f"flush_schedule={v['flush_schedule'].value!r} needs epoch_schedule='horizon' (the other epoch "
               f"schedules flush at every epoch change)")
        _check(not v["part_fire_rate"] or derived.bicriteria or v["privacy_split"][3] > 0,
               "part_fire_rate needs a DP count estimate: a stream-counter weight in privacy_split (its 4th "
               "weight) or the bicriteria")
        _check(v["flush_schedule"] != FlushSchedule.COUNT or derived.bicriteria or v["privacy_split"][3] > 0,
               "flush_schedule='count' needs a DP count estimate: a stream-counter weight in privacy_split "
               "(its 4th weight) or the bicriteria")
        # set once, as a frozen dataclass's generated __init__ sets its fields
        for name, group in groups.items():
            object.__setattr__(self, name, group)
        object.__setattr__(self, "derived", derived)

    def given(self) -> dict:
        """The flat keywords that build this configuration again (None where a rule filled a value)."""
        return {name: getattr(getattr(self, _GROUP_OF[name]), name) for name in PARAMETERS}

    def with_(self, **kw) -> "EngineConfig":
        """A copy with some parameters changed (flat keywords); values a public rule filled are derived
        again for the changed parameters."""
        return EngineConfig(**{**self.given(), **kw})

    def gated_tree(self) -> "EngineConfig":
        """The plain tree a block runs when ``cells_gate`` keeps it from the cells (P22): this configuration
        without the cells and their options, A's tree depth, keep factor and count share by their rules and
        defaults (the cells' own tree values are tuned to locate, not to release)."""
        return self.with_(tree_cells=0.0, tree_depth=None, count_share=None,
                          tree_keep_factor=_DEFAULTS["tree_keep_factor"], **{n: _DEFAULTS[n] for n in CELLS_OPTIONS})

    def to_dict(self) -> dict:
        """The flat parameters (plain values; rule-filled bicriteria, tree_depth, first_epoch_blocks and
        count_share as their effective values), in :data:`PARAMETERS` order: the config hash's input."""
        d = {name: _plain(getattr(self, name)) for name in PARAMETERS}
        d["privacy_split"] = list(self.privacy_split)
        if self.max_contributions is None:  # record level: the same dict (and config hash) as before units
            for name in UNIT_FIELDS:
                d.pop(name)
        if not self.tree_cells:  # off: the same dict (and config hash) as before the option
            d.pop("tree_cells")
        for name in CELLS_OPTIONS:  # off (the default): the same dict as before the cells' options
            if getattr(self, name) == _DEFAULTS[name]:
                d.pop(name)
        if self.release_min_points == 1.0:  # the default: the same dict as before the option (what a default
            # run releases is told apart by ALGORITHM_VERSION, part of a run's identity)
            d.pop("release_min_points")
        if self.first_flush_leaves == 1.0:  # the default: the same dict as before the option (what a default
            # run releases is told apart by ALGORITHM_VERSION, part of a run's identity)
            d.pop("first_flush_leaves")
        if self.part_fire == _DEFAULTS["part_fire"]:  # the default: the same dict (and config hash) as before it
            # was one (what a default run releases is told apart by ALGORITHM_VERSION, part of a run's identity)
            d.pop("part_fire")
        if not self.part_fire_rate:
            d.pop("part_fire_rate")
        return d

    def _key(self) -> tuple:
        return tuple(getattr(self, name) for name in PARAMETERS)

    def __eq__(self, other):
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self):
        return hash(self._key())

    # -- public quantities the mechanisms share (functions of the parameters) --------------
    @property
    def center_vec(self) -> np.ndarray:
        return np.zeros(self.dim) if self.center is None else np.asarray(self.center, dtype=float)

    @property
    def replace(self) -> bool:
        """Is the relation replace-one (``cfg.neighbouring == "replace_one"``)?"""
        return self.neighbouring == Relation.REPLACE_ONE

    @property
    def counter_levels(self) -> int:
        """L_T = floor(log2 T) + 1: p-sums a tick lies in, for t <= T."""
        return int(math.floor(math.log2(self.horizon_ticks))) + 1

    def cell_side(self, level: int) -> float:
        return 2.0 * self.radius / 2.0**level

    def cell_offset(self, level: int) -> int:
        """-floor(-Λ/g): added to raw cell indices so ids are >= 0."""
        return -int(math.floor(-self.radius / self.cell_side(level)))

    def cell_values(self, level: int) -> int:
        """Values a coordinate's cell index can take (shift in [0, g_ℓ); P10)."""
        g = self.cell_side(level)
        return int(math.floor((self.radius + g) / g)) + self.cell_offset(level) + 1

    def cell_bits(self, level: int) -> int:
        return max(1, int(math.ceil(math.log2(self.cell_values(level)))))

    def id_bits(self, level: int) -> int:
        """B_ℓ = d·b_ℓ, the bits encoded per cell id."""
        return self.dim * self.cell_bits(level)

    @property
    def ring_base(self) -> float:
        """r_0: ring i (i >= 1) holds distances in [r_0 2^(i-1), r_0 2^i), each end times (1 + ring_tolerance)."""
        return 2.0 * self.radius / self.ring_ratio ** (self.n_rings - 1)

    def ring_radius(self, i) -> np.ndarray:
        return self.ring_base * np.power(self.ring_ratio, np.asarray(i, dtype=float))

    @property
    def count_counter(self) -> bool:
        """Is there a stream counter (the DP count estimate's own binary mechanism)? Not with the
        bicriteria, whose counters give the estimate for free (its weight is then unused)."""
        return self.privacy_split[3] > 0 and not self.bicriteria


class _Shorthand(property):
    """A flat read-only shorthand (``cfg.epsilon`` → ``cfg.budget.epsilon``). Read on the class it is the
    parameter's default, as the flat dataclass's class attribute was (``EngineConfig.privacy_split``)."""

    def __init__(self, path: str, default=MISSING):
        super().__init__(attrgetter(path), doc=f"Shorthand for ``cfg.{path}``.")
        self.default = default

    def __get__(self, obj, cls=None):
        if obj is None:
            return self if self.default is MISSING else self.default
        return self.fget(obj)


# every group field by its own name; the rule-filled ones (and buckets, s_b, z, the unit's bounds) by the
# effective value in ``derived``
for _cls_name, _cls in GROUPS:
    for _f in fields(_cls):
        setattr(EngineConfig, _f.name, _Shorthand(f"{_cls_name}.{_f.name}", _f.default))
for _name in _DERIVED:
    setattr(EngineConfig, _name, _Shorthand(f"derived.{_name}", getattr(EngineConfig, _name, MISSING)))
del _cls_name, _cls, _f, _name
# help() and editors show the flat keywords, not **options
EngineConfig.__signature__ = inspect.Signature(
    [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD) for name in PARAMETERS[:4]]
    + [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=_DEFAULTS[name]) for name in PARAMETERS[4:]])


def _plain(value):
    """A value as ``dataclasses.asdict`` gave it for the flat dataclass: a choice as its string, a copy."""
    return value.value if isinstance(value, enum.Enum) else copy.deepcopy(value)


def _check_and_normalise(v: dict) -> None:
    """Check the flat parameters ``v`` (as given) in one fixed order, raising ValueError with the first
    mistake; normalise them in place (integers to ``int``, numbers to ``float``, choices to their enum
    members, a 3-weight split to 4 weights). The rule-filled values (None) are left to :func:`derive`."""
    _check(_is_whole(v["n_clusters"]) and v["n_clusters"] >= 1,
           f"n_clusters must be an integer >= 1, got {v['n_clusters']!r}")
    _check(_is_whole(v["dim"]) and v["dim"] >= 1, f"dim must be an integer >= 1, got {v['dim']!r}")
    radius, epsilon = v["radius"], v["epsilon"]
    _check(_is_num(radius) and math.isfinite(radius) and radius > 0,
           f"radius must be a finite number > 0 (a public bound on the data's norm), got {radius!r}")
    _check(1e-100 <= radius <= 1e100, f"radius must be in [1e-100, 1e100] (rescale the data's units), got {radius!r}")
    _check(_is_num(epsilon) and epsilon > 0 and not math.isnan(epsilon),
           f"epsilon must be > 0 (use a large value such as 1e6 for a near non-private run), got {epsilon!r}")
    _check(epsilon >= 1e-6, f"epsilon must be >= 1e-6 (below that every release is noise), got {epsilon!r}")
    _check(_is_num(v["delta"]) and 0 <= v["delta"] < 1, f"delta must be in [0, 1), got {v['delta']!r}")
    _check(_is_whole(v["horizon_ticks"]) and 1 <= v["horizon_ticks"] <= 2**40,
           f"horizon_ticks must be an integer in [1, 2^40], got {v['horizon_ticks']!r}")
    _check(v["runs"] is None or (_is_whole(v["runs"]) and 1 <= v["runs"] <= 2**40),
           f"runs must be an integer >= 1 or None (unbounded), got {v['runs']!r}")
    _check(_is_whole(v["window_runs"]) and 0 <= v["window_runs"] <= 10**6,
           f"window_runs must be an integer >= 0 (0: all runs), got {v['window_runs']!r}")
    for name, allowed, choice in (("neighbouring", RELATIONS, Relation), ("objective", OBJECTIVES, Objective),
                                  ("semicoreset", SEMICORESETS, Semicoreset),
                                  ("ring_centers", RING_CENTERS, RingCenters),
                                  ("flush_schedule", FLUSH_SCHEDULES, FlushSchedule),
                                  ("root_tail", ROOT_TAILS, RootTail),
                                  ("release_decay_rule", RELEASE_DECAY_RULES, ReleaseDecayRule),
                                  ("epoch_schedule", EPOCH_SCHEDULES, EpochSchedule)):
        _check(v[name] in allowed, f"{name} must be one of {allowed}, got {v[name]!r}")
        v[name] = choice(v[name])
    if v["center"] is not None:
        c = np.asarray(v["center"], dtype=float)
        _check(c.shape == (v["dim"],) and np.all(np.isfinite(c)),
               f"center must be {v['dim']} finite numbers (a public point), got shape {c.shape}")
    _check_unit(v)
    if v["bicriteria"] is not None:
        _check(isinstance(v["bicriteria"], (bool, np.bool_)),
               f"bicriteria must be True, False or None, got {v['bicriteria']!r}")
        v["bicriteria"] = bool(v["bicriteria"])
    feb = v["first_epoch_blocks"]
    _check(feb is None or (_is_num(feb) and math.isfinite(feb) and feb > 0),
           f"first_epoch_blocks must be a finite number > 0, got {feb!r}")
    if v["block_size"] is not None:
        _check(_is_whole(v["block_size"]) and v["block_size"] >= 1,
               f"block_size must be an integer >= 1 or None (the public rule), got {v['block_size']!r}")
    _check(_is_num(v["block_leaves"]) and math.isfinite(v["block_leaves"]) and v["block_leaves"] > 0,
           f"block_leaves must be a finite number > 0, got {v['block_leaves']!r}")
    for name in ("n_trees", "grid_levels", "n_reps", "n_rings", "tree_depth", "lloyd_iters", "n_init"):
        if name != "tree_depth" or v[name] is not None:  # tree_depth None: the rule's
            _check(_is_whole(v[name]) and v[name] >= 1, f"{name} must be an integer >= 1, got {v[name]!r}")
    for name, cap in (("n_trees", 64), ("n_reps", 4096), ("lloyd_iters", 1000), ("n_init", 1000),
                      ("block_size", 2**31), ("n_clusters", 10**6), ("dim", 10**6)):
        if v[name] is not None:
            _check(v[name] <= cap, f"{name} must be <= {cap}, got {v[name]!r}")
    _check(_is_num(v["ring_tolerance"]) and 0 <= v["ring_tolerance"] <= 1e-3,
           f"ring_tolerance must be a number in [0, 1e-3] (a relative band past each ring's radius), got "
           f"{v['ring_tolerance']!r}")
    v["ring_tolerance"] = float(v["ring_tolerance"])
    _check(v["grid_levels"] <= 30, "grid_levels must be <= 30")
    _check(v["n_rings"] <= 60, "n_rings must be <= 60")
    _check(v["tree_depth"] is None or v["tree_depth"] <= 30, "tree_depth must be <= 30")
    if v["n_buckets"] is not None:
        _check(_is_whole(v["n_buckets"]) and 1 <= v["n_buckets"] <= 2**20, "n_buckets must be an integer in [1, 2^20]")
    if v["coreset_size"] is not None:
        _check(_is_whole(v["coreset_size"]) and v["coreset_size"] >= v["n_clusters"],
               "coreset_size must be an integer >= n_clusters")
    buckets = int(v["n_buckets"]) if v["n_buckets"] is not None else 4 * v["n_clusters"]
    _check(_is_whole(v["bucket_shards"]) and 1 <= v["bucket_shards"] <= buckets,
           f"bucket_shards must be an integer in [1, n_buckets = {buckets}] (each shard holds at least "
           f"one heavy-hitter bucket), got {v['bucket_shards']!r}")
    _check(0.5 < v["hh_alpha"] < 1, f"hh_alpha must be in (0.5, 1), got {v['hh_alpha']!r}")
    _check(v["hh_min_count"] >= 0, "hh_min_count must be >= 0")
    share = v["count_share"]
    if share is not None:
        _check(_is_num(share) and 0 < share <= 1, "count_share must be in (0, 1]")
        _check(share < 1 or v["semicoreset"] == Semicoreset.SNAP,
               "count_share must be < 1 with the tree and lloyd semicoresets (their sums need a share)")
    _check(0 < v["weight_beta"] < 1, "weight_beta must be in (0, 1)")
    _check(_is_num(v["release_epoch_decay"]) and 0 < v["release_epoch_decay"] <= 1,
           f"release_epoch_decay must be in (0, 1], got {v['release_epoch_decay']!r}")
    _check(_is_num(v["release_cover_factor"]) and math.isfinite(v["release_cover_factor"])
           and v["release_cover_factor"] > 0,
           f"release_cover_factor must be a finite number > 0, got {v['release_cover_factor']!r}")
    _check(_is_num(v["flush_growth"]) and math.isfinite(v["flush_growth"]) and v["flush_growth"] > 0,
           f"flush_growth must be a finite number > 0, got {v['flush_growth']!r}")
    for name in ("flush_min_blocks", "first_flush_leaves", "release_min_points"):
        _check_nonneg(v, name)
    for name in ("part_fire", "part_fire_rate"):
        v[name] = float(_check_nonneg(v, name))
    _check(not v["part_fire_rate"] or v["part_fire"], "part_fire_rate needs part_fire > 0 (it raises its threshold)")
    _check(not v["part_fire_rate"] or v["ring_centers"] == RingCenters.BICRITERIA_AND_RELEASED,
           "part_fire_rate needs ring_centers='bicriteria+released' (it reads the release the epoch's rings "
           f"were drawn from; with {v['ring_centers'].value!r} there is none)")
    _check(v["tree_keep_factor"] > 0 and v["tree_branch_factor"] > 0, "tree factors must be > 0")
    cells = v["tree_cells"]
    _check(_is_num(cells) and 0 <= cells < 1, f"tree_cells must be a share in [0, 1), got {cells!r}")
    v["tree_cells"] = float(cells)
    _check(not cells or v["semicoreset"] == Semicoreset.TREE, "tree_cells needs semicoreset='tree'")
    _check(not cells or v["max_contributions"] is None,
           "tree_cells is not available with a bounded privacy unit (max_contributions)")
    _check_cells_options(v)
    _check(4 <= v["sum_grid_bits"] <= 40, "sum_grid_bits must be in [4, 40]")
    try:
        split = tuple(float(s) for s in v["privacy_split"])
    except (TypeError, ValueError):
        split = ()
    _check(len(split) in (3, 4) and all(math.isfinite(s) and s >= 0 for s in split),
           "privacy_split must be 3 or 4 finite weights >= 0 (bicriteria, sparse vector, A[, stream count])")
    if len(split) == 3:
        split = split + (0.0,)
    _check(split[1] > 0 and split[2] > 0, "privacy_split needs a positive sparse-vector and A weight")
    v["privacy_split"] = split
    v["radius"], v["epsilon"], v["delta"] = float(radius), float(epsilon), float(v["delta"])
    for name in ("n_clusters", "dim", "horizon_ticks", "runs", "window_runs", "n_trees", "grid_levels", "n_reps",
                 "bucket_shards", "n_rings", "tree_depth", "lloyd_iters", "n_init", "block_size"):
        if v[name] is not None:
            v[name] = int(v[name])


def _check_unit(v: dict) -> None:
    L, per_tick = v["max_contributions"], v["max_contributions_per_tick"]
    _check(v["contribution"] in CONTRIBUTIONS,
           f"contribution must be one of {CONTRIBUTIONS}, got {v['contribution']!r}")
    v["contribution"] = Contribution(v["contribution"])
    unit = v["privacy_unit"]
    _check(isinstance(unit, str) and 0 < len(unit) <= 200,
           f"privacy_unit must be a non-empty name (of the id field), got {unit!r}")
    if L is None:
        _check(per_tick is None and v["contribution"] == Contribution.RECORDS,
               "max_contributions_per_tick and contribution need max_contributions (the unit's bound L)")
        return
    _check(_is_whole(L) and 1 <= L <= 10**6, f"max_contributions must be an integer in [1, 10^6], got {L!r}")
    v["max_contributions"] = int(L)
    if per_tick is not None:
        _check(_is_whole(per_tick) and 1 <= per_tick <= L,
               f"max_contributions_per_tick must be an integer in [1, max_contributions = {L}], got {per_tick!r}")
        _check(v["contribution"] == Contribution.RECORDS, "max_contributions_per_tick bounds kept records; with "
                                                          "contribution='tick_mean' a unit has one point per tick")
        v["max_contributions_per_tick"] = int(per_tick)
