"""Adversarial streams keep the engine's state under its public bound (issue "Robustness").

The bound, read off the code (engine.py, merge_reduce.py, blocks.py, bicriteria.py, counters.py,
sparse_vector.py, semicoresets.py, params.py), for ``Engine.state_size()`` at the end of any tick
t ≤ T (after the engine's flushes), in floats, with F = |F_t| (the candidate centers; public: it
is ``Release.n_candidate_centers``; F = 1, the ball's center, without the bicriteria), P = F + k
parts per ring and M the block size (``Engine.block_size``: public):

    2K                              bicriteria counters (exact prefix sum + noise total),
                                    K = Q·R·w·Σ_ℓ (1 + d·b_ℓ)                      — fixed (0 if off)
  + 2                               the stream counter (its one coordinate)          — fixed
  + d·F + (d+2)·(F−1)               F and its (tree, level, cell) keys (0 without the bicriteria)
  + 2I·(1 + P')                     sparse-vector counts and thresholds              — fixed
                                    (P' = P with part_fire, 0 without; part_fire_rate: + I·P shares)
  + d·P                             the open epoch's ring centers (F ∪ k released centers)
  + I·(min(M + a, P·ℓ_A)·(d+2) + D·d + P)
                                    level-0 blocks (blocks.py): a ring's block holds at most its
                                    SVT count, which stays below M + ρ − ν (a = 2·s_svt·ln(I·T/β)
                                    bounds ρ − ν over I·T tests w.p. ≥ 1 − β); the tree's sketch
                                    has at most one entry (key, count, d sums) per point and per
                                    (part, leaf), ℓ_A = 2^D; plus its D directions and P radii.
                                    DP-Lloyd keeps (M + a)·(d+1) raw floats, snap P entries of 2
  + I·(P·ℓ_A + (λ−1)·s_b)·(d+1)     merge-reduce levels per ring: level 0 is one A output
                                    (≤ ℓ_A points per part: 2^D tree leaves, k Lloyd centers,
                                    1 snap), levels ≥ 1 are B outputs (≤ s_b);
                                    λ = ⌊log2(T+1)⌋ + 1 levels (≤ one release per ring per tick)
  + E·s_b·(d+1)                     closed epochs' coresets, E = ⌊log2 T⌋ + 1
  + s_b·(d+1) + k·d                 the release cache (B's sample and the k centers)

F itself is capped by public parameters only through the number of distinct (tree, level, cell)
keys, F ≤ F_cap = 1 + Q·Σ_ℓ min(T·R·w, V_ℓ^d) with V_ℓ = ``cell_values(ℓ)`` (at most R·w new
keys per (tree, level) per tick): a public cap, but linear in T (not polylogarithmic) once
V_ℓ^d > T·R·w, and how much of it a stream reaches depends on the data (more points → more
cells clear τ_min). So the tests check ``state_size() ≤ bound(F)`` with the measured F, F ≤
F_cap and |F_t| − |F_{t−1}| ≤ Q·L·R·w, per tick, on every stream — with the bicriteria on (the
paper's pipeline) and with the defaults.
"""
from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from dpstream.engine import Engine, clip_to_ball
from dpstream import planning
from dpstream.params import EngineConfig

BETA = planning.BETA  # failure probability of the buffer term (Laplace tails of the sparse vector)
BASE = dict(n_clusters=3, dim=2, radius=10.0, epsilon=1.0, block_size=200, bicriteria=True,
            privacy_split=(0.1, 0.05, 0.85))
DEFAULTS = dict(n_clusters=3, dim=2, radius=10.0, epsilon=1.0)  # no bicriteria, stream counter, rule M


def make_engine(seed, **kw) -> Engine:
    cfg = EngineConfig(**{**BASE, **kw})
    return Engine(cfg, seed)


@pytest.fixture(params=["paper", "defaults"])
def flavour(request):
    return request.param


def make_flavoured(seed, flavour, **kw) -> Engine:
    base = BASE if flavour == "paper" else DEFAULTS
    return Engine(EngineConfig(**{**base, **kw}), seed)


# --------------------------------------------------------------------------- the bound

