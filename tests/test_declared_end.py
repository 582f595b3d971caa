"""A stream whose end the user declares: ``partial_fit(X, last=True)``, ``finish()``, ``Engine.step(x, last=True)``.

Under ``partial_fit``'s default horizon a short stream's pending blocks never reach A, and its releases
leave them out. A user who knows the stream has ended (a file read chunk by chunk, a drained source)
declares it, and the declared tick is final as the horizon's is. What must hold (P20):

* every point enters exactly one A call, the end flush included, and a ring releases at most once per
  tick (a ring that fired at the end tick is not flushed again): broken variants — an end that does not
  flush, a flush that re-releases a ring that fired — are caught;
* the plan does not change, and the blocks an early end releases stay inside the run-wide union bound
  that sets A's count threshold (at most T blocks per ring and epoch, at most E_max epochs);
* nothing is accepted after the end (the estimator, the engine and an unbounded run sequence refuse
  it: no silent new run); ``fit`` or a new estimator starts a new stream;
* the end flush draws the same noise keys whether or not a record waits in a ring (P15);
* the final release is post-processing of released sets alone (a replay reproduces it), the releases
  before the end tick are those of an undeclared run, and an end declared at T changes nothing.
"""
from __future__ import annotations

import numpy as np
import pytest

import dpstream.epochs as epochs_mod
import dpstream.merge_reduce as mr_mod
from dpstream import DPStreamClusterer, Engine, EngineConfig, StreamEnded, release_step, rules
from dpstream.epochs import EpochPlanner
from dpstream.privacy import PrivacyPlan
from dpstream.run_setup import RunSetup
from dpstream.runs import RunSequence

from streams import record_ring_releases, three_blob_ticks  # tests/streams.py
from test_noise_key_audit import _flush_only_nonempty_rings  # the same broken flush, audited there too

pytestmark = pytest.mark.filterwarnings("ignore::dpstream.noise.UnsafeSeedWarning")

SEED = bytes(range(32))


def _cfg(**kw):
    base = dict(n_clusters=3, dim=2, radius=20.0, epsilon=1.0, delta=1e-6, horizon_ticks=1024, block_size=150)
    base.update(kw)
    return EngineConfig(**base)


def _ticks(n_ticks=14, seed=3):
    return three_blob_ticks(seed, [60 + 7 * t for t in range(n_ticks)])


def _run_to_end(cfg, ticks, t_end):
    e = Engine(cfg, SEED)
    e.A.record_calls = True
    rels = [e.step(x, last=t == t_end) for t, x in enumerate(ticks[:t_end], start=1)]
    return e, rels


def _problems(e, seen, n_points, t_end) -> list:
    """What an end at ``t_end`` broke: points left out of A, a block released twice, a ring twice in a tick."""
    out = []
    if e.mr.buffered():
        out.append(f"{e.mr.buffered()} points never reached A")
    if sum(m for _, m in e.A.calls) != n_points:
        out.append("the A calls do not hold each point exactly once")
    keys = [k for k, _ in e.A.calls]
    if len(keys) != len(set(keys)):
        out.append("a block was released twice")
    if len(seen) != len(set(seen)):
        out.append("a ring released twice in one tick")
    if not any(t == t_end for t, _, _ in seen):
        out.append("nothing was released at the end tick")
    return out


def _fire_tick(monkeypatch, cfg, ticks):
    """A tick, after the first, at which some ring fires and some other ring still holds a pending block
    (an undeclared run: the releases before a declared end are the same, so it fires there too)."""
    seen = record_ring_releases(monkeypatch)
    e = Engine(cfg, SEED)
    flushed = set()
    for t, x in enumerate(ticks, start=1):
        last = e.last_flush
        e.step(x)
        if e.last_flush == t and last != t:
            flushed.add(t)
    fires = sorted({t for t, _, _ in seen} - flushed - {1})
    seen.clear()
    assert fires, "the stream must make a ring fire between flushes"
    return fires[-1]


@pytest.mark.parametrize("broken", [None, "end_without_flush", "flush_a_ring_that_fired"])
def test_each_point_enters_one_a_call_with_the_end_flush(monkeypatch, broken):
    cfg = _cfg()
    ticks = _ticks()
    t_end = _fire_tick(monkeypatch, cfg, ticks)
    if broken == "end_without_flush":
        orig = epochs_mod.EpochSchedule.step
        monkeypatch.setattr(epochs_mod.EpochSchedule, "step",
                            lambda self, t, c, n, ch=False, end=False: orig(self, t, c, n, ch))
    elif broken == "flush_a_ring_that_fired":
        def flush(self, tick, *a):
            for r in self.rings:
                r.release_block(tick, *a)
            self.fires += 1
            self.version += 1
        monkeypatch.setattr(mr_mod.EpochMergeReduce, "flush", flush)
    seen = record_ring_releases(monkeypatch)
    e, _ = _run_to_end(cfg, ticks, t_end)
    problems = _problems(e, seen, sum(len(x) for x in ticks[:t_end]), t_end)
    assert (problems == []) == (broken is None), problems
    if broken == "end_without_flush":
        assert "points never reached A" in problems[0]
    elif broken:
        assert problems == ["a ring released twice in one tick"]


