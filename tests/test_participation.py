"""Participation counts with a tracer record (P9).

One extra record x is added to one tick; two engines run under the same seed,
with and without it.  What x may touch, per the plan:

* the bicriteria: exactly Q·(L+1)·R (tree, level, rep) counter instances, each
  in exactly one bucket row, by the vector (1, bits(cell of x)), so ℓ1 = 1 +
  popcount(id) ≤ 1 + B_ℓ with B_ℓ = d·b_ℓ (one *merged* vector counter: no ×2);
* exactly one sparse-vector instance (one ring of one epoch), by +1 at x's tick, and
  with ``part_fire`` (the default) exactly one instance of the part sparse vector (one
  part of that ring), by +1 at x's tick;
* exactly one level-0 block (the block of its ring, :mod:`dpstream.blocks`), which
  black box A releases at most once (exactly once here: the run ends at the
  horizon, whose flush sends every pending block through A);
* the stream counter (the default configuration, without the bicriteria): +1 in
  its one coordinate from x's tick on;
* and ``PrivacyPlan.participation`` states exactly these numbers.

The engine's *exact* counters are a function of the data alone, so their
difference is x's contribution at every tick.  Everything the two runs release
after x's A call legitimately differs (different DP outputs feed back through
the released centers), so the A-call comparison stops at x's call; up to it the
runs agree for the fixed seeds used here (a one-record change could flip a noisy
decision with small probability — these seeds were checked not to).

Each check is shown to catch a deliberately broken engine (``BROKEN`` cases).
"""
from __future__ import annotations

import dataclasses

import math

import numpy as np
import pytest

import dpstream.blocks as blocks_mod
import dpstream.counters as counters_mod
import dpstream.engine as engine_mod
import dpstream.merge_reduce as mr_mod
import dpstream.semicoresets as sc_mod
import dpstream.sparse_vector as svt_mod
import dpstream.bicriteria as bic_mod
import dpstream.privacy as privacy_mod
from dpstream import Engine, EngineConfig

pytestmark = pytest.mark.filterwarnings("ignore::dpstream.noise.UnsafeSeedWarning")



SEED = bytes(range(32))
N_TICKS = 12
T0 = 5  # tick of the tracer (1-based)


