"""The public flush ticks: a release reflects what arrived, even when the horizon is far off.

With ``flush_schedule="dyadic"`` every ring releases its pending block through A at
a power of two t whenever nothing flushed since tick t/2 (epoch changes flush too). What must hold:

* the schedule is a function of the tick index and the last flush tick, i.e. of public ticks and
  the epoch changes (DP counts) — a data-dependent flush ("flush when a ring's block is full") would
  reveal exact counts through the release times; the audit below replays the rule over two very
  different streams under one seed, and catches a broken engine that flushes on its exact buffer;
* after a flush tick every point that arrived has entered exactly one A call (participation: one
  block per point, the plan's "at most one semicoreset call");
* the privacy plan — scales, participation, totals — is the same as with ``"first"`` (tick 1
  only): a flush only closes blocks early, at most once per ring per tick, which the plan's
  run-wide bound already counts.
"""
from __future__ import annotations

import numpy as np
import pytest

import dpstream.engine as engine_mod
import dpstream.merge_reduce as mr_mod
from dpstream import DPStreamClusterer, Engine, EngineConfig
from dpstream import rules
from dpstream.privacy import PrivacyPlan

from streams import record_ring_releases, three_blob_ticks  # tests/streams.py

pytestmark = pytest.mark.filterwarnings("ignore::dpstream.noise.UnsafeSeedWarning")

SEED = bytes(range(32))
N_TICKS = 20


def _cfg(**kw):
    # first_flush_leaves=0: tick 1 is the first flush, so every flush tick is a function of the tick index and
    # the epoch changes (the first flush that waits for a DP count: tests/test_first_releases.py)
    base = dict(n_clusters=3, dim=2, radius=20.0, epsilon=1.0, delta=1e-6, horizon_ticks=1024, flush_schedule="dyadic",
                first_flush_leaves=0.0)
    base.update(kw)
    return EngineConfig(**base)


def _run(cfg, ticks, monkeypatch):
    """(engine, [(tick, epoch before, epoch after, rings flushed)], A's calls)."""
    flushed = []
    orig = mr_mod.EpochMergeReduce.flush

    def flush(self, tick, *a):
        flushed.append(tick)
        return orig(self, tick, *a)

    monkeypatch.setattr(mr_mod.EpochMergeReduce, "flush", flush)
    e = Engine(cfg, SEED)
    e.A.record_calls = True
    log = []
    for x in ticks:
        before = e.epoch
        e.step(x)
        log.append((e.t, before, e.epoch, e.t in flushed))
    return e, log


def _replay(log, schedule="dyadic"):
    """The ticks the rule flushes at, from the tick index and the epoch changes alone."""
    out, last = [], 0
    for t, before, after, _ in log:
        if after != before or rules.flush_tick(t, last, schedule):
            out.append(t)
            last = t
    return out


def test_the_flush_ticks():
    # nothing else flushing: every power of four (tick 2 is covered by tick 1, 8 by 4, …)
    log = [(t, 0, 0, False) for t in range(1, 1025)]
    assert _replay(log) == [4 ** j for j in range(6)]
    assert _replay(log, "first") == [1]
    # an epoch change at tick 5 covers tick 8 (5 ≥ 8/2), not tick 16
    log[4] = (5, 0, 1, True)
    assert _replay(log)[:6] == [1, 4, 5, 16, 64, 256]
    with pytest.raises(ValueError, match="flush_schedule"):
        _cfg(flush_schedule="often")


@pytest.mark.parametrize("broken", [False, True])
def test_the_flush_schedule_is_data_independent(monkeypatch, broken):
    """Two streams with nothing in common but the seed: the flush ticks are those the rule gives from
    the tick index and the epoch changes alone. The broken engine flushes whenever the exact buffer
    passes a size (the natural 'flush when full'): the check catches it."""
    if broken:
        orig_step = engine_mod.Engine.step

        def step(self, points, *a, **kw):
            rel = orig_step(self, points, *a, **kw)
            if self.mr is not None and self.mr.buffered() >= 150:  # an exact count decides a release time
                self.mr.flush(self.t)
            return rel

        monkeypatch.setattr(engine_mod.Engine, "step", step)
    cfg = _cfg()
    dense = three_blob_ticks(1, [100] * N_TICKS)
    sparse_ = three_blob_ticks(2, [0, 3, 0, 70, 5, 0, 0, 200, 1, 0, 0, 0, 90, 0, 0, 4, 0, 0, 0, 0])
    logs = [_run(cfg, s, monkeypatch)[1] for s in (dense, sparse_)]
    ok = all([t for t, _, _, fl in log if fl] == _replay(log) for log in logs)
    assert ok == (not broken)
    if not broken:  # the flush ticks beyond the epoch changes do occur in these runs
        assert any(set(_replay(log)) - {t for t, b, a, _ in log if a != b} - {1} for log in logs)