def f_cap(cfg: EngineConfig) -> int:
    """Public cap on |F|: distinct (tree, level, cell) keys, at most R·w new ones per tick."""
    if not cfg.bicriteria:
        return 1
    per_tree = sum(min(cfg.horizon_ticks * cfg.n_reps * cfg.buckets, cfg.cell_values(lv) ** cfg.dim)
                   for lv in range(cfg.grid_levels))
    return 1 + cfg.n_trees * per_tree


def bound_terms(cfg: EngineConfig, svt_scale: float, n_f: int, M: int) -> dict:
    """The bound of the module docstring, term by term (floats): the plan's own formula."""
    return planning.bound_terms(cfg, svt_scale, M, n_f)


def state_bound(e: Engine, n_f: int) -> float:
    return sum(bound_terms(e.cfg, e.plan.svt_scale, n_f, e.block_size).values())


class Monitor:
    """Steps an engine and checks the bound (and the parts it is made of) after every tick."""

    def __init__(self, e: Engine):
        self.e = e
        self.cfg = e.cfg
        self.cap = f_cap(e.cfg)
        self.max_state = 0
        self.max_ratio = 0.0
        self.states = []
        self.fit_floats = []  # of each state: the release fit's own sample (0: the coreset is the fit)
        self.n_f = 1
        self.worst = (0, 0.0, 1)  # (state, bound, |F|) at the tick closest to the bound

    def step(self, x):
        e, cfg = self.e, self.cfg
        rel = e.step(x)
        n_f = rel.n_candidate_centers
        assert n_f == e.candidate_centers().shape[0] <= self.cap, (n_f, self.cap)
        assert n_f - self.n_f <= cfg.n_trees * cfg.grid_levels * cfg.n_reps * cfg.buckets
        self.n_f = n_f
        s = e.state_size()
        b = state_bound(e, n_f)
        assert s <= b, f"tick {rel.tick}: state {s} > bound {b:.0f} with |F| = {n_f}"
        assert e.peak_state <= b, f"tick {rel.tick}: peak {e.peak_state} > bound {b:.0f}"
        self._check_parts(n_f)
        self.states.append(s)
        rc = e._released.coreset
        self.fit_floats.append(0 if rc.own_fit else rc.fit_points.size + rc.fit_weights.size)
        self.max_state = max(self.max_state, s)
        if s / b > self.max_ratio:
            self.max_ratio, self.worst = s / b, (s, b, n_f)
        return rel

    def summary(self, name):
        s, b, n_f = self.worst
        print(f"{name}: n={self.e.n_points} T={self.cfg.horizon_ticks} max state={self.max_state} "
              f"peak={self.e.peak_state} closest to the bound: {s} <= {b:.0f} ({s / b:.1%}, |F|={n_f}); "
              f"final |F|={self.n_f} (cap {self.cap}), epochs={self.e.epoch}")

    def _check_parts(self, n_f):
        e, cfg = self.e, self.cfg
        d, k, T, s_b = cfg.dim, cfg.n_clusters, cfg.horizon_ticks, cfg.s_b
        t = bound_terms(cfg, e.plan.svt_scale, n_f, e.block_size)
        if e.bic is not None:
            assert e.bic.counter.state_floats() == t["counters"]
        if e.counter is not None:
            assert e.counter.state_floats() == t["stream_counter"]
        assert e.mr.centers.shape[0] <= n_f + k
        mr = e.mr
        assert (mr.svt.state_floats() + (mr.psvt.state_floats() if mr.psvt is not None else 0)
                + (mr.part_shares.size if mr.part_shares is not None else 0)) <= t["svt"]
        for i, r in enumerate(e.mr.rings):
            assert r.block.n <= e.mr.svt.count[i]
            assert r.block.state_floats() * cfg.n_rings <= t["blocks"], (i, r.block.n)
            lv = r.levels
            assert len(lv) <= int(math.floor(math.log2(T + 1))) + 1, (i, len(lv))
            if lv and lv[0] is not None:
                assert len(lv[0]) <= (n_f + k) * planning.leaves_per_part(cfg)
            assert all(len(s) <= s_b for s in lv[1:] if s is not None)
        assert len(e.epoch_coresets) <= int(math.floor(math.log2(T))) + 1
        assert all(len(s) <= s_b for s in e.epoch_coresets)
        pts, w, centers = e._cache
        assert len(w) <= s_b and centers.shape[0] <= k
        rc = e._released.coreset
        if not rc.own_fit:  # the decayed fit sample: B's sample of the run's coreset, as the release's
            assert len(rc.fit_weights) <= s_b and rc.fit_points.size + rc.fit_weights.size <= t["fit"]