@pytest.mark.parametrize("T", [16, 1024])
def test_an_early_end_stays_inside_the_plan_and_the_run_wide_bound(monkeypatch, T):
    """The plan is built before any tick and the end is not an input of it; what an early end adds is
    one release per ring at the end tick, which the run-wide union bound of A's count threshold
    already counts (one per ring per tick, ≤ T per ring and epoch, ≤ E_max epochs): the shares of the
    blocks released sum to ≤ 1 (the β of the phantom-mass bound), and the ledger's total ≤ ε."""
    ticks = _ticks(n_ticks=14)
    for t_end in (1, 6, 14):
        cfg = _cfg(horizon_ticks=T)
        seen = record_ring_releases(monkeypatch)
        e, rels = _run_to_end(cfg, ticks, t_end)
        assert rels[-1].plan.to_dict() == PrivacyPlan.build(cfg).to_dict() == e.plan.to_dict()
        assert e.plan.total_epsilon <= cfg.epsilon + 1e-9
        keys = [k for k, _ in e.A.calls]
        assert all(k[0] == "A" and 0 <= k[1] < rules.max_epochs(T) and 0 <= k[3] < T for k in keys)
        assert sum(1.0 / e.A.run_wide_blocks(k) for k in keys) <= 1.0
        per_tick = {}
        for t, ep, ring in seen:
            per_tick[(t, ring)] = per_tick.get((t, ring), 0) + 1
        assert max(per_tick.values()) == 1  # across epochs too: one release per ring per tick
        seen.clear()


def test_nothing_is_accepted_after_the_end():
    X = np.vstack(_ticks(n_ticks=6))
    m = DPStreamClusterer(3, epsilon=1.0, radius=20.0, random_state=0, runs=None)
    chunks = np.array_split(X, 6)
    for i, x in enumerate(chunks):
        m.partial_fit(x, last=i == 5)
    rel, n_ticks = m.release_, m.n_ticks_
    with pytest.raises(StreamEnded, match="declared ended at tick 6"):
        m.partial_fit(chunks[0])
    with pytest.raises(StreamEnded):
        m.partial_fit(chunks[0], last=True)
    with pytest.raises(StreamEnded):
        m.finish()
    assert m.release_ is rel and m.n_ticks_ == n_ticks and m.engine_.t == 6
    # fit restarts: a new stream, from tick 1
    m.fit(X)
    assert m.n_ticks_ == 1 and m.release_.tick == 1
    # the engine and an unbounded run sequence refuse too (no silent new run)
    e = Engine(_cfg(), SEED)
    e.step(chunks[0], last=True)
    with pytest.raises(StreamEnded):
        e.step(chunks[1])
    seq = RunSequence(_cfg(horizon_ticks=2, runs=None), SEED)
    seq.step(chunks[0])
    seq.step(chunks[1], last=True)
    with pytest.raises(StreamEnded):
        seq.step(chunks[2])
    assert seq.run == 0


