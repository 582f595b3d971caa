"""The first releases of a stream: the DP-count flush schedule and A's root threshold by block index.

``flush_schedule="count"`` flushes every ring's pending block when the stream's DP count estimate
has grown by ``flush_growth`` times its value at the last flush (and by ``flush_min_blocks``·M).
``root_tail="block"`` takes the union bound of A's root threshold by the block's index within its
(epoch, ring) instead of over all T·I blocks the horizon allows. What must hold:

* the flush ticks are a function of the released DP count estimates, the epoch changes and public
  parameters alone: a replay of the rule over two very different streams under one seed gives the
  engine's flush ticks, and it catches a broken engine that flushes on its exact buffer;
* each point still enters exactly one A call, a ring releases at most once per tick, and the plan
  (ledger) is the same as with the default schedule;
* the root threshold's shares over every block a run can release sum to at most 1 (so at most β
  phantom parts are expected over the run, as with the horizon's bound), an empty stream still
  releases no phantom mass, and a block's threshold depends on its key (DP outputs), never on data.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import dpstream.engine as engine_mod
import dpstream.epochs as epochs_mod
import dpstream.merge_reduce as mr_mod
from dpstream import DPStreamClusterer, Engine, EngineConfig
from dpstream import rules
from dpstream.privacy import PrivacyPlan
from dpstream.run_setup import RunSetup
from dpstream.semicoresets import make_semicoreset

from streams import record_ring_releases, three_blob_ticks  # tests/streams.py

pytestmark = pytest.mark.filterwarnings("ignore::dpstream.noise.UnsafeSeedWarning")

SEED = bytes(range(32))
N_TICKS = 24


def _cfg(**kw):
    base = dict(n_clusters=3, dim=2, radius=20.0, epsilon=1.0, delta=1e-6, horizon_ticks=1024,
                flush_schedule="count", flush_growth=0.5, flush_min_blocks=0.0, first_epoch_blocks=1e6)
    base.update(kw)
    return EngineConfig(**base)


def _run(cfg, ticks, monkeypatch):
    """[(tick, DP count given to the schedule, epoch changed, flushed)] of one engine run."""
    flushed, counts = [], {}
    orig_flush = mr_mod.EpochMergeReduce.flush
    orig_step = epochs_mod.EpochSchedule.step

    def flush(self, tick, *a):
        flushed.append(tick)
        return orig_flush(self, tick, *a)

    def step(self, t, count, *a, **kw):
        counts[t] = count
        return orig_step(self, t, count, *a, **kw)

    monkeypatch.setattr(mr_mod.EpochMergeReduce, "flush", flush)
    monkeypatch.setattr(epochs_mod.EpochSchedule, "step", step)
    e = Engine(cfg, SEED)
    log = []
    for x in ticks:
        before = e.epoch
        e.step(x)
        log.append((e.t, counts[e.t], e.epoch != before, e.t in flushed))
    return e, log


def _replay(cfg, log, block_size, schedule="count"):
    """The ticks the rule flushes at, from the DP counts, the epoch changes and A's public keep threshold
    (the first flush's unit) alone."""
    first = cfg.first_flush_leaves * RunSetup(cfg, SEED).A.leaf_threshold()
    out, last, last_count = [], 0, 0.0
    for t, count, adopted, _ in log:
        if adopted or rules.flush_tick(t, last, schedule, count, last_count, cfg.flush_min_blocks * block_size,
                                       cfg.flush_growth, first):
            out.append(t)
            last, last_count = t, count
    return out


def test_the_count_rule():
    # tick 1 always; then whenever the count grew by half its value at the last flush (and min_count)
    assert rules.flush_tick(1, 0, "count", 0.0, 0.0, 50.0, 0.5)
    assert not rules.flush_tick(2, 1, "count", 140.0, 100.0, 50.0, 0.5)
    assert rules.flush_tick(2, 1, "count", 150.0, 100.0, 50.0, 0.5)
    assert not rules.flush_tick(2, 1, "count", 40.0, 0.0, 50.0, 0.5)  # the floor: min_count
    assert rules.flush_tick(2, 1, "count", 50.0, -30.0, 50.0, 0.5)  # a negative DP count counts as 0
    assert not rules.flush_tick(2, 1, "count", None, 0.0, 0.0, 0.5)  # no DP count: no count flush
    with pytest.raises(ValueError, match="flush_growth"):
        _cfg(flush_growth=0.0)
    with pytest.raises(ValueError, match="root_tail"):
        _cfg(root_tail="tick")


def _dp_counts(cfg, ticks):
    """The DP count estimate of each tick, computed apart from the engine: the run's own stream counter
    (keyed noise from the seed) stepped with each tick's size."""
    counter = _COUNT_COUNTER(RunSetup(cfg, SEED))
    return [float(counter.step(np.array([len(x)], dtype=np.int64))[0]) for x in ticks]


_COUNT_COUNTER = RunSetup.count_counter


class _ExactCounter:
    """A broken stream counter: the exact running count, no noise."""

    def __init__(self):
        self.total = 0

    def step(self, update):
        self.total += int(np.sum(update))
        return np.array([float(self.total)])


@pytest.mark.parametrize("broken", [None, "exact_buffer", "exact_count"])
def test_the_count_flushes_are_a_function_of_dp_counts(monkeypatch, broken):
    """Two streams with nothing in common but the seed: the count the schedule is given at each tick is
    the stream counter's DP estimate (recomputed apart from the engine), and the flush ticks are those
    the rule gives from those counts and the epoch changes alone. Broken engines: one flushes whenever
    the exact buffer passes a size, one gives the schedule the exact running count (an exact count
    deciding a release time either way); the checks catch both."""
    if broken == "exact_buffer":
        orig_step = engine_mod.Engine.step

        def step(self, points, *a, **kw):
            rel = orig_step(self, points, *a, **kw)
            if self.mr is not None and self.mr.buffered() >= 150:
                self.mr.flush(self.t)
            return rel

        monkeypatch.setattr(engine_mod.Engine, "step", step)
    if broken == "exact_count":
        monkeypatch.setattr(RunSetup, "count_counter", lambda self: _ExactCounter())
    cfg = _cfg()
    dense = three_blob_ticks(1, [100] * N_TICKS)
    sparse_ = three_blob_ticks(2, [0, 3, 0, 70, 5, 0, 0, 200, 1, 0, 0, 0, 90, 0, 0, 4, 0, 0, 0, 0, 300, 0, 7, 0])
    ok = True
    for s in (dense, sparse_):
        e, log = _run(cfg, s, monkeypatch)
        ok &= [count for _, count, _, _ in log] == _dp_counts(cfg, s)
        ok &= [t for t, _, _, fl in log if fl] == _replay(cfg, log, e.block_size)
        if broken is None:  # count flushes beyond tick 1 do occur, without an epoch change
            assert len(_replay(cfg, log, e.block_size)) >= 3 and e.epoch == 0
    if broken is None:  # the sparse stream's empty tick 1 cannot fill a leaf: its first flush waits for the count
        assert _replay(cfg, log, e.block_size)[0] > 1
    assert ok == (broken is None)


def test_every_point_enters_one_a_call_and_a_ring_releases_once_per_tick(monkeypatch):
    cfg = _cfg(block_size=150)
    seen = record_ring_releases(monkeypatch)
    e = Engine(cfg, SEED)
    e.A.record_calls = True
    n = 0
    for x in three_blob_ticks(3, [60 + 7 * t for t in range(N_TICKS)]):
        e.step(x)
        n += len(x)
        keys = [k for k, _ in e.A.calls]
        assert len(keys) == len(set(keys)), "a block was released twice"
        assert sum(m for _, m in e.A.calls) + e.mr.buffered() == n
    assert len(seen) == len(set(seen)), "a ring released twice in one tick"
    assert len({t for t, _, _ in seen}) > 3


def test_the_plan_does_not_depend_on_these_options():
    for kw in (dict(), dict(dim=64, n_clusters=10, radius=64.0), dict(semicoreset="lloyd")):
        a = PrivacyPlan.build(_cfg(root_tail="block", **kw)).to_dict()
        b = PrivacyPlan.build(_cfg(flush_schedule="first", root_tail="horizon", first_flush_leaves=0.0, **kw)).to_dict()
        assert a == b


def test_a_short_stream_under_the_default_horizon_releases_most_of_what_arrived():
    """partial_fit's default horizon and 17 ticks that never open a second epoch nor fill a block: the
    last release's weight reflects ≥ 1/(1 + flush_growth) of the stream (ε large); with the default
    schedule, tick 1's points alone."""
    rng = np.random.default_rng(0)
    X = np.r_[rng.normal(size=(850, 2)) + 8, rng.normal(size=(850, 2)) - 8]
    rng.shuffle(X)
    weights = {}
    for sched in ("count", "first"):
        m = DPStreamClusterer(2, epsilon=1e6, radius=20.0, random_state=1, flush_schedule=sched, flush_growth=0.5,
                              flush_min_blocks=0.0, first_epoch_blocks=1e6, block_size=10**6)
        for x in np.array_split(X, 17):
            m.partial_fit(x)
        assert m.release_.plan.horizon_ticks == 1024 and m.release_.epoch == 0
        weights[sched] = m.release_.coreset_weights.sum()
    assert 1600 / 1.5 * 0.95 <= weights["count"] <= 1.05 * 1700
    assert weights["first"] <= 1.2 * 100


def _shares(cfg):
    """An upper bound on Σ over the blocks a run can release of their shares of β: at most T·I blocks
    (one per ring per tick), at most T per (epoch, ring), E_max epochs. Each share is u + h_j, u the
    part every block gets alike (half of β over the T·I blocks): Σ ≤ T·I·u + E·I·Σ_{j<T} h_j."""
    A = make_semicoreset(cfg, PrivacyPlan.build(cfg), None)
    T, I = cfg.horizon_ticks, cfg.n_rings
    E = rules.max_epochs(T) if cfg.epoch_schedule == "horizon" else T
    shares = np.array([1.0 / A.run_wide_blocks(("A", 0, 0, j)) for j in range(T)])
    u = 0.5 / (T * I)
    assert np.all(shares >= u - 1e-15) and np.all(np.diff(shares) <= 1e-15)  # later blocks: smaller shares
    return T * I * u + E * I * float(np.sum(shares - u)), A


@pytest.mark.parametrize("T", [1, 10, 1024])
@pytest.mark.parametrize("schedule", ["horizon", "doubling"])
def test_the_block_root_tail_is_a_union_bound_over_the_run(T, schedule):
    cfg = _cfg(root_tail="block", horizon_ticks=T, epoch_schedule=schedule, bicriteria=schedule == "doubling",
               flush_schedule="count" if schedule == "horizon" else "first")
    total, A = _shares(cfg)
    assert total <= 1.0 + 1e-9
    # the horizon's bound spreads the same β over the T·I blocks of the run alike (one per ring per tick)
    hz = _cfg(horizon_ticks=T, root_tail="horizon")
    base_T = make_semicoreset(hz, PrivacyPlan.build(hz), None)
    assert math.isclose(T * cfg.n_rings / base_T.run_wide_blocks(("A", 0, 0, 0)), 1.0)
    # a ring's first block pays less than under the horizon's bound once T is large; late ones at most 2×
    if T == 1024 and schedule == "horizon":
        assert A.count_tail(11, key=("A", 0, 0, 0)) < base_T.count_tail(11, key=("A", 0, 0, 0))
        assert A.run_wide_blocks(("A", 3, 2, 500)) <= 2 * base_T.run_wide_blocks(("A", 3, 2, 500))
        # without a block key (the block-size rule's unit) the horizon's bound stands
        assert A.count_tail(11) == base_T.count_tail(11)


@pytest.mark.parametrize("semicoreset", ["tree", "lloyd", "snap"])
def test_an_empty_stream_releases_no_phantom_mass_with_the_block_root_tail(semicoreset):
    cfg = _cfg(semicoreset=semicoreset, root_tail="block", horizon_ticks=48, block_size=100, first_epoch_blocks=None)
    e = Engine(cfg, SEED)
    total = [int(e.step(np.zeros((0, 2))).coreset_weights.sum()) for _ in range(48)]
    assert e.mr.fires >= 1
    assert max(total) <= 3 * e.plan.a_count_scale


def test_the_covered_decay_keeps_old_clusters_that_stopped_arriving():
    """release_decay_rule="covered": an old epoch's points far from every newer epoch's point keep
    their whole weight in the release fit (a cluster that stopped arriving is not faded out); those the
    newer epochs cover decay by age as with the default rule. A function of the released sets alone."""
    from dpstream.semicoresets import WeightedSet
    rng = np.random.default_rng(0)
    old = WeightedSet(np.r_[rng.normal(size=(50, 2)), rng.normal(size=(50, 2)) + 30], np.ones(100), np.zeros(100, int))
    new = WeightedSet(rng.normal(size=(80, 2)), np.ones(80), np.zeros(80, int))
    factor = np.r_[np.full(100, 0.5), np.ones(80)]
    out = epochs_mod._uncovered_kept([old, new], factor, 6.0)
    assert np.all(out[:50] == 0.5) and np.all(out[50:100] == 1.0) and np.all(out[100:] == 1.0)
    with pytest.raises(ValueError, match="release_decay_rule"):
        _cfg(release_decay_rule="nearby")


def test_the_first_flush_rule():
    # before any flush, the first tick whose DP count reaches first_count; then the schedule's own rule
    assert not rules.flush_tick(1, 0, "first", 40.0, first_count=64.0)
    assert not rules.flush_tick(3, 0, "first", 63.9, first_count=64.0)
    assert rules.flush_tick(3, 0, "first", 64.0, first_count=64.0)
    assert not rules.flush_tick(5, 3, "first", 500.0, first_count=64.0)  # "first": no flush after the first
    assert rules.flush_tick(4, 0, "dyadic", 70.0, first_count=64.0) and not rules.flush_tick(4, 0, "dyadic", 10.0,
                                                                                             first_count=64.0)
    assert rules.flush_tick(1, 0, "first", None, first_count=64.0)  # no DP count: tick 1, as before the rule
    assert rules.flush_tick(1, 0, "first", -5.0) and rules.flush_tick(1, 0, "first", -5.0, first_count=0.0)
    with pytest.raises(ValueError, match="first_flush_leaves"):
        _cfg(first_flush_leaves=-1.0)


def _small_ticks(seed=11, n=100, ticks=8):
    """Ticks of ``n`` points from three separated clusters in d = 3, fewer than A's keep threshold at ε = 1."""
    rng = np.random.default_rng(seed)
    means = rng.normal(size=(3, 3)) * 5.0
    return [means[rng.integers(3, size=n)] + rng.normal(size=(n, 3)) for _ in range(ticks)]


@pytest.mark.parametrize("broken", [None, "exact_count"])
def test_a_first_block_that_cannot_fill_a_leaf_waits_for_the_dp_count(monkeypatch, broken):
    """Ticks of 100 points at ε = 1, A's keep threshold θ_k ≈ 64 points, spread over the ball's rings: flushed
    at tick 1 (``first_flush_leaves=0``, the former rule) the block releases no leaf, and its points, which
    have had their one A call, are in no later release. With the default the first flush is the first tick
    whose DP count estimate (the run's stream counter, recomputed apart from the engine) reaches θ_k, and
    that release holds mass; every point still enters exactly one A call. The broken engine gives the
    schedule the exact running count (an exact count deciding a release time): the replay catches it."""
    if broken == "exact_count":
        monkeypatch.setattr(RunSetup, "count_counter", lambda self: _ExactCounter())
    kw = dict(n_clusters=3, dim=3, radius=16.0, flush_schedule="first", first_epoch_blocks=1e6)
    ticks = _small_ticks()
    cfg = _cfg(**kw)
    theta = RunSetup(cfg, SEED).A.leaf_threshold()
    assert 30 < theta < 100  # the tick holds more points than one leaf needs, fewer than its rings can fill
    _, log = _run(cfg, ticks, monkeypatch)
    counts = _dp_counts(cfg, ticks)
    want = [t for t, c in enumerate(counts, 1) if c >= theta][:1]
    got = [t for t, _, _, fl in log if fl]
    assert (got == want and [c for _, c, _, _ in log] == counts) == (broken is None)
    if broken:
        return
    assert want[0] > 1
    old = Engine(_cfg(first_flush_leaves=0.0, **kw), SEED)
    new = Engine(cfg, SEED)
    new.A.record_calls = old.A.record_calls = True
    n = 0
    for t, x in enumerate(ticks, 1):
        r_old, r_new = old.step(x), new.step(x)
        n += len(x)
        for eng in (old, new):
            keys = [k for k, _ in eng.A.calls]
            assert len(keys) == len(set(keys)) and sum(m for _, m in eng.A.calls) + eng.mr.buffered() == n
        if t == 1:
            assert old.last_flush == 1 and r_old.coreset_weights.sum() == 0  # tick 1's points: lost
            assert new.last_flush == 0
        if t == want[0]:
            assert new.last_flush == t and r_new.coreset_weights.sum() > 0 and old.last_flush == 1