def _unit(rng, n, d):
    g = rng.normal(size=(n, d))
    return g / np.linalg.norm(g, axis=1, keepdims=True)


# --------------------------------------------------------------------------- the bound's arithmetic

def test_the_bound_is_a_function_of_public_parameters_only():
    cfg = EngineConfig(**{**BASE, "horizon_ticks": 256})
    e = Engine(cfg, b"p" * 32)
    terms = bound_terms(cfg, e.plan.svt_scale, 1, e.block_size)
    assert terms["counters"] == e.bic.counter.state_floats()  # fixed from the first tick
    # a fresh engine is far below it, and the bound grows only logarithmically in T
    assert e.state_size() < state_bound(e, 1)
    big = EngineConfig(**{**BASE, "horizon_ticks": 2 ** 20})
    e_big = Engine(big, b"p" * 32)
    assert state_bound(e_big, 1) < 5 * state_bound(e, 1)
    # F's public cap: for d = 2 the cells run out (a constant); for d = 10 it is linear in T
    assert f_cap(cfg) == f_cap(cfg.with_(horizon_ticks=2 ** 20))
    d10 = cfg.with_(dim=10, n_clusters=10)
    assert f_cap(d10.with_(horizon_ticks=1000)) - 1 == 2 * (f_cap(d10.with_(horizon_ticks=500)) - 1)


# --------------------------------------------------------------------------- streams

T_STREAM = 128
N_TICK = 1000


def test_identical_points_all_in_one_cell(seed, flavour):
    mon = Monitor(make_flavoured(seed, flavour, horizon_ticks=T_STREAM))
    x = np.tile([[3.0, -4.0]], (N_TICK, 1))
    for _ in range(T_STREAM):
        mon.step(x)
    # one cell at every level: F holds the ball's center and a handful of cells around the point
    assert mon.n_f <= 1 + mon.cfg.grid_levels * mon.cfg.n_trees * mon.cfg.n_reps * 4
    assert mon.e.n_points == T_STREAM * N_TICK
    mon.summary("identical points")


def test_every_point_in_a_new_cell_growing_spiral(seed, flavour):
    """A sunflower spiral whose radius grows with the index: each point lands in a cell of the
    finest level no earlier point touched (until the cells run out) and the rings move outwards."""
    mon = Monitor(make_flavoured(seed, flavour, horizon_ticks=T_STREAM))
    R, N = mon.cfg.radius, T_STREAM * N_TICK
    golden = math.pi * (3 - math.sqrt(5))
    for t in range(T_STREAM):
        i = np.arange(t * N_TICK, (t + 1) * N_TICK)
        r = R * np.sqrt((i + 0.5) / N)
        mon.step(np.c_[r * np.cos(i * golden), r * np.sin(i * golden)])
    assert mon.n_f > 10 or flavour == "defaults"  # the stream really spreads F
    mon.summary("growing spiral")


def test_every_point_in_a_new_cell_low_discrepancy_d6(seed, flavour):
    """A Sobol sequence mapped into the 6-ball: 34^6 finest cells for 64k points, so every point
    is alone in its cell."""
    qmc = pytest.importorskip("scipy.stats.qmc")
    from scipy.special import ndtri

    d, T = 6, 128
    mon = Monitor(make_flavoured(seed, flavour, dim=d, horizon_ticks=T))
    sob = qmc.Sobol(d, seed=0)
    for _ in range(T):
        u = np.clip(sob.random(512), 1e-12, 1 - 1e-12)
        g = ndtri(u)
        g /= np.linalg.norm(g, axis=1, keepdims=True)
        mon.step(g * (mon.cfg.radius * u[:, :1] ** (1.0 / d)))
    assert mon.e.n_points == T * 512
    mon.summary("Sobol in the 6-ball")