def _stream(seed: int = 7, n_ticks: int = N_TICKS, per_tick: int = 100):
    rng = np.random.default_rng(seed)
    X = np.r_[rng.normal(scale=0.8, size=(n_ticks * per_tick // 2, 2)) + [3.0, 3.0],
              rng.normal(scale=0.8, size=(n_ticks * per_tick - n_ticks * per_tick // 2, 2)) + [-4.0, 2.0]]
    rng.shuffle(X)
    return np.array_split(X, n_ticks)


def _cfg(**kw):
    base = dict(n_clusters=2, dim=2, radius=10.0, epsilon=1.0, delta=1e-6, horizon_ticks=N_TICKS,
                grid_levels=3, n_trees=2, n_reps=2, block_size=150, n_rings=6, tree_depth=4, bicriteria=True,
                privacy_split=(0.1, 0.05, 0.85))
    base.update(kw)
    return EngineConfig(**base)


# -- instrumentation (installed per test with monkeypatch, removed afterwards) -------------

_LOG = {"adds": [], "releases": [], "svt": [], "restarts": []}  # of the engine run in progress


def _install_spies(monkeypatch):
    orig_release = sc_mod.Semicoreset.release
    # test: every tick's query of every instance (step calls it, and so does the part sparse vector's
    # tick, which restarts the ring and part instances itself)
    orig_svt = svt_mod.LevelZeroAboveThreshold.test
    orig_restart = svt_mod.LevelZeroAboveThreshold.restart

    def spy_add(orig):
        def add(self, x, part):
            if not _LOG.get("in_release"):  # A's own working copy of a block it releases is not a block
                _LOG["adds"].append((self, np.array(x, dtype=float, copy=True)))
            return orig(self, x, part)
        return add

    def spy_release(self, block, key, *a):
        _LOG["releases"].append((block, key, int(block.n)))
        _LOG["in_release"] = True
        try:
            return orig_release(self, block, key, *a)
        finally:
            _LOG["in_release"] = False

    def spy_svt(self, tick, arrivals, raise_by=None):
        fired = orig_svt(self, tick, arrivals, raise_by)
        _LOG["svt"].append((self.key, tick, np.array(arrivals, dtype=np.int64), np.array(fired)))
        return fired

    def spy_restart(self, tick, mask, tag=()):
        _LOG["restarts"].append((self.key, tick, tuple(tag), np.array(mask, dtype=bool)))
        return orig_restart(self, tick, mask, tag)

    for cls in (blocks_mod.LeafSketch, blocks_mod.RawBlock):
        monkeypatch.setattr(cls, "add", spy_add(cls.add))
    monkeypatch.setattr(sc_mod.Semicoreset, "release", spy_release)
    monkeypatch.setattr(svt_mod.LevelZeroAboveThreshold, "test", spy_svt)
    monkeypatch.setattr(svt_mod.LevelZeroAboveThreshold, "restart", spy_restart)


def _run(cfg, ticks, tracer=None, t0=T0, seed=SEED):
    global _LOG
    _LOG = {"adds": [], "releases": [], "svt": [], "restarts": []}
    e = Engine(cfg, seed, trace=True)
    e.A.record_calls = True
    e.log = _LOG
    exact_t0 = ring_t0 = None
    for t, P in enumerate(ticks, 1):
        if tracer is not None and t == t0:
            P = np.r_[P, np.asarray(tracer, float)[None, :]]
        e.step(P)
        if t == t0:
            exact_t0 = (e.bic.counter if e.bic is not None else e.counter).exact.copy()
            ring_t0 = int(e.last_ring[-1])  # the tracer is the tick's last row
            e.svt_count_t0 = (e.epoch, e.mr.svt.count.copy())
    return e, exact_t0, ring_t0


def observe(cfg, tracer, ticks=None, t0=T0, seed=SEED):
    ticks = _stream() if ticks is None else ticks
    e0, ex0, _ = _run(cfg, ticks, None, t0, seed)
    e1, ex1, ring_t0 = _run(cfg, ticks, tracer, t0, seed)
    clipped, _ = engine_mod.clip_to_ball(np.asarray(tracer, float)[None, :].copy(), cfg.center_vec, cfg.radius)
    return dict(cfg=cfg, e0=e0, e1=e1, ex0=ex0, ex1=ex1, clipped=clipped[0], t0=t0, ring_t0=ring_t0)


def tracer_blocks(obs):
    """The distinct level-0 blocks whose input held the tracer's (unique) coordinates."""
    c = obs["clipped"]
    blocks = []
    for b, x in obs["e1"].log["adds"]:
        if x.size and np.any(np.all(x == c, axis=1)) and not any(b is o for o in blocks):
            blocks.append(b)
    return blocks


# -- independent expectations ------------------------------------------------------------

def expected_bits_per_coord(cfg, level):
    """b_ℓ from P10, recomputed here (not read from the config)."""
    g = 2.0 * cfg.radius / 2.0 ** level
    values = math.floor((cfg.radius + g) / g) - math.floor(-cfg.radius / g) + 1
    return max(1, math.ceil(math.log2(values)))


def expected_cell_bits(cfg, shift_q, level, x_centered):
    g = 2.0 * cfg.radius / 2.0 ** level
    s = np.mod(shift_q, g)
    cid = np.floor((x_centered + s) / g).astype(np.int64) - math.floor(-cfg.radius / g)
    b = expected_bits_per_coord(cfg, level)
    assert np.all(cid >= 0) and np.all(cid < 2 ** b), "tracer cell id outside its calibrated bits"
    return np.array([(int(c) >> m) & 1 for c in cid for m in range(b)], dtype=np.int64)


# -- the checks ---------------------------------------------------------------------------

def check_bicriteria(obs):
    cfg, e1 = obs["cfg"], obs["e1"]
    Q, L, R, w = cfg.n_trees, cfg.grid_levels, cfg.n_reps, cfg.buckets
    for diff in (obs["ex1"] - obs["ex0"], obs["e1"].bic.counter.exact - obs["e0"].bic.counter.exact):
        touched = 0
        off = 0
        for q in range(Q):
            for lv in range(L):
                B = cfg.dim * expected_bits_per_coord(cfg, lv)
                assert cfg.id_bits(lv) == B, "config's id bits disagree with P10's formula"
                width = 1 + B
                for r in range(R):
                    block = diff[off:off + w * width].reshape(w, width)
                    off += w * width
                    rows = np.flatnonzero(np.any(block != 0, axis=1))
                    assert rows.size == 1, f"(tree {q}, level {lv}, rep {r}): tracer changed {rows.size} buckets"
                    row = block[rows[0]]
                    want = np.r_[1, expected_cell_bits(cfg, e1.bic.grids.shift[q], lv, obs["clipped"] - cfg.center_vec)]
                    np.testing.assert_array_equal(row, want, err_msg=f"(tree {q}, level {lv}, rep {r})")
                    assert np.abs(row).sum() <= 1 + B
                    touched += 1
        assert off == diff.size, "counter vector has blocks beyond Q·(L+1)·R"
        assert touched == Q * L * R
    return Q * L * R


def check_counter(obs):
    """The stream counter: exactly one more point, from the tracer's tick on."""
    e0, e1 = obs["e0"], obs["e1"]
    assert e0.bic is None and e1.counter is not None
    np.testing.assert_array_equal(obs["ex1"] - obs["ex0"], [1])
    np.testing.assert_array_equal(e1.counter.exact - e0.counter.exact, [1])
    return 1


def check_svt(obs):
    """Arrivals of every SVT instance agree except one (instance, tick=t0, ring) entry of the ring sparse
    vector, by +1, and (``part_fire``) one entry of the part sparse vector, by +1, in the same ring's parts.
    Returns the instances the tracer entered: (ring ones, part ones)."""
    log0, log1 = obs["e0"].log["svt"], obs["e1"].log["svt"]
    t0 = obs["t0"]
    upto0 = [r for r in log0 if r[1] <= t0]
    upto1 = [r for r in log1 if r[1] <= t0]
    assert [(k, t) for k, t, _, _ in upto0] == [(k, t) for k, t, _, _ in upto1]
    diffs = {"svt": [], "part-svt": []}
    for (k, t, a0, f0), (_, _, a1, f1) in zip(upto0, upto1):
        d = a1 - a0
        for i in np.flatnonzero(d):
            diffs[k[0]].append((k, t, int(i), int(d[i]), d.size))
        if t < t0:
            np.testing.assert_array_equal(f0, f1)
    ring_diffs, part_diffs = diffs["svt"], diffs["part-svt"]
    assert len(ring_diffs) == 1, f"tracer entered {len(ring_diffs)} sparse-vector (instance, ring) counts: {ring_diffs}"
    k, t, ring, dv, _ = ring_diffs[0]
    assert t == t0 and dv == 1
    assert ring == obs["ring_t0"], "the SVT count that moved is not the tracer's ring"
    on = bool(obs["cfg"].part_fire)
    assert len(part_diffs) == (1 if on else 0), (
        f"tracer entered {len(part_diffs)} part sparse-vector (instance, ring, part) counts: {part_diffs}")
    if on:
        _, tp, cell, dp, size = part_diffs[0]
        assert tp == t0 and dp == 1
        assert cell // (size // obs["cfg"].n_rings) == ring, "the part count that moved is not in the tracer's ring"
    # the instances' running counts right after t0: one ring ahead by one, unless it restarted at t0
    # (its count or a part's fired: then both runs' counts are 0), and no other difference
    (ep0, c0), (ep1, c1) = obs["e0"].svt_count_t0, obs["e1"].svt_count_t0
    restarted = [m for kk, tt, tag, m in obs["e1"].log["restarts"] if tt == t0 and kk == k and tag == ()]
    if ep0 == ep1 and k == ("svt", ep1):  # the tracer's instance is still the open epoch's
        d = c1 - c0
        want = np.zeros_like(d)
        want[ring] = 0 if restarted[0][ring] else 1
        np.testing.assert_array_equal(d, want, err_msg="SVT counts after the tracer's tick")
    return 1, len(part_diffs)


def check_semicoreset(obs):
    """The tracer (its clipped coordinates are unique) entered exactly one level-0 block, which
    A released exactly once; the runs' A releases agree up to that one, which holds one more point."""
    blocks = tracer_blocks(obs)
    assert len(blocks) == 1, f"tracer entered {len(blocks)} level-0 blocks"
    rel1 = obs["e1"].log["releases"]
    hits = [i for i, (b, _, _) in enumerate(rel1) if b is blocks[0]]
    assert len(hits) == 1, f"the tracer's block was released by A {len(hits)} times"
    j = hits[0]
    calls0, calls1 = obs["e0"].A.calls, obs["e1"].A.calls
    assert len(calls1) == len(rel1)
    assert calls0[:j] == calls1[:j]
    assert calls0[j][0] == calls1[j][0] and calls1[j][1] == calls0[j][1] + 1
    return 1


def check_plan(obs, n_bic, n_svt, n_a, n_cnt, n_part=0):
    part = obs["e1"].plan.participation
    cfg = obs["cfg"]
    assert part["bicriteria_counter_instances"] == n_bic == (
        cfg.n_trees * cfg.grid_levels * cfg.n_reps if cfg.bicriteria else 0)
    assert part["stream_counter_instances"] == n_cnt
    assert part["sparse_vector_instances"] == n_svt == 1
    assert part.get("part_sparse_vector_instances", 0) == n_part == (1 if cfg.part_fire else 0)
    assert part["semicoreset_calls_at_most"] == 1 and n_a <= 1


def check_all(obs):
    n_bic = check_bicriteria(obs) if obs["cfg"].bicriteria else 0
    n_cnt = 0 if obs["cfg"].bicriteria else check_counter(obs)
    n_svt, n_part = check_svt(obs)
    n_a = check_semicoreset(obs)
    check_plan(obs, n_bic, n_svt, n_a, n_cnt, n_part)


# -- the tests ----------------------------------------------------------------------------

CASES = [
    # (config overrides, tracer): an otherwise empty region, a far point (clipped), the boundary
    (dict(n_trees=2, n_reps=2, grid_levels=3, semicoreset="tree"), (-7.0, -6.5)),
    (dict(n_trees=2, n_reps=2, grid_levels=3, semicoreset="tree", neighbouring="add_remove"), (250.0, -40.0)),
    (dict(n_trees=1, n_reps=1, grid_levels=4, semicoreset="lloyd"), (0.0, -10.0)),
    (dict(n_trees=3, n_reps=1, grid_levels=2, semicoreset="snap"), (3.1, 2.9)),
    (dict(n_trees=1, n_reps=3, grid_levels=2, semicoreset="tree", delta=0.0), (6.0, -7.0)),
    # the defaults: no bicriteria, the stream counter, rings around the released centers
    (dict(bicriteria=False, privacy_split=EngineConfig.privacy_split), (-7.0, -6.5)),
    (dict(bicriteria=False, privacy_split=EngineConfig.privacy_split, semicoreset="lloyd", delta=0.0), (3.1, 2.9)),
    # exact ring boundaries (no tolerance): a clipped tracer sits on the ball's sphere, a boundary
    (dict(bicriteria=False, privacy_split=EngineConfig.privacy_split, ring_tolerance=0.0), (250.0, -40.0)),
    # A with cells: the block keeps raw points (tests/test_tree_cells.py counts the queries inside A)
    (dict(bicriteria=False, privacy_split=EngineConfig.privacy_split, tree_cells=0.5), (-7.0, -6.5)),
    # coarse epochs left out of the release fit (post-processing: A's calls are the default's)
    (dict(bicriteria=False, privacy_split=EngineConfig.privacy_split, release_min_points=1.5), (-7.0, -6.5)),
    # without the part sparse vector: the ring one alone
    (dict(bicriteria=False, privacy_split=EngineConfig.privacy_split, part_fire=0.0), (-7.0, -6.5)),
    (dict(n_trees=2, n_reps=2, grid_levels=3, semicoreset="tree", part_fire=0.0), (3.1, 2.9)),
]


@pytest.mark.parametrize("over,tracer", CASES, ids=[f"case{i}" for i in range(len(CASES))])
def test_tracer_participation(monkeypatch, over, tracer):
    _install_spies(monkeypatch)
    obs = observe(_cfg(**over), tracer)
    check_all(obs)


def test_tracer_bic_and_mr_see_the_same_clipped_point(monkeypatch):
    """P10: the bicriteria and merge-reduce use the same clipped point."""
    _install_spies(monkeypatch)
    cfg = _cfg(block_size=10_000)  # no fire before the horizon flush
    obs = observe(cfg, (300.0, 400.0))
    c = obs["clipped"]
    assert np.linalg.norm(c - cfg.center_vec) <= cfg.radius
    assert np.allclose(c, [6.0, 8.0], atol=1e-9)
    # the tracer's level-0 block held exactly that point
    assert len(tracer_blocks(obs)) == 1
    check_bicriteria(obs)  # bits computed from the same clipped c


# -- broken engines: each check must catch its leak ---------------------------------------

def _broken_bic_double(monkeypatch):
    orig = bic_mod.BicriteriaDPCenters._update_vector
    monkeypatch.setattr(bic_mod.BicriteriaDPCenters, "_update_vector", lambda self, x: 2 * orig(self, x))


def _broken_bic_extra_level(monkeypatch):
    """A point also counted in a neighbouring bucket (two buckets per instance)."""
    orig = bic_mod.BicriteriaDPCenters._update_vector

    def upd(self, x):
        u = orig(self, x)
        out = u.copy()
        for q, lv, r, off, width in self.blocks:
            blk = u[off:off + self.cfg.buckets * width].reshape(self.cfg.buckets, width)
            out[off:off + blk.size] += np.roll(blk, 1, axis=0).ravel()
        return out

    monkeypatch.setattr(bic_mod.BicriteriaDPCenters, "_update_vector", upd)


def _broken_svt_two_rings(monkeypatch):
    orig = svt_mod.LevelZeroAboveThreshold.test  # already the spy

    def test(self, tick, arrivals, raise_by=None):
        a = np.asarray(arrivals, dtype=np.int64)
        return orig(self, tick, a + np.roll(a, 1), raise_by)

    monkeypatch.setattr(svt_mod.LevelZeroAboveThreshold, "test", test)


def _broken_part_svt_two_parts(monkeypatch):
    """The part sparse vector counts each point in its part and in the next one."""
    orig = svt_mod.LevelZeroAboveThreshold.test  # already the spy

    def test(self, tick, arrivals, raise_by=None):
        a = np.asarray(arrivals, dtype=np.int64)
        return orig(self, tick, a + np.roll(a, 1) if self.key[0] == "part-svt" else a, raise_by)

    monkeypatch.setattr(svt_mod.LevelZeroAboveThreshold, "test", test)


def _broken_a_twice(monkeypatch):
    """A block survives a fire: its points enter A again at the ring's next fire/flush."""
    orig = mr_mod.RingMergeReduce.release_block

    def release_block(self, tick, *a):
        kept = self.block
        orig(self, tick, *a)
        self.block = kept

    monkeypatch.setattr(mr_mod.RingMergeReduce, "release_block", release_block)


def _broken_plan_design_count(monkeypatch):
    """The plan divides ε_bic by Q·(L+1), ignoring R (P9)."""
    orig = privacy_mod.PrivacyPlan.build.__func__

    def build(cls, cfg, test_seed=False):
        p = orig(cls, cfg, test_seed)
        return dataclasses.replace(p, participation=dict(
            p.participation, bicriteria_counter_instances=cfg.n_trees * cfg.grid_levels))

    monkeypatch.setattr(privacy_mod.PrivacyPlan, "build", classmethod(build))


BROKEN = {
    "bic_double_count": (_broken_bic_double, check_bicriteria),
    "bic_two_buckets": (_broken_bic_extra_level, check_bicriteria),
    "svt_two_rings": (_broken_svt_two_rings, check_svt),
    "part_svt_two_parts": (_broken_part_svt_two_parts, check_svt),
    "a_block_reused": (_broken_a_twice, check_semicoreset),
    "plan_ignores_reps": (_broken_plan_design_count, check_all),
    "counter_counts_twice": (None, check_counter),
}


def _broken_counter_twice(monkeypatch):
    """The stream counter adds each point twice."""
    orig = counters_mod.BinaryMechanism.step
    monkeypatch.setattr(counters_mod.BinaryMechanism, "step",
                        lambda self, u: orig(self, None if u is None else 2 * np.asarray(u)))


BROKEN["counter_counts_twice"] = (_broken_counter_twice, check_counter)


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_participation_checks_catch_broken_engines(monkeypatch, name):
    _install_spies(monkeypatch)
    breaker, check = BROKEN[name]
    breaker(monkeypatch)
    cfg = (_cfg(bicriteria=False, privacy_split=EngineConfig.privacy_split, block_size=120)
           if check is check_counter else _cfg(n_trees=2, n_reps=2, grid_levels=3, block_size=120))
    obs = observe(cfg, (-7.0, -6.5))
    with pytest.raises(AssertionError):
        check(obs)
