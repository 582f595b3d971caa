"""What a choice of public parameters will cost, before touching data (``dpstream --plan_only``,
``DPStreamClusterer.plan``).

Everything here is a function of the public configuration only: the privacy plan (the noise of
each mechanism and the accounted total), the level-0 block size M, the first tick whose release
can reflect a full block of data, and the state bound. No data is read and no noise is drawn
that a release could use: the plan is built with a fixed, throw-away key (the plan's noise
*scales* do not depend on the key).
"""
from __future__ import annotations

import math
from typing import Optional

from .params import EngineConfig

BETA = 1e-6  # failure probability of the sparse vector's buffer term in the state bound
_PLAN_KEY = b"dpstream plan only: no release uses this key"


def _engine(cfg: EngineConfig):
    from .engine import Engine
    return Engine(cfg, _PLAN_KEY)


def leaves_per_part(cfg: EngineConfig) -> int:
    if cfg.semicoreset == "tree" and cfg.tree_cells:  # k cells per part
        return cfg.n_clusters
    return {"tree": 2 ** cfg.tree_depth, "lloyd": cfg.n_clusters, "snap": 1}[cfg.semicoreset]


def bound_terms(cfg: EngineConfig, svt_scale: float, block_size: int, n_f: int = 1) -> dict:
    """The engine's state bound (docs/internals.md) term by term, in floats, for ``n_f`` candidate
    centers: a public function of the configuration."""
    d, k, I, T, s_b = cfg.dim, cfg.n_clusters, cfg.n_rings, cfg.horizon_ticks, cfg.s_b
    K = cfg.n_trees * cfg.n_reps * cfg.buckets * sum(1 + cfg.id_bits(lv) for lv in range(cfg.grid_levels))
    lam = int(math.floor(math.log2(T + 1))) + 1
    E = int(math.floor(math.log2(T))) + 1
    a = 2.0 * svt_scale * math.log(I * T / BETA)
    P = n_f + k
    M = block_size
    if cfg.semicoreset == "tree" and cfg.tree_cells:  # raw points until A, and the tree's directions
        from .cells import locate_dims

        p = locate_dims(cfg)  # located in a projection: D directions in it, and the p × d projection
        block = (M + a) * (d + 1) + (cfg.tree_depth * p + p * d if p else cfg.tree_depth * d) + P
    elif cfg.semicoreset == "tree":
        block = min(M + a, P * 2 ** cfg.tree_depth) * (d + 2) + cfg.tree_depth * d + P
    elif cfg.semicoreset == "lloyd":
        block = (M + a) * (d + 1) + P
    else:
        block = min(M + a, P) * 2 + P
    return {
        "counters": 2 * K if cfg.bicriteria else 0,
        "stream_counter": 2 if (cfg.count_counter and not cfg.bicriteria) else 0,
        "F": d * n_f + (d + 2) * (n_f - 1) if cfg.bicriteria else 0,
        # part_fire: a count, a threshold and the tests since its restart per (ring, part); part_fire_rate: the
        # release's share per (ring, part)
        "svt": 2 * I + (3 * I * P if cfg.part_fire else 0) + (I * P if cfg.part_fire_rate else 0),
        "ring_centers": d * P,
        "blocks": I * block,
        "levels": I * (P * leaves_per_part(cfg) + (lam - 1) * s_b) * (d + 1),
        "epochs": E * s_b * (d + 1),
        # the release coreset and its centers, and the sample the centers are fitted to when the epochs'
        # weights decay (release_fit_sample: B's sample, ≤ s_B points, like the release coreset's)
        "cache": s_b * (d + 1) + k * d,
        "fit": s_b * (d + 1) if cfg.release_epoch_decay != 1.0 else 0,
    }


def state_bound(cfg: EngineConfig, svt_scale: float, block_size: int, n_f: int = 1) -> float:
    """The engine's state bound in floats (:func:`bound_terms` summed; tests/test_adversarial_streams.py
    checks the engine against it tick by tick)."""
    return float(sum(bound_terms(cfg, svt_scale, block_size, n_f).values()))


def plan(cfg: EngineConfig, points_per_tick: Optional[float] = None) -> dict:
    """The plan as a dict: ``privacy_table``, ``epsilon``, ``delta``, ``block_size``,
    ``first_full_block_tick`` (None without ``points_per_tick``), ``first_flush_tick`` (the tick whose DP
    count first reaches ``first_flush_points``, noise aside, under the horizon epoch schedule; None without
    ``points_per_tick``), ``state_bound_floats`` (without
    the bicriteria; with it the bound grows with |F|, see docs/internals.md)."""
    e = _engine(cfg)
    M = int(e.block_size)
    first = first_flush = None
    # the first flush waits for a DP count of first_flush_leaves keep thresholds (0 without a DP count),
    # unless the first epoch change (a DP count of first_epoch_blocks blocks) or a ring's full block comes first
    wait = float(cfg.first_flush_leaves) * e.schedule.leaf_threshold
    if points_per_tick:
        ppt = float(points_per_tick)
        first = min(cfg.horizon_ticks, max(1, math.ceil(M / ppt)))
        if cfg.epoch_schedule == "horizon":
            first_flush = min(first, max(1, math.ceil(wait / ppt)))
            epoch_tick = max(1, math.ceil(cfg.first_epoch_blocks * M / ppt))
            if cfg.ring_centers == "bicriteria+released" and 2 * epoch_tick <= cfg.horizon_ticks:
                first_flush = min(first_flush, epoch_tick)
    from .privacy import SECRET_SEED
    table = e.plan.table().replace(f"seed: {SECRET_SEED}", "seed: none (a plan, before any run)")
    return {"privacy_table": table, "epsilon": cfg.epsilon, "delta": cfg.delta, "block_size": M,
            "first_full_block_tick": first, "first_flush_tick": first_flush, "first_flush_points": wait,
            "horizon_ticks": cfg.horizon_ticks,
            "state_bound_floats": state_bound(cfg, e.plan.svt_scale, M) if not cfg.bicriteria else None}


def plan_text(cfg: EngineConfig, points_per_tick: Optional[float] = None) -> str:
    """:func:`plan` as the text ``--plan_only`` prints."""
    p = plan(cfg, points_per_tick)
    lines = [p["privacy_table"], "",
             f"block size M = {p['block_size']:,} points: a ring's noise is paid per block, so a release is "
             f"useful once blocks of M points are released"]
    if p["first_full_block_tick"] is not None:
        if p["first_flush_tick"] is None:
            flush = ""
        elif p["first_flush_tick"] == 1:
            flush = "tick 1's release already holds tick 1's points (flushed, noisy); "
        else:
            flush = (f"the first release to hold points comes at the first flush: once the DP count reaches "
                     f"{p['first_flush_points']:,.0f} points (enough for one of the semicoreset's leaves), at the "
                     f"first epoch change or at a full block, whichever is first: about tick "
                     f"{p['first_flush_tick']:,}, the ball's center before it; ")
        lines.append(f"{flush}at {points_per_tick:,.0f} points per tick the first full block is released at tick "
                     f"{p['first_full_block_tick']:,} of {cfg.horizon_ticks:,}")
    else:
        lines.append(f"the first full block is released at tick ⌈M / points per tick⌉ (of {cfg.horizon_ticks:,})")
    if p["state_bound_floats"] is not None:
        sb = p["state_bound_floats"]
        lines.append(f"state bound: {sb:,.0f} floats ({sb * 8 / 2 ** 20:,.1f} MiB) whatever the stream's length")
    else:
        lines.append("state bound: grows with the bicriteria's candidate centers |F| (docs/internals.md)")
    return "\n".join(lines)