def test_radius_growing_over_time_is_clipped_and_leaves_the_state_unaffected(seed):
    """Norms grow from 10Λ to 2e300 over the stream (and a few rows reach the largest floats): every
    point is clipped into the ball, and the engine's state and releases are exactly those of the
    pre-clipped stream."""
    T = 64
    far = Monitor(make_engine(seed, horizon_ticks=T))
    ref = Monitor(make_engine(seed, horizon_ticks=T))
    rng = np.random.default_rng(7)
    for t in range(T):
        norms = far.cfg.radius * 10.0 ** (1 + 299 * t / (T - 1)) * rng.uniform(1, 2, (N_TICK, 1))
        x = _unit(rng, N_TICK, 2) * norms
        x[:3] = [[1.7e308, -1.7e308], [-1.7976931348623157e308, 0.0], [0.0, 1e308]]
        x_clipped, n_clip = clip_to_ball(x.copy(), far.cfg.center_vec, far.cfg.radius)
        assert n_clip == N_TICK and np.all(np.linalg.norm(x_clipped, axis=1) <= far.cfg.radius)
        a, b = far.step(x), ref.step(x_clipped)
        assert far.e.state_size() == ref.e.state_size()
        np.testing.assert_array_equal(a.centers, b.centers)
        np.testing.assert_array_equal(a.coreset_weights, b.coreset_weights)
    assert far.e.n_clipped == T * N_TICK and ref.e.n_clipped == 0
    assert far.states == ref.states
    far.summary("radius growing to 1e300")


def test_a_burst_of_a_million_points_in_one_tick(seed, flavour):
    """1e6 points (d = 2) in tick 20 of 64: the sparse vector fires in that tick, A summarises the
    burst, and the state (and the peak) stay under the bound and back at the usual size."""
    T, burst_tick, n_burst = 64, 20, 1_000_000
    rng = np.random.default_rng(3)
    mon = Monitor(make_flavoured(seed, flavour, horizon_ticks=T))
    base = Monitor(make_flavoured(seed, flavour, horizon_ticks=T))
    centers = np.array([[4.0, 4.0], [-4.0, 3.0], [1.0, -5.0]])
    for t in range(1, T + 1):
        x = centers[rng.integers(0, 3, 300)] + rng.normal(scale=0.6, size=(300, 2))
        base.step(x)
        if t == burst_tick:
            x = np.concatenate([x, centers[rng.integers(0, 3, n_burst)] + rng.normal(size=(n_burst, 2))])
        mon.step(x)
        if t == burst_tick:
            at_burst = mon.e.state_size()
            # the burst went through A in its own tick: nothing near 1e6 rows is kept
            assert mon.e.mr.buffered() <= mon.cfg.n_rings * (mon.e.block_size + 2 * mon.e.plan.svt_scale
                                                                * math.log(mon.cfg.n_rings * T / BETA))
            assert at_burst < n_burst / 50
    e = mon.e
    assert e.peak_state <= state_bound(e, mon.n_f)
    # afterwards the state is the usual size: that of the same stream without the burst, but for the release
    # fit's own sample (≤ s_B points, checked tick by tick): the burst's epoch released 10× more points than
    # the base's, and the fit sample is drawn from them as the release coreset is
    after = [s - f for s, f in zip(mon.states, mon.fit_floats)][burst_tick:]
    assert max(after) <= 2 * base.max_state, (max(after), base.max_state)
    assert mon.states[-1] <= 2 * base.states[-1] + 1000, (mon.states[-1], base.states[-1])
    mon.summary(f"burst (state at the burst tick {at_burst}, without the burst at most {base.max_state})")