def test_finish_is_an_empty_last_tick_and_does_nothing_at_the_horizon():
    chunks = _ticks(n_ticks=5)
    a = DPStreamClusterer(3, epsilon=1.0, radius=20.0, random_state=1)
    b = DPStreamClusterer(3, epsilon=1.0, radius=20.0, random_state=1)
    for x in chunks:
        a.partial_fit(x)
        b.partial_fit(x)
    a.finish()
    b.partial_fit(np.zeros((0, 2)), last=True)
    assert a.n_ticks_ == 6 and a.release_.to_dict() == b.release_.to_dict()
    # at the horizon T the run has already flushed: finish adds no tick and changes no release
    c = DPStreamClusterer(3, epsilon=1.0, radius=20.0, random_state=1, horizon_ticks=5, runs=None)
    for x in chunks:
        c.partial_fit(x)
    before = c.release_
    c.finish()
    assert c.release_ is before and c.n_ticks_ == 5
    with pytest.raises(StreamEnded):
        c.partial_fit(chunks[0])  # not a rollover into run 1
    with pytest.raises(ValueError, match="nothing to finish"):
        DPStreamClusterer(3, radius=20.0).finish()
    # fit under a longer horizon: finish releases what waits; under its own horizon there is nothing to add
    X = np.vstack(chunks)
    d = DPStreamClusterer(3, epsilon=1.0, radius=20.0, random_state=1, horizon_ticks=50, tick_size=100).fit(X)
    waiting = d.engine_.mr.buffered()
    d.finish()
    assert waiting > 0 and d.engine_.mr.buffered() == 0 and d.n_ticks_ == -(-len(X) // 100) + 1
    d = DPStreamClusterer(3, epsilon=1.0, radius=20.0, random_state=1, tick_size=100).fit(X)
    before = d.release_
    assert d.finish().release_ is before


def test_the_end_release_is_a_replay_of_released_sets_and_the_past_is_unchanged():
    cfg = _cfg()
    ticks = _ticks()
    t_end = 11
    e, rels = _run_to_end(cfg, ticks, t_end)
    # nothing raw is pending, and the final release is B and a k-means fit of the released sets alone
    assert e.mr.buffered() == 0
    replay = release_step.release(cfg, e.noise, e.epoch_coresets, e.mr.released(), e.epoch, t_end)
    assert np.array_equal(replay.centers, rels[-1].centers)
    assert np.array_equal(replay.coreset.points, rels[-1].coreset_points)
    assert np.array_equal(replay.coreset.weights, rels[-1].coreset_weights)
    # the declaration changes no earlier release
    plain = Engine(cfg, SEED)
    before = [plain.step(x).to_dict() for x in ticks[:t_end]]
    assert [r.to_dict() for r in rels[:-1]] == before[:-1]
    # an end declared at T is the horizon's own end: the same releases
    short = _cfg(horizon_ticks=t_end)
    x_end = [r.to_dict() for r in _run_to_end(short, ticks, t_end)[1]]
    plain = Engine(short, SEED)
    assert x_end == [plain.step(x).to_dict() for x in ticks[:t_end]]


def test_a_declared_end_releases_what_arrived_under_the_default_horizon():
    """17 ticks under partial_fit's default horizon (1,024), blocks too large to fire and no second epoch
    (as a small data set's run): without the end, the last release holds only what the flush ticks
    released; with it, every point (ε large: the whole mass)."""
    rng = np.random.default_rng(0)
    X = np.r_[rng.normal(size=(850, 2)) + 8, rng.normal(size=(850, 2)) - 8]
    rng.shuffle(X)
    weights = {}
    for declared in (False, True):
        m = DPStreamClusterer(2, epsilon=1e6, radius=20.0, random_state=1, first_epoch_blocks=1e6,
                              block_size=10**6, flush_schedule="first")
        chunks = np.array_split(X, 17)
        for i, x in enumerate(chunks):
            m.partial_fit(x, last=declared and i == 16)
        assert m.release_.plan.horizon_ticks == 1024 and m.release_.epoch == 0
        weights[declared] = m.release_.coreset_weights.sum()
    assert weights[False] <= 1.2 * 100
    assert 0.95 * 1700 <= weights[True] <= 1.05 * 1700


def test_the_planner_makes_the_declared_end_final():
    """The Beam job's epoch schedule (EpochPlanner) takes the same declared end: final and flushed, no
    epoch change, the ticks before it as without the end."""
    cfg = _cfg(bicriteria=False, epoch_schedule="horizon", flush_schedule="count")
    counts = [len(x) for x in _ticks()]
    plans = {}
    for end in (None, 9):
        p = EpochPlanner(RunSetup(cfg, SEED))
        plans[end] = [p.step(n, end=t == end) for t, n in enumerate(counts[:9], start=1)]
    no_f = lambda p: p._replace(candidates=None)  # noqa: E731 (all but F's array)
    assert [no_f(p) for p in plans[9][:-1]] == [no_f(p) for p in plans[None][:-1]]
    last = plans[9][-1]
    assert last.final and last.flush and not last.adopt
    assert not plans[None][-1].final


def _keys_and_shapes(cfg, ticks, t_end, x=None):
    e = Engine(cfg, SEED, trace=True)
    shapes = []
    for t, P in enumerate(ticks[:t_end], start=1):
        if x is not None and t == x[0]:
            P = np.r_[P, np.asarray(x[1], float)[None, :]]
        r = e.step(P, last=t == t_end)
        shapes.append((r.tick, r.epoch, r.coreset_points.shape, r.centers.shape))
    return e.noise.keys, shapes


@pytest.mark.parametrize("broken", [False, True])
def test_the_end_flush_draws_the_same_noise_keys_with_or_without_a_record(monkeypatch, broken):
    """Noise-key audit of the end (P15): a record x alone in its ring just before a declared end (its block
    goes through A only at the end flush) changes no key the run draws nor any release's shape; an end
    flush that skipped empty rings would reveal x's ring (broken variant, caught)."""
    if broken:
        _flush_only_nonempty_rings(monkeypatch)
    cfg = _cfg(n_clusters=2, radius=10.0, horizon_ticks=64, semicoreset="snap", block_size=10_000)
    rng = np.random.default_rng(11)
    means = np.array([[4.0, 4.0], [-4.0, 3.0]])
    ticks = [means[rng.integers(0, 2, 120)] + rng.normal(scale=0.6, size=(120, 2)) for _ in range(12)]
    k0, s0 = _keys_and_shapes(cfg, ticks, 12)
    k1, s1 = _keys_and_shapes(cfg, ticks, 12, x=(11, (0.15, -0.2)))
    assert sum(k0.values()) > 100
    assert (k0 == k1 and s0 == s1) == (not broken)