def test_after_each_flush_tick_every_point_so_far_entered_exactly_one_a_call(monkeypatch):
    cfg = _cfg()
    ticks = three_blob_ticks(3, [60 + 7 * t for t in range(N_TICKS)])
    flushed = []
    orig = mr_mod.EpochMergeReduce.flush
    monkeypatch.setattr(mr_mod.EpochMergeReduce, "flush", lambda self, t, *a: (flushed.append(t), orig(self, t, *a))[1])
    e = Engine(cfg, SEED)
    e.A.record_calls = True
    seen = 0
    for t, x in enumerate(ticks, start=1):
        e.step(x)
        seen += len(x)
        if t in flushed:
            assert e.mr.buffered() == 0, f"points of ticks ≤ {t} still wait for A"
            # each point in exactly one block: the A calls so far hold exactly the points so far
            assert sum(n for _, n in e.A.calls) == seen
            keys = [k for k, _ in e.A.calls]
            assert len(keys) == len(set(keys)), "a block was released twice"
    # between flush ticks nothing is lost: the open blocks hold the rest
    assert sum(n for _, n in e.A.calls) + e.mr.buffered() == seen
    assert len(flushed) >= 3


def test_a_short_stream_under_the_default_horizon_releases_what_arrived():
    """partial_fit's default horizon (1,024 ticks) and a stream of 17 ticks too short for the DP count
    to open a second epoch or to fill a block (as a small data set's is): the last release's DP weight
    reflects the first 16 ticks (ε large: their whole mass); flushing at tick 1 only, tick 1's alone."""
    rng = np.random.default_rng(0)
    X = np.r_[rng.normal(size=(850, 2)) + 8, rng.normal(size=(850, 2)) - 8]
    rng.shuffle(X)
    weights = {}
    for sched in ("dyadic", "first"):
        m = DPStreamClusterer(2, epsilon=1e6, radius=20.0, random_state=1, flush_schedule=sched,
                              first_epoch_blocks=1e6, block_size=10**6)
        for x in np.array_split(X, 17):
            m.partial_fit(x)
        assert m.release_.plan.horizon_ticks == 1024 and m.release_.epoch == 0
        weights[sched] = m.release_.coreset_weights.sum()
    assert 0.8 * 1600 <= weights["dyadic"] <= 1.2 * 1600
    assert weights["first"] <= 1.2 * 100


def test_the_plan_does_not_depend_on_the_flush_schedule():
    """Ledger: the same lines, scales, participation and totals for both schedules (a flush releases a
    ring's block at most once per tick; the plan's run-wide weight threshold already counts one
    release per ring per tick)."""
    for kw in (dict(), dict(dim=64, n_clusters=10, radius=64.0), dict(semicoreset="lloyd")):
        a = PrivacyPlan.build(_cfg(**kw)).to_dict()
        b = PrivacyPlan.build(_cfg(flush_schedule="first", **kw)).to_dict()
        assert a == b


def test_a_ring_releases_at_most_once_per_tick_with_the_flush_ticks(monkeypatch):
    """A ring that fires at a flush tick is not flushed again (its new block is empty): A's count
    threshold is calibrated for at most one release per ring per tick."""
    cfg = _cfg(block_size=150)
    seen = record_ring_releases(monkeypatch)
    e = Engine(cfg, SEED)
    for x in three_blob_ticks(4, [100] * N_TICKS):
        e.step(x)
    assert len(seen) == len(set(seen))
    assert len({t for t, _, _ in seen}) > 5  # fires and flushes both happened