def test_long_silences_only_the_first_and_last_ticks_hold_data(seed):
    """T = 4096 with data in ticks 1 and T only: every mechanism still advances on the 4094 empty
    ticks (sparse-vector fires on noise, epoch changes on the doubling schedule) without growing."""
    T = 4096
    mon = Monitor(make_engine(seed, horizon_ticks=T, block_size=2000, epoch_schedule="doubling"))
    rng = np.random.default_rng(5)
    empty = np.zeros((0, 2))
    for t in range(1, T + 1):
        mon.step(rng.normal(scale=3.0, size=(2000, 2)) if t in (1, T) else empty)
    e = mon.e
    assert e.t == T and e.epoch <= int(math.log2(T)) + 1
    silent = mon.states[1:-1]
    # no drift across the silence: the last quarter of it is no larger than the usual size
    assert max(silent[-1000:]) <= 1.5 * max(silent[:1000]), (max(silent[-1000:]), max(silent[:1000]))
    mon.summary("long silences")


def test_clip_of_a_point_whose_norm_overflows_lands_on_the_boundary():
    """Found by the growing-radius stream: ‖x − c‖ > 1.8e308 (finite coordinates) used to send the
    point to the center instead of onto the boundary."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        y, n = clip_to_ball(np.array([[1.3e308, 1.3e308], [1.7e308, -1.7e308]]), np.zeros(2), 10.0)
    assert n == 2
    np.testing.assert_allclose(y, [[10 / math.sqrt(2)] * 2, [10 / math.sqrt(2), -10 / math.sqrt(2)]], rtol=1e-9)


def test_the_pickled_engine_is_as_small_as_its_state_after_a_big_tick(seed):
    """Found by the burst stream: Engine.last_ring (a tracer field, one int64 per point of the last tick,
    not counted by state_size()) used to be pickled into the Beam job's state."""
    import pickle

    e = make_engine(seed, horizon_ticks=8)
    e.step(np.random.default_rng(0).normal(size=(200_000, 2)))
    # 8 bytes a float, and a generous allowance for the pickle's own structure
    assert len(pickle.dumps(e)) <= 8 * e.state_size() + 200_000


def test_the_pickled_engine_grows_only_with_its_state_over_epoch_changes(seed):
    """Found on a default engine at d = 100: the release the next epoch's rings were drawn from (read only by
    ``part_fire_rate``, not counted by state_size()) was kept, and pickled, after every epoch change; and so
    was the sample the release's centers are fitted to once a second epoch's weight decays (the default
    ``release_epoch_decay``), until state_size() counted it. What a pickle holds beyond the state's floats
    (the objects' structure) must stay about what it was at the first tick."""
    import pickle

    d, k, T = 100, 10, 30
    e = Engine(EngineConfig(n_clusters=k, dim=d, radius=30.0, epsilon=1.0, horizon_ticks=T), seed)
    assert e.cfg.release_epoch_decay < 1  # the default: the centers have a fit sample of their own
    rng = np.random.default_rng(0)
    C = rng.normal(size=(k, d)) * 5
    extra = []
    for _ in range(T):
        e.step(C[rng.integers(0, k, 1000)] + rng.normal(size=(1000, d)))
        extra.append(len(pickle.dumps(e)) - 8 * e.state_size())
    assert e.epoch >= 2
    # a release coreset of even 10 points at d = 100 is 8,080 bytes
    assert max(extra) - extra[0] < 8_000, extra


@pytest.mark.parametrize("options", [{}, dict(cells_locate_dims=1, cells_lloyd_steps=2, cells_lloyd_share=0.3),
                                     dict(part_fire=3.0), dict(part_fire=3.0, part_fire_rate=2.0)])
def test_the_bound_holds_with_cells(seed, options):
    """tree_cells: the blocks hold raw points until A and A releases k cells per part (the plan's terms);
    located in a projection, a block holds the projection's draws too; with ``part_fire`` the sparse vector
    holds a count and a threshold per (ring, part) too, and with ``part_fire_rate`` a share per (ring, part)."""
    mon = Monitor(make_flavoured(seed, "defaults", horizon_ticks=32, tree_cells=0.5, **options))
    rng = np.random.default_rng(1)
    for t in range(32):
        mon.step(rng.normal(scale=3.0, size=(N_TICK, 2)) + (t % 3) * 2.0)
    assert mon.e.epoch >= 1  # epochs closed: blocks released through A with cells
    mon.summary("cells")
